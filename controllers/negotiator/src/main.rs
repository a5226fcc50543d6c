//! `flotilla-negotiator`: flotilla's negotiator: one compatible API across members that disagree.

use clap::Parser;
use flotilla_runtime::RuntimeArgs;

/// Flotilla's negotiator: one compatible API across members that disagree.
///
/// Imports each member's API schemas into APIResourceImports, computes the least common denominator schema of every resource type, publishes it on the hub or enforces the hub's own schema, and reports for every member and type whether it is compatible, with the field paths that differ. Runs on the hub.
#[derive(Parser, Debug)]
#[command(name = "flotilla-negotiator", version)]
struct Args {
    #[command(flatten)]
    runtime: RuntimeArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    flotilla_runtime::run("negotiator", args.runtime, flotilla_negotiator::run).await
}
