//! What every Flotilla controller shares: flags, logging, the metrics and health server, leader
//! election, graceful shutdown, member clients, error categories and Events.
//!
//! A controller binary parses its flags (flattening [`RuntimeArgs`]) and hands its controllers
//! to [`run`], which connects to the hub (retrying while it is unreachable), serves `/metrics`,
//! `/healthz` and `/readyz`, waits for the leader Lease, runs the controllers while it holds the
//! Lease, and stops them on SIGTERM/SIGINT — or exits with an error when leadership is lost, so
//! that two leaders never act at once.

pub mod allocator;
pub mod cache;
pub mod cli;
pub mod error;
pub mod events;
pub mod gather;
pub mod guard;
pub mod hub;
pub mod leader;
pub mod member_client;
pub mod metrics;
pub mod pool;
pub mod reconcile;
pub mod selector;
pub mod server;
pub mod shared;
pub mod telemetry;
pub mod union;

use std::future::Future;
use std::time::Duration;

use anyhow::Context as _;
use kube::Client;
use tokio_util::sync::CancellationToken;

pub use cli::{LogFormat, RuntimeArgs};
pub use error::ErrorCategory;
pub use events::Events;
pub use leader::{LeaderElector, LeaseConfig};
pub use member_client::{MemberClient, MemberClientError, MemberClients};
pub use metrics::Metrics;
pub use server::Health;

// The tests run on the controllers' allocator too, so that what it reports can be checked.
#[cfg(test)]
#[global_allocator]
static GLOBAL: allocator::Jemalloc = allocator::Jemalloc;

/// How long stopping controllers may take before the process exits anyway.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// What a running controller gets from the runtime.
#[derive(Clone)]
pub struct Context {
    /// The hub client.
    pub client: Client,
    pub metrics: Metrics,
    /// Call [`Health::set_caches_synced`] once the controllers' watches have listed everything.
    pub health: Health,
    pub events: Events,
    /// This replica's identity (also its identity in the Lease).
    pub identity: String,
    /// Cancelled when the controllers must stop: on SIGTERM/SIGINT or when leadership is lost.
    pub shutdown: CancellationToken,
}

/// Cancels `token` on SIGTERM or SIGINT.
fn cancel_on_signals(token: CancellationToken) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    tokio::spawn(async move {
        let which = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(signal = which, "shutting down");
        token.cancel();
    });
    Ok(())
}

/// Runs the controllers of the binary `flotilla-<name>` (e.g. `name = "syncer"`) until
/// SIGTERM/SIGINT. Returns an error when start-up fails, the controllers fail, or leadership is
/// lost; the process should then exit non-zero and be restarted.
pub async fn run<F, Fut>(name: &str, args: RuntimeArgs, controllers: F) -> anyhow::Result<()>
where
    F: FnOnce(Context) -> Fut,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    args.validate().map_err(anyhow::Error::msg)?;
    telemetry::init(args.log_format, &args.log_level)?;
    let binary = format!("flotilla-{name}");
    let identity = args.identity();
    tracing::info!(controller = %binary, %identity, version = env!("CARGO_PKG_VERSION"), "starting");

    let shutdown = CancellationToken::new();
    cancel_on_signals(shutdown.clone())?;
    let metrics = Metrics::new(name).context("registering metrics")?;
    let health = Health::default();
    let server = server::serve(
        args.metrics_address,
        args.health_address,
        metrics.clone(),
        health.clone(),
        shutdown.clone(),
    )
    .await?;

    let result = run_connected(
        &binary,
        &args,
        identity,
        metrics,
        health,
        shutdown.clone(),
        controllers,
    )
    .await;
    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(2), server).await;
    match &result {
        Ok(()) => tracing::info!(controller = %binary, "stopped"),
        Err(e) => {
            tracing::error!(controller = %binary, error = format!("{e:#}"), "stopped with an error")
        }
    }
    result
}

async fn run_connected<F, Fut>(
    binary: &str,
    args: &RuntimeArgs,
    identity: String,
    metrics: Metrics,
    health: Health,
    shutdown: CancellationToken,
    controllers: F,
) -> anyhow::Result<()>
where
    F: FnOnce(Context) -> Fut,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    // The hub's configuration is kept for the Lease's own client (see LeaderElector::hold_apart).
    let Some((client, hub_config)) =
        hub::connect(args.kubeconfig.as_deref(), &health, &shutdown).await?
    else {
        return Ok(());
    };

    let mut elector = args.leader_elect.then(|| {
        LeaderElector::new(
            client.clone(),
            LeaseConfig {
                namespace: args.lease_namespace.clone(),
                name: args
                    .lease_name
                    .clone()
                    .unwrap_or_else(|| binary.to_string()),
                identity: identity.clone(),
                lease_duration: args.lease_duration,
                renew_deadline: args.lease_renew_deadline,
                retry_period: args.lease_retry_period,
            },
        )
    });
    if let Some(elector) = elector.as_mut() {
        let h = health.clone();
        if !elector
            .acquire(&shutdown, |leader, _| h.set_lease_state(leader))
            .await
        {
            return Ok(());
        }
        let c = elector.config();
        tracing::info!(
            lease = format!("{}/{}", c.namespace, c.name),
            "became the leader"
        );
    }
    health.set_lease_state(true);
    metrics.leader.set(1);

    let stop = shutdown.child_token();
    let context = Context {
        client: client.clone(),
        metrics: metrics.clone(),
        health: health.clone(),
        events: Events::new(
            client.clone(),
            &format!("flotilla.dev/{}", binary.trim_start_matches("flotilla-")),
            &identity,
        ),
        identity,
        shutdown: stop.clone(),
    };
    let mut task = tokio::spawn(controllers(context));

    let outcome: anyhow::Result<()> = match elector.take() {
        Some(leading) => {
            // Renewed on a thread of its own: see LeaderElector::hold_apart.
            let holding = shutdown.child_token();
            let held = leading.hold_apart(client, hub_config, holding.clone());
            tokio::pin!(held);
            tokio::select! {
                (leading, held) = &mut held => {
                    elector = Some(leading);
                    held.map_err(anyhow::Error::from)
                }
                done = &mut task => {
                    holding.cancel();
                    let (mut leading, _) = held.await;
                    return finish(done, &mut leading, &metrics).await;
                }
            }
        }
        None => tokio::select! {
            _ = shutdown.cancelled() => Ok(()),
            done = &mut task => return flatten(done),
        },
    };

    // Shutting down, or leadership lost: stop the controllers before anyone else may lead.
    stop.cancel();
    metrics.leader.set(0);
    let stopped = tokio::time::timeout(STOP_TIMEOUT, &mut task).await;
    if stopped.is_err() {
        tracing::warn!(timeout = ?STOP_TIMEOUT, "controllers did not stop in time");
        task.abort();
    }
    if let Some(elector) = elector.as_mut()
        && outcome.is_ok()
    {
        elector.release().await;
    }
    match stopped {
        Ok(done) => outcome.and(flatten(done)),
        Err(_) => outcome,
    }
}

/// The controllers ended on their own while leading: give the Lease up and report.
async fn finish(
    done: Result<anyhow::Result<()>, tokio::task::JoinError>,
    elector: &mut LeaderElector,
    metrics: &Metrics,
) -> anyhow::Result<()> {
    metrics.leader.set(0);
    elector.release().await;
    flatten(done)
}

fn flatten(done: Result<anyhow::Result<()>, tokio::task::JoinError>) -> anyhow::Result<()> {
    match done {
        Ok(result) => result.context("the controllers failed"),
        Err(e) if e.is_cancelled() => Ok(()),
        Err(e) => Err(anyhow::anyhow!("the controllers panicked: {e}")),
    }
}
