//! The planner's rules on values: small `mk_*` builders for the observation, and a property
//! test of the safety invariant over random fleets.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use flotilla_api::{Cluster, Placement, Work, conditions};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::DynamicObject;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::observe::resource;

const NOW: &str = "2026-06-01T12:00:00Z";

fn now() -> Timestamp {
    NOW.parse().expect("time")
}

fn mk_cluster(name: &str, ready: &str) -> Arc<Cluster> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Cluster",
            "metadata": {"name": name},
            "spec": {"syncMode": "Push", "kubeconfigSecretRef": {"name": "kc"}},
            "status": {
                "allocatable": {"pods": "100"},
                "conditions": [
                    {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                     "lastTransitionTime": "2026-01-01T00:00:00Z"},
                    {"type": "Ready", "status": ready, "reason": "Reachable", "message": "",
                     "lastTransitionTime": "2026-01-01T00:00:00Z"}
                ]
            }
        }))
        .expect("cluster"),
    )
}

fn mk_deleting(cluster: Arc<Cluster>) -> Arc<Cluster> {
    let mut c = (*cluster).clone();
    c.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    Arc::new(c)
}

fn mk_placement(ns: &str, name: &str, spec: Value) -> Arc<Placement> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
            "metadata": {"name": name, "namespace": ns, "generation": 1,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": spec,
        }))
        .expect("placement"),
    )
}

fn mk_configmap(ns: &str, name: &str, uid: &str, data: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "uid": uid, "resourceVersion": "1"},
        "data": {"k": data},
    }))
    .expect("configmap")
}

fn mk_deployment(ns: &str, name: &str, uid: &str, replicas: u32) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "uid": uid, "generation": 1},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}}},
    }))
    .expect("deployment")
}

/// The hub's Work as the splitter wrote it, with the member's report: `Applied` and
/// `Available` for its current generation.
/// A Work as the splitter's cache holds it once the hub has it: lean (see [`lean`]), with the
/// given conditions.
fn mk_work(wanted: &Work, applied: bool, available: bool) -> Arc<Work> {
    let mut w = wanted.clone();
    lean(&mut w);
    w.metadata.uid = Some(format!("work-{}", wanted.name_any()));
    w.metadata.resource_version = Some("7".into());
    w.metadata.generation = Some(1);
    let condition = |type_: &str, ok: bool| {
        json!({"type": type_, "status": if ok { "True" } else { "False" }, "reason": "R",
               "message": "", "lastTransitionTime": NOW, "observedGeneration": 1})
    };
    w.status = Some(
        serde_json::from_value(json!({"conditions": [
            condition(conditions::APPLIED, applied),
            condition(conditions::AVAILABLE, available),
        ]}))
        .expect("status"),
    );
    Arc::new(w)
}

fn listed(objects: Vec<DynamicObject>) -> Vec<Listed> {
    let mut by_kind: BTreeMap<String, Vec<DynamicObject>> = BTreeMap::new();
    for o in objects {
        let kind = o.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default();
        by_kind.entry(kind).or_default().push(o);
    }
    by_kind
        .into_iter()
        .map(|(kind, objects)| Listed {
            resource: match kind.as_str() {
                "Deployment" => resource("apps", "v1", "Deployment", "deployments"),
                _ => resource("", "v1", "ConfigMap", "configmaps"),
            },
            objects,
        })
        .collect()
}

fn mk_observation(
    placement: Arc<Placement>,
    clusters: Vec<Arc<Cluster>>,
    objects: Vec<DynamicObject>,
    works: Vec<Arc<Work>>,
) -> Observation {
    Observation {
        neighbours: vec![placement.clone()],
        placement,
        now: now(),
        clusters,
        elsewhere: BTreeSet::new(),
        works,
        types: listed(objects),
        unsupported: Vec::new(),
        unreadable: Vec::new(),
        referenced: BTreeMap::new(),
        imports: BTreeMap::new(),
        absent_since: BTreeMap::new(),
    }
}

fn three() -> Vec<Arc<Cluster>> {
    ["m1", "m2", "m3"]
        .iter()
        .map(|c| mk_cluster(c, "True"))
        .collect()
}

/// The Works of a plan as the hub would have them once written and reported on.
fn as_written(p: &Plan, applied: bool, available: bool) -> Vec<Arc<Work>> {
    p.wanted
        .values()
        .map(|w| mk_work(w, applied, available))
        .collect()
}

#[test]
fn same_names_in_two_namespaces_never_share_a_work() {
    let a = plan(&mk_observation(
        mk_placement("team-a", "p", json!({})),
        three(),
        vec![mk_configmap("team-a", "web", "ua", "a")],
        vec![],
    ))
    .expect("plan");
    let b = plan(&mk_observation(
        mk_placement("team-b", "p", json!({})),
        three(),
        vec![mk_configmap("team-b", "web", "ub", "b")],
        vec![],
    ))
    .expect("plan");
    let names =
        |p: &Plan| -> BTreeSet<(String, String)> { p.wanted.values().map(key_of).collect() };
    assert_eq!(names(&a).len(), 3);
    assert!(
        names(&a).is_disjoint(&names(&b)),
        "{:?} {:?}",
        names(&a),
        names(&b)
    );
}

#[test]
fn the_cache_keeps_of_a_work_its_digest_and_what_a_pass_reads() {
    let p = plan(&mk_observation(
        mk_placement(
            "shop",
            "p",
            json!({"replicaScheduling": {"type": "Divided"}}),
        ),
        three(),
        vec![mk_deployment("shop", "web", "uw", 6)],
        vec![],
    ))
    .expect("plan");
    let wanted = p.wanted.values().next().expect("a Work");
    let cached = mk_work(wanted, true, true);
    let m = &cached.spec.manifests[0];
    assert_eq!(m.metadata.name.as_deref(), Some("web"));
    assert_eq!(
        m.data["spec"]["replicas"],
        wanted.spec.manifests[0].data["spec"]["replicas"]
    );
    assert!(
        m.data["spec"].get("template").is_none(),
        "no pod template kept: {m:?}"
    );
    assert_eq!(
        cached.annotations().get(CACHED_SPEC_DIGEST),
        Some(&spec_digest(&wanted.spec))
    );
    assert!(up_to_date(wanted, &cached));
    let mut changed = wanted.clone();
    changed.spec.manifests[0].data["spec"]["paused"] = json!(true);
    assert!(!up_to_date(&changed, &cached));
    // A Work not from the cache is compared by its own spec.
    assert!(up_to_date(wanted, wanted));
    assert!(!up_to_date(&changed, wanted));
}

#[test]
fn a_work_the_hub_already_has_as_wanted_is_not_written_again() {
    let placement = mk_placement("shop", "p", json!({}));
    let objects = vec![
        mk_configmap("shop", "a", "ua", "1"),
        mk_configmap("shop", "b", "ub", "1"),
    ];
    let first = plan(&mk_observation(
        placement.clone(),
        three(),
        objects.clone(),
        vec![],
    ))
    .expect("plan");
    assert_eq!(first.writes.len(), 6, "every copy is new");
    let works = as_written(&first, true, true);
    let again = plan(&mk_observation(
        placement.clone(),
        three(),
        objects,
        works.clone(),
    ))
    .expect("plan");
    assert!(again.writes.is_empty(), "{:?}", again.writes);
    assert!(again.deletes.is_empty());
    assert!(
        again.wanted.values().all(|w| w.spec.manifests.is_empty()),
        "a Work not to be written is kept without its manifest"
    );

    // One object edited: its three copies are written, nothing else.
    let edited = vec![
        mk_configmap("shop", "a", "ua", "2"),
        mk_configmap("shop", "b", "ub", "1"),
    ];
    let after_edit = plan(&mk_observation(placement, three(), edited, works)).expect("plan");
    assert_eq!(after_edit.writes.len(), 3);
    assert!(after_edit.writes.iter().all(|(uid, _)| uid == "ua"));
    assert!(
        after_edit
            .writes
            .iter()
            .all(|k| after_edit.wanted[k].spec.manifests[0].data["data"]["k"] == "2")
    );
}

#[test]
fn a_type_that_cannot_be_read_keeps_its_works() {
    let placement = mk_placement("shop", "p", json!({}));
    let first = plan(&mk_observation(
        placement.clone(),
        three(),
        vec![mk_configmap("shop", "a", "ua", "1")],
        vec![],
    ))
    .expect("plan");
    let mut obs = mk_observation(placement, three(), vec![], as_written(&first, true, true));
    obs.types.clear();
    obs.unreadable.push(Unreadable {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        forbidden: true,
        message: "forbidden".into(),
    });
    let p = plan(&obs).expect("plan");
    assert!(p.deletes.is_empty(), "{:?}", p.deletes);
    assert_eq!(p.kept.len(), 3);
    assert!(p.kept.values().all(|k| *k == Keep::TypeUnreadable));
}

#[test]
fn a_gone_object_keeps_its_works_for_the_grace_and_a_re_creation_keeps_them_for_good() {
    let placement = mk_placement("shop", "p", json!({}));
    let first = plan(&mk_observation(
        placement.clone(),
        three(),
        vec![mk_configmap("shop", "a", "old-uid", "1")],
        vec![],
    ))
    .expect("plan");
    let works = as_written(&first, true, true);

    // Deleted: kept at first, with a recheck, then deleted once the grace is over.
    let gone = plan(&mk_observation(
        placement.clone(),
        three(),
        vec![],
        works.clone(),
    ))
    .expect("plan");
    assert!(gone.deletes.is_empty());
    assert!(gone.kept.values().all(|k| *k == Keep::AwaitingGrace));
    assert!(gone.recheck_after.is_some_and(|r| r <= GONE_GRACE));
    let mut later = mk_observation(placement.clone(), three(), vec![], works.clone());
    later.absent_since = gone.absent.clone();
    later.now = now() + GONE_GRACE;
    let later = plan(&later).expect("plan");
    assert_eq!(later.deletes.len(), 3);
    assert!(later.deletes.iter().all(|d| d.why == Removal::ObjectGone));
    assert!(
        later
            .deletes
            .iter()
            .all(|d| d.uid.is_some() && d.resource_version.is_some()),
        "deletions carry preconditions"
    );

    // `kubectl replace --force`: the same name with a new UID takes the same Works over.
    let replaced = plan(&mk_observation(
        placement,
        three(),
        vec![mk_configmap("shop", "a", "new-uid", "1")],
        works,
    ))
    .expect("plan");
    assert!(replaced.deletes.is_empty(), "{:?}", replaced.deletes);
    assert_eq!(replaced.writes.len(), 3, "relabelled with the new UID");
}

#[test]
fn works_on_a_cluster_being_deleted_or_outside_the_selector_are_left_alone() {
    let placement = mk_placement("shop", "p", json!({}));
    let objects = vec![mk_configmap("shop", "a", "ua", "1")];
    let first = plan(&mk_observation(
        placement.clone(),
        three(),
        objects.clone(),
        vec![],
    ))
    .expect("plan");
    let works = as_written(&first, true, true);

    let mut clusters = three();
    clusters[0] = mk_deleting(clusters[0].clone());
    let p = plan(&mk_observation(
        placement.clone(),
        clusters,
        objects.clone(),
        works.clone(),
    ))
    .expect("plan");
    assert!(p.deletes.is_empty(), "{:?}", p.deletes);
    assert!(!p.wanted.keys().any(|(_, c)| c == "m1"), "not a target");
    assert_eq!(
        p.kept.values().collect::<Vec<_>>(),
        vec![&Keep::ClusterDeleting]
    );

    // Relabelled out of the splitter's --cluster-selector: it still exists.
    let mut obs = mk_observation(
        placement.clone(),
        three()[1..].to_vec(),
        objects.clone(),
        works.clone(),
    );
    obs.elsewhere.insert("m1".into());
    let p = plan(&obs).expect("plan");
    assert!(p.deletes.is_empty(), "{:?}", p.deletes);
    assert_eq!(
        p.kept.values().collect::<Vec<_>>(),
        vec![&Keep::ClusterElsewhere]
    );

    // Gone for good: its Work goes.
    let p = plan(&mk_observation(
        placement,
        three()[1..].to_vec(),
        objects,
        works,
    ))
    .expect("plan");
    assert_eq!(p.deletes.len(), 1);
    assert_eq!(p.deletes[0].why, Removal::ClusterGone);
}

#[test]
fn a_failed_members_copy_stays_until_its_replacements_are_available() {
    let placement = mk_placement(
        "shop",
        "p",
        json!({"replicaScheduling": {"type": "Divided"}, "failover": {"tolerationSeconds": 0}}),
    );
    let objects = vec![mk_deployment("shop", "web", "uw", 6)];
    let first = plan(&mk_observation(
        placement.clone(),
        three(),
        objects.clone(),
        vec![],
    ))
    .expect("plan");
    let works = as_written(&first, true, true);
    assert_eq!(first.wanted.len(), 3);

    let mut failed = three();
    failed[0] = mk_cluster("m1", "False");
    let moving = plan(&mk_observation(
        placement.clone(),
        failed.clone(),
        objects.clone(),
        works.clone(),
    ))
    .expect("plan");
    assert!(moving.deletes.is_empty(), "{:?}", moving.deletes);
    assert_eq!(
        moving.kept.values().collect::<Vec<_>>(),
        vec![&Keep::AwaitingReplacements]
    );
    // The replacements are written with more replicas; once available, the old copy goes.
    let mut hub: Vec<Arc<Work>> = works
        .iter()
        .filter(|w| w.cluster_name() == Some("m1"))
        .cloned()
        .collect();
    hub.extend(as_written(&moving, true, true));
    let moved = plan(&mk_observation(placement, failed, objects, hub)).expect("plan");
    assert_eq!(moved.deletes.len(), 1, "{:?}", moved.kept);
    assert_eq!(moved.deletes[0].why, Removal::Moved);
}

#[test]
fn scaled_to_zero_a_deployment_keeps_its_copies_at_zero() {
    let placement = mk_placement(
        "shop",
        "p",
        json!({"replicaScheduling": {"type": "Divided"}}),
    );
    let first = plan(&mk_observation(
        placement.clone(),
        three(),
        vec![mk_deployment("shop", "web", "uw", 3)],
        vec![],
    ))
    .expect("plan");
    let zero = plan(&mk_observation(
        placement,
        three(),
        vec![mk_deployment("shop", "web", "uw", 0)],
        as_written(&first, true, true),
    ))
    .expect("plan");
    assert!(zero.deletes.is_empty());
    assert_eq!(zero.wanted.len(), 3);
    assert!(
        zero.wanted
            .values()
            .all(|w| w.spec.manifests[0].data["spec"]["replicas"] == 0)
    );
}

// The safety invariant, over random fleets: a Work is deleted only when its hub object is gone
// (absent from the fresh list for at least the grace), is no longer selected, its Cluster no
// longer exists, or every copy that replaces it is available — and never when its type cannot
// be read, its Cluster is being deleted or is outside the splitter's selector.

#[derive(Clone, Debug)]
enum ClusterState {
    Ready,
    NotReady,
    Deleting,
    Elsewhere,
    Gone,
}

fn cluster_state() -> impl Strategy<Value = ClusterState> {
    prop_oneof![
        4 => Just(ClusterState::Ready),
        2 => Just(ClusterState::NotReady),
        1 => Just(ClusterState::Deleting),
        1 => Just(ClusterState::Elsewhere),
        1 => Just(ClusterState::Gone),
    ]
}

#[derive(Clone, Debug)]
struct Scenario {
    clusters: Vec<ClusterState>,
    /// Per object: on the hub now (and with a new UID), selected, replicas, copies available.
    objects: Vec<(bool, bool, bool, u32, bool)>,
    unreadable: bool,
    waited: bool,
    divided: bool,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        prop::collection::vec(cluster_state(), 1..5),
        prop::collection::vec(
            (
                any::<bool>(),
                any::<bool>(),
                prop::bool::weighted(0.8),
                0u32..7,
                any::<bool>(),
            ),
            1..5,
        ),
        prop::bool::weighted(0.2),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(clusters, objects, unreadable, waited, divided)| Scenario {
                clusters,
                objects,
                unreadable,
                waited,
                divided,
            },
        )
}

proptest! {
    #[test]
    fn a_copy_is_deleted_only_for_a_reason_that_proves_it_unwanted(s in scenario()) {
        let spec = if s.divided {
            json!({"replicaScheduling": {"type": "Divided"}, "failover": {"tolerationSeconds": 0},
                   "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                          "labelSelector": {"matchLabels": {"placed": "yes"}}}]})
        } else {
            json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap",
                                          "labelSelector": {"matchLabels": {"placed": "yes"}}}]})
        };
        let placement = mk_placement("shop", "p", spec);
        let label = |o: &mut DynamicObject, selected: bool| {
            o.labels_mut().insert("placed".into(), if selected { "yes" } else { "no" }.into());
        };
        let mk = |i: usize, uid: &str, replicas: u32| {
            if s.divided {
                mk_deployment("shop", &format!("o{i}"), uid, replicas)
            } else {
                mk_configmap("shop", &format!("o{i}"), uid, &replicas.to_string())
            }
        };
        // Before: every object selected and placed on every cluster, all healthy.
        let all: Vec<Arc<Cluster>> =
            (0..s.clusters.len()).map(|i| mk_cluster(&format!("m{i}"), "True")).collect();
        let before_objects: Vec<DynamicObject> = s.objects.iter().enumerate().map(|(i, o)| {
            let mut object = mk(i, &format!("u{i}"), o.3.max(1));
            label(&mut object, true);
            object
        }).collect();
        let before = plan(&mk_observation(placement.clone(), all, before_objects, vec![]))
            .expect("plan");
        let works: Vec<Arc<Work>> = before.wanted.values().map(|w| {
            let i: usize = w.annotations()[flotilla_api::annotations::SOURCE_NAME][1..]
                .parse().unwrap_or(0);
            mk_work(w, true, s.objects[i].4)
        }).collect();

        // Now: clusters change state, objects go, come back with another UID, or are unselected.
        let mut clusters = Vec::new();
        let mut elsewhere = BTreeSet::new();
        for (i, state) in s.clusters.iter().enumerate() {
            let name = format!("m{i}");
            match state {
                ClusterState::Ready => clusters.push(mk_cluster(&name, "True")),
                ClusterState::NotReady => clusters.push(mk_cluster(&name, "False")),
                ClusterState::Deleting => clusters.push(mk_deleting(mk_cluster(&name, "True"))),
                ClusterState::Elsewhere => { elsewhere.insert(name); }
                ClusterState::Gone => {}
            }
        }
        let mut objects = Vec::new();
        for (i, (present, recreated, selected, replicas, _)) in s.objects.iter().enumerate() {
            if !present { continue; }
            let uid = if *recreated { format!("u{i}-new") } else { format!("u{i}") };
            let mut object = mk(i, &uid, *replicas);
            label(&mut object, *selected);
            objects.push(object);
        }
        let mut obs = mk_observation(placement, clusters.clone(), objects.clone(), works.clone());
        obs.elsewhere = elsewhere.clone();
        if s.waited {
            obs.absent_since = works.iter()
                .filter_map(|w| source_uid_of(w))
                .map(|u| (u, now() - GONE_GRACE))
                .collect();
        }
        if s.unreadable {
            obs.types.clear();
            obs.unreadable.push(Unreadable {
                api_version: if s.divided { "apps/v1" } else { "v1" }.into(),
                kind: if s.divided { "Deployment" } else { "ConfigMap" }.into(),
                forbidden: false,
                message: "timeout".into(),
            });
        }
        let p = plan(&obs).expect("plan");

        let listed: BTreeMap<String, &DynamicObject> =
            objects.iter().map(|o| (o.metadata.uid.clone().unwrap_or_default(), o)).collect();
        for d in &p.deletes {
            let id = (d.namespace.clone(), d.name.clone());
            let work = works.iter().find(|w| key_of(w) == id).expect("a held Work");
            prop_assert_eq!(d.uid.as_ref(), work.metadata.uid.as_ref());
            prop_assert_eq!(d.resource_version.as_ref(), work.metadata.resource_version.as_ref());
            prop_assert!(!s.unreadable, "deleted {} while its type is unreadable", d.name);
            let cluster = work.cluster_name().unwrap_or_default().to_string();
            let cluster_state = clusters.iter().find(|c| c.name_any() == cluster);
            prop_assert!(!elsewhere.contains(&cluster), "deleted {} outside the selector", d.name);
            prop_assert!(
                cluster_state.is_none_or(|c| c.metadata.deletion_timestamp.is_none()),
                "deleted {} on a Cluster being deleted", d.name
            );
            prop_assert!(
                !p.wanted.values().any(|w| key_of(w) == id),
                "deleted {} which the plan also wants", d.name
            );
            let uid = source_uid_of(work).unwrap_or_default();
            let proven = match d.why {
                Removal::ClusterGone => cluster_state.is_none(),
                Removal::ObjectGone => !listed.contains_key(&uid) && s.waited,
                Removal::NotSelected => listed
                    .get(&uid)
                    .is_some_and(|o| o.labels().get("placed").map(String::as_str) == Some("no")),
                Removal::Moved => {
                    let replacements: Vec<(&CopyKey, &Work)> =
                        p.wanted.iter().filter(|((u, _), _)| *u == uid).collect();
                    let member_fine = clusters.iter().any(|c| c.name_any() == cluster
                        && c.status.as_ref().is_some_and(|s| s.conditions.iter()
                            .any(|c| c.type_ == "Ready" && c.status == "True")));
                    // A replacement is available when the hub has it as wanted (not to be
                    // written) and its member reports it available.
                    !replacements.is_empty() && (member_fine || replacements.iter().all(|(k, r)| {
                        !p.writes.contains(*k) && works.iter().any(|h| key_of(h) == key_of(r)
                            && holds_now(h, conditions::AVAILABLE))
                    }))
                }
                Removal::Renamed => false,
            };
            prop_assert!(proven, "deleted {} for {:?} without proof", d.name, d.why);
        }
    }
}

fn source_uid_of(w: &Work) -> Option<String> {
    w.labels().get(flotilla_api::labels::SOURCE_UID).cloned()
}

#[test]
fn the_status_of_a_placement_of_3000_objects_stays_small() {
    use crate::report::{Current, DECISION_ENTRIES, Outcome, placement_status};
    let placement = mk_placement("shop", "p", json!({}));
    let objects: Vec<DynamicObject> = (0..3000)
        .map(|i| mk_configmap("shop", &format!("config-{i:05}"), &format!("u{i}"), "v"))
        .collect();
    let first = plan(&mk_observation(
        placement.clone(),
        three(),
        objects.clone(),
        vec![],
    ))
    .expect("plan");
    // Every copy applied, a few not yet available.
    let works: Vec<Arc<Work>> = first
        .wanted
        .values()
        .enumerate()
        .map(|(i, w)| mk_work(w, true, i % 1000 != 0))
        .collect();
    let p = plan(&mk_observation(
        placement.clone(),
        three(),
        objects,
        works.clone(),
    ))
    .expect("plan");
    let outcome = Outcome::default();
    let status = placement_status(
        &placement,
        &p,
        &outcome,
        &Current::new(&p, &outcome, &works),
        NOW,
    );
    let size = serde_json::to_vec(&status).expect("json").len();
    assert!(size < 64 * 1024, "{size} bytes");
    let s = &status["status"];
    assert_eq!(s["selectedObjects"], 3000);
    assert_eq!(s["copies"]["placed"], 9000);
    assert_eq!(s["copies"]["available"], 9000 - 9);
    assert_eq!(s["clusters"].as_array().map(Vec::len), Some(3));
    let listed = s["decisions"].as_array().expect("decisions");
    let entries: usize = listed
        .iter()
        .map(|d| d["clusters"].as_array().map_or(1, Vec::len))
        .sum();
    assert!(entries <= DECISION_ENTRIES, "{entries}");
    assert_eq!(
        s["omittedDecisions"].as_u64(),
        Some(3000 - listed.len() as u64)
    );
    // What is not available comes first, and the conditions say so.
    assert!(
        listed[..9].iter().all(|d| d["clusters"]
            .as_array()
            .expect("clusters")
            .iter()
            .any(|c| c["available"] != "True")),
        "{listed:?}"
    );
    let available = &s["conditions"][2];
    assert_eq!(available["type"], "Available");
    assert_eq!(available["status"], "False");
    let message = available["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("8991/9000 copies available; not yet: ConfigMap/"),
        "{message}"
    );
    assert!(message.ends_with("and 4 more"), "{message}");
}
