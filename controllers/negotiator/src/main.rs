//! `flotilla-negotiator`: flotilla's negotiator: one compatible API across members that disagree.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use flotilla_negotiator::NegotiatorArgs;
use flotilla_negotiator::compat::{self, CompatArgs};
use flotilla_negotiator::lcd::{self, LcdArgs};
use flotilla_negotiator::pull::PullImporterArgs;
use flotilla_runtime::RuntimeArgs;

/// Flotilla's negotiator: one compatible API across members that disagree.
///
/// Imports each member's API schemas into APIResourceImports, computes the least common denominator schema of every resource type, publishes it on the hub or enforces the hub's own schema, and reports for every member and type whether it is compatible, with the field paths that differ. Runs on the hub.
///
/// The types imported are Deployments, ConfigMaps, Secrets, Services and ServiceAccounts, every type a Placement selects and those of --extra-type: built-in types from each member's OpenAPI v3, custom types from its CRDs (watched, so a change is imported at once). Push-mode members are imported from the hub; a pull-mode member runs `flotilla-negotiator importer` itself.
///
/// `flotilla-negotiator compat OLD.yaml NEW.yaml` checks a CRD change for CI instead, and
/// `flotilla-negotiator lcd A.yaml B.yaml …` prints the CRD it would publish for members' CRDs.
#[derive(Parser, Debug)]
#[command(
    name = "flotilla-negotiator",
    version,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    runtime: RuntimeArgs,
    #[command(flatten)]
    negotiator: NegotiatorArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check that a new version of CRDs accepts everything the old one accepts: prints every
    /// change with its JSON path, kind and verdict. Exit code 0: safe; 1: breaking (or
    /// narrowing); 2: a change that cannot be decided, or unreadable input.
    Compat(CompatArgs),
    /// Print the CRD the negotiator would publish for these members' CRDs (one file per member):
    /// every version all of them serve, negotiated; then, as YAML comments, what each input
    /// loses in it, with the paths. Exit code 0, or 2 when nothing could be negotiated.
    Lcd(LcdArgs),
    /// Import the schemas of the member this runs in (pull mode) into its namespace on the hub,
    /// with the hub credential the registration agent keeps in a member Secret. --kubeconfig (or
    /// the in-cluster service account) is the member's.
    Importer(Box<ImporterCommand>),
}

/// Flags of `flotilla-negotiator importer`.
#[derive(clap::Args, Debug)]
struct ImporterCommand {
    #[command(flatten)]
    runtime: RuntimeArgs,
    #[command(flatten)]
    importer: PullImporterArgs,
}

// The allocator every controller uses (and whose statistics its metrics report).
#[global_allocator]
static GLOBAL: flotilla_runtime::allocator::Jemalloc = flotilla_runtime::allocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Compat(args)) => Ok(compat::run(&args)),
        Some(Command::Lcd(args)) => Ok(lcd::run(&args)),
        Some(Command::Importer(command)) => {
            let ImporterCommand { runtime, importer } = *command;
            flotilla_runtime::run("negotiator-importer", runtime, move |ctx| {
                flotilla_negotiator::pull::run(ctx, importer)
            })
            .await?;
            Ok(ExitCode::SUCCESS)
        }
        None => {
            let negotiator = cli.negotiator;
            flotilla_runtime::run("negotiator", cli.runtime, move |ctx| {
                flotilla_negotiator::run(ctx, negotiator)
            })
            .await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
