//! Stage 1, select and place: for every object of the selected types, whether this Placement
//! places it (the most specific Placement does), whether it may go to any member at all (Pod
//! Security, bindings, external IPs), which candidates can take it (their schema), how it is
//! divided among them, and the manifest of each copy it wants.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_api::Placement;
use flotilla_api::placement::{ClusterDecision, ClusterExclusion, ObjectDecision};
use flotilla_api::reasons;
use flotilla_interpreter::hub_made::made_by_the_hub;
use flotilla_interpreter::{Divides, HubStatus, Interpreter};
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use serde_json::Value;

use super::entry::Entry;
use super::holdings::Holdings;
use super::{Aggregated, Divided, Findings, POD_SECURITY_RETRY, Plan};
use crate::compatibility::MemberSchema;
use crate::division::{Candidate, Division, divide};
use crate::eligibility::Selection;
use crate::keys::{CopyKey, ObjectKey, import_name, typed};
use crate::observation::Observation;
use crate::ordinals::{Held, Layout, Range, lay_out};
use crate::pod_security::Verdict;
use crate::references::{Reference, references};
use crate::render::{Share, member_manifest};
use crate::specificity::{Selectable, specificity, winner};
use crate::works::{settled, unreachable};

/// What placing the selected objects decided, for the stages after it.
#[derive(Default)]
pub(super) struct Placing<'o> {
    /// The manifest of every wanted copy.
    pub wanted: BTreeMap<CopyKey, Entry>,
    /// The objects this Placement places: selected and placed by no other Placement, or
    /// following a workload it places.
    pub placing: BTreeSet<ObjectKey>,
    /// Every object seen on the hub, as observed: a copy that is kept is rendered from it.
    pub seen: BTreeMap<ObjectKey, &'o DynamicObject>,
    /// The objects another Placement places.
    pub handed_over: BTreeSet<ObjectKey>,
    /// Copies whose member cannot take the object (Rule 5: checked per object).
    pub incompatible: BTreeSet<CopyKey>,
    /// What the placed workloads refer to, and the members they run on.
    pub followed: BTreeMap<Reference, BTreeSet<String>>,
}

/// Places every object of the selected types; the decisions, divisions and hub statuses go to
/// `out`.
pub(super) fn place<'o>(
    obs: &'o Observation,
    selection: &Selection,
    holdings: &Holdings<'_>,
    out: &mut Plan,
) -> Result<Placing<'o>, serde_json::Error> {
    let placement = &*obs.placement;
    let placer = Placer {
        obs,
        selection,
        holdings,
        neighbours: obs.neighbours_here(),
        name: placement.name_any(),
    };
    let mut placing = Placing::default();
    for listed in &obs.types {
        let ar = &listed.resource;
        let schemas: BTreeMap<&str, MemberSchema> = selection
            .candidates
            .iter()
            .filter_map(|c| {
                let key = (import_name(ar), c.cluster.clone());
                let import = obs.imports.get(&key).map(|i| &**i);
                Some((c.cluster.as_str(), MemberSchema::of(import)?))
            })
            .collect();
        for object in &listed.objects {
            placer.object(ar, &schemas, object, &mut placing, out)?;
        }
    }
    Ok(placing)
}

/// What placing each object reads.
struct Placer<'a, 'o> {
    obs: &'o Observation,
    selection: &'a Selection,
    holdings: &'a Holdings<'a>,
    /// The live Placements of the namespace, to settle which one places an object.
    neighbours: Vec<&'o Placement>,
    /// This Placement's name.
    name: String,
}

impl<'o> Placer<'_, 'o> {
    /// Places one object of type `ar`.
    fn object(
        &self,
        ar: &ApiResource,
        schemas: &BTreeMap<&str, MemberSchema>,
        listed: &'o DynamicObject,
        placing: &mut Placing<'o>,
        out: &mut Plan,
    ) -> Result<(), serde_json::Error> {
        let spec = &self.obs.placement.spec;
        let kind = self.obs.kinds.of(&ar.api_version, &ar.kind);
        let object = typed(listed.clone(), ar);
        let object_name = object.name_any();
        let key = ObjectKey::new(&ar.api_version, &ar.kind, &object_name);
        placing.seen.insert(key.clone(), listed);
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
            return Ok(());
        }
        if self.placed_elsewhere(ar, &key, &selectable, out) {
            placing.handed_over.insert(key);
            return Ok(());
        }
        placing.placing.insert(key.clone());
        let manifest = member_manifest(kind, &object, Share::default());
        // Pods the hub would refuse in this namespace, and a binding that would grant more in a
        // member than here, go to no member (design rule 9).
        let refused = refusal(self.obs, &key, &mut out.findings);
        if refused.as_ref().is_some_and(|(r, _)| {
            [reasons::POD_SECURITY_UNKNOWN, reasons::BINDING_UNKNOWN].contains(r)
        }) {
            out.recheck_after = Some(
                out.recheck_after
                    .map_or(POD_SECURITY_RETRY, |r| r.min(POD_SECURITY_RETRY)),
            );
        }
        let mut excluded_here: Vec<ClusterExclusion> = Vec::new();
        let candidates: Vec<Candidate> = self
            .selection
            .candidates
            .iter()
            .filter(|c| {
                let why = match &refused {
                    Some((reason, why)) => Some((reason.to_string(), why.clone())),
                    None => schemas
                        .get(c.cluster.as_str())
                        .and_then(|schema| schema.check(&manifest).err())
                        .map(|why| {
                            placing
                                .incompatible
                                .insert(CopyKey::new(key.clone(), &c.cluster));
                            (why.reason, why.message)
                        }),
                };
                let Some((reason, message)) = why else {
                    return true;
                };
                excluded_here.push(ClusterExclusion {
                    cluster: c.cluster.clone(),
                    reason,
                    message: Some(message),
                });
                false
            })
            .cloned()
            .collect();
        let divides = kind.divides(&object.data, spec.replica_scheduling.type_);
        let total = total_of(kind, &object.data, divides);
        let shares = self.divide(&key, &object.data, divides, total, &candidates);
        let subject = Subject {
            kind,
            key: &key,
            object: &object,
            divides,
            total,
        };
        record_hub_status(out, &subject, &shares);
        let mut decision = ObjectDecision {
            api_version: ar.api_version.clone(),
            kind: ar.kind.clone(),
            name: object_name,
            excluded: exclusions(self.selection, &shares.division),
            ..Default::default()
        };
        decision.excluded.extend(excluded_here);
        self.copies(&subject, &shares, placing, &mut decision)?;
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
                duplicated: divides == Divides::Not,
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
                placing
                    .followed
                    .entry(reference)
                    .or_default()
                    .extend(runs_on.clone());
            }
        }
        out.decisions.push((key, decision));
        Ok(())
    }

    /// Whether another Placement of the namespace places the object (a more specific one, or an
    /// older one as specific): its decision says which. Equally specific Placements are
    /// reported as a conflict.
    fn placed_elsewhere(
        &self,
        ar: &ApiResource,
        key: &ObjectKey,
        selectable: &Selectable<'_>,
        out: &mut Plan,
    ) -> bool {
        let name = &self.name;
        let Some(verdict) = winner(&self.neighbours, selectable) else {
            return false;
        };
        if verdict.winner == *name && verdict.tied.is_empty() {
            return false;
        }
        if verdict.tied.contains(name) || verdict.winner == *name {
            let mut all = verdict.tied.clone();
            all.push(verdict.winner.clone());
            all.sort();
            out.findings.conflicts.push(format!(
                "{} {} is selected as specifically by Placements {}; {} (the oldest) places it",
                ar.kind,
                key.name,
                all.join(", "),
                verdict.winner
            ));
        }
        if verdict.winner == *name {
            return false;
        }
        out.decisions.push((
            key.clone(),
            ObjectDecision {
                api_version: ar.api_version.clone(),
                kind: ar.kind.clone(),
                name: key.name.to_string(),
                overridden_by: Some(verdict.winner),
                ..Default::default()
            },
        ));
        true
    }

    /// How the object's `total` is divided among `candidates`, given what each member's copy
    /// holds now.
    fn divide(
        &self,
        key: &ObjectKey,
        data: &Value,
        divides: Divides,
        total: u32,
        candidates: &[Candidate],
    ) -> Shares {
        let spec = &self.obs.placement.spec;
        // What each member's copy holds now (a copy being removed included).
        // By range (copies order by object, then member): not a scan of every copy per object.
        let first = CopyKey::new(key.clone(), "");
        let holding: BTreeMap<String, Share> = self
            .holdings
            .previous
            .range::<&CopyKey, _>(&first..)
            .take_while(|(k, _)| k.object == *key)
            .map(|(k, s)| (k.cluster.to_string(), *s))
            .collect();
        let mut shares = Shares::default();
        shares.division = match divides {
            Divides::Replicas => {
                // A copy being removed no longer counts: a member coming back after its
                // replicas moved does not take them back unless asked (rebalanceOnJoin).
                let before: Division = holding
                    .iter()
                    .filter_map(|(c, s)| Some((c.clone(), s.replicas?)))
                    .collect();
                divide(total, candidates, &before, spec.rebalance_on_join).unwrap_or_default()
            }
            Divides::Ordinals => {
                shares.held_ordinals = ordinals_held(self.obs, key, &holding, self.holdings);
                let start = data["spec"]["ordinals"]["start"]
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(0);
                shares.layout = lay_out(
                    Range::new(start, total),
                    candidates,
                    &shares.held_ordinals,
                    spec.rebalance_on_join,
                )
                .ok();
                shares
                    .layout
                    .as_ref()
                    .map(Layout::division)
                    .unwrap_or_default()
            }
            Divides::Completions => completions_division(total, candidates, &holding),
            Divides::One => {
                // Where it runs, it stays while its member may keep it.
                let before: Division = holding.keys().map(|c| (c.clone(), 1)).collect();
                divide(1, candidates, &before, false).unwrap_or_default()
            }
            Divides::Not => {
                // A copy everywhere, except that a held member keeps only the copy it has.
                let live = |c: &str| {
                    self.holdings
                        .held
                        .contains_key(&CopyKey::new(key.clone(), c))
                };
                candidates
                    .iter()
                    .filter(|c| !c.held || live(&c.cluster))
                    .map(|c| (c.cluster.clone(), 0))
                    .collect()
            }
        };
        shares
    }

    /// The copy of the object each member of its division gets, and its place in the decision.
    fn copies(
        &self,
        subject: &Subject<'_>,
        shares: &Shares,
        placing: &mut Placing<'o>,
        decision: &mut ObjectDecision,
    ) -> Result<(), serde_json::Error> {
        let Subject {
            kind,
            key,
            object,
            divides,
            total,
        } = *subject;
        let divided = divides != Divides::Not;
        // Scaled to 0, a divided workload keeps its copies, at 0 replicas, so that the members
        // agree with the hub and scaling up again reuses them.
        let scaled_to_zero = matches!(divides, Divides::Replicas | Divides::Ordinals) && total == 0;
        // Copies of the same share are the same manifest: rendered once.
        let mut rendered: Vec<(Share, Entry)> = Vec::new();
        for (cluster, n) in &shares.division {
            let copy = CopyKey::new(key.clone(), cluster);
            let share = match (divides, &shares.layout) {
                (Divides::Replicas | Divides::Completions, _) => Share::of_count(kind, object, *n),
                (Divides::Ordinals, Some(l)) => {
                    Share::ordinals(l.ranges.get(cluster).copied().unwrap_or_default())
                }
                _ => Share::default(),
            };
            // A StatefulSet's copy that still lets go of its ordinals stays until its member
            // runs none of them.
            let letting_go = shares
                .held_ordinals
                .get(cluster)
                .is_some_and(|h| h.range.count > 0 || !h.settled);
            let live = self.holdings.held.contains_key(&copy);
            if divided && *n == 0 && !(live && (scaled_to_zero || letting_go)) {
                continue;
            }
            let entry = match rendered.iter().find(|(s, _)| *s == share) {
                Some((_, entry)) => entry.clone(),
                None => {
                    let entry = Entry::new(member_manifest(kind, object, share))?;
                    rendered.push((share, entry.clone()));
                    entry
                }
            };
            placing.wanted.insert(copy, entry);
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
        Ok(())
    }
}

/// An object being placed, as its kind reads it.
#[derive(Clone, Copy)]
struct Subject<'x> {
    kind: &'x dyn Interpreter,
    key: &'x ObjectKey,
    object: &'x DynamicObject,
    divides: Divides,
    /// The replicas (completions, pods) it asks for in all.
    total: u32,
}

/// How an object is divided among its members.
#[derive(Default)]
struct Shares {
    /// Replicas (completions, ordinals) per member; 0 for a copy that is not divided.
    division: Division,
    /// For a StatefulSet divided by ordinals: the ranges asked for now, and what they wait for.
    layout: Option<Layout>,
    /// For a StatefulSet divided by ordinals: what each member's copy holds now.
    held_ordinals: BTreeMap<String, Held>,
}

/// Whether the object may go to no member at all, with the reason and why: its pods violate
/// the namespace's Pod Security level, it is a binding that would grant more in a member, or a
/// Service with external IPs the namespace may not place (or that could not be told now). What
/// is refused is added to `findings`.
fn refusal(
    obs: &Observation,
    key: &ObjectKey,
    findings: &mut Findings,
) -> Option<(&'static str, String)> {
    [
        (
            &obs.pod_security,
            &mut findings.pod_security,
            reasons::POD_SECURITY_VIOLATION,
            reasons::POD_SECURITY_UNKNOWN,
            "the hub could not check its pods against the namespace's Pod Security level now: ",
        ),
        (
            &obs.bindings,
            &mut findings.bindings,
            reasons::BINDING_HELD_BACK,
            reasons::BINDING_UNKNOWN,
            "",
        ),
        (
            &obs.external_ips,
            &mut findings.external_ips,
            reasons::EXTERNAL_IPS_HELD_BACK,
            reasons::EXTERNAL_IPS_HELD_BACK,
            "",
        ),
    ]
    .into_iter()
    .find_map(|(verdicts, found, violates, unknown, unknown_prefix)| {
        let (reason, why) = match verdicts.get(key)? {
            Verdict::Allowed => return None,
            Verdict::Violates(why) => (violates, why.clone()),
            Verdict::Unknown(why) => (unknown, format!("{unknown_prefix}{why}")),
        };
        found.push(format!("{} {}: {why}", key.kind, key.name));
        Some((reason, why))
    })
}

/// The replicas (completions, pods) an object asks for in all, as it is divided.
fn total_of(kind: &dyn Interpreter, data: &Value, divides: Divides) -> u32 {
    let number = |pointer: &str| {
        data.pointer(pointer)
            .and_then(Value::as_u64)
            .map_or(u32::MAX, |n| u32::try_from(n).unwrap_or(u32::MAX))
    };
    match divides {
        Divides::Replicas => data
            .pointer(kind.replicas_pointer())
            .map_or(1, |_| number(kind.replicas_pointer())),
        Divides::Completions => number("/spec/completions"),
        Divides::One => 1,
        Divides::Ordinals | Divides::Not => data["spec"]["replicas"]
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(1),
    }
}

/// A Deployment's or StatefulSet's hub status comes from its copies' replicas: what it needs
/// to be written.
fn record_hub_status(out: &mut Plan, subject: &Subject<'_>, shares: &Shares) {
    let Subject {
        kind,
        key,
        object,
        divides,
        total,
    } = *subject;
    let (division, duplicated, ordinals) = match (divides, kind.hub_status()) {
        (Divides::Replicas | Divides::Ordinals, HubStatus::Deployment | HubStatus::StatefulSet) => {
            (shares.division.clone(), false, shares.layout.clone())
        }
        // A duplicated workload runs all its replicas in every member: its hub status says how
        // far the copy furthest behind is.
        (Divides::Not, HubStatus::Deployment | HubStatus::StatefulSet) => (
            shares.division.keys().map(|c| (c.clone(), total)).collect(),
            true,
            None,
        ),
        _ => return,
    };
    out.divisions.push(Divided {
        key: key.clone(),
        object: object.clone(),
        division,
        total,
        duplicated,
        ordinals,
    });
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
    holdings: &Holdings<'_>,
) -> BTreeMap<String, Held> {
    let exists =
        |c: &str| obs.clusters.iter().any(|x| x.name_any() == c) || obs.elsewhere.contains(c);
    holding
        .iter()
        .filter(|(cluster, _)| exists(cluster))
        .map(|(cluster, share)| {
            let range = share.range();
            let copy = CopyKey::new(key.clone(), cluster);
            let works = holdings
                .held
                .get(&copy)
                .map(Vec::as_slice)
                .unwrap_or_default();
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
