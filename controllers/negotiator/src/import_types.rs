//! On the hub: the list of types each pull-mode member's importer imports.
//!
//! The importer of a pull-mode member runs in the member with the agent's hub credential, which
//! may not read Placements (they are the tenants'). So the negotiator writes, for every selected
//! pull-mode Cluster that is accepted (and whose namespace registration made for it), the
//! ConfigMap `flotilla-import-types` in `flotilla-cluster-<name>`: the types the hub importer
//! would import ([`types::wanted`]: the defaults, `--extra-type`, every type a Placement selects)
//! as one `<apiVersion>/<Kind>` a line under the key `types` ([`types::to_list`]). The agent's
//! credential may `get` that one ConfigMap; the importer imports those types besides its own
//! defaults and `--extra-type`.
//!
//! The list is computed from the negotiator's Placement and Cluster caches every [`TICK`] (in
//! memory; no API call) and written, with server-side apply, only to the members whose list
//! changed; it is read back (`get`) every `--import-interval` and written again only if someone
//! changed it. Nothing is written before both caches have listed everything: a Placement not yet
//! listed is not an absent one. The ConfigMap of a Cluster that is no longer selected, or no
//! longer in pull mode, is left as it is (nobody reads it); it goes with the namespace.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use flotilla_api::condition::{find_condition, is_condition_true};
use flotilla_api::{Cluster, SyncMode, conditions, field_managers, labels, names, reasons};
use flotilla_runtime::{Context, ErrorCategory};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::NegotiatorArgs;
use crate::negotiation::Shared;
use crate::types;

/// How often the lists are computed again from the caches.
pub const TICK: Duration = Duration::from_secs(2);

/// How long after a failed write a member's list is tried again.
const RETRY: Duration = Duration::from_secs(10);

/// The label that says who keeps the ConfigMap, and its value.
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "flotilla-negotiator");

/// The annotation that tells a reader what the ConfigMap is.
const DESCRIPTION: &str = "kubernetes.io/description";

/// What was last done for one member.
enum Entry {
    /// Its ConfigMap holds `list` (read or written at `at`).
    Written { list: String, at: Instant },
    /// Writing failed, for a reason of this category; tried again at `retry`.
    Failed {
        category: &'static str,
        retry: Instant,
    },
}

/// Whether the negotiator keeps the list of types for this Cluster: in pull mode, accepted (its
/// agent may read its namespace), not being deleted, and not refused its namespace (someone else
/// made `flotilla-cluster-<name>`: registration never uses it, nor does the negotiator).
pub fn wants_list(cluster: &Cluster) -> bool {
    let conditions = cluster.conditions();
    cluster.metadata.deletion_timestamp.is_none()
        && cluster.spec.sync_mode == SyncMode::Pull
        && is_condition_true(conditions, conditions::ACCEPTED)
        && find_condition(conditions, conditions::JOINED)
            .is_none_or(|c| c.reason != reasons::NAMESPACE_TAKEN)
}

/// The ConfigMap of `cluster` holding `list`, for server-side apply.
pub fn config_map(cluster: &str, list: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": names::IMPORT_TYPES_CONFIGMAP,
            "namespace": names::cluster_namespace(cluster),
            "labels": {MANAGED_BY.0: MANAGED_BY.1, labels::CLUSTER: cluster},
            "annotations": {DESCRIPTION: description(cluster)},
        },
        "data": {types::LIST_KEY: list},
    })
}

fn description(cluster: &str) -> String {
    format!(
        "The types that flotilla-negotiator importer in member {cluster} imports besides its \
         defaults and --extra-type, one <apiVersion>/<Kind> a line: the hub's defaults and \
         --extra-type, and every type a Placement selects. Kept by flotilla-negotiator on the hub; \
         changes are overwritten."
    )
}

/// Whether `existing` already says what [`config_map`] would write.
fn up_to_date(existing: &ConfigMap, cluster: &str, list: &str) -> bool {
    let label = |k: &str| existing.labels().get(k).map(String::as_str);
    existing
        .data
        .as_ref()
        .and_then(|d| d.get(types::LIST_KEY))
        .map(String::as_str)
        == Some(list)
        && label(MANAGED_BY.0) == Some(MANAGED_BY.1)
        && label(labels::CLUSTER) == Some(cluster)
        && existing.annotations().get(DESCRIPTION) == Some(&description(cluster))
}

/// Makes `cluster`'s ConfigMap hold `list`: read, and applied only if it says something else.
/// Returns whether it was written.
async fn sync(client: &kube::Client, cluster: &str, list: &str) -> Result<bool, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &names::cluster_namespace(cluster));
    if let Some(existing) = api.get_opt(names::IMPORT_TYPES_CONFIGMAP).await?
        && up_to_date(&existing, cluster, list)
    {
        return Ok(false);
    }
    api.patch(
        names::IMPORT_TYPES_CONFIGMAP,
        &PatchParams::apply(field_managers::NEGOTIATOR).force(),
        &Patch::Apply(config_map(cluster, list)),
    )
    .await?;
    Ok(true)
}

/// Keeps every pull-mode member's list of types until `ctx.shutdown`.
pub async fn run(ctx: Context, args: NegotiatorArgs, shared: Shared) -> anyhow::Result<()> {
    use flotilla_runtime::cache::wait_until_synced;
    tokio::select! {
        _ = ctx.shutdown.cancelled() => return Ok(()),
        _ = async {
            wait_until_synced(&shared.clusters).await;
            wait_until_synced(&shared.placements).await;
        } => {}
    }
    let mut done: HashMap<String, Entry> = HashMap::new();
    loop {
        pass(&ctx, &args, &shared, &mut done).await;
        tokio::select! {
            _ = ctx.shutdown.cancelled() => return Ok(()),
            _ = tokio::time::sleep(TICK) => {}
        }
    }
}

/// Writes the lists that changed (or are due to be read back, or to be tried again).
async fn pass(
    ctx: &Context,
    args: &NegotiatorArgs,
    shared: &Shared,
    done: &mut HashMap<String, Entry>,
) {
    let placements = shared.placements.state();
    let list = types::to_list(&types::wanted(
        placements.iter().map(|p| &**p),
        &args.import.extra_types,
    ));
    let members: HashSet<String> = shared
        .clusters
        .state()
        .iter()
        .filter(|c| wants_list(c))
        .map(|c| c.name_any())
        .collect();
    done.retain(|name, _| members.contains(name));
    let now = Instant::now();
    let due = members.into_iter().filter(|name| match done.get(name) {
        None => true,
        Some(Entry::Written { list: l, at }) => {
            *l != list || now.duration_since(*at) >= args.import.import_interval
        }
        Some(Entry::Failed { retry, .. }) => now >= *retry,
    });
    let list = list.as_str();
    let results: Vec<(String, Result<bool, kube::Error>)> = futures::stream::iter(due)
        .map(|name| async move {
            let started = Instant::now();
            let result = sync(&ctx.client, &name, list).await;
            ctx.metrics.observe_reconcile(
                "import-types",
                started.elapsed().as_secs_f64(),
                result.as_ref().err().map(|e| e.category()),
            );
            (name, result)
        })
        .buffer_unordered(usize::from(args.concurrency.max(1)))
        .collect()
        .await;
    for (name, result) in results {
        match result {
            Ok(written) => {
                if written {
                    tracing::info!(
                        cluster = name,
                        types = list.lines().count(),
                        "wrote the list of types the pull-mode member imports"
                    );
                }
                done.insert(
                    name,
                    Entry::Written {
                        list: list.to_string(),
                        at: Instant::now(),
                    },
                );
            }
            Err(e) => {
                let category = e.category();
                // Once per kind of failure, not every retry.
                if !matches!(done.get(&name), Some(Entry::Failed { category: last, .. }) if *last == category)
                {
                    tracing::warn!(
                        cluster = name,
                        error = %e,
                        "cannot write the list of types the pull-mode member imports; retrying every {}s",
                        RETRY.as_secs()
                    );
                }
                done.insert(
                    name,
                    Entry::Failed {
                        category,
                        retry: Instant::now() + RETRY,
                    },
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(mode: &str, conditions: Value) -> Cluster {
        serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Cluster",
            "metadata": {"name": "east"},
            "spec": {"syncMode": mode, "hubAcceptsClient": true},
            "status": {"conditions": conditions},
        }))
        .expect("a Cluster")
    }

    fn condition(type_: &str, status: &str, reason: &str) -> Value {
        json!({"type": type_, "status": status, "reason": reason, "message": "",
               "lastTransitionTime": "2024-01-01T00:00:00Z"})
    }

    #[test]
    fn only_accepted_pull_members_with_their_namespace_get_a_list() {
        let accepted = condition("Accepted", "True", "Accepted");
        let joined = condition("Joined", "True", "Joined");
        assert!(wants_list(&cluster("Pull", json!([accepted, joined]))));
        // Accepted, the agent not heard from yet: the list is there before the importer asks.
        let awaiting = condition("Joined", "False", "AwaitingAgent");
        assert!(wants_list(&cluster("Pull", json!([accepted, awaiting]))));
        assert!(!wants_list(&cluster("Push", json!([accepted, joined]))));
        let waiting = condition("Accepted", "False", "AwaitingAcceptance");
        assert!(!wants_list(&cluster("Pull", json!([waiting]))));
        let taken = condition("Joined", "False", "NamespaceTaken");
        assert!(!wants_list(&cluster("Pull", json!([accepted, taken]))));
        let mut deleting = cluster("Pull", json!([accepted, joined]));
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2024-01-01T00:00:00Z".parse().expect("a time"),
            ));
        assert!(!wants_list(&deleting));
    }

    #[test]
    fn the_config_map_is_up_to_date_only_with_the_same_list_and_labels() {
        let written: ConfigMap = serde_json::from_value(config_map("east", "apps/v1/Deployment\n"))
            .expect("a ConfigMap");
        assert_eq!(
            written.metadata.namespace.as_deref(),
            Some("flotilla-cluster-east")
        );
        assert!(up_to_date(&written, "east", "apps/v1/Deployment\n"));
        assert!(!up_to_date(
            &written,
            "east",
            "apps/v1/Deployment\nv1/Pod\n"
        ));
        assert!(!up_to_date(&written, "west", "apps/v1/Deployment\n"));
        let mut unlabelled = written.clone();
        unlabelled.metadata.labels = None;
        assert!(!up_to_date(&unlabelled, "east", "apps/v1/Deployment\n"));
        // Another key someone added does not make it stale (apply would not remove it anyway).
        let mut more = written;
        more.data
            .get_or_insert_default()
            .insert("note".into(), "hello".into());
        assert!(up_to_date(&more, "east", "apps/v1/Deployment\n"));
    }
}
