//! Watches that one bad object cannot stop.
//!
//! A typed watch decodes every object it lists or is sent into the controller's Rust type. A value
//! the apiserver accepts but that type cannot hold (an integer out of range written into a
//! status, a timestamp in another format) would fail the whole list, and with it the watch: one
//! object, written by anyone allowed to write one, would stop a controller for the whole fleet.
//!
//! [`watcher`] decodes each object on its own (kube's `DeserializeGuard`): an object that does
//! not decode is logged with why, and stands as it was last seen — unknown is not absent, so a
//! controller never acts as if it were deleted. `last_good` says what was last seen: the
//! controller's own cache of the kind.

use std::fmt::Debug;

use futures::{Stream, TryStreamExt};
use kube::core::{DeserializeGuard, error_boundary::InvalidObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

/// The events of a watch of `api` (with `config`) whose objects each decode on their own, each
/// decoded object passed through `prepare` (e.g. what a cache keeps of it); one that does not
/// decode stands as `last_good` says it was (or, never seen whole, is left out).
pub fn watcher<K, P, F>(
    api: Api<DeserializeGuard<K>>,
    config: watcher::Config,
    mut prepare: P,
    last_good: F,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    P: FnMut(&mut K) + Send + 'static,
    F: Fn(&ObjectRef<K>) -> Option<K> + Send + 'static,
{
    kube::runtime::watcher(api, config)
        .map_ok(move |mut event| {
            if let Event::Apply(DeserializeGuard(Ok(o)))
            | Event::InitApply(DeserializeGuard(Ok(o)))
            | Event::Delete(DeserializeGuard(Ok(o))) = &mut event
            {
                prepare(o);
            }
            decoded(event, &last_good)
        })
        .try_filter_map(|event| std::future::ready(Ok(event)))
}

/// A controller of the objects of `api` (with `config`), as kube's `Controller::new` makes one,
/// whose watch decodes each object on its own (see [`watcher`]): one that does not decode stands
/// as its cache last saw it.
pub fn controller<K>(api: Api<DeserializeGuard<K>>, config: watcher::Config) -> Controller<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Debug + Unpin + Send + Sync,
{
    let (store, writer) = reflector::store();
    let last_seen = store.clone();
    let events = watcher(
        api,
        config,
        |_: &mut K| {},
        move |r| last_seen.get(r).map(|o| (*o).clone()),
    )
    .default_backoff()
    .reflect(writer)
    .applied_objects();
    Controller::for_stream(events, store)
}

/// `api` (of one namespace or of all) decoding each object on its own.
pub fn namespaced<K>(api: Api<K>) -> Api<DeserializeGuard<K>>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match api.namespace().map(str::to_string) {
        Some(ns) => Api::namespaced(api.into_client(), &ns),
        None => Api::all(api.into_client()),
    }
}

/// `event` with its object decoded, or standing as `last_good` says it was; `None` when there is
/// nothing to say.
fn decoded<K, F>(event: Event<DeserializeGuard<K>>, last_good: &F) -> Option<Event<K>>
where
    K: Resource + Clone,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    F: Fn(&ObjectRef<K>) -> Option<K>,
{
    let stood = |invalid: InvalidObject| -> Option<K> {
        let name = invalid.metadata.name.clone().unwrap_or_default();
        let mut reference = ObjectRef::<K>::new(&name);
        if let Some(ns) = &invalid.metadata.namespace {
            reference = reference.within(ns);
        }
        let kind = K::kind(&K::DynamicType::default()).into_owned();
        let last = last_good(&reference);
        tracing::warn!(
            %kind,
            object = %reference,
            error = %invalid.error,
            kept_as_last_seen = last.is_some(),
            "an object does not decode; it stands as it was last seen"
        );
        last
    };
    match event {
        Event::Apply(DeserializeGuard(Ok(o))) => Some(Event::Apply(o)),
        // Nothing changed that can be read: the cache keeps what it has.
        Event::Apply(DeserializeGuard(Err(invalid))) => {
            stood(invalid);
            None
        }
        Event::InitApply(DeserializeGuard(Ok(o))) => Some(Event::InitApply(o)),
        // A relist replaces the cache: the object stays in it as last seen.
        Event::InitApply(DeserializeGuard(Err(invalid))) => stood(invalid).map(Event::InitApply),
        Event::Delete(DeserializeGuard(Ok(o))) => Some(Event::Delete(o)),
        Event::Delete(DeserializeGuard(Err(invalid))) => stood(invalid).map(Event::Delete),
        Event::Init => Some(Event::Init),
        Event::InitDone => Some(Event::InitDone),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use serde_json::json;

    fn guard(value: serde_json::Value) -> DeserializeGuard<ConfigMap> {
        serde_json::from_value(value).expect("a guard always decodes")
    }

    fn last_seen(r: &ObjectRef<ConfigMap>) -> Option<ConfigMap> {
        (r.name == "known").then(|| ConfigMap {
            metadata: ObjectMeta {
                name: Some("known".into()),
                namespace: r.namespace.clone(),
                ..ObjectMeta::default()
            },
            data: Some([("v".to_string(), "last".to_string())].into()),
            ..ConfigMap::default()
        })
    }

    /// A ConfigMap whose `data` cannot decode (a number where strings are).
    fn bad(name: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "shop"}, "data": {"v": 4294967296_u64}})
    }

    #[test]
    fn an_object_that_does_not_decode_stands_as_last_seen() {
        let good = json!({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "known", "namespace": "shop"}, "data": {"v": "new"}});
        // Good objects pass.
        let Some(Event::Apply(cm)) = decoded(Event::Apply(guard(good.clone())), &last_seen) else {
            panic!("a good object passes");
        };
        assert_eq!(cm.data.expect("data")["v"], "new");
        // A bad change is no change.
        assert!(decoded(Event::Apply(guard(bad("known"))), &last_seen).is_none());
        // In a relist, the bad object stays as last seen (not absent: never treated as deleted).
        let Some(Event::InitApply(cm)) = decoded(Event::InitApply(guard(bad("known"))), &last_seen)
        else {
            panic!("kept in the relist");
        };
        assert_eq!(cm.data.expect("data")["v"], "last");
        // One never seen whole is left out, and its deletion goes through as the last seen one.
        assert!(decoded(Event::InitApply(guard(bad("unknown"))), &last_seen).is_none());
        assert!(matches!(
            decoded(Event::Delete(guard(bad("known"))), &last_seen),
            Some(Event::Delete(_))
        ));
        assert!(matches!(
            decoded::<ConfigMap, _>(Event::InitDone, &last_seen),
            Some(Event::InitDone)
        ));
    }
}
