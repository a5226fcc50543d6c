//! `flotilla-registration`: flotilla's registration controller: the lifecycle of member Clusters.

use clap::Parser;
use flotilla_runtime::RuntimeArgs;

/// Flotilla's registration controller: the lifecycle of member Clusters.
///
/// Keeps the hub's knowledge of every member cluster current: registers push-mode members from their kubeconfig Secret and pull-mode members through their agent's certificate request, probes their health, fills each Cluster's status and conditions, and creates the per-cluster namespace flotilla-cluster-<name> with its RBAC. Runs on the hub.
#[derive(Parser, Debug)]
#[command(name = "flotilla-registration", version)]
struct Args {
    #[command(flatten)]
    runtime: RuntimeArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    flotilla_runtime::run("registration", args.runtime, flotilla_registration::run).await
}
