//! The connection to the hub.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio_util::sync::CancellationToken;

const FIRST_RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY: Duration = Duration::from_secs(30);
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The hub's client configuration: from `kubeconfig` if given, else inferred (in-cluster
/// service account, $KUBECONFIG, ~/.kube/config).
pub async fn config(kubeconfig: Option<&Path>) -> anyhow::Result<Config> {
    match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading the hub kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("using the hub kubeconfig {}", path.display()))
        }
        None => Config::infer()
            .await
            .context("finding the hub: no --kubeconfig, not in a Pod, no usable ~/.kube/config"),
    }
}

/// Connects to the hub and waits until it answers `/version`, retrying with exponential backoff
/// (1 s doubling to 30 s) and saying so on every failure, in the log and in `/readyz` (through
/// `health`). Returns the client and the configuration it was built from; `None` when
/// `shutdown` came first.
pub async fn connect(
    kubeconfig: Option<&Path>,
    health: &crate::server::Health,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<(Client, Config)>> {
    let config = config(kubeconfig).await?;
    let url = config.cluster_url.to_string();
    let client = crate::pool::client(&config, None, crate::pool::Retries::Patient)
        .context("building the hub client")?;
    let mut delay = FIRST_RETRY;
    loop {
        let error = match tokio::time::timeout(PROBE_TIMEOUT, client.apiserver_version()).await {
            Ok(Ok(version)) => {
                health.set_hub_unreachable(None);
                tracing::info!(hub = %url, version = %version.git_version, "connected to the hub");
                return Ok(Some((client, config)));
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {PROBE_TIMEOUT:?}"),
        };
        tracing::warn!(hub = %url, %error, retry_in = ?delay, "the hub is unreachable; retrying");
        health.set_hub_unreachable(Some(format!("{url}: {error}")));
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(None),
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(MAX_RETRY);
    }
}
