//! The syncer: applies Work into members and brings status back.
//!
//! | module | does |
//! |---|---|
//! | [`work`] | the Work controller: apply, status, drift, deletion behind a finalizer |
//! | [`watches`] | watches of the applied objects in each member, which trigger their Works |
//! | [`metrics`] | per-cluster metrics: applies, errors, latencies, managed objects |
//! | [`pull`] | pull mode: in the member, with the registration agent's hub credential |
//! | [`shard`] | N replicas share the members: one Lease per member, a balanced assignment |
//! | [`targets`] | which members this syncer serves, and their clients |
//! | [`apply`] | writing and deleting objects in a member (discovery, namespaces, conflicts) |
//! | [`data`] | the data of a Work's Secrets, read from the hub Secret that holds it |
//! | [`manifest`] | pure: what exactly is applied, and whose an object is |
//! | [`status`] | pure: the Work's conditions and per-manifest status |

pub mod apply;
pub mod data;
pub mod lean;
pub mod manifest;
pub mod metrics;
pub mod own_status;
pub mod pull;
pub mod released;
pub mod shard;
pub mod status;
pub mod targets;
pub mod watches;
pub mod work;

use std::time::Duration;

use clap::Args;
use flotilla_runtime::Context;
use flotilla_runtime::cli::parse_duration;

/// Flags of the syncer.
#[derive(Args, Debug, Clone)]
pub struct SyncerArgs {
    /// How often every Work is looked at again and its status refreshed, as a safety net:
    /// changes in the members arrive through their watches and are acted on at once. A manifest
    /// whose member object is still as the syncer applied it (the resourceVersion its status
    /// reports) is not sent again.
    #[arg(long, default_value = "5m", value_parser = parse_duration, value_name = "DURATION")]
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

    /// How long changes of a Work's objects in its member are gathered before the Work is
    /// reconciled, so that a burst of them (a rollout) becomes one reconciliation and one status
    /// write; a steady stream makes one per period. A change of the Work itself is applied at
    /// once.
    #[arg(long, default_value = "50ms", value_parser = parse_duration, value_name = "DURATION")]
    pub debounce: Duration,

    /// How many Works are reconciled at the same time.
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub concurrency: u16,

    /// How many Works of one member are reconciled at the same time, at most (0: three quarters
    /// of --concurrency, and at least one place left for the others). A member that is slow or
    /// stops answering then holds only this many; its further Works wait behind them, and the
    /// other members' Works go on.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub member_concurrency: u16,

    /// Pull mode: run in the member named by --cluster-name, serve only its Works, and reach the
    /// hub with the credential the registration agent keeps in --hub-credential-secret. The
    /// runtime's --kubeconfig (or in-cluster config) is then the member's.
    #[arg(
        long,
        default_value_t = false,
        requires = "cluster_name",
        conflicts_with = "shard_by_cluster"
    )]
    pub pull: bool,

    /// Pull mode: the name of the member this syncer runs in (its Cluster's name on the hub).
    #[arg(long, value_name = "NAME")]
    pub cluster_name: Option<String>,

    /// Pull mode: the member Secret with the agent's hub kubeconfig (key `kubeconfig`).
    #[arg(long, default_value = "flotilla-hub-kubeconfig", value_name = "NAME")]
    pub hub_credential_secret: String,

    /// Pull mode: the namespace of --hub-credential-secret (in a Pod: set POD_NAMESPACE).
    #[arg(
        long,
        env = "POD_NAMESPACE",
        default_value = flotilla_api::names::SYSTEM_NAMESPACE,
        value_name = "NAMESPACE"
    )]
    pub hub_credential_namespace: String,

    /// Share the member clusters among all replicas that run with this flag: one Lease per
    /// cluster (`flotilla-syncer-cluster-<name>`) in --shard-lease-namespace, taken by the
    /// replica the balanced assignment names. Run every replica with --leader-elect=false.
    #[arg(long, default_value_t = false)]
    pub shard_by_cluster: bool,

    /// Namespace of the shard Leases (in a Pod: set POD_NAMESPACE).
    #[arg(
        long,
        env = "POD_NAMESPACE",
        default_value = flotilla_api::names::SYSTEM_NAMESPACE,
        value_name = "NAMESPACE"
    )]
    pub shard_lease_namespace: String,

    /// How long a replica's shard Leases stay valid without renewal: a dead replica's clusters
    /// are taken over after about this long.
    #[arg(long, default_value = "15s", value_parser = parse_duration, value_name = "DURATION")]
    pub shard_lease_duration: Duration,

    /// How often shard Leases are renewed and the assignment recomputed.
    #[arg(long, default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    pub shard_retry_period: Duration,

    /// Only serve Clusters with these labels (a label selector such as `shard=a`); empty: all
    /// push-mode Clusters.
    #[arg(long, default_value = "", value_name = "SELECTOR", value_parser = flotilla_runtime::selector::checked)]
    pub cluster_selector: String,
}

impl SyncerArgs {
    /// `--member-concurrency`, with its default resolved.
    pub fn per_member(&self) -> usize {
        let total = usize::from(self.concurrency).max(1);
        match self.member_concurrency {
            0 => total.saturating_sub((total / 4).max(1)).max(1),
            n => usize::from(n),
        }
    }
}

/// Runs the syncer's controllers until `ctx.shutdown`.
pub async fn run(ctx: Context, args: SyncerArgs) -> anyhow::Result<()> {
    if args.pull {
        pull::run(ctx, args).await
    } else {
        work::run(ctx, args).await
    }
}
