//! Watches of the objects the syncer applied in its members: one metadata-only watch per member
//! and resource type, selected by label (`flotilla.dev/managed=true,flotilla.dev/cluster=<c>`),
//! never one per object. A change of a watched object (a member controller updating its status,
//! a hand edit, a deletion) triggers a reconciliation of the Work named in its
//! `flotilla.dev/work` annotation, so status flows up and drift is reverted at once rather than
//! on the next resync.
//!
//! A watch starts when a Work first applies a type in a member and stops when no Work of that
//! member uses the type any more, or when the member goes. Watches never delete anything: a watch
//! that restarts or comes back from an unreachable member only triggers reconciliations.
//!
//! The watches also keep, of every managed object, what finds its Work and tells whether it
//! changed since the syncer applied it ([`Seen`]), so that applying or deleting an object the
//! syncer already manages needs no extra read from the member.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use flotilla_api::{Work, annotations, labels};
use futures::channel::mpsc;
use futures::{SinkExt, StreamExt, TryStreamExt};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PartialObjectMeta};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use crate::metrics::Tracking;

/// One member × resource type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct WatchKey {
    cluster: String,
    gvk: GroupVersionKind,
}

/// Object metadata as the watches keep it.
pub type ObjectMeta = PartialObjectMeta<DynamicObject>;

/// Why a manifest the syncer applied before is applied again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stale {
    /// Its type has no member watch (yet).
    NotWatched,
    /// The member watch does not have the object (gone, or not listed yet).
    Unseen,
    /// The member object is being deleted.
    Deleting,
    /// The member object belongs to another Work.
    OtherWork,
    /// The manifest changed since it was applied.
    ManifestChanged,
    /// The member object changed since it was applied (by anyone), or the status is older.
    ObjectChanged,
}

/// A write of the syncer whose watch event (its echo) has not arrived yet.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Pending {
    /// Sent, not answered: the echo may arrive before the answer. Holds the resourceVersions
    /// of the events seen meanwhile, so that the answer can tell whether its echo has passed.
    InFlight(Vec<String>),
    /// Answered with this object, not echoed yet: the watch's copy is older than the member's.
    Wrote(Written),
}

/// What the member answered to a write of the syncer: what [`MemberWatches::unchanged`] reads.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Written {
    resource_version: String,
    work: Option<String>,
    hash: Option<String>,
}

/// A member object by namespace and name.
type ObjectKey = (Option<String>, String);

/// The syncer's writes whose echo is pending, by (namespace, name). An entry lives from the
/// write until its echo (or a deletion, or a restart of the watch), so the map holds only writes
/// in flight, not one entry per object.
type OwnWrites = Mutex<HashMap<ObjectKey, Pending>>;

/// What a member watch keeps of one object, in as few allocations as it can: one string for its
/// name, UID, resourceVersion and manifest hash, and its Work's name shared with the other
/// objects of that Work (the store holds one of these per object a syncer applied in the member;
/// as four strings and a Work name of its own each took about twice the memory, and each small
/// string, made among the short-lived ones of a burst, held a partly used page for every few).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    /// The name, the UID, the resourceVersion and the manifest hash, one after the other (an
    /// empty one is unset).
    ids: Box<str>,
    /// Where the UID, the resourceVersion and the hash start in `ids`.
    uid_at: u32,
    rv_at: u32,
    hash_at: u32,
    /// The `flotilla.dev/work` annotation, shared (see [`Objects::intern`]).
    work: Option<Arc<str>>,
    deleting: bool,
}

impl Seen {
    fn of(o: &ObjectMeta, work: Option<Arc<str>>) -> Self {
        let m = &o.metadata;
        let name = m.name.as_deref().unwrap_or_default();
        let uid = m.uid.as_deref().unwrap_or_default();
        let rv = m.resource_version.as_deref().unwrap_or_default();
        let hash = crate::manifest::applied_hash(m.annotations.as_ref()).unwrap_or_default();
        let offset = |len: usize| u32::try_from(len).unwrap_or(u32::MAX);
        Self {
            ids: [name, uid, rv, hash].concat().into_boxed_str(),
            uid_at: offset(name.len()),
            rv_at: offset(name.len() + uid.len()),
            hash_at: offset(name.len() + uid.len() + rv.len()),
            work,
            deleting: m.deletion_timestamp.is_some(),
        }
    }

    fn part(&self, from: u32, to: Option<u32>) -> &str {
        let from = from as usize;
        let to = to.map_or(self.ids.len(), |t| t as usize);
        self.ids.get(from..to).unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.part(0, Some(self.uid_at))
    }

    fn uid(&self) -> Option<&str> {
        Some(self.part(self.uid_at, Some(self.rv_at))).filter(|u| !u.is_empty())
    }

    /// Empty when the object had none.
    fn resource_version(&self) -> &str {
        self.part(self.rv_at, Some(self.hash_at))
    }

    fn hash(&self) -> Option<&str> {
        Some(self.part(self.hash_at, None)).filter(|h| !h.is_empty())
    }

    fn work(&self) -> Option<&str> {
        self.work.as_deref()
    }
}

/// A [`Seen`] in a set of one namespace's objects, found by its name (which it holds: the set
/// needs no key of its own).
#[derive(Debug)]
struct ByItsName(Seen);

impl PartialEq for ByItsName {
    fn eq(&self, other: &Self) -> bool {
        self.0.name() == other.0.name()
    }
}

impl Eq for ByItsName {}

impl std::hash::Hash for ByItsName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // As the name is hashed, so that a lookup by name finds it.
        self.0.name().hash(state);
    }
}

impl std::borrow::Borrow<str> for ByItsName {
    fn borrow(&self) -> &str {
        self.0.name()
    }
}

/// Objects by namespace (`""` for those of no namespace) and name: the namespace is kept once,
/// and an object is found without making its key.
type ByName = HashMap<Box<str>, HashSet<ByItsName>>;

fn get<'a>(objects: &'a ByName, namespace: Option<&str>, name: &str) -> Option<&'a Seen> {
    objects
        .get(namespace.unwrap_or_default())?
        .get(name)
        .map(|s| &s.0)
}

fn insert(objects: &mut ByName, o: &ObjectMeta, seen: Seen) {
    let namespace = o.metadata.namespace.as_deref().unwrap_or_default();
    match objects.get_mut(namespace) {
        Some(names) => {
            // `replace`: an object seen before is kept as it is now.
            names.replace(ByItsName(seen));
        }
        None => {
            objects.insert(Box::from(namespace), HashSet::from([ByItsName(seen)]));
        }
    }
}

fn remove(objects: &mut ByName, o: &ObjectMeta) {
    let namespace = o.metadata.namespace.as_deref().unwrap_or_default();
    let Some(names) = objects.get_mut(namespace) else {
        return;
    };
    names.remove(o.metadata.name.as_deref().unwrap_or_default());
    if names.is_empty() {
        objects.remove(namespace);
    }
}

/// The objects a member watch has seen, kept the way a reflector keeps its store: a relist
/// replaces them all once it is complete.
#[derive(Default)]
struct Objects {
    live: ByName,
    relisting: Option<ByName>,
    /// Whether a list has completed: `live` is then every managed object of the type, as of
    /// the watch's last event.
    listed: bool,
    /// The Work names the objects hold, each once (see [`Objects::intern`]).
    works: HashSet<Arc<str>>,
    /// How many names `works` may hold before those no object holds any more are let go of.
    prune_at: usize,
}

impl Objects {
    fn apply(&mut self, event: &watcher::Event<ObjectMeta>) {
        match event {
            watcher::Event::Apply(o) => {
                let seen = self.seen(o);
                insert(&mut self.live, o, seen);
            }
            watcher::Event::Delete(o) => remove(&mut self.live, o),
            watcher::Event::Init => self.relisting = Some(ByName::new()),
            watcher::Event::InitApply(o) => {
                let seen = self.seen(o);
                insert(self.relisting.get_or_insert_default(), o, seen);
            }
            watcher::Event::InitDone => {
                if let Some(mut listed) = self.relisting.take() {
                    listed.values_mut().for_each(HashSet::shrink_to_fit);
                    listed.shrink_to_fit();
                    self.live = listed;
                }
                self.listed = true;
            }
        }
    }

    fn seen(&mut self, o: &ObjectMeta) -> Seen {
        let work = o
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotations::WORK))
            .map(|w| self.intern(w));
        Seen::of(o, work)
    }

    /// The Work name `work`, shared with the objects that hold it already: a Work names up to a
    /// hundred objects. The names no object holds any more are let go of each time the set has
    /// doubled since.
    fn intern(&mut self, work: &str) -> Arc<str> {
        if let Some(shared) = self.works.get(work) {
            return shared.clone();
        }
        if self.works.len() >= self.prune_at {
            self.works.retain(|w| Arc::strong_count(w) > 1);
            self.prune_at = (2 * self.works.len()).max(64);
        }
        let shared: Arc<str> = Arc::from(work);
        self.works.insert(shared.clone());
        shared
    }

    fn get(&self, namespace: Option<&str>, name: &str) -> Option<&Seen> {
        get(&self.live, namespace, name)
    }

    /// Whether a list completed and `name` is not among the objects since.
    fn listed_without(&self, namespace: Option<&str>, name: &str) -> bool {
        self.listed && self.get(namespace, name).is_none()
    }
}

type Store = Arc<Mutex<Objects>>;

struct Running {
    stop: CancellationToken,
    /// Turns `true` once the watch's first list is complete (see [`MemberWatches::wait_listed`]).
    listed: tokio::sync::watch::Receiver<bool>,
    /// Identifies the member client the watch uses; a new client restarts the watch.
    client_key: String,
    store: Store,
    /// The resourceVersion the syncer itself last wrote, per object: the watch event of our own
    /// write is not a member change.
    written: Arc<OwnWrites>,
}

impl Running {
    fn get(&self, namespace: Option<&str>, name: &str) -> Option<Seen> {
        let objects = self.store.lock().unwrap_or_else(|e| e.into_inner());
        objects.get(namespace, name).cloned()
    }
}

impl Written {
    fn from_meta(m: &kube::api::ObjectMeta) -> Option<Self> {
        Some(Self {
            resource_version: m.resource_version.clone()?,
            work: m
                .annotations
                .as_ref()
                .and_then(|a| a.get(annotations::WORK))
                .cloned(),
            hash: crate::manifest::applied_hash(m.annotations.as_ref()).map(str::to_string),
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[derive(Default)]
struct State {
    watches: HashMap<WatchKey, Running>,
    /// The types each Work uses in its member.
    users: HashMap<ObjectRef<Work>, (String, HashSet<GroupVersionKind>)>,
}

/// The member watches of one syncer process.
pub struct MemberWatches {
    state: Mutex<State>,
    trigger: mpsc::Sender<ObjectRef<Work>>,
    tracking: Arc<Tracking>,
    shutdown: CancellationToken,
}

/// A type the Work uses in the member, with the client to watch it.
pub struct Use<'a> {
    pub client: &'a Client,
    pub client_key: &'a str,
    pub resource: &'a ApiResource,
}

impl MemberWatches {
    /// Watches whose events are sent to `trigger` (the Controller's `reconcile_on`), stopped by
    /// `shutdown`.
    pub fn new(
        trigger: mpsc::Sender<ObjectRef<Work>>,
        tracking: Arc<Tracking>,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            state: Mutex::default(),
            trigger,
            tracking,
            shutdown,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that `work` uses exactly these types in member `cluster`: starts the watches that
    /// are missing (or whose client changed), and stops those no Work uses any more.
    pub fn set_uses(&self, work: &ObjectRef<Work>, cluster: &str, uses: &[Use<'_>]) {
        let gvks: HashSet<GroupVersionKind> = uses
            .iter()
            .map(|u| gvk_of(u.resource))
            .collect::<HashSet<_>>();
        let mut state = self.lock();
        self.start_missing(&mut state, cluster, uses);
        let previous = state
            .users
            .insert(work.clone(), (cluster.to_string(), gvks));
        if let Some((old_cluster, old)) = previous {
            self.stop_unused(&mut state, &old_cluster, old);
        }
    }

    /// Starts the watches of these types that are missing before `work` writes anything with
    /// them, so that what they list tells which objects the member has already (see
    /// [`Self::wait_listed`]). They count as `work`'s until its next [`Self::set_uses`], which
    /// stops those it does not use after all.
    pub fn add_uses(&self, work: &ObjectRef<Work>, cluster: &str, uses: &[Use<'_>]) {
        let mut state = self.lock();
        self.start_missing(&mut state, cluster, uses);
        let (used_in, gvks) = state
            .users
            .entry(work.clone())
            .or_insert_with(|| (cluster.to_string(), HashSet::new()));
        if used_in == cluster {
            gvks.extend(uses.iter().map(|u| gvk_of(u.resource)));
        }
    }

    /// Starts the watches of `uses` in `cluster` that are missing, or whose client changed.
    fn start_missing(&self, state: &mut State, cluster: &str, uses: &[Use<'_>]) {
        for u in uses {
            let key = WatchKey {
                cluster: cluster.to_string(),
                gvk: gvk_of(u.resource),
            };
            let current = state
                .watches
                .get(&key)
                .is_some_and(|r| r.client_key == u.client_key);
            if !current {
                let running = self.start(&key, u);
                if state.watches.insert(key, running).is_none() {
                    self.gauge(cluster).inc();
                }
            }
        }
    }

    /// Waits, at most `within`, until the watches of these types in `cluster` have each
    /// completed a list. `false` when one has not by then (a slow or unreachable member):
    /// writing goes on without what it would have told.
    pub async fn wait_listed(
        &self,
        cluster: &str,
        resources: &[&ApiResource],
        within: std::time::Duration,
    ) -> bool {
        let mut listed: Vec<tokio::sync::watch::Receiver<bool>> = {
            let state = self.lock();
            resources
                .iter()
                .filter_map(|r| {
                    let key = WatchKey {
                        cluster: cluster.to_string(),
                        gvk: gvk_of(r),
                    };
                    state
                        .watches
                        .get(&key)
                        .map(|running| running.listed.clone())
                })
                .collect()
        };
        let all = futures::future::join_all(
            listed
                .iter_mut()
                .map(|l| async move { l.wait_for(|done| *done).await.is_ok() }),
        );
        tokio::time::timeout(within, all)
            .await
            .is_ok_and(|done| done.into_iter().all(|ok| ok))
    }

    /// `work` no longer uses anything in its member (deleted, or its objects orphaned).
    pub fn release(&self, work: &ObjectRef<Work>) {
        let mut state = self.lock();
        if let Some((cluster, old)) = state.users.remove(work) {
            self.stop_unused(&mut state, &cluster, old);
        }
    }

    /// Stops every watch of member `cluster` (it went away, or this syncer no longer serves it).
    pub fn forget_cluster(&self, cluster: &str) {
        let mut state = self.lock();
        let before = state.watches.len();
        state.watches.retain(|k, _| k.cluster != cluster);
        let stopped = before - state.watches.len();
        if stopped > 0 {
            tracing::info!(cluster, stopped, "stopped the member's watches");
            self.gauge(cluster)
                .sub(i64::try_from(stopped).unwrap_or(i64::MAX));
        }
        state.users.retain(|_, (c, _)| c != cluster);
    }

    /// The members that have watches.
    pub fn clusters(&self) -> HashSet<String> {
        self.lock()
            .watches
            .keys()
            .map(|k| k.cluster.clone())
            .collect()
    }

    /// Runs `f` on the watch of this type in `cluster`, if there is one.
    fn with_watch<R>(
        &self,
        cluster: &str,
        resource: &ApiResource,
        f: impl FnOnce(&Running) -> R,
    ) -> Option<R> {
        let state = self.lock();
        state
            .watches
            .get(&WatchKey {
                cluster: cluster.to_string(),
                gvk: gvk_of(resource),
            })
            .map(f)
    }

    /// `name` as the watch of its type has it, if that type is watched.
    fn stored(
        &self,
        cluster: &str,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Seen> {
        self.with_watch(cluster, resource, |running| running.get(namespace, name))?
    }

    /// Whether the watch of this type knows `name` as an object of `work_ref` (so that applying
    /// it again needs no conflict check). `false` when unknown or not watched yet.
    pub fn knows(
        &self,
        cluster: &str,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        work_ref: &str,
    ) -> bool {
        self.stored(cluster, resource, namespace, name)
            .is_some_and(|o| o.work() == Some(work_ref))
    }

    /// Whether the watch of this type has listed the member's managed objects of the type and
    /// `name` is not among them: then the object is most likely not there at all (or is not
    /// Flotilla's), and [`crate::apply`] creates it without reading it first — a create that
    /// finds it there after all is refused, and the object read then. `false` when the type is
    /// not watched or not listed yet.
    pub fn listed_without(
        &self,
        cluster: &str,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> bool {
        self.with_watch(cluster, resource, |running| {
            let objects = running.store.lock().unwrap_or_else(|e| e.into_inner());
            objects.listed_without(namespace, name)
        })
        .unwrap_or(false)
    }

    /// The UID and resourceVersion of `name` as the watch of its type has it, when it is an
    /// object of `work_ref` not being deleted: a delete with these as preconditions removes
    /// exactly that object, or is refused if it changed since.
    pub fn owned(
        &self,
        cluster: &str,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        work_ref: &str,
    ) -> Option<(String, String)> {
        let o = self.stored(cluster, resource, namespace, name)?;
        if o.work() != Some(work_ref) || o.deleting || o.resource_version().is_empty() {
            return None;
        }
        Some((o.uid()?.to_string(), o.resource_version().to_string()))
    }

    /// Whether the watch of this type has `name` as this syncer last applied it for `work_ref`:
    /// with manifest hash `hash`, at `resource_version` (what the Work's status reports), and
    /// not being deleted. Then there is nothing to apply: any change since, by anyone, would
    /// have changed its resourceVersion. Otherwise, why it must be applied.
    #[allow(clippy::too_many_arguments)]
    pub fn unchanged(
        &self,
        cluster: &str,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        work_ref: &str,
        hash: &str,
        resource_version: &str,
    ) -> Result<(), Stale> {
        let o = self
            .stored(cluster, resource, namespace, name)
            .ok_or(Stale::Unseen)?;
        if o.deleting {
            Err(Stale::Deleting)
        } else if o.work() != Some(work_ref) {
            Err(Stale::OtherWork)
        } else if o.hash() != Some(hash) {
            Err(Stale::ManifestChanged)
        } else if o.resource_version() != resource_version {
            Err(Stale::ObjectChanged)
        } else {
            Ok(())
        }
    }

    /// The syncer is about to write this object: until [`Self::wrote`], its watch events are
    /// taken for the echo of that write.
    pub fn writing(
        &self,
        cluster: &str,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) {
        self.with_watch(cluster, resource, |running| {
            running
                .written
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(
                    (namespace.map(str::to_string), name.to_string()),
                    Pending::InFlight(Vec::new()),
                );
        });
    }

    /// The syncer wrote this object and the member answered with `applied` (`None`: the write
    /// failed): the watch event of exactly that version is not a change.
    pub fn wrote(
        &self,
        cluster: &str,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        applied: Option<&kube::api::ObjectMeta>,
    ) {
        self.with_watch(cluster, resource, |running| {
            let key = (namespace.map(str::to_string), name.to_string());
            // Under the lock the watch task takes for each event: an echo is either already in
            // the store (seen below) or handled after this entry is in place.
            let mut written = running.written.lock().unwrap_or_else(|e| e.into_inner());
            let answer = applied.and_then(Written::from_meta);
            let seen = match written.remove(&key) {
                Some(Pending::InFlight(seen)) => seen,
                _ => Vec::new(),
            };
            let stored = running.get(namespace, name);
            // Events that came while the write was in flight were taken for its echo; one of
            // another version was a change by someone else (the member's controller updating
            // the object's status at once, say), which nothing else would report.
            let missed = changed_in_flight(&seen, answer.as_ref())
                .then(|| {
                    let work = answer.as_ref().and_then(|a| a.work.clone());
                    work.or_else(|| stored.as_ref().and_then(|o| o.work().map(str::to_string)))
                })
                .flatten()
                .and_then(|w| work_from(&w));
            let stored = stored.as_ref().map(Seen::resource_version);
            if let Some(pending) = after_answer(&seen, stored, answer) {
                written.insert(key, pending);
            }
            if let Some(work) = missed {
                self.tracking.member_changed(work.clone());
                let mut trigger = self.trigger.clone();
                tokio::spawn(async move {
                    let _ = trigger.send(work).await;
                });
            }
        });
    }

    fn gauge(&self, cluster: &str) -> prometheus::IntGauge {
        self.tracking
            .metrics()
            .member_watches
            .with_label_values(&[cluster])
    }

    fn stop_unused(&self, state: &mut State, cluster: &str, candidates: HashSet<GroupVersionKind>) {
        for gvk in candidates {
            let used = state
                .users
                .values()
                .any(|(c, g)| c == cluster && g.contains(&gvk));
            if used {
                continue;
            }
            let key = WatchKey {
                cluster: cluster.to_string(),
                gvk,
            };
            if state.watches.remove(&key).is_some() {
                tracing::info!(cluster, kind = %key.gvk.kind, "no Work uses the type any more: stopped its watch");
                self.gauge(cluster).dec();
            }
        }
    }

    fn start(&self, key: &WatchKey, u: &Use<'_>) -> Running {
        let stop = self.shutdown.child_token();
        let store = Store::default();
        let objects = store.clone();
        let written: Arc<OwnWrites> = Arc::default();
        let api: Api<ObjectMeta> = Api::all_with(u.client.clone(), u.resource);
        let selector = format!(
            "{}={},{}={}",
            labels::MANAGED,
            labels::MANAGED_VALUE,
            labels::CLUSTER,
            key.cluster
        );
        let (listed_tx, listed) = tokio::sync::watch::channel(false);
        let events = watcher(api, watcher::Config::default().labels(&selector))
            .default_backoff()
            // Only what finds the object's Work and tells whether it changed since the syncer
            // applied it is kept: a copy of every managed object's metadata would be most of the
            // syncer's memory.
            .modify(lean)
            // Into the store before the event is looked at: see `wrote`.
            .inspect_ok(move |event| {
                objects
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .apply(event);
                if matches!(event, watcher::Event::InitDone) {
                    listed_tx.send_replace(true);
                }
            });
        let cluster = key.cluster.clone();
        let kind = key.gvk.kind.clone();
        let mut trigger = self.trigger.clone();
        let tracking = self.tracking.clone();
        let token = stop.clone();
        let own_writes = written.clone();
        tracing::info!(
            cluster,
            kind,
            "watching the applied objects of this type in the member"
        );
        tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            let mut failing = false;
            loop {
                let next = tokio::select! {
                    _ = token.cancelled() => break,
                    next = events.next() => next,
                };
                match next {
                    Some(Ok(event)) => {
                        if failing {
                            tracing::info!(cluster, kind, "the member watch works again");
                            failing = false;
                        }
                        let Some(object) = echo_or_change(&own_writes, event) else {
                            continue;
                        };
                        let Some(work) = work_of(&object) else {
                            continue;
                        };
                        tracking.member_changed(work.clone());
                        if trigger.send(work).await.is_err() {
                            break;
                        }
                    }
                    Some(Err(e)) => {
                        // The watch retries with backoff; say so once per outage, not per attempt.
                        if !failing {
                            tracing::warn!(cluster, kind, error = %e, "the member watch failed; retrying with backoff");
                            failing = true;
                        }
                    }
                    None => break,
                }
            }
        });
        Running {
            stop,
            listed,
            client_key: u.client_key.to_string(),
            store,
            written,
        }
    }
}

fn gvk_of(resource: &ApiResource) -> GroupVersionKind {
    GroupVersionKind::gvk(&resource.group, &resource.version, &resource.kind)
}

/// Keeps of a member object's metadata what the syncer reads: name, namespace,
/// resourceVersion, deletion, and the `flotilla.dev/work` and `flotilla.dev/manifest-hash`
/// annotations.
fn lean(object: &mut ObjectMeta) {
    let m = &mut object.metadata;
    m.managed_fields = None;
    m.labels = None;
    m.finalizers = None;
    m.owner_references = None;
    if let Some(annotations) = &mut m.annotations {
        annotations.retain(|k, _| k == annotations::WORK || k == annotations::MANIFEST_HASH);
    }
}

/// The object of a watch event that is a change to react to; `None` for the echo of the
/// syncer's own write (whose pending entry it clears) and for events without an object.
fn echo_or_change(written: &OwnWrites, event: watcher::Event<ObjectMeta>) -> Option<ObjectMeta> {
    let mut written = written.lock().unwrap_or_else(|e| e.into_inner());
    match event {
        watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
            (!is_own_write(&mut written, &o)).then_some(o)
        }
        watcher::Event::Delete(o) => {
            written.remove(&key_of(&o));
            Some(o)
        }
        // A relist may skip echoes: what was answered is no longer known to be the latest.
        watcher::Event::Init => {
            written.retain(|_, p| matches!(p, Pending::InFlight(_)));
            None
        }
        watcher::Event::InitDone => None,
    }
}

/// Whether the events `seen` while a write was in flight include one that is not its echo: of
/// another version than the `answer` (or any, when the write failed).
fn changed_in_flight(seen: &[String], answer: Option<&Written>) -> bool {
    match answer {
        Some(answer) => seen.iter().any(|rv| *rv != answer.resource_version),
        None => !seen.is_empty(),
    }
}

/// What stays pending once a write is answered with `answer` (`None`: it failed), after the
/// events of `seen` arrived while it was in flight, with the watch's store at `stored`: the
/// answer, unless its echo came already (later events may have come too, so the store can be
/// newer than the answer) or the write failed.
fn after_answer(seen: &[String], stored: Option<&str>, answer: Option<Written>) -> Option<Pending> {
    let answer = answer?;
    let echoed =
        seen.contains(&answer.resource_version) || stored == Some(answer.resource_version.as_str());
    (!echoed).then_some(Pending::Wrote(answer))
}

fn key_of(object: &ObjectMeta) -> ObjectKey {
    (
        object.metadata.namespace.clone(),
        object.metadata.name.clone().unwrap_or_default(),
    )
}

/// Whether this event is the echo of the syncer's own write of the object; the echo of an
/// answered write clears its entry.
fn is_own_write(written: &mut HashMap<ObjectKey, Pending>, object: &ObjectMeta) -> bool {
    if object.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let key = key_of(object);
    match written.get_mut(&key) {
        // A write is in flight: this is most likely its echo; anything else is seen on the
        // write's own response or the next event.
        Some(Pending::InFlight(seen)) => {
            seen.extend(object.metadata.resource_version.clone());
            true
        }
        Some(Pending::Wrote(w))
            if object.metadata.resource_version.as_deref() == Some(w.resource_version.as_str()) =>
        {
            written.remove(&key);
            true
        }
        // An event of another version before the echo: an older one still on its way, or a
        // change by someone else (then the echo has passed, or the watch restarted).
        Some(Pending::Wrote(_)) | None => false,
    }
}

/// The Work a member object belongs to, from its `flotilla.dev/work` annotation
/// (`<namespace>/<name>` on the hub).
pub fn work_of(object: &ObjectMeta) -> Option<ObjectRef<Work>> {
    work_from(
        object
            .metadata
            .annotations
            .as_ref()?
            .get(annotations::WORK)?,
    )
}

/// The Work a `flotilla.dev/work` annotation names (`<namespace>/<name>`).
fn work_from(value: &str) -> Option<ObjectRef<Work>> {
    let (namespace, name) = value.split_once('/')?;
    if namespace.is_empty() || name.is_empty() {
        return None;
    }
    Some(ObjectRef::new(name).within(namespace))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(annotation: Option<&str>, rv: &str) -> ObjectMeta {
        let mut o: ObjectMeta = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {}
        }))
        .expect("metadata");
        o.metadata.name = Some("settings".into());
        o.metadata.namespace = Some("shop".into());
        o.metadata.resource_version = Some(rv.into());
        o.metadata.annotations =
            annotation.map(|a| [(annotations::WORK.to_string(), a.to_string())].into());
        o
    }

    #[test]
    fn a_change_by_someone_else_while_a_write_is_in_flight_is_not_taken_for_its_echo() {
        let answer = |rv: &str| Written {
            resource_version: rv.into(),
            work: Some("flotilla-cluster-m1/web".into()),
            hash: None,
        };
        // Only the echo came: nothing was missed.
        assert!(!changed_in_flight(&["7".into()], Some(&answer("7"))));
        assert!(!changed_in_flight(&[], Some(&answer("7"))));
        // The member's controller wrote right after the syncer (its status): a change.
        assert!(changed_in_flight(
            &["7".into(), "8".into()],
            Some(&answer("7"))
        ));
        // An event of an older version still on its way when the write went out: reconciling
        // once more costs little and misses nothing.
        assert!(changed_in_flight(&["6".into()], Some(&answer("7"))));
        // The write failed: whatever came was someone else's.
        assert!(changed_in_flight(&["8".into()], None));
        assert!(!changed_in_flight(&[], None));
    }

    #[test]
    fn an_object_is_known_absent_only_once_a_list_completed_without_it() {
        let mut objects = Objects::default();
        let key = (Some("shop"), "settings");
        let other = (Some("shop"), "other");
        assert!(!objects.listed_without(key.0, key.1), "nothing listed yet");
        objects.apply(&watcher::Event::Init);
        objects.apply(&watcher::Event::InitApply(meta(
            Some("flotilla-cluster-m1/web"),
            "2",
        )));
        assert!(
            !objects.listed_without(other.0, other.1),
            "the list is not complete"
        );
        objects.apply(&watcher::Event::InitDone);
        assert!(!objects.listed_without(key.0, key.1), "listed");
        assert!(objects.listed_without(other.0, other.1));
        assert!(
            objects.listed_without(None, "settings"),
            "another namespace is another object"
        );
        // A relist under way leaves what the last complete one said.
        objects.apply(&watcher::Event::Init);
        assert!(objects.listed_without(other.0, other.1) && !objects.listed_without(key.0, key.1));
        objects.apply(&watcher::Event::Delete(meta(None, "3")));
        assert!(objects.listed_without(key.0, key.1), "deleted since");
        assert!(objects.live.is_empty(), "a namespace of no objects goes");
    }

    fn count(objects: &ByName) -> usize {
        objects.values().map(HashSet::len).sum()
    }

    #[test]
    fn a_relist_replaces_what_the_watch_kept_once_it_is_complete() {
        let mut objects = Objects::default();
        let mut other = meta(Some("flotilla-cluster-m1/web"), "1");
        other.metadata.name = Some("gone".into());
        objects.apply(&watcher::Event::Apply(other.clone()));
        objects.apply(&watcher::Event::Apply(meta(
            Some("flotilla-cluster-m1/web"),
            "2",
        )));
        let seen = |objects: &Objects| objects.get(Some("shop"), "settings").cloned();
        assert_eq!(
            seen(&objects)
                .map(|s| s.resource_version().to_string())
                .as_deref(),
            Some("2")
        );
        assert_eq!(
            seen(&objects)
                .and_then(|s| s.work().map(str::to_string))
                .as_deref(),
            Some("flotilla-cluster-m1/web")
        );
        // While relisting, the watch's objects stay as they were.
        objects.apply(&watcher::Event::Init);
        objects.apply(&watcher::Event::InitApply(meta(
            Some("flotilla-cluster-m1/web"),
            "5",
        )));
        assert_eq!(count(&objects.live), 2);
        assert_eq!(
            seen(&objects)
                .map(|s| s.resource_version().to_string())
                .as_deref(),
            Some("2")
        );
        // Then the relist is what there is: what it did not list is gone.
        objects.apply(&watcher::Event::InitDone);
        assert_eq!(count(&objects.live), 1);
        assert_eq!(
            seen(&objects)
                .map(|s| s.resource_version().to_string())
                .as_deref(),
            Some("5")
        );
        objects.apply(&watcher::Event::Delete(meta(None, "6")));
        assert!(objects.live.is_empty());
    }

    #[test]
    fn an_object_is_kept_as_its_uid_resource_version_hash_and_shared_work_name() {
        let mut objects = Objects::default();
        let mut first = meta(Some("flotilla-cluster-m1/web"), "12");
        first.metadata.uid = Some("0b5d5e0c-9f5a-4b7e-8d7e-2f0c0f1a2b3c".into());
        first
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(annotations::MANIFEST_HASH.into(), "00ff".into());
        let mut second = meta(Some("flotilla-cluster-m1/web"), "13");
        second.metadata.name = Some("other".into());
        objects.apply(&watcher::Event::Apply(first));
        objects.apply(&watcher::Event::Apply(second));
        let a = objects.get(Some("shop"), "settings").expect("kept").clone();
        assert_eq!(a.uid(), Some("0b5d5e0c-9f5a-4b7e-8d7e-2f0c0f1a2b3c"));
        assert_eq!(a.resource_version(), "12");
        assert_eq!(a.hash(), Some("00ff"));
        assert_eq!(a.work(), Some("flotilla-cluster-m1/web"));
        assert!(!a.deleting);
        // Neither UID nor hash: unset, not empty.
        let b = objects.get(Some("shop"), "other").expect("kept").clone();
        assert_eq!(
            (b.uid(), b.resource_version(), b.hash()),
            (None, "13", None)
        );
        // One name for the objects of one Work.
        let (Some(wa), Some(wb)) = (&a.work, &b.work) else {
            panic!("both name their Work")
        };
        assert!(Arc::ptr_eq(wa, wb));
        // The name is held in the same string, and is what the object is found by.
        assert_eq!(a.name(), "settings");
        assert!(a.ids.starts_with("settings0b5d5e0c"), "{}", a.ids);
        // A later event of the object replaces what was kept of it.
        let mut again = meta(Some("flotilla-cluster-m1/web"), "14");
        again.metadata.name = Some("other".into());
        objects.apply(&watcher::Event::Apply(again));
        let b = objects.get(Some("shop"), "other").expect("kept");
        assert_eq!(b.resource_version(), "14");
        assert_eq!(count(&objects.live), 2);
    }

    #[test]
    fn the_names_of_works_no_object_holds_are_let_go_of() {
        let mut objects = Objects::default();
        for i in 0..1000 {
            let mut o = meta(Some(&format!("flotilla-cluster-m1/web-{i}")), "1");
            o.metadata.name = Some(format!("o-{i}"));
            objects.apply(&watcher::Event::Apply(o.clone()));
            objects.apply(&watcher::Event::Delete(o));
        }
        assert!(objects.live.is_empty());
        assert!(
            objects.works.len() <= 64,
            "{} names kept",
            objects.works.len()
        );
    }

    #[test]
    fn the_watches_keep_only_what_the_syncer_reads() {
        let mut o = meta(Some("flotilla-cluster-m1/web"), "3");
        o.metadata.labels = Some([(labels::MANAGED.to_string(), "true".to_string())].into());
        let annotations = o.metadata.annotations.get_or_insert_default();
        annotations.insert(annotations::MANIFEST_HASH.into(), "0123".into());
        annotations.insert(annotations::SOURCE_NAME.into(), "web".into());
        lean(&mut o);
        assert!(o.metadata.labels.is_none());
        let kept = o.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            kept.keys().map(String::as_str).collect::<Vec<_>>(),
            [annotations::MANIFEST_HASH, annotations::WORK]
        );
        assert_eq!(o.metadata.resource_version.as_deref(), Some("3"));
        assert!(work_of(&o).is_some());
    }

    #[test]
    fn objects_map_to_their_work() {
        let w = work_of(&meta(Some("flotilla-cluster-m1/web"), "1")).expect("a Work");
        assert_eq!(w.name, "web");
        assert_eq!(w.namespace.as_deref(), Some("flotilla-cluster-m1"));
        assert!(work_of(&meta(None, "1")).is_none());
        assert!(work_of(&meta(Some("no-slash"), "1")).is_none());
        assert!(work_of(&meta(Some("/web"), "1")).is_none());
    }

    fn answered(rv: &str) -> Pending {
        Pending::Wrote(Written {
            resource_version: rv.into(),
            work: None,
            hash: None,
        })
    }

    #[test]
    fn the_echo_of_our_own_write_is_not_a_change() {
        let key = (Some("shop".to_string()), "settings".to_string());
        let mut written = HashMap::from([(key.clone(), answered("7"))]);
        // Another version first (an older event still on its way): a change, the entry stays.
        assert!(!is_own_write(&mut written, &meta(None, "6")));
        assert!(written.contains_key(&key));
        // The echo: not a change, and nothing is pending any more.
        assert!(is_own_write(&mut written, &meta(None, "7")));
        assert!(written.is_empty());
        assert!(!is_own_write(&mut written, &meta(None, "7")));
        let mut in_flight = HashMap::from([(key.clone(), Pending::InFlight(Vec::new()))]);
        assert!(is_own_write(&mut in_flight, &meta(None, "9")));
        assert!(in_flight.contains_key(&key));
        let mut deleted = meta(None, "7");
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let mut written = HashMap::from([(key, answered("7"))]);
        assert!(!is_own_write(&mut written, &deleted));
    }

    #[test]
    fn an_answer_whose_echo_has_passed_is_not_pending() {
        let answer = |rv: &str| Written {
            resource_version: rv.into(),
            work: None,
            hash: None,
        };
        // The echo is still to come: the answer is the object's state until then.
        assert_eq!(
            after_answer(&["4".into()], Some("4"), Some(answer("5"))),
            Some(answered("5"))
        );
        // The echo came while the write was in flight, and a member controller's change after
        // it: the store is newer than the answer, which must not stand for the object.
        assert_eq!(
            after_answer(&["5".into(), "6".into()], Some("6"), Some(answer("5"))),
            None
        );
        assert_eq!(after_answer(&[], Some("5"), Some(answer("5"))), None);
        assert_eq!(after_answer(&["5".into()], None, None), None);
    }

    #[test]
    fn a_deletion_or_a_relist_ends_what_was_pending() {
        let key = (Some("shop".to_string()), "settings".to_string());
        let other = (Some("shop".to_string()), "other".to_string());
        let written = Mutex::new(HashMap::from([
            (key.clone(), answered("7")),
            (other.clone(), Pending::InFlight(Vec::new())),
        ]));
        assert!(echo_or_change(&written, watcher::Event::Init).is_none());
        let left = written.lock().expect("lock").clone();
        assert_eq!(
            left,
            HashMap::from([(other, Pending::InFlight(Vec::new()))])
        );
        written
            .lock()
            .expect("lock")
            .insert(key.clone(), answered("7"));
        let gone = echo_or_change(&written, watcher::Event::Delete(meta(None, "8")));
        assert!(gone.is_some());
        assert!(!written.lock().expect("lock").contains_key(&key));
    }
}
