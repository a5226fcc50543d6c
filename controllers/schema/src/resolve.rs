//! Reading a schema: `$ref` resolution, Kubernetes OpenAPI idioms, structural-schema checks.
//!
//! - Local references only: `#/definitions/<name>` (OpenAPI v2, JSON Schema) and
//!   `#/components/schemas/<name>` (OpenAPI v3, what `/openapi/v3` serves), looked up in the
//!   document passed in. Sibling keywords of a `$ref` (e.g. `description`, `default`) win over
//!   the target's. Kubernetes' OpenAPI v3 wraps references as `allOf: [{$ref: ...}]` so that
//!   siblings are legal; a one-entry `allOf` holding only a `$ref` is read the same way.
//! - Cycles are rejected ([`SchemaError::RecursiveRef`]): structural schemas cannot be recursive.
//! - Work is bounded: at most [`Limits::max_depth`] levels and [`Limits::max_nodes`] nodes once
//!   references are expanded (a diamond of references is counted every time it is expanded).
//! - Kubernetes OpenAPI idioms become their structural (CRD) form, as `controller-gen` writes
//!   them: `IntOrString` (`format: int-or-string` or `oneOf: [{type: integer}, {type: string}]`,
//!   no `type`) and `Quantity` (`oneOf: [{type: string}, {type: number}]`, no `type`) become
//!   `x-kubernetes-int-or-string: true`.
//! - Structural rules of Kubernetes (`apiextensions` "Specifying a structural schema"): every
//!   node outside `allOf`/`anyOf`/`oneOf`/`not` has a `type`, unless it is int-or-string or
//!   preserves unknown fields; `properties` and `additionalProperties` are exclusive;
//!   `additionalProperties: false`, `patternProperties`, `dependencies`, `additionalItems` and
//!   tuple `items` are not allowed.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::path::Path;
use crate::schema::{AdditionalProperties, Bound, DOC_KEYWORDS, Schema, Type};
use crate::{Limits, SchemaError};

/// Parses `root` as a schema document (see the module docs).
pub(crate) fn parse(root: &Value, limits: &Limits) -> Result<Schema, SchemaError> {
    let mut parser = Parser {
        root,
        limits,
        nodes: 0,
        stack: Vec::new(),
    };
    parser.node(root, &Path::root(), 0, false)
}

/// Parses the schema that `reference` (e.g. `#/components/schemas/io.k8s.api.apps.v1.Deployment`)
/// names in `document`, resolving every `$ref` against `document` (see the module docs).
pub(crate) fn parse_ref(
    document: &Value,
    reference: &str,
    limits: &Limits,
) -> Result<Schema, SchemaError> {
    let node = serde_json::json!({ "$ref": reference });
    let mut parser = Parser {
        root: document,
        limits,
        nodes: 0,
        stack: Vec::new(),
    };
    parser.node(&node, &Path::root(), 0, false)
}

struct Parser<'a> {
    root: &'a Value,
    limits: &'a Limits,
    nodes: usize,
    /// The `$ref`s being expanded, outermost first: a repeat is a cycle.
    stack: Vec<&'a str>,
}

type Fields<'a> = BTreeMap<&'a str, &'a Value>;

fn invalid(path: &Path, keyword: &str, message: impl Into<String>) -> SchemaError {
    SchemaError::InvalidKeyword {
        path: path.to_string(),
        keyword: keyword.to_string(),
        message: message.into(),
    }
}

fn non_structural(path: &Path, message: impl Into<String>) -> SchemaError {
    SchemaError::NonStructural {
        path: path.to_string(),
        message: message.into(),
    }
}

/// Decodes one JSON-pointer token (`~1` is `/`, `~0` is `~`).
fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// The scalar type of a junctor branch that is exactly `{type: T}`.
fn bare_type(v: &Value) -> Option<&str> {
    let m = v.as_object()?;
    if m.len() == 1 {
        m.get("type")?.as_str()
    } else {
        None
    }
}

/// Whether `v` is a list of bare-type branches that together make an int-or-string (or a
/// Quantity, which Kubernetes CRDs also write as int-or-string).
fn is_int_or_string_branches(v: &Value) -> bool {
    let Some(branches) = v.as_array() else {
        return false;
    };
    let mut types: Vec<&str> = branches.iter().filter_map(bare_type).collect();
    if types.len() != branches.len() {
        return false;
    }
    types.sort_unstable();
    types == ["integer", "string"] || types == ["number", "string"]
}

impl<'a> Parser<'a> {
    fn lookup(&self, reference: &'a str, path: &Path) -> Result<&'a Value, SchemaError> {
        let (container, name): (Option<&Value>, &str) =
            if let Some(name) = reference.strip_prefix("#/definitions/") {
                (self.root.get("definitions"), name)
            } else if let Some(name) = reference.strip_prefix("#/components/schemas/") {
                (
                    self.root.get("components").and_then(|c| c.get("schemas")),
                    name,
                )
            } else {
                return Err(SchemaError::UnsupportedRef {
                    path: path.to_string(),
                    reference: reference.to_string(),
                });
            };
        container
            .and_then(|c| c.get(unescape(name).as_str()))
            .ok_or_else(|| SchemaError::DanglingRef {
                path: path.to_string(),
                reference: reference.to_string(),
            })
    }

    /// The `$ref` of a node: its own, or that of a one-entry `allOf` wrapper.
    fn reference(fields: &Fields<'a>, path: &Path) -> Result<Option<&'a str>, SchemaError> {
        if let Some(r) = fields.get("$ref") {
            return r
                .as_str()
                .map(Some)
                .ok_or_else(|| invalid(path, "$ref", "expected a string"));
        }
        if let Some(Value::Array(entries)) = fields.get("allOf")
            && let [Value::Object(only)] = entries.as_slice()
            && only.len() == 1
            && let Some(Value::String(r)) = only.get("$ref")
        {
            return Ok(Some(r.as_str()));
        }
        Ok(None)
    }

    fn node(
        &mut self,
        value: &'a Value,
        path: &Path,
        depth: usize,
        in_junctor: bool,
    ) -> Result<Schema, SchemaError> {
        let Value::Object(map) = value else {
            return Err(invalid(path, "schema", "expected an object"));
        };
        let fields: Fields<'a> = map.iter().map(|(k, v)| (k.as_str(), v)).collect();
        self.fields(fields, path, depth, in_junctor)
    }

    fn fields(
        &mut self,
        mut fields: Fields<'a>,
        path: &Path,
        depth: usize,
        in_junctor: bool,
    ) -> Result<Schema, SchemaError> {
        if depth > self.limits.max_depth {
            return Err(SchemaError::TooDeep {
                path: path.to_string(),
                limit: self.limits.max_depth,
            });
        }
        self.nodes += 1;
        if self.nodes > self.limits.max_nodes {
            return Err(SchemaError::TooLarge {
                path: path.to_string(),
                limit: self.limits.max_nodes,
            });
        }

        // Expand a chain of references in a loop, not by recursion: the stack stays flat.
        let depth_of_stack = self.stack.len();
        while let Some(reference) = Self::reference(&fields, path)? {
            if self.stack.contains(&reference) {
                self.stack.truncate(depth_of_stack);
                return Err(SchemaError::RecursiveRef {
                    path: path.to_string(),
                    reference: reference.to_string(),
                });
            }
            let target = match self.lookup(reference, path) {
                Ok(Value::Object(target)) => target,
                Ok(_) => {
                    self.stack.truncate(depth_of_stack);
                    return Err(invalid(
                        path,
                        "$ref",
                        format!("{reference} is not an object"),
                    ));
                }
                Err(e) => {
                    self.stack.truncate(depth_of_stack);
                    return Err(e);
                }
            };
            if fields.remove("$ref").is_none() {
                fields.remove("allOf");
            }
            let mut merged: Fields<'a> = target.iter().map(|(k, v)| (k.as_str(), v)).collect();
            merged.extend(fields);
            fields = merged;
            self.stack.push(reference);
        }
        let result = self.keywords(fields, path, depth, in_junctor);
        self.stack.truncate(depth_of_stack);
        result
    }

    /// Reads the keywords of one node whose references are expanded.
    fn keywords(
        &mut self,
        mut fields: Fields<'a>,
        path: &Path,
        depth: usize,
        in_junctor: bool,
    ) -> Result<Schema, SchemaError> {
        let mut s = Schema::default();
        let exclusive_min = fields.remove("exclusiveMinimum");
        let exclusive_max = fields.remove("exclusiveMaximum");

        // Kubernetes OpenAPI idioms for IntOrString and Quantity.
        if !fields.contains_key("type") {
            if fields.get("format").and_then(|f| f.as_str()) == Some("int-or-string") {
                s.int_or_string = true;
                fields.remove("format");
            }
            for junctor in ["oneOf", "anyOf"] {
                if fields
                    .get(junctor)
                    .is_some_and(|v| is_int_or_string_branches(v))
                {
                    s.int_or_string = true;
                    fields.remove(junctor);
                }
            }
        }
        if fields.get("x-kubernetes-int-or-string") == Some(&&Value::Bool(true))
            && fields
                .get("anyOf")
                .is_some_and(|v| is_int_or_string_branches(v))
        {
            fields.remove("anyOf");
        }

        for (key, v) in fields {
            match key {
                "type" => {
                    let t = v
                        .as_str()
                        .ok_or_else(|| invalid(path, key, "expected a string"))?;
                    s.type_ = Some(
                        Type::parse(t)
                            .ok_or_else(|| invalid(path, key, format!("unknown type {t:?}")))?,
                    );
                }
                "format" => s.format = Some(string(v, path, key)?),
                "pattern" => s.pattern = Some(string(v, path, key)?),
                "nullable" => s.nullable = boolean(v, path, key)?,
                "uniqueItems" => s.unique_items = boolean(v, path, key)?,
                "default" => s.default = Some(v.clone()),
                "enum" => {
                    let values = v
                        .as_array()
                        .ok_or_else(|| invalid(path, key, "expected a list"))?;
                    s.enum_values = Some(values.clone());
                }
                "minimum" => s.minimum = tighter_lower(s.minimum, float(v, path, key)?, false),
                "maximum" => s.maximum = tighter_upper(s.maximum, float(v, path, key)?, false),
                "multipleOf" => {
                    let m = float(v, path, key)?;
                    if m <= 0.0 {
                        return Err(invalid(path, key, "must be greater than 0"));
                    }
                    s.multiple_of = Some(m);
                }
                "minLength" => s.min_length = Some(count(v, path, key)?),
                "maxLength" => s.max_length = Some(count(v, path, key)?),
                "minItems" => s.min_items = Some(count(v, path, key)?),
                "maxItems" => s.max_items = Some(count(v, path, key)?),
                "minProperties" => s.min_properties = Some(count(v, path, key)?),
                "maxProperties" => s.max_properties = Some(count(v, path, key)?),
                "required" => s.required.extend(names(v, path, key)?),
                "properties" => {
                    let props = v
                        .as_object()
                        .ok_or_else(|| invalid(path, key, "expected an object"))?;
                    for (name, child) in props {
                        let child = self.node(child, &path.field(name), depth + 1, in_junctor)?;
                        s.properties.insert(name.clone(), child);
                    }
                }
                "additionalProperties" => {
                    s.additional_properties = match v {
                        Value::Bool(true) => AdditionalProperties::Any,
                        Value::Bool(false) => {
                            return Err(non_structural(
                                path,
                                "additionalProperties: false is not allowed (unknown fields are pruned instead)",
                            ));
                        }
                        _ => AdditionalProperties::Schema(Box::new(self.node(
                            v,
                            &path.values(),
                            depth + 1,
                            in_junctor,
                        )?)),
                    }
                }
                "items" => {
                    if v.is_array() {
                        return Err(non_structural(
                            path,
                            "items must be one schema, not a list (tuples are not allowed)",
                        ));
                    }
                    s.items = Some(Box::new(self.node(
                        v,
                        &path.items(),
                        depth + 1,
                        in_junctor,
                    )?));
                }
                "allOf" | "anyOf" | "oneOf" => {
                    let entries = v
                        .as_array()
                        .ok_or_else(|| invalid(path, key, "expected a list of schemas"))?;
                    let keyword = match key {
                        "allOf" => "allOf",
                        "anyOf" => "anyOf",
                        _ => "oneOf",
                    };
                    let mut parsed = Vec::with_capacity(entries.len());
                    for (i, e) in entries.iter().enumerate() {
                        parsed.push(self.node(
                            e,
                            &path.keyword(keyword, Some(i)),
                            depth + 1,
                            true,
                        )?);
                    }
                    match keyword {
                        "allOf" => s.all_of = parsed,
                        "anyOf" => s.any_of = parsed,
                        _ => s.one_of = parsed,
                    }
                }
                "not" => {
                    s.not = Some(Box::new(self.node(
                        v,
                        &path.keyword("not", None),
                        depth + 1,
                        true,
                    )?))
                }
                "x-kubernetes-preserve-unknown-fields" => {
                    s.preserve_unknown_fields = boolean(v, path, key)?
                }
                "x-kubernetes-int-or-string" => s.int_or_string |= boolean(v, path, key)?,
                "x-kubernetes-embedded-resource" => s.embedded_resource = boolean(v, path, key)?,
                "x-kubernetes-list-type" => s.list_type = Some(string(v, path, key)?),
                "x-kubernetes-map-type" => s.map_type = Some(string(v, path, key)?),
                "x-kubernetes-list-map-keys" => s.list_map_keys.extend(names(v, path, key)?),
                "x-kubernetes-validations" => {
                    let rules = v
                        .as_array()
                        .ok_or_else(|| invalid(path, key, "expected a list of rules"))?;
                    s.validations = rules.clone();
                }
                "definitions" | "components" if depth == 0 => {}
                "patternProperties" | "dependencies" | "additionalItems" => {
                    return Err(non_structural(path, format!("{key} is not allowed")));
                }
                k if DOC_KEYWORDS.contains(&k) => {
                    s.docs.insert(k.to_string(), v.clone());
                }
                k => {
                    s.extra.insert(k.to_string(), v.clone());
                }
            }
        }
        // OpenAPI v3.0 writes exclusiveness as a flag on the bound; v3.1 as a bound of its own.
        if let Some(v) = exclusive_min {
            s.minimum = exclusive(s.minimum, v, path, "exclusiveMinimum", true)?;
        }
        if let Some(v) = exclusive_max {
            s.maximum = exclusive(s.maximum, v, path, "exclusiveMaximum", false)?;
        }

        if s.int_or_string {
            // Kubernetes forbids a type next to int-or-string; read it as int-or-string.
            s.type_ = None;
        }
        if !s.properties.is_empty() && s.additional_properties != AdditionalProperties::Absent {
            return Err(non_structural(
                path,
                "properties and additionalProperties cannot be used together",
            ));
        }
        if !in_junctor && s.type_.is_none() && !s.int_or_string && !s.preserve_unknown_fields {
            return Err(non_structural(
                path,
                "type is missing (only x-kubernetes-int-or-string or x-kubernetes-preserve-unknown-fields nodes may omit it)",
            ));
        }
        Ok(s)
    }
}

fn string(v: &Value, path: &Path, key: &str) -> Result<String, SchemaError> {
    v.as_str()
        .map(str::to_string)
        .ok_or_else(|| invalid(path, key, "expected a string"))
}

/// A list of strings, such as `required` or `x-kubernetes-list-map-keys`.
fn names(v: &Value, path: &Path, key: &str) -> Result<Vec<String>, SchemaError> {
    let expected = || invalid(path, key, "expected a list of names");
    v.as_array()
        .ok_or_else(expected)?
        .iter()
        .map(|n| n.as_str().map(str::to_string).ok_or_else(expected))
        .collect()
}

fn boolean(v: &Value, path: &Path, key: &str) -> Result<bool, SchemaError> {
    v.as_bool()
        .ok_or_else(|| invalid(path, key, "expected true or false"))
}

fn float(v: &Value, path: &Path, key: &str) -> Result<f64, SchemaError> {
    v.as_f64()
        .filter(|x| x.is_finite())
        .ok_or_else(|| invalid(path, key, "expected a number"))
}

fn count(v: &Value, path: &Path, key: &str) -> Result<u64, SchemaError> {
    v.as_u64()
        .ok_or_else(|| invalid(path, key, "expected a non-negative integer"))
}

/// The stricter of a lower bound and `value`.
fn tighter_lower(current: Option<Bound>, value: f64, exclusive: bool) -> Option<Bound> {
    let new = Bound { value, exclusive };
    match current {
        Some(c) if c.value > value || (c.value == value && c.exclusive) => Some(c),
        _ => Some(new),
    }
}

/// The stricter of an upper bound and `value`.
fn tighter_upper(current: Option<Bound>, value: f64, exclusive: bool) -> Option<Bound> {
    let new = Bound { value, exclusive };
    match current {
        Some(c) if c.value < value || (c.value == value && c.exclusive) => Some(c),
        _ => Some(new),
    }
}

/// Applies `exclusiveMinimum`/`exclusiveMaximum`: a flag (OpenAPI v3.0) or a bound (v3.1).
fn exclusive(
    bound: Option<Bound>,
    v: &Value,
    path: &Path,
    key: &str,
    lower: bool,
) -> Result<Option<Bound>, SchemaError> {
    match v {
        Value::Bool(false) => Ok(bound),
        Value::Bool(true) => match bound {
            Some(b) => Ok(Some(Bound {
                exclusive: true,
                ..b
            })),
            None => Err(invalid(
                path,
                key,
                format!("set without {}", if lower { "minimum" } else { "maximum" }),
            )),
        },
        _ => {
            let x = float(v, path, key)?;
            Ok(if lower {
                tighter_lower(bound, x, true)
            } else {
                tighter_upper(bound, x, true)
            })
        }
    }
}
