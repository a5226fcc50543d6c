//! Support library for Flotilla's end-to-end tests.
//!
//! The tests run against the real local environment started by `hack/clusters.sh` (a hub and
//! member clusters made of real kube-apiservers on one etcd). `hack/test.sh` brings it up and
//! exports where to find it:
//!
//! | variable | meaning |
//! |---|---|
//! | `FLOTILLA_HUB_KUBECONFIG` | admin kubeconfig of the hub |
//! | `FLOTILLA_HUB_USER_KUBECONFIG` | kubeconfig of a non-admin user of the hub (ClusterRole `view`) |
//! | `FLOTILLA_MEMBER_KUBECONFIGS` | `name=path,...`, admin kubeconfigs of the members |
//! | `FLOTILLA_MEMBER_USER_KUBECONFIGS` | `name=path,...`, non-admin kubeconfigs of the members |
//! | `FLOTILLA_RUN_DIR` | the environment's run directory, for [`Environment::clusters_sh`] |
//!
//! Tests share one environment and run in parallel, so each works in its own random namespace
//! ([`TestNamespace`]) and changes shared clusters only in ways other tests cannot notice. A test
//! that breaks a cluster on purpose adds a throw-away member first ([`ScratchMember`]).
//!
//! Controllers run on the product path: with the ServiceAccounts, RBAC, admission policies and
//! flags the chart renders for a release of the test's own ([`chart::ChartIdentities`]), and in a
//! member with the identities of the member chart `charts/flotilla-agent`
//! ([`bootstrap::MemberIdentity`]).
//! [`process::ControllerProcess`] refuses to start one with an admin kubeconfig of any cluster of
//! the environment. The tests themselves act as the admin and the users.
//!
//! A test of the syncer or the splitter starts a [`fleet::Fleet`]: push-mode members registered
//! under Clusters labelled for the test alone, served by a registration controller, a syncer and
//! a splitter of its own (`Fleet::builder`, or `Fleet::syncer_only` for one member and no
//! splitter).

use std::collections::BTreeMap;
use std::fmt::Display;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

pub mod access;
pub mod api;
pub mod bootstrap;
pub mod chart;
pub mod clusters;
pub mod fleet;
pub mod process;

pub const HUB_KUBECONFIG: &str = "FLOTILLA_HUB_KUBECONFIG";
pub const HUB_USER_KUBECONFIG: &str = "FLOTILLA_HUB_USER_KUBECONFIG";
pub const MEMBER_KUBECONFIGS: &str = "FLOTILLA_MEMBER_KUBECONFIGS";
pub const MEMBER_USER_KUBECONFIGS: &str = "FLOTILLA_MEMBER_USER_KUBECONFIGS";
pub const RUN_DIR: &str = "FLOTILLA_RUN_DIR";

/// Label put on every namespace a test creates, so leftovers can be found and removed.
pub const TEST_NAMESPACE_LABEL: &str = "e2e.flotilla.dev/test";

/// One cluster of the environment: its name and kubeconfigs.
#[derive(Clone, Debug)]
pub struct ClusterInfo {
    pub name: String,
    pub kubeconfig: PathBuf,
    pub user_kubeconfig: Option<PathBuf>,
}

impl ClusterInfo {
    /// A client with the cluster's admin credentials.
    pub async fn client(&self) -> Result<Client> {
        client_from_kubeconfig(&self.kubeconfig).await
    }

    /// A client with the credentials of the non-admin user (ClusterRole `view` only).
    pub async fn user_client(&self) -> Result<Client> {
        let path = self.user_kubeconfig.as_ref().ok_or_else(|| {
            anyhow!(
                "cluster {} has no non-admin kubeconfig in the environment",
                self.name
            )
        })?;
        client_from_kubeconfig(path).await
    }

    /// The kubeconfig parsed, for tests that take it apart (server URL, token, CA).
    pub fn read_kubeconfig(&self) -> Result<Kubeconfig> {
        Kubeconfig::read_from(&self.kubeconfig)
            .with_context(|| format!("reading kubeconfig {}", self.kubeconfig.display()))
    }

    /// The PEM of the CA the cluster's kubeconfig trusts: the cluster's own serving CA.
    pub fn serving_ca(&self) -> Result<String> {
        use base64::Engine as _;
        let data = self
            .read_kubeconfig()?
            .clusters
            .into_iter()
            .find_map(|c| c.cluster.and_then(|c| c.certificate_authority_data))
            .ok_or_else(|| {
                anyhow!(
                    "no certificate-authority-data in {}'s kubeconfig",
                    self.name
                )
            })?;
        let pem = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .with_context(|| format!("decoding {}'s certificate-authority-data", self.name))?;
        String::from_utf8(pem).with_context(|| format!("{}'s CA is not PEM text", self.name))
    }

    /// The Kubernetes version the cluster's apiserver reports, e.g. `v1.34.4`.
    pub async fn version(&self) -> Result<String> {
        Ok(self.client().await?.apiserver_version().await?.git_version)
    }

    /// The files of the cluster in the environment's run directory (its PKI and tokens), for
    /// tests that check what no cluster may share.
    pub fn run_dir_files(&self) -> Result<PathBuf> {
        let run_dir = std::env::var_os(RUN_DIR).ok_or_else(|| anyhow!("{RUN_DIR} is not set"))?;
        Ok(PathBuf::from(run_dir).join("clusters").join(&self.name))
    }
}

/// The environment started by `hack/clusters.sh`, as described by the exported variables.
#[derive(Clone, Debug)]
pub struct Environment {
    pub hub: ClusterInfo,
    pub members: Vec<ClusterInfo>,
    pub run_dir: Option<PathBuf>,
}

impl Environment {
    /// Reads the environment from the variables `hack/clusters.sh env` prints.
    pub fn from_env() -> Result<Self> {
        let hub = std::env::var(HUB_KUBECONFIG).map_err(|_| {
            anyhow!(
                "{HUB_KUBECONFIG} is not set: run the end-to-end tests with hack/test.sh, or start the \
                 environment with `hack/clusters.sh up` and `eval \"$(hack/clusters.sh env)\"` first"
            )
        })?;
        let members = parse_named_paths(&std::env::var(MEMBER_KUBECONFIGS).unwrap_or_default())
            .with_context(|| format!("parsing {MEMBER_KUBECONFIGS}"))?;
        let user_members =
            parse_named_paths(&std::env::var(MEMBER_USER_KUBECONFIGS).unwrap_or_default())
                .with_context(|| format!("parsing {MEMBER_USER_KUBECONFIGS}"))?;
        let user_members: BTreeMap<_, _> = user_members.into_iter().collect();
        Ok(Self {
            hub: ClusterInfo {
                name: "hub".into(),
                kubeconfig: hub.into(),
                user_kubeconfig: std::env::var_os(HUB_USER_KUBECONFIG).map(PathBuf::from),
            },
            members: members
                .into_iter()
                .map(|(name, kubeconfig)| ClusterInfo {
                    user_kubeconfig: user_members.get(&name).cloned(),
                    name,
                    kubeconfig,
                })
                .collect(),
            run_dir: std::env::var_os(RUN_DIR).map(PathBuf::from),
        })
    }

    /// The environment, or the test fails with a message that says how to provide it.
    pub fn get() -> Self {
        match Self::from_env() {
            Ok(env) => env,
            Err(e) => panic!("{e:#}"),
        }
    }

    pub fn member(&self, name: &str) -> Result<&ClusterInfo> {
        self.members
            .iter()
            .find(|m| m.name == name)
            .ok_or_else(|| anyhow!("no member named {name} in {MEMBER_KUBECONFIGS}"))
    }

    /// At least `n` members, or an error saying how many there are.
    pub fn require_members(&self, n: usize) -> Result<&[ClusterInfo]> {
        if self.members.len() < n {
            bail!(
                "this test needs at least {n} members, the environment has {} ({MEMBER_KUBECONFIGS})",
                self.members.len()
            );
        }
        Ok(&self.members)
    }

    /// Hub and members, hub first.
    pub fn all_clusters(&self) -> impl Iterator<Item = &ClusterInfo> {
        std::iter::once(&self.hub).chain(self.members.iter())
    }

    /// Runs `hack/clusters.sh` on this environment's run directory and returns its stdout.
    pub async fn clusters_sh(&self, args: &[&str]) -> Result<String> {
        let run_dir = self
            .run_dir
            .as_ref()
            .ok_or_else(|| anyhow!("{RUN_DIR} is not set"))?;
        let script = repo_root().join("hack/clusters.sh");
        let out = tokio::process::Command::new("bash")
            .arg(&script)
            .arg("--run-dir")
            .arg(run_dir)
            .args(args)
            .output()
            .await
            .with_context(|| format!("running {}", script.display()))?;
        if !out.status.success() {
            bail!(
                "hack/clusters.sh {} failed ({}):\n{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// Where tests keep their scratch files (controller logs, generated kubeconfigs):
/// `$FLOTILLA_RUN_DIR/e2e`, so that `hack/clusters.sh down` removes them with the environment and
/// `hack/test.sh` keeps them with the component logs when a test fails.
pub fn scratch_dir() -> PathBuf {
    let dir = std::env::var_os(RUN_DIR)
        .map(|d| PathBuf::from(d).join("e2e"))
        .unwrap_or_else(|| std::env::temp_dir().join("flotilla-e2e"));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("warning: cannot create {}: {e}", dir.display());
    }
    dir
}

/// The repository root (the e2e crate lives in `tests/e2e`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Parses `name=path,name=path`.
pub fn parse_named_paths(s: &str) -> Result<Vec<(String, PathBuf)>> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (name, path) = pair
                .split_once('=')
                .ok_or_else(|| anyhow!("expected name=path, got {pair:?}"))?;
            if name.is_empty() || path.is_empty() {
                bail!("expected name=path, got {pair:?}");
            }
            Ok((name.to_string(), PathBuf::from(path)))
        })
        .collect()
}

/// Builds a client from a kubeconfig file.
pub async fn client_from_kubeconfig(path: &Path) -> Result<Client> {
    let kubeconfig = Kubeconfig::read_from(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    client_from(kubeconfig).await
}

/// Builds a client from a parsed kubeconfig (its current context).
pub async fn client_from(kubeconfig: Kubeconfig) -> Result<Client> {
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .context("building client configuration from kubeconfig")?;
    Client::try_from(config).context("building client")
}

/// A Kubernetes version such as `v1.34.4` as numbers, for ordering versions.
pub fn parse_version(version: &str) -> Result<(u32, u32, u32)> {
    let numbers: Vec<u32> = version
        .trim_start_matches('v')
        .split(['.', '-', '+'])
        .take(3)
        .map(str::parse)
        .collect::<std::result::Result<_, _>>()
        .with_context(|| format!("{version:?} is not a Kubernetes version"))?;
    match numbers[..] {
        [major, minor, patch] => Ok((major, minor, patch)),
        _ => bail!("{version:?} is not a Kubernetes version"),
    }
}

/// A random lower-case suffix for names of test objects.
pub fn random_suffix() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..6)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

/// A namespace of the same random name in a set of clusters, deleted from all of them when the
/// value is dropped — also when the test panics.
pub struct TestNamespace {
    name: String,
    kubeconfigs: Vec<PathBuf>,
}

impl TestNamespace {
    /// Creates `e2e-<prefix>-<random>` in every given cluster.
    pub async fn create(prefix: &str, clusters: &[&ClusterInfo]) -> Result<Self> {
        Self::create_in(prefix, clusters, clusters, BTreeMap::new()).await
    }

    /// Creates `e2e-<prefix>-<random>` with `labels` in `clusters`, and deletes it from those
    /// and from `also_delete_from` (where Flotilla creates it) when dropped.
    pub async fn create_in(
        prefix: &str,
        clusters: &[&ClusterInfo],
        also_delete_from: &[&ClusterInfo],
        mut labels: BTreeMap<String, String>,
    ) -> Result<Self> {
        let name = format!("e2e-{prefix}-{}", random_suffix());
        let mut kubeconfigs: Vec<PathBuf> = clusters.iter().map(|c| c.kubeconfig.clone()).collect();
        for c in also_delete_from {
            if !kubeconfigs.contains(&c.kubeconfig) {
                kubeconfigs.push(c.kubeconfig.clone());
            }
        }
        let ns = Self {
            name: name.clone(),
            kubeconfigs,
        };
        labels.insert(TEST_NAMESPACE_LABEL.to_string(), prefix.to_string());
        let object = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(labels),
                ..Default::default()
            },
            ..Default::default()
        };
        for cluster in clusters {
            let api: Api<Namespace> = Api::all(cluster.client().await?);
            api.create(&PostParams::default(), &object)
                .await
                .with_context(|| format!("creating namespace {name} in {}", cluster.name))?;
        }
        Ok(ns)
    }

    /// Creates the namespace in the hub and every member.
    pub async fn everywhere(prefix: &str, env: &Environment) -> Result<Self> {
        let clusters: Vec<_> = env.all_clusters().collect();
        Self::create(prefix, &clusters).await
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if std::env::var_os("FLOTILLA_E2E_KEEP_NAMESPACES").is_some() {
            eprintln!(
                "keeping namespace {} (FLOTILLA_E2E_KEEP_NAMESPACES)",
                self.name
            );
            return;
        }
        let name = self.name.clone();
        let kubeconfigs = std::mem::take(&mut self.kubeconfigs);
        // Drop cannot await, and the test's runtime may be single-threaded: delete from a thread
        // with a runtime of its own and clients of its own.
        let deleted = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                for path in kubeconfigs {
                    let api: Api<Namespace> = Api::all(client_from_kubeconfig(&path).await?);
                    match api.delete(&name, &DeleteParams::background()).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(s)) if s.code == 404 => {}
                        Err(e) => {
                            return Err(anyhow!(e).context(format!(
                                "deleting namespace {name} via {}",
                                path.display()
                            )));
                        }
                    }
                }
                Ok::<_, anyhow::Error>(())
            })
        })
        .join();
        match deleted {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("warning: {e:#}"),
            Err(_) => eprintln!("warning: namespace clean-up of {} panicked", self.name),
        }
    }
}

/// What a probe of [`wait_for`] saw.
pub enum Seen<T> {
    /// The expected state, with the value the test wants.
    Done(T),
    /// Not yet: a short description of what was seen instead.
    NotYet(String),
}

impl<T> Seen<T> {
    pub fn not_yet(what: impl Display) -> Self {
        Self::NotYet(what.to_string())
    }

    /// Done with `value` when nothing is `wrong`; otherwise not yet, saying what is.
    pub fn unless(wrong: &[String], value: T) -> Self {
        if wrong.is_empty() {
            Self::Done(value)
        } else {
            Self::not_yet(wrong.join("; "))
        }
    }
}

/// Polls `probe` until it reports [`Seen::Done`] or `timeout` passes. On time-out the error says
/// what was expected and what was last seen. Probe errors count as "seen" and polling goes on,
/// so a transient API error does not fail a test.
pub async fn wait_for<T, F, Fut>(expected: &str, timeout: Duration, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Seen<T>>>,
{
    let start = Instant::now();
    let mut last: String;
    loop {
        match tokio::time::timeout(Duration::from_secs(10), probe()).await {
            Ok(Ok(Seen::Done(v))) => return Ok(v),
            Ok(Ok(Seen::NotYet(seen))) => last = seen,
            Ok(Err(e)) => last = format!("error: {e:#}"),
            Err(_) => last = "the probe did not answer within 10s".into(),
        }
        if start.elapsed() >= timeout {
            bail!("timed out after {timeout:?} waiting for {expected}; last seen: {last}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Checks that `probe` keeps reporting `Ok(())` for the whole `duration`; fails at the first
/// violation with what was seen.
pub async fn holds_for<F, Fut>(expected: &str, duration: Duration, mut probe: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<std::result::Result<(), String>>>,
{
    let start = Instant::now();
    loop {
        if let Err(seen) = probe().await? {
            bail!(
                "expected {expected} for {duration:?}, but after {:?} saw: {seen}",
                start.elapsed()
            );
        }
        if start.elapsed() >= duration {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A member added to the shared environment for one test that breaks it on purpose
/// (`hack/clusters.sh add-member`); removed again when dropped.
pub struct ScratchMember {
    pub info: ClusterInfo,
    env: Environment,
}

impl ScratchMember {
    /// A member of the current Kubernetes version.
    pub async fn add(env: &Environment, prefix: &str) -> Result<Self> {
        Self::add_version(env, prefix, None).await
    }

    /// A member of Kubernetes `version` (one `hack/versions.env` lists, e.g. `v1.34.4`), or of
    /// the current one.
    pub async fn add_version(
        env: &Environment,
        prefix: &str,
        version: Option<&str>,
    ) -> Result<Self> {
        let name = format!("{prefix}-{}", random_suffix());
        let mut args = vec!["add-member", name.as_str()];
        if let Some(v) = version {
            args.extend(["--version", v]);
        }
        let out = env.clusters_sh(&args).await?;
        let members = out
            .lines()
            .find_map(|l| l.strip_prefix(&format!("export {MEMBER_KUBECONFIGS}=")))
            .ok_or_else(|| anyhow!("add-member printed no {MEMBER_KUBECONFIGS} line:\n{out}"))?;
        let (name, kubeconfig) = parse_named_paths(members)?
            .into_iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| anyhow!("add-member did not list {name}:\n{out}"))?;
        Ok(Self {
            info: ClusterInfo {
                name,
                kubeconfig,
                user_kubeconfig: None,
            },
            env: env.clone(),
        })
    }
}

impl Drop for ScratchMember {
    fn drop(&mut self) {
        let env = self.env.clone();
        let name = self.info.name.clone();
        let removed = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(env.clusters_sh(&["remove-member", &name]))
        })
        .join();
        if !matches!(removed, Ok(Ok(_))) {
            eprintln!(
                "warning: could not remove scratch member {}",
                self.info.name
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_named_paths() {
        let parsed = parse_named_paths("a=/x/a.kubeconfig, b=/y/b").expect("valid list");
        assert_eq!(
            parsed,
            vec![
                ("a".to_string(), PathBuf::from("/x/a.kubeconfig")),
                ("b".to_string(), PathBuf::from("/y/b"))
            ]
        );
        assert!(parse_named_paths("").expect("empty list").is_empty());
        assert!(parse_named_paths("nopath").is_err());
        assert!(parse_named_paths("=/x").is_err());
    }

    #[test]
    fn versions_are_ordered_by_number() {
        assert_eq!(parse_version("v1.34.4").expect("valid"), (1, 34, 4));
        assert!(parse_version("v1.9.0").expect("valid") < parse_version("v1.34.4").expect("valid"));
        assert_eq!(parse_version("v1.37.2-rc.1").expect("valid"), (1, 37, 2));
        assert!(parse_version("v1").is_err());
        assert!(parse_version("latest").is_err());
    }

    #[test]
    fn random_suffixes_are_dns_labels() {
        let s = random_suffix();
        assert_eq!(s.len(), 6);
        assert!(
            s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
    }

    #[tokio::test]
    async fn wait_for_reports_expected_and_last_seen() {
        let mut n = 0;
        let err = wait_for("the answer", Duration::from_millis(600), || {
            n += 1;
            let seen = n;
            async move { Ok(Seen::<()>::not_yet(format!("attempt {seen}"))) }
        })
        .await
        .expect_err("must time out");
        let msg = err.to_string();
        assert!(msg.contains("waiting for the answer"), "{msg}");
        assert!(msg.contains("last seen: attempt"), "{msg}");
    }

    #[tokio::test]
    async fn wait_for_returns_value() {
        let v = wait_for("a value", Duration::from_secs(1), || async {
            Ok(Seen::Done(42))
        })
        .await
        .expect("done at once");
        assert_eq!(v, 42);
    }

    #[tokio::test]
    async fn holds_for_fails_on_violation() {
        let err = holds_for("calm", Duration::from_secs(5), || async {
            Ok(Err("storm".to_string()))
        })
        .await
        .expect_err("violated");
        assert!(err.to_string().contains("saw: storm"), "{err}");
    }
}
