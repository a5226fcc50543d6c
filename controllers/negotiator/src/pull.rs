//! `flotilla-negotiator importer`: the importer inside a pull-mode member.
//!
//! It reads the member it runs in (the runtime's `--kubeconfig`, or its in-cluster service
//! account) and writes the member's APIResourceImports into `flotilla-cluster-<name>` on the hub
//! with the credential the registration agent keeps in a member Secret
//! (`--hub-credential-secret`), reconnecting when the agent rotates it. The agent's hub rights
//! cover its own namespace only (it may not read the hub's Placements), so the hub lists the
//! types for it: the types imported are the defaults, `--extra-type`, and those of the list the
//! negotiator keeps in the ConfigMap `flotilla-import-types` of that namespace (the hub's
//! defaults and `--extra-type`, and every type a Placement selects; see
//! [`crate::import_types`]), read on every pass.
//!
//! A list that cannot be read is not an empty list: the last one read is kept; without one, the
//! defaults and `--extra-type` are imported. Either way no import is removed because a type is
//! not on the list — the writer only removes the import of a type it asked the member about and
//! the member said it does not serve.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use flotilla_api::names;
use flotilla_runtime::member_client::client_from_secret;
use flotilla_runtime::{Context, ErrorCategory};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::Notify;

use crate::ImportArgs;
use crate::importer::{ImportWriter, MemberReader};
use crate::metrics::NegotiatorMetrics;
use crate::types::{self, ResourceType};

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

/// What was last read of the hub's list of types for this member (the ConfigMap
/// `flotilla-import-types` in its namespace).
#[derive(Default)]
struct HubList {
    /// The types of the last list read; empty when there is none (or the hub removed it).
    types: BTreeSet<ResourceType>,
    /// What the last read saw, to log each change once, not every pass.
    seen: Option<Seen>,
}

/// What one read of the hub's list saw.
#[derive(PartialEq)]
enum Seen {
    /// A list, with these lines that are not a type.
    Listed {
        invalid: Vec<String>,
    },
    Missing,
    /// Not read, for a reason of this category (Forbidden, Unreachable, ...).
    Unreadable(&'static str),
}

impl HubList {
    /// Reads the list again and returns the types to import besides the defaults and
    /// `--extra-type`. When the ConfigMap cannot be read, the last list read is kept.
    async fn read(&mut self, api: &Api<ConfigMap>, namespace: &str) -> &BTreeSet<ResourceType> {
        let configmap = format!("{namespace}/{}", names::IMPORT_TYPES_CONFIGMAP);
        let seen = match api.get_opt(names::IMPORT_TYPES_CONFIGMAP).await {
            Ok(Some(cm)) => {
                let text = cm
                    .data
                    .as_ref()
                    .and_then(|d| d.get(types::LIST_KEY))
                    .map(String::as_str)
                    .unwrap_or_default();
                let (listed, invalid) = types::parse_list(text);
                let seen = Seen::Listed { invalid };
                if self.seen.as_ref() != Some(&seen) || listed != self.types {
                    if let Seen::Listed { invalid } = &seen
                        && !invalid.is_empty()
                    {
                        tracing::warn!(
                            configmap,
                            ?invalid,
                            "lines of the hub's list of types are not <apiVersion>/<Kind>; importing the others"
                        );
                    }
                    tracing::info!(
                        configmap,
                        types = listed.len(),
                        "importing the types of the hub's list besides the defaults and --extra-type"
                    );
                }
                self.types = listed;
                seen
            }
            Ok(None) => {
                if self.seen != Some(Seen::Missing) {
                    tracing::warn!(
                        configmap,
                        "the hub keeps no list of types for this member (is the negotiator running there?): importing the defaults and --extra-type; no import is removed"
                    );
                }
                self.types.clear();
                Seen::Missing
            }
            Err(e) => {
                let seen = Seen::Unreadable(e.category());
                if self.seen.as_ref() != Some(&seen) {
                    tracing::warn!(configmap, error = %e, kept = self.types.len(), "cannot read the hub's list of types: importing the defaults, --extra-type and the types of the last list read; no import is removed");
                }
                seen
            }
        };
        self.seen = Some(seen);
        &self.types
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
    let mut hub_list = HubList::default();
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
        let lists: Api<ConfigMap> = Api::namespaced(hub.clone(), &namespace);
        let mut last_check = Instant::now();
        loop {
            let mut wanted = types::wanted([], &args.import.extra_types);
            wanted.extend(hub_list.read(&lists, &namespace).await.iter().cloned());
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
