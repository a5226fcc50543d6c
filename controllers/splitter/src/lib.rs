//! The splitter: placement, replica division, failover, status aggregation.

pub mod division;
pub mod eligibility;
pub mod render;

use flotilla_api::Placement;
use flotilla_runtime::Context;
use kube::Api;

/// Runs the controllers of `flotilla-splitter` until `ctx.shutdown` is cancelled.
///
/// Today this keeps the watched cache of Placement objects that the reconcilers will work from
/// and reports readiness once it is synced.
pub async fn run(ctx: Context) -> anyhow::Result<()> {
    let store =
        flotilla_runtime::cache::watch_into_store(&ctx, Api::<Placement>::all(ctx.client.clone()))
            .await;
    ctx.shutdown.cancelled().await;
    tracing::debug!(cached = store.state().len(), "stopping");
    Ok(())
}
