//! Does `new` accept everything `old` accepts? One rule per keyword, each reporting a
//! [`Change`] with the path, a [`ChangeKind`] and a [`Verdict`].
//!
//! Sources of the rules, and where Flotilla decides differently:
//! - **kcp `schemacompat`** ("new accepts everything existing accepts"): added properties,
//!   integer→number, enum superset and `additionalProperties` widening are compatible; any other
//!   type change, a `format` change, a `x-kubernetes-preserve-unknown-fields`,
//!   list-type/list-map-keys/map-type change and losing int-or-string are not. kcp gave up on
//!   `allOf`/`anyOf`/`oneOf`/`not`, enums on non-strings, `minimum`/`maximum`, `multipleOf`,
//!   lengths and `pattern`, and ignored `required`, `default`, `nullable` and CEL rules; here
//!   every one of them has a rule.
//! - **OLM v1 CRD upgrade safety (`crdify`)**: new required field, field removed, type changed,
//!   default added/changed/removed, enum added or values removed, minimum raised / maximum
//!   lowered / a new bound (for `minimum`, `minLength`, `minItems`, `minProperties` and their
//!   `max` twins) are flagged; enum values added, required→optional, a lowered minimum and a
//!   raised maximum are allowed. Unknown changes are errors: here, [`Verdict::Unknown`].
//! - **Kubernetes structural schemas**: unknown fields are pruned unless
//!   `x-kubernetes-preserve-unknown-fields`, null values of non-nullable fields are pruned,
//!   `x-kubernetes-list-type`/`map-type` decide how server-side apply merges.
//!
//! Where the verdict is narrower than "safe or not": a change that keeps the meaning of values
//! but accepts fewer of them is [`Verdict::Narrowing`] (kcp's "narrowed" class), one that changes
//! their meaning or shape is [`Verdict::Breaking`] (kcp's "rejected" class). Both fail an
//! upgrade check; only a narrowing lets objects that avoid the narrowed part keep flowing.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::change::{Change, ChangeKind, Limit, LimitChange, Verdict};
use crate::path::Path;
use crate::schema::{
    AdditionalProperties, Bound, Conjunct, Schema, Shape, Type, contains, json_eq,
};

/// Collects the changes between two parsed schemas.
#[derive(Default)]
pub(crate) struct Comparer {
    pub(crate) changes: Vec<Change>,
}

/// Compact JSON for messages.
fn show(v: &Value) -> String {
    v.to_string()
}

fn show_list(values: &[Value]) -> String {
    let items: Vec<String> = values.iter().map(show).collect();
    format!("[{}]", items.join(", "))
}

fn show_bound(b: Bound, lower: bool) -> String {
    let op = match (lower, b.exclusive) {
        (true, true) => ">",
        (true, false) => ">=",
        (false, true) => "<",
        (false, false) => "<=",
    };
    format!("{op} {}", crate::schema::number(b.value))
}

/// Widenings between formats: every value valid in the first is valid in the second.
const FORMAT_WIDENINGS: &[(&str, &str)] =
    &[("int32", "int64"), ("float", "double"), ("int32", "double")];

impl Comparer {
    fn push(&mut self, path: &Path, kind: ChangeKind, verdict: Verdict, message: String) {
        self.changes.push(Change {
            version: None,
            path: path.to_string(),
            kind,
            verdict,
            message,
        });
    }

    /// Compares one node and everything under it.
    pub(crate) fn node(&mut self, path: &Path, old: &Schema, new: &Schema) {
        if !self.shape(path, old, new) {
            return;
        }
        self.format(path, old, new);
        self.enums(path, old, new);
        self.limits(path, old, new);
        self.conjuncts(path, old, new);
        self.flags(path, old, new);
        self.validations(path, old, new);
        self.extra(path, old, new);
        self.object(path, old, new);
        self.items(path, old, new);
    }

    /// Types (kcp: integer→number compatible, number→integer narrowed, any other change
    /// rejected; int-or-string lost rejected). Returns whether to compare further.
    fn shape(&mut self, path: &Path, old: &Schema, new: &Schema) -> bool {
        let name = |s: Shape| match s {
            Shape::Any => "any type".to_string(),
            Shape::IntOrString => "int-or-string".to_string(),
            Shape::Typed(t) => t.as_str().to_string(),
        };
        let (o, n) = (old.shape(), new.shape());
        let (kind, verdict, message) = match (o, n) {
            _ if o == n => return true,
            (Shape::Typed(Type::Integer), Shape::Typed(Type::Number)) => (
                ChangeKind::TypeWidened,
                Verdict::Safe,
                "type widened from integer to number".to_string(),
            ),
            (Shape::Typed(Type::Number), Shape::Typed(Type::Integer)) => (
                ChangeKind::TypeNarrowed,
                Verdict::Narrowing,
                "type narrowed from number to integer: fractional values are rejected".to_string(),
            ),
            (Shape::IntOrString, Shape::Typed(t @ (Type::Integer | Type::String))) => (
                ChangeKind::IntOrStringRemoved,
                Verdict::Narrowing,
                format!(
                    "int-or-string became {}: other values are rejected",
                    t.as_str()
                ),
            ),
            (Shape::Typed(t @ (Type::Integer | Type::String)), Shape::IntOrString) => (
                ChangeKind::IntOrStringAdded,
                Verdict::Safe,
                format!("{} became int-or-string", t.as_str()),
            ),
            (Shape::Any, _) => (
                ChangeKind::TypeAdded,
                Verdict::Narrowing,
                format!("any value was accepted; now only {}", name(n)),
            ),
            (_, Shape::Any) => (
                ChangeKind::TypeRemoved,
                Verdict::Safe,
                format!("{} became any type", name(o)),
            ),
            _ => {
                self.push(
                    path,
                    ChangeKind::TypeChanged,
                    Verdict::Breaking,
                    format!("type changed from {} to {}", name(o), name(n)),
                );
                return false;
            }
        };
        self.push(path, kind, verdict, message);
        true
    }

    /// `format` (kcp: any change rejected). Here: added narrows, removed is safe, a widening
    /// pair (int32→int64, float→double) is safe, its reverse narrows, anything else breaks.
    fn format(&mut self, path: &Path, old: &Schema, new: &Schema) {
        let (kind, verdict, message) = match (&old.format, &new.format) {
            (a, b) if a == b => return,
            (None, Some(f)) => (
                ChangeKind::FormatAdded,
                Verdict::Narrowing,
                format!("format {f:?} added"),
            ),
            (Some(f), None) => (
                ChangeKind::FormatRemoved,
                Verdict::Safe,
                format!("format {f:?} removed"),
            ),
            (Some(a), Some(b)) => {
                let verdict = if FORMAT_WIDENINGS.contains(&(a.as_str(), b.as_str())) {
                    Verdict::Safe
                } else if FORMAT_WIDENINGS.contains(&(b.as_str(), a.as_str())) {
                    Verdict::Narrowing
                } else {
                    Verdict::Breaking
                };
                (
                    ChangeKind::FormatChanged,
                    verdict,
                    format!("format changed from {a:?} to {b:?}"),
                )
            }
            (None, None) => return,
        };
        self.push(path, kind, verdict, message);
    }

    /// `enum`, on any type (kcp handled strings only; OLM: enum added or values removed are
    /// errors, values added are fine). Values compare by JSON value, numbers by value.
    fn enums(&mut self, path: &Path, old: &Schema, new: &Schema) {
        match (&old.enum_values, &new.enum_values) {
            (None, None) => {}
            (None, Some(n)) => self.push(
                path,
                ChangeKind::EnumAdded,
                Verdict::Narrowing,
                format!("enum {} added: other values are rejected", show_list(n)),
            ),
            (Some(o), None) => self.push(
                path,
                ChangeKind::EnumRemoved,
                Verdict::Safe,
                format!("enum {} removed: any value is accepted", show_list(o)),
            ),
            (Some(o), Some(n)) => {
                let removed: Vec<Value> = o.iter().filter(|v| !contains(n, v)).cloned().collect();
                let added: Vec<Value> = n.iter().filter(|v| !contains(o, v)).cloned().collect();
                if !removed.is_empty() {
                    self.push(
                        path,
                        ChangeKind::EnumValuesRemoved,
                        Verdict::Narrowing,
                        format!("enum values {} removed", show_list(&removed)),
                    );
                }
                if !added.is_empty() {
                    self.push(
                        path,
                        ChangeKind::EnumValuesAdded,
                        Verdict::Safe,
                        format!("enum values {} added", show_list(&added)),
                    );
                }
            }
        }
    }

    /// `minimum`/`maximum` (with exclusiveness), `minLength`/`maxLength`, `minItems`/`maxItems`,
    /// `minProperties`/`maxProperties` (OLM: a new bound, a raised minimum or a lowered maximum
    /// is an error; a lowered minimum or raised maximum is fine. kcp: not supported; its
    /// min/maxItems check never fired).
    fn limits(&mut self, path: &Path, old: &Schema, new: &Schema) {
        let counted = |v: Option<u64>| {
            v.map(|x| Bound {
                value: x as f64,
                exclusive: false,
            })
        };
        let pairs = [
            (Limit::Minimum, old.minimum, new.minimum),
            (Limit::Maximum, old.maximum, new.maximum),
            (
                Limit::MinLength,
                counted(old.min_length),
                counted(new.min_length),
            ),
            (
                Limit::MaxLength,
                counted(old.max_length),
                counted(new.max_length),
            ),
            (
                Limit::MinItems,
                counted(old.min_items),
                counted(new.min_items),
            ),
            (
                Limit::MaxItems,
                counted(old.max_items),
                counted(new.max_items),
            ),
            (
                Limit::MinProperties,
                counted(old.min_properties),
                counted(new.min_properties),
            ),
            (
                Limit::MaxProperties,
                counted(old.max_properties),
                counted(new.max_properties),
            ),
        ];
        for (limit, o, n) in pairs {
            self.limit(path, limit, o, n);
        }
    }

    fn limit(&mut self, path: &Path, limit: Limit, old: Option<Bound>, new: Option<Bound>) {
        let lower = limit.is_lower();
        let keyword = limit.keyword();
        let (change, verdict, message) = match (old, new) {
            (None, None) => return,
            (None, Some(n)) => (
                LimitChange::Added,
                Verdict::Narrowing,
                format!("{keyword} added: values must be {}", show_bound(n, lower)),
            ),
            (Some(o), None) => (
                LimitChange::Removed,
                Verdict::Safe,
                format!("{keyword} {} removed", show_bound(o, lower)),
            ),
            (Some(o), Some(n)) if o == n => return,
            (Some(o), Some(n)) => {
                // Is `n` looser than `o` in the direction of the bound?
                let looser = if lower {
                    n.value < o.value || (n.value == o.value && !n.exclusive)
                } else {
                    n.value > o.value || (n.value == o.value && !n.exclusive)
                };
                let change = if looser == lower {
                    LimitChange::Lowered
                } else {
                    LimitChange::Raised
                };
                (
                    change,
                    if looser {
                        Verdict::Safe
                    } else {
                        Verdict::Narrowing
                    },
                    format!(
                        "{keyword} changed from {} to {}",
                        show_bound(o, lower),
                        show_bound(n, lower)
                    ),
                )
            }
        };
        self.push(path, ChangeKind::Limit(limit, change), verdict, message);
    }

    /// `pattern`, `multipleOf`, `allOf`, `anyOf`, `oneOf`, `not`: constraints that hold
    /// together (see [`Conjunct`]). Per kind: only removed ones → safe; only added ones →
    /// narrowing; both → undecidable (two regular expressions, two `oneOf`s), except where
    /// implication is easy: a multiple of the old `multipleOf` is a multiple of the new one when
    /// the old is a multiple of the new; an `anyOf` with more branches accepts more.
    fn conjuncts(&mut self, path: &Path, old: &Schema, new: &Schema) {
        let (o, n) = (old.conjuncts(), new.conjuncts());
        if o == n {
            return;
        }
        for keyword in ["pattern", "multipleOf", "anyOf", "oneOf", "not", "allOf"] {
            let of_kind = |list: &[Conjunct]| -> Vec<Conjunct> {
                list.iter()
                    .filter(|c| c.keyword() == keyword)
                    .cloned()
                    .collect()
            };
            let (ok, nk) = (of_kind(&o), of_kind(&n));
            let added: Vec<&Conjunct> = nk.iter().filter(|c| !ok.contains(c)).collect();
            let removed: Vec<&Conjunct> = ok.iter().filter(|c| !nk.contains(c)).collect();
            if added.is_empty() && removed.is_empty() {
                continue;
            }
            // New constraints the old ones already imply.
            let implied = |c: &Conjunct| match c {
                Conjunct::MultipleOf(m) => ok.iter().any(|x| match x {
                    Conjunct::MultipleOf(o) => is_multiple(*o, *m),
                    _ => false,
                }),
                Conjunct::AnyOf(alts) => ok.iter().any(|x| match x {
                    Conjunct::AnyOf(old_alts) => old_alts.iter().all(|a| alts.contains(a)),
                    _ => false,
                }),
                _ => false,
            };
            let unimplied: Vec<&&Conjunct> = added.iter().filter(|c| !implied(c)).collect();
            let describe = |list: &[&Conjunct]| -> String {
                list.iter()
                    .map(|c| match c {
                        Conjunct::Pattern(p) => format!("{p:?}"),
                        Conjunct::MultipleOf(m) => crate::schema::number(*m).to_string(),
                        other => format!("{}", conjunct_json(other)),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let (kinds, verdict, message) = if unimplied.is_empty() {
                let message = if added.is_empty() {
                    format!("{keyword} {} removed", describe(&removed))
                } else {
                    format!(
                        "{keyword} {} replaced by {}, which accepts at least as much",
                        describe(&removed),
                        describe(&added)
                    )
                };
                (true, Verdict::Safe, message)
            } else if removed.is_empty() {
                (
                    false,
                    Verdict::Narrowing,
                    format!("{keyword} {} added", describe(&added)),
                )
            } else {
                let verdict = if keyword == "multipleOf" {
                    // The old divisor itself is accepted before and rejected after.
                    Verdict::Narrowing
                } else {
                    Verdict::Unknown
                };
                (
                    false,
                    verdict,
                    format!(
                        "{keyword} {} replaced by {}: cannot decide whether every old value is still accepted",
                        describe(&removed),
                        describe(&added)
                    ),
                )
            };
            let safe_only = kinds;
            let kind = match keyword {
                "pattern" if safe_only && added.is_empty() => ChangeKind::PatternRemoved,
                "pattern" if removed.is_empty() => ChangeKind::PatternAdded,
                "pattern" => ChangeKind::PatternChanged,
                "multipleOf" if safe_only && added.is_empty() => ChangeKind::MultipleOfRemoved,
                "multipleOf" if removed.is_empty() => ChangeKind::MultipleOfAdded,
                "multipleOf" => ChangeKind::MultipleOfChanged,
                "anyOf" => ChangeKind::AnyOfChanged,
                "oneOf" => ChangeKind::OneOfChanged,
                "not" => ChangeKind::NotChanged,
                _ => ChangeKind::AllOfChanged,
            };
            self.push(path, kind, verdict, message);
        }
    }

    /// Flags: `nullable`, `uniqueItems`, `default`, `x-kubernetes-preserve-unknown-fields`,
    /// `x-kubernetes-embedded-resource`, `x-kubernetes-list-type`, `x-kubernetes-list-map-keys`,
    /// `x-kubernetes-map-type`.
    fn flags(&mut self, path: &Path, old: &Schema, new: &Schema) {
        match (old.nullable, new.nullable) {
            (true, false) => self.push(
                path,
                ChangeKind::NullableRemoved,
                Verdict::Narrowing,
                "nullable removed: null values are pruned".into(),
            ),
            (false, true) => self.push(
                path,
                ChangeKind::NullableAdded,
                Verdict::Safe,
                "nullable added".into(),
            ),
            _ => {}
        }
        match (old.unique_items, new.unique_items) {
            (false, true) => self.push(
                path,
                ChangeKind::UniqueItemsAdded,
                Verdict::Narrowing,
                "uniqueItems added: lists with duplicates are rejected".into(),
            ),
            (true, false) => self.push(
                path,
                ChangeKind::UniqueItemsRemoved,
                Verdict::Safe,
                "uniqueItems removed".into(),
            ),
            _ => {}
        }
        // OLM: a default added, changed or removed changes what is stored for objects that
        // omit the field.
        match (&old.default, &new.default) {
            (None, None) => {}
            (Some(a), Some(b)) if json_eq(a, b) => {}
            (None, Some(b)) => self.push(
                path,
                ChangeKind::DefaultAdded,
                Verdict::Breaking,
                format!(
                    "default {} added: objects that omit the field now store it",
                    show(b)
                ),
            ),
            (Some(a), None) => self.push(
                path,
                ChangeKind::DefaultRemoved,
                Verdict::Breaking,
                format!(
                    "default {} removed: objects that omit the field no longer get it",
                    show(a)
                ),
            ),
            (Some(a), Some(b)) => self.push(
                path,
                ChangeKind::DefaultChanged,
                Verdict::Breaking,
                format!("default changed from {} to {}", show(a), show(b)),
            ),
        }
        match (old.preserve_unknown_fields, new.preserve_unknown_fields) {
            (true, false) => self.push(
                path,
                ChangeKind::PreserveUnknownFieldsRemoved,
                Verdict::Narrowing,
                "x-kubernetes-preserve-unknown-fields removed: fields not in the schema are pruned"
                    .into(),
            ),
            (false, true) => self.push(
                path,
                ChangeKind::PreserveUnknownFieldsAdded,
                Verdict::Safe,
                "x-kubernetes-preserve-unknown-fields added: unknown fields are kept".into(),
            ),
            _ => {}
        }
        if old.embedded_resource != new.embedded_resource {
            self.push(
                path,
                ChangeKind::EmbeddedResourceChanged,
                Verdict::Breaking,
                format!(
                    "x-kubernetes-embedded-resource changed from {} to {}: apiVersion, kind and metadata are validated and pruned differently",
                    old.embedded_resource, new.embedded_resource
                ),
            );
        }
        if old.effective_list_type() != new.effective_list_type() {
            self.push(
                path,
                ChangeKind::ListTypeChanged,
                Verdict::Breaking,
                format!(
                    "x-kubernetes-list-type changed from {} to {}: server-side apply merges the list differently",
                    old.effective_list_type(),
                    new.effective_list_type()
                ),
            );
        }
        let keys = |s: &Schema| s.list_map_keys.iter().cloned().collect::<BTreeSet<_>>();
        if keys(old) != keys(new) {
            self.push(
                path,
                ChangeKind::ListMapKeysChanged,
                Verdict::Breaking,
                format!(
                    "x-kubernetes-list-map-keys changed from {:?} to {:?}",
                    old.list_map_keys, new.list_map_keys
                ),
            );
        }
        if old.effective_map_type() != new.effective_map_type() {
            self.push(
                path,
                ChangeKind::MapTypeChanged,
                Verdict::Breaking,
                format!(
                    "x-kubernetes-map-type changed from {} to {}: server-side apply merges the map differently",
                    old.effective_map_type(),
                    new.effective_map_type()
                ),
            );
        }
    }

    /// `x-kubernetes-validations` (CEL; kcp ignored rules). A new rule is paired with an old one
    /// with the same text, else with one that parses to the same expression (only whitespace,
    /// parentheses or quotes differ). Then:
    /// - a removed rule is safe;
    /// - a paired rule whose `message`, `messageExpression`, `reason` or `fieldPath` changed, or
    ///   that was only reformatted, is safe: what is accepted does not change, only the error
    ///   reported; any other change to its entry (e.g. `optionalOldSelf`) is Unknown;
    /// - an added rule is safe when every value the old schema accepts at the node passes it
    ///   (it reads only fields the old node lacks, each behind `has()`, see
    ///   [`crate::cel::added_rule`]), and Unknown otherwise, with the reason. A rule on a node
    ///   the old schema does not have is never compared: objects valid under the old schema do
    ///   not have that node, so the rule never runs on them (the node's `PropertyAdded` says it).
    fn validations(&mut self, path: &Path, old: &Schema, new: &Schema) {
        let rule = |v: &Value| v.get("rule").map(show).unwrap_or_else(|| show(v));
        let text = |v: &Value| v.get("rule").and_then(Value::as_str).map(str::to_string);
        let mut paired = vec![false; old.validations.len()];
        for n in &new.validations {
            let same_text = old
                .validations
                .iter()
                .enumerate()
                .position(|(i, o)| !paired[i] && rule(o) == rule(n));
            let same_expression = || {
                old.validations.iter().enumerate().position(|(i, o)| {
                    !paired[i]
                        && match (text(o), text(n)) {
                            (Some(a), Some(b)) => crate::cel::same_expression(&a, &b),
                            _ => false,
                        }
                })
            };
            let Some(i) = same_text.or_else(same_expression) else {
                self.added_rule(path, old, n);
                continue;
            };
            paired[i] = true;
            let o = &old.validations[i];
            if json_eq(o, n) {
                continue;
            }
            let field = |v: &Value, key: &str| v.get(key).cloned();
            let mut differences = Vec::new();
            if rule(o) != rule(n) {
                differences.push(format!(
                    "reformatted from {} (the same expression)",
                    rule(o)
                ));
            }
            for key in ["message", "messageExpression", "reason", "fieldPath"] {
                let (a, b) = (field(o, key), field(n, key));
                if a != b {
                    let shown = |v: Option<Value>| v.as_ref().map(show).unwrap_or("none".into());
                    differences.push(format!("{key} changed from {} to {}", shown(a), shown(b)));
                }
            }
            let strip = |v: &Value| {
                let mut v = v.clone();
                if let Some(m) = v.as_object_mut() {
                    for key in [
                        "rule",
                        "message",
                        "messageExpression",
                        "reason",
                        "fieldPath",
                    ] {
                        m.remove(key);
                    }
                }
                v
            };
            if json_eq(&strip(o), &strip(n)) {
                self.push(
                    path,
                    ChangeKind::ValidationRuleChanged,
                    Verdict::Safe,
                    format!(
                        "validation rule {}: {}; what is accepted does not change, only the error reported",
                        rule(n),
                        differences.join("; ")
                    ),
                );
            } else {
                self.push(
                    path,
                    ChangeKind::ValidationRuleChanged,
                    Verdict::Unknown,
                    format!(
                        "validation rule {} changed from {} to {}: cannot decide",
                        rule(n),
                        show(o),
                        show(n)
                    ),
                );
            }
        }
        for (o, paired) in old.validations.iter().zip(paired) {
            if !paired {
                self.push(
                    path,
                    ChangeKind::ValidationRuleRemoved,
                    Verdict::Safe,
                    format!("validation rule {} removed", rule(o)),
                );
            }
        }
    }

    /// A rule in `new` that `old`'s node does not have (see [`Comparer::validations`]).
    fn added_rule(&mut self, path: &Path, old: &Schema, n: &Value) {
        use crate::cel::{AddedRule, added_rule};
        let shown = n.get("rule").map(show).unwrap_or_else(|| show(n));
        let transition = n.get("optionalOldSelf").and_then(Value::as_bool) == Some(true);
        let verdict = match n.get("rule").and_then(Value::as_str) {
            Some(text) if !transition => added_rule(text, old, path.depth() == 0),
            Some(_) => AddedRule::Unknown("it is a transition rule (optionalOldSelf)".into()),
            None => AddedRule::Unknown("it has no rule text".into()),
        };
        match verdict {
            AddedRule::Holds => self.push(
                path,
                ChangeKind::ValidationRuleAdded,
                Verdict::Safe,
                format!(
                    "validation rule {shown} added: it is true whenever the fields the old schema lacks are unset (it reads them only behind has()), so every object valid under the old schema passes it"
                ),
            ),
            AddedRule::Unknown(why) => self.push(
                path,
                ChangeKind::ValidationRuleAdded,
                Verdict::Unknown,
                format!("validation rule {shown} added: {why}"),
            ),
        }
    }

    /// Keywords this crate does not interpret: any difference is Unknown, never a silent pass.
    fn extra(&mut self, path: &Path, old: &Schema, new: &Schema) {
        let keys: BTreeSet<&String> = old.extra.keys().chain(new.extra.keys()).collect();
        for k in keys {
            let (a, b) = (old.extra.get(k), new.extra.get(k));
            if a != b {
                let shown = |v: Option<&Value>| v.map(show).unwrap_or_else(|| "absent".into());
                self.push(
                    path,
                    ChangeKind::KeywordChanged,
                    Verdict::Unknown,
                    format!(
                        "keyword {k} changed from {} to {}: not understood, cannot decide",
                        shown(a),
                        shown(b)
                    ),
                );
            }
        }
    }

    /// `properties`, `required`, `additionalProperties` (kcp: added properties compatible,
    /// removed ones narrowed; `additionalProperties` widening compatible. OLM: field removed and
    /// new required field are errors, required→optional is fine).
    fn object(&mut self, path: &Path, old: &Schema, new: &Schema) {
        for (name, o) in &old.properties {
            let p = path.field(name);
            if let Some(n) = new.properties.get(name) {
                self.node(&p, o, n);
                continue;
            }
            match &new.additional_properties {
                AdditionalProperties::Schema(n) => self.node(&p, o, n),
                AdditionalProperties::Any => self.push(
                    &p,
                    ChangeKind::PropertyRemoved,
                    Verdict::Safe,
                    "property removed, but additionalProperties accepts any value here".into(),
                ),
                AdditionalProperties::Absent if new.preserve_unknown_fields => self.push(
                    &p,
                    ChangeKind::PropertyRemoved,
                    Verdict::Safe,
                    "property removed, but unknown fields are preserved here: values are kept, no longer validated".into(),
                ),
                AdditionalProperties::Absent => self.push(
                    &p,
                    ChangeKind::PropertyRemoved,
                    Verdict::Narrowing,
                    "property removed: values set here are pruned".into(),
                ),
            }
        }
        for (name, n) in &new.properties {
            if old.properties.contains_key(name) {
                continue;
            }
            let p = path.field(name);
            match &old.additional_properties {
                AdditionalProperties::Schema(o) => self.node(&p, o, n),
                AdditionalProperties::Any => self.node(&p, &Schema::any(), n),
                AdditionalProperties::Absent if old.preserve_unknown_fields => self.push(
                    &p,
                    ChangeKind::PropertyAdded,
                    Verdict::Narrowing,
                    "property added where unknown fields were preserved: values stored here must now match its schema".into(),
                ),
                AdditionalProperties::Absent => self.push(
                    &p,
                    ChangeKind::PropertyAdded,
                    Verdict::Safe,
                    "property added".into(),
                ),
            }
        }
        for name in new.required.difference(&old.required) {
            self.push(
                &path.field(name),
                ChangeKind::RequiredAdded,
                Verdict::Narrowing,
                "field became required: objects without it are rejected".into(),
            );
        }
        for name in old.required.difference(&new.required) {
            self.push(
                &path.field(name),
                ChangeKind::RequiredRemoved,
                Verdict::Safe,
                "field no longer required".into(),
            );
        }
        let values = path.values();
        match (&old.additional_properties, &new.additional_properties) {
            (AdditionalProperties::Absent, AdditionalProperties::Absent) => {}
            (AdditionalProperties::Any, AdditionalProperties::Any) => {}
            (AdditionalProperties::Schema(o), AdditionalProperties::Schema(n)) => {
                self.node(&values, o, n)
            }
            (AdditionalProperties::Schema(o), AdditionalProperties::Any) => {
                self.node(&values, o, &Schema::any())
            }
            (AdditionalProperties::Any, AdditionalProperties::Schema(n)) => {
                self.node(&values, &Schema::any(), n)
            }
            (_, AdditionalProperties::Absent) => {
                if new.preserve_unknown_fields {
                    self.push(
                        &values,
                        ChangeKind::AdditionalPropertiesRemoved,
                        Verdict::Safe,
                        "additionalProperties removed, but unknown fields are preserved".into(),
                    );
                } else {
                    self.push(
                        &values,
                        ChangeKind::AdditionalPropertiesRemoved,
                        Verdict::Narrowing,
                        "additionalProperties removed: keys not listed in properties are pruned"
                            .into(),
                    );
                }
            }
            (AdditionalProperties::Absent, _) => {
                if old.preserve_unknown_fields {
                    self.push(
                        &values,
                        ChangeKind::AdditionalPropertiesAdded,
                        Verdict::Narrowing,
                        "additionalProperties added where unknown fields were preserved: their values must now match".into(),
                    );
                } else {
                    self.push(
                        &values,
                        ChangeKind::AdditionalPropertiesAdded,
                        Verdict::Safe,
                        "additionalProperties added: any key is accepted".into(),
                    );
                }
            }
        }
    }

    /// `items`: compared item by item; an absent `items` accepts any item.
    fn items(&mut self, path: &Path, old: &Schema, new: &Schema) {
        match (&old.items, &new.items) {
            (Some(o), Some(n)) => self.node(&path.items(), o, n),
            (None, Some(_)) => self.push(
                &path.items(),
                ChangeKind::ItemsAdded,
                Verdict::Narrowing,
                "items schema added: items must now match it".into(),
            ),
            (Some(_), None) => self.push(
                &path.items(),
                ChangeKind::ItemsRemoved,
                Verdict::Safe,
                "items schema removed: any item is accepted".into(),
            ),
            (None, None) => {}
        }
    }
}

/// Whether `a` is an integer multiple of `b` (both positive).
pub(crate) fn is_multiple(a: f64, b: f64) -> bool {
    let q = a / b;
    q.is_finite() && (q - q.round()).abs() < 1e-9 && q.round() >= 1.0
}

fn conjunct_json(c: &Conjunct) -> Value {
    let mut s = Schema::default();
    s.set_conjuncts(vec![c.clone()]);
    s.to_value()
}
