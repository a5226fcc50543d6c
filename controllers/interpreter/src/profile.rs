//! Custom kinds: the interpreter a [`WorkloadProfile`](flotilla_api::WorkloadProfile) describes,
//! its check against the kind's negotiated schema, and its CEL health rule.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use flotilla_api::placement::ReplicaSchedulingType;
use flotilla_api::{WorkloadProfileSpec, reasons};
use serde_json::Value;

use crate::kinds::{Divides, HubStatus, Interpreter, builtin, generic};

/// The JSON pointer of a profile's field path: `.spec.replicas` is `/spec/replicas`.
pub fn pointer(path: &str) -> String {
    path.replace('.', "/")
}

/// The interpreter of a custom kind, from its accepted profile.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// Where the replica count is (a JSON pointer), if the kind divides.
    replicas: Option<String>,
    /// The status fields summed on the hub (JSON pointers).
    sums: Vec<String>,
    /// The health rule's source.
    health: Option<String>,
    /// The fields of the `Ready` condition the hub object gets (those its schema declares), if
    /// it gets one.
    ready: Option<Vec<String>>,
}

impl Profile {
    /// The interpreter an accepted profile describes: its `spec`, and the fields of the `Ready`
    /// condition its kind's schema declares (the negotiator's `status.readyConditionFields`,
    /// see [`check`]).
    pub fn accepted(spec: &WorkloadProfileSpec, ready_condition_fields: &[String]) -> Self {
        Self {
            ready: spec
                .ready_condition
                .then(|| ready_condition_fields.to_vec())
                .filter(|f| f.iter().any(|f| f == "type") && f.iter().any(|f| f == "status")),
            ..Self::new(spec)
        }
    }

    /// The interpreter `spec` describes, without a `Ready` condition.
    pub fn new(spec: &WorkloadProfileSpec) -> Self {
        Self {
            replicas: spec.replicas.as_deref().map(pointer),
            sums: spec.status_sums.iter().map(|p| pointer(p)).collect(),
            health: spec.health.clone(),
            ready: None,
        }
    }
}

impl Interpreter for Profile {
    fn divides(&self, _: &Value, scheduling: ReplicaSchedulingType) -> Divides {
        match (&self.replicas, scheduling) {
            (Some(_), ReplicaSchedulingType::Divided) => Divides::Replicas,
            _ => Divides::Not,
        }
    }
    fn replicas_pointer(&self) -> &str {
        self.replicas.as_deref().unwrap_or("/spec/replicas")
    }
    fn hub_status(&self) -> HubStatus {
        if self.sums.is_empty() && self.ready.is_none() {
            HubStatus::Kept
        } else {
            HubStatus::Summed
        }
    }
    fn ready_condition(&self) -> Option<&[String]> {
        self.ready.as_deref()
    }
    fn status_sums(&self) -> &[String] {
        &self.sums
    }
    fn health_rule(&self) -> Option<&str> {
        self.health.as_deref()
    }
}

/// The interpreter of every kind: the built-in ones, then those of accepted profiles (by group
/// and kind: one profile serves every version of its kind), then the generic one.
#[derive(Clone, Debug, Default)]
pub struct Kinds {
    profiles: BTreeMap<(String, String), Profile>,
}

impl Kinds {
    /// With the profiles of `(group, kind)`; the first of a kind wins.
    pub fn new(profiles: impl IntoIterator<Item = (String, String, Profile)>) -> Self {
        let mut out = BTreeMap::new();
        for (group, kind, profile) in profiles {
            out.entry((group, kind)).or_insert(profile);
        }
        Self { profiles: out }
    }

    /// The interpreter of `kind` in `api_version`.
    pub fn of(&self, api_version: &str, kind: &str) -> &dyn Interpreter {
        if let Some(b) = builtin(api_version, kind) {
            return b;
        }
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        self.profiles
            .get(&(group.to_string(), kind.to_string()))
            .map_or(generic(), |p| p as &dyn Interpreter)
    }
}

/// Why a profile cannot be used: a reason for the `Accepted` condition, and a message naming the
/// field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub reason: &'static str,
    pub message: String,
}

impl Rejection {
    fn new(reason: &'static str, message: String) -> Self {
        Self { reason, message }
    }
}

/// What [`check`] found in a kind's schema for an acceptable profile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checked {
    /// With `readyCondition`: the fields of [`READY_CONDITION_FIELDS`] the items of
    /// `.status.conditions` declare (the splitter writes only those: server-side apply refuses a
    /// field the schema does not declare).
    pub ready_condition_fields: Vec<String>,
}

/// Checks `spec` against its kind's negotiated `schema` (the structural OpenAPI v3 schema of the
/// whole object) and whether the kind has a status subresource: the replica path and every
/// status sum must be integer fields the schema declares, sums need the status subresource (the
/// splitter writes them there), and the health rule must compile.
pub fn check(
    spec: &WorkloadProfileSpec,
    schema: &Value,
    status_subresource: bool,
) -> Result<Checked, Rejection> {
    let mut checked = Checked::default();
    let paths = spec
        .replicas
        .iter()
        .map(|p| ("spec.replicas", p))
        .chain(spec.status_sums.iter().map(|p| ("spec.statusSums", p)));
    for (field, path) in paths {
        let declared = path
            .split('.')
            .skip(1)
            .try_fold(schema, |at, key| at.get("properties")?.get(key));
        match declared {
            None => {
                return Err(Rejection::new(
                    reasons::PATH_NOT_IN_SCHEMA,
                    format!(
                        "{field}: {path} is not a field of the negotiated schema of {}",
                        spec.kind
                    ),
                ));
            }
            Some(s) if s.get("type").and_then(Value::as_str) != Some("integer") => {
                return Err(Rejection::new(
                    reasons::NOT_AN_INTEGER,
                    format!(
                        "{field}: {path} is a {} in the negotiated schema of {}, not an integer",
                        s.get("type")
                            .and_then(Value::as_str)
                            .unwrap_or("field without a type"),
                        spec.kind
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    if !spec.status_sums.is_empty() && !status_subresource {
        return Err(Rejection::new(
            reasons::NO_STATUS_SUBRESOURCE,
            format!(
                "spec.statusSums: {} has no status subresource for the splitter to write the sums to",
                spec.kind
            ),
        ));
    }
    if spec.ready_condition {
        if !status_subresource {
            return Err(Rejection::new(
                reasons::NO_STATUS_SUBRESOURCE,
                format!(
                    "spec.readyCondition: {} has no status subresource for the splitter to write the condition to",
                    spec.kind
                ),
            ));
        }
        checked.ready_condition_fields = takes_a_ready_condition(schema).map_err(|why| {
            Rejection::new(
                reasons::NO_CONDITIONS_LIST,
                format!(
                    "spec.readyCondition: {why} in the negotiated schema of {}",
                    spec.kind
                ),
            )
        })?;
    }
    if let Some(rule) = &spec.health {
        HealthRule::compile(rule).map_err(|why| {
            Rejection::new(reasons::INVALID_HEALTH_RULE, format!("spec.health: {why}"))
        })?;
    }
    Ok(checked)
}

/// The fields of the `Ready` condition the splitter writes.
pub const READY_CONDITION_FIELDS: [&str; 6] = [
    "type",
    "status",
    "reason",
    "message",
    "lastTransitionTime",
    "lastUpdateTime",
];

/// Whether `.status.conditions` of `schema` takes the `Ready` condition the splitter writes: a
/// list of objects with `type` and `status` strings that requires no other field than
/// [`READY_CONDITION_FIELDS`]. The fields of those it declares, or why not.
fn takes_a_ready_condition(schema: &Value) -> Result<Vec<String>, String> {
    let conditions = ["status", "conditions"]
        .iter()
        .try_fold(schema, |at, key| at.get("properties")?.get(key))
        .ok_or(".status.conditions is not a field")?;
    if conditions.get("type").and_then(Value::as_str) != Some("array") {
        return Err(".status.conditions is not a list".into());
    }
    let item = conditions
        .get("items")
        .ok_or(".status.conditions has no item schema")?;
    for field in ["type", "status"] {
        let declared = item.get("properties").and_then(|p| p.get(field));
        if declared.and_then(|d| d.get("type")).and_then(Value::as_str) != Some("string") {
            return Err(format!(
                "the items of .status.conditions have no {field} string"
            ));
        }
    }
    let required = item.get("required").and_then(Value::as_array);
    if let Some(other) = required
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find(|f| !READY_CONDITION_FIELDS.contains(f))
    {
        return Err(format!(
            "the items of .status.conditions require {other}, which the splitter cannot fill"
        ));
    }
    let declared = item.get("properties").and_then(Value::as_object);
    Ok(READY_CONDITION_FIELDS
        .iter()
        .filter(|f| declared.is_some_and(|d| d.contains_key(**f)))
        .map(|f| f.to_string())
        .collect())
}

/// A compiled health rule: a CEL expression over `self`, the member's object with its status.
#[derive(Clone)]
pub struct HealthRule {
    source: String,
    program: Arc<cel::Program>,
}

impl std::fmt::Debug for HealthRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("HealthRule").field(&self.source).finish()
    }
}

impl HealthRule {
    /// Compiles `source`; an error says why it does not parse, or which variable other than
    /// `self` it refers to.
    pub fn compile(source: &str) -> Result<Self, String> {
        let program = cel::Program::compile(source).map_err(|e| format!("does not parse: {e}"))?;
        let references = program.references();
        if let Some(other) = references.variables().into_iter().find(|v| *v != "self") {
            return Err(format!(
                "refers to {other}; a health rule may only refer to self"
            ));
        }
        Ok(Self {
            source: source.to_string(),
            program: Arc::new(program),
        })
    }

    /// The rule's source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether `object` is healthy by the rule: `Ok(true)` or `Ok(false)`; an error (a field it
    /// does not have yet, a result that is not a boolean) says why it could not tell.
    pub fn evaluate(&self, object: &Value) -> Result<bool, String> {
        let mut context = cel::Context::default();
        context.add_variable_from_value("self", to_cel(object));
        match self.program.execute(&context) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!("the rule gave {other:?}, not a boolean")),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// A JSON value as CEL sees a Kubernetes object: every integer an `int`, as in the apiserver's
/// CEL.
fn to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(f)) => cel::Value::Float(f),
            (None, None) => cel::Value::Null,
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => {
            let map: HashMap<String, cel::Value> =
                map.iter().map(|(k, v)| (k.clone(), to_cel(v))).collect();
            cel::Value::Map(map.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(value: Value) -> WorkloadProfileSpec {
        serde_json::from_value(value).expect("profile spec")
    }

    /// The shape of a Rollout's schema, as its negotiated schema has it.
    fn rollout_schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer", "format": "int32"},
                "strategy": {"type": "object"}}},
            "status": {"type": "object", "properties": {
                "readyReplicas": {"type": "integer"},
                "availableReplicas": {"type": "integer"},
                "phase": {"type": "string"}}}}})
    }

    #[test]
    fn a_profile_whose_paths_are_integers_of_the_schema_is_accepted() {
        let s = spec(
            json!({"group": "argoproj.io", "kind": "Rollout", "replicas": ".spec.replicas",
            "statusSums": [".status.readyReplicas", ".status.availableReplicas"],
            "health": "has(self.status.availableReplicas) && self.status.availableReplicas >= self.spec.replicas"}),
        );
        assert_eq!(check(&s, &rollout_schema(), true), Ok(Checked::default()));
    }

    #[test]
    fn a_path_the_schema_lacks_or_that_is_no_integer_is_named() {
        let missing = spec(json!({"group": "argoproj.io", "kind": "Rollout",
            "statusSums": [".status.readyReplicas", ".status.updatedReplicas"]}));
        let why = check(&missing, &rollout_schema(), true).expect_err("rejected");
        assert_eq!(why.reason, reasons::PATH_NOT_IN_SCHEMA);
        assert!(
            why.message.contains(".status.updatedReplicas"),
            "{}",
            why.message
        );
        assert!(
            why.message.starts_with("spec.statusSums"),
            "{}",
            why.message
        );

        let phase =
            spec(json!({"group": "argoproj.io", "kind": "Rollout", "replicas": ".status.phase"}));
        let why = check(&phase, &rollout_schema(), true).expect_err("rejected");
        assert_eq!(why.reason, reasons::NOT_AN_INTEGER);
        assert!(why.message.contains("is a string"), "{}", why.message);

        let sums = spec(json!({"group": "argoproj.io", "kind": "Rollout",
            "statusSums": [".status.readyReplicas"]}));
        let why = check(&sums, &rollout_schema(), false).expect_err("rejected");
        assert_eq!(why.reason, reasons::NO_STATUS_SUBRESOURCE);
    }

    #[test]
    fn a_ready_condition_needs_a_conditions_list_the_splitter_can_fill() {
        let ready =
            spec(json!({"group": "argoproj.io", "kind": "Rollout", "readyCondition": true}));
        let with_conditions = |item: Value| {
            let mut s = rollout_schema();
            s["properties"]["status"]["properties"]["conditions"] =
                json!({"type": "array", "items": item});
            s
        };
        // Argo Rollouts' conditions require six fields, all of them ones the splitter fills.
        let argo = with_conditions(json!({"type": "object",
            "required": ["lastTransitionTime", "lastUpdateTime", "message", "reason", "status", "type"],
            "properties": {"type": {"type": "string"}, "status": {"type": "string"},
                "reason": {"type": "string"}, "message": {"type": "string"},
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "lastUpdateTime": {"type": "string", "format": "date-time"}}}));
        let checked = check(&ready, &argo, true).expect("accepted");
        assert_eq!(checked.ready_condition_fields, READY_CONDITION_FIELDS);
        let p = Profile::accepted(&ready, &checked.ready_condition_fields);
        assert_eq!(
            p.ready_condition(),
            Some(&checked.ready_condition_fields[..])
        );
        assert_eq!(
            p.hub_status(),
            HubStatus::Summed,
            "a condition alone is a status"
        );
        assert_eq!(Profile::new(&ready).ready_condition(), None);
        // OpenKruise's conditions have no lastUpdateTime: the splitter leaves it out (server-side
        // apply refuses a field the schema does not declare).
        let kruise = with_conditions(json!({"type": "object", "required": ["status", "type"],
            "properties": {"type": {"type": "string"}, "status": {"type": "string"},
                "reason": {"type": "string"}, "message": {"type": "string"},
                "lastTransitionTime": {"type": "string", "format": "date-time"}}}));
        let checked = check(&ready, &kruise, true).expect("accepted");
        assert_eq!(
            checked.ready_condition_fields,
            ["type", "status", "reason", "message", "lastTransitionTime"]
        );

        let why = check(&ready, &argo, false).expect_err("no status subresource");
        assert_eq!(why.reason, reasons::NO_STATUS_SUBRESOURCE);
        for (schema, says) in [
            (rollout_schema(), ".status.conditions is not a field"),
            (
                with_conditions(
                    json!({"type": "object", "properties": {"kind": {"type": "string"}}}),
                ),
                "no type string",
            ),
            (
                with_conditions(
                    json!({"type": "object", "required": ["type", "status", "observedGeneration"],
                    "properties": {"type": {"type": "string"}, "status": {"type": "string"}}}),
                ),
                "require observedGeneration",
            ),
        ] {
            let why = check(&ready, &schema, true).expect_err(says);
            assert_eq!(why.reason, reasons::NO_CONDITIONS_LIST);
            assert!(
                why.message.contains(says) && why.message.starts_with("spec.readyCondition"),
                "{}",
                why.message
            );
        }
    }

    #[test]
    fn a_health_rule_must_compile_and_refer_to_self_alone() {
        for (rule, says) in [
            ("self.status.ready >=", "does not parse"),
            ("object.status.ready > 0", "refers to object"),
        ] {
            let s = spec(json!({"group": "g.io", "kind": "K", "health": rule}));
            let why = check(&s, &rollout_schema(), true).expect_err(rule);
            assert_eq!(why.reason, reasons::INVALID_HEALTH_RULE);
            assert!(why.message.contains(says), "{rule}: {}", why.message);
        }
    }

    #[test]
    fn a_health_rule_reads_the_members_object() {
        let rule = HealthRule::compile(
            "has(self.status.availableReplicas) && self.status.availableReplicas >= self.spec.replicas",
        )
        .expect("compiles");
        let object = |available: Option<i64>| {
            let status = available.map_or(json!({}), |a| json!({ "availableReplicas": a }));
            json!({"spec": {"replicas": 3}, "status": status})
        };
        assert_eq!(rule.evaluate(&object(Some(3))), Ok(true));
        assert_eq!(rule.evaluate(&object(Some(2))), Ok(false));
        assert_eq!(rule.evaluate(&object(None)), Ok(false));
        // Integers compare with literals, as in the apiserver's CEL.
        let phase = HealthRule::compile("self.status.phase == 'Healthy' && self.spec.replicas > 0")
            .expect("compiles");
        assert_eq!(
            phase.evaluate(&json!({"spec": {"replicas": 1}, "status": {"phase": "Healthy"}})),
            Ok(true)
        );
        // A field the object does not have yet: no verdict, and a reason.
        assert!(phase.evaluate(&json!({"spec": {"replicas": 1}})).is_err());
        let number = HealthRule::compile("self.spec.replicas").expect("compiles");
        assert!(number.evaluate(&json!({"spec": {"replicas": 1}})).is_err());
    }

    #[test]
    fn a_profile_divides_at_its_path_and_sums_its_fields() {
        let p = Profile::new(&spec(json!({"group": "apps.kruise.io", "kind": "CloneSet",
            "replicas": ".spec.replicas", "statusSums": [".status.readyReplicas"],
            "health": "true"})));
        assert_eq!(
            p.divides(&json!({}), ReplicaSchedulingType::Divided),
            Divides::Replicas
        );
        assert_eq!(
            p.divides(&json!({}), ReplicaSchedulingType::Duplicated),
            Divides::Not
        );
        assert_eq!(p.replicas_pointer(), "/spec/replicas");
        assert_eq!(p.hub_status(), HubStatus::Summed);
        assert_eq!(p.status_sums(), ["/status/readyReplicas"]);
        assert_eq!(p.health_rule(), Some("true"));
        let kinds = Kinds::new([("apps.kruise.io".to_string(), "CloneSet".to_string(), p)]);
        assert_eq!(
            kinds.of("apps.kruise.io/v1alpha1", "CloneSet").hub_status(),
            HubStatus::Summed
        );
        assert_eq!(
            kinds
                .of("apps.kruise.io/v1beta1", "StatefulSet")
                .hub_status(),
            HubStatus::Kept
        );
        assert_eq!(
            kinds.of("apps/v1", "Deployment").hub_status(),
            HubStatus::Deployment
        );
        let whole = Profile::new(&spec(json!({"group": "g.io", "kind": "K"})));
        assert_eq!(
            whole.divides(&json!({}), ReplicaSchedulingType::Divided),
            Divides::Not
        );
        assert_eq!(whole.hub_status(), HubStatus::Kept);
    }

    /// A shipped profile (`deploy/profiles/<file>`), parsed.
    fn shipped(file: &str) -> WorkloadProfileSpec {
        let path = format!(
            "{}/../../deploy/profiles/{file}",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).expect("the shipped profile");
        let profile: flotilla_api::WorkloadProfile =
            serde_saphyr::from_str(&text).expect("a WorkloadProfile");
        profile.spec
    }

    #[test]
    fn the_shipped_health_rules_read_their_kinds_status() {
        let rollout = shipped("argo-rollouts.yaml");
        let rule =
            HealthRule::compile(rollout.health.as_deref().expect("a rule")).expect("compiles");
        let phase = |p: &str| json!({"spec": {"replicas": 2}, "status": {"phase": p}});
        assert_eq!(rule.evaluate(&phase("Healthy")), Ok(true));
        assert_eq!(rule.evaluate(&phase("Progressing")), Ok(false));
        assert_eq!(rule.evaluate(&json!({"spec": {}, "status": {}})), Ok(false));

        let cloneset = shipped("openkruise-cloneset.yaml");
        let rule =
            HealthRule::compile(cloneset.health.as_deref().expect("a rule")).expect("compiles");
        let copy = |generation: i64, observed: i64, ready: i64| {
            json!({"metadata": {"generation": generation}, "spec": {"replicas": 3},
                   "status": {"observedGeneration": observed, "updatedReadyReplicas": ready}})
        };
        assert_eq!(rule.evaluate(&copy(2, 2, 3)), Ok(true));
        assert_eq!(rule.evaluate(&copy(2, 2, 2)), Ok(false));
        assert_eq!(rule.evaluate(&copy(3, 2, 3)), Ok(false));
        assert_eq!(
            rule.evaluate(
                &json!({"metadata": {"generation": 1}, "spec": {"replicas": 1}, "status": {}})
            ),
            Ok(false)
        );
    }
}
