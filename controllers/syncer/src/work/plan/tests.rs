//! The Work controller's rules on values: what is applied and removed, what an unreachable
//! member changes, which conditions are announced, and when a Work is looked at again.

use flotilla_api::condition::Verdict as Said;
use flotilla_api::{ManifestStatus, names};
use k8s_openapi::jiff::Timestamp;
use kube::core::DynamicObject;
use serde_json::json;

use super::*;

fn config_map(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "team-a"}, "data": {"k": "v"}})
}

fn identity(name: &str) -> ManifestIdentity {
    ManifestIdentity {
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
        resource: None,
        namespace: Some("team-a".into()),
        name: name.into(),
    }
}

/// A Work of member1 with `manifests` that applied `applied` before.
fn work(manifests: Vec<serde_json::Value>, applied: &[&str]) -> Work {
    let status: Vec<ManifestStatus> = applied
        .iter()
        .enumerate()
        .map(|(i, name)| ManifestStatus {
            ordinal: i32::try_from(i).expect("few"),
            identity: identity(name),
            ..Default::default()
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
        "metadata": {"name": "configmaps", "namespace": names::cluster_namespace("member1"),
                     "uid": "w-1", "generation": 2},
        "spec": {"manifests": manifests},
        "status": {"manifests": status},
    }))
    .expect("a Work")
}

fn applying(plan: Plan) -> Applying {
    match plan {
        Plan::Apply(a) => a,
        Plan::Nothing => panic!("nothing"),
        Plan::Unavailable { applied, .. } => panic!("unavailable: {applied:?}"),
    }
}

fn names_of(ids: &[ManifestIdentity]) -> Vec<&str> {
    ids.iter().map(|i| i.name.as_str()).collect()
}

#[test]
fn what_a_work_names_no_more_is_removed_and_nothing_while_a_manifest_is_unreadable() {
    let w = work(vec![config_map("a"), config_map("b")], &["a", "b", "c"]);
    let a = applying(plan(&w, Ok(())));
    assert_eq!(
        a.ready
            .iter()
            .map(|p| p.identity.name.as_str())
            .collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(names_of(&a.to_remove), ["c"]);
    assert!(a.invalid.is_empty());

    // A manifest that names no object could be the one that named "c": nothing is removed.
    let nameless = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}});
    let w = work(vec![config_map("a"), nameless], &["a", "b", "c"]);
    let a = applying(plan(&w, Ok(())));
    assert_eq!(a.ready.len(), 1);
    assert_eq!(a.invalid.len(), 1, "{:?}", a.invalid);
    assert_eq!(a.invalid[0].0, Some(1), "{:?}", a.invalid);
    assert!(
        a.invalid[0].1.contains("spec.manifests[1]") && a.invalid[0].1.contains("metadata.name"),
        "{:?}",
        a.invalid
    );
    assert!(a.to_remove.is_empty(), "{:?}", names_of(&a.to_remove));

    // A manifest as a JSON string is read as the object; one that is no JSON object is named.
    let w = work(
        vec![
            json!(config_map("a").to_string()),
            json!("{\"apiVersion\": \"v1\", \"kind\": "),
            json!(42),
        ],
        &["a", "b"],
    );
    let a = applying(plan(&w, Ok(())));
    assert_eq!(
        names_of(
            &a.ready
                .iter()
                .map(|p| p.identity.clone())
                .collect::<Vec<_>>()
        ),
        ["a"]
    );
    assert_eq!(
        a.invalid,
        [
            (
                Some(1),
                "spec.manifests[1] is not an object with an apiVersion and a kind".to_string()
            ),
            (
                Some(2),
                "spec.manifests[2] is not an object with an apiVersion and a kind".to_string()
            ),
        ]
    );
    assert!(a.to_remove.is_empty(), "{:?}", names_of(&a.to_remove));

    // Once the manifests are fixed, the entry reported for one that named nothing removes
    // nothing: it applied nothing.
    let mut w = work(vec![config_map("a")], &["a"]);
    if let Some(status) = w.status.as_mut() {
        status.manifests.push(ManifestStatus {
            ordinal: 1,
            identity: ManifestIdentity::default(),
            ..Default::default()
        });
    }
    let a = applying(plan(&w, Ok(())));
    assert!(a.to_remove.is_empty(), "{:?}", a.to_remove);
}

#[test]
fn an_unreachable_member_is_said_once_and_changes_nothing() {
    let mut w = work(vec![config_map("a")], &["a", "gone"]);
    let why = Unavailable::NotReady {
        cluster: "member1".into(),
        reason: "ProbeFailed".into(),
        message: "connection refused".into(),
    };
    let Plan::Unavailable { applied, announce } = plan(&w, Err(&why)) else {
        panic!("applies into a member that does not answer");
    };
    assert_eq!(
        (applied.status, applied.reason),
        ("Unknown", reasons::CLUSTER_UNAVAILABLE)
    );
    assert!(applied.message.contains("left as they are"), "{applied:?}");
    assert!(announce);

    // Said already: not announced again.
    w.status.as_mut().expect("a status").conditions =
        vec![applied.into_condition(Timestamp::UNIX_EPOCH, Some(2))];
    let Plan::Unavailable { announce, .. } = plan(&w, Err(&why)) else {
        panic!("applies into a member that does not answer");
    };
    assert!(!announce);
}

#[test]
fn an_invalid_health_rule_leaves_the_generic_rules_and_says_why() {
    let mut w = work(vec![config_map("a")], &[]);
    w.spec.health = Some("self.status.(".into());
    let a = applying(plan(&w, Ok(())));
    assert!(a.rule.is_none());
    assert!(a.invalid_rule.is_some());
    w.spec.health = Some("self.status.ready == true".into());
    let a = applying(plan(&w, Ok(())));
    assert!(a.rule.is_some() && a.invalid_rule.is_none());
}

fn applied(name: &str) -> (ManifestIdentity, Outcome) {
    let object: DynamicObject = serde_json::from_value(config_map(name)).expect("a ConfigMap");
    (identity(name), Outcome::Applied(Box::new(object)))
}

fn refused(name: &str) -> (ManifestIdentity, Outcome) {
    (
        identity(name),
        Outcome::Failed {
            reason: reasons::APPLY_FAILED,
            message: "admission webhook denied the request".into(),
        },
    )
}

/// The status of a Work whose conditions are `verdicts`.
fn said(verdicts: &[Said]) -> WorkStatus {
    WorkStatus {
        conditions: verdicts
            .iter()
            .map(|v| v.into_condition(Timestamp::UNIX_EPOCH, Some(2)))
            .collect(),
        ..Default::default()
    }
}

#[test]
fn a_refused_manifest_is_announced_once_per_change_of_reason() {
    let outcomes = [applied("a"), refused("b")];
    let first = judge(&WorkStatus::default(), &outcomes, None);
    assert!(!first.applied);
    let announced: Vec<(&str, &str, &str)> = first
        .announce
        .iter()
        .map(|(v, action)| (v.type_, v.status, *action))
        .collect();
    assert_eq!(announced, [(conditions::APPLIED, "False", "Apply")]);

    // The next pass, still refused: nothing new to say.
    let again = judge(&said(&first.verdicts), &outcomes, None);
    assert!(again.announce.is_empty(), "{:?}", again.announce);
    assert_eq!(again.verdicts, first.verdicts);

    // Applied at last: a success is not a Warning.
    let fixed = judge(&said(&first.verdicts), &[applied("a"), applied("b")], None);
    assert!(fixed.applied);
    assert!(fixed.announce.is_empty(), "{:?}", fixed.announce);
}

#[test]
fn only_a_member_that_did_not_answer_is_unreachable() {
    let silent = (
        identity("a"),
        Outcome::Failed {
            reason: reasons::CLUSTER_UNAVAILABLE,
            message: "timed out".into(),
        },
    );
    assert!(unreachable(&[applied("b"), silent]));
    assert!(!unreachable(&[applied("b"), refused("c")]));
}

#[test]
fn a_work_is_looked_at_again_soon_while_pruning_or_failing_and_at_the_resync_otherwise() {
    let resync = Duration::from_secs(300);
    assert_eq!(recheck(true, true, resync), PRUNE_RECHECK);
    assert_eq!(recheck(false, true, resync), resync);
    assert_eq!(recheck(false, false, resync), NOT_APPLIED_RECHECK);
    let short = Duration::from_secs(3);
    assert_eq!(recheck(false, false, short), short);
}
