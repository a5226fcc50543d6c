//! Pure: where a placed Service has no endpoints.
//!
//! A Service goes to every member its Placement chooses, as any object does: a client in any
//! member finds it by name, and a member that later runs the workload's pods (a scale-up, a
//! failover) serves it at once, without a Service being created or deleted under load balancers
//! and DNS. But when the Service selects the pods of a workload placed with it whose replicas are
//! divided, a member that runs none of them has a Service without endpoints: its clients reach
//! nothing there. That is said on the Service's decision for that member (its `note`), naming
//! where the pods run; making the other members' endpoints reachable is the job of multi-cluster
//! Services.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_api::ObjectDecision;
use serde_json::Value;

use crate::keys::ObjectKey;

/// The kinds whose pods a Service may select, with their pod template's labels.
const WORKLOADS: [&str; 5] = [
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "DaemonSet",
    "Job",
];

/// Adds a note to each of a placed Service's members that runs none of the pods it selects
/// among the workloads placed with it. `objects` are the placed objects as the hub has them.
pub fn note_empty_members(
    decisions: &mut [(ObjectKey, ObjectDecision)],
    objects: &BTreeMap<ObjectKey, &Value>,
) {
    let runs_on = |d: &ObjectDecision| -> BTreeSet<String> {
        d.clusters
            .iter()
            .filter(|c| c.replicas.is_none_or(|r| r > 0))
            .map(|c| c.cluster.clone())
            .collect()
    };
    let mut notes: Vec<(usize, BTreeMap<String, String>)> = Vec::new();
    for (i, (key, decision)) in decisions.iter().enumerate() {
        if key.kind != "Service" || key.api_version != "v1" {
            continue;
        }
        let Some(selector) = objects
            .get(key)
            .and_then(|s| s["spec"]["selector"].as_object())
            .filter(|s| !s.is_empty())
        else {
            continue;
        };
        let mut running = BTreeSet::new();
        let mut matched = Vec::new();
        for (other, d) in decisions.iter() {
            if !WORKLOADS.contains(&other.kind.as_str()) || d.overridden_by.is_some() {
                continue;
            }
            let labels = objects
                .get(other)
                .and_then(|o| o["spec"]["template"]["metadata"]["labels"].as_object());
            let selects = labels.is_some_and(|l| selector.iter().all(|(k, v)| l.get(k) == Some(v)));
            if selects {
                matched.push(format!("{} {}", other.kind, other.name));
                running.extend(runs_on(d));
            }
        }
        if matched.is_empty() {
            continue;
        }
        let empty: BTreeMap<String, String> = decision
            .clusters
            .iter()
            .filter(|c| !running.contains(&c.cluster))
            .map(|c| {
                (
                    c.cluster.clone(),
                    format!(
                        "no endpoints here: none of the pods it selects run in this member ({} run on {})",
                        matched.join(", "),
                        if running.is_empty() {
                            "no member".to_string()
                        } else {
                            running.iter().cloned().collect::<Vec<_>>().join(", ")
                        }
                    ),
                )
            })
            .collect();
        if !empty.is_empty() {
            notes.push((i, empty));
        }
    }
    for (i, empty) in notes {
        for c in &mut decisions[i].1.clusters {
            if let Some(note) = empty.get(&c.cluster) {
                c.note = Some(note.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::ClusterDecision;
    use serde_json::json;

    fn decision(clusters: &[(&str, Option<i32>)]) -> ObjectDecision {
        ObjectDecision {
            clusters: clusters
                .iter()
                .map(|(c, r)| ClusterDecision {
                    cluster: c.to_string(),
                    replicas: *r,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_service_says_which_members_run_none_of_its_pods() {
        let web = ObjectKey::new("apps/v1", "Deployment", "web");
        let svc = ObjectKey::new("v1", "Service", "web");
        let other = ObjectKey::new("v1", "Service", "external");
        let web_object = json!({"spec": {"template": {"metadata": {"labels": {"app": "web", "tier": "front"}}}}});
        let svc_object = json!({"spec": {"selector": {"app": "web"}}});
        let other_object = json!({"spec": {"selector": {"app": "elsewhere"}}});
        let objects: BTreeMap<ObjectKey, &Value> = [
            (web.clone(), &web_object),
            (svc.clone(), &svc_object),
            (other.clone(), &other_object),
        ]
        .into();
        let everywhere = [("m1", None), ("m2", None), ("m3", None)];
        let mut decisions = vec![
            (
                web,
                decision(&[("m1", Some(2)), ("m2", Some(0)), ("m3", Some(1))]),
            ),
            (svc, decision(&everywhere)),
            (other, decision(&everywhere)),
        ];
        note_empty_members(&mut decisions, &objects);
        let notes: Vec<Option<&str>> = decisions[1]
            .1
            .clusters
            .iter()
            .map(|c| c.note.as_deref())
            .collect();
        assert!(notes[0].is_none() && notes[2].is_none(), "{notes:?}");
        let note = notes[1].expect("a note on m2");
        assert!(note.contains("Deployment web run on m1, m3"), "{note}");
        // A Service of pods placed elsewhere says nothing.
        assert!(decisions[2].1.clusters.iter().all(|c| c.note.is_none()));
    }
}
