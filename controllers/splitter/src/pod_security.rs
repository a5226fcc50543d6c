//! Pod Security through the hub (design rule 9: a tenant gets nothing in a member that it could
//! not do on the hub in the same namespace).
//!
//! The hub runs no pods, so its Pod Security admission never sees the pods a placed workload
//! makes in the members. Before a workload is placed, the splitter asks the hub: a server-side
//! dry run of a Pod built from the workload's pod template, in the workload's hub namespace. The
//! hub's own admission judges it by that namespace's `pod-security.kubernetes.io/*` labels (and
//! the cluster's defaults); nothing is stored. A workload whose pods the hub refuses is placed
//! nowhere, and its copies already in members stay as they were: a template made worse never
//! reaches a member.
//!
//! This module is pure: which object has a pod template, the Pod to dry-run, what the hub's
//! answer means, and the cache of answers.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use serde_json::{Value, json};

/// The pod template of `object`, wherever the common kinds keep it: `.spec.template` (Deployments,
/// ReplicaSets, StatefulSets, DaemonSets, Jobs, and custom workloads such as Argo Rollouts or
/// OpenKruise CloneSets) or `.spec.jobTemplate.spec.template` (CronJobs). Only a template with
/// containers counts.
pub fn pod_template(object: &Value) -> Option<&Value> {
    ["/spec/template", "/spec/jobTemplate/spec/template"]
        .iter()
        .filter_map(|p| object.pointer(p))
        .find(|t| t.pointer("/spec/containers").is_some_and(Value::is_array))
}

/// The labels of a namespace that Pod Security admission reads.
pub fn pod_security_labels(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    labels
        .iter()
        .filter(|(k, _)| k.starts_with("pod-security.kubernetes.io/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The Pod to dry-run for `template`: its metadata's labels and annotations (AppArmor profiles
/// live there) and its spec, without what other admission plugins would look up on the hub and
/// Pod Security does not judge — the ServiceAccount (the hub may not have the workload's), its
/// token, a priority class, a runtime class and a node.
pub fn pod_for_check(template: &Value) -> Value {
    let mut spec = template.get("spec").cloned().unwrap_or_else(|| json!({}));
    if let Some(s) = spec.as_object_mut() {
        for field in [
            "serviceAccountName",
            "serviceAccount",
            "priorityClassName",
            "priority",
            "runtimeClassName",
            "nodeName",
        ] {
            s.remove(field);
        }
        s.insert("automountServiceAccountToken".into(), json!(false));
    }
    let metadata = template.get("metadata");
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "flotilla-pod-security-check-",
            "labels": metadata.and_then(|m| m.get("labels")).cloned().unwrap_or_else(|| json!({})),
            "annotations": metadata.and_then(|m| m.get("annotations")).cloned().unwrap_or_else(|| json!({})),
        },
        "spec": spec,
    })
}

/// What the hub said of a workload's pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Its Pod Security admission lets them in.
    Allowed,
    /// They violate the namespace's Pod Security level: the hub's message.
    Violates(String),
    /// The hub could not say now (unreachable, an error): the copies stay as they are, nothing
    /// new is placed.
    Unknown(String),
}

/// What the hub's answer to the dry run means. Only Pod Security's refusal is a violation; the
/// other refusals a Pod of the hub may get (a quota on the hub's own pods, a webhook that is
/// down) say nothing of the members' pods and let the workload through.
pub fn verdict_of(answer: Result<(), &kube::Error>) -> Verdict {
    match answer {
        Ok(()) => Verdict::Allowed,
        Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("violates PodSecurity") => {
            Verdict::Violates(s.message.clone())
        }
        Err(kube::Error::Api(s)) if (400..500).contains(&s.code) && s.code != 429 => {
            Verdict::Allowed
        }
        Err(e) => Verdict::Unknown(e.to_string()),
    }
}

/// The hub's verdicts on pod templates, by namespace, the namespace's Pod Security labels and the
/// template: a template checked once is not sent again until one of them changes.
#[derive(Default)]
pub struct Verdicts {
    known: Mutex<HashMap<u64, Verdict>>,
}

/// At most this many verdicts are kept; the cache starts over beyond.
const MAX_VERDICTS: usize = 10_000;

impl Verdicts {
    /// The key of `template` in `namespace` whose Pod Security labels are `labels`.
    pub fn key(namespace: &str, labels: &BTreeMap<String, String>, template: &Value) -> u64 {
        /// Feeds what is written into the hasher: the template's JSON, never held in memory.
        struct Hashing<'a>(&'a mut std::collections::hash_map::DefaultHasher);
        impl std::io::Write for Hashing<'_> {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.write(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        namespace.hash(&mut h);
        labels.hash(&mut h);
        // Writing JSON into a hasher cannot fail.
        let _ = serde_json::to_writer(Hashing(&mut h), template);
        h.finish()
    }

    pub fn get(&self, key: u64) -> Option<Verdict> {
        self.lock().get(&key).cloned()
    }

    /// Remembers a definite verdict (an unknown one is asked again).
    pub fn remember(&self, key: u64, verdict: &Verdict) {
        if matches!(verdict, Verdict::Unknown(_)) {
            return;
        }
        let mut known = self.lock();
        if known.len() >= MAX_VERDICTS {
            known.clear();
        }
        known.insert(key, verdict.clone());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Verdict>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(message, "Forbidden")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn workloads_have_their_pod_template_found() {
        let deployment = json!({"spec": {"template": {"spec": {"containers": [{"name": "a"}]}}}});
        assert!(pod_template(&deployment).is_some());
        let cronjob = json!({"spec": {"jobTemplate": {"spec": {"template":
            {"spec": {"containers": [{"name": "a"}]}}}}}});
        assert!(pod_template(&cronjob).is_some());
        // A template of something else (no containers), or none at all.
        assert!(pod_template(&json!({"spec": {"template": {"name": "x"}}})).is_none());
        assert!(pod_template(&json!({"data": {"a": "b"}})).is_none());
    }

    #[test]
    fn the_pod_checked_keeps_what_pod_security_judges_and_drops_what_the_hub_may_lack() {
        let template = json!({
            "metadata": {"labels": {"app": "web"},
                         "annotations": {"container.apparmor.security.beta.kubernetes.io/a": "unconfined"}},
            "spec": {"hostPID": true, "serviceAccountName": "web", "priorityClassName": "high",
                     "runtimeClassName": "gvisor", "nodeName": "n1",
                     "containers": [{"name": "a", "image": "x", "securityContext": {"runAsUser": 0}}]}});
        let pod = pod_for_check(&template);
        assert_eq!(pod["kind"], "Pod");
        assert_eq!(pod["spec"]["hostPID"], true);
        assert_eq!(
            pod["spec"]["containers"][0]["securityContext"]["runAsUser"],
            0
        );
        assert_eq!(pod["metadata"]["labels"]["app"], "web");
        assert_eq!(
            pod["metadata"]["annotations"]["container.apparmor.security.beta.kubernetes.io/a"],
            "unconfined"
        );
        for gone in [
            "serviceAccountName",
            "priorityClassName",
            "runtimeClassName",
            "nodeName",
        ] {
            assert!(pod["spec"].get(gone).is_none(), "{gone}");
        }
        assert_eq!(pod["spec"]["automountServiceAccountToken"], false);
    }

    #[test]
    fn only_pod_securitys_refusal_is_a_violation() {
        let psa = api_error(
            403,
            "pods \"x\" is forbidden: violates PodSecurity \"restricted:latest\": host namespaces (hostPID=true)",
        );
        assert!(matches!(verdict_of(Err(&psa)), Verdict::Violates(m) if m.contains("hostPID")));
        assert_eq!(verdict_of(Ok(())), Verdict::Allowed);
        let quota = api_error(
            403,
            "exceeded quota: pods, requested: pods=1, used: pods=0, limited: pods=0",
        );
        assert_eq!(verdict_of(Err(&quota)), Verdict::Allowed);
        for unknown in [api_error(500, "etcd"), api_error(429, "slow down")] {
            assert!(matches!(verdict_of(Err(&unknown)), Verdict::Unknown(_)));
        }
    }

    #[test]
    fn a_verdict_is_remembered_per_namespace_level_and_template() {
        let verdicts = Verdicts::default();
        let template = json!({"spec": {"containers": []}});
        let restricted: BTreeMap<String, String> = [(
            "pod-security.kubernetes.io/enforce".into(),
            "restricted".into(),
        )]
        .into();
        let key = Verdicts::key("shop", &restricted, &template);
        verdicts.remember(key, &Verdict::Violates("no".into()));
        assert_eq!(verdicts.get(key), Some(Verdict::Violates("no".into())));
        assert_ne!(key, Verdicts::key("shop", &BTreeMap::new(), &template));
        assert_ne!(key, Verdicts::key("other", &restricted, &template));
        let unknown = Verdicts::key("x", &restricted, &template);
        verdicts.remember(unknown, &Verdict::Unknown("timeout".into()));
        assert_eq!(verdicts.get(unknown), None, "asked again");
    }
}
