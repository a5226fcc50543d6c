//! Controller binaries run as real processes against the local hub.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The path of a controller binary built by `cargo build --workspace --bins` (which
/// `hack/test.sh` runs), next to the test binary's own target directory.
pub fn controller_binary(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the test binary")?;
    // target/<profile>/deps/e2e-<hash> -> target/<profile>/<name>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| anyhow!("unexpected test binary path {}", exe.display()))?;
    let path = dir.join(name);
    if !path.is_file() {
        bail!(
            "{} does not exist: build the controllers first with `cargo build --workspace --bins` \
             (hack/test.sh does)",
            path.display()
        );
    }
    Ok(path)
}

/// The first port [`free_port`] hands out: above every port `hack/clusters.sh` gives the
/// environments of the quick start, the tests, the benchmarks and a second environment (port
/// bases 16443–19443, up to base + 7368).
const FIRST_LISTEN_PORT: u16 = 27_000;

/// A free TCP port on 127.0.0.1 for a process the test starts (free when asked; the caller
/// binds it soon after). Taken from below the kernel's ephemeral ports, where every outgoing
/// connection of every process gets its local port — a port found free there was taken by a
/// controller's connection to an apiserver before the process that was given it could bind it
/// ("Address already in use") — and never handed out twice by this test process. The kernel's
/// choice when that range is used up.
pub fn free_port() -> Result<u16> {
    static NEXT: AtomicU16 = AtomicU16::new(FIRST_LISTEN_PORT);
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    loop {
        let port = NEXT.fetch_add(1, Ordering::Relaxed);
        if port < FIRST_LISTEN_PORT || port >= ephemeral {
            break;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// A controller process whose output goes to a log file; killed when dropped.
pub struct ControllerProcess {
    child: tokio::process::Child,
    /// Address of its HTTP server (metrics and health on one port).
    pub http: SocketAddr,
    pub log_path: PathBuf,
}

impl ControllerProcess {
    /// Starts `binary` (e.g. `flotilla-syncer`) with `args`, serving metrics and health on a free
    /// port of 127.0.0.1.
    pub fn start(binary: &str, args: &[&str]) -> Result<Self> {
        Self::start_subcommand(binary, &[], args)
    }

    /// Like [`ControllerProcess::start`], for a subcommand such as `flotilla-registration agent`:
    /// `subcommand` goes first, since a subcommand's flags follow it.
    ///
    /// Refuses to start a controller with an admin kubeconfig of any cluster of the environment:
    /// the tests run every controller with the identity the chart (or, in a member, the member
    /// chart `charts/flotilla-agent`) gives it, so that a missing right fails a test, not a user.
    pub fn start_subcommand(binary: &str, subcommand: &[&str], args: &[&str]) -> Result<Self> {
        refuse_admin_credentials(binary, args)?;
        let path = controller_binary(binary)?;
        let port = free_port()?;
        let http: SocketAddr = ([127, 0, 0, 1], port).into();
        let log_path = crate::scratch_dir().join(format!(
            "flotilla-e2e-{binary}-{}.log",
            crate::random_suffix()
        ));
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let child = tokio::process::Command::new(&path)
            .args(subcommand)
            .args(["--metrics-address", &http.to_string()])
            .args(["--health-address", &http.to_string()])
            .args(args)
            .env("FLOTILLA_LOG_LEVEL", "info")
            // Only the credentials named in `args`.
            .env_remove("KUBECONFIG")
            .env_remove("FLOTILLA_KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", path.display()))?;
        Ok(Self {
            child,
            http,
            log_path,
        })
    }

    /// What the process wrote so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    pub fn pid(&self) -> Result<u32> {
        self.child
            .id()
            .ok_or_else(|| anyhow!("the process already exited"))
    }

    /// Sends a signal (`TERM`, `KILL`, ...) with kill(1).
    pub fn signal(&self, signal: &str) -> Result<()> {
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid()?.to_string())
            .status()
            .context("running kill")?;
        if !status.success() {
            bail!("kill -{signal} failed: {status}");
        }
        Ok(())
    }

    /// Waits for the process to exit.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => Ok(status?),
            Err(_) => bail!(
                "the process did not exit within {timeout:?}; its log:\n{}",
                self.log()
            ),
        }
    }

    /// `GET path` on the process's HTTP server: status code and body.
    pub async fn get(&self, path: &str) -> Result<(u16, String)> {
        http_get(self.http, path).await
    }
}

/// The admin tokens of every cluster of the environment (the hub, the members and any
/// throw-away member): `<run dir>/clusters/<name>/admin.token`.
fn admin_tokens() -> Vec<(String, String)> {
    let Some(run_dir) = std::env::var_os(crate::RUN_DIR) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(PathBuf::from(run_dir).join("clusters")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let token = std::fs::read_to_string(e.path().join("admin.token")).ok()?;
            let token = token.trim().to_string();
            (!token.is_empty()).then(|| (e.file_name().to_string_lossy().into_owned(), token))
        })
        .collect()
}

/// Fails when a file that `args` names (`--flag PATH` or `--flag=PATH`) holds an admin token of
/// a cluster of the environment.
fn refuse_admin_credentials(binary: &str, args: &[&str]) -> Result<()> {
    let admins = admin_tokens();
    for arg in args {
        let path = Path::new(arg.split_once('=').map_or(*arg, |(_, v)| v));
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        if let Some((cluster, _)) = admins.iter().find(|(_, t)| text.contains(t.as_str())) {
            bail!(
                "{binary} would run with the admin credentials of {cluster} ({}): run it with the \
                 identity the chart gives it (flotilla_e2e::chart::ChartIdentities) or, in a \
                 member, the member chart's identity (flotilla_e2e::bootstrap::MemberIdentity)",
                path.display()
            );
        }
    }
    Ok(())
}

/// A minimal HTTP/1.1 GET, enough for /metrics, /healthz and /readyz.
pub async fn http_get(address: SocketAddr, path: &str) -> Result<(u16, String)> {
    let exchange = async {
        let mut stream = TcpStream::connect(address).await?;
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&response).into_owned())
    };
    let response = tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .map_err(|_| anyhow!("GET {path} on {address}: no answer within 5s"))?
        .with_context(|| format!("GET {path} on {address}"))?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("GET {path} on {address}: malformed response {response:?}"))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// The value of an unlabelled metric in Prometheus text, e.g. `flotilla_syncer_leader`.
pub fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::metric_value;

    #[test]
    fn reads_unlabelled_metrics() {
        let text = "# HELP x_leader a\n# TYPE x_leader gauge\nx_leader 1\nx_leader_other 5\n";
        assert_eq!(metric_value(text, "x_leader"), Some(1.0));
        assert_eq!(metric_value(text, "x_missing"), None);
    }
}
