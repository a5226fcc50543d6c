//! What the syncer's cache keeps of a Work.
//!
//! A Work holds up to a hundred complete objects, and decoded (`DynamicObject`, its metadata and
//! data as maps) each takes several times its JSON. The cache keeps every Work lean instead: its
//! `spec.manifests` and `status.manifests` empty, and beside it ([`Manifests`]) the manifests as
//! compact JSON, the objects they name (type, namespace and name, what telling which Work names
//! an object needs) in a compact form, and the status entries as compact JSON too (decoded, an
//! entry holds its object's identity as six strings of its own: about 410 bytes against 230).
//! A reconciliation that applies a Work gets it whole again with [`Manifests::whole`], for the
//! generation it reconciles; what a cached Work names is read with [`Manifests::names`].
//!
//! A lean Work has no manifests at all, which no Work the hub serves has (`spec.manifests` has
//! at least one item), and [`crate::manifest::prepare`] refuses it: taken for a Work of no
//! manifests, it would have every object it applied removed from the member.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use flotilla_api::{ManifestIdentity, Work};
use kube::ResourceExt;
use kube::api::DynamicObject;

use crate::manifest::same_object;

/// Whether `work` is the cache's lean form of a Work.
pub fn is_lean(work: &Work) -> bool {
    work.spec.manifests.is_empty()
}

/// A cached Work, whole again.
#[derive(Debug, PartialEq)]
pub enum Whole {
    Found(Box<Work>),
    /// Another generation of the Work came from the watch after this one (the cache has it at
    /// once, and its reconciliation follows).
    Newer,
    /// Its manifests are not kept (they were let go of as the Work seemed gone): read it.
    Missing,
}

/// What a cached Work's manifests name.
#[derive(Debug, PartialEq)]
pub enum Names {
    /// The objects, in the order of the manifests (those that name none left out).
    Known(Vec<ManifestIdentity>),
    /// Not kept (see [`Whole::Missing`]): the Work may name anything.
    Unknown,
}

/// The manifests of the cached Works, as compact JSON, and the objects they name, by Work UID,
/// with the generation they are of.
#[derive(Default)]
pub struct Manifests {
    by_uid: Mutex<HashMap<String, Kept>>,
}

struct Kept {
    generation: Option<i64>,
    json: Box<[u8]>,
    names: Box<[Named]>,
    /// `status.manifests` as the watch last brought it, as a compact JSON array (of any
    /// generation: a status reports on the generation it names).
    entries: Box<[u8]>,
}

/// An object a manifest names. The API version, kind and namespace are shared by the
/// manifests of a Work of one type, as the splitter writes them.
struct Named {
    api_version: Arc<str>,
    kind: Arc<str>,
    namespace: Option<Arc<str>>,
    name: Box<str>,
}

impl Named {
    fn of(m: &DynamicObject, last: Option<&Named>) -> Option<Self> {
        let types = m.types.as_ref()?;
        let name = m.metadata.name.as_deref().filter(|n| !n.is_empty())?;
        let share = |s: &str, prev: Option<&Arc<str>>| match prev {
            Some(p) if **p == *s => p.clone(),
            _ => Arc::from(s),
        };
        Some(Self {
            api_version: share(&types.api_version, last.map(|l| &l.api_version)),
            kind: share(&types.kind, last.map(|l| &l.kind)),
            namespace: m
                .metadata
                .namespace
                .as_deref()
                .map(|ns| share(ns, last.and_then(|l| l.namespace.as_ref()))),
            name: Box::from(name),
        })
    }

    fn identity(&self) -> ManifestIdentity {
        let (group, version) = match self.api_version.split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), self.api_version.to_string()),
        };
        ManifestIdentity {
            group,
            version,
            kind: self.kind.to_string(),
            resource: None,
            namespace: self.namespace.as_deref().map(str::to_string),
            name: self.name.to_string(),
        }
    }
}

impl Manifests {
    /// For every Work the watch brings, before the cache has it: keeps its manifests, what
    /// they name and its status entries, and leaves it lean.
    pub fn take(&self, work: &mut Work) {
        let Some(uid) = work.uid() else {
            return;
        };
        if is_lean(work) {
            return;
        }
        let entries = work
            .status
            .as_mut()
            .map(|s| std::mem::take(&mut s.manifests))
            .unwrap_or_default();
        let entries = if entries.is_empty() {
            Box::default()
        } else {
            serde_json::to_vec(&entries)
                .unwrap_or_default()
                .into_boxed_slice()
        };
        // Most events of a Work are of its status: the manifests of its generation are kept.
        let mut by_uid = self.lock();
        match by_uid.get_mut(&uid) {
            Some(kept) if kept.generation == work.metadata.generation => kept.entries = entries,
            _ => {
                let json = serde_json::to_vec(&work.spec.manifests).unwrap_or_default();
                let mut names: Vec<Named> = Vec::with_capacity(work.spec.manifests.len());
                for m in &work.spec.manifests {
                    if let Some(n) = Named::of(m, names.last()) {
                        names.push(n);
                    }
                }
                by_uid.insert(
                    uid,
                    Kept {
                        generation: work.metadata.generation,
                        json: json.into_boxed_slice(),
                        names: names.into_boxed_slice(),
                        entries,
                    },
                );
            }
        }
        drop(by_uid);
        work.spec.manifests = Vec::new();
    }

    /// `work` (from the cache) with its manifests, if those kept are of its generation.
    pub fn whole(&self, work: &Work) -> Whole {
        if !is_lean(work) {
            return Whole::Found(Box::new(work.clone()));
        }
        let by_uid = self.lock();
        let Some(kept) = work.uid().and_then(|uid| by_uid.get(&uid)) else {
            return Whole::Missing;
        };
        if kept.generation != work.metadata.generation {
            return Whole::Newer;
        }
        let Ok(manifests) = serde_json::from_slice(&kept.json) else {
            return Whole::Missing;
        };
        // The entries are taken as each event arrives, before the cache stores its object: for
        // a moment they may be of a newer status than the cached Work's (the same generation's,
        // and only ever newer, which is what a reconciliation wants).
        let entries = if kept.entries.is_empty() {
            Vec::new()
        } else {
            let Ok(entries) = serde_json::from_slice(&kept.entries) else {
                return Whole::Missing;
            };
            entries
        };
        drop(by_uid);
        let mut whole = work.clone();
        whole.spec.manifests = manifests;
        if let Some(status) = &mut whole.status {
            status.manifests = entries;
        }
        Whole::Found(Box::new(whole))
    }

    /// The objects `work` (from the cache, or whole) names.
    pub fn names(&self, work: &Work) -> Names {
        if !is_lean(work) {
            return Names::Known(crate::manifest::named(work));
        }
        let by_uid = self.lock();
        match work.uid().and_then(|uid| by_uid.get(&uid)) {
            Some(kept) => Names::Known(kept.names.iter().map(Named::identity).collect()),
            None => Names::Unknown,
        }
    }

    /// Whether `work` (from the cache, or whole) may name object `id`: it does, or what it
    /// names is not known.
    pub fn may_list(&self, work: &Work, id: &ManifestIdentity) -> bool {
        match self.names(work) {
            Names::Known(names) => names.iter().any(|n| same_object(n, id)),
            Names::Unknown => true,
        }
    }

    /// Forgets the manifests of every Work but those `live` says are still cached.
    pub fn retain(&self, live: impl Fn(&str) -> bool) {
        self.lock().retain(|uid, _| live(uid));
    }

    /// How many Works have their manifests kept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Kept>> {
        self.by_uid.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::WorkSpec;
    use serde_json::json;

    fn work(generation: i64, value: &str) -> Work {
        let mut w = Work::new(
            "w",
            WorkSpec {
                manifests: vec![
                    serde_json::from_value(json!({
                        "apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "a", "namespace": "shop", "labels": {"x": "y"}},
                        "data": {"value": value}
                    }))
                    .expect("a ConfigMap"),
                ],
                delete_policy: Default::default(),
                conflict_policy: Default::default(),
                ignore_fields: vec![],
                namespace_labels: Default::default(),
                allow_existing_namespaces: None,
                health: None,
            },
        );
        w.metadata.uid = Some("u-1".into());
        w.metadata.generation = Some(generation);
        w
    }

    fn id(name: &str) -> ManifestIdentity {
        ManifestIdentity {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            resource: None,
            namespace: Some("shop".into()),
            name: name.into(),
        }
    }

    #[test]
    fn a_lean_work_still_serializes() {
        let mut cached = work(1, "one");
        Manifests::default().take(&mut cached);
        let value = serde_json::to_value(&cached).expect("serializable");
        assert_eq!(value["spec"]["manifests"], json!([]));
    }

    #[test]
    fn a_cached_work_is_lean_names_its_objects_and_is_whole_again_for_its_generation() {
        let manifests = Manifests::default();
        let original = work(1, "one");
        let mut cached = original.clone();
        manifests.take(&mut cached);
        assert!(is_lean(&cached));
        assert_eq!(manifests.names(&cached), Names::Known(vec![id("a")]));
        assert!(manifests.may_list(&cached, &id("a")));
        assert!(!manifests.may_list(&cached, &id("b")));
        assert_eq!(manifests.whole(&cached), Whole::Found(Box::new(original)));
    }

    fn with_entry(mut w: Work, resource_version: &str) -> Work {
        w.status = Some(flotilla_api::WorkStatus {
            observed_generation: w.metadata.generation,
            manifests: vec![flotilla_api::ManifestStatus {
                ordinal: 0,
                identity: id("a"),
                resource_version: Some(resource_version.into()),
                applied: flotilla_api::ConditionStatus::True,
                ..Default::default()
            }],
            ..Default::default()
        });
        w
    }

    #[test]
    fn the_status_entries_are_kept_aside_and_follow_every_status_the_watch_brings() {
        let manifests = Manifests::default();
        let original = with_entry(work(1, "one"), "7");
        let mut cached = original.clone();
        manifests.take(&mut cached);
        let status = cached.status.as_ref().expect("a status");
        assert!(
            status.manifests.is_empty(),
            "the cached Work holds no entries"
        );
        assert_eq!(status.observed_generation, Some(1));
        assert_eq!(manifests.whole(&cached), Whole::Found(Box::new(original)));
        // A status write of the same generation: the manifests stay, the entries change.
        let newer = with_entry(work(1, "one"), "8");
        let mut cached = newer.clone();
        manifests.take(&mut cached);
        assert_eq!(manifests.whole(&cached), Whole::Found(Box::new(newer)));
        // A new generation whose status is still of the last one keeps that status's entries.
        let next = with_entry(work(2, "two"), "8");
        let mut cached = next.clone();
        manifests.take(&mut cached);
        assert_eq!(manifests.whole(&cached), Whole::Found(Box::new(next)));
        // The same object again, already lean (a watch's fallback to the cache's copy): the
        // entries kept are not lost.
        let mut again = cached.clone();
        manifests.take(&mut again);
        let Whole::Found(whole) = manifests.whole(&again) else {
            panic!("whole")
        };
        let entries = &whole.status.expect("a status").manifests;
        assert_eq!(entries[0].resource_version.as_deref(), Some("8"));
    }

    #[test]
    fn a_work_without_status_entries_is_whole_without_them() {
        let manifests = Manifests::default();
        let mut original = work(1, "one");
        original.status = Some(flotilla_api::WorkStatus::default());
        let mut cached = original.clone();
        manifests.take(&mut cached);
        assert_eq!(manifests.whole(&cached), Whole::Found(Box::new(original)));
    }

    #[test]
    fn what_a_forgotten_work_names_is_unknown_and_may_be_anything() {
        let manifests = Manifests::default();
        let mut cached = work(1, "one");
        manifests.take(&mut cached);
        manifests.retain(|_| false);
        assert_eq!(manifests.names(&cached), Names::Unknown);
        assert!(manifests.may_list(&cached, &id("b")));
        // A whole Work names what its manifests name, kept or not.
        assert_eq!(
            manifests.names(&work(1, "one")),
            Names::Known(vec![id("a")])
        );
    }

    #[test]
    fn the_manifests_of_one_type_share_its_api_version_kind_and_namespace() {
        let mut w = work(1, "one");
        let second = w.spec.manifests[0].clone();
        w.spec.manifests.push(second);
        let manifests = Manifests::default();
        manifests.take(&mut w);
        let by_uid = manifests.lock();
        let names = &by_uid.get("u-1").expect("kept").names;
        assert!(Arc::ptr_eq(&names[0].kind, &names[1].kind));
        assert!(Arc::ptr_eq(&names[0].api_version, &names[1].api_version));
        let (Some(a), Some(b)) = (&names[0].namespace, &names[1].namespace) else {
            panic!("namespaced")
        };
        assert!(Arc::ptr_eq(a, b));
    }

    #[test]
    fn a_newer_generation_kept_is_not_given_for_an_older_work() {
        let manifests = Manifests::default();
        let mut old = work(1, "one");
        manifests.take(&mut old);
        let mut new = work(2, "two");
        manifests.take(&mut new);
        assert_eq!(manifests.whole(&old), Whole::Newer);
        let Whole::Found(whole) = manifests.whole(&new) else {
            panic!("the newer generation, whole")
        };
        assert_eq!(whole.spec.manifests[0].data["data"]["value"], "two");
    }

    #[test]
    fn a_work_taken_twice_keeps_its_manifests_and_forgotten_ones_go() {
        let manifests = Manifests::default();
        let mut cached = work(1, "one");
        manifests.take(&mut cached);
        // The watch may bring the same (already lean) object again, e.g. its deletion.
        let mut again = cached.clone();
        manifests.take(&mut again);
        assert!(matches!(manifests.whole(&again), Whole::Found(_)));
        manifests.retain(|uid| uid != "u-1");
        assert!(manifests.is_empty());
        assert_eq!(manifests.whole(&cached), Whole::Missing);
    }
}
