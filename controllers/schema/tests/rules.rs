//! One table row per compatibility rule: a minimal old/new pair, the expected verdict, path and
//! kind of the change the rule reports.

use flotilla_schema::{Verdict, compare};
use rstest::rstest;
use serde_json::{Value, json};

/// An object schema with one property `f` of schema `field`.
fn with_field(field: Value) -> Value {
    json!({"type": "object", "properties": {"f": field}})
}

#[rstest]
// Properties (kcp: added compatible, removed narrowed; OLM: removed is an error).
#[case::property_added(json!({"type": "object"}), with_field(json!({"type": "string"})), Verdict::Safe, ".f", "PropertyAdded")]
#[case::property_removed(with_field(json!({"type": "string"})), json!({"type": "object"}), Verdict::Narrowing, ".f", "PropertyRemoved")]
#[case::property_removed_but_preserved(with_field(json!({"type": "string"})), json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}), Verdict::Safe, ".f", "PropertyRemoved")]
#[case::property_added_over_preserved(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}), json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"f": {"type": "string"}}}), Verdict::Narrowing, ".f", "PropertyAdded")]
// Types (kcp: integer→number compatible, number→integer narrowed, others rejected).
#[case::integer_to_number(with_field(json!({"type": "integer"})), with_field(json!({"type": "number"})), Verdict::Safe, ".f", "TypeWidened")]
#[case::number_to_integer(with_field(json!({"type": "number"})), with_field(json!({"type": "integer"})), Verdict::Narrowing, ".f", "TypeNarrowed")]
#[case::string_to_integer(with_field(json!({"type": "string"})), with_field(json!({"type": "integer"})), Verdict::Breaking, ".f", "TypeChanged")]
#[case::object_to_array(with_field(json!({"type": "object"})), with_field(json!({"type": "array", "items": {"type": "string"}})), Verdict::Breaking, ".f", "TypeChanged")]
#[case::boolean_to_string(with_field(json!({"type": "boolean"})), with_field(json!({"type": "string"})), Verdict::Breaking, ".f", "TypeChanged")]
#[case::int_or_string_lost(with_field(json!({"x-kubernetes-int-or-string": true})), with_field(json!({"type": "integer"})), Verdict::Narrowing, ".f", "IntOrStringRemoved")]
#[case::int_or_string_gained(with_field(json!({"type": "string"})), with_field(json!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]})), Verdict::Safe, ".f", "IntOrStringAdded")]
#[case::int_or_string_to_boolean(with_field(json!({"x-kubernetes-int-or-string": true})), with_field(json!({"type": "boolean"})), Verdict::Breaking, ".f", "TypeChanged")]
#[case::any_to_typed(with_field(json!({"x-kubernetes-preserve-unknown-fields": true})), with_field(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})), Verdict::Narrowing, ".f", "TypeAdded")]
// Format (kcp: any change rejected).
#[case::format_added(with_field(json!({"type": "string"})), with_field(json!({"type": "string", "format": "date-time"})), Verdict::Narrowing, ".f", "FormatAdded")]
#[case::format_removed(with_field(json!({"type": "string", "format": "date-time"})), with_field(json!({"type": "string"})), Verdict::Safe, ".f", "FormatRemoved")]
#[case::format_changed(with_field(json!({"type": "string", "format": "date-time"})), with_field(json!({"type": "string", "format": "byte"})), Verdict::Breaking, ".f", "FormatChanged")]
#[case::format_int32_to_int64(with_field(json!({"type": "integer", "format": "int32"})), with_field(json!({"type": "integer", "format": "int64"})), Verdict::Safe, ".f", "FormatChanged")]
#[case::format_int64_to_int32(with_field(json!({"type": "integer", "format": "int64"})), with_field(json!({"type": "integer", "format": "int32"})), Verdict::Narrowing, ".f", "FormatChanged")]
// Enums, on any type (OLM: added enum or removed values are errors; added values are fine).
#[case::enum_added(with_field(json!({"type": "string"})), with_field(json!({"type": "string", "enum": ["a", "b"]})), Verdict::Narrowing, ".f", "EnumAdded")]
#[case::enum_removed(with_field(json!({"type": "string", "enum": ["a"]})), with_field(json!({"type": "string"})), Verdict::Safe, ".f", "EnumRemoved")]
#[case::enum_values_added(with_field(json!({"type": "string", "enum": ["a"]})), with_field(json!({"type": "string", "enum": ["a", "b"]})), Verdict::Safe, ".f", "EnumValuesAdded")]
#[case::enum_values_removed(with_field(json!({"type": "string", "enum": ["a", "b"]})), with_field(json!({"type": "string", "enum": ["a"]})), Verdict::Narrowing, ".f", "EnumValuesRemoved")]
#[case::integer_enum_values_removed(with_field(json!({"type": "integer", "enum": [1, 2, 3]})), with_field(json!({"type": "integer", "enum": [1, 2]})), Verdict::Narrowing, ".f", "EnumValuesRemoved")]
#[case::object_enum_values_added(with_field(json!({"type": "object", "enum": [{"a": 1}]})), with_field(json!({"type": "object", "enum": [{"a": 1}, {"a": 2}]})), Verdict::Safe, ".f", "EnumValuesAdded")]
// Bounds (OLM: new bound, raised minimum, lowered maximum are errors).
#[case::minimum_added(with_field(json!({"type": "integer"})), with_field(json!({"type": "integer", "minimum": 1})), Verdict::Narrowing, ".f", "MinimumAdded")]
#[case::minimum_raised(with_field(json!({"type": "integer", "minimum": 1})), with_field(json!({"type": "integer", "minimum": 2})), Verdict::Narrowing, ".f", "MinimumRaised")]
#[case::minimum_lowered(with_field(json!({"type": "integer", "minimum": 2})), with_field(json!({"type": "integer", "minimum": 1})), Verdict::Safe, ".f", "MinimumLowered")]
#[case::minimum_removed(with_field(json!({"type": "integer", "minimum": 2})), with_field(json!({"type": "integer"})), Verdict::Safe, ".f", "MinimumRemoved")]
#[case::minimum_made_exclusive(with_field(json!({"type": "number", "minimum": 0})), with_field(json!({"type": "number", "minimum": 0, "exclusiveMinimum": true})), Verdict::Narrowing, ".f", "MinimumRaised")]
#[case::maximum_added(with_field(json!({"type": "integer"})), with_field(json!({"type": "integer", "maximum": 9})), Verdict::Narrowing, ".f", "MaximumAdded")]
#[case::maximum_lowered(with_field(json!({"type": "integer", "maximum": 9})), with_field(json!({"type": "integer", "maximum": 5})), Verdict::Narrowing, ".f", "MaximumLowered")]
#[case::maximum_raised(with_field(json!({"type": "integer", "maximum": 5})), with_field(json!({"type": "integer", "maximum": 9})), Verdict::Safe, ".f", "MaximumRaised")]
#[case::min_length_raised(with_field(json!({"type": "string", "minLength": 1})), with_field(json!({"type": "string", "minLength": 3})), Verdict::Narrowing, ".f", "MinLengthRaised")]
#[case::max_length_lowered(with_field(json!({"type": "string", "maxLength": 63})), with_field(json!({"type": "string", "maxLength": 10})), Verdict::Narrowing, ".f", "MaxLengthLowered")]
#[case::max_length_raised(with_field(json!({"type": "string", "maxLength": 10})), with_field(json!({"type": "string", "maxLength": 63})), Verdict::Safe, ".f", "MaxLengthRaised")]
#[case::min_items_added(with_field(json!({"type": "array", "items": {"type": "string"}})), with_field(json!({"type": "array", "items": {"type": "string"}, "minItems": 1})), Verdict::Narrowing, ".f", "MinItemsAdded")]
#[case::max_items_lowered(with_field(json!({"type": "array", "items": {"type": "string"}, "maxItems": 5})), with_field(json!({"type": "array", "items": {"type": "string"}, "maxItems": 2})), Verdict::Narrowing, ".f", "MaxItemsLowered")]
#[case::min_properties_raised(with_field(json!({"type": "object", "minProperties": 0})), with_field(json!({"type": "object", "minProperties": 1})), Verdict::Narrowing, ".f", "MinPropertiesRaised")]
#[case::max_properties_removed(with_field(json!({"type": "object", "maxProperties": 3})), with_field(json!({"type": "object"})), Verdict::Safe, ".f", "MaxPropertiesRemoved")]
// multipleOf and pattern (kcp: not supported).
#[case::multiple_of_added(with_field(json!({"type": "integer"})), with_field(json!({"type": "integer", "multipleOf": 2})), Verdict::Narrowing, ".f", "MultipleOfAdded")]
#[case::multiple_of_removed(with_field(json!({"type": "integer", "multipleOf": 2})), with_field(json!({"type": "integer"})), Verdict::Safe, ".f", "MultipleOfRemoved")]
#[case::multiple_of_divisor(with_field(json!({"type": "integer", "multipleOf": 4})), with_field(json!({"type": "integer", "multipleOf": 2})), Verdict::Safe, ".f", "MultipleOfChanged")]
#[case::multiple_of_other(with_field(json!({"type": "integer", "multipleOf": 2})), with_field(json!({"type": "integer", "multipleOf": 3})), Verdict::Narrowing, ".f", "MultipleOfChanged")]
#[case::pattern_added(with_field(json!({"type": "string"})), with_field(json!({"type": "string", "pattern": "^[a-z]+$"})), Verdict::Narrowing, ".f", "PatternAdded")]
#[case::pattern_removed(with_field(json!({"type": "string", "pattern": "^[a-z]+$"})), with_field(json!({"type": "string"})), Verdict::Safe, ".f", "PatternRemoved")]
#[case::pattern_changed(with_field(json!({"type": "string", "pattern": "^[a-z]+$"})), with_field(json!({"type": "string", "pattern": "^[a-z0-9]+$"})), Verdict::Unknown, ".f", "PatternChanged")]
// Flags.
#[case::unique_items_added(with_field(json!({"type": "array", "items": {"type": "string"}})), with_field(json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true})), Verdict::Narrowing, ".f", "UniqueItemsAdded")]
#[case::unique_items_removed(with_field(json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true})), with_field(json!({"type": "array", "items": {"type": "string"}})), Verdict::Safe, ".f", "UniqueItemsRemoved")]
#[case::nullable_removed(with_field(json!({"type": "string", "nullable": true})), with_field(json!({"type": "string"})), Verdict::Narrowing, ".f", "NullableRemoved")]
#[case::nullable_added(with_field(json!({"type": "string"})), with_field(json!({"type": "string", "nullable": true})), Verdict::Safe, ".f", "NullableAdded")]
#[case::default_added(with_field(json!({"type": "string"})), with_field(json!({"type": "string", "default": "x"})), Verdict::Breaking, ".f", "DefaultAdded")]
#[case::default_removed(with_field(json!({"type": "string", "default": "x"})), with_field(json!({"type": "string"})), Verdict::Breaking, ".f", "DefaultRemoved")]
#[case::default_changed(with_field(json!({"type": "integer", "default": 1})), with_field(json!({"type": "integer", "default": 2})), Verdict::Breaking, ".f", "DefaultChanged")]
#[case::preserve_unknown_removed(with_field(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})), with_field(json!({"type": "object"})), Verdict::Narrowing, ".f", "PreserveUnknownFieldsRemoved")]
#[case::preserve_unknown_added(with_field(json!({"type": "object"})), with_field(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})), Verdict::Safe, ".f", "PreserveUnknownFieldsAdded")]
#[case::embedded_resource_changed(with_field(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})), with_field(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true, "x-kubernetes-embedded-resource": true})), Verdict::Breaking, ".f", "EmbeddedResourceChanged")]
#[case::list_type_changed(with_field(json!({"type": "array", "items": {"type": "string"}})), with_field(json!({"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"})), Verdict::Breaking, ".f", "ListTypeChanged")]
#[case::list_map_keys_changed(with_field(json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"], "items": {"type": "object", "required": ["name", "port"], "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}})), with_field(json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name", "port"], "items": {"type": "object", "required": ["name", "port"], "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}})), Verdict::Breaking, ".f", "ListMapKeysChanged")]
#[case::map_type_changed(with_field(json!({"type": "object", "additionalProperties": {"type": "string"}})), with_field(json!({"type": "object", "additionalProperties": {"type": "string"}, "x-kubernetes-map-type": "atomic"})), Verdict::Breaking, ".f", "MapTypeChanged")]
// Required (OLM: new required field is an error, required→optional fine; kcp ignored it).
#[case::required_added(json!({"type": "object", "properties": {"f": {"type": "string"}}}), json!({"type": "object", "required": ["f"], "properties": {"f": {"type": "string"}}}), Verdict::Narrowing, ".f", "RequiredAdded")]
#[case::required_removed(json!({"type": "object", "required": ["f"], "properties": {"f": {"type": "string"}}}), json!({"type": "object", "properties": {"f": {"type": "string"}}}), Verdict::Safe, ".f", "RequiredRemoved")]
// additionalProperties (kcp: widening compatible).
#[case::map_values_widened(with_field(json!({"type": "object", "additionalProperties": {"type": "integer"}})), with_field(json!({"type": "object", "additionalProperties": {"type": "number"}})), Verdict::Safe, ".f.*", "TypeWidened")]
#[case::map_values_changed(with_field(json!({"type": "object", "additionalProperties": {"type": "integer"}})), with_field(json!({"type": "object", "additionalProperties": {"type": "boolean"}})), Verdict::Breaking, ".f.*", "TypeChanged")]
#[case::struct_to_map(with_field(json!({"type": "object", "properties": {"a": {"type": "integer"}}})), with_field(json!({"type": "object", "additionalProperties": {"type": "string"}})), Verdict::Breaking, ".f.a", "TypeChanged")]
#[case::map_to_struct(with_field(json!({"type": "object", "additionalProperties": {"type": "string"}})), with_field(json!({"type": "object", "properties": {"a": {"type": "string"}}})), Verdict::Narrowing, ".f.*", "AdditionalPropertiesRemoved")]
#[case::additional_properties_added(with_field(json!({"type": "object"})), with_field(json!({"type": "object", "additionalProperties": {"type": "string"}})), Verdict::Safe, ".f.*", "AdditionalPropertiesAdded")]
// Items.
#[case::item_type_changed(with_field(json!({"type": "array", "items": {"type": "string"}})), with_field(json!({"type": "array", "items": {"type": "integer"}})), Verdict::Breaking, ".f[*]", "TypeChanged")]
// Junctors, as Kubernetes allows them (value validations only).
#[case::all_of_added(with_field(json!({"type": "string"})), with_field(json!({"type": "string", "allOf": [{"maxLength": 5}]})), Verdict::Narrowing, ".f", "AllOfChanged")]
#[case::all_of_removed(with_field(json!({"type": "string", "allOf": [{"maxLength": 5}]})), with_field(json!({"type": "string"})), Verdict::Safe, ".f", "AllOfChanged")]
#[case::any_of_branch_added(with_field(json!({"type": "object", "anyOf": [{"required": ["a"]}]})), with_field(json!({"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}]})), Verdict::Safe, ".f", "AnyOfChanged")]
#[case::any_of_added(with_field(json!({"type": "object"})), with_field(json!({"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}]})), Verdict::Narrowing, ".f", "AnyOfChanged")]
#[case::any_of_branch_replaced(with_field(json!({"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}]})), with_field(json!({"type": "object", "anyOf": [{"required": ["a"]}]})), Verdict::Unknown, ".f", "AnyOfChanged")]
#[case::one_of_changed(with_field(json!({"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]})), with_field(json!({"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["c"]}]})), Verdict::Unknown, ".f", "OneOfChanged")]
#[case::not_added(with_field(json!({"type": "string"})), with_field(json!({"type": "string", "not": {"enum": ["x"]}})), Verdict::Narrowing, ".f", "NotChanged")]
// CEL rules (kcp ignored them): a new rule that reads what the old schema accepts cannot be
// decided; one that reads only new fields behind has(), or sits on a new node, is safe.
#[case::cel_rule_added(with_field(json!({"type": "integer"})), with_field(json!({"type": "integer", "x-kubernetes-validations": [{"rule": "self > 0"}]})), Verdict::Unknown, ".f", "ValidationRuleAdded")]
#[case::cel_rule_changed(with_field(json!({"type": "integer", "x-kubernetes-validations": [{"rule": "self > 0"}]})), with_field(json!({"type": "integer", "x-kubernetes-validations": [{"rule": "self > 1"}]})), Verdict::Unknown, ".f", "ValidationRuleAdded")]
#[case::cel_rule_reformatted(with_field(json!({"type": "integer", "x-kubernetes-validations": [{"rule": "self > 0 && self < 9"}]})), with_field(json!({"type": "integer", "x-kubernetes-validations": [{"rule": "(self>0) &&\n (self<9)"}]})), Verdict::Safe, ".f", "ValidationRuleChanged")]
#[case::cel_reason_and_field_path_changed(json!({"type": "object", "properties": {"a": {"type": "integer"}}, "x-kubernetes-validations": [{"rule": "self.a > 0"}]}), json!({"type": "object", "properties": {"a": {"type": "integer"}}, "x-kubernetes-validations": [{"rule": "self.a > 0", "reason": "FieldValueForbidden", "fieldPath": ".a"}]}), Verdict::Safe, ".", "ValidationRuleChanged")]
#[case::cel_message_expression_changed(with_field(json!({"type": "integer", "x-kubernetes-validations": [{"rule": "self > 0"}]})), with_field(json!({"type": "integer", "x-kubernetes-validations": [{"rule": "self > 0", "messageExpression": "'got ' + string(self)"}]})), Verdict::Safe, ".f", "ValidationRuleChanged")]
#[case::cel_optional_old_self_changed(with_field(json!({"type": "integer", "x-kubernetes-validations": [{"rule": "self >= oldSelf"}]})), with_field(json!({"type": "integer", "x-kubernetes-validations": [{"rule": "self >= oldSelf", "optionalOldSelf": true}]})), Verdict::Unknown, ".f", "ValidationRuleChanged")]
#[case::cel_rule_on_new_node(json!({"type": "object"}), with_field(json!({"type": "integer", "x-kubernetes-validations": [{"rule": "self > 0"}]})), Verdict::Safe, ".f", "PropertyAdded")]
#[case::cel_rule_guarded_new_field(json!({"type": "object", "properties": {"a": {"type": "integer"}}}), json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "x-kubernetes-validations": [{"rule": "!has(self.b) || self.b >= self.a"}]}), Verdict::Safe, ".", "ValidationRuleAdded")]
#[case::cel_rule_ternary_guarded_new_field(json!({"type": "object", "properties": {"a": {"type": "integer"}}}), json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "x-kubernetes-validations": [{"rule": "has(self.b) ? self.b > 0 : true"}]}), Verdict::Safe, ".", "ValidationRuleAdded")]
#[case::cel_rule_unguarded_new_field(json!({"type": "object", "properties": {"a": {"type": "integer"}}}), json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "x-kubernetes-validations": [{"rule": "self.b > 0"}]}), Verdict::Unknown, ".", "ValidationRuleAdded")]
#[case::cel_rule_on_existing_field(json!({"type": "object", "properties": {"a": {"type": "integer"}}}), json!({"type": "object", "properties": {"a": {"type": "integer"}}, "x-kubernetes-validations": [{"rule": "!has(self.a) || self.a > 0"}]}), Verdict::Unknown, ".", "ValidationRuleAdded")]
#[case::cel_rule_removed(with_field(json!({"type": "integer", "x-kubernetes-validations": [{"rule": "self > 0"}]})), with_field(json!({"type": "integer"})), Verdict::Safe, ".f", "ValidationRuleRemoved")]
#[case::cel_message_changed(with_field(json!({"type": "integer", "x-kubernetes-validations": [{"rule": "self > 0", "message": "a"}]})), with_field(json!({"type": "integer", "x-kubernetes-validations": [{"rule": "self > 0", "message": "b"}]})), Verdict::Safe, ".f", "ValidationRuleChanged")]
// What is not understood is Unknown, never a silent pass.
#[case::unknown_keyword_changed(with_field(json!({"type": "string", "x-vendor-thing": 1})), with_field(json!({"type": "string", "x-vendor-thing": 2})), Verdict::Unknown, ".f", "KeywordChanged")]
fn rule(
    #[case] old: Value,
    #[case] new: Value,
    #[case] verdict: Verdict,
    #[case] path: &str,
    #[case] kind: &str,
) {
    let c = compare(&old, &new).expect("both schemas are valid");
    let found = c
        .changes
        .iter()
        .find(|ch| ch.path == path && ch.kind.to_string() == kind);
    let Some(change) = found else {
        panic!("expected a {kind} change at {path}, got {:#?}", c.changes);
    };
    assert_eq!(change.verdict, verdict, "{change:#?}");
    assert_eq!(
        c.verdict(),
        verdict,
        "overall verdict; changes: {:#?}",
        c.changes
    );
    // And the reverse is never reported as identical.
    assert!(!compare(&new, &old).expect("valid").is_identical());
}

#[rstest]
#[case::descriptions_differ(with_field(json!({"type": "string", "description": "a"})), with_field(json!({"type": "string", "description": "b"})))]
#[case::enum_numbers_by_value(with_field(json!({"type": "number", "enum": [1]})), with_field(json!({"type": "number", "enum": [1.0]})))]
#[case::list_type_atomic_is_default(with_field(json!({"type": "array", "items": {"type": "string"}})), with_field(json!({"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "atomic"})))]
#[case::map_type_granular_is_default(with_field(json!({"type": "object"})), with_field(json!({"type": "object", "x-kubernetes-map-type": "granular"})))]
#[case::int_or_string_spellings(with_field(json!({"x-kubernetes-int-or-string": true})), with_field(json!({"format": "int-or-string", "oneOf": [{"type": "string"}, {"type": "integer"}]})))]
#[case::required_order(json!({"type": "object", "required": ["a", "b"], "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}), json!({"type": "object", "required": ["b", "a"], "properties": {"b": {"type": "string"}, "a": {"type": "string"}}}))]
fn no_change(#[case] old: Value, #[case] new: Value) {
    let c = compare(&old, &new).expect("valid");
    assert!(c.is_identical(), "{:#?}", c.changes);
}

#[test]
fn paths_are_full_json_paths() {
    let old = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "containers": {"type": "array", "items": {"type": "object", "properties": {
            "ports": {"type": "array", "items": {"type": "object", "properties": {
                "containerPort": {"type": "integer", "maximum": 65535}}}}}}}}}}});
    let mut new = old.clone();
    new["properties"]["spec"]["properties"]["containers"]["items"]["properties"]["ports"]["items"]
        ["properties"]["containerPort"]["maximum"] = json!(1024);
    let c = compare(&old, &new).expect("valid");
    assert_eq!(c.changes.len(), 1);
    assert_eq!(
        c.changes[0].path,
        ".spec.containers[*].ports[*].containerPort"
    );
    assert_eq!(c.changes[0].kind.to_string(), "MaximumLowered");
    assert_eq!(c.verdict(), Verdict::Narrowing);
}

#[test]
fn every_difference_is_listed() {
    let old = json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}});
    let new = json!({"type": "object", "required": ["c"], "properties": {"b": {"type": "string"}, "c": {"type": "string"}}});
    let c = compare(&old, &new).expect("valid");
    let mut seen: Vec<(String, String)> = c
        .changes
        .iter()
        .map(|ch| (ch.path.clone(), ch.kind.to_string()))
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            (".a".to_string(), "PropertyRemoved".to_string()),
            (".b".to_string(), "TypeChanged".to_string()),
            (".c".to_string(), "PropertyAdded".to_string()),
            (".c".to_string(), "RequiredAdded".to_string()),
        ]
    );
    assert_eq!(c.verdict(), Verdict::Breaking);
}

/// An added rule that stays unknown says which field it reads that the old schema has.
#[test]
fn an_unknown_added_rule_names_the_field_the_old_schema_has() {
    let old = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
    let mut new = old.clone();
    new["properties"]["b"] = json!({"type": "integer"});
    new["x-kubernetes-validations"] = json!([{"rule": "!has(self.b) || self.a > 0 && self.b > 0"}]);
    let c = compare(&old, &new).expect("valid");
    let added = c
        .changes
        .iter()
        .find(|ch| ch.kind.to_string() == "ValidationRuleAdded")
        .expect("the rule is reported");
    assert_eq!(added.verdict, Verdict::Safe, "{added:#?}");
    new["x-kubernetes-validations"] = json!([{"rule": "self.a > 0 || !has(self.b)"}]);
    let c = compare(&old, &new).expect("valid");
    let added = c
        .changes
        .iter()
        .find(|ch| ch.kind.to_string() == "ValidationRuleAdded")
        .expect("the rule is reported");
    assert_eq!(added.verdict, Verdict::Safe, "{added:#?}");
    new["x-kubernetes-validations"] = json!([{"rule": "self.a > 0"}]);
    let c = compare(&old, &new).expect("valid");
    let added = c
        .changes
        .iter()
        .find(|ch| ch.kind.to_string() == "ValidationRuleAdded")
        .expect("the rule is reported");
    assert_eq!(added.verdict, Verdict::Unknown);
    assert!(
        added
            .message
            .contains("self.a, which the old schema already has"),
        "{}",
        added.message
    );
}

/// A reason or fieldPath change says that acceptance does not change.
#[test]
fn a_reason_change_says_acceptance_is_the_same() {
    let old = json!({"type": "integer", "x-kubernetes-validations": [{"rule": "self > 0"}]});
    let new = json!({"type": "integer", "x-kubernetes-validations": [{"rule": "self > 0", "reason": "FieldValueForbidden"}]});
    let c = compare(&old, &new).expect("valid");
    assert_eq!(c.verdict(), Verdict::Safe);
    assert!(
        c.changes[0]
            .message
            .contains("what is accepted does not change"),
        "{}",
        c.changes[0].message
    );
}
