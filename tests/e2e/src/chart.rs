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

/// Installs the chart's ServiceAccounts and RBAC as release `release` in `namespace` (not its
/// Deployments: there are no container images here, the binaries run as local processes with
/// the same identities). The cluster-scoped objects are deleted when the result is dropped.
pub async fn install_identities(
    hub: &Client,
    release: &str,
    namespace: &str,
) -> Result<ClusterScopedObjects> {
    install_identities_with(hub, release, namespace, &[]).await
}

/// [`install_identities`] with chart values: `values` are more `helm template` arguments, e.g.
/// `["--set", "syncer.shardByCluster=true"]`.
pub async fn install_identities_with(
    hub: &Client,
    release: &str,
    namespace: &str,
    values: &[&str],
) -> Result<ClusterScopedObjects> {
    let env = Environment::get();
    let mut cleanup = ClusterScopedObjects::new(&env.hub);
    for doc in render(release, namespace, values).await? {
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
