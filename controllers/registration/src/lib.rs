//! The registration controller: Cluster lifecycle, push and pull (CSR) modes, health.

use flotilla_api::Cluster;
use flotilla_runtime::Context;
use kube::Api;

/// Runs the controllers of `flotilla-registration` until `ctx.shutdown` is cancelled.
///
/// Today this keeps the watched cache of Cluster objects that the reconcilers will work from
/// and reports readiness once it is synced.
pub async fn run(ctx: Context) -> anyhow::Result<()> {
    let store =
        flotilla_runtime::cache::watch_into_store(&ctx, Api::<Cluster>::all(ctx.client.clone()))
            .await;
    ctx.shutdown.cancelled().await;
    tracing::debug!(cached = store.state().len(), "stopping");
    Ok(())
}
