//! The member clusters this syncer serves, and their clients.

use flotilla_api::{Cluster, SyncMode, conditions, names};
use flotilla_runtime::MemberClients;
use flotilla_runtime::member_client::{MemberClientError, read_secret};
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client};

/// Why a member cannot be written to right now. Nothing is ever deleted because of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    #[error("Cluster {0} does not exist")]
    Gone(String),
    #[error("Cluster {0} is served by another syncer")]
    NotServed(String),
    #[error("Cluster {cluster} is not Ready ({reason}): {message}")]
    NotReady {
        cluster: String,
        reason: String,
        message: String,
    },
    #[error("no client for Cluster {0}: {1}")]
    NoClient(String, String),
}

/// Push-mode members, from a watched cache of Clusters.
pub struct Targets {
    pub hub: Client,
    pub clusters: Store<Cluster>,
    pub clients: MemberClients,
    /// Namespace of kubeconfig Secrets whose reference names none.
    pub secret_namespace: String,
}

impl Targets {
    /// The cached Cluster `name`, if this syncer serves it.
    pub fn cluster(&self, name: &str) -> Option<std::sync::Arc<Cluster>> {
        self.clusters.get(&ObjectRef::new(name))
    }

    /// Whether Cluster `name` exists on the hub at all (also when this syncer does not serve it).
    pub async fn exists(&self, name: &str) -> Result<bool, kube::Error> {
        Ok(Api::<Cluster>::all(self.hub.clone())
            .get_opt(name)
            .await?
            .is_some())
    }

    /// A client for member `name`, if it is a push-mode member this syncer serves and it is Ready.
    pub async fn client(&self, name: &str) -> Result<Client, Unavailable> {
        let Some(cluster) = self.cluster(name) else {
            return Err(match self.exists(name).await {
                Ok(false) => Unavailable::Gone(name.into()),
                _ => Unavailable::NotServed(name.into()),
            });
        };
        if cluster.spec.sync_mode != SyncMode::Push {
            return Err(Unavailable::NotServed(name.into()));
        }
        let ready = cluster
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == conditions::READY));
        match ready {
            Some(c) if c.status == "True" => {}
            Some(c) => {
                return Err(Unavailable::NotReady {
                    cluster: name.into(),
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                });
            }
            None => {
                return Err(Unavailable::NotReady {
                    cluster: name.into(),
                    reason: "Unknown".into(),
                    message: "the registration controller has not reported on it yet".into(),
                });
            }
        }
        let Some(reference) = cluster.spec.kubeconfig_secret_ref.as_ref() else {
            return Err(Unavailable::NoClient(
                name.into(),
                "no kubeconfigSecretRef".into(),
            ));
        };
        let namespace = reference
            .namespace
            .clone()
            .unwrap_or_else(|| self.secret_namespace.clone());
        let secrets: Api<Secret> = Api::namespaced(self.hub.clone(), &namespace);
        let secret = read_secret(&secrets, &namespace, &reference.name)
            .await
            .map_err(|e: MemberClientError| Unavailable::NoClient(name.into(), e.to_string()))?;
        self.clients
            .client_for(name, &secret, &reference.key)
            .await
            .map_err(|e| Unavailable::NoClient(name.into(), e.to_string()))
    }

    /// The member a Work namespace belongs to.
    pub fn cluster_of_namespace(namespace: &str) -> Option<&str> {
        names::cluster_from_namespace(namespace)
    }
}
