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
//!
//! The same module decides rule changes for [`compare`](crate::compare): [`same_expression`]
//! (a rule only reformatted) and [`added_rule`] (a new rule that every value the old schema
//! accepts passes, because it reads only fields the old node lacks, behind `has()`); and it
//! evaluates rules on objects for [`check_parsed`](crate::check_parsed): each rule is compiled
//! once per process, run with `self` bound to the node's value typed by its schema, in CEL's
//! standard environment with the strings extension and Kubernetes' lists and regex libraries, and
//! within per-object bounds. What cannot be evaluated (`oldSelf`, a Kubernetes function this
//! module lacks, a run-time error) is undecidable, never a violation.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt,
};
use cel::common::value::Val;
use cel::{Context, Program};
use serde_json::Value;

use crate::schema::{AdditionalProperties, Schema, Type};

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

/// Parses a rule as the apiserver does (standard macros, optional syntax).
fn parse(rule: &str) -> Result<IdedExpr, String> {
    cel::parser::Parser::new()
        .enable_optional_syntax(true)
        .parse(rule)
        .map_err(|e| e.to_string())
}

/// Sets every node id to 0: ids number the nodes in source order, so two ways of writing one
/// expression (whitespace, redundant parentheses) may number them differently.
fn clear_ids(e: &mut IdedExpr) {
    e.id = 0;
    match &mut e.expr {
        Expr::Call(call) => {
            if let Some(target) = call.target.as_deref_mut() {
                clear_ids(target);
            }
            call.args.iter_mut().for_each(clear_ids);
        }
        Expr::Comprehension(c) => {
            let c = &mut **c;
            for part in [
                &mut c.iter_range,
                &mut c.accu_init,
                &mut c.loop_cond,
                &mut c.loop_step,
                &mut c.result,
            ] {
                clear_ids(part);
            }
        }
        Expr::List(list) => list.elements.iter_mut().for_each(clear_ids),
        Expr::Map(map) => {
            for entry in &mut map.entries {
                entry.id = 0;
                match &mut entry.expr {
                    EntryExpr::MapEntry(m) => {
                        clear_ids(&mut m.key);
                        clear_ids(&mut m.value);
                    }
                    EntryExpr::StructField(f) => clear_ids(&mut f.value),
                }
            }
        }
        Expr::Struct(s) => {
            for entry in &mut s.entries {
                entry.id = 0;
                match &mut entry.expr {
                    EntryExpr::MapEntry(m) => {
                        clear_ids(&mut m.key);
                        clear_ids(&mut m.value);
                    }
                    EntryExpr::StructField(f) => clear_ids(&mut f.value),
                }
            }
        }
        Expr::Select(select) => clear_ids(&mut select.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// Whether two rules are the same expression written differently: they parse to the same
/// syntax tree (whitespace, redundant parentheses and the quotes of string literals do not
/// count). A rule that does not parse is only the same as itself, character for character.
pub fn same_expression(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    match (parse(a), parse(b)) {
        (Ok(mut x), Ok(mut y)) => {
            clear_ids(&mut x);
            clear_ids(&mut y);
            x == y
        }
        _ => false,
    }
}

/// Whether a rule added to an existing schema node can reject a value the old schema accepts
/// there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AddedRule {
    /// Every value the old schema accepts at the node passes the rule: evaluated with the fields
    /// the old node lacks unset (the old schema prunes them), the rule is `true`, e.g.
    /// `!has(self.f) || self.f > 0` where `f` is new.
    Holds,
    /// Cannot be shown; why, in words.
    Unknown(String),
}

/// A truth value known without the object, or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Truth {
    True,
    False,
    Unknown,
}

impl Truth {
    fn not(self) -> Self {
        match self {
            Truth::True => Truth::False,
            Truth::False => Truth::True,
            Truth::Unknown => Truth::Unknown,
        }
    }
}

/// Whether a value the old schema accepts at `old` never has `field`: the node is an object
/// whose fields are only its listed properties (anything else is pruned), and `field` is not one
/// of them. At the root and in embedded resources, `apiVersion`, `kind` and `metadata` are always
/// there.
fn lacks(old: &Schema, field: &str, at_root: bool) -> bool {
    old.type_ == Some(crate::schema::Type::Object)
        && !old.int_or_string
        && !old.preserve_unknown_fields
        && matches!(old.additional_properties, AdditionalProperties::Absent)
        && !old.properties.contains_key(field)
        && !((at_root || old.embedded_resource)
            && matches!(field, "apiVersion" | "kind" | "metadata"))
}

/// The value of `e` on every value the old schema accepts at `old`, as far as it is known: CEL's
/// `&&`, `||` and `!` (which absorb an error on one side when the other decides), `? :`, `==`
/// and `!=` of known truths, boolean literals, and `has(self.f)` for a field `f` the old node
/// lacks, which is `false` there. Anything else is unknown.
fn truth(e: &IdedExpr, old: &Schema, at_root: bool) -> Truth {
    use cel::common::ast::{LiteralValue, operators};
    match &e.expr {
        Expr::Literal(LiteralValue::Boolean(b)) => {
            if *b.inner() {
                Truth::True
            } else {
                Truth::False
            }
        }
        Expr::Select(select) if select.test => match &select.operand.expr {
            Expr::Ident(name)
                if name == "self" && lacks(old, &unescape(&select.field), at_root) =>
            {
                Truth::False
            }
            _ => Truth::Unknown,
        },
        Expr::Call(call) if call.target.is_none() => {
            let t = |i: usize| truth(&call.args[i], old, at_root);
            match (call.func_name.as_str(), call.args.len()) {
                (operators::LOGICAL_NOT, 1) => t(0).not(),
                (operators::LOGICAL_OR, 2) => match (t(0), t(1)) {
                    (Truth::True, _) | (_, Truth::True) => Truth::True,
                    (Truth::False, Truth::False) => Truth::False,
                    _ => Truth::Unknown,
                },
                (operators::LOGICAL_AND, 2) => match (t(0), t(1)) {
                    (Truth::False, _) | (_, Truth::False) => Truth::False,
                    (Truth::True, Truth::True) => Truth::True,
                    _ => Truth::Unknown,
                },
                (operators::CONDITIONAL, 3) => match t(0) {
                    Truth::True => t(1),
                    Truth::False => t(2),
                    Truth::Unknown => Truth::Unknown,
                },
                (operators::EQUALS | operators::NOT_EQUALS, 2) => match (t(0), t(1)) {
                    (Truth::Unknown, _) | (_, Truth::Unknown) => Truth::Unknown,
                    (a, b) if (a == b) == (call.func_name == operators::EQUALS) => Truth::True,
                    _ => Truth::False,
                },
                _ => Truth::Unknown,
            }
        }
        _ => Truth::Unknown,
    }
}

/// The fields of `self` an expression selects or tests directly (`self.f`, `has(self.f)`), and
/// whether it names `oldSelf`.
fn self_fields(e: &IdedExpr, fields: &mut Vec<String>, old_self: &mut bool) {
    match &e.expr {
        Expr::Ident(name) => *old_self |= name == "oldSelf",
        Expr::Select(select) => {
            if let Expr::Ident(name) = &select.operand.expr
                && name == "self"
            {
                let field = unescape(&select.field);
                if !fields.contains(&field) {
                    fields.push(field);
                }
            }
            self_fields(&select.operand, fields, old_self);
        }
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                self_fields(target, fields, old_self);
            }
            for a in &call.args {
                self_fields(a, fields, old_self);
            }
        }
        Expr::Comprehension(c) => {
            for part in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                self_fields(part, fields, old_self);
            }
        }
        Expr::List(list) => {
            for x in &list.elements {
                self_fields(x, fields, old_self);
            }
        }
        Expr::Map(map) => {
            for entry in &map.entries {
                if let EntryExpr::MapEntry(m) = &entry.expr {
                    self_fields(&m.key, fields, old_self);
                    self_fields(&m.value, fields, old_self);
                }
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                if let EntryExpr::StructField(f) = &entry.expr {
                    self_fields(&f.value, fields, old_self);
                }
            }
        }
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// Decides a rule added to an existing node, `old` being that node in the old schema (`at_root`
/// for the root of an object): see [`AddedRule`]. Sound, not complete: a rule the analysis
/// cannot follow is [`AddedRule::Unknown`], with the field it reads that the old schema already
/// has, or why it cannot be shown.
pub fn added_rule(rule: &str, old: &Schema, at_root: bool) -> AddedRule {
    let ast = match parse(rule) {
        Ok(ast) => ast,
        Err(e) => return AddedRule::Unknown(format!("it cannot be analysed: {e}")),
    };
    if truth(&ast, old, at_root) == Truth::True {
        return AddedRule::Holds;
    }
    let (mut fields, mut old_self) = (Vec::new(), false);
    self_fields(&ast, &mut fields, &mut old_self);
    if old_self {
        return AddedRule::Unknown(
            "it is a transition rule (it reads oldSelf): updates of objects stored under the old schema may fail it"
                .into(),
        );
    }
    let (new, had): (Vec<String>, Vec<String>) = fields
        .into_iter()
        .map(|f| format!("self.{f}"))
        .partition(|f| lacks(old, &f["self.".len()..], at_root));
    if !had.is_empty() {
        AddedRule::Unknown(format!(
            "it reads {}, which the old schema already has: objects valid under it may fail the rule",
            had.join(", ")
        ))
    } else if !new.is_empty() {
        AddedRule::Unknown(format!(
            "it reads {}, which the old schema lacks, but not only behind has(): cannot show that objects without it pass",
            new.join(", ")
        ))
    } else {
        AddedRule::Unknown(
            "it reads the value itself (self), which the old schema accepts: cannot decide whether stored values pass it"
                .into(),
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Evaluation.

/// At most this many rule evaluations per object; beyond, rules are undecidable.
pub(crate) const MAX_EVALUATIONS: usize = 5_000;
/// The most estimated work of one rule evaluation (see [`Compiled::cost`]): one comprehension
/// over a few thousand values, two nested ones over a couple of hundred.
const MAX_RULE_COST: u64 = 10_000_000;
/// The most estimated work of all rule evaluations of one object.
const MAX_OBJECT_COST: u64 = 100_000_000;
/// At most this many compiled rules are kept; the cache starts over when it is full.
const MAX_CACHED_PROGRAMS: usize = 10_000;
/// At most this many compiled regular expressions are kept per thread.
const MAX_CACHED_REGEXES: usize = 1_000;

/// A rule compiled once for every object and node it is evaluated on.
struct Compiled {
    program: Result<Program, String>,
    /// It names `oldSelf`: a transition rule.
    transition: bool,
    /// How deeply its comprehensions (`all`, `exists`, `map`, `filter`, ...) nest.
    nesting: u32,
}

impl Compiled {
    /// An upper estimate of the work of one evaluation on a value of `size` JSON nodes: every
    /// comprehension level may walk the whole value, and so may one operation (`==`, `in`, a
    /// list function) at the innermost level.
    fn cost(&self, size: u64) -> u64 {
        size.max(1).saturating_pow(self.nesting + 1)
    }
}

fn nesting(e: &IdedExpr) -> u32 {
    let max = |es: &mut dyn Iterator<Item = &IdedExpr>| es.map(nesting).max().unwrap_or(0);
    match &e.expr {
        Expr::Comprehension(c) => {
            let body = max(&mut [&c.loop_cond, &c.loop_step, &c.result].into_iter());
            let outer = max(&mut [&c.iter_range, &c.accu_init].into_iter());
            outer.max(body + 1)
        }
        Expr::Call(call) => max(&mut call.target.as_deref().into_iter().chain(&call.args)),
        Expr::Select(select) => nesting(&select.operand),
        Expr::List(list) => max(&mut list.elements.iter()),
        Expr::Map(map) => map
            .entries
            .iter()
            .map(|entry| match &entry.expr {
                EntryExpr::MapEntry(m) => nesting(&m.key).max(nesting(&m.value)),
                EntryExpr::StructField(f) => nesting(&f.value),
            })
            .max()
            .unwrap_or(0),
        Expr::Struct(s) => s
            .entries
            .iter()
            .map(|entry| match &entry.expr {
                EntryExpr::MapEntry(m) => nesting(&m.key).max(nesting(&m.value)),
                EntryExpr::StructField(f) => nesting(&f.value),
            })
            .max()
            .unwrap_or(0),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => 0,
    }
}

/// The environment rules are compiled and evaluated in: CEL's standard library, the strings
/// extension (`lowerAscii`, `upperAscii`, `split`, `join`, `replace`, `substring`, `trim`,
/// `indexOf`, `lastIndexOf`, `charAt`, ...), and of Kubernetes' own libraries the lists library
/// (`isSorted`, `sum`, `min`, `max`, `indexOf`, `lastIndexOf` on lists) and the regex library
/// (`matches`, `find`, `findAll`). Any other function (`quantity`, `url`, `isURL`, `ip`, `cidr`,
/// `format.*`, `semver`, `duration`, `timestamp`, `sets.*`, ...) is an undeclared reference when
/// evaluated: the rule is undecidable.
fn env() -> &'static Arc<cel::Env> {
    static ENV: OnceLock<Arc<cel::Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = cel::Env::stdlib();
        // Only fails if a function is declared twice, which the tests would show.
        let _ = env.add_extension(cel::extensions::strings);
        let _ = env.add_extension(kubernetes::lists);
        let _ = env.add_extension(kubernetes::regex);
        Arc::new(env)
    })
}

/// The compiled form of `rule`, compiled at most once (per process, while the cache holds it):
/// the splitter checks many objects against one member's schema.
fn compiled(rule: &str) -> Arc<Compiled> {
    static PROGRAMS: OnceLock<Mutex<HashMap<String, Arc<Compiled>>>> = OnceLock::new();
    let programs = PROGRAMS.get_or_init(Mutex::default);
    if let Some(c) = programs.lock().ok().and_then(|p| p.get(rule).cloned()) {
        return c;
    }
    let program = env().compile(rule).map_err(|e| e.to_string());
    let (transition, depth) = match &program {
        Ok(p) => (
            p.references().has_variable("oldSelf"),
            nesting(p.expression()),
        ),
        Err(_) => (false, 0),
    };
    let c = Arc::new(Compiled {
        program,
        transition,
        nesting: depth,
    });
    if let Ok(mut p) = programs.lock() {
        if p.len() >= MAX_CACHED_PROGRAMS {
            p.clear();
        }
        p.insert(rule.to_string(), Arc::clone(&c));
    }
    c
}

/// What one rule says of one value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Outcome {
    Holds,
    /// The rule is false: its message (the evaluated `messageExpression`, else `message`, else
    /// `failed rule: <rule>` as the apiserver says) and its `fieldPath`, if any.
    Violated {
        message: String,
        field_path: Option<String>,
    },
    /// It cannot be decided here; why.
    Undecidable(String),
}

/// Evaluates the rules of many nodes of one object, within the per-object bounds.
#[derive(Default)]
pub(crate) struct Evaluator {
    evaluations: usize,
    cost: u64,
}

impl Evaluator {
    /// Evaluates `rules` (a node's `x-kubernetes-validations`) with `self` bound to `value`, the
    /// object's value at a node whose schema is `schema` (`at_root` for the object itself).
    /// Returns one outcome per rule, in order; nothing for a `null` the schema prunes.
    pub(crate) fn evaluate<'v>(
        &mut self,
        rules: &[Value],
        value: &'v Value,
        schema: &'v Schema,
        at_root: bool,
    ) -> Vec<Outcome> {
        let mut conv = Converter::default();
        let Some(this) = conv.value(value, schema, at_root) else {
            return Vec::new();
        };
        let mut ctx = Context::with_env(Arc::clone(env()));
        ctx.add_variable_as_val("self", this);
        rules
            .iter()
            .map(|entry| self.rule(entry, &ctx, &conv))
            .collect()
    }

    fn rule(&mut self, entry: &Value, ctx: &Context, conv: &Converter) -> Outcome {
        let Some(rule) = entry.get("rule").and_then(Value::as_str) else {
            return Outcome::Undecidable("the validation has no rule".into());
        };
        let c = compiled(rule);
        let program = match &c.program {
            Ok(p) => p,
            Err(e) => {
                return Outcome::Undecidable(format!("rule {rule:?} does not compile here: {e}"));
            }
        };
        if c.transition {
            return Outcome::Undecidable(format!(
                "rule {rule:?} is a transition rule (it reads oldSelf): it needs the stored object"
            ));
        }
        self.evaluations += 1;
        let cost = c.cost(conv.size);
        if self.evaluations > MAX_EVALUATIONS
            || cost > MAX_RULE_COST
            || self.cost.saturating_add(cost) > MAX_OBJECT_COST
        {
            return Outcome::Undecidable(format!(
                "rule {rule:?} is not evaluated: the object is too large for its rules to be checked here"
            ));
        }
        self.cost += cost;
        match program.execute(ctx) {
            Ok(cel::Value::Bool(true)) => Outcome::Holds,
            Ok(cel::Value::Bool(false)) if !conv.formats.is_empty() => {
                let formats: Vec<&str> = conv.formats.iter().map(String::as_str).collect();
                Outcome::Undecidable(format!(
                    "rule {rule:?} is false, but the value holds strings of format {} that the apiserver types and this check reads as strings",
                    formats.join(", ")
                ))
            }
            Ok(cel::Value::Bool(false)) => Outcome::Violated {
                message: self.message(entry, rule, ctx),
                field_path: entry
                    .get("fieldPath")
                    .and_then(Value::as_str)
                    .filter(|p| !p.is_empty())
                    .map(str::to_string),
            },
            Ok(other) => Outcome::Undecidable(format!(
                "rule {rule:?} evaluates to {:?}, not to a boolean",
                other.type_of()
            )),
            Err(cel::ExecutionError::UndeclaredReference(name)) => Outcome::Undecidable(format!(
                "rule {rule:?} cannot be evaluated here: it uses {name}, which this check does not implement"
            )),
            Err(e) => Outcome::Undecidable(format!("rule {rule:?} cannot be evaluated here: {e}")),
        }
    }

    /// The message of a violated rule, as the apiserver writes it.
    fn message(&mut self, entry: &Value, rule: &str, ctx: &Context) -> String {
        if let Some(expression) = entry.get("messageExpression").and_then(Value::as_str) {
            let c = compiled(expression);
            if let (Ok(p), false) = (&c.program, c.transition) {
                self.evaluations += 1;
                if let Ok(cel::Value::String(s)) = p.execute(ctx)
                    && !s.trim().is_empty()
                {
                    return s.to_string();
                }
            }
        }
        match entry.get("message").and_then(Value::as_str) {
            Some(m) if !m.is_empty() => m.to_string(),
            _ => format!("failed rule: {rule}"),
        }
    }
}

/// CEL's name for a property, as Kubernetes escapes it; `None` for a name CEL cannot spell
/// (the property is not accessible from a rule).
fn escape(name: &str) -> Option<String> {
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let escaped = name
        .replace("__", "__underscores__")
        .replace('.', "__dot__")
        .replace('-', "__dash__")
        .replace('/', "__slash__");
    let mut chars = escaped.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then_some(escaped)
}

/// Builds the CEL value of a JSON value as the apiserver types it by its schema: `integer` →
/// int, `number` → double (even when written `3`), `string` → string, int-or-string and
/// schemaless values by their JSON type; objects with properties are reached by (escaped)
/// property name and get their properties' defaults, as the apiserver defaults before it
/// validates; unknown fields are pruned unless preserved; a `null` is kept only where nullable.
#[derive(Default)]
struct Converter {
    /// JSON nodes converted: the size for the cost estimate.
    size: u64,
    /// String formats the apiserver gives their own CEL type (timestamp, duration, bytes) that
    /// were met and converted as plain strings.
    formats: BTreeSet<String>,
}

type Boxed<'v> = Box<dyn Val + 'v>;

impl Converter {
    fn value<'v>(&mut self, v: &'v Value, s: &'v Schema, embedded: bool) -> Option<Boxed<'v>> {
        self.size += 1;
        if v.is_null() {
            return s.nullable.then(|| Box::new(CelNull) as Boxed<'v>);
        }
        let converted: Boxed<'v> = match (s.type_, v) {
            _ if s.int_or_string => self.plain(v),
            (Some(Type::Integer), Value::Number(n)) => match n.as_i64() {
                Some(i) => Box::new(CelInt::from(i)),
                None => match n.as_f64() {
                    Some(f) if f.fract() == 0.0 && f.abs() < 9.2e18 => {
                        Box::new(CelInt::from(f as i64))
                    }
                    _ => self.plain(v),
                },
            },
            (Some(Type::Number), Value::Number(n)) => {
                Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN)))
            }
            (Some(Type::String), Value::String(text)) => {
                if let Some(f) = s.format.as_deref()
                    && matches!(f, "date" | "date-time" | "datetime" | "duration" | "byte")
                {
                    self.formats.insert(f.to_string());
                }
                Box::new(CelString::from(text.as_str()))
            }
            (Some(Type::Array), Value::Array(items)) => {
                let list: Vec<Boxed<'v>> = items
                    .iter()
                    .map(|item| match &s.items {
                        Some(item_schema) => self
                            .value(item, item_schema, item_schema.embedded_resource)
                            .unwrap_or_else(|| Box::new(CelNull)),
                        None => {
                            self.size += 1;
                            self.plain(item)
                        }
                    })
                    .collect();
                Box::new(CelList::from(list))
            }
            (Some(Type::Object) | None, Value::Object(map)) => self.object(map, s, embedded),
            _ => self.plain(v),
        };
        Some(converted)
    }

    fn object<'v>(
        &mut self,
        map: &'v serde_json::Map<String, Value>,
        s: &'v Schema,
        embedded: bool,
    ) -> Boxed<'v> {
        let mut out: HashMap<CelMapKey<'v>, Boxed<'v>> = HashMap::new();
        match &s.additional_properties {
            AdditionalProperties::Schema(values) if s.properties.is_empty() => {
                for (k, v) in map {
                    if let Some(c) = self.value(v, values, values.embedded_resource) {
                        out.insert(CelMapKey::from(k.as_str()), c);
                    }
                }
                return Box::new(CelMap::from(out));
            }
            AdditionalProperties::Any if s.properties.is_empty() => {
                for (k, v) in map {
                    self.size += 1;
                    out.insert(CelMapKey::from(k.as_str()), self.plain(v));
                }
                return Box::new(CelMap::from(out));
            }
            _ => {}
        }
        if s.properties.is_empty() && s.preserve_unknown_fields {
            // Schemaless: fields by their own names.
            return self.plain_map(map);
        }
        for (name, child) in &s.properties {
            let Some(key) = escape(name) else { continue };
            let value = map
                .get(name)
                .and_then(|v| self.value(v, child, child.embedded_resource))
                .or_else(|| {
                    child
                        .default
                        .as_ref()
                        .and_then(|d| self.value(d, child, child.embedded_resource))
                });
            if let Some(value) = value {
                out.insert(CelMapKey::from(key), value);
            }
        }
        for (k, v) in map {
            if s.properties.contains_key(k) {
                continue;
            }
            let implicit = embedded && matches!(k.as_str(), "apiVersion" | "kind");
            if implicit && v.is_string() || s.preserve_unknown_fields {
                self.size += 1;
                out.insert(CelMapKey::from(k.as_str()), self.plain(v));
            } else if embedded && k == "metadata" {
                // Of an object's metadata, rules see only the name and generateName.
                let mut meta: HashMap<CelMapKey<'v>, Boxed<'v>> = HashMap::new();
                for field in ["name", "generateName"] {
                    if let Some(Value::String(text)) = v.get(field) {
                        meta.insert(
                            CelMapKey::from(field),
                            Box::new(CelString::from(text.as_str())),
                        );
                    }
                }
                out.insert(CelMapKey::from("metadata"), Box::new(CelMap::from(meta)));
            }
        }
        Box::new(CelMap::from(out))
    }

    /// A value by its JSON type alone (int-or-string, preserved unknown fields, a value of the
    /// wrong type).
    fn plain<'v>(&mut self, v: &'v Value) -> Boxed<'v> {
        match v {
            Value::Null => Box::new(CelNull),
            Value::Bool(b) => Box::new(CelBool::from(*b)),
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => Box::new(CelInt::from(i)),
                (None, Some(u)) => Box::new(CelUInt::from(u)),
                _ => Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN))),
            },
            Value::String(text) => Box::new(CelString::from(text.as_str())),
            Value::Array(items) => {
                let list: Vec<Boxed<'v>> = items
                    .iter()
                    .map(|item| {
                        self.size += 1;
                        self.plain(item)
                    })
                    .collect();
                Box::new(CelList::from(list))
            }
            Value::Object(map) => self.plain_map(map),
        }
    }

    fn plain_map<'v>(&mut self, map: &'v serde_json::Map<String, Value>) -> Boxed<'v> {
        let mut out: HashMap<CelMapKey<'v>, Boxed<'v>> = HashMap::new();
        for (k, item) in map {
            self.size += 1;
            out.insert(CelMapKey::from(k.as_str()), self.plain(item));
        }
        Box::new(CelMap::from(out))
    }
}

/// The Kubernetes CEL libraries implemented here (lists and regex), as `cel` overloads.
mod kubernetes {
    use std::cell::RefCell;
    use std::cmp::Ordering;
    use std::collections::HashMap;
    use std::sync::Arc;

    use cel::common::types::{DYN_TYPE, INT_TYPE, LIST_TYPE, STRING_TYPE};
    use cel::common::value::{CowVal, Val};
    use cel::{DeclarationError, Env, ExecutionError, Value};
    use regex::{Regex, RegexBuilder};

    type Args<'b, 'v> = Vec<CowVal<'b, 'v>>;
    type Ret<'b, 'v> = Result<CowVal<'b, 'v>, ExecutionError>;

    /// `isSorted`, `sum`, `min`, `max`, `indexOf` and `lastIndexOf` on lists.
    pub(super) fn lists(env: &mut Env) -> Result<(), DeclarationError> {
        // Each overload on its own: one that `cel` declares already does not keep the others
        // out (as `matches` would be if another crate enabled `cel`'s `regex` feature).
        let _ = env.add_member_overload("isSorted", "list_isSorted", LIST_TYPE, vec![], is_sorted);
        let _ = env.add_member_overload("sum", "list_sum", LIST_TYPE, vec![], sum);
        let _ = env.add_member_overload("min", "list_min", LIST_TYPE, vec![], min);
        let _ = env.add_member_overload("max", "list_max", LIST_TYPE, vec![], max);
        let _ = env.add_member_overload(
            "indexOf",
            "list_indexOf",
            LIST_TYPE,
            vec![DYN_TYPE],
            index_of,
        );
        let _ = env.add_member_overload(
            "lastIndexOf",
            "list_lastIndexOf",
            LIST_TYPE,
            vec![DYN_TYPE],
            last_index_of,
        );
        Ok(())
    }

    /// `matches` (RE2 syntax, as Rust's `regex` reads it), `find` and `findAll`.
    pub(super) fn regex(env: &mut Env) -> Result<(), DeclarationError> {
        // Each overload on its own, as in `lists`.
        let _ = env.add_overload(
            "matches",
            "matches_string_string",
            vec![STRING_TYPE, STRING_TYPE],
            matches,
        );
        let _ = env.add_member_overload(
            "matches",
            "string_matches_string",
            STRING_TYPE,
            vec![STRING_TYPE],
            matches,
        );
        let _ = env.add_member_overload(
            "find",
            "string_find_string",
            STRING_TYPE,
            vec![STRING_TYPE],
            find,
        );
        let _ = env.add_member_overload(
            "findAll",
            "string_findAll_string",
            STRING_TYPE,
            vec![STRING_TYPE],
            find_all,
        );
        let _ = env.add_member_overload(
            "findAll",
            "string_findAll_string_int",
            STRING_TYPE,
            vec![STRING_TYPE, INT_TYPE],
            find_all,
        );
        Ok(())
    }

    fn error(function: &str, message: impl ToString) -> ExecutionError {
        ExecutionError::function_error(function, message)
    }

    fn owned<'b, 'v>(value: Value) -> Ret<'b, 'v> {
        let boxed: Box<dyn Val> = value.try_into()?;
        Ok(CowVal::Owned(boxed))
    }

    fn list(function: &str, args: &Args) -> Result<Arc<Vec<Value>>, ExecutionError> {
        let receiver = args
            .first()
            .ok_or_else(ExecutionError::missing_argument_or_target)?;
        match Value::try_from(receiver.as_ref())? {
            Value::List(items) => Ok(items),
            other => Err(error(
                function,
                format!("not a list: {:?}", other.type_of()),
            )),
        }
    }

    fn text(function: &str, arg: Option<&CowVal>) -> Result<Arc<String>, ExecutionError> {
        match arg.map(|a| Value::try_from(a.as_ref())).transpose()? {
            Some(Value::String(s)) => Ok(s),
            _ => Err(error(function, "expected a string")),
        }
    }

    /// CEL's order of two values of one kind (numbers of any kind compare by value).
    fn order(function: &str, a: &Value, b: &Value) -> Result<Ordering, ExecutionError> {
        let number = |v: &Value| match v {
            Value::Int(i) => Some(*i as f64),
            Value::UInt(u) => Some(*u as f64),
            Value::Float(f) => Some(*f),
            _ => None,
        };
        let ordering = match (a, b) {
            (Value::Int(x), Value::Int(y)) => Some(x.cmp(y)),
            (Value::UInt(x), Value::UInt(y)) => Some(x.cmp(y)),
            (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
            (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
            (Value::Bytes(x), Value::Bytes(y)) => Some(x.cmp(y)),
            _ => match (number(a), number(b)) {
                (Some(x), Some(y)) => x.partial_cmp(&y),
                _ => None,
            },
        };
        ordering.ok_or_else(|| {
            error(
                function,
                format!("cannot compare {:?} with {:?}", a.type_of(), b.type_of()),
            )
        })
    }

    fn is_sorted<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
        let items = list("isSorted", &args)?;
        for pair in items.windows(2) {
            if order("isSorted", &pair[0], &pair[1])? == Ordering::Greater {
                return owned(Value::Bool(false));
            }
        }
        owned(Value::Bool(true))
    }

    fn sum<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
        let items = list("sum", &args)?;
        let mut total = match items.first() {
            None | Some(Value::Int(_)) => Value::Int(0),
            Some(Value::UInt(_)) => Value::UInt(0),
            Some(Value::Float(_)) => Value::Float(0.0),
            Some(other) => return Err(error("sum", format!("cannot sum {:?}", other.type_of()))),
        };
        for item in items.iter() {
            total = match (&total, item) {
                (Value::Int(a), Value::Int(b)) => Value::Int(
                    a.checked_add(*b)
                        .ok_or_else(|| error("sum", "integer overflow"))?,
                ),
                (Value::UInt(a), Value::UInt(b)) => Value::UInt(
                    a.checked_add(*b)
                        .ok_or_else(|| error("sum", "integer overflow"))?,
                ),
                (Value::Float(a), Value::Float(b)) => Value::Float(a + b),
                _ => return Err(error("sum", "the list mixes types")),
            };
        }
        owned(total)
    }

    fn extreme<'b, 'v>(function: &str, args: Args<'b, 'v>, keep: Ordering) -> Ret<'b, 'v> {
        let items = list(function, &args)?;
        let mut best = items
            .first()
            .ok_or_else(|| error(function, "the list is empty"))?;
        for item in items.iter().skip(1) {
            if order(function, item, best)? == keep {
                best = item;
            }
        }
        owned(best.clone())
    }

    fn min<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
        extreme("min", args, Ordering::Less)
    }

    fn max<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
        extreme("max", args, Ordering::Greater)
    }

    fn position<'b, 'v>(function: &str, args: Args<'b, 'v>, last: bool) -> Ret<'b, 'v> {
        let items = list(function, &args)?;
        let needle = args
            .get(1)
            .ok_or_else(ExecutionError::missing_argument_or_target)?;
        let needle = Value::try_from(needle.as_ref())?;
        let equal = |item: &Value| {
            item == &needle || order(function, item, &needle).is_ok_and(|o| o == Ordering::Equal)
        };
        let found = if last {
            items.iter().rposition(equal)
        } else {
            items.iter().position(equal)
        };
        owned(Value::Int(found.map_or(-1, |i| i as i64)))
    }

    fn index_of<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
        position("indexOf", args, false)
    }

    fn last_index_of<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
        position("lastIndexOf", args, true)
    }

    thread_local! {
        static REGEXES: RefCell<HashMap<String, Result<Regex, String>>> = RefCell::new(HashMap::new());
    }

    /// `f` applied to `pattern` compiled, once per thread while the cache holds it (a `Regex`
    /// is not cloned: a clone would build its own match cache).
    fn with_regex<T>(
        function: &str,
        pattern: &str,
        f: impl FnOnce(&Regex) -> T,
    ) -> Result<T, ExecutionError> {
        REGEXES.with(|cache| {
            let mut cache = cache.borrow_mut();
            if !cache.contains_key(pattern) {
                if cache.len() >= super::MAX_CACHED_REGEXES {
                    cache.clear();
                }
                let compiled = RegexBuilder::new(pattern)
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|e| e.to_string());
                cache.insert(pattern.to_string(), compiled);
            }
            match cache.get(pattern) {
                Some(Ok(regex)) => Ok(f(regex)),
                Some(Err(e)) => Err(error(
                    function,
                    format!("{pattern:?} is not a valid regex: {e}"),
                )),
                None => Err(error(function, "regex cache")),
            }
        })
    }

    fn matches<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
        let (s, pattern) = (
            text("matches", args.first())?,
            text("matches", args.get(1))?,
        );
        owned(Value::Bool(with_regex("matches", &pattern, |r| {
            r.is_match(&s)
        })?))
    }

    fn find<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
        let (s, pattern) = (text("find", args.first())?, text("find", args.get(1))?);
        let found = with_regex("find", &pattern, |r| {
            r.find(&s).map_or(String::new(), |m| m.as_str().to_string())
        })?;
        owned(Value::String(Arc::new(found)))
    }

    fn find_all<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
        let (s, pattern) = (
            text("findAll", args.first())?,
            text("findAll", args.get(1))?,
        );
        let limit = match args
            .get(2)
            .map(|a| Value::try_from(a.as_ref()))
            .transpose()?
        {
            Some(Value::Int(n)) if n >= 0 => n as usize,
            Some(Value::Int(_)) | None => usize::MAX,
            Some(_) => return Err(error("findAll", "the limit must be an int")),
        };
        let found: Vec<Value> = with_regex("findAll", &pattern, |r| {
            r.find_iter(&s)
                .take(limit)
                .map(|m| Value::String(Arc::new(m.as_str().to_string())))
                .collect()
        })?;
        owned(Value::List(Arc::new(found)))
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

    #[test]
    fn formatting_is_not_a_change() {
        for (a, b) in [
            ("self >= 0", "(self>=0)"),
            ("self.a == 'x' && self.b", "(self.a == \"x\") &&\n  self.b"),
            (
                "self.rules.all(r, r.matches.size() > 0)",
                "self.rules.all(r, (r.matches.size() > 0))",
            ),
            ("has(self.a) ? self.a : 0", "(has(self.a)) ? (self.a) : 0"),
        ] {
            assert!(same_expression(a, b), "{a} vs {b}");
        }
        for (a, b) in [
            ("self >= 0", "self >= 1"),
            ("self.a && self.b", "self.b && self.a"),
            ("self.a +", "self.a  +"),
        ] {
            assert!(!same_expression(a, b), "{a} vs {b}");
        }
    }

    fn old_node() -> Schema {
        schema(json!({"type": "object", "properties": {
            "size": {"type": "integer"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}}}}))
    }

    #[test]
    fn an_added_rule_on_fields_the_old_node_lacks_holds_when_guarded() {
        for rule in [
            "!has(self.max) || self.max >= 1",
            "!has(self.max) || self.max >= self.size",
            "has(self.max) ? self.max >= 1 : true",
            "!(has(self.min) && has(self.max)) || self.min <= self.max",
            "!has(self.min) || !has(self.max) || self.min <= self.max",
            "has(self.max) == false || self.max > 0",
            "has(self.__namespace__) ? self.__namespace__ != '' : true",
            "  !has( self.max )||(self.max>0)",
        ] {
            assert_eq!(
                added_rule(rule, &old_node(), false),
                AddedRule::Holds,
                "{rule}"
            );
        }
    }

    #[test]
    fn an_added_rule_that_may_reject_old_objects_is_unknown_and_says_why() {
        let why = |rule: &str| match added_rule(rule, &old_node(), false) {
            AddedRule::Unknown(why) => why,
            AddedRule::Holds => panic!("{rule} cannot be shown to hold"),
        };
        assert!(why("self.size <= 50").contains("self.size, which the old schema already has"));
        assert!(why("!has(self.size) || self.size > 0").contains("self.size"));
        assert!(why("self.max >= 1").contains("self.max, which the old schema lacks"));
        assert!(why("has(self.max) || self.max > 0").contains("not only behind has()"));
        assert!(why("self.all(k, k != 'x')").contains("the value itself"));
        // Guarded by a new field, even a transition rule holds on old objects.
        assert_eq!(
            added_rule(
                "!has(self.max) || self.max == oldSelf.max",
                &old_node(),
                false
            ),
            AddedRule::Holds
        );
        assert!(why("self == oldSelf").contains("transition rule"));
        assert!(why("self.size +").contains("cannot be analysed"));
        // A field of a map or of preserved unknown fields may be set under the old schema.
        let labels = schema(json!({"type": "object", "additionalProperties": {"type": "string"}}));
        assert!(matches!(
            added_rule("!has(self.x) || self.x == 'y'", &labels, false),
            AddedRule::Unknown(_)
        ));
        // apiVersion, kind and metadata are always there at the root.
        assert!(matches!(
            added_rule("!has(self.kind) || self.kind == 'X'", &old_node(), true),
            AddedRule::Unknown(_)
        ));
        assert_eq!(
            added_rule("!has(self.kind) || self.kind == 'X'", &old_node(), false),
            AddedRule::Holds
        );
    }

    /// Evaluates one rule on `value` at a node of schema `node`.
    fn eval(rule: &str, value: Value, node: Value) -> Outcome {
        let node = schema(node);
        let mut e = Evaluator::default();
        let mut out = e.evaluate(&[json!({"rule": rule})], &value, &node, false);
        assert_eq!(out.len(), 1);
        out.remove(0)
    }

    fn holds(rule: &str, value: Value, node: Value) {
        assert_eq!(eval(rule, value, node), Outcome::Holds, "{rule}");
    }

    #[test]
    fn values_are_typed_by_the_schema() {
        let node = json!({"type": "object", "properties": {
            "ratio": {"type": "number"}, "count": {"type": "integer"},
            "port": {"x-kubernetes-int-or-string": true},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "my-field": {"type": "string"}, "namespace": {"type": "string"},
            "mode": {"type": "string", "default": "Fast"},
            "note": {"type": "string", "nullable": true},
            "gone": {"type": "string"}}});
        let value = json!({"ratio": 1, "count": 2, "port": "http", "free": {"a": [1, 2.5]},
                           "my-field": "x", "namespace": "ns", "note": null, "gone": null,
                           "unknown": 1});
        for rule in [
            "self.ratio + 0.5 == 1.5",
            "self.count + 1 == 3",
            "self.port == 'http'",
            "self.free.a[0] + 1 == 2 && self.free.a[1] == 2.5",
            "self.my__dash__field == 'x' && self.__namespace__ == 'ns'",
            "self.mode == 'Fast'",
            "has(self.note) && self.note == null",
            "!has(self.gone) && !has(self.unknown)",
        ] {
            holds(rule, value.clone(), node.clone());
        }
    }

    #[test]
    fn kubernetes_library_functions_that_are_supported() {
        let node = json!({"type": "object", "properties": {
            "name": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "nums": {"type": "array", "items": {"type": "integer"}}}});
        let value = json!({"name": "Web-1", "tags": ["a", "b"], "nums": [1, 2, 2]});
        for rule in [
            "self.name.lowerAscii() == 'web-1' && self.name.upperAscii() == 'WEB-1'",
            "self.name.split('-') == ['Web', '1'] && self.tags.join(',') == 'a,b'",
            "self.name.indexOf('-') == 3 && self.name.substring(4) == '1'",
            "self.tags.isSorted() && !['b', 'a'].isSorted()",
            "self.nums.sum() == 5 && self.nums.min() == 1 && self.nums.max() == 2",
            "self.nums.indexOf(2) == 1 && self.nums.lastIndexOf(2) == 2 && self.nums.indexOf(7) == -1",
            "[1.5, 2.5].sum() == 4.0 && [].sum() == 0",
            "self.name.matches('^[A-Za-z]+-[0-9]$') && matches(self.name, 'W')",
            "self.name.find('[0-9]+') == '1' && 'a1b22'.findAll('[0-9]+') == ['1', '22']",
            "'a1b22c333'.findAll('[0-9]+', 2) == ['1', '22']",
            "self.tags.all(t, t.size() == 1) && self.nums.exists(n, n == 2)",
        ] {
            holds(rule, value.clone(), node.clone());
        }
    }

    #[test]
    fn what_cannot_be_evaluated_is_undecidable() {
        let node = json!({"type": "object", "properties": {
            "q": {"type": "string"}, "opt": {"type": "string"},
            "when": {"type": "string", "format": "date-time"}}});
        let value = json!({"q": "1Gi", "when": "2024-01-01T00:00:00Z"});
        for rule in [
            "quantity(self.q).isGreaterThan(quantity('1Mi'))",
            "isURL(self.q)",
            "self.opt == 'x'",
            "self.q.matches('(?<=x)y')",
            "self.q +",
            "self.q",
            "self.when == '2025-01-01T00:00:00Z'",
            "self.q == oldSelf.q",
            "[1, 2].min() == ['a'].min()",
        ] {
            assert!(
                matches!(
                    eval(rule, value.clone(), node.clone()),
                    Outcome::Undecidable(_)
                ),
                "{rule}: {:?}",
                eval(rule, value.clone(), node.clone())
            );
        }
    }

    #[test]
    fn a_false_rule_carries_its_message_and_field_path() {
        let node = schema(json!({"type": "object", "properties": {
            "min": {"type": "integer"}, "max": {"type": "integer"}}}));
        let value = json!({"min": 3, "max": 1});
        let rules = [
            json!({"rule": "self.min <= self.max", "message": "min above max", "fieldPath": ".min"}),
            json!({"rule": "self.min <= self.max",
                   "messageExpression": "'min ' + string(self.min) + ' above max ' + string(self.max)"}),
            json!({"rule": "self.min <= self.max", "messageExpression": "self.nothing"}),
            json!({"rule": "self.min <= self.max"}),
        ];
        let out = Evaluator::default().evaluate(&rules, &value, &node, false);
        let violated = |message: &str, field_path: Option<&str>| Outcome::Violated {
            message: message.into(),
            field_path: field_path.map(str::to_string),
        };
        assert_eq!(
            out,
            vec![
                violated("min above max", Some(".min")),
                violated("min 3 above max 1", None),
                violated("failed rule: self.min <= self.max", None),
                violated("failed rule: self.min <= self.max", None),
            ]
        );
    }

    #[test]
    fn work_is_bounded() {
        // Each rule is compiled once.
        assert!(Arc::ptr_eq(&compiled("self > 1"), &compiled("self > 1")));
        // A comprehension nested in another over a large list costs too much.
        let node = json!({"type": "array", "items": {"type": "integer"}});
        let big: Vec<i64> = (0..2000).collect();
        let outcome = eval(
            "self.all(x, self.all(y, x == y || x != y))",
            json!(big),
            node.clone(),
        );
        assert!(
            matches!(outcome, Outcome::Undecidable(ref why) if why.contains("too large")),
            "{outcome:?}"
        );
        holds("self.all(x, x >= 0)", json!(big), node);
    }
}
