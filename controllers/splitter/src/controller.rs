//! The Placement controller. Each pass of a Placement is four steps:
//!
//! 1. [`observe`](crate::observe): read the caches and list the selected objects;
//! 2. [`plan`](crate::plan): decide, with no I/O, which Works to write and delete, and why;
//! 3. [`execute`](crate::execute): write what differs from the hub, delete what the plan says;
//! 4. [`report`](crate::report): the Placement's and the divided Deployments' status, Events.
//!
//! Passes are started by changes of anything a Placement reads (its own spec, its neighbours,
//! Clusters, the members' API imports, the selected objects of every type, the Works' status)
//! and debounced, so a burst of changes becomes one pass.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use flotilla_api::{
    ApiResourceImport, Cluster, ClusterPlacement, Placement, Work, WorkloadProfile, annotations,
    conditions, labels,
};
use flotilla_runtime::Context;
use flotilla_runtime::cache::SeenInputs;
use flotilla_runtime::reconcile::{Reconciler, Retry, drive};
use futures::channel::mpsc;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Api, Resource, ResourceExt};

use crate::execute::execute;
use crate::observation::Observation;
use crate::observe::observe;
use crate::plan::{Plan, plan};
use crate::recent::RecentWrites;
use crate::report::{Outcome, report};
use crate::state::{Error, Scope, Splitter, placements_in};

/// When an object is tried again after a failed reconciliation.
const RETRY: Retry = Retry {
    transient: Duration::from_secs(5),
    permanent: Some(Duration::from_secs(60)),
};

/// Runs the placement controller of `scope`, placing on the Clusters `args.cluster_selector`
/// selects, until `ctx.shutdown`.
pub async fn run(ctx: Context, scope: Scope<'_>, args: &crate::SplitterArgs) -> anyhow::Result<()> {
    let namespace = scope.namespace();
    let cluster_selector = args.cluster_selector.as_str();
    let client = ctx.client.clone();
    let cluster_watch = flotilla_runtime::cache::selected(cluster_selector);
    let (placements_api, deployments_api): (Api<Placement>, Api<Deployment>) = match namespace {
        None => (Api::all(client.clone()), Api::all(client.clone())),
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
    };

    let (triggers, triggered) = mpsc::unbounded();
    // Placements and (when serving every namespace) ClusterPlacements, cached in one store; only
    // spec changes (and deletion) trigger: the splitter's own status writes do not.
    let (placements, mut sources) = flotilla_runtime::union::union::<Placement>(
        usize::from(scope.placements()) + usize::from(scope.cluster_placements()),
    );
    let mut placement_events = futures::stream::empty().boxed();
    // Each decodes on its own (see flotilla_runtime::guard): a Placement with a value the
    // splitter cannot read stands as it was last seen, and the others go on.
    if scope.placements() {
        let source = sources.remove(0);
        let last_seen = placements.clone();
        let events = flotilla_runtime::guard::watcher(
            flotilla_runtime::guard::namespaced(placements_api),
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
        placement_events = futures::stream::select(placement_events, events).boxed();
    }
    if scope.cluster_placements() {
        let source = sources.remove(0);
        // (The store holds it as a Placement: one that does not decode is left out.)
        let events = flotilla_runtime::guard::watcher(
            Api::all(client.clone()),
            flotilla_runtime::cache::selected(&args.cluster_placement_selector),
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
        placement_events = futures::stream::select(placement_events, events).boxed();
    }
    // Clusters, cached; a change of what selection reads may change the eligibility of members
    // for every Placement. The pass starts from the cache's own watch, once the cache has the
    // change: a second watch would race it, and a pass that read the cache just before a
    // Cluster came back into the selector would leave its Works frozen with nothing to start
    // another.
    let clusters_cell: Arc<OnceLock<Store<Cluster>>> = Arc::default();
    let clusters = flotilla_runtime::cache::spawn_store_with(
        &ctx,
        Api::<Cluster>::all(client.clone()),
        cluster_watch,
        every_placement_on_change(
            placements.clone(),
            clusters_cell.clone(),
            cluster_inputs,
            triggers.clone(),
        ),
    );
    let _ = clusters_cell.set(clusters.clone());
    // Whether a Cluster outside the selector exists is all a pass reads of these.
    let all_clusters = (!cluster_selector.is_empty()).then(|| {
        let cell: Arc<OnceLock<Store<PartialObjectMeta<Cluster>>>> = Arc::default();
        let store = flotilla_runtime::cache::spawn_store_with(
            &ctx,
            Api::<PartialObjectMeta<Cluster>>::all(client.clone()),
            watcher::Config::default(),
            every_placement_on_change(placements.clone(), cell.clone(), |_| 0, triggers.clone()),
        );
        let _ = cell.set(store.clone());
        store
    });
    // A Placement whose spec changed, or that went; and since another Placement of the
    // namespace appearing, changing or going may change which one places an object, its
    // neighbours too. Both start from the cache's own watch, after the cache has the change (a
    // second watch would race it: a neighbour's pass could still read the old Placement).
    let neighbours_of = placements.clone();
    let neighbour_triggers = triggers.clone();
    // The releaser of the Works of deleted Placements (see crate::release) looks soon after a
    // Placement appears or goes, and after a change of a Work that may be orphaned.
    let release_wake: Arc<tokio::sync::Notify> = Arc::default();
    let placement_appeared_or_went = release_wake.clone();
    let placement_events = spec_changes_and_deletions(placement_events).inspect(move |changed| {
        let Ok(changed) = changed else { return };
        placement_appeared_or_went.notify_one();
        let ns = changed.namespace();
        for p in neighbours_of.state() {
            if p.namespace() == ns && p.name_any() != changed.name_any() {
                let _ = neighbour_triggers.unbounded_send(ObjectRef::from_obj(&*p));
            }
        }
    });
    // Hub Deployments: their spec and deletion, not the status the splitter writes.
    let namespaced = scope.placements();
    let deployment_events = only_if(
        namespaced,
        spec_changes_and_deletions(
            watcher(deployments_api, watcher::Config::default()).default_backoff(),
        ),
    );
    let neighbours = placements.clone();
    let same_namespace = placements.clone();
    // Works, cached; the same watch starts a pass of a Work's Placement when the Work changes in
    // what the Placement reads (conditions, the member's status of the object, its lifecycle),
    // so the hub sends every Work event to the splitter once.
    let works_cell: Arc<OnceLock<Store<Work>>> = Arc::default();
    let recent: Arc<RecentWrites> = Arc::default();
    let work_changed = work_trigger(
        placements.clone(),
        works_cell.clone(),
        recent.clone(),
        triggers.clone(),
    );
    let (release_placements, work_release_wake) = (placements.clone(), release_wake.clone());
    let work_changed = move |w: &Work| {
        work_changed(w);
        if crate::release::concerns(w, &release_placements) {
            work_release_wake.notify_one();
        }
    };
    let works = flotilla_runtime::cache::spawn_lean_store(
        &ctx,
        Api::<Work>::all(client.clone()),
        watcher::Config::default().labels(labels::PLACEMENT),
        crate::digest::lean,
        work_changed,
    );
    let _ = works_cell.set(works.clone());
    // The hub Secrets with the data of the Works' Secrets (metadata only): one deleted, or no
    // longer its Work's, is written again by a pass of its Placement.
    let data_cell: Arc<OnceLock<Store<PartialObjectMeta<Secret>>>> = Arc::default();
    let data_secrets = flotilla_runtime::cache::spawn_store_with(
        &ctx,
        Api::<PartialObjectMeta<Secret>>::all(client.clone()),
        watcher::Config::default().labels(labels::WORK_DATA),
        data_secret_trigger(placements.clone(), data_cell.clone(), triggers.clone()),
    );
    let _ = data_cell.set(data_secrets.clone());
    // The hub's namespaces: a change of a namespace's labels rewrites the Works of its
    // Placements (their member namespaces carry them).
    let namespace_watch = match namespace {
        Some(ns) => watcher::Config::default().fields(&format!("metadata.name={ns}")),
        None => watcher::Config::default(),
    };
    let namespaces = flotilla_runtime::cache::spawn_store_with(
        &ctx,
        Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
        namespace_watch,
        placements_of_namespace_on_change(placements.clone(), triggers.clone()),
    );
    // The hub ReplicaSet records the splitter keeps of placed Deployments (see
    // crate::history): what it last wrote of each, and their status; not their pod templates.
    let records_api: Api<ReplicaSet> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let records = flotilla_runtime::cache::spawn_lean_store(
        &ctx,
        records_api,
        watcher::Config::default().labels(crate::history::RECORD),
        |rs: &mut ReplicaSet| {
            rs.metadata.managed_fields = None;
            rs.spec.template = None;
        },
        |_: &ReplicaSet| {},
    );
    // The negotiator's verdicts on the members' APIs: cached for the per-object check, and a
    // changed verdict looks at every Placement again.
    let (imports, import_writer) = reflector::store::<ApiResourceImport>();
    let imports_seen = imports.clone();
    let import_events = flotilla_runtime::guard::watcher(
        Api::all(client.clone()),
        watcher::Config::default(),
        |i: &mut ApiResourceImport| i.metadata.managed_fields = None,
        move |r| imports_seen.get(r).map(|i| (*i).clone()),
    )
    .default_backoff()
    .reflect(import_writer)
    .applied_objects()
    .predicate_filter(import_inputs, Default::default());
    // The profiles of custom kinds, cached on their own (a pass waits for them): a profile
    // accepted, changed or deleted looks at every Placement again (rare, and it may change how
    // any of them divides).
    let profiles_cell: Arc<OnceLock<Store<WorkloadProfile>>> = Arc::default();
    let profiles = flotilla_runtime::cache::spawn_store_with(
        &ctx,
        Api::<WorkloadProfile>::all(client.clone()),
        watcher::Config::default(),
        every_placement_on_change(
            placements.clone(),
            profiles_cell.clone(),
            profile_inputs,
            triggers.clone(),
        ),
    );
    let _ = profiles_cell.set(profiles.clone());
    let every = placements.clone();
    let controller = Controller::for_stream(placement_events, placements)
        .watches_stream(import_events, move |_: ApiResourceImport| {
            every
                .state()
                .iter()
                .map(|p| ObjectRef::from_obj(&**p))
                .collect::<Vec<_>>()
        })
        // A hub Deployment changes: the Placements of its namespace.
        .watches_stream(deployment_events, in_namespace_of(same_namespace.clone()))
        // So does any other object of the default types (metadata only: any change at all).
        .watches_stream(
            only_if(namespaced, object_changes::<ConfigMap>(&client, namespace)),
            in_namespace_of(same_namespace.clone()),
        )
        .watches_stream(
            only_if(namespaced, object_changes::<Secret>(&client, namespace)),
            in_namespace_of(same_namespace.clone()),
        )
        .watches_stream(
            only_if(namespaced, object_changes::<Service>(&client, namespace)),
            in_namespace_of(same_namespace.clone()),
        )
        .watches_stream(
            only_if(
                namespaced,
                object_changes::<ServiceAccount>(&client, namespace),
            ),
            in_namespace_of(same_namespace.clone()),
        )
        // Objects of the custom types Placements select (watched once a pass finds the type).
        .reconcile_on(triggered);

    // Nothing is placed before the caches are full: an empty cache of Works would look like
    // "no copy yet".
    tokio::select! {
        _ = ctx.shutdown.cancelled() => return Ok(()),
        _ = async {
            flotilla_runtime::cache::wait_until_synced(&clusters).await;
            flotilla_runtime::cache::wait_until_synced(&works).await;
            // Nor before the Works' hub Secrets are known: each would be written again.
            flotilla_runtime::cache::wait_until_synced(&data_secrets).await;
            flotilla_runtime::cache::wait_until_synced(&namespaces).await;
            // Nor before the Deployments' records are known: one not seen yet would be
            // numbered anew.
            flotilla_runtime::cache::wait_until_synced(&records).await;
            // Nor before the profiles are known: a divided custom kind would be copied whole.
            flotilla_runtime::cache::wait_until_synced(&profiles).await;
            // Nor before every Cluster is known: one not seen yet would look deleted.
            if let Some(all) = &all_clusters {
                flotilla_runtime::cache::wait_until_synced(all).await;
            }
        } => {}
    }
    ctx.health.set_caches_synced(true);
    tokio::spawn(
        crate::release::Releaser {
            ctx: ctx.clone(),
            grace: args.orphaned_work_grace,
            served: crate::release::Served::of(scope, &args.cluster_placement_selector),
            placements: neighbours.clone(),
            clusters: clusters.clone(),
            works: works.clone(),
            data_secrets: data_secrets.clone(),
            wake: release_wake,
        }
        .run(),
    );
    let state = Arc::new(Splitter {
        ctx: ctx.clone(),
        clusters,
        all_clusters,
        works,
        data_secrets,
        placements: neighbours,
        imports,
        namespaces,
        records,
        profiles,
        pod_security: crate::pod_security::PodSecurity {
            default: args.default_pod_security_level,
            check_namespace_prefix: args.pod_security_check_namespace_prefix.clone(),
            verdicts: Default::default(),
        },
        recent,
        types: Default::default(),
        absent: Default::default(),
        announced: Default::default(),
        namespace: namespace.map(str::to_string),
        max_copies: (args.max_copies_per_namespace > 0)
            .then(|| usize::try_from(args.max_copies_per_namespace).unwrap_or(usize::MAX)),
        max_copy_bytes: (args.max_copy_bytes_per_namespace > 0)
            .then_some(args.max_copy_bytes_per_namespace),
        hub_identity_namespaces: args
            .hub_identity_namespaces
            .iter()
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect(),
        triggers,
    });
    // Events close together make one pass. (A delete and a create under the same name,
    // `kubectl replace --force`, are seen as the replacement they are even when they land in two
    // passes: the plan keeps a gone object's copies for `GONE_GRACE`.)
    let controller = controller.with_config(
        kube::runtime::controller::Config::default()
            .debounce(DEBOUNCE)
            .concurrency(args.concurrency),
    );
    drive(controller, state).await;
    Ok(())
}

/// `stream` if `on`, else nothing (a watch a scope does not need is not started).
fn only_if<S>(on: bool, stream: S) -> futures::stream::BoxStream<'static, S::Item>
where
    S: futures::Stream + Send + 'static,
    S::Item: Send,
{
    if on {
        stream.boxed()
    } else {
        futures::stream::empty().boxed()
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

/// A mapper from an object to the Placements of its namespace.
fn in_namespace_of<K: Resource>(
    store: Store<Placement>,
) -> impl Fn(K) -> Vec<ObjectRef<Placement>> + Send + Sync + 'static {
    move |o: K| placements_in(&store, o.namespace())
}

/// Every change of an object of `K` (created, changed, deleted) in `namespace` (`None`: every
/// namespace), from a metadata-only watch: what the splitter places must reach the members in
/// about a second, not at the next resync.
fn object_changes<K>(
    client: &kube::Client,
    namespace: Option<&str>,
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
    watcher(api, watcher::Config::default())
        .default_backoff()
        .touched_objects()
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

/// Starts a pass of every Placement of a namespace whose labels changed.
fn placements_of_namespace_on_change(
    placements: Store<Placement>,
    triggers: mpsc::UnboundedSender<ObjectRef<Placement>>,
) -> impl Fn(&PartialObjectMeta<Namespace>) + Send + 'static {
    let seen = SeenInputs::default();
    move |ns: &PartialObjectMeta<Namespace>| {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        crate::keys::member_namespace_labels(ns.labels()).hash(&mut h);
        for annotation in [
            flotilla_api::annotations::ALLOW_ADOPT,
            flotilla_api::annotations::ALLOW_EXISTING_NAMESPACES,
        ] {
            ns.annotations().get(annotation).hash(&mut h);
        }
        if !seen.changed(&ns.uid().unwrap_or_default(), h.finish()) {
            return;
        }
        let name = ns.name_any();
        for p in placements.state() {
            if p.namespace().as_deref() == Some(name.as_str()) {
                let _ = triggers.unbounded_send(ObjectRef::from_obj(&*p));
            }
        }
    }
}

/// A cache's `on_change` that starts a pass of every Placement in scope when an object of the
/// cache appears, goes, or changes in what `inputs` hashes (`cache`: the cache itself, to tell
/// a deletion, set once it exists).
fn every_placement_on_change<K>(
    placements: Store<Placement>,
    cache: Arc<OnceLock<Store<K>>>,
    inputs: fn(&K) -> u64,
    triggers: mpsc::UnboundedSender<ObjectRef<Placement>>,
) -> impl Fn(&K) + Send + 'static
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let seen = SeenInputs::default();
    move |o: &K| {
        let uid = o.uid().unwrap_or_default();
        let gone = cache
            .get()
            .is_some_and(|s| s.get(&ObjectRef::from_obj(o)).is_none());
        let changed = if gone {
            seen.forget(&uid)
        } else {
            seen.changed(&uid, inputs(o))
        };
        if !changed {
            return;
        }
        for p in placements.state() {
            let _ = triggers.unbounded_send(ObjectRef::from_obj(&*p));
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
/// Placement reads ([`work_inputs`]); called by the Work cache after it took the change.
fn work_trigger(
    placements: Store<Placement>,
    works: Arc<OnceLock<Store<Work>>>,
    recent: Arc<RecentWrites>,
    triggers: mpsc::UnboundedSender<ObjectRef<Placement>>,
) -> impl Fn(&Work) + Send + 'static {
    let seen = SeenInputs::default();
    move |w: &Work| {
        let uid = w.uid().unwrap_or_default();
        let gone = works
            .get()
            .is_some_and(|s| s.get(&ObjectRef::from_obj(w)).is_none());
        if gone {
            recent.forget(&crate::keys::key_of(w));
            seen.forget(&uid);
        } else {
            recent.seen(w);
            if !seen.changed(&uid, work_inputs(w)) {
                return;
            }
        }
        let name = w.labels().get(labels::PLACEMENT);
        // A ClusterPlacement's Works have an empty source namespace.
        let ns = w.annotations().get(annotations::SOURCE_NAMESPACE);
        for p in placements.state() {
            if Some(&p.name_any()) == name
                && p.namespace().unwrap_or_default().as_str() == ns.map_or("", String::as_str)
            {
                let _ = triggers.unbounded_send(ObjectRef::from_obj(&*p));
            }
        }
    }
}

/// Starts a pass of the Placement of a Work's hub Secret (see [`flotilla_api::work_data`]) when
/// the Secret was deleted or its owners changed, so that it is written again as it should be.
fn data_secret_trigger(
    placements: Store<Placement>,
    cache: Arc<OnceLock<Store<PartialObjectMeta<Secret>>>>,
    triggers: mpsc::UnboundedSender<ObjectRef<Placement>>,
) -> impl Fn(&PartialObjectMeta<Secret>) + Send + 'static {
    let seen = SeenInputs::default();
    move |s: &PartialObjectMeta<Secret>| {
        use std::hash::{Hash, Hasher};
        let uid = s.uid().unwrap_or_default();
        let gone = cache
            .get()
            .is_some_and(|c| c.get(&ObjectRef::from_obj(s)).is_none());
        let changed = if gone {
            seen.forget(&uid)
        } else {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            for o in s.owner_references() {
                o.uid.hash(&mut h);
            }
            seen.changed(&uid, h.finish())
        };
        if !changed {
            return;
        }
        let name = s.labels().get(labels::PLACEMENT);
        let ns = s.annotations().get(annotations::SOURCE_NAMESPACE);
        for p in placements.state() {
            if Some(&p.name_any()) == name
                && p.namespace().unwrap_or_default().as_str() == ns.map_or("", String::as_str)
            {
                let _ = triggers.unbounded_send(ObjectRef::from_obj(&*p));
            }
        }
    }
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

impl Reconciler for Splitter {
    type Object = Placement;
    type Observed = Observation;
    type Plan = Plan;
    type Outcome = Outcome;
    type Error = Error;

    const NAME: &'static str = "placement";
    const RETRY: Retry = RETRY;

    fn context(&self) -> &Context {
        &self.ctx
    }

    fn api(&self, placement: &Placement) -> Api<Placement> {
        match placement.namespace() {
            Some(ns) => Api::namespaced(self.ctx.client.clone(), &ns),
            None => Api::all(self.ctx.client.clone()),
        }
    }

    async fn observe(&self, placement: &Placement) -> Result<Observation, Error> {
        Ok(observe(self, Arc::new(placement.clone())).await)
    }

    fn plan(&self, _: &Placement, observation: &Observation) -> Result<Plan, Error> {
        Ok(plan(observation)?)
    }

    async fn execute(
        &self,
        placement: &Placement,
        _: &Observation,
        plan: &Plan,
    ) -> Result<Outcome, Error> {
        self.remember_absent(placement, plan.absent.clone());
        execute(&self.ctx.client, plan, &self.recent).await
    }

    async fn report(
        &self,
        _: &Placement,
        observation: &Observation,
        plan: &Plan,
        outcome: Outcome,
    ) -> Result<Action, Error> {
        report(&self.ctx, observation, plan, &outcome).await?;
        self.announce_left_out(observation, plan).await;
        if !plan.findings.unreadable.is_empty() || !outcome.failed_writes.is_empty() {
            // Soon again: RBAC granted, discovery back or the refusal lifted, the Placement
            // recovers in seconds.
            return Ok(Action::requeue(UNREADABLE_RETRY));
        }
        Ok(Action::requeue(plan.recheck_after.map_or(RESYNC, |r| {
            r.min(RESYNC) + Duration::from_millis(200)
        })))
    }
}

/// How soon a Placement with a type that cannot be read now is looked at again.
const UNREADABLE_RETRY: Duration = Duration::from_secs(5);

/// How often a Placement is looked at again without any change.
const RESYNC: Duration = Duration::from_secs(60);

/// How long a Placement waits after a change for more changes before it is looked at: short,
/// for single edits (the 50 single edits of `hack/bench.sh user` had a p99 of 1.23 s with
/// 500 ms, 0.97 s with 200 ms); a burst longer than a pass still makes a pass per pass.
const DEBOUNCE: Duration = Duration::from_millis(200);
