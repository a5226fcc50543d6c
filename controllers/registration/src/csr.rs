//! Approval of pull-mode agents' certificate requests (hub). Not part of this build yet: no
//! request is approved.

use flotilla_runtime::Context;

/// How the approver decides.
#[derive(Clone, Debug)]
pub struct CsrConfig {
    /// Approve without waiting for `spec.hubAcceptsClient`.
    pub auto_accept: bool,
}

/// Runs the approver until `ctx.shutdown`.
pub async fn run(ctx: Context, config: CsrConfig) -> anyhow::Result<()> {
    let _ = config;
    ctx.shutdown.cancelled().await;
    Ok(())
}
