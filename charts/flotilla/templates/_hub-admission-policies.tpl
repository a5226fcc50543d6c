{{- define "flotilla.hub.admissionPolicies" }}
{{- /*
Admission policies for what RBAC cannot say (Kubernetes 1.30+: ValidatingAdmissionPolicy).
- The negotiator may create and patch CustomResourceDefinitions (to publish negotiated types),
  but only those it publishes: labelled flotilla.dev/published, outside Flotilla's own group,
  without a conversion webhook. Without this it could patch any CRD of the hub, Flotilla's own
  included (e.g. add a conversion webhook to works.flotilla.dev).
  It may create ConfigMaps (RBAC cannot restrict create by name), but only its list of the types
  a pull member imports: flotilla-import-types, in a flotilla-cluster-* namespace.
- A pull-mode agent may patch the Works of its namespace only to add or remove the syncer's
  finalizer.
- A bootstrap identity may only create its own Cluster, in pull mode and not accepted.
  (These two are the policies of deploy/bootstrap, for this release's namespace.)
- Registration may write namespaces and RBAC (RBAC cannot restrict create by name), but only
  flotilla-cluster-* namespaces and the agents' own bindings and roles there; and it may approve
  only certificate requests that pull-mode agents or their bootstrap identities made. Without this
  its token could bind itself cluster-admin or approve a certificate for any group.
- The splitter may create Pods only as a dry run (the hub's Pod Security admission judges each
  placed pod template that way), and write and delete Secrets only to hold the data of the
  Secrets its Works place (type flotilla.dev/work-data, in flotilla-cluster-* namespaces; it
  deletes one left without its Work once its Placement is gone); and ReplicaSets and
  ControllerRevisions only as the hub's history records of placed workloads (labelled
  flotilla.dev/record, controlled by their workload); RBAC can say none of it.
- The negotiator may write only status.resources of a Cluster: its conditions, version,
  capacity and heartbeat decide where work goes, and are registration's and the agents'.
*/ -}}
{{- if .Values.admissionPolicies.enabled }}
{{- $prefix := printf "flotilla-%s" .Release.Name }}
{{- if .Values.negotiator.enabled }}
{{- $negotiator := printf "system:serviceaccount:%s:%s" .Release.Namespace (include "flotilla.name" (dict "root" $ "controller" "negotiator")) }}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{ $prefix }}-negotiator-crds
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
    app.kubernetes.io/component: negotiator
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: ["apiextensions.k8s.io"]
        apiVersions: ["*"]
        operations: ["CREATE", "UPDATE"]
        resources: ["customresourcedefinitions"]
  matchConditions:
    - name: negotiator-identity
      expression: request.userInfo.username == {{ $negotiator | quote }}
  validations:
    - expression: >-
        has(object.metadata.labels) && 'flotilla.dev/published' in object.metadata.labels &&
        object.metadata.labels['flotilla.dev/published'] == 'true'
      message: the negotiator may only write the CRDs it publishes (labelled flotilla.dev/published)
      reason: Forbidden
    - expression: >-
        request.operation != 'UPDATE' ||
        (has(oldObject.metadata.labels) && 'flotilla.dev/published' in oldObject.metadata.labels &&
         oldObject.metadata.labels['flotilla.dev/published'] == 'true')
      message: the negotiator may not take over a CRD it did not publish
      reason: Forbidden
    - expression: "object.spec.group != 'flotilla.dev'"
      message: the negotiator may not write Flotilla's own CRDs
      reason: Forbidden
    - expression: >-
        !has(object.spec.conversion) || !has(object.spec.conversion.strategy) ||
        object.spec.conversion.strategy == 'None'
      message: the negotiator may not give a CRD a conversion webhook
      reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ $prefix }}-negotiator-crds
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
    app.kubernetes.io/component: negotiator
spec:
  policyName: {{ $prefix }}-negotiator-crds
  validationActions: ["Deny"]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{ $prefix }}-negotiator-configmaps
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
    app.kubernetes.io/component: negotiator
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: ["*"]
        operations: ["CREATE", "UPDATE", "DELETE"]
        resources: ["configmaps"]
  matchConditions:
    - name: negotiator-identity
      expression: request.userInfo.username == {{ $negotiator | quote }}
  validations:
    - expression: >-
        request.namespace.startsWith('flotilla-cluster-') &&
        request.name == 'flotilla-import-types'
      messageExpression: >-
        'the negotiator may only write the ConfigMap flotilla-import-types of the ' +
        'flotilla-cluster-* namespaces, not ' + request.namespace + '/' + request.name
      reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{ $prefix }}-negotiator-clusters
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
    app.kubernetes.io/component: negotiator
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: ["flotilla.dev"]
        apiVersions: ["*"]
        operations: ["UPDATE"]
        resources: ["clusters/status"]
  matchConditions:
    - name: negotiator-identity
      expression: request.userInfo.username == {{ $negotiator | quote }}
  validations:
    # Every field of ClusterStatus but resources (a unit test keeps this list whole): those
    # decide where work goes, and are registration's and the agents'.
    - expression: >-
        object.?status.?conditions == oldObject.?status.?conditions &&
        object.?status.?kubernetesVersion == oldObject.?status.?kubernetesVersion &&
        object.?status.?allocatable == oldObject.?status.?allocatable &&
        object.?status.?lastHeartbeatTime == oldObject.?status.?lastHeartbeatTime &&
        object.?status.?clusterId == oldObject.?status.?clusterId
      message: >-
        the negotiator may only write status.resources of a Cluster (its compatibility summary),
        not its conditions, version, capacity, heartbeat or ID
      reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ $prefix }}-negotiator-clusters
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
    app.kubernetes.io/component: negotiator
spec:
  policyName: {{ $prefix }}-negotiator-clusters
  validationActions: ["Deny"]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ $prefix }}-negotiator-configmaps
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
    app.kubernetes.io/component: negotiator
spec:
  policyName: {{ $prefix }}-negotiator-configmaps
  validationActions: ["Deny"]
{{- end }}
{{- if .Values.registration.enabled }}
{{- $bootstrap := printf "system:serviceaccount:%s:flotilla-bootstrap-" .Release.Namespace }}
{{- $registration := printf "system:serviceaccount:%s:%s" .Release.Namespace (include "flotilla.name" (dict "root" $ "controller" "registration")) }}
{{- $agentRole := include "flotilla.clusterRoleName" (dict "root" $ "controller" "agent") }}
{{- $syncerDataRole := include "flotilla.clusterRoleName" (dict "root" $ "controller" "syncer-work-data") }}
{{- $syncer := include "flotilla.name" (dict "root" $ "controller" "syncer") }}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{ $prefix }}-registration
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
    app.kubernetes.io/component: registration
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: ["*"]
        operations: ["CREATE", "UPDATE", "DELETE"]
        resources: ["namespaces"]
      - apiGroups: ["rbac.authorization.k8s.io"]
        apiVersions: ["*"]
        operations: ["CREATE", "UPDATE", "DELETE"]
        resources: ["roles", "rolebindings", "clusterroles", "clusterrolebindings"]
      - apiGroups: ["certificates.k8s.io"]
        apiVersions: ["*"]
        operations: ["UPDATE"]
        resources: ["certificatesigningrequests/approval"]
  matchConditions:
    - name: registration-identity
      expression: request.userInfo.username == {{ $registration | quote }}
  variables:
    - name: resource
      expression: request.resource.resource
    - name: writes
      expression: request.operation != 'DELETE'
    # The syncer's binding of its ClusterRole for the data of placed Secrets names exactly this
    # release's syncer.
    - name: syncerBinding
      expression: >-
        variables.writes && variables.resource == 'rolebindings' &&
        object.roleRef.kind == 'ClusterRole' && object.roleRef.name == {{ $syncerDataRole | quote }}
    - name: syncerSubjects
      expression: >-
        has(object.subjects) && size(object.subjects) == 1 &&
        object.subjects[0].kind == 'ServiceAccount' && has(object.subjects[0].namespace) &&
        object.subjects[0].namespace == {{ $.Release.Namespace | quote }} &&
        object.subjects[0].name == {{ $syncer | quote }}
    # The agents' bindings name the group of their Cluster's UID; an agent's ClusterRoleBinding
    # may name its Cluster's bootstrap ServiceAccount too (until that got its certificate).
    - name: agentSubjects
      expression: >-
        !variables.writes || variables.resource in ['namespaces', 'roles', 'clusterroles'] ||
        variables.resource == 'certificatesigningrequests' ||
        (variables.syncerBinding && variables.syncerSubjects) ||
        (has(object.subjects) && size(object.subjects) >= 1 &&
         object.subjects.all(s,
           (s.kind == 'Group' && s.name.startsWith('system:flotilla:cluster-uid:')) ||
           (variables.resource == 'clusterrolebindings' && s.kind == 'ServiceAccount' &&
            has(s.namespace) && s.namespace == 'flotilla-system' &&
            s.name.startsWith('flotilla-bootstrap-') &&
            object.metadata.name == 'flotilla:cluster:' + s.name.substring(19) + ':agent')))
  validations:
    - expression: >-
        variables.resource != 'namespaces' || request.name.startsWith('flotilla-cluster-')
      messageExpression: >-
        'registration may only write the flotilla-cluster-* namespaces, not ' + request.name
      reason: Forbidden
    - expression: >-
        !(variables.resource in ['roles', 'rolebindings']) ||
        request.namespace.startsWith('flotilla-cluster-')
      messageExpression: >-
        'registration may only write RBAC in the flotilla-cluster-* namespaces, not in ' +
        request.namespace
      reason: Forbidden
    - expression: "variables.resource != 'roles' || !variables.writes"
      message: registration may only delete the Roles that earlier versions made for agents
      reason: Forbidden
    - expression: >-
        variables.resource != 'rolebindings' || !variables.writes ||
        (object.roleRef.kind == 'ClusterRole' && object.roleRef.name == {{ $agentRole | quote }}) ||
        variables.syncerBinding
      message: >-
        registration may only bind the agent ClusterRole {{ $agentRole }} and the syncer's
        {{ $syncerDataRole }} in a member's namespace
      reason: Forbidden
    - expression: >-
        !(variables.resource in ['clusterroles', 'clusterrolebindings']) ||
        request.name.matches('^flotilla:cluster:[a-z0-9]([-a-z0-9]*[a-z0-9])?:agent$')
      messageExpression: >-
        'registration may only write the ClusterRoles and bindings of agents ' +
        '(flotilla:cluster:<name>:agent), not ' + request.name
      reason: Forbidden
    - expression: >-
        variables.resource != 'clusterrolebindings' || !variables.writes ||
        (object.roleRef.kind == 'ClusterRole' && object.roleRef.name == object.metadata.name)
      message: an agent's ClusterRoleBinding may only bind the agent's own ClusterRole
      reason: Forbidden
    - expression: variables.agentSubjects
      message: >-
        an agent's binding may only name the group of its Cluster's UID
        (system:flotilla:cluster-uid:<uid>), and its Cluster's bootstrap ServiceAccount; the
        syncer's binding only the ServiceAccount {{ $.Release.Namespace }}/{{ $syncer }}
      reason: Forbidden
    - expression: >-
        variables.resource != 'clusterroles' || !variables.writes ||
        (!has(object.aggregationRule) && has(object.rules) &&
         object.rules.all(r, has(r.resourceNames) && size(r.resourceNames) == 1 &&
           ((r.apiGroups == ['flotilla.dev'] &&
             r.resources.all(x, x in ['clusters', 'clusters/status']) &&
             object.metadata.name == 'flotilla:cluster:' + r.resourceNames[0] + ':agent') ||
            (r.apiGroups == [''] && r.resources == ['namespaces'] && r.verbs == ['get'] &&
             object.metadata.name == 'flotilla:cluster:' +
               r.resourceNames[0].replace('flotilla-cluster-', '', 1) + ':agent' &&
             r.resourceNames[0].startsWith('flotilla-cluster-')))))
      message: >-
        an agent's ClusterRole may only grant its own Cluster and read its own namespace (by
        name)
      reason: Forbidden
    - expression: >-
        variables.resource != 'certificatesigningrequests' ||
        (object.spec.signerName == 'kubernetes.io/kube-apiserver-client' &&
         has(object.spec.username) &&
         ((object.spec.username.startsWith('system:flotilla:cluster:') &&
           object.spec.username.endsWith(':agent')) ||
          object.spec.username.startsWith('system:serviceaccount:flotilla-system:flotilla-bootstrap-')))
      messageExpression: >-
        'registration may only decide certificate requests of pull-mode agents and their ' +
        'bootstrap identities, not one requested by ' +
        (has(object.spec.username) ? object.spec.username : 'nobody')
      reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ $prefix }}-registration
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
    app.kubernetes.io/component: registration
spec:
  policyName: {{ $prefix }}-registration
  validationActions: ["Deny"]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{ $prefix }}-bootstrap-clusters
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
    app.kubernetes.io/component: registration
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: ["flotilla.dev"]
        apiVersions: ["*"]
        operations: ["CREATE", "UPDATE", "DELETE"]
        resources: ["clusters", "clusters/status"]
  matchConditions:
    - name: bootstrap-identity
      expression: request.userInfo.username.startsWith({{ $bootstrap | quote }})
  variables:
    - name: subresource
      expression: "has(request.subResource) ? request.subResource : ''"
  validations:
    - expression: "request.operation == 'CREATE' && variables.subresource == ''"
      messageExpression: >-
        'a bootstrap identity may only create its Cluster, not ' + request.operation +
        (variables.subresource == '' ? '' : ' its ' + variables.subresource) + ' it'
      reason: Forbidden
    - expression: >-
        request.operation != 'CREATE' ||
        request.userInfo.username == {{ $bootstrap | quote }} + object.metadata.name
      messageExpression: >-
        request.userInfo.username + ' may only create the Cluster ' +
        request.userInfo.username.substring({{ len $bootstrap }}) + ', not ' + object.metadata.name
      reason: Forbidden
    - expression: >-
        request.operation != 'CREATE' ||
        (has(object.spec.syncMode) && object.spec.syncMode == 'Pull')
      message: a bootstrap identity may only create a Cluster with spec.syncMode Pull
      reason: Forbidden
    - expression: >-
        request.operation != 'CREATE' ||
        !has(object.spec.hubAcceptsClient) || object.spec.hubAcceptsClient == false
      message: >-
        a bootstrap identity may not accept its own Cluster: spec.hubAcceptsClient is set by the
        hub admin
      reason: Forbidden
    - expression: >-
        request.operation != 'CREATE' ||
        ((!has(object.metadata.labels) || size(object.metadata.labels) == 0) &&
         (!has(object.spec.taints) || size(object.spec.taints) == 0) &&
         (!has(object.spec.weight) || object.spec.weight == 1) &&
         (!has(object.spec.allowInsecureTransport) || !object.spec.allowInsecureTransport))
      message: >-
        a bootstrap identity may not label, taint or weigh its Cluster, nor allow insecure
        transport: those decide which work it gets once accepted, and are the hub admin's
      reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ $prefix }}-bootstrap-clusters
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
    app.kubernetes.io/component: registration
spec:
  policyName: {{ $prefix }}-bootstrap-clusters
  validationActions: ["Deny"]
{{- end }}
{{- if .Values.splitter.enabled }}
{{- $splitter := printf "system:serviceaccount:%s:%s" .Release.Namespace (include "flotilla.name" (dict "root" $ "controller" "splitter")) }}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{ $prefix }}-splitter
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
    app.kubernetes.io/component: splitter
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: ["*"]
        operations: ["CREATE"]
        resources: ["pods"]
      - apiGroups: [""]
        apiVersions: ["*"]
        operations: ["CREATE", "UPDATE", "DELETE"]
        resources: ["secrets"]
      - apiGroups: ["apps"]
        apiVersions: ["*"]
        operations: ["CREATE", "UPDATE", "DELETE"]
        resources: ["replicasets", "controllerrevisions"]
  matchConditions:
    - name: splitter-identity
      expression: request.userInfo.username == {{ $splitter | quote }}
  variables:
    # What the request writes or, for a DELETE, deletes.
    - name: target
      expression: "request.operation == 'DELETE' ? oldObject : object"
    - name: record
      expression: >-
        variables.target != null && has(variables.target.metadata.labels) &&
        'flotilla.dev/record' in variables.target.metadata.labels &&
        has(variables.target.metadata.ownerReferences) &&
        variables.target.metadata.ownerReferences.exists(o,
          has(o.controller) && o.controller &&
          o.kind in ['Deployment', 'StatefulSet', 'DaemonSet'])
  validations:
    - expression: >-
        !(request.resource.resource in ['replicasets', 'controllerrevisions']) ||
        (variables.record &&
         (request.operation != 'UPDATE' || 'flotilla.dev/record' in oldObject.metadata.?labels.orValue({})))
      messageExpression: >-
        'the splitter may only write and delete the hub history records of placed workloads ' +
        '(labelled flotilla.dev/record, controlled by their Deployment, StatefulSet or ' +
        'DaemonSet), not ' + request.resource.resource + ' ' + request.namespace + '/' + request.name
      reason: Forbidden
    - expression: "request.resource.resource != 'pods' || request.dryRun == true"
      message: the splitter may create Pods only as a dry run (to ask Pod Security admission)
      reason: Forbidden
    # A DELETE has no object, only the oldObject it deletes.
    - expression: >-
        request.resource.resource != 'secrets' ||
        (request.namespace.startsWith('flotilla-cluster-') &&
         (request.operation == 'DELETE' ?
           (oldObject != null && has(oldObject.type) && oldObject.type == 'flotilla.dev/work-data') :
           (has(object.type) && object.type == 'flotilla.dev/work-data')))
      messageExpression: >-
        'the splitter may only write and delete the data Secrets of Works (type ' +
        'flotilla.dev/work-data, in the flotilla-cluster-* namespaces), not a Secret in ' +
        request.namespace
      reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ $prefix }}-splitter
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
    app.kubernetes.io/component: splitter
spec:
  policyName: {{ $prefix }}-splitter
  validationActions: ["Deny"]
{{- end }}
{{- if .Values.syncer.enabled }}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{ $prefix }}-agent-works
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
    app.kubernetes.io/component: syncer
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: ["flotilla.dev"]
        apiVersions: ["*"]
        operations: ["UPDATE"]
        resources: ["works"]
  matchConditions:
    - name: agent-identity
      expression: >-
        request.userInfo.username.startsWith('system:flotilla:cluster:') &&
        request.userInfo.username.endsWith(':agent')
  variables:
    - name: oldMeta
      expression: oldObject.metadata
    - name: newMeta
      expression: object.metadata
    - name: finalizersBesidesSyncer
      expression: >-
        [has(variables.oldMeta.finalizers) ? variables.oldMeta.finalizers : [],
         has(variables.newMeta.finalizers) ? variables.newMeta.finalizers : []]
        .map(l, l.filter(f, f != 'flotilla.dev/syncer'))
  validations:
    - expression: "object.spec == oldObject.spec"
      message: an agent may not change the spec of a Work
      reason: Forbidden
    - expression: >-
        (has(variables.newMeta.labels) ? variables.newMeta.labels : {}) ==
        (has(variables.oldMeta.labels) ? variables.oldMeta.labels : {}) &&
        (has(variables.newMeta.annotations) ? variables.newMeta.annotations : {}) ==
        (has(variables.oldMeta.annotations) ? variables.oldMeta.annotations : {}) &&
        (has(variables.newMeta.ownerReferences) ? variables.newMeta.ownerReferences : []) ==
        (has(variables.oldMeta.ownerReferences) ? variables.oldMeta.ownerReferences : [])
      message: an agent may not change the labels, annotations or owners of a Work
      reason: Forbidden
    - expression: "variables.finalizersBesidesSyncer[0] == variables.finalizersBesidesSyncer[1]"
      message: an agent may add or remove only the finalizer flotilla.dev/syncer of a Work
      reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ $prefix }}-agent-works
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
    app.kubernetes.io/component: syncer
spec:
  policyName: {{ $prefix }}-agent-works
  validationActions: ["Deny"]
{{- end }}
{{- end }}
{{- end }}
