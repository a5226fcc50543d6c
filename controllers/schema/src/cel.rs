//! What a CEL rule of `x-kubernetes-validations` reads of the object it is attached to.
//!
//! The apiserver compiles every rule against its schema node and refuses a CRD whose rule names
//! a field the node does not have (`undefined field 'percent'`). The least common denominator
//! leaves fields out, so its rules must be checked against it: [`check_rule`] parses a rule with
//! the `cel` crate and follows every field selection from `self` (and `oldSelf`) through the
//! schema — into list items and map values by index and by the variables of macros (`all`,
//! `exists`, `map`, `filter`, …) — and says which selected field the node lacks. A selection it
//! cannot follow (on a value computed by the rule, where a field of the object might still be
//! meant) makes the rule [`RuleCheck::Unanalysable`]: such a rule is dropped and reported, never
//! kept blindly.

use std::collections::BTreeMap;

use cel::common::ast::{EntryExpr, Expr, IdedExpr};

use crate::schema::{AdditionalProperties, Schema};

/// The verdict on one rule against one schema node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleCheck {
    /// Every field the rule selects is in the schema.
    Fits,
    /// The rule selects a field the schema does not have, at this path (relative to the node
    /// the rule is attached to, e.g. `self.spec.percent`).
    MissingField(String),
    /// The rule cannot be parsed, or selects fields of something this check cannot follow.
    Unanalysable(String),
}

/// What an expression is, as far as the schema goes.
#[derive(Clone, Copy)]
enum Resolved<'a> {
    /// A node of the object (the path it was reached by travels next to it).
    Node(&'a Schema),
    /// Part of the object whose fields the schema leaves open (preserved unknown fields, a map
    /// of anything): any selection fits.
    Open,
    /// A value the rule computed (a literal, a function's result, a map key): not the object.
    Value,
}

type Env<'a> = BTreeMap<String, (Resolved<'a>, String)>;

/// Checks `rule` (a CEL expression of `x-kubernetes-validations`, or its `messageExpression`)
/// against `node`, the schema it is attached to.
pub fn check_rule(rule: &str, node: &Schema) -> RuleCheck {
    let ast = match cel::parser::Parser::new().parse(rule) {
        Ok(ast) => ast,
        Err(e) => return RuleCheck::Unanalysable(format!("cannot parse the rule: {e}")),
    };
    let mut env = Env::new();
    for var in ["self", "oldSelf"] {
        env.insert(var.to_string(), (Resolved::Node(node), var.to_string()));
    }
    match resolve(&ast, &env) {
        Ok(_) => RuleCheck::Fits,
        Err(problem) => problem,
    }
}

/// CEL's reserved words, which Kubernetes escapes as `__word__` when a property has that name.
const RESERVED: [&str; 21] = [
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// The property a CEL field name stands for: Kubernetes escapes property names that are CEL
/// reserved words (`__namespace__`) or hold characters CEL names cannot (`__dot__`, `__dash__`,
/// `__slash__`, and `__underscores__` for `__`).
fn unescape(field: &str) -> String {
    if let Some(word) = field
        .strip_prefix("__")
        .and_then(|f| f.strip_suffix("__"))
        .filter(|w| RESERVED.contains(w))
    {
        return word.to_string();
    }
    field
        .replace("__underscores__", "\u{0}")
        .replace("__dot__", ".")
        .replace("__dash__", "-")
        .replace("__slash__", "/")
        .replace('\u{0}', "__")
}

/// The schema node of a list's items or a map's values, reached by indexing or iteration.
fn element<'a>(r: Resolved<'a>) -> Resolved<'a> {
    match r {
        Resolved::Node(s) => match (&s.items, &s.additional_properties) {
            (Some(items), _) => Resolved::Node(items),
            (None, AdditionalProperties::Schema(values)) => Resolved::Node(values),
            (None, AdditionalProperties::Any) => Resolved::Open,
            (None, AdditionalProperties::Absent) if s.preserve_unknown_fields => Resolved::Open,
            // An object indexed by a key (`self['x']`): a field, but which one is not known.
            _ => Resolved::Open,
        },
        other => other,
    }
}

fn resolve<'a>(e: &IdedExpr, env: &Env<'a>) -> Result<(Resolved<'a>, String), RuleCheck> {
    let value = || Ok((Resolved::Value, String::new()));
    match &e.expr {
        Expr::Ident(name) => Ok(env
            .get(name)
            .cloned()
            .unwrap_or((Resolved::Value, name.clone()))),
        Expr::Literal(_) => value(),
        Expr::Select(select) => {
            let (base, path) = resolve(&select.operand, env)?;
            let field = unescape(&select.field);
            let path = format!("{path}.{field}");
            match base {
                Resolved::Node(s) => match s.properties.get(&field) {
                    Some(field) => Ok((Resolved::Node(field), path)),
                    None => match &s.additional_properties {
                        AdditionalProperties::Schema(values) => Ok((Resolved::Node(values), path)),
                        AdditionalProperties::Any => Ok((Resolved::Open, path)),
                        AdditionalProperties::Absent if s.preserve_unknown_fields => {
                            Ok((Resolved::Open, path))
                        }
                        AdditionalProperties::Absent => Err(RuleCheck::MissingField(path)),
                    },
                },
                Resolved::Open => Ok((Resolved::Open, path)),
                Resolved::Value => Err(RuleCheck::Unanalysable(format!(
                    "it selects .{} of a value it computes",
                    select.field
                ))),
            }
        }
        Expr::Call(call) => {
            let target = call
                .target
                .as_deref()
                .map(|t| resolve(t, env))
                .transpose()?;
            let mut args = Vec::with_capacity(call.args.len());
            for a in &call.args {
                args.push(resolve(a, env)?);
            }
            match (call.func_name.as_str(), target, args.as_slice()) {
                // Indexing: a list's items, a map's values.
                ("_[_]" | "_[?_]", None, [(base, path), _]) => {
                    Ok((element(*base), format!("{path}[*]")))
                }
                // `a ? b : c` on two parts of the object: neither is followed further.
                _ => value(),
            }
        }
        Expr::Comprehension(c) => {
            let (range, path) = resolve(&c.iter_range, env)?;
            let mut inner = env.clone();
            let item = element(range);
            match &c.iter_var2 {
                // Two variables: index or key, then the element.
                Some(second) => {
                    inner.insert(c.iter_var.clone(), (Resolved::Value, c.iter_var.clone()));
                    inner.insert(second.clone(), (item, format!("{path}[*]")));
                }
                None => {
                    let is_map = matches!(range, Resolved::Node(s) if s.items.is_none());
                    // Over a map, the variable is its keys: strings.
                    let var = if is_map { Resolved::Value } else { item };
                    inner.insert(c.iter_var.clone(), (var, format!("{path}[*]")));
                }
            }
            inner.insert(c.accu_var.clone(), (Resolved::Value, c.accu_var.clone()));
            for part in [&c.accu_init, &c.loop_cond, &c.loop_step, &c.result] {
                resolve(part, &inner)?;
            }
            value()
        }
        Expr::List(list) => {
            for element in &list.elements {
                resolve(element, env)?;
            }
            value()
        }
        Expr::Map(map) => {
            for entry in &map.entries {
                if let EntryExpr::MapEntry(m) = &entry.expr {
                    resolve(&m.key, env)?;
                    resolve(&m.value, env)?;
                }
            }
            value()
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                if let EntryExpr::StructField(f) = &entry.expr {
                    resolve(&f.value, env)?;
                }
            }
            value()
        }
        Expr::Unspecified => Err(RuleCheck::Unanalysable("an empty expression".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(v: serde_json::Value) -> Schema {
        Schema::from_value_with(&v, &crate::Limits::default()).expect("schema")
    }

    fn mirror() -> Schema {
        schema(json!({"type": "object", "properties": {
            "backendRef": {"type": "object", "properties": {"name": {"type": "string"}}},
            "percent": {"type": "integer"},
            "rules": {"type": "array", "items": {"type": "object", "properties": {
                "matches": {"type": "array", "items": {"type": "object",
                    "properties": {"path": {"type": "string"}}}}}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "namespace": {"type": "string"},
            "my-field": {"type": "integer"}}}))
    }

    #[test]
    fn fields_the_schema_has_fit() {
        for rule in [
            "has(self.percent) ? self.percent <= 100 : true",
            "self.backendRef.name.size() > 0",
            "self.rules.all(r, r.matches.all(m, m.path.startsWith('/')))",
            "self.rules.exists(r, size(r.matches) > 0)",
            "self.labels.all(k, k.startsWith('a'))",
            "self.labels['x'] == 'y'",
            "self.rules[0].matches.size() < 8",
            "self.free.anything.at.all == 1",
            "oldSelf.percent == self.percent",
            "[self.percent, 1].size() == 2",
            "has(self.__namespace__) && self.my__dash__field == 1",
        ] {
            assert_eq!(check_rule(rule, &mirror()), RuleCheck::Fits, "{rule}");
        }
    }

    #[test]
    fn a_field_the_schema_lacks_is_named() {
        for (rule, path) in [
            (
                "!(has(self.percent) && has(self.fraction))",
                "self.fraction",
            ),
            ("self.backendRef.port > 0", "self.backendRef.port"),
            (
                "self.rules.all(r, r.matches.all(m, m.method == 'GET'))",
                "self.rules[*].matches[*].method",
            ),
            ("self.rules[0].filters.size() == 0", "self.rules[*].filters"),
        ] {
            assert_eq!(
                check_rule(rule, &mirror()),
                RuleCheck::MissingField(path.to_string()),
                "{rule}"
            );
        }
    }

    #[test]
    fn what_cannot_be_followed_is_unanalysable() {
        for rule in [
            "(self.percent > 1 ? self.backendRef : self.backendRef).name == 'x'",
            "self.percent +",
        ] {
            assert!(
                matches!(check_rule(rule, &mirror()), RuleCheck::Unanalysable(_)),
                "{rule}"
            );
        }
    }
}
