//! One reflector store fed by several watches: e.g. Placements and ClusterPlacements (mapped to
//! one type) in the one store a controller reads.
//!
//! kube's [`Writer`] takes one watch: the relist of any watch (`Init` … `InitDone`) replaces the
//! whole store with what that watch listed, so two watches into one writer would drop each
//! other's objects at every relist. A [`UnionSource`] keeps what its own watch listed, turns its
//! relist into the deletions and applications it amounts to, and the store is ready once every
//! source has listed once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::Resource;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;

/// A store fed by `sources` watches, and the sources to feed it with (see [`UnionSource::apply`]).
pub fn union<K>(sources: usize) -> (Store<K>, Vec<UnionSource<K>>)
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let writer = Writer::default();
    let store = writer.as_reader();
    let shared = Arc::new(Mutex::new(Shared {
        writer,
        sources: (0..sources).map(|_| Source::default()).collect(),
        ready: false,
    }));
    let handles = (0..sources)
        .map(|index| UnionSource {
            shared: shared.clone(),
            index,
        })
        .collect();
    (store, handles)
}

/// One watch's way into a [`union`] store.
pub struct UnionSource<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    shared: Arc<Mutex<Shared<K>>>,
    index: usize,
}

struct Shared<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    writer: Writer<K>,
    sources: Vec<Source<K>>,
    ready: bool,
}

struct Source<K>
where
    K: Resource + 'static,
    K::DynamicType: Eq + std::hash::Hash,
{
    /// What this watch has now.
    objects: HashMap<ObjectRef<K>, K>,
    /// A relist under way.
    relist: Option<HashMap<ObjectRef<K>, K>>,
    listed: bool,
}

impl<K> Default for Source<K>
where
    K: Resource + 'static,
    K::DynamicType: Eq + std::hash::Hash,
{
    fn default() -> Self {
        Self {
            objects: HashMap::new(),
            relist: None,
            listed: false,
        }
    }
}

impl<K> UnionSource<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    /// Takes one event of this source's watch into the store.
    pub fn apply(&self, event: &Event<K>) {
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let Shared {
            writer,
            sources,
            ready,
        } = &mut *shared;
        let source = &mut sources[self.index];
        let key = |o: &K| ObjectRef::from_obj(o);
        match event {
            Event::Init => source.relist = Some(HashMap::new()),
            Event::InitApply(o) => {
                source
                    .relist
                    .get_or_insert_default()
                    .insert(key(o), o.clone());
            }
            Event::InitDone => {
                let listed = source.relist.take().unwrap_or_default();
                let before = std::mem::replace(&mut source.objects, listed);
                source.listed = true;
                if *ready {
                    for (k, gone) in &before {
                        if !source.objects.contains_key(k) {
                            writer.apply_watcher_event(&Event::Delete(gone.clone()));
                        }
                    }
                    for o in source.objects.values() {
                        writer.apply_watcher_event(&Event::Apply(o.clone()));
                    }
                } else if sources.iter().all(|s| s.listed) {
                    writer.apply_watcher_event(&Event::Init);
                    for o in sources.iter().flat_map(|s| s.objects.values()) {
                        writer.apply_watcher_event(&Event::InitApply(o.clone()));
                    }
                    writer.apply_watcher_event(&Event::InitDone);
                    *ready = true;
                }
            }
            Event::Apply(o) => {
                source.objects.insert(key(o), o.clone());
                if *ready {
                    writer.apply_watcher_event(event);
                }
            }
            Event::Delete(o) => {
                source.objects.remove(&key(o));
                if *ready {
                    writer.apply_watcher_event(event);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn cm(ns: Option<&str>, name: &str, value: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: ns.map(Into::into),
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            data: Some([("v".to_string(), value.to_string())].into()),
            ..ConfigMap::default()
        }
    }

    fn names(store: &Store<ConfigMap>) -> Vec<String> {
        let mut n: Vec<String> = store
            .state()
            .iter()
            .map(|o| {
                format!(
                    "{:?}/{}",
                    o.metadata.namespace,
                    o.metadata.name.as_deref().unwrap_or_default()
                )
            })
            .collect();
        n.sort();
        n
    }

    fn list(source: &UnionSource<ConfigMap>, objects: &[ConfigMap]) {
        source.apply(&Event::Init);
        for o in objects {
            source.apply(&Event::InitApply(o.clone()));
        }
        source.apply(&Event::InitDone);
    }

    #[tokio::test]
    async fn the_store_is_ready_once_every_source_listed_and_holds_what_each_has() {
        let (store, sources) = union::<ConfigMap>(2);
        list(&sources[0], &[cm(Some("a"), "x", "1")]);
        assert!(
            store.state().is_empty(),
            "not ready before the second lists"
        );
        sources[0].apply(&Event::Apply(cm(Some("a"), "y", "1")));
        list(&sources[1], &[cm(None, "x", "1")]);
        assert_eq!(names(&store), ["None/x", "Some(\"a\")/x", "Some(\"a\")/y"]);
        let ready =
            tokio::time::timeout(std::time::Duration::from_secs(1), store.wait_until_ready()).await;
        assert!(matches!(ready, Ok(Ok(()))));
    }

    #[test]
    fn a_relist_of_one_source_keeps_the_objects_of_the_other() {
        let (store, sources) = union::<ConfigMap>(2);
        list(
            &sources[0],
            &[cm(Some("a"), "x", "1"), cm(Some("a"), "y", "1")],
        );
        list(&sources[1], &[cm(None, "x", "1")]);
        // Source 0 relists: y went while its watch was down, x changed.
        list(&sources[0], &[cm(Some("a"), "x", "2")]);
        assert_eq!(names(&store), ["None/x", "Some(\"a\")/x"]);
        let x = store
            .get(&ObjectRef::new("x").within("a"))
            .expect("x is there");
        assert_eq!(x.data.as_ref().expect("data")["v"], "2");
        // And the other source's deletions still go through.
        sources[1].apply(&Event::Delete(cm(None, "x", "1")));
        assert_eq!(names(&store), ["Some(\"a\")/x"]);
    }
}
