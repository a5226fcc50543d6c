//! Pod Security through the hub (design rule 9: a tenant gets nothing in a member that it could
//! not do on the hub in the same namespace).
//!
//! The hub runs no pods, so its Pod Security admission never sees the pods a placed workload
//! makes in the members. Before a workload is placed, the splitter asks the hub: a server-side
//! dry run of a Pod built from the workload's pod template. The level is the one the workload's
//! hub namespace enforces (`pod-security.kubernetes.io/enforce`), or the splitter's default
//! (`--default-pod-security-level`, `baseline`) when it names none — and the same level goes into
//! the member namespaces Flotilla creates for it. The Pod is sent to a namespace of the chart's
//! own that enforces that level (`<prefix><level>`), not the tenant's: nothing the tenant keeps
//! in its namespace (a LimitRange, a quota, a missing ServiceAccount, a webhook's answer) can turn
//! the check into a pass. Only a yes places: a refusal of any kind holds the workload back, and
//! an answer that does not come (unreachable, throttled) places nothing new either. Nothing is
//! stored. A workload held back is placed nowhere, and its copies already in members stay as
//! they were: a template made worse never reaches a member.
//!
//! This module is pure: which object has a pod template, the level, the Pod to dry-run, what the
//! hub's answer means, and the cache of answers.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use serde_json::{Value, json};

/// The pod templates of `object`: every PodTemplateSpec in it (an object whose `.spec.containers`
/// is a list) outside its metadata and status — `.spec.template` of Deployments, StatefulSets,
/// Jobs, Argo Rollouts or CloneSets, `.spec.jobTemplate.spec.template` of CronJobs, and those of
/// custom kinds wherever they keep them: RayCluster's head and worker groups, Volcano's tasks,
/// Kubeflow's replica specs. A template nested in a template (none known) is not looked into.
pub fn pod_templates(object: &Value) -> Vec<&Value> {
    fn walk<'a>(value: &'a Value, found: &mut Vec<&'a Value>) {
        match value {
            Value::Object(map) => {
                if map
                    .get("spec")
                    .and_then(|s| s.get("containers"))
                    .is_some_and(Value::is_array)
                {
                    found.push(value);
                    return;
                }
                for v in map.values() {
                    walk(v, found);
                }
            }
            Value::Array(items) => {
                for v in items {
                    walk(v, found);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    if let Value::Object(map) = object {
        for (key, value) in map {
            if key != "metadata" && key != "status" {
                walk(value, &mut found);
            }
        }
    }
    found
}

/// The label of a namespace that names the Pod Security level it enforces.
pub const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";

/// A Pod Security Standards level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum Level {
    /// Unrestricted.
    Privileged,
    /// Prevents known privilege escalations (host namespaces, privileged containers, hostPath,
    /// added capabilities…).
    #[default]
    Baseline,
    /// Hardened: also non-root, no privilege escalation, dropped capabilities, seccomp.
    Restricted,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Privileged => "privileged",
            Self::Baseline => "baseline",
            Self::Restricted => "restricted",
        }
    }

    /// The level a namespace with `labels` enforces: its `pod-security.kubernetes.io/enforce`
    /// label, else `default`. A value that names no level counts as `restricted`, as Pod Security
    /// admission itself takes it.
    pub fn enforced(labels: &BTreeMap<String, String>, default: Level) -> Level {
        match labels.get(ENFORCE_LABEL).map(String::as_str) {
            None => default,
            Some("privileged") => Self::Privileged,
            Some("baseline") => Self::Baseline,
            Some(_) => Self::Restricted,
        }
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The labels of a member namespace made for a hub namespace with `labels`: the hub's, and, when
/// the hub namespace names no Pod Security level, the `default` one the splitter judged its pods
/// by.
pub fn with_enforced_level(
    mut labels: BTreeMap<String, String>,
    default: Level,
) -> BTreeMap<String, String> {
    labels
        .entry(ENFORCE_LABEL.to_string())
        .or_insert_with(|| default.as_str().to_string());
    labels
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
    /// They violate the level, or the hub refused the Pod for another reason and so did not
    /// vouch for it: the hub's message.
    Violates(String),
    /// The hub could not say now (unreachable, throttled, a server error, the check namespace
    /// missing): the copies stay as they are, nothing new is placed, and it is asked again.
    Unknown(String),
}

/// What the hub's answer to the dry run means. It fails closed: only a yes is `Allowed`. Pod
/// Security's refusal is a violation with its message; another refusal (the Pod is invalid, a
/// policy or webhook refused it) is one too, saying so; what may pass on its own (a timeout, 429,
/// a 5xx, the check namespace not there yet) is `Unknown`.
pub fn verdict_of(answer: Result<(), &kube::Error>) -> Verdict {
    match answer {
        Ok(()) => Verdict::Allowed,
        Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("violates PodSecurity") => {
            Verdict::Violates(s.message.clone())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Verdict::Unknown(format!(
            "the Pod Security check namespace is missing: {}",
            s.message
        )),
        Err(kube::Error::Api(s)) if (400..500).contains(&s.code) && s.code != 429 => {
            Verdict::Violates(format!(
                "the hub refused a Pod of its pod template, so Pod Security could not admit it: {}",
                s.message
            ))
        }
        Err(e) => Verdict::Unknown(e.to_string()),
    }
}

/// How the splitter judges pod templates: the level of a namespace that names none, where it asks,
/// and what it was told.
#[derive(Default)]
pub struct PodSecurity {
    /// The level of a hub namespace without a `pod-security.kubernetes.io/enforce` label.
    pub default: Level,
    /// The check namespace of a level is `<prefix><level>`.
    pub check_namespace_prefix: String,
    pub verdicts: Verdicts,
}

/// The hub's verdicts on pod templates, by level and template: a template checked once at a
/// level is not sent again. The key is the SHA-256 of both, so that no template can be made to
/// take another's verdict.
#[derive(Default)]
pub struct Verdicts {
    known: Mutex<HashMap<VerdictKey, Verdict>>,
}

/// The key of a verdict: see [`Verdicts::key`].
pub type VerdictKey = [u8; 32];

/// At most this many verdicts are kept; the cache starts over beyond.
const MAX_VERDICTS: usize = 10_000;

impl Verdicts {
    /// The key of `template` judged at `level`.
    pub fn key(level: Level, template: &Value) -> VerdictKey {
        /// Feeds what is written into the digest: the template's JSON, never held in memory.
        struct Digesting<'a>(&'a mut ring::digest::Context);
        impl std::io::Write for Digesting<'_> {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.update(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
        digest.update(level.as_str().as_bytes());
        digest.update(b"\0");
        // Writing JSON into a digest cannot fail.
        let _ = serde_json::to_writer(Digesting(&mut digest), template);
        let mut key = [0; 32];
        key.copy_from_slice(digest.finish().as_ref());
        key
    }

    pub fn get(&self, key: VerdictKey) -> Option<Verdict> {
        self.lock().get(&key).cloned()
    }

    /// Remembers a definite verdict (an unknown one is asked again).
    pub fn remember(&self, key: VerdictKey, verdict: &Verdict) {
        if matches!(verdict, Verdict::Unknown(_)) {
            return;
        }
        let mut known = self.lock();
        if known.len() >= MAX_VERDICTS {
            known.clear();
        }
        known.insert(key, verdict.clone());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<VerdictKey, Verdict>> {
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
    fn workloads_have_their_pod_templates_found_wherever_they_keep_them() {
        let pod = |name: &str| json!({"spec": {"containers": [{"name": name}]}});
        let deployment = json!({"spec": {"template": pod("a")}});
        assert_eq!(pod_templates(&deployment), [&pod("a")]);
        let cronjob = json!({"spec": {"jobTemplate": {"spec": {"template": pod("a")}}}});
        assert_eq!(pod_templates(&cronjob).len(), 1);
        // RayCluster: a head group and a list of worker groups.
        let ray = json!({"spec": {"headGroupSpec": {"template": pod("head")},
            "workerGroupSpecs": [{"template": pod("w1")}, {"template": pod("w2")}]}});
        assert_eq!(pod_templates(&ray), [&pod("head"), &pod("w1"), &pod("w2")]);
        // Kubeflow's PyTorchJob: replica specs by role; Volcano's Job: tasks.
        let pytorch = json!({"spec": {"pytorchReplicaSpecs": {
            "Master": {"template": pod("m")}, "Worker": {"template": pod("w")}}}});
        assert_eq!(pod_templates(&pytorch).len(), 2);
        let volcano = json!({"spec": {"tasks": [{"name": "t", "template": pod("t")}]}});
        assert_eq!(pod_templates(&volcano).len(), 1);
        // A template of something else (no containers), none at all, or only in the status.
        assert!(pod_templates(&json!({"spec": {"template": {"name": "x"}}})).is_empty());
        assert!(pod_templates(&json!({"data": {"a": "b"}})).is_empty());
        assert!(pod_templates(&json!({"status": {"template": pod("s")}})).is_empty());
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
    fn only_a_yes_is_allowed() {
        let psa = api_error(
            403,
            "pods \"x\" is forbidden: violates PodSecurity \"restricted:latest\": host namespaces (hostPID=true)",
        );
        assert!(matches!(verdict_of(Err(&psa)), Verdict::Violates(m) if m.contains("hostPID")));
        assert_eq!(verdict_of(Ok(())), Verdict::Allowed);
        // Refusals that are not Pod Security's do not vouch for the pods either.
        for refusal in [
            api_error(403, "maximum cpu usage per Container is 2, but limit is 64"),
            api_error(403, "error looking up service account x/default"),
            api_error(
                422,
                "Pod \"x\" is invalid: spec.containers[0].image: Required value",
            ),
            api_error(400, "admission webhook denied the request"),
        ] {
            assert!(
                matches!(verdict_of(Err(&refusal)), Verdict::Violates(m) if m.contains("refused")),
                "{refusal}"
            );
        }
        for unknown in [
            api_error(500, "etcd"),
            api_error(429, "slow down"),
            api_error(
                404,
                "namespaces \"flotilla-pod-security-baseline\" not found",
            ),
        ] {
            assert!(matches!(verdict_of(Err(&unknown)), Verdict::Unknown(_)));
        }
    }

    #[test]
    fn the_level_is_the_namespaces_else_the_default_and_an_unknown_one_is_restricted() {
        let with = |v: &str| -> BTreeMap<String, String> {
            [(ENFORCE_LABEL.to_string(), v.to_string())].into()
        };
        assert_eq!(
            Level::enforced(&BTreeMap::new(), Level::Baseline),
            Level::Baseline
        );
        assert_eq!(
            Level::enforced(&BTreeMap::new(), Level::Restricted),
            Level::Restricted
        );
        assert_eq!(
            Level::enforced(&with("privileged"), Level::Baseline),
            Level::Privileged
        );
        assert_eq!(
            Level::enforced(&with("restricted"), Level::Baseline),
            Level::Restricted
        );
        assert_eq!(
            Level::enforced(&with("Baseline "), Level::Privileged),
            Level::Restricted
        );
        let labels = with_enforced_level(BTreeMap::new(), Level::Baseline);
        assert_eq!(labels[ENFORCE_LABEL], "baseline");
        let labels = with_enforced_level(with("privileged"), Level::Baseline);
        assert_eq!(
            labels[ENFORCE_LABEL], "privileged",
            "the hub's own label wins"
        );
    }

    #[test]
    fn a_verdict_is_remembered_per_level_and_template() {
        let verdicts = Verdicts::default();
        let template = json!({"spec": {"containers": []}});
        let key = Verdicts::key(Level::Restricted, &template);
        verdicts.remember(key, &Verdict::Violates("no".into()));
        assert_eq!(verdicts.get(key), Some(Verdict::Violates("no".into())));
        assert_ne!(key, Verdicts::key(Level::Baseline, &template));
        assert_ne!(
            key,
            Verdicts::key(Level::Restricted, &json!({"spec": {"containers": [{}]}}))
        );
        let unknown = Verdicts::key(Level::Baseline, &json!({"spec": {}}));
        verdicts.remember(unknown, &Verdict::Unknown("timeout".into()));
        assert_eq!(verdicts.get(unknown), None, "asked again");
    }
}
