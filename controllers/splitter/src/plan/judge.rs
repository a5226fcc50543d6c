//! Stage 4, judge the held copies: every copy a Work of this Placement holds that the pass
//! does not want as it is leaves its member, or stays, and why. The rule is [`fate`], a pure
//! function of what is known of one copy ([`Facts`]); [`judge`] gathers those facts.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use flotilla_api::conditions;
use k8s_openapi::jiff::SignedDuration;
use kube::ResourceExt;

use super::entry::Entry;
use super::holdings::{Holder, Holdings};
use super::place::Placing;
use super::{GONE_GRACE, HANDOVER_RECHECK, Keep, Plan, Removal};
use crate::eligibility::Selection;
use crate::keys::{CopyKey, ObjectKey, WorkId, key_of};
use crate::observation::Observation;
use crate::pod_security::Verdict;
use crate::render::{Share, member_manifest};
use crate::works::{copy_holds_now, manifest_status};

/// What is known of one held copy that the pass does not want as it is: all that decides
/// whether it may leave its member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    /// Its object is held back from every member (its pods violate the namespace's Pod
    /// Security level, a binding would grant more, external IPs), or that could not be told.
    pub held_back: bool,
    pub cluster: ClusterFact,
    /// Its type cannot be read now.
    pub type_unreadable: bool,
    /// Another Placement places its object now; `Some(true)` once that Placement's Work holds
    /// it and its member reports it applied.
    pub handed_over: Option<bool>,
    pub on_hub: OnHub,
    /// This Placement still places its object.
    pub placing: bool,
    /// The copies of its object the pass wants on other members.
    pub replacements: Replacements,
    /// Its member failed, is held (cordoned, tainted) or can no longer take the object.
    pub member_failed: bool,
}

/// The copy's Cluster, as this splitter sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterFact {
    /// One of the Clusters it places on.
    Present,
    /// Being deleted: registration decides what becomes of its Works.
    Deleting,
    /// Outside this splitter's `--cluster-selector`.
    Elsewhere,
    /// It no longer exists.
    Gone,
}

/// The copy's hub object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnHub {
    /// Listed now.
    Listed,
    /// Missing from the fresh list; `past_grace` once for longer than [`GONE_GRACE`].
    Missing { past_grace: bool },
}

/// The copies that replace one going away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replacements {
    /// None: no member can take the object now.
    None,
    /// Some are not yet reported available.
    Waiting,
    /// Every one is reported available.
    Available,
}

/// What becomes of a held copy the pass does not want as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// It leaves its member.
    Remove(Removal),
    /// It stays in its Work, rendered from its hub object as it is now.
    Retain(Keep),
    /// It stays, and the Works holding it are not written in this pass.
    Freeze(Keep),
    /// Its object is held back: it stays as its member has it.
    AsTheMemberHasIt,
}

/// The removal rule: a copy leaves its member only for a reason that proves it unwanted — its
/// object is gone (past the grace) or no longer selected, its Cluster is gone, another
/// Placement took it over, or every copy that replaces it is available (at once when its
/// member is fine and simply no longer chosen). Unknown is never absent: an unreadable type, a
/// Cluster being deleted or outside the selector, a held-back object keep everything.
pub fn fate(f: &Facts) -> Fate {
    if f.held_back {
        return Fate::AsTheMemberHasIt;
    }
    match f.cluster {
        ClusterFact::Deleting => return Fate::Freeze(Keep::ClusterDeleting),
        ClusterFact::Elsewhere => return Fate::Freeze(Keep::ClusterElsewhere),
        ClusterFact::Present | ClusterFact::Gone => {}
    }
    if f.type_unreadable {
        return Fate::Freeze(Keep::TypeUnreadable);
    }
    match f.handed_over {
        Some(true) => return Fate::Remove(Removal::TakenOver),
        Some(false) => return Fate::Retain(Keep::HandingOver),
        None => {}
    }
    if f.cluster == ClusterFact::Gone {
        return Fate::Remove(Removal::ClusterGone);
    }
    match f.on_hub {
        OnHub::Missing { past_grace: true } => return Fate::Remove(Removal::ObjectGone),
        OnHub::Missing { past_grace: false } => return Fate::Freeze(Keep::AwaitingGrace),
        OnHub::Listed => {}
    }
    if !f.placing {
        return Fate::Remove(Removal::NotSelected);
    }
    match f.replacements {
        Replacements::None => Fate::Retain(Keep::Stranded),
        Replacements::Waiting if f.member_failed => Fate::Retain(Keep::AwaitingReplacements),
        Replacements::Waiting | Replacements::Available => Fate::Remove(Removal::Moved),
    }
}

/// What judging the held copies leaves for packing.
pub(super) struct Judged {
    /// Kept copies rendered as they are, by copy.
    pub retained: BTreeMap<CopyKey, Entry>,
    /// The Works not written in this pass.
    pub frozen: BTreeSet<WorkId>,
    /// Objects still selected that no member can take now.
    pub stranded: BTreeSet<ObjectKey>,
}

/// Judges every copy held by a live Work of this Placement: the removals, kept copies, Work
/// deletions and absent objects go to `out`.
pub(super) fn judge(
    obs: &Observation,
    selection: &Selection,
    holders: &[Holder<'_>],
    holdings: &Holdings<'_>,
    others: &[(bool, Holder<'_>)],
    placed: &Placing<'_>,
    out: &mut Plan,
) -> Result<Judged, serde_json::Error> {
    let reported = |key: &CopyKey, type_: &str| reported(placed, holdings, key, type_);
    let mut judged = Judged {
        retained: BTreeMap::new(),
        frozen: BTreeSet::new(),
        stranded: BTreeSet::new(),
    };
    for (key, on) in &holdings.held {
        let key = *key;
        if placed.wanted.contains_key(key) {
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
        let since = obs
            .absent_since
            .get(&key.object)
            .copied()
            .unwrap_or(obs.now);
        let grace = SignedDuration::try_from(GONE_GRACE).unwrap_or_default();
        let waited = obs.now.duration_since(since);
        let facts = facts(
            obs,
            selection,
            others,
            placed,
            key,
            waited >= grace,
            &reported,
        );
        let mut freeze = |why: Keep| {
            out.kept.insert(key.clone(), why);
            judged.frozen.extend(on.iter().map(|h| key_of(h.work)));
        };
        match fate(&facts) {
            Fate::AsTheMemberHasIt => {
                // Without the member's manifest (its Work could not be read), the Works holding
                // it are not written at all: the hub's template never reaches the member.
                match obs.held_back.get(key) {
                    Some(manifest) => {
                        out.kept.insert(key.clone(), Keep::PodSecurity);
                        let entry = Entry::new(serde_json::to_value(manifest)?)?;
                        judged.retained.insert(key.clone(), entry);
                    }
                    None => freeze(Keep::PodSecurity),
                }
            }
            Fate::Freeze(why) => {
                freeze(why);
                if why == Keep::AwaitingGrace {
                    out.absent.insert(key.object.clone(), since);
                    let left = Duration::try_from(grace - waited).unwrap_or(GONE_GRACE);
                    out.recheck_after = Some(out.recheck_after.map_or(left, |r| r.min(left)));
                }
            }
            Fate::Retain(why) => {
                out.kept.insert(key.clone(), why);
                if why == Keep::Stranded {
                    judged.stranded.insert(key.object.clone());
                }
                if let Some(entry) = rendered_as_it_is(obs, holdings, placed, key)? {
                    judged.retained.insert(key.clone(), entry);
                }
            }
            Fate::Remove(why) => {
                if why == Removal::ObjectGone {
                    out.absent.insert(key.object.clone(), since);
                }
                out.removals.insert(key.clone(), why);
            }
        }
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
    Ok(judged)
}

/// What is known of held copy `key`.
fn facts(
    obs: &Observation,
    selection: &Selection,
    others: &[(bool, Holder<'_>)],
    placed: &Placing<'_>,
    key: &CopyKey,
    past_grace: bool,
    reported: &impl Fn(&CopyKey, &str) -> bool,
) -> Facts {
    let object = &key.object;
    let held_back = obs
        .pod_security
        .get(object)
        .or(obs.bindings.get(object))
        .or(obs.external_ips.get(object))
        .is_some_and(|v| *v != Verdict::Allowed);
    let cluster = match obs.clusters.iter().find(|c| c.name_any() == key.cluster) {
        Some(c) if c.metadata.deletion_timestamp.is_some() => ClusterFact::Deleting,
        Some(_) => ClusterFact::Present,
        None if obs.elsewhere.contains(key.cluster.as_str()) => ClusterFact::Elsewhere,
        None => ClusterFact::Gone,
    };
    let type_unreadable = obs
        .unreadable
        .iter()
        .any(|t| t.api_version == object.api_version && t.kind == object.kind);
    let handed_over = placed
        .handed_over
        .contains(object)
        .then(|| claimed(others, key));
    let on_hub = if placed.seen.contains_key(object) {
        OnHub::Listed
    } else {
        OnHub::Missing { past_grace }
    };
    // The wanted copies of the object, by range: copies order by object, then member, so a
    // pass judging many copies (a bulk delete) does not scan every wanted copy for each.
    let replacing: Vec<&CopyKey> = placed
        .wanted
        .range(CopyKey::new(object.clone(), "")..)
        .map(|(k, _)| k)
        .take_while(|k| k.object == *object)
        .collect();
    let replacements = if replacing.is_empty() {
        Replacements::None
    } else if replacing.iter().all(|k| reported(k, conditions::AVAILABLE)) {
        Replacements::Available
    } else {
        Replacements::Waiting
    };
    let member_failed = !selection
        .candidates
        .iter()
        .any(|c| c.cluster == key.cluster && !c.held)
        || placed.incompatible.contains(key);
    Facts {
        held_back,
        cluster,
        type_unreadable,
        handed_over,
        on_hub,
        placing: placed.placing.contains(object),
        replacements,
        member_failed,
    }
}

/// Whether another Placement's Work holds copy `key` and its member reports it applied: a copy
/// handed over leaves this Placement's Work then.
fn claimed(others: &[(bool, Holder<'_>)], key: &CopyKey) -> bool {
    others.iter().any(|(_, h)| {
        h.work.cluster_name() == Some(key.cluster.as_str())
            && manifest_status(h.work, &key.object)
                .is_some_and(|m| m.applied == flotilla_api::condition::ConditionStatus::True)
    })
}

/// Whether the Work of its type on the hub holds copy `key` as wanted, and the member reports
/// `type_` for it (`Applied`, `Available`) for that Work's spec.
fn reported(placed: &Placing<'_>, holdings: &Holdings<'_>, key: &CopyKey, type_: &str) -> bool {
    let Some(entry) = placed.wanted.get(key) else {
        return false;
    };
    holdings.held.get(key).into_iter().flatten().any(|h| {
        h.index.is_some()
            && h.manifest_digest(key)
                .is_some_and(|d| d == entry.digest_in(&h.work.name_any()))
            && copy_holds_now(h.work, &key.object, type_)
    })
}

/// A kept copy with an object on the hub, rendered from the object as it is now and as its
/// member runs it (its share of a divided object).
fn rendered_as_it_is(
    obs: &Observation,
    holdings: &Holdings<'_>,
    placed: &Placing<'_>,
    key: &CopyKey,
) -> Result<Option<Entry>, serde_json::Error> {
    let Some(object) = placed.seen.get(&key.object) else {
        return Ok(None);
    };
    let ObjectKey {
        api_version, kind, ..
    } = &key.object;
    let interpreter = obs.kinds.of(api_version, kind);
    let divides = interpreter.divides(&object.data, obs.placement.spec.replica_scheduling.type_);
    let share = match holdings.previous.get(key) {
        Some(s) if divides != flotilla_interpreter::Divides::Not => *s,
        _ => Share::default(),
    };
    let mut object = (*object).clone();
    object.types = Some(kube::api::TypeMeta {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
    });
    Entry::new(member_manifest(interpreter, &object, share)).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn facts() -> impl Strategy<Value = Facts> {
        let cluster = prop_oneof![
            Just(ClusterFact::Present),
            Just(ClusterFact::Deleting),
            Just(ClusterFact::Elsewhere),
            Just(ClusterFact::Gone),
        ];
        let on_hub = prop_oneof![
            Just(OnHub::Listed),
            any::<bool>().prop_map(|past_grace| OnHub::Missing { past_grace }),
        ];
        let replacements = prop_oneof![
            Just(Replacements::None),
            Just(Replacements::Waiting),
            Just(Replacements::Available),
        ];
        (
            any::<bool>(),
            cluster,
            any::<bool>(),
            proptest::option::of(any::<bool>()),
            on_hub,
            any::<bool>(),
            replacements,
            any::<bool>(),
        )
            .prop_map(
                |(
                    held_back,
                    cluster,
                    type_unreadable,
                    handed_over,
                    on_hub,
                    placing,
                    replacements,
                    member_failed,
                )| Facts {
                    held_back,
                    cluster,
                    type_unreadable,
                    handed_over,
                    on_hub,
                    placing,
                    replacements,
                    member_failed,
                },
            )
    }

    proptest! {
        #[test]
        fn a_copy_leaves_only_for_a_reason_its_facts_prove(f in facts()) {
            let Fate::Remove(why) = fate(&f) else { return Ok(()) };
            // Unknown is never absent.
            prop_assert!(!f.held_back, "{why:?} of a held-back copy: {f:?}");
            prop_assert!(!f.type_unreadable, "{why:?} while its type is unreadable: {f:?}");
            prop_assert!(
                !matches!(f.cluster, ClusterFact::Deleting | ClusterFact::Elsewhere),
                "{why:?} on a Cluster being deleted or outside the selector: {f:?}"
            );
            let proven = match why {
                Removal::TakenOver => f.handed_over == Some(true),
                Removal::ClusterGone => f.cluster == ClusterFact::Gone,
                Removal::ObjectGone => f.on_hub == OnHub::Missing { past_grace: true },
                Removal::NotSelected => f.on_hub == OnHub::Listed && !f.placing,
                Removal::Moved => {
                    f.on_hub == OnHub::Listed
                        && f.placing
                        && f.cluster == ClusterFact::Present
                        && match f.replacements {
                            Replacements::None => false,
                            Replacements::Waiting => !f.member_failed,
                            Replacements::Available => true,
                        }
                }
                Removal::Renamed => false,
            };
            prop_assert!(proven, "{why:?} without proof: {f:?}");
        }

        #[test]
        fn a_copy_that_may_not_leave_is_kept_with_its_reason(f in facts()) {
            let fate = fate(&f);
            if f.type_unreadable && f.cluster == ClusterFact::Present && !f.held_back {
                prop_assert_eq!(fate, Fate::Freeze(Keep::TypeUnreadable));
            }
            if f.on_hub == (OnHub::Missing { past_grace: false })
                && f.cluster == ClusterFact::Present
                && !f.held_back && !f.type_unreadable && f.handed_over.is_none()
            {
                prop_assert_eq!(fate, Fate::Freeze(Keep::AwaitingGrace));
            }
            if f.replacements == Replacements::None
                && f.placing && f.on_hub == OnHub::Listed && f.cluster == ClusterFact::Present
                && !f.held_back && !f.type_unreadable && f.handed_over.is_none()
            {
                prop_assert_eq!(fate, Fate::Retain(Keep::Stranded));
            }
        }
    }
}
