//! `flotilla-splitter`: flotilla's splitter: placement, replica division, failover and status aggregation.

use clap::Parser;
use flotilla_runtime::RuntimeArgs;
use flotilla_splitter::SplitterArgs;

/// Flotilla's splitter: placement, replica division, failover and status aggregation.
///
/// Places the objects a Placement selects on eligible member clusters, divides Deployment replicas among them, writes the copies into Works of up to 50 objects per Placement, member and type, moves work away from members that fail, are cordoned or cannot accept the object, and aggregates the members' status back onto the hub object. Runs on the hub.
#[derive(Parser, Debug)]
#[command(name = "flotilla-splitter", version)]
struct Args {
    #[command(flatten)]
    runtime: RuntimeArgs,
    #[command(flatten)]
    splitter: SplitterArgs,
}

// The allocator every controller uses (and whose statistics its metrics report).
#[global_allocator]
static GLOBAL: flotilla_runtime::allocator::Jemalloc = flotilla_runtime::allocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let splitter = args.splitter;
    flotilla_runtime::run("splitter", args.runtime, move |ctx| {
        flotilla_splitter::run(ctx, splitter)
    })
    .await
}
