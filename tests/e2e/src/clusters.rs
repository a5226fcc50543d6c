//! The `Cluster` objects of a test on the shared hub: registering push-mode members (as
//! `kubectl flotilla join` does), and clean-up.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use flotilla_api::Cluster;
use flotilla_cli::join::{JoinOptions, Reader, join};
use flotilla_runtime::member_client::Transport;
use k8s_openapi::api::core::v1::Namespace;
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

/// The member namespace of the read-only identity the tests' registrations make (not the
/// default `flotilla-system`, which a chart test may install into and delete on the host member).
const READER_NAMESPACE: &str = "flotilla-e2e-reader";

/// How long the tests' reader tokens live.
const READER_TOKEN_LIFETIME: Duration = Duration::from_secs(6 * 3600);

/// Registers `member` as push-mode Cluster `name`, labelled `label` (`key`, `value`) so that only
/// the test's own controllers select it, with the code of `kubectl flotilla join`: the syncer's
/// kubeconfig in Secret `<name>-kubeconfig` of `namespace` (the release namespace of the test's
/// chart identities), and the identity of `deploy/member/reader.yaml` in the member with its
/// kubeconfig in Secret `<name>-reader` of [`readers_namespace`]`(namespace)` — or, where the
/// test's identities made no readers' namespace (its controllers read with the writable
/// kubeconfig), none (`join --read-writable`).
pub async fn register_push(
    hub: &kube::Client,
    namespace: &str,
    name: &str,
    member: &crate::ClusterInfo,
    label: (&str, &str),
) -> anyhow::Result<()> {
    let readers = readers_namespace(namespace);
    let mut options = JoinOptions::new(name, namespace);
    options.labels.insert(label.0.into(), label.1.into());
    options.reader = if Api::<Namespace>::all(hub.clone())
        .get_opt(&readers)
        .await?
        .is_some()
    {
        Reader::Separate {
            hub_namespace: readers,
            member_namespace: READER_NAMESPACE.into(),
            token_lifetime: READER_TOKEN_LIFETIME,
            secret: None,
        }
    } else {
        Reader::Writable
    };
    let kubeconfig =
        flotilla_cli::kubeconfig::for_member(&member.kubeconfig, None, Transport::Verified)?;
    join(hub, &kubeconfig, &options)
        .await
        .with_context(|| format!("joining {} as Cluster {name}", member.name))?;
    Ok(())
}
