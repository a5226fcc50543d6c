//! Each selected Cluster's `status.resources`: per resource type, Compatible / Partial /
//! Incompatible / Pending, from its imports' `Compatible` conditions (the default types without
//! an import yet are Pending).
//!
//! Written with server-side apply on the status subresource by `flotilla/negotiator`, owning
//! only `status.resources` (a list keyed by group, version and resource): the registration
//! controller applies the other status fields with its own field manager, so neither removes
//! what the other wrote.

use std::sync::Arc;
use std::time::Duration;

use flotilla_api::{
    ApiResourceImport, Cluster, Compatibility, ResourceCompatibility, field_managers,
};
use flotilla_runtime::Context;
use flotilla_runtime::events::truncate;
use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use crate::NegotiatorArgs;
use crate::metrics::NegotiatorMetrics;
use crate::negotiation::Shared;
use crate::types::DEFAULT_IMPORTS;
use crate::verdict;
use flotilla_runtime::reconcile::{Retry, error_policy};

/// When an object is tried again after a failed reconciliation.
const RETRY: Retry = Retry {
    transient: Duration::from_secs(5),
    permanent: Some(Duration::from_secs(5)),
};

/// The longest message kept per resource type in a Cluster's status.
const MAX_MESSAGE_BYTES: usize = 512;

struct State {
    ctx: Context,
    args: NegotiatorArgs,
    shared: Shared,
    metrics: NegotiatorMetrics,
}

/// The compatibility summary of a member from its imports (pure).
pub fn summarize<'a>(
    imports: impl IntoIterator<Item = &'a ApiResourceImport>,
) -> Vec<ResourceCompatibility> {
    let mut out: Vec<ResourceCompatibility> = imports
        .into_iter()
        .map(|i| {
            let r = &i.spec.resource;
            let (compatibility, message) = verdict::compatibility(i);
            ResourceCompatibility {
                group: r.group_version.group.clone(),
                version: r.group_version.version.clone(),
                resource: r.names.plural.clone(),
                compatibility,
                message: message.map(|m| truncate(m, MAX_MESSAGE_BYTES)),
            }
        })
        .collect();
    for (group, version, _, plural) in DEFAULT_IMPORTS {
        if !out
            .iter()
            .any(|r| r.group == group && r.version == version && r.resource == plural)
        {
            out.push(ResourceCompatibility {
                group: group.into(),
                version: version.into(),
                resource: plural.into(),
                compatibility: Compatibility::Pending,
                message: Some("not imported yet".into()),
            });
        }
    }
    out.sort_by(|a, b| {
        (&a.group, &a.version, &a.resource).cmp(&(&b.group, &b.version, &b.resource))
    });
    out
}

/// Runs the Cluster summary controller until `ctx.shutdown`.
pub async fn run(
    ctx: Context,
    args: NegotiatorArgs,
    shared: Shared,
    metrics: NegotiatorMetrics,
) -> anyhow::Result<()> {
    let config = flotilla_runtime::cache::selected(&args.cluster_selector);
    let state = Arc::new(State {
        ctx: ctx.clone(),
        args,
        shared,
        metrics,
    });
    flotilla_runtime::guard::controller(
        Api::<DeserializeGuard<Cluster>>::all(ctx.client.clone()),
        config,
    )
    .with_config(controller::Config::default().debounce(Duration::from_millis(500)))
    // An import's verdict changes: its Cluster's summary. (Guarded: an agent writes its
    // imports, and one that does not decode must not stop this watch; its namespace still says
    // whose it is.)
    .watches(
        Api::<DeserializeGuard<ApiResourceImport>>::all(ctx.client.clone()),
        watcher::Config::default(),
        |import| {
            import
                .namespace()
                .as_deref()
                .and_then(flotilla_api::names::cluster_from_namespace)
                .map(ObjectRef::new)
        },
    )
    .graceful_shutdown_on(ctx.shutdown.clone().cancelled_owned())
    .run(reconcile, error_policy(RETRY), state)
    .for_each(|_| async {})
    .await;
    Ok(())
}

async fn reconcile(cluster: Arc<Cluster>, state: Arc<State>) -> Result<Action, kube::Error> {
    state
        .ctx
        .metrics
        .measure("cluster", reconcile_inner(&cluster, &state))
        .await
}

async fn reconcile_inner(cluster: &Cluster, state: &State) -> Result<Action, kube::Error> {
    let name = cluster.name_any();
    let imports: Vec<_> = state
        .shared
        .selected_imports(None)
        .into_iter()
        .filter(|i| i.cluster_name() == Some(name.as_str()))
        .collect();
    let resources = summarize(imports.iter().map(|i| &**i));
    let incompatible = resources
        .iter()
        .filter(|r| {
            matches!(
                r.compatibility,
                Compatibility::Incompatible | Compatibility::Partial
            )
        })
        .count();
    state
        .metrics
        .imports
        .with_label_values(&[&name])
        .set(imports.len() as i64);
    state
        .metrics
        .incompatible_imports
        .with_label_values(&[&name])
        .set(incompatible as i64);
    let current = cluster
        .status
        .as_ref()
        .map(|s| s.resources.as_slice())
        .unwrap_or_default();
    if cluster.metadata.deletion_timestamp.is_none() && current != resources.as_slice() {
        Api::<Cluster>::all(state.ctx.client.clone())
            .patch_status(
                &name,
                &PatchParams::apply(field_managers::NEGOTIATOR).force(),
                &Patch::Apply(json!({
                    "apiVersion": Cluster::api_version(&()),
                    "kind": Cluster::kind(&()),
                    "status": {"resources": resources},
                })),
            )
            .await?;
    }
    Ok(Action::requeue(state.args.import.import_interval))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_without_an_import_are_pending() {
        let import: ApiResourceImport = serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "APIResourceImport",
            "metadata": {"name": "deployments.v1.apps", "namespace": "flotilla-cluster-a"},
            "spec": {"groupVersion": {"group": "apps", "version": "v1"},
                     "names": {"plural": "deployments", "kind": "Deployment"},
                     "scope": "Namespaced", "openAPIV3Schema": {"type": "object"}},
            "status": {"conditions": [{"type": "Compatible", "status": "False",
                "reason": "MissingFields", "message": ".spec.x (PropertyRemoved)",
                "lastTransitionTime": "2025-01-01T00:00:00Z"}]},
        }))
        .expect("an import");
        let summary = summarize([&import]);
        assert_eq!(summary.len(), 5);
        assert_eq!(summary[0].group, "");
        let apps = summary.iter().find(|r| r.group == "apps").expect("apps");
        assert_eq!(apps.compatibility, Compatibility::Partial);
        assert!(
            apps.message
                .as_deref()
                .is_some_and(|m| m.contains(".spec.x"))
        );
        assert!(
            summary
                .iter()
                .filter(|r| r.group.is_empty())
                .all(|r| r.compatibility == Compatibility::Pending)
        );
    }
}
