//! Pull-mode registration: the bootstrap RBAC and admission policy of `deploy/bootstrap`, a
//! member's bootstrap identity (a hub ServiceAccount with a TokenRequest token, written into a
//! bootstrap kubeconfig), the agent process, and clean-up of what a test registered.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use flotilla_api::cluster::Cluster;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::Kubeconfig;
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::OnceCell;

use crate::process::ControllerProcess;
use crate::{ClusterInfo, Environment, api, client_from_kubeconfig, random_suffix};

/// Namespace of the bootstrap ServiceAccounts on the hub.
pub const BOOTSTRAP_NAMESPACE: &str = "flotilla-system";

/// The ClusterRole of `deploy/bootstrap/clusterrole.yaml`.
pub const BOOTSTRAP_CLUSTER_ROLE: &str = "flotilla:bootstrap";

/// The label of the certificate requests the agent sends, naming its cluster.
pub const CLUSTER_LABEL: &str = "flotilla.dev/cluster";

static BOOTSTRAP_INSTALLED: OnceCell<()> = OnceCell::const_new();

/// The directory of the bootstrap RBAC and admission policy.
pub fn bootstrap_dir() -> PathBuf {
    crate::repo_root().join("deploy/bootstrap")
}

/// Creates `flotilla-system` if missing and server-side applies every object of
/// `deploy/bootstrap` to the hub, once per test process.
pub async fn install_bootstrap(hub: &Client) -> Result<()> {
    BOOTSTRAP_INSTALLED
        .get_or_try_init(|| async {
            let namespaces: Api<Namespace> = Api::all(hub.clone());
            let ns = json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": { "name": BOOTSTRAP_NAMESPACE },
            });
            namespaces
                .patch(
                    BOOTSTRAP_NAMESPACE,
                    &PatchParams::apply(api::FIELD_MANAGER),
                    &Patch::Apply(&ns),
                )
                .await
                .with_context(|| format!("creating namespace {BOOTSTRAP_NAMESPACE}"))?;
            let mut files: Vec<PathBuf> = std::fs::read_dir(bootstrap_dir())
                .with_context(|| format!("listing {}", bootstrap_dir().display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
                .collect();
            files.sort();
            for path in files {
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text)
                    .with_context(|| format!("parsing {}", path.display()))?;
                for doc in docs {
                    api::apply(hub, &doc, false)
                        .await?
                        .with_context(|| format!("applying {}", path.display()))?;
                }
            }
            Ok::<_, anyhow::Error>(())
        })
        .await
        .map(|_| ())
}

/// The bootstrap identity of member `cluster`: the hub ServiceAccount
/// `flotilla-system/flotilla-bootstrap-<cluster>` bound to `flotilla:bootstrap`, and a bootstrap
/// kubeconfig file with a token of it. Deleted (with the Cluster `cluster` and its certificate
/// requests) when dropped.
pub struct Registration {
    pub cluster: String,
    /// The bootstrap kubeconfig file.
    pub kubeconfig: PathBuf,
    hub_kubeconfig: PathBuf,
}

impl Registration {
    /// The ServiceAccount's name.
    pub fn service_account(cluster: &str) -> String {
        format!("flotilla-bootstrap-{cluster}")
    }

    /// Creates the bootstrap identity of `cluster` on the hub of `env`.
    pub async fn create(env: &Environment, cluster: &str) -> Result<Self> {
        let hub = env.hub.client().await?;
        install_bootstrap(&hub).await?;
        let name = Self::service_account(cluster);
        let this = Self {
            cluster: cluster.to_string(),
            kubeconfig: crate::scratch_dir().join(format!(
                "flotilla-e2e-bootstrap-{cluster}-{}.kubeconfig",
                random_suffix()
            )),
            hub_kubeconfig: env.hub.kubeconfig.clone(),
        };
        let accounts: Api<ServiceAccount> = Api::namespaced(hub.clone(), BOOTSTRAP_NAMESPACE);
        let account = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        accounts
            .create(&PostParams::default(), &account)
            .await
            .with_context(|| format!("creating ServiceAccount {name}"))?;
        let bindings: Api<ClusterRoleBinding> = Api::all(hub.clone());
        let binding = ClusterRoleBinding {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "ClusterRole".into(),
                name: BOOTSTRAP_CLUSTER_ROLE.into(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: name.clone(),
                namespace: Some(BOOTSTRAP_NAMESPACE.into()),
                ..Default::default()
            }]),
        };
        bindings
            .create(&PostParams::default(), &binding)
            .await
            .with_context(|| format!("creating ClusterRoleBinding {name}"))?;
        let token = accounts
            .create_token_request(
                &name,
                &PostParams::default(),
                &TokenRequest {
                    // No audiences: the apiserver's own.
                    spec: Some(TokenRequestSpec {
                        expiration_seconds: Some(3600),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            )
            .await
            .with_context(|| format!("requesting a token of ServiceAccount {name}"))?
            .status
            .and_then(|s| s.token)
            .ok_or_else(|| anyhow!("the TokenRequest of {name} returned no token"))?;
        let kubeconfig = bootstrap_kubeconfig(&env.hub.read_kubeconfig()?, &token)?;
        write_private(&this.kubeconfig, &kubeconfig)?;
        Ok(this)
    }

    /// A hub client with the bootstrap identity.
    pub async fn client(&self) -> Result<Client> {
        client_from_kubeconfig(&self.kubeconfig).await
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.kubeconfig);
        if std::env::var_os("FLOTILLA_E2E_KEEP_NAMESPACES").is_some() {
            return;
        }
        let cluster = self.cluster.clone();
        let hub_kubeconfig = self.hub_kubeconfig.clone();
        // As in TestNamespace: Drop cannot await, so delete from a thread with its own runtime.
        let deleted = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let hub = client_from_kubeconfig(&hub_kubeconfig).await?;
                let name = Registration::service_account(&cluster);
                let dp = DeleteParams::background();
                let ignore_missing = |r: Result<(), kube::Error>| match r {
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                    other => other,
                };
                let accounts: Api<ServiceAccount> =
                    Api::namespaced(hub.clone(), BOOTSTRAP_NAMESPACE);
                ignore_missing(accounts.delete(&name, &dp).await.map(|_| ()))?;
                let bindings: Api<ClusterRoleBinding> = Api::all(hub.clone());
                ignore_missing(bindings.delete(&name, &dp).await.map(|_| ()))?;
                let clusters: Api<Cluster> = Api::all(hub.clone());
                ignore_missing(clusters.delete(&cluster, &dp).await.map(|_| ()))?;
                // The hub controller removes its finalizer; give it the time to, before the
                // test stops it.
                for _ in 0..60 {
                    if clusters.get_opt(&cluster).await?.is_none() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                let requests: Api<CertificateSigningRequest> = Api::all(hub);
                ignore_missing(
                    requests
                        .delete_collection(
                            &dp,
                            &ListParams::default().labels(&format!("{CLUSTER_LABEL}={cluster}")),
                        )
                        .await
                        .map(|_| ()),
                )?;
                Ok::<_, anyhow::Error>(())
            })
        })
        .join();
        match deleted {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("warning: clean-up of registration {}: {e:#}", self.cluster),
            Err(_) => eprintln!(
                "warning: clean-up of registration {} panicked",
                self.cluster
            ),
        }
    }
}

/// A kubeconfig for the hub of `hub` (its current context's server and CA) with `token`.
pub fn bootstrap_kubeconfig(hub: &Kubeconfig, token: &str) -> Result<String> {
    let context_name = hub
        .current_context
        .as_deref()
        .ok_or_else(|| anyhow!("the hub kubeconfig has no current-context"))?;
    let context = hub
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.as_ref())
        .ok_or_else(|| anyhow!("the hub kubeconfig lacks context {context_name}"))?;
    let cluster = hub
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| anyhow!("the hub kubeconfig lacks cluster {}", context.cluster))?;
    let value = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "hub", "cluster": serde_json::to_value(cluster)? }],
        "users": [{ "name": "bootstrap", "user": { "token": token } }],
        "contexts": [{ "name": "bootstrap", "context": { "cluster": "hub", "user": "bootstrap" } }],
        "current-context": "bootstrap",
    });
    Ok(serde_json::to_string_pretty(&value)?)
}

/// Writes a file only its owner can read (it holds credentials).
pub fn write_private(path: &Path, contents: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(contents.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// `flotilla-registration agent` as a process: its output goes to a log file, it is killed when
/// dropped.
pub struct AgentProcess {
    process: ControllerProcess,
}

impl AgentProcess {
    /// Starts the agent of `registration` in a member with `identity` there (see
    /// [`MEMBER_AGENT`]) and the flags the chart gives it, keeping its Lease and credential Secret in `namespace` of the member;
    /// `extra` flags are appended.
    pub fn start(
        identity: &MemberIdentity,
        namespace: &str,
        registration: &Registration,
        extra: &[&str],
    ) -> Result<Self> {
        let flags = identity.flags();
        let hub_kubeconfig = registration.kubeconfig.to_string_lossy().into_owned();
        let identity = format!("agent-{}", registration.cluster);
        let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
        args.extend([
            "--lease-namespace",
            namespace,
            "--identity",
            identity.as_str(),
            "--cluster-name",
            registration.cluster.as_str(),
            "--hub-kubeconfig",
            hub_kubeconfig.as_str(),
            "--hub-credential-namespace",
            namespace,
        ]);
        args.extend_from_slice(extra);
        let process =
            ControllerProcess::start_subcommand("flotilla-registration", &["agent"], &args)?;
        Ok(Self { process })
    }

    /// What the agent wrote so far.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// `GET path` on the agent's HTTP server.
    pub async fn get(&self, path: &str) -> Result<(u16, String)> {
        self.process.get(path).await
    }

    /// Stops the agent (SIGKILL) and waits for it.
    pub async fn kill(&mut self) -> Result<()> {
        self.process.signal("KILL")?;
        self.process
            .wait_exit(Duration::from_secs(10))
            .await
            .map(|_| ())
    }
}

/// A component of a pull-mode member, as the member chart (`charts/flotilla-agent`) installs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberComponent {
    /// `flotilla-registration agent`.
    Agent,
    /// `flotilla-syncer --pull`.
    Syncer,
    /// `flotilla-negotiator importer`.
    Importer,
}

impl MemberComponent {
    /// Its name in the chart (the label `app.kubernetes.io/component`, the key of its kubeconfig
    /// when hosted).
    pub fn name(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::Syncer => "syncer",
            Self::Importer => "importer",
        }
    }
}

/// The pull-mode agent.
pub const MEMBER_AGENT: MemberComponent = MemberComponent::Agent;
/// The pull-mode syncer.
pub const MEMBER_SYNCER: MemberComponent = MemberComponent::Syncer;
/// The pull-mode importer.
pub const MEMBER_IMPORTER: MemberComponent = MemberComponent::Importer;

/// The member chart's directory.
pub fn member_chart() -> PathBuf {
    crate::repo_root().join("charts/flotilla-agent")
}

/// The flags of the member chart's Deployments that name what a component's RBAC grants by name
/// (its Lease, the credential Secret): a component run by a test gets them as the chart passes
/// them.
const MEMBER_IDENTITY_FLAGS: &[&str] = &["--lease-name", "--hub-credential-secret"];

/// The identity of a component in a pull-mode member: the ServiceAccount and RBAC that the member
/// chart installs (`helm template` of a release of its own, with `install.controllers=false`
/// as a hosted install has it; not the Deployment: there are no container images here, the
/// component runs as a local process with the same identity). Its cluster-scoped objects are
/// deleted when dropped.
pub struct MemberIdentity {
    /// A kubeconfig of the member with a token of the ServiceAccount.
    pub kubeconfig: PathBuf,
    /// The chart's release.
    pub release: String,
    /// The flags the chart gives the component that its RBAC depends on (`--lease-name`,
    /// `--hub-credential-secret`).
    pub args: Vec<String>,
    account: String,
    _objects: api::ClusterScopedObjects,
}

impl MemberIdentity {
    /// Installs `component`'s ServiceAccount and RBAC of the member chart in `member`, as a user
    /// would, with `namespace` as the release namespace (it stands for `flotilla-system`) and
    /// `credential_secret` as `hub.credentialSecret`, then mints a token.
    pub async fn install(
        member: &ClusterInfo,
        component: MemberComponent,
        namespace: &str,
        credential_secret: &str,
    ) -> Result<Self> {
        let client = member.client().await?;
        let release = format!("e2e-{}", random_suffix());
        let chart = member_chart().to_string_lossy().into_owned();
        let credential = format!("hub.credentialSecret={credential_secret}");
        // The Deployments are rendered (a cluster name is needed for them) only for their flags.
        let yaml = crate::chart::helm_run(&[
            "template",
            &release,
            &chart,
            "--namespace",
            namespace,
            "--set",
            "clusterName=e2e",
            "--set",
            &credential,
        ])
        .await?;
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&yaml).context("parsing helm template output")?;
        let mut objects = api::ClusterScopedObjects::new(member);
        let mut args = Vec::new();
        for doc in docs
            .into_iter()
            .filter(|d| d["metadata"]["labels"]["app.kubernetes.io/component"] == component.name())
        {
            if doc["kind"] == "Deployment" {
                let container = &doc["spec"]["template"]["spec"]["containers"][0];
                args.extend(
                    container["args"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(serde_json::Value::as_str)
                        .filter(|a| {
                            MEMBER_IDENTITY_FLAGS
                                .iter()
                                .any(|f| a.split('=').next() == Some(f))
                        })
                        .map(String::from),
                );
                continue;
            }
            let (resource, scope) = api::resource_of(&client, &doc).await?;
            let name = doc["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            api::apply(&client, &doc, false)
                .await?
                .with_context(|| format!("applying {} {name} to {}", resource.kind, member.name))?;
            if scope == kube::discovery::Scope::Cluster {
                objects.add(resource, name);
            }
        }
        ensure!(
            !args.is_empty(),
            "the member chart rendered no {} Deployment",
            component.name()
        );
        let account = format!("{release}-{}", component.name());
        let token = crate::chart::token_for(&client, namespace, &account).await?;
        Ok(Self {
            kubeconfig: crate::chart::cluster_kubeconfig_with_token(member, &token)?,
            account: format!("system:serviceaccount:{namespace}:{account}"),
            release,
            args,
            _objects: objects,
        })
    }

    /// The Lease the chart names for the component (its `--lease-name`).
    pub fn lease_name(&self) -> &str {
        self.args
            .iter()
            .find_map(|a| a.strip_prefix("--lease-name="))
            .unwrap_or_default()
    }

    /// The username of the component's ServiceAccount in the member.
    pub fn username(&self) -> &str {
        &self.account
    }

    /// `--kubeconfig <its member kubeconfig>` and the flags of [`MemberIdentity::args`].
    pub fn flags(&self) -> Vec<String> {
        let mut flags = vec![
            "--kubeconfig".to_string(),
            self.kubeconfig.to_string_lossy().into_owned(),
        ];
        flags.extend(self.args.iter().cloned());
        flags
    }
}

/// A PEM PKCS#10 request with subject `/CN=<cn>/O=<o>...`, made with openssl(1) as an attacker
/// would (independently of Flotilla's code).
pub fn openssl_request(cn: &str, organizations: &[&str]) -> Result<Vec<u8>> {
    let mut subject = format!("/CN={cn}");
    for o in organizations {
        subject.push_str(&format!("/O={o}"));
    }
    let out = std::process::Command::new("openssl")
        .args([
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-keyout", "/dev/null", "-subj", &subject])
        .output()
        .context("running openssl req")?;
    ensure!(
        out.status.success(),
        "openssl req failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out.stdout)
}
