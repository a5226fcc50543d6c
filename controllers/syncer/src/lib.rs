//! The syncer: applies Work into members and brings status back.

use flotilla_api::Work;
use flotilla_runtime::Context;
use kube::Api;

/// Runs the controllers of `flotilla-syncer` until `ctx.shutdown` is cancelled.
///
/// Today this keeps the watched cache of Work objects that the reconcilers will work from
/// and reports readiness once it is synced.
pub async fn run(ctx: Context) -> anyhow::Result<()> {
    let store =
        flotilla_runtime::cache::watch_into_store(&ctx, Api::<Work>::all(ctx.client.clone())).await;
    ctx.shutdown.cancelled().await;
    tracing::debug!(cached = store.state().len(), "stopping");
    Ok(())
}
