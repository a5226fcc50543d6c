//! Per-object check: what an object sets that a member's schema cannot accept.

use flotilla_schema::{ProblemKind, check_object};
use rstest::rstest;
use serde_json::{Value, json};

fn member() -> Value {
    json!({"type": "object", "properties": {
        "spec": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 8, "pattern": "^[a-z]+$"},
            "replicas": {"type": "integer", "format": "int32", "minimum": 0, "maximum": 10},
            "step": {"type": "number", "multipleOf": 0.5},
            "mode": {"type": "string", "enum": ["Fast", "Slow"]},
            "port": {"x-kubernetes-int-or-string": true},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "note": {"type": "string", "nullable": true},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2, "x-kubernetes-list-type": "set"},
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}},
            "source": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
            "template": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {"spec": {"type": "object"}}}
        }}
    }})
}

#[test]
fn a_valid_object_has_no_problems() {
    let object = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n"}, "spec": {
        "name": "web", "replicas": 3, "step": 1.5, "mode": "Fast", "port": "http",
        "labels": {"a": "b"}, "extra": {"anything": [1, {"x": null}]}, "note": null,
        "tags": ["a", "b"], "ports": [{"name": "a", "port": 1}, {"name": "b", "port": 1}],
        "source": {"a": "x"}, "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {}}
    }});
    let problems = check_object(&object, &member()).expect("valid schema");
    assert!(problems.is_empty(), "{problems:#?}");
}

#[rstest]
#[case::unknown_field(json!({"newField": 1}), ".spec.newField", ProblemKind::UnknownField)]
#[case::nested_unknown_field(json!({"ports": [{"name": "a"}, {"name": "b", "appProtocol": "h2"}]}), ".spec.ports[1].appProtocol", ProblemKind::UnknownField)]
#[case::wrong_type(json!({"replicas": "3"}), ".spec.replicas", ProblemKind::WrongType)]
#[case::fraction_for_integer(json!({"replicas": 1.5}), ".spec.replicas", ProblemKind::WrongType)]
#[case::int_or_string_wrong(json!({"port": true}), ".spec.port", ProblemKind::WrongType)]
#[case::enum_value(json!({"mode": "Medium"}), ".spec.mode", ProblemKind::NotInEnum)]
#[case::above_maximum(json!({"replicas": 11}), ".spec.replicas", ProblemKind::OutOfBounds)]
#[case::too_long(json!({"name": "abcdefghi"}), ".spec.name", ProblemKind::OutOfBounds)]
#[case::pattern(json!({"name": "Web"}), ".spec.name", ProblemKind::PatternMismatch)]
#[case::multiple_of(json!({"step": 0.3}), ".spec.step", ProblemKind::NotMultiple)]
#[case::map_value(json!({"labels": {"a": 1}}), ".spec.labels.a", ProblemKind::WrongType)]
#[case::too_many_items(json!({"tags": ["a", "b", "c"]}), ".spec.tags", ProblemKind::OutOfBounds)]
#[case::set_duplicate(json!({"tags": ["a", "a"]}), ".spec.tags[1]", ProblemKind::Duplicate)]
#[case::map_key_duplicate(json!({"ports": [{"name": "a", "port": 1}, {"name": "a", "port": 2}]}), ".spec.ports[1]", ProblemKind::Duplicate)]
#[case::one_of_both(json!({"source": {"a": "x", "b": "y"}}), ".spec.source", ProblemKind::Junctor)]
#[case::int32_overflow(json!({"replicas": 4294967296u64}), ".spec.replicas", ProblemKind::OutOfBounds)]
fn problem(#[case] spec_fields: Value, #[case] path: &str, #[case] kind: ProblemKind) {
    let mut spec = json!({"name": "web"});
    for (k, v) in spec_fields.as_object().expect("object") {
        spec[k] = v.clone();
    }
    let problems = check_object(&json!({"spec": spec}), &member()).expect("valid schema");
    assert!(
        problems.iter().any(|p| p.path == path && p.kind == kind),
        "expected {kind:?} at {path}, got {problems:#?}"
    );
}

#[test]
fn missing_required_field() {
    let problems = check_object(&json!({"spec": {}}), &member()).expect("valid schema");
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].path, ".spec.name");
    assert_eq!(problems[0].kind, ProblemKind::MissingRequired);
}

#[test]
fn a_pattern_that_cannot_be_evaluated_is_not_a_pass() {
    let schema =
        json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "(?<=x)y"}}});
    let problems = check_object(&json!({"a": "xy"}), &schema).expect("valid schema");
    assert_eq!(problems[0].kind, ProblemKind::Undecidable);
}

/// A member whose schema has CEL rules: on `spec`, on list items and on a field.
fn with_rules() -> Value {
    json!({"type": "object",
        "x-kubernetes-validations": [{"rule": "self.kind == 'Widget'", "message": "only widgets", "fieldPath": ".kind"}],
        "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"},
        "spec": {"type": "object",
            "x-kubernetes-validations": [
                {"rule": "!has(self.min) || !has(self.max) || self.min <= self.max",
                 "message": "min must not exceed max", "fieldPath": ".min"},
                {"rule": "!has(self.items) || self.items.size() <= 3",
                 "messageExpression": "'at most 3 items, got ' + string(self.items.size())"}],
            "properties": {
                "min": {"type": "integer"}, "max": {"type": "integer"},
                "name": {"type": "string", "x-kubernetes-validations": [{"rule": "self == self.lowerAscii()"}]},
                "items": {"type": "array", "items": {"type": "object",
                    "x-kubernetes-validations": [{"rule": "self.name.matches('^[a-z]+$')", "message": "lower-case letters only"}],
                    "properties": {"name": {"type": "string"}}}},
                "stamp": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "immutable"}]},
                "size": {"type": "string", "x-kubernetes-validations": [{"rule": "quantity(self).isLessThan(quantity('1Gi'))"}]},
                "opt": {"type": "object", "properties": {"a": {"type": "string"}},
                    "x-kubernetes-validations": [{"rule": "self.a != ''"}]}
            }}
    }})
}

fn widget(spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": spec})
}

#[test]
fn cel_rules_that_hold_are_no_problem() {
    let object = widget(json!({"min": 1, "max": 2, "name": "web",
        "items": [{"name": "a"}, {"name": "b"}]}));
    let problems = check_object(&object, &with_rules()).expect("valid schema");
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn a_violated_cel_rule_is_reported_with_its_message_and_field_path() {
    let object = widget(json!({"min": 3, "max": 2, "name": "Web",
        "items": [{"name": "a"}, {"name": "B"}, {"name": "c"}, {"name": "d"}]}));
    let problems = check_object(&object, &with_rules()).expect("valid schema");
    let found = |path: &str, message: &str| {
        assert!(
            problems.iter().any(|p| p.path == path
                && p.kind == ProblemKind::RuleViolated
                && p.message == message),
            "expected {message:?} at {path}: {problems:#?}"
        );
    };
    found(".spec.min", "min must not exceed max");
    found(".spec", "at most 3 items, got 4");
    found(".spec.name", "failed rule: self == self.lowerAscii()");
    // Rules of list items are evaluated per item, with its index.
    found(".spec.items[1]", "lower-case letters only");
    assert_eq!(problems.len(), 4, "{problems:#?}");
    // At the root, the path is the rule's fieldPath.
    let problems = check_object(&json!({"kind": "Gadget"}), &with_rules()).expect("valid");
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].path, ".kind");
    assert_eq!(problems[0].kind, ProblemKind::RuleViolated);
    assert_eq!(problems[0].message, "only widgets");
}

#[rstest]
#[case::transition_rule(json!({"stamp": "x"}), ".spec.stamp", "transition rule")]
#[case::unknown_function(json!({"size": "1Mi"}), ".spec.size", "it uses quantity, which this check does not implement")]
#[case::field_without_has(json!({"opt": {}}), ".spec.opt", "No such key")]
fn a_cel_rule_that_cannot_be_evaluated_is_undecidable(
    #[case] spec: Value,
    #[case] path: &str,
    #[case] why: &str,
) {
    let problems = check_object(&widget(spec), &with_rules()).expect("valid schema");
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].path, path);
    assert_eq!(problems[0].kind, ProblemKind::Undecidable);
    assert!(problems[0].message.contains(why), "{}", problems[0].message);
}

#[test]
fn cel_rule_evaluations_are_capped_per_object() {
    let schema = json!({"type": "object", "properties": {"tags": {"type": "array",
        "items": {"type": "string", "x-kubernetes-validations": [{"rule": "self.size() > 0"}]}}}});
    let tags: Vec<String> = (0..6000).map(|i| format!("t{i}")).collect();
    let problems = check_object(&json!({"tags": tags}), &schema).expect("valid schema");
    assert_eq!(problems.len(), 1000, "one per rule beyond the cap");
    assert!(problems.iter().all(|p| p.kind == ProblemKind::Undecidable));
    assert_eq!(problems[0].path, ".tags[5000]");
}
