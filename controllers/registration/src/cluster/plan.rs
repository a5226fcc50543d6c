//! What one pass of a Cluster decides, with no I/O: from the Cluster and what the pass observed
//! ([`Observed`]) to the writes it makes and the status it reports ([`Plan`]).

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_api::condition::set_condition;
use flotilla_api::{
    Cluster, ClusterStatus, SyncMode, Taint, annotations, conditions, labels, names, reasons,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde_json::{Value, json};

use crate::health::{self, ProbeOutcome, Timing, Verdict};

/// What a pass of a Cluster reads besides the Cluster.
#[derive(Clone, Debug)]
pub struct Observed {
    pub now: Timestamp,
    /// Push mode: what probing the member found.
    pub probe: Option<ProbeOutcome>,
    /// Pull mode: when the agent last renewed its Lease (`None`: no Lease).
    pub lease_renewed: Option<Timestamp>,
    /// The Cluster's hub namespace `flotilla-cluster-<name>`, as it is.
    pub namespace: Option<Namespace>,
}

/// The controller's settings a plan reads.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `--auto-accept`: pull-mode Clusters are accepted without `hubAcceptsClient`.
    pub auto_accept: bool,
    /// `--grace-period`: how long a member may be silent before `Ready` turns `Unknown`.
    pub grace_period: Duration,
    /// `--probe-interval`: when a Cluster is looked at again.
    pub probe_interval: Duration,
    /// Whether the hub syncer is granted the data of placed Secrets (`--syncer-service-account`
    /// and `--syncer-cluster-role`).
    pub grants_syncer: bool,
}

/// What a pass of a Cluster does.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The Cluster's taints with `timeAdded` stamped, when one lacked it (`tolerationSeconds`
    /// of `NoExecute` tolerations count from there).
    pub stamp_taints: Option<Vec<Taint>>,
    pub namespace: NamespaceStep,
    /// The agent's access to the hub (pull mode).
    pub agent_access: Access,
    /// The hub syncer's access to the data of the Secrets placed on the member.
    pub syncer_access: Access,
    /// The status registration owns, as server-side applied.
    pub status: Value,
    /// `Accepted`, `Joined`, `Ready` and `Schedulable` as decided: an Event for each transition.
    pub verdicts: Vec<Verdict>,
    /// When to look again.
    pub requeue: Duration,
}

/// What becomes of the Cluster's hub namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceStep {
    /// Not accepted: left as it is.
    Leave,
    /// Missing: made, marked with the Cluster's UID.
    Make,
    /// The Cluster's, without its mark or its label: they are applied (a namespace from before
    /// marks gets its mark).
    Mark,
    /// The Cluster's, marked and labelled: nothing to write (every pass of every Cluster wrote
    /// the same namespace again: a request the hub processes in full, per member per probe).
    Marked,
    /// Being deleted (a Cluster of this name was removed): the pass waits for it to go.
    Terminating,
    /// Someone else's: never used (why).
    Taken(String),
}

/// A grant to make, take away or leave as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Grant,
    Revoke,
    Leave,
}

/// Plans one pass of `cluster`.
pub fn plan(cluster: &Cluster, observed: &Observed, settings: &Settings) -> Plan {
    let old = cluster.status.clone().unwrap_or_default();
    let spec = &cluster.spec;
    let now = observed.now;
    let accepted = health::accepted(
        spec,
        settings.auto_accept,
        condition(&old, conditions::ACCEPTED),
    );
    let is_accepted = accepted.status == "True";
    let joined_before = condition(&old, conditions::JOINED).is_some_and(|c| c.status == "True");
    let namespace = if is_accepted {
        namespace_step(cluster, observed.namespace.as_ref(), joined_before)
    } else {
        NamespaceStep::Leave
    };
    let usable = is_accepted && !matches!(namespace, NamespaceStep::Taken(_));
    let agent_access = match (spec.sync_mode, usable) {
        (SyncMode::Pull, true) => Access::Grant,
        (SyncMode::Pull, false) => Access::Revoke,
        (SyncMode::Push, _) => Access::Leave,
    };
    // The hub syncer serves push-mode members only; a pull member's syncer reads with the
    // agent's rights.
    let syncer_access = match (settings.grants_syncer && usable, spec.sync_mode) {
        (false, _) => Access::Leave,
        (true, SyncMode::Push) => Access::Grant,
        (true, SyncMode::Pull) => Access::Revoke,
    };

    let timing = |last: Option<Timestamp>| Timing {
        now,
        last_heartbeat: last,
        created: cluster.metadata.creation_timestamp.as_ref().map(|t| t.0),
        grace: settings.grace_period,
    };
    let mut status = json!({});
    let last_heartbeat = old.last_heartbeat_time.as_ref().map(|t| t.0);
    let (last_heartbeat, mut joined, mut ready) = match spec.sync_mode {
        SyncMode::Push => {
            let probe = observed.probe.clone().unwrap_or_else(|| {
                ProbeOutcome::Unreachable("the member was not probed".to_string())
            });
            let seen = Seen::of(&old, probe, now, last_heartbeat);
            let (joined, ready) = health::push_health(
                &seen.outcome,
                condition(&old, conditions::READY),
                joined_before,
                &timing(seen.last_heartbeat),
            );
            // Push mode: this controller owns every observed field.
            status["kubernetesVersion"] = json!(seen.version);
            status["allocatable"] = json!(seen.allocatable);
            status["clusterId"] = json!(seen.cluster_id);
            (seen.last_heartbeat, joined, ready)
        }
        SyncMode::Pull => {
            // A Lease in a namespace that is not the Cluster's is someone else's word.
            let renewed = observed.lease_renewed.filter(|_| usable);
            // Pull mode: the agent reports version and allocatable; this controller owns the
            // conditions and the heartbeat time.
            let (joined, ready) = health::pull_health(is_accepted, renewed, &timing(renewed));
            (renewed.or(last_heartbeat), joined, ready)
        }
    };
    status["lastHeartbeatTime"] = json!(last_heartbeat.map(Time));
    if let NamespaceStep::Taken(why) = &namespace {
        joined = Verdict::new(
            conditions::JOINED,
            "False",
            reasons::NAMESPACE_TAKEN,
            why.clone(),
        );
        ready = Verdict::new(
            conditions::READY,
            "False",
            reasons::NAMESPACE_TAKEN,
            why.clone(),
        );
    }

    let verdicts = vec![accepted, joined, ready, health::schedulable(spec)];
    let mut conditions = old.conditions.clone();
    for v in &verdicts {
        set_condition(
            &mut conditions,
            v.into_condition(now, cluster.metadata.generation),
        );
    }
    // Only the condition types this controller owns.
    let owned: Vec<&Condition> = conditions
        .iter()
        .filter(|c| verdicts.iter().any(|v| v.type_ == c.type_))
        .collect();
    status["conditions"] = json!(owned);

    Plan {
        stamp_taints: stamped_taints(&spec.taints, now),
        namespace,
        agent_access,
        syncer_access,
        status,
        verdicts,
        requeue: settings.probe_interval,
    }
}

/// What a push-mode member's probe says of it, against what the status recorded.
struct Seen {
    outcome: ProbeOutcome,
    version: Option<String>,
    allocatable: BTreeMap<String, Quantity>,
    cluster_id: Option<String>,
    last_heartbeat: Option<Timestamp>,
}

impl Seen {
    /// A healthy member's facts replace the recorded ones — unless it is another cluster than
    /// the one registered (its `kube-system` UID differs): that is a duplicate name.
    fn of(
        old: &ClusterStatus,
        outcome: ProbeOutcome,
        now: Timestamp,
        last_heartbeat: Option<Timestamp>,
    ) -> Self {
        let mut seen = Self {
            outcome,
            version: old.kubernetes_version.clone(),
            allocatable: old.allocatable.clone(),
            cluster_id: old.cluster_id.clone(),
            last_heartbeat,
        };
        let ProbeOutcome::Healthy(facts) = &seen.outcome else {
            return seen;
        };
        match (&old.cluster_id, &facts.cluster_id) {
            (Some(registered), Some(now_seen)) if registered != now_seen => {
                seen.outcome = ProbeOutcome::BadCredentials {
                    reason: reasons::DUPLICATE_NAME,
                    message: format!(
                        "the kubeconfig now reaches a different cluster (kube-system UID \
                         {now_seen}, registered {registered}); register it under another name, \
                         or clear status.clusterId if the member was rebuilt"
                    ),
                };
            }
            _ => {
                seen.version = Some(facts.kubernetes_version.clone());
                seen.allocatable = facts.allocatable.clone();
                seen.cluster_id = seen.cluster_id.or(facts.cluster_id.clone());
                seen.last_heartbeat = Some(now);
            }
        }
        seen
    }
}

/// `taints` with `timeAdded` stamped `now` where it lacks it; `None` when none lacks it.
fn stamped_taints(taints: &[Taint], now: Timestamp) -> Option<Vec<Taint>> {
    if taints.iter().all(|t| t.time_added.is_some()) {
        return None;
    }
    Some(
        taints
            .iter()
            .cloned()
            .map(|mut t| {
                t.time_added.get_or_insert(Time(now));
                t
            })
            .collect(),
    )
}

/// What becomes of an accepted Cluster's hub namespace, as it is (`namespace`). Someone else's
/// namespace of this Cluster's name is never used: its Works and bindings are theirs.
fn namespace_step(
    cluster: &Cluster,
    namespace: Option<&Namespace>,
    joined_before: bool,
) -> NamespaceStep {
    let name = names::cluster_namespace(&cluster.name_any());
    match namespace {
        None => NamespaceStep::Make,
        Some(ns) if ns.metadata.deletion_timestamp.is_some() => NamespaceStep::Terminating,
        Some(ns) if is_clusters_namespace(ns, cluster, joined_before) => {
            let marked = cluster_uid_mark(ns).is_some()
                && ns.labels().get(labels::CLUSTER) == Some(&cluster.name_any());
            if marked {
                NamespaceStep::Marked
            } else {
                NamespaceStep::Mark
            }
        }
        Some(ns) => NamespaceStep::Taken(match cluster_uid_mark(ns) {
            Some(other) => format!(
                "namespace {name} was made for another Cluster of this name (UID {other}) and is \
                 not this one's; it is left as it is"
            ),
            None => format!(
                "namespace {name} exists and registration did not make it for this Cluster \
                 (someone made it first); it is left as it is and never used: delete it, or \
                 register the member under another name"
            ),
        }),
    }
}

/// Condition `type_` of `status`.
pub fn condition<'a>(status: &'a ClusterStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// The Cluster UID a hub namespace is marked with, if any.
fn cluster_uid_mark(ns: &Namespace) -> Option<&String> {
    ns.metadata
        .annotations
        .as_ref()?
        .get(annotations::CLUSTER_UID)
}

/// Whether `ns` is `cluster`'s hub namespace: marked with its UID, or unmarked but labelled as
/// its namespace for a Cluster that `joined` before namespaces were marked.
pub fn is_clusters_namespace(ns: &Namespace, cluster: &Cluster, joined: bool) -> bool {
    match cluster_uid_mark(ns) {
        Some(uid) => Some(uid) == cluster.metadata.uid.as_ref(),
        None => joined && ns.labels().get(labels::CLUSTER) == Some(&cluster.name_any()),
    }
}

#[cfg(test)]
mod tests;
