//! A watched cache of one kind, the first thing every controller keeps.

use std::fmt::Debug;
use std::hash::Hash;

use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use crate::Context;

/// Watches `api` into a cache until the controllers stop, marking the caches synced once the
/// first list completed. Returns the cache's reader at once; the watch runs in the background.
pub async fn watch_into_store<K>(ctx: &Context, api: Api<K>) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    let shutdown = ctx.shutdown.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                next = stream.next() => match next {
                    Some(Ok(_)) => {}
                    Some(Err(e)) => tracing::warn!(kind = %K::kind(&Default::default()), error = %e, "watch failed; retrying with backoff"),
                    None => break,
                },
            }
        }
    });
    let health = ctx.health.clone();
    let ready = reader.clone();
    let shutdown = ctx.shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = shutdown.cancelled() => {}
            synced = ready.wait_until_ready() => {
                if synced.is_ok() {
                    tracing::info!(kind = %K::kind(&Default::default()), "cache synced");
                    health.set_caches_synced(true);
                }
            }
        }
    });
    reader
}
