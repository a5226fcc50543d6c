//! The registration controller: Cluster lifecycle, push and pull (CSR) modes, health, cordon
//! and removal.
//!
//! | module | runs on | does |
//! |---|---|---|
//! | [`cluster`] | hub | reconciles Clusters: acceptance, namespace and agent RBAC, health, status, removal |
//! | [`csr`] | hub | approves or denies pull-mode agents' certificate requests |
//! | [`agent`] | member | the pull-mode agent: CSR, credential, heartbeat Lease, status, rotation |
//! | [`health`] | — | pure: conditions from probe results and heartbeats |
//! | [`rbac`] | — | pure: the RBAC objects of a cluster's agent |

pub mod agent;
pub mod approval_webhook;
pub mod cluster;
pub mod csr;
pub mod health;
pub mod probe;
pub mod rbac;

use std::time::Duration;

use clap::Args;
use flotilla_runtime::Context;
use flotilla_runtime::cli::parse_duration;
use flotilla_runtime::shared::SharedCache;
use kube::Api;

/// Flags of the hub-side registration controller.
#[derive(Args, Debug, Clone)]
pub struct RegistrationArgs {
    /// How often push-mode members are probed (/readyz, /version, Nodes).
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub probe_interval: Duration,

    /// How long a member may go without a successful probe (push) or heartbeat (pull) before its
    /// Ready condition becomes Unknown: three missed probes at the default interval. With the
    /// Placements' default failover toleration (20 s), a member that stops or hangs has its
    /// work moved within a minute.
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub grace_period: Duration,

    /// Approve pull-mode agents' certificates without waiting for spec.hubAcceptsClient. Off by
    /// default: the hub admin accepts each member explicitly.
    #[arg(long, default_value_t = false)]
    pub auto_accept: bool,

    /// The longest lifetime of an agent certificate this controller approves. A request asking for
    /// more, or for none (the signer's default: a year with kube-controller-manager's), is denied
    /// (reason UnboundedLifetime); agents rotate their certificates well before expiry.
    #[arg(long, default_value = "720h", value_parser = parse_duration, value_name = "DURATION")]
    pub max_agent_certificate_lifetime: Duration,

    /// Where push-mode members' kubeconfig Secrets are.
    #[command(flatten)]
    pub member_secrets: flotilla_runtime::cli::MemberReaderArgs,

    /// The ClusterRole that registration binds, in each accepted pull-mode Cluster's namespace
    /// `flotilla-cluster-<name>`, to that Cluster's agent: `flotilla:agent` of `deploy/bootstrap`,
    /// or the chart's own. Registration needs `bind` on it, not the rights in it.
    #[arg(long, default_value = flotilla_api::names::AGENT_CLUSTER_ROLE, value_name = "NAME")]
    pub agent_cluster_role: String,

    /// The hub syncer's ServiceAccount (`NAMESPACE/NAME`). Registration binds
    /// `--syncer-cluster-role` to it in each accepted push-mode Cluster's namespace
    /// `flotilla-cluster-<name>`, so the syncer reads the data of the Secrets placed on that
    /// member there and in no other namespace. Empty: bind nothing (a syncer with rights of its
    /// own).
    #[arg(long, default_value = "", value_name = "NAMESPACE/NAME", value_parser = parse_service_account)]
    pub syncer_service_account: String,

    /// The ClusterRole bound to `--syncer-service-account` in push-mode Clusters' namespaces
    /// (the chart's `flotilla:<release>:syncer-work-data`: `get` of Secrets). Registration needs
    /// `bind` on it, not the rights in it.
    #[arg(long, default_value = "", value_name = "NAME")]
    pub syncer_cluster_role: String,

    /// Only handle Clusters with these labels (a label selector such as `env=prod`); empty: all.
    #[arg(long, default_value = "", value_name = "SELECTOR", value_parser = flotilla_runtime::selector::checked)]
    pub cluster_selector: String,
}

/// Accepts `NAMESPACE/NAME` (or nothing).
fn parse_service_account(value: &str) -> Result<String, String> {
    match value.split_once('/') {
        _ if value.is_empty() => Ok(String::new()),
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok(value.to_string())
        }
        _ => Err(format!(
            "expected NAMESPACE/NAME of a ServiceAccount, e.g. flotilla-system/flotilla-syncer, not {value:?}"
        )),
    }
}

impl RegistrationArgs {
    /// The syncer's ServiceAccount and the ClusterRole to bind to it, when both are set.
    pub fn syncer_grant(&self) -> Option<rbac::SyncerGrant> {
        let (namespace, name) = self.syncer_service_account.split_once('/')?;
        (!self.syncer_cluster_role.is_empty()).then(|| rbac::SyncerGrant {
            namespace: namespace.to_string(),
            service_account: name.to_string(),
            cluster_role: self.syncer_cluster_role.clone(),
        })
    }
}

/// Runs the hub-side controllers until `ctx.shutdown`.
pub async fn run(ctx: Context, args: RegistrationArgs) -> anyhow::Result<()> {
    let csr_config = csr::CsrConfig {
        auto_accept: args.auto_accept,
        max_lifetime: args.max_agent_certificate_lifetime,
    };
    // One watch of the Clusters for both controllers (the approver decides again when a
    // request's Cluster changes).
    let clusters = SharedCache::start(
        &ctx,
        Api::all(ctx.client.clone()),
        flotilla_runtime::cache::selected(&args.cluster_selector),
    );
    tokio::try_join!(
        cluster::run(ctx.clone(), args.clone(), clusters.clone()),
        csr::run_scoped(ctx.clone(), csr_config, &args.cluster_selector, &clusters),
    )?;
    Ok(())
}
