//! What the syncer's cache keeps of a Work.
//!
//! A Work holds up to a hundred complete objects, and decoded (`DynamicObject`, its metadata and
//! data as maps) each takes several times its JSON. The cache keeps every Work lean instead: its
//! `spec.manifests` and `status.manifests` empty, and beside it ([`Manifests`]) the manifests as
//! compact JSON, the objects they name (type, namespace and name, what telling which Work names
//! an object needs) in a compact form, and the status entries as compact JSON too (decoded, an
//! entry holds its object's identity as six strings of its own: about 410 bytes against 230).
//! Both JSON documents are kept compressed ([`Packed`], LZ4): the manifests of a Work share most
//! of their keys, labels and annotations, and its entries nearly everything but names and
//! resourceVersions, so they take a fraction of their size; a reconciliation decompresses them
//! in microseconds, where decoding the JSON takes far longer.
//! The watch does not even decode them: it reads each Work as [`Incoming`], its manifests and
//! entries left as the JSON strings the hub serves, and [`Manifests::take_incoming`] keeps them
//! as they are. A reconciliation that applies a Work gets it whole again with
//! [`Manifests::whole`], for the generation it reconciles; what a cached Work names is read with
//! [`Manifests::names`].
//!
//! A lean Work has no manifests at all, which no Work the hub serves has (`spec.manifests` has
//! at least one item), and [`crate::manifest::prepare`] refuses it: taken for a Work of no
//! manifests, it would have every object it applied removed from the member.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;

use flotilla_api::work::{entries_json, manifests_json};
use flotilla_api::{ManifestIdentity, ManifestStatus, Work, WorkSpec, WorkStatus};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use kube::{Resource, ResourceExt};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

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
    /// `spec.manifests`, as a compact JSON array.
    json: Packed,
    names: NameList,
    /// `status.manifests` as the watch last brought it, as a compact JSON array (of any
    /// generation: a status reports on the generation it names); nothing when it has none.
    entries: Packed,
}

/// Kept manifests read back: each an object, or a JSON string as the hub serves it.
#[derive(Deserialize)]
struct KeptManifests(#[serde(deserialize_with = "manifests_json::deserialize")] Vec<DynamicObject>);

/// Kept status entries read back, as [`KeptManifests`].
#[derive(Deserialize)]
struct KeptEntries(#[serde(deserialize_with = "entries_json::deserialize")] Vec<ManifestStatus>);

/// A JSON document, LZ4-compressed (its length first); empty for none.
#[derive(Default)]
struct Packed(Box<[u8]>);

impl Packed {
    /// `value` as compact JSON, compressed; `None` if it cannot be serialized.
    fn of<T: serde::Serialize>(value: &T) -> Option<Self> {
        let json = serde_json::to_vec(value).ok()?;
        Some(Self(
            lz4_flex::block::compress_prepend_size(&json).into_boxed_slice(),
        ))
    }

    /// A list as [`Packed::of`], nothing for an empty one (or one that cannot be serialized).
    fn list<T: serde::Serialize>(items: &[T]) -> Self {
        if items.is_empty() {
            Self::default()
        } else {
            Self::of(&items).unwrap_or_default()
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value again; `None` if it cannot be read back (it always can: it was written here).
    fn read<T: serde::de::DeserializeOwned>(&self) -> Option<T> {
        let json = lz4_flex::block::decompress_size_prepended(&self.0).ok()?;
        serde_json::from_slice(&json).ok()
    }
}

/// The objects a Work's manifests name (those that name none left out), in three allocations
/// whatever their number: their names one after the other, where each ends, and their types and
/// namespaces, kept once for each run of manifests that share them — the splitter writes a
/// Work of one type, most often in one namespace. As a string of its own, each name was a
/// small allocation that outlived the burst of short-lived ones around it (a Work's watch event
/// decoded), and held a partly used page of the allocator for every few names.
#[derive(Default)]
struct NameList {
    names: Box<str>,
    /// Where each name ends in `names`.
    ends: Box<[u32]>,
    /// The index (in `ends`) of the first name of each run of one type and namespace, and them.
    runs: Box<[(u32, Type)]>,
}

/// The type and namespace of a run of names.
#[derive(PartialEq)]
struct Type {
    api_version: Box<str>,
    kind: Box<str>,
    namespace: Option<Box<str>>,
}

/// What one manifest names, as read from it.
struct Id<'a> {
    api_version: Cow<'a, str>,
    kind: Cow<'a, str>,
    namespace: Option<Cow<'a, str>>,
    name: Cow<'a, str>,
}

impl<'a> Id<'a> {
    /// What a decoded manifest names; `None` without a type or a name.
    fn of_object(m: &'a DynamicObject) -> Option<Self> {
        let types = m.types.as_ref()?;
        Some(Self {
            api_version: Cow::Borrowed(&types.api_version),
            kind: Cow::Borrowed(&types.kind),
            namespace: m.metadata.namespace.as_deref().map(Cow::Borrowed),
            name: Cow::Borrowed(m.metadata.name.as_deref().filter(|n| !n.is_empty())?),
        })
    }

    /// What a manifest as the hub serves it names (a JSON string, or an object), read without
    /// decoding the rest of it; `None` when it does not say.
    fn of_item(item: &'a Value) -> Option<Self> {
        #[derive(Deserialize)]
        struct Item<'a> {
            #[serde(rename = "apiVersion", borrow)]
            api_version: Cow<'a, str>,
            #[serde(borrow)]
            kind: Cow<'a, str>,
            #[serde(borrow)]
            metadata: Meta<'a>,
        }
        #[derive(Deserialize)]
        struct Meta<'a> {
            #[serde(borrow, default)]
            name: Option<Cow<'a, str>>,
            #[serde(borrow, default)]
            namespace: Option<Cow<'a, str>>,
        }
        let item: Item<'a> = match item {
            Value::String(json) => serde_json::from_str(json).ok()?,
            Value::Object(_) => Item::deserialize(item).ok()?,
            _ => return None,
        };
        Some(Self {
            api_version: item.api_version,
            kind: item.kind,
            namespace: item.metadata.namespace,
            name: item.metadata.name.filter(|n| !n.is_empty())?,
        })
    }
}

impl NameList {
    fn of<'a>(ids: impl ExactSizeIterator<Item = Option<Id<'a>>>) -> Self {
        let mut names = String::new();
        let mut ends = Vec::with_capacity(ids.len());
        let mut runs: Vec<(u32, Type)> = Vec::new();
        for id in ids.flatten() {
            let namespace = id.namespace.as_deref();
            let same = runs.last().is_some_and(|(_, t)| {
                *t.api_version == *id.api_version
                    && *t.kind == *id.kind
                    && t.namespace.as_deref() == namespace
            });
            if !same {
                runs.push((
                    offset(ends.len()),
                    Type {
                        api_version: Box::from(&*id.api_version),
                        kind: Box::from(&*id.kind),
                        namespace: namespace.map(Box::from),
                    },
                ));
            }
            names.push_str(&id.name);
            ends.push(offset(names.len()));
        }
        Self {
            names: names.into_boxed_str(),
            ends: ends.into_boxed_slice(),
            runs: runs.into_boxed_slice(),
        }
    }

    /// Every object named, in order.
    fn identities(&self) -> Vec<ManifestIdentity> {
        let mut out = Vec::with_capacity(self.ends.len());
        let mut start = 0usize;
        let mut run = 0usize;
        for (i, end) in self.ends.iter().enumerate() {
            while self
                .runs
                .get(run + 1)
                .is_some_and(|(first, _)| *first as usize <= i)
            {
                run += 1;
            }
            let end = *end as usize;
            let (Some(name), Some((_, t))) = (self.names.get(start..end), self.runs.get(run))
            else {
                break;
            };
            start = end;
            let (group, version) = match t.api_version.split_once('/') {
                Some((g, v)) => (g.to_string(), v.to_string()),
                None => (String::new(), t.api_version.to_string()),
            };
            out.push(ManifestIdentity {
                group,
                version,
                kind: t.kind.to_string(),
                resource: None,
                namespace: t.namespace.as_deref().map(str::to_string),
                name: name.to_string(),
            });
        }
        out
    }
}

/// `len` as an offset into a list's strings (a Work is far smaller than 4 GiB).
fn offset(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// A Work as the syncer's watch decodes it: the Work but for its manifests and status entries,
/// which stay as the hub serves them (JSON strings, or objects as written before) until
/// [`Manifests::take_incoming`] keeps them aside. Decoding every manifest and entry of every
/// Work event into objects only to write them out again for the cache took most of the
/// syncer's work per event, and most of the short-lived allocations among which the cache's
/// long-lived ones were made (and held partly used pages once the others were freed).
#[derive(Clone, Debug)]
pub struct Incoming {
    work: Work,
    /// `spec.manifests` as served; `None` for a Work the cache had already (lean).
    manifests: Option<Vec<Value>>,
    /// `status.manifests` as served.
    entries: Vec<Value>,
}

impl Incoming {
    /// A Work from the cache, which keeps what it was given.
    pub fn cached(work: Work) -> Self {
        Self {
            work,
            manifests: None,
            entries: Vec::new(),
        }
    }

    /// The Work, with whatever of its manifests and entries was not kept aside.
    pub fn into_work(self) -> Work {
        let mut work = self.work;
        if let Some(manifests) = self.manifests.filter(|m| !m.is_empty()) {
            work.spec.manifests =
                manifests_json::deserialize(Value::Array(manifests)).unwrap_or_default();
        }
        if !self.entries.is_empty()
            && let Some(status) = &mut work.status
        {
            status.manifests =
                entries_json::deserialize(Value::Array(self.entries)).unwrap_or_default();
        }
        work
    }

    /// A watch event of Works as the cache takes it.
    pub fn into_work_event(event: Event<Self>) -> Event<Work> {
        match event {
            Event::Apply(i) => Event::Apply(i.into_work()),
            Event::Delete(i) => Event::Delete(i.into_work()),
            Event::Init => Event::Init,
            Event::InitApply(i) => Event::InitApply(i.into_work()),
            Event::InitDone => Event::InitDone,
        }
    }
}

impl<'de> Deserialize<'de> for Incoming {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        #[derive(Deserialize)]
        struct Served {
            metadata: ObjectMeta,
            spec: Part,
            #[serde(default)]
            status: Option<Part>,
        }
        /// `spec` or `status`: its `manifests` as served, and its other fields.
        #[derive(Deserialize)]
        struct Part {
            #[serde(default)]
            manifests: Option<Vec<Value>>,
            #[serde(flatten)]
            rest: serde_json::Map<String, Value>,
        }
        let served = Served::deserialize(deserializer)?;
        let mut spec = served.spec.rest;
        spec.insert("manifests".into(), Value::Array(Vec::new()));
        let spec: WorkSpec =
            serde_json::from_value(Value::Object(spec)).map_err(D::Error::custom)?;
        let (status, entries) = match served.status {
            Some(part) => {
                let status: WorkStatus =
                    serde_json::from_value(Value::Object(part.rest)).map_err(D::Error::custom)?;
                (Some(status), part.manifests.unwrap_or_default())
            }
            None => (None, Vec::new()),
        };
        let mut work = Work::new("", spec);
        work.metadata = served.metadata;
        work.status = status;
        Ok(Self {
            work,
            manifests: Some(served.spec.manifests.unwrap_or_default()),
            entries,
        })
    }
}

impl Resource for Incoming {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Work::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        Work::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        Work::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        Work::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.work.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.work.metadata
    }
}

impl Manifests {
    /// Keeps a decoded Work's manifests, what they name and its status entries, and leaves it
    /// lean (what [`Manifests::take_incoming`] does with a Work as the watch brings it).
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
        let manifests = std::mem::take(&mut work.spec.manifests);
        self.keep(
            uid,
            work.metadata.generation,
            Packed::list(&entries),
            || {
                let names = NameList::of(manifests.iter().map(Id::of_object));
                (Packed::list(&manifests), names)
            },
        );
    }

    /// For every Work the watch brings, before the cache has it: keeps its manifests (as
    /// served), what they name and its status entries (as served), and leaves it lean — as
    /// [`Manifests::take`] does with a decoded Work, without decoding them. A status event (most
    /// events of a Work) reads no manifest at all.
    pub fn take_incoming(&self, incoming: &mut Incoming) {
        let Some(uid) = incoming.work.uid() else {
            return;
        };
        let Some(manifests) = incoming.manifests.take_if(|m| !m.is_empty()) else {
            // The cache's own Work, or one of no manifests (which is left whole).
            return;
        };
        let entries = Packed::list(&std::mem::take(&mut incoming.entries));
        self.keep(uid, incoming.work.metadata.generation, entries, || {
            let names = NameList::of(manifests.iter().map(Id::of_item));
            (Packed::list(&manifests), names)
        });
    }

    /// Keeps `entries` as the status entries of Work `uid`, and its manifests of `generation`
    /// (packed, with what they name, by `manifests`) unless those are kept already: most events
    /// of a Work are of its status.
    fn keep(
        &self,
        uid: String,
        generation: Option<i64>,
        entries: Packed,
        manifests: impl FnOnce() -> (Packed, NameList),
    ) {
        let mut by_uid = self.lock();
        match by_uid.get_mut(&uid) {
            Some(kept) if kept.generation == generation => kept.entries = entries,
            _ => {
                let (json, names) = manifests();
                let kept = Kept {
                    generation,
                    json,
                    names,
                    entries,
                };
                by_uid.insert(uid, kept);
            }
        }
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
        let Some(KeptManifests(manifests)) = kept.json.read() else {
            return Whole::Missing;
        };
        // The entries are taken as each event arrives, before the cache stores its object: for
        // a moment they may be of a newer status than the cached Work's (the same generation's,
        // and only ever newer, which is what a reconciliation wants).
        let entries = if kept.entries.is_empty() {
            Vec::new()
        } else {
            let Some(KeptEntries(entries)) = kept.entries.read() else {
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
            Some(kept) => Names::Known(kept.names.identities()),
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
    fn the_names_are_kept_in_one_string_with_each_run_of_a_type_and_namespace_once() {
        let mut w = work(1, "one");
        let manifest = |kind: &str, namespace: Option<&str>, name: &str| {
            let mut m = w.spec.manifests[0].clone();
            m.types.as_mut().expect("typed").kind = kind.into();
            m.metadata.namespace = namespace.map(str::to_string);
            m.metadata.name = Some(name.into());
            m
        };
        let unnamed = manifest("ConfigMap", Some("shop"), "");
        w.spec.manifests = vec![
            manifest("ConfigMap", Some("shop"), "a"),
            manifest("ConfigMap", Some("shop"), "bb"),
            unnamed,
            manifest("ConfigMap", Some("shop"), "ccc"),
            manifest("ConfigMap", Some("web"), "a"),
            manifest("Namespace", None, "web"),
        ];
        let manifests = Manifests::default();
        let mut cached = w.clone();
        manifests.take(&mut cached);
        {
            let by_uid = manifests.lock();
            let list = &by_uid.get("u-1").expect("kept").names;
            assert_eq!(&*list.names, "abbcccaweb");
            assert_eq!(
                list.runs.len(),
                3,
                "shop's ConfigMaps, web's, the Namespace"
            );
        }
        let mut web = id("a");
        web.namespace = Some("web".into());
        let mut namespace = id("web");
        namespace.kind = "Namespace".into();
        namespace.namespace = None;
        assert_eq!(
            manifests.names(&cached),
            Names::Known(vec![id("a"), id("bb"), id("ccc"), web, namespace]),
            "in order, the unnamed one left out"
        );
        assert_eq!(
            manifests.names(&cached),
            Names::Known(crate::manifest::named(&w)),
            "as the Work whole names them"
        );
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

    #[test]
    fn what_is_kept_of_a_work_of_many_objects_is_a_fraction_of_its_json() {
        // 50 ConfigMaps as the splitter writes them, each with 32 characters of its own data.
        let mut w = work(1, "one");
        w.spec.manifests = (0..50)
            .map(|i| {
                serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("settings-{i}"), "namespace": "shop",
                                 "labels": {"app.kubernetes.io/name": "shop",
                                            "app.kubernetes.io/part-of": "storefront"},
                                 "annotations": {"flotilla.dev/manifest-hash": format!("{:016x}", i * 7919)}},
                    "data": {"value": format!("{:032x}", (i as u128) * 0x9e37_79b9_7f4a_7c15)}
                }))
                .expect("a ConfigMap")
            })
            .collect();
        let mut original = with_entry(w, "7");
        let entry = original.status.as_ref().expect("a status").manifests[0].clone();
        original.status.as_mut().expect("a status").manifests = (0..50)
            .map(|i| {
                let mut e = entry.clone();
                e.ordinal = i;
                e.identity.name = format!("settings-{i}");
                e.resource_version = Some(format!("{}", 1000 + i * 3));
                e
            })
            .collect();
        let manifests_json = serde_json::to_vec(&original.spec.manifests).expect("json");
        let entries_json =
            serde_json::to_vec(&original.status.as_ref().expect("a status").manifests)
                .expect("json");
        let kept = Manifests::default();
        let mut cached = original.clone();
        kept.take(&mut cached);
        {
            let by_uid = kept.lock();
            let k = by_uid.get("u-1").expect("kept");
            assert!(
                k.json.0.len() * 3 < manifests_json.len(),
                "manifests: {} bytes kept for {} of JSON",
                k.json.0.len(),
                manifests_json.len()
            );
            assert!(
                k.entries.0.len() * 3 < entries_json.len(),
                "entries: {} bytes kept for {} of JSON",
                k.entries.0.len(),
                entries_json.len()
            );
        }
        assert_eq!(kept.whole(&cached), Whole::Found(Box::new(original)));
    }

    #[test]
    fn a_kept_document_that_cannot_be_read_makes_the_work_read_again() {
        let manifests = Manifests::default();
        let mut cached = work(1, "one");
        manifests.take(&mut cached);
        manifests.lock().get_mut("u-1").expect("kept").json =
            Packed(Box::from(&b"\x05\0\0\0garbage"[..]));
        assert_eq!(manifests.whole(&cached), Whole::Missing);
    }

    /// `work` as the hub serves it, decoded as the syncer's watch decodes it.
    fn served(work: &Work) -> Incoming {
        let json = serde_json::to_vec(work).expect("json");
        let guarded: kube::core::DeserializeGuard<Incoming> =
            serde_json::from_slice(&json).expect("decodes");
        guarded.0.expect("a Work")
    }

    fn with_entries(mut w: Work, n: i32) -> Work {
        let entry = with_entry(w.clone(), "7")
            .status
            .expect("a status")
            .manifests[0]
            .clone();
        w.status = Some(flotilla_api::WorkStatus {
            observed_generation: w.metadata.generation,
            manifests: (0..n)
                .map(|i| {
                    let mut e = entry.clone();
                    e.ordinal = i;
                    e
                })
                .collect(),
            ..Default::default()
        });
        w
    }

    #[test]
    fn a_work_as_served_is_kept_without_decoding_its_manifests_and_is_whole_again() {
        let original = with_entries(work(1, "one"), 1);
        let mut incoming = served(&original);
        let manifests = Manifests::default();
        manifests.take_incoming(&mut incoming);
        let cached = incoming.into_work();
        assert!(is_lean(&cached));
        assert!(
            cached
                .status
                .as_ref()
                .expect("a status")
                .manifests
                .is_empty()
        );
        assert_eq!(
            manifests.whole(&cached),
            Whole::Found(Box::new(original.clone()))
        );
        assert_eq!(manifests.names(&cached), Names::Known(vec![id("a")]));
        // The same as a Work decoded whole and taken.
        let decoded = Manifests::default();
        let mut taken = original.clone();
        decoded.take(&mut taken);
        assert_eq!(taken, cached);
        assert_eq!(decoded.whole(&taken), manifests.whole(&cached));
        // A status event of the same generation brings new entries, and no manifest is read.
        let newer = with_entries(work(1, "one"), 2);
        let mut incoming = served(&newer);
        incoming.manifests = Some(vec![Value::String("not read".into())]);
        manifests.take_incoming(&mut incoming);
        let cached = incoming.into_work();
        let Whole::Found(whole) = manifests.whole(&cached) else {
            panic!("whole")
        };
        assert_eq!(whole.spec.manifests, original.spec.manifests);
        assert_eq!(whole.status.expect("a status").manifests.len(), 2);
    }

    #[test]
    fn manifests_and_entries_written_as_objects_are_kept_and_read_alike() {
        let original = with_entries(work(1, "one"), 1);
        let mut json = serde_json::to_value(&original).expect("json");
        // As written before they were JSON strings.
        for list in ["/spec/manifests", "/status/manifests"] {
            let items = json.pointer_mut(list).expect("a list");
            let objects: Vec<Value> = items
                .as_array()
                .expect("an array")
                .iter()
                .map(|s| serde_json::from_str(s.as_str().expect("a string")).expect("json"))
                .collect();
            *items = Value::Array(objects);
        }
        let guarded: kube::core::DeserializeGuard<Incoming> =
            serde_json::from_value(json).expect("decodes");
        let mut incoming = guarded.0.expect("a Work");
        let manifests = Manifests::default();
        manifests.take_incoming(&mut incoming);
        let cached = incoming.into_work();
        assert_eq!(manifests.whole(&cached), Whole::Found(Box::new(original)));
        assert_eq!(manifests.names(&cached), Names::Known(vec![id("a")]));
    }

    #[test]
    fn an_unreadable_manifest_is_kept_as_the_hub_serves_it_and_named_by_nothing() {
        let mut original = work(1, "one");
        let mut json = serde_json::to_value(&original).expect("json");
        json["spec"]["manifests"]
            .as_array_mut()
            .expect("an array")
            .push(json!(42));
        json["spec"]["manifests"]
            .as_array_mut()
            .expect("an array")
            .push(json!(
                "{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {}}"
            ));
        // What the Work decoded whole holds: a stand-in for the unreadable one.
        let whole: Work = serde_json::from_value(json.clone()).expect("a Work");
        original.spec.manifests = whole.spec.manifests.clone();
        let guarded: kube::core::DeserializeGuard<Incoming> =
            serde_json::from_value(json).expect("decodes");
        let mut incoming = guarded.0.expect("a Work");
        let manifests = Manifests::default();
        manifests.take_incoming(&mut incoming);
        let cached = incoming.into_work();
        assert_eq!(manifests.whole(&cached), Whole::Found(Box::new(original)));
        assert_eq!(
            manifests.names(&cached),
            Names::Known(vec![id("a")]),
            "neither the number nor the object of no name names anything"
        );
    }

    #[test]
    fn a_work_that_does_not_decode_whole_does_not_decode_as_served_either() {
        let mut json = serde_json::to_value(work(1, "one")).expect("json");
        json["spec"]["deletePolicy"] = json!("Sometimes");
        assert!(serde_json::from_value::<Work>(json.clone()).is_err());
        let guarded: kube::core::DeserializeGuard<Incoming> =
            serde_json::from_value(json).expect("the guard holds the error");
        let error = guarded.0.expect_err("refused");
        assert!(error.error.contains("Sometimes"), "{}", error.error);
        assert_eq!(error.metadata.name.as_deref(), Some("w"));
    }

    #[test]
    fn a_cached_work_given_again_keeps_what_is_kept() {
        let original = with_entries(work(1, "one"), 1);
        let mut incoming = served(&original);
        let manifests = Manifests::default();
        manifests.take_incoming(&mut incoming);
        let cached = incoming.into_work();
        // The watch's fallback for a Work that no longer decodes: the cache's copy.
        let mut again = Incoming::cached(cached.clone());
        manifests.take_incoming(&mut again);
        assert_eq!(again.into_work(), cached);
        assert_eq!(manifests.whole(&cached), Whole::Found(Box::new(original)));
    }
}
