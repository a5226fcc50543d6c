//! The least common denominator of several schemas: one schema that accepts only what every
//! input accepts, so that an object valid against it is valid (and kept whole) in every member.
//!
//! Rules (kcp's `schemacompat` "narrowing" mode, extended to every keyword):
//! - **type**: equal types stay; integer with number gives integer; int-or-string with integer
//!   or string gives that type (with number: integer); an untyped preserve-unknown node gives
//!   the other side. Anything else is a conflict.
//! - **properties**: the intersection. A property only one side lists survives if the other side
//!   keeps it anyway (it preserves unknown fields, or its `additionalProperties` accepts the
//!   value, in which case the two schemas are merged). A property whose schemas conflict is left
//!   out and reported in [`Lcd::conflicts`], unless it is required, which makes its parent a
//!   conflict.
//! - **required**: the union. **enum**: the intersection (an empty one is a conflict).
//! - **bounds**: the larger minimum and the smaller maximum for values, lengths, items and
//!   properties (bounds that leave no value are a conflict). **multipleOf**: the least common
//!   multiple when both are integers.
//! - **format**: equal, or the narrower of int32/int64 and float/double; any other difference is a
//!   conflict. **pattern**, **anyOf**, **oneOf**, **not**, **allOf**: all of them hold, written
//!   as `allOf` entries when a node has several of a kind (structural schemas allow value
//!   validations in `allOf`).
//! - **nullable**: only if all are. **uniqueItems**: if any is.
//!   **x-kubernetes-preserve-unknown-fields**: only if all do. **x-kubernetes-validations**: the
//!   union of the rules, then only those whose every selected field (and `fieldPath`) the result
//!   still has: the apiserver refuses a CRD whose rule names a field its node lacks. A rule that
//!   names a field left out, or that cannot be analysed ([`crate::cel`]), is dropped and reported
//!   in [`Lcd::conflicts`] (the members still enforce it; the hub does not).
//! - **default**, **x-kubernetes-embedded-resource**, **list-type**, **list-map-keys**,
//!   **map-type**: must agree. A default that differs is dropped (and reported: objects that omit
//!   the field get different values in different members); the others are conflicts.
//! - Keywords this crate does not interpret must be equal, else the field is a conflict
//!   ([`Verdict::Unknown`]).

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::Value;

use crate::change::{Change, ChangeKind, Verdict};
use crate::compare::{Comparer, is_multiple};
use crate::path::Path;
use crate::schema::{
    AdditionalProperties, Bound, Conjunct, Schema, Shape, Type, contains, json_eq,
};
use crate::{Limits, SchemaError};

/// The least common denominator of several schemas.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Lcd {
    /// The negotiated schema, as an `openAPIV3Schema` value.
    pub schema: Value,
    /// Where the inputs could not be reconciled; each field named here was left out (or its
    /// default dropped).
    pub conflicts: Vec<Change>,
    /// For each input, what the negotiated schema narrows compared with it (every non-safe
    /// change from that input to the negotiated schema).
    pub narrowings: Vec<Narrowing>,
}

/// One narrowing of one input.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Narrowing {
    /// The index of the input in the slice passed to [`lcd`].
    pub input: usize,
    #[serde(flatten)]
    pub change: Change,
}

/// Computes the least common denominator of `schemas` (see the module docs), with the default
/// [`Limits`].
pub fn lcd(schemas: &[&Value]) -> Result<Lcd, SchemaError> {
    lcd_with(schemas, &Limits::default())
}

/// [`lcd`] within `limits`.
pub fn lcd_with(schemas: &[&Value], limits: &Limits) -> Result<Lcd, SchemaError> {
    let parsed = schemas
        .iter()
        .map(|s| Schema::from_value_with(s, limits))
        .collect::<Result<Vec<_>, _>>()?;
    lcd_of_parsed(&parsed)
}

/// [`lcd`] of schemas already parsed.
pub fn lcd_of_parsed(schemas: &[Schema]) -> Result<Lcd, SchemaError> {
    let (first, rest) = schemas.split_first().ok_or(SchemaError::NoInputs)?;
    let mut merger = Merger::default();
    let mut acc = first.clone();
    for (i, s) in rest.iter().enumerate() {
        merger.input = i + 1;
        acc = merger
            .merge(&Path::root(), &acc, s)
            .map_err(|c| SchemaError::NoCommonSchema {
                path: ".".into(),
                message: c.message,
            })?;
    }
    prune_rules(&Path::root(), &mut acc, &mut merger.conflicts);
    let mut narrowings = Vec::new();
    for (input, s) in schemas.iter().enumerate() {
        let mut c = Comparer::default();
        c.node(&Path::root(), s, &acc);
        narrowings.extend(
            c.changes
                .into_iter()
                .filter(|ch| ch.verdict != Verdict::Safe)
                .map(|change| Narrowing { input, change }),
        );
    }
    Ok(Lcd {
        schema: acc.to_value(),
        conflicts: merger.conflicts,
        narrowings,
    })
}

/// Drops the CEL rules of `node` and below that the node no longer fits (see
/// [`crate::cel::check_rule`]): each goes into `dropped`, with why.
fn prune_rules(path: &Path, node: &mut Schema, dropped: &mut Vec<Change>) {
    let rules = std::mem::take(&mut node.validations);
    for rule in rules {
        match rule_fits(&rule, node) {
            Ok(()) => node.validations.push(rule),
            Err(why) => dropped.push(Change {
                version: None,
                path: path.to_string(),
                kind: ChangeKind::ValidationRuleRemoved,
                verdict: Verdict::Unknown,
                message: format!(
                    "CEL rule {} dropped: {why}; the members still enforce it, the hub does not",
                    rule.get("rule").unwrap_or(&rule)
                ),
            }),
        }
    }
    for (name, child) in &mut node.properties {
        prune_rules(&path.field(name), child, dropped);
    }
    if let Some(items) = node.items.as_deref_mut() {
        prune_rules(&path.items(), items, dropped);
    }
    if let AdditionalProperties::Schema(values) = &mut node.additional_properties {
        prune_rules(&path.items(), values, dropped);
    }
}

/// Whether one `x-kubernetes-validations` entry fits `node`: its rule, its message expression
/// and its field path name only what the node has.
fn rule_fits(rule: &Value, node: &Schema) -> Result<(), String> {
    use crate::cel::{RuleCheck, check_rule};
    let expressions = ["rule", "messageExpression"]
        .into_iter()
        .filter_map(|k| rule.get(k).and_then(Value::as_str));
    for expression in expressions {
        match check_rule(expression, node) {
            RuleCheck::Fits => {}
            RuleCheck::MissingField(field) => {
                return Err(format!(
                    "it reads {field}, which the negotiated schema leaves out"
                ));
            }
            RuleCheck::Unanalysable(why) => {
                return Err(format!("it cannot be analysed ({why})"));
            }
        }
    }
    if let Some(field_path) = rule.get("fieldPath").and_then(Value::as_str) {
        let mut at = node;
        for segment in field_path_segments(field_path) {
            match at.properties.get(&segment) {
                Some(next) => at = next,
                None if at.unlisted().is_some() => break,
                None => {
                    return Err(format!(
                        "its fieldPath {field_path} names .{segment}, which the negotiated schema \
                         leaves out"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The field names of a rule's `fieldPath` (`.spec.a`, `.spec['a.b']`); list indexes are not
/// names and end the walk.
fn field_path_segments(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            out.push(r[..end].to_string());
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix("['") {
            let Some(end) = r.find("']") else { break };
            out.push(r[..end].to_string());
            rest = &r[end + 2..];
        } else {
            break;
        }
    }
    out
}

/// Why two nodes cannot be merged.
struct Conflict {
    verdict: Verdict,
    message: String,
}

fn conflict(message: impl Into<String>) -> Conflict {
    Conflict {
        verdict: Verdict::Breaking,
        message: message.into(),
    }
}

#[derive(Default)]
struct Merger {
    conflicts: Vec<Change>,
    /// The input being merged into the accumulated result.
    input: usize,
}

impl Merger {
    fn note(&mut self, path: &Path, kind: ChangeKind, verdict: Verdict, message: String) {
        self.conflicts.push(Change {
            version: None,
            path: path.to_string(),
            kind,
            verdict,
            message,
        });
    }

    fn merge(&mut self, path: &Path, a: &Schema, b: &Schema) -> Result<Schema, Conflict> {
        let mut out = Schema {
            docs: if a.docs.is_empty() {
                b.docs.clone()
            } else {
                a.docs.clone()
            },
            ..Schema::default()
        };
        merge_shape(&mut out, a, b)?;
        out.format = merge_format(out.type_, a, b)?;
        out.nullable = a.nullable && b.nullable;
        out.unique_items = a.unique_items || b.unique_items;
        out.preserve_unknown_fields = a.preserve_unknown_fields && b.preserve_unknown_fields;
        if a.embedded_resource != b.embedded_resource {
            return Err(conflict(
                "x-kubernetes-embedded-resource differs between the inputs",
            ));
        }
        out.embedded_resource = a.embedded_resource;
        if a.effective_list_type() != b.effective_list_type() {
            return Err(conflict(format!(
                "x-kubernetes-list-type is {} in one input and {} in another",
                a.effective_list_type(),
                b.effective_list_type()
            )));
        }
        out.list_type = a.list_type.clone().or_else(|| b.list_type.clone());
        let keys = |s: &Schema| s.list_map_keys.iter().cloned().collect::<BTreeSet<_>>();
        if keys(a) != keys(b) {
            return Err(conflict(format!(
                "x-kubernetes-list-map-keys are {:?} in one input and {:?} in another",
                a.list_map_keys, b.list_map_keys
            )));
        }
        out.list_map_keys = a.list_map_keys.clone();
        if a.effective_map_type() != b.effective_map_type() {
            return Err(conflict(format!(
                "x-kubernetes-map-type is {} in one input and {} in another",
                a.effective_map_type(),
                b.effective_map_type()
            )));
        }
        out.map_type = a.map_type.clone().or_else(|| b.map_type.clone());

        match (&a.default, &b.default) {
            (Some(x), Some(y)) if json_eq(x, y) => out.default = Some(x.clone()),
            (None, None) => {}
            (x, y) => {
                let show = |v: &Option<Value>| v.as_ref().map_or("none".into(), Value::to_string);
                self.note(
                    path,
                    ChangeKind::DefaultChanged,
                    Verdict::Breaking,
                    format!(
                        "default dropped: input #{} has {}, the others {}; objects that omit the field get different values in different members",
                        self.input,
                        show(y),
                        show(x)
                    ),
                );
            }
        }

        out.enum_values = match (&a.enum_values, &b.enum_values) {
            (Some(x), Some(y)) => {
                let common: Vec<Value> = x.iter().filter(|v| contains(y, v)).cloned().collect();
                if common.is_empty() {
                    return Err(conflict("the enums have no value in common"));
                }
                Some(common)
            }
            (x, y) => x.clone().or_else(|| y.clone()),
        };

        out.minimum = merge_bound(a.minimum, b.minimum, true);
        out.maximum = merge_bound(a.maximum, b.maximum, false);
        if let (Some(lo), Some(hi)) = (out.minimum, out.maximum)
            && (lo.value > hi.value || (lo.value == hi.value && (lo.exclusive || hi.exclusive)))
        {
            return Err(conflict("minimum and maximum leave no value"));
        }
        let max = |x: Option<u64>, y: Option<u64>| x.max(y);
        let min = |x: Option<u64>, y: Option<u64>| match (x, y) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
        out.min_length = max(a.min_length, b.min_length);
        out.max_length = min(a.max_length, b.max_length);
        out.min_items = max(a.min_items, b.min_items);
        out.max_items = min(a.max_items, b.max_items);
        out.min_properties = max(a.min_properties, b.min_properties);
        out.max_properties = min(a.max_properties, b.max_properties);
        for (what, lo, hi) in [
            ("length", out.min_length, out.max_length),
            ("items", out.min_items, out.max_items),
            ("properties", out.min_properties, out.max_properties),
        ] {
            if let (Some(lo), Some(hi)) = (lo, hi)
                && lo > hi
            {
                return Err(conflict(format!(
                    "the bounds on {what} leave no value ({lo} > {hi})"
                )));
            }
        }

        out.set_conjuncts(merge_conjuncts(a, b));

        out.validations = a.validations.clone();
        for v in &b.validations {
            if !contains(&out.validations, v) {
                out.validations.push(v.clone());
            }
        }

        for (k, v) in a.extra.iter().chain(&b.extra) {
            if a.extra.get(k) != b.extra.get(k) {
                return Err(Conflict {
                    verdict: Verdict::Unknown,
                    message: format!(
                        "keyword {k} differs between the inputs and is not understood"
                    ),
                });
            }
            out.extra.insert(k.clone(), v.clone());
        }

        self.merge_object(path, &mut out, a, b)?;

        out.items = match (&a.items, &b.items) {
            (Some(x), Some(y)) => Some(Box::new(self.merge(&path.items(), x, y)?)),
            (x, y) => x.clone().or_else(|| y.clone()),
        };
        Ok(out)
    }

    fn merge_object(
        &mut self,
        path: &Path,
        out: &mut Schema,
        a: &Schema,
        b: &Schema,
    ) -> Result<(), Conflict> {
        out.required = a.required.union(&b.required).cloned().collect();
        let names: BTreeSet<&String> = a.properties.keys().chain(b.properties.keys()).collect();
        let mut dropped = false;
        for name in names {
            let p = path.field(name);
            let merged = match (a.properties.get(name), b.properties.get(name)) {
                (Some(x), Some(y)) => self.merge(&p, x, y),
                (Some(x), None) => match b.unlisted() {
                    Some(y) => self.merge(&p, x, &y),
                    None => continue,
                },
                (None, Some(y)) => match a.unlisted() {
                    Some(x) => self.merge(&p, &x, y),
                    None => continue,
                },
                (None, None) => continue,
            };
            match merged {
                Ok(s) => {
                    out.properties.insert(name.clone(), s);
                }
                Err(c) if out.required.contains(name) => {
                    return Err(Conflict {
                        verdict: c.verdict,
                        message: format!("required field {p}: {}", c.message),
                    });
                }
                Err(c) => {
                    dropped = true;
                    self.note(
                        &p,
                        ChangeKind::Conflict,
                        c.verdict,
                        format!("left out: input #{} disagrees: {}", self.input, c.message),
                    )
                }
            }
        }
        if dropped {
            // A field left out must not come back as a preserved unknown field.
            out.preserve_unknown_fields = false;
        }

        let open = |s: &Schema| match &s.additional_properties {
            AdditionalProperties::Schema(x) => Some((**x).clone()),
            AdditionalProperties::Any => Some(Schema::any()),
            AdditionalProperties::Absent if s.preserve_unknown_fields => Some(Schema::any()),
            AdditionalProperties::Absent => None,
        };
        let any_map = a.additional_properties != AdditionalProperties::Absent
            || b.additional_properties != AdditionalProperties::Absent;
        out.additional_properties = match (open(a), open(b)) {
            // A map only if neither side lists properties: a listed property that was left out
            // must not come back as a map key.
            (Some(x), Some(y)) if any_map && a.properties.is_empty() && b.properties.is_empty() => {
                if a.additional_properties == AdditionalProperties::Any
                    && b.additional_properties == AdditionalProperties::Any
                {
                    AdditionalProperties::Any
                } else {
                    AdditionalProperties::Schema(Box::new(self.merge(&path.values(), &x, &y)?))
                }
            }
            // Keys not listed are pruned by one side (or the other lists properties).
            _ => AdditionalProperties::Absent,
        };

        for name in &out.required {
            if !out.properties.contains_key(name) && out.unlisted().is_none() {
                return Err(conflict(format!(
                    "{} is required by one input but cannot be set in another",
                    path.field(name)
                )));
            }
        }
        Ok(())
    }
}

fn merge_shape(out: &mut Schema, a: &Schema, b: &Schema) -> Result<(), Conflict> {
    use Shape::*;
    let shape = match (a.shape(), b.shape()) {
        (x, y) if x == y => x,
        (Any, y) => y,
        (x, Any) => x,
        (Typed(Type::Integer), Typed(Type::Number))
        | (Typed(Type::Number), Typed(Type::Integer)) => Typed(Type::Integer),
        (IntOrString, Typed(t @ (Type::Integer | Type::String)))
        | (Typed(t @ (Type::Integer | Type::String)), IntOrString) => Typed(t),
        (IntOrString, Typed(Type::Number)) | (Typed(Type::Number), IntOrString) => {
            Typed(Type::Integer)
        }
        (x, y) => {
            let name = |s: Shape| match s {
                Any => "any".to_string(),
                IntOrString => "int-or-string".to_string(),
                Typed(t) => t.as_str().to_string(),
            };
            return Err(conflict(format!(
                "type {} in one input, {} in another",
                name(x),
                name(y)
            )));
        }
    };
    match shape {
        Any => {}
        IntOrString => out.int_or_string = true,
        Typed(t) => out.type_ = Some(t),
    }
    Ok(())
}

/// Formats: equal, one absent, or the narrower of a widening pair. Number formats are
/// dropped when the merged type is integer.
fn merge_format(t: Option<Type>, a: &Schema, b: &Schema) -> Result<Option<String>, Conflict> {
    let relevant = |s: &Schema| {
        s.format
            .clone()
            .filter(|f| !(t == Some(Type::Integer) && matches!(f.as_str(), "float" | "double")))
    };
    match (relevant(a), relevant(b)) {
        (Some(x), Some(y)) if x == y => Ok(Some(x)),
        (Some(x), Some(y)) => {
            let narrower = |n: &str, w: &str| {
                [("int32", "int64"), ("float", "double"), ("int32", "double")].contains(&(n, w))
            };
            if narrower(&x, &y) {
                Ok(Some(x))
            } else if narrower(&y, &x) {
                Ok(Some(y))
            } else {
                Err(conflict(format!(
                    "format {x:?} in one input, {y:?} in another"
                )))
            }
        }
        (x, y) => Ok(x.or(y)),
    }
}

fn merge_bound(a: Option<Bound>, b: Option<Bound>, lower: bool) -> Option<Bound> {
    match (a, b) {
        (Some(x), Some(y)) => {
            let x_stricter = if lower {
                x.value > y.value || (x.value == y.value && x.exclusive)
            } else {
                x.value < y.value || (x.value == y.value && x.exclusive)
            };
            Some(if x_stricter { x } else { y })
        }
        (x, y) => x.or(y),
    }
}

/// All conjuncts of both sides; divisors reduced to their least common multiple when they are
/// integers, or to those no other divisor implies.
fn merge_conjuncts(a: &Schema, b: &Schema) -> Vec<Conjunct> {
    let mut all = a.conjuncts();
    for c in b.conjuncts() {
        if !all.contains(&c) {
            all.push(c);
        }
    }
    let divisors: Vec<f64> = all
        .iter()
        .filter_map(|c| match c {
            Conjunct::MultipleOf(m) => Some(*m),
            _ => None,
        })
        .collect();
    if divisors.len() < 2 {
        return all;
    }
    all.retain(|c| !matches!(c, Conjunct::MultipleOf(_)));
    let integral = divisors
        .iter()
        .all(|d| d.fract() == 0.0 && *d >= 1.0 && *d < 1e12);
    let lcm = integral.then(|| {
        divisors
            .iter()
            .map(|d| *d as u64)
            .try_fold(1u64, |acc, d| acc.checked_mul(d / gcd(acc, d)))
    });
    match lcm.flatten().filter(|l| *l < (1u64 << 53)) {
        Some(l) => all.push(Conjunct::MultipleOf(l as f64)),
        None => {
            for (i, d) in divisors.iter().enumerate() {
                let implied = divisors
                    .iter()
                    .enumerate()
                    .any(|(j, o)| j != i && is_multiple(*o, *d) && (o != d || j < i));
                if !implied {
                    all.push(Conjunct::MultipleOf(*d));
                }
            }
        }
    }
    all
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}
