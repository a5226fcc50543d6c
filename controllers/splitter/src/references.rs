//! Pure: the objects a workload's pod template refers to, which follow the workload to the
//! members it runs on (`followReferences`, on by default): ConfigMaps and Secrets in volumes,
//! projected volumes, `env` and `envFrom`, image pull Secrets, the ServiceAccount, and
//! PersistentVolumeClaims.

use std::collections::BTreeSet;

use serde_json::Value;

/// A kind of object a pod template can refer to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RefKind {
    ConfigMap,
    Secret,
    ServiceAccount,
    PersistentVolumeClaim,
}

impl RefKind {
    /// `(group, version, kind, plural)` of the kind.
    pub fn resource(self) -> (&'static str, &'static str, &'static str, &'static str) {
        match self {
            Self::ConfigMap => ("", "v1", "ConfigMap", "configmaps"),
            Self::Secret => ("", "v1", "Secret", "secrets"),
            Self::ServiceAccount => ("", "v1", "ServiceAccount", "serviceaccounts"),
            Self::PersistentVolumeClaim => {
                ("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims")
            }
        }
    }
}

/// An object a pod template refers to, in the workload's namespace.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Reference {
    pub kind: RefKind,
    pub name: String,
}

/// The pod spec of a workload: `spec.template.spec` (Deployments, ReplicaSets, StatefulSets,
/// DaemonSets, Jobs) or `spec.jobTemplate.spec.template.spec` (CronJobs).
fn pod_spec(workload: &Value) -> Option<&Value> {
    let spec = workload.get("spec")?;
    spec.pointer("/template/spec")
        .or_else(|| spec.pointer("/jobTemplate/spec/template/spec"))
}

/// Every object `workload`'s pod template refers to, in name order. The `default`
/// ServiceAccount is not listed: every namespace has its own.
pub fn references(workload: &Value) -> BTreeSet<Reference> {
    let mut out = BTreeSet::new();
    let Some(pod) = pod_spec(workload) else {
        return out;
    };
    let mut add = |kind: RefKind, name: Option<&Value>| {
        if let Some(name) = name.and_then(Value::as_str).filter(|n| !n.is_empty()) {
            out.insert(Reference {
                kind,
                name: name.to_string(),
            });
        }
    };
    let items = |v: Option<&Value>| v.and_then(Value::as_array).cloned().unwrap_or_default();

    let account = pod
        .get("serviceAccountName")
        .or_else(|| pod.get("serviceAccount"));
    if account.and_then(Value::as_str) != Some("default") {
        add(RefKind::ServiceAccount, account);
    }
    for s in items(pod.get("imagePullSecrets")) {
        add(RefKind::Secret, s.get("name"));
    }
    for v in items(pod.get("volumes")) {
        add(RefKind::ConfigMap, v.pointer("/configMap/name"));
        add(RefKind::Secret, v.pointer("/secret/secretName"));
        add(
            RefKind::PersistentVolumeClaim,
            v.pointer("/persistentVolumeClaim/claimName"),
        );
        for source in items(v.pointer("/projected/sources")) {
            add(RefKind::ConfigMap, source.pointer("/configMap/name"));
            add(RefKind::Secret, source.pointer("/secret/name"));
        }
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in items(pod.get(list)) {
            for e in items(c.get("env")) {
                add(
                    RefKind::ConfigMap,
                    e.pointer("/valueFrom/configMapKeyRef/name"),
                );
                add(RefKind::Secret, e.pointer("/valueFrom/secretKeyRef/name"));
            }
            for e in items(c.get("envFrom")) {
                add(RefKind::ConfigMap, e.pointer("/configMapRef/name"));
                add(RefKind::Secret, e.pointer("/secretRef/name"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn r(kind: RefKind, name: &str) -> Reference {
        Reference {
            kind,
            name: name.into(),
        }
    }

    #[test]
    fn every_kind_of_reference_in_a_pod_template_is_found() {
        let deployment = json!({"spec": {"template": {"spec": {
            "serviceAccountName": "web",
            "imagePullSecrets": [{"name": "registry"}],
            "volumes": [
                {"name": "a", "configMap": {"name": "settings"}},
                {"name": "b", "secret": {"secretName": "tls"}},
                {"name": "c", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "d", "projected": {"sources": [
                    {"configMap": {"name": "extra"}}, {"secret": {"name": "token"}},
                    {"serviceAccountToken": {"path": "t"}}
                ]}},
                {"name": "e", "emptyDir": {}}
            ],
            "initContainers": [{"name": "init", "envFrom": [{"secretRef": {"name": "init-env"}}]}],
            "containers": [{"name": "app",
                "env": [
                    {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "flags", "key": "a"}}},
                    {"name": "B", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
                    {"name": "C", "value": "plain"},
                    {"name": "D", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                ],
                "envFrom": [{"configMapRef": {"name": "common"}}]
            }]
        }}}});
        let got: Vec<Reference> = references(&deployment).into_iter().collect();
        assert_eq!(
            got,
            vec![
                r(RefKind::ConfigMap, "common"),
                r(RefKind::ConfigMap, "extra"),
                r(RefKind::ConfigMap, "flags"),
                r(RefKind::ConfigMap, "settings"),
                r(RefKind::Secret, "db"),
                r(RefKind::Secret, "init-env"),
                r(RefKind::Secret, "registry"),
                r(RefKind::Secret, "tls"),
                r(RefKind::Secret, "token"),
                r(RefKind::ServiceAccount, "web"),
                r(RefKind::PersistentVolumeClaim, "data"),
            ]
        );
    }

    #[test]
    fn no_template_no_references_and_the_default_account_is_not_one() {
        assert!(references(&json!({"data": {"a": "b"}})).is_empty());
        let plain = json!({"spec": {"template": {"spec": {
            "serviceAccountName": "default", "containers": [{"name": "app"}]}}}});
        assert!(references(&plain).is_empty());
        let cron = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {
            "containers": [{"name": "app", "envFrom": [{"configMapRef": {"name": "c"}}]}]}}}}}});
        assert_eq!(
            references(&cron).into_iter().collect::<Vec<_>>(),
            vec![r(RefKind::ConfigMap, "c")]
        );
    }
}
