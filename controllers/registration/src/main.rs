//! `flotilla-registration`: the lifecycle of member Clusters (hub), and the pull-mode agent
//! (member).

use clap::{Parser, Subcommand};
use flotilla_registration::{RegistrationArgs, agent, approval_webhook};
use flotilla_runtime::RuntimeArgs;

/// Flotilla's registration controller: the lifecycle of member Clusters.
///
/// On the hub it keeps the hub's knowledge of every member cluster current: it probes push-mode
/// members with the kubeconfig in their Secret, watches pull-mode agents' heartbeats, approves an
/// agent's certificate only once the hub admin accepted its Cluster (spec.hubAcceptsClient), fills
/// each Cluster's status and conditions (Accepted, Joined, Ready, Schedulable), and creates the
/// namespace flotilla-cluster-<name> with the agent's least-privilege RBAC. Deleting a Cluster
/// revokes its agent's access and removes its namespace; objects in the member are left alone.
///
/// `flotilla-registration agent` runs the pull-mode agent inside a member cluster instead;
/// `flotilla-registration approval-webhook` serves the hub's check of registration's approvals.
#[derive(Parser, Debug)]
#[command(
    name = "flotilla-registration",
    version,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    runtime: RuntimeArgs,
    #[command(flatten)]
    registration: RegistrationArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the pull-mode agent in a member cluster: register the member with the hub through a
    /// certificate request, renew its heartbeat Lease on the hub, report its version and
    /// capacity, and rotate its certificate before it expires. --kubeconfig is the member's.
    Agent {
        #[command(flatten)]
        runtime: RuntimeArgs,
        #[command(flatten)]
        agent: agent::AgentArgs,
    },
    /// Serve the admission webhook the hub's apiserver asks before registration's approval of a
    /// certificate request is stored: it lets through only what the registration controller
    /// itself approves (an agent's identity for its own accepted Cluster), so a stolen
    /// registration token cannot approve a certificate for another user. Stateless: every
    /// replica serves, none elects a leader. --kubeconfig is the hub's (it reads Clusters).
    ///
    /// Example: flotilla-registration approval-webhook --webhook-address 127.0.0.1:9443
    /// --tls-cert-file tls.crt --tls-private-key-file tls.key
    ApprovalWebhook {
        #[command(flatten)]
        runtime: RuntimeArgs,
        #[command(flatten)]
        webhook: approval_webhook::ApprovalWebhookArgs,
    },
}

// The allocator every controller uses (and whose statistics its metrics report).
#[global_allocator]
static GLOBAL: flotilla_runtime::allocator::Jemalloc = flotilla_runtime::allocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        None => {
            let args = cli.registration;
            flotilla_runtime::run("registration", cli.runtime, move |ctx| {
                flotilla_registration::run(ctx, args)
            })
            .await
        }
        Some(Command::Agent { runtime, agent }) => {
            flotilla_runtime::run("agent", runtime, move |ctx| agent::run(ctx, agent)).await
        }
        Some(Command::ApprovalWebhook { runtime, webhook }) => {
            let runtime = RuntimeArgs {
                leader_elect: false,
                ..runtime
            };
            flotilla_runtime::run("csr-approval", runtime, move |ctx| {
                approval_webhook::run(ctx, webhook)
            })
            .await
        }
    }
}
