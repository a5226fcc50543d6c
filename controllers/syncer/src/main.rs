//! `flotilla-syncer`: applies Work into member clusters and brings their status back.

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use flotilla_runtime::RuntimeArgs;
use flotilla_syncer::SyncerArgs;

/// Flotilla's syncer: applies Work into member clusters and brings their status back.
///
/// Applies the manifests of every Work in flotilla-cluster-<name> into member <name> with
/// server-side apply (field manager flotilla/syncer), creating missing namespaces; watches the
/// applied objects in each member (one metadata watch per type, by label) so that their status
/// flows up into Work.status and edits in the member are reverted at once (and on every resync);
/// reports objects it did not create as conflicts instead of overwriting them (unless
/// conflictPolicy: Adopt). Deletes member objects only when their Work is deleted (deletePolicy:
/// Delete), never because a member was unreachable. Runs on the hub for push-mode members (with
/// --shard-by-cluster, several replicas share them), or in a member with --pull.
#[derive(Parser, Debug)]
#[command(name = "flotilla-syncer", version)]
struct Args {
    #[command(flatten)]
    runtime: RuntimeArgs,
    #[command(flatten)]
    syncer: SyncerArgs,
}

// The allocator every controller uses (and whose statistics its metrics report).
#[global_allocator]
static GLOBAL: flotilla_runtime::allocator::Jemalloc = flotilla_runtime::allocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.syncer.shard_by_cluster && args.runtime.leader_elect {
        // Only the leader would run, holding every shard: the replicas would not share anything.
        Args::command()
            .error(
                ErrorKind::ArgumentConflict,
                "--shard-by-cluster shares the members among all replicas: run it with --leader-elect=false",
            )
            .exit();
    }
    let syncer = args.syncer;
    flotilla_runtime::run("syncer", args.runtime, move |ctx| {
        flotilla_syncer::run(ctx, syncer)
    })
    .await
}
