//! The Helm chart in tests: rendering it, and running controllers with the identities it
//! installs (its ServiceAccounts and RBAC), so that a missing or excess right shows up.

use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, ensure};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::Value;

use crate::api::{self, ClusterScopedObjects};
use crate::{ClusterInfo, Environment, random_suffix, repo_root};

/// The helm binary the environment's tools include (`FLOTILLA_TOOLS_BIN`), else `helm`.
pub fn helm() -> PathBuf {
    std::env::var_os("FLOTILLA_TOOLS_BIN")
        .map(|d| PathBuf::from(d).join("helm"))
        .unwrap_or_else(|| "helm".into())
}

/// The chart's directory.
pub fn chart() -> PathBuf {
    repo_root().join("charts/flotilla")
}

/// Runs helm with `args`; its standard output.
pub async fn helm_run(args: &[&str]) -> Result<String> {
    let out = tokio::process::Command::new(helm())
        .args(args)
        .output()
        .await
        .with_context(|| format!("running {} (set FLOTILLA_TOOLS_BIN)", helm().display()))?;
    ensure!(
        out.status.success(),
        "helm {} failed:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `helm template` of the chart as a release `release` in `namespace`, as JSON documents, in
/// hub mode `inCluster` (the hub-side objects and the controllers; `extra` may set another).
pub async fn render(release: &str, namespace: &str, extra: &[&str]) -> Result<Vec<Value>> {
    let chart = chart().to_string_lossy().into_owned();
    let mut args = vec![
        "template",
        release,
        chart.as_str(),
        "--namespace",
        namespace,
        "--set",
        "hub.mode=inCluster",
    ];
    args.extend_from_slice(extra);
    let yaml = helm_run(&args).await?;
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&yaml).context("parsing helm template output")?;
    Ok(docs.into_iter().filter(|d| d.is_object()).collect())
}

/// The flags of the chart's Deployments that name identities, roles and the namespaces its RBAC
/// grants (the ClusterRoles that registration binds, the syncer's ServiceAccount, the splitter's
/// Pod Security check namespaces, the namespace of read-only member kubeconfigs) and the chart's
/// secure defaults (the default Pod Security
/// level): a controller run by a test gets them as the chart passes them.
const IDENTITY_FLAGS: &[&str] = &[
    "--agent-cluster-role",
    "--syncer-service-account",
    "--syncer-cluster-role",
    "--default-pod-security-level",
    "--pod-security-check-namespace-prefix",
    "--reader-kubeconfig-secret-namespace",
    "--read-writable-kubeconfigs",
    "--auto-accept",
    "--max-agent-certificate-lifetime",
];

/// The approval webhook's Deployment container (`flotilla-registration approval-webhook`).
const CSR_APPROVAL: &str = "csr-approval";

/// The chart's identities for one test, as `helm install` makes them: the ServiceAccounts, RBAC
/// and admission policies of a release of its own in the test's namespace (which stands for the
/// release namespace: the controllers' Leases and the push members' kubeconfig Secrets live
/// there). Every controller a test runs on the hub runs with one of these, never with the
/// hub's admin credentials ([`crate::process::ControllerProcess`] refuses those). The
/// cluster-scoped objects are deleted when dropped.
pub struct ChartIdentities {
    pub release: String,
    pub namespace: String,
    kubeconfigs: std::collections::BTreeMap<String, PathBuf>,
    args: std::collections::BTreeMap<String, Vec<String>>,
    _objects: ClusterScopedObjects,
    /// The rules given to the splitter with `splitter.extraRules` (see
    /// [`ChartIdentities::allow_splitter`]).
    splitter_rules: std::sync::Mutex<Vec<Value>>,
    /// The release's certificate approval webhook, as its Deployment runs it, on 127.0.0.1:
    /// the hub asks it before this release's registration approves a certificate request.
    _approval_webhook: Option<crate::process::ControllerProcess>,
    /// With [`ChartIdentities::install_in_own_namespace`]: the release namespace, deleted last.
    _own_namespace: Option<crate::TestNamespace>,
}

impl ChartIdentities {
    /// Installs a release in a hub namespace of its own, `<prefix>-sys-<random>`, which stands
    /// for `flotilla-system`: the tenants' namespaces then hold only what the test puts there (no
    /// controller Leases, kubeconfig Secrets, ServiceAccounts or Roles of Flotilla's, which an
    /// empty `resourceSelectors` would otherwise place).
    pub async fn install_in_own_namespace(prefix: &str) -> Result<Self> {
        let env = Environment::get();
        let ns = crate::TestNamespace::create(&format!("{prefix}-sys"), &[&env.hub]).await?;
        let mut this = Self::install(ns.name()).await?;
        this._own_namespace = Some(ns);
        Ok(this)
    }

    /// Installs a release `e2e-<random>` of the chart's identities in `namespace`.
    pub async fn install(namespace: &str) -> Result<Self> {
        Self::install_with(namespace, &[]).await
    }

    /// [`ChartIdentities::install`] with chart values, e.g. `["--set",
    /// "syncer.shardByCluster=true"]`.
    pub async fn install_with(namespace: &str, values: &[&str]) -> Result<Self> {
        let env = Environment::get();
        let hub = env.hub.client().await?;
        let release = format!("e2e-{}", random_suffix());
        let mut docs = render(&release, namespace, values).await?;
        let mut args = std::collections::BTreeMap::new();
        for doc in docs.iter().filter(|d| d["kind"] == "Deployment") {
            for container in doc["spec"]["template"]["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
            {
                // The container is named after the controller (the approval webhook runs
                // flotilla-registration too).
                let Some(controller) = container["command"][0]
                    .as_str()
                    .filter(|c| c.starts_with("flotilla-"))
                    .and(container["name"].as_str())
                else {
                    continue;
                };
                let flags: Vec<String> = container["args"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .filter(|a| {
                        IDENTITY_FLAGS
                            .iter()
                            .any(|f| a.split('=').next() == Some(f))
                    })
                    .map(String::from)
                    .collect();
                args.insert(controller.to_string(), flags);
            }
        }
        let webhook = ApprovalWebhook::from_render(&mut docs, &release)?;
        let objects = apply_identities(&hub, docs).await?;
        let mut kubeconfigs = std::collections::BTreeMap::new();
        for controller in args.keys() {
            let path =
                service_account_kubeconfig(&env, &hub, namespace, &release, controller).await?;
            kubeconfigs.insert(controller.clone(), path);
        }
        let approval_webhook = match webhook {
            None => None,
            Some(webhook) => {
                let mut flags = vec![
                    "--kubeconfig".to_string(),
                    kubeconfigs
                        .get(CSR_APPROVAL)
                        .map(|p| p.to_string_lossy().into_owned())
                        .ok_or_else(|| anyhow!("the chart's approval webhook has no Deployment"))?,
                ];
                flags.extend(webhook.flags);
                flags.extend(args.get(CSR_APPROVAL).cloned().unwrap_or_default());
                let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
                Some(crate::process::ControllerProcess::start_subcommand(
                    "flotilla-registration",
                    &["approval-webhook"],
                    &flags,
                )?)
            }
        };
        Ok(Self {
            release,
            namespace: namespace.to_string(),
            kubeconfigs,
            args,
            _objects: objects,
            splitter_rules: Default::default(),
            _approval_webhook: approval_webhook,
            _own_namespace: None,
        })
    }

    /// Lets the splitter place a custom kind (`plural` of `group`) as an admin does, with `helm
    /// upgrade --set-json splitter.extraRules=...`: read its objects and write their status (for
    /// a kind a WorkloadProfile describes). The chart's splitter reads only the kinds of the table
    /// of kinds.
    pub async fn allow_splitter(&self, group: &str, plural: &str) -> Result<()> {
        let rules = {
            let mut rules = self
                .splitter_rules
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            rules.push(
                serde_json::json!({"apiGroups": [group], "resources": [plural],
                                          "verbs": ["get", "list", "watch"]}),
            );
            rules.push(serde_json::json!({"apiGroups": [group],
                                          "resources": [format!("{plural}/status")],
                                          "verbs": ["get", "patch"]}));
            serde_json::to_string(&*rules)?
        };
        let value = format!("splitter.extraRules={rules}");
        let docs = render(&self.release, &self.namespace, &["--set-json", &value]).await?;
        let role = format!("flotilla:{}:splitter", self.release);
        let hub = Environment::get().hub.client().await?;
        for doc in docs
            .iter()
            .filter(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == role.as_str())
        {
            api::apply(&hub, doc, false)
                .await?
                .with_context(|| format!("upgrading ClusterRole {role}"))?;
        }
        Ok(())
    }

    /// The hub kubeconfig of `controller` (`registration`, `syncer`, `splitter`, `negotiator`).
    pub fn kubeconfig(&self, controller: &str) -> Result<String> {
        self.kubeconfigs
            .get(controller)
            .map(|p| p.to_string_lossy().into_owned())
            .ok_or_else(|| anyhow!("the chart has no {controller} (release {})", self.release))
    }

    /// A hub client with `controller`'s identity.
    pub async fn client(&self, controller: &str) -> Result<Client> {
        crate::client_from_kubeconfig(std::path::Path::new(&self.kubeconfig(controller)?)).await
    }

    /// `--kubeconfig <its hub kubeconfig>` and the identity flags the chart gives `controller`.
    pub fn args(&self, controller: &str) -> Result<Vec<String>> {
        let mut args = vec!["--kubeconfig".to_string(), self.kubeconfig(controller)?];
        args.extend(self.args.get(controller).cloned().unwrap_or_default());
        Ok(args)
    }

    /// The username of `controller`'s ServiceAccount.
    pub fn username(&self, controller: &str) -> String {
        format!(
            "system:serviceaccount:{}:{}-{controller}",
            self.namespace, self.release
        )
    }
}

/// The chart's certificate approval webhook as a test runs it: a process on 127.0.0.1 with the
/// release's serving certificate, which the hub calls at a URL instead of the chart's Service.
struct ApprovalWebhook {
    /// `--webhook-address`, `--tls-cert-file` and `--tls-private-key-file`.
    flags: Vec<String>,
}

impl ApprovalWebhook {
    /// Points the rendered ValidatingWebhookConfiguration of the webhook at a free port of
    /// 127.0.0.1 and writes the rendered serving certificate to files. `None`: the release has
    /// no approval webhook.
    fn from_render(docs: &mut [Value], release: &str) -> Result<Option<Self>> {
        let name = format!("{release}-{CSR_APPROVAL}");
        let Some(config) = docs.iter_mut().find(|d| {
            d["kind"] == "ValidatingWebhookConfiguration" && d["metadata"]["name"] == name.as_str()
        }) else {
            return Ok(None);
        };
        let port = crate::process::free_port()?;
        for webhook in config["webhooks"].as_array_mut().into_iter().flatten() {
            let client = &mut webhook["clientConfig"];
            let ca = client["caBundle"].clone();
            *client = serde_json::json!({
                "url": format!("https://127.0.0.1:{port}/csr-approval"),
                "caBundle": ca,
            });
        }
        let secret = format!("{name}-tls");
        let tls = docs
            .iter()
            .find(|d| d["kind"] == "Secret" && d["metadata"]["name"] == secret.as_str())
            .ok_or_else(|| anyhow!("the chart renders no Secret {secret}"))?;
        let dir = crate::scratch_dir().join(format!("{name}-tls"));
        std::fs::create_dir_all(&dir)?;
        let file = |key: &str| -> Result<String> {
            let data = tls["data"][key]
                .as_str()
                .ok_or_else(|| anyhow!("Secret {secret} has no {key}"))?;
            let bytes = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, data)?;
            let path = dir.join(key);
            std::fs::write(&path, bytes)?;
            Ok(path.to_string_lossy().into_owned())
        };
        let flags = vec![
            format!("--webhook-address=127.0.0.1:{port}"),
            format!("--tls-cert-file={}", file("tls.crt")?),
            format!("--tls-private-key-file={}", file("tls.key")?),
        ];
        Ok(Some(Self { flags }))
    }
}

/// Applies the rendered identities (everything but the Deployments); the cluster-scoped ones are
/// remembered for deletion.
async fn apply_identities(hub: &Client, docs: Vec<Value>) -> Result<ClusterScopedObjects> {
    let env = Environment::get();
    let mut cleanup = ClusterScopedObjects::new(&env.hub);
    for doc in docs {
        if doc["kind"] == "Deployment" {
            continue;
        }
        let (resource, scope) = api::resource_of(hub, &doc).await?;
        let name = doc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        api::apply(hub, &doc, false)
            .await?
            .with_context(|| format!("applying {} {name}", resource.kind))?;
        if scope == kube::discovery::Scope::Cluster {
            cleanup.add(resource, name);
        }
    }
    Ok(cleanup)
}

/// A kubeconfig for the hub that authenticates with `token`.
pub fn kubeconfig_with_token(env: &Environment, token: &str) -> Result<PathBuf> {
    cluster_kubeconfig_with_token(&env.hub, token)
}

/// A kubeconfig for `cluster` (the hub or a member) that authenticates with `token`.
pub fn cluster_kubeconfig_with_token(cluster: &ClusterInfo, token: &str) -> Result<PathBuf> {
    let admin = std::fs::read_to_string(&cluster.kubeconfig)?;
    let admin_token = admin
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .ok_or_else(|| anyhow!("no token in the kubeconfig of {}", cluster.name))?;
    let path = crate::scratch_dir().join(format!("flotilla-e2e-sa-{}.kubeconfig", random_suffix()));
    std::fs::write(&path, admin.replace(admin_token, token))?;
    Ok(path)
}

/// A token of ServiceAccount `namespace/service_account`, valid for an hour.
pub async fn token_for(hub: &Client, namespace: &str, service_account: &str) -> Result<String> {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let response = Api::<ServiceAccount>::namespaced(hub.clone(), namespace)
        .create_token_request(service_account, &PostParams::default(), &request)
        .await?;
    response
        .status
        .and_then(|s| s.token)
        .ok_or_else(|| anyhow!("no token for {namespace}/{service_account}"))
}

/// A hub kubeconfig with the identity of `controller` (e.g. `negotiator`) of the chart installed
/// by [`install_identities`] as `release` in `namespace`.
pub async fn service_account_kubeconfig(
    env: &Environment,
    hub: &Client,
    namespace: &str,
    release: &str,
    controller: &str,
) -> Result<PathBuf> {
    let token = token_for(hub, namespace, &format!("{release}-{controller}")).await?;
    kubeconfig_with_token(env, &token)
}
