//! The hub's objects of the interpreter's table of namespaced kinds, by namespace, as the report
//! of what no Placement places reads them ([`crate::coverage`], design rule 11).
//!
//! Each kind is watched once (metadata only; a Secret's type too, from a watch of whole Secrets
//! whose data is dropped on arrival) and kept lean: what the report reads of an object — its
//! UID, labels and controller owner. A pass reads a namespace's objects here instead of listing
//! every kind on every pass (fifteen and more requests per pass, most of an edit's requests to
//! the hub). The report is all this feeds: nothing is placed or removed on what it says. A kind
//! whose watch has not listed yet is reported as unreadable, never as empty; one whose watch
//! fails after it listed keeps what it last had.
//!
//! A change of what the report reads (an object made, deleted, or relabelled) starts a report
//! pass of the namespace's Placements once its burst settles, so that an object nobody places
//! is said so without waiting for an unrelated change.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use flotilla_interpreter::table;
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::keys::resource;
use crate::observation::{Listed, Unreadable};

/// What the report reads of one object.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    uid: Option<String>,
    labels: BTreeMap<String, String>,
    /// Its owner that is its controller, if any.
    controller: Option<OwnerReference>,
    /// A Secret's `type`.
    secret_type: Option<String>,
}

impl Entry {
    /// What the report reads of an object with `meta` (and, for a Secret, `secret_type`);
    /// `None` for one being deleted (the report leaves those out).
    pub fn of(meta: &ObjectMeta, secret_type: Option<&str>) -> Option<Self> {
        if meta.deletion_timestamp.is_some() {
            return None;
        }
        Some(Self {
            uid: meta.uid.clone(),
            labels: meta.labels.clone().unwrap_or_default(),
            controller: meta
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true))
                .cloned(),
            secret_type: secret_type.map(str::to_string),
        })
    }

    /// The object `ns`/`name` of `ar` as the report reads it.
    fn object(&self, ar: &ApiResource, ns: &str, name: &str) -> DynamicObject {
        let mut o = DynamicObject::new(name, ar).within(ns);
        o.metadata.uid = self.uid.clone();
        o.metadata.labels = (!self.labels.is_empty()).then(|| self.labels.clone());
        o.metadata.owner_references = self.controller.clone().map(|c| vec![c]);
        if let Some(t) = &self.secret_type {
            o.data = json!({ "type": t });
        }
        o
    }
}

/// One change a watch brings: an object of `namespace`/`name` as the report reads it (`None`:
/// being deleted).
pub type Item = (String, String, Option<Entry>);

/// What one kind's watch has brought so far.
#[derive(Debug, Default)]
pub struct KindState {
    /// By namespace, then name.
    objects: HashMap<String, BTreeMap<String, Entry>>,
    /// A relist under way: what it brought so far.
    relist: Option<HashMap<String, BTreeMap<String, Entry>>>,
    /// Whether a list completed.
    synced: bool,
    /// Why the watch fails, while it does: whether the hub said Forbidden, and the error.
    failure: Option<(bool, String)>,
}

impl KindState {
    /// Takes in one event of the watch; returns the namespaces where what the report reads
    /// changed.
    pub fn apply(&mut self, event: watcher::Event<Item>) -> Vec<String> {
        self.failure = None;
        match event {
            watcher::Event::Init => {
                self.relist = Some(HashMap::new());
                Vec::new()
            }
            watcher::Event::InitApply((ns, name, entry)) => {
                if let Some(entry) = entry {
                    let relist = self.relist.get_or_insert_with(HashMap::new);
                    relist.entry(ns).or_default().insert(name, entry);
                }
                Vec::new()
            }
            watcher::Event::InitDone => {
                let listed = self.relist.take().unwrap_or_default();
                let was_synced = std::mem::replace(&mut self.synced, true);
                let old = std::mem::replace(&mut self.objects, listed);
                if !was_synced {
                    return Vec::new();
                }
                let namespaces: BTreeSet<&String> = old.keys().chain(self.objects.keys()).collect();
                namespaces
                    .into_iter()
                    .filter(|ns| old.get(*ns) != self.objects.get(*ns))
                    .cloned()
                    .collect()
            }
            watcher::Event::Apply((ns, name, Some(entry))) => {
                let names = self.objects.entry(ns.clone()).or_default();
                if names.get(&name) == Some(&entry) {
                    return Vec::new();
                }
                names.insert(name, entry);
                vec![ns]
            }
            watcher::Event::Apply((ns, name, None)) | watcher::Event::Delete((ns, name, _)) => {
                let Some(names) = self.objects.get_mut(&ns) else {
                    return Vec::new();
                };
                let removed = names.remove(&name).is_some();
                if names.is_empty() {
                    self.objects.remove(&ns);
                }
                if removed { vec![ns] } else { Vec::new() }
            }
        }
    }

    /// The watch failed (it retries with backoff).
    pub fn failed(&mut self, e: &watcher::Error) {
        self.failure = Some((forbidden(e), e.to_string()));
    }

    /// Whether the report can read this kind: listed once, or failing with a reason to give.
    fn settled(&self) -> bool {
        self.synced || self.failure.is_some()
    }
}

/// Whether the hub refused a watch for lack of RBAC.
fn forbidden(e: &watcher::Error) -> bool {
    use watcher::Error as E;
    match e {
        E::InitialListFailed(k) | E::WatchStartFailed(k) | E::WatchFailed(k) => {
            matches!(k, kube::Error::Api(s) if s.code == 403)
        }
        E::WatchError(s) => s.code == 403,
        E::NoResourceVersion => false,
    }
}

/// Every namespaced kind of the table, watched.
#[derive(Clone, Default)]
pub struct Inventory {
    kinds: Vec<(ApiResource, Arc<Mutex<KindState>>)>,
    /// The one namespace watched, if only one is.
    namespace: Option<String>,
}

impl Inventory {
    /// Watches every namespaced kind of the table in `namespace` (`None`: every namespace),
    /// calling `changed` with each namespace where what the report reads changed (after the
    /// first list), until `ctx` shuts down.
    pub fn start<F>(ctx: &flotilla_runtime::Context, namespace: Option<&str>, changed: F) -> Self
    where
        F: Fn(&str) + Clone + Send + Sync + 'static,
    {
        let mut kinds = Vec::new();
        for k in table::defaults(true) {
            let ar = resource(k.group, k.version, k.kind, k.plural);
            let state = Arc::new(Mutex::new(KindState::default()));
            let events = if ar.group.is_empty() && ar.kind == "Secret" {
                secrets(&ctx.client, namespace, &ar)
            } else {
                metadata(&ctx.client, namespace, &ar)
            };
            tokio::spawn(keep(
                ctx.clone(),
                ar.kind.clone(),
                events,
                state.clone(),
                changed.clone(),
            ));
            kinds.push((ar, state));
        }
        Self {
            kinds,
            namespace: namespace.map(str::to_string),
        }
    }

    /// Waits until every kind has listed once or failed (then the report says why).
    pub async fn settled(&self) {
        for (_, state) in &self.kinds {
            while !lock(state).settled() {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }

    /// The objects of namespace `ns` of every kind a pass did not list (`listed`), and the kinds
    /// that cannot be read.
    pub fn rest_of_namespace(&self, ns: &str, listed: &[Listed]) -> (Vec<Listed>, Vec<Unreadable>) {
        let (mut rest, mut unreadable) = (Vec::new(), Vec::new());
        for (ar, state) in &self.kinds {
            if listed.iter().any(|l| l.resource == *ar) {
                continue;
            }
            let state = lock(state);
            if !state.synced {
                let doing = match &self.namespace {
                    Some(ns) => format!("watch {} in namespace {ns}", ar.plural),
                    None => format!("watch {}", ar.plural),
                };
                let (forbidden, why) = state
                    .failure
                    .clone()
                    .unwrap_or((false, "it has not listed them yet".to_string()));
                unreadable.push(Unreadable::failed(
                    &ar.api_version,
                    &ar.kind,
                    &doing,
                    forbidden,
                    &why,
                ));
                continue;
            }
            let objects = state.objects.get(ns).map_or_else(Vec::new, |names| {
                names
                    .iter()
                    .map(|(name, entry)| entry.object(ar, ns, name))
                    .collect()
            });
            rest.push(Listed {
                resource: ar.clone(),
                objects,
            });
        }
        (rest, unreadable)
    }
}

fn lock(state: &Mutex<KindState>) -> std::sync::MutexGuard<'_, KindState> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// The API of `ar` in `namespace`, or in every namespace.
fn api<K>(client: &kube::Client, namespace: Option<&str>, ar: &ApiResource) -> Api<K>
where
    K: kube::Resource<DynamicType = ApiResource, Scope = kube::core::DynamicResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

type Events = futures::stream::BoxStream<'static, Result<watcher::Event<Item>, watcher::Error>>;

/// A metadata-only watch of `ar`.
fn metadata(client: &kube::Client, namespace: Option<&str>, ar: &ApiResource) -> Events {
    let api = api::<PartialObjectMeta<DynamicObject>>(client, namespace, ar);
    watcher(api, watcher::Config::default())
        .map(|event| event.map(|e| lean(e, |_| None)))
        .boxed()
}

/// A watch of whole Secrets (but the Works' data Secrets), kept as their metadata and type: the
/// report tells a Helm release's record and a ServiceAccount token by their type.
fn secrets(client: &kube::Client, namespace: Option<&str>, ar: &ApiResource) -> Events {
    let api = api::<DynamicObject>(client, namespace, ar);
    let config =
        watcher::Config::default().labels(&format!("!{}", flotilla_api::labels::WORK_DATA));
    watcher(api, config)
        .map(|event| event.map(|e| lean(e, |o| o.data.get("type").and_then(|t| t.as_str()))))
        .boxed()
}

/// A watch event of `K` as the report reads it (`secret_type`: what it reads of a Secret's
/// type).
fn lean<K: kube::Resource>(
    event: watcher::Event<K>,
    secret_type: impl Fn(&K) -> Option<&str>,
) -> watcher::Event<Item> {
    let item = |o: &K| {
        let entry = Entry::of(o.meta(), secret_type(o));
        (o.namespace().unwrap_or_default(), o.name_any(), entry)
    };
    match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(item(&o)),
        watcher::Event::Delete(o) => watcher::Event::Delete(item(&o)),
        watcher::Event::InitApply(o) => watcher::Event::InitApply(item(&o)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// Keeps `state` up to date with `events` (retrying with backoff) until `shutdown`.
async fn keep<F>(
    ctx: flotilla_runtime::Context,
    kind: String,
    events: Events,
    state: Arc<Mutex<KindState>>,
    changed: F,
) where
    F: Fn(&str),
{
    let mut events = std::pin::pin!(events.default_backoff());
    loop {
        tokio::select! {
            _ = ctx.shutdown.cancelled() => break,
            next = events.next() => match next {
                Some(Ok(event)) => {
                    let namespaces = lock(&state).apply(event);
                    for ns in namespaces {
                        changed(&ns);
                    }
                }
                Some(Err(e)) => {
                    tracing::warn!(%kind, error = %e,
                        "watch of the hub's objects for the report failed; retrying with backoff");
                    lock(&state).failed(&e);
                }
                None => break,
            },
        }
    }
}

#[cfg(test)]
mod tests;
