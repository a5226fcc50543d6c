//! The negotiator: imports member API schemas and computes one compatible schema.
//!
//! | module | does |
//! |---|---|
//! | [`importer`] | reads a member's schemas (CRDs, OpenAPI v3) and writes its APIResourceImports |
//! | [`hub_importer`] | on the hub: the importer of every push-mode member, one Cluster at a time |
//! | [`pull`] | `flotilla-negotiator importer`: the importer inside a pull-mode member |
//! | [`import_types`] | on the hub: the list of types each pull-mode member's importer imports |
//! | [`negotiation`] | NegotiatedAPIResources: LCD, enforcement, publishing, import verdicts |
//! | [`publish`] | pure: the versions a published hub CRD serves, its storage version, what it leaves out |
//! | [`cluster_status`] | each Cluster's `status.resources` summary |
//! | [`profiles`] | each WorkloadProfile's `Accepted`: its paths checked against the negotiated schema |
//! | [`verdict`] | pure: the negotiation of one type and the verdicts it gives |
//! | [`schemas`] | pure: a member's schema of one type from its OpenAPI v3 or CRD |
//! | [`types`] | pure: which types are imported |
//! | [`compat`] | `flotilla-negotiator compat`: the CRD upgrade check for CI |
//! | [`lcd`] | `flotilla-negotiator lcd`: the CRD it would publish for members' CRDs, for review |

pub mod cluster_status;
pub mod compat;
pub mod hub_importer;
pub mod import_types;
pub mod importer;
pub mod lcd;
pub mod metrics;
pub mod negotiation;
pub mod profiles;
pub mod publish;
pub mod pull;
pub mod schemas;
pub mod types;
pub mod verdict;

use std::time::Duration;

use clap::Args;
use flotilla_runtime::Context;
use flotilla_runtime::cli::parse_duration;
use flotilla_schema::Limits;

use crate::types::ResourceType;

/// Flags shared by the negotiator on the hub and the importer in a pull-mode member.
#[derive(Args, Debug, Clone)]
pub struct ImportArgs {
    /// How often every member's schemas are read again, as a safety net: a change of a member's
    /// CRDs is imported at once (one watch per member), built-in types again when the member's
    /// Kubernetes version changes.
    #[arg(
        long,
        env = "FLOTILLA_IMPORT_INTERVAL",
        default_value = "5m",
        value_parser = parse_duration,
        value_name = "DURATION"
    )]
    pub import_interval: Duration,

    /// Types to import besides the defaults (Deployments, ConfigMaps, Secrets, Services,
    /// ServiceAccounts) and those Placements select, as <apiVersion>/<Kind>, e.g. batch/v1/Job.
    /// Repeat the flag or separate with commas.
    #[arg(
        long = "extra-type",
        env = "FLOTILLA_EXTRA_TYPES",
        value_delimiter = ',',
        value_name = "APIVERSION/KIND"
    )]
    pub extra_types: Vec<ResourceType>,

    /// The deepest a schema may nest; deeper schemas are reported, not read.
    #[arg(long, default_value_t = Limits::default().max_depth, value_name = "N")]
    pub max_schema_depth: usize,

    /// The most nodes a schema may have once its $refs are expanded; larger schemas are
    /// reported, not read.
    #[arg(long, default_value_t = Limits::default().max_nodes, value_name = "N")]
    pub max_schema_nodes: usize,
}

impl ImportArgs {
    /// The bounds on the work done for one schema.
    pub fn limits(&self) -> Limits {
        Limits {
            max_depth: self.max_schema_depth,
            max_nodes: self.max_schema_nodes,
        }
    }
}

/// Flags of the negotiator on the hub.
#[derive(Args, Debug, Clone)]
pub struct NegotiatorArgs {
    #[command(flatten)]
    pub import: ImportArgs,

    /// Only import from, and negotiate over, Clusters with these labels (a label selector such
    /// as `env=prod`); empty: all Clusters.
    #[arg(
        long,
        env = "FLOTILLA_CLUSTER_SELECTOR",
        default_value = "",
        value_name = "SELECTOR",
        value_parser = flotilla_runtime::selector::checked
    )]
    pub cluster_selector: String,

    /// Where push-mode members' kubeconfig Secrets are.
    #[command(flatten)]
    pub member_secrets: flotilla_runtime::cli::MemberReaderArgs,

    /// Import push-mode members' schemas from the hub. Turn off to run only the negotiation
    /// (every member then runs `flotilla-negotiator importer`).
    #[arg(
        long,
        env = "FLOTILLA_IMPORT_PUSH_MEMBERS",
        default_value_t = true,
        action = clap::ArgAction::Set,
        value_name = "BOOL"
    )]
    pub import_push_members: bool,

    /// How many members are imported, and how many types negotiated, at the same time.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub concurrency: u16,
}

/// Runs the negotiator's controllers until `ctx.shutdown`: the importer of push-mode members,
/// the lists of types of pull-mode members' importers, the negotiation of every imported type,
/// the Clusters' compatibility summaries, and the check of every WorkloadProfile.
pub async fn run(ctx: Context, args: NegotiatorArgs) -> anyhow::Result<()> {
    let metrics =
        metrics::NegotiatorMetrics::register(ctx.metrics.registry(), ctx.metrics.prefix())?;
    let shared = negotiation::Shared::start(&ctx, &args);
    let importer = args.import_push_members.then(|| {
        tokio::spawn(hub_importer::run(
            ctx.clone(),
            args.clone(),
            shared.clone(),
            metrics.clone(),
        ))
    });
    let import_types = tokio::spawn(import_types::run(ctx.clone(), args.clone(), shared.clone()));
    let negotiation = tokio::spawn(negotiation::run(
        ctx.clone(),
        args.clone(),
        shared.clone(),
        metrics.clone(),
    ));
    let status = tokio::spawn(cluster_status::run(
        ctx.clone(),
        args,
        shared.clone(),
        metrics,
    ));
    let profiles = tokio::spawn(profiles::run(ctx.clone(), shared.negotiations.clone()));
    shared.mark_ready_when_synced(&ctx).await;
    let mut results = vec![
        import_types.await,
        negotiation.await,
        status.await,
        profiles.await,
    ];
    if let Some(importer) = importer {
        results.push(importer.await);
    }
    for r in results {
        r.map_err(|e| anyhow::anyhow!("a negotiator task panicked: {e}"))??;
    }
    Ok(())
}
