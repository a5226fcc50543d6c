//! Sharding: N syncer replicas share the member clusters, one Lease per cluster.
//!
//! Every replica keeps a presence Lease (`flotilla-syncer-replica-<identity>`), so all of them
//! know the live replicas. From the same inputs — the served Clusters and the live replicas —
//! every replica computes the same balanced assignment ([`assign`]: rendezvous hashing with a
//! bound of ⌈clusters / replicas⌉ per replica), then takes the per-cluster Lease
//! (`flotilla-syncer-cluster-<name>`) of each cluster assigned to it and gives up those that are
//! not. The Lease, not the computation, decides who acts: a cluster is served only while its
//! Lease is held, so two replicas never serve one cluster at once even when their views differ
//! for a moment. A new replica takes its share once the others see it; a dead replica's clusters
//! are taken over once its Leases expire.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::RwLock;
use std::time::Duration;

use flotilla_runtime::{LeaderElector, LeaseConfig};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;

/// Name prefix of the replicas' presence Leases.
pub const REPLICA_LEASE_PREFIX: &str = "flotilla-syncer-replica-";
/// Name prefix of the per-cluster Leases.
pub const CLUSTER_LEASE_PREFIX: &str = "flotilla-syncer-cluster-";

/// Which clusters this replica holds the Lease of. Without sharding it serves every cluster.
#[derive(Default)]
pub struct Shards {
    sharded: bool,
    held: RwLock<HashSet<String>>,
}

impl Shards {
    /// A replica that serves every cluster (sharding off).
    pub fn all() -> Self {
        Self::default()
    }

    /// A replica that serves only the clusters whose Lease it holds.
    pub fn sharded() -> Self {
        Self {
            sharded: true,
            held: RwLock::default(),
        }
    }

    /// Whether this replica serves member `cluster` now.
    pub fn serves(&self, cluster: &str) -> bool {
        !self.sharded
            || self
                .held
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .contains(cluster)
    }

    fn set(&self, cluster: &str, held: bool) -> bool {
        let mut set = self.held.write().unwrap_or_else(|e| e.into_inner());
        if held {
            set.insert(cluster.to_string())
        } else {
            set.remove(cluster)
        }
    }
}

/// A name usable in a Lease name: lower case, `[a-z0-9-]` only.
pub fn lease_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect::<String>()
        .trim_matches('-')
        .to_string()
}

fn score(cluster: &str, replica: &str) -> u64 {
    let mut h = DefaultHasher::new();
    (cluster, replica).hash(&mut h);
    h.finish()
}

/// The balanced assignment of `clusters` to `replicas`: each cluster, in name order, goes to the
/// replica that ranks it highest (rendezvous hashing) among those with fewer than
/// ⌈clusters / replicas⌉ clusters. The same inputs give the same result on every replica.
pub fn assign(clusters: &[String], replicas: &[String]) -> BTreeMap<String, String> {
    let mut replicas: Vec<&String> = replicas.iter().collect();
    replicas.sort();
    replicas.dedup();
    let mut clusters: Vec<&String> = clusters.iter().collect();
    clusters.sort();
    clusters.dedup();
    let mut out = BTreeMap::new();
    if replicas.is_empty() {
        return out;
    }
    let bound = clusters.len().div_ceil(replicas.len());
    let mut load: HashMap<&String, usize> = HashMap::new();
    for cluster in clusters {
        let mut ranked = replicas.clone();
        ranked.sort_by_key(|r| std::cmp::Reverse(score(cluster, r)));
        if let Some(replica) = ranked
            .into_iter()
            .find(|r| load.get(r).copied().unwrap_or(0) < bound)
        {
            *load.entry(replica).or_default() += 1;
            out.insert(cluster.clone(), replica.clone());
        }
    }
    out
}

/// How the shard Leases are held.
#[derive(Clone, Debug)]
pub struct ShardConfig {
    pub namespace: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub retry_period: Duration,
}

/// The live replicas, from their presence Leases.
async fn live_replicas(api: &Api<Lease>) -> Result<Vec<String>, kube::Error> {
    let now = Timestamp::now();
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|lease| {
            let name = lease.name_any();
            let replica = name.strip_prefix(REPLICA_LEASE_PREFIX)?.to_string();
            let spec = lease.spec?;
            spec.holder_identity.filter(|h| !h.is_empty())?;
            let renewed = spec.renew_time?.0;
            let duration = i64::from(spec.lease_duration_seconds.unwrap_or(0));
            let expires = renewed.checked_add(jiff_seconds(duration)).ok()?;
            (expires > now).then_some(replica)
        })
        .collect())
}

fn jiff_seconds(s: i64) -> k8s_openapi::jiff::SignedDuration {
    k8s_openapi::jiff::SignedDuration::from_secs(s)
}

/// Keeps this replica's presence Lease and the Leases of the clusters assigned to it, until
/// `shutdown`; then releases them all. `clusters` lists the served Clusters; `on_change` is
/// called with a cluster this replica started (`true`) or stopped (`false`) serving.
pub async fn run(
    client: Client,
    config: ShardConfig,
    shards: std::sync::Arc<Shards>,
    clusters: impl Fn() -> Vec<String>,
    on_change: impl Fn(&str, bool),
    shutdown: CancellationToken,
) {
    let me = lease_safe(&config.identity);
    let lease = |name: String| LeaseConfig {
        namespace: config.namespace.clone(),
        name,
        identity: config.identity.clone(),
        lease_duration: config.lease_duration,
        renew_deadline: config.lease_duration.mul_f64(2.0 / 3.0),
        retry_period: config.retry_period,
    };
    let api: Api<Lease> = Api::namespaced(client.clone(), &config.namespace);
    let mut presence =
        LeaderElector::new(client.clone(), lease(format!("{REPLICA_LEASE_PREFIX}{me}")));
    let mut electors: HashMap<String, LeaderElector> = HashMap::new();
    // Clusters given up in the previous round: their Lease is released one round later, so
    // reconciliations still running finish before another replica starts.
    let mut letting_go: Vec<String> = Vec::new();
    loop {
        for cluster in letting_go.drain(..) {
            if let Some(mut elector) = electors.remove(&cluster) {
                elector.release().await;
            }
        }
        if let Err(e) = presence.try_acquire_or_renew().await {
            tracing::warn!(error = %e, "could not renew this replica's presence Lease");
        }
        match live_replicas(&api).await {
            Ok(mut replicas) => {
                if !replicas.contains(&me) {
                    replicas.push(me.clone());
                }
                let mine = assign(&clusters(), &replicas);
                for (cluster, owner) in &mine {
                    if *owner != me {
                        continue;
                    }
                    let elector = electors.entry(cluster.clone()).or_insert_with(|| {
                        LeaderElector::new(
                            client.clone(),
                            lease(format!("{CLUSTER_LEASE_PREFIX}{cluster}")),
                        )
                    });
                    let held = match elector.try_acquire_or_renew().await {
                        Ok(held) => held,
                        Err(e) => {
                            tracing::warn!(cluster, error = %e, "could not renew the cluster's Lease");
                            false
                        }
                    };
                    if shards.set(cluster, held) {
                        tracing::info!(
                            cluster,
                            held,
                            "{}",
                            if held {
                                "took the cluster's Lease: serving it"
                            } else {
                                "lost the cluster's Lease: no longer serving it"
                            }
                        );
                        on_change(cluster, held);
                    }
                }
                // Clusters assigned elsewhere (or gone): stop serving now, release next round.
                let others: Vec<String> = electors
                    .keys()
                    .filter(|c| mine.get(*c) != Some(&me))
                    .cloned()
                    .collect();
                for cluster in others {
                    if shards.set(&cluster, false) {
                        tracing::info!(
                            cluster,
                            "the cluster is assigned to another replica: handing it over"
                        );
                        on_change(&cluster, false);
                    }
                    letting_go.push(cluster);
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not list the replicas' Leases"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(config.retry_period) => {}
        }
    }
    for (cluster, mut elector) in electors {
        shards.set(&cluster, false);
        elector.release().await;
    }
    presence.release().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    fn load(a: &BTreeMap<String, String>) -> BTreeMap<String, usize> {
        let mut l = BTreeMap::new();
        for r in a.values() {
            *l.entry(r.clone()).or_default() += 1;
        }
        l
    }

    #[test]
    fn clusters_are_spread_evenly_and_deterministically() {
        let clusters = names("member", 10);
        let replicas = names("syncer-", 3);
        let a = assign(&clusters, &replicas);
        assert_eq!(a.len(), 10);
        assert!(load(&a).values().all(|n| *n <= 4 && *n >= 2), "{a:?}");
        let mut reversed = replicas.clone();
        reversed.reverse();
        assert_eq!(a, assign(&clusters, &reversed), "order does not matter");
        assert!(assign(&clusters, &[]).is_empty());
    }

    #[test]
    fn two_replicas_split_four_clusters_two_and_two() {
        let a = assign(&names("c", 4), &names("r", 2));
        assert_eq!(load(&a).values().copied().collect::<Vec<_>>(), vec![2, 2]);
    }

    #[test]
    fn a_dead_replicas_clusters_move_and_the_others_mostly_stay() {
        let clusters = names("member", 12);
        let before = assign(&clusters, &names("r", 3));
        let after = assign(&clusters, &names("r", 2));
        assert!(after.values().all(|r| r != "r2"));
        let kept = before
            .iter()
            .filter(|(c, r)| *r != "r2" && after.get(*c) == Some(*r))
            .count();
        let movable = before.values().filter(|r| *r != "r2").count();
        assert!(
            kept * 2 >= movable,
            "most clusters stay: {before:?} -> {after:?}"
        );
    }

    #[test]
    fn identities_become_lease_names() {
        assert_eq!(lease_safe("Host_1234"), "host-1234");
        assert_eq!(lease_safe("pod-a"), "pod-a");
    }
}
