//! `flotilla-syncer`: flotilla's syncer: applies Work into member clusters and brings their status back.

use clap::Parser;
use flotilla_runtime::RuntimeArgs;

/// Flotilla's syncer: applies Work into member clusters and brings their status back.
///
/// Applies the manifests of every Work in flotilla-cluster-<name> into member <name> with server-side apply, reverts drift, reports conflicts with objects it did not create, and copies the members' observed status back into Work.status. Deletes member objects only when their Work is deleted. Runs on the hub for push-mode members, or in a member for pull mode.
#[derive(Parser, Debug)]
#[command(name = "flotilla-syncer", version)]
struct Args {
    #[command(flatten)]
    runtime: RuntimeArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    flotilla_runtime::run("syncer", args.runtime, flotilla_syncer::run).await
}
