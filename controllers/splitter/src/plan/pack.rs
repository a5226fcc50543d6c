//! Stage 5, pack: every copy that stays or goes to a member into the Works of its Placement,
//! member and type, and which of those Works to write or delete.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use flotilla_api::{annotations, work_data};
use k8s_openapi::ByteString;
use kube::ResourceExt;

use super::entry::{Entry, data_missing};
use super::holdings::Holder;
use super::quota::{byte_budget_message, elsewhere_bytes, work_bytes};
use super::{BUNDLE_BYTES, BUNDLE_MANIFESTS, Plan, Removal, conflict_policy};
use crate::digest::{digest, spec_digest_with, up_to_date};
use crate::keys::{CopyKey, Shelf, WorkId, key_of};
use crate::observation::Observation;
use crate::render::{DataSecret, Origin, bundle};

/// What each Work of a shelf (by index) holds after a pass, in order, and its bytes.
type ShelfContents = BTreeMap<u32, (Vec<CopyKey>, usize)>;

/// The Works of one shelf as the cache has them, by index, and what each holds after the pass.
struct Packed<'p, 'h> {
    shelf: &'p Shelf,
    works: &'p BTreeMap<u32, &'h Holder<'h>>,
    contents: ShelfContents,
}

/// Puts every copy that stays or goes to a member into the Works of its Placement, member and
/// type: a copy stays in the Work that holds it; a new one joins the first Work with room (at
/// most [`BUNDLE_MANIFESTS`] manifests and [`BUNDLE_BYTES`]), or a new Work. A Work left without
/// copies is deleted; a frozen one is left as it is. Only Works that differ from the hub's are
/// written.
pub(super) fn pack(
    obs: &Observation,
    holders: &[Holder<'_>],
    others: &[(bool, Holder<'_>)],
    wanted: BTreeMap<CopyKey, Entry>,
    retained: BTreeMap<CopyKey, Entry>,
    frozen: &BTreeSet<WorkId>,
    out: &mut Plan,
) -> Result<(), serde_json::Error> {
    let wanted_keys: BTreeSet<CopyKey> = wanted.keys().cloned().collect();
    let mut entries: BTreeMap<CopyKey, Entry> = retained;
    entries.extend(wanted);
    let replaces = replaced_works(holders, others, &wanted_keys);
    let shelves = shelves(holders, &entries, frozen);
    let mut planned = Vec::new();
    for (shelf, works) in &shelves {
        let contents = assign(works, &entries, frozen, &wanted_keys, out);
        planned.push(Packed {
            shelf,
            works: &works.works,
            contents,
        });
    }
    // The namespace's byte budget: beyond it, a Work that would grow is not written (its member
    // keeps what it has); new copies were held back already (`withhold_beyond_quota`).
    let over_budget = obs.byte_limit.is_some_and(|limit| {
        let here: u64 = planned
            .iter()
            .flat_map(|p| p.contents.values())
            .map(|(_, size)| *size as u64)
            .sum();
        elsewhere_bytes(obs).saturating_add(here) > limit
    });
    let writer = Writer {
        obs,
        wanted_keys: &wanted_keys,
        replaces: &replaces,
        over_budget,
    };
    for packed in planned {
        for (index, (keys, size)) in packed.contents {
            let hub = packed.works.get(&index).copied();
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
            // Moved, not copied: each copy is in one Work.
            let manifests: Vec<(CopyKey, Entry)> = keys
                .iter()
                .filter_map(|k| Some((k.clone(), entries.remove(k)?)))
                .collect();
            writer.work(packed.shelf, index, hub, &keys, manifests, size, out)?;
        }
    }
    Ok(())
}

/// The Works another copy's Work replaces, by copy: those of one object still holding it (the
/// Work of its type replaces them), and another Placement's (or one that no longer exists)
/// holding a copy handed over to this one, which lets go of it once this one reports it
/// applied.
fn replaced_works<'h>(
    holders: &'h [Holder<'h>],
    others: &'h [(bool, Holder<'h>)],
    wanted_keys: &BTreeSet<CopyKey>,
) -> BTreeMap<&'h CopyKey, Vec<String>> {
    let mut replaces: BTreeMap<&CopyKey, Vec<String>> = BTreeMap::new();
    for h in holders.iter().filter(|h| h.live() && h.index.is_none()) {
        if let Some((key, _)) = h.copies.first() {
            replaces.entry(key).or_default().push(h.work.name_any());
        }
    }
    for (_, h) in others {
        for (key, _) in &h.copies {
            if wanted_keys.contains(key) {
                replaces.entry(key).or_default().push(h.work.name_any());
            }
        }
    }
    replaces
}

/// A shelf's Works as the cache has them.
#[derive(Default)]
struct ShelfWorks<'h> {
    /// Its live Works, by index.
    works: BTreeMap<u32, &'h Holder<'h>>,
    /// The indexes taken (by a Work being deleted too).
    taken: BTreeSet<u32>,
    /// The copies no Work of the shelf holds yet.
    unplaced: Vec<CopyKey>,
}

/// Per shelf: its Works, and the copies not in any of them yet (new shelves included).
fn shelves<'h>(
    holders: &'h [Holder<'h>],
    entries: &BTreeMap<CopyKey, Entry>,
    frozen: &BTreeSet<WorkId>,
) -> BTreeMap<Shelf, ShelfWorks<'h>> {
    let mut shelves: BTreeMap<Shelf, ShelfWorks<'h>> = BTreeMap::new();
    for h in holders {
        let (Some(index), Some(shelf)) = (h.index, h.shelf()) else {
            continue;
        };
        let shelf = shelves.entry(shelf).or_default();
        shelf.taken.insert(index);
        if h.live() {
            shelf.works.insert(index, h);
        }
    }
    let mut placed: BTreeSet<&CopyKey> = BTreeSet::new();
    for shelf in shelves.values() {
        for h in shelf.works.values() {
            let frozen = frozen.contains(&key_of(h.work));
            for (key, _) in &h.copies {
                if frozen || entries.contains_key(key) {
                    placed.insert(key);
                }
            }
        }
    }
    let unplaced: Vec<CopyKey> = entries
        .keys()
        .filter(|k| !placed.contains(k))
        .cloned()
        .collect();
    for key in unplaced {
        shelves.entry(key.shelf()).or_default().unplaced.push(key);
    }
    shelves
}

/// What each Work of `shelf` holds after the pass: a copy stays in the Work that holds it; a
/// new one joins the first Work with room, or a new Work. A frozen Work is kept as it is
/// (without its manifests) and its wanted copies stay in it.
fn assign(
    ShelfWorks {
        works,
        taken,
        unplaced,
    }: &ShelfWorks<'_>,
    entries: &BTreeMap<CopyKey, Entry>,
    frozen: &BTreeSet<WorkId>,
    wanted_keys: &BTreeSet<CopyKey>,
    out: &mut Plan,
) -> ShelfContents {
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
            crate::digest::without_manifests(&mut work);
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
    for key in unplaced {
        let bytes = bytes_of(key);
        let room = contents.iter().find_map(|(i, (keys, size))| {
            let fits =
                keys.is_empty() || (keys.len() < BUNDLE_MANIFESTS && size + bytes <= BUNDLE_BYTES);
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
    contents
}

/// What writing the Works of a pass reads.
struct Writer<'w> {
    obs: &'w Observation,
    wanted_keys: &'w BTreeSet<CopyKey>,
    replaces: &'w BTreeMap<&'w CopyKey, Vec<String>>,
    /// The namespace is beyond its byte budget: no Work grows.
    over_budget: bool,
}

impl Writer<'_> {
    /// Work `index` of `shelf` with `manifests` (the copies `keys`, of `size` bytes), as the
    /// hub has it (`hub`): into [`Plan::wanted`], and into [`Plan::writes`] when it differs
    /// from the hub's; the data of its Secrets into [`Plan::data`] when it must be written.
    #[allow(clippy::too_many_arguments)]
    fn work(
        &self,
        shelf: &Shelf,
        index: u32,
        hub: Option<&Holder<'_>>,
        keys: &[CopyKey],
        manifests: Vec<(CopyKey, Entry)>,
        size: usize,
        out: &mut Plan,
    ) -> Result<(), serde_json::Error> {
        let obs = self.obs;
        let placement = &*obs.placement;
        let ns = placement.namespace().unwrap_or_default();
        let mut replaced: Vec<String> = keys
            .iter()
            .filter_map(|k| self.replaces.get(k))
            .flatten()
            .cloned()
            .collect();
        replaced.sort();
        replaced.dedup();
        let origin = Origin {
            namespace: &ns,
            placement: &placement.name_any(),
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
        for key in keys.iter().filter(|k| self.wanted_keys.contains(*k)) {
            out.copies.insert(key.clone(), id.clone());
        }
        // A Work being deleted is written again once it is gone (its deletion starts a pass).
        // Only a Work to write gets its manifests decoded.
        let deleting = hub.is_some_and(|h| !h.live());
        let live = hub.filter(|h| h.live());
        // What its copies take in the hub: counted against the namespace's byte budget.
        work.annotations_mut()
            .insert(annotations::COPY_BYTES.to_string(), size.to_string());
        let current = live.is_some_and(|h| up_to_date(&work, &wanted_digest, h.work));
        let grows = size as u64 > live.map_or(0, |h| work_bytes(h.work));
        if self.over_budget && grows && !deleting && !current {
            // Beyond the budget: it stays as it is (a new Work is not made).
            out.findings.copy_quota.get_or_insert_with(|| {
                byte_budget_message(obs, &ns, "the copies of Work ", &work_name)
            });
            if let Some(h) = live {
                let mut kept = h.work.clone();
                crate::digest::without_manifests(&mut kept);
                out.wanted.insert(id, kept);
            }
            return Ok(());
        }
        if !deleting && !current {
            work.spec.manifests = json
                .iter()
                .map(|j| serde_json::from_str(j))
                .collect::<Result<_, _>>()?;
            out.writes.insert(id.clone());
        }
        let holds_secrets = manifests.iter().any(|(_, e)| e.secret.is_some());
        if !deleting && holds_secrets && !self.data_unchanged(&id, live, current, &manifests, &json)
        {
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
        out.wanted.insert(id, work);
        Ok(())
    }

    /// Whether the hub Secret with the data of Work `id`'s Secrets is as wanted: it is written
    /// when a Secret joined or left the Work or has another version of its data (its manifest
    /// changed), for a new Work, and when the syncer found it missing; otherwise left as it is.
    fn data_unchanged(
        &self,
        id: &WorkId,
        live: Option<&Holder<'_>>,
        current: bool,
        manifests: &[(CopyKey, Entry)],
        json: &[Cow<'_, str>],
    ) -> bool {
        let stored = self
            .obs
            .data_secrets
            .get(&(id.0.clone(), work_data::secret_name(&id.1)));
        live.is_some_and(|h| {
            (current
                || (h.copies.len() == manifests.len()
                    && manifests.iter().zip(json).all(|((key, _), json)| {
                        h.manifest_digest(key)
                            .is_some_and(|d| d == digest(json.as_bytes()))
                    })))
                // There, and the Work's: one deleted, or left without its owner (the Work's
                // creation and the Secret's hand-over are two writes), is written again.
                && stored.is_some_and(|owners| {
                    h.work.metadata.uid.as_ref().is_some_and(|u| owners.contains(u))
                })
                && !data_missing(h.work)
        })
    }
}
