//! Pure planning: from what the splitter observed of one Placement ([`Observation`]) to what it
//! must do ([`Plan`]): the Works to write, the Works to delete with the reason, the Works kept
//! and why, and the decision for every object. No I/O happens here, so every rule users rely on
//! (never delete for want of knowledge, keep a failed member's copy until its replacements are
//! available, one Work per object and member) is unit tested on values.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::placement::{
    ClusterDecision, ClusterExclusion, ObjectDecision, ReplicaSchedulingType,
};
use flotilla_api::{
    ApiResourceImport, Cluster, Placement, Work, WorkSpec, annotations, conditions, labels, names,
};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};

use crate::compatibility::MemberSchema;
use crate::division::{Candidate, Division, divide};
use crate::eligibility::{Selection, select};
use crate::hub_made::made_by_kubernetes;
use crate::references::{Reference, references};
use crate::render::{member_manifest, render};
use crate::specificity::{Selectable, specificity, winner};

/// How long the Works of an object that is no longer on the hub wait before they are deleted:
/// a delete and a create under the same name (`kubectl replace --force`) that land in two
/// passes are then still seen as the replacement they are.
pub const GONE_GRACE: Duration = Duration::from_secs(1);

/// Which copy a Work is: its hub object's UID and its member.
pub type CopyKey = (String, String);

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
    /// Since when the objects of Works this Placement holds have been missing on the hub, as
    /// remembered from earlier passes (see [`Plan::absent`]).
    pub absent_since: BTreeMap<String, Timestamp>,
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

/// Why a Work is deleted.
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
    /// It was written under an older name; the Work that replaces it is applied.
    Renamed,
}

/// A Work the plan neither writes nor deletes although it is not wanted as it is, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Keep {
    /// Its type cannot be read now: unknown is not absent.
    TypeUnreadable,
    /// Its Cluster is being deleted: registration decides what becomes of it.
    ClusterDeleting,
    /// Its Cluster is outside this splitter's `--cluster-selector`.
    ClusterElsewhere,
    /// Another Placement places its object now (that Placement rewrites it).
    HandedOver,
    /// Its object is still selected but no member can take it now: what runs stays.
    Stranded,
    /// Its member failed or can no longer take the object: it goes once every replacement
    /// copy is available.
    AwaitingReplacements,
    /// Its object went missing less than [`GONE_GRACE`] ago.
    AwaitingGrace,
    /// The Work that replaces it under its new name is not applied yet.
    RenamePending,
    /// Already being deleted.
    Terminating,
}

/// A Deployment divided among members, for its aggregated status.
#[derive(Clone, Debug)]
pub struct Divided {
    pub object: DynamicObject,
    pub division: Division,
    pub total: u32,
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
}

/// What one pass does, and why.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub selection: Selection,
    /// Every wanted Work, by copy; those not in `writes` without their manifests (the hub has
    /// them as wanted, or is deleting them).
    pub wanted: BTreeMap<CopyKey, Work>,
    /// The copies whose wanted Work differs from the hub's (or is not there): to write.
    pub writes: BTreeSet<CopyKey>,
    pub deletes: Vec<Deletion>,
    /// Works left as they are although not wanted as they are, by namespace and name.
    pub kept: BTreeMap<(String, String), Keep>,
    /// The decision for every selected object, with the object's UID.
    pub decisions: Vec<(String, ObjectDecision)>,
    pub divisions: Vec<Divided>,
    pub findings: Findings,
    /// The UIDs of objects whose Works this Placement holds but that are not on the hub, with
    /// since when: the next pass's [`Observation::absent_since`].
    pub absent: BTreeMap<String, Timestamp>,
    /// When to look again without any change (a time-bound state runs out).
    pub recheck_after: Option<Duration>,
}

/// Whether condition `type_` of a Work is True for the Work's current spec (generation): a copy
/// just given more replicas is not available until its member has them.
pub fn holds_now(w: &Work, type_: &str) -> bool {
    w.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
        .is_some_and(|c| c.status == "True" && c.observed_generation == w.metadata.generation)
}

/// Which copy a Work is: its hub object's UID and its member.
pub fn copy_key(w: &Work) -> Option<CopyKey> {
    Some((
        w.labels().get(labels::SOURCE_UID)?.clone(),
        w.cluster_name()?.to_string(),
    ))
}

/// Replicas a Work asks its member to run (its manifest's `spec.replicas`).
fn work_replicas(w: &Work) -> Option<u32> {
    let m = w.spec.manifests.first()?;
    m.data
        .get("spec")?
        .get("replicas")?
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
}

/// A Work's namespace and name.
pub fn key_of(w: &Work) -> (String, String) {
    (w.namespace().unwrap_or_default(), w.name_any())
}

/// Set only in the splitter's own cache, never written: the digest of a cached Work's spec
/// (see [`lean`]).
pub const CACHED_SPEC_DIGEST: &str = "flotilla.dev/cached-spec-digest";

/// A digest of a Work's spec: equal specs have equal digests (FNV-1a of its JSON, whose maps
/// serde_json keeps sorted).
pub fn spec_digest(spec: &WorkSpec) -> String {
    let json = serde_json::to_vec(spec).unwrap_or_default();
    format!("{:016x}", flotilla_api::names::fnv1a(json))
}

/// What the splitter's cache keeps of a Work: all but its manifests, of which it keeps what a
/// pass reads (apiVersion, kind, name, namespace and `spec.replicas`), and the digest of the
/// whole spec, so that a pass tells a Work that is as wanted without a second copy of every
/// placed object in memory.
pub fn lean(work: &mut Work) {
    let digest = spec_digest(&work.spec);
    for m in &mut work.spec.manifests {
        let replicas = m.data.get("spec").and_then(|s| s.get("replicas")).cloned();
        m.metadata = kube::api::ObjectMeta {
            name: m.metadata.name.take(),
            namespace: m.metadata.namespace.take(),
            ..Default::default()
        };
        m.data = match replicas {
            Some(r) => serde_json::json!({"spec": {"replicas": r}}),
            None => serde_json::json!({}),
        };
    }
    work.annotations_mut()
        .insert(CACHED_SPEC_DIGEST.to_string(), digest);
}

/// The digest of a hub Work's spec: as its cache entry recorded it, or of the spec itself.
fn hub_digest(hub: &Work) -> String {
    hub.annotations()
        .get(CACHED_SPEC_DIGEST)
        .cloned()
        .unwrap_or_else(|| spec_digest(&hub.spec))
}

/// Whether the hub's Work already says what `wanted` says: the same spec (by digest: the cache
/// keeps no manifests), and every label and annotation the splitter sets. Anything else another
/// writer set on it is left alone.
pub fn up_to_date(wanted: &Work, hub: &Work) -> bool {
    let subset = |w: &Option<BTreeMap<String, String>>, h: &Option<BTreeMap<String, String>>| {
        let h = h.as_ref();
        w.iter()
            .flatten()
            .all(|(k, v)| h.and_then(|h| h.get(k)) == Some(v))
    };
    hub.metadata.deletion_timestamp.is_none()
        && subset(&wanted.metadata.labels, &hub.metadata.labels)
        && subset(&wanted.metadata.annotations, &hub.metadata.annotations)
        && wanted
            .finalizers()
            .iter()
            .all(|f| hub.finalizers().contains(f))
        && spec_digest(&wanted.spec) == hub_digest(hub)
}

/// Takes each wanted Work as it is rendered: names the Work it replaces (a copy written under an
/// older name is renamed by handing over: the new Work names the old one, the syncer lets it
/// take over the member objects, and the old Work goes once the new one is applied), compares
/// it with the hub's Work of the same name, and keeps it whole only when it must be written.
struct Wanting<'a> {
    by_name: BTreeMap<(String, String), &'a Work>,
    /// The names of the live Works of each copy.
    names: BTreeMap<CopyKey, Vec<String>>,
}

impl<'a> Wanting<'a> {
    fn new(existing: &[&'a Work]) -> Self {
        let mut names: BTreeMap<CopyKey, Vec<String>> = BTreeMap::new();
        for w in existing {
            if w.metadata.deletion_timestamp.is_none()
                && let Some(key) = copy_key(w)
            {
                names.entry(key).or_default().push(w.name_any());
            }
        }
        Self {
            by_name: existing.iter().map(|w| (key_of(w), *w)).collect(),
            names,
        }
    }

    fn want(&self, out: &mut Plan, key: CopyKey, mut work: Work) {
        if let Some(old) = self
            .names
            .get(&key)
            .and_then(|names| names.iter().find(|n| **n != work.name_any()))
        {
            work.annotations_mut()
                .insert(annotations::REPLACES.to_string(), old.clone());
        }
        let hub = self.by_name.get(&key_of(&work));
        // A Work being deleted is written again once it is gone (its deletion starts a pass).
        let deleting = hub.is_some_and(|h| h.metadata.deletion_timestamp.is_some());
        if !deleting && !hub.is_some_and(|h| up_to_date(&work, h)) {
            out.writes.insert(key.clone());
        } else {
            // Not written: the manifest is not needed again, and a pass of many objects
            // would otherwise hold a second copy of each.
            work.spec.manifests.clear();
        }
        out.wanted.insert(key, work);
    }
}

/// Plans one pass of `obs.placement`.
pub fn plan(obs: &Observation) -> Result<Plan, serde_json::Error> {
    let placement = &*obs.placement;
    let ns = placement.namespace().unwrap_or_default();
    let name = placement.name_any();
    let spec = &placement.spec;
    let clusters: Vec<&Cluster> = obs.clusters.iter().map(|c| &**c).collect();
    let selection = select(spec, &clusters, obs.now);
    let neighbours: Vec<&Placement> = obs
        .neighbours
        .iter()
        .map(|p| &**p)
        .filter(|p| p.namespace().as_deref() == Some(ns.as_str()))
        .collect();
    let existing: Vec<&Work> = obs.works.iter().map(|w| &**w).collect();

    let mut out = Plan {
        recheck_after: selection.recheck_after,
        ..Plan::default()
    };
    let wanting = Wanting::new(&existing);
    let by_name = &wanting.by_name;
    // Whether a copy has a Work that is not being deleted.
    let live = |uid: &str, cluster: &str| {
        wanting
            .names
            .contains_key(&(uid.to_string(), cluster.to_string()))
    };
    let mut followed: BTreeMap<Reference, BTreeSet<String>> = BTreeMap::new();
    // Copies whose member cannot take the object (Rule 5: checked per object).
    let mut incompatible: BTreeSet<CopyKey> = BTreeSet::new();
    // Objects this Placement places (selected, not placed by another Placement), every object
    // seen on the hub, and those another Placement places.
    let mut placing: BTreeSet<String> = BTreeSet::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut handed_over: BTreeSet<String> = BTreeSet::new();

    for listed in &obs.types {
        let ar = &listed.resource;
        let member_schemas: BTreeMap<&str, MemberSchema> = selection
            .candidates
            .iter()
            .filter_map(|c| {
                let key = (import_name(ar), c.cluster.clone());
                let import = obs.imports.get(&key).map(|i| &**i);
                Some((c.cluster.as_str(), MemberSchema::of(import)?))
            })
            .collect();
        for object in &listed.objects {
            let object = typed(object.clone(), ar);
            let object_name = object.name_any();
            let uid = object.metadata.uid.clone().unwrap_or_default();
            seen.insert(uid.clone());
            let selectable = Selectable {
                api_version: &ar.api_version,
                kind: &ar.kind,
                name: &object_name,
                labels: object.labels(),
            };
            if specificity(&spec.resource_selectors, &selectable).is_none()
                || object.metadata.deletion_timestamp.is_some()
                || made_by_kubernetes(&ar.api_version, &ar.kind, &object)
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
                    handed_over.insert(uid.clone());
                    out.decisions.push((
                        uid,
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
            placing.insert(uid.clone());
            let manifest = member_manifest(&object, None);
            let mut excluded_here: Vec<ClusterExclusion> = Vec::new();
            let candidates: Vec<Candidate> = selection
                .candidates
                .iter()
                .filter(|c| {
                    let verdict = member_schemas
                        .get(c.cluster.as_str())
                        .map_or(Ok(()), |schema| schema.check(&manifest));
                    match verdict {
                        Ok(()) => true,
                        Err(why) => {
                            incompatible.insert((uid.clone(), c.cluster.clone()));
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
            let divisible = ar.kind == "Deployment"
                && spec.replica_scheduling.type_ == ReplicaSchedulingType::Divided;
            let total = object.data["spec"]["replicas"]
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(1);
            let division: Division = if divisible {
                let previous: Division = existing
                    .iter()
                    .filter(|w| w.labels().get(labels::SOURCE_UID) == Some(&uid))
                    // A copy being removed no longer counts: a member coming back after its
                    // replicas moved does not take them back unless asked (rebalanceOnJoin).
                    .filter(|w| w.metadata.deletion_timestamp.is_none())
                    .filter_map(|w| Some((w.cluster_name()?.to_string(), work_replicas(w)?)))
                    .collect();
                let d = divide(total, &candidates, &previous, spec.rebalance_on_join)
                    .unwrap_or_default();
                out.divisions.push(Divided {
                    object: object.clone(),
                    division: d.clone(),
                    total,
                });
                d
            } else {
                // A copy everywhere, except that a held member keeps only the copy it has.
                candidates
                    .iter()
                    .filter(|c| !c.held || live(&uid, &c.cluster))
                    .map(|c| (c.cluster.clone(), 0))
                    .collect()
            };
            let mut decision = ObjectDecision {
                api_version: ar.api_version.clone(),
                kind: ar.kind.clone(),
                name: object_name,
                excluded: exclusions(&selection, &division),
                ..Default::default()
            };
            decision.excluded.extend(excluded_here);
            // Scaled to 0, a Deployment keeps its copies, at 0 replicas, so that the members
            // agree with the hub and scaling up again reuses them.
            let scaled_to_zero = divisible && total == 0;
            for (cluster, n) in &division {
                if divisible && *n == 0 && !(scaled_to_zero && live(&uid, cluster)) {
                    continue;
                }
                let work = render(&object, cluster, divisible.then_some(*n), &name, spec)?;
                wanting.want(&mut out, (uid.clone(), cluster.clone()), work);
                decision.clusters.push(ClusterDecision {
                    cluster: cluster.clone(),
                    replicas: divisible.then(|| i32::try_from(*n).unwrap_or(i32::MAX)),
                    ..Default::default()
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
            out.decisions.push((uid, decision));
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
            || made_by_kubernetes(&ar.api_version, &ar.kind, object)
            || winner(&neighbours, &selectable).is_some()
        {
            continue;
        }
        let object = typed(object.clone(), &ar);
        let uid = object.metadata.uid.clone().unwrap_or_default();
        // It follows a workload this Placement places: its copies stay while the workload's do.
        placing.insert(uid.clone());
        seen.insert(uid.clone());
        let mut decision = ObjectDecision {
            api_version: ar.api_version.clone(),
            kind: ar.kind.clone(),
            name: reference.name.clone(),
            ..Default::default()
        };
        for cluster in on {
            let work = render(&object, &cluster, None, &name, spec)?;
            wanting.want(&mut out, (uid.clone(), cluster.clone()), work);
            decision.clusters.push(ClusterDecision {
                cluster,
                ..Default::default()
            });
        }
        out.decisions.push((uid, decision));
    }

    let wanted_names: BTreeSet<(String, String)> = out.wanted.values().map(key_of).collect();
    // The wanted copies whose Work is on the hub as wanted and that the member reports applied
    // (available) for that spec.
    let reported = |type_: &str| -> BTreeSet<CopyKey> {
        out.wanted
            .iter()
            .filter(|(key, _)| !out.writes.contains(*key))
            .filter(|(_, w)| by_name.get(&key_of(w)).is_some_and(|h| holds_now(h, type_)))
            .map(|(key, _)| key.clone())
            .collect()
    };
    let applied = reported(conditions::APPLIED);
    let available = reported(conditions::AVAILABLE);

    // Every Work held that is not wanted as it is: deleted, or kept and why.
    let mut stranded: BTreeSet<String> = BTreeSet::new();
    for work in &existing {
        let id = key_of(work);
        // Under a wanted name: it is (or is about to be) the wanted Work.
        if wanted_names.contains(&id) {
            continue;
        }
        let keep = |out: &mut Plan, why: Keep| {
            out.kept.insert(id.clone(), why);
        };
        if work.metadata.deletion_timestamp.is_some() {
            keep(&mut out, Keep::Terminating);
            continue;
        }
        let Some((uid, cluster)) = copy_key(work) else {
            continue;
        };
        let cluster_state = obs.clusters.iter().find(|c| c.name_any() == cluster);
        if cluster_state.is_some_and(|c| c.metadata.deletion_timestamp.is_some()) {
            keep(&mut out, Keep::ClusterDeleting);
            continue;
        }
        if cluster_state.is_none() && obs.elsewhere.contains(&cluster) {
            keep(&mut out, Keep::ClusterElsewhere);
            continue;
        }
        if obs.unreadable.iter().any(|t| t.places(work)) {
            keep(&mut out, Keep::TypeUnreadable);
            continue;
        }
        if handed_over.contains(&uid) {
            keep(&mut out, Keep::HandedOver);
            continue;
        }
        let replacement = out.wanted.get(&(uid.clone(), cluster.clone()));
        let delete = |out: &mut Plan, why: Removal| {
            out.deletes.push(Deletion {
                namespace: id.0.clone(),
                name: id.1.clone(),
                uid: work.metadata.uid.clone(),
                resource_version: work.metadata.resource_version.clone(),
                why,
            });
        };
        // Under its old name: it goes once the Work that replaces it is applied.
        if replacement.is_some() {
            if applied.contains(&(uid.clone(), cluster.clone())) {
                delete(&mut out, Removal::Renamed);
            } else {
                keep(&mut out, Keep::RenamePending);
            }
            continue;
        }
        if cluster_state.is_none() {
            delete(&mut out, Removal::ClusterGone);
            continue;
        }
        if !seen.contains(&uid) {
            // Gone from the hub: after a grace, so a re-creation under the same name in the
            // next pass still finds its copies.
            let since = obs.absent_since.get(&uid).copied().unwrap_or(obs.now);
            out.absent.insert(uid.clone(), since);
            let waited = obs.now.duration_since(since);
            let grace = SignedDuration::try_from(GONE_GRACE).unwrap_or_default();
            if waited >= grace {
                delete(&mut out, Removal::ObjectGone);
            } else {
                keep(&mut out, Keep::AwaitingGrace);
                let left = Duration::try_from(grace - waited).unwrap_or(GONE_GRACE);
                out.recheck_after = Some(out.recheck_after.map_or(left, |r| r.min(left)));
            }
            continue;
        }
        if !placing.contains(&uid) {
            delete(&mut out, Removal::NotSelected);
            continue;
        }
        let others: Vec<&CopyKey> = out.wanted.keys().filter(|(u, _)| *u == uid).collect();
        if others.is_empty() {
            // Still selected, but no member can take it now (none eligible, or none whose API
            // can): what runs stays where it runs — never deleted for want of a better place.
            stranded.insert(uid);
            keep(&mut out, Keep::Stranded);
            continue;
        }
        // Its member failed, is held (cordoned, tainted) or can no longer take the object: the
        // copy goes once every wanted copy is available. A member that is fine and simply no
        // longer chosen (scaled down, affinity changed) gives its copy up at once.
        let member_failed = !selection
            .candidates
            .iter()
            .any(|c| c.cluster == cluster && !c.held)
            || incompatible.contains(&(uid.clone(), cluster.clone()));
        if member_failed && !others.iter().all(|k| available.contains(*k)) {
            keep(&mut out, Keep::AwaitingReplacements);
            continue;
        }
        delete(&mut out, Removal::Moved);
    }
    out.findings.stranded = stranded.len();
    out.findings.unsupported = obs.unsupported.clone();
    out.findings.unreadable = obs.unreadable.clone();
    out.selection = selection;
    Ok(out)
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
