//! The Work controller: applies each Work's manifests into its member, copies their status back
//! (on the member's watch events, coalesced, skipping writes that change nothing), re-applies
//! drift at once and on every resync, and deletes member objects only when the Work is deleted.

use std::collections::HashSet;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_api::condition::set_condition;
use flotilla_api::{
    Cluster, DeletePolicy, ManifestIdentity, Work, WorkStatus, annotations, conditions,
    field_managers, finalizers, names, reasons,
};
use flotilla_runtime::{Context, ErrorCategory, Events};
use futures::channel::mpsc;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};

use crate::SyncerArgs;
use crate::apply::{
    Appliers, DiscoveryCache, NamespaceCache, Outcome, WorkRef, apply_manifest, delete_manifest,
    describe,
};
use crate::data::HubData;
use crate::lean::{Incoming, Manifests, Names, Whole};
use crate::manifest::same_object;
use crate::metrics::{SyncerMetrics, Tracking};
use crate::own_status::{OwnStatus, resource_version_in};
use crate::released::Released;
use crate::shard::{self, ShardConfig, Shards};
use crate::status::{Verdict, manifest_entry, same_ignoring_times};
use crate::targets::{
    ClusterLifecycle, Member, MemberSlot, MemberSlots, Serving, Targets, Unavailable,
};
use crate::watches::MemberWatches;
use flotilla_runtime::reconcile::{Cleanup, Reconciler, Retry, drive};

mod plan;

use plan::{Applying, Plan};

/// When an object is tried again after a failed reconciliation.
const RETRY: Retry = Retry {
    transient: Duration::from_secs(5),
    permanent: Some(Duration::from_secs(5)),
};

/// Why a reconciliation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("cannot delete the member objects yet: {0}")]
    MemberUnavailable(String),
    #[error(
        "cannot tell whether hub namespace {0} is being deleted (its deletion leaves the member's \
         objects in place), so nothing is deleted yet: {1}"
    )]
    NamespaceUnknown(String, #[source] kube::Error),
}

impl ErrorCategory for Error {
    fn category(&self) -> &'static str {
        match self {
            Self::Kube(e) => e.category(),
            Self::MemberUnavailable(_) => "ClusterUnavailable",
            Self::NamespaceUnknown(_, e) => e.category(),
        }
    }
}

/// How soon a deleted Work's member objects that are going away are looked at again.
const DELETION_RECHECK: Duration = Duration::from_secs(2);

struct Syncer {
    ctx: Context,
    args: SyncerArgs,
    hub: Hub,
    targets: Targets,
    discovery: DiscoveryCache,
    namespaces: NamespaceCache,
    watches: MemberWatches,
    tracking: Arc<Tracking>,
    /// Every Work this syncer watches (the controller's cache), lean: see [`crate::lean`].
    works: reflector::Store<Work>,
    /// The manifests of the cached Works.
    manifests: Arc<Manifests>,
    /// The statuses this syncer wrote that the cache does not have yet.
    own_status: Arc<OwnStatus>,
    /// The deleted Works this syncer let go of that the cache still has.
    released: Released,
    /// The Works reconciled right now: `--concurrency` in all, `--member-concurrency` of one
    /// member.
    slots: MemberSlots,
}

impl Syncer {
    fn appliers(&self) -> Appliers<'_> {
        Appliers {
            discovery: &self.discovery,
            namespaces: &self.namespaces,
            watches: &self.watches,
            works: &self.works,
            manifests: &self.manifests,
        }
    }

    /// Drops everything kept for member `cluster`: its watches, client and caches.
    fn forget_cluster(&self, cluster: &str) {
        self.slots.forget(cluster);
        self.watches.forget_cluster(cluster);
        self.targets.forget(cluster);
        self.namespaces.forget_cluster(cluster);
        self.discovery.forget(cluster);
    }
}

/// What of a Work makes the syncer act: its spec (generation), deletion, finalizers, labels and
/// annotations. Status-only changes — mostly the syncer's own writes — do not.
fn spec_or_lifecycle(work: &Work) -> Option<u64> {
    let mut h = DefaultHasher::new();
    (
        work.metadata.generation,
        work.metadata.deletion_timestamp.is_some(),
        work.finalizers(),
        work.labels(),
        work.annotations(),
    )
        .hash(&mut h);
    Some(h.finish())
}

/// What of a Cluster makes its Works worth another look: its spec, and whether it is Ready.
fn cluster_readiness(cluster: &Cluster) -> u64 {
    let ready = cluster
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == conditions::READY))
        .map(|c| c.status.clone());
    let mut h = DefaultHasher::new();
    (cluster.metadata.generation, ready).hash(&mut h);
    h.finish()
}

/// How many manifests of one Work are applied at once.
const APPLY_CONCURRENCY: usize = 4;

/// How long a Work's writes wait for the first list of a member watch its types just started.
/// A list is one request; a member that does not answer it in this time is written to as
/// before (with a read before each write whose object the watch would have known).
const LIST_WAIT: Duration = Duration::from_secs(1);

/// How often members that this syncer no longer serves are looked for, to stop their watches.
const JANITOR_INTERVAL: Duration = Duration::from_secs(10);

/// Runs the Work controller for push-mode members until `ctx.shutdown`.
pub async fn run(ctx: Context, args: SyncerArgs) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let metrics = SyncerMetrics::register(ctx.metrics.registry(), ctx.metrics.prefix())?;
    let member_requests = metrics.member_requests.clone();
    let tracking = Arc::new(Tracking::new(metrics));
    let cluster_watch = flotilla_runtime::cache::selected(&args.cluster_selector);
    // The Clusters this syncer serves, cached for look-ups. A Cluster that changes (becomes
    // Ready, gets a new kubeconfig) re-triggers its Works, from the cache's own watch once the
    // cache has the change (a second watch would race it: a Work could be served with the old
    // Cluster, and nothing would trigger it again).
    let (changed, cluster_events) = mpsc::unbounded();
    let clusters = flotilla_runtime::cache::spawn_store_with(
        &ctx,
        Api::<Cluster>::all(client.clone()),
        cluster_watch,
        flotilla_runtime::cache::when_inputs_change(cluster_readiness, move |cluster| {
            let _ = changed.unbounded_send(Ok(cluster.object().clone()));
        }),
    );
    let cluster_events = cluster_events.boxed();
    let shards = Arc::new(if args.shard_by_cluster {
        Shards::sharded()
    } else {
        Shards::all()
    });
    let targets = Targets {
        hub: client.clone(),
        clusters: clusters.clone(),
        clients: flotilla_runtime::MemberClients::counting(member_requests),
        secret_namespace: args.kubeconfig_secret_namespace.clone(),
        recent: Default::default(),
        shards: shards.clone(),
        pull: None,
    };

    let health = ctx.health.clone();
    let synced = clusters.clone();
    tokio::spawn(async move {
        if flotilla_runtime::cache::wait_until_synced(&synced).await {
            tracing::info!("cache of Clusters synced");
            health.set_caches_synced(true);
        }
    });
    // Serve nothing before the Clusters are known: an unsynced cache would look like "no Cluster".
    tokio::select! {
        _ = ctx.shutdown.cancelled() => return Ok(()),
        _ = flotilla_runtime::cache::wait_until_synced(&clusters) => {}
    }
    let hub = Hub {
        works: Api::all(client.clone()),
        client,
        events: ctx.events.clone(),
    };
    serve(
        ctx,
        args,
        hub,
        targets,
        tracking,
        cluster_events,
        Some(shards),
    )
    .await
}

/// The hub as the controller talks to it: in push mode with the controller's own client, in
/// pull mode with the agent's credential.
pub struct Hub {
    pub client: Client,
    /// The Works to serve: every namespace (push) or the member's own (pull).
    pub works: Api<Work>,
    pub events: Events,
}

/// Runs the Work controller until `ctx.shutdown`: Works from `hub.works`, re-triggered by
/// `cluster_events` (push mode), by changes in the members and, with `shards`, by members this
/// replica starts serving.
pub async fn serve(
    ctx: Context,
    args: SyncerArgs,
    hub: Hub,
    targets: Targets,
    tracking: Arc<Tracking>,
    cluster_events: BoxStream<'static, Result<Cluster, watcher::Error>>,
    shards: Option<Arc<Shards>>,
) -> anyhow::Result<()> {
    // Works, cached; only changes of spec or lifecycle trigger a reconciliation (the syncer's
    // own status writes do not).
    let (works, writer) = reflector::store::<Work>();
    let manifests = Arc::new(Manifests::default());
    let keep = manifests.clone();
    let own_status = Arc::new(OwnStatus::default());
    let written = own_status.clone();
    let seen = tracking.clone();
    // Each Work decodes on its own: one whose status an agent wrote with a value the syncer
    // cannot read stands as it was last seen, and the others go on. Its manifests and status
    // entries are not decoded: they are kept aside as the hub serves them.
    let last_seen = works.clone();
    let incoming: Api<Incoming> = match hub.works.namespace() {
        Some(ns) => Api::namespaced(hub.client.clone(), ns),
        None => Api::all(hub.client.clone()),
    };
    let work_events = flotilla_runtime::guard::watcher(
        flotilla_runtime::guard::namespaced(incoming),
        watcher::Config::default(),
        move |w: &mut Incoming| {
            // Not read by the syncer, and much of a Work's size.
            w.meta_mut().managed_fields = None;
            // Kept aside compactly, with its status entries.
            keep.take_incoming(w);
        },
        move |r| {
            let cached = ObjectRef::<Work>::new(&r.name).within(r.namespace.as_deref()?);
            last_seen
                .get(&cached)
                .map(|w| Incoming::cached((*w).clone()))
        },
    )
    .map_ok(Incoming::into_work_event)
    .default_backoff()
    .reflect(writer)
    .applied_objects()
    // Once the store has this version: a reconciliation reads the store, then `own_status`.
    .inspect_ok(move |w| written.seen(w))
    .predicate_filter(spec_or_lifecycle, Default::default())
    .inspect_ok(move |w| seen.work_seen(w));
    // Changes of applied objects in the members trigger their Works.
    let (member_events, member_triggers) = mpsc::channel(1024);
    // A member this replica starts serving (its shard Lease taken) triggers its Works.
    let (shard_events, shard_triggers) = mpsc::unbounded::<ObjectRef<Work>>();

    let index = works.clone();
    let by_cluster = works.clone();
    let cached = works.clone();
    let controller = Controller::for_stream(work_events, works)
        // The controller itself runs every Work it may; `slots` bounds the work done, per member
        // and in all, so that one member's Works never hold the places of another's. No
        // debounce: a changed Work is reconciled at once; the members' changes are gathered
        // (below), since a workload in a member changes many times in a row.
        .with_config(controller::Config::default())
        .watches_stream(cluster_events, move |cluster: Cluster| {
            let namespace = names::cluster_namespace(&cluster.name_any());
            index
                .state()
                .into_iter()
                .filter(|w| w.metadata.namespace.as_deref() == Some(namespace.as_str()))
                .map(|w| ObjectRef::from_obj(&*w))
                .collect::<Vec<_>>()
        })
        .reconcile_on(flotilla_runtime::gather::gather(
            member_triggers,
            args.debounce,
        ))
        .reconcile_on(shard_triggers);

    let state = Arc::new(Syncer {
        ctx: ctx.clone(),
        slots: MemberSlots::new(usize::from(args.concurrency), args.per_member()),
        args,
        hub,
        targets,
        discovery: DiscoveryCache::default(),
        namespaces: NamespaceCache::default(),
        watches: MemberWatches::new(member_events, tracking.clone(), ctx.shutdown.clone()),
        tracking,
        works: cached,
        manifests,
        own_status,
        released: Released::default(),
    });

    if let Some(shards) = shards.filter(|_| state.args.shard_by_cluster) {
        let config = ShardConfig {
            namespace: state.args.shard_lease_namespace.clone(),
            identity: ctx.identity.clone(),
            lease_duration: state.args.shard_lease_duration,
            retry_period: state.args.shard_retry_period,
        };
        let served = state.targets.clusters.clone();
        let changed = state.clone();
        let shutdown = ctx.shutdown.clone();
        let client = state.hub.client.clone();
        tokio::spawn(async move {
            shard::run(
                client,
                config,
                shards,
                || {
                    served
                        .state()
                        .iter()
                        .filter(|c| c.spec.sync_mode == flotilla_api::SyncMode::Push)
                        .map(|c| c.name_any())
                        .collect()
                },
                |cluster, serving| {
                    if !serving {
                        changed.forget_cluster(cluster);
                    }
                    // Either way its Works are looked at again: to be applied, or let be.
                    let namespace = names::cluster_namespace(cluster);
                    for w in by_cluster.state() {
                        if w.metadata.namespace.as_deref() == Some(namespace.as_str()) {
                            let _ = shard_events.unbounded_send(ObjectRef::from_obj(&*w));
                        }
                    }
                },
                shutdown,
            )
            .await;
        });
    }

    // Members this syncer no longer serves (deleted, or deselected) keep no watch and no client.
    let janitor = state.clone();
    let shutdown = ctx.shutdown.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(JANITOR_INTERVAL) => {}
            }
            for cluster in janitor.watches.clusters() {
                if !janitor.targets.serves(&cluster) {
                    janitor.forget_cluster(&cluster);
                }
            }
            // The manifests of Works no longer cached (deleted, or out of this syncer's view).
            let cached: HashSet<String> = janitor
                .works
                .state()
                .iter()
                .filter_map(|w| w.uid())
                .collect();
            janitor.manifests.retain(|uid| cached.contains(uid));
            janitor.released.retain(|uid| cached.contains(uid));
        }
    });

    drive(controller, state).await;
    Ok(())
}

fn work_ref(work: &Work) -> String {
    format!(
        "{}/{}",
        work.namespace().unwrap_or_default(),
        work.name_any()
    )
}

/// Counts a reconciliation of a member's Work as in flight while it lives.
struct InFlight(prometheus::IntGauge);

impl InFlight {
    fn new(gauge: prometheus::IntGauge) -> Self {
        gauge.inc();
        Self(gauge)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// What a pass over a Work read.
pub struct Observed {
    /// A place of this member's share of the syncer's concurrency, then a common one, held for
    /// the pass: while a member is slow or does not answer, its Works wait behind each other,
    /// not before others.
    _slot: MemberSlot,
    _in_flight: InFlight,
    cluster: String,
    /// The Work whole (with its manifests and the status this syncer wrote last), as the cache
    /// has it after the wait for a place, or as the hub has it now, with its member or why it
    /// cannot be written to; `None`: a newer generation is on its way, or the Work is gone.
    work: Option<(Work, Result<Member, Unavailable>)>,
    /// When a change in the member triggered this pass, if one did.
    member_change: Option<Instant>,
}

impl Syncer {
    /// The Work to apply: the cache's (which may have caught up during the wait for a place,
    /// and stopped holding this syncer's last status apart), with its manifests.
    async fn whole(&self, queued: &Work) -> Result<Option<Work>, Error> {
        let key = ObjectRef::from_obj(queued);
        let work = match self.works.get(&key) {
            Some(now) if now.uid() == queued.uid() => now,
            _ => Arc::new(queued.clone()),
        };
        if work.metadata.deletion_timestamp.is_some() {
            // Deleted meanwhile: its cleanup is the next pass.
            return Ok(None);
        }
        Ok(match self.manifests.whole(&work) {
            Whole::Found(mut whole) => {
                if let Some(written) = self.own_status.of(&whole) {
                    whole.status = Some(written);
                }
                Some(*whole)
            }
            // The cache has the newer generation now, and its reconciliation follows.
            Whole::Newer => None,
            // The Work as the hub has it now.
            Whole::Missing => {
                let api: Api<Work> = Api::namespaced(
                    self.hub.client.clone(),
                    &work.namespace().unwrap_or_default(),
                );
                api.get_opt(&work.name_any())
                    .await?
                    .filter(|now| now.uid() == work.uid())
            }
        })
    }
}

impl Reconciler for Syncer {
    type Object = Work;
    type Observed = Observed;
    type Plan = Plan;
    type Outcome = Option<Applied>;
    type Error = Error;

    const NAME: &'static str = "work";
    const RETRY: Retry = RETRY;
    // In pull mode too: the agent's credential may add and remove this finalizer, and nothing
    // else of a Work (admission policy flotilla-agent-works).
    const FINALIZER: Option<&'static str> = Some(finalizers::SYNCER);

    fn context(&self) -> &Context {
        &self.ctx
    }

    fn api(&self, work: &Work) -> Api<Work> {
        Api::namespaced(
            self.hub.client.clone(),
            &work.namespace().unwrap_or_default(),
        )
    }

    /// A Work this syncer does not serve (a pull-mode member's own syncer's, another shard's, or
    /// not selected) is not touched — not even with a finalizer — unless it may let it go.
    async fn admit(&self, work: &Work) -> Result<bool, Error> {
        let Some(cluster) = work.cluster_name() else {
            // Not in a flotilla-cluster-<name> namespace: not a Work for any member.
            return Ok(false);
        };
        if self.released.done_with(work) {
            // Its objects are gone and its finalizer removed: the cache has yet to see it go.
            return Ok(false);
        }
        Ok(
            self.targets.serving(cluster) == Serving::Yes
                || may_let_go(work, cluster, self).await?,
        )
    }

    async fn observe(&self, work: &Work) -> Result<Observed, Error> {
        let cluster = work.cluster_name().unwrap_or_default().to_string();
        let slot = self.slots.take(&cluster).await;
        let in_flight = InFlight::new(
            self.tracking
                .metrics()
                .in_flight
                .with_label_values(&[&cluster]),
        );
        let whole = match self.whole(work).await? {
            Some(whole) => Some((whole, self.targets.client(&cluster).await)),
            None => None,
        };
        Ok(Observed {
            _slot: slot,
            _in_flight: in_flight,
            member_change: self.tracking.take_member_change(&ObjectRef::from_obj(work)),
            cluster,
            work: whole,
        })
    }

    fn plan(&self, _: &Work, observed: &Observed) -> Result<Plan, Error> {
        let Some((work, member)) = &observed.work else {
            return Ok(Plan::Nothing);
        };
        Ok(plan::plan(work, member.as_ref().map(|_| ())))
    }

    async fn execute(
        &self,
        _: &Work,
        observed: &Observed,
        plan: &Plan,
    ) -> Result<Option<Applied>, Error> {
        let (Plan::Apply(applying), Some((work, Ok(member)))) = (plan, &observed.work) else {
            return Ok(None);
        };
        Ok(Some(
            apply(work, &observed.cluster, member, applying, self).await,
        ))
    }

    async fn report(
        &self,
        _: &Work,
        observed: &Observed,
        plan: &Plan,
        applied: Option<Applied>,
    ) -> Result<Action, Error> {
        let (Some((work, _)), cluster) = (&observed.work, observed.cluster.as_str()) else {
            return Ok(Action::await_change());
        };
        match plan {
            Plan::Nothing => Ok(Action::await_change()),
            Plan::Unavailable { applied, announce } => {
                if *announce {
                    self.hub
                        .events
                        .warning(
                            work,
                            reasons::CLUSTER_UNAVAILABLE,
                            "Apply",
                            applied.message.clone(),
                        )
                        .await;
                }
                self.tracking
                    .metrics()
                    .apply_errors
                    .with_label_values(&[cluster, reasons::CLUSTER_UNAVAILABLE])
                    .inc();
                write_status(work, cluster, std::slice::from_ref(applied), None, self).await?;
                Ok(Action::requeue(plan::UNAVAILABLE_RECHECK))
            }
            Plan::Apply(applying) => {
                let Some(applied) = applied else {
                    return Ok(Action::await_change());
                };
                let before = work.status.clone().unwrap_or_default();
                let judgement = plan::judge(&before, &applied.outcomes, applying.rule.as_ref());
                for (v, action) in &judgement.announce {
                    self.hub
                        .events
                        .warning(work, v.reason, action, v.message.clone())
                        .await;
                }
                let pruning = !applied.removing.is_empty();
                write_status(
                    work,
                    cluster,
                    &judgement.verdicts,
                    Some(ObservedObjects {
                        manifests: applied.manifests,
                        removing: applied.removing,
                    }),
                    self,
                )
                .await?;
                if let Some(since) = observed.member_change {
                    self.tracking
                        .status_reflects(&ObjectRef::from_obj(work), since);
                }
                Ok(Action::requeue(plan::recheck(
                    pruning,
                    judgement.applied,
                    self.args.resync_interval,
                )))
            }
        }
    }

    async fn cleanup(&self, work: &Work) -> Result<Cleanup, Error> {
        let cluster = work.cluster_name().unwrap_or_default().to_string();
        let _slot = self.slots.take(&cluster).await;
        let mut work = work.clone();
        if let Some(written) = self.own_status.of(&work) {
            work.status = Some(written);
        }
        let done = cleanup(&work, &cluster, self).await?;
        if done == Cleanup::Done {
            // The Work lets go of its member objects: nothing of it is watched or counted.
            let key = ObjectRef::from_obj(&work);
            self.watches.release(&key);
            self.tracking.forget(&key);
        }
        Ok(done)
    }

    fn released(&self, work: &Work) {
        self.released.let_go(work);
    }
}

/// Whether this push-mode syncer may remove its finalizer from a deleted Work of a member it
/// does not serve: when no member is left to clean up (the Cluster is gone), or when the Work's
/// objects stay in the member anyway ([`kept_because`]: its hub namespace is being deleted, as
/// when its Cluster is removed). A pull-mode member's agent loses its access with its namespace's
/// RoleBinding, so it could not let go itself.
async fn may_let_go(work: &Work, cluster: &str, state: &Syncer) -> Result<bool, Error> {
    let ours = work.finalizers().iter().any(|f| f == finalizers::SYNCER);
    if !ours || state.targets.is_pull() || work.metadata.deletion_timestamp.is_none() {
        return Ok(false);
    }
    Ok(match state.targets.lifecycle(cluster).await? {
        ClusterLifecycle::Gone => true,
        // Its namespace goes too (registration deletes it), and a namespace's deletion leaves
        // the member's objects in place: nobody else could let go (the agent's binding in that
        // namespace goes with it).
        ClusterLifecycle::Removing | ClusterLifecycle::Present => {
            kept_because(work, state).await?.is_some()
        }
    })
}

/// Why the member objects of a deleted Work stay in place, if they do: its `deletePolicy` is
/// `Orphan`, or its hub namespace is being deleted. Deleting a member's hub namespace — when its
/// Cluster is removed, by mistake, or with a stolen registration token — deletes the Works in it,
/// but is never a request to delete what the member runs: only deleting a Work (or the Placement
/// that made it) is. When the namespace cannot be read the answer is an error, and nothing is
/// deleted until it can.
async fn kept_because(work: &Work, state: &Syncer) -> Result<Option<String>, Error> {
    if work.spec.delete_policy == DeletePolicy::Orphan {
        return Ok(Some(
            "deletePolicy is Orphan: the objects in the member are left in place".into(),
        ));
    }
    let name = work.namespace().unwrap_or_default();
    let namespaces: Api<Namespace> = Api::all(state.hub.client.clone());
    let terminating = match namespaces.get_opt(&name).await {
        Ok(ns) => ns.is_none_or(|ns| ns.metadata.deletion_timestamp.is_some()),
        Err(e) => return Err(Error::NamespaceUnknown(name, e)),
    };
    Ok(terminating.then(|| {
        format!(
            "hub namespace {name} is being deleted: the objects in the member are left in place \
             (a namespace's deletion is not a request to delete what members run; delete the \
             Placement or the Work for that)"
        )
    }))
}

/// What the syncer observed of a Work's objects: their status, and the objects it no longer
/// names that are still being removed from the member.
struct ObservedObjects {
    manifests: Vec<flotilla_api::ManifestStatus>,
    removing: Vec<ManifestIdentity>,
}

/// Writes the Work's status: the given verdicts (merged into the current conditions so that
/// unchanged conditions keep their transition time) and, when given, what was observed of its
/// objects. Writes nothing when that changes nothing but times; returns whether it wrote.
async fn write_status(
    work: &Work,
    cluster: &str,
    verdicts: &[Verdict],
    observed: Option<ObservedObjects>,
    state: &Syncer,
) -> Result<bool, Error> {
    let now = Timestamp::now();
    let old = work.status.clone().unwrap_or_default();
    let mut conditions = old.conditions.clone();
    for v in verdicts {
        set_condition(
            &mut conditions,
            v.into_condition(now, work.metadata.generation),
        );
    }
    let (observed_generation, manifests, removing) = match observed {
        Some(o) => (work.metadata.generation, o.manifests, o.removing),
        None => (
            old.observed_generation,
            old.manifests.clone(),
            old.removing.clone(),
        ),
    };
    let new = WorkStatus {
        conditions,
        observed_generation,
        manifests,
        removing,
    };
    let writes = &state.tracking.metrics().status_writes;
    if work.status.is_some() && same_ignoring_times(&old, &new) {
        writes.with_label_values(&[cluster, "unchanged"]).inc();
        return Ok(false);
    }
    // The hub answers with the whole Work (every manifest): it is not read, so not decoded.
    let request = kube::core::Request::new(Work::url_path(&(), work.namespace().as_deref()))
        .patch_subresource(
            "status",
            &work.name_any(),
            &PatchParams::apply(field_managers::SYNCER).force(),
            &Patch::Apply(crate::own_status::status_patch(&new).map_err(kube::Error::SerdeError)?),
        )
        .map_err(kube::Error::BuildRequest)?;
    let answer = state.hub.client.request_text(request).await?;
    if let Some(rv) = resource_version_in(&answer) {
        state.own_status.wrote(work, rv, new);
    }
    writes.with_label_values(&[cluster, "written"]).inc();
    Ok(true)
}

/// Removes from the member the objects `work` applied and names no more (`removed`): deleted
/// when they are still this Work's, left when `deletePolicy` is `Orphan` or another Work of the
/// member names them now (it takes them over). Returns those still being deleted, or that could
/// not be deleted now (tried again on the next reconciliation).
async fn prune(
    work: &Work,
    cluster: &str,
    client: &Client,
    candidates: Vec<ManifestIdentity>,
    state: &Syncer,
) -> Vec<ManifestIdentity> {
    if candidates.is_empty() || work.spec.delete_policy == DeletePolicy::Orphan {
        return Vec::new();
    }
    let work_ref = work_ref(work);
    let namespace = work.namespace();
    // The other Works of this member, which may hold the objects now.
    let others: Vec<Arc<Work>> = state
        .works
        .state()
        .into_iter()
        .filter(|other| {
            other.namespace() == namespace
                && other.name_any() != work.name_any()
                && other.metadata.deletion_timestamp.is_none()
        })
        .collect();
    let before: &[ManifestIdentity] = work.status.as_ref().map_or(&[], |s| &s.removing);
    tracing::debug!(work = %work_ref, candidates = candidates.len(), "pruning");
    let mut remaining = Vec::new();
    let mut started = Vec::new();
    // Those another Work names now are its to keep; the others go, a few at a time.
    let shared = state.appliers();
    let results: Vec<(ManifestIdentity, Result<bool, String>)> =
        futures::stream::iter(candidates.into_iter().filter(|id| {
            !others
                .iter()
                .any(|other| state.manifests.may_list(other, id))
        }))
        .map(|id| {
            let (shared, work_ref) = (&shared, &work_ref);
            async move {
                let result = delete_manifest(shared, cluster, client, &id, work_ref).await;
                (id, result)
            }
        })
        // In order, so that `status.removing` keeps its order from one look to the next.
        .buffered(APPLY_CONCURRENCY)
        .collect()
        .await;
    for (id, result) in results {
        match result {
            Ok(true) => {}
            Ok(false) => {
                if !before.iter().any(|b| same_object(b, &id)) {
                    started.push(describe(&id));
                }
                remaining.push(id);
            }
            Err(e) => {
                tracing::warn!(work = %work_ref, error = %e, "could not remove an object the Work no longer names");
                remaining.push(id);
            }
        }
    }
    if !started.is_empty() {
        let shown = started
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        let more = started.len().saturating_sub(5);
        state
            .hub
            .events
            .normal(
                work,
                "Pruning",
                "Delete",
                format!(
                    "deleting {} object(s) the Work no longer names from the member: {shown}{}",
                    started.len(),
                    if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    }
                ),
            )
            .await;
    }
    remaining
}

/// The Works `work` replaces (its `flotilla.dev/replaces`), as `<namespace>/<name>`.
fn replaced(work: &Work) -> Vec<String> {
    let namespace = work.namespace().unwrap_or_default();
    work.annotations()
        .get(annotations::REPLACES)
        .into_iter()
        .flat_map(|r| r.split(','))
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| format!("{namespace}/{r}"))
        .collect()
}

/// What applying a Work's manifests came to.
pub struct Applied {
    /// The member's answer for each manifest applied, in order.
    outcomes: Vec<(ManifestIdentity, Outcome)>,
    /// The status of each.
    manifests: Vec<flotilla_api::ManifestStatus>,
    /// The objects the Work names no more that are still being removed.
    removing: Vec<ManifestIdentity>,
}

/// Starts the member's watches of the types `ready` writes, if missing, and waits (at most
/// [`LIST_WAIT`]) until they have listed what the member has: then an object the watch has as
/// this syncer applied it needs no write at all, one it has as this Work's no read before its
/// write, and one it does not have is created without a read first (see
/// [`crate::apply::apply_manifest`]). Types the member does not serve are left to the apply,
/// which reports them.
async fn watch_before_writing(
    work: &ObjectRef<Work>,
    cluster: &str,
    member: &Member,
    ready: &[crate::manifest::Prepared],
    state: &Syncer,
) {
    let discovery = &state.discovery;
    let mut resources: Vec<kube::api::ApiResource> = Vec::new();
    let mut kinds = HashSet::new();
    for prepared in ready {
        let id = &prepared.identity;
        if !kinds.insert((&id.group, &id.version, &id.kind)) {
            continue;
        }
        if let Ok((resource, _)) = discovery.resolve(cluster, &member.client, id).await {
            resources.push(resource);
        }
    }
    state
        .watches
        .add_uses(work, cluster, &member.uses(&resources));
    let resources: Vec<&kube::api::ApiResource> = resources.iter().collect();
    if !state
        .watches
        .wait_listed(cluster, &resources, LIST_WAIT)
        .await
    {
        tracing::debug!(
            cluster,
            "a member watch has not listed yet: writing without it"
        );
    }
}

/// Applies the manifests `applying` prepared into `member`, a few at a time and in order
/// (unchanged ones cost nothing), watches the types they use, and removes what the Work names no
/// more — unless the member stopped answering: then nothing is decided about it.
async fn apply(
    work: &Work,
    cluster: &str,
    member: &Member,
    applying: &Applying,
    state: &Syncer,
) -> Applied {
    let key = ObjectRef::from_obj(work);
    let metrics = state.tracking.metrics();
    let now = Timestamp::now();
    let work_ref = work_ref(work);
    for (_, invalid) in &applying.invalid {
        tracing::warn!(work = %work_ref, error = %invalid, "invalid manifest");
    }
    if let Some(e) = &applying.invalid_rule {
        tracing::warn!(work = %work_ref, error = %e, "invalid health rule");
    }
    let replaces = replaced(work);
    let shared = state.appliers();
    let status = work.status.clone().unwrap_or_default();
    let previous = &status.manifests;
    let data = HubData::new(
        state.hub.client.clone(),
        &work.namespace().unwrap_or_default(),
    );
    let target = WorkRef {
        name: &work_ref,
        replaces: &replaces,
        policy: work.spec.conflict_policy,
        namespace_labels: work.spec.namespace_labels.as_ref(),
        allow_existing_namespaces: work.spec.allow_existing_namespaces,
        data: &data,
    };
    let ready = &applying.ready;
    watch_before_writing(&key, cluster, member, ready, state).await;
    let results: Vec<_> = futures::stream::iter(0..ready.len())
        .map(|i| {
            let prepared = &ready[i];
            let before = previous
                .iter()
                .find(|m| same_object(&m.identity, &prepared.identity));
            let (shared, target) = (&shared, &target);
            async move {
                let (resource, outcome) =
                    apply_manifest(shared, cluster, &member.client, prepared, before, target).await;
                (prepared, before, resource, outcome)
            }
        })
        .buffered(APPLY_CONCURRENCY)
        .collect()
        .await;
    let (mut outcomes, mut manifests, mut resources) = (Vec::new(), Vec::new(), Vec::new());
    let mut applied_count = 0;
    for (prepared, before, resource, outcome) in results {
        resources.extend(resource);
        let result = match &outcome {
            Outcome::Applied(_) => "applied",
            Outcome::Unchanged(_) => "unchanged",
            Outcome::Conflict(_) => "conflict",
            Outcome::Failed { .. } => "failed",
        };
        match &outcome {
            Outcome::Applied(_) | Outcome::Unchanged(_) => applied_count += 1,
            Outcome::Conflict(_) => metrics
                .apply_errors
                .with_label_values(&[cluster, reasons::CONFLICT])
                .inc(),
            Outcome::Failed { reason, .. } => metrics
                .apply_errors
                .with_label_values(&[cluster, reason])
                .inc(),
        }
        metrics.applies.with_label_values(&[cluster, result]).inc();
        manifests.push(manifest_entry(
            prepared.ordinal,
            &prepared.identity,
            &outcome,
            before,
            applying.rule.as_ref(),
            now,
        ));
        outcomes.push((prepared.identity.clone(), outcome));
    }
    // A manifest that names no object is reported in its place, and fails `Applied`.
    for (ordinal, why) in &applying.invalid {
        let outcome = Outcome::Failed {
            reason: reasons::INVALID_MANIFEST,
            message: why.clone(),
        };
        let nothing = ManifestIdentity::default();
        if let Some(ordinal) = ordinal {
            manifests.push(manifest_entry(
                *ordinal, &nothing, &outcome, None, None, now,
            ));
        }
        outcomes.push((nothing, outcome));
    }
    manifests.sort_by_key(|m| m.ordinal);
    let unreachable = plan::unreachable(&outcomes);
    if !unreachable {
        // Watch exactly the types this Work uses (a type it dropped may stop being watched).
        state
            .watches
            .set_uses(&key, cluster, &member.uses(&resources));
    }
    state.tracking.set_managed(&key, applied_count);
    if applied_count == outcomes.len() {
        state.tracking.applied(&key, work.metadata.generation);
    }
    let removing = if unreachable {
        status.removing.clone()
    } else {
        prune(
            work,
            cluster,
            &member.client,
            applying.to_remove.clone(),
            state,
        )
        .await
    };
    Applied {
        outcomes,
        manifests,
        removing,
    }
}

/// Whether deleting object `id` deletes others with it (a Namespace, a CRD).
fn holds_others(id: &ManifestIdentity) -> bool {
    (id.group.is_empty() && id.kind == "Namespace")
        || (id.group == "apiextensions.k8s.io" && id.kind == "CustomResourceDefinition")
}

/// Deletes a deleted Work's objects from its member, unless they stay ([`kept_because`]) or no
/// member is left. Namespaces and CRDs go last, one by one.
async fn cleanup(work: &Work, cluster: &str, state: &Syncer) -> Result<Cleanup, Error> {
    if let Some(why) = kept_because(work, state).await? {
        tracing::info!(work = %work_ref(work), "{why}");
        state
            .hub
            .events
            .normal(work, "Orphaned", "Delete", why)
            .await;
        return Ok(Cleanup::Done);
    }
    let member = match state.targets.client(cluster).await {
        Ok(m) => m,
        // The Cluster itself is gone: there is no member to delete from. Report and let go.
        Err(Unavailable::Gone(_)) => {
            state
                .hub
                .events
                .warning(
                    work,
                    reasons::CLUSTER_UNAVAILABLE,
                    "Delete",
                    format!("Cluster {cluster} was deleted: the objects in the member (if any) are left in place"),
                )
                .await;
            return Ok(Cleanup::Done);
        }
        // Never give up on deleting while the member may come back.
        Err(why) => return Err(Error::MemberUnavailable(why.to_string())),
    };
    let work_ref = work_ref(work);
    let named = match state.manifests.names(work) {
        Names::Known(named) => named,
        // Its manifests were let go of: the Work as the hub has it now says what it names.
        Names::Unknown => {
            let namespace = work.namespace().unwrap_or_default();
            let api: Api<Work> = Api::namespaced(state.hub.client.clone(), &namespace);
            match api.get_opt(&work.name_any()).await? {
                Some(now) if now.uid() == work.uid() => crate::manifest::named(&now),
                // Gone: its finalizer was removed, so its objects are.
                _ => return Ok(Cleanup::Done),
            }
        }
    };
    let named = named.into_iter().rev();
    let removing = work.status.iter().flat_map(|s| s.removing.iter().cloned());
    // Namespaces and CRDs last, one by one: the objects in them (or of them) go first. The
    // others a few at a time, like applies.
    let (last, first): (Vec<ManifestIdentity>, Vec<ManifestIdentity>) =
        named.chain(removing).partition(holds_others);
    tracing::debug!(work = %work_ref, objects = first.len() + last.len(), "cleaning up");
    let shared = state.appliers();
    let delete = |id: ManifestIdentity| {
        let (shared, client, work_ref) = (&shared, &member.client, &work_ref);
        async move { delete_manifest(shared, cluster, client, &id, work_ref).await }
    };
    let mut results: Vec<Result<bool, String>> = futures::stream::iter(first)
        .map(delete)
        .buffer_unordered(APPLY_CONCURRENCY)
        .collect()
        .await;
    for id in last {
        results.push(delete(id).await);
    }
    let mut remaining = 0;
    for result in results {
        match result {
            Ok(true) => {}
            Ok(false) => remaining += 1,
            Err(e) => return Err(Error::MemberUnavailable(e)),
        }
    }
    Ok(if remaining > 0 {
        // An object of the member is going away: moments.
        tracing::debug!(work = %work_ref, remaining, "waiting for the member's objects to be deleted");
        Cleanup::Pending(DELETION_RECHECK)
    } else {
        Cleanup::Done
    })
}
