//! When a member's copy of an object is healthy: generic rules read off its status, refined per
//! kind by [`crate::Interpreter::unhealthy`].

use kube::api::DynamicObject;
use serde_json::Value;

use crate::interpreter;
use crate::profile::HealthRule;

/// How an applied object is doing, read generically from its status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    Available,
    NotAvailable(String),
    Degraded(String),
}

fn condition<'a>(status: &'a Value, type_: &str) -> Option<&'a Value> {
    status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Reads an object's health from its status: a newer spec not yet observed is not available; a
/// `ReplicaFailure`, `Failed` or `Degraded` condition, or a `Progressing=False` with
/// `ProgressDeadlineExceeded`, is degraded; an `Available` or `Ready` condition says the rest;
/// objects without such conditions (ConfigMaps, Services, ...) are available once they exist, except
/// that an object with a generation whose status is still empty (a workload just created) is not.
pub fn health(object: &DynamicObject) -> Health {
    health_by(object, None)
}

/// As [`health`], but with `rule` (a custom kind's CEL health rule) in place of the rules read
/// off conditions and counts: a copy whose newer spec is not observed yet is still not
/// available; otherwise the rule says. A rule that cannot tell (a field the object does not
/// have yet) counts as not available, with its reason.
pub fn health_by(object: &DynamicObject, rule: Option<&HealthRule>) -> Health {
    let status = object.data.get("status").cloned().unwrap_or(Value::Null);
    let generation = object.metadata.generation;
    // A freshly created workload has an empty status until its controller reports.
    if generation.is_some() && status.as_object().is_some_and(|s| s.is_empty()) {
        return Health::NotAvailable("the member has not reported a status yet".into());
    }
    let observed = status.get("observedGeneration").and_then(Value::as_i64);
    if let (Some(g), Some(o)) = (generation, observed)
        && o < g
    {
        return Health::NotAvailable(format!("generation {g} not observed yet (observed {o})"));
    }
    if let Some(rule) = rule {
        let whole = serde_json::to_value(object).unwrap_or(Value::Null);
        return match rule.evaluate(&whole) {
            Ok(true) => Health::Available,
            Ok(false) => Health::NotAvailable(format!("health rule not met: {}", rule.source())),
            Err(why) => Health::NotAvailable(format!(
                "health rule {} cannot tell yet: {why}",
                rule.source()
            )),
        };
    }
    for bad in ["ReplicaFailure", "Failed", "Degraded"] {
        if let Some(c) = condition(&status, bad)
            && c["status"] == "True"
        {
            return Health::Degraded(format!(
                "{bad}: {}",
                c["message"].as_str().unwrap_or_default()
            ));
        }
    }
    if let Some(c) = condition(&status, "Progressing")
        && c["status"] == "False"
        && c["reason"] == "ProgressDeadlineExceeded"
    {
        return Health::Degraded(
            c["message"]
                .as_str()
                .unwrap_or("progress deadline exceeded")
                .into(),
        );
    }
    if let Some(types) = &object.types
        && let Some(why) = interpreter(&types.api_version, &types.kind).unhealthy(&object.data)
    {
        return Health::NotAvailable(why);
    }
    for good in ["Available", "Ready"] {
        if let Some(c) = condition(&status, good) {
            return if c["status"] == "True" {
                Health::Available
            } else {
                Health::NotAvailable(format!(
                    "{good}={}: {}",
                    c["status"].as_str().unwrap_or("?"),
                    c["message"].as_str().unwrap_or_default()
                ))
            };
        }
    }
    Health::Available
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> DynamicObject {
        serde_json::from_value(v).expect("object")
    }

    fn deployment(generation: i64, observed: i64, available: &str) -> DynamicObject {
        obj(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "generation": generation},
            "status": {"observedGeneration": observed, "conditions": [
                {"type": "Available", "status": available, "reason": "MinimumReplicasAvailable", "message": "ok"}]}
        }))
    }

    #[test]
    fn health_reads_generic_status() {
        assert_eq!(health(&deployment(2, 2, "True")), Health::Available);
        assert!(matches!(
            health(&deployment(3, 2, "True")),
            Health::NotAvailable(_)
        ));
        assert!(matches!(
            health(&deployment(2, 2, "False")),
            Health::NotAvailable(_)
        ));
        let cm = obj(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}));
        assert_eq!(health(&cm), Health::Available);
        let fresh = obj(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "w", "generation": 1}, "status": {}}));
        assert!(matches!(health(&fresh), Health::NotAvailable(_)));
        let failing = obj(
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w"},
            "status": {"conditions": [{"type": "ReplicaFailure", "status": "True", "message": "quota"}]}}),
        );
        assert!(matches!(health(&failing), Health::Degraded(m) if m.contains("quota")));
    }

    #[test]
    fn a_statefulset_or_daemonset_is_available_once_every_pod_is() {
        let sts = |available: i64| {
            obj(json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": "db", "generation": 2},
                "spec": {"replicas": 2},
                "status": {"observedGeneration": 2, "replicas": 2, "availableReplicas": available}}))
        };
        assert_eq!(health(&sts(2)), Health::Available);
        assert_eq!(
            health(&sts(1)),
            Health::NotAvailable("1 of 2 pods available".into())
        );
        let scaled_to_zero = obj(json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "generation": 3}, "spec": {"replicas": 0},
            "status": {"observedGeneration": 3, "replicas": 0}}));
        assert_eq!(health(&scaled_to_zero), Health::Available);
        let ds = |available: i64| {
            obj(json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": {"name": "agent", "generation": 1},
                "status": {"observedGeneration": 1, "desiredNumberScheduled": 3, "numberAvailable": available}}))
        };
        assert_eq!(health(&ds(3)), Health::Available);
        assert!(matches!(health(&ds(2)), Health::NotAvailable(_)));
    }

    #[test]
    fn a_health_rule_replaces_the_generic_rules() {
        let rule = HealthRule::compile("self.status.phase == 'Healthy'").expect("rule");
        let rollout = |generation: i64, observed: i64, phase: &str| {
            obj(
                json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
                "metadata": {"name": "web", "generation": generation},
                "status": {"observedGeneration": observed, "phase": phase,
                           "conditions": [{"type": "Available", "status": "False"}]}}),
            )
        };
        assert_eq!(
            health_by(&rollout(2, 2, "Healthy"), Some(&rule)),
            Health::Available
        );
        assert_eq!(
            health_by(&rollout(2, 2, "Progressing"), Some(&rule)),
            Health::NotAvailable("health rule not met: self.status.phase == 'Healthy'".into())
        );
        assert!(matches!(
            health_by(&rollout(3, 2, "Healthy"), Some(&rule)),
            Health::NotAvailable(m) if m.contains("not observed")
        ));
        assert!(matches!(
            health_by(&rollout(2, 2, "Healthy"), None),
            Health::NotAvailable(m) if m.starts_with("Available=False")
        ));
        let fresh = obj(
            json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
            "metadata": {"name": "web"}, "status": {"observedGeneration": 1}}),
        );
        assert!(matches!(
            health_by(&fresh, Some(&rule)),
            Health::NotAvailable(m) if m.contains("cannot tell")
        ));
    }
}
