//! `flotilla-negotiator importer`: the importer inside a pull-mode member.
//!
//! It reads the member it runs in (the runtime's `--kubeconfig`, or its in-cluster service
//! account) and writes the member's APIResourceImports into `flotilla-cluster-<name>` on the hub
//! with the credential the registration agent keeps in a member Secret
//! (`--hub-credential-secret`), reconnecting when the agent rotates it. The agent's hub rights
//! cover its own namespace only: the types imported are the defaults and `--extra-type`, plus
//! those Placements select if the credential may list Placements.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use flotilla_api::{Placement, names};
use flotilla_runtime::Context;
use flotilla_runtime::member_client::client_from_secret;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ListParams;
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::Notify;

use crate::ImportArgs;
use crate::importer::{ImportWriter, MemberReader};
use crate::metrics::NegotiatorMetrics;
use crate::types;

/// How often the member is read again (from caches, unless something changed) and the
/// credential Secret checked for a rotation.
const TICK: Duration = Duration::from_secs(15);

/// Flags of `flotilla-negotiator importer`.
#[derive(Args, Debug, Clone)]
pub struct PullImporterArgs {
    #[command(flatten)]
    pub import: ImportArgs,

    /// The name of the member this importer runs in (its Cluster's name on the hub).
    #[arg(long, env = "FLOTILLA_CLUSTER_NAME", value_name = "NAME")]
    pub cluster_name: String,

    /// The member Secret with the registration agent's hub kubeconfig (key `kubeconfig`).
    #[arg(
        long,
        env = "FLOTILLA_HUB_CREDENTIAL_SECRET",
        default_value = "flotilla-hub-kubeconfig",
        value_name = "NAME"
    )]
    pub hub_credential_secret: String,

    /// The namespace of --hub-credential-secret (in a Pod: set POD_NAMESPACE).
    #[arg(
        long,
        env = "POD_NAMESPACE",
        default_value = names::SYSTEM_NAMESPACE,
        value_name = "NAMESPACE"
    )]
    pub hub_credential_namespace: String,
}

/// Waits for a usable hub credential; `None` on shutdown.
async fn hub_client(
    ctx: &Context,
    secrets: &Api<Secret>,
    args: &PullImporterArgs,
) -> Option<(Client, String)> {
    let mut reported = false;
    loop {
        match client_from_secret(
            secrets,
            &args.hub_credential_namespace,
            &args.hub_credential_secret,
            names::DEFAULT_KUBECONFIG_KEY,
        )
        .await
        {
            Ok(found) => return Some(found),
            Err(e) if !reported => {
                tracing::warn!(error = %e, "no usable hub credential yet (the agent writes it once the Cluster is accepted); waiting");
                reported = true;
            }
            Err(_) => {}
        }
        tokio::select! {
            _ = ctx.shutdown.cancelled() => return None,
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
    }
}

/// Runs the pull-mode importer until `ctx.shutdown`.
pub async fn run(ctx: Context, args: PullImporterArgs) -> anyhow::Result<()> {
    let cluster = args.cluster_name.clone();
    names::validate_cluster_name(&cluster).context("--cluster-name")?;
    let metrics = NegotiatorMetrics::register(ctx.metrics.registry(), ctx.metrics.prefix())?;
    // In the member, the runtime's client is the member's.
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &args.hub_credential_namespace);
    let changed = Arc::new(Notify::new());
    let notify = changed.clone();
    // In the member itself: its own in-cluster client for both.
    let own = flotilla_runtime::MemberClient {
        requests: ctx.client.clone(),
        watches: ctx.client.clone(),
    };
    let reader = MemberReader::start(&cluster, own, move || notify.notify_one());
    let namespace = names::cluster_namespace(&cluster);
    while let Some((hub, credential)) = hub_client(&ctx, &secrets, &args).await {
        tracing::info!(
            cluster,
            "importing the member's schemas with the agent's hub credential"
        );
        let stop = ctx.shutdown.child_token();
        let hub_ctx = Context {
            client: hub.clone(),
            shutdown: stop.clone(),
            ..ctx.clone()
        };
        let imports = flotilla_runtime::cache::spawn_store(
            &hub_ctx,
            Api::namespaced(hub.clone(), &namespace),
            watcher::Config::default(),
        );
        tokio::select! {
            _ = ctx.shutdown.cancelled() => return Ok(()),
            _ = flotilla_runtime::cache::wait_until_synced(&imports) => {}
        }
        ctx.health.set_caches_synced(true);
        let writer = ImportWriter {
            cluster: &cluster,
            api: Api::namespaced(hub.clone(), &namespace),
            imports: &imports,
            metrics: &metrics,
            status_forbidden: Default::default(),
        };
        let mut may_list_placements = true;
        let mut last_check = Instant::now();
        loop {
            let mut placements = Vec::new();
            if may_list_placements {
                match Api::<Placement>::all(hub.clone())
                    .list(&ListParams::default())
                    .await
                {
                    Ok(list) => placements = list.items,
                    Err(kube::Error::Api(s)) if s.code == 403 => {
                        tracing::info!(
                            "the hub credential may not list Placements: importing the default and --extra-type types only"
                        );
                        may_list_placements = false;
                    }
                    Err(e) => tracing::warn!(error = %e, "listing Placements on the hub failed"),
                }
            }
            let wanted = types::wanted(&placements, &args.import.extra_types);
            let version = ctx
                .client
                .apiserver_version()
                .await
                .ok()
                .map(|v| v.git_version);
            let results = reader
                .read(
                    &wanted,
                    version.as_deref(),
                    args.import.import_interval,
                    &args.import.limits(),
                )
                .await;
            if let Err(e) = writer.sync(results).await {
                tracing::warn!(cluster, error = %e, "import failed; retrying");
            }
            tokio::select! {
                _ = ctx.shutdown.cancelled() => return Ok(()),
                _ = changed.notified() => {}
                _ = tokio::time::sleep(TICK.min(args.import.import_interval)) => {}
            }
            if last_check.elapsed() >= TICK {
                last_check = Instant::now();
                let current = secrets
                    .get_opt(&args.hub_credential_secret)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|s| s.metadata.resource_version);
                if current.is_some_and(|v| v != credential) {
                    tracing::info!("the hub credential changed: reconnecting with the new one");
                    break;
                }
            }
        }
        stop.cancel();
    }
    Ok(())
}
