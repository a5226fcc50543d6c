//! Pure status aggregation: the hub object's status (a Deployment's, a Job's) is the truth of all
//! its copies.

use flotilla_api::{Work, conditions, reasons};
use serde_json::{Value, json};

use crate::division::{Division, describe, unplaced};
use crate::keys::ObjectKey;
use crate::works::{copy_holds_now, manifest_status};

/// What one member copy reports, read from its Work.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Copy {
    pub cluster: String,
    /// The hub's Work holds the copy as wanted (the hub object's current generation) and the
    /// member applied it.
    pub current: bool,
    /// The member's Deployment observed its current spec.
    pub observed: bool,
    pub available: bool,
    /// The member is unreachable (`Applied=Unknown` on the Work): the counters are its last
    /// report, not its state, so its replicas count as unavailable.
    pub stale: bool,
    pub replicas: i64,
    pub updated: i64,
    pub ready: i64,
    pub available_replicas: i64,
    pub unavailable: i64,
    /// A StatefulSet's pods at its current revision.
    pub current_replicas: i64,
    /// A StatefulSet's `currentRevision` and `updateRevision`.
    pub current_revision: Option<String>,
    pub update_revision: Option<String>,
}

/// Reads the copy of Deployment `key` on `cluster` from the hub's Work that holds it as wanted
/// (see [`crate::report::Current::work_of`]): what the member reports of it there.
pub fn copy_of(work: &Work, key: &ObjectKey, cluster: &str) -> Copy {
    let manifest = manifest_status(work, key);
    let status = manifest
        .and_then(|m| m.status.clone())
        .unwrap_or(Value::Null);
    let int = |k: &str| status.get(k).and_then(Value::as_i64).unwrap_or(0);
    let text = |k: &str| status.get(k).and_then(Value::as_str).map(str::to_string);
    let observed = manifest.is_some_and(|m| match (m.generation, m.observed_generation) {
        (Some(g), Some(o)) => o >= g,
        _ => false,
    });
    let stale = work
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == conditions::APPLIED))
        .is_some_and(|c| c.status == "Unknown");
    Copy {
        cluster: cluster.to_string(),
        stale,
        current: copy_holds_now(work, key, conditions::APPLIED),
        observed,
        available: copy_holds_now(work, key, conditions::AVAILABLE),
        replicas: int("replicas"),
        updated: int("updatedReplicas"),
        ready: int("readyReplicas"),
        available_replicas: int("availableReplicas"),
        unavailable: int("unavailableReplicas"),
        current_replicas: int("currentReplicas"),
        current_revision: text("currentRevision"),
        update_revision: text("updateRevision"),
    }
}

/// One copy standing for the copies of a duplicated workload (each runs all of it): the most
/// pods any runs, the fewest updated, current, ready and available (an unreachable member's
/// count as neither ready nor available), the most unavailable; current and observed only if
/// every copy is; revisions only where every copy has the same. `None` without copies.
pub fn furthest_behind(copies: &[Copy]) -> Option<Copy> {
    if copies.is_empty() {
        return None;
    }
    let fresh = |c: &Copy, n: i64| if c.stale { 0 } else { n };
    let min = |f: &dyn Fn(&Copy) -> i64| copies.iter().map(f).min().unwrap_or(0);
    let max = |f: &dyn Fn(&Copy) -> i64| copies.iter().map(f).max().unwrap_or(0);
    Some(Copy {
        cluster: copies
            .iter()
            .map(|c| c.cluster.as_str())
            .collect::<Vec<_>>()
            .join(","),
        current: copies.iter().all(|c| c.current),
        observed: copies.iter().all(|c| c.observed),
        available: copies.iter().all(|c| c.available && !c.stale),
        stale: false,
        replicas: max(&|c| c.replicas),
        updated: min(&|c| c.updated),
        ready: min(&|c| fresh(c, c.ready)),
        available_replicas: min(&|c| fresh(c, c.available_replicas)),
        unavailable: max(&|c| if c.stale { c.replicas } else { c.unavailable }),
        current_replicas: min(&|c| c.current_replicas),
        current_revision: agreed(copies, |c| &c.current_revision),
        update_revision: agreed(copies, |c| &c.update_revision),
    })
}

/// The value of `field` when every copy has the same one; `None` when they differ or have none.
fn agreed(copies: &[Copy], field: fn(&Copy) -> &Option<String>) -> Option<String> {
    let first = field(copies.first()?).as_ref()?;
    copies
        .iter()
        .all(|c| field(c).as_ref() == Some(first))
        .then(|| first.clone())
}

/// The distribution, and the replicas no member could take (only held members were left).
fn placed_message(desired: u32, division: &Division) -> String {
    if division.is_empty() {
        return "no member is eligible".to_string();
    }
    match unplaced(desired, division) {
        0 => describe(division),
        n => format!(
            "{}; {n} replica(s) not placed: no member takes new work",
            describe(division)
        ),
    }
}

/// How many of `replicas` may be unavailable under the hub Deployment's `spec.strategy`, as the
/// Deployment controller counts it: `rollingUpdate.maxUnavailable` (default 25%, rounded down;
/// 1 when it and `maxSurge` are both 0), at most `replicas`; 0 for `Recreate` or 0 replicas.
pub fn max_unavailable(spec: &Value, replicas: u32) -> u32 {
    rolling_bounds(spec, replicas).1
}

/// How many pods above `replicas` a rollout of the hub Deployment may run: its
/// `rollingUpdate.maxSurge` (default 25%, rounded up); 0 for `Recreate` or 0 replicas.
pub fn max_surge(spec: &Value, replicas: u32) -> u32 {
    rolling_bounds(spec, replicas).0
}

/// `(maxSurge, maxUnavailable)` of a Deployment's `spec`, resolved against `replicas`.
fn rolling_bounds(spec: &Value, replicas: u32) -> (u32, u32) {
    let strategy = &spec["strategy"];
    if replicas == 0
        || strategy["type"]
            .as_str()
            .is_some_and(|t| t != "RollingUpdate")
    {
        return (0, 0);
    }
    let resolve = |v: &Value, default_percent: u64, round_up: bool| -> u64 {
        let total = u64::from(replicas);
        let percent = |p: u64| {
            let scaled = total * p;
            if round_up {
                scaled.div_ceil(100)
            } else {
                scaled / 100
            }
        };
        match v {
            Value::Number(n) => n.as_u64().unwrap_or(0),
            Value::String(s) => s
                .strip_suffix('%')
                .and_then(|p| p.parse::<u64>().ok())
                .map_or(percent(default_percent), percent),
            _ => percent(default_percent),
        }
    };
    let rolling = &strategy["rollingUpdate"];
    let unavailable = resolve(&rolling["maxUnavailable"], 25, false);
    let surge = resolve(&rolling["maxSurge"], 25, true);
    let unavailable = if unavailable == 0 && surge == 0 {
        1
    } else {
        unavailable
    };
    (
        u32::try_from(surge).unwrap_or(u32::MAX),
        u32::try_from(unavailable.min(u64::from(replicas))).unwrap_or(replicas),
    )
}

/// The hub Deployment's status from its copies: counters summed (an unreachable member's
/// replicas count as unavailable); `observedGeneration` only once every copy applied and
/// observed the current generation; `Available` as the Deployment controller computes it (at
/// least `desired - max_unavailable` replicas available); `Placed` giving the distribution.
pub fn deployment_status(
    generation: Option<i64>,
    desired: u32,
    max_unavailable: u32,
    copies: &[Copy],
    division: &Division,
    now: &str,
) -> Value {
    let sum = |f: fn(&Copy) -> i64| copies.iter().map(f).sum::<i64>();
    // A Deployment of 0 replicas needs no copy to be complete (scaled to 0 it keeps those it
    // has, at 0); any other needs at least one.
    let enough_copies = !copies.is_empty() || desired == 0;
    let all_current = enough_copies && copies.iter().all(|c| c.current && c.observed);
    let fresh = |f: fn(&Copy) -> i64| copies.iter().filter(|c| !c.stale).map(f).sum::<i64>();
    let available = fresh(|c| c.available_replicas);
    let minimum = i64::from(desired) - i64::from(max_unavailable);
    let available_ok = enough_copies && available >= minimum;
    let unreachable: Vec<&str> = copies
        .iter()
        .filter(|c| c.stale)
        .map(|c| c.cluster.as_str())
        .collect();
    let mut available_message = format!(
        "{available} of {desired} replicas available across {} member(s) (at least {} required)",
        copies.len(),
        minimum.max(0)
    );
    if !unreachable.is_empty() {
        available_message.push_str(&format!(
            "; unreachable, counted as unavailable: {}",
            unreachable.join(", ")
        ));
    }
    let condition = |type_: &str, ok: bool, reason: &str, message: String| {
        json!({"type": type_, "status": if ok { "True" } else { "False" }, "reason": reason,
               "message": message, "lastUpdateTime": now, "lastTransitionTime": now})
    };
    let placed = !division.is_empty();
    let mut status = json!({
        "replicas": sum(|c| c.replicas),
        "updatedReplicas": sum(|c| c.updated),
        "readyReplicas": fresh(|c| c.ready),
        "availableReplicas": available,
        "unavailableReplicas": fresh(|c| c.unavailable) + copies.iter().filter(|c| c.stale).map(|c| c.replicas).sum::<i64>(),
        "conditions": [
            condition(
                "Available",
                available_ok,
                if available_ok { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" },
                available_message,
            ),
            condition(
                "Progressing",
                all_current,
                if all_current { "NewReplicaSetAvailable" } else { "ReplicaSetUpdating" },
                if all_current { "every member runs the current generation".to_string() } else { "members are applying the current generation".to_string() },
            ),
            condition(
                "Placed",
                placed,
                if placed { "Placed" } else { "NoEligibleCluster" },
                placed_message(desired, division),
            ),
        ],
    });
    if all_current && let Some(g) = generation {
        status["observedGeneration"] = json!(g);
    }
    status
}

/// The hub StatefulSet's status from its copies (`ordinals`: the ranges of a divided one):
/// counters summed (an unreachable member's pods count as neither ready nor available);
/// `observedGeneration` only once every copy applied and observed the current generation;
/// `currentRevision` and `updateRevision` only where every copy has the same one (members of
/// other Kubernetes versions may name the same template differently); `Placed` giving the
/// ordinals each member runs, and what a move waits for.
pub fn statefulset_status(
    generation: Option<i64>,
    desired: u32,
    copies: &[Copy],
    division: &Division,
    ordinals: Option<&crate::ordinals::Layout>,
    now: &str,
) -> Value {
    let sum = |f: fn(&Copy) -> i64| copies.iter().map(f).sum::<i64>();
    let fresh = |f: fn(&Copy) -> i64| copies.iter().filter(|c| !c.stale).map(f).sum::<i64>();
    let enough_copies = !copies.is_empty() || desired == 0;
    let all_current = enough_copies && copies.iter().all(|c| c.current && c.observed);
    let placed = !division.is_empty();
    let message = match ordinals {
        _ if !placed => "no member is eligible".to_string(),
        None => placed_message(desired, division),
        Some(layout) if !layout.complete() && !layout.waiting_for.is_empty() => format!(
            "ordinals {}; no ordinal moves until {} run(s) only what they are asked for (unreachable members are waited for: a pod is never run twice)",
            layout.describe(),
            layout.waiting_for.join(", ")
        ),
        Some(layout) => format!("ordinals {}", layout.describe()),
    };
    let mut status = json!({
        "replicas": sum(|c| c.replicas),
        "readyReplicas": fresh(|c| c.ready),
        "currentReplicas": sum(|c| c.current_replicas),
        "updatedReplicas": sum(|c| c.updated),
        "availableReplicas": fresh(|c| c.available_replicas),
        "conditions": [{
            "type": conditions::PLACED,
            "status": if placed { "True" } else { "False" },
            "reason": if placed { "Placed" } else { "NoEligibleCluster" },
            "message": message,
            "lastTransitionTime": now,
        }],
    });
    if all_current && let Some(g) = generation {
        status["observedGeneration"] = json!(g);
    }
    if let Some(r) = agreed(copies, |c| &c.current_revision) {
        status["currentRevision"] = json!(r);
    }
    if let Some(r) = agreed(copies, |c| &c.update_revision) {
        status["updateRevision"] = json!(r);
    }
    status
}

/// What one member's copy of a DaemonSet or ReplicaSet reports: its `status`, whether it runs
/// the hub object's current spec (applied and observed), and whether its member is unreachable.
pub struct CountedCopy<'a> {
    pub status: Option<&'a Value>,
    pub current: bool,
    pub stale: bool,
}

/// The hub DaemonSet's status from its copies, each running on its own member's nodes: the
/// counts summed (an unreachable member's pods count as neither ready nor available, but as
/// unavailable), `observedGeneration` only once every copy applied and observed the current
/// spec — so `kubectl rollout status daemonset` and kstatus wait for every member.
pub fn daemonset_status(copies: &[CountedCopy<'_>], generation: Option<i64>) -> Value {
    let count = |c: &CountedCopy<'_>, field: &str| {
        c.status
            .and_then(|s| s.get(field))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    let sum = |field: &str| copies.iter().map(|c| count(c, field)).sum::<i64>();
    let fresh = |field: &str| {
        copies
            .iter()
            .filter(|c| !c.stale)
            .map(|c| count(c, field))
            .sum::<i64>()
    };
    let unreachable: i64 = copies
        .iter()
        .filter(|c| c.stale)
        .map(|c| count(c, "desiredNumberScheduled"))
        .sum();
    let mut status = json!({
        "desiredNumberScheduled": sum("desiredNumberScheduled"),
        "currentNumberScheduled": sum("currentNumberScheduled"),
        "updatedNumberScheduled": sum("updatedNumberScheduled"),
        "numberMisscheduled": sum("numberMisscheduled"),
        "numberReady": fresh("numberReady"),
        "numberAvailable": fresh("numberAvailable"),
        "numberUnavailable": fresh("numberUnavailable") + unreachable,
    });
    if !copies.is_empty()
        && copies.iter().all(|c| c.current)
        && let Some(g) = generation
    {
        status["observedGeneration"] = json!(g);
    }
    status
}

/// The hub ReplicaSet's status from its copies, each running its own pods: divided, `replicas`
/// and `fullyLabeledReplicas` summed and `readyReplicas` and `availableReplicas` summed over
/// reachable members; `duplicated`, each the copy furthest behind's (the fewest), as a
/// duplicated Deployment shows. `observedGeneration` once every copy applied and observed the
/// current spec.
pub fn replicaset_status(
    copies: &[CountedCopy<'_>],
    duplicated: bool,
    generation: Option<i64>,
) -> Value {
    let count = |c: &CountedCopy<'_>, field: &str| {
        c.status
            .and_then(|s| s.get(field))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    let sum = |field: &str, reachable_only: bool| {
        let counts = copies.iter().map(|c| {
            if reachable_only && c.stale {
                0
            } else {
                count(c, field)
            }
        });
        if duplicated {
            counts.min().unwrap_or(0)
        } else {
            counts.sum::<i64>()
        }
    };
    let mut status = json!({
        "replicas": sum("replicas", false),
        "fullyLabeledReplicas": sum("fullyLabeledReplicas", false),
        "readyReplicas": sum("readyReplicas", true),
        "availableReplicas": sum("availableReplicas", true),
    });
    if !copies.is_empty()
        && copies.iter().all(|c| c.current)
        && let Some(g) = generation
    {
        status["observedGeneration"] = json!(g);
    }
    status
}

/// What one member's copy of a Job reports: its `status`, or `None` before it reports one.
pub struct JobCopy<'a> {
    pub cluster: &'a str,
    pub status: Option<&'a Value>,
}

fn job_condition<'a>(status: &'a Value, type_: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_ && c["status"] == "True")
}

/// The hub Job's status from its copies (`old`: the hub Job's status now), as the hub's
/// apiserver accepts it from a controller other than its own Job controller: counters summed
/// (`succeeded` and `failed` never lower than before), `ready` at most `active`, `startTime` set
/// once (the earliest copy's); `Complete` (after `SuccessCriteriaMet`, with the latest copy's
/// `completionTime`) once every copy is complete and together they succeeded `completions`
/// times (the hub Job's; a share of a member that left and that no member took since is
/// missing), `Failed` (after `FailureTarget`, with the
/// failed member's reason and message) once one copy failed and none is running any more. A
/// finished hub Job stays as it is.
pub fn job_status(
    copies: &[JobCopy<'_>],
    completions: Option<i64>,
    old: Option<&Value>,
    now: &str,
) -> Value {
    let old = old.cloned().unwrap_or_else(|| json!({}));
    if job_condition(&old, "Complete").is_some() || job_condition(&old, "Failed").is_some() {
        return old;
    }
    let reported: Vec<(&str, &Value)> = copies
        .iter()
        .filter_map(|c| Some((c.cluster, c.status?)))
        .collect();
    let sum = |field: &str| -> i64 {
        reported
            .iter()
            .map(|(_, s)| s[field].as_i64().unwrap_or(0))
            .sum()
    };
    let active = sum("active");
    let terminating = sum("terminating");
    let mut status = json!({
        "active": active,
        "ready": sum("ready").min(active),
        "succeeded": sum("succeeded").max(old["succeeded"].as_i64().unwrap_or(0)),
        "failed": sum("failed").max(old["failed"].as_i64().unwrap_or(0)),
    });
    if terminating > 0 {
        status["terminating"] = json!(terminating);
    }
    let start = old["startTime"].as_str().map(str::to_string).or_else(|| {
        reported
            .iter()
            .filter_map(|(_, s)| s["startTime"].as_str())
            .min()
            .map(str::to_string)
    });
    if let Some(start) = &start {
        status["startTime"] = json!(start);
    }
    let condition = |type_: &str, reason: &str, message: &str| {
        json!({"type": type_, "status": "True", "reason": reason, "message": message,
               "lastProbeTime": now, "lastTransitionTime": now})
    };
    let all_complete = !copies.is_empty()
        && reported.len() == copies.len()
        && reported
            .iter()
            .all(|(_, s)| job_condition(s, "Complete").is_some());
    let failed = reported
        .iter()
        .find_map(|(cluster, s)| Some((*cluster, job_condition(s, "Failed")?)));
    let finished = active == 0 && terminating == 0 && start.is_some();
    let enough = completions.is_none_or(|c| sum("succeeded") >= c);
    if all_complete && finished && enough {
        let completed = reported
            .iter()
            .filter_map(|(_, s)| s["completionTime"].as_str())
            .max()
            .map_or_else(|| now.to_string(), str::to_string);
        let members: Vec<&str> = reported.iter().map(|(c, _)| *c).collect();
        let message = format!("complete in every member: {}", members.join(", "));
        status["completionTime"] = json!(completed.max(start.clone().unwrap_or_default()));
        status["conditions"] = json!([
            condition("SuccessCriteriaMet", "CompletionsReached", &message),
            condition("Complete", "CompletionsReached", &message),
        ]);
    } else if let Some((cluster, why)) = failed
        && finished
    {
        let reason = why["reason"].as_str().unwrap_or("BackoffLimitExceeded");
        let message = format!(
            "failed in {cluster}: {}",
            why["message"].as_str().unwrap_or_default()
        );
        status["conditions"] = json!([
            condition("FailureTarget", reason, &message),
            condition("Failed", reason, &message),
        ]);
    }
    status
}

/// The hub CronJob's status from its copies (`old`: the hub CronJob's status now): the latest
/// `lastScheduleTime` and `lastSuccessfulTime` of any copy, never earlier than before. The
/// Jobs a copy runs are its member's, so `active` (references to them) stays out.
pub fn cronjob_status(copies: &[JobCopy<'_>], old: Option<&Value>) -> Value {
    let mut status = json!({});
    for field in ["lastScheduleTime", "lastSuccessfulTime"] {
        let latest = copies
            .iter()
            .filter_map(|c| c.status?[field].as_str())
            .chain(old.and_then(|o| o[field].as_str()))
            .max();
        if let Some(t) = latest {
            status[field] = json!(t);
        }
    }
    status
}

/// The hub Service's or Ingress's status from its copies: the load-balancer ingress of every
/// member (each member's load balancer is one way in), each address once, in a stable order.
pub fn service_status(copies: &[JobCopy<'_>]) -> Value {
    let mut ingress: Vec<&Value> = copies
        .iter()
        .filter_map(|c| c.status?.pointer("/loadBalancer/ingress")?.as_array())
        .flatten()
        .collect();
    ingress.sort_by_key(|i| i.to_string());
    ingress.dedup();
    if ingress.is_empty() {
        json!({"loadBalancer": {}})
    } else {
        json!({"loadBalancer": {"ingress": ingress}})
    }
}

/// The hub PersistentVolumeClaim's status from its copies: `Bound` once every copy is bound
/// (with the smallest capacity any copy got, which every member has at least), `Lost` when one
/// lost its volume, `Pending` otherwise.
pub fn claim_status(copies: &[JobCopy<'_>]) -> Value {
    fn phase<'a>(c: &JobCopy<'a>) -> Option<&'a str> {
        c.status.and_then(|s| s["phase"].as_str())
    }
    if copies.iter().any(|c| phase(c) == Some("Lost")) {
        return json!({"phase": "Lost"});
    }
    if copies.is_empty() || copies.iter().any(|c| phase(c) != Some("Bound")) {
        return json!({"phase": "Pending"});
    }
    let mut status = json!({"phase": "Bound"});
    if let Some(first) = copies.first().and_then(|c| c.status) {
        status["accessModes"] = first["accessModes"].clone();
        // Quantities compare by their canonical bytes only within one unit: keep the first
        // copy's unless every copy reports the same.
        let capacity = &first["capacity"];
        if copies
            .iter()
            .all(|c| c.status.is_some_and(|s| &s["capacity"] == capacity))
        {
            status["capacity"] = capacity.clone();
        }
    }
    status
}

/// The hub status of a custom kind from its copies, as its profile says: each of `sums` (JSON
/// pointers into the status, such as `/status/readyReplicas`) summed over the copies that
/// report it. Nothing else: the splitter does not know the kind's other status fields (an Argo
/// Rollout's `observedGeneration` is a string).
/// The `Ready` condition of a hub object whose copies on `copies` members are healthy but for
/// those on `not_ready` (as a WorkloadProfile with `readyCondition` asks), written at `now`.
pub fn ready_condition(copies: usize, not_ready: &[&str], now: &str) -> Value {
    let (status, reason, message) = if copies == 0 {
        (
            "False",
            reasons::NOTHING_PLACED,
            "no member runs a copy".to_string(),
        )
    } else if not_ready.is_empty() {
        (
            "True",
            reasons::ALL_COPIES,
            format!("every copy is healthy ({copies} of {copies})"),
        )
    } else {
        (
            "False",
            reasons::WAITING_FOR_COPIES,
            format!(
                "{} of {copies} copies are healthy; not yet on {}",
                copies - not_ready.len(),
                not_ready.join(", ")
            ),
        )
    };
    json!({"type": "Ready", "status": status, "reason": reason, "message": message,
           "lastTransitionTime": now, "lastUpdateTime": now})
}

pub fn summed_status(copies: &[JobCopy<'_>], sums: &[String]) -> Value {
    let mut status = json!({});
    for pointer in sums {
        let Some(field) = pointer.strip_prefix("/status/") else {
            continue;
        };
        let total: i64 = copies
            .iter()
            .filter_map(|c| c.status?.pointer(&format!("/{field}"))?.as_i64())
            .sum();
        let mut at = &mut status;
        let mut keys = field.split('/').peekable();
        while let Some(key) = keys.next() {
            if keys.peek().is_none() {
                at[key] = json!(total);
                break;
            }
            if !at[key].is_object() {
                at[key] = json!({});
            }
            at = &mut at[key];
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_deployment_scaled_to_zero_is_complete_and_available() {
        let division: Division = [("a".to_string(), 0), ("b".to_string(), 0)].into();
        let copies = [copy("a", 0, true), copy("b", 0, true)];
        for copies in [&copies[..], &[]] {
            let s = deployment_status(Some(4), 0, 0, copies, &division, "t");
            assert_eq!(s["observedGeneration"], 4, "{s}");
            assert_eq!(s["replicas"], 0);
            assert_eq!(s["conditions"][0]["type"], "Available");
            assert_eq!(s["conditions"][0]["status"], "True", "{s}");
            assert_eq!(s["conditions"][1]["status"], "True", "{s}");
        }
        // One replica wanted and no copy yet: neither.
        let s = deployment_status(Some(4), 1, 0, &[], &division, "t");
        assert!(s.get("observedGeneration").is_none(), "{s}");
        assert_eq!(s["conditions"][0]["status"], "False");
    }

    fn copy(cluster: &str, replicas: i64, available: bool) -> Copy {
        Copy {
            cluster: cluster.into(),
            current: true,
            observed: true,
            available,
            stale: false,
            replicas,
            updated: replicas,
            ready: replicas,
            available_replicas: if available { replicas } else { 0 },
            unavailable: if available { 0 } else { replicas },
            ..Copy::default()
        }
    }

    fn division(pairs: &[(&str, u32)]) -> Division {
        pairs.iter().map(|(c, n)| (c.to_string(), *n)).collect()
    }

    #[test]
    fn counters_are_summed_and_availability_computed() {
        let d = division(&[("m1", 4), ("m2", 3), ("m3", 3)]);
        let s = deployment_status(
            Some(2),
            10,
            0,
            &[
                copy("m1", 4, true),
                copy("m2", 3, true),
                copy("m3", 3, true),
            ],
            &d,
            "t",
        );
        assert_eq!(s["availableReplicas"], 10);
        assert_eq!(s["observedGeneration"], 2);
        assert_eq!(s["conditions"][0]["status"], "True");
        assert_eq!(s["conditions"][2]["message"], "m1=4 m2=3 m3=3");
        let short = deployment_status(
            Some(2),
            12,
            0,
            &[copy("m1", 4, true)],
            &division(&[("m1", 4)]),
            "t",
        );
        assert_eq!(
            short["conditions"][2]["message"],
            "m1=4; 8 replica(s) not placed: no member takes new work"
        );

        let degraded = [
            copy("m1", 4, true),
            copy("m2", 3, false),
            copy("m3", 3, true),
        ];
        let s = deployment_status(Some(2), 10, 2, &degraded, &d, "t");
        assert_eq!(s["availableReplicas"], 7);
        assert_eq!(s["unavailableReplicas"], 3);
        assert_eq!(s["conditions"][0]["status"], "False");
        // With maxUnavailable 3, 7 of 10 is enough, as for a Deployment in one cluster.
        let s = deployment_status(Some(2), 10, 3, &degraded, &d, "t");
        assert_eq!(s["conditions"][0]["status"], "True");
    }

    #[test]
    fn an_unreachable_members_replicas_count_as_unavailable() {
        let d = division(&[("m1", 4), ("m2", 3), ("m3", 3)]);
        let mut gone = copy("m1", 4, true);
        gone.stale = true;
        let s = deployment_status(
            Some(2),
            10,
            2,
            &[gone, copy("m2", 3, true), copy("m3", 3, true)],
            &d,
            "t",
        );
        assert_eq!(s["availableReplicas"], 6);
        assert_eq!(s["unavailableReplicas"], 4);
        assert_eq!(s["conditions"][0]["status"], "False");
        let message = s["conditions"][0]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("unreachable, counted as unavailable: m1"),
            "{message}"
        );
    }

    fn sts_copy(cluster: &str, ready: i64, current: &str, update: &str) -> Copy {
        Copy {
            cluster: cluster.to_string(),
            current: true,
            observed: true,
            available: ready > 0,
            replicas: 1,
            ready,
            available_replicas: ready,
            updated: i64::from(current == update),
            current_replicas: 1,
            current_revision: Some(current.to_string()),
            update_revision: Some(update.to_string()),
            ..Copy::default()
        }
    }

    #[test]
    fn a_statefulset_sums_its_copies_and_names_a_revision_only_all_agree_on() {
        use crate::ordinals::{Held, Range, lay_out};
        let d = division(&[("a", 1), ("b", 1), ("c", 1)]);
        let cs: Vec<crate::division::Candidate> = ["a", "b", "c"]
            .iter()
            .map(|c| crate::division::Candidate::new(*c, 1))
            .collect();
        let layout = lay_out(
            Range::new(0, 3),
            &cs,
            &std::collections::BTreeMap::<String, Held>::new(),
            false,
        )
        .expect("layout");
        let copies = [
            sts_copy("a", 1, "db-1", "db-1"),
            sts_copy("b", 1, "db-1", "db-1"),
            sts_copy("c", 1, "db-1", "db-1"),
        ];
        let s = statefulset_status(Some(2), 3, &copies, &d, Some(&layout), "t");
        assert_eq!(s["replicas"], 3);
        assert_eq!(s["readyReplicas"], 3);
        assert_eq!(s["updatedReplicas"], 3);
        assert_eq!(s["observedGeneration"], 2);
        assert_eq!(s["currentRevision"], "db-1");
        assert_eq!(s["updateRevision"], "db-1");
        assert_eq!(s["conditions"][0]["message"], "ordinals a=0 b=1 c=2");
        // Mid-rollout in one member: the update revision is common, the current one is not.
        let rolling = [
            sts_copy("a", 1, "db-1", "db-2"),
            sts_copy("b", 1, "db-2", "db-2"),
            sts_copy("c", 1, "db-2", "db-2"),
        ];
        let s = statefulset_status(Some(3), 3, &rolling, &d, Some(&layout), "t");
        assert!(s.get("currentRevision").is_none(), "{s}");
        assert_eq!(s["updateRevision"], "db-2");
        assert_eq!(s["updatedReplicas"], 2);
        // An unreachable member's pods are not counted ready; a copy behind holds the generation.
        let mut behind = copies.clone();
        behind[2].stale = true;
        behind[1].observed = false;
        let s = statefulset_status(Some(2), 3, &behind, &d, Some(&layout), "t");
        assert_eq!(s["readyReplicas"], 2);
        assert!(s.get("observedGeneration").is_none(), "{s}");
    }

    #[test]
    fn a_duplicated_workload_shows_its_copy_furthest_behind() {
        let mut copies = vec![copy("a", 2, true), copy("b", 2, true)];
        copies[1].updated = 1;
        copies[1].replicas = 3;
        let one = furthest_behind(&copies).expect("a copy");
        assert_eq!((one.replicas, one.updated, one.ready), (3, 1, 2));
        let d = division(&[("a", 2), ("b", 2)]);
        let s = deployment_status(Some(1), 2, 0, &[one], &d, "t");
        assert_eq!(s["replicas"], 3);
        assert_eq!(s["updatedReplicas"], 1);
        // An unreachable member's copy is not ready, whatever it said last.
        let mut stale = vec![copy("a", 2, true), copy("b", 2, true)];
        stale[1].stale = true;
        let one = furthest_behind(&stale).expect("a copy");
        assert_eq!(
            (one.ready, one.available_replicas, one.unavailable),
            (0, 0, 2)
        );
        assert!(furthest_behind(&[]).is_none());
    }

    #[test]
    fn a_daemonset_sums_the_pods_of_every_members_nodes() {
        let a = json!({"desiredNumberScheduled": 3, "currentNumberScheduled": 3,
                       "updatedNumberScheduled": 3, "numberReady": 3, "numberAvailable": 3});
        let b = json!({"desiredNumberScheduled": 2, "currentNumberScheduled": 2,
                       "updatedNumberScheduled": 2, "numberReady": 2, "numberAvailable": 2});
        let copy = |status, current, stale| CountedCopy {
            status: Some(status),
            current,
            stale,
        };
        let s = daemonset_status(&[copy(&a, true, false), copy(&b, true, false)], Some(4));
        assert_eq!(s["desiredNumberScheduled"], 5);
        assert_eq!(s["numberAvailable"], 5);
        assert_eq!(s["observedGeneration"], 4);
        let s = daemonset_status(&[copy(&a, true, false), copy(&b, false, true)], Some(4));
        assert_eq!(s["numberAvailable"], 3);
        assert_eq!(s["numberUnavailable"], 2);
        assert!(s.get("observedGeneration").is_none(), "{s}");
        assert!(
            daemonset_status(&[], Some(1))
                .get("observedGeneration")
                .is_none()
        );
    }

    #[test]
    fn max_unavailable_follows_the_deployment_strategy() {
        let spec = |v: Value| v;
        assert_eq!(
            max_unavailable(&spec(json!({})), 10),
            2,
            "25% of 10, rounded down"
        );
        assert_eq!(
            max_unavailable(
                &spec(json!({"strategy": {"rollingUpdate": {"maxUnavailable": 3}}})),
                10
            ),
            3
        );
        assert_eq!(
            max_unavailable(
                &spec(json!({"strategy": {"rollingUpdate": {"maxUnavailable": "50%"}}})),
                5
            ),
            2
        );
        assert_eq!(
            max_unavailable(
                &spec(json!({"strategy": {"rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0}}})),
                5
            ),
            1
        );
        assert_eq!(
            max_unavailable(&spec(json!({"strategy": {"type": "Recreate"}})), 10),
            0
        );
        assert_eq!(max_unavailable(&spec(json!({})), 0), 0);
        assert_eq!(
            max_unavailable(
                &spec(json!({"strategy": {"rollingUpdate": {"maxUnavailable": 99}}})),
                4
            ),
            4
        );
    }

    #[test]
    fn observed_generation_waits_for_every_copy() {
        let mut behind = copy("m2", 3, true);
        behind.current = false;
        let s = deployment_status(
            Some(3),
            7,
            0,
            &[copy("m1", 4, true), behind],
            &division(&[("m1", 4), ("m2", 3)]),
            "t",
        );
        assert!(s.get("observedGeneration").is_none());
        assert_eq!(s["conditions"][1]["status"], "False");
    }

    fn job_copy(active: i64, succeeded: i64, start: &str, complete: Option<&str>) -> Value {
        let mut s = json!({"active": active, "ready": active, "succeeded": succeeded,
                           "startTime": start});
        if let Some(done) = complete {
            s["completionTime"] = json!(done);
            s["conditions"] = json!([
                {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached"},
                {"type": "Complete", "status": "True", "reason": "CompletionsReached"}]);
        }
        s
    }

    const NOW: &str = "2026-12-02T10:01:00Z";

    #[test]
    fn a_job_is_complete_on_the_hub_once_every_copy_is() {
        let a = job_copy(0, 1, "2026-12-02T10:00:05Z", Some("2026-12-02T10:00:20Z"));
        let b = job_copy(1, 0, "2026-12-02T10:00:01Z", None);
        let two = |b: &Value, old: Option<&Value>| {
            job_status(
                &[
                    JobCopy {
                        cluster: "m1",
                        status: Some(&a),
                    },
                    JobCopy {
                        cluster: "m2",
                        status: Some(b),
                    },
                ],
                Some(2),
                old,
                NOW,
            )
        };
        let s = two(&b, None);
        assert_eq!(
            (s["active"].clone(), s["succeeded"].clone()),
            (json!(1), json!(1))
        );
        assert_eq!(s["startTime"], "2026-12-02T10:00:01Z", "the earliest start");
        assert!(
            s.get("conditions").is_none() && s.get("completionTime").is_none(),
            "{s}"
        );

        let b = job_copy(0, 1, "2026-12-02T10:00:01Z", Some("2026-12-02T10:00:30Z"));
        let s = two(&b, Some(&json!({"startTime": "2026-12-02T10:00:03Z"})));
        assert_eq!(s["succeeded"], 2);
        assert_eq!(
            s["startTime"], "2026-12-02T10:00:03Z",
            "set once, never moved"
        );
        assert_eq!(
            s["completionTime"], "2026-12-02T10:00:30Z",
            "the latest completion"
        );
        let types: Vec<&str> = s["conditions"]
            .as_array()
            .expect("conditions")
            .iter()
            .filter_map(|c| c["type"].as_str())
            .collect();
        assert_eq!(types, ["SuccessCriteriaMet", "Complete"]);
        // Finished, it stays as it is.
        assert_eq!(job_status(&[], Some(2), Some(&s), NOW), s);
    }

    #[test]
    fn a_job_fails_on_the_hub_once_a_copy_failed_and_none_runs() {
        let failed = json!({"active": 0, "failed": 2, "startTime": "2026-12-02T10:00:00Z",
            "conditions": [{"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"},
                           {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                            "message": "Job has reached the specified backoff limit"}]});
        let running = job_copy(1, 0, "2026-12-02T10:00:00Z", None);
        let both = |other: &Value| {
            job_status(
                &[
                    JobCopy {
                        cluster: "m1",
                        status: Some(&failed),
                    },
                    JobCopy {
                        cluster: "m2",
                        status: Some(other),
                    },
                ],
                None,
                Some(&json!({"failed": 3})),
                NOW,
            )
        };
        let s = both(&running);
        assert!(s.get("conditions").is_none(), "m2 still runs: {s}");
        assert_eq!(s["failed"], 3, "never lower than before");
        let stopped = job_copy(0, 0, "2026-12-02T10:00:00Z", None);
        let s = both(&stopped);
        let conditions = s["conditions"].as_array().expect("conditions");
        assert_eq!(conditions[0]["type"], "FailureTarget");
        assert_eq!(conditions[1]["type"], "Failed");
        assert_eq!(conditions[1]["reason"], "BackoffLimitExceeded");
        assert!(
            conditions[1]["message"]
                .as_str()
                .is_some_and(|m| m.contains("failed in m1"))
        );
        // A copy that has not reported yet keeps the hub Job from completing.
        let done = job_copy(0, 1, "2026-12-02T10:00:00Z", Some("2026-12-02T10:00:09Z"));
        let s = job_status(
            &[
                JobCopy {
                    cluster: "m1",
                    status: Some(&done),
                },
                JobCopy {
                    cluster: "m2",
                    status: None,
                },
            ],
            None,
            None,
            NOW,
        );
        assert!(s.get("conditions").is_none(), "{s}");
        // Every copy complete, but the share of a member that left is still missing.
        let s = job_status(
            &[JobCopy {
                cluster: "m1",
                status: Some(&done),
            }],
            Some(3),
            None,
            NOW,
        );
        assert!(s.get("conditions").is_none(), "1 of 3 completions: {s}");
    }

    #[test]
    fn a_cronjob_shows_the_latest_schedule_of_any_copy() {
        let a = json!({"lastScheduleTime": "2026-12-02T10:01:00Z",
                       "lastSuccessfulTime": "2026-12-02T10:01:09Z",
                       "active": [{"kind": "Job", "name": "pi-29000001"}]});
        let b = json!({"lastScheduleTime": "2026-12-02T10:02:00Z"});
        let s = cronjob_status(
            &[
                JobCopy {
                    cluster: "m1",
                    status: Some(&a),
                },
                JobCopy {
                    cluster: "m2",
                    status: Some(&b),
                },
                JobCopy {
                    cluster: "m3",
                    status: None,
                },
            ],
            Some(&json!({"lastSuccessfulTime": "2026-12-02T10:01:30Z"})),
        );
        assert_eq!(
            s,
            json!({"lastScheduleTime": "2026-12-02T10:02:00Z",
                   "lastSuccessfulTime": "2026-12-02T10:01:30Z"})
        );
        assert_eq!(cronjob_status(&[], None), json!({}), "nothing to say yet");
    }

    fn reported(cluster: &'static str, status: &'static Value) -> JobCopy<'static> {
        JobCopy {
            cluster,
            status: Some(status),
        }
    }

    #[test]
    fn a_service_lists_every_members_load_balancer_once() {
        let a = Box::leak(Box::new(
            json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}),
        ));
        let b = Box::leak(Box::new(json!({"loadBalancer": {"ingress": [
            {"hostname": "lb.member2.example"}, {"ip": "192.0.2.10"}]}})));
        let none = Box::leak(Box::new(json!({"loadBalancer": {}})));
        let status = service_status(&[
            reported("m1", a),
            reported("m2", b),
            reported("m3", none),
            JobCopy {
                cluster: "m4",
                status: None,
            },
        ]);
        assert_eq!(
            status,
            json!({"loadBalancer": {"ingress": [
                {"hostname": "lb.member2.example"}, {"ip": "192.0.2.10"}]}})
        );
        assert_eq!(service_status(&[]), json!({"loadBalancer": {}}));
    }

    #[test]
    fn a_claim_is_bound_on_the_hub_once_every_copy_is() {
        let bound = Box::leak(Box::new(json!({"phase": "Bound",
            "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}})));
        let pending = Box::leak(Box::new(json!({"phase": "Pending"})));
        let lost = Box::leak(Box::new(json!({"phase": "Lost"})));
        assert_eq!(
            claim_status(&[reported("m1", bound), reported("m2", bound)]),
            json!({"phase": "Bound", "accessModes": ["ReadWriteOnce"],
                   "capacity": {"storage": "1Gi"}})
        );
        assert_eq!(
            claim_status(&[reported("m1", bound), reported("m2", pending)]),
            json!({"phase": "Pending"})
        );
        assert_eq!(
            claim_status(&[reported("m1", bound), reported("m2", lost)]),
            json!({"phase": "Lost"})
        );
        assert_eq!(claim_status(&[]), json!({"phase": "Pending"}));
    }

    #[test]
    fn a_replicaset_sums_its_copies_and_an_unreachable_ones_pods_are_not_ready() {
        let a = json!({"replicas": 2, "fullyLabeledReplicas": 2, "readyReplicas": 2, "availableReplicas": 2});
        let b = json!({"replicas": 1, "fullyLabeledReplicas": 1, "readyReplicas": 1, "availableReplicas": 1});
        let copy = |status: &'static Value, current: bool, stale: bool| CountedCopy {
            status: Some(status),
            current,
            stale,
        };
        let (a, b): (&'static Value, &'static Value) =
            (Box::leak(Box::new(a)), Box::leak(Box::new(b)));
        assert_eq!(
            replicaset_status(
                &[copy(a, true, false), copy(b, true, false)],
                false,
                Some(4)
            ),
            json!({"replicas": 3, "fullyLabeledReplicas": 3, "readyReplicas": 3,
                   "availableReplicas": 3, "observedGeneration": 4})
        );
        assert_eq!(
            replicaset_status(
                &[copy(a, true, false), copy(b, false, true)],
                false,
                Some(4)
            ),
            json!({"replicas": 3, "fullyLabeledReplicas": 3, "readyReplicas": 2,
                   "availableReplicas": 2})
        );
        // Duplicated: the copy furthest behind.
        assert_eq!(
            replicaset_status(&[copy(a, true, false), copy(b, true, false)], true, Some(4)),
            json!({"replicas": 1, "fullyLabeledReplicas": 1, "readyReplicas": 1,
                   "availableReplicas": 1, "observedGeneration": 4})
        );
    }

    #[test]
    fn a_custom_kind_sums_the_fields_its_profile_names() {
        let a: &'static Value = Box::leak(Box::new(
            json!({"readyReplicas": 2, "canary": {"weight": 10}, "phase": "Healthy"}),
        ));
        let b: &'static Value = Box::leak(Box::new(json!({"readyReplicas": 1})));
        let sums = [
            "/status/readyReplicas".to_string(),
            "/status/canary/weight".to_string(),
        ];
        assert_eq!(
            summed_status(&[reported("m1", a), reported("m2", b)], &sums),
            json!({"readyReplicas": 3, "canary": {"weight": 10}})
        );
        assert_eq!(
            summed_status(
                &[JobCopy {
                    cluster: "m1",
                    status: None
                }],
                &sums
            ),
            json!({"readyReplicas": 0, "canary": {"weight": 0}})
        );
    }

    #[test]
    fn a_profiled_kind_is_ready_once_every_copy_is_healthy_and_says_which_are_not() {
        let ready = ready_condition(3, &[], "t");
        assert_eq!(ready["type"], "Ready");
        assert_eq!(ready["status"], "True");
        assert_eq!(ready["reason"], reasons::ALL_COPIES);
        let waiting = ready_condition(3, &["m2", "m3"], "t");
        assert_eq!(waiting["status"], "False");
        assert_eq!(waiting["reason"], reasons::WAITING_FOR_COPIES);
        assert_eq!(
            waiting["message"],
            "1 of 3 copies are healthy; not yet on m2, m3"
        );
        assert_eq!(ready_condition(0, &[], "t")["status"], "False");
        for field in ["lastTransitionTime", "lastUpdateTime"] {
            assert_eq!(ready[field], "t", "{field}");
        }
    }
}
