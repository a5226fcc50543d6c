//! A Cluster's pass on values: acceptance, the hub namespace, access, health and status.

use std::time::Duration;

use flotilla_api::{
    Cluster, ClusterSpec, ClusterStatus, SyncMode, Taint, TaintEffect, annotations, conditions,
    labels, names, reasons,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::health::{MemberFacts, ProbeOutcome};

fn now() -> Timestamp {
    "2026-06-01T12:00:00Z".parse().expect("a timestamp")
}

fn settings() -> Settings {
    Settings {
        auto_accept: false,
        grace_period: Duration::from_secs(40),
        probe_interval: Duration::from_secs(10),
        grants_syncer: true,
    }
}

fn cluster(spec: ClusterSpec) -> Cluster {
    let mut c = Cluster::new("east", spec);
    c.metadata.uid = Some("u1".into());
    c.metadata.generation = Some(1);
    c.metadata.creation_timestamp = Some(Time(now() - Duration::from_secs(600)));
    c
}

fn pull(accepted: bool) -> ClusterSpec {
    ClusterSpec {
        sync_mode: SyncMode::Pull,
        hub_accepts_client: accepted,
        ..ClusterSpec::default()
    }
}

fn namespace(label: Option<&str>, mark: Option<&str>) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(names::cluster_namespace("east")),
            labels: label.map(|l| [(labels::CLUSTER.to_string(), l.to_string())].into()),
            annotations: mark
                .map(|m| [(annotations::CLUSTER_UID.to_string(), m.to_string())].into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

fn ours() -> Option<Namespace> {
    Some(namespace(Some("east"), Some("u1")))
}

fn observed(probe: Option<ProbeOutcome>, namespace: Option<Namespace>) -> Observed {
    Observed {
        now: now(),
        probe,
        lease_renewed: None,
        namespace,
    }
}

fn healthy(cluster_id: &str) -> ProbeOutcome {
    ProbeOutcome::Healthy(MemberFacts {
        kubernetes_version: "v1.37.2".into(),
        allocatable: Default::default(),
        cluster_id: Some(cluster_id.into()),
    })
}

/// Condition `type_` of the planned status: status and reason.
fn said(p: &Plan, type_: &str) -> (String, String) {
    let c = p.status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .unwrap_or_else(|| panic!("no {type_} in {}", p.status));
    (
        c["status"].as_str().unwrap_or_default().to_string(),
        c["reason"].as_str().unwrap_or_default().to_string(),
    )
}

fn is(status: &str, reason: &str) -> (String, String) {
    (status.to_string(), reason.to_string())
}

fn with_condition(mut c: Cluster, type_: &str, status: &str, reason: &str) -> Cluster {
    let s = c.status.get_or_insert_with(ClusterStatus::default);
    s.conditions.push(Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: String::new(),
        last_transition_time: Time(now()),
        observed_generation: Some(1),
    });
    c
}

#[test]
fn a_hub_namespace_is_the_clusters_only_with_its_mark_or_from_before_marks() {
    let east = cluster(ClusterSpec::default());
    assert!(is_clusters_namespace(
        &namespace(Some("east"), Some("u1")),
        &east,
        false
    ));
    // Another Cluster of the name, deleted and made again, marked it.
    assert!(!is_clusters_namespace(
        &namespace(Some("east"), Some("u0")),
        &east,
        true
    ));
    // Unmarked: a squatter's, unless the Cluster joined before namespaces were marked.
    assert!(!is_clusters_namespace(
        &namespace(Some("east"), None),
        &east,
        false
    ));
    assert!(is_clusters_namespace(
        &namespace(Some("east"), None),
        &east,
        true
    ));
    assert!(!is_clusters_namespace(&namespace(None, None), &east, true));
}

#[test]
fn a_healthy_push_member_joins_is_ready_and_reports_what_it_is() {
    let p = plan(
        &cluster(ClusterSpec::default()),
        &observed(Some(healthy("k1")), None),
        &settings(),
    );
    assert_eq!(p.namespace, NamespaceStep::Make);
    assert_eq!(p.agent_access, Access::Leave);
    assert_eq!(p.syncer_access, Access::Grant);
    assert_eq!(said(&p, conditions::ACCEPTED).0, "True");
    assert_eq!(said(&p, conditions::JOINED), is("True", reasons::JOINED));
    assert_eq!(said(&p, conditions::READY).0, "True");
    assert_eq!(p.status["kubernetesVersion"], "v1.37.2");
    assert_eq!(p.status["clusterId"], "k1");
    assert_eq!(p.status["lastHeartbeatTime"], "2026-06-01T12:00:00Z");
    assert_eq!(p.requeue, Duration::from_secs(10));
    // Without a syncer grant configured, none is made.
    let mut without = settings();
    without.grants_syncer = false;
    let p = plan(
        &cluster(ClusterSpec::default()),
        &observed(Some(healthy("k1")), ours()),
        &without,
    );
    assert_eq!(
        (p.namespace, p.syncer_access),
        (NamespaceStep::Marked, Access::Leave)
    );
}

#[test]
fn a_kubeconfig_that_now_reaches_another_cluster_is_a_duplicate_and_keeps_the_recorded_facts() {
    let mut c = cluster(ClusterSpec::default());
    c.status = Some(ClusterStatus {
        cluster_id: Some("k1".into()),
        kubernetes_version: Some("v1.36.0".into()),
        ..ClusterStatus::default()
    });
    let p = plan(&c, &observed(Some(healthy("k2")), ours()), &settings());
    assert_eq!(
        said(&p, conditions::READY),
        is("False", reasons::DUPLICATE_NAME)
    );
    assert_eq!(p.status["clusterId"], "k1");
    assert_eq!(p.status["kubernetesVersion"], "v1.36.0");
    assert_eq!(p.status["lastHeartbeatTime"], serde_json::Value::Null);
}

#[test]
fn an_unaccepted_pull_member_gets_no_namespace_no_access_and_its_lease_is_not_believed() {
    let mut seen = observed(None, ours());
    seen.lease_renewed = Some(now());
    let p = plan(&cluster(pull(false)), &seen, &settings());
    assert_eq!(p.namespace, NamespaceStep::Leave);
    assert_eq!(p.agent_access, Access::Revoke);
    assert_eq!(p.syncer_access, Access::Leave);
    assert_eq!(
        said(&p, conditions::ACCEPTED),
        is("False", reasons::AWAITING_ACCEPTANCE)
    );
    assert_eq!(said(&p, conditions::JOINED).0, "False");
    assert_eq!(p.status["lastHeartbeatTime"], serde_json::Value::Null);
}

#[test]
fn acceptance_taken_back_revokes_the_agents_access_and_says_so() {
    let c = with_condition(
        cluster(pull(false)),
        conditions::ACCEPTED,
        "True",
        "Accepted",
    );
    let p = plan(&c, &observed(None, ours()), &settings());
    assert_eq!(p.agent_access, Access::Revoke);
    assert_eq!(
        said(&p, conditions::ACCEPTED),
        is("False", reasons::ACCEPTANCE_REVOKED)
    );
}

#[test]
fn an_accepted_pull_member_gets_its_access_and_is_ready_while_its_agent_renews() {
    let mut seen = observed(None, ours());
    seen.lease_renewed = Some(now() - Duration::from_secs(5));
    let p = plan(&cluster(pull(true)), &seen, &settings());
    assert_eq!(p.namespace, NamespaceStep::Marked);
    assert_eq!(p.agent_access, Access::Grant);
    // A pull member's syncer reads with the agent's rights: the hub syncer's grant goes.
    assert_eq!(p.syncer_access, Access::Revoke);
    assert_eq!(said(&p, conditions::READY).0, "True");
    assert_eq!(p.status["lastHeartbeatTime"], "2026-06-01T11:59:55Z");
    // Auto-accept does what hubAcceptsClient does.
    let mut auto = settings();
    auto.auto_accept = true;
    let p = plan(&cluster(pull(false)), &seen, &auto);
    assert_eq!(p.agent_access, Access::Grant);
}

#[test]
fn the_clusters_namespace_is_written_only_when_its_mark_or_label_is_missing() {
    let c = cluster(ClusterSpec::default());
    let step = |ns: Namespace, joined: bool| {
        let mut c = c.clone();
        if joined {
            c = with_condition(c, conditions::JOINED, "True", reasons::JOINED);
        }
        plan(&c, &observed(Some(healthy("k1")), Some(ns)), &settings()).namespace
    };
    assert_eq!(
        step(namespace(Some("east"), Some("u1")), false),
        NamespaceStep::Marked
    );
    // Its label taken off: put back.
    assert_eq!(
        step(namespace(None, Some("u1")), false),
        NamespaceStep::Mark
    );
    assert_eq!(
        step(namespace(Some("west"), Some("u1")), false),
        NamespaceStep::Mark
    );
    // From before namespaces were marked: marked now.
    assert_eq!(
        step(namespace(Some("east"), None), true),
        NamespaceStep::Mark
    );
}

#[test]
fn someone_elses_namespace_of_the_clusters_name_is_never_used() {
    for (theirs, says) in [
        (namespace(None, None), "someone made it first"),
        (
            namespace(Some("east"), Some("u0")),
            "made for another Cluster of this name (UID u0)",
        ),
    ] {
        // The squatter's namespace may hold a Lease of the agent's name: not believed.
        let mut seen = observed(None, Some(theirs));
        seen.lease_renewed = Some(now());
        let p = plan(&cluster(pull(true)), &seen, &settings());
        assert_eq!(p.status["lastHeartbeatTime"], serde_json::Value::Null);
        let NamespaceStep::Taken(why) = &p.namespace else {
            panic!("taken: {:?}", p.namespace);
        };
        assert!(why.contains(says), "{why}");
        assert_eq!(p.agent_access, Access::Revoke);
        assert_eq!(p.syncer_access, Access::Leave);
        assert_eq!(
            said(&p, conditions::JOINED),
            is("False", reasons::NAMESPACE_TAKEN)
        );
        assert_eq!(
            said(&p, conditions::READY),
            is("False", reasons::NAMESPACE_TAKEN)
        );
    }
    let mut deleting = namespace(Some("east"), Some("u1"));
    deleting.metadata.deletion_timestamp = Some(Time(now()));
    let p = plan(
        &cluster(ClusterSpec::default()),
        &observed(Some(healthy("k1")), Some(deleting)),
        &settings(),
    );
    assert_eq!(p.namespace, NamespaceStep::Terminating);
}

#[test]
fn taints_get_their_time_once_and_conditions_of_other_controllers_stay_out() {
    let taint = |time: Option<Timestamp>| Taint {
        key: "example.com/maintenance".into(),
        value: None,
        effect: TaintEffect::NoExecute,
        time_added: time.map(Time),
    };
    let spec = |taints| ClusterSpec {
        taints,
        ..ClusterSpec::default()
    };
    let earlier = now() - Duration::from_secs(60);
    let p = plan(
        &cluster(spec(vec![taint(Some(earlier)), taint(None)])),
        &observed(Some(healthy("k1")), ours()),
        &settings(),
    );
    assert_eq!(
        p.stamp_taints,
        Some(vec![taint(Some(earlier)), taint(Some(now()))])
    );
    assert_eq!(
        said(&p, conditions::SCHEDULABLE),
        is("True", reasons::TAINTED)
    );
    let c = with_condition(
        cluster(spec(vec![taint(Some(earlier))])),
        "Healthy",
        "True",
        "ByTheNegotiator",
    );
    let p = plan(&c, &observed(Some(healthy("k1")), ours()), &settings());
    assert_eq!(p.stamp_taints, None);
    let types: Vec<&str> = p.status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert_eq!(
        types.len(),
        4,
        "only the conditions registration owns: {types:?}"
    );
}
