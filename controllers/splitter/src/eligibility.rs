//! Pure cluster selection: which members a Placement may use, with a reason for every member it
//! may not, and their weights for replica division.

use std::collections::BTreeMap;

use flotilla_api::placement::{ReplicaDivision, ReplicaSchedulingType, tolerates_all};
use flotilla_api::{Cluster, PlacementSpec, conditions, reasons};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;

use crate::division::Candidate;

/// A member a Placement may not use, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Excluded {
    pub cluster: String,
    pub reason: &'static str,
    pub message: String,
}

/// The outcome of cluster selection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// Eligible members with their division weights, by name.
    pub candidates: Vec<Candidate>,
    pub excluded: Vec<Excluded>,
}

/// Whether `labels` match a Kubernetes label selector (`matchLabels` and `matchExpressions` with
/// `In`, `NotIn`, `Exists`, `DoesNotExist`). An empty selector matches everything; an unknown
/// operator matches nothing.
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let plain = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let expressions = selector.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let values = e.values.clone().unwrap_or_default();
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    plain && expressions
}

fn condition_status<'a>(cluster: &'a Cluster, type_: &str) -> Option<(&'a str, &'a str)> {
    cluster
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.as_str(), c.reason.as_str()))
}

/// Allocatable pods of a member, its capacity for `division: Capacity`.
fn capacity(cluster: &Cluster) -> u64 {
    cluster
        .status
        .as_ref()
        .and_then(|s| s.allocatable.get("pods"))
        .and_then(|q| q.0.parse::<u64>().ok())
        .unwrap_or(0)
}

/// Selects the members `spec` may place work on, in name order.
///
/// A member is eligible when it is accepted and Ready, not cordoned, every `NoSchedule` and
/// `NoExecute` taint is tolerated, and it matches the affinity (names and label selector).
/// `maxClusters` then keeps the first members by name (stable across reconciliations).
pub fn select(spec: &PlacementSpec, clusters: &[&Cluster]) -> Selection {
    let mut sorted: Vec<&Cluster> = clusters.to_vec();
    sorted.sort_by_key(|c| c.name_any());
    let mut selection = Selection::default();
    let affinity = spec.cluster_affinity.clone().unwrap_or_default();
    for cluster in sorted {
        let name = cluster.name_any();
        let exclude = |reason: &'static str, message: String| Excluded {
            cluster: name.clone(),
            reason,
            message,
        };
        if !affinity.cluster_names.is_empty() && !affinity.cluster_names.contains(&name) {
            continue; // Not asked for: neither candidate nor excluded.
        }
        if let Some(sel) = &affinity.label_selector
            && !selector_matches(
                sel,
                cluster.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()),
            )
        {
            continue;
        }
        if condition_status(cluster, conditions::ACCEPTED).is_none_or(|(s, _)| s != "True") {
            selection.excluded.push(exclude(
                reasons::NO_ELIGIBLE_CLUSTER,
                "the Cluster is not accepted".into(),
            ));
            continue;
        }
        match condition_status(cluster, conditions::READY) {
            Some(("True", _)) => {}
            Some((status, reason)) => {
                selection.excluded.push(exclude(
                    reasons::NO_ELIGIBLE_CLUSTER,
                    format!("the Cluster is not Ready ({status}, {reason})"),
                ));
                continue;
            }
            None => {
                selection.excluded.push(exclude(
                    reasons::NO_ELIGIBLE_CLUSTER,
                    "the Cluster has reported no health yet".into(),
                ));
                continue;
            }
        }
        if cluster.spec.unschedulable {
            selection.excluded.push(exclude(
                reasons::CORDONED,
                "the Cluster is cordoned (spec.unschedulable)".into(),
            ));
            continue;
        }
        if !tolerates_all(&spec.tolerations, &cluster.spec.taints) {
            let taints: Vec<String> = cluster
                .spec
                .taints
                .iter()
                .map(|t| format!("{}:{:?}", t.key, t.effect))
                .collect();
            selection.excluded.push(exclude(
                reasons::TAINTED,
                format!(
                    "the Placement does not tolerate the taints {}",
                    taints.join(", ")
                ),
            ));
            continue;
        }
        let weight = match (
            spec.replica_scheduling.type_,
            spec.replica_scheduling.division,
        ) {
            (ReplicaSchedulingType::Divided, Some(ReplicaDivision::Weighted)) => spec
                .replica_scheduling
                .weights
                .iter()
                .find(|w| w.cluster == name)
                .map(|w| w.weight)
                .unwrap_or(cluster.spec.weight),
            (ReplicaSchedulingType::Divided, Some(ReplicaDivision::Capacity)) => {
                i32::try_from(capacity(cluster)).unwrap_or(i32::MAX)
            }
            _ => 1,
        };
        selection
            .candidates
            .push(Candidate::new(name, u64::try_from(weight).unwrap_or(0)));
    }
    if let Some(max) = affinity.max_clusters.and_then(|m| usize::try_from(m).ok()) {
        selection.candidates.truncate(max);
    }
    selection
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(name: &str, ready: &str, extra: serde_json::Value) -> Cluster {
        let mut spec = json!({"syncMode": "Push", "kubeconfigSecretRef": {"name": "kc"}});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                s.insert(k.clone(), v.clone());
            }
        }
        serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Cluster",
            "metadata": {"name": name, "labels": {"region": if name.ends_with('1') { "eu" } else { "us" }}},
            "spec": spec,
            "status": {
                "allocatable": {"pods": "100"},
                "conditions": [
                    {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                    {"type": "Ready", "status": ready, "reason": "Reachable", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
                ]
            }
        }))
        .expect("cluster")
    }

    fn spec(v: serde_json::Value) -> PlacementSpec {
        serde_json::from_value(v).expect("placement spec")
    }

    fn names(s: &Selection) -> Vec<&str> {
        s.candidates.iter().map(|c| c.cluster.as_str()).collect()
    }

    #[test]
    fn ready_accepted_untainted_members_are_eligible() {
        let a = cluster("member1", "True", json!({}));
        let b = cluster("member2", "Unknown", json!({}));
        let c = cluster("member3", "True", json!({"unschedulable": true}));
        let d = cluster(
            "member4",
            "True",
            json!({"taints": [{"key": "maintenance", "effect": "NoSchedule"}]}),
        );
        let s = select(&spec(json!({})), &[&d, &c, &b, &a]);
        assert_eq!(names(&s), vec!["member1"]);
        let reasons: Vec<(&str, &str)> = s
            .excluded
            .iter()
            .map(|e| (e.cluster.as_str(), e.reason))
            .collect();
        assert_eq!(
            reasons,
            vec![
                ("member2", reasons::NO_ELIGIBLE_CLUSTER),
                ("member3", reasons::CORDONED),
                ("member4", reasons::TAINTED)
            ]
        );
        let tolerant = spec(json!({"tolerations": [{"key": "maintenance", "operator": "Exists"}]}));
        assert_eq!(
            names(&select(&tolerant, &[&a, &d])),
            vec!["member1", "member4"]
        );
    }

    #[test]
    fn affinity_and_max_clusters() {
        let cs: Vec<Cluster> = (1..=4)
            .map(|i| cluster(&format!("member{i}"), "True", json!({})))
            .collect();
        let refs: Vec<&Cluster> = cs.iter().collect();
        let by_label =
            spec(json!({"clusterAffinity": {"labelSelector": {"matchLabels": {"region": "us"}}}}));
        assert_eq!(
            names(&select(&by_label, &refs)),
            vec!["member2", "member3", "member4"]
        );
        let by_name = spec(
            json!({"clusterAffinity": {"clusterNames": ["member4", "member2"], "maxClusters": 1}}),
        );
        assert_eq!(names(&select(&by_name, &refs)), vec!["member2"]);
    }

    #[test]
    fn weights_follow_the_division() {
        let a = cluster("member1", "True", json!({"weight": 5}));
        let b = cluster("member2", "True", json!({}));
        let weighted = spec(
            json!({"replicaScheduling": {"type": "Divided", "division": "Weighted", "weights": [{"cluster": "member2", "weight": 3}]}}),
        );
        let s = select(&weighted, &[&a, &b]);
        assert_eq!(
            s.candidates,
            vec![Candidate::new("member1", 5), Candidate::new("member2", 3)]
        );
        let capacity =
            spec(json!({"replicaScheduling": {"type": "Divided", "division": "Capacity"}}));
        assert_eq!(
            select(&capacity, &[&a]).candidates,
            vec![Candidate::new("member1", 100)]
        );
    }

    #[test]
    fn label_selector_expressions() {
        let labels: BTreeMap<String, String> = [("env".to_string(), "prod".to_string())].into();
        let sel: LabelSelector = serde_json::from_value(json!({"matchExpressions": [
            {"key": "env", "operator": "In", "values": ["prod", "staging"]},
            {"key": "gpu", "operator": "DoesNotExist"}
        ]}))
        .expect("selector");
        assert!(selector_matches(&sel, &labels));
        let sel: LabelSelector = serde_json::from_value(
            json!({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]}),
        )
        .expect("selector");
        assert!(!selector_matches(&sel, &labels));
    }
}
