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

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::condition::ConditionStatus;
use flotilla_api::placement::{ClusterDecision, ClusterExclusion, ObjectDecision};
use flotilla_api::{
    ApiResourceImport, Cluster, ConflictPolicy, ManifestIdentity, ManifestStatus, Placement, Work,
    WorkSpec, annotations, conditions, labels, names, reasons, work_data,
};
use k8s_openapi::ByteString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use serde_json::Value;

use flotilla_interpreter::hub_made::made_by_the_hub;
use flotilla_interpreter::{Divides, HubStatus, Kinds, builtin};

use crate::compatibility::MemberSchema;
use crate::division::{Candidate, Division, divide};
use crate::eligibility::{Selection, select};
use crate::ordinals::{Held, Layout, Range, lay_out};
use crate::pod_security::Verdict;
use crate::references::{Reference, references};
use crate::render::{
    DataSecret, Origin, Share, bundle, is_secret, member_manifest, refer_to_data, take_secret_data,
};
use crate::specificity::{Selectable, specificity, winner};

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

/// Which hub object a copy is of: its type and name (in the Placement's namespace).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub api_version: String,
    pub kind: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(api_version: &str, kind: &str, name: &str) -> Self {
        Self {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            name: name.to_string(),
        }
    }

    /// Its API group (empty for the core group).
    pub fn group(&self) -> &str {
        self.api_version.split_once('/').map_or("", |(g, _)| g)
    }

    /// Whether a member's report of an object (its identity in a Work's status) is of this one.
    pub fn is(&self, id: &ManifestIdentity) -> bool {
        id.group == self.group() && id.kind == self.kind && id.name == self.name
    }
}

/// Which copy: the object and its member.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CopyKey {
    pub object: ObjectKey,
    pub cluster: String,
}

impl CopyKey {
    pub fn new(object: ObjectKey, cluster: &str) -> Self {
        Self {
            object,
            cluster: cluster.to_string(),
        }
    }

    /// The Works it goes into: those of its member and type.
    pub fn shelf(&self) -> Shelf {
        Shelf {
            cluster: self.cluster.clone(),
            api_version: self.object.api_version.clone(),
            kind: self.object.kind.clone(),
        }
    }

    /// `Kind/name on member`, as messages name it.
    pub fn describe(&self) -> String {
        format!(
            "{}/{} on {}",
            self.object.kind, self.object.name, self.cluster
        )
    }
}

/// The Works of one Placement that place objects of one type on one member.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shelf {
    pub cluster: String,
    pub api_version: String,
    pub kind: String,
}

/// The labels of a hub namespace that its member namespaces carry: all but the one the
/// apiserver sets on every namespace (`kubernetes.io/metadata.name`, which the member sets
/// itself).
pub fn member_namespace_labels(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    labels
        .iter()
        .filter(|(k, _)| k.as_str() != "kubernetes.io/metadata.name")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A Work's namespace and name.
pub type WorkId = (String, String);

/// Everything one pass of a Placement reads, gathered before any decision.
#[derive(Clone, Debug)]
pub struct Observation {
    pub placement: Arc<Placement>,
    pub now: Timestamp,
    /// The Clusters this splitter places on (its `--cluster-selector`).
    pub clusters: Vec<Arc<Cluster>>,
    /// Clusters that exist but are outside this splitter's `--cluster-selector`: their Works
    /// are not this splitter's to judge, and are left as they are.
    pub elsewhere: BTreeSet<String>,
    /// Every Placement of the namespace (this one included), to settle which one places what.
    pub neighbours: Vec<Arc<Placement>>,
    /// The hub's Works of this Placement, as cached.
    pub works: Vec<Arc<Work>>,
    /// The selected types read now, with every object of the namespace (a fresh read).
    pub types: Vec<Listed>,
    /// Resource selectors naming a type the hub does not serve in namespaces, with why.
    pub unsupported: Vec<String>,
    /// Selected types that cannot be read now: their Works stay as they are.
    pub unreadable: Vec<Unreadable>,
    /// The objects placed workloads refer to, as read now (`None`: not on the hub).
    pub referenced: BTreeMap<Reference, Option<DynamicObject>>,
    /// The negotiator's imports of the members' schemas, by import name and Cluster.
    pub imports: BTreeMap<(String, String), Arc<ApiResourceImport>>,
    /// Since when the objects of copies this Placement holds have been missing on the hub, as
    /// remembered from earlier passes (see [`Plan::absent`]).
    pub absent_since: BTreeMap<ObjectKey, Timestamp>,
    /// The Works of the namespace's other Placements, as cached (not being deleted).
    pub others: Vec<Other>,
    /// The labels of the Placement's namespace that its member namespaces carry (see
    /// [`flotilla_api::WorkSpec::namespace_labels`]); `None` while the cache has not seen the
    /// namespace (its Works then have no say in them).
    pub namespace_labels: Option<BTreeMap<String, String>>,
    /// The hub ReplicaSet records of the namespace's Deployments (see [`crate::history`]), as
    /// cached: without their pod templates.
    pub records: Vec<Arc<k8s_openapi::api::apps::v1::ReplicaSet>>,
    /// The interpreter of every kind: built in, or from an accepted WorkloadProfile.
    pub kinds: Kinds,
    /// The selected workloads whose pods the hub's Pod Security admission refuses in their
    /// namespace, or could not judge now (see [`crate::pod_security`]); the others passed.
    pub pod_security: BTreeMap<ObjectKey, Verdict>,
    /// The selected RoleBindings (a ClusterPlacement's: ClusterRoleBindings) that would grant
    /// more in a member than on the hub, or whose role or ServiceAccounts could not be looked up
    /// now (see [`crate::bindings`]); the others may be placed.
    pub bindings: BTreeMap<ObjectKey, Verdict>,
    /// The selected Services with `spec.externalIPs` the namespace may not place (see
    /// [`crate::external_ips`]); only those that are held back.
    pub external_ips: BTreeMap<ObjectKey, Verdict>,
    /// The namespace's objects of the table's namespaced kinds this Placement does not select
    /// (listed for [`crate::coverage`]), and those kinds that could not be listed; empty for a
    /// ClusterPlacement.
    pub rest_of_namespace: Vec<Listed>,
    pub rest_unreadable: Vec<Unreadable>,
    /// The manifests the members have now of the objects [`Observation::pod_security`],
    /// [`Observation::bindings`] and [`Observation::external_ips`] hold back, as their Works hold them: those copies keep them,
    /// whatever the hub object says now.
    pub held_back: BTreeMap<CopyKey, DynamicObject>,
    /// Whether the Placement may take over member objects Flotilla did not create
    /// (`conflictPolicy: Adopt`): a ClusterPlacement (an admin's) may; a Placement only where its
    /// hub namespace has [`flotilla_api::annotations::ALLOW_ADOPT`].
    pub adopt_allowed: bool,
    /// Whether its objects may go into member namespaces Flotilla did not create (see
    /// [`flotilla_api::WorkSpec::allow_existing_namespaces`]): a ClusterPlacement's may; a
    /// Placement's only where its hub namespace has
    /// [`flotilla_api::annotations::ALLOW_EXISTING_NAMESPACES`] or
    /// [`flotilla_api::annotations::ALLOW_ADOPT`].
    pub existing_namespaces_allowed: bool,
    /// The hub Secrets that hold the data of the Secrets this Placement's Works place (see
    /// [`flotilla_api::work_data`]), as cached, by namespace and name: the UIDs of their owners.
    pub data_secrets: BTreeMap<WorkId, Vec<String>>,
    /// The most copies the namespace's Placements may keep in the members (`None`: no limit;
    /// see [`flotilla_api::annotations::MAX_COPIES`]).
    pub copy_limit: Option<usize>,
    /// The most bytes the copies of the namespace's Placements may take in the hub (`None`: no
    /// limit; see [`flotilla_api::annotations::MAX_COPY_BYTES`]).
    pub byte_limit: Option<u64>,
}

/// A Work of another Placement of the namespace.
#[derive(Clone, Debug)]
pub struct Other {
    pub work: Arc<Work>,
    /// Its Placement no longer exists: a Placement that now places its objects adopts it.
    pub orphaned: bool,
}

/// One selected type and its objects in the Placement's namespace.
#[derive(Clone, Debug)]
pub struct Listed {
    pub resource: ApiResource,
    pub objects: Vec<DynamicObject>,
}

/// A selected type the splitter cannot read now, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable {
    pub api_version: String,
    pub kind: String,
    /// The hub said Forbidden: the splitter lacks RBAC (the admin can grant it).
    pub forbidden: bool,
    pub message: String,
}

impl Unreadable {
    /// Why the splitter cannot `doing` (e.g. "list statefulsets in namespace shop").
    pub fn new(api_version: &str, kind: &str, doing: &str, e: &kube::Error) -> Self {
        let forbidden = matches!(e, kube::Error::Api(s) if s.code == 403);
        let message = if forbidden {
            format!(
                "{api_version} {kind}: the splitter may not {doing} ({e}); grant it get, list and \
                 watch on this type, e.g. with the chart value splitter.extraRules"
            )
        } else {
            format!("{api_version} {kind}: could not {doing}: {e}")
        };
        Self {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            forbidden,
            message,
        }
    }

    /// Whether Work `w` places an object of this type.
    pub fn places(&self, w: &Work) -> bool {
        let a = w.annotations();
        a.get(annotations::SOURCE_API_VERSION) == Some(&self.api_version)
            && a.get(annotations::SOURCE_KIND) == Some(&self.kind)
    }
}

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

/// Whether condition `type_` of a Work is True for the Work's current spec (generation).
pub fn holds_now(w: &Work, type_: &str) -> bool {
    w.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
        .is_some_and(|c| c.status == "True" && c.observed_generation == w.metadata.generation)
}

/// What the member reports of object `key` in Work `w`: its entry in the Work's status.
pub fn manifest_status<'a>(w: &'a Work, key: &ObjectKey) -> Option<&'a ManifestStatus> {
    w.status
        .as_ref()?
        .manifests
        .iter()
        .find(|m| key.is(&m.identity))
}

/// Whether condition `type_` of object `key` in Work `w` is True for the Work's current spec: a
/// copy just given more replicas is not available until its member has them.
pub fn copy_holds_now(w: &Work, key: &ObjectKey, type_: &str) -> bool {
    copy_condition_now(w, key, type_) == ConditionStatus::True
}

/// Condition `type_` of object `key` in Work `w` as its member reports it for the Work's
/// current spec; `Unknown` until the member has been reached with that spec.
pub fn copy_condition_now(w: &Work, key: &ObjectKey, type_: &str) -> ConditionStatus {
    let current = w
        .status
        .as_ref()
        .is_some_and(|s| s.observed_generation == w.metadata.generation);
    match manifest_status(w, key) {
        Some(m) if current => m.get(type_),
        _ => ConditionStatus::Unknown,
    }
}

/// Whether the member of Work `w` settled on the copy of StatefulSet `key` that the Work asks
/// for (`count` pods): it applied the Work's current spec, its StatefulSet observed it, and it
/// runs at most `count` pods (`status.replicas` counts pods being deleted too). A member that
/// cannot be reached has not settled: what it runs is not known.
pub fn settled(w: &Work, key: &ObjectKey, count: u32) -> bool {
    let reachable = !unreachable(w);
    let Some(m) = manifest_status(w, key) else {
        return false;
    };
    let observed = matches!((m.generation, m.observed_generation), (Some(g), Some(o)) if o >= g);
    let pods = m
        .status
        .as_ref()
        .and_then(|s| s.get("replicas"))
        .map_or(Some(0), Value::as_u64);
    reachable
        && copy_holds_now(w, key, conditions::APPLIED)
        && observed
        && pods.is_some_and(|p| p <= u64::from(count))
}

/// Whether the member of Work `w` cannot be reached: its `Applied` is `Unknown` (what the Work
/// reports is its last word, not its state).
pub fn unreachable(w: &Work) -> bool {
    w.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == conditions::APPLIED))
        .is_some_and(|c| c.status == "Unknown")
}

/// The completions of a divided Job per member. A copy's completions cannot change once it
/// runs, so each member that holds a copy and may still run it keeps its share; what no such
/// member holds (all of it when the Job is first placed, the share of a member that left) is
/// divided among the candidates that hold none and may take new work. With none, it waits for
/// one (the Placement's decision lists each member's completions).
pub fn completions_division(
    total: u32,
    candidates: &[Candidate],
    holding: &BTreeMap<String, Share>,
) -> Division {
    let mut division: Division = candidates
        .iter()
        .filter_map(|c| Some((c.cluster.clone(), holding.get(&c.cluster)?.replicas?)))
        .collect();
    let placed: u32 = division.values().sum();
    let fresh: Vec<Candidate> = candidates
        .iter()
        .filter(|c| !c.held && !division.contains_key(&c.cluster))
        .cloned()
        .collect();
    if placed < total
        && let Ok(rest) = divide(total - placed, &fresh, &Division::new(), false)
    {
        division.extend(rest);
    }
    division
}

/// The ordinals of StatefulSet `key` that each member's copy holds (`holding`: as the Works ask
/// for them), and whether the member settled on them. A copy on a Cluster that no longer
/// exists holds nothing: deleting the Cluster says its pods are gone, as deleting a Node does
/// for a StatefulSet's pods on it.
fn ordinals_held(
    obs: &Observation,
    key: &ObjectKey,
    holding: &BTreeMap<String, Share>,
    held: &BTreeMap<&CopyKey, Vec<&Holder>>,
) -> BTreeMap<String, Held> {
    let exists =
        |c: &str| obs.clusters.iter().any(|x| x.name_any() == c) || obs.elsewhere.contains(c);
    holding
        .iter()
        .filter(|(cluster, _)| exists(cluster))
        .map(|(cluster, share)| {
            let range = share.range();
            let copy = CopyKey::new(key.clone(), cluster);
            let works = held.get(&copy).map(Vec::as_slice).unwrap_or_default();
            let settled =
                !works.is_empty() && works.iter().all(|h| settled(h.work, key, range.count));
            let unreachable = works.iter().any(|h| unreachable(h.work));
            (
                cluster.clone(),
                Held {
                    range,
                    settled,
                    unreachable,
                },
            )
        })
        .collect()
}

/// A Work's namespace and name.
pub fn key_of(w: &Work) -> WorkId {
    (w.namespace().unwrap_or_default(), w.name_any())
}

/// Set only in the splitter's own cache, never written: the digest of a cached Work's spec
/// (see [`lean`]).
pub const CACHED_SPEC_DIGEST: &str = "flotilla.dev/cached-spec-digest";

/// Set only in the splitter's own cache, on each manifest it keeps: the digest of the manifest.
pub const CACHED_MANIFEST_DIGEST: &str = "flotilla.dev/cached-manifest-digest";

/// A digest of a Work's spec: equal specs have equal digests (FNV-1a of its JSON, whose maps
/// serde_json keeps sorted).
pub fn spec_digest(spec: &WorkSpec) -> String {
    digest(&serde_json::to_vec(spec).unwrap_or_default())
}

fn digest(json: &[u8]) -> String {
    format!("{:016x}", flotilla_api::names::fnv1a(json.iter().copied()))
}

/// [`spec_digest`] of `spec` with `manifests` (each as [`DynamicObject`] serializes it) as its
/// manifests, from their JSON: a pass compares a Work with the hub's without decoding its
/// manifests.
fn spec_digest_with<'a>(
    spec: &WorkSpec,
    manifests: impl Iterator<Item = &'a str>,
) -> Result<String, serde_json::Error> {
    // Every field but the manifests (not cloned).
    let empty = WorkSpec {
        manifests: Vec::new(),
        delete_policy: spec.delete_policy,
        conflict_policy: spec.conflict_policy,
        ignore_fields: spec.ignore_fields.clone(),
        namespace_labels: spec.namespace_labels.clone(),
        allow_existing_namespaces: spec.allow_existing_namespaces,
        health: spec.health.clone(),
    };
    let json = serde_json::to_string(&empty)?;
    // `manifests` is the spec's first field: `{"manifests":[],...}`.
    const OPEN: &str = "{\"manifests\":[";
    let rest = json
        .strip_prefix(OPEN)
        .and_then(|r| r.strip_prefix(']'))
        .ok_or_else(|| std::io::Error::other("a Work's spec does not start with its manifests"))
        .map_err(serde_json::Error::io)?;
    let mut bytes: Vec<&[u8]> = vec![OPEN.as_bytes()];
    for (i, m) in manifests.enumerate() {
        if i > 0 {
            bytes.push(b",");
        }
        bytes.push(m.as_bytes());
    }
    bytes.push(b"]");
    bytes.push(rest.as_bytes());
    Ok(format!(
        "{:016x}",
        flotilla_api::names::fnv1a(bytes.into_iter().flatten().copied())
    ))
}

/// A digest of one manifest (of its JSON, as [`DynamicObject`] serializes it).
fn manifest_digest(m: &DynamicObject) -> String {
    digest(&serde_json::to_vec(m).unwrap_or_default())
}

/// What the splitter's cache keeps of a Work: all but its manifests, of which it keeps what a
/// pass reads (apiVersion, kind, name, namespace, `spec.replicas` and a digest of each), and
/// the digest of the whole spec, so that a pass tells a Work that is as wanted without a second
/// copy of every placed object in memory.
pub fn lean(work: &mut Work) {
    // Each manifest serialized once, for its own digest and the whole spec's.
    let json: Vec<String> = work
        .spec
        .manifests
        .iter()
        .map(|m| serde_json::to_string(m).unwrap_or_default())
        .collect();
    let whole = spec_digest_with(&work.spec, json.iter().map(String::as_str))
        .unwrap_or_else(|_| spec_digest(&work.spec));
    for (m, json) in work.spec.manifests.iter_mut().zip(&json) {
        let digest = digest(json.as_bytes());
        // A built-in kind keeps its share; another kind (its profile is not known here) every
        // integer of its spec, where its profile's replica path may be.
        let kind = m
            .types
            .as_ref()
            .and_then(|t| builtin(&t.api_version, &t.kind));
        let lean_data = match kind {
            Some(kind) => {
                let mut data = serde_json::json!({});
                Share::of(kind, m).write(&mut data, kind);
                data
            }
            None => serde_json::json!({ "spec": integers(&m.data["spec"], LEAN_INTEGERS) }),
        };
        m.metadata = kube::api::ObjectMeta {
            name: m.metadata.name.take(),
            namespace: m.metadata.namespace.take(),
            annotations: Some([(CACHED_MANIFEST_DIGEST.to_string(), digest)].into()),
            ..Default::default()
        };
        m.data = lean_data;
    }
    work.annotations_mut()
        .insert(CACHED_SPEC_DIGEST.to_string(), whole);
}

/// The most integers of a custom kind's spec a lean Work manifest keeps.
const LEAN_INTEGERS: usize = 16;

/// The integer fields of `value` (through objects, not arrays), at most `budget` of them, in
/// the objects they are in: `{"replicas": 3, "workers": {"count": 2}}`.
fn integers(value: &Value, budget: usize) -> Value {
    fn walk(value: &Value, left: &mut usize) -> Option<Value> {
        match value {
            Value::Number(n) if n.is_u64() || n.is_i64() => {
                *left = left.checked_sub(1)?;
                Some(value.clone())
            }
            Value::Object(map) => {
                let kept: serde_json::Map<String, Value> = map
                    .iter()
                    .filter_map(|(k, v)| Some((k.clone(), walk(v, left)?)))
                    .collect();
                (!kept.is_empty()).then_some(Value::Object(kept))
            }
            _ => None,
        }
    }
    let mut left = budget;
    walk(value, &mut left).unwrap_or_else(|| serde_json::json!({}))
}

/// The digest of a hub Work's spec: as its cache entry recorded it, or of the spec itself.
fn hub_digest(hub: &Work) -> String {
    hub.annotations()
        .get(CACHED_SPEC_DIGEST)
        .cloned()
        .unwrap_or_else(|| spec_digest(&hub.spec))
}

/// The digest of a hub Work's manifest: as its cache entry recorded it, or of the manifest.
fn hub_manifest_digest(m: &DynamicObject) -> String {
    m.annotations()
        .get(CACHED_MANIFEST_DIGEST)
        .cloned()
        .unwrap_or_else(|| manifest_digest(m))
}

/// Whether the hub's Work already says what `wanted` says: the same spec (by digest: the cache
/// keeps no manifests; `wanted_digest` is that of `wanted`'s spec), every label and annotation
/// the splitter sets, and no Works replaced that `wanted` no longer names. Anything else another
/// writer set on it is left alone.
pub fn up_to_date(wanted: &Work, wanted_digest: &str, hub: &Work) -> bool {
    let subset = |w: &Option<BTreeMap<String, String>>, h: &Option<BTreeMap<String, String>>| {
        let h = h.as_ref();
        w.iter()
            .flatten()
            .all(|(k, v)| h.and_then(|h| h.get(k)) == Some(v))
    };
    hub.metadata.deletion_timestamp.is_none()
        && subset(&wanted.metadata.labels, &hub.metadata.labels)
        && subset(&wanted.metadata.annotations, &hub.metadata.annotations)
        && (wanted.annotations().contains_key(annotations::REPLACES)
            || !hub.annotations().contains_key(annotations::REPLACES))
        && wanted
            .finalizers()
            .iter()
            .all(|f| hub.finalizers().contains(f))
        && wanted_digest == hub_digest(hub)
}

/// A Work of this Placement as the cache has it, and the copies it holds.
struct Holder<'a> {
    work: &'a Work,
    /// Which Work of its shelf it is; `None`: a Work of one object by an older splitter.
    index: Option<u32>,
    /// Its copies, in the order of its manifests, with the share of its object each asks for.
    copies: Vec<(CopyKey, Share)>,
}

impl<'a> Holder<'a> {
    fn of(work: &'a Work, kinds: &Kinds) -> Option<Self> {
        let cluster = work.cluster_name()?;
        let share = |m: &DynamicObject| {
            let t = m.types.as_ref();
            let kind = kinds.of(
                t.map_or("", |t| t.api_version.as_str()),
                t.map_or("", |t| t.kind.as_str()),
            );
            Share::of(kind, m)
        };
        let index = work
            .labels()
            .get(labels::BUNDLE)
            .and_then(|i| i.parse::<u32>().ok());
        let copies = if index.is_some() {
            work.spec
                .manifests
                .iter()
                .filter_map(|m| {
                    let t = m.types.as_ref()?;
                    let name = m.metadata.name.as_deref()?;
                    let key = CopyKey::new(ObjectKey::new(&t.api_version, &t.kind, name), cluster);
                    Some((key, share(m)))
                })
                .collect()
        } else {
            let a = work.annotations();
            let get = |k: &str| a.get(k).map(String::as_str);
            let object = ObjectKey::new(
                get(annotations::SOURCE_API_VERSION)?,
                get(annotations::SOURCE_KIND)?,
                get(annotations::SOURCE_NAME)?,
            );
            vec![(
                CopyKey::new(object, cluster),
                work.spec.manifests.first().map(share).unwrap_or_default(),
            )]
        };
        Some(Self {
            work,
            index,
            copies,
        })
    }

    fn live(&self) -> bool {
        self.work.metadata.deletion_timestamp.is_none()
    }

    fn shelf(&self) -> Option<Shelf> {
        let a = self.work.annotations();
        Some(Shelf {
            cluster: self.work.cluster_name()?.to_string(),
            api_version: a.get(annotations::SOURCE_API_VERSION)?.clone(),
            kind: a.get(annotations::SOURCE_KIND)?.clone(),
        })
    }

    /// This Work's manifest of copy `key`, as the cache has it.
    fn manifest(&self, key: &CopyKey) -> Option<&'a DynamicObject> {
        let i = self.copies.iter().position(|(k, _)| k == key)?;
        match self.index {
            Some(_) => self.work.spec.manifests.get(i),
            None => self.work.spec.manifests.first(),
        }
    }

    fn deletion(&self, why: Removal) -> Deletion {
        Deletion {
            namespace: self.work.namespace().unwrap_or_default(),
            name: self.work.name_any(),
            uid: self.work.metadata.uid.clone(),
            resource_version: self.work.metadata.resource_version.clone(),
            why,
        }
    }
}

/// A copy going into a Work: its manifest, as JSON (decoded again only for a Work to write: a
/// pass of many objects holds each in a few hundred bytes, not decoded), its digest and size;
/// and a Secret's data, which its manifest does not have (see [`flotilla_api::work_data`]).
struct Entry {
    json: Box<str>,
    digest: String,
    secret: Option<SecretData>,
}

/// A Secret's data, held apart from its manifest.
struct SecretData {
    /// The Secret's name: its key in the hub Secret of its Work.
    name: String,
    data: BTreeMap<String, ByteString>,
}

impl Entry {
    fn new(mut manifest: Value) -> Result<Self, serde_json::Error> {
        let secret = match (manifest["apiVersion"].as_str(), manifest["kind"].as_str()) {
            (Some(v), Some(k)) if is_secret(v, k) => Some(SecretData {
                name: manifest["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                data: take_secret_data(&mut manifest)?,
            }),
            _ => None,
        };
        // As a `DynamicObject` serializes it: the digest is then the one the cache computes of
        // the manifest in the hub's Work.
        let manifest: DynamicObject = serde_json::from_value(manifest)?;
        let json = serde_json::to_string(&manifest)?;
        Ok(Self {
            digest: digest(json.as_bytes()),
            json: json.into_boxed_str(),
            secret,
        })
    }

    /// Its size in a Work and, for a Secret, in the Work's hub Secret: a Work's Secrets share
    /// one hub Secret, whose data stays within [`BUNDLE_BYTES`] as the Work does.
    fn bytes(&self) -> usize {
        let data = self.secret.as_ref().map_or(0, |s| {
            s.data.iter().map(|(k, v)| 8 + k.len() + v.0.len()).sum()
        });
        self.json.len() + data
    }

    /// Its manifest as Work `work` holds it: a Secret's names the Work's hub Secret.
    fn json_in(&self, work: &str) -> Result<Cow<'_, str>, serde_json::Error> {
        if self.secret.is_none() {
            return Ok(Cow::Borrowed(&self.json));
        }
        let mut manifest: DynamicObject = serde_json::from_str(&self.json)?;
        refer_to_data(&mut manifest, work);
        Ok(Cow::Owned(serde_json::to_string(&manifest)?))
    }

    /// The digest of its manifest as Work `work` holds it.
    fn digest_in(&self, work: &str) -> Cow<'_, str> {
        match &self.secret {
            None => Cow::Borrowed(&self.digest),
            Some(_) => Cow::Owned(
                self.json_in(work)
                    .map(|json| digest(json.as_bytes()))
                    .unwrap_or_default(),
            ),
        }
    }
}

/// Whether the syncer reports, for Work `w`'s current spec, that the hub Secret with the data of
/// its Secrets is missing: it is written again.
fn data_missing(w: &Work) -> bool {
    w.status.iter().flat_map(|s| &s.conditions).any(|c| {
        c.type_ == conditions::APPLIED
            && c.reason == reasons::SECRET_DATA_MISSING
            && c.observed_generation == w.metadata.generation
    })
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

/// Plans one pass of `obs.placement`.
pub fn plan(obs: &Observation) -> Result<Plan, serde_json::Error> {
    let placement = &*obs.placement;
    let name = placement.name_any();
    let spec = &placement.spec;
    let clusters: Vec<&Cluster> = obs.clusters.iter().map(|c| &**c).collect();
    let selection = select(spec, &clusters, obs.now);
    let neighbours: Vec<&Placement> = obs
        .neighbours
        .iter()
        .map(|p| &**p)
        .filter(|p| p.namespace() == placement.namespace())
        .collect();
    let holders: Vec<Holder> = obs
        .works
        .iter()
        .filter_map(|w| Holder::of(w, &obs.kinds))
        .collect();
    // The other Placements' Works, and whether each one's Placement is gone.
    let others: Vec<(bool, Holder)> = obs
        .others
        .iter()
        .filter_map(|o| Some((o.orphaned, Holder::of(&o.work, &obs.kinds)?)))
        .collect();
    // Whether another Placement's Work holds copy `key` and its member reports it applied: a
    // copy handed over leaves this Placement's Work then.
    let claimed = |key: &CopyKey| {
        others.iter().any(|(_, h)| {
            h.work.cluster_name() == Some(key.cluster.as_str())
                && manifest_status(h.work, &key.object)
                    .is_some_and(|m| m.applied == ConditionStatus::True)
        })
    };

    let mut out = Plan {
        recheck_after: selection.recheck_after,
        ..Plan::default()
    };
    out.findings.adopt_refused = spec.conflict_policy == ConflictPolicy::Adopt
        && conflict_policy(obs) != spec.conflict_policy;
    if placement.namespace().is_some() {
        out.findings.left_out = left_out(obs);
    }
    // The live Works that hold each copy (a copy moving from a Work of one object into the
    // Work of its type is in both for a while), and the replicas each copy asks for now.
    let mut held: BTreeMap<&CopyKey, Vec<&Holder>> = BTreeMap::new();
    let mut previous: BTreeMap<&CopyKey, Share> = BTreeMap::new();
    for h in holders.iter().filter(|h| h.live()) {
        for (key, share) in &h.copies {
            held.entry(key).or_default().push(h);
            if share.replicas.is_some() {
                previous.entry(key).or_insert(*share);
            }
        }
    }
    let live = |key: &CopyKey| held.contains_key(key);
    let mut followed: BTreeMap<Reference, BTreeSet<String>> = BTreeMap::new();
    // Copies whose member cannot take the object (Rule 5: checked per object).
    let mut incompatible: BTreeSet<CopyKey> = BTreeSet::new();
    // Objects this Placement places (selected, not placed by another Placement), every object
    // seen on the hub (as observed, to render a copy that is kept), and those another Placement
    // places.
    let mut placing: BTreeSet<ObjectKey> = BTreeSet::new();
    let mut seen: BTreeMap<ObjectKey, &DynamicObject> = BTreeMap::new();
    let mut handed_over: BTreeSet<ObjectKey> = BTreeSet::new();
    // The manifest of every wanted copy.
    let mut wanted: BTreeMap<CopyKey, Entry> = BTreeMap::new();

    for listed in &obs.types {
        let ar = &listed.resource;
        let kind = obs.kinds.of(&ar.api_version, &ar.kind);
        let member_schemas: BTreeMap<&str, MemberSchema> = selection
            .candidates
            .iter()
            .filter_map(|c| {
                let key = (import_name(ar), c.cluster.clone());
                let import = obs.imports.get(&key).map(|i| &**i);
                Some((c.cluster.as_str(), MemberSchema::of(import)?))
            })
            .collect();
        for listed_object in &listed.objects {
            let object = typed(listed_object.clone(), ar);
            let object_name = object.name_any();
            let key = ObjectKey::new(&ar.api_version, &ar.kind, &object_name);
            seen.insert(key.clone(), listed_object);
            let selectable = Selectable {
                api_version: &ar.api_version,
                kind: &ar.kind,
                name: &object_name,
                labels: object.labels(),
            };
            if specificity(&spec.resource_selectors, &selectable).is_none()
                || object.metadata.deletion_timestamp.is_some()
                || made_by_the_hub(&ar.api_version, &ar.kind, &object)
            {
                continue;
            }
            if let Some(verdict) = winner(&neighbours, &selectable)
                && (verdict.winner != name || !verdict.tied.is_empty())
            {
                if verdict.tied.contains(&name) || verdict.winner == name {
                    let mut all = verdict.tied.clone();
                    all.push(verdict.winner.clone());
                    all.sort();
                    out.findings.conflicts.push(format!(
                        "{} {object_name} is selected as specifically by Placements {}; {} (the oldest) places it",
                        ar.kind,
                        all.join(", "),
                        verdict.winner
                    ));
                }
                if verdict.winner != name {
                    handed_over.insert(key.clone());
                    out.decisions.push((
                        key,
                        ObjectDecision {
                            api_version: ar.api_version.clone(),
                            kind: ar.kind.clone(),
                            name: object_name,
                            overridden_by: Some(verdict.winner),
                            ..Default::default()
                        },
                    ));
                    continue;
                }
            }
            placing.insert(key.clone());
            let manifest = member_manifest(kind, &object, Share::default());
            let mut excluded_here: Vec<ClusterExclusion> = Vec::new();
            // Pods the hub would refuse in this namespace, and a binding that would grant more
            // in a member than here, go to no member (design rule 9).
            let refused = [
                (
                    &obs.pod_security,
                    &mut out.findings.pod_security,
                    reasons::POD_SECURITY_VIOLATION,
                    reasons::POD_SECURITY_UNKNOWN,
                    "the hub could not check its pods against the namespace's Pod Security level now: ",
                ),
                (
                    &obs.bindings,
                    &mut out.findings.bindings,
                    reasons::BINDING_HELD_BACK,
                    reasons::BINDING_UNKNOWN,
                    "",
                ),
                (
                    &obs.external_ips,
                    &mut out.findings.external_ips,
                    reasons::EXTERNAL_IPS_HELD_BACK,
                    reasons::EXTERNAL_IPS_HELD_BACK,
                    "",
                ),
            ]
            .into_iter()
            .find_map(|(verdicts, found, violates, unknown, unknown_prefix)| {
                let (reason, why) = match verdicts.get(&key)? {
                    Verdict::Allowed => return None,
                    Verdict::Violates(why) => (violates, why.clone()),
                    Verdict::Unknown(why) => (unknown, format!("{unknown_prefix}{why}")),
                };
                found.push(format!("{} {object_name}: {why}", ar.kind));
                Some((reason, why))
            });
            if refused.as_ref().is_some_and(|(r, _)| {
                [reasons::POD_SECURITY_UNKNOWN, reasons::BINDING_UNKNOWN].contains(r)
            }) {
                out.recheck_after = Some(
                    out.recheck_after
                        .map_or(POD_SECURITY_RETRY, |r| r.min(POD_SECURITY_RETRY)),
                );
            }
            let candidates: Vec<Candidate> = selection
                .candidates
                .iter()
                .filter(|c| {
                    if let Some((reason, why)) = &refused {
                        excluded_here.push(ClusterExclusion {
                            cluster: c.cluster.clone(),
                            reason: reason.to_string(),
                            message: Some(why.clone()),
                        });
                        return false;
                    }
                    let verdict = member_schemas
                        .get(c.cluster.as_str())
                        .map_or(Ok(()), |schema| schema.check(&manifest));
                    match verdict {
                        Ok(()) => true,
                        Err(why) => {
                            incompatible.insert(CopyKey::new(key.clone(), &c.cluster));
                            excluded_here.push(ClusterExclusion {
                                cluster: c.cluster.clone(),
                                reason: why.reason,
                                message: Some(why.message),
                            });
                            false
                        }
                    }
                })
                .cloned()
                .collect();
            let divides = kind.divides(&object.data, spec.replica_scheduling.type_);
            let number = |pointer: &str| {
                object
                    .data
                    .pointer(pointer)
                    .and_then(Value::as_u64)
                    .map_or(u32::MAX, |n| u32::try_from(n).unwrap_or(u32::MAX))
            };
            let total = match divides {
                Divides::Replicas => object
                    .data
                    .pointer(kind.replicas_pointer())
                    .map_or(1, |_| number(kind.replicas_pointer())),
                Divides::Completions => number("/spec/completions"),
                Divides::One => 1,
                Divides::Ordinals | Divides::Not => object.data["spec"]["replicas"]
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(1),
            };
            // What each member's copy holds now (a copy being removed included).
            let holding: BTreeMap<String, Share> = previous
                .iter()
                .filter(|(k, _)| k.object == key)
                .map(|(k, s)| (k.cluster.clone(), *s))
                .collect();
            let mut layout: Option<Layout> = None;
            let mut holds_ordinals: BTreeMap<String, Held> = BTreeMap::new();
            let division: Division = match divides {
                Divides::Replicas => {
                    // A copy being removed no longer counts: a member coming back after its
                    // replicas moved does not take them back unless asked (rebalanceOnJoin).
                    let before: Division = holding
                        .iter()
                        .filter_map(|(c, s)| Some((c.clone(), s.replicas?)))
                        .collect();
                    divide(total, &candidates, &before, spec.rebalance_on_join).unwrap_or_default()
                }
                Divides::Ordinals => {
                    holds_ordinals = ordinals_held(obs, &key, &holding, &held);
                    let start = object.data["spec"]["ordinals"]["start"]
                        .as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .unwrap_or(0);
                    layout = lay_out(
                        Range::new(start, total),
                        &candidates,
                        &holds_ordinals,
                        spec.rebalance_on_join,
                    )
                    .ok();
                    layout.as_ref().map(Layout::division).unwrap_or_default()
                }
                Divides::Completions => completions_division(total, &candidates, &holding),
                Divides::One => {
                    // Where it runs, it stays while its member may keep it.
                    let before: Division = holding.keys().map(|c| (c.clone(), 1)).collect();
                    divide(1, &candidates, &before, false).unwrap_or_default()
                }
                Divides::Not => {
                    // A copy everywhere, except that a held member keeps only the copy it has.
                    candidates
                        .iter()
                        .filter(|c| !c.held || live(&CopyKey::new(key.clone(), &c.cluster)))
                        .map(|c| (c.cluster.clone(), 0))
                        .collect()
                }
            };
            match (divides, kind.hub_status()) {
                (
                    Divides::Replicas | Divides::Ordinals,
                    HubStatus::Deployment | HubStatus::StatefulSet,
                ) => {
                    out.divisions.push(Divided {
                        key: key.clone(),
                        object: object.clone(),
                        division: division.clone(),
                        total,
                        duplicated: false,
                        ordinals: layout.clone(),
                    });
                }
                (Divides::Not, HubStatus::Deployment | HubStatus::StatefulSet) => {
                    // A duplicated workload runs all its replicas in every member: its hub
                    // status says how far the copy furthest behind is.
                    out.divisions.push(Divided {
                        key: key.clone(),
                        object: object.clone(),
                        division: division.keys().map(|c| (c.clone(), total)).collect(),
                        total,
                        duplicated: true,
                        ordinals: None,
                    });
                }
                _ => {}
            }
            let divided = divides != Divides::Not;
            let mut decision = ObjectDecision {
                api_version: ar.api_version.clone(),
                kind: ar.kind.clone(),
                name: object_name,
                excluded: exclusions(&selection, &division),
                ..Default::default()
            };
            decision.excluded.extend(excluded_here);
            // Scaled to 0, a divided workload keeps its copies, at 0 replicas, so that the
            // members agree with the hub and scaling up again reuses them.
            let scaled_to_zero =
                matches!(divides, Divides::Replicas | Divides::Ordinals) && total == 0;
            for (cluster, n) in &division {
                let copy = CopyKey::new(key.clone(), cluster);
                let share = match (divides, &layout) {
                    (Divides::Replicas | Divides::Completions, _) => {
                        Share::of_count(kind, &object, *n)
                    }
                    (Divides::Ordinals, Some(l)) => {
                        Share::ordinals(l.ranges.get(cluster).copied().unwrap_or_default())
                    }
                    _ => Share::default(),
                };
                // A StatefulSet's copy that still lets go of its ordinals stays until its
                // member runs none of them.
                let letting_go = holds_ordinals
                    .get(cluster)
                    .is_some_and(|h| h.range.count > 0 || !h.settled);
                if divided && *n == 0 && !(live(&copy) && (scaled_to_zero || letting_go)) {
                    continue;
                }
                wanted.insert(copy, Entry::new(member_manifest(kind, &object, share))?);
                let counted = matches!(
                    divides,
                    Divides::Replicas | Divides::Ordinals | Divides::Completions
                );
                decision.clusters.push(ClusterDecision {
                    cluster: cluster.clone(),
                    replicas: counted.then(|| i32::try_from(*n).unwrap_or(i32::MAX)),
                    ..Default::default()
                });
            }
            if let status @ (HubStatus::DaemonSet
            | HubStatus::ReplicaSet
            | HubStatus::Job
            | HubStatus::CronJob
            | HubStatus::Service
            | HubStatus::Ingress
            | HubStatus::PersistentVolumeClaim
            | HubStatus::Summed) = kind.hub_status()
            {
                out.aggregated.push(Aggregated {
                    key: key.clone(),
                    object: object.clone(),
                    resource: ar.clone(),
                    status,
                    sums: kind.status_sums().to_vec(),
                    ready: kind.ready_condition().map(<[String]>::to_vec),
                    duplicated: !divided,
                    clusters: decision
                        .clusters
                        .iter()
                        .map(|c| c.cluster.clone())
                        .collect(),
                });
            }
            if spec.follow_references {
                let runs_on = decision.clusters.iter().map(|c| c.cluster.clone());
                for reference in references(&object.data) {
                    followed
                        .entry(reference)
                        .or_default()
                        .extend(runs_on.clone());
                }
            }
            out.decisions.push((key, decision));
        }
    }

    // What the placed workloads refer to follows them to their members, unless a Placement
    // selects it (then that Placement places it).
    for (reference, on) in followed {
        let (g, v, k, p) = reference.kind.resource();
        let ar = crate::observe::resource(g, v, k, p);
        let object = match obs.referenced.get(&reference) {
            Some(Some(object)) => object,
            Some(None) => {
                out.findings.missing.push(format!("{k} {}", reference.name));
                continue;
            }
            // Could not be read now (reported as unreadable): nothing is decided about it.
            None => continue,
        };
        let selectable = Selectable {
            api_version: &ar.api_version,
            kind: &ar.kind,
            name: &reference.name,
            labels: object.labels(),
        };
        // A member has its own (its root CA bundle, a token of its own); never the hub's.
        if object.metadata.deletion_timestamp.is_some()
            || made_by_the_hub(&ar.api_version, &ar.kind, object)
            || winner(&neighbours, &selectable).is_some()
        {
            continue;
        }
        let key = ObjectKey::new(&ar.api_version, &ar.kind, &reference.name);
        seen.insert(key.clone(), object);
        let object = typed(object.clone(), &ar);
        // It follows a workload this Placement places: its copies stay while the workload's do.
        placing.insert(key.clone());
        let mut decision = ObjectDecision {
            api_version: ar.api_version.clone(),
            kind: ar.kind.clone(),
            name: reference.name.clone(),
            ..Default::default()
        };
        for cluster in on {
            wanted.insert(
                CopyKey::new(key.clone(), &cluster),
                Entry::new(member_manifest(
                    obs.kinds.of(&ar.api_version, &ar.kind),
                    &object,
                    Share::default(),
                ))?,
            );
            decision.clusters.push(ClusterDecision {
                cluster,
                ..Default::default()
            });
        }
        out.decisions.push((key, decision));
    }

    withhold_beyond_quota(obs, &held, &mut wanted, &mut out);

    // Whether the Work of its type on the hub holds copy `key` as wanted, and the member
    // reports `type_` for it (`Applied`, `Available`) for that Work's spec.
    let reported = |key: &CopyKey, type_: &str| -> bool {
        let Some(entry) = wanted.get(key) else {
            return false;
        };
        held.get(key).into_iter().flatten().any(|h| {
            h.index.is_some()
                && h.manifest(key)
                    .is_some_and(|m| hub_manifest_digest(m) == entry.digest_in(&h.work.name_any()))
                && copy_holds_now(h.work, &key.object, type_)
        })
    };

    // Every copy held that is not wanted as it is: removed, or kept and why. Kept copies with
    // an object on the hub stay in their Work, rendered as they are (`retained`); the Works of
    // the others are not written at all in this pass (`frozen`).
    let mut retained: BTreeMap<CopyKey, Entry> = BTreeMap::new();
    let mut frozen: BTreeSet<WorkId> = BTreeSet::new();
    let mut stranded: BTreeSet<ObjectKey> = BTreeSet::new();
    for (key, on) in &held {
        let key = *key;
        let freeze = |frozen: &mut BTreeSet<WorkId>| {
            frozen.extend(on.iter().map(|h| key_of(h.work)));
        };
        if wanted.contains_key(key) {
            // Also in a Work of one object: that Work goes once the Work of its type has it.
            for h in on.iter().filter(|h| h.index.is_none()) {
                if reported(key, conditions::APPLIED) {
                    out.deletes.push(h.deletion(Removal::Renamed));
                } else {
                    out.kept.insert(key.clone(), Keep::RenamePending);
                }
            }
            continue;
        }
        if obs
            .pod_security
            .get(&key.object)
            .or(obs.bindings.get(&key.object))
            .or(obs.external_ips.get(&key.object))
            .is_some_and(|v| *v != Verdict::Allowed)
        {
            // As the member has it: the hub's template never reaches it. Without that manifest
            // (its Work could not be read), the Works holding it are not written at all.
            out.kept.insert(key.clone(), Keep::PodSecurity);
            match obs.held_back.get(key) {
                Some(manifest) => {
                    retained.insert(key.clone(), Entry::new(serde_json::to_value(manifest)?)?);
                }
                None => freeze(&mut frozen),
            }
            continue;
        }
        let cluster_state = obs.clusters.iter().find(|c| c.name_any() == key.cluster);
        if cluster_state.is_some_and(|c| c.metadata.deletion_timestamp.is_some()) {
            out.kept.insert(key.clone(), Keep::ClusterDeleting);
            freeze(&mut frozen);
            continue;
        }
        if cluster_state.is_none() && obs.elsewhere.contains(&key.cluster) {
            out.kept.insert(key.clone(), Keep::ClusterElsewhere);
            freeze(&mut frozen);
            continue;
        }
        if obs
            .unreadable
            .iter()
            .any(|t| t.api_version == key.object.api_version && t.kind == key.object.kind)
        {
            out.kept.insert(key.clone(), Keep::TypeUnreadable);
            freeze(&mut frozen);
            continue;
        }
        // Kept in its Work, rendered from the hub object as it is now.
        let retain = |why: Keep,
                      kept: &mut BTreeMap<CopyKey, Keep>,
                      retained: &mut BTreeMap<CopyKey, Entry>| {
            kept.insert(key.clone(), why);
            if let Some(object) = seen.get(&key.object) {
                // As its member runs it: its share of a divided object.
                let kind = obs.kinds.of(&key.object.api_version, &key.object.kind);
                let divides = kind.divides(&object.data, spec.replica_scheduling.type_);
                let share = match previous.get(key) {
                    Some(s) if divides != Divides::Not => *s,
                    _ => Share::default(),
                };
                let mut object = (*object).clone();
                object.types = Some(kube::api::TypeMeta {
                    api_version: key.object.api_version.clone(),
                    kind: key.object.kind.clone(),
                });
                retained.insert(
                    key.clone(),
                    Entry::new(member_manifest(kind, &object, share))?,
                );
            }
            Ok::<_, serde_json::Error>(())
        };
        if handed_over.contains(&key.object) {
            // The other Placement's Work holds it and its member saw it: it takes the member
            // object over as it is.
            if claimed(key) {
                out.removals.insert(key.clone(), Removal::TakenOver);
            } else {
                retain(Keep::HandingOver, &mut out.kept, &mut retained)?;
            }
            continue;
        }
        if cluster_state.is_none() {
            out.removals.insert(key.clone(), Removal::ClusterGone);
            continue;
        }
        if !seen.contains_key(&key.object) {
            // Gone from the hub: after a grace, so a re-creation under the same name in the
            // next pass still finds its copies.
            let since = obs
                .absent_since
                .get(&key.object)
                .copied()
                .unwrap_or(obs.now);
            out.absent.insert(key.object.clone(), since);
            let waited = obs.now.duration_since(since);
            let grace = SignedDuration::try_from(GONE_GRACE).unwrap_or_default();
            if waited >= grace {
                out.removals.insert(key.clone(), Removal::ObjectGone);
            } else {
                out.kept.insert(key.clone(), Keep::AwaitingGrace);
                freeze(&mut frozen);
                let left = Duration::try_from(grace - waited).unwrap_or(GONE_GRACE);
                out.recheck_after = Some(out.recheck_after.map_or(left, |r| r.min(left)));
            }
            continue;
        }
        if !placing.contains(&key.object) {
            out.removals.insert(key.clone(), Removal::NotSelected);
            continue;
        }
        let others: Vec<&CopyKey> = wanted.keys().filter(|k| k.object == key.object).collect();
        if others.is_empty() {
            // Still selected, but no member can take it now (none eligible, or none whose API
            // can): what runs stays where it runs — never deleted for want of a better place.
            stranded.insert(key.object.clone());
            retain(Keep::Stranded, &mut out.kept, &mut retained)?;
            continue;
        }
        // Its member failed, is held (cordoned, tainted) or can no longer take the object: the
        // copy goes once every wanted copy is available. A member that is fine and simply no
        // longer chosen (scaled down, affinity changed) gives its copy up at once.
        let member_failed = !selection
            .candidates
            .iter()
            .any(|c| c.cluster == key.cluster && !c.held)
            || incompatible.contains(key);
        if member_failed && !others.iter().all(|k| reported(k, conditions::AVAILABLE)) {
            retain(Keep::AwaitingReplacements, &mut out.kept, &mut retained)?;
            continue;
        }
        out.removals.insert(key.clone(), Removal::Moved);
    }
    // A removed copy in a Work of one object: that Work goes.
    for h in holders.iter().filter(|h| h.live() && h.index.is_none()) {
        if let Some(why) = h.copies.first().and_then(|(k, _)| out.removals.get(k)) {
            out.deletes.push(h.deletion(*why));
        }
    }

    // The Works of Placements that no longer exist, once every copy they hold is this
    // Placement's and applied here: they go, their member objects taken over.
    for (_, h) in others.iter().filter(|(orphaned, _)| *orphaned) {
        let taken = !h.copies.is_empty()
            && h.copies
                .iter()
                .all(|(k, _)| reported(k, conditions::APPLIED));
        if taken {
            out.deletes.push(h.deletion(Removal::Renamed));
        }
    }
    if out.kept.values().any(|k| *k == Keep::HandingOver) {
        // The other Placement's Work reports the copy soon: look again then.
        out.recheck_after = Some(
            out.recheck_after
                .map_or(HANDOVER_RECHECK, |r| r.min(HANDOVER_RECHECK)),
        );
    }

    pack(obs, &holders, &others, wanted, retained, &frozen, &mut out)?;
    out.findings.stranded = stranded.len();
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

/// What a Work's copies take in the hub: its manifests and the data of its Secrets, as the
/// splitter wrote them ([`annotations::COPY_BYTES`]); for a Work written before that annotation,
/// its manifests as they serialize.
fn work_bytes(work: &Work) -> u64 {
    work.annotations()
        .get(annotations::COPY_BYTES)
        .and_then(|b| b.parse().ok())
        .unwrap_or_else(|| {
            work.spec
                .manifests
                .iter()
                .map(|m| serde_json::to_vec(m).map_or(0, |v| v.len() as u64))
                .sum()
        })
}

/// What the copies of the namespace's other Placements take in the hub.
fn elsewhere_bytes(obs: &Observation) -> u64 {
    obs.others.iter().map(|o| work_bytes(&o.work)).sum()
}

/// Why `what` is not placed: the namespace is at its byte budget.
fn byte_budget_message(obs: &Observation, namespace: &str, what: &str, name: &str) -> String {
    format!(
        "namespace {namespace} is at its limit of {} bytes of copies in the hub ({} or the \
         splitter's --max-copy-bytes-per-namespace): {what}{name} are not written, and its members \
         keep what they have",
        obs.byte_limit.unwrap_or_default(),
        annotations::MAX_COPY_BYTES,
    )
}

/// The namespace's copy limits (design: no tenant fills the hub): when this pass would make the
/// namespace's Placements keep more copies than [`Observation::copy_limit`], or copies of more
/// bytes than [`Observation::byte_limit`], the copies this Placement does not hold yet are not
/// placed — all of them, so that no workload is half placed — and the decisions say so. The
/// copies it holds stay and follow their hub objects (within the byte budget: see [`pack`]),
/// and a pass that adds no copy is never held back, so a Placement over a limit (the limit was
/// lowered) can still shrink.
fn withhold_beyond_quota(
    obs: &Observation,
    held: &BTreeMap<&CopyKey, Vec<&Holder>>,
    wanted: &mut BTreeMap<CopyKey, Entry>,
    out: &mut Plan,
) {
    if obs.copy_limit.is_none() && obs.byte_limit.is_none() {
        return;
    }
    let new: Vec<CopyKey> = wanted
        .keys()
        .filter(|k| !held.contains_key(k))
        .cloned()
        .collect();
    if new.is_empty() {
        return;
    }
    let namespace = obs.placement.namespace().unwrap_or_default();
    let elsewhere: usize = obs.others.iter().map(|o| o.work.spec.manifests.len()).sum();
    let total = elsewhere.saturating_add(wanted.len());
    let here_bytes: u64 = wanted.values().map(|e| e.bytes() as u64).sum();
    let elsewhere_bytes = elsewhere_bytes(obs);
    let total_bytes = elsewhere_bytes.saturating_add(here_bytes);
    let (message, short) = match (obs.copy_limit, obs.byte_limit) {
        (Some(limit), _) if total > limit => (
            format!(
                "placing what it selects would make namespace {namespace} keep {total} copies in \
                 the members ({} of this Placement, {elsewhere} of its other Placements), more \
                 than its limit of {limit} ({} or the splitter's --max-copies-per-namespace): {} \
                 new copies are not placed",
                wanted.len(),
                annotations::MAX_COPIES,
                new.len()
            ),
            format!("namespace {namespace} is at its limit of {limit} copies"),
        ),
        (_, Some(limit)) if total_bytes > limit => (
            format!(
                "placing what it selects would make the copies of namespace {namespace} take \
                 {total_bytes} bytes in the hub ({here_bytes} of this Placement, \
                 {elsewhere_bytes} of its other Placements), more than its limit of {limit} \
                 ({} or the splitter's --max-copy-bytes-per-namespace): {} new copies are not \
                 placed",
                annotations::MAX_COPY_BYTES,
                new.len()
            ),
            format!("namespace {namespace} is at its limit of {limit} bytes of copies"),
        ),
        _ => return,
    };
    for key in &new {
        wanted.remove(key);
        if let Some((_, decision)) = out.decisions.iter_mut().find(|(k, _)| *k == key.object) {
            decision.clusters.retain(|c| c.cluster != key.cluster);
            decision.excluded.push(ClusterExclusion {
                cluster: key.cluster.clone(),
                reason: reasons::COPY_QUOTA_EXCEEDED.to_string(),
                message: Some(short.clone()),
            });
        }
    }
    out.findings.copy_quota = Some(message);
}

/// What each Work of a shelf (by index) holds after a pass, in order, and its bytes.
type ShelfContents = BTreeMap<u32, (Vec<CopyKey>, usize)>;

/// Puts every copy that stays or goes to a member into the Works of its Placement, member and
/// type: a copy stays in the Work that holds it; a new one joins the first Work with room (at
/// most [`BUNDLE_MANIFESTS`] manifests and [`BUNDLE_BYTES`]), or a new Work. A Work left without
/// copies is deleted; a frozen one is left as it is. Only Works that differ from the hub's are
/// written.
fn pack(
    obs: &Observation,
    holders: &[Holder],
    others: &[(bool, Holder)],
    wanted: BTreeMap<CopyKey, Entry>,
    retained: BTreeMap<CopyKey, Entry>,
    frozen: &BTreeSet<WorkId>,
    out: &mut Plan,
) -> Result<(), serde_json::Error> {
    let placement = &*obs.placement;
    let ns = placement.namespace().unwrap_or_default();
    let name = placement.name_any();
    let wanted_keys: BTreeSet<CopyKey> = wanted.keys().cloned().collect();
    let mut entries: BTreeMap<CopyKey, Entry> = retained;
    entries.extend(wanted);
    // The Works of one object still holding a copy, by copy: the Work of its type replaces them.
    let mut replaces: BTreeMap<&CopyKey, Vec<String>> = BTreeMap::new();
    for h in holders.iter().filter(|h| h.live() && h.index.is_none()) {
        if let Some((key, _)) = h.copies.first() {
            replaces.entry(key).or_default().push(h.work.name_any());
        }
    }
    // A copy handed over from another Placement (or from one that no longer exists) is taken
    // over from that Placement's Work, which lets go of it once this one reports it applied.
    for (_, h) in others {
        for (key, _) in &h.copies {
            if wanted_keys.contains(key) {
                replaces.entry(key).or_default().push(h.work.name_any());
            }
        }
    }

    // Per shelf: its Works (by index) and the copies not in any of them yet.
    let mut shelves: BTreeMap<Shelf, (BTreeMap<u32, &Holder>, BTreeSet<u32>)> = BTreeMap::new();
    for h in holders {
        let (Some(index), Some(shelf)) = (h.index, h.shelf()) else {
            continue;
        };
        let (works, taken) = shelves.entry(shelf).or_default();
        taken.insert(index);
        if h.live() {
            works.insert(index, h);
        }
    }
    let mut unplaced: BTreeMap<Shelf, Vec<CopyKey>> = BTreeMap::new();
    let mut placed: BTreeSet<&CopyKey> = BTreeSet::new();
    for (works, _) in shelves.values() {
        for h in works.values() {
            for (key, _) in &h.copies {
                if frozen.contains(&key_of(h.work)) || entries.contains_key(key) {
                    placed.insert(key);
                }
            }
        }
    }
    for key in entries.keys() {
        if !placed.contains(key) {
            unplaced.entry(key.shelf()).or_default().push(key.clone());
        }
    }
    for shelf in unplaced.keys() {
        shelves.entry(shelf.clone()).or_default();
    }

    // What each Work of each shelf holds after this pass, in order, and its bytes.
    let mut planned: Vec<(&Shelf, &BTreeMap<u32, &Holder>, ShelfContents)> = Vec::new();
    for (shelf, (works, taken)) in &shelves {
        let mut contents: ShelfContents = BTreeMap::new();
        let bytes_of = |key: &CopyKey| entries.get(key).map_or(0, Entry::bytes);
        let mut assigned: BTreeSet<&CopyKey> = BTreeSet::new();
        for (index, h) in works {
            let id = key_of(h.work);
            if frozen.contains(&id) {
                for (key, _) in &h.copies {
                    if assigned.insert(key) && wanted_keys.contains(key) {
                        out.copies.insert(key.clone(), id.clone());
                    }
                }
                let mut work = h.work.clone();
                work.spec.manifests.clear();
                out.wanted.insert(id, work);
                continue;
            }
            let kept: Vec<CopyKey> = h
                .copies
                .iter()
                .map(|(k, _)| k)
                .filter(|k| entries.contains_key(*k))
                .filter(|k| assigned.insert(*k))
                .cloned()
                .collect();
            let size = kept.iter().map(bytes_of).sum();
            contents.insert(*index, (kept, size));
        }
        let mut next_free = (0..).filter(|i| !taken.contains(i));
        for key in unplaced.get(shelf).into_iter().flatten() {
            let bytes = bytes_of(key);
            let room = contents.iter().find_map(|(i, (keys, size))| {
                let fits = keys.is_empty()
                    || (keys.len() < BUNDLE_MANIFESTS && size + bytes <= BUNDLE_BYTES);
                fits.then_some(*i)
            });
            let index = match room {
                Some(i) => i,
                None => next_free.next().unwrap_or(u32::MAX),
            };
            let (keys, size) = contents.entry(index).or_default();
            keys.push(key.clone());
            *size += bytes;
        }
        planned.push((shelf, works, contents));
    }
    // The namespace's byte budget: beyond it, a Work that would grow is not written (its member
    // keeps what it has); new copies were held back already (`withhold_beyond_quota`).
    let over_budget = obs.byte_limit.is_some_and(|limit| {
        let here: u64 = planned
            .iter()
            .flat_map(|(_, _, contents)| contents.values())
            .map(|(_, size)| *size as u64)
            .sum();
        elsewhere_bytes(obs).saturating_add(here) > limit
    });
    for (shelf, works, contents) in planned {
        for (index, (keys, size)) in contents {
            let hub = works.get(&index);
            if keys.is_empty() {
                if let Some(h) = hub {
                    let why = h
                        .copies
                        .iter()
                        .find_map(|(k, _)| out.removals.get(k))
                        .copied()
                        .unwrap_or(Removal::NotSelected);
                    out.deletes.push(h.deletion(why));
                }
                continue;
            }
            let mut replaced: Vec<String> = keys
                .iter()
                .filter_map(|k| replaces.get(k))
                .flatten()
                .cloned()
                .collect();
            replaced.sort();
            replaced.dedup();
            // Moved, not copied: each copy is in one Work.
            let manifests: Vec<(CopyKey, Entry)> = keys
                .iter()
                .filter_map(|k| Some((k.clone(), entries.remove(k)?)))
                .collect();
            let origin = Origin {
                namespace: &ns,
                placement: &name,
                spec: &placement.spec,
                conflict_policy: conflict_policy(obs),
                namespace_labels: obs.namespace_labels.as_ref(),
                allow_existing_namespaces: Some(obs.existing_namespaces_allowed),
            };
            let mut work = bundle(&origin, shelf, index, Vec::new(), &replaced);
            // A custom kind's health rule, from its profile, for the syncer.
            work.spec.health = obs
                .kinds
                .of(&shelf.api_version, &shelf.kind)
                .health_rule()
                .map(str::to_string);
            let work_name = work.name_any();
            let json: Vec<Cow<'_, str>> = manifests
                .iter()
                .map(|(_, e)| e.json_in(&work_name))
                .collect::<Result<_, _>>()?;
            let wanted_digest = spec_digest_with(&work.spec, json.iter().map(|j| &**j))?;
            let id = key_of(&work);
            for key in keys.iter().filter(|k| wanted_keys.contains(*k)) {
                out.copies.insert(key.clone(), id.clone());
            }
            // A Work being deleted is written again once it is gone (its deletion starts a
            // pass). Only a Work to write gets its manifests decoded.
            let deleting = hub.is_some_and(|h| !h.live());
            let live = hub.filter(|h| h.live());
            // What its copies take in the hub: counted against the namespace's byte budget.
            work.annotations_mut()
                .insert(annotations::COPY_BYTES.to_string(), size.to_string());
            let current = live.is_some_and(|h| up_to_date(&work, &wanted_digest, h.work));
            let grows = size as u64 > live.map_or(0, |h| work_bytes(h.work));
            if over_budget && grows && !deleting && !current {
                // Beyond the budget: it stays as it is (a new Work is not made).
                out.findings.copy_quota.get_or_insert_with(|| {
                    byte_budget_message(obs, &ns, "the copies of Work ", &work_name)
                });
                if let Some(h) = live {
                    let mut kept = h.work.clone();
                    kept.spec.manifests.clear();
                    out.wanted.insert(id, kept);
                }
                continue;
            }
            if !deleting && !current {
                work.spec.manifests = json
                    .iter()
                    .map(|j| serde_json::from_str(j))
                    .collect::<Result<_, _>>()?;
                out.writes.insert(id.clone());
            }
            // The data of its Secrets, in its hub Secret: written when a Secret joined or left
            // the Work or has another version of its data (its manifest changed), for a new
            // Work, and when the syncer found it missing; otherwise left as it is.
            let holds_secrets = manifests.iter().any(|(_, e)| e.secret.is_some());
            if !deleting && holds_secrets {
                let stored = obs
                    .data_secrets
                    .get(&(id.0.clone(), work_data::secret_name(&id.1)));
                let unchanged = live.is_some_and(|h| {
                    (current
                        || (h.copies.len() == manifests.len()
                            && manifests.iter().zip(&json).all(|((key, _), json)| {
                                h.manifest(key).is_some_and(|m| {
                                    hub_manifest_digest(m) == digest(json.as_bytes())
                                })
                            })))
                        // There, and the Work's: one deleted, or left without its owner (the
                        // Work's creation and the Secret's hand-over are two writes), is
                        // written again.
                        && stored.is_some_and(|owners| {
                            h.work.metadata.uid.as_ref().is_some_and(|u| owners.contains(u))
                        })
                        && !data_missing(h.work)
                });
                if !unchanged {
                    // Copied only for a hub Secret to write.
                    let secrets: BTreeMap<String, BTreeMap<String, ByteString>> = manifests
                        .iter()
                        .filter_map(|(_, e)| e.secret.as_ref())
                        .map(|s| (s.name.clone(), s.data.clone()))
                        .collect();
                    let owner = live.and_then(|h| h.work.metadata.uid.clone());
                    out.data
                        .insert(id.clone(), DataSecret::of(&work, owner, secrets));
                }
            }
            out.wanted.insert(id, work);
        }
    }
    Ok(())
}

/// The selected members an object does not go to (or keeps only what it runs on), with why.
fn exclusions(selection: &Selection, division: &Division) -> Vec<ClusterExclusion> {
    let to = |e: &crate::eligibility::Excluded| ClusterExclusion {
        cluster: e.cluster.clone(),
        reason: e.reason.to_string(),
        message: Some(e.message.clone()),
    };
    selection
        .excluded
        .iter()
        .map(to)
        .chain(
            selection
                .held
                .iter()
                .filter(|e| !division.contains_key(&e.cluster))
                .map(to),
        )
        .collect()
}

/// The object with its type set (lists of dynamic objects leave it out).
pub fn typed(mut object: DynamicObject, ar: &ApiResource) -> DynamicObject {
    object.types = Some(kube::api::TypeMeta {
        api_version: ar.api_version.clone(),
        kind: ar.kind.clone(),
    });
    object
}

/// The name of the APIResourceImport (and NegotiatedAPIResource) of a type.
pub fn import_name(ar: &ApiResource) -> String {
    names::api_resource_name(&ar.group, &ar.version, &ar.plural)
}

#[cfg(test)]
mod tests;
