//! What the syncer's cache keeps of a Work.
//!
//! A Work holds up to a hundred complete objects, and decoded (`DynamicObject`, its metadata and
//! data as maps) each takes several times its JSON. The cache keeps every Work lean instead:
//! each manifest reduced to a *skeleton* (apiVersion, kind, namespace and name: what telling
//! which Work names an object needs), and the manifests themselves, as compact JSON, beside it
//! ([`Manifests`]). A reconciliation that applies a Work gets it whole again with
//! [`Manifests::whole`], for the generation it reconciles.
//!
//! A skeleton has no content at all (`data` is `null`, which no manifest the watch decodes has:
//! its content is always an object, if an empty one) and [`crate::manifest::prepare`] refuses
//! it: a skeleton applied to a member would empty the object there.

use std::collections::HashMap;
use std::sync::Mutex;

use flotilla_api::Work;
use kube::ResourceExt;
use kube::api::{DynamicObject, ObjectMeta};

/// Whether `manifest` is a skeleton the cache made.
pub fn is_skeleton(manifest: &DynamicObject) -> bool {
    manifest.data.is_null()
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

/// The manifests of the cached Works, as compact JSON, by Work UID, with the generation they
/// are of.
#[derive(Default)]
pub struct Manifests {
    by_uid: Mutex<HashMap<String, Kept>>,
}

struct Kept {
    generation: Option<i64>,
    json: Box<[u8]>,
}

impl Manifests {
    /// For every Work the watch brings, before the cache has it: keeps its manifests and leaves
    /// it with their skeletons.
    pub fn take(&self, work: &mut Work) {
        let Some(uid) = work.uid() else {
            return;
        };
        if work.spec.manifests.iter().all(is_skeleton) {
            return;
        }
        // Most events of a Work are of its status: the manifests of its generation are kept.
        let mut by_uid = self.lock();
        let kept = by_uid
            .get(&uid)
            .is_some_and(|k| k.generation == work.metadata.generation);
        if !kept {
            let json = serde_json::to_vec(&work.spec.manifests).unwrap_or_default();
            by_uid.insert(
                uid,
                Kept {
                    generation: work.metadata.generation,
                    json: json.into_boxed_slice(),
                },
            );
        }
        drop(by_uid);
        for m in &mut work.spec.manifests {
            *m = skeleton(m);
        }
    }

    /// `work` (from the cache) with its manifests, if those kept are of its generation.
    pub fn whole(&self, work: &Work) -> Whole {
        if !work.spec.manifests.iter().any(is_skeleton) {
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
        drop(by_uid);
        let mut whole = work.clone();
        whole.spec.manifests = manifests;
        Whole::Found(Box::new(whole))
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

/// What the cache keeps of a manifest: its type, namespace and name, marked as a skeleton.
fn skeleton(m: &DynamicObject) -> DynamicObject {
    DynamicObject {
        types: m.types.clone(),
        metadata: ObjectMeta {
            name: m.metadata.name.clone(),
            namespace: m.metadata.namespace.clone(),
            ..ObjectMeta::default()
        },
        // No annotation as a mark: a map of one entry took half the skeleton's memory.
        data: serde_json::Value::Null,
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
            },
        );
        w.metadata.uid = Some("u-1".into());
        w.metadata.generation = Some(generation);
        w
    }

    #[test]
    fn a_manifest_without_content_is_not_a_skeleton() {
        let bare: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}
        }))
        .expect("a Namespace");
        assert!(!is_skeleton(&bare));
        // And a lean Work still serializes (for logs and tests).
        let mut cached = work(1, "one");
        Manifests::default().take(&mut cached);
        let value = serde_json::to_value(&cached).expect("serializable");
        assert_eq!(value["spec"]["manifests"][0]["metadata"]["name"], "a");
    }

    #[test]
    fn a_cached_work_keeps_skeletons_and_is_whole_again_for_its_generation() {
        let manifests = Manifests::default();
        let original = work(1, "one");
        let mut cached = original.clone();
        manifests.take(&mut cached);
        let skeleton = &cached.spec.manifests[0];
        assert!(is_skeleton(skeleton));
        assert_eq!(skeleton.metadata.name.as_deref(), Some("a"));
        assert_eq!(skeleton.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(
            skeleton.types.as_ref().map(|t| t.kind.as_str()),
            Some("ConfigMap")
        );
        assert_eq!(skeleton.metadata.labels, None);
        assert_eq!(manifests.whole(&cached), Whole::Found(Box::new(original)));
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
