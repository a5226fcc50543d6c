//! Bad input: a clear error with the path, never a panic, never a hang.

use std::time::{Duration, Instant};

use flotilla_schema::{Limits, Schema, SchemaError, compare};
use rstest::rstest;
use serde_json::{Value, json};

#[rstest]
#[case::recursive_ref(json!({"$ref": "#/definitions/A", "definitions": {"A": {"type": "object", "properties": {"next": {"$ref": "#/definitions/A"}}}}}), "RecursiveRef", ".next")]
#[case::mutual_recursion(json!({"$ref": "#/components/schemas/A", "components": {"schemas": {"A": {"type": "object", "properties": {"b": {"allOf": [{"$ref": "#/components/schemas/B"}]}}}, "B": {"type": "object", "properties": {"a": {"$ref": "#/components/schemas/A"}}}}}}), "RecursiveRef", ".b.a")]
#[case::dangling_ref(json!({"type": "object", "properties": {"a": {"$ref": "#/definitions/Missing"}}}), "DanglingRef", ".a")]
#[case::remote_ref(json!({"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}}), "UnsupportedRef", ".a")]
#[case::missing_type(json!({"type": "object", "properties": {"a": {"properties": {"b": {"type": "string"}}}}}), "NonStructural", ".a")]
#[case::properties_and_additional(json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}}), "NonStructural", ".")]
#[case::additional_false(json!({"type": "object", "properties": {"m": {"type": "object", "additionalProperties": false}}}), "NonStructural", ".m")]
#[case::pattern_properties(json!({"type": "object", "patternProperties": {"^a": {"type": "string"}}}), "NonStructural", ".")]
#[case::tuple_items(json!({"type": "array", "items": [{"type": "string"}]}), "NonStructural", ".")]
#[case::bad_type(json!({"type": "object", "properties": {"a": {"type": "text"}}}), "InvalidSchema", ".a")]
#[case::bad_minimum(json!({"type": "integer", "minimum": "3"}), "InvalidSchema", ".")]
#[case::exclusive_without_bound(json!({"type": "integer", "exclusiveMinimum": true}), "InvalidSchema", ".")]
#[case::not_an_object(json!(["type", "object"]), "InvalidSchema", ".")]
fn rejected(#[case] schema: Value, #[case] category: &str, #[case] path: &str) {
    let err = Schema::from_value(&schema).expect_err("invalid");
    assert_eq!(err.category(), category, "{err}");
    assert!(
        err.to_string().starts_with(&format!("{path}:")),
        "error should start with the path {path}: {err}"
    );
    // compare reports the same error instead of a verdict.
    assert!(compare(&schema, &json!({"type": "object"})).is_err());
}

#[test]
fn too_deep() {
    let mut s = json!({"type": "string"});
    for _ in 0..100 {
        s = json!({"type": "object", "properties": {"a": s}});
    }
    let err = Schema::from_value(&s).expect_err("too deep");
    assert!(
        matches!(err, SchemaError::TooDeep { limit: 64, .. }),
        "{err}"
    );
}

#[test]
fn exponential_reference_diamonds_are_bounded() {
    // D0 has two properties referring to D1, which has two referring to D2, ...: 2^40 nodes.
    let mut defs = serde_json::Map::new();
    for i in 0..40 {
        let next = json!({"$ref": format!("#/definitions/D{}", i + 1)});
        defs.insert(
            format!("D{i}"),
            json!({"type": "object", "properties": {"l": next.clone(), "r": next}}),
        );
    }
    defs.insert("D40".into(), json!({"type": "string"}));
    let doc = json!({"$ref": "#/definitions/D0", "definitions": defs});
    let started = Instant::now();
    let limits = Limits {
        max_depth: 64,
        max_nodes: 10_000,
    };
    let err = Schema::from_value_with(&doc, &limits).expect_err("too large");
    assert!(
        matches!(err, SchemaError::TooLarge { limit: 10_000, .. }),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn shared_references_are_fine() {
    let doc = json!({"type": "object", "properties": {
        "a": {"$ref": "#/definitions/S", "description": "sibling wins"},
        "b": {"allOf": [{"$ref": "#/definitions/S"}], "default": "x"}},
        "definitions": {"S": {"type": "string", "maxLength": 3}}});
    let s = Schema::from_value(&doc).expect("valid");
    assert_eq!(s.properties["a"].max_length, Some(3));
    assert_eq!(s.properties["b"].default, Some(json!("x")));
}

#[test]
fn the_deepest_allowed_schema_is_handled_on_a_small_stack() {
    let mut s = json!({"type": "string"});
    let mut o = json!("x");
    for _ in 0..63 {
        s = json!({"type": "object", "properties": {"a": s, "l": {"type": "array", "items": {"type": "string"}}}});
        o = json!({"a": o});
    }
    let mut narrower = s.clone();
    narrower["properties"]
        .as_object_mut()
        .expect("object")
        .remove("l");
    let c = compare(&s, &narrower).expect("within the limits");
    assert_eq!(c.changes.len(), 1);
    flotilla_schema::lcd(&[&s, &narrower]).expect("negotiable");
    assert!(
        flotilla_schema::check_object(&o, &s)
            .expect("valid")
            .is_empty()
    );
}
