//! A version served in the new CRD that the old one did not serve, compared with every version
//! served in both: one table row per case, with the expected verdict, and the path and verdict
//! of the `ServedVersionNarrower` change (or none).

use flotilla_schema::{Limits, SchemaError, Verdict, compare_crds, compare_crds_with};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use rstest::rstest;
use serde_json::{Value, json};

/// A version whose schema is `.spec` with the properties `fields`, each a string unless given
/// as `(name, schema)`.
fn version(name: &str, served: bool, storage: bool, fields: &[(&str, Value)]) -> Value {
    let properties: serde_json::Map<String, Value> = fields
        .iter()
        .map(|(f, s)| (f.to_string(), s.clone()))
        .collect();
    json!({
        "name": name, "served": served, "storage": storage,
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": properties}}}},
    })
}

fn string() -> Value {
    json!({"type": "string"})
}

/// v1, served and stored, with `.spec.a` and `.spec.b`.
fn v1() -> Value {
    version("v1", true, true, &[("a", string()), ("b", string())])
}

fn crd(versions: Vec<Value>, conversion: Option<Value>) -> CustomResourceDefinition {
    let mut spec = json!({
        "group": "example.com", "scope": "Namespaced",
        "names": {"kind": "Widget", "listKind": "WidgetList", "plural": "widgets", "singular": "widget"},
        "versions": versions,
    });
    if let Some(c) = conversion {
        spec["conversion"] = c;
    }
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"}, "spec": spec,
    }))
    .expect("a CRD")
}

fn webhook() -> Value {
    json!({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
        "clientConfig": {"service": {"namespace": "ns", "name": "conv"}}}})
}

const KIND: &str = "ServedVersionNarrower";

#[rstest]
// An added version that lacks a field of a version served before: a write through v2 prunes it.
#[case::added_narrower(
    crd(vec![v1()], None),
    crd(vec![v1(), version("v2", true, false, &[("a", string())])], None),
    Verdict::Breaking, Some((".spec.versions[v1->v2].spec.b", Verdict::Breaking)))]
#[case::added_narrower_strategy_none(
    crd(vec![v1()], Some(json!({"strategy": "None"}))),
    crd(vec![v1(), version("v2", true, false, &[("a", string())])], Some(json!({"strategy": "None"}))),
    Verdict::Breaking, Some((".spec.versions[v1->v2].spec.b", Verdict::Breaking)))]
// Any difference that is not safe counts, not only removed fields.
#[case::added_type_changed(
    crd(vec![v1()], None),
    crd(vec![v1(), version("v2", true, false, &[("a", string()), ("b", json!({"type": "integer"}))])], None),
    Verdict::Breaking, Some((".spec.versions[v1->v2].spec.b", Verdict::Breaking)))]
#[case::added_required(
    crd(vec![v1()], None),
    crd(vec![v1(), json!({"name": "v2", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "required": ["a"], "properties": {"a": string(), "b": string()}}}}}})], None),
    Verdict::Breaking, Some((".spec.versions[v1->v2].spec.a", Verdict::Breaking)))]
// What the schema comparison cannot decide stays undecided.
#[case::added_pattern_changed(
    crd(vec![version("v1", true, true, &[("a", json!({"type": "string", "pattern": "^a+$"}))])], None),
    crd(vec![version("v1", true, true, &[("a", json!({"type": "string", "pattern": "^a+$"}))]),
             version("v2", true, false, &[("a", json!({"type": "string", "pattern": "^b+$"}))])], None),
    Verdict::Unknown, Some((".spec.versions[v1->v2].spec.a", Verdict::Unknown)))]
// An added version that accepts everything v1 accepts, and more.
#[case::added_superset(
    crd(vec![v1()], None),
    crd(vec![v1(), version("v2", true, false, &[("a", string()), ("b", string()), ("c", string())])], None),
    Verdict::Safe, None)]
#[case::added_same(crd(vec![v1()], None), crd(vec![v1(), version("v2", true, false, &[("a", string()), ("b", string())])], None), Verdict::Safe, None)]
// A conversion webhook may map the field elsewhere: it decides.
#[case::added_narrower_webhook(
    crd(vec![v1()], Some(webhook())),
    crd(vec![v1(), version("v2", true, false, &[("a", string())])], Some(webhook())),
    Verdict::Unknown, Some((".spec.versions[v1->v2].spec.b", Verdict::Unknown)))]
#[case::added_superset_webhook(
    crd(vec![v1()], Some(webhook())),
    crd(vec![v1(), version("v2", true, false, &[("a", string()), ("b", string()), ("c", string())])], Some(webhook())),
    Verdict::Safe, None)]
// A version that existed unserved and is now served is compared like an added one.
#[case::newly_served_narrower(
    crd(vec![v1(), version("v2", false, false, &[("a", string())])], None),
    crd(vec![v1(), version("v2", true, false, &[("a", string())])], None),
    Verdict::Breaking, Some((".spec.versions[v1->v2].spec.b", Verdict::Breaking)))]
// Versions served in both CRDs are not compared with each other again.
#[case::already_served(
    crd(vec![v1(), version("v2", true, false, &[("a", string())])], None),
    crd(vec![v1(), version("v2", true, false, &[("a", string())])], None),
    Verdict::Safe, None)]
#[case::already_served_both_changed(
    crd(vec![v1(), version("v2", true, false, &[("a", string())])], None),
    crd(vec![version("v1", true, true, &[("a", string()), ("b", string()), ("c", string())]),
             version("v2", true, false, &[("a", string()), ("d", string())])], None),
    Verdict::Safe, None)]
// Only versions served in both are the reference: not an unserved one, not a removed one.
#[case::existing_unserved(
    crd(vec![v1(), version("v0", false, false, &[("z", string())])], None),
    crd(vec![v1(), version("v0", false, false, &[("z", string())]), version("v2", true, false, &[("a", string()), ("b", string())])], None),
    Verdict::Safe, None)]
#[case::added_and_unserved(
    crd(vec![v1()], None),
    crd(vec![version("v1", false, true, &[("a", string()), ("b", string())]), version("v2", true, false, &[("a", string())])], None),
    Verdict::Breaking, None)]
#[case::added_unserved(
    crd(vec![v1()], None),
    crd(vec![v1(), version("v2", false, false, &[("a", string())])], None),
    Verdict::Safe, None)]
fn served_version_added(
    #[case] old: CustomResourceDefinition,
    #[case] new: CustomResourceDefinition,
    #[case] verdict: Verdict,
    #[case] expected: Option<(&str, Verdict)>,
) {
    let c = compare_crds(&old, &new).expect("both CRDs are valid");
    let found: Vec<_> = c
        .changes
        .iter()
        .filter(|ch| ch.kind.to_string() == KIND)
        .collect();
    match expected {
        None => assert!(found.is_empty(), "no {KIND} expected: {:#?}", c.changes),
        Some((path, change_verdict)) => {
            assert_eq!(found.len(), 1, "one {KIND} expected: {:#?}", c.changes);
            let ch = found[0];
            assert_eq!(ch.path, path, "{ch:#?}");
            assert_eq!(ch.verdict, change_verdict, "{ch:#?}");
            assert_eq!(ch.version.as_deref(), Some("v2"), "{ch:#?}");
            assert!(
                ch.message.contains("served version v2") && ch.message.contains("version v1"),
                "the message names both versions: {}",
                ch.message
            );
            if new
                .spec
                .conversion
                .as_ref()
                .is_some_and(|c| c.strategy == "Webhook")
            {
                assert!(
                    ch.message.contains("conversion webhook decides"),
                    "{}",
                    ch.message
                );
            }
        }
    }
    assert_eq!(
        c.verdict(),
        verdict,
        "overall verdict; changes: {:#?}",
        c.changes
    );
}

#[test]
fn compared_with_every_version_served_in_both() {
    let old = crd(
        vec![
            version("v1beta1", true, false, &[("a", string()), ("c", string())]),
            v1(),
        ],
        None,
    );
    let mut versions = vec![
        version("v1beta1", true, false, &[("a", string()), ("c", string())]),
        v1(),
    ];
    versions.push(version(
        "v2",
        true,
        false,
        &[("a", string()), ("b", string())],
    ));
    let c = compare_crds(&old, &crd(versions, None)).expect("valid");
    let paths: Vec<&str> = c
        .changes
        .iter()
        .filter(|ch| ch.kind.to_string() == KIND)
        .map(|ch| ch.path.as_str())
        .collect();
    assert_eq!(paths, [".spec.versions[v1beta1->v2].spec.c"]);
    assert_eq!(c.verdict(), Verdict::Breaking);
}

#[test]
fn a_root_difference_is_at_the_pair() {
    // v1 has no schema (any object), v2 has one.
    let mut bare = v1();
    bare.as_object_mut().expect("object").remove("schema");
    let old = crd(vec![bare.clone()], None);
    let new = crd(
        vec![bare, version("v2", true, false, &[("a", string())])],
        None,
    );
    let c = compare_crds(&old, &new).expect("valid");
    let found: Vec<_> = c
        .changes
        .iter()
        .filter(|ch| ch.kind.to_string() == KIND)
        .collect();
    assert_eq!(found.len(), 1, "{:#?}", c.changes);
    assert_eq!(found[0].path, ".spec.versions[v1->v2]");
    assert_eq!(found[0].verdict, Verdict::Breaking);
}

#[test]
fn pairs_beyond_the_node_limit_are_unknown() {
    // Every schema has 4 nodes (root, spec, a, b): within the limit one at a time, but the
    // second existing version would take v2's comparisons past it.
    let limits = Limits {
        max_depth: 64,
        max_nodes: 6,
    };
    let two =
        |name: &str, storage| version(name, true, storage, &[("a", string()), ("b", string())]);
    let old = crd(vec![two("v1", true), two("v1beta1", false)], None);
    let new = crd(
        vec![two("v1", true), two("v1beta1", false), two("v2", false)],
        None,
    );
    let c = compare_crds_with(&old, &new, &limits).expect("each schema is within the limits");
    let found: Vec<_> = c
        .changes
        .iter()
        .filter(|ch| ch.kind.to_string() == KIND)
        .collect();
    assert_eq!(found.len(), 1, "{:#?}", c.changes);
    assert_eq!(found[0].path, ".spec.versions[v1beta1->v2]");
    assert_eq!(found[0].verdict, Verdict::Unknown);
    assert!(
        found[0].message.contains("6 schema nodes"),
        "{}",
        found[0].message
    );
    // With the default limits every pair is compared, and they are the same.
    assert_eq!(
        compare_crds(&old, &new).expect("valid").verdict(),
        Verdict::Safe
    );
}

#[test]
fn an_invalid_added_version_is_an_error_naming_it() {
    let bad = json!({"name": "v2", "served": true, "storage": false,
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"properties": {}}}}}});
    let err = compare_crds(&crd(vec![v1()], None), &crd(vec![v1(), bad], None))
        .expect_err("v2's schema is not structural");
    assert!(
        matches!(&err, SchemaError::InVersion { version, .. } if version == "v2"),
        "{err}"
    );
}
