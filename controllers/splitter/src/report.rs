//! Reporting: what a pass planned and did, as the status of the Placement and of the divided
//! hub Deployments. The statuses are computed by pure functions of the plan and the Works as the
//! hub has them after the writes; the Placement's status stays small for any number of objects
//! (counts, one summary per member, a bounded list of decisions).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use flotilla_api::condition::ConditionStatus;
use flotilla_api::placement::{ClusterSummary, CopyCounts, ObjectDecision};
use flotilla_api::{
    ClusterPlacement, ManifestStatus, Placement, Work, annotations, conditions, field_managers,
    reasons,
};
use flotilla_interpreter::HubStatus;
use flotilla_runtime::Context;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

use crate::aggregate::{
    CountedCopy, JobCopy, claim_status, copy_of, cronjob_status, daemonset_status,
    deployment_status, furthest_behind, job_status, max_surge, max_unavailable, ready_condition,
    replicaset_status, service_status, statefulset_status, summed_status,
};
use crate::history::{RECORD, REVISION, REVISION_HISTORY, Record, Write, history, record_status};
use crate::keys::resource;
use crate::keys::{CopyKey, ObjectKey, WorkId, key_of};
use crate::observation::Observation;
use crate::plan::{Divided, Keep, Plan};
use crate::works::{condition_now, manifest_status};
use k8s_openapi::api::apps::v1::ReplicaSet;

/// At most this many member entries (`clusters` and `excluded` of every decision, at least one
/// per decision) are listed in a Placement's `decisions`.
pub const DECISION_ENTRIES: usize = 100;

/// At most this many items of a list are named in a condition message; the rest are counted.
pub const NAMED: usize = 5;

/// What executing a plan did.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// The Works written, as the hub returned them.
    pub written: BTreeMap<WorkId, Work>,
    /// Works the hub refused to store, as `Work name (n kind objects) on member: why`.
    pub failed_writes: Vec<String>,
}

/// The Works of a pass as the hub has them after its writes.
pub struct Current<'a> {
    plan: &'a Plan,
    written: &'a BTreeMap<WorkId, Work>,
    by_name: BTreeMap<WorkId, &'a Work>,
    /// Each Work's status entries by the object they report on (group, kind, name), keyed by
    /// the Work's address: a report looks up every copy several times, and scanning a Work's
    /// entries each time made the report quadratic in the copies of a Work.
    entries: HashMap<usize, Entries<'a>>,
    /// Each wanted copy's Work ([`Current::work_of`]) and its status entry there, found once: a
    /// report asks for every copy's conditions several times.
    held: HashMap<&'a CopyKey, Held<'a>>,
}

/// A wanted copy's Work on the hub and what it reports of the copy.
type Held<'a> = (Option<&'a Work>, Option<&'a ManifestStatus>);

/// A Work's status entries by the object they report on: (group, kind, name).
type Entries<'a> = HashMap<(&'a str, &'a str, &'a str), &'a ManifestStatus>;

/// The key of a Work in [`Current::entries`].
fn address(w: &Work) -> usize {
    std::ptr::from_ref(w) as usize
}

impl<'a> Current<'a> {
    pub fn new(plan: &'a Plan, outcome: &'a Outcome, cache: &'a [Arc<Work>]) -> Self {
        let mut entries = HashMap::new();
        for w in outcome.written.values().chain(cache.iter().map(|w| &**w)) {
            let mut of_work = Entries::new();
            for m in w.status.iter().flat_map(|s| &s.manifests) {
                let id = &m.identity;
                // The first entry of an object, as a scan would find it.
                of_work
                    .entry((id.group.as_str(), id.kind.as_str(), id.name.as_str()))
                    .or_insert(m);
            }
            entries.insert(address(w), of_work);
        }
        let mut current = Self {
            plan,
            written: &outcome.written,
            by_name: cache.iter().map(|w| (key_of(w), &**w)).collect(),
            entries,
            held: HashMap::new(),
        };
        current.held = plan
            .copies
            .keys()
            .map(|key| {
                let work = current.find_work_of(key);
                (
                    key,
                    (work, work.and_then(|w| current.entry(w, &key.object))),
                )
            })
            .collect();
        current
    }

    /// What Work `w` (one of this pass's) reports of object `key`.
    fn entry(&self, w: &'a Work, key: &ObjectKey) -> Option<&'a ManifestStatus> {
        self.entries
            .get(&address(w))
            .and_then(|e| e.get(&(key.group(), key.kind.as_str(), key.name.as_str())))
            .copied()
    }

    /// The hub's Work that holds a wanted copy as wanted: as written in this pass, or as cached
    /// when it needed no write. `None` when the hub refused the write (its Work is not as
    /// wanted) or has no such Work.
    pub fn work_of(&self, key: &CopyKey) -> Option<&'a Work> {
        self.held.get(key).and_then(|(work, _)| *work)
    }

    /// [`Current::work_of`], looked up (every copy the plan wants is in `held`; another has no
    /// Work).
    fn find_work_of(&self, key: &CopyKey) -> Option<&'a Work> {
        let id = self.plan.copies.get(key)?;
        if let Some(w) = self.written.get(id) {
            return Some(w);
        }
        if self.plan.writes.contains(id) {
            return None;
        }
        self.by_name.get(id).copied()
    }

    /// Whether the member reports condition `type_` of a wanted copy for the Work as wanted.
    pub fn holds(&self, key: &CopyKey, type_: &str) -> bool {
        self.condition(key, type_) == ConditionStatus::True
    }

    /// Condition `type_` of a wanted copy, as its member reports it for the Work as wanted;
    /// `Unknown` until it does.
    fn condition(&self, key: &CopyKey, type_: &str) -> ConditionStatus {
        let (work, entry) = self.held.get(key).copied().unwrap_or_default();
        work.map_or(ConditionStatus::Unknown, |w| condition_now(w, entry, type_))
    }

    /// `Kind/name on member` of every copy being removed from its member: those of Works being
    /// deleted, and those a Work is pruning.
    fn removing(&self) -> Vec<String> {
        let mut out = Vec::new();
        for w in self.by_name.values() {
            let cluster = w.cluster_name().unwrap_or("?");
            if w.metadata.deletion_timestamp.is_some() {
                let kind = w.annotations().get(annotations::SOURCE_KIND);
                for m in crate::digest::manifests(w).iter() {
                    out.push(format!(
                        "{}/{} on {cluster}",
                        m.types
                            .as_ref()
                            .map_or(kind.map_or("?", String::as_str), |t| &t.kind),
                        m.metadata.name.as_deref().unwrap_or("?")
                    ));
                }
            }
            for id in w.status.iter().flat_map(|s| &s.removing) {
                out.push(format!("{}/{} on {cluster}", id.kind, id.name));
            }
        }
        out.sort();
        out.dedup();
        out
    }
}

/// `a, b, c and 7 more` of the first [`NAMED`] items.
pub(crate) fn named(items: &[String], separator: &str) -> String {
    let shown: Vec<&str> = items.iter().take(NAMED).map(String::as_str).collect();
    let more = items.len().saturating_sub(shown.len());
    if more > 0 {
        format!("{} and {more} more", shown.join(separator))
    } else {
        shown.join(separator)
    }
}

/// What the copies of a divided or duplicated workload report. Each member of a duplicated one
/// runs the whole workload: its copies stand as the one furthest behind, as if it were the only
/// one, so that tools comparing the status with `spec.replicas` work.
fn copies_of(d: &Divided, current: &Current<'_>) -> Vec<crate::aggregate::Copy> {
    let copies: Vec<_> = d
        .division
        .iter()
        // Copies of the division; at 0 replicas only when the workload is at 0 (or, for a
        // StatefulSet, while a copy at 0 still runs pods it lets go of).
        .filter(|(_, n)| **n > 0 || d.total == 0 || d.ordinals.is_some())
        .filter_map(|(c, _)| {
            let w = current.work_of(&CopyKey::new(d.key.clone(), c))?;
            Some(copy_of(w, &d.key, c))
        })
        .collect();
    if d.duplicated {
        furthest_behind(&copies).into_iter().collect()
    } else {
        copies
    }
}

/// The hub Deployment's or StatefulSet's aggregated status from its copies.
pub fn divided_status(d: &Divided, current: &Current<'_>, now: &str) -> Value {
    let copies = copies_of(d, current);
    if d.key.kind == "StatefulSet" {
        return statefulset_status(
            d.object.metadata.generation,
            d.total,
            &copies,
            &d.division,
            d.ordinals.as_ref(),
            now,
        );
    }
    deployment_status(
        d.object.metadata.generation,
        d.total,
        max_unavailable(&d.object.data["spec"], d.total),
        &copies,
        &d.division,
        now,
    )
}

/// The Placement's status: conditions, counts, per-member summaries and bounded decisions.
pub fn placement_status(
    placement: &Placement,
    plan: &Plan,
    outcome: &Outcome,
    current: &Current<'_>,
    now: &str,
) -> Value {
    let findings = &plan.findings;
    let selection = &plan.selection;

    // Counts, per member and in all; the copies not applied or available, by name.
    let mut per_cluster: BTreeMap<&str, ClusterSummary> = selection
        .candidates
        .iter()
        .map(|c| {
            (
                c.cluster.as_str(),
                ClusterSummary {
                    cluster: c.cluster.clone(),
                    ..Default::default()
                },
            )
        })
        .collect();
    let mut counts = CopyCounts::default();
    let (mut not_applied, mut not_available) = (Vec::new(), Vec::new());
    for key in plan.copies.keys() {
        let applied = current.holds(key, conditions::APPLIED);
        let available = current.holds(key, conditions::AVAILABLE);
        let summary = per_cluster
            .entry(key.cluster.as_str())
            .or_insert_with(|| ClusterSummary {
                cluster: key.cluster.to_string(),
                ..Default::default()
            });
        summary.placed += 1;
        counts.placed += 1;
        if applied {
            summary.applied += 1;
            counts.applied += 1;
        } else {
            not_applied.push(key.describe());
        }
        if available {
            summary.available += 1;
            counts.available += 1;
        } else {
            not_available.push(key.describe());
        }
    }
    for d in &plan.divisions {
        for (cluster, n) in &d.division {
            if let Some(s) = per_cluster.get_mut(cluster.as_str()) {
                *s.replicas.get_or_insert(0) += i64::from(*n);
            }
        }
    }
    let removing = current.removing();
    counts.removing = i32::try_from(removing.len()).unwrap_or(i32::MAX);
    counts.kept = i32::try_from(plan.kept.len()).unwrap_or(i32::MAX);

    let message = scheduled_message(plan, outcome, &counts, &removing);
    let reason = if findings.unreadable.iter().any(|u| u.forbidden) {
        reasons::FORBIDDEN
    } else if !findings.unreadable.is_empty() {
        reasons::TYPE_UNREADABLE
    } else if !outcome.failed_writes.is_empty() {
        reasons::WORK_WRITE_FAILED
    } else if !findings.unsupported.is_empty() {
        reasons::UNSUPPORTED_TYPE
    } else if !findings.pod_security.is_empty() {
        reasons::POD_SECURITY_VIOLATION
    } else if !findings.bindings.is_empty() {
        reasons::BINDING_HELD_BACK
    } else if !findings.external_ips.is_empty() {
        reasons::EXTERNAL_IPS_HELD_BACK
    } else if findings.copy_quota.is_some() {
        reasons::COPY_QUOTA_EXCEEDED
    } else if selection.candidates.is_empty() {
        reasons::NO_ELIGIBLE_CLUSTER
    } else if !findings.conflicts.is_empty() {
        reasons::PLACEMENT_CONFLICT
    } else if findings.adopt_refused {
        reasons::ADOPT_NOT_ALLOWED
    } else {
        conditions::SCHEDULED
    };
    let scheduled = !selection.candidates.is_empty()
        && findings.unsupported.is_empty()
        && findings.pod_security.is_empty()
        && findings.bindings.is_empty()
        && findings.external_ips.is_empty()
        && findings.copy_quota.is_none()
        && findings.unreadable.is_empty()
        && outcome.failed_writes.is_empty();
    let generation = placement.metadata.generation;
    let condition = |type_: &str, ok: bool, reason: &str, message: String| {
        json!({
            "type": type_,
            "status": if ok { "True" } else { "False" },
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
            "observedGeneration": generation,
        })
    };
    let copies_condition = |type_: &str, done: i32, missing: &[String], verb: &str| {
        if counts.placed == 0 {
            condition(
                type_,
                true,
                reasons::NOTHING_PLACED,
                "no copies placed".into(),
            )
        } else if missing.is_empty() {
            condition(
                type_,
                true,
                reasons::ALL_COPIES,
                format!("{done}/{} copies {verb}", counts.placed),
            )
        } else {
            condition(
                type_,
                false,
                reasons::WAITING_FOR_COPIES,
                format!(
                    "{done}/{} copies {verb}; not yet: {}",
                    counts.placed,
                    named(missing, ", ")
                ),
            )
        }
    };

    let (decisions, omitted) = bounded_decisions(plan, current);
    let mut status = json!({
        "conditions": [
            condition(conditions::SCHEDULED, scheduled, reason, message),
            copies_condition(conditions::APPLIED, counts.applied, &not_applied, "applied"),
            copies_condition(conditions::AVAILABLE, counts.available, &not_available, "available"),
        ],
        "selectedObjects": plan.decisions.len(),
        "copies": counts,
        "clusters": per_cluster.into_values().collect::<Vec<_>>(),
        "decisions": decisions,
    });
    if omitted > 0 {
        status["omittedDecisions"] = json!(omitted);
    }
    // Nothing is left out silently: what of the namespace no Placement places, and why.
    if placement.namespace().is_some() {
        let left_out = &findings.left_out;
        // What the hub made for itself (a Helm release's record, a controller's ReplicaSet)
        // stays on the hub by design: listed, but nothing a user has to act on.
        let missing: Vec<_> = left_out
            .iter()
            .filter(|l| l.entry.reason != reasons::MADE_BY_THE_HUB)
            .collect();
        let all_placed = if missing.is_empty() {
            let hub_own = left_out.len();
            condition(
                conditions::ALL_PLACED,
                true,
                reasons::ALL_PLACED,
                if hub_own == 0 {
                    "every object of the namespace of a kind Flotilla knows is placed".into()
                } else {
                    format!(
                        "every object of the namespace of a kind Flotilla knows is placed; \
                         {hub_own} the hub made for itself stay there (status.notPlaced)"
                    )
                },
            )
        } else {
            let first: Vec<String> = missing
                .iter()
                .take(3)
                .map(|l| {
                    format!(
                        "{} {} ({})",
                        l.entry.kind,
                        if l.entry.name.is_empty() {
                            "*"
                        } else {
                            &l.entry.name
                        },
                        l.entry.reason
                    )
                })
                .collect();
            condition(
                conditions::ALL_PLACED,
                false,
                reasons::NOT_PLACED,
                format!(
                    "{} object(s) of the namespace are placed nowhere (status.notPlaced says why): {}{}",
                    missing.len(),
                    first.join(", "),
                    if missing.len() > first.len() {
                        ", …"
                    } else {
                        ""
                    }
                ),
            )
        };
        if let Some(list) = status["conditions"].as_array_mut() {
            list.push(all_placed);
        }
        if !left_out.is_empty() {
            status["notPlaced"] = json!(
                left_out
                    .iter()
                    .take(crate::coverage::MAX_LISTED)
                    .map(|l| &l.entry)
                    .collect::<Vec<_>>()
            );
            status["notPlacedCount"] = json!(left_out.len());
        }
    }
    let old = placement
        .status
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok());
    keep_condition_times(&mut status, old.as_ref());
    let (api_version, kind) = type_of(placement);
    json!({"apiVersion": api_version, "kind": kind, "status": status})
}

/// The apiVersion and kind of `placement` as users know it: a Placement, or a ClusterPlacement
/// (a Placement without a namespace, see [`ClusterPlacement::as_placement`]).
fn type_of(placement: &Placement) -> (String, String) {
    if placement.namespace().is_some() {
        (
            Placement::api_version(&()).into(),
            Placement::kind(&()).into(),
        )
    } else {
        (
            ClusterPlacement::api_version(&()).into(),
            ClusterPlacement::kind(&()).into(),
        )
    }
}

/// What Events about `placement` refer to.
fn reference_of(placement: &Placement) -> k8s_openapi::api::core::v1::ObjectReference {
    let (api_version, kind) = type_of(placement);
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(api_version),
        kind: Some(kind),
        ..placement.object_ref(&())
    }
}

/// The `Scheduled` message: what is placed where, and everything that stands in the way.
fn scheduled_message(
    plan: &Plan,
    outcome: &Outcome,
    counts: &CopyCounts,
    removing: &[String],
) -> String {
    let findings = &plan.findings;
    let selection = &plan.selection;
    let overridden = plan
        .decisions
        .iter()
        .filter(|(_, d)| d.overridden_by.is_some())
        .count();
    let placed_objects: BTreeSet<&ObjectKey> = plan.copies.keys().map(|k| &k.object).collect();
    let mut message = format!(
        "{} copies of {} object(s) on {} member(s), in {} Work(s)",
        counts.placed,
        placed_objects.len(),
        selection.candidates.len(),
        plan.wanted.len()
    );
    if overridden > 0 {
        message.push_str(&format!(
            "; {overridden} selected object(s) placed by a more specific or older Placement"
        ));
    }
    for e in selection.held.iter().chain(&selection.excluded) {
        message.push_str(&format!("; {}: {}", e.cluster, e.message));
    }
    if !findings.conflicts.is_empty() {
        message.push_str(&format!("; {}", named(&findings.conflicts, "; ")));
    }
    if findings.adopt_refused {
        message.push_str(&format!(
            "; conflictPolicy Adopt is not allowed in this namespace (an admin allows it with the annotation {}: \"true\" on the hub Namespace): its Works say Abort",
            flotilla_api::annotations::ALLOW_ADOPT
        ));
    }
    if !findings.pod_security.is_empty() {
        message.push_str(&format!(
            "; placed nowhere for the namespace's Pod Security level (copies already in members are left as they were): {}",
            named(&findings.pod_security, "; ")
        ));
    }
    if !findings.bindings.is_empty() {
        message.push_str(&format!(
            "; placed nowhere: it would grant more in the members than on the hub (copies already in members are left as they were): {}",
            named(&findings.bindings, "; ")
        ));
    }
    if !findings.external_ips.is_empty() {
        message.push_str(&format!(
            "; placed nowhere: it would take the traffic of its external IPs in every member (copies already in members are left as they were): {}",
            named(&findings.external_ips, "; ")
        ));
    }
    if let Some(why) = &findings.copy_quota {
        message.push_str(&format!("; {why}"));
    }
    if findings.stranded > 0 {
        message.push_str(&format!(
            "; {} selected object(s) no member can take now are left running where they run",
            findings.stranded
        ));
    }
    let elsewhere = plan
        .kept
        .values()
        .filter(|k| **k == Keep::ClusterElsewhere)
        .count();
    if elsewhere > 0 {
        message.push_str(&format!(
            "; {elsewhere} copy(ies) on Clusters outside this splitter's --cluster-selector are left as they are"
        ));
    }
    if !removing.is_empty() {
        message.push_str(&format!(
            "; removing {} copy(ies) from members: {}",
            removing.len(),
            named(removing, ", ")
        ));
    }
    if !findings.missing.is_empty() {
        message.push_str(&format!(
            "; referred to by placed workloads but missing on the hub: {}",
            named(&findings.missing, ", ")
        ));
    }
    if !findings.unsupported.is_empty() {
        message = format!(
            "resource selectors name types the hub does not place: {}; {message}",
            findings.unsupported.join(", ")
        );
    }
    if !findings.unreadable.is_empty() {
        let what: Vec<&str> = findings
            .unreadable
            .iter()
            .map(|u| u.message.as_str())
            .collect();
        message = format!(
            "selected types cannot be read now, their copies are kept as they are: {}; {message}",
            what.join("; ")
        );
    }
    if !outcome.failed_writes.is_empty() {
        message = format!(
            "{} Work(s) could not be written, the others were: {}; {message}",
            outcome.failed_writes.len(),
            named(&outcome.failed_writes, "; ")
        );
    }
    message
}

/// The decisions listed in the status, with what each copy reports, and how many were left
/// out: those with something to report first, then by kind and name, up to
/// [`DECISION_ENTRIES`] member entries.
fn bounded_decisions(plan: &Plan, current: &Current<'_>) -> (Vec<ObjectDecision>, usize) {
    let mut all: Vec<(bool, ObjectDecision)> = plan
        .decisions
        .iter()
        .map(|(object, d)| {
            let mut d = d.clone();
            for c in &mut d.clusters {
                let key = CopyKey::new(object.clone(), &c.cluster);
                c.applied = Some(current.condition(&key, conditions::APPLIED));
                c.available = Some(current.condition(&key, conditions::AVAILABLE));
            }
            let notable = d.overridden_by.is_some()
                || !d.excluded.is_empty()
                || d.clusters.iter().any(|c| {
                    c.applied != Some(ConditionStatus::True)
                        || c.available != Some(ConditionStatus::True)
                        || c.note.is_some()
                });
            (notable, d)
        })
        .collect();
    all.sort_by(|(a, x), (b, y)| {
        b.cmp(a)
            .then_with(|| (&x.kind, &x.name).cmp(&(&y.kind, &y.name)))
    });
    let total = all.len();
    let mut entries = 0;
    let listed: Vec<ObjectDecision> = all
        .into_iter()
        .map(|(_, d)| d)
        .take_while(|d| {
            entries += (d.clusters.len() + d.excluded.len()).max(1);
            entries <= DECISION_ENTRIES
        })
        .collect();
    let omitted = total - listed.len();
    (listed, omitted)
}

/// Writes the status of every divided Deployment and of the Placement, where it says something
/// new, and the Events that go with a change: `Placed` on a Deployment whose distribution
/// changed, `Rescheduled` on the Placement, and a Warning for what a user or the admin can fix.
pub async fn report(
    ctx: &Context,
    obs: &Observation,
    plan: &Plan,
    outcome: &Outcome,
) -> Result<(), kube::Error> {
    let placement = &*obs.placement;
    let ns = placement.namespace().unwrap_or_default();
    let current = Current::new(plan, outcome, &obs.works);
    let now = Timestamp::now().to_string();
    let params = PatchParams::apply(field_managers::SPLITTER).force();
    for d in &plan.divisions {
        let kind = d.key.kind.as_str();
        let workloads = match kind {
            "StatefulSet" => resource("apps", "v1", "StatefulSet", "statefulsets"),
            _ => resource("apps", "v1", "Deployment", "deployments"),
        };
        let old = d.object.data.get("status");
        let mut status = divided_status(d, &current, &now);
        keep_condition_times(&mut status, old);
        if old.is_some_and(|o| same_ignoring_times(o, &status)) {
            continue;
        }
        let placed_before = old.and_then(|o| condition_message(o, conditions::PLACED));
        let placed_now = condition_message(&status, conditions::PLACED);
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ns, &workloads);
        api.patch_status(
            &d.object.name_any(),
            &params,
            &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": kind, "status": status})),
        )
        .await?;
        if let Some(message) = placed_now
            && placed_before.as_ref() != Some(&message)
        {
            let reference = d.object.object_ref(&workloads);
            ctx.events
                .normal_ref(&reference, conditions::PLACED, "Place", message)
                .await;
        }
    }

    write_batch_statuses(ctx, &ns, plan, &current, &now).await;
    write_histories(ctx, obs, plan, &current).await;
    write_revisions(ctx, obs, plan).await;

    let status = placement_status(placement, plan, outcome, &current, &now);
    let old = placement
        .status
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok());
    if old
        .as_ref()
        .is_some_and(|old| same_ignoring_times(old, &status["status"]))
    {
        return Ok(());
    }
    match placement.namespace() {
        Some(ns) => {
            Api::<Placement>::namespaced(ctx.client.clone(), &ns)
                .patch_status(&placement.name_any(), &params, &Patch::Apply(&status))
                .await?;
        }
        None => {
            Api::<ClusterPlacement>::all(ctx.client.clone())
                .patch_status(&placement.name_any(), &params, &Patch::Apply(&status))
                .await?;
        }
    }
    let reference = reference_of(placement);
    let message = |s: Option<&Value>| s.and_then(|s| condition_message(s, conditions::SCHEDULED));
    let (before, after) = (message(old.as_ref()), message(Some(&status["status"])));
    let findings = &plan.findings;
    // An object held back (Pod Security, a binding, external IPs): said at once, also on the
    // Placement's first status.
    for (held, reason) in [
        (&findings.pod_security, reasons::POD_SECURITY_VIOLATION),
        (&findings.bindings, reasons::BINDING_HELD_BACK),
        (&findings.external_ips, reasons::EXTERNAL_IPS_HELD_BACK),
    ] {
        if before != after && !held.is_empty() {
            ctx.events
                .warning_ref(&reference, reason, "Place", named(held, "; "))
                .await;
        }
    }
    if before != after
        && let Some(why) = &findings.copy_quota
    {
        ctx.events
            .warning_ref(
                &reference,
                reasons::COPY_QUOTA_EXCEEDED,
                "Place",
                why.clone(),
            )
            .await;
    }
    if before != after && findings.adopt_refused {
        ctx.events
            .warning_ref(
                &reference,
                reasons::ADOPT_NOT_ALLOWED,
                "Place",
                format!(
                    "conflictPolicy Adopt is not allowed in namespace {} (the hub Namespace has no {}: \"true\"): member objects Flotilla did not create are left alone",
                    placement.namespace().unwrap_or_default(),
                    flotilla_api::annotations::ALLOW_ADOPT
                ),
            )
            .await;
    }
    if old.is_none() || before == after {
        return Ok(());
    }
    // Which members take, keep or lose work changed: say so where users look.
    ctx.events
        .normal_ref(
            &reference,
            "Rescheduled",
            "Place",
            after.clone().unwrap_or_default(),
        )
        .await;
    if !findings.unreadable.is_empty() || !outcome.failed_writes.is_empty() {
        let reason = status["status"]["conditions"][0]["reason"]
            .as_str()
            .unwrap_or(reasons::TYPE_UNREADABLE)
            .to_string();
        let what: Vec<String> = findings
            .unreadable
            .iter()
            .map(|u| u.message.clone())
            .chain(outcome.failed_writes.iter().cloned())
            .collect();
        ctx.events
            .warning_ref(&reference, &reason, "Place", named(&what, "; "))
            .await;
    }
    if !findings.conflicts.is_empty() {
        ctx.events
            .warning_ref(
                &reference,
                reasons::PLACEMENT_CONFLICT,
                "Place",
                named(&findings.conflicts, "; "),
            )
            .await;
    }
    Ok(())
}

/// Writes the status of every other placed hub object whose status comes from its copies (Jobs,
/// CronJobs, DaemonSets, ReplicaSets, Services, Ingresses, PersistentVolumeClaims), where it
/// says something new. A
/// status the hub refuses is logged and left: the Placement's own status is written still.
async fn write_batch_statuses(
    ctx: &Context,
    ns: &str,
    plan: &Plan,
    current: &Current<'_>,
    now: &str,
) {
    let params = PatchParams::apply(field_managers::SPLITTER).force();
    for job in &plan.aggregated {
        let kind = job.key.kind.as_str();
        if matches!(
            job.status,
            HubStatus::Kept | HubStatus::Deployment | HubStatus::StatefulSet
        ) {
            continue;
        }
        let resource = &job.resource;
        // A ClusterPlacement's objects are cluster-scoped.
        let api: Api<DynamicObject> = if ns.is_empty() {
            Api::all_with(ctx.client.clone(), resource)
        } else {
            Api::namespaced_with(ctx.client.clone(), ns, resource)
        };
        let copies: Vec<JobCopy<'_>> = job
            .clusters
            .iter()
            .map(|cluster| JobCopy {
                cluster,
                status: current
                    .work_of(&CopyKey::new(job.key.clone(), cluster))
                    .and_then(|w| manifest_status(w, &job.key))
                    .and_then(|m| m.status.as_ref()),
            })
            .collect();
        let old = job.object.data.get("status");
        let mut status = match job.status {
            HubStatus::Job => job_status(
                &copies,
                job.object.data["spec"]["completions"].as_i64(),
                old,
                now,
            ),
            HubStatus::DaemonSet | HubStatus::ReplicaSet => {
                let copies: Vec<CountedCopy<'_>> = job
                    .clusters
                    .iter()
                    .map(|cluster| {
                        let w = current.work_of(&CopyKey::new(job.key.clone(), cluster));
                        let c = w.map(|w| copy_of(w, &job.key, cluster));
                        CountedCopy {
                            status: w
                                .and_then(|w| manifest_status(w, &job.key))
                                .and_then(|m| m.status.as_ref()),
                            current: c.as_ref().is_some_and(|c| c.current && c.observed),
                            stale: c.as_ref().is_some_and(|c| c.stale),
                        }
                    })
                    .collect();
                if job.status == HubStatus::DaemonSet {
                    daemonset_status(&copies, job.object.metadata.generation)
                } else {
                    replicaset_status(&copies, job.duplicated, job.object.metadata.generation)
                }
            }
            HubStatus::Service | HubStatus::Ingress => service_status(&copies),
            HubStatus::PersistentVolumeClaim => claim_status(&copies),
            HubStatus::Summed => {
                let mut status = summed_status(&copies, &job.sums);
                if let Some(fields) = &job.ready {
                    let not_ready: Vec<&str> = job
                        .clusters
                        .iter()
                        .filter(|cluster| {
                            !current.holds(
                                &CopyKey::new(job.key.clone(), cluster),
                                conditions::AVAILABLE,
                            )
                        })
                        .map(String::as_str)
                        .collect();
                    let mut ready = ready_condition(job.clusters.len(), &not_ready, now);
                    // Only what the kind's schema declares: server-side apply refuses the rest.
                    if let Some(c) = ready.as_object_mut() {
                        c.retain(|field, _| fields.contains(field));
                    }
                    status["conditions"] = json!([ready]);
                }
                status
            }
            _ => cronjob_status(&copies, old),
        };
        keep_condition_times(&mut status, old);
        let empty = status.as_object().is_none_or(|o| o.is_empty());
        if old.is_some_and(|o| same_ignoring_times(o, &status)) || (old.is_none() && empty) {
            continue;
        }
        let name = job.object.name_any();
        let patch = json!({"apiVersion": resource.api_version, "kind": kind, "status": status});
        if let Err(e) = api.patch_status(&name, &params, &Patch::Apply(patch)).await {
            tracing::warn!(object = %format!("{kind} {ns}/{name}"), error = %e, "writing the hub object's status failed");
        }
    }
}

/// The hub ControllerRevisions of the placed StatefulSets and DaemonSets (see
/// [`crate::revisions`]).
async fn write_revisions(ctx: &Context, obs: &Observation, plan: &Plan) {
    use crate::revisions::{Revision, revisions};
    use k8s_openapi::api::apps::v1::ControllerRevision;
    let Some(ns) = obs.placement.namespace() else {
        return;
    };
    let placed: BTreeSet<&ObjectKey> = plan.copies.keys().map(|k| &k.object).collect();
    let workloads: Vec<(&kube::api::ApiResource, &DynamicObject)> = obs
        .types
        .iter()
        .filter(|t| {
            flotilla_interpreter::table::lookup(&t.resource.api_version, &t.resource.kind)
                .is_some_and(|k| {
                    k.history == flotilla_interpreter::table::History::ControllerRevisions
                })
        })
        .flat_map(|t| t.objects.iter().map(move |o| (&t.resource, o)))
        .filter(|(ar, o)| {
            placed.contains(&ObjectKey::new(&ar.api_version, &ar.kind, &o.name_any()))
        })
        .collect();
    if workloads.is_empty() {
        return;
    }
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &ns);
    let existing = match api
        .list(&kube::api::ListParams::default().labels(RECORD))
        .await
    {
        Ok(list) => list.items,
        Err(e) => {
            tracing::warn!(%ns, error = %e, "listing the hub's ControllerRevisions failed");
            return;
        }
    };
    let apply = PatchParams::apply(field_managers::SPLITTER).force();
    for (ar, workload) in workloads {
        let Some(uid) = workload.metadata.uid.as_deref() else {
            continue;
        };
        let mine: Vec<Revision> = existing
            .iter()
            .filter(|r| {
                r.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.uid == uid && o.controller == Some(true))
            })
            .map(|r| Revision {
                name: r.name_any(),
                uid: r.metadata.uid.clone(),
                revision: r.revision.unwrap_or(0),
            })
            .collect();
        let mut object = match serde_json::to_value(workload) {
            Ok(v) => v,
            Err(_) => continue,
        };
        object["apiVersion"] = json!(ar.api_version);
        object["kind"] = json!(ar.kind);
        let wanted = revisions(&object, &mine);
        let what = format!("{} {ns}/{}", ar.kind, workload.name_any());
        if let Some((name, manifest)) = &wanted.apply
            && let Err(e) = api.patch(name, &apply, &Patch::Apply(manifest)).await
        {
            tracing::warn!(object = %what, revision = %name, error = %e, "writing a ControllerRevision failed");
        }
        for gone in &wanted.prune {
            let dp = kube::api::DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    uid: gone.uid.clone(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            if let Err(e) = api.delete(&gone.name, &dp).await {
                tracing::warn!(object = %what, revision = %gone.name, error = %e, "pruning a ControllerRevision failed");
            }
        }
    }
}

/// Keeps the hub ReplicaSet records of every placed Deployment (see [`crate::history`]): writes
/// those that differ from what the splitter last wrote, deletes those beyond the history
/// limit, and writes each one's status from the copies where it says something new. What the
/// hub refuses is logged and left: the Placement's own status is written still.
async fn write_histories(ctx: &Context, obs: &Observation, plan: &Plan, current: &Current<'_>) {
    let ns = obs.placement.namespace().unwrap_or_default();
    let api: Api<ReplicaSet> = Api::namespaced(ctx.client.clone(), &ns);
    let apply = PatchParams::apply(field_managers::SPLITTER).force();
    for d in plan.divisions.iter().filter(|d| d.key.kind == "Deployment") {
        let Some(uid) = d.object.metadata.uid.as_deref() else {
            continue;
        };
        let controlled = |rs: &ReplicaSet| {
            rs.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == uid && o.controller == Some(true))
        };
        let mut cached: BTreeMap<String, ReplicaSet> = obs
            .records
            .iter()
            .filter(|rs| controlled(rs))
            .map(|rs| (rs.name_any(), (**rs).clone()))
            .collect();
        let records: Vec<Record> = cached.values().map(record_of).collect();
        let deployment = match serde_json::to_value(&d.object) {
            Ok(v) => v,
            Err(_) => continue,
        };
        let replicas = d.object.data["spec"]["replicas"]
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(1);
        let h = history(
            &deployment,
            &records,
            max_surge(&d.object.data["spec"], replicas),
        );
        let object = format!("Deployment {ns}/{}", d.object.name_any());
        for write in &h.writes {
            let (name, result) = match write {
                Write::Apply { name, manifest } => {
                    (name, api.patch(name, &apply, &Patch::Apply(manifest)).await)
                }
                Write::Patch { name, patch } => (
                    name,
                    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
                        .await,
                ),
            };
            match result {
                Ok(rs) => {
                    cached.insert(name.clone(), rs);
                }
                Err(e) => {
                    tracing::warn!(%object, record = %name, error = %e, "writing a ReplicaSet record failed");
                }
            }
        }
        for gone in &h.prune {
            let dp = kube::api::DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    uid: gone.uid.clone(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match api.delete(&gone.name, &dp).await {
                Ok(_) => {
                    cached.remove(&gone.name);
                }
                Err(e) => {
                    tracing::warn!(%object, record = %gone.name, error = %e, "pruning a ReplicaSet record failed");
                }
            }
        }
        let copies = copies_of(d, current);
        for (name, rs) in &cached {
            let status = record_status(
                &copies,
                *name == h.current,
                h.previous.as_deref() == Some(name.as_str()),
                rs.metadata.generation.unwrap_or(1),
            );
            let old = rs
                .status
                .as_ref()
                .and_then(|s| serde_json::to_value(s).ok())
                .unwrap_or(Value::Null);
            if same_counts(&old, &status) {
                continue;
            }
            let patch = json!({"status": status});
            if let Err(e) = api
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::warn!(%object, record = %name, error = %e, "writing a ReplicaSet record's status failed");
            }
        }
    }
}

/// A cached record as [`crate::history`] reads it.
fn record_of(rs: &ReplicaSet) -> Record {
    let labels = rs.labels();
    let annotations = rs.annotations();
    Record {
        name: rs.name_any(),
        uid: rs.metadata.uid.clone(),
        revision: annotations
            .get(REVISION)
            .and_then(|r| r.parse().ok())
            .unwrap_or(0),
        history: annotations
            .get(REVISION_HISTORY)
            .map(|h| h.split(',').filter_map(|n| n.trim().parse().ok()).collect())
            .unwrap_or_default(),
        digest: labels.get(RECORD).cloned(),
    }
}

/// Whether two ReplicaSet statuses say the same: a count of 0 and no count are the same (the
/// hub leaves zero counts out).
fn same_counts(old: &Value, new: &Value) -> bool {
    let counts = |v: &Value| -> BTreeMap<String, i64> {
        v.as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_i64()?)))
            .filter(|(_, n)| *n != 0)
            .collect()
    };
    counts(old) == counts(new)
}

/// The `message` of condition `type_` in a status object.
pub fn condition_message(status: &Value, type_: &str) -> Option<String> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["message"].as_str())
        .map(str::to_string)
}

const TIME_FIELDS: [&str; 3] = ["lastTransitionTime", "lastUpdateTime", "lastProbeTime"];

/// Carries the times of `old`'s conditions over to `new`'s: `lastTransitionTime` while the
/// status is the same, `lastUpdateTime` while nothing of the condition changed. A status that
/// says the same thing is then equal to the one written before.
pub fn keep_condition_times(new: &mut Value, old: Option<&Value>) {
    let Some(old_conditions) = old.and_then(|o| o["conditions"].as_array()) else {
        return;
    };
    let Some(conditions) = new["conditions"].as_array_mut() else {
        return;
    };
    for c in conditions {
        let Some(before) = old_conditions.iter().find(|o| o["type"] == c["type"]) else {
            continue;
        };
        if before["status"] != c["status"] {
            continue;
        }
        let unchanged = ["reason", "message"].iter().all(|k| before[k] == c[k]);
        for field in TIME_FIELDS {
            let keep = field == "lastTransitionTime" || unchanged;
            if keep && let Some(t) = before.get(field) {
                c[field] = t.clone();
            }
        }
    }
}

/// Whether two status objects are equal apart from condition times.
pub fn same_ignoring_times(a: &Value, b: &Value) -> bool {
    fn strip(v: &Value) -> Value {
        let mut v = v.clone();
        if let Some(cs) = v["conditions"].as_array_mut() {
            for c in cs {
                if let Some(o) = c.as_object_mut() {
                    for f in TIME_FIELDS {
                        o.remove(f);
                    }
                }
            }
        }
        v
    }
    strip(a) == strip(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_that_says_the_same_keeps_its_times_and_is_not_written_again() {
        let old = json!({"replicas": 3, "conditions": [
            {"type": "Available", "status": "True", "reason": "R", "message": "m",
             "lastTransitionTime": "t0", "lastUpdateTime": "t0"}]});
        let mut same = json!({"replicas": 3, "conditions": [
            {"type": "Available", "status": "True", "reason": "R", "message": "m",
             "lastTransitionTime": "t1", "lastUpdateTime": "t1"}]});
        keep_condition_times(&mut same, Some(&old));
        assert_eq!(same, old);
        assert!(same_ignoring_times(&old, &same));

        let mut reworded = json!({"replicas": 3, "conditions": [
            {"type": "Available", "status": "True", "reason": "R", "message": "m2",
             "lastTransitionTime": "t1", "lastUpdateTime": "t1"}]});
        keep_condition_times(&mut reworded, Some(&old));
        assert_eq!(reworded["conditions"][0]["lastTransitionTime"], "t0");
        assert_eq!(reworded["conditions"][0]["lastUpdateTime"], "t1");
        assert!(!same_ignoring_times(&old, &reworded));

        let mut flipped = json!({"conditions": [
            {"type": "Available", "status": "False", "lastTransitionTime": "t1"}]});
        keep_condition_times(&mut flipped, Some(&old));
        assert_eq!(flipped["conditions"][0]["lastTransitionTime"], "t1");
    }

    #[test]
    fn lists_name_the_first_few_and_count_the_rest() {
        let items: Vec<String> = (0..8).map(|i| format!("c{i}")).collect();
        assert_eq!(named(&items[..2], ", "), "c0, c1");
        assert_eq!(named(&items, ", "), "c0, c1, c2, c3, c4 and 3 more");
    }
}
