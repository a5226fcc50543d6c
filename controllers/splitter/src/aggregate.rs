//! Pure status aggregation: the hub Deployment's status is the truth of all its copies.

use flotilla_api::{Work, annotations, conditions};
use serde_json::{Value, json};

use crate::division::{Division, describe};

/// What one member copy reports, read from its Work.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Copy {
    pub cluster: String,
    /// The Work renders the hub object's current generation and the member applied it.
    pub current: bool,
    /// The member's Deployment observed its current spec.
    pub observed: bool,
    pub available: bool,
    pub replicas: i64,
    pub updated: i64,
    pub ready: i64,
    pub available_replicas: i64,
    pub unavailable: i64,
}

fn condition_true(work: &Work, type_: &str) -> bool {
    work.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
        .is_some_and(|c| c.status == "True" && c.observed_generation == work.metadata.generation)
}

/// Reads the copy of a Deployment from its Work.
pub fn copy_of(work: &Work, cluster: &str, hub_generation: Option<i64>) -> Copy {
    let rendered = work
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::SOURCE_GENERATION))
        .and_then(|g| g.parse::<i64>().ok());
    let manifest = work.status.as_ref().and_then(|s| s.manifests.first());
    let status = manifest
        .and_then(|m| m.status.clone())
        .unwrap_or(Value::Null);
    let int = |k: &str| status.get(k).and_then(Value::as_i64).unwrap_or(0);
    let observed = manifest.is_some_and(|m| match (m.generation, m.observed_generation) {
        (Some(g), Some(o)) => o >= g,
        _ => false,
    });
    Copy {
        cluster: cluster.to_string(),
        current: rendered.is_some()
            && rendered == hub_generation
            && condition_true(work, conditions::APPLIED),
        observed,
        available: condition_true(work, conditions::AVAILABLE),
        replicas: int("replicas"),
        updated: int("updatedReplicas"),
        ready: int("readyReplicas"),
        available_replicas: int("availableReplicas"),
        unavailable: int("unavailableReplicas"),
    }
}

/// The hub Deployment's status from its copies: counters summed; `observedGeneration` only once
/// every copy applied and observed the current generation; `Available` computed from the copies;
/// `Placed` giving the distribution.
pub fn deployment_status(
    generation: Option<i64>,
    desired: u32,
    copies: &[Copy],
    division: &Division,
    now: &str,
) -> Value {
    let sum = |f: fn(&Copy) -> i64| copies.iter().map(f).sum::<i64>();
    let all_current = !copies.is_empty() && copies.iter().all(|c| c.current && c.observed);
    let available = sum(|c| c.available_replicas);
    let available_ok =
        all_current && copies.iter().all(|c| c.available) && available >= i64::from(desired);
    let condition = |type_: &str, ok: bool, reason: &str, message: String| {
        json!({"type": type_, "status": if ok { "True" } else { "False" }, "reason": reason,
               "message": message, "lastUpdateTime": now, "lastTransitionTime": now})
    };
    let placed = !division.is_empty();
    let mut status = json!({
        "replicas": sum(|c| c.replicas),
        "updatedReplicas": sum(|c| c.updated),
        "readyReplicas": sum(|c| c.ready),
        "availableReplicas": available,
        "unavailableReplicas": sum(|c| c.unavailable),
        "conditions": [
            condition(
                "Available",
                available_ok,
                if available_ok { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" },
                format!("{available} of {desired} replicas available across {} member(s)", copies.len()),
            ),
            condition(
                "Progressing",
                all_current,
                if all_current { "NewReplicaSetAvailable" } else { "ReplicaSetUpdating" },
                if all_current { "every member runs the current generation".to_string() } else { "members are applying the current generation".to_string() },
            ),
            condition(
                "Placed",
                placed,
                if placed { "Placed" } else { "NoEligibleCluster" },
                if placed { describe(division) } else { "no member is eligible".to_string() },
            ),
        ],
    });
    if all_current && let Some(g) = generation {
        status["observedGeneration"] = json!(g);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(cluster: &str, replicas: i64, available: bool) -> Copy {
        Copy {
            cluster: cluster.into(),
            current: true,
            observed: true,
            available,
            replicas,
            updated: replicas,
            ready: replicas,
            available_replicas: if available { replicas } else { 0 },
            unavailable: if available { 0 } else { replicas },
        }
    }

    fn division(pairs: &[(&str, u32)]) -> Division {
        pairs.iter().map(|(c, n)| (c.to_string(), *n)).collect()
    }

    #[test]
    fn counters_are_summed_and_availability_computed() {
        let d = division(&[("m1", 4), ("m2", 3), ("m3", 3)]);
        let s = deployment_status(
            Some(2),
            10,
            &[
                copy("m1", 4, true),
                copy("m2", 3, true),
                copy("m3", 3, true),
            ],
            &d,
            "t",
        );
        assert_eq!(s["availableReplicas"], 10);
        assert_eq!(s["observedGeneration"], 2);
        assert_eq!(s["conditions"][0]["status"], "True");
        assert_eq!(s["conditions"][2]["message"], "m1=4 m2=3 m3=3");

        let s = deployment_status(
            Some(2),
            10,
            &[
                copy("m1", 4, true),
                copy("m2", 3, false),
                copy("m3", 3, true),
            ],
            &d,
            "t",
        );
        assert_eq!(s["availableReplicas"], 7);
        assert_eq!(s["unavailableReplicas"], 3);
        assert_eq!(s["conditions"][0]["status"], "False");
    }

    #[test]
    fn observed_generation_waits_for_every_copy() {
        let mut behind = copy("m2", 3, true);
        behind.current = false;
        let s = deployment_status(
            Some(3),
            7,
            &[copy("m1", 4, true), behind],
            &division(&[("m1", 4), ("m2", 3)]),
            "t",
        );
        assert!(s.get("observedGeneration").is_none());
        assert_eq!(s["conditions"][1]["status"], "False");
    }
}
