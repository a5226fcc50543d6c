//! The Placement controller. Each pass of a Placement is four steps:
//!
//! 1. [`observe`](crate::observe): read the caches and list the selected objects;
//! 2. [`plan`](crate::plan): decide, with no I/O, which Works to write and delete, and why;
//! 3. [`execute`](crate::execute): write what differs from the hub, delete what the plan says;
//! 4. [`report`](crate::report): the Placement's and the divided Deployments' status, Events.
//!
//! Passes are started by changes of anything a Placement reads (its own spec, its neighbours,
//! Clusters, the members' API imports, the selected objects of every type, the Works' status)
//! and paced: an edit after a quiet spell starts a pass at once, a burst of changes makes one
//! more pass once it settles.

use std::sync::Arc;
use std::time::Duration;

use flotilla_api::Placement;
use flotilla_runtime::Context;
use flotilla_runtime::gather::{Pacing, pace};
use flotilla_runtime::reconcile::{Reconciler, Retry, drive};
use futures::channel::mpsc;
use kube::runtime::controller::{Action, Controller};
use kube::{Api, ResourceExt};

use crate::execute::execute;
use crate::observation::Observation;
use crate::observe::observe;
use crate::plan::{Plan, plan};
use crate::report::{Outcome, report};
use crate::state::{Error, Scope, Splitter};
use crate::watches::{Caches, Triggers, placed_objects, placements};

/// When an object is tried again after a failed reconciliation.
const RETRY: Retry = Retry {
    transient: Duration::from_secs(5),
    permanent: Some(Duration::from_secs(60)),
};

/// Runs the placement controller of `scope`, placing on the Clusters `args.cluster_selector`
/// selects, until `ctx.shutdown`.
pub async fn run(ctx: Context, scope: Scope<'_>, args: &crate::SplitterArgs) -> anyhow::Result<()> {
    let (triggers, triggered) = mpsc::unbounded();
    // The releaser of the Works of deleted Placements (see crate::release) looks soon after a
    // Placement appears or goes, and after a change of a Work that may be orphaned.
    let release_wake = Arc::default();
    let (placements, placement_events) =
        placements(&ctx.client, scope, args, &triggers, &release_wake);
    let (caches, import_events) =
        Caches::start(&ctx, scope, args, &placements, &triggers, release_wake)?;
    // A Placement's own spec change starts its pass at once; the other changes are paced: an
    // edit after a quiet spell at once, a burst in one more pass once it settles (see
    // flotilla_runtime::gather::pace). (A delete and a create under the same name, `kubectl
    // replace --force`, are seen as the replacement they are even when they land in two passes:
    // the plan keeps a gone object's copies for `GONE_GRACE`.)
    let controller = Controller::for_stream(placement_events, placements.clone())
        .with_config(kube::runtime::controller::Config::default().concurrency(args.concurrency));
    let watermarks = Arc::default();
    let placed = placed_objects(&ctx.client, scope, &placements, import_events, &watermarks);
    let controller = controller.reconcile_on(pace(
        futures::stream::select(triggered, placed),
        Pacing {
            quiet: SETTLE,
            report_quiet: SETTLE_REPORTS,
            most: SETTLE_AT_MOST,
        },
    ));
    tokio::select! {
        _ = ctx.shutdown.cancelled() => return Ok(()),
        _ = caches.synced() => {}
    }
    ctx.health.set_caches_synced(true);
    tokio::spawn(
        crate::release::Releaser {
            ctx: ctx.clone(),
            grace: args.orphaned_work_grace,
            served: crate::release::Served::of(scope, &args.cluster_placement_selector),
            placements: placements.clone(),
            clusters: caches.clusters.clone(),
            works: caches.works.clone(),
            data_secrets: caches.data_secrets.clone(),
            wake: caches.release_wake.clone(),
        }
        .run(),
    );
    let splitter = splitter(ctx, scope, args, caches, placements, triggers, watermarks);
    drive(controller, Arc::new(splitter)).await;
    Ok(())
}

/// The state every pass of `scope` shares.
fn splitter(
    ctx: Context,
    scope: Scope<'_>,
    args: &crate::SplitterArgs,
    caches: Caches,
    placements: kube::runtime::reflector::Store<Placement>,
    triggers: Triggers,
    watermarks: Arc<crate::watermarks::Watermarks>,
) -> Splitter {
    Splitter {
        ctx,
        clusters: caches.clusters,
        works: caches.works,
        data_secrets: caches.data_secrets,
        placements,
        imports: caches.imports,
        namespaces: caches.namespaces,
        records: caches.records,
        profiles: caches.profiles,
        inventory: caches.inventory,
        pod_security: crate::pod_security::PodSecurity {
            default: args.default_pod_security_level,
            check_namespace_prefix: args.pod_security_check_namespace_prefix.clone(),
            verdicts: Default::default(),
        },
        recent: caches.recent,
        types: Default::default(),
        absent: Default::default(),
        announced: Default::default(),
        namespace: scope.namespace().map(str::to_string),
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
        watermarks,
    }
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

/// How long a burst of changes of a Placement's inputs must have been quiet before the pass
/// that takes them all (each change restarts the wait): long enough that the changes of a burst,
/// which come milliseconds apart, make one pass. A change after a quiet spell does not wait
/// (see [`pace`]).
const SETTLE: Duration = Duration::from_millis(50);

/// How long the changes a Placement only reports on (its Works' statuses, Clusters) must have
/// been quiet before the pass that reports them: the members' statuses after an edit come over
/// a hundred milliseconds or so, and each pass lists the Placement's objects again.
const SETTLE_REPORTS: Duration = Duration::from_millis(150);

/// How long a steady stream of changes holds a Placement's pass back at most: a bulk write of
/// thousands of objects is placed while it goes on, in passes this far apart.
const SETTLE_AT_MOST: Duration = Duration::from_secs(1);
