//! The Works of a Placement as the cache has them, and the copies each holds.

use std::collections::BTreeMap;

use flotilla_api::{Work, annotations, labels};
use flotilla_interpreter::Kinds;
use kube::ResourceExt;
use kube::api::DynamicObject;

use super::{Deletion, Removal};
use crate::digest::hub_manifest_digest;
use crate::keys::{CopyKey, ObjectKey, Shelf};
use crate::observation::Observation;
use crate::render::Share;

/// The live Works of this Placement that hold each copy, and what each copy asks for now.
pub(super) struct Holdings<'h> {
    /// The live Works that hold each copy (a copy moving from a Work of one object into the
    /// Work of its type is in both for a while).
    pub held: BTreeMap<&'h CopyKey, Vec<&'h Holder<'h>>>,
    /// The share of its object each copy of a divided object asks for now.
    pub previous: BTreeMap<&'h CopyKey, Share>,
}

impl<'h> Holdings<'h> {
    pub fn of(holders: &'h [Holder<'h>]) -> Self {
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
        Self { held, previous }
    }
}

/// This Placement's Works and the namespace's other Placements' (with whether each one's
/// Placement is gone), as holders.
pub(super) fn holders(obs: &Observation) -> (Vec<Holder<'_>>, Vec<(bool, Holder<'_>)>) {
    let own = obs
        .works
        .iter()
        .filter_map(|w| Holder::of(w, &obs.kinds))
        .collect();
    let others = obs
        .others
        .iter()
        .filter_map(|o| Some((o.orphaned, Holder::of(&o.work, &obs.kinds)?)))
        .collect();
    (own, others)
}

/// A Work of this Placement as the cache has it, and the copies it holds.
pub(super) struct Holder<'a> {
    pub work: &'a Work,
    /// Which Work of its shelf it is; `None`: a Work of one object by an older splitter.
    pub index: Option<u32>,
    /// Its copies, in the order of its manifests, with the share of its object each asks for.
    pub copies: Vec<(CopyKey, Share)>,
}

impl<'a> Holder<'a> {
    pub fn of(work: &'a Work, kinds: &Kinds) -> Option<Self> {
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
            crate::digest::manifests(work)
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
                crate::digest::manifests(work)
                    .first()
                    .map(share)
                    .unwrap_or_default(),
            )]
        };
        Some(Self {
            work,
            index,
            copies,
        })
    }

    pub fn live(&self) -> bool {
        self.work.metadata.deletion_timestamp.is_none()
    }

    pub fn shelf(&self) -> Option<Shelf> {
        let a = self.work.annotations();
        Some(Shelf {
            cluster: self.work.cluster_name()?.to_string(),
            api_version: a.get(annotations::SOURCE_API_VERSION)?.clone(),
            kind: a.get(annotations::SOURCE_KIND)?.clone(),
        })
    }

    /// The digest of this Work's manifest of copy `key`, as the cache has it.
    pub fn manifest_digest(&self, key: &CopyKey) -> Option<String> {
        let i = self.copies.iter().position(|(k, _)| k == key)?;
        hub_manifest_digest(self.work, if self.index.is_some() { i } else { 0 })
    }

    pub fn deletion(&self, why: Removal) -> Deletion {
        Deletion {
            namespace: self.work.namespace().unwrap_or_default(),
            name: self.work.name_any(),
            uid: self.work.metadata.uid.clone(),
            resource_version: self.work.metadata.resource_version.clone(),
            why,
        }
    }
}
