//! `kubectl-flotilla`: a kubectl plugin (`kubectl flotilla ...` once the binary is on the PATH).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use flotilla_cli::join::{self, JoinOptions, Reader};
use flotilla_cli::{kubeconfig, reader};
use flotilla_runtime::member_client::Transport;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// The command line of a Flotilla fleet, as a kubectl plugin.
///
/// Put the binary on the PATH and call it as `kubectl flotilla ...` (or run `kubectl-flotilla`
/// directly). It talks to the hub through the usual kubeconfig: --kubeconfig, else $KUBECONFIG,
/// else ~/.kube/config.
#[derive(Parser, Debug)]
#[command(name = "kubectl flotilla", bin_name = "kubectl flotilla", version)]
struct Cli {
    #[command(flatten)]
    hub: HubArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Debug)]
struct HubArgs {
    /// The hub's kubeconfig (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The context of the hub's kubeconfig to use (default: its current context).
    #[arg(long, global = true, value_name = "NAME")]
    context: Option<String>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Register a member cluster with the hub in push mode (the hub connects to the member).
    ///
    /// Does what docs/registration.md describes step by step: stores the member's kubeconfig in
    /// Secret <NAME>-kubeconfig of the release namespace (the syncer applies Works with it),
    /// applies the read-only identity of deploy/member/reader.yaml in the member and stores a
    /// kubeconfig with a token of it in Secret <NAME>-reader of the readers' namespace
    /// (registration probes and the negotiator reads schemas with it), and applies the Cluster.
    ///
    /// Nothing is written before everything that can be checked is: the member kubeconfig is
    /// checked as the controllers check it (credentials inline; files it names are read in; exec
    /// plugins are refused), the hub's namespaces must exist, the hub validates the Cluster in a
    /// dry run, and the member must answer. Joining again is safe: it renews the reader's token
    /// and changes nothing else. Credentials are never printed.
    ///
    /// Examples:
    ///   kubectl flotilla join member1 --member-kubeconfig member1.kubeconfig --label region=eu-west
    ///   kubectl flotilla join member2 --member-kubeconfig ~/.kube/config --member-context prod-us \
    ///     --wait --timeout 2m
    #[command(verbatim_doc_comment)]
    Join(JoinArgs),
}

#[derive(Args, Debug)]
struct JoinArgs {
    /// The Cluster's name on the hub (a DNS label of at most 46 characters).
    name: String,
    /// The member's kubeconfig, with rights to write what Placements place (the syncer's).
    #[arg(long, value_name = "FILE")]
    member_kubeconfig: PathBuf,
    /// The context of the member kubeconfig (default: its current context).
    #[arg(long, value_name = "NAME")]
    member_context: Option<String>,
    /// The release namespace on the hub, where the syncer reads member kubeconfigs.
    #[arg(short, long, default_value = "flotilla-system")]
    namespace: String,
    /// The hub namespace of the read-only kubeconfigs (default: <NAMESPACE>-readers, the chart's
    /// memberCredentials.readersNamespace).
    #[arg(long, value_name = "NAMESPACE")]
    readers_namespace: Option<String>,
    /// The member namespace of the read-only identity's ServiceAccount.
    #[arg(long, value_name = "NAMESPACE", default_value = reader::DEFAULT_NAMESPACE)]
    reader_namespace: String,
    /// How long the read-only identity's token lives; join again before then to renew it.
    #[arg(long, value_name = "DURATION", default_value = "720h", value_parser = humantime::parse_duration)]
    reader_token_lifetime: Duration,
    /// Make no read-only identity: registration and the negotiator read with the member
    /// kubeconfig, which the hub allows only with memberCredentials.readWritableKubeconfigs.
    #[arg(long, conflicts_with_all = ["readers_namespace", "reader_namespace"])]
    read_writable: bool,
    /// The syncer's kubeconfig Secret (default: <NAME>-kubeconfig).
    #[arg(long, value_name = "NAME")]
    secret_name: Option<String>,
    /// The read-only kubeconfig Secret (default: <NAME>-reader).
    #[arg(long, value_name = "NAME", conflicts_with = "read_writable")]
    reader_secret_name: Option<String>,
    /// A label of the Cluster, KEY=VALUE (repeatable); Placements select Clusters by label.
    #[arg(short, long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    labels: Vec<(String, String)>,
    /// Accept a member reached without verified TLS (insecure-skip-tls-verify, http://); sets
    /// the Cluster's spec.allowInsecureTransport. For throwaway test clusters only.
    #[arg(long)]
    allow_insecure_transport: bool,
    /// Wait until the Cluster is Ready.
    #[arg(long)]
    wait: bool,
    /// How long --wait waits.
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = humantime::parse_duration, requires = "wait")]
    timeout: Duration,
}

/// `KEY=VALUE`.
fn parse_label(s: &str) -> Result<(String, String), String> {
    let (key, value) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))?;
    if key.is_empty() {
        return Err(format!("{s:?} has an empty key"));
    }
    Ok((key.to_string(), value.to_string()))
}

impl JoinArgs {
    fn options(&self) -> JoinOptions {
        let mut options = JoinOptions::new(&self.name, &self.namespace);
        options.secret.clone_from(&self.secret_name);
        options.labels = self.labels.iter().cloned().collect::<BTreeMap<_, _>>();
        options.allow_insecure_transport = self.allow_insecure_transport;
        options.reader = if self.read_writable {
            Reader::Writable
        } else {
            Reader::Separate {
                hub_namespace: self
                    .readers_namespace
                    .clone()
                    .unwrap_or_else(|| format!("{}-readers", self.namespace)),
                member_namespace: self.reader_namespace.clone(),
                token_lifetime: self.reader_token_lifetime,
                secret: self.reader_secret_name.clone(),
            }
        };
        options
    }
}

async fn hub_client(args: &HubArgs) -> anyhow::Result<Client> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading the hub kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &options).await
        }
        None => Config::from_kubeconfig(&options).await,
    }
    .context("finding the hub (--kubeconfig, $KUBECONFIG or ~/.kube/config)")?;
    Client::try_from(config).context("building the hub's client")
}

async fn run_join(hub: &HubArgs, args: &JoinArgs) -> anyhow::Result<()> {
    let transport = Transport::of(args.allow_insecure_transport);
    let member = kubeconfig::for_member(
        &args.member_kubeconfig,
        args.member_context.as_deref(),
        transport,
    )?;
    let client = hub_client(hub).await?;
    let joined = join::join(&client, &member, &args.options()).await?;
    let (namespace, name) = &joined.secret;
    println!(
        "secret/{name} stored in {namespace} (the syncer's kubeconfig of {})",
        joined.server
    );
    if let Some(((namespace, name), lifetime)) = &joined.reader {
        println!(
            "secret/{name} stored in {namespace} (read-only, token valid {}; join again to renew)",
            humantime::format_duration(*lifetime)
        );
    }
    println!("cluster.flotilla.dev/{} joined (Push)", args.name);
    if args.wait {
        join::wait_ready(&client, &args.name, args.timeout).await?;
        println!("cluster.flotilla.dev/{} is Ready", args.name);
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Join(args) => run_join(&cli.hub, args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
