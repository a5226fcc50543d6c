//! Pure status logic: what a Work's `Applied`, `Available` and `Degraded` conditions and
//! per-manifest status say, from what happened in the member.

use flotilla_api::condition::ConditionStatus;
use flotilla_api::{ManifestIdentity, ManifestStatus, WorkStatus, conditions, reasons};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::DynamicObject;
use serde_json::Value;

use crate::apply::Outcome;

pub use flotilla_api::condition::Verdict;
use flotilla_interpreter::HealthRule;
use flotilla_interpreter::health::{Health, health_by};

/// The status of manifest `ordinal` as observed in the member: the object's `status` as the
/// member reports it, its generations and resourceVersion.
pub fn manifest_status(
    ordinal: usize,
    identity: &ManifestIdentity,
    object: &DynamicObject,
) -> ManifestStatus {
    let status = object.data.get("status").map(bounded);
    ManifestStatus {
        ordinal: i32::try_from(ordinal).unwrap_or(i32::MAX),
        identity: ManifestIdentity {
            namespace: object
                .metadata
                .namespace
                .clone()
                .or(identity.namespace.clone()),
            ..identity.clone()
        },
        resource_version: object.metadata.resource_version.clone(),
        generation: object.metadata.generation,
        observed_generation: status
            .as_ref()
            .and_then(|s| s.get("observedGeneration"))
            .and_then(Value::as_i64),
        status,
        ..ManifestStatus::default()
    }
}

/// The most bytes (of JSON) of a member object's status kept in its Work: 50 such statuses stay
/// well under what the hub stores in one object.
pub const MAX_STATUS_BYTES: usize = 16 * 1024;

/// How much of a condition's message, or of another string, a bounded status keeps.
const MAX_STRING_BYTES: usize = 1024;

/// At most this many conditions in a bounded status.
const MAX_CONDITIONS: usize = 16;

/// A member object's `status`, as the Work keeps it: as it is, unless its JSON is beyond
/// [`MAX_STATUS_BYTES`] (a member that misbehaves, or a kind whose status lists much): then only
/// what the hub reads of it — its top-level numbers, booleans and short strings, and its first
/// conditions with their messages cut — and `truncatedFrom`, the size it had.
fn bounded(status: &Value) -> Value {
    let size = serde_json::to_vec(status).map_or(usize::MAX, |v| v.len());
    if size <= MAX_STATUS_BYTES {
        return status.clone();
    }
    let cut = |text: &str| -> String {
        let mut end = text.len().min(MAX_STRING_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text[..end].to_string()
    };
    let mut kept = serde_json::Map::new();
    for (key, value) in status.as_object().into_iter().flatten() {
        match value {
            Value::Number(_) | Value::Bool(_) => {
                kept.insert(key.clone(), value.clone());
            }
            Value::String(text) if text.len() <= MAX_STRING_BYTES => {
                kept.insert(key.clone(), value.clone());
            }
            Value::Array(conditions) if key == "conditions" => {
                let conditions: Vec<Value> = conditions
                    .iter()
                    .take(MAX_CONDITIONS)
                    .filter_map(Value::as_object)
                    .map(|c| {
                        let mut c: serde_json::Map<String, Value> = c
                            .iter()
                            .filter_map(|(k, v)| match v {
                                Value::String(t) => Some((k.clone(), Value::String(cut(t)))),
                                Value::Number(_) | Value::Bool(_) => Some((k.clone(), v.clone())),
                                _ => None,
                            })
                            .collect();
                        c.retain(|_, v| !v.is_null());
                        Value::Object(c)
                    })
                    .collect();
                kept.insert(key.clone(), Value::Array(conditions));
            }
            _ => {}
        }
    }
    kept.insert("truncatedFrom".into(), Value::from(size));
    Value::Object(kept)
}

/// The status of manifest `ordinal` from what happened to it: as [`manifest_status`] when it was
/// applied, with whether it is `applied` and `available` and, when one of them is not, the
/// reason and message (the member's, when it refused the manifest). The transition time is kept
/// from `previous`, the manifest's last status, unless `applied` or `available` changed.
pub fn manifest_entry(
    ordinal: usize,
    identity: &ManifestIdentity,
    outcome: &Outcome,
    previous: Option<&ManifestStatus>,
    rule: Option<&HealthRule>,
    now: Timestamp,
) -> ManifestStatus {
    let mut entry = match outcome {
        Outcome::Applied(object) | Outcome::Unchanged(object) => {
            let mut entry = manifest_status(ordinal, identity, object);
            entry.applied = ConditionStatus::True;
            let (available, why) = match health_by(object, rule) {
                Health::Available => (ConditionStatus::True, None),
                Health::NotAvailable(m) => {
                    (ConditionStatus::False, Some((reasons::NOT_AVAILABLE, m)))
                }
                Health::Degraded(m) => (ConditionStatus::False, Some((reasons::DEGRADED, m))),
            };
            entry.available = Some(available);
            (entry.reason, entry.message) = why.map(|(r, m)| (r.to_string(), m)).unzip();
            entry
        }
        // Not applied: nothing is known of its availability.
        Outcome::Conflict(message) => refused(ordinal, identity, reasons::CONFLICT, message),
        Outcome::Failed { reason, message } => refused(ordinal, identity, reason, message),
    };
    entry.last_transition_time = match previous {
        Some(p) if (p.applied, p.available) == (entry.applied, entry.available) => {
            p.last_transition_time.clone()
        }
        _ => None,
    }
    .or(Some(Time(now)));
    entry
}

/// The status of a manifest that was not applied, and why.
fn refused(
    ordinal: usize,
    identity: &ManifestIdentity,
    reason: &str,
    message: &str,
) -> ManifestStatus {
    ManifestStatus {
        ordinal: i32::try_from(ordinal).unwrap_or(i32::MAX),
        identity: identity.clone(),
        applied: ConditionStatus::False,
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        ..ManifestStatus::default()
    }
}

/// Whether two Work statuses say the same, apart from condition times (which a member's
/// conditions without times, filled in on every observation, would otherwise change).
pub fn same_ignoring_times(a: &WorkStatus, b: &WorkStatus) -> bool {
    fn without_times(s: &WorkStatus) -> WorkStatus {
        let mut s = s.clone();
        let clear = |c: &mut Condition| c.last_transition_time = Time(Timestamp::UNIX_EPOCH);
        s.conditions.iter_mut().for_each(clear);
        for m in &mut s.manifests {
            m.last_transition_time = None;
        }
        s
    }
    without_times(a) == without_times(b)
}

/// The Work's conditions from the outcome of every manifest (in order).
pub fn work_conditions(
    outcomes: &[(ManifestIdentity, Outcome)],
    rule: Option<&HealthRule>,
) -> [Verdict; 3] {
    let total = outcomes.len();
    let conflicts: Vec<&str> = outcomes
        .iter()
        .filter_map(|(_, o)| match o {
            Outcome::Conflict(m) => Some(m.as_str()),
            _ => None,
        })
        .collect();
    let failures: Vec<(&'static str, &str)> = outcomes
        .iter()
        .filter_map(|(_, o)| match o {
            Outcome::Failed { reason, message } => Some((*reason, message.as_str())),
            _ => None,
        })
        .collect();
    let applied: Vec<&DynamicObject> = outcomes
        .iter()
        .filter_map(|(_, o)| match o {
            Outcome::Applied(obj) | Outcome::Unchanged(obj) => Some(obj.as_ref()),
            _ => None,
        })
        .collect();

    let applied_v = if !conflicts.is_empty() {
        Verdict::new(
            conditions::APPLIED,
            "False",
            reasons::CONFLICT,
            conflicts.join("; "),
        )
    } else if let Some((reason, _)) = failures.first() {
        let messages: Vec<&str> = failures.iter().map(|(_, m)| *m).collect();
        Verdict::new(
            conditions::APPLIED,
            "False",
            reason,
            format!(
                "{} of {total} manifests failed: {}",
                failures.len(),
                messages.join("; ")
            ),
        )
    } else {
        Verdict::new(
            conditions::APPLIED,
            "True",
            reasons::APPLIED,
            format!("{total} manifests applied"),
        )
    };

    let healths: Vec<Health> = applied.iter().map(|o| health_by(o, rule)).collect();
    let degraded: Vec<&str> = healths
        .iter()
        .filter_map(|h| match h {
            Health::Degraded(m) => Some(m.as_str()),
            _ => None,
        })
        .collect();
    let waiting: Vec<&str> = healths
        .iter()
        .filter_map(|h| match h {
            Health::NotAvailable(m) => Some(m.as_str()),
            _ => None,
        })
        .collect();
    let available_v = if applied.len() < total {
        Verdict::new(
            conditions::AVAILABLE,
            "Unknown",
            reasons::NOT_AVAILABLE,
            "not every manifest is applied",
        )
    } else if !degraded.is_empty() || !waiting.is_empty() {
        let mut why: Vec<&str> = degraded.clone();
        why.extend(waiting.iter().copied());
        Verdict::new(
            conditions::AVAILABLE,
            "False",
            reasons::NOT_AVAILABLE,
            why.join("; "),
        )
    } else {
        Verdict::new(
            conditions::AVAILABLE,
            "True",
            reasons::AVAILABLE,
            format!("{total} objects available"),
        )
    };
    let degraded_v = if degraded.is_empty() {
        Verdict::new(
            conditions::DEGRADED,
            "False",
            reasons::HEALTHY,
            "no object reports a failure",
        )
    } else {
        Verdict::new(
            conditions::DEGRADED,
            "True",
            reasons::DEGRADED,
            degraded.join("; "),
        )
    };
    [applied_v, available_v, degraded_v]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> DynamicObject {
        serde_json::from_value(v).expect("object")
    }

    fn id() -> ManifestIdentity {
        ManifestIdentity {
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
            resource: None,
            namespace: Some("shop".into()),
            name: "web".into(),
        }
    }

    fn deployment(generation: i64, observed: i64, available: &str) -> DynamicObject {
        obj(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "generation": generation},
            "status": {"observedGeneration": observed, "conditions": [
                {"type": "Available", "status": available, "reason": "MinimumReplicasAvailable", "message": "ok"}]}
        }))
    }

    #[test]
    fn conditions_name_conflicts_and_failures() {
        let ok = (id(), Outcome::Applied(Box::new(deployment(1, 1, "True"))));
        let [a, v, d] = work_conditions(std::slice::from_ref(&ok), None);
        assert_eq!((a.status, v.status, d.status), ("True", "True", "False"));

        let conflict = (
            id(),
            Outcome::Conflict("Deployment.apps shop/web exists".into()),
        );
        let [a, v, _] = work_conditions(&[ok.clone(), conflict], None);
        assert_eq!((a.status, a.reason), ("False", reasons::CONFLICT));
        assert!(a.message.contains("shop/web"));
        assert_eq!(v.status, "Unknown");

        let failed = (
            id(),
            Outcome::Failed {
                reason: reasons::APPLY_FAILED,
                message: "spec.replicas: Invalid".into(),
            },
        );
        let [a, _, _] = work_conditions(&[ok, failed], None);
        assert_eq!((a.status, a.reason), ("False", reasons::APPLY_FAILED));
        assert!(
            a.message
                .contains("1 of 2 manifests failed: spec.replicas: Invalid"),
            "{}",
            a.message
        );
    }

    #[test]
    fn statuses_that_differ_only_in_times_are_the_same() {
        let at = |secs| {
            let s = manifest_entry(
                0,
                &id(),
                &Outcome::Applied(Box::new(deployment(4, 4, "True"))),
                None,
                None,
                Timestamp::from_second(secs).expect("time"),
            );
            WorkStatus {
                conditions: vec![
                    Verdict::new(conditions::APPLIED, "True", reasons::APPLIED, "1 applied")
                        .into_condition(Timestamp::from_second(secs).expect("time"), Some(1)),
                ],
                observed_generation: Some(1),
                manifests: vec![s],
                removing: vec![],
            }
        };
        assert!(same_ignoring_times(&at(1), &at(2)));
        let mut changed = at(1);
        changed.manifests[0].resource_version = Some("9".into());
        assert!(!same_ignoring_times(&at(1), &changed));
        let mut generation = at(1);
        generation.conditions[0].observed_generation = Some(2);
        assert!(!same_ignoring_times(&at(1), &generation));
        let mut generation = at(1);
        generation.observed_generation = Some(2);
        assert!(!same_ignoring_times(&at(1), &generation));
    }

    #[test]
    fn a_status_beyond_its_budget_keeps_what_the_hub_reads_of_it() {
        let mut object = deployment(4, 4, "True");
        let huge = "x".repeat(MAX_STATUS_BYTES);
        object.data["status"]["readyReplicas"] = json!(4);
        object.data["status"]["members"] = json!([huge.clone(), huge.clone()]);
        object.data["status"]["conditions"][0]["message"] = json!(huge);
        let s = manifest_status(0, &id(), &object);
        let status = s.status.expect("a status");
        let bytes = serde_json::to_vec(&status).expect("json").len();
        assert!(bytes <= MAX_STATUS_BYTES, "{bytes}");
        assert!(status.get("members").is_none());
        assert_eq!(status["readyReplicas"], 4, "{status}");
        assert_eq!(status["conditions"][0]["type"], "Available");
        assert_eq!(
            status["conditions"][0]["message"].as_str().map(str::len),
            Some(MAX_STRING_BYTES)
        );
        assert!(status["truncatedFrom"].as_u64() > Some(2 * MAX_STATUS_BYTES as u64));
        assert_eq!(s.observed_generation, Some(4), "read before it was cut");
        // An ordinary status is kept whole.
        let s = manifest_status(0, &id(), &deployment(4, 4, "True"));
        assert!(s.status.expect("a status").get("truncatedFrom").is_none());
    }

    #[test]
    fn manifest_status_copies_what_the_member_says() {
        let s = manifest_status(0, &id(), &deployment(4, 4, "True"));
        assert_eq!(s.generation, Some(4));
        assert_eq!(s.observed_generation, Some(4));
        assert_eq!(
            s.status.as_ref().map(|s| &s["conditions"][0]["type"]),
            Some(&json!("Available"))
        );
    }

    #[test]
    fn every_manifest_says_whether_it_is_applied_and_available() {
        let at = |secs| Timestamp::from_second(secs).expect("time");
        let ok = manifest_entry(
            0,
            &id(),
            &Outcome::Applied(Box::new(deployment(1, 1, "True"))),
            None,
            None,
            at(1),
        );
        assert_eq!(
            (ok.applied, ok.available, ok.reason.as_deref()),
            (ConditionStatus::True, Some(ConditionStatus::True), None)
        );
        assert_eq!(ok.last_transition_time, Some(Time(at(1))));

        // Applied and available again: the time stays.
        let again = manifest_entry(
            0,
            &id(),
            &Outcome::Unchanged(Box::new(deployment(1, 1, "True"))),
            Some(&ok),
            None,
            at(2),
        );
        assert_eq!(again.last_transition_time, Some(Time(at(1))));

        let waiting = manifest_entry(
            0,
            &id(),
            &Outcome::Applied(Box::new(deployment(2, 1, "True"))),
            Some(&ok),
            None,
            at(2),
        );
        assert_eq!(
            (
                waiting.applied,
                waiting.available,
                waiting.reason.as_deref()
            ),
            (
                ConditionStatus::True,
                Some(ConditionStatus::False),
                Some(reasons::NOT_AVAILABLE)
            )
        );
        assert!(
            waiting
                .message
                .as_deref()
                .is_some_and(|m| m.contains("generation 2 not observed")),
            "{:?}",
            waiting.message
        );
        assert_eq!(waiting.last_transition_time, Some(Time(at(2))));

        let refused = Outcome::Failed {
            reason: reasons::APPLY_FAILED,
            message: "spec.replicas: Invalid".into(),
        };
        let failed = manifest_entry(0, &id(), &refused, Some(&ok), None, at(3));
        assert_eq!(
            (failed.applied, failed.reason.as_deref()),
            (ConditionStatus::False, Some(reasons::APPLY_FAILED))
        );
        assert!(
            failed
                .message
                .as_deref()
                .is_some_and(|m| m.contains("Invalid"))
        );
        assert_eq!(
            failed.available, None,
            "not applied: nothing said of availability"
        );
        assert!(failed.status.is_none() && failed.resource_version.is_none());

        let conflict = manifest_entry(
            0,
            &id(),
            &Outcome::Conflict("is managed by Work x".into()),
            None,
            None,
            at(3),
        );
        assert_eq!(conflict.reason.as_deref(), Some(reasons::CONFLICT));
    }

    /// The entry of an applied, available ConfigMap says so in few bytes: a Work of 50 of them
    /// is written to the hub (and cached by the syncer and the splitter) on every change.
    #[test]
    fn the_entry_of_an_applied_object_is_compact() {
        let cm = obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "config-0042", "namespace": "team-a", "resourceVersion": "123456"}}));
        let identity = ManifestIdentity {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            resource: Some("configmaps".into()),
            namespace: Some("team-a".into()),
            name: "config-0042".into(),
        };
        let entry = manifest_entry(
            7,
            &identity,
            &Outcome::Applied(Box::new(cm)),
            None,
            None,
            Timestamp::from_second(1_800_000_000).expect("time"),
        );
        let json = serde_json::to_string(&entry).expect("serializes");
        assert!(json.len() <= 240, "{} bytes: {json}", json.len());
        let back: ManifestStatus = serde_json::from_str(&json).expect("deserializes");
        assert_eq!(back, entry);
    }
}
