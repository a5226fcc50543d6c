//! `flotilla-negotiator`: flotilla's negotiator: one compatible API across members that disagree.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use flotilla_negotiator::compat::{self, CompatArgs};
use flotilla_runtime::RuntimeArgs;

/// Flotilla's negotiator: one compatible API across members that disagree.
///
/// Imports each member's API schemas into APIResourceImports, computes the least common denominator schema of every resource type, publishes it on the hub or enforces the hub's own schema, and reports for every member and type whether it is compatible, with the field paths that differ. Runs on the hub.
///
/// `flotilla-negotiator compat OLD.yaml NEW.yaml` checks a CRD change for CI instead.
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
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check that a new version of CRDs accepts everything the old one accepts: prints every
    /// change with its JSON path, kind and verdict. Exit code 0: safe; 1: breaking (or
    /// narrowing); 2: a change that cannot be decided, or unreadable input.
    Compat(CompatArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Compat(args)) => Ok(compat::run(&args)),
        None => {
            flotilla_runtime::run("negotiator", cli.runtime, flotilla_negotiator::run).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
