//! The parsed form of a structural schema: what every rule of this crate reads.
//!
//! [`Schema::from_value`] reads an `openAPIV3Schema` (resolving local `$ref`s, see
//! [`resolve`](crate::resolve)); [`Schema::to_value`] writes one back. Documentation keywords
//! (`description`, `title`, `example`, `externalDocs`, and the informational `x-kubernetes-*`
//! extensions) are kept but never compared. Keywords this crate does not interpret are kept in
//! [`Schema::extra`]: any difference in them is reported as `Unknown`, never ignored.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use crate::{Limits, SchemaError};

/// A JSON type of a structural schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Type {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
}

impl Type {
    /// The `type` keyword's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Type::Object => "object",
            Type::Array => "array",
            Type::String => "string",
            Type::Integer => "integer",
            Type::Number => "number",
            Type::Boolean => "boolean",
        }
    }

    /// Parses the `type` keyword's value.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "object" => Type::Object,
            "array" => Type::Array,
            "string" => Type::String,
            "integer" => Type::Integer,
            "number" => Type::Number,
            "boolean" => Type::Boolean,
            _ => return None,
        })
    }
}

/// A `minimum` or `maximum`, with OpenAPI v3.0's boolean `exclusiveMinimum`/`exclusiveMaximum`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bound {
    pub value: f64,
    pub exclusive: bool,
}

/// `additionalProperties`.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum AdditionalProperties {
    /// Absent: only the listed `properties` are known.
    #[default]
    Absent,
    /// `true`: a map of anything.
    Any,
    /// A map whose values follow the schema.
    Schema(Box<Schema>),
}

/// A parsed structural schema node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Schema {
    /// `type`; `None` for int-or-string, preserve-unknown-fields nodes and inside junctors.
    pub type_: Option<Type>,
    pub format: Option<String>,
    pub nullable: bool,
    pub default: Option<Value>,
    pub enum_values: Option<Vec<Value>>,
    pub minimum: Option<Bound>,
    pub maximum: Option<Bound>,
    pub multiple_of: Option<f64>,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    pub min_items: Option<u64>,
    pub max_items: Option<u64>,
    pub min_properties: Option<u64>,
    pub max_properties: Option<u64>,
    pub pattern: Option<String>,
    pub unique_items: bool,
    pub required: BTreeSet<String>,
    pub properties: BTreeMap<String, Schema>,
    pub additional_properties: AdditionalProperties,
    pub items: Option<Box<Schema>>,
    pub all_of: Vec<Schema>,
    pub any_of: Vec<Schema>,
    pub one_of: Vec<Schema>,
    pub not: Option<Box<Schema>>,
    /// `x-kubernetes-preserve-unknown-fields: true`.
    pub preserve_unknown_fields: bool,
    /// `x-kubernetes-int-or-string: true` (its canonical `anyOf: [{type: integer}, {type:
    /// string}]` is implied and not kept in [`Schema::any_of`]).
    pub int_or_string: bool,
    /// `x-kubernetes-embedded-resource: true`.
    pub embedded_resource: bool,
    /// `x-kubernetes-list-type`: `atomic` (the default), `set` or `map`.
    pub list_type: Option<String>,
    /// `x-kubernetes-list-map-keys`.
    pub list_map_keys: Vec<String>,
    /// `x-kubernetes-map-type`: `granular` (the default) or `atomic`.
    pub map_type: Option<String>,
    /// `x-kubernetes-validations`: CEL rules, as written.
    pub validations: Vec<Value>,
    /// Documentation and informational keywords: kept, never compared.
    pub docs: BTreeMap<String, Value>,
    /// Keywords this crate does not interpret: compared by equality, any difference is Unknown.
    pub extra: BTreeMap<String, Value>,
}

/// Keywords kept as documentation and never compared.
pub(crate) const DOC_KEYWORDS: &[&str] = &[
    "description",
    "title",
    "example",
    "externalDocs",
    "$schema",
    "id",
    "x-kubernetes-group-version-kind",
    "x-kubernetes-patch-strategy",
    "x-kubernetes-patch-merge-key",
    "x-kubernetes-unions",
];

/// The shape of values a node accepts, before any value validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// No type constraint (`x-kubernetes-preserve-unknown-fields` without `type`, or a junctor
    /// branch).
    Any,
    IntOrString,
    Typed(Type),
}

impl Schema {
    /// Reads a schema, resolving local `$ref`s, with the default [`Limits`].
    pub fn from_value(value: &Value) -> Result<Self, SchemaError> {
        Self::from_value_with(value, &Limits::default())
    }

    /// Reads a schema, resolving local `$ref`s, within `limits`.
    pub fn from_value_with(value: &Value, limits: &Limits) -> Result<Self, SchemaError> {
        crate::resolve::parse(value, limits)
    }

    /// Reads the schema that `reference` names in an OpenAPI document, e.g. the schema
    /// `#/components/schemas/io.k8s.api.apps.v1.Deployment` of what a member serves at
    /// `/openapi/v3/apis/apps/v1`, resolving every `$ref` against that document, within `limits`.
    /// The document itself is not copied, so a large one costs nothing beyond the parse.
    pub fn from_document_ref(
        document: &Value,
        reference: &str,
        limits: &Limits,
    ) -> Result<Self, SchemaError> {
        crate::resolve::parse_ref(document, reference, limits)
    }

    /// Removes the documentation keywords (`description`, `title`, `example`, ...) from this
    /// node and every node below it. They are never compared; without them a schema is a
    /// fraction of its size (the expanded apps/v1 Deployment shrinks from about 1 MB).
    pub fn strip_docs(&mut self) {
        self.for_each_node_mut(&mut |s| s.docs.clear());
    }

    /// Removes every `default` from this node and every node below it: for schemas whose
    /// defaults the apiserver does not apply. A built-in type's OpenAPI document only documents
    /// the defaults that Go code applies, and not even consistently across releases (v1.34 gives
    /// every string in a map or list `default: ""`, v1.35 no longer does).
    pub fn strip_defaults(&mut self) {
        self.for_each_node_mut(&mut |s| s.default = None);
    }

    /// Calls `f` on this node and every node below it (properties, additional properties,
    /// items, `allOf`/`anyOf`/`oneOf`, `not`), parents first.
    fn for_each_node_mut(&mut self, f: &mut impl FnMut(&mut Schema)) {
        f(self);
        for p in self.properties.values_mut() {
            p.for_each_node_mut(f);
        }
        if let AdditionalProperties::Schema(s) = &mut self.additional_properties {
            s.for_each_node_mut(f);
        }
        if let Some(items) = &mut self.items {
            items.for_each_node_mut(f);
        }
        for s in self
            .all_of
            .iter_mut()
            .chain(self.any_of.iter_mut())
            .chain(self.one_of.iter_mut())
        {
            s.for_each_node_mut(f);
        }
        if let Some(not) = &mut self.not {
            not.for_each_node_mut(f);
        }
    }

    /// A schema that accepts anything and keeps it
    /// (`x-kubernetes-preserve-unknown-fields: true`).
    pub fn any() -> Self {
        Self {
            preserve_unknown_fields: true,
            ..Self::default()
        }
    }

    pub(crate) fn shape(&self) -> Shape {
        if self.int_or_string {
            Shape::IntOrString
        } else if let Some(t) = self.type_ {
            Shape::Typed(t)
        } else {
            Shape::Any
        }
    }

    /// `x-kubernetes-list-type` with its default.
    pub(crate) fn effective_list_type(&self) -> &str {
        self.list_type.as_deref().unwrap_or("atomic")
    }

    /// `x-kubernetes-map-type` with its default.
    pub(crate) fn effective_map_type(&self) -> &str {
        self.map_type.as_deref().unwrap_or("granular")
    }

    /// The schema of the value under `key` when `key` is not among [`Schema::properties`]:
    /// `Some(schema)` if the map or preserved unknown fields accept it, `None` if it is pruned.
    pub(crate) fn unlisted(&self) -> Option<std::borrow::Cow<'_, Schema>> {
        match &self.additional_properties {
            AdditionalProperties::Schema(s) => Some(std::borrow::Cow::Borrowed(s)),
            AdditionalProperties::Any => Some(std::borrow::Cow::Owned(Schema::any())),
            AdditionalProperties::Absent if self.preserve_unknown_fields => {
                Some(std::borrow::Cow::Owned(Schema::any()))
            }
            AdditionalProperties::Absent => None,
        }
    }

    /// Writes the schema back as an `openAPIV3Schema` value.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        for (k, v) in &self.docs {
            m.insert(k.clone(), v.clone());
        }
        if let Some(t) = self.type_ {
            m.insert("type".into(), json!(t.as_str()));
        }
        if let Some(f) = &self.format {
            m.insert("format".into(), json!(f));
        }
        if self.nullable {
            m.insert("nullable".into(), json!(true));
        }
        if let Some(d) = &self.default {
            m.insert("default".into(), d.clone());
        }
        if let Some(e) = &self.enum_values {
            m.insert("enum".into(), Value::Array(e.clone()));
        }
        if let Some(b) = self.minimum {
            m.insert("minimum".into(), number(b.value));
            if b.exclusive {
                m.insert("exclusiveMinimum".into(), json!(true));
            }
        }
        if let Some(b) = self.maximum {
            m.insert("maximum".into(), number(b.value));
            if b.exclusive {
                m.insert("exclusiveMaximum".into(), json!(true));
            }
        }
        if let Some(x) = self.multiple_of {
            m.insert("multipleOf".into(), number(x));
        }
        for (key, v) in [
            ("minLength", self.min_length),
            ("maxLength", self.max_length),
            ("minItems", self.min_items),
            ("maxItems", self.max_items),
            ("minProperties", self.min_properties),
            ("maxProperties", self.max_properties),
        ] {
            if let Some(v) = v {
                m.insert(key.into(), json!(v));
            }
        }
        if let Some(p) = &self.pattern {
            m.insert("pattern".into(), json!(p));
        }
        if self.unique_items {
            m.insert("uniqueItems".into(), json!(true));
        }
        if !self.required.is_empty() {
            m.insert("required".into(), json!(self.required));
        }
        if !self.properties.is_empty() {
            let props: Map<String, Value> = self
                .properties
                .iter()
                .map(|(k, v)| (k.clone(), v.to_value()))
                .collect();
            m.insert("properties".into(), Value::Object(props));
        }
        match &self.additional_properties {
            AdditionalProperties::Absent => {}
            AdditionalProperties::Any => {
                m.insert("additionalProperties".into(), json!(true));
            }
            AdditionalProperties::Schema(s) => {
                m.insert("additionalProperties".into(), s.to_value());
            }
        }
        if let Some(items) = &self.items {
            m.insert("items".into(), items.to_value());
        }
        let list = |v: &[Schema]| Value::Array(v.iter().map(Schema::to_value).collect());
        if !self.all_of.is_empty() {
            m.insert("allOf".into(), list(&self.all_of));
        }
        if self.int_or_string {
            m.insert(
                "anyOf".into(),
                json!([{"type": "integer"}, {"type": "string"}]),
            );
        } else if !self.any_of.is_empty() {
            m.insert("anyOf".into(), list(&self.any_of));
        }
        if !self.one_of.is_empty() {
            m.insert("oneOf".into(), list(&self.one_of));
        }
        if let Some(not) = &self.not {
            m.insert("not".into(), not.to_value());
        }
        if self.preserve_unknown_fields {
            m.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
        }
        if self.int_or_string {
            m.insert("x-kubernetes-int-or-string".into(), json!(true));
        }
        if self.embedded_resource {
            m.insert("x-kubernetes-embedded-resource".into(), json!(true));
        }
        if let Some(t) = &self.list_type {
            m.insert("x-kubernetes-list-type".into(), json!(t));
        }
        if !self.list_map_keys.is_empty() {
            m.insert(
                "x-kubernetes-list-map-keys".into(),
                json!(self.list_map_keys),
            );
        }
        if let Some(t) = &self.map_type {
            m.insert("x-kubernetes-map-type".into(), json!(t));
        }
        if !self.validations.is_empty() {
            m.insert(
                "x-kubernetes-validations".into(),
                Value::Array(self.validations.clone()),
            );
        }
        for (k, v) in &self.extra {
            m.insert(k.clone(), v.clone());
        }
        Value::Object(m)
    }
}

/// A JSON number for `x`, written as an integer when it is one.
pub(crate) fn number(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 9.0e15 {
        // Exact: |x| < 2^53.
        json!(x as i64)
    } else {
        serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
    }
}

/// JSON equality where numbers compare by value (`1` equals `1.0`), as Kubernetes' validation
/// does for `enum`.
pub(crate) fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y,
            _ => x == y,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// Whether `list` holds a value equal to `v` (by [`json_eq`]).
pub(crate) fn contains(list: &[Value], v: &Value) -> bool {
    list.iter().any(|x| json_eq(x, v))
}

/// A single constraint that holds in conjunction with the others on a node: `pattern`,
/// `multipleOf`, `anyOf`, `oneOf`, `not`, and every `allOf` entry. Several of one kind can hold
/// at once (through `allOf`), which is how [`lcd`](crate::lcd) keeps two different patterns.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Conjunct {
    Pattern(String),
    MultipleOf(f64),
    AnyOf(Vec<Schema>),
    OneOf(Vec<Schema>),
    Not(Schema),
    Other(Schema),
}

impl Conjunct {
    pub(crate) fn keyword(&self) -> &'static str {
        match self {
            Conjunct::Pattern(_) => "pattern",
            Conjunct::MultipleOf(_) => "multipleOf",
            Conjunct::AnyOf(_) => "anyOf",
            Conjunct::OneOf(_) => "oneOf",
            Conjunct::Not(_) => "not",
            Conjunct::Other(_) => "allOf",
        }
    }

    /// As a schema of its own, for an `allOf` entry.
    fn into_schema(self) -> Schema {
        match self {
            Conjunct::Pattern(p) => Schema {
                pattern: Some(p),
                ..Schema::default()
            },
            Conjunct::MultipleOf(m) => Schema {
                multiple_of: Some(m),
                ..Schema::default()
            },
            Conjunct::AnyOf(v) => Schema {
                any_of: v,
                ..Schema::default()
            },
            Conjunct::OneOf(v) => Schema {
                one_of: v,
                ..Schema::default()
            },
            Conjunct::Not(s) => Schema {
                not: Some(Box::new(s)),
                ..Schema::default()
            },
            Conjunct::Other(s) => s,
        }
    }

    /// Recognises an `allOf` entry that holds exactly one conjunct keyword.
    fn from_entry(entry: &Schema) -> Conjunct {
        let mut probe = entry.clone();
        let found = if let Some(p) = probe.pattern.take() {
            Some(Conjunct::Pattern(p))
        } else if let Some(m) = probe.multiple_of.take() {
            Some(Conjunct::MultipleOf(m))
        } else if !probe.any_of.is_empty() {
            Some(Conjunct::AnyOf(std::mem::take(&mut probe.any_of)))
        } else if !probe.one_of.is_empty() {
            Some(Conjunct::OneOf(std::mem::take(&mut probe.one_of)))
        } else {
            probe.not.take().map(|n| Conjunct::Not(*n))
        };
        match found {
            Some(c) if probe == Schema::default() => c,
            _ => Conjunct::Other(entry.clone()),
        }
    }
}

impl Schema {
    /// Every conjunct constraint of this node.
    pub(crate) fn conjuncts(&self) -> Vec<Conjunct> {
        let mut out = Vec::new();
        if let Some(p) = &self.pattern {
            out.push(Conjunct::Pattern(p.clone()));
        }
        if let Some(m) = self.multiple_of {
            out.push(Conjunct::MultipleOf(m));
        }
        if !self.any_of.is_empty() {
            out.push(Conjunct::AnyOf(self.any_of.clone()));
        }
        if !self.one_of.is_empty() {
            out.push(Conjunct::OneOf(self.one_of.clone()));
        }
        if let Some(n) = &self.not {
            out.push(Conjunct::Not((**n).clone()));
        }
        for entry in &self.all_of {
            let c = Conjunct::from_entry(entry);
            if !out.contains(&c) {
                out.push(c);
            }
        }
        out
    }

    /// Replaces this node's conjunct constraints: the first of each kind goes to its own keyword,
    /// the rest into `allOf`.
    pub(crate) fn set_conjuncts(&mut self, conjuncts: Vec<Conjunct>) {
        self.pattern = None;
        self.multiple_of = None;
        self.any_of.clear();
        self.one_of.clear();
        self.not = None;
        self.all_of.clear();
        for c in conjuncts {
            match c {
                Conjunct::Pattern(p) if self.pattern.is_none() => self.pattern = Some(p),
                Conjunct::MultipleOf(m) if self.multiple_of.is_none() => self.multiple_of = Some(m),
                Conjunct::AnyOf(v) if self.any_of.is_empty() && !self.int_or_string => {
                    self.any_of = v
                }
                Conjunct::OneOf(v) if self.one_of.is_empty() => self.one_of = v,
                Conjunct::Not(n) if self.not.is_none() => self.not = Some(Box::new(n)),
                other => self.all_of.push(other.into_schema()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_compare_by_value() {
        assert!(json_eq(&json!(1), &json!(1.0)));
        assert!(json_eq(&json!({"a": [1, 2]}), &json!({"a": [1.0, 2]})));
        assert!(!json_eq(&json!("1"), &json!(1)));
    }

    #[test]
    fn conjuncts_round_trip() {
        let mut s = Schema {
            pattern: Some("a".into()),
            ..Schema::default()
        };
        let mut c = s.conjuncts();
        c.push(Conjunct::Pattern("b".into()));
        s.set_conjuncts(c.clone());
        assert_eq!(s.pattern.as_deref(), Some("a"));
        assert_eq!(s.all_of.len(), 1);
        assert_eq!(s.conjuncts(), c);
    }
}
