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
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use crate::NegotiatorArgs;
use crate::metrics::NegotiatorMetrics;
use crate::negotiation::Shared;
use crate::types::DEFAULT_IMPORTS;
use crate::verdict;
use flotilla_runtime::reconcile::{Reconciler, Retry, drive};

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

/// What a pass over a Cluster writes.
struct Plan {
    /// Its `status.resources`.
    resources: Vec<ResourceCompatibility>,
    /// Whether that changes (and is written).
    write: bool,
    imports: usize,
    incompatible: usize,
}

/// The summary of `cluster` from its imports.
fn plan(cluster: &Cluster, imports: &[Arc<ApiResourceImport>]) -> Plan {
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
    let current = cluster
        .status
        .as_ref()
        .map(|s| s.resources.as_slice())
        .unwrap_or_default();
    Plan {
        write: cluster.metadata.deletion_timestamp.is_none() && current != resources.as_slice(),
        resources,
        imports: imports.len(),
        incompatible,
    }
}

impl Reconciler for State {
    type Object = Cluster;
    /// The Cluster's imports.
    type Observed = Vec<Arc<ApiResourceImport>>;
    type Plan = Plan;
    type Outcome = ();
    type Error = kube::Error;

    const NAME: &'static str = "cluster";
    const RETRY: Retry = RETRY;

    fn context(&self) -> &Context {
        &self.ctx
    }

    fn api(&self, _: &Cluster) -> Api<Cluster> {
        Api::all(self.ctx.client.clone())
    }

    async fn observe(&self, cluster: &Cluster) -> Result<Self::Observed, kube::Error> {
        let name = cluster.name_any();
        Ok(self
            .shared
            .selected_imports(None)
            .into_iter()
            .filter(|i| i.cluster_name() == Some(name.as_str()))
            .collect())
    }

    fn plan(&self, cluster: &Cluster, imports: &Self::Observed) -> Result<Plan, kube::Error> {
        Ok(plan(cluster, imports))
    }

    async fn execute(
        &self,
        cluster: &Cluster,
        _: &Self::Observed,
        plan: &Plan,
    ) -> Result<(), kube::Error> {
        if plan.write {
            Api::<Cluster>::all(self.ctx.client.clone())
                .patch_status(
                    &cluster.name_any(),
                    &PatchParams::apply(field_managers::NEGOTIATOR).force(),
                    &Patch::Apply(json!({
                        "apiVersion": Cluster::api_version(&()),
                        "kind": Cluster::kind(&()),
                        "status": {"resources": plan.resources},
                    })),
                )
                .await?;
        }
        Ok(())
    }

    async fn report(
        &self,
        cluster: &Cluster,
        _: &Self::Observed,
        plan: &Plan,
        (): (),
    ) -> Result<Action, kube::Error> {
        let name = cluster.name_any();
        let gauge = |g: &prometheus::IntGaugeVec, n: usize| {
            g.with_label_values(&[&name]).set(n as i64);
        };
        gauge(&self.metrics.imports, plan.imports);
        gauge(&self.metrics.incompatible_imports, plan.incompatible);
        Ok(Action::requeue(self.args.import.import_interval))
    }
}

/// Runs the Cluster summary controller until `ctx.shutdown`.
pub async fn run(
    ctx: Context,
    args: NegotiatorArgs,
    shared: Shared,
    metrics: NegotiatorMetrics,
) -> anyhow::Result<()> {
    let (clusters, imports) = (shared.clusters.clone(), shared.imports.clone());
    let state = Arc::new(State {
        ctx: ctx.clone(),
        args,
        shared,
        metrics,
    });
    let controller = clusters
        .controller()
        .with_config(controller::Config::default().debounce(Duration::from_millis(500)))
        // An import's verdict changes: its Cluster's summary (its namespace says whose it is).
        .watches_stream(imports.touched(), |import| {
            import
                .namespace()
                .as_deref()
                .and_then(flotilla_api::names::cluster_from_namespace)
                .map(ObjectRef::new)
        });
    drive(controller, state).await;
    Ok(())
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

    #[test]
    fn a_summary_is_written_only_when_it_changes_and_never_on_a_deleted_cluster() {
        let mut cluster: Cluster = serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Cluster",
            "metadata": {"name": "a"},
            "spec": {},
        }))
        .expect("a Cluster");
        let first = plan(&cluster, &[]);
        assert!(first.write);
        assert_eq!((first.imports, first.incompatible), (0, 0));
        cluster
            .status
            .get_or_insert_with(Default::default)
            .resources = first.resources;
        assert!(!plan(&cluster, &[]).write, "unchanged");
        cluster.status = None;
        cluster.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert!(!plan(&cluster, &[]).write, "being deleted");
    }
}
