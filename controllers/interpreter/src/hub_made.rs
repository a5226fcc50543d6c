//! Pure: what the hub's own Kubernetes made, which never travels to a member.
//!
//! Three things are the hub's and no one else's:
//! - objects Kubernetes itself creates in every namespace of every cluster: the root CA bundle
//!   `kube-root-ca.crt`, the `default` ServiceAccount and service-account token Secrets. Every
//!   member has (or makes) its own, with its own CA and its own signing key; the hub's copy would
//!   replace what pods in the member trust. Likewise the cluster-scoped objects every cluster
//!   makes for itself (its system namespaces, the default RBAC roles, priority classes and API
//!   priority and fairness objects), and those that describe the hub itself: Flotilla's own
//!   CRDs, per-member namespaces, per-member roles and the hub Secrets that hold the data of the
//!   Secrets Works place, and the records of the Helm releases installed into the hub (Secrets
//!   of type `helm.sh/release.v1`): a member with the hub's record would have `helm` take the
//!   hub's release for one of its own, and upgrade or uninstall the member's objects by it.
//! - values the hub's apiserver allocated from its own ranges when it stored an object: a
//!   Service's cluster IPs (and the IP families that came with them) and node ports. A member
//!   allocates its own from its own ranges; the hub's may lie outside them or collide there.
//!   A value a user set explicitly is the user's intent and is kept, except for cluster IPs,
//!   which are addresses in one cluster's service range and so cannot be right in every member.
//!   Whether a value was set by someone or allocated is read off `metadata.managedFields`: the
//!   apiserver records who set each field, and allocated values belong to no one.
//! - what the hub's apiserver generated from the object's own identity: a Job's selector and the
//!   labels of its pod template that carry the hub Job's UID (unless the Job chose its own
//!   selector with `manualSelector`). A member generates its own from its own copy's UID, and
//!   refuses a copy that carries the hub's ("`selector` not auto-generated").

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::api::DynamicObject;
use serde_json::{Map, Value};

/// The ConfigMap the hub's root-CA publisher writes into every namespace.
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";
/// The ServiceAccount every namespace has.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";
/// The Secret type the service-account token controller fills with a token of the hub.
pub const SERVICE_ACCOUNT_TOKEN_TYPE: &str = "kubernetes.io/service-account-token";
/// The Secret type in which Helm (3 and later) records a release and each of its revisions.
pub const HELM_RELEASE_TYPE: &str = "helm.sh/release.v1";

/// Whether the hub made `object` (of `api_version`/`kind`), so that it is never placed: Kubernetes
/// itself (see [`made_by_kubernetes`]) or a controller of the hub, which marks what it makes with
/// a controller `ownerReference` to the object it makes it for (a ReplicaSet of a Deployment,
/// the EndpointSlices of a Service, a Secret of a cert-manager Certificate). Where the owner is
/// placed, each member's controllers make their own; the hub's copy would fight them.
pub fn made_by_the_hub(api_version: &str, kind: &str, object: &DynamicObject) -> bool {
    made_by_kubernetes(api_version, kind, object) || has_controller(object)
}

/// Whether `object` names a controller among its owners.
fn has_controller(object: &DynamicObject) -> bool {
    object
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true))
}

/// Whether Kubernetes itself made `object` (of `api_version`/`kind`) in the hub, in every
/// namespace of every cluster, or as part of the hub itself; `false` for every object a user
/// made.
pub fn made_by_kubernetes(api_version: &str, kind: &str, object: &DynamicObject) -> bool {
    let name = object.metadata.name.as_deref().unwrap_or_default();
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    // The RBAC defaults and the other objects the apiserver makes at start-up carry this label.
    let bootstrapped = object
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(BOOTSTRAPPING_LABEL));
    match (group, kind) {
        // The hub's root CA bundle, published in every namespace; each member publishes its own.
        ("", "ConfigMap") => name == ROOT_CA_CONFIGMAP,
        // Every namespace of every cluster has its own.
        ("", "ServiceAccount") => name == DEFAULT_SERVICE_ACCOUNT,
        // A token of a hub ServiceAccount, signed by the hub (members issue their own); the
        // record of a Helm release installed into the hub; the data of the Secrets Works place.
        ("", "Secret") => matches!(
            object.data.get("type").and_then(Value::as_str),
            Some(
                SERVICE_ACCOUNT_TOKEN_TYPE
                    | HELM_RELEASE_TYPE
                    | flotilla_api::work_data::SECRET_TYPE
            )
        ),
        // Every cluster has its own system namespaces; the hub's per-member namespaces hold the
        // members' Works and credentials.
        ("", "Namespace") => {
            SYSTEM_NAMESPACES.contains(&name)
                || name.starts_with(flotilla_api::names::CLUSTER_NAMESPACE_PREFIX)
        }
        // The apiserver's default roles, and the roles registration keeps per member.
        ("rbac.authorization.k8s.io", "ClusterRole" | "ClusterRoleBinding") => {
            bootstrapped || name.starts_with("system:") || name.starts_with("flotilla:")
        }
        // Flotilla's own kinds describe the hub and its members.
        ("apiextensions.k8s.io", "CustomResourceDefinition") => name.ends_with(".flotilla.dev"),
        // `system-cluster-critical` and `system-node-critical`, made by every apiserver.
        ("scheduling.k8s.io", "PriorityClass") => name.starts_with("system-"),
        // The API priority and fairness defaults, kept up to date by every apiserver.
        ("flowcontrol.apiserver.k8s.io", "FlowSchema" | "PriorityLevelConfiguration") => {
            bootstrapped
                || object
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(APF_AUTOUPDATE_ANNOTATION))
        }
        _ => bootstrapped,
    }
}

/// The namespaces every cluster makes for itself.
pub const SYSTEM_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// The label of the objects the apiserver makes at start-up (`rbac-defaults`, …).
pub const BOOTSTRAPPING_LABEL: &str = "kubernetes.io/bootstrapping";

/// The annotation of the API priority and fairness objects the apiserver keeps up to date.
pub const APF_AUTOUPDATE_ANNOTATION: &str = "apf.kubernetes.io/autoupdate-spec";

/// The labels the hub's apiserver gives the pod template of a Job without `manualSelector`
/// (its selector matches the first): the hub Job's UID and name.
pub const JOB_GENERATED_LABELS: [&str; 4] = [
    "batch.kubernetes.io/controller-uid",
    "controller-uid",
    "batch.kubernetes.io/job-name",
    "job-name",
];

/// A Job's generated selector and the generated labels of its pod template (and of the Job
/// itself, should they have been copied there): each member generates its own. And its
/// `ttlSecondsAfterFinished`: a member that deleted its finished copy would never report the
/// completion (and Flotilla would apply the copy again, to run again); the hub's TTL controller
/// deletes the hub Job once the members' copies are all finished, and the copies go with it.
pub(crate) fn strip_job(manifest: &mut Value) {
    let uid = manifest
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map(str::to_string);
    let Some(spec) = manifest.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.remove("ttlSecondsAfterFinished");
    if spec.get("manualSelector").and_then(Value::as_bool) == Some(true) {
        return;
    }
    spec.remove("selector");
    if let Some(labels) = spec
        .get_mut("template")
        .and_then(|t| t.get_mut("metadata"))
        .and_then(|m| m.get_mut("labels"))
        .and_then(Value::as_object_mut)
    {
        for key in JOB_GENERATED_LABELS {
            labels.remove(key);
        }
    }
    // The Job's own labels are the user's, but for a copy of the hub Job's UID.
    if let Some(labels) = manifest
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.retain(|key, value| {
            !(JOB_GENERATED_LABELS[..2].contains(&key.as_str())
                && uid.as_deref().is_some_and(|u| value == u))
        });
    }
}

/// A Service's cluster IPs (and the IP families that came with them), and the node ports the hub
/// allocated: each member allocates its own from its own ranges.
pub(crate) fn strip_service(manifest: &mut Value, managed: &[ManagedFieldsEntry]) {
    let owners = Owners::new(managed);
    let Some(spec) = manifest.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    // Headless (`None`) is a choice, not an address: it stays.
    let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
    if !headless {
        spec.remove("clusterIP");
        spec.remove("clusterIPs");
        // The families came with the hub's addresses unless someone asked for them.
        for field in ["ipFamilies", "ipFamilyPolicy"] {
            if !owners.own(&["f:spec", &format!("f:{field}")]) {
                spec.remove(field);
            }
        }
    }
    if !owners.own(&["f:spec", "f:healthCheckNodePort"]) {
        spec.remove("healthCheckNodePort");
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            if port.contains_key("nodePort") && !owners.own_node_port(port) {
                port.remove("nodePort");
            }
        }
    }
}

/// The annotations the persistent-volume controllers of a cluster set on a claim they bind or
/// provision: which volume, which node, which provisioner. Each member decides its own.
pub const CLAIM_BINDING_ANNOTATIONS: [&str; 5] = [
    "pv.kubernetes.io/bind-completed",
    "pv.kubernetes.io/bound-by-controller",
    "volume.kubernetes.io/selected-node",
    "volume.kubernetes.io/storage-provisioner",
    "volume.beta.kubernetes.io/storage-provisioner",
];

/// A claim's binding: the volume it is bound to (`spec.volumeName`, a volume of one cluster) and
/// the binding controllers' annotations. Each member binds its copy to a volume of its own.
pub(crate) fn strip_claim(manifest: &mut Value) {
    if let Some(spec) = manifest.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("volumeName");
    }
    if let Some(annotations) = manifest
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        for key in CLAIM_BINDING_ANNOTATIONS {
            annotations.remove(key);
        }
        if annotations.is_empty()
            && let Some(meta) = manifest.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.remove("annotations");
        }
    }
}

/// The fields someone set, by `managedFields` (`FieldsV1`, every manager together).
struct Owners<'a> {
    sets: Vec<&'a Value>,
}

impl<'a> Owners<'a> {
    fn new(managed: &'a [ManagedFieldsEntry]) -> Self {
        Self {
            sets: managed
                .iter()
                .filter_map(|m| m.fields_v1.as_ref().map(|f| &f.0))
                .collect(),
        }
    }

    /// Whether some manager owns the field at `path` (`f:` segments).
    fn own(&self, path: &[&str]) -> bool {
        self.sets
            .iter()
            .any(|set| path.iter().try_fold(*set, |v, key| v.get(*key)).is_some())
    }

    /// Whether some manager owns `nodePort` of this entry of `spec.ports`, a list keyed by port
    /// and protocol (`k:{"port":80,"protocol":"TCP"}`).
    fn own_node_port(&self, port: &Map<String, Value>) -> bool {
        let number = port.get("port").and_then(Value::as_i64);
        let protocol = port
            .get("protocol")
            .and_then(Value::as_str)
            .unwrap_or("TCP");
        self.sets.iter().any(|set| {
            let Some(entries) = set.pointer("/f:spec/f:ports").and_then(Value::as_object) else {
                return false;
            };
            entries.iter().any(|(key, fields)| {
                let Some(key) = key
                    .strip_prefix("k:")
                    .and_then(|k| serde_json::from_str::<Value>(k).ok())
                else {
                    return false;
                };
                key.get("port").and_then(Value::as_i64) == number
                    && key.get("protocol").and_then(Value::as_str).unwrap_or("TCP") == protocol
                    && fields.get("f:nodePort").is_some()
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the kind's interpreter leaves of `manifest` (the member's copy of a hub object).
    fn strip_allocated(
        api_version: &str,
        kind: &str,
        manifest: &mut Value,
        managed: &[ManagedFieldsEntry],
    ) {
        crate::interpreter(api_version, kind).prune(manifest, managed);
    }
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1;
    use serde_json::json;

    fn object(value: Value) -> DynamicObject {
        serde_json::from_value(value).expect("object")
    }

    #[test]
    fn what_kubernetes_makes_in_every_namespace_is_never_placed() {
        let made = [
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt"},
                   "data": {"ca.crt": "PEM"}}),
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "web-token",
                   "annotations": {"kubernetes.io/service-account.name": "web"}},
                   "type": "kubernetes.io/service-account-token"}),
        ];
        for o in made {
            let kind = o["kind"].as_str().expect("kind").to_string();
            assert!(made_by_kubernetes("v1", &kind, &object(o.clone())), "{o}");
        }
        let users = [
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}}),
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "web"}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"}, "type": "Opaque"}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "default"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "default"}}),
        ];
        for o in users {
            let kind = o["kind"].as_str().expect("kind").to_string();
            assert!(!made_by_kubernetes("v1", &kind, &object(o.clone())), "{o}");
        }
        // Same names in another group are someone else's.
        let custom = object(json!({"apiVersion": "example.com/v1", "kind": "ConfigMap",
                                   "metadata": {"name": "kube-root-ca.crt"}}));
        assert!(!made_by_kubernetes("example.com/v1", "ConfigMap", &custom));
    }

    #[test]
    fn helm_release_records_and_flotillas_work_data_are_never_placed() {
        let release = object(
            json!({"apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
                                    "metadata": {"name": "sh.helm.release.v1.web.v3",
                                                 "labels": {"owner": "helm", "name": "web", "version": "3"}},
                                    "data": {"release": "H4sI"}}),
        );
        assert!(made_by_kubernetes("v1", "Secret", &release));
        assert!(made_by_the_hub("v1", "Secret", &release));
        let work_data = object(
            json!({"apiVersion": "v1", "kind": "Secret", "type": "flotilla.dev/work-data",
                                      "metadata": {"name": "secret-shop-spread-0123456789-0"}}),
        );
        assert!(made_by_the_hub("v1", "Secret", &work_data));
        // The same name, or Helm's labels, on a Secret of another type: the user's.
        let named_like_it = object(
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                                          "metadata": {"name": "sh.helm.release.v1.web.v3",
                                                       "labels": {"owner": "helm"}}}),
        );
        assert!(!made_by_the_hub("v1", "Secret", &named_like_it));
    }

    #[test]
    fn the_hubs_own_cluster_scoped_objects_are_never_placed() {
        let hubs = [
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "flotilla-cluster-east"}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": "admin", "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": "system:kube-dns"}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": "flotilla:cluster:east:agent"}}),
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                   "metadata": {"name": "works.flotilla.dev"}}),
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                   "metadata": {"name": "system-node-critical"}}),
            json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
                   "metadata": {"name": "catch-all", "annotations": {"apf.kubernetes.io/autoupdate-spec": "true"}}}),
        ];
        for o in hubs {
            let (v, k) = (
                o["apiVersion"].as_str().expect("v"),
                o["kind"].as_str().expect("k"),
            );
            assert!(made_by_kubernetes(v, k, &object(o.clone())), "{o}");
        }
        let users = [
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop",
                   "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "flotilla-system"}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": "shop-reader"}}),
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                   "metadata": {"name": "widgets.example.com"}}),
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                   "metadata": {"name": "batch-low"}}),
        ];
        for o in users {
            let (v, k) = (
                o["apiVersion"].as_str().expect("v"),
                o["kind"].as_str().expect("k"),
            );
            assert!(!made_by_kubernetes(v, k, &object(o.clone())), "{o}");
        }
    }

    #[test]
    fn what_a_hub_controller_made_for_another_object_is_never_placed() {
        let owned = |controller: Option<bool>| {
            object(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "made", "ownerReferences": [{"apiVersion": "example.com/v1",
                    "kind": "Widget", "name": "w", "uid": "u-1", "controller": controller}]}}))
        };
        assert!(made_by_the_hub("v1", "ConfigMap", &owned(Some(true))));
        // An owner that is not its controller only ties the object's life to it.
        assert!(!made_by_the_hub("v1", "ConfigMap", &owned(Some(false))));
        assert!(!made_by_the_hub("v1", "ConfigMap", &owned(None)));
        let root_ca = object(json!({"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": "kube-root-ca.crt"}}));
        assert!(made_by_the_hub("v1", "ConfigMap", &root_ca));
    }

    fn managed(fields: Value) -> Vec<ManagedFieldsEntry> {
        vec![ManagedFieldsEntry {
            manager: Some("kubectl".into()),
            operation: Some("Apply".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fields)),
            ..Default::default()
        }]
    }

    /// A NodePort Service as the hub stores it: addresses, families and ports allocated.
    fn stored_service() -> Value {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"type": "NodePort", "selector": {"app": "web"},
            "clusterIP": "10.96.14.2", "clusterIPs": ["10.96.14.2"],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "externalTrafficPolicy": "Local", "healthCheckNodePort": 31999,
            "ports": [
                {"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080, "nodePort": 30080},
                {"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30053}
            ]}})
    }

    #[test]
    fn allocated_service_values_stay_on_the_hub() {
        let mut m = stored_service();
        // What a user applied: type, selector and ports, no addresses, no node ports.
        let owned = managed(
            json!({"f:spec": {"f:type": {}, "f:selector": {}, "f:externalTrafficPolicy": {},
            "f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:name": {}, "f:port": {}, "f:targetPort": {}},
                        "k:{\"port\":53,\"protocol\":\"UDP\"}": {".": {}, "f:port": {}}}}}),
        );
        strip_allocated("v1", "Service", &mut m, &owned);
        let spec = &m["spec"];
        for gone in [
            "clusterIP",
            "clusterIPs",
            "ipFamilies",
            "ipFamilyPolicy",
            "healthCheckNodePort",
        ] {
            assert!(
                spec.get(gone).is_none(),
                "{gone} must not reach the member: {spec}"
            );
        }
        assert!(spec["ports"][0].get("nodePort").is_none(), "{spec}");
        assert!(spec["ports"][1].get("nodePort").is_none(), "{spec}");
        assert_eq!(spec["ports"][0]["targetPort"], 8080);
        assert_eq!(spec["externalTrafficPolicy"], "Local");
        assert_eq!(spec["type"], "NodePort");
    }

    #[test]
    fn values_a_user_set_are_kept_but_cluster_ips_never() {
        let mut m = stored_service();
        let owned = managed(
            json!({"f:spec": {"f:clusterIP": {}, "f:ipFamilyPolicy": {}, "f:healthCheckNodePort": {},
            "f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {"f:nodePort": {}}}}}),
        );
        strip_allocated("v1", "Service", &mut m, &owned);
        let spec = &m["spec"];
        assert!(
            spec.get("clusterIP").is_none() && spec.get("clusterIPs").is_none(),
            "{spec}"
        );
        assert_eq!(spec["ipFamilyPolicy"], "SingleStack");
        assert!(spec.get("ipFamilies").is_none(), "{spec}");
        assert_eq!(spec["healthCheckNodePort"], 31999);
        assert_eq!(
            spec["ports"][0]["nodePort"], 30080,
            "the TCP port 80 was set: {spec}"
        );
        assert!(
            spec["ports"][1].get("nodePort").is_none(),
            "the UDP one was allocated: {spec}"
        );
    }

    #[test]
    fn a_headless_service_stays_headless() {
        let mut m = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
            "spec": {"clusterIP": "None", "clusterIPs": ["None"], "ipFamilies": ["IPv4"],
                     "ipFamilyPolicy": "SingleStack", "ports": [{"port": 5432}]}});
        strip_allocated("v1", "Service", &mut m, &[]);
        assert_eq!(m["spec"]["clusterIP"], "None");
        assert_eq!(m["spec"]["clusterIPs"], json!(["None"]));
        assert_eq!(m["spec"]["ipFamilyPolicy"], "SingleStack");
    }

    #[test]
    fn other_kinds_are_left_alone() {
        let mut m = json!({"apiVersion": "example.com/v1", "kind": "Service",
            "spec": {"clusterIP": "10.0.0.1", "ports": [{"port": 1, "nodePort": 30001}]}});
        let before = m.clone();
        strip_allocated("example.com/v1", "Service", &mut m, &[]);
        assert_eq!(m, before);
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"clusterIP": "x"}});
        let before = cm.clone();
        strip_allocated("v1", "ConfigMap", &mut cm, &[]);
        assert_eq!(cm, before);
    }

    /// A Job as the hub's apiserver stores it without `manualSelector`: a selector and template
    /// labels generated from its UID.
    fn stored_job(manual: bool) -> Value {
        let uid = "0f6c6e1a-hub";
        json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "pi", "namespace": "shop", "uid": uid,
                         "labels": {"team": "a", "controller-uid": uid}},
            "spec": {"manualSelector": manual, "completions": 2, "parallelism": 2,
                "ttlSecondsAfterFinished": 0,
                "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
                "template": {"metadata": {"labels": {
                    "app": "pi", "batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
                    "batch.kubernetes.io/job-name": "pi", "job-name": "pi"}},
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "pi", "image": "perl"}]}}}})
    }

    #[test]
    fn a_jobs_generated_selector_and_labels_stay_on_the_hub() {
        let mut job = stored_job(false);
        strip_allocated("batch/v1", "Job", &mut job, &[]);
        let spec = &job["spec"];
        assert!(spec.get("selector").is_none(), "{job}");
        assert_eq!(spec["template"]["metadata"]["labels"], json!({"app": "pi"}));
        assert_eq!(job["metadata"]["labels"], json!({"team": "a"}));
        // A member never deletes its copy of a finished Job: the hub's TTL does, for all.
        assert!(spec.get("ttlSecondsAfterFinished").is_none(), "{job}");
        // The rest of the spec is the user's.
        assert_eq!(
            (spec["completions"].clone(), spec["parallelism"].clone()),
            (json!(2), json!(2))
        );
        assert_eq!(spec["template"]["spec"]["containers"][0]["image"], "perl");
    }

    #[test]
    fn a_job_that_chose_its_selector_keeps_it() {
        let mut job = stored_job(true);
        let mut before = job.clone();
        strip_allocated("batch/v1", "Job", &mut job, &[]);
        if let Some(spec) = before["spec"].as_object_mut() {
            spec.remove("ttlSecondsAfterFinished");
        }
        assert_eq!(job, before);
        // And a label that merely has the name of a generated one, without the hub's UID, stays.
        let mut job = stored_job(false);
        job["metadata"]["labels"]["controller-uid"] = json!("chosen");
        strip_allocated("batch/v1", "Job", &mut job, &[]);
        assert_eq!(job["metadata"]["labels"]["controller-uid"], "chosen");
    }

    #[test]
    fn a_claims_binding_stays_in_its_cluster() {
        let mut claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "annotations": {
                "pv.kubernetes.io/bind-completed": "yes",
                "volume.kubernetes.io/selected-node": "node-1",
                "team": "db"}},
            "spec": {"volumeName": "pv-hub-1", "resources": {"requests": {"storage": "1Gi"}}}});
        strip_allocated("v1", "PersistentVolumeClaim", &mut claim, &[]);
        assert_eq!(
            claim,
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data", "annotations": {"team": "db"}},
                "spec": {"resources": {"requests": {"storage": "1Gi"}}}})
        );
        let mut bare = json!({"metadata": {"name": "data",
            "annotations": {"pv.kubernetes.io/bound-by-controller": "yes"}}, "spec": {}});
        strip_allocated("v1", "PersistentVolumeClaim", &mut bare, &[]);
        assert_eq!(bare, json!({"metadata": {"name": "data"}, "spec": {}}));
    }
}
