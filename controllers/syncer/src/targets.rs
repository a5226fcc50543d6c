//! The member clusters this syncer serves, and their clients.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_api::{Cluster, SyncMode, conditions, names};
use flotilla_runtime::MemberClients;
use flotilla_runtime::member_client::{MemberClientError, read_secret};
use k8s_openapi::api::core::v1::Secret;
use kube::api::ApiResource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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

/// How long a member's client is used before its kubeconfig Secret is read again (so a rotated
/// credential is picked up within this time, and a busy syncer does not read the Secret on every
/// reconciliation).
const CLIENT_TTL: Duration = Duration::from_secs(10);

/// The clients of a member, and what identifies them (the Secret and its resourceVersion).
#[derive(Clone)]
pub struct Member {
    /// For reads and writes: each request is bounded by a timeout, so a member that stops
    /// answering fails its requests instead of holding them.
    pub client: Client,
    /// For the member's watches (long-lived, kept alive by kube's watcher).
    pub watch_client: Client,
    pub key: String,
}

impl Member {
    /// The watches of these types in this member, as [`crate::watches::MemberWatches`] takes
    /// them.
    pub fn uses<'a>(&'a self, resources: &'a [ApiResource]) -> Vec<crate::watches::Use<'a>> {
        resources
            .iter()
            .map(|resource| crate::watches::Use {
                client: &self.watch_client,
                client_key: &self.key,
                resource,
            })
            .collect()
    }
}

/// Push-mode members, from a watched cache of Clusters.
pub struct Targets {
    pub hub: Client,
    pub clusters: Store<Cluster>,
    pub clients: MemberClients,
    /// Namespace of kubeconfig Secrets whose reference names none.
    pub secret_namespace: String,
    /// Recently built clients, by member.
    pub recent: Mutex<HashMap<String, (Member, Instant)>>,
    /// The members this replica holds the shard Lease of.
    pub shards: std::sync::Arc<crate::shard::Shards>,
    /// Pull mode: the one member this syncer runs in, and its client.
    pub pull: Option<PullTarget>,
}

/// The member a pull-mode syncer runs in.
pub struct PullTarget {
    pub cluster: String,
    pub member: Member,
}

/// Whether this syncer serves a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serving {
    Yes,
    /// A pull-mode member: its own syncer serves it.
    ByAgent,
    /// Not this syncer's (not selected, another shard, or no such Cluster).
    No,
}

/// Where a Cluster is in its life, as the hub says now (not from a cache).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterLifecycle {
    Present,
    /// Deleted, held by registration's finalizer while its namespace goes.
    Removing,
    Gone,
}

impl Targets {
    /// Whether this syncer runs in a member (pull mode).
    pub fn is_pull(&self) -> bool {
        self.pull.is_some()
    }

    /// Whether this syncer serves member `name`.
    pub fn serving(&self, name: &str) -> Serving {
        if let Some(pull) = &self.pull {
            return if pull.cluster == name {
                Serving::Yes
            } else {
                Serving::No
            };
        }
        match self.cluster(name) {
            Some(c) if c.spec.sync_mode == SyncMode::Push => Serving::Yes,
            Some(_) => Serving::ByAgent,
            None => Serving::No,
        }
    }

    /// Whether this syncer serves member `name` now.
    pub fn serves(&self, name: &str) -> bool {
        self.serving(name) == Serving::Yes
    }

    /// The cached Cluster `name`, if this syncer serves it (it is selected and, with sharding,
    /// this replica holds its Lease).
    pub fn cluster(&self, name: &str) -> Option<std::sync::Arc<Cluster>> {
        if !self.shards.serves(name) {
            return None;
        }
        self.clusters.get(&ObjectRef::new(name))
    }

    /// Whether Cluster `name` exists on the hub, or is being removed (also when this syncer does
    /// not serve it).
    pub async fn lifecycle(&self, name: &str) -> Result<ClusterLifecycle, kube::Error> {
        Ok(
            match Api::<Cluster>::all(self.hub.clone()).get_opt(name).await? {
                None => ClusterLifecycle::Gone,
                Some(c) if c.metadata.deletion_timestamp.is_some() => ClusterLifecycle::Removing,
                Some(_) => ClusterLifecycle::Present,
            },
        )
    }

    /// Forgets the client of member `name` (it went away, or this syncer no longer serves it).
    pub fn forget(&self, name: &str) {
        self.recent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        self.clients.forget(name);
    }

    /// A client for member `name`, if it is a push-mode member this syncer serves and it is Ready.
    pub async fn client(&self, name: &str) -> Result<Member, Unavailable> {
        if let Some(pull) = &self.pull {
            return if pull.cluster == name {
                Ok(pull.member.clone())
            } else {
                Err(Unavailable::NotServed(name.into()))
            };
        }
        let Some(cluster) = self.cluster(name) else {
            return Err(match self.lifecycle(name).await {
                Ok(ClusterLifecycle::Gone) => Unavailable::Gone(name.into()),
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
        let cached = self
            .recent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .filter(|(_, at)| at.elapsed() < CLIENT_TTL)
            .map(|(m, _)| m.clone());
        if let Some(member) = cached {
            return Ok(member);
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
        let client = self
            .clients
            .client_for(
                name,
                &secret,
                &reference.key,
                flotilla_runtime::member_client::Transport::of(
                    cluster.spec.allow_insecure_transport,
                ),
            )
            .await
            .map_err(|e| Unavailable::NoClient(name.into(), e.to_string()))?;
        let member = Member {
            client: client.requests,
            watch_client: client.watches,
            key: flotilla_runtime::member_client::secret_version_key(
                &namespace,
                &reference.name,
                &reference.key,
                &secret,
            ),
        };
        self.recent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), (member.clone(), Instant::now()));
        Ok(member)
    }

    /// The member a Work namespace belongs to.
    pub fn cluster_of_namespace(namespace: &str) -> Option<&str> {
        names::cluster_from_namespace(namespace)
    }
}

/// How many Works are reconciled at the same time: at most `per_member` of one member, and at
/// most `total` in all. A Work first waits for its member's share, then for the common one, so
/// the Works of a member that is slow or stops answering queue behind each other and never take
/// the places of the other members' Works.
pub struct MemberSlots {
    per_member: usize,
    total: Arc<Semaphore>,
    members: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// One reconciliation of a member's Work under way; its places are given back when dropped.
pub struct MemberSlot {
    _member: OwnedSemaphorePermit,
    _total: OwnedSemaphorePermit,
}

impl MemberSlots {
    pub fn new(total: usize, per_member: usize) -> Self {
        Self {
            per_member: per_member.clamp(1, total.max(1)),
            total: Arc::new(Semaphore::new(total.max(1))),
            members: Mutex::default(),
        }
    }

    /// Waits for a place for a Work of member `cluster`.
    pub async fn take(&self, cluster: &str) -> MemberSlot {
        let member = self
            .members
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(cluster.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_member)))
            .clone();
        // Neither semaphore is ever closed.
        let member = member.acquire_owned().await.expect("never closed");
        let total = self
            .total
            .clone()
            .acquire_owned()
            .await
            .expect("never closed");
        MemberSlot {
            _member: member,
            _total: total,
        }
    }

    /// Forgets member `cluster` (it went away); Works under way keep their places.
    pub fn forget(&self, cluster: &str) {
        self.members
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(cluster);
    }
}

#[cfg(test)]
mod slot_tests {
    use super::*;

    #[tokio::test]
    async fn a_member_gets_at_most_its_share_and_never_the_others_places() {
        let slots = Arc::new(MemberSlots::new(3, 2));
        let _a1 = slots.take("a").await;
        let _a2 = slots.take("a").await;
        // A third Work of `a` waits for `a`'s share, without taking the last common place ...
        let waiting = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.take("a").await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        // ... which another member's Work gets at once.
        let b = tokio::time::timeout(std::time::Duration::from_secs(1), slots.take("b")).await;
        assert!(b.is_ok(), "b waited behind a");
        drop(_a1);
        tokio::time::timeout(std::time::Duration::from_secs(1), async {
            drop(b);
            waiting.await
        })
        .await
        .expect("a's third Work gets the place given back")
        .expect("task");
    }

    #[test]
    fn the_share_is_at_least_one_and_at_most_everything() {
        assert_eq!(MemberSlots::new(2, 0).per_member, 1);
        assert_eq!(MemberSlots::new(2, 5).per_member, 2);
    }
}
