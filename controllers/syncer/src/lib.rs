//! The syncer: applies Work into members and brings status back.
//!
//! | module | does |
//! |---|---|
//! | [`work`] | the Work controller: apply, status, drift on resync, deletion behind a finalizer |
//! | [`targets`] | which members this syncer serves, and their clients |
//! | [`apply`] | writing and deleting objects in a member (discovery, namespaces, conflicts) |
//! | [`manifest`] | pure: what exactly is applied, and whose an object is |
//! | [`status`] | pure: the Work's conditions and per-manifest status |

pub mod apply;
pub mod manifest;
pub mod status;
pub mod targets;
pub mod work;

use std::time::Duration;

use clap::Args;
use flotilla_runtime::Context;
use flotilla_runtime::cli::parse_duration;

/// Flags of the syncer.
#[derive(Args, Debug, Clone)]
pub struct SyncerArgs {
    /// How often every Work is re-applied (reverting drift in the members) and its status
    /// refreshed.
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub resync_interval: Duration,

    /// Namespace of kubeconfig Secrets whose reference names no namespace (in a Pod: set
    /// POD_NAMESPACE).
    #[arg(
        long,
        env = "POD_NAMESPACE",
        default_value = flotilla_api::names::SYSTEM_NAMESPACE,
        value_name = "NAMESPACE"
    )]
    pub kubeconfig_secret_namespace: String,

    /// Only serve Clusters with these labels (a label selector such as `shard=a`); empty: all
    /// push-mode Clusters.
    #[arg(long, default_value = "", value_name = "SELECTOR")]
    pub cluster_selector: String,
}

/// Runs the syncer's controllers until `ctx.shutdown`.
pub async fn run(ctx: Context, args: SyncerArgs) -> anyhow::Result<()> {
    work::run(ctx, args).await
}
