//! The negotiator: imports member API schemas and computes one compatible schema.

pub mod compat;

use flotilla_api::NegotiatedApiResource;
use flotilla_runtime::Context;
use kube::Api;

/// Runs the controllers of `flotilla-negotiator` until `ctx.shutdown` is cancelled.
///
/// Today this keeps the watched cache of NegotiatedApiResource objects that the reconcilers will work from
/// and reports readiness once it is synced.
pub async fn run(ctx: Context) -> anyhow::Result<()> {
    let store = flotilla_runtime::cache::watch_into_store(
        &ctx,
        Api::<NegotiatedApiResource>::all(ctx.client.clone()),
    )
    .await;
    ctx.shutdown.cancelled().await;
    tracing::debug!(cached = store.state().len(), "stopping");
    Ok(())
}
