//! Clean-up of the `Cluster` objects a test created on the shared hub.

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
