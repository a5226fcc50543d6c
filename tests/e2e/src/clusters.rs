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

/// Stores `member`'s admin kubeconfig in Secret `name` (key `kubeconfig`) of `namespace` on the
/// hub, as a user registering a push-mode member does.
pub async fn kubeconfig_secret(
    hub: &kube::Client,
    namespace: &str,
    name: &str,
    member: &crate::ClusterInfo,
) -> anyhow::Result<()> {
    let secret = k8s_openapi::api::core::v1::Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            [(
                "kubeconfig".to_string(),
                k8s_openapi::ByteString(std::fs::read(&member.kubeconfig)?),
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

/// Creates push-mode Cluster `name` reaching its member through kubeconfig Secret `secret`,
/// labelled `label` (`key`, `value`) so that only the test's own controllers select it.
pub async fn push_cluster(
    hub: &kube::Client,
    name: &str,
    secret: &str,
    label: (&str, &str),
) -> anyhow::Result<()> {
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "Cluster",
        "metadata": {"name": name, "labels": {label.0: label.1}},
        "spec": {"syncMode": "Push", "kubeconfigSecretRef": {"name": secret}},
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
