//! Pure planning: from what the splitter observed of one Placement ([`Observation`]) to what it
//! must do ([`Plan`]): the copies each member gets, the copies removed with the reason, those
//! kept and why, the Works that hold them (to write or delete), and the decision for every
//! object. No I/O happens here, so every rule users rely on (never delete for want of
//! knowledge, keep a failed member's copy until its replacements are available, a copy stays in
//! the Work that holds it) is unit tested on values.
//!
//! The copies of one Placement, member and type share Works of up to [`BUNDLE_MANIFESTS`]
//! manifests ([`names::bundle_name`]): the hub then stores and serves a Work per fifty copies
//! rather than one per copy.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use flotilla_api::placement::ObjectDecision;
use flotilla_api::{Cluster, ConflictPolicy, Work, reasons};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use serde_json::Value;

use flotilla_interpreter::HubStatus;

use crate::division::Division;
use crate::eligibility::{Selection, select};
use crate::keys::{CopyKey, ObjectKey, WorkId};
use crate::observation::{Listed, Observation, Unreadable};
use crate::ordinals::Layout;
use crate::pod_security::Verdict;
use crate::render::DataSecret;
use holdings::Holdings;

/// How long the Works of an object that is no longer on the hub wait before they are deleted:
/// a delete and a create under the same name (`kubectl replace --force`) that land in two
/// passes are then still seen as the replacement they are.
pub const GONE_GRACE: Duration = Duration::from_secs(1);

/// How soon a Placement is looked at again when the hub could not check a workload's pods
/// against its namespace's Pod Security level.
pub const POD_SECURITY_RETRY: Duration = Duration::from_secs(5);

/// How soon a Placement handing a copy over to another looks again.
pub const HANDOVER_RECHECK: Duration = Duration::from_secs(2);

/// At most this many manifests are written into one Work. A Work costs the hub about as much
/// as five manifests in it (see docs/benchmarks.md), so fifty make the hub's share per copy
/// small, while an edit of one object rewrites (and the syncer goes through) a Work of bounded
/// size: with 50, single edits reached the members in 0.73 s at p99 against 1.05 s with 100,
/// and the Placement reported a bulk create sooner (`hack/bench.sh user`).
pub const BUNDLE_MANIFESTS: usize = 50;

/// A copy joins a Work only while the Work's manifests stay under this many bytes (of JSON), so
/// that a Work with its status stays well under etcd's limit of 1.5 MiB. A single larger object
/// gets a Work of its own.
pub const BUNDLE_BYTES: usize = 256 * 1024;

/// A Work to delete, exactly as observed: the deletion carries its `uid` and `resourceVersion`
/// as preconditions, so a Work changed since (or re-created under the name) is left alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deletion {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub why: Removal,
}

/// Why a copy leaves its member (its manifest is dropped from its Work, or its Work deleted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Removal {
    /// Its hub object is gone (for longer than [`GONE_GRACE`]).
    ObjectGone,
    /// Its hub object is no longer selected by this Placement.
    NotSelected,
    /// Its Cluster no longer exists.
    ClusterGone,
    /// The object no longer goes to this member (a division changed, affinity changed), and
    /// every copy that replaces it is available.
    Moved,
    /// Another Placement places the object now and its Work on the member holds it: the member
    /// object is taken over, not deleted.
    TakenOver,
    /// A Work of one object (written by an older splitter), or a Work of a Placement that no
    /// longer exists, whose copies this Placement's Works now hold and report applied: the
    /// member objects were taken over, not deleted.
    Renamed,
}

/// A copy the plan keeps although it is not wanted as it is, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Keep {
    /// Its type cannot be read now: unknown is not absent. Its Works are left as they are.
    TypeUnreadable,
    /// Its Cluster is being deleted: registration decides what becomes of its Works.
    ClusterDeleting,
    /// Its Cluster is outside this splitter's `--cluster-selector`: its Works are left alone.
    ClusterElsewhere,
    /// Another Placement places its object now; it goes once that Placement's Work holds it.
    HandingOver,
    /// Its object is still selected but no member can take it now: what runs stays.
    Stranded,
    /// Its member failed or can no longer take the object: it goes once every replacement
    /// copy is available.
    AwaitingReplacements,
    /// Its object went missing less than [`GONE_GRACE`] ago: its Work is not written until then.
    AwaitingGrace,
    /// It is in a Work of one object (by an older splitter) until the Work of its type reports
    /// it applied.
    RenamePending,
    /// Its object's pods violate its hub namespace's Pod Security level (or the hub could not
    /// say now): its Works are left as they are, so the template that violates never reaches a
    /// member.
    PodSecurity,
}

/// A workload whose hub status the splitter writes from its copies' replicas (a Deployment or
/// StatefulSet, divided or duplicated).
#[derive(Clone, Debug)]
pub struct Divided {
    pub key: ObjectKey,
    pub object: DynamicObject,
    /// Replicas per member (for a duplicated workload, all of them on every member).
    pub division: Division,
    /// The replicas the hub object asks for: of all copies together when divided, of each copy
    /// when duplicated.
    pub total: u32,
    /// Every member runs the whole workload: the hub status is that of the copy furthest
    /// behind (see [`crate::aggregate::furthest_behind`]).
    pub duplicated: bool,
    /// For a StatefulSet divided by ordinals: the ranges asked for now, and what they wait for.
    pub ordinals: Option<Layout>,
}

/// A placed object whose hub status the splitter writes from its copies (a Job, CronJob,
/// DaemonSet, ReplicaSet, Service, Ingress or PersistentVolumeClaim), and the members its copies
/// are on.
#[derive(Clone, Debug)]
pub struct Aggregated {
    pub key: ObjectKey,
    pub object: DynamicObject,
    /// Its type on the hub.
    pub resource: ApiResource,
    /// How the copies' statuses combine.
    pub status: HubStatus,
    /// For [`HubStatus::Summed`]: the status fields summed (JSON pointers).
    pub sums: Vec<String>,
    /// For [`HubStatus::Summed`]: the fields of the `Ready` condition the hub object gets, if
    /// it gets one.
    pub ready: Option<Vec<String>>,
    /// Each copy runs the whole object (it is not divided).
    pub duplicated: bool,
    pub clusters: Vec<String>,
}

/// What the status reports besides decisions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    /// Objects selected by equally specific Placements.
    pub conflicts: Vec<String>,
    /// Objects placed workloads refer to that do not exist on the hub.
    pub missing: Vec<String>,
    /// Resource selectors naming types the hub does not serve in namespaces.
    pub unsupported: Vec<String>,
    /// Selected types the splitter cannot read now (their copies are kept).
    pub unreadable: Vec<Unreadable>,
    /// Selected objects no member can take now, left running where they run.
    pub stranded: usize,
    /// Selected workloads placed nowhere because their pods violate the namespace's Pod
    /// Security level (or it could not be checked now): `Kind name: why`.
    pub pod_security: Vec<String>,
    /// Selected RoleBindings placed nowhere because they would grant more in a member than on
    /// the hub (or that could not be told now): `RoleBinding name: why`.
    pub bindings: Vec<String>,
    /// Selected Services placed nowhere because of their `spec.externalIPs`: `Service name: why`.
    pub external_ips: Vec<String>,
    /// The Placement asks for `conflictPolicy: Adopt` where it is not allowed: its Works say
    /// `Abort`.
    pub adopt_refused: bool,
    /// Placing every wanted copy would take the namespace beyond its copy limit: no new copy
    /// was placed (why, with the numbers).
    pub copy_quota: Option<String>,
    /// The objects of the namespace that no Placement places, and why (see
    /// [`crate::coverage`]); empty for a ClusterPlacement.
    pub left_out: Vec<crate::coverage::LeftOut>,
}

/// What one pass does, and why.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub selection: Selection,
    /// Every wanted copy, with the Work that holds it.
    pub copies: BTreeMap<CopyKey, WorkId>,
    /// Every Work that holds a copy after this pass, by namespace and name; those not in
    /// `writes` without their manifests (the hub has them as wanted, or they are left as they
    /// are).
    pub wanted: BTreeMap<WorkId, Work>,
    /// The Works that differ from the hub's (or are not there): to write.
    pub writes: BTreeSet<WorkId>,
    /// The hub Secrets that hold the data of the Secrets a Work places, by Work, to write (each
    /// before its Work): those whose data changed, of new Works, and those the syncer found
    /// missing.
    pub data: BTreeMap<WorkId, DataSecret>,
    pub deletes: Vec<Deletion>,
    /// The copies that leave their member in this pass, and why.
    pub removals: BTreeMap<CopyKey, Removal>,
    /// Copies left as they are although not wanted as they are, and why.
    pub kept: BTreeMap<CopyKey, Keep>,
    /// The decision for every selected object.
    pub decisions: Vec<(ObjectKey, ObjectDecision)>,
    pub divisions: Vec<Divided>,
    /// The other placed objects whose hub status comes from their copies.
    pub aggregated: Vec<Aggregated>,
    pub findings: Findings,
    /// The objects whose copies this Placement holds but that are not on the hub, with since
    /// when: the next pass's [`Observation::absent_since`].
    pub absent: BTreeMap<ObjectKey, Timestamp>,
    /// When to look again without any change (a time-bound state runs out).
    pub recheck_after: Option<Duration>,
}

/// The conflict policy of the Placement's Works: its own, but `Abort` for an `Adopt` that is not
/// allowed (see [`Observation::adopt_allowed`]).
fn conflict_policy(obs: &Observation) -> ConflictPolicy {
    match obs.placement.spec.conflict_policy {
        ConflictPolicy::Adopt if !obs.adopt_allowed => ConflictPolicy::Abort,
        policy => policy,
    }
}

/// The objects of the namespace no Placement places (see [`crate::coverage`]).
fn left_out(obs: &Observation) -> Vec<crate::coverage::LeftOut> {
    let held: BTreeMap<ObjectKey, (String, String)> = obs
        .pod_security
        .iter()
        .map(|(k, v)| {
            (
                k,
                v,
                reasons::POD_SECURITY_VIOLATION,
                reasons::POD_SECURITY_UNKNOWN,
            )
        })
        .chain(
            obs.bindings
                .iter()
                .map(|(k, v)| (k, v, reasons::BINDING_HELD_BACK, reasons::BINDING_UNKNOWN)),
        )
        .chain(obs.external_ips.iter().map(|(k, v)| {
            (
                k,
                v,
                reasons::EXTERNAL_IPS_HELD_BACK,
                reasons::EXTERNAL_IPS_HELD_BACK,
            )
        }))
        .filter_map(|(k, v, violates, unknown)| match v {
            Verdict::Allowed => None,
            Verdict::Violates(why) => Some((k.clone(), (violates.to_string(), why.clone()))),
            Verdict::Unknown(why) => Some((k.clone(), (unknown.to_string(), why.clone()))),
        })
        .collect();
    let listed: Vec<&Listed> = obs.types.iter().chain(&obs.rest_of_namespace).collect();
    let unreadable: Vec<&Unreadable> = obs.unreadable.iter().chain(&obs.rest_unreadable).collect();
    crate::coverage::left_out(&listed, &obs.neighbours, &held, &unreadable)
}

/// Plans one pass of `obs.placement`, in stages with typed values between them:
///
/// 1. [`place`](place::place): select and place every selected object — which Placement places
///    it, which members can take it, how it is divided, the manifest of each wanted copy;
/// 2. [`follow`](follow::follow): what the placed workloads refer to follows them;
/// 3. [`quota`](quota::withhold_beyond_quota): the namespace's copy limits hold new copies back;
/// 4. [`judge`](judge::judge): every held copy not wanted as it is leaves its member or stays,
///    and why (the removal rule, [`judge::fate`]);
/// 5. [`pack`](pack::pack): the copies into the Works of their member and type, and which Works
///    to write or delete.
pub fn plan(obs: &Observation) -> Result<Plan, serde_json::Error> {
    let placement = &*obs.placement;
    let clusters: Vec<&Cluster> = obs.clusters.iter().map(|c| &**c).collect();
    let selection = select(&placement.spec, &clusters, obs.now);
    let mut out = Plan {
        recheck_after: selection.recheck_after,
        ..Plan::default()
    };
    out.findings.adopt_refused = placement.spec.conflict_policy == ConflictPolicy::Adopt
        && conflict_policy(obs) != placement.spec.conflict_policy;
    if placement.namespace().is_some() {
        out.findings.left_out = left_out(obs);
    }
    let (holders, others) = holdings::holders(obs);
    let holdings = Holdings::of(&holders);

    let mut placed = place::place(obs, &selection, &holdings, &mut out)?;
    follow::follow(obs, &mut placed, &mut out)?;
    quota::withhold_beyond_quota(obs, &holdings.held, &mut placed.wanted, &mut out);
    let judged = judge::judge(
        obs, &selection, &holders, &holdings, &others, &placed, &mut out,
    )?;
    pack::pack(
        obs,
        &holders,
        &others,
        placed.wanted,
        judged.retained,
        &judged.frozen,
        &mut out,
    )?;

    out.findings.stranded = judged.stranded.len();
    out.findings.unsupported = obs.unsupported.clone();
    out.findings.unreadable = obs.unreadable.clone();
    out.selection = selection;
    // A Service goes everywhere; where it has no endpoints, its decision says so.
    let objects: BTreeMap<ObjectKey, &Value> = obs
        .types
        .iter()
        .flat_map(|t| {
            t.objects.iter().map(move |o| {
                (
                    ObjectKey::new(&t.resource.api_version, &t.resource.kind, &o.name_any()),
                    &o.data,
                )
            })
        })
        .collect();
    crate::services::note_empty_members(&mut out.decisions, &objects);
    Ok(out)
}

mod entry;
mod follow;
mod holdings;
pub mod judge;
mod pack;
mod place;
mod quota;

pub use place::completions_division;

#[cfg(test)]
mod tests;
