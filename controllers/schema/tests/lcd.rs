//! The least common denominator: one row per narrowing rule, and conflicts.

use flotilla_schema::{SchemaError, Verdict, compare, lcd};
use rstest::rstest;
use serde_json::{Value, json};

fn with_field(field: Value) -> Value {
    json!({"type": "object", "properties": {"f": field}})
}

#[rstest]
#[case::property_intersection(
    json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}),
    json!({"type": "object", "properties": {"b": {"type": "string"}, "c": {"type": "string"}}}),
    json!({"type": "object", "properties": {"b": {"type": "string"}}}))]
#[case::required_union(
    json!({"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}),
    json!({"type": "object", "required": ["b"], "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}),
    json!({"type": "object", "required": ["a", "b"], "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}))]
#[case::enum_intersection(
    with_field(json!({"type": "string", "enum": ["a", "b", "c"]})),
    with_field(json!({"type": "string", "enum": ["c", "b", "d"]})),
    with_field(json!({"type": "string", "enum": ["b", "c"]})))]
#[case::enum_on_one_side(
    with_field(json!({"type": "integer"})),
    with_field(json!({"type": "integer", "enum": [1, 2]})),
    with_field(json!({"type": "integer", "enum": [1, 2]})))]
#[case::integer_over_number(
    with_field(json!({"type": "number", "minimum": 0})),
    with_field(json!({"type": "integer"})),
    with_field(json!({"type": "integer", "minimum": 0})))]
#[case::int_or_string_and_string(
    with_field(json!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]})),
    with_field(json!({"type": "string"})),
    with_field(json!({"type": "string"})))]
#[case::stricter_bounds(
    with_field(json!({"type": "integer", "minimum": 1, "maximum": 10})),
    with_field(json!({"type": "integer", "minimum": 0, "maximum": 5, "exclusiveMaximum": true})),
    with_field(json!({"type": "integer", "minimum": 1, "maximum": 5, "exclusiveMaximum": true})))]
#[case::stricter_lengths(
    with_field(json!({"type": "string", "minLength": 1, "maxLength": 63})),
    with_field(json!({"type": "string", "minLength": 2, "maxLength": 253})),
    with_field(json!({"type": "string", "minLength": 2, "maxLength": 63})))]
#[case::stricter_items(
    with_field(json!({"type": "array", "items": {"type": "string"}, "maxItems": 3, "uniqueItems": true})),
    with_field(json!({"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 9})),
    with_field(json!({"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3, "uniqueItems": true})))]
#[case::stricter_properties(
    with_field(json!({"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 3})),
    with_field(json!({"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 1})),
    with_field(json!({"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 1, "maxProperties": 3})))]
#[case::format_narrower(
    with_field(json!({"type": "integer", "format": "int64"})),
    with_field(json!({"type": "integer", "format": "int32"})),
    with_field(json!({"type": "integer", "format": "int32"})))]
#[case::both_patterns(
    with_field(json!({"type": "string", "pattern": "^a"})),
    with_field(json!({"type": "string", "pattern": "b$"})),
    with_field(json!({"type": "string", "pattern": "^a", "allOf": [{"pattern": "b$"}]})))]
#[case::multiple_of_lcm(
    with_field(json!({"type": "integer", "multipleOf": 4})),
    with_field(json!({"type": "integer", "multipleOf": 6})),
    with_field(json!({"type": "integer", "multipleOf": 12})))]
#[case::nullable_only_if_all(
    with_field(json!({"type": "string", "nullable": true})),
    with_field(json!({"type": "string"})),
    with_field(json!({"type": "string"})))]
#[case::preserve_unknown_only_if_all(
    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"a": {"type": "string"}}}),
    json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}),
    json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}))]
#[case::map_meets_struct(
    with_field(json!({"type": "object", "additionalProperties": {"type": "string", "maxLength": 5}})),
    with_field(json!({"type": "object", "properties": {"a": {"type": "string"}}})),
    with_field(json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": 5}}})))]
#[case::cel_rules_union(
    with_field(json!({"type": "integer", "x-kubernetes-validations": [{"rule": "self > 0"}]})),
    with_field(json!({"type": "integer", "x-kubernetes-validations": [{"rule": "self < 9"}]})),
    with_field(json!({"type": "integer", "x-kubernetes-validations": [{"rule": "self > 0"}, {"rule": "self < 9"}]})))]
#[case::any_of_both_hold(
    with_field(json!({"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}]})),
    with_field(json!({"type": "object", "anyOf": [{"required": ["c"]}]})),
    with_field(json!({"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}], "allOf": [{"anyOf": [{"required": ["c"]}]}]})))]
#[case::type_conflict_drops_the_field(
    json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}),
    json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}),
    json!({"type": "object", "properties": {"b": {"type": "string"}}}))]
#[case::list_type_conflict_drops_the_field(
    json!({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"}}}),
    json!({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}}),
    json!({"type": "object"}))]
fn narrows(#[case] a: Value, #[case] b: Value, #[case] expected: Value) {
    let result = lcd(&[&a, &b]).expect("negotiable");
    assert_eq!(result.schema, expected, "{result:#?}");
    // Every input accepts everything the LCD accepts.
    for input in [&a, &b] {
        let c = compare(&result.schema, input).expect("valid");
        assert_eq!(c.verdict(), Verdict::Safe, "{:#?}", c.changes);
    }
}

#[test]
fn conflicts_and_narrowings_name_paths_and_inputs() {
    let a = json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string", "default": "x"}}});
    let b = json!({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "string", "default": "y"}, "c": {"type": "string"}}});
    let result = lcd(&[&a, &b]).expect("negotiable");
    let conflicts: Vec<(&str, String)> = result
        .conflicts
        .iter()
        .map(|c| (c.path.as_str(), c.kind.to_string()))
        .collect();
    assert_eq!(
        conflicts,
        [
            (".a", "Conflict".to_string()),
            (".b", "DefaultChanged".to_string())
        ]
    );
    assert!(result.conflicts[0].message.contains("input #1"));
    let narrowed: Vec<(usize, &str)> = result
        .narrowings
        .iter()
        .filter(|n| n.change.kind.to_string() == "PropertyRemoved")
        .map(|n| (n.input, n.change.path.as_str()))
        .collect();
    assert_eq!(narrowed, [(0, ".a"), (1, ".a"), (1, ".c")]);
}

#[test]
fn a_conflict_in_a_required_field_removes_its_parent() {
    let a = json!({"type": "object", "properties": {"spec": {"type": "object", "required": ["x"], "properties": {"x": {"type": "string"}}}, "keep": {"type": "string"}}});
    let b = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"x": {"type": "integer"}}}, "keep": {"type": "string"}}});
    let result = lcd(&[&a, &b]).expect("negotiable");
    assert_eq!(
        result.schema,
        json!({"type": "object", "properties": {"keep": {"type": "string"}}})
    );
    assert_eq!(result.conflicts[0].path, ".spec");
    assert!(result.conflicts[0].message.contains(".spec.x"));
}

#[test]
fn roots_with_nothing_in_common_are_an_error() {
    let err = lcd(&[&json!({"type": "object"}), &json!({"type": "string"})])
        .expect_err("no common schema");
    assert!(matches!(err, SchemaError::NoCommonSchema { .. }), "{err}");
    assert!(matches!(lcd(&[]), Err(SchemaError::NoInputs)));
}

#[test]
fn lcd_of_one_is_itself() {
    let a = with_field(json!({"type": "string", "enum": ["a"], "pattern": "^a$"}));
    let result = lcd(&[&a]).expect("negotiable");
    assert_eq!(result.schema, a);
    assert!(result.conflicts.is_empty() && result.narrowings.is_empty());
}
