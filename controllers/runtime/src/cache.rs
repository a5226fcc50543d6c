//! A watched cache of one kind, the first thing every controller keeps.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Mutex;

use futures::StreamExt;
use kube::core::DeserializeGuard;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use crate::Context;

/// A watch of the objects whose labels match `selector` (a label selector as the controllers'
/// `--cluster-selector` flags take it); empty: every object.
pub fn selected(selector: &str) -> watcher::Config {
    let config = watcher::Config::default();
    if selector.is_empty() {
        config
    } else {
        config.labels(selector)
    }
}

/// Waits until `store` has completed its first list; `false` if its writer went away first.
///
/// `Store::wait_until_ready` keeps only the most recent waiter's waker (kube-runtime 5), so when
/// a `Controller` waits on the same store, another waiter may never be woken. Polling with a
/// short timeout re-checks the state and is immune to that.
pub async fn wait_until_synced<K>(store: &Store<K>) -> bool
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    loop {
        match tokio::time::timeout(
            std::time::Duration::from_millis(250),
            store.wait_until_ready(),
        )
        .await
        {
            Ok(ready) => return ready.is_ok(),
            Err(_) => continue,
        }
    }
}

/// Watches `api` (with `config`) into a cache (without `managedFields`) until the controllers stop. Returns the cache's
/// reader at once; the watch runs in the background and retries with backoff, logging failures.
pub fn spawn_store<K>(ctx: &Context, api: Api<K>, config: watcher::Config) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    spawn_store_with(ctx, api, config, |_: Change<'_, K>| {})
}

/// A change of a cached object, told after the cache has it.
#[derive(Debug)]
pub enum Change<'a, K> {
    /// Added or changed (the initial list included).
    Applied(&'a K),
    /// Deleted, as it was last.
    Deleted(&'a K),
}

impl<K> Clone for Change<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Change<'_, K> {}

impl<'a, K> Change<'a, K> {
    /// The object, whatever the change.
    pub fn object(&self) -> &'a K {
        match self {
            Self::Applied(o) | Self::Deleted(o) => o,
        }
    }
}

/// Like [`spawn_store`], calling `on_change` with every object that was added, changed or
/// deleted, after the cache has it (the initial list included), so that a controller can be
/// triggered by a cache it shares with others.
pub fn spawn_store_with<K, F>(
    ctx: &Context,
    api: Api<K>,
    config: watcher::Config,
    on_change: F,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    F: Fn(Change<'_, K>) + Send + 'static,
{
    spawn_lean_store(ctx, api, config, |_: &mut K| {}, on_change)
}

/// Like [`spawn_store_with`], keeping of every object only what `lean` leaves of it: a cache of
/// many objects need not hold the parts its controller never reads.
pub fn spawn_lean_store<K, L, F>(
    ctx: &Context,
    api: Api<K>,
    config: watcher::Config,
    mut lean: L,
    on_change: F,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    L: FnMut(&mut K) + Send + 'static,
    F: Fn(Change<'_, K>) + Send + 'static,
{
    let (reader, writer) = reflector::store();
    // No controller reads `managedFields` off a cache, and they are often most of an object
    // that several writers server-side apply (a Work: the splitter's spec, the syncer's status).
    let prepare = move |o: &mut K| {
        o.meta_mut().managed_fields = None;
        lean(o);
    };
    // Every typed object decodes on its own (see crate::guard): one that does not stands as the
    // cache has it. (A metadata-only watch decodes nothing but metadata; the guard would fetch
    // whole objects.)
    let events = if api.namespace().is_none() && !K::metadata_api() {
        let last_seen = reader.clone();
        let guarded =
            Api::<DeserializeGuard<K>>::all_with(api.into_client(), &K::DynamicType::default());
        crate::guard::watcher(guarded, config, prepare, move |r| {
            last_seen.get(r).map(|o| (*o).clone())
        })
        .boxed()
    } else {
        watcher(api, config).modify(prepare).boxed()
    };
    let stream = reflector::reflector(writer, events).default_backoff();
    let shutdown = ctx.shutdown.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                next = stream.next() => match next {
                    Some(Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) => {
                        on_change(Change::Applied(&o));
                    }
                    Some(Ok(watcher::Event::Delete(o))) => on_change(Change::Deleted(&o)),
                    Some(Ok(watcher::Event::Init | watcher::Event::InitDone)) => {}
                    Some(Err(e)) => tracing::warn!(kind = %K::kind(&Default::default()), error = %e, "watch failed; retrying with backoff"),
                    None => break,
                },
            }
        }
    });
    reader
}

/// Watches `api` into a cache until the controllers stop, marking the caches synced once the
/// first list completed. Returns the cache's reader at once; the watch runs in the background.
pub async fn watch_into_store<K>(ctx: &Context, api: Api<K>) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let reader = spawn_store(ctx, api, watcher::Config::default());
    let health = ctx.health.clone();
    let ready = reader.clone();
    let shutdown = ctx.shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = shutdown.cancelled() => {}
            synced = wait_until_synced(&ready) => {
                if synced {
                    tracing::info!(kind = %K::kind(&Default::default()), "cache synced");
                    health.set_caches_synced(true);
                }
            }
        }
    });
    reader
}

/// What a controller last saw of each object of a cache that matters to it (a hash of what it
/// reads of the object), by UID: tells the changes that matter from those that do not, in the
/// `on_change` of [`spawn_store_with`].
#[derive(Debug, Default)]
pub struct SeenInputs {
    by_uid: Mutex<HashMap<String, u64>>,
}

impl SeenInputs {
    /// Whether `inputs` of object `uid` differ from those seen last (or it is new); remembers
    /// them.
    pub fn changed(&self, uid: &str, inputs: u64) -> bool {
        self.lock().insert(uid.to_string(), inputs) != Some(inputs)
    }

    /// Forgets object `uid`, which is gone; whether it had been seen.
    pub fn forget(&self, uid: &str) -> bool {
        self.lock().remove(uid).is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.by_uid.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An `on_change` for [`spawn_store_with`] that calls `then` only with an object that appeared,
/// went, or changed in what `inputs` hashes of it (what its controller reads): a cache's other
/// changes (heartbeats, the controller's own status writes) start nothing.
pub fn when_inputs_change<K, I, T>(inputs: I, then: T) -> impl Fn(Change<'_, K>) + Send + 'static
where
    K: Resource,
    I: Fn(&K) -> u64 + Send + 'static,
    T: Fn(Change<'_, K>) + Send + 'static,
{
    let seen = SeenInputs::default();
    move |change: Change<'_, K>| {
        let uid = change.object().meta().uid.clone().unwrap_or_default();
        let changed = match change {
            Change::Applied(o) => seen.changed(&uid, inputs(o)),
            Change::Deleted(_) => seen.forget(&uid),
        };
        if changed {
            then(change);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_changed_inputs_count_as_a_change() {
        let seen = SeenInputs::default();
        assert!(seen.changed("u-1", 1), "new");
        assert!(!seen.changed("u-1", 1), "the same inputs");
        assert!(seen.changed("u-1", 2), "other inputs");
        assert!(seen.changed("u-2", 2), "another object");
        assert!(seen.forget("u-1"));
        assert!(!seen.forget("u-1"), "forgotten already");
        assert!(seen.changed("u-1", 2), "new again");
    }

    #[test]
    fn only_a_change_of_inputs_goes_on() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let told = seen.clone();
        let on_change = when_inputs_change(
            |c: &ConfigMap| c.data.as_ref().map_or(0, |d| d.len() as u64),
            move |c: Change<'_, ConfigMap>| {
                told.lock()
                    .expect("not poisoned")
                    .push(matches!(c, Change::Deleted(_)));
            },
        );
        let mut cm = ConfigMap::default();
        cm.metadata.uid = Some("u-1".into());
        on_change(Change::Applied(&cm));
        cm.metadata.labels = Some([("heartbeat".to_string(), "1".to_string())].into());
        on_change(Change::Applied(&cm));
        cm.data = Some([("k".to_string(), "v".to_string())].into());
        on_change(Change::Applied(&cm));
        on_change(Change::Deleted(&cm));
        on_change(Change::Deleted(&cm));
        assert_eq!(*seen.lock().expect("not poisoned"), [false, false, true]);
    }
}
