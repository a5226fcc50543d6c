//! Pure cluster selection: which members a Placement may use, with a reason for every member it
//! may not, and their weights for replica division.
//!
//! A member is a *candidate* (takes new work), *held* (keeps the work it runs, takes nothing new:
//! cordoned, an untolerated `NoSchedule` taint, or not Ready for less than the failover
//! toleration) or *excluded* (its work moves: not accepted, an untolerated `NoExecute` taint —
//! a drain — or not Ready for longer than the toleration). Time-bound states say when to look
//! again.

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_api::cluster::{Taint, TaintEffect};
use flotilla_api::placement::{ReplicaDivision, ReplicaSchedulingType, Toleration};
use flotilla_api::{Cluster, PlacementSpec, conditions, reasons};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::jiff::Timestamp;
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
    /// Members that may run work, with their division weights, by name; held ones
    /// ([`Candidate::held`]) keep what they run but take nothing new.
    pub candidates: Vec<Candidate>,
    /// Why each held candidate is held.
    pub held: Vec<Excluded>,
    pub excluded: Vec<Excluded>,
    /// When a time-bound state (failover toleration, a taint's `tolerationSeconds`) runs out and
    /// the selection must be made again.
    pub recheck_after: Option<Duration>,
}

impl Selection {
    fn recheck_in(&mut self, after: Duration) {
        self.recheck_after = Some(self.recheck_after.map_or(after, |r| r.min(after)));
    }
}

/// What a member's taints mean for a Placement.
enum TaintVerdict {
    Tolerated,
    /// An untolerated `NoSchedule` taint: no new work.
    Hold(String),
    /// An untolerated `NoExecute` taint, or its `tolerationSeconds` ran out: the work moves.
    Evict(String),
}

fn describe_taint(t: &Taint) -> String {
    match &t.value {
        Some(v) => format!("{}={v}:{:?}", t.key, t.effect),
        None => format!("{}:{:?}", t.key, t.effect),
    }
}

/// The rules of Pod tolerations, with `tolerationSeconds` counted from the taint's `timeAdded`
/// (stamped by the registration controller). `PreferNoSchedule` never keeps work away.
fn taint_verdict(
    tolerations: &[Toleration],
    taints: &[Taint],
    now: Timestamp,
    selection: &mut Selection,
) -> TaintVerdict {
    let mut hold = Vec::new();
    for taint in taints
        .iter()
        .filter(|t| t.effect != TaintEffect::PreferNoSchedule)
    {
        let matching: Vec<&Toleration> =
            tolerations.iter().filter(|t| t.tolerates(taint)).collect();
        if matching.is_empty() {
            if taint.effect == TaintEffect::NoExecute {
                return TaintVerdict::Evict(format!(
                    "the Placement does not tolerate the taint {} (its work moves)",
                    describe_taint(taint)
                ));
            }
            hold.push(describe_taint(taint));
            continue;
        }
        if taint.effect != TaintEffect::NoExecute {
            continue;
        }
        // Tolerated for the longest tolerationSeconds of the matching tolerations (none: forever).
        let limit = matching
            .iter()
            .map(|t| t.toleration_seconds)
            .try_fold(0i64, |max, s| s.map(|s| max.max(s)));
        if let (Some(limit), Some(added)) = (limit, taint.time_added.as_ref()) {
            let elapsed = now.duration_since(added.0).as_secs();
            if elapsed >= limit {
                return TaintVerdict::Evict(format!(
                    "the taint {} was tolerated for {limit}s (its work moves)",
                    describe_taint(taint)
                ));
            }
            selection.recheck_in(Duration::from_secs(
                u64::try_from(limit - elapsed).unwrap_or(0),
            ));
        }
    }
    if hold.is_empty() {
        TaintVerdict::Tolerated
    } else {
        TaintVerdict::Hold(format!(
            "the Placement does not tolerate the taints {} (no new work)",
            hold.join(", ")
        ))
    }
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

fn condition<'a>(
    cluster: &'a Cluster,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    cluster
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
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

/// Selects the members `spec` may place work on at `now`, in name order (see the module
/// documentation for candidates, held and excluded members). Only members that match the
/// affinity (names and label selector) are considered; `maxClusters` then keeps the first
/// candidates by name (stable across reconciliations).
pub fn select(spec: &PlacementSpec, clusters: &[&Cluster], now: Timestamp) -> Selection {
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
        if cluster.metadata.deletion_timestamp.is_some() {
            selection.excluded.push(exclude(
                reasons::CLUSTER_DELETING,
                "the Cluster is being deleted: its work moves, and what runs there is left to registration (orphaned in push mode)".into(),
            ));
            continue;
        }
        if condition(cluster, conditions::ACCEPTED).is_none_or(|c| c.status != "True") {
            selection.excluded.push(exclude(
                reasons::NO_ELIGIBLE_CLUSTER,
                "the Cluster is not accepted".into(),
            ));
            continue;
        }
        let mut held: Option<(&'static str, String)> = None;
        match condition(cluster, conditions::READY) {
            Some(c) if c.status == "True" => {}
            None => {
                selection.excluded.push(exclude(
                    reasons::NO_ELIGIBLE_CLUSTER,
                    "the Cluster has reported no health yet".into(),
                ));
                continue;
            }
            Some(c) => {
                let state = format!("the Cluster is not Ready ({}, {})", c.status, c.reason);
                if !spec.failover.enabled {
                    held = Some((reasons::NOT_READY, format!("{state}; failover is off")));
                } else {
                    let since = now.duration_since(c.last_transition_time.0).as_secs();
                    let toleration = spec.failover.toleration_seconds.max(0);
                    if since >= toleration {
                        selection.excluded.push(exclude(
                            reasons::FAILED_OVER,
                            format!("{state} since {}, longer than the failover toleration of {toleration}s: its work moves", c.last_transition_time.0),
                        ));
                        continue;
                    }
                    selection.recheck_in(Duration::from_secs(
                        u64::try_from(toleration - since).unwrap_or(0),
                    ));
                    held = Some((
                        reasons::NOT_READY,
                        format!(
                            "{state} since {}; its work moves once that lasts {toleration}s",
                            c.last_transition_time.0
                        ),
                    ));
                }
            }
        }
        match taint_verdict(&spec.tolerations, &cluster.spec.taints, now, &mut selection) {
            TaintVerdict::Evict(message) => {
                selection.excluded.push(exclude(reasons::TAINTED, message));
                continue;
            }
            TaintVerdict::Hold(message) => {
                held.get_or_insert((reasons::TAINTED, message));
            }
            TaintVerdict::Tolerated => {}
        }
        if cluster.spec.unschedulable {
            held.get_or_insert((
                reasons::CORDONED,
                "the Cluster is cordoned (spec.unschedulable): no new work".into(),
            ));
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
        let weight = u64::try_from(weight).unwrap_or(0);
        match held {
            Some((reason, message)) => {
                selection.held.push(exclude(reason, message));
                selection.candidates.push(Candidate::held(name, weight));
            }
            None => selection.candidates.push(Candidate::new(name, weight)),
        }
    }
    if let Some(max) = affinity.max_clusters.and_then(|m| usize::try_from(m).ok()) {
        selection.candidates.truncate(max);
    }
    if spec.replica_scheduling.type_ == ReplicaSchedulingType::Divided
        && spec.replica_scheduling.division == Some(ReplicaDivision::Capacity)
    {
        bound_reported_capacity(&mut selection.candidates);
    }
    selection
}

/// Bounds what members say of their own capacity: no candidate's capacity counts for more than
/// the other candidates' together (those that take new work), so that no member, by reporting
/// (or having) a huge capacity, takes more than half of a workload that others could run. A
/// member's capacity is what it reports (a pull agent writes it; a push member's nodes say it),
/// and a member that lies, or is compromised, would otherwise attract every replica and run none.
/// A lone candidate keeps its own.
fn bound_reported_capacity(candidates: &mut [Candidate]) {
    let total: u64 = candidates
        .iter()
        .filter(|c| !c.held)
        .map(|c| c.weight)
        .sum();
    for c in candidates.iter_mut().filter(|c| !c.held) {
        let others = total - c.weight;
        if others > 0 {
            c.weight = c.weight.min(others);
        }
    }
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

    /// 10 s after the clusters' conditions last changed.
    fn now() -> Timestamp {
        "2026-01-01T00:00:10Z".parse().expect("timestamp")
    }

    /// Members by reason.
    type Reasons<'a> = Vec<(&'a str, &'a str)>;

    /// Candidates taking new work, held members and excluded members.
    fn classes(s: &Selection) -> (Vec<&str>, Reasons<'_>, Reasons<'_>) {
        (
            s.candidates
                .iter()
                .filter(|c| !c.held)
                .map(|c| c.cluster.as_str())
                .collect(),
            s.held
                .iter()
                .map(|e| (e.cluster.as_str(), e.reason))
                .collect(),
            s.excluded
                .iter()
                .map(|e| (e.cluster.as_str(), e.reason))
                .collect(),
        )
    }

    #[test]
    fn a_cluster_being_deleted_takes_nothing_and_keeps_nothing() {
        let a = cluster("member1", "True", json!({}));
        let mut b = cluster("member2", "True", json!({}));
        b.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-01-01T00:00:05Z".parse().expect("timestamp"),
        ));
        let s = select(&spec(json!({})), &[&a, &b], now());
        assert_eq!(
            classes(&s),
            (
                vec!["member1"],
                vec![],
                vec![("member2", reasons::CLUSTER_DELETING)]
            )
        );
    }

    #[test]
    fn members_take_new_work_keep_theirs_or_lose_it() {
        let a = cluster("member1", "True", json!({}));
        let b = cluster("member2", "Unknown", json!({}));
        let c = cluster("member3", "True", json!({"unschedulable": true}));
        let d = cluster(
            "member4",
            "True",
            json!({"taints": [{"key": "maintenance", "effect": "NoSchedule"}]}),
        );
        let e = cluster(
            "member5",
            "True",
            json!({"taints": [{"key": "drain", "effect": "NoExecute"}]}),
        );
        let s = select(&spec(json!({})), &[&e, &d, &c, &b, &a], now());
        assert_eq!(
            classes(&s),
            (
                vec!["member1"],
                vec![
                    ("member2", reasons::NOT_READY),
                    ("member3", reasons::CORDONED),
                    ("member4", reasons::TAINTED)
                ],
                vec![("member5", reasons::TAINTED)],
            )
        );
        assert!(
            s.candidates
                .iter()
                .any(|c| c.cluster == "member2" && c.held)
        );
        // member2's failover toleration (20 s) runs out 10 s from now.
        assert_eq!(s.recheck_after, Some(Duration::from_secs(10)));
        let tolerant = spec(json!({"tolerations": [{"key": "maintenance", "operator": "Exists"}]}));
        assert_eq!(
            classes(&select(&tolerant, &[&a, &d], now())).0,
            vec!["member1", "member4"]
        );
    }

    #[test]
    fn failover_moves_work_after_the_toleration_only_when_enabled() {
        let b = cluster("member2", "False", json!({}));
        let short = spec(json!({"failover": {"tolerationSeconds": 5}}));
        let s = select(&short, &[&b], now());
        assert_eq!(classes(&s).2, vec![("member2", reasons::FAILED_OVER)]);
        assert!(
            s.excluded[0].message.contains("since 2026-01-01T00:00:00Z"),
            "{}",
            s.excluded[0].message
        );
        let off = spec(json!({"failover": {"enabled": false}}));
        let s = select(&off, &[&b], now());
        assert_eq!(classes(&s).1, vec![("member2", reasons::NOT_READY)]);
        assert_eq!(s.recheck_after, None);
    }

    #[test]
    fn no_execute_tolerations_last_their_seconds_from_time_added() {
        let e = cluster(
            "member5",
            "True",
            json!({"taints": [{"key": "drain", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"}]}),
        );
        let for_a_while = |secs: i64| {
            spec(
                json!({"tolerations": [{"key": "drain", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": secs}]}),
            )
        };
        let s = select(&for_a_while(60), &[&e], now());
        assert_eq!(classes(&s).0, vec!["member5"]);
        assert_eq!(s.recheck_after, Some(Duration::from_secs(50)));
        let s = select(&for_a_while(10), &[&e], now());
        assert_eq!(classes(&s).2, vec![("member5", reasons::TAINTED)]);
        let forever = spec(json!({"tolerations": [{"key": "drain", "operator": "Exists"}]}));
        let s = select(&forever, &[&e], now());
        assert_eq!((classes(&s).0, s.recheck_after), (vec!["member5"], None));
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
            names(&select(&by_label, &refs, now())),
            vec!["member2", "member3", "member4"]
        );
        let by_name = spec(
            json!({"clusterAffinity": {"clusterNames": ["member4", "member2"], "maxClusters": 1}}),
        );
        assert_eq!(names(&select(&by_name, &refs, now())), vec!["member2"]);
    }

    #[test]
    fn weights_follow_the_division() {
        let a = cluster("member1", "True", json!({"weight": 5}));
        let b = cluster("member2", "True", json!({}));
        let weighted = spec(
            json!({"replicaScheduling": {"type": "Divided", "division": "Weighted", "weights": [{"cluster": "member2", "weight": 3}]}}),
        );
        let s = select(&weighted, &[&a, &b], now());
        assert_eq!(
            s.candidates,
            vec![Candidate::new("member1", 5), Candidate::new("member2", 3)]
        );
        let capacity =
            spec(json!({"replicaScheduling": {"type": "Divided", "division": "Capacity"}}));
        assert_eq!(
            select(&capacity, &[&a], now()).candidates,
            vec![Candidate::new("member1", 100)]
        );
    }

    #[test]
    fn no_member_takes_more_than_half_of_a_capacity_division_by_what_it_reports() {
        let capacity =
            spec(json!({"replicaScheduling": {"type": "Divided", "division": "Capacity"}}));
        let pods = |n: &str| json!({"allocatable": {"pods": n}});
        let mut liar = cluster("member1", "True", json!({}));
        let mut honest = cluster("member2", "True", json!({}));
        let mut small = cluster("member3", "True", json!({}));
        for (c, n) in [
            (&mut liar, "1000000"),
            (&mut honest, "110"),
            (&mut small, "30"),
        ] {
            let status = c.status.get_or_insert_default();
            status.allocatable =
                serde_json::from_value(pods(n)["allocatable"].clone()).expect("pods");
        }
        assert_eq!(
            select(&capacity, &[&liar, &honest, &small], now()).candidates,
            vec![
                Candidate::new("member1", 140),
                Candidate::new("member2", 110),
                Candidate::new("member3", 30)
            ],
            "the claim counts as much as the others together"
        );
        let division = crate::division::divide(
            10,
            &select(&capacity, &[&liar, &honest, &small], now()).candidates,
            &BTreeMap::new(),
            false,
        )
        .expect("divided");
        assert_eq!(division.get("member1"), Some(&5));
        // Alone, a member keeps what it reports; a held member does not count for the others.
        assert_eq!(
            select(&capacity, &[&liar], now()).candidates,
            vec![Candidate::new("member1", 1_000_000)]
        );
        let mut cordoned = honest.clone();
        cordoned.spec.unschedulable = true;
        assert_eq!(
            select(&capacity, &[&liar, &cordoned, &small], now()).candidates,
            vec![
                Candidate::new("member1", 30),
                Candidate::held("member2", 110),
                Candidate::new("member3", 30)
            ]
        );
        // Weights an admin gives are theirs: not bounded.
        let weighted = spec(
            json!({"replicaScheduling": {"type": "Divided", "division": "Weighted",
            "weights": [{"cluster": "member1", "weight": 9}, {"cluster": "member2", "weight": 1}]}}),
        );
        assert_eq!(
            select(&weighted, &[&liar, &honest], now()).candidates,
            vec![Candidate::new("member1", 9), Candidate::new("member2", 1)]
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
