//! The pull-mode agent (runs in a member).

use flotilla_runtime::Context;

/// Flags of `flotilla-registration agent`.
#[derive(clap::Args, Debug, Clone)]
pub struct AgentArgs {
    /// Name of this member's Cluster on the hub.
    #[arg(long, value_name = "NAME")]
    pub cluster_name: String,
}

/// Runs the agent until `ctx.shutdown`. The pull-mode agent is not part of this build yet.
pub async fn run(ctx: Context, args: AgentArgs) -> anyhow::Result<()> {
    let _ = (ctx, args);
    anyhow::bail!("the pull-mode agent is not available in this build")
}
