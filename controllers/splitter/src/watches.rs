//! What the splitter watches, and which passes each change starts.
//!
//! Every kind is watched once, into a cache that tells its changes after it has them: a pass
//! started by a change reads the caches with that change in them (a second watch of the same
//! kind would race its cache). What of an object a pass reads is hashed (`*_inputs`), so a
//! change of anything else — a heartbeat, the splitter's own status writes — starts nothing.

use std::collections::BTreeSet;
use std::sync::Arc;

use flotilla_api::{
    ApiResourceImport, Cluster, ClusterPlacement, Placement, Work, WorkloadProfile, annotations,
    conditions, labels,
};
use flotilla_runtime::Context;
use flotilla_runtime::cache::{
    Change, selected, spawn_lean_store, spawn_store_with, wait_until_synced, when_inputs_change,
};
use flotilla_runtime::gather::Urgency;
use futures::channel::mpsc;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use kube::core::{PartialObjectMeta, Selector, SelectorExt};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Api, Resource, ResourceExt};
use tokio::sync::Notify;

use crate::inventory::Inventory;
use crate::recent::RecentWrites;
use crate::state::{Scope, placements_in};
use crate::watermarks::Watermarks;

/// Passes of Placements to start, from the caches' changes, and how soon (see
/// [`flotilla_runtime::gather::pace`]): a change of what a Placement places is acted on at once,
/// one the Placement only reports on (a Work's status, a Cluster's) once its burst settles.
pub(crate) type Triggers = mpsc::UnboundedSender<(ObjectRef<Placement>, Urgency)>;

/// The caches a pass reads besides the Placements.
pub(crate) struct Caches {
    pub clusters: Clusters,
    pub works: Store<Work>,
    pub data_secrets: Store<PartialObjectMeta<Secret>>,
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    pub records: Store<ReplicaSet>,
    pub profiles: Store<WorkloadProfile>,
    pub imports: Store<ApiResourceImport>,
    /// The hub's objects of every namespaced kind, for the report of what is not placed.
    pub inventory: Inventory,
    /// The splitter's own recent Work writes, as the Work cache saw them.
    pub recent: Arc<RecentWrites>,
    /// Wakes the releaser of deleted Placements' Works (see [`crate::release`]).
    pub release_wake: Arc<Notify>,
}

impl Caches {
    /// Starts every cache of `scope`; each starts the passes its changes concern through
    /// `triggers`, except the imports', whose changes (`ImportEvents`) go to the controller. A
    /// change of a Work that may be orphaned wakes the releaser (`release_wake`).
    pub fn start(
        ctx: &Context,
        scope: Scope<'_>,
        args: &crate::SplitterArgs,
        placements: &Store<Placement>,
        triggers: &Triggers,
        release_wake: Arc<Notify>,
    ) -> anyhow::Result<(Self, ImportEvents)> {
        let client = &ctx.client;
        // Clusters: every one, selected here (a Cluster outside the selector still exists, and
        // its Works are not this splitter's to delete). One selected that changed in what
        // selection reads, or one entering or leaving the selection, may change the eligibility
        // of members for every Placement.
        let selector = Arc::new(
            flotilla_runtime::selector::parse(&args.cluster_selector)
                .map_err(anyhow::Error::msg)?,
        );
        let in_selection = selector.clone();
        let clusters = Clusters {
            all: spawn_store_with(
                ctx,
                Api::all(client.clone()),
                watcher::Config::default(),
                when_inputs_change(
                    // Outside the selector: only its coming and going matter.
                    move |c: &Cluster| {
                        if in_selection.matches(c.labels()) {
                            cluster_inputs(c)
                        } else {
                            0
                        }
                    },
                    every_placement(placements.clone(), triggers.clone()),
                ),
            ),
            selector,
        };
        // Works: a change of what a Placement reads of its Works (conditions, the member's
        // status of the object, their lifecycle) starts a pass of that Placement, so the hub
        // sends every Work event to the splitter once.
        let recent: Arc<RecentWrites> = Arc::default();
        let work_changed = work_trigger(placements.clone(), recent.clone(), triggers.clone());
        let (release_placements, wake) = (placements.clone(), release_wake.clone());
        let works = spawn_lean_store(
            ctx,
            Api::all(client.clone()),
            watcher::Config::default().labels(labels::PLACEMENT),
            crate::digest::lean,
            move |w: Change<'_, Work>| {
                work_changed(w);
                if crate::release::concerns(w.object(), &release_placements) {
                    wake.notify_one();
                }
            },
        );
        // The hub Secrets with the data of the Works' Secrets (metadata only): one deleted, or
        // no longer its Work's, is written again by a pass of its Placement.
        let data_secrets = spawn_store_with(
            ctx,
            Api::all(client.clone()),
            watcher::Config::default().labels(labels::WORK_DATA),
            when_inputs_change(
                data_secret_inputs,
                placement_that_made(placements.clone(), triggers.clone()),
            ),
        );
        // The hub's namespaces: a change of a namespace's labels rewrites the Works of its
        // Placements (their member namespaces carry them).
        let namespace_watch = match scope.namespace() {
            Some(ns) => watcher::Config::default().fields(&format!("metadata.name={ns}")),
            None => watcher::Config::default(),
        };
        let namespaces = spawn_store_with(
            ctx,
            Api::all(client.clone()),
            namespace_watch,
            when_inputs_change(
                namespace_inputs,
                placements_of_namespace(placements.clone(), triggers.clone()),
            ),
        );
        // The hub ReplicaSet records the splitter keeps of placed Deployments (see
        // crate::history): what it last wrote of each, and their status; not their pod
        // templates.
        let records = spawn_lean_store(
            ctx,
            scoped(client, scope.namespace()),
            watcher::Config::default().labels(crate::history::RECORD),
            |rs: &mut ReplicaSet| rs.spec.template = None,
            |_: Change<'_, ReplicaSet>| {},
        );
        // The profiles of custom kinds: one accepted, changed or deleted looks at every
        // Placement again (rare, and it may change how any of them divides).
        let profiles = spawn_store_with(
            ctx,
            Api::all(client.clone()),
            watcher::Config::default(),
            when_inputs_change(
                profile_inputs,
                every_placement(placements.clone(), triggers.clone()),
            ),
        );
        let (imports, import_events) = imports(client);
        // The report of a namespace's objects that no Placement places: a change of what it
        // reads starts a report pass of the namespace's Placements.
        let inventory = if scope.placements() {
            let (every, triggers) = (placements.clone(), triggers.clone());
            Inventory::start(ctx, scope.namespace(), move |ns: &str| {
                for p in placements_in(&every, Some(ns.to_string())) {
                    let _ = triggers.unbounded_send((p, Urgency::Later));
                }
            })
        } else {
            Inventory::default()
        };
        let caches = Self {
            clusters,
            works,
            data_secrets,
            namespaces,
            records,
            profiles,
            imports,
            inventory,
            recent,
            release_wake,
        };
        Ok((caches, import_events))
    }

    /// Waits until every cache has listed everything. Nothing is placed before: an empty cache
    /// of Works would look like "no copy yet", of Secrets like Secrets to write again, of
    /// records like Deployments to number anew, of profiles like custom kinds to copy whole,
    /// of every Cluster like deleted Clusters. (The inventory, read only by the report: until
    /// each kind listed or failed, so that a start does not report every kind unreadable.)
    pub async fn synced(&self) {
        self.inventory.settled().await;
        wait_until_synced(&self.clusters.all).await;
        wait_until_synced(&self.works).await;
        wait_until_synced(&self.data_secrets).await;
        wait_until_synced(&self.namespaces).await;
        wait_until_synced(&self.records).await;
        wait_until_synced(&self.profiles).await;
    }
}

/// Every Cluster, and which of them the splitter places on (its `--cluster-selector`).
#[derive(Clone)]
pub struct Clusters {
    all: Store<Cluster>,
    selector: Arc<Selector>,
}

impl Clusters {
    /// The Clusters the splitter places on.
    pub fn selected(&self) -> Vec<Arc<Cluster>> {
        self.split().0
    }

    /// The Clusters the splitter places on, and the names of those outside its selector (they
    /// exist, and another splitter may serve them), from one look at the cache: a Cluster that
    /// changes selection meanwhile is in one of them, not both or neither.
    pub fn split(&self) -> (Vec<Arc<Cluster>>, BTreeSet<String>) {
        let (selected, elsewhere): (Vec<_>, Vec<_>) = self
            .all
            .state()
            .into_iter()
            .partition(|c| self.selector.matches(c.labels()));
        (selected, elsewhere.iter().map(|c| c.name_any()).collect())
    }
}

/// Changes of the negotiator's verdicts on the members' APIs.
pub(crate) type ImportEvents = BoxStream<'static, Result<ApiResourceImport, watcher::Error>>;

/// The negotiator's verdicts on the members' APIs, cached for the per-object check; a changed
/// verdict looks at every Placement again.
fn imports(client: &kube::Client) -> (Store<ApiResourceImport>, ImportEvents) {
    let (imports, writer) = reflector::store::<ApiResourceImport>();
    let seen = imports.clone();
    let events = flotilla_runtime::guard::watcher(
        Api::all(client.clone()),
        watcher::Config::default(),
        |i: &mut ApiResourceImport| i.metadata.managed_fields = None,
        move |r| seen.get(r).map(|i| (*i).clone()),
    )
    .default_backoff()
    .reflect(writer)
    .applied_objects()
    .predicate_filter(import_inputs, Default::default())
    .boxed();
    (imports, events)
}

/// The Placements of `scope` and (when it serves every namespace) the ClusterPlacements, cached
/// in one store, and the changes that start their passes: a Placement whose spec changed or
/// that went — the splitter's own status writes start nothing — and, since another Placement
/// of the namespace appearing, changing or going may change which one places an object, its
/// neighbours too (from the same watch, after the cache has the change: a second watch would
/// race it, and a neighbour's pass could still read the old Placement).
pub(crate) fn placements(
    client: &kube::Client,
    scope: Scope<'_>,
    args: &crate::SplitterArgs,
    triggers: &Triggers,
    release_wake: &Arc<Notify>,
) -> (
    Store<Placement>,
    BoxStream<'static, Result<Placement, watcher::Error>>,
) {
    let (placements, mut sources) = flotilla_runtime::union::union::<Placement>(
        usize::from(scope.placements()) + usize::from(scope.cluster_placements()),
    );
    let mut events = futures::stream::empty().boxed();
    // Each decodes on its own (see flotilla_runtime::guard): a Placement with a value the
    // splitter cannot read stands as it was last seen, and the others go on.
    if scope.placements() {
        let source = sources.remove(0);
        let last_seen = placements.clone();
        let placed = flotilla_runtime::guard::watcher(
            flotilla_runtime::guard::namespaced(scoped(client, scope.namespace())),
            watcher::Config::default(),
            |_: &mut Placement| {},
            move |r| last_seen.get(r).map(|p| (*p).clone()),
        )
        .default_backoff()
        .inspect(move |e| {
            if let Ok(e) = e {
                source.apply(e);
            }
        });
        events = futures::stream::select(events, placed).boxed();
    }
    if scope.cluster_placements() {
        let source = sources.remove(0);
        // (The store holds it as a Placement: one that does not decode is left out.)
        let placed = flotilla_runtime::guard::watcher(
            Api::all(client.clone()),
            selected(&args.cluster_placement_selector),
            |_: &mut ClusterPlacement| {},
            |_| None,
        )
        .default_backoff()
        .map_ok(as_placements)
        .inspect(move |e| {
            if let Ok(e) = e {
                source.apply(e);
            }
        });
        events = futures::stream::select(events, placed).boxed();
    }
    let (neighbours_of, neighbour_triggers) = (placements.clone(), triggers.clone());
    let appeared_or_went = release_wake.clone();
    let events = spec_changes_and_deletions(events)
        .inspect(move |changed| {
            let Ok(changed) = changed else { return };
            appeared_or_went.notify_one();
            let ns = changed.namespace();
            for p in neighbours_of.state() {
                if p.namespace() == ns && p.name_any() != changed.name_any() {
                    let _ =
                        neighbour_triggers.unbounded_send((ObjectRef::from_obj(&*p), Urgency::Now));
                }
            }
        })
        .boxed();
    (placements, events)
}

/// The passes the hub objects a Placement places start: a changed verdict on a member's API,
/// every Placement (once its burst settles); a hub Deployment's spec or deletion, and any change
/// of another object of the default types (metadata only), the Placements of its namespace at
/// once. Objects of the custom types Placements select are watched once a pass finds the type,
/// and start their passes through the triggers.
pub(crate) fn placed_objects(
    client: &kube::Client,
    scope: Scope<'_>,
    placements: &Store<Placement>,
    import_events: ImportEvents,
    watermarks: &Arc<Watermarks>,
) -> BoxStream<'static, (ObjectRef<Placement>, Urgency)> {
    let namespace = scope.namespace();
    let namespaced = scope.placements();
    let every = placements.clone();
    let verdicts = import_events
        .filter_map(|import| {
            if let Err(e) = &import {
                tracing::warn!(error = %e, "watch of API imports failed; retrying with backoff");
            }
            std::future::ready(import.ok())
        })
        .flat_map(move |_| {
            futures::stream::iter(
                every
                    .state()
                    .iter()
                    .map(|p| (ObjectRef::from_obj(&**p), Urgency::Later))
                    .collect::<Vec<_>>(),
            )
        });
    let placed = if namespaced {
        let marks = watermarks.clone();
        let deployments = spec_changes_and_deletions(
            watcher(
                scoped::<Deployment>(client, namespace),
                watcher::Config::default(),
            )
            .default_backoff()
            .inspect_ok(move |event| {
                if let watcher::Event::Apply(d) | watcher::Event::Delete(d) = event {
                    marks.saw("apps", "Deployment", d.resource_version().as_deref());
                }
            }),
        )
        .map_ok(|d| d.namespace());
        futures::stream::select_all([
            deployments.boxed(),
            namespace_of(object_changes::<ConfigMap>(
                client,
                namespace,
                Default::default(),
                watermarks,
            )),
            // Not the Works' data Secrets: the data-secret cache has them (each Secret comes
            // through one watch).
            namespace_of(object_changes::<Secret>(
                client,
                namespace,
                not_work_data(),
                watermarks,
            )),
            namespace_of(object_changes::<Service>(
                client,
                namespace,
                Default::default(),
                watermarks,
            )),
            namespace_of(object_changes::<ServiceAccount>(
                client,
                namespace,
                Default::default(),
                watermarks,
            )),
        ])
        .boxed()
    } else {
        futures::stream::empty().boxed()
    };
    let placements = placements.clone();
    let placed = placed.flat_map(move |changed| {
        let refs = match changed {
            Ok(ns) => placements_in(&placements, ns),
            Err(e) => {
                tracing::warn!(error = %e, "watch of placed objects failed; retrying with backoff");
                Vec::new()
            }
        };
        futures::stream::iter(refs.into_iter().map(|p| (p, Urgency::Now)))
    });
    futures::stream::select(verdicts, placed).boxed()
}

/// The namespace of each changed object of `changes`.
fn namespace_of<K>(
    changes: impl futures::Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static,
) -> BoxStream<'static, Result<Option<String>, watcher::Error>>
where
    K: Resource + Send + 'static,
{
    changes.map_ok(|o| o.namespace()).boxed()
}

/// The Secrets that are not the Works' data Secrets (see [`flotilla_api::work_data`]).
fn not_work_data() -> watcher::Config {
    watcher::Config::default().labels(&format!("!{}", labels::WORK_DATA))
}

/// The API of `K` in `namespace`, or in every namespace.
fn scoped<K>(client: &kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        None => Api::all(client.clone()),
        Some(ns) => Api::namespaced(client.clone(), ns),
    }
}

/// The events of a ClusterPlacement watch as those of the Placements the splitter handles.
fn as_placements(event: watcher::Event<ClusterPlacement>) -> watcher::Event<Placement> {
    use watcher::Event;
    match event {
        Event::Apply(cp) => Event::Apply(cp.as_placement()),
        Event::Delete(cp) => Event::Delete(cp.as_placement()),
        Event::InitApply(cp) => Event::InitApply(cp.as_placement()),
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
    }
}

/// Every change of an object of `K` (created, changed, deleted) in `namespace` (`None`: every
/// namespace), from a metadata-only watch: what the splitter places must reach the members in
/// about a second, not at the next resync. Each change's resourceVersion is noted in
/// `watermarks` before it starts a pass.
fn object_changes<K>(
    client: &kube::Client,
    namespace: Option<&str>,
    config: watcher::Config,
    watermarks: &Arc<Watermarks>,
) -> impl futures::Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let api: Api<PartialObjectMeta<K>> = match namespace {
        None => Api::all(client.clone()),
        Some(ns) => Api::namespaced(client.clone(), ns),
    };
    let marks = watermarks.clone();
    watcher(api, config)
        .default_backoff()
        .touched_objects()
        .inspect_ok(move |o| {
            marks.saw(
                &K::group(&()),
                &K::kind(&()),
                o.metadata.resource_version.as_deref(),
            );
        })
        .predicate_filter(predicates::resource_version, Default::default())
}

/// The objects of a watch whose generation changed, and every deleted one (a predicate on the
/// generation alone would drop deletions: a deleted object keeps its last generation).
fn spec_changes_and_deletions<K>(
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
) -> impl futures::Stream<Item = Result<K, watcher::Error>>
where
    K: Resource,
{
    let mut generations: std::collections::HashMap<String, Option<i64>> = Default::default();
    events.filter_map(move |event| {
        let changed = match event {
            Ok(watcher::Event::Delete(o)) => {
                generations.remove(&o.uid().unwrap_or_default());
                Some(Ok(o))
            }
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                let generation = o.meta().generation;
                let before = generations.insert(o.uid().unwrap_or_default(), generation);
                (before != Some(generation)).then_some(Ok(o))
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
            Err(e) => Some(Err(e)),
        };
        std::future::ready(changed)
    })
}

/// What of an import the per-object check reads: its schema and its `Compatible` verdict.
/// What of a profile the splitter reads: its spec (generation) and whether it is accepted.
fn profile_inputs(profile: &WorkloadProfile) -> u64 {
    let accepted = profile.accepted();
    flotilla_api::names::fnv1a(format!("{:?}/{accepted}", profile.metadata.generation).bytes())
}

fn import_inputs(import: &ApiResourceImport) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    import.metadata.generation.hash(&mut h);
    if let Some(c) = import.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == conditions::COMPATIBLE)
    }) {
        (&c.status, &c.reason).hash(&mut h);
    }
    Some(h.finish())
}

/// What of a namespace its Placements read: the labels its member namespaces carry, and the
/// admin's annotations that allow adopting objects and using existing member namespaces.
fn namespace_inputs(ns: &PartialObjectMeta<Namespace>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    crate::keys::member_namespace_labels(ns.labels()).hash(&mut h);
    for annotation in [
        flotilla_api::annotations::ALLOW_ADOPT,
        flotilla_api::annotations::ALLOW_EXISTING_NAMESPACES,
    ] {
        ns.annotations().get(annotation).hash(&mut h);
    }
    h.finish()
}

/// Starts a pass of every Placement of the namespace that changed.
fn placements_of_namespace(
    placements: Store<Placement>,
    triggers: Triggers,
) -> impl Fn(Change<'_, PartialObjectMeta<Namespace>>) + Send + 'static {
    move |ns| {
        for p in placements_in(&placements, Some(ns.object().name_any())) {
            let _ = triggers.unbounded_send((p, Urgency::Later));
        }
    }
}

/// Starts a pass of every Placement in scope.
fn every_placement<K>(
    placements: Store<Placement>,
    triggers: Triggers,
) -> impl Fn(Change<'_, K>) + Send + 'static {
    move |_| {
        for p in placements.state() {
            let _ = triggers.unbounded_send((ObjectRef::from_obj(&*p), Urgency::Later));
        }
    }
}

/// Starts a pass of the Placement that made the object that changed (a Work, a Work's hub
/// Secret): the one its label names, of its source namespace (empty for a ClusterPlacement's).
fn placement_that_made<K: Resource>(
    placements: Store<Placement>,
    triggers: Triggers,
) -> impl Fn(Change<'_, K>) + Send + 'static {
    move |change| {
        let o = change.object();
        let name = o.labels().get(labels::PLACEMENT);
        let ns = o.annotations().get(annotations::SOURCE_NAMESPACE);
        for p in placements.state() {
            if Some(&p.name_any()) == name
                && p.namespace().unwrap_or_default().as_str() == ns.map_or("", String::as_str)
            {
                let _ = triggers.unbounded_send((ObjectRef::from_obj(&*p), Urgency::Later));
            }
        }
    }
}

/// What of a Cluster selection reads: labels, spec, conditions (not their heartbeat times) and
/// allocatable capacity.
fn cluster_inputs(cluster: &Cluster) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    cluster.metadata.labels.hash(&mut h);
    cluster.metadata.generation.hash(&mut h);
    if let Some(status) = &cluster.status {
        for c in &status.conditions {
            (
                &c.type_,
                &c.status,
                &c.reason,
                &c.last_transition_time.0.to_string(),
            )
                .hash(&mut h);
        }
        for (k, v) in &status.allocatable {
            (k, &v.0).hash(&mut h);
        }
    }
    h.finish()
}

/// Starts a pass of a Work's Placement when the Work was deleted or changed in what the
/// Placement reads ([`work_inputs`]), and keeps the splitter's record of its own recent writes.
fn work_trigger(
    placements: Store<Placement>,
    recent: Arc<RecentWrites>,
    triggers: Triggers,
) -> impl Fn(Change<'_, Work>) + Send + 'static {
    let made = placement_that_made(placements, triggers);
    let own = recent.clone();
    let changed = when_inputs_change(work_inputs, move |change| {
        // The echo of the splitter's own write (the Work as the hub answered it) is what the
        // pass that wrote it already saw: no news for another pass.
        if let Change::Applied(w) = change
            && own
                .written(&crate::keys::key_of(w))
                .is_some_and(|mine| mine.uid() == w.uid() && work_inputs(&mine) == work_inputs(w))
        {
            return;
        }
        made(change);
    });
    move |change| {
        // Before `seen`, which lets go of the write once the cache has it.
        changed(change);
        match change {
            Change::Applied(w) => recent.seen(w),
            Change::Deleted(w) => recent.forget(&crate::keys::key_of(w)),
        }
    }
}

/// What of a Work's hub Secret (see [`flotilla_api::work_data`]) its Placement reads: its
/// owners. One deleted, or no longer its Work's, is written again.
fn data_secret_inputs(secret: &PartialObjectMeta<Secret>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for o in secret.owner_references() {
        o.uid.hash(&mut h);
    }
    h.finish()
}

/// What of a Work its Placement reads: its spec's generation, whether it is being deleted, its
/// conditions (not their times) and what the member reports of the object (not its
/// resourceVersion, which changes with every write in the member).
fn work_inputs(work: &Work) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    work.metadata.generation.hash(&mut h);
    work.metadata.deletion_timestamp.is_some().hash(&mut h);
    work.finalizers().len().hash(&mut h);
    if let Some(status) = &work.status {
        for c in &status.conditions {
            (&c.type_, &c.status, &c.reason, c.observed_generation).hash(&mut h);
        }
        status.observed_generation.hash(&mut h);
        for m in &status.manifests {
            (m.generation, m.observed_generation, m.applied, m.available).hash(&mut h);
            m.status.as_ref().map(ToString::to_string).hash(&mut h);
        }
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher;
    use serde_json::json;

    fn work(generation: i64, applied: &str) -> Work {
        serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
            "metadata": {"name": "w", "namespace": "flotilla-cluster-m1", "uid": "uw",
                         "generation": generation,
                         "labels": {labels::PLACEMENT: "p"},
                         "annotations": {annotations::SOURCE_NAMESPACE: "shop"}},
            "spec": {"manifests": []},
            "status": {"conditions": [{"type": "Applied", "status": applied, "reason": "R",
                                       "message": "", "lastTransitionTime": "2026-12-07T00:00:00Z"}]},
        }))
        .expect("a Work")
    }

    #[test]
    fn the_echo_of_the_splitters_own_write_starts_no_pass() {
        let (store, mut writer) = kube::runtime::reflector::store::<Placement>();
        let placement: Placement = serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
            "metadata": {"name": "p", "namespace": "shop"}, "spec": {},
        }))
        .expect("a Placement");
        writer.apply_watcher_event(&watcher::Event::Apply(placement));
        let (triggers, mut triggered) = mpsc::unbounded();
        let recent: Arc<RecentWrites> = Arc::default();
        let trigger = work_trigger(store, recent.clone(), triggers);
        let mut passes = || {
            let mut n = 0;
            while triggered.try_recv().is_ok() {
                n += 1;
            }
            n
        };

        trigger(Change::Applied(&work(1, "True")));
        assert_eq!(passes(), 1, "a Work the splitter did not write");
        recent.record(work(2, "True"));
        trigger(Change::Applied(&work(2, "True")));
        assert_eq!(passes(), 0, "the echo of its own write");
        recent.record(work(3, "True"));
        trigger(Change::Applied(&work(3, "False")));
        assert_eq!(passes(), 1, "its write, with a status the pass did not see");
        trigger(Change::Applied(&work(4, "False")));
        assert_eq!(passes(), 1, "a spec written by someone else");
    }
}
