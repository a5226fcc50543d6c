//! Per-object check: which fields an object sets that a member's schema cannot accept.
//!
//! This is what lets an object that uses only fields a member has still go to that member
//! (design rule 5). The check follows what the member's API server would do with the object:
//! - a field not in the schema is reported as [`ProblemKind::UnknownField`] (the member would
//!   prune it, or reject it under strict field validation), unless the node preserves unknown
//!   fields or has `additionalProperties`. At the root, and in embedded resources, `apiVersion`,
//!   `kind` and `metadata` are always known;
//! - a `null` is accepted where `nullable: true`, and otherwise treated as unset (Kubernetes
//!   prunes it);
//! - type, `enum`, bounds, `multipleOf`, `pattern`, `uniqueItems`, `required`,
//!   `x-kubernetes-list-type: set|map` uniqueness, `int32` range, `allOf`/`anyOf`/`oneOf`/`not`
//!   are evaluated;
//! - CEL rules (`x-kubernetes-validations`) are evaluated at every node of the object that has
//!   them, `self` bound to the node's value (see [`crate::cel`]): a rule that is false is a
//!   [`ProblemKind::RuleViolated`] with the rule's message, at the node's path plus the rule's
//!   `fieldPath`. A transition rule (`oldSelf`), a rule that does not compile or fails at run
//!   time (a Kubernetes library function this crate lacks, a field read without `has()`), and
//!   rules beyond the per-object bounds are [`ProblemKind::Undecidable`], never a violation.
//!
//! Not evaluated: string formats other than the integer ones. A `pattern` that does not compile
//! as a regular expression is reported as [`ProblemKind::Undecidable`], never passed.

use std::collections::{HashMap, HashSet};

use regex::{Regex, RegexBuilder};
use serde::Serialize;
use serde_json::Value;

use crate::cel::{Evaluator, Outcome};
use crate::path::Path;
use crate::schema::{AdditionalProperties, Bound, Schema, Shape, Type, contains};
use crate::{Limits, SchemaError};

/// Why a member cannot take a field an object sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum ProblemKind {
    /// The member's schema has no such field: it would be dropped.
    UnknownField,
    /// The member's schema requires a field the object does not set.
    MissingRequired,
    WrongType,
    NotInEnum,
    /// A bound on the value, its length, its items or its properties.
    OutOfBounds,
    NotMultiple,
    PatternMismatch,
    /// Duplicate items where `uniqueItems` or `x-kubernetes-list-type: set|map` forbids them.
    Duplicate,
    /// `allOf`/`anyOf`/`oneOf`/`not` not satisfied.
    Junctor,
    /// A CEL rule of `x-kubernetes-validations` evaluates to false on the value.
    RuleViolated,
    /// Cannot be evaluated (e.g. a pattern that does not compile, nesting deeper than the
    /// limit, a CEL rule that reads `oldSelf` or calls a function this crate does not have).
    Undecidable,
}

/// One field an object sets that a member cannot accept.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ObjectProblem {
    /// JSON path in the object, e.g. `.spec.template.spec.containers[0].resizePolicy`.
    pub path: String,
    pub kind: ProblemKind,
    pub message: String,
}

/// Lists what `object` sets that `schema` cannot accept (see the module docs). An empty list
/// means the member can take the object as it is.
pub fn check_object(object: &Value, schema: &Value) -> Result<Vec<ObjectProblem>, SchemaError> {
    let schema = Schema::from_value(schema)?;
    Ok(check_parsed(object, &schema))
}

/// [`check_object`] with a schema already parsed: parse a member's schema once, check many
/// objects.
pub fn check_parsed(object: &Value, schema: &Schema) -> Vec<ObjectProblem> {
    let mut checker = Checker {
        regexes: HashMap::new(),
        max_depth: Limits::default().max_depth * 2,
        rules: Evaluator::default(),
    };
    let mut problems = Vec::new();
    checker.value(object, schema, &Path::root(), 0, false, &mut problems);
    problems
}

struct Checker {
    regexes: HashMap<String, Option<Regex>>,
    max_depth: usize,
    rules: Evaluator,
}

fn problem(path: &Path, kind: ProblemKind, message: impl Into<String>) -> ObjectProblem {
    ObjectProblem {
        path: path.to_string(),
        kind,
        message: message.into(),
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_integer(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

fn type_matches(v: &Value, t: Type) -> bool {
    match t {
        Type::Object => v.is_object(),
        Type::Array => v.is_array(),
        Type::String => v.is_string(),
        Type::Integer => is_integer(v),
        Type::Number => v.is_number(),
        Type::Boolean => v.is_boolean(),
    }
}

fn within(x: f64, lower: Option<Bound>, upper: Option<Bound>) -> bool {
    lower.is_none_or(|b| x > b.value || (x == b.value && !b.exclusive))
        && upper.is_none_or(|b| x < b.value || (x == b.value && !b.exclusive))
}

impl Checker {
    /// Whether `v` satisfies `s` (for junctors).
    fn satisfies(&mut self, v: &Value, s: &Schema, path: &Path, depth: usize) -> bool {
        let mut scratch = Vec::new();
        self.value(v, s, path, depth, true, &mut scratch);
        scratch.is_empty()
    }

    fn value(
        &mut self,
        v: &Value,
        s: &Schema,
        path: &Path,
        depth: usize,
        in_junctor: bool,
        out: &mut Vec<ObjectProblem>,
    ) {
        if depth > self.max_depth {
            out.push(problem(
                path,
                ProblemKind::Undecidable,
                format!("nested deeper than {} levels", self.max_depth),
            ));
            return;
        }
        if v.is_null() {
            // Kept where nullable; otherwise pruned by the API server, as if unset.
            return;
        }
        let shape_ok = match s.shape() {
            Shape::Any => true,
            Shape::IntOrString => is_integer(v) || v.is_string(),
            Shape::Typed(t) => type_matches(v, t),
        };
        if !shape_ok {
            let expected = match s.shape() {
                Shape::IntOrString => "integer or string",
                Shape::Typed(t) => t.as_str(),
                Shape::Any => "any",
            };
            out.push(problem(
                path,
                ProblemKind::WrongType,
                format!("expected {expected}, got {}", json_type(v)),
            ));
            return;
        }
        if let Some(values) = &s.enum_values
            && !contains(values, v)
        {
            out.push(problem(
                path,
                ProblemKind::NotInEnum,
                format!("{v} is not one of {}", Value::Array(values.clone())),
            ));
        }
        match v {
            Value::Number(n) => self.number(n, s, path, out),
            Value::String(text) => self.string(text, s, path, out),
            Value::Array(items) => self.array(items, s, path, depth, in_junctor, out),
            Value::Object(map) => self.object(map, s, path, depth, in_junctor, out),
            _ => {}
        }
        self.junctors(v, s, path, depth, out);
        if !in_junctor && !s.validations.is_empty() {
            self.rules(v, s, path, depth, out);
        }
    }

    /// The node's CEL rules, with `self` bound to its value (see [`crate::cel`]).
    fn rules(
        &mut self,
        v: &Value,
        s: &Schema,
        path: &Path,
        depth: usize,
        out: &mut Vec<ObjectProblem>,
    ) {
        let at_root = depth == 0 || s.embedded_resource;
        for outcome in self.rules.evaluate(&s.validations, v, s, at_root) {
            match outcome {
                Outcome::Holds => {}
                Outcome::Violated {
                    message,
                    field_path,
                } => {
                    let path = match (path.depth(), field_path) {
                        (_, None) => path.to_string(),
                        (0, Some(field)) => field,
                        (_, Some(field)) => format!("{path}{field}"),
                    };
                    out.push(ObjectProblem {
                        path,
                        kind: ProblemKind::RuleViolated,
                        message,
                    });
                }
                Outcome::Undecidable(why) => out.push(problem(path, ProblemKind::Undecidable, why)),
            }
        }
    }

    fn number(
        &mut self,
        n: &serde_json::Number,
        s: &Schema,
        path: &Path,
        out: &mut Vec<ObjectProblem>,
    ) {
        let Some(x) = n.as_f64() else { return };
        if !within(x, s.minimum, s.maximum) {
            out.push(problem(
                path,
                ProblemKind::OutOfBounds,
                format!("{n} is outside the allowed range"),
            ));
        }
        if s.format.as_deref() == Some("int32") && !(-2147483648.0..=2147483647.0).contains(&x) {
            out.push(problem(
                path,
                ProblemKind::OutOfBounds,
                format!("{n} does not fit in int32"),
            ));
        }
        if let Some(m) = s.multiple_of {
            let q = x / m;
            if !q.is_finite() || (q - q.round()).abs() > 1e-9 {
                out.push(problem(
                    path,
                    ProblemKind::NotMultiple,
                    format!("{n} is not a multiple of {m}"),
                ));
            }
        }
    }

    fn string(&mut self, text: &str, s: &Schema, path: &Path, out: &mut Vec<ObjectProblem>) {
        let len = text.chars().count() as u64;
        if s.min_length.is_some_and(|m| len < m) || s.max_length.is_some_and(|m| len > m) {
            out.push(problem(
                path,
                ProblemKind::OutOfBounds,
                format!("length {len} is outside the allowed range"),
            ));
        }
        if let Some(pattern) = &s.pattern {
            let regex = self
                .regexes
                .entry(pattern.clone())
                .or_insert_with(|| RegexBuilder::new(pattern).size_limit(1 << 20).build().ok());
            match regex {
                Some(r) if r.is_match(text) => {}
                Some(_) => out.push(problem(
                    path,
                    ProblemKind::PatternMismatch,
                    format!("does not match {pattern:?}"),
                )),
                None => out.push(problem(
                    path,
                    ProblemKind::Undecidable,
                    format!("pattern {pattern:?} cannot be evaluated"),
                )),
            }
        }
    }

    fn array(
        &mut self,
        items: &[Value],
        s: &Schema,
        path: &Path,
        depth: usize,
        in_junctor: bool,
        out: &mut Vec<ObjectProblem>,
    ) {
        let len = items.len() as u64;
        if s.min_items.is_some_and(|m| len < m) || s.max_items.is_some_and(|m| len > m) {
            out.push(problem(
                path,
                ProblemKind::OutOfBounds,
                format!("{len} items is outside the allowed range"),
            ));
        }
        let key_of = |item: &Value| -> String {
            if s.effective_list_type() == "map" && !s.list_map_keys.is_empty() {
                let keys: Vec<Value> = s
                    .list_map_keys
                    .iter()
                    .map(|k| item.get(k).cloned().unwrap_or(Value::Null))
                    .collect();
                Value::Array(keys).to_string()
            } else {
                item.to_string()
            }
        };
        if s.unique_items || matches!(s.effective_list_type(), "set" | "map") {
            let mut seen = HashSet::new();
            for (i, item) in items.iter().enumerate() {
                if !seen.insert(key_of(item)) {
                    out.push(problem(
                        &path.index(i),
                        ProblemKind::Duplicate,
                        "duplicate item",
                    ));
                }
            }
        }
        if let Some(item_schema) = &s.items {
            for (i, item) in items.iter().enumerate() {
                self.value(
                    item,
                    item_schema,
                    &path.index(i),
                    depth + 1,
                    in_junctor,
                    out,
                );
            }
        }
    }

    fn object(
        &mut self,
        map: &serde_json::Map<String, Value>,
        s: &Schema,
        path: &Path,
        depth: usize,
        in_junctor: bool,
        out: &mut Vec<ObjectProblem>,
    ) {
        let len = map.len() as u64;
        if s.min_properties.is_some_and(|m| len < m) || s.max_properties.is_some_and(|m| len > m) {
            out.push(problem(
                path,
                ProblemKind::OutOfBounds,
                format!("{len} properties is outside the allowed range"),
            ));
        }
        for name in &s.required {
            if map.get(name).is_none_or(Value::is_null) {
                out.push(problem(
                    &path.field(name),
                    ProblemKind::MissingRequired,
                    "required by the member's schema but not set",
                ));
            }
        }
        let always_known = depth == 0 || s.embedded_resource;
        for (key, value) in map {
            let p = path.field(key);
            if let Some(child) = s.properties.get(key) {
                self.value(value, child, &p, depth + 1, in_junctor, out);
                continue;
            }
            match &s.additional_properties {
                AdditionalProperties::Schema(child) => {
                    self.value(value, child, &p, depth + 1, in_junctor, out)
                }
                AdditionalProperties::Any => {}
                AdditionalProperties::Absent => {
                    let known = s.preserve_unknown_fields
                        || in_junctor
                        || (always_known
                            && matches!(key.as_str(), "apiVersion" | "kind" | "metadata"));
                    if !known {
                        out.push(problem(
                            &p,
                            ProblemKind::UnknownField,
                            "the member's schema has no such field",
                        ));
                    }
                }
            }
        }
    }

    fn junctors(
        &mut self,
        v: &Value,
        s: &Schema,
        path: &Path,
        depth: usize,
        out: &mut Vec<ObjectProblem>,
    ) {
        for (i, entry) in s.all_of.iter().enumerate() {
            if !self.satisfies(v, entry, path, depth + 1) {
                out.push(problem(
                    path,
                    ProblemKind::Junctor,
                    format!("allOf[{i}] is not satisfied"),
                ));
            }
        }
        if !s.any_of.is_empty()
            && !s
                .any_of
                .iter()
                .any(|entry| self.satisfies(v, entry, path, depth + 1))
        {
            out.push(problem(
                path,
                ProblemKind::Junctor,
                "no branch of anyOf is satisfied",
            ));
        }
        if !s.one_of.is_empty() {
            let matching = s
                .one_of
                .iter()
                .filter(|entry| self.satisfies(v, entry, path, depth + 1))
                .count();
            if matching != 1 {
                out.push(problem(
                    path,
                    ProblemKind::Junctor,
                    format!("{matching} branches of oneOf are satisfied, not exactly one"),
                ));
            }
        }
        if let Some(not) = &s.not
            && self.satisfies(v, not, path, depth + 1)
        {
            out.push(problem(path, ProblemKind::Junctor, "not is satisfied"));
        }
    }
}
