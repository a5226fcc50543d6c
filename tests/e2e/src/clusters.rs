//! The `Cluster` objects of a test on the shared hub: registering push-mode members, and clean-up.

use std::path::PathBuf;

use anyhow::anyhow;
use flotilla_api::Cluster;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

/// Deletes every Cluster matching a label selector when dropped — also when the test panics —
/// removing finalizers first, since the test's controller is gone by then. Declare it after the
/// controller process so that it is dropped after it.
pub struct ClusterCleanup {
    kubeconfig: PathBuf,
    selector: String,
}

impl ClusterCleanup {
    pub fn new(hub: &crate::ClusterInfo, selector: impl Into<String>) -> Self {
        Self {
            kubeconfig: hub.kubeconfig.clone(),
            selector: selector.into(),
        }
    }
}

impl Drop for ClusterCleanup {
    fn drop(&mut self) {
        let kubeconfig = self.kubeconfig.clone();
        let selector = self.selector.clone();
        let done = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let api: Api<Cluster> = Api::all(crate::client_from_kubeconfig(&kubeconfig).await?);
                for cluster in api
                    .list(&ListParams::default().labels(&selector))
                    .await?
                    .items
                {
                    let name = cluster.name_any();
                    let _ = api
                        .patch(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                        )
                        .await;
                    match api.delete(&name, &DeleteParams::background()).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(s)) if s.code == 404 => {}
                        Err(e) => {
                            return Err(anyhow!(e).context(format!("deleting Cluster {name}")));
                        }
                    }
                }
                Ok::<_, anyhow::Error>(())
            })
        })
        .join();
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("warning: {e:#}"),
            Err(_) => eprintln!("warning: Cluster clean-up panicked"),
        }
    }
}

/// The namespace of the read-only member kubeconfigs of a chart release in `namespace` (the
/// chart's default `memberCredentials.readersNamespace`).
pub fn readers_namespace(namespace: &str) -> String {
    format!("{namespace}-readers")
}

/// Stores `member`'s kubeconfigs as a user registering a push-mode member does: its admin
/// kubeconfig in Secret `name` (key `kubeconfig`) of `namespace` on the hub, for the syncer, and
/// a read-only one (the identity of `deploy/member/reader.yaml`, see [`reader_kubeconfig`]) in
/// Secret `name` of [`readers_namespace`]`(namespace)`, for registration and the negotiator,
/// when the test's chart identities made that namespace.
pub async fn kubeconfig_secret(
    hub: &kube::Client,
    namespace: &str,
    name: &str,
    member: &crate::ClusterInfo,
) -> anyhow::Result<()> {
    store_kubeconfig(hub, namespace, name, std::fs::read(&member.kubeconfig)?).await?;
    let readers = readers_namespace(namespace);
    if Api::<k8s_openapi::api::core::v1::Namespace>::all(hub.clone())
        .get_opt(&readers)
        .await?
        .is_some()
    {
        store_kubeconfig(hub, &readers, name, reader_kubeconfig(member).await?).await?;
    }
    Ok(())
}

/// Creates Secret `name` of `namespace` on the hub holding `kubeconfig` (key `kubeconfig`).
async fn store_kubeconfig(
    hub: &kube::Client,
    namespace: &str,
    name: &str,
    kubeconfig: Vec<u8>,
) -> anyhow::Result<()> {
    let secret = k8s_openapi::api::core::v1::Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            [(
                "kubeconfig".to_string(),
                k8s_openapi::ByteString(kubeconfig),
            )]
            .into(),
        ),
        ..Default::default()
    };
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(hub.clone(), namespace)
        .create(&kube::api::PostParams::default(), &secret)
        .await?;
    Ok(())
}

/// The namespace of the read-only identity [`reader_kubeconfig`] makes in each member.
const READER_NAMESPACE: &str = "flotilla-e2e-reader";

/// A read-only kubeconfig of `member`, as an admin makes one for a Cluster's
/// `readOnlyKubeconfigSecretRef`: the ClusterRole of `deploy/member/reader.yaml` bound to a
/// ServiceAccount, and a token of it (valid 6 hours). Made once per member and test process.
pub async fn reader_kubeconfig(member: &crate::ClusterInfo) -> anyhow::Result<Vec<u8>> {
    static MADE: tokio::sync::Mutex<std::collections::BTreeMap<String, Vec<u8>>> =
        tokio::sync::Mutex::const_new(std::collections::BTreeMap::new());
    let mut made = MADE.lock().await;
    if let Some(kubeconfig) = made.get(&member.name) {
        return Ok(kubeconfig.clone());
    }
    let client = member.client().await?;
    let manifest = crate::repo_root().join("deploy/member/reader.yaml");
    let documents: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&std::fs::read_to_string(&manifest)?)?;
    let role = documents
        .iter()
        .find(|d| d["kind"] == "ClusterRole")
        .ok_or_else(|| anyhow!("no ClusterRole in {}", manifest.display()))?;
    let account = "flotilla-reader";
    for object in [
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": READER_NAMESPACE}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": account, "namespace": READER_NAMESPACE}}),
        role.clone(),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "flotilla-e2e:reader"},
               "roleRef": role_ref(role),
               "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": READER_NAMESPACE}]}),
    ] {
        crate::api::apply(&client, &object, false)
            .await?
            .map_err(|e| anyhow!("applying the reader identity to {}: {e}", member.name))?;
    }
    let request = k8s_openapi::api::authentication::v1::TokenRequest {
        spec: Some(k8s_openapi::api::authentication::v1::TokenRequestSpec {
            expiration_seconds: Some(6 * 3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token =
        Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client, READER_NAMESPACE)
            .create_token_request(account, &kube::api::PostParams::default(), &request)
            .await?
            .status
            .and_then(|s| s.token)
            .ok_or_else(|| anyhow!("no token of the reader of {}", member.name))?;
    let kubeconfig = std::fs::read(crate::chart::cluster_kubeconfig_with_token(member, &token)?)?;
    made.insert(member.name.clone(), kubeconfig.clone());
    Ok(kubeconfig)
}

/// The `roleRef` naming ClusterRole `role`.
fn role_ref(role: &serde_json::Value) -> serde_json::Value {
    json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]})
}

/// Creates push-mode Cluster `name` reaching its member through kubeconfig Secret `secret` (and
/// the read-only one of the same name, see [`kubeconfig_secret`]), labelled `label` (`key`,
/// `value`) so that only the test's own controllers select it.
pub async fn push_cluster(
    hub: &kube::Client,
    name: &str,
    secret: &str,
    label: (&str, &str),
) -> anyhow::Result<()> {
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "Cluster",
        "metadata": {"name": name, "labels": {label.0: label.1}},
        "spec": {"syncMode": "Push", "kubeconfigSecretRef": {"name": secret},
                 "readOnlyKubeconfigSecretRef": {"name": secret}},
    }))?;
    Api::<Cluster>::all(hub.clone())
        .create(&kube::api::PostParams::default(), &cluster)
        .await?;
    Ok(())
}

/// Registers `member` as push-mode Cluster `name`: its kubeconfig in Secret `name` of
/// `namespace`, the Cluster labelled `label`.
pub async fn register_push(
    hub: &kube::Client,
    namespace: &str,
    name: &str,
    member: &crate::ClusterInfo,
    label: (&str, &str),
) -> anyhow::Result<()> {
    kubeconfig_secret(hub, namespace, name, member).await?;
    push_cluster(hub, name, name, label).await
}
