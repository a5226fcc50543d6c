//! Command-line flags shared by every Flotilla controller.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, ValueEnum};

/// Flags every controller binary accepts. Flatten it into the binary's own `clap` parser.
#[derive(Args, Debug, Clone)]
pub struct RuntimeArgs {
    /// Kubeconfig of the hub cluster. Without it the controller uses its in-cluster service
    /// account, then $KUBECONFIG, then ~/.kube/config.
    #[arg(long, env = "FLOTILLA_KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// Address of the HTTP server that serves Prometheus metrics on /metrics.
    #[arg(
        long,
        env = "FLOTILLA_METRICS_ADDRESS",
        default_value = "0.0.0.0:8080",
        value_name = "HOST:PORT"
    )]
    pub metrics_address: SocketAddr,

    /// Address of the HTTP server that serves /healthz (the process is alive) and /readyz (the
    /// lease state is known and, on the leader, the caches are synced). May equal
    /// --metrics-address to serve everything on one port.
    #[arg(
        long,
        env = "FLOTILLA_HEALTH_ADDRESS",
        default_value = "0.0.0.0:8081",
        value_name = "HOST:PORT"
    )]
    pub health_address: SocketAddr,

    /// Run only while holding a Lease on the hub, so that several replicas can run and exactly
    /// one of them is active. Turn off only when running a single replica.
    #[arg(
        long,
        env = "FLOTILLA_LEADER_ELECT",
        default_value_t = true,
        action = ArgAction::Set,
        value_name = "BOOL"
    )]
    pub leader_elect: bool,

    /// Namespace of the leader-election Lease (in a Pod: set POD_NAMESPACE).
    #[arg(
        long,
        env = "POD_NAMESPACE",
        default_value = "flotilla-system",
        value_name = "NAMESPACE"
    )]
    pub lease_namespace: String,

    /// Name of the leader-election Lease. Default: the controller's name, e.g. flotilla-syncer.
    #[arg(long, env = "FLOTILLA_LEASE_NAME", value_name = "NAME")]
    pub lease_name: Option<String>,

    /// How long a leader's Lease stays valid without renewal; a standby replica takes over at
    /// most this long after the leader died.
    #[arg(long, default_value = "15s", value_parser = parse_duration, value_name = "DURATION")]
    pub lease_duration: Duration,

    /// A leader that could not renew its Lease for this long stops, so two leaders never act at
    /// once. Must be shorter than --lease-duration.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub lease_renew_deadline: Duration,

    /// How often the Lease is renewed by the leader and tried by standby replicas.
    #[arg(long, default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    pub lease_retry_period: Duration,

    /// This replica's identity in the Lease. Default: $POD_NAME, else the host name and process id.
    #[arg(long, env = "POD_NAME", value_name = "NAME")]
    pub identity: Option<String>,

    /// Log format: text for people, json for log collectors.
    #[arg(long, env = "FLOTILLA_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log filter: a level (error, warn, info, debug, trace) or tracing directives such as
    /// `info,kube=debug`.
    #[arg(
        long,
        env = "FLOTILLA_LOG_LEVEL",
        default_value = "info",
        value_name = "FILTER"
    )]
    pub log_level: String,
}

/// How logs are written to stderr.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl RuntimeArgs {
    /// Checks relations between flags that clap cannot express.
    pub fn validate(&self) -> Result<(), String> {
        if self.lease_renew_deadline >= self.lease_duration {
            return Err(format!(
                "--lease-renew-deadline ({}) must be shorter than --lease-duration ({})",
                humantime::format_duration(self.lease_renew_deadline),
                humantime::format_duration(self.lease_duration)
            ));
        }
        if self.lease_retry_period >= self.lease_renew_deadline {
            return Err(format!(
                "--lease-retry-period ({}) must be shorter than --lease-renew-deadline ({})",
                humantime::format_duration(self.lease_retry_period),
                humantime::format_duration(self.lease_renew_deadline)
            ));
        }
        if self.lease_duration < Duration::from_secs(1) {
            return Err("--lease-duration must be at least 1s".into());
        }
        Ok(())
    }

    /// The identity to put in the Lease.
    pub fn identity(&self) -> String {
        if let Some(id) = self.identity.as_ref().filter(|s| !s.is_empty()) {
            return id.clone();
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "unknown-host".into());
        format!("{host}_{}", std::process::id())
    }
}

/// Parses durations such as `15s`, `500ms`, `2m`, `1h 30m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("invalid duration {s:?}: {e} (examples: 15s, 500ms, 2m)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        runtime: RuntimeArgs,
    }

    fn parse(args: &[&str]) -> Result<RuntimeArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("test").chain(args.iter().copied())).map(|c| c.runtime)
    }

    #[test]
    fn defaults_are_sane() {
        let a = parse(&[]).expect("defaults parse");
        assert!(a.leader_elect);
        assert_eq!(a.lease_duration, Duration::from_secs(15));
        assert_eq!(a.log_format, LogFormat::Text);
        a.validate().expect("defaults are valid");
    }

    #[test]
    fn leader_election_can_be_turned_off() {
        let a = parse(&["--leader-elect=false"]).expect("parses");
        assert!(!a.leader_elect);
    }

    #[test]
    fn durations_parse_and_relations_are_checked() {
        let a = parse(&["--lease-duration", "4s", "--lease-renew-deadline", "5s"]).expect("parses");
        let err = a.validate().expect_err("renew deadline >= duration");
        assert!(err.contains("--lease-renew-deadline"), "{err}");
        assert!(parse(&["--lease-duration", "fast"]).is_err());
    }

    #[test]
    fn explicit_identity_wins() {
        let a = parse(&["--identity", "pod-a"]).expect("parses");
        assert_eq!(a.identity(), "pod-a");
    }
}

/// Where the controllers that only read members (registration, the negotiator) find the
/// kubeconfig Secrets of push-mode members. Flatten it into their flags.
#[derive(Args, Debug, Clone)]
pub struct MemberReaderArgs {
    /// Namespace of the writable kubeconfig Secrets (a Cluster's `spec.kubeconfigSecretRef`)
    /// whose reference names no namespace (in a Pod: set POD_NAMESPACE).
    #[arg(
        long,
        env = "POD_NAMESPACE",
        default_value = flotilla_api::names::SYSTEM_NAMESPACE,
        value_name = "NAMESPACE"
    )]
    pub kubeconfig_secret_namespace: String,

    /// Namespace of the read-only kubeconfig Secrets (`spec.readOnlyKubeconfigSecretRef`) whose
    /// reference names no namespace. Default: --kubeconfig-secret-namespace. The chart gives them
    /// a namespace of their own, `<release namespace>-readers`, the only one whose Secrets
    /// registration and the negotiator may read.
    #[arg(long, value_name = "NAMESPACE")]
    pub reader_kubeconfig_secret_namespace: Option<String>,

    /// Read a push-mode member that has no read-only kubeconfig with its writable one. Without
    /// it such a Cluster is `Ready=False, reason=ReadOnlyKubeconfigRequired` and is not
    /// imported: only the syncer holds credentials that write to members. Give it (and the
    /// right to read the writable kubeconfigs' Secrets) only where that is accepted: the chart's
    /// `memberCredentials.readWritableKubeconfigs`.
    #[arg(long)]
    pub read_writable_kubeconfigs: bool,
}

impl MemberReaderArgs {
    /// What [`flotilla_api::cluster::ReaderSecrets`] these flags say.
    pub fn reader_secrets(&self) -> flotilla_api::cluster::ReaderSecrets<'_> {
        flotilla_api::cluster::ReaderSecrets {
            read_only_namespace: self
                .reader_kubeconfig_secret_namespace
                .as_deref()
                .unwrap_or(&self.kubeconfig_secret_namespace),
            writable_namespace: &self.kubeconfig_secret_namespace,
            writable_allowed: self.read_writable_kubeconfigs,
        }
    }
}
