//! `kubectl flotilla join`: registers a push-mode member with the hub, as
//! docs/registration.md describes it step by step — the syncer's kubeconfig in a Secret of the
//! release namespace, a read-only identity in the member with its kubeconfig in the readers'
//! namespace, and the Cluster.
//!
//! Everything that can be checked is checked before anything is written: the kubeconfig (as the
//! controllers will check it), the hub's namespaces, the Cluster (a server-side dry run, so the
//! hub's own validation speaks) and the member's answer. Every write is a server-side apply, so
//! joining again changes nothing but the reader's token, which it renews.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use flotilla_api::{Cluster, SyncMode};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{Value, json};

use flotilla_api::conditions;

use crate::{kubeconfig, reader};

/// The field manager of everything `join` writes.
pub const FIELD_MANAGER: &str = flotilla_api::field_managers::JOIN;

/// How long a reader token lives unless told otherwise (30 days).
pub const DEFAULT_READER_TOKEN_LIFETIME: Duration = Duration::from_secs(30 * 24 * 3600);

/// What to register, and where its credentials go.
#[derive(Clone, Debug)]
pub struct JoinOptions {
    /// The Cluster's name.
    pub name: String,
    /// The hub namespace of the syncer's kubeconfig Secret: the release namespace.
    pub namespace: String,
    /// The syncer's kubeconfig Secret; `<name>-kubeconfig` when `None`.
    pub secret: Option<String>,
    /// How registration and the negotiator read the member.
    pub reader: Reader,
    /// Labels of the Cluster (what Placements select).
    pub labels: BTreeMap<String, String>,
    /// The Cluster's `spec.allowInsecureTransport` (throwaway test clusters only).
    pub allow_insecure_transport: bool,
}

/// How registration and the negotiator read the member.
#[derive(Clone, Debug)]
pub enum Reader {
    /// A read-only identity in the member (`deploy/member/reader.yaml`), its kubeconfig in Secret
    /// `<name>-reader` (or `secret`) of the hub's readers' namespace.
    Separate {
        /// The readers' namespace on the hub (`<release namespace>-readers` with the chart).
        hub_namespace: String,
        /// The member namespace of the reader's ServiceAccount.
        member_namespace: String,
        /// How long its token lives; join again to renew it.
        token_lifetime: Duration,
        /// The Secret's name; `<name>-reader` when `None`.
        secret: Option<String>,
    },
    /// No reader identity: registration and the negotiator read with the syncer's kubeconfig,
    /// which the hub allows only with `memberCredentials.readWritableKubeconfigs`.
    Writable,
}

impl Reader {
    /// A reader as the docs and the chart's defaults have it, for a release in `namespace`.
    pub fn separate(namespace: &str) -> Self {
        Self::Separate {
            hub_namespace: format!("{namespace}-readers"),
            member_namespace: reader::DEFAULT_NAMESPACE.into(),
            token_lifetime: DEFAULT_READER_TOKEN_LIFETIME,
            secret: None,
        }
    }
}

/// What `join` wrote.
#[derive(Clone, Debug)]
pub struct Joined {
    /// The syncer's kubeconfig Secret (namespace, name).
    pub secret: (String, String),
    /// The reader's kubeconfig Secret (namespace, name) and its token's lifetime.
    pub reader: Option<((String, String), Duration)>,
    /// The member's server, as the Secrets name it.
    pub server: String,
}

impl JoinOptions {
    /// Options for Cluster `name` of a release in `namespace`, with a reader as the docs have it.
    pub fn new(name: impl Into<String>, namespace: impl Into<String>) -> Self {
        let namespace = namespace.into();
        Self {
            name: name.into(),
            reader: Reader::separate(&namespace),
            namespace,
            secret: None,
            labels: BTreeMap::new(),
            allow_insecure_transport: false,
        }
    }

    fn secret_name(&self) -> String {
        self.secret
            .clone()
            .unwrap_or_else(|| format!("{}-kubeconfig", self.name))
    }

    /// The Cluster as `join` applies it: only the fields it sets.
    pub fn cluster(&self) -> Value {
        let mut spec = json!({
            "syncMode": "Push",
            "kubeconfigSecretRef": {"name": self.secret_name()},
        });
        if let Reader::Separate { secret, .. } = &self.reader {
            let name = secret
                .clone()
                .unwrap_or_else(|| format!("{}-reader", self.name));
            spec["readOnlyKubeconfigSecretRef"] = json!({"name": name});
        }
        if self.allow_insecure_transport {
            spec["allowInsecureTransport"] = json!(true);
        }
        let mut metadata = json!({"name": self.name});
        if !self.labels.is_empty() {
            metadata["labels"] = json!(self.labels);
        }
        json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Cluster",
               "metadata": metadata, "spec": spec})
    }
}

/// Registers the member `member` reaches (a kubeconfig from [`kubeconfig::for_member`]) with the
/// hub `hub` as push-mode Cluster `options.name`.
pub async fn join(
    hub: &Client,
    member: &Kubeconfig,
    options: &JoinOptions,
) -> anyhow::Result<Joined> {
    let cluster = options.cluster();
    preflight_hub(hub, options, &cluster).await?;
    let member_client = member_client(member).await?;
    let server = server_of(member);

    let reader = match &options.reader {
        Reader::Separate {
            hub_namespace,
            member_namespace,
            token_lifetime,
            ..
        } => {
            let token = reader_token(&member_client, member_namespace, *token_lifetime)
                .await
                .with_context(|| format!("making the read-only identity in the member {server}"))?;
            let reader = kubeconfig::with_token(member, reader::ACCOUNT, token);
            let name = cluster["spec"]["readOnlyKubeconfigSecretRef"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            store(hub, hub_namespace, &name, &options.name, &reader).await?;
            Some(((hub_namespace.clone(), name), *token_lifetime))
        }
        Reader::Writable => None,
    };
    let secret = options.secret_name();
    store(hub, &options.namespace, &secret, &options.name, member).await?;
    Api::<Cluster>::all(hub.clone())
        .patch(
            &options.name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&cluster),
        )
        .await
        .map_err(|e| conflict_hint(e, &options.name))?;
    Ok(Joined {
        secret: (options.namespace.clone(), secret),
        reader,
        server,
    })
}

/// What can be known about the hub before anything is written: the namespaces exist, no Cluster
/// of that name is a pull member, and the hub would take the Cluster (a server-side dry run).
async fn preflight_hub(hub: &Client, options: &JoinOptions, cluster: &Value) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(hub.clone());
    let mut needed = vec![(
        options.namespace.as_str(),
        "--namespace, the release namespace",
    )];
    if let Reader::Separate { hub_namespace, .. } = &options.reader {
        needed.push((
            hub_namespace,
            "--readers-namespace; made by the chart (memberCredentials.readersNamespace), or \
             join with --read-writable where the chart sets memberCredentials.readWritableKubeconfigs",
        ));
    }
    for (namespace, what) in needed {
        if namespaces
            .get_opt(namespace)
            .await
            .context("reading the hub's namespaces")?
            .is_none()
        {
            bail!("the hub has no namespace {namespace} ({what})");
        }
    }
    let clusters: Api<Cluster> = Api::all(hub.clone());
    if let Some(existing) = clusters.get_opt(&options.name).await?
        && existing.spec.sync_mode == SyncMode::Pull
    {
        bail!(
            "Cluster {} exists as a pull member (its agent registered it); delete it first to \
             join it in push mode",
            options.name
        );
    }
    let mut dry_run = PatchParams::apply(FIELD_MANAGER);
    dry_run.dry_run = true;
    clusters
        .patch(&options.name, &dry_run, &Patch::Apply(cluster))
        .await
        .map_err(|e| conflict_hint(e, &options.name))?;
    Ok(())
}

/// A conflict with another field manager explained, other errors as they are.
fn conflict_hint(e: kube::Error, name: &str) -> anyhow::Error {
    match e {
        kube::Error::Api(s) if s.code == 409 => anyhow!(
            "Cluster {name} exists with other values that another manager owns: {}; change \
             it where it is managed, or delete it first",
            s.message
        ),
        kube::Error::Api(s) => anyhow!("the hub refused Cluster {name}: {}", s.message),
        e => anyhow!(e).context(format!("applying Cluster {name}")),
    }
}

/// The member's server URL, as its kubeconfig names it.
fn server_of(member: &Kubeconfig) -> String {
    member
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.server.clone())
        .unwrap_or_default()
}

/// A client of the member that has answered `/version`.
async fn member_client(member: &Kubeconfig) -> anyhow::Result<Client> {
    let server = server_of(member);
    let mut config = Config::from_custom_kubeconfig(member.clone(), &KubeConfigOptions::default())
        .await
        .context("using the member kubeconfig")?;
    config.connect_timeout = Some(Duration::from_secs(10));
    config.read_timeout = Some(Duration::from_secs(30));
    let client = Client::try_from(config).context("building the member's client")?;
    client
        .apiserver_version()
        .await
        .with_context(|| format!("the member at {server} does not answer"))?;
    Ok(client)
}

/// Applies the reader identity in `namespace` of the member and returns a new token of it.
async fn reader_token(
    member: &Client,
    namespace: &str,
    lifetime: Duration,
) -> anyhow::Result<String> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for object in reader::objects(namespace)? {
        let kind = object["kind"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let resource = match kind {
            "Namespace" => ApiResource::erase::<Namespace>(&()),
            "ServiceAccount" => ApiResource::erase::<ServiceAccount>(&()),
            "ClusterRole" => ApiResource::erase::<ClusterRole>(&()),
            "ClusterRoleBinding" => ApiResource::erase::<ClusterRoleBinding>(&()),
            other => bail!("no way to apply a {other}"),
        };
        let api: Api<DynamicObject> = if kind == "ServiceAccount" {
            Api::namespaced_with(member.clone(), namespace, &resource)
        } else {
            Api::all_with(member.clone(), &resource)
        };
        api.patch(name, &params, &Patch::Apply(&object))
            .await
            .with_context(|| format!("applying {kind} {name}"))?;
    }
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(i64::try_from(lifetime.as_secs()).unwrap_or(i64::MAX)),
            ..Default::default()
        }),
        ..Default::default()
    };
    Api::<ServiceAccount>::namespaced(member.clone(), namespace)
        .create_token_request(reader::ACCOUNT, &PostParams::default(), &request)
        .await
        .with_context(|| format!("requesting a token of {namespace}/{}", reader::ACCOUNT))?
        .status
        .and_then(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| anyhow!("the member returned no token"))
}

/// Stores `kubeconfig` in Secret `namespace/name` of the hub (key `kubeconfig`), labelled with
/// the Cluster it serves.
async fn store(
    hub: &Client,
    namespace: &str,
    name: &str,
    cluster: &str,
    kubeconfig: &Kubeconfig,
) -> anyhow::Result<()> {
    use base64::Engine as _;
    let text = kubeconfig::to_text(kubeconfig)?;
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {flotilla_api::labels::CLUSTER: cluster}},
        "type": "Opaque",
        "data": {"kubeconfig": base64::engine::general_purpose::STANDARD.encode(text)},
    });
    Api::<Secret>::namespaced(hub.clone(), namespace)
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await
        // The error names the Secret; kube's errors do not carry its data.
        .with_context(|| format!("storing Secret {namespace}/{name} on the hub"))?;
    Ok(())
}

/// Waits up to `timeout` for Cluster `name` to be `Ready=True`; on time-out, says what its Ready
/// condition says.
pub async fn wait_ready(hub: &Client, name: &str, timeout: Duration) -> anyhow::Result<Cluster> {
    let clusters: Api<Cluster> = Api::all(hub.clone());
    let deadline = Instant::now() + timeout;
    loop {
        let cluster = clusters.get(name).await?;
        let ready = cluster
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == conditions::READY))
            .cloned();
        match &ready {
            Some(c) if c.status == "True" => return Ok(cluster),
            _ if Instant::now() >= deadline => {
                let said = ready.map_or_else(
                    || "no Ready condition yet (is flotilla-registration running?)".to_string(),
                    |c| format!("Ready={} reason={}: {}", c.status, c.reason, c.message),
                );
                bail!(
                    "Cluster {name} is not Ready after {}: {said}",
                    humantime::format_duration(timeout)
                );
            }
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_names_both_secrets_as_the_docs_do() {
        let options = JoinOptions::new("member1", "flotilla-system");
        assert_eq!(
            options.cluster(),
            json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Cluster",
                   "metadata": {"name": "member1"},
                   "spec": {"syncMode": "Push",
                            "kubeconfigSecretRef": {"name": "member1-kubeconfig"},
                            "readOnlyKubeconfigSecretRef": {"name": "member1-reader"}}})
        );
    }

    #[test]
    fn a_writable_reader_names_no_read_only_secret_and_labels_and_insecure_transport_are_set() {
        let mut options = JoinOptions::new("lab", "flotilla-system");
        options.reader = Reader::Writable;
        options.secret = Some("lab-admin".into());
        options.labels.insert("region".into(), "eu-west".into());
        options.allow_insecure_transport = true;
        let cluster = options.cluster();
        assert_eq!(cluster["metadata"]["labels"], json!({"region": "eu-west"}));
        assert_eq!(
            cluster["spec"],
            json!({"syncMode": "Push", "kubeconfigSecretRef": {"name": "lab-admin"},
                   "allowInsecureTransport": true})
        );
    }

    #[test]
    fn the_cluster_join_applies_is_a_valid_cluster() {
        let options = JoinOptions::new("member1", "flotilla-system");
        let cluster: Cluster = serde_json::from_value(options.cluster()).expect("a Cluster");
        assert_eq!(cluster.spec.sync_mode, SyncMode::Push);
        let reader = cluster
            .spec
            .read_only_kubeconfig_secret_ref
            .expect("a reader");
        assert_eq!(reader.name, "member1-reader");
        assert_eq!(
            reader.namespace, None,
            "the readers' namespace is the controllers' default"
        );
    }
}
