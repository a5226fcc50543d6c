//! Pull mode: the syncer runs in its member (`--pull --cluster-name <c>`), serves only the Works
//! of `flotilla-cluster-<c>`, and reaches the hub with the credential the registration agent
//! keeps in a member Secret (`--hub-credential-secret`). When the agent rotates the credential,
//! the syncer reconnects with the new one. If the hub is unreachable, the member keeps running
//! what it has: nothing is deleted without an observed Work deletion.
//!
//! The agent's hub rights allow reading the Works of its own namespace, writing their status and
//! adding or removing the syncer's finalizer (nothing else: the admission policy
//! `flotilla-agent-works` of `deploy/bootstrap` refuses any other change). So deletion works as in
//! push mode: a deleted Work stays until its member objects are gone, also when it was deleted
//! while this syncer was not running. A Work deleted with its hub namespace (when the Cluster is
//! removed, the agent loses its access first and registration deletes the namespace) leaves its
//! member objects in place, and the hub's syncer lets it go.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use flotilla_api::names;
use flotilla_runtime::member_client::{
    client_from_kubeconfig, kubeconfig_from_secret, read_secret,
};
use flotilla_runtime::{Context, Events};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector;
use kube::{Api, Client};

use crate::SyncerArgs;
use crate::metrics::{SyncerMetrics, Tracking};
use crate::shard::Shards;
use crate::targets::{Member, PullTarget, Targets};
use crate::work::{Hub, serve};

/// How often the credential Secret is checked for a rotated credential.
const CREDENTIAL_CHECK: Duration = Duration::from_secs(15);

/// The hub client from the agent's credential, and the Secret's resourceVersion.
async fn hub_client(secrets: &Api<Secret>, args: &SyncerArgs) -> anyhow::Result<(Client, String)> {
    let namespace = &args.hub_credential_namespace;
    let name = &args.hub_credential_secret;
    let secret = read_secret(secrets, namespace, name).await?;
    let key = names::DEFAULT_KUBECONFIG_KEY;
    let kubeconfig = kubeconfig_from_secret(&secret, key)?;
    let client = client_from_kubeconfig(kubeconfig, &format!("{namespace}/{name}"), key).await?;
    Ok((client, secret.metadata.resource_version.unwrap_or_default()))
}

async fn resource_version(secrets: &Api<Secret>, name: &str) -> Option<String> {
    secrets
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|s| s.metadata.resource_version)
}

/// Runs the pull-mode syncer until `ctx.shutdown`.
pub async fn run(ctx: Context, args: SyncerArgs) -> anyhow::Result<()> {
    let cluster = args
        .cluster_name
        .clone()
        .context("--pull needs --cluster-name")?;
    let metrics = SyncerMetrics::register(ctx.metrics.registry(), ctx.metrics.prefix())?;
    let tracking = Arc::new(Tracking::new(metrics));
    // In the member, the runtime's client is the member's.
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &args.hub_credential_namespace);
    loop {
        let mut reported = false;
        let (client, version) = loop {
            match hub_client(&secrets, &args).await {
                Ok(found) => break found,
                Err(e) => {
                    if !reported {
                        tracing::warn!(
                            error = format!("{e:#}"),
                            "no usable hub credential yet (the agent writes it once it is accepted); waiting"
                        );
                        reported = true;
                    }
                }
            }
            tokio::select! {
                _ = ctx.shutdown.cancelled() => return Ok(()),
                _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            }
        };
        tracing::info!(
            cluster,
            "serving the member's Works with the agent's hub credential"
        );
        let stop = ctx.shutdown.child_token();
        let run_ctx = Context {
            shutdown: stop.clone(),
            ..ctx.clone()
        };
        let hub = Hub {
            works: Api::namespaced(client.clone(), &names::cluster_namespace(&cluster)),
            events: Events::new(client.clone(), "flotilla.dev/syncer", &ctx.identity),
            client: client.clone(),
        };
        let targets = Targets {
            hub: client,
            clusters: reflector::store().0,
            clients: Default::default(),
            secret_namespace: String::new(),
            recent: Default::default(),
            shards: Arc::new(Shards::all()),
            pull: Some(PullTarget {
                cluster: cluster.clone(),
                member: Member {
                    client: ctx.client.clone(),
                    watch_client: ctx.client.clone(),
                    key: "in-cluster".into(),
                },
            }),
        };
        ctx.health.set_caches_synced(true);
        let mut serving = tokio::spawn(serve(
            run_ctx,
            args.clone(),
            hub,
            targets,
            tracking.clone(),
            futures::stream::pending().boxed(),
            None,
        ));
        loop {
            tokio::select! {
                _ = ctx.shutdown.cancelled() => {
                    stop.cancel();
                    return finish(serving.await);
                }
                done = &mut serving => return finish(done),
                _ = tokio::time::sleep(CREDENTIAL_CHECK) => {}
            }
            let current = resource_version(&secrets, &args.hub_credential_secret).await;
            if current.as_deref().is_some_and(|v| v != version) {
                tracing::info!("the hub credential changed: reconnecting with the new one");
                stop.cancel();
                finish(serving.await)?;
                break;
            }
        }
    }
}

fn finish(done: Result<anyhow::Result<()>, tokio::task::JoinError>) -> anyhow::Result<()> {
    match done {
        Ok(result) => result,
        Err(e) if e.is_cancelled() => Ok(()),
        Err(e) => Err(anyhow::anyhow!("the Work controller panicked: {e}")),
    }
}
