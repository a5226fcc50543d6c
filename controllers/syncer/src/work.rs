//! The Work controller: applies each Work's manifests into its member, copies their status back,
//! re-applies drift on every resync, and deletes member objects only when the Work is deleted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_api::condition::set_condition;
use flotilla_api::{
    Cluster, DeletePolicy, Work, conditions, field_managers, finalizers, names, reasons,
};
use flotilla_runtime::{Context, ErrorCategory};
use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{self, Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use crate::SyncerArgs;
use crate::apply::{DiscoveryCache, Outcome, apply_manifest, delete_manifest};
use crate::manifest::prepare;
use crate::status::{Verdict, manifest_status, work_conditions};
use crate::targets::{Targets, Unavailable};

/// Why a reconciliation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("waiting for {0} object(s) to be deleted from the member")]
    WaitingForDeletion(usize),
    #[error("cannot delete the member objects yet: {0}")]
    MemberUnavailable(String),
    #[error("finalizer: {0}")]
    Finalizer(String),
}

impl ErrorCategory for Error {
    fn category(&self) -> &'static str {
        match self {
            Self::Kube(e) => e.category(),
            Self::WaitingForDeletion(_) => "Waiting",
            Self::MemberUnavailable(_) => "ClusterUnavailable",
            Self::Finalizer(_) => "Finalizer",
        }
    }
}

struct Syncer {
    ctx: Context,
    args: SyncerArgs,
    targets: Targets,
    discovery: DiscoveryCache,
}

/// Runs the Work controller for push-mode members until `ctx.shutdown`.
pub async fn run(ctx: Context, args: SyncerArgs) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let mut cluster_watch = watcher::Config::default();
    if !args.cluster_selector.is_empty() {
        cluster_watch = cluster_watch.labels(&args.cluster_selector);
    }
    // The Clusters this syncer serves, cached for look-ups.
    let (clusters, writer) = reflector::store();
    let cluster_cache = reflector::reflector(
        writer,
        watcher(Api::<Cluster>::all(client.clone()), cluster_watch.clone()),
    )
    .default_backoff()
    .touched_objects()
    .for_each(|_| async {});
    let shutdown = ctx.shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = cluster_cache => {}
        }
    });

    let controller = Controller::new(Api::<Work>::all(client.clone()), watcher::Config::default());
    let works = controller.store();
    // A Cluster that changes (becomes Ready, gets a new kubeconfig) re-triggers its Works.
    let controller = controller.watches(
        Api::<Cluster>::all(client.clone()),
        cluster_watch,
        move |cluster: Cluster| {
            let namespace = names::cluster_namespace(&cluster.name_any());
            works
                .state()
                .into_iter()
                .filter(|w| w.metadata.namespace.as_deref() == Some(namespace.as_str()))
                .map(|w| ObjectRef::from_obj(&*w))
                .collect::<Vec<_>>()
        },
    );

    let secret_namespace = args.kubeconfig_secret_namespace.clone();
    let state = Arc::new(Syncer {
        ctx: ctx.clone(),
        args,
        targets: Targets {
            hub: client,
            clusters: clusters.clone(),
            clients: Default::default(),
            secret_namespace,
        },
        discovery: DiscoveryCache::default(),
    });

    let health = ctx.health.clone();
    tokio::spawn(async move {
        if flotilla_runtime::cache::wait_until_synced(&clusters).await {
            tracing::info!("cache of Clusters synced");
            health.set_caches_synced(true);
        }
    });

    // Serve nothing before the Clusters are known: an unsynced cache would look like "no Cluster".
    tokio::select! {
        _ = ctx.shutdown.cancelled() => return Ok(()),
        _ = flotilla_runtime::cache::wait_until_synced(&state.targets.clusters) => {}
    }
    controller
        .graceful_shutdown_on(ctx.shutdown.clone().cancelled_owned())
        .run(reconcile, error_policy, state)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "reconcile failed");
            }
        })
        .await;
    Ok(())
}

fn work_ref(work: &Work) -> String {
    format!(
        "{}/{}",
        work.namespace().unwrap_or_default(),
        work.name_any()
    )
}

async fn reconcile(work: Arc<Work>, state: Arc<Syncer>) -> Result<Action, Error> {
    let started = Instant::now();
    let namespace = work.namespace().unwrap_or_default();
    let Some(cluster) = names::cluster_from_namespace(&namespace).map(str::to_string) else {
        // Not in a flotilla-cluster-<name> namespace: not a Work for any member.
        return Ok(Action::await_change());
    };
    match state.targets.cluster(&cluster) {
        // A pull-mode member's agent syncs its Works itself.
        Some(c) if c.spec.sync_mode != flotilla_api::SyncMode::Push => {
            return Ok(Action::await_change());
        }
        Some(_) => {}
        // Not served by this syncer (another shard, or not selected): not touched — not even
        // with a finalizer. The one exception: a deleted Work whose Cluster is gone can be let
        // go by any syncer, since no member is left to clean up.
        None => {
            let ours = work.finalizers().iter().any(|f| f == finalizers::SYNCER);
            if !(ours
                && work.metadata.deletion_timestamp.is_some()
                && !state.targets.exists(&cluster).await?)
            {
                return Ok(Action::await_change());
            }
        }
    }
    let api: Api<Work> = Api::namespaced(state.ctx.client.clone(), &namespace);
    let result = finalizer(&api, finalizers::SYNCER, work, |event| async {
        match event {
            FinalizerEvent::Apply(w) => apply(&w, &cluster, &state).await,
            FinalizerEvent::Cleanup(w) => cleanup(&w, &cluster, &state).await,
        }
    })
    .await
    .map_err(|e| match e {
        finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => e,
        other => Error::Finalizer(other.to_string()),
    });
    state.ctx.metrics.observe_reconcile(
        "work",
        started.elapsed().as_secs_f64(),
        result.as_ref().err().map(|e| e.category()),
    );
    result
}

fn error_policy(work: Arc<Work>, error: &Error, _state: Arc<Syncer>) -> Action {
    let retry = match error {
        Error::WaitingForDeletion(_) => Duration::from_secs(2),
        _ => Duration::from_secs(5),
    };
    tracing::warn!(work = %work_ref(&work), error = %error, "reconcile failed; retrying in {retry:?}");
    Action::requeue(retry)
}

/// Writes the Work's status: the given verdicts (merged into the current conditions so that
/// unchanged conditions keep their transition time) and, when given, the manifests' status.
async fn write_status(
    work: &Work,
    verdicts: &[Verdict],
    manifests: Option<Vec<flotilla_api::ManifestStatus>>,
    state: &Syncer,
) -> Result<(), Error> {
    let now = Timestamp::now();
    let old = work.status.clone().unwrap_or_default();
    let mut conditions = old.conditions.clone();
    for v in verdicts {
        set_condition(
            &mut conditions,
            v.into_condition(now, work.metadata.generation),
        );
    }
    let manifests = manifests.unwrap_or(old.manifests);
    let api: Api<Work> = Api::namespaced(
        state.ctx.client.clone(),
        &work.namespace().unwrap_or_default(),
    );
    api.patch_status(
        &work.name_any(),
        &PatchParams::apply(field_managers::SYNCER).force(),
        &Patch::Apply(json!({
            "apiVersion": Work::api_version(&()),
            "kind": Work::kind(&()),
            "status": { "conditions": conditions, "manifests": manifests },
        })),
    )
    .await?;
    Ok(())
}

/// The member cannot be written to: say so on the Work, change nothing anywhere else.
async fn report_unavailable(
    work: &Work,
    why: &Unavailable,
    state: &Syncer,
) -> Result<Action, Error> {
    let message = format!("{why}; the objects in the member are left as they are");
    let applied = Verdict::new(
        conditions::APPLIED,
        "Unknown",
        reasons::CLUSTER_UNAVAILABLE,
        message,
    );
    let previous = work
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == conditions::APPLIED));
    if previous.is_none_or(|c| c.reason != reasons::CLUSTER_UNAVAILABLE) {
        state
            .ctx
            .events
            .warning(
                work,
                reasons::CLUSTER_UNAVAILABLE,
                "Apply",
                applied.message.clone(),
            )
            .await;
    }
    write_status(work, &[applied], None, state).await?;
    Ok(Action::requeue(Duration::from_secs(10)))
}

async fn apply(work: &Work, cluster: &str, state: &Syncer) -> Result<Action, Error> {
    let client = match state.targets.client(cluster).await {
        Ok(c) => c,
        Err(why) => return report_unavailable(work, &why, state).await,
    };
    let now = Timestamp::now();
    let work_ref = work_ref(work);
    let mut outcomes = Vec::new();
    let mut manifests = Vec::new();
    for prepared in prepare(work) {
        let prepared = match prepared {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(work = %work_ref, error = %e, "invalid manifest");
                continue;
            }
        };
        let outcome = apply_manifest(
            &state.discovery,
            cluster,
            &client,
            &prepared,
            &work_ref,
            work.spec.conflict_policy,
        )
        .await;
        if let Outcome::Applied(obj) = &outcome {
            manifests.push(manifest_status(
                prepared.ordinal,
                &prepared.identity,
                obj,
                now,
            ));
        }
        outcomes.push((prepared.identity, outcome));
    }
    let verdicts = work_conditions(&outcomes);
    let old = work.status.clone().unwrap_or_default();
    for v in &verdicts {
        let before = old.conditions.iter().find(|c| c.type_ == v.type_);
        if before.is_some_and(|c| c.status == v.status && c.reason == v.reason) {
            continue;
        }
        if v.type_ == conditions::APPLIED && v.status == "False" {
            state
                .ctx
                .events
                .warning(work, v.reason, "Apply", v.message.clone())
                .await;
        } else if v.type_ == conditions::DEGRADED && v.status == "True" {
            state
                .ctx
                .events
                .warning(work, v.reason, "Observe", v.message.clone())
                .await;
        }
    }
    let settled = verdicts.iter().all(|v| match v.type_ {
        conditions::DEGRADED => v.status == "False",
        _ => v.status == "True",
    });
    write_status(work, &verdicts, Some(manifests), state).await?;
    // Drift is re-applied and status refreshed on every resync; faster while settling.
    Ok(Action::requeue(if settled {
        state.args.resync_interval
    } else {
        Duration::from_secs(2)
    }))
}

async fn cleanup(work: &Work, cluster: &str, state: &Syncer) -> Result<Action, Error> {
    if work.spec.delete_policy == DeletePolicy::Orphan {
        state
            .ctx
            .events
            .normal(
                work,
                "Orphaned",
                "Delete",
                "deletePolicy is Orphan: the objects in the member are left in place",
            )
            .await;
        return Ok(Action::await_change());
    }
    let client = match state.targets.client(cluster).await {
        Ok(c) => c,
        // The Cluster itself is gone: there is no member to delete from. Report and let go.
        Err(Unavailable::Gone(_)) => {
            state
                .ctx
                .events
                .warning(
                    work,
                    reasons::CLUSTER_UNAVAILABLE,
                    "Delete",
                    format!("Cluster {cluster} was deleted: the objects in the member (if any) are left in place"),
                )
                .await;
            return Ok(Action::await_change());
        }
        // Never give up on deleting while the member may come back.
        Err(why) => return Err(Error::MemberUnavailable(why.to_string())),
    };
    let work_ref = work_ref(work);
    let mut remaining = 0;
    for prepared in prepare(work).into_iter().flatten().rev() {
        match delete_manifest(
            &state.discovery,
            cluster,
            &client,
            &prepared.identity,
            &work_ref,
        )
        .await
        {
            Ok(true) => {}
            Ok(false) => remaining += 1,
            Err(e) => return Err(Error::MemberUnavailable(e)),
        }
    }
    if remaining > 0 {
        return Err(Error::WaitingForDeletion(remaining));
    }
    Ok(Action::await_change())
}
