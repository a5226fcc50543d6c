//! The built-in interpreters, one small type per kind.

use flotilla_api::placement::ReplicaSchedulingType;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use serde_json::Value;

use crate::hub_made::{strip_claim, strip_job, strip_service};

/// How the copies of a placed object share its work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Divides {
    /// Each copy is the whole object: every chosen member runs all of it.
    Not,
    /// The count at [`Interpreter::replicas_pointer`] is divided among the chosen members
    /// (a Deployment's replicas, a PodDisruptionBudget's `minAvailable`).
    Replicas,
    /// The ordinals are divided into disjoint ranges, one per member (a StatefulSet).
    Ordinals,
    /// `spec.completions` is divided once, when the object is first placed, and
    /// `spec.parallelism` with it (see [`JobShare`]); a copy's completions never change.
    Completions,
    /// The whole object runs on one chosen member (a CronJob, an Indexed Job).
    One,
}

/// How the hub object's status is made from its copies' statuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HubStatus {
    /// Left as it is: the hub object has no status of its own to show (ConfigMaps, Secrets).
    Kept,
    /// Replica counters summed, `Available`/`Progressing` from them; a duplicated one shows its
    /// copy furthest behind.
    Deployment,
    /// Replica counters summed, revisions where every copy agrees.
    StatefulSet,
    /// Pod counters of every member's nodes summed.
    DaemonSet,
    /// Replica counters summed.
    ReplicaSet,
    /// Pod counters summed, `Complete` once every copy is, `Failed` once one failed.
    Job,
    /// The latest schedule of any copy.
    CronJob,
    /// The load-balancer ingress of every copy (a Service's or an Ingress's).
    Service,
    /// As [`HubStatus::Service`], for a networking.k8s.io/v1 Ingress.
    Ingress,
    /// `Bound` once every copy is bound.
    PersistentVolumeClaim,
    /// The [`Interpreter::status_sums`] fields summed (a custom kind's profile).
    Summed,
}

/// What Flotilla knows about one kind. Every method has the behaviour of a kind Flotilla knows
/// nothing about as its default.
pub trait Interpreter: Sync {
    /// How the copies of `object` (the hub object) share its work when its Placement's replica
    /// scheduling is `scheduling`. Under `Duplicated` every built-in kind is copied whole.
    fn divides(&self, _object: &Value, _scheduling: ReplicaSchedulingType) -> Divides {
        Divides::Not
    }

    /// Where the count that [`Divides::Replicas`] or [`Divides::Completions`] divides is, as a
    /// JSON pointer.
    fn replicas_pointer(&self) -> &str {
        "/spec/replicas"
    }

    /// Where a second count is that follows a member's share of the divided one (a Job's
    /// `parallelism`, an autoscaler's `minReplicas`), if the kind has one.
    fn follower_pointer(&self) -> Option<&str> {
        None
    }

    /// The follower's value in a member's copy of `object` (the hub object) whose share of the
    /// divided count is `share`.
    fn follower(&self, _object: &Value, _share: u32) -> Option<u32> {
        None
    }

    /// Removes from a member's `manifest` what the hub's apiserver or controllers set and a
    /// member must make for itself, given the hub object's `managed` fields.
    fn prune(&self, _manifest: &mut Value, _managed: &[ManagedFieldsEntry]) {}

    /// How the hub object's status is made from the copies'.
    fn hub_status(&self) -> HubStatus {
        HubStatus::Kept
    }

    /// The status fields (JSON pointers) the hub object shows summed over its copies, for
    /// [`HubStatus::Summed`].
    fn status_sums(&self) -> &[String] {
        &[]
    }

    /// Whether the hub object's status gets a `Ready` condition (with [`HubStatus::Summed`]),
    /// `True` once every copy is healthy: the fields of the condition its schema declares.
    fn ready_condition(&self) -> Option<&[String]> {
        None
    }

    /// A CEL rule over `self` that says when a member's copy is healthy, replacing the generic
    /// rules (see [`crate::profile::HealthRule`]).
    fn health_rule(&self) -> Option<&str> {
        None
    }

    /// Why a member's copy (`object`, with its status) is not healthy although the generic
    /// rules of [`crate::health::health`] found nothing wrong, if it is not.
    fn unhealthy(&self, _object: &Value) -> Option<String> {
        None
    }
}

/// The interpreter of `kind` in `api_version` (e.g. `apps/v1`, `Deployment`); the generic one
/// for a kind without one of its own.
pub fn interpreter(api_version: &str, kind: &str) -> &'static dyn Interpreter {
    builtin(api_version, kind).unwrap_or(&Generic)
}

/// The generic interpreter: copied whole, the hub status left alone, the generic health rules.
pub fn generic() -> &'static dyn Interpreter {
    &Generic
}

/// The built-in interpreter of `kind` in `api_version`, if Flotilla has one (the table of kinds
/// says; a kind it copies whole has none).
pub fn builtin(api_version: &str, kind: &str) -> Option<&'static dyn Interpreter> {
    crate::table::lookup(api_version, kind).and_then(|k| k.interpreter)
}

fn divided(scheduling: ReplicaSchedulingType) -> bool {
    scheduling == ReplicaSchedulingType::Divided
}

/// `how` under `Divided`; copied whole under `Duplicated`.
fn when_divided(scheduling: ReplicaSchedulingType, how: Divides) -> Divides {
    if divided(scheduling) {
        how
    } else {
        Divides::Not
    }
}

fn count(v: &Value, field: &str) -> i64 {
    v.get(field).and_then(Value::as_i64).unwrap_or(0)
}

/// Why fewer pods are available than `wanted`, if they are.
fn pods_short(available: i64, wanted: i64) -> Option<String> {
    (available < wanted).then(|| format!("{available} of {wanted} pods available"))
}

/// A kind Flotilla has no rules for: copied whole, its hub status left alone.
struct Generic;
impl Interpreter for Generic {}

/// apps/v1 Deployment: replicas divided; its controller reports `Available`.
pub(crate) struct Deployment;
impl Interpreter for Deployment {
    fn divides(&self, _: &Value, scheduling: ReplicaSchedulingType) -> Divides {
        when_divided(scheduling, Divides::Replicas)
    }
    fn hub_status(&self) -> HubStatus {
        HubStatus::Deployment
    }
}

/// apps/v1 ReplicaSet: replicas divided; available once all its pods are.
pub(crate) struct ReplicaSet;
impl Interpreter for ReplicaSet {
    fn divides(&self, object: &Value, scheduling: ReplicaSchedulingType) -> Divides {
        Deployment.divides(object, scheduling)
    }
    fn hub_status(&self) -> HubStatus {
        HubStatus::ReplicaSet
    }
    fn unhealthy(&self, object: &Value) -> Option<String> {
        let wanted = object["spec"]["replicas"].as_i64().unwrap_or(1);
        pods_short(count(&object["status"], "availableReplicas"), wanted)
    }
}

/// apps/v1 StatefulSet: ordinals divided into disjoint ranges; available once all its pods are.
pub(crate) struct StatefulSet;
impl Interpreter for StatefulSet {
    fn divides(&self, _: &Value, scheduling: ReplicaSchedulingType) -> Divides {
        when_divided(scheduling, Divides::Ordinals)
    }
    fn hub_status(&self) -> HubStatus {
        HubStatus::StatefulSet
    }
    fn unhealthy(&self, object: &Value) -> Option<String> {
        ReplicaSet.unhealthy(object)
    }
}

/// apps/v1 DaemonSet: one copy per member, running on that member's nodes.
pub(crate) struct DaemonSet;
impl Interpreter for DaemonSet {
    fn hub_status(&self) -> HubStatus {
        HubStatus::DaemonSet
    }
    fn unhealthy(&self, object: &Value) -> Option<String> {
        let status = &object["status"];
        pods_short(
            count(status, "numberAvailable"),
            count(status, "desiredNumberScheduled"),
        )
    }
}

/// batch/v1 Job: a NonIndexed Job with `completions` divides them (once); an Indexed Job, or
/// one that completes on its first success (no `completions`), runs whole on one member.
pub(crate) struct Job;
impl Interpreter for Job {
    fn divides(&self, object: &Value, scheduling: ReplicaSchedulingType) -> Divides {
        let spec = &object["spec"];
        let indexed = spec["completionMode"].as_str() == Some("Indexed");
        match (divided(scheduling), indexed, spec["completions"].is_u64()) {
            (false, _, _) => Divides::Not,
            (true, false, true) => Divides::Completions,
            (true, _, _) => Divides::One,
        }
    }
    fn replicas_pointer(&self) -> &str {
        "/spec/completions"
    }
    fn follower_pointer(&self) -> Option<&str> {
        Some("/spec/parallelism")
    }
    fn follower(&self, object: &Value, share: u32) -> Option<u32> {
        Some(proportional(
            &object["spec"],
            "parallelism",
            1,
            "completions",
            share,
        ))
    }
    fn prune(&self, manifest: &mut Value, _: &[ManagedFieldsEntry]) {
        strip_job(manifest);
    }
    fn hub_status(&self) -> HubStatus {
        HubStatus::Job
    }
}

/// batch/v1 CronJob: under `Divided` on one member, so that each schedule fires once.
pub(crate) struct CronJob;
impl Interpreter for CronJob {
    fn divides(&self, _: &Value, scheduling: ReplicaSchedulingType) -> Divides {
        when_divided(scheduling, Divides::One)
    }
    fn hub_status(&self) -> HubStatus {
        HubStatus::CronJob
    }
}

/// v1 Service: each member allocates its own addresses; the hub lists every member's
/// load-balancer ingress.
pub(crate) struct Service;
impl Interpreter for Service {
    fn prune(&self, manifest: &mut Value, managed: &[ManagedFieldsEntry]) {
        strip_service(manifest, managed);
    }
    fn hub_status(&self) -> HubStatus {
        HubStatus::Service
    }
}

/// networking.k8s.io/v1 Ingress: the hub lists every member's load-balancer ingress.
pub(crate) struct Ingress;
impl Interpreter for Ingress {
    fn hub_status(&self) -> HubStatus {
        HubStatus::Ingress
    }
}

/// v1 PersistentVolumeClaim: each member binds its own volume; healthy once bound.
pub(crate) struct PersistentVolumeClaim;
impl Interpreter for PersistentVolumeClaim {
    fn prune(&self, manifest: &mut Value, _: &[ManagedFieldsEntry]) {
        strip_claim(manifest);
    }
    fn hub_status(&self) -> HubStatus {
        HubStatus::PersistentVolumeClaim
    }
    fn unhealthy(&self, object: &Value) -> Option<String> {
        match object["status"]["phase"].as_str() {
            Some("Bound") => None,
            Some(phase) => Some(format!("the claim is {phase}, not Bound")),
            None => Some("the claim is not bound yet".into()),
        }
    }
}

/// policy/v1 PodDisruptionBudget: a `minAvailable` given as a number is divided like the
/// replicas of the pods it protects; a percentage, and `maxUnavailable`, hold in every member
/// as they are (a `maxUnavailable` divided would give members 0, which blocks every drain).
pub(crate) struct PodDisruptionBudget;
impl Interpreter for PodDisruptionBudget {
    fn divides(&self, object: &Value, scheduling: ReplicaSchedulingType) -> Divides {
        if divided(scheduling) && object["spec"]["minAvailable"].is_u64() {
            Divides::Replicas
        } else {
            Divides::Not
        }
    }
    fn replicas_pointer(&self) -> &str {
        "/spec/minAvailable"
    }
}

/// autoscaling/v2 HorizontalPodAutoscaler: under `Divided`, `maxReplicas` is divided like
/// replicas and `minReplicas` in proportion (see [`proportional`]), so that the members'
/// autoscalers together stay within the hub's bounds but for at most one replica per member.
pub(crate) struct HorizontalPodAutoscaler;
impl Interpreter for HorizontalPodAutoscaler {
    fn divides(&self, _: &Value, scheduling: ReplicaSchedulingType) -> Divides {
        when_divided(scheduling, Divides::Replicas)
    }
    fn replicas_pointer(&self) -> &str {
        "/spec/maxReplicas"
    }
    fn follower_pointer(&self) -> Option<&str> {
        Some("/spec/minReplicas")
    }
    fn follower(&self, object: &Value, share: u32) -> Option<u32> {
        Some(proportional(
            &object["spec"],
            "minReplicas",
            1,
            "maxReplicas",
            share,
        ))
    }
}

/// A member's value of the count `field` of `spec` (`default` when unset) that follows its
/// `share` of the divided count `of`: in proportion, rounded down, but at least 1 (a copy with
/// a share must make progress: a Job copy that may run no pod never completes, an autoscaler
/// may not go below 1) and at most the share. The fleet may so run up to one more per member
/// than the hub's value.
pub fn proportional(spec: &Value, field: &str, default: u64, of: &str, share: u32) -> u32 {
    let total = spec[of].as_u64().unwrap_or(1).max(1);
    let value = spec[field].as_u64().unwrap_or(default);
    let part = value.saturating_mul(u64::from(share)) / total;
    let part = part.max(u64::from(value > 0)).min(u64::from(share));
    u32::try_from(part).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ReplicaSchedulingType::{Divided, Duplicated};
    use proptest::prelude::*;
    use serde_json::json;

    fn kind(api_version: &str, kind: &str, object: Value) -> Divides {
        interpreter(api_version, kind).divides(&object, Divided)
    }

    #[test]
    fn under_divided_each_kind_shares_its_work_its_own_way() {
        assert_eq!(kind("apps/v1", "Deployment", json!({})), Divides::Replicas);
        assert_eq!(kind("apps/v1", "ReplicaSet", json!({})), Divides::Replicas);
        assert_eq!(kind("apps/v1", "StatefulSet", json!({})), Divides::Ordinals);
        assert_eq!(kind("apps/v1", "DaemonSet", json!({})), Divides::Not);
        let job = |spec: Value| kind("batch/v1", "Job", json!({ "spec": spec }));
        assert_eq!(job(json!({"completions": 6})), Divides::Completions);
        assert_eq!(
            job(json!({"completions": 6, "completionMode": "NonIndexed"})),
            Divides::Completions
        );
        assert_eq!(
            job(json!({"completions": 6, "completionMode": "Indexed"})),
            Divides::One
        );
        assert_eq!(job(json!({"parallelism": 3})), Divides::One);
        assert_eq!(kind("batch/v1", "CronJob", json!({})), Divides::One);
        let pdb = |spec: Value| kind("policy/v1", "PodDisruptionBudget", json!({ "spec": spec }));
        assert_eq!(pdb(json!({"minAvailable": 4})), Divides::Replicas);
        assert_eq!(pdb(json!({"minAvailable": "50%"})), Divides::Not);
        assert_eq!(pdb(json!({"maxUnavailable": 1})), Divides::Not);
        assert_eq!(
            interpreter("policy/v1", "PodDisruptionBudget").replicas_pointer(),
            "/spec/minAvailable"
        );
        assert_eq!(kind("v1", "ConfigMap", json!({})), Divides::Not);
        assert_eq!(
            kind("example.com/v1", "Deployment", json!({})),
            Divides::Not
        );
    }

    #[test]
    fn under_duplicated_every_kind_is_copied_whole() {
        for (api_version, k) in [
            ("apps/v1", "Deployment"),
            ("apps/v1", "StatefulSet"),
            ("batch/v1", "Job"),
            ("batch/v1", "CronJob"),
            ("policy/v1", "PodDisruptionBudget"),
        ] {
            let object = json!({"spec": {"completions": 3, "minAvailable": 2}});
            assert_eq!(
                interpreter(api_version, k).divides(&object, Duplicated),
                Divides::Not,
                "{k}"
            );
        }
    }

    #[test]
    fn every_built_in_kind_says_how_its_hub_status_is_made() {
        for (api_version, k, status) in [
            ("apps/v1", "Deployment", HubStatus::Deployment),
            ("apps/v1", "ReplicaSet", HubStatus::ReplicaSet),
            ("apps/v1", "StatefulSet", HubStatus::StatefulSet),
            ("apps/v1", "DaemonSet", HubStatus::DaemonSet),
            ("batch/v1", "Job", HubStatus::Job),
            ("batch/v1", "CronJob", HubStatus::CronJob),
            ("v1", "Service", HubStatus::Service),
            ("networking.k8s.io/v1", "Ingress", HubStatus::Ingress),
            (
                "v1",
                "PersistentVolumeClaim",
                HubStatus::PersistentVolumeClaim,
            ),
            ("v1", "ConfigMap", HubStatus::Kept),
            ("policy/v1", "PodDisruptionBudget", HubStatus::Kept),
        ] {
            assert_eq!(interpreter(api_version, k).hub_status(), status, "{k}");
        }
    }

    #[test]
    fn a_claim_is_healthy_once_bound() {
        let claim = |phase: Option<&str>| {
            let status = phase.map_or(json!({}), |p| json!({ "phase": p }));
            interpreter("v1", "PersistentVolumeClaim").unhealthy(&json!({ "status": status }))
        };
        assert_eq!(claim(Some("Bound")), None);
        assert_eq!(
            claim(Some("Pending")).as_deref(),
            Some("the claim is Pending, not Bound")
        );
        assert!(claim(None).is_some());
    }

    #[test]
    fn a_job_share_runs_in_proportion_and_always_progresses() {
        let job = interpreter("batch/v1", "Job");
        let parallelism = |spec: Value, share| job.follower(&json!({ "spec": spec }), share);
        let spec = json!({"completions": 10, "parallelism": 4});
        assert_eq!(parallelism(spec.clone(), 5), Some(2));
        // 4 × 1/10 rounds to 0: a copy that may run no pod would never complete.
        assert_eq!(parallelism(spec, 1), Some(1));
        // Parallelism 0 (paused) stays 0.
        assert_eq!(
            parallelism(json!({"completions": 4, "parallelism": 0}), 2),
            Some(0)
        );
        // Never more at once than the copy has to complete; unset parallelism is 1.
        assert_eq!(
            parallelism(json!({"completions": 4, "parallelism": 40}), 1),
            Some(1)
        );
        assert_eq!(parallelism(json!({"completions": 4}), 2), Some(1));
        assert_eq!(job.follower_pointer(), Some("/spec/parallelism"));
    }

    #[test]
    fn an_autoscalers_bounds_divide_and_each_member_keeps_at_least_one() {
        let hpa = interpreter("autoscaling/v2", "HorizontalPodAutoscaler");
        let object = json!({"spec": {"minReplicas": 3, "maxReplicas": 10}});
        assert_eq!(hpa.divides(&object, Divided), Divides::Replicas);
        assert_eq!(hpa.replicas_pointer(), "/spec/maxReplicas");
        assert_eq!(hpa.follower_pointer(), Some("/spec/minReplicas"));
        assert_eq!(hpa.follower(&object, 4), Some(1));
        assert_eq!(hpa.follower(&object, 6), Some(1));
        let wide = json!({"spec": {"minReplicas": 6, "maxReplicas": 10}});
        assert_eq!(hpa.follower(&wide, 5), Some(3));
        // minReplicas unset is 1.
        assert_eq!(
            hpa.follower(&json!({"spec": {"maxReplicas": 4}}), 2),
            Some(1)
        );
    }

    proptest! {
        #[test]
        fn a_follower_stays_within_its_bounds(
            total in 1u32..500, value in 0u32..100, cut in 0u32..500,
        ) {
            let share = cut.min(total);
            let spec = json!({"completions": total, "parallelism": value});
            let part = proportional(&spec, "parallelism", 1, "completions", share);
            prop_assert!(part <= share);
            prop_assert!(part <= value.max(1));
            if share > 0 && value > 0 {
                prop_assert!(part >= 1);
            }
        }
    }
}
