//! The planner's rules on values: small `mk_*` builders for the observation, and a property
//! test of the safety invariant over random fleets.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use flotilla_api::{
    Cluster, DeletePolicy, Placement, Work, WorkSpec, annotations, conditions, labels, work_data,
};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::DynamicObject;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::digest::{
    CACHED_SPEC_DIGEST, hub_manifest_digest, lean, manifest_digest, manifests, spec_digest,
    spec_digest_with, up_to_date,
};
use crate::keys::{key_of, member_namespace_labels, resource};
use crate::observation::Other;
use crate::works::copy_holds_now;

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

/// A Work as the splitter's cache holds it once the hub has it: lean (see [`lean`]), with the
/// member's report of every manifest (`applied`, and `available` where `available` says so) for
/// its current generation.
fn mk_work_with(wanted: &Work, applied: bool, available: impl Fn(&str) -> bool) -> Arc<Work> {
    let mut w = wanted.clone();
    let condition = |type_: &str, ok: bool| {
        json!({"type": type_, "status": if ok { "True" } else { "False" }, "reason": "R",
               "message": "", "lastTransitionTime": NOW, "observedGeneration": 1})
    };
    let manifests: Vec<Value> = w
        .spec
        .manifests
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let t = m.types.clone().unwrap_or_default();
            let (group, version) = t
                .api_version
                .split_once('/')
                .unwrap_or(("", &t.api_version));
            let name = m.metadata.name.clone().unwrap_or_default();
            json!({"ordinal": i,
                   "identity": {"group": group, "version": version, "kind": t.kind,
                                "namespace": m.metadata.namespace, "name": name},
                   "applied": if applied { "True" } else { "False" },
                   "available": applied.then(|| if available(&name) { "True" } else { "False" })})
        })
        .collect();
    let all_available = w
        .spec
        .manifests
        .iter()
        .all(|m| available(m.metadata.name.as_deref().unwrap_or_default()));
    lean(&mut w);
    w.metadata.uid = Some(format!("work-{}", wanted.name_any()));
    w.metadata.resource_version = Some("7".into());
    w.metadata.generation = Some(1);
    w.status = Some(
        serde_json::from_value(json!({
            "conditions": [
                condition(conditions::APPLIED, applied),
                condition(conditions::AVAILABLE, applied && all_available),
            ],
            "observedGeneration": 1,
            "manifests": manifests,
        }))
        .expect("status"),
    );
    Arc::new(w)
}

fn mk_work(wanted: &Work, applied: bool, available: bool) -> Arc<Work> {
    mk_work_with(wanted, applied, |_| available)
}

/// The hub's Works once plan `p` was carried out on `before`: what it wrote (reported on by the
/// members as given), what it left as it was, without what it deleted.
fn after(p: &Plan, before: &[Arc<Work>], applied: bool, available: bool) -> Vec<Arc<Work>> {
    let deleted: BTreeSet<WorkId> = p
        .deletes
        .iter()
        .map(|d| (d.namespace.clone(), d.name.clone()))
        .collect();
    let mut hub: Vec<Arc<Work>> = before
        .iter()
        .filter(|w| !deleted.contains(&key_of(w)) && !p.writes.contains(&key_of(w)))
        .cloned()
        .collect();
    hub.extend(
        p.writes
            .iter()
            .map(|id| mk_work(&p.wanted[id], applied, available)),
    );
    hub
}

/// The names of the objects a Work holds, in order.
fn held_names(w: &Work) -> Vec<String> {
    manifests(w)
        .iter()
        .map(|m| m.metadata.name.clone().unwrap_or_default())
        .collect()
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
                "StatefulSet" => resource("apps", "v1", "StatefulSet", "statefulsets"),
                "Job" => resource("batch", "v1", "Job", "jobs"),
                "CronJob" => resource("batch", "v1", "CronJob", "cronjobs"),
                "Pipeline" => resource("example.com", "v1", "Pipeline", "pipelines"),
                "Secret" => resource("", "v1", "Secret", "secrets"),
                "Service" => resource("", "v1", "Service", "services"),
                "RoleBinding" => resource(
                    "rbac.authorization.k8s.io",
                    "v1",
                    "RoleBinding",
                    "rolebindings",
                ),
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
    Observation::of(placement, now(), clusters, listed(objects), works)
}

fn three() -> Vec<Arc<Cluster>> {
    ["m1", "m2", "m3"]
        .iter()
        .map(|c| mk_cluster(c, "True"))
        .collect()
}

/// The Works of a first plan as the hub would have them once written and reported on.
fn as_written(p: &Plan, applied: bool, available: bool) -> Vec<Arc<Work>> {
    after(p, &[], applied, available)
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
    let lean = manifests(&cached);
    let m = &lean[0];
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
    let digest = spec_digest(&wanted.spec);
    assert!(up_to_date(wanted, &digest, &cached));
    let mut changed = wanted.clone();
    changed.spec.manifests[0].data["spec"]["paused"] = json!(true);
    assert!(!up_to_date(&changed, &spec_digest(&changed.spec), &cached));
    // A Work not from the cache is compared by its own spec.
    assert!(up_to_date(wanted, &digest, wanted));
    assert!(!up_to_date(&changed, &spec_digest(&changed.spec), wanted));
}

#[test]
fn the_cache_keeps_no_map_per_copy_of_a_kind_without_a_share() {
    // Each cached copy of a ConfigMap is its type and name: no annotations, no data, and of the
    // member's report no resourceVersion or time (a map, even of one key, costs hundreds of
    // bytes in every cached copy).
    let p = plan(&mk_observation(
        mk_placement("shop", "p", json!({})),
        three(),
        configmaps(0..3),
        vec![],
    ))
    .expect("plan");
    let wanted = p.wanted.values().next().expect("a Work");
    assert_eq!(wanted.spec.manifests.len(), 3);
    let mut status: flotilla_api::work::WorkStatus = serde_json::from_value(json!({
        "manifests": [{"ordinal": 0, "identity": {"version": "v1", "kind": "ConfigMap",
            "resource": "configmaps", "namespace": "shop", "name": "cm-0"},
            "resourceVersion": "42", "applied": "True", "available": "True",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    }))
    .expect("status");
    status.manifests.reserve(100);
    let mut cached = wanted.clone();
    cached.status = Some(status);
    lean(&mut cached);
    assert!(
        cached.spec.manifests.is_empty(),
        "no DynamicObject per copy"
    );
    for (i, m) in manifests(&cached).iter().enumerate() {
        assert_eq!(m.metadata.annotations, None, "{m:?}");
        assert_eq!(m.data, json!({}), "{m:?}");
        assert_eq!(
            hub_manifest_digest(&cached, i),
            Some(manifest_digest(&wanted.spec.manifests[i]))
        );
    }
    assert_eq!(hub_manifest_digest(&cached, 3), None);
    // What a pass reads of each: its type, namespace and name, in order.
    assert_eq!(held_names(&cached), ["c000", "c001", "c002"]);
    let read = manifests(&cached);
    let types = read[0].types.as_ref().expect("its type");
    assert_eq!(
        (types.api_version.as_str(), types.kind.as_str()),
        ("v1", "ConfigMap")
    );
    assert_eq!(read[0].metadata.namespace.as_deref(), Some("shop"));
    assert_eq!(crate::digest::manifest_count(&cached), 3);
    assert_eq!(crate::digest::manifest_count(wanted), 3);
    // What a plan keeps of a Work it does not write names nothing.
    let mut kept = cached.clone();
    crate::digest::without_manifests(&mut kept);
    assert!(manifests(&kept).is_empty());
    assert_eq!(crate::digest::manifest_count(&kept), 0);
    // A lean Work made lean again stays as it was.
    let mut again = cached.clone();
    lean(&mut again);
    assert_eq!(again, cached);
    // A whole Work is read for its manifests, whatever its annotations say.
    let mut forged = wanted.clone();
    forged.annotations_mut().insert(
        crate::digest::CACHED_MANIFESTS.into(),
        r#"[["v1","ConfigMap","shop","other",{}]]"#.into(),
    );
    assert_eq!(held_names(&forged), ["c000", "c001", "c002"]);
    lean(&mut forged);
    assert_eq!(
        (forged.metadata, forged.spec),
        (cached.metadata.clone(), cached.spec.clone())
    );
    // A Work not from the cache: of its manifest.
    assert_eq!(
        hub_manifest_digest(wanted, 1),
        Some(manifest_digest(&wanted.spec.manifests[1]))
    );
    let entry = &cached.status.as_ref().expect("status").manifests;
    assert_eq!(entry.capacity(), 1);
    assert_eq!(
        (
            entry[0].resource_version.as_deref(),
            entry[0].last_transition_time.as_ref()
        ),
        (None, None)
    );
    assert_eq!(entry[0].identity.name, "cm-0");
}

#[test]
fn a_specs_digest_from_its_manifests_json_is_its_digest() {
    let manifests: Vec<DynamicObject> = [
        mk_configmap("shop", "a", "ua", "1"),
        mk_deployment("shop", "web", "uw", 6),
    ]
    .into_iter()
    .map(|o| {
        serde_json::from_value(crate::render::member_manifest(
            crate::render::kind_of(&o),
            &o,
            crate::render::Share::default(),
        ))
        .expect("a manifest")
    })
    .collect();
    let json: Vec<String> = manifests
        .iter()
        .map(|m| serde_json::to_string(m).expect("JSON"))
        .collect();
    for (delete_policy, ignore_fields) in [
        (DeletePolicy::Delete, vec![]),
        (
            DeletePolicy::Orphan,
            vec![
                serde_json::from_value(
                    json!({"manifest": {"kind": "Deployment"}, "jsonPaths": [".spec.replicas"]}),
                )
                .expect("ignoreFields"),
            ],
        ),
    ] {
        for n in 0..=manifests.len() {
            let spec = WorkSpec {
                manifests: manifests[..n].to_vec(),
                delete_policy,
                conflict_policy: Default::default(),
                ignore_fields: ignore_fields.clone(),
                namespace_labels: Default::default(),
                allow_existing_namespaces: None,
                health: None,
            };
            assert_eq!(
                spec_digest_with(&spec, json[..n].iter().map(String::as_str)).expect("digest"),
                spec_digest(&spec),
                "{n} manifests, {delete_policy:?}"
            );
        }
    }
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
    assert_eq!(first.copies.len(), 6);
    assert_eq!(first.writes.len(), 3, "one Work per member holds both");
    assert!(first.wanted.values().all(|w| held_names(w) == ["a", "b"]));
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
        "a Work not to be written is kept without its manifests"
    );

    // One object edited: its three copies are written, nothing else.
    let edited = vec![
        mk_configmap("shop", "a", "ua", "2"),
        mk_configmap("shop", "b", "ub", "1"),
    ];
    let after_edit = plan(&mk_observation(placement, three(), edited, works)).expect("plan");
    assert_eq!(after_edit.writes.len(), 3);
    assert!(after_edit.writes.iter().all(|k| {
        let m = &after_edit.wanted[k].spec.manifests;
        m[0].data["data"]["k"] == "2" && m[1].data["data"]["k"] == "1"
    }));
}

/// The member namespaces carry the hub namespace's labels (its Pod Security level among them),
/// and a change of them rewrites the Works.
#[test]
fn works_carry_the_hub_namespaces_labels_and_their_changes() {
    let placement = mk_placement("shop", "p", json!({}));
    let objects = vec![mk_configmap("shop", "a", "ua", "1")];
    let labelled = |level: &str| {
        let mut obs = mk_observation(placement.clone(), three(), objects.clone(), vec![]);
        obs.namespace_labels = Some(
            [(
                "pod-security.kubernetes.io/enforce".to_string(),
                level.to_string(),
            )]
            .into(),
        );
        obs
    };
    let first = plan(&labelled("restricted")).expect("plan");
    assert!(first.wanted.values().all(|w| {
        w.spec
            .namespace_labels
            .as_ref()
            .and_then(|l| l.get("pod-security.kubernetes.io/enforce"))
            == Some(&"restricted".to_string())
    }));
    let works = as_written(&first, true, true);
    let mut same = labelled("restricted");
    same.works = works.clone();
    assert!(plan(&same).expect("plan").writes.is_empty());
    let mut relabelled = labelled("baseline");
    relabelled.works = works;
    assert_eq!(plan(&relabelled).expect("plan").writes.len(), 3);
    assert_eq!(
        member_namespace_labels(
            &[
                (
                    "kubernetes.io/metadata.name".to_string(),
                    "shop".to_string()
                ),
                ("team".to_string(), "a".to_string()),
            ]
            .into()
        ),
        [("team".to_string(), "a".to_string())].into()
    );
}

/// A duplicated Deployment runs whole in every member, and its hub status counts every copy
/// (`kubectl rollout status` on the hub reads it).
#[test]
fn a_duplicated_deployment_reports_the_copy_furthest_behind() {
    let placement = mk_placement(
        "shop",
        "p",
        json!({"replicaScheduling": {"type": "Duplicated"}}),
    );
    let web = mk_deployment("shop", "web", "uw", 2);
    let p = plan(&mk_observation(placement, three(), vec![web], vec![])).expect("plan");
    assert_eq!(p.copies.len(), 3);
    let [d] = p.divisions.as_slice() else {
        panic!("one Deployment for its status: {:?}", p.divisions)
    };
    assert_eq!(d.total, 2);
    assert!(d.duplicated);
    assert_eq!(
        d.division,
        [("m1", 2), ("m2", 2), ("m3", 2)]
            .map(|(c, n)| (c.to_string(), n))
            .into()
    );
    // Every copy is the whole Deployment.
    assert!(p.wanted.values().all(|w| {
        w.spec
            .manifests
            .iter()
            .all(|m| m.data["spec"]["replicas"] == 2)
    }));
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
    assert!(p.writes.is_empty(), "{:?}", p.writes);
    assert!(p.removals.is_empty(), "{:?}", p.removals);
    assert_eq!(p.kept.len(), 3);
    assert!(p.kept.values().all(|k| *k == Keep::TypeUnreadable));
}

#[test]
fn a_workload_whose_pods_the_hub_refuses_is_placed_nowhere_and_its_copies_stay_as_they_were() {
    use crate::pod_security::Verdict;
    let placement = mk_placement(
        "shop",
        "p",
        json!({"replicaScheduling": {"type": "Duplicated"}}),
    );
    let key = |name: &str| ObjectKey::new("apps/v1", "Deployment", name);
    let violates = Verdict::Violates("violates PodSecurity \"restricted:latest\": hostPID".into());
    // A new workload that violates: no copy, every member excluded with the hub's reason.
    let mut obs = mk_observation(
        placement.clone(),
        three(),
        vec![
            mk_deployment("shop", "web", "uw", 2),
            mk_deployment("shop", "escape", "ue", 1),
        ],
        vec![],
    );
    obs.pod_security.insert(key("escape"), violates.clone());
    let first = plan(&obs).expect("plan");
    assert!(first.copies.keys().all(|k| k.object != key("escape")));
    assert_eq!(first.copies.len(), 3, "web on every member");
    let (_, decision) = first
        .decisions
        .iter()
        .find(|(k, _)| *k == key("escape"))
        .expect("a decision for escape");
    assert!(decision.clusters.is_empty());
    assert_eq!(decision.excluded.len(), 3);
    assert!(
        decision
            .excluded
            .iter()
            .all(|e| e.reason == reasons::POD_SECURITY_VIOLATION
                && e.message.as_deref().is_some_and(|m| m.contains("hostPID")))
    );
    assert_eq!(first.findings.pod_security.len(), 1);
    assert!(first.findings.pod_security[0].starts_with("Deployment escape: "));

    // A placed workload made worse: its Works are left as they are (nothing written or deleted),
    // and an unknown verdict does the same and asks again soon.
    for verdict in [violates, Verdict::Unknown("timeout".into())] {
        let mut obs = mk_observation(
            placement.clone(),
            three(),
            vec![mk_deployment("shop", "web", "uw", 5)],
            as_written(&first, true, true),
        );
        obs.pod_security.insert(key("web"), verdict.clone());
        let p = plan(&obs).expect("plan");
        assert!(p.writes.is_empty(), "{verdict:?}: {:?}", p.writes);
        assert!(p.deletes.is_empty(), "{verdict:?}: {:?}", p.deletes);
        assert!(p.removals.is_empty(), "{verdict:?}: {:?}", p.removals);
        assert_eq!(p.kept.len(), 3);
        assert!(p.kept.values().all(|k| *k == Keep::PodSecurity));
        if matches!(verdict, Verdict::Unknown(_)) {
            assert!(p.recheck_after.is_some_and(|r| r <= POD_SECURITY_RETRY));
        }
    }

    // With the manifests the members have, the Works are written for what else changed (here
    // the namespace's labels) and keep the held-back copy exactly as the member has it.
    let mut obs = mk_observation(
        placement,
        three(),
        vec![mk_deployment("shop", "web", "uw", 5)],
        as_written(&first, true, true),
    );
    obs.pod_security
        .insert(key("web"), Verdict::Violates("violates PodSecurity".into()));
    for w in first.wanted.values() {
        let cluster = w.cluster_name().expect("cluster").to_string();
        for m in &w.spec.manifests {
            if m.metadata.name.as_deref() == Some("web") {
                obs.held_back
                    .insert(CopyKey::new(key("web"), &cluster), m.clone());
            }
        }
    }
    assert_eq!(obs.held_back.len(), 3);
    obs.namespace_labels = Some(
        [(
            "pod-security.kubernetes.io/enforce".into(),
            "restricted".into(),
        )]
        .into(),
    );
    let p = plan(&obs).expect("plan");
    assert_eq!(p.writes.len(), 3, "the labels reach every member");
    for id in &p.writes {
        let w = &p.wanted[id];
        assert!(w.spec.namespace_labels.is_some());
        let web = w
            .spec
            .manifests
            .iter()
            .find(|m| m.metadata.name.as_deref() == Some("web"))
            .expect("web stays in its Work");
        assert_eq!(web.data["spec"]["replicas"], 2, "as the member has it");
    }
}

/// A namespace's copy limit: a pass that would go beyond it places no new copy (none of an
/// object's, so no workload is half placed) and says why; the copies already placed stay and
/// follow their hub objects; copies of the namespace's other Placements count too.
#[test]
fn beyond_the_copy_limit_no_new_copy_is_placed_and_the_placed_ones_stay() {
    let placement = mk_placement("shop", "p", json!({}));
    let first_objects = vec![mk_configmap("shop", "a", "ua", "1")];
    let mut obs = mk_observation(placement.clone(), three(), first_objects.clone(), vec![]);
    obs.copy_limit = Some(4);
    let first = plan(&obs).expect("plan");
    assert!(first.findings.copy_quota.is_none());
    assert_eq!(first.copies.len(), 3);
    let works = as_written(&first, true, true);

    // A second object would make 6 copies: none of its 3 is placed; `a` changes and follows.
    let grown = vec![
        mk_configmap("shop", "a", "ua", "2"),
        mk_configmap("shop", "b", "ub", "1"),
    ];
    let mut obs = mk_observation(placement.clone(), three(), grown.clone(), works.clone());
    obs.copy_limit = Some(4);
    let held = plan(&obs).expect("plan");
    let why = held.findings.copy_quota.clone().expect("over the limit");
    assert!(
        why.contains("keep 6 copies") && why.contains("limit of 4"),
        "{why}"
    );
    assert_eq!(held.copies.len(), 3, "{:?}", held.copies.keys());
    assert!(held.copies.keys().all(|k| k.object.name == "a"));
    assert!(held.deletes.is_empty());
    assert_eq!(held.writes.len(), 3, "a's new data reaches its copies");
    let (_, b) = held
        .decisions
        .iter()
        .find(|(k, _)| k.name == "b")
        .expect("b decided");
    assert!(b.clusters.is_empty());
    assert!(
        b.excluded
            .iter()
            .all(|e| e.reason == reasons::COPY_QUOTA_EXCEEDED)
            && b.excluded.len() == 3
    );

    // Room enough: both placed.
    let mut obs = mk_observation(placement.clone(), three(), grown.clone(), works.clone());
    obs.copy_limit = Some(6);
    let room = plan(&obs).expect("plan");
    assert!(room.findings.copy_quota.is_none());
    assert_eq!(room.copies.len(), 6);

    // The namespace's other Placements' copies count: 3 there + 3 here > 5.
    let mut obs = mk_observation(placement.clone(), three(), first_objects.clone(), vec![]);
    obs.copy_limit = Some(5);
    obs.others = works
        .iter()
        .map(|w| Other {
            work: w.clone(),
            orphaned: false,
        })
        .collect();
    assert!(plan(&obs).expect("plan").findings.copy_quota.is_some());

    // A limit lowered below what is placed holds back nothing that is already there.
    let mut obs = mk_observation(placement, three(), first_objects, works);
    obs.copy_limit = Some(1);
    let lowered = plan(&obs).expect("plan");
    assert!(lowered.findings.copy_quota.is_none());
    assert_eq!(lowered.copies.len(), 3);
}

/// A namespace's byte budget: copies count their bytes once per member (a big ConfigMap on
/// three members three times); beyond the budget no new copy is placed and no Work that would
/// grow is written (its members keep what they have), while a Work that shrinks still is; the
/// Works say what they take, and the other Placements' Works count.
#[test]
fn beyond_the_byte_budget_nothing_new_or_bigger_is_written() {
    let placement = mk_placement("shop", "p", json!({}));
    let big = "x".repeat(10_000);
    let objects = vec![mk_configmap("shop", "a", "ua", &big)];
    let mut obs = mk_observation(placement.clone(), three(), objects.clone(), vec![]);
    obs.byte_limit = Some(40_000);
    let first = plan(&obs).expect("plan");
    assert!(
        first.findings.copy_quota.is_none(),
        "3 × 10 kB fit in 40 kB"
    );
    assert_eq!(first.copies.len(), 3);
    for id in &first.writes {
        let bytes: u64 = first.wanted[id].annotations()[annotations::COPY_BYTES]
            .parse()
            .expect("a number");
        assert!((10_000..11_000).contains(&bytes), "{bytes}");
    }
    let works = as_written(&first, true, true);

    // A second such object would take 60 kB: none of its copies is placed.
    let grown = vec![
        mk_configmap("shop", "a", "ua", &big),
        mk_configmap("shop", "b", "ub", &big),
    ];
    let mut obs = mk_observation(placement.clone(), three(), grown, works.clone());
    obs.byte_limit = Some(40_000);
    let held = plan(&obs).expect("plan");
    let why = held.findings.copy_quota.clone().expect("over the budget");
    assert!(why.contains("limit of 40000"), "{why}");
    assert!(why.contains(annotations::MAX_COPY_BYTES), "{why}");
    assert!(held.copies.keys().all(|k| k.object.name == "a"));
    assert!(held.writes.is_empty(), "a is as it was: {:?}", held.writes);

    // `a` growing to 20 kB (60 kB in all) is not written; shrinking is.
    let bigger = vec![mk_configmap("shop", "a", "ua", &"x".repeat(20_000))];
    let mut obs = mk_observation(placement.clone(), three(), bigger, works.clone());
    obs.byte_limit = Some(40_000);
    let refused = plan(&obs).expect("plan");
    assert!(refused.writes.is_empty(), "{:?}", refused.writes);
    assert!(refused.findings.copy_quota.is_some());
    assert!(
        refused.deletes.is_empty(),
        "nothing of the members' is taken away"
    );
    let smaller = vec![mk_configmap("shop", "a", "ua", "small")];
    let mut obs = mk_observation(placement.clone(), three(), smaller, works.clone());
    obs.byte_limit = Some(1_000);
    let shrunk = plan(&obs).expect("plan");
    assert_eq!(shrunk.writes.len(), 3, "a shrinking Work is written");

    // The namespace's other Placements' Works count, by what they say they take.
    let mut obs = mk_observation(placement, three(), objects, vec![]);
    obs.byte_limit = Some(40_000);
    obs.others = works
        .iter()
        .map(|w| Other {
            work: w.clone(),
            orphaned: false,
        })
        .collect();
    assert!(plan(&obs).expect("plan").findings.copy_quota.is_some());
}

#[test]
fn a_tenants_adopt_counts_as_abort_unless_an_admin_allowed_it() {
    let placement = mk_placement("monitoring", "p", json!({"conflictPolicy": "Adopt"}));
    let objects = || vec![mk_configmap("monitoring", "settings", "u1", "1")];
    let refused = plan(&mk_observation(
        placement.clone(),
        three(),
        objects(),
        vec![],
    ))
    .expect("plan");
    assert!(refused.findings.adopt_refused);
    assert!(
        refused
            .wanted
            .values()
            .all(|w| w.spec.conflict_policy == ConflictPolicy::Abort)
    );
    let mut obs = mk_observation(placement, three(), objects(), vec![]);
    obs.adopt_allowed = true;
    let allowed = plan(&obs).expect("plan");
    assert!(!allowed.findings.adopt_refused);
    assert!(
        allowed
            .wanted
            .values()
            .all(|w| w.spec.conflict_policy == ConflictPolicy::Adopt)
    );
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
    assert!(gone.writes.is_empty());
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
    assert!(replaced.removals.is_empty(), "{:?}", replaced.removals);
    assert!(
        replaced.writes.is_empty(),
        "the same Works hold it as they are"
    );
    assert_eq!(replaced.copies.len(), 3);
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
    assert!(!p.copies.keys().any(|k| k.cluster == "m1"), "not a target");
    assert!(p.writes.is_empty(), "{:?}", p.writes);
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
    assert_eq!(moving.writes.len(), 2, "{:?}", moving.writes);
    let hub = after(&moving, &works, true, true);
    let moved = plan(&mk_observation(placement, failed, objects, hub)).expect("plan");
    assert_eq!(moved.deletes.len(), 1, "{:?}", moved.kept);
    assert_eq!(moved.deletes[0].why, Removal::Moved);
    assert_eq!(moved.removals.len(), 1);
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

fn mk_statefulset(ns: &str, name: &str, uid: &str, replicas: u32) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": ns, "uid": uid, "generation": 1},
        "spec": {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}}},
    }))
    .expect("statefulset")
}

/// The Works of plan `p` written on `before`, each StatefulSet copy reported by its member as
/// running `pods(cluster, asked)` pods for the Work's spec (`None`: the member is unreachable,
/// its last report stale).
fn after_sts(
    p: &Plan,
    before: &[Arc<Work>],
    pods: impl Fn(&str, u64) -> Option<u64>,
) -> Vec<Arc<Work>> {
    let written = after(p, before, true, true);
    written
        .into_iter()
        .map(|w| {
            let mut w = (*w).clone();
            let cluster = w.cluster_name().unwrap_or_default().to_string();
            let asked: Vec<u64> = manifests(&w)
                .iter()
                .map(|m| m.data["spec"]["replicas"].as_u64().unwrap_or(0))
                .collect();
            let answer = |asked: u64| pods(&cluster, asked);
            if let Some(status) = w.status.as_mut() {
                for (m, asked) in status.manifests.iter_mut().zip(asked) {
                    m.generation = Some(2);
                    m.observed_generation = Some(2);
                    m.status = Some(json!({"replicas": answer(asked).unwrap_or(asked)}));
                }
                if answer(0).is_none() {
                    for c in &mut status.conditions {
                        c.status = "Unknown".into();
                    }
                }
            }
            Arc::new(w)
        })
        .collect()
}

/// The ordinals each member's copy of the plan's StatefulSet asks for, as `m1=0 m2=1-2`; a Work
/// written in this pass must ask for them.
fn ranges(p: &Plan) -> String {
    let layout = p.divisions[0]
        .ordinals
        .clone()
        .expect("divided by ordinals");
    let mut out: Vec<String> = Vec::new();
    for (key, id) in &p.copies {
        let range = layout.ranges[key.cluster.as_str()];
        if p.writes.contains(id) {
            let m = p.wanted[id]
                .spec
                .manifests
                .iter()
                .find(|m| m.metadata.name.as_deref() == Some(key.object.name.as_str()))
                .expect("the copy's manifest");
            let share = crate::render::Share::of(crate::render::kind_of(m), m);
            assert_eq!(share, crate::render::Share::ordinals(range), "{key:?}");
        }
        out.push(format!("{}={}", key.cluster, range.describe()));
    }
    out.join(" ")
}

#[test]
fn a_divided_statefulset_runs_each_ordinal_on_one_member_and_a_drained_member_lets_go_first() {
    let placement = mk_placement(
        "shop",
        "p",
        json!({"replicaScheduling": {"type": "Divided"}}),
    );
    let objects = vec![mk_statefulset("shop", "db", "us", 3)];
    let first = plan(&mk_observation(
        placement.clone(),
        three(),
        objects.clone(),
        vec![],
    ))
    .expect("plan");
    assert_eq!(ranges(&first), "m1=0 m2=1 m3=2");
    let m = &first.wanted.values().next().expect("a Work").spec.manifests[0];
    assert_eq!(m.data["spec"]["ordinals"]["start"], 0);
    assert_eq!(first.divisions.len(), 1);
    let settled = |_: &str, asked: u64| Some(asked);
    let works = after_sts(&first, &[], settled);

    // m2 is drained: it is asked to let go of ordinal 1; nobody takes it yet.
    let mut drained = three();
    let mut m2 = (*drained[1]).clone();
    m2.spec.taints =
        serde_json::from_value(json!([{"key": "drain", "effect": "NoExecute"}])).expect("taints");
    drained[1] = Arc::new(m2);
    let letting_go = plan(&mk_observation(
        placement.clone(),
        drained.clone(),
        objects.clone(),
        works.clone(),
    ))
    .expect("plan");
    assert_eq!(ranges(&letting_go), "m1=0 m2=none m3=2");
    assert!(letting_go.deletes.is_empty(), "{:?}", letting_go.deletes);

    // Its member still runs the pod: still nobody takes ordinal 1.
    let still = after_sts(&letting_go, &works, |c, asked| {
        Some(if c == "m2" { 1 } else { asked })
    });
    let waiting = plan(&mk_observation(
        placement.clone(),
        drained.clone(),
        objects.clone(),
        still.clone(),
    ))
    .expect("plan");
    assert_eq!(ranges(&waiting), "m1=0 m2=none m3=2");
    let d = &waiting.divisions[0];
    assert_eq!(
        d.ordinals.as_ref().map(|l| l.waiting_for.clone()),
        Some(vec!["m2".to_string()])
    );

    // It let go: its copy goes and its neighbour below takes ordinal 1.
    let gone = after_sts(&waiting, &still, settled);
    let moved = plan(&mk_observation(
        placement.clone(),
        drained.clone(),
        objects.clone(),
        gone.clone(),
    ))
    .expect("plan");
    assert_eq!(ranges(&moved), "m1=0-1 m3=2");
    // Its empty copy goes once the copy that took its ordinal is available, as for any move
    // away from a member that may not run the object.
    assert_eq!(
        moved.kept.values().collect::<Vec<_>>(),
        [&Keep::AwaitingReplacements]
    );
    let available = after_sts(&moved, &gone, settled);
    let done = plan(&mk_observation(placement, drained, objects, available)).expect("plan");
    assert_eq!(ranges(&done), "m1=0-1 m3=2");
    assert_eq!(
        done.removals.values().collect::<Vec<_>>(),
        [&Removal::Moved]
    );
}

#[test]
fn an_unreachable_members_ordinals_never_run_elsewhere() {
    let placement = mk_placement(
        "shop",
        "p",
        json!({"replicaScheduling": {"type": "Divided"}, "failover": {"tolerationSeconds": 0}}),
    );
    let objects = vec![mk_statefulset("shop", "db", "us", 3)];
    let first = plan(&mk_observation(
        placement.clone(),
        three(),
        objects.clone(),
        vec![],
    ))
    .expect("plan");
    // m3 stops answering: its Work's report is stale, the Cluster failed over.
    let unreachable = |c: &str, asked: u64| (c != "m3").then_some(asked);
    let works = after_sts(&first, &[], unreachable);
    let mut failed = three();
    failed[2] = mk_cluster("m3", "Unknown");
    let mut hub = works;
    for pass in 0..3 {
        let p = plan(&mk_observation(
            placement.clone(),
            failed.clone(),
            objects.clone(),
            hub.clone(),
        ))
        .expect("plan");
        // It is not asked to let go: nobody could take its ordinal while it may run it, and
        // back as a candidate it runs it on undisturbed.
        assert_eq!(ranges(&p), "m1=0 m2=1 m3=2", "pass {pass}");
        assert!(p.writes.is_empty(), "pass {pass}: {:?}", p.writes);
        assert!(p.deletes.is_empty() && p.removals.is_empty(), "pass {pass}");
        // Scaling up waits too: no ordinal is added while a member may run any.
        hub = after_sts(&p, &hub, unreachable);
    }
    let up = plan(&mk_observation(
        placement.clone(),
        failed.clone(),
        vec![mk_statefulset("shop", "db", "us", 4)],
        hub.clone(),
    ))
    .expect("plan");
    assert_eq!(ranges(&up), "m1=0 m2=1 m3=2");
    // Deleting its Cluster says its pods are gone: then its ordinal runs elsewhere.
    let without: Vec<Arc<Cluster>> = failed[..2].to_vec();
    let released = plan(&mk_observation(placement, without, objects, hub)).expect("plan");
    assert_eq!(ranges(&released), "m1=0 m2=1-2");
}

#[test]
fn scaled_to_zero_a_statefulset_keeps_its_copies_and_scaling_up_keeps_each_pod_in_place() {
    let placement = mk_placement(
        "shop",
        "p",
        json!({"replicaScheduling": {"type": "Divided"}}),
    );
    let first = plan(&mk_observation(
        placement.clone(),
        three(),
        vec![mk_statefulset("shop", "db", "us", 3)],
        vec![],
    ))
    .expect("plan");
    let settled = |_: &str, asked: u64| Some(asked);
    let works = after_sts(&first, &[], settled);
    let up = plan(&mk_observation(
        placement.clone(),
        three(),
        vec![mk_statefulset("shop", "db", "us", 5)],
        works.clone(),
    ))
    .expect("plan");
    assert_eq!(ranges(&up), "m1=0 m2=1 m3=2-4");
    let zero = plan(&mk_observation(
        placement,
        three(),
        vec![mk_statefulset("shop", "db", "us", 0)],
        works,
    ))
    .expect("plan");
    assert!(zero.deletes.is_empty());
    assert_eq!(zero.copies.len(), 3, "{}", ranges(&zero));
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
            mk_work_with(w, true, |name| s.objects[name[1..].parse::<usize>().unwrap_or(0)].4)
        }).collect();
        let (api_version, kind) = if s.divided { ("apps/v1", "Deployment") } else { ("v1", "ConfigMap") };

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
            obs.absent_since = (0..s.objects.len())
                .map(|i| (ObjectKey::new(api_version, kind, &format!("o{i}")), now() - GONE_GRACE))
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
            objects.iter().map(|o| (o.name_any(), o)).collect();
        let hub = |id: &WorkId| works.iter().find(|w| key_of(w) == *id);
        // A copy leaves its member only for a reason that proves it unwanted.
        for (copy, why) in &p.removals {
            let cluster = copy.cluster.as_str();
            let name = copy.object.name.as_str();
            prop_assert!(!s.unreadable, "removed {name} while its type is unreadable");
            let cluster_state = clusters.iter().find(|c| c.name_any() == *cluster);
            prop_assert!(!elsewhere.contains(cluster), "removed {name} outside the selector");
            prop_assert!(
                cluster_state.is_none_or(|c| c.metadata.deletion_timestamp.is_none()),
                "removed {name} on a Cluster being deleted"
            );
            prop_assert!(!p.copies.contains_key(copy), "removed {name} which the plan also wants");
            let proven = match why {
                Removal::ClusterGone => cluster_state.is_none(),
                Removal::ObjectGone => !listed.contains_key(name) && s.waited,
                Removal::NotSelected => listed
                    .get(name)
                    .is_some_and(|o| o.labels().get("placed").map(String::as_str) == Some("no")),
                Removal::Moved => {
                    let replacements: Vec<(&CopyKey, &WorkId)> =
                        p.copies.iter().filter(|(k, _)| k.object == copy.object).collect();
                    let member_fine = clusters.iter().any(|c| c.name_any() == *cluster
                        && c.status.as_ref().is_some_and(|s| s.conditions.iter()
                            .any(|c| c.type_ == "Ready" && c.status == "True")));
                    // A replacement is available when the hub's Work holds it as wanted (its
                    // manifest is the same, whatever else of that Work is written) and its
                    // member reports it available.
                    let as_wanted = |k: &CopyKey, id: &WorkId, h: &Work| {
                        let theirs = manifests(h).iter()
                            .position(|m| m.metadata.name.as_deref() == Some(k.object.name.as_str()))
                            .and_then(|i| hub_manifest_digest(h, i));
                        let ours = p.wanted[id].spec.manifests.iter()
                            .find(|m| m.metadata.name.as_deref() == Some(k.object.name.as_str()));
                        !p.writes.contains(id) || theirs.zip(ours).is_some_and(|(t, o)|
                            t == manifest_digest(o))
                    };
                    !replacements.is_empty() && (member_fine || replacements.iter().all(|(k, id)| {
                        hub(id).is_some_and(|h| as_wanted(k, id, h)
                            && copy_holds_now(h, &k.object, conditions::AVAILABLE))
                    }))
                }
                Removal::TakenOver | Removal::Renamed => false,
            };
            prop_assert!(proven, "removed {name} on {cluster} for {why:?} without proof");
        }
        // A Work is deleted only as it was observed, and only when every copy it holds leaves.
        for d in &p.deletes {
            let id = (d.namespace.clone(), d.name.clone());
            let work = hub(&id).expect("a held Work");
            prop_assert_eq!(d.uid.as_ref(), work.metadata.uid.as_ref());
            prop_assert_eq!(d.resource_version.as_ref(), work.metadata.resource_version.as_ref());
            prop_assert!(!p.wanted.contains_key(&id), "deleted {} which the plan also wants", d.name);
            let cluster = work.cluster_name().unwrap_or_default();
            for name in held_names(work) {
                let key = CopyKey::new(ObjectKey::new(api_version, kind, &name), cluster);
                prop_assert!(p.removals.contains_key(&key), "deleted {} holding {name}", d.name);
            }
        }
        // A Work written holds every copy the hub's holds, but those removed.
        for id in &p.writes {
            let Some(before) = hub(id) else { continue };
            let now = held_names(&p.wanted[id]);
            let cluster = before.cluster_name().unwrap_or_default();
            for name in held_names(before) {
                let key = CopyKey::new(ObjectKey::new(api_version, kind, &name), cluster);
                prop_assert!(now.contains(&name) || p.removals.contains_key(&key),
                    "{} dropped {name} without a reason", id.1);
            }
        }
    }
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
    assert_eq!(
        first.wanted.len(),
        3 * 3000 / BUNDLE_MANIFESTS,
        "3000 objects in Works of {BUNDLE_MANIFESTS} on each member"
    );
    let works: Vec<Arc<Work>> = first
        .wanted
        .values()
        .map(|w| mk_work_with(w, true, |name| !name.ends_with("000")))
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
        listed[..3].iter().all(|d| d["clusters"]
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

fn one() -> Vec<Arc<Cluster>> {
    vec![mk_cluster("m1", "True")]
}

fn configmaps(range: std::ops::Range<usize>) -> Vec<DynamicObject> {
    range
        .map(|i| mk_configmap("shop", &format!("c{i:03}"), &format!("u{i}"), "v"))
        .collect()
}

#[test]
fn copies_of_one_type_share_works_of_bounded_size_and_stay_where_they_are() {
    const B: usize = BUNDLE_MANIFESTS;
    let placement = mk_placement("shop", "p", json!({}));
    let first = plan(&mk_observation(
        placement.clone(),
        one(),
        configmaps(0..(B * 5 / 2)),
        vec![],
    ))
    .expect("plan");
    let sizes: Vec<usize> = first.wanted.values().map(|w| held_names(w).len()).collect();
    assert_eq!(sizes, [B, B, B / 2]);
    let works = as_written(&first, true, true);
    let index_of = |p: &Plan, name: &str| {
        let id = &p.copies[&CopyKey::new(ObjectKey::new("v1", "ConfigMap", name), "m1")];
        p.wanted[id].labels()[labels::BUNDLE].clone()
    };
    assert_eq!(index_of(&first, "c000"), "0");
    assert_eq!(index_of(&first, &format!("c{:03}", B * 5 / 2 - 1)), "2");

    // Ten objects of the first Work go (after the grace), five new ones come: the first Work
    // loses the ten and takes the five; the other Works are not written.
    let mut now_objects = configmaps(10..(B * 5 / 2));
    now_objects.extend(configmaps((B * 5 / 2)..(B * 5 / 2 + 5)));
    let mut obs = mk_observation(placement, one(), now_objects, works);
    obs.absent_since = (0..10)
        .map(|i| {
            (
                ObjectKey::new("v1", "ConfigMap", &format!("c{i:03}")),
                now() - GONE_GRACE,
            )
        })
        .collect();
    let p = plan(&obs).expect("plan");
    assert_eq!(p.writes.len(), 1, "{:?}", p.writes);
    assert!(p.deletes.is_empty());
    assert_eq!(p.removals.len(), 10);
    assert!(p.removals.values().all(|r| *r == Removal::ObjectGone));
    let written = &p.wanted[p.writes.iter().next().expect("a write")];
    let names = held_names(written);
    assert_eq!(names.len(), B - 5);
    assert_eq!(names[0], "c010", "the copies that stay keep their order");
    let new: Vec<String> = (0..5).map(|i| format!("c{:03}", B * 5 / 2 + i)).collect();
    assert_eq!(&names[B - 10..], new.as_slice());
    assert_eq!(index_of(&p, &format!("c{B:03}")), "1");
}

#[test]
fn a_large_object_gets_a_work_of_its_own() {
    let placement = mk_placement("shop", "p", json!({}));
    let big = |name: &str| {
        let mut o = mk_configmap("shop", name, name, "v");
        o.data["data"]["k"] = json!("x".repeat(BUNDLE_BYTES * 2 / 3));
        o
    };
    let p = plan(&mk_observation(
        placement,
        one(),
        vec![big("a"), big("b"), mk_configmap("shop", "c", "c", "v")],
        vec![],
    ))
    .expect("plan");
    let held: Vec<Vec<String>> = p.wanted.values().map(|w: &Work| held_names(w)).collect();
    assert_eq!(held, [vec!["a", "c"], vec!["b"]], "{held:?}");
}

#[test]
fn a_work_of_one_object_from_an_older_splitter_goes_once_its_copy_moved() {
    let placement = mk_placement("shop", "p", json!({}));
    let objects = vec![mk_configmap("shop", "settings", "u1", "v")];
    let legacy: Work = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
        "metadata": {"name": "configmap-settings", "namespace": "flotilla-cluster-m1",
            "labels": {labels::CLUSTER: "m1", labels::PLACEMENT: "p", labels::SOURCE_UID: "u1"},
            "annotations": {annotations::SOURCE_API_VERSION: "v1", annotations::SOURCE_KIND: "ConfigMap",
                            annotations::SOURCE_NAMESPACE: "shop", annotations::SOURCE_NAME: "settings"}},
        "spec": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": "settings", "namespace": "shop"}, "data": {"k": "v"}}]}
    }))
    .expect("work");
    let hub = vec![mk_work(&legacy, true, true)];
    let p = plan(&mk_observation(
        placement.clone(),
        one(),
        objects.clone(),
        hub.clone(),
    ))
    .expect("plan");
    assert!(p.deletes.is_empty(), "{:?}", p.deletes);
    assert_eq!(p.writes.len(), 1);
    let bundle = p.wanted.values().next().expect("the Work of its type");
    assert_eq!(
        bundle.annotations()[annotations::REPLACES],
        "configmap-settings"
    );
    assert_eq!(p.kept.values().collect::<Vec<_>>(), [&Keep::RenamePending]);

    // Once the new Work reports it applied, the old one goes.
    let hub = after(&p, &hub, true, true);
    let p = plan(&mk_observation(placement, one(), objects, hub)).expect("plan");
    assert!(p.writes.is_empty(), "{:?}", p.writes);
    assert_eq!(p.deletes.len(), 1);
    assert_eq!(p.deletes[0].name, "configmap-settings");
    assert_eq!(p.deletes[0].why, Removal::Renamed);
    assert!(p.removals.is_empty(), "the member copy stays");
}

#[test]
fn a_copy_another_placement_takes_stays_until_that_placements_work_holds_it() {
    let older = mk_placement("shop", "all", json!({}));
    let objects = vec![
        mk_configmap("shop", "a", "ua", "1"),
        mk_configmap("shop", "b", "ub", "1"),
    ];
    let first = plan(&mk_observation(
        older.clone(),
        one(),
        objects.clone(),
        vec![],
    ))
    .expect("plan");
    let works = as_written(&first, true, true);
    // A Placement that names `a` is more specific: it places `a` from now on.
    let specific = mk_placement(
        "shop",
        "just-a",
        json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "a"}]}),
    );
    let mut obs = mk_observation(older.clone(), one(), objects.clone(), works.clone());
    obs.neighbours = vec![older.clone(), specific.clone()];
    let p = plan(&obs).expect("plan");
    assert!(p.removals.is_empty(), "{:?}", p.removals);
    assert!(p.writes.is_empty(), "{:?}", p.writes);
    assert_eq!(p.kept.values().collect::<Vec<_>>(), [&Keep::HandingOver]);

    // The other Placement's Work holds it, and its member applied it: this Work lets go.
    let mut theirs = mk_observation(specific.clone(), one(), objects.clone(), vec![]);
    theirs.neighbours = vec![older.clone(), specific.clone()];
    let theirs = plan(&theirs).expect("plan");
    obs.others = as_written(&theirs, true, true)
        .into_iter()
        .map(|work| Other {
            work,
            orphaned: false,
        })
        .collect();
    let p = plan(&obs).expect("plan");
    assert_eq!(
        p.removals.values().collect::<Vec<_>>(),
        [&Removal::TakenOver]
    );
    let written = &p.wanted[p.writes.iter().next().expect("a write")];
    assert_eq!(held_names(written), ["b"]);
}

fn mk_job(ns: &str, name: &str, spec: Value) -> DynamicObject {
    let mut spec = spec;
    spec["template"] = json!({"spec": {"restartPolicy": "Never",
        "containers": [{"name": "c", "image": "i"}]}});
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "uid": format!("u-{name}"), "generation": 1},
        "spec": spec,
    }))
    .expect("job")
}

/// Each member's `spec.<field>` of the copies of `name` the plan writes, as `m1=2 m2=2`.
fn job_field(p: &Plan, name: &str, field: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    for (key, id) in &p.copies {
        if key.object.name != name || !p.writes.contains(id) {
            continue;
        }
        let m = p.wanted[id]
            .spec
            .manifests
            .iter()
            .find(|m| m.metadata.name.as_deref() == Some(name))
            .expect("the copy's manifest");
        out.push(format!("{}={}", key.cluster, m.data["spec"][field]));
    }
    out.join(" ")
}

#[test]
fn a_divided_jobs_completions_are_shared_once_and_never_rewritten() {
    let placement = mk_placement(
        "shop",
        "p",
        json!({"replicaScheduling": {"type": "Divided", "division": "Even"},
               "rebalanceOnJoin": true, "failover": {"tolerationSeconds": 0}}),
    );
    let job = mk_job(
        "shop",
        "crunch",
        json!({"completions": 5, "parallelism": 3}),
    );
    let first = plan(&mk_observation(
        placement.clone(),
        three(),
        vec![job.clone()],
        vec![],
    ))
    .expect("plan");
    assert_eq!(job_field(&first, "crunch", "completions"), "m1=2 m2=2 m3=1");
    assert_eq!(job_field(&first, "crunch", "parallelism"), "m1=1 m2=1 m3=1");
    let works = as_written(&first, true, true);

    // A fourth member joins, with rebalanceOnJoin: a running Job's completions stay.
    let mut four = three();
    four.push(mk_cluster("m4", "True"));
    let joined = plan(&mk_observation(
        placement.clone(),
        four.clone(),
        vec![job.clone()],
        works.clone(),
    ))
    .expect("plan");
    assert!(joined.writes.is_empty(), "{:?}", joined.writes);
    assert_eq!(placed(&joined, "crunch"), "m1=2 m2=2 m3=1");

    // m1 fails: its two completions go to the member that runs none, the others keep theirs.
    four[0] = mk_cluster("m1", "False");
    let failed = plan(&mk_observation(placement, four, vec![job], works)).expect("plan");
    assert_eq!(placed(&failed, "crunch"), "m2=2 m3=1 m4=2");
    assert_eq!(job_field(&failed, "crunch", "completions"), "m4=2");
    assert_eq!(
        failed
            .kept
            .iter()
            .map(|(k, why)| (k.cluster.as_str(), why))
            .collect::<Vec<_>>(),
        vec![("m1", &Keep::AwaitingReplacements)],
        "m1's copy stays until its replacement is available"
    );
}

/// The members of the plan's decision for `name`, with their counts, as `m1=2 m2=2`.
fn placed(p: &Plan, name: &str) -> String {
    p.decisions
        .iter()
        .filter(|(k, _)| k.name == name)
        .flat_map(|(_, d)| &d.clusters)
        .map(|c| {
            format!(
                "{}={}",
                c.cluster,
                c.replicas.map_or("-".into(), |n| n.to_string())
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn an_indexed_job_or_a_cronjob_runs_on_one_member_and_moves_when_it_fails() {
    let placement = mk_placement(
        "shop",
        "p",
        json!({"replicaScheduling": {"type": "Divided", "division": "Even"},
               "failover": {"tolerationSeconds": 0}}),
    );
    let indexed = mk_job(
        "shop",
        "render",
        json!({"completions": 4, "completionMode": "Indexed"}),
    );
    let cron: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": "shop", "uid": "u-cron", "generation": 1},
        "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}}},
    }))
    .expect("cronjob");
    let objects = vec![indexed, cron];
    let first = plan(&mk_observation(
        placement.clone(),
        three(),
        objects.clone(),
        vec![],
    ))
    .expect("plan");
    let on = |p: &Plan, name: &str| -> Vec<String> {
        p.copies
            .keys()
            .filter(|k| k.object.name == name)
            .map(|k| k.cluster.to_string())
            .collect()
    };
    assert_eq!(on(&first, "render").len(), 1);
    assert_eq!(on(&first, "nightly").len(), 1);
    // Whole: the Indexed Job keeps its completions.
    assert_eq!(
        job_field(&first, "render", "completions"),
        format!("{}=4", on(&first, "render")[0])
    );
    let works = as_written(&first, true, true);
    let again = plan(&mk_observation(
        placement.clone(),
        three(),
        objects.clone(),
        works.clone(),
    ))
    .expect("plan");
    assert_eq!(on(&again, "nightly"), on(&first, "nightly"), "it stays");
    assert!(again.writes.is_empty());

    let runs_cron = on(&first, "nightly")[0].clone();
    let clusters: Vec<Arc<Cluster>> = ["m1", "m2", "m3"]
        .iter()
        .map(|c| mk_cluster(c, if *c == runs_cron { "False" } else { "True" }))
        .collect();
    let moving = plan(&mk_observation(placement, clusters, objects, works)).expect("plan");
    let now_on = on(&moving, "nightly");
    assert_eq!(now_on.len(), 1);
    assert_ne!(now_on[0], runs_cron, "it moves");
    assert!(
        moving.kept.iter().any(|(k, why)| k.cluster == runs_cron
            && k.object.name == "nightly"
            && *why == Keep::AwaitingReplacements),
        "the old copy stays until the new one is available: {:?}",
        moving.kept
    );
}

/// The profile of the custom kind Pipeline: workers divided, ready workers summed, healthy once
/// one is ready.
fn pipeline_kinds() -> flotilla_interpreter::Kinds {
    let spec: flotilla_api::WorkloadProfileSpec = serde_json::from_value(json!({
        "group": "example.com", "kind": "Pipeline", "replicas": ".spec.workers.count",
        "statusSums": [".status.readyWorkers"], "health": "self.status.readyWorkers > 0"}))
    .expect("profile");
    flotilla_interpreter::Kinds::new([(
        "example.com".to_string(),
        "Pipeline".to_string(),
        flotilla_interpreter::Profile::new(&spec),
    )])
}

fn mk_pipeline(workers: u32) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Pipeline",
        "metadata": {"name": "etl", "namespace": "shop", "uid": "u-etl", "generation": 1},
        "spec": {"workers": {"count": workers, "image": "etl:1"}, "source": "s3://in"},
    }))
    .expect("pipeline")
}

#[test]
fn a_custom_kind_with_a_profile_divides_at_its_path_and_its_works_carry_the_health_rule() {
    let placement = mk_placement(
        "shop",
        "p",
        json!({"replicaScheduling": {"type": "Divided", "division": "Even"}}),
    );
    let mut obs = mk_observation(placement.clone(), three(), vec![mk_pipeline(5)], vec![]);
    obs.kinds = pipeline_kinds();
    let first = plan(&obs).expect("plan");
    assert_eq!(placed(&first, "etl"), "m1=2 m2=2 m3=1");
    for work in first.wanted.values() {
        assert_eq!(
            work.spec.health.as_deref(),
            Some("self.status.readyWorkers > 0")
        );
        let m = &work.spec.manifests[0];
        assert_eq!(
            m.data["spec"]["workers"]["image"], "etl:1",
            "the rest is the hub's"
        );
        assert!(m.data["spec"].get("replicas").is_none(), "{m:?}");
    }
    assert_eq!(
        first
            .aggregated
            .iter()
            .map(|a| a.sums.clone())
            .collect::<Vec<_>>(),
        vec![vec!["/status/readyWorkers".to_string()]]
    );

    // The cache keeps the integers of a custom kind's spec, so the next pass knows each share.
    let cached = as_written(&first, true, true);
    let lean = manifests(&cached[0]);
    let m = &lean[0];
    assert_eq!(
        m.data,
        json!({"spec": {"workers": {"count": m.data["spec"]["workers"]["count"]}}})
    );
    let mut again = mk_observation(placement.clone(), three(), vec![mk_pipeline(5)], cached);
    again.kinds = pipeline_kinds();
    let again = plan(&again).expect("plan");
    assert!(
        again.writes.is_empty(),
        "nothing changed: {:?}",
        again.writes
    );

    // Without the profile (not accepted, deleted) the kind is copied whole, as any other.
    let whole = plan(&mk_observation(
        placement,
        three(),
        vec![mk_pipeline(5)],
        vec![],
    ))
    .expect("plan");
    assert_eq!(placed(&whole, "etl"), "m1=- m2=- m3=-");
    assert!(whole.wanted.values().all(|w| w.spec.health.is_none()));
}

fn mk_secret(ns: &str, name: &str, version: &str, data: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "namespace": ns, "uid": format!("u-{name}"),
                     "resourceVersion": version},
        "data": data,
    }))
    .expect("secret")
}

/// `s3cr3t`, as a Secret's `data` holds it.
const S3CR3T: &str = "czNjcjN0";

/// The hub Secrets of Works `works` as the cache has them once written: owned by their Work.
fn stored(works: &[Arc<Work>]) -> BTreeMap<WorkId, Vec<String>> {
    works
        .iter()
        .map(|w| (key_of(w), w.metadata.uid.iter().cloned().collect()))
        .collect()
}

/// The data of Secret `name` in the hub Secret of a Work, as the syncer reads it.
fn data_of(d: &DataSecret, name: &str) -> BTreeMap<String, String> {
    let value = d.data.get(name).expect("the Secret's data");
    flotilla_api::work_data::decode(&value.0)
        .expect("decodes")
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v.0).expect("text")))
        .collect()
}

#[test]
fn a_secrets_data_goes_into_its_works_hub_secret_and_never_into_the_work() {
    let placement = mk_placement("shop", "p", json!({}));
    let db = mk_secret("shop", "db", "5", json!({"password": S3CR3T}));
    let first = plan(&mk_observation(
        placement.clone(),
        three(),
        vec![db.clone()],
        vec![],
    ))
    .expect("plan");
    assert_eq!(first.writes.len(), 3);
    assert_eq!(
        first.data.len(),
        3,
        "a hub Secret per Work, written with it"
    );
    for id in &first.writes {
        let work = &first.wanted[id];
        let json = serde_json::to_string(work).expect("JSON");
        assert!(
            !json.contains(S3CR3T) && !json.contains("s3cr3t"),
            "no data in the Work: {json}"
        );
        let m = &work.spec.manifests[0];
        assert!(m.data.get("data").is_none() && m.data.get("stringData").is_none());
        assert_eq!(
            m.data["type"], "Opaque",
            "the rest of the Secret is in the Work"
        );
        assert_eq!(
            m.annotations()[annotations::DATA_SECRET],
            work_data::secret_name(&work.name_any())
        );
        assert_eq!(m.annotations()[annotations::DATA_VERSION], "5");
        let data = &first.data[id];
        assert_eq!(data.work, key_of(work));
        assert_eq!(data.owner, None, "a new Work: given to it once it exists");
        assert_eq!(
            data_of(data, "db"),
            [("password".into(), "s3cr3t".into())].into()
        );
        assert_eq!(data.labels[labels::WORK_DATA], labels::WORK_DATA_VALUE);
        assert_eq!(data.labels[labels::PLACEMENT], "p");
        assert_eq!(data.annotations[annotations::SOURCE_NAMESPACE], "shop");
        assert!(!format!("{data:?}").contains("s3cr3t"), "never in logs");
    }

    // Written, and the hub Secrets are their Works': nothing to write.
    let works = as_written(&first, true, true);
    let mut again = mk_observation(placement.clone(), three(), vec![db.clone()], works.clone());
    again.data_secrets = stored(&works);
    let again = plan(&again).expect("plan");
    assert!(again.writes.is_empty(), "{:?}", again.writes);
    assert!(again.data.is_empty(), "unchanged: {:?}", again.data);

    // New data (the hub Secret's new version): the Works and their hub Secrets are written.
    let changed = mk_secret("shop", "db", "6", json!({"password": "bjN3"}));
    let mut next = mk_observation(placement.clone(), three(), vec![changed], works.clone());
    next.data_secrets = stored(&works);
    let next = plan(&next).expect("plan");
    assert_eq!(next.writes.len(), 3);
    assert_eq!(next.data.len(), 3);
    for (id, data) in &next.data {
        assert_eq!(
            data_of(data, "db"),
            [("password".into(), "n3w".into())].into()
        );
        assert_eq!(
            data.owner.as_ref(),
            works
                .iter()
                .find(|w| key_of(w) == *id)
                .and_then(|w| w.metadata.uid.as_ref())
        );
        let m = &next.wanted[id].spec.manifests[0];
        assert_eq!(m.annotations()[annotations::DATA_VERSION], "6");
    }

    // A hub Secret gone, or not its Work's: written again (the Works are as they should be).
    let mut lost = mk_observation(placement.clone(), three(), vec![db.clone()], works.clone());
    lost.data_secrets = stored(&works);
    let first_id = key_of(&works[0]);
    lost.data_secrets.remove(&first_id);
    if let Some(owners) = lost.data_secrets.get_mut(&key_of(&works[1])) {
        owners.clear();
    }
    let lost = plan(&lost).expect("plan");
    assert!(lost.writes.is_empty());
    let rewritten: BTreeSet<&WorkId> = lost.data.keys().collect();
    assert_eq!(rewritten, [&first_id, &key_of(&works[1])].into());
    assert!(lost.data.values().all(|d| d.owner.is_some()));

    // The syncer found it missing for the Work's spec: written again.
    let mut reported: Vec<Arc<Work>> = works.clone();
    let mut w = (*reported[2]).clone();
    if let Some(status) = w.status.as_mut() {
        status.conditions[0].status = "False".into();
        status.conditions[0].reason = reasons::SECRET_DATA_MISSING.into();
    }
    reported[2] = Arc::new(w);
    let mut missing = mk_observation(placement, three(), vec![db], reported.clone());
    missing.data_secrets = stored(&reported);
    let missing = plan(&missing).expect("plan");
    assert!(missing.writes.is_empty());
    assert_eq!(
        missing.data.keys().collect::<Vec<_>>(),
        vec![&key_of(&reported[2])]
    );
}

#[test]
fn the_secrets_of_a_work_share_its_hub_secret_and_their_data_counts_toward_its_size() {
    let placement = mk_placement("shop", "p", json!({}));
    let a = mk_secret("shop", "a", "1", json!({"k": S3CR3T}));
    let b = mk_secret("shop", "b", "2", json!({"k": "bjN3"}));
    let both = plan(&mk_observation(
        placement.clone(),
        vec![mk_cluster("m1", "True")],
        vec![a.clone(), b.clone()],
        vec![],
    ))
    .expect("plan");
    assert_eq!(both.wanted.len(), 1, "one Work holds both");
    let data = both.data.values().next().expect("its hub Secret");
    assert_eq!(data.data.keys().collect::<Vec<_>>(), ["a", "b"]);

    // b goes: the Work and its hub Secret hold a alone.
    let works = as_written(&both, true, true);
    let mut gone = mk_observation(
        placement.clone(),
        vec![mk_cluster("m1", "True")],
        vec![a.clone()],
        works.clone(),
    );
    gone.data_secrets = stored(&works);
    gone.absent_since = [(ObjectKey::new("v1", "Secret", "b"), now())].into();
    gone.now = now() + GONE_GRACE;
    let gone = plan(&gone).expect("plan");
    let data = gone.data.values().next().expect("written again");
    assert_eq!(data.data.keys().collect::<Vec<_>>(), ["a"]);
    assert!(data.owner.is_some());

    // Large data: each Secret in a Work of its own, as a large ConfigMap would be.
    let large = |name: &str| {
        let bytes = "QUFB".repeat(BUNDLE_BYTES / 4);
        mk_secret("shop", name, "3", json!({"k": bytes}))
    };
    let split = plan(&mk_observation(
        placement,
        vec![mk_cluster("m1", "True")],
        vec![large("x"), large("y")],
        vec![],
    ))
    .expect("plan");
    assert_eq!(split.wanted.len(), 2, "{:?}", split.wanted.keys());
    assert_eq!(split.data.len(), 2);
    for w in split.wanted.values() {
        assert!(
            serde_json::to_string(w).expect("JSON").len() < 4096,
            "the Work is small"
        );
    }
}

fn mk_role_binding(ns: &str, name: &str, subject: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": ns, "uid": format!("u-{name}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [subject],
    }))
    .expect("rolebinding")
}

#[test]
fn a_binding_that_grants_more_in_a_member_is_placed_nowhere_and_its_copies_stay() {
    use crate::pod_security::Verdict;
    let placement = mk_placement("shop", "p", json!({}));
    let key = |name: &str| ObjectKey::new("rbac.authorization.k8s.io/v1", "RoleBinding", name);
    let objects = || {
        vec![
            mk_role_binding(
                "shop",
                "web",
                json!({"kind": "ServiceAccount", "name": "web"}),
            ),
            mk_role_binding("shop", "ops", json!({"kind": "Group", "name": "ops"})),
        ]
    };
    let mut obs = mk_observation(placement.clone(), three(), objects(), vec![]);
    obs.bindings.insert(key("web"), Verdict::Allowed);
    obs.bindings
        .insert(key("ops"), Verdict::Violates("it binds Group ops".into()));
    let first = plan(&obs).expect("plan");
    assert!(first.copies.keys().all(|k| k.object != key("ops")));
    assert_eq!(
        first.copies.len(),
        3,
        "the ServiceAccount's binding on every member"
    );
    let (_, decision) = first
        .decisions
        .iter()
        .find(|(k, _)| *k == key("ops"))
        .expect("a decision for ops");
    assert!(decision.clusters.is_empty());
    assert!(
        decision
            .excluded
            .iter()
            .all(|e| e.reason == reasons::BINDING_HELD_BACK)
    );
    assert_eq!(
        first.findings.bindings,
        ["RoleBinding ops: it binds Group ops"]
    );
    assert!(first.findings.pod_security.is_empty());

    // Placed before, held back now (or not known now): its copies are left as they are.
    for verdict in [
        Verdict::Violates("it binds Group ops".into()),
        Verdict::Unknown("the ClusterRole view could not be read".into()),
    ] {
        let mut obs = mk_observation(
            placement.clone(),
            three(),
            objects(),
            as_written(&first, true, true),
        );
        obs.bindings.insert(key("ops"), Verdict::Allowed);
        let placed = plan(&obs).expect("plan");
        assert_eq!(placed.copies.len(), 6);
        let mut obs = mk_observation(
            placement.clone(),
            three(),
            objects(),
            as_written(&placed, true, true),
        );
        obs.bindings.insert(key("web"), verdict.clone());
        obs.bindings.insert(key("ops"), Verdict::Allowed);
        let p = plan(&obs).expect("plan");
        assert!(p.deletes.is_empty(), "{verdict:?}: {:?}", p.deletes);
        assert!(p.removals.is_empty(), "{verdict:?}: {:?}", p.removals);
        assert!(
            p.kept
                .iter()
                .filter(|(k, _)| k.object == key("web"))
                .count()
                == 3,
            "{verdict:?}: {:?}",
            p.kept
        );
        if matches!(verdict, Verdict::Unknown(_)) {
            assert!(p.recheck_after.is_some());
        }
    }
}

#[test]
fn a_service_with_external_ips_is_placed_nowhere_and_its_copies_stay() {
    use crate::pod_security::Verdict;
    let placement = mk_placement("shop", "p", json!({}));
    let key = |name: &str| ObjectKey::new("v1", "Service", name);
    let service = |name: &str, external: Value| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "shop", "uid": format!("u-{name}")},
            "spec": {"ports": [{"port": 80}], "externalIPs": external},
        }))
        .expect("service")
    };
    let objects = || {
        vec![
            service("web", json!([])),
            service("trap", json!(["8.8.8.8"])),
        ]
    };
    let held = || crate::external_ips::judge(&objects()[1].data, false);
    assert!(matches!(held(), Verdict::Violates(_)));
    let mut obs = mk_observation(placement.clone(), three(), objects(), vec![]);
    obs.external_ips.insert(key("trap"), held());
    let first = plan(&obs).expect("plan");
    assert!(first.copies.keys().all(|k| k.object != key("trap")));
    assert_eq!(first.copies.len(), 3, "the other Service on every member");
    let (_, decision) = first
        .decisions
        .iter()
        .find(|(k, _)| *k == key("trap"))
        .expect("a decision for trap");
    assert!(decision.clusters.is_empty());
    assert!(
        !decision.excluded.is_empty()
            && decision
                .excluded
                .iter()
                .all(|e| e.reason == reasons::EXTERNAL_IPS_HELD_BACK)
    );
    assert_eq!(first.findings.external_ips.len(), 1);
    assert!(first.findings.external_ips[0].starts_with("Service trap: its spec.externalIPs"));

    // Placed before (an admin allowed it), held back now: its copies are left as they are.
    let obs = mk_observation(placement.clone(), three(), objects(), vec![]);
    let placed = plan(&obs).expect("plan");
    assert_eq!(placed.copies.len(), 6);
    let mut obs = mk_observation(
        placement.clone(),
        three(),
        objects(),
        as_written(&placed, true, true),
    );
    obs.external_ips.insert(key("trap"), held());
    let p = plan(&obs).expect("plan");
    assert!(p.deletes.is_empty(), "{:?}", p.deletes);
    assert!(p.removals.is_empty(), "{:?}", p.removals);
    assert_eq!(
        p.kept
            .iter()
            .filter(|(k, _)| k.object == key("trap"))
            .count(),
        3,
        "{:?}",
        p.kept
    );
}

#[test]
fn what_the_hub_made_for_itself_is_listed_but_everything_is_still_placed() {
    use crate::report::{Current, Outcome, placement_status};
    let placement = mk_placement("shop", "p", json!({}));
    // Helm's record of a release installed into the hub: stays on the hub by design.
    let mut record = mk_configmap("shop", "sh.helm.release.v1.web.v1", "u-record", "v");
    record.types = Some(kube::api::TypeMeta {
        api_version: "v1".into(),
        kind: "Secret".into(),
    });
    record.data = json!({"type": "helm.sh/release.v1", "data": {"release": "H4sI"}});
    let objects = vec![mk_configmap("shop", "settings", "u-settings", "v"), record];
    let status_of = |objects: Vec<DynamicObject>| {
        let p = plan(&mk_observation(placement.clone(), three(), objects, vec![])).expect("plan");
        let outcome = Outcome::default();
        placement_status(
            &placement,
            &p,
            &outcome,
            &Current::new(&p, &outcome, &[]),
            NOW,
        )
    };
    let status = status_of(objects.clone());
    let s = &status["status"];
    let all_placed = s["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "AllPlaced")
        .expect("AllPlaced");
    assert_eq!(all_placed["status"], "True", "{all_placed}");
    assert!(
        all_placed["message"]
            .as_str()
            .is_some_and(|m| m.contains("1 the hub made for itself")),
        "{all_placed}"
    );
    assert_eq!(s["notPlacedCount"], 1);
    assert_eq!(s["notPlaced"][0]["reason"], reasons::MADE_BY_THE_HUB);

    // Another Placement's neighbour that selects nothing leaves the ConfigMap out: that one
    // counts.
    let only_secrets = mk_placement(
        "shop",
        "p",
        json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Secret"}]}),
    );
    let mut obs = mk_observation(only_secrets.clone(), three(), objects, vec![]);
    obs.neighbours = vec![only_secrets.clone()];
    let p = plan(&obs).expect("plan");
    let outcome = Outcome::default();
    let status = placement_status(
        &only_secrets,
        &p,
        &outcome,
        &Current::new(&p, &outcome, &[]),
        NOW,
    );
    let all_placed = status["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "AllPlaced")
        .expect("AllPlaced")
        .clone();
    assert_eq!(all_placed["status"], "False", "{all_placed}");
    assert!(
        all_placed["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("1 object(s)") && m.contains("ConfigMap settings")),
        "{all_placed}"
    );
}
