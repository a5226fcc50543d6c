//! One watch of a kind, shared by every controller of a binary that reads it.
//!
//! Two watches of the same objects cost the hub twice (a list and a watch each, every object
//! sent twice) and, worse, race each other: a controller triggered by its own watch may read a
//! cache fed by the other that does not have the change yet. A [`SharedCache`] is one watch
//! into one cache; each controller *subscribes* to its changes, told after the cache has them.
//!
//! kube's own shared reflectors (`reflect_shared`, `Controller::for_shared_stream`) do this
//! too, but sit behind an unstable feature and make the watch wait for the slowest subscriber.
//! Here a subscriber is a callback or an unbounded channel: the watch never waits, and what a
//! slow controller has not taken yet coalesces in its own queue (kube's `Controller` dedupes
//! pending reconciles of an object).

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::channel::mpsc;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use crate::Context;
use crate::cache::{Change, spawn_lean_store};

/// A subscriber's callback: told every change after the cache has it.
type Subscriber<K> = Box<dyn Fn(Change<'_, K>) + Send + Sync>;

/// One watch of a kind into one cache, with any number of subscribers to its changes.
pub struct SharedCache<K: Resource + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    fanout: Arc<Fanout<K>>,
}

impl<K: Resource + 'static> Clone for SharedCache<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            fanout: self.fanout.clone(),
        }
    }
}

/// The cache reads as the [`Store`] it is.
impl<K: Resource + 'static> std::ops::Deref for SharedCache<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    type Target = Store<K>;

    fn deref(&self) -> &Store<K> {
        &self.store
    }
}

impl<K> SharedCache<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    /// Watches `api` (with `config`) until the controllers stop (see
    /// [`crate::cache::spawn_store`]: objects decode one by one, without `managedFields`).
    pub fn start(ctx: &Context, api: Api<K>, config: watcher::Config) -> Self {
        Self::start_lean(ctx, api, config, |_: &mut K| {})
    }

    /// Like [`Self::start`], keeping of every object only what `lean` leaves of it (for every
    /// subscriber: `lean` must keep what any of them reads).
    pub fn start_lean<L>(ctx: &Context, api: Api<K>, config: watcher::Config, lean: L) -> Self
    where
        L: FnMut(&mut K) + Send + 'static,
    {
        let fanout: Arc<Fanout<K>> = Arc::default();
        let tell = fanout.clone();
        let store = spawn_lean_store(ctx, api, config, lean, move |change| tell.tell(change));
        Self { store, fanout }
    }
}

impl<K> SharedCache<K>
where
    K: Resource + Clone + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    /// The cache.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Calls `on_change` with every change from now on, after the cache has it, and at once
    /// with every object the cache has already (as applied): a subscriber that comes late
    /// misses nothing. `on_change` runs on the watch's task: it must not block, nor subscribe.
    pub fn subscribe(&self, on_change: impl Fn(Change<'_, K>) + Send + Sync + 'static) {
        self.fanout.subscribe(&self.store, Box::new(on_change));
    }

    /// Every object added, changed or deleted, as a stream (for `Controller::watches_stream`).
    pub fn touched(&self) -> BoxStream<'static, Result<K, watcher::Error>> {
        self.channel(|change| Some(change.object().clone()))
    }

    /// Every object added or changed, as a stream (a controller's own objects: one deleted
    /// needs no pass, its finalizer held it if it did).
    pub fn applied(&self) -> BoxStream<'static, Result<K, watcher::Error>> {
        self.channel(|change| match change {
            Change::Applied(o) => Some(o.clone()),
            Change::Deleted(_) => None,
        })
    }

    /// A controller of the cached objects, started by their changes.
    pub fn controller(&self) -> Controller<K>
    where
        K: DeserializeOwned,
        K::DynamicType: Default + Debug + Unpin + Send + Sync,
    {
        Controller::for_stream(self.applied(), self.store())
    }

    fn channel(
        &self,
        pick: impl Fn(Change<'_, K>) -> Option<K> + Send + Sync + 'static,
    ) -> BoxStream<'static, Result<K, watcher::Error>> {
        let (tx, rx) = mpsc::unbounded();
        self.subscribe(move |change| {
            if let Some(o) = pick(change) {
                // Gone: its controller stopped; nothing to tell.
                let _ = tx.unbounded_send(o);
            }
        });
        ok_stream(rx).boxed()
    }
}

fn ok_stream<K>(rx: mpsc::UnboundedReceiver<K>) -> impl Stream<Item = Result<K, watcher::Error>> {
    rx.map(Ok)
}

/// The subscribers of one cache.
struct Fanout<K> {
    subscribers: Mutex<Vec<Subscriber<K>>>,
}

impl<K> Default for Fanout<K> {
    fn default() -> Self {
        Self {
            subscribers: Mutex::new(Vec::new()),
        }
    }
}

impl<K> Fanout<K>
where
    K: Resource + Clone,
    K::DynamicType: Eq + Hash + Clone,
{
    fn lock(&self) -> MutexGuard<'_, Vec<Subscriber<K>>> {
        self.subscribers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tells every subscriber of `change`, which the cache has already.
    fn tell(&self, change: Change<'_, K>) {
        for subscriber in self.lock().iter() {
            subscriber(change);
        }
    }

    /// Adds `subscriber`, first telling it what `store` has. Under the lock that [`Self::tell`]
    /// takes, after the cache changed: a change the cache had before is in the replay, any
    /// other is told after the replay (some may be told twice, which a trigger tolerates; none
    /// is lost).
    fn subscribe(&self, store: &Store<K>, subscriber: Subscriber<K>) {
        let mut subscribers = self.lock();
        for o in store.state() {
            subscriber(Change::Applied(&o));
        }
        subscribers.push(subscriber);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;

    fn cm(name: &str, version: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("ns".into());
        cm.metadata.resource_version = Some(version.into());
        cm
    }

    /// A writer that applies an event to the cache, then tells the fanout, as the watch does.
    fn apply(
        writer: &mut reflector::store::Writer<ConfigMap>,
        fanout: &Fanout<ConfigMap>,
        event: watcher::Event<ConfigMap>,
    ) {
        writer.apply_watcher_event(&event);
        match &event {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                fanout.tell(Change::Applied(o))
            }
            watcher::Event::Delete(o) => fanout.tell(Change::Deleted(o)),
            _ => {}
        }
    }

    fn recorder() -> (Arc<Mutex<Vec<String>>>, Subscriber<ConfigMap>) {
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let log = seen.clone();
        let subscriber: Subscriber<ConfigMap> = Box::new(move |c: Change<'_, ConfigMap>| {
            let what = match c {
                Change::Applied(o) => format!(
                    "applied {}@{}",
                    o.metadata.name.as_deref().unwrap_or_default(),
                    o.metadata.resource_version.as_deref().unwrap_or_default()
                ),
                Change::Deleted(o) => {
                    format!("deleted {}", o.metadata.name.as_deref().unwrap_or_default())
                }
            };
            log.lock().expect("not poisoned").push(what);
        });
        (seen, subscriber)
    }

    #[test]
    fn every_subscriber_is_told_every_change_after_the_cache_has_it() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let fanout: Fanout<ConfigMap> = Fanout::default();
        let (first, a) = recorder();
        let (second, b) = recorder();
        fanout.subscribe(&store, a);
        fanout.subscribe(&store, b);
        apply(&mut writer, &fanout, watcher::Event::Apply(cm("web", "1")));
        apply(&mut writer, &fanout, watcher::Event::Delete(cm("web", "1")));
        let expected = ["applied web@1", "deleted web"];
        assert_eq!(*first.lock().expect("not poisoned"), expected);
        assert_eq!(*second.lock().expect("not poisoned"), expected);
    }

    #[tokio::test]
    async fn a_controllers_stream_has_what_changed_and_its_own_leaves_out_deletions() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let cache = SharedCache {
            store,
            fanout: Arc::default(),
        };
        let (touched, applied) = (cache.touched(), cache.applied());
        apply(
            &mut writer,
            &cache.fanout,
            watcher::Event::Apply(cm("web", "1")),
        );
        apply(
            &mut writer,
            &cache.fanout,
            watcher::Event::Delete(cm("web", "1")),
        );
        drop(cache);
        let names = |s: BoxStream<'static, Result<ConfigMap, watcher::Error>>| async move {
            s.map(|o| o.expect("no error").metadata.name.unwrap_or_default())
                .collect::<Vec<_>>()
                .await
        };
        assert_eq!(names(touched).await, ["web", "web"]);
        assert_eq!(names(applied).await, ["web"]);
    }

    #[test]
    fn a_late_subscriber_is_first_told_what_the_cache_has() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let fanout: Fanout<ConfigMap> = Fanout::default();
        apply(&mut writer, &fanout, watcher::Event::Apply(cm("web", "1")));
        apply(&mut writer, &fanout, watcher::Event::Apply(cm("db", "3")));
        apply(&mut writer, &fanout, watcher::Event::Delete(cm("db", "3")));
        let (late, subscriber) = recorder();
        fanout.subscribe(&store, subscriber);
        apply(&mut writer, &fanout, watcher::Event::Apply(cm("web", "2")));
        assert_eq!(
            *late.lock().expect("not poisoned"),
            ["applied web@1", "applied web@2"],
            "what the cache had, then what changed; not what went before it subscribed"
        );
    }
}
