//! The Cluster controller (hub): acceptance, the per-cluster namespace and agent RBAC, health
//! (probes for push mode, the agent's Lease for pull mode), status and conditions, Events on
//! every transition, and removal behind a finalizer.
//!
//! Removal revokes the agent's access first, then marks the cluster's Works `Orphan` (member
//! objects are never deleted because a Cluster went away) and deletes `flotilla-cluster-<name>`;
//! the finalizer goes once the namespace is gone.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_api::{
    Cluster, ClusterStatus, SyncMode, annotations, conditions, field_managers, finalizers, labels,
    names, reasons,
};
use flotilla_runtime::member_client::MemberClientError;
use flotilla_runtime::shared::SharedCache;
use flotilla_runtime::{Context, ErrorCategory, MemberClients};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{self, Action};
use kube::{Api, Resource, ResourceExt};
use prometheus::{HistogramOpts, HistogramVec, IntGaugeVec, Opts};
use serde_json::json;

use crate::RegistrationArgs;
use crate::health::{self, ProbeOutcome, Verdict};
use crate::probe::probe;
use crate::rbac;
use flotilla_runtime::reconcile::{Cleanup, Reconciler, Retry, drive};

mod plan;

use plan::{Access, NamespaceStep, Observed, Plan, Settings, condition, is_clusters_namespace};

/// When an object is tried again after a failed reconciliation.
const RETRY: Retry = Retry {
    transient: Duration::from_secs(5),
    permanent: Some(Duration::from_secs(60)),
};

/// How soon a Cluster waiting for its namespace to be made or deleted is looked at again.
const NAMESPACE_WAIT: Duration = Duration::from_secs(2);

/// How long one probe of a member may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a reconciliation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("namespace {0} was made by someone else meanwhile; looking at it again")]
    WaitingForNamespace(String),
    #[error("namespace {0} is being deleted (a Cluster of this name was removed); waiting")]
    NamespaceTerminating(String),
}

impl ErrorCategory for Error {
    fn category(&self) -> &'static str {
        match self {
            Self::Kube(e) => e.category(),
            Self::WaitingForNamespace(_) | Self::NamespaceTerminating(_) => "Waiting",
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        // Whose namespace it is is known on the next look: moments.
        matches!(self, Self::WaitingForNamespace(_)).then_some(NAMESPACE_WAIT)
    }

    fn is_transient(&self) -> bool {
        match self {
            Self::Kube(e) => e.is_transient(),
            _ => true,
        }
    }
}

/// Shared state of the Cluster controller.
struct Registration {
    ctx: Context,
    args: RegistrationArgs,
    clients: MemberClients,
    probe_duration: HistogramVec,
    clusters: IntGaugeVec,
}

impl Registration {
    fn new(ctx: Context, args: RegistrationArgs) -> prometheus::Result<Self> {
        let prefix = ctx.metrics.prefix().to_string();
        let probe_duration = HistogramVec::new(
            HistogramOpts::new(
                format!("{prefix}_probe_duration_seconds"),
                "Duration of probes of push-mode members.",
            )
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ]),
            &["cluster"],
        )?;
        let clusters = IntGaugeVec::new(
            Opts::new(
                format!("{prefix}_clusters"),
                "Clusters by condition type and status.",
            ),
            &["condition", "status"],
        )?;
        ctx.metrics
            .registry()
            .register(Box::new(probe_duration.clone()))?;
        ctx.metrics
            .registry()
            .register(Box::new(clusters.clone()))?;
        Ok(Self {
            ctx,
            args,
            clients: MemberClients::new(),
            probe_duration,
            clusters,
        })
    }
}

impl Reconciler for Registration {
    type Object = Cluster;
    type Observed = Observed;
    type Plan = Plan;
    type Outcome = ();
    type Error = Error;

    const NAME: &'static str = "cluster";
    const RETRY: Retry = RETRY;
    const FINALIZER: Option<&'static str> = Some(finalizers::REGISTRATION);

    fn context(&self) -> &Context {
        &self.ctx
    }

    fn api(&self, _: &Cluster) -> Api<Cluster> {
        Api::all(self.ctx.client.clone())
    }

    async fn observe(&self, cluster: &Cluster) -> Result<Observed, Error> {
        let name = cluster.name_any();
        let ns = names::cluster_namespace(&name);
        let namespace = Api::<Namespace>::all(self.ctx.client.clone())
            .get_opt(&ns)
            .await?;
        let (probe, lease_renewed) = match cluster.spec.sync_mode {
            SyncMode::Push => (Some(probe_push(cluster, self).await), None),
            SyncMode::Pull if namespace.is_some() => {
                let leases: Api<Lease> = Api::namespaced(self.ctx.client.clone(), &ns);
                let renewed = leases
                    .get_opt(names::AGENT_LEASE_NAME)
                    .await?
                    .and_then(|l| l.spec?.renew_time)
                    .map(|t| t.0);
                (None, renewed)
            }
            SyncMode::Pull => (None, None),
        };
        Ok(Observed {
            now: Timestamp::now(),
            probe,
            lease_renewed,
            namespace,
        })
    }

    fn plan(&self, cluster: &Cluster, observed: &Observed) -> Result<Plan, Error> {
        let settings = Settings {
            auto_accept: self.args.auto_accept,
            grace_period: self.args.grace_period,
            probe_interval: self.args.probe_interval,
            grants_syncer: self.args.syncer_grant().is_some(),
        };
        Ok(plan::plan(cluster, observed, &settings))
    }

    async fn execute(&self, cluster: &Cluster, _: &Observed, plan: &Plan) -> Result<(), Error> {
        let client = &self.ctx.client;
        let name = cluster.name_any();
        if let Some(taints) = &plan.stamp_taints {
            // With the resourceVersion: a concurrent edit of the taints wins, and the next pass
            // stamps again.
            Api::<Cluster>::all(client.clone())
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({
                        "metadata": { "resourceVersion": cluster.metadata.resource_version },
                        "spec": { "taints": taints },
                    })),
                )
                .await?;
        }
        match &plan.namespace {
            NamespaceStep::Terminating => {
                return Err(Error::NamespaceTerminating(names::cluster_namespace(&name)));
            }
            NamespaceStep::Make => ensure_namespace(client, cluster, true).await?,
            NamespaceStep::Mark => ensure_namespace(client, cluster, false).await?,
            NamespaceStep::Leave | NamespaceStep::Marked | NamespaceStep::Taken(_) => {}
        }
        match plan.agent_access {
            Access::Grant => {
                apply_agent_rbac(client, cluster, &self.args.agent_cluster_role).await?
            }
            Access::Revoke => revoke_agent_rbac(client, &name).await?,
            Access::Leave => {}
        }
        match (plan.syncer_access, self.args.syncer_grant()) {
            (Access::Grant, Some(grant)) => apply_syncer_rbac(client, &name, &grant).await?,
            (Access::Revoke, _) => {
                delete_if_present(
                    &Api::<RoleBinding>::namespaced(
                        client.clone(),
                        &names::cluster_namespace(&name),
                    ),
                    rbac::SYNCER_ROLE_BINDING,
                )
                .await?;
            }
            _ => {}
        }
        Ok(())
    }

    async fn report(
        &self,
        cluster: &Cluster,
        _: &Observed,
        plan: &Plan,
        (): (),
    ) -> Result<Action, Error> {
        Api::<Cluster>::all(self.ctx.client.clone())
            .patch_status(
                &cluster.name_any(),
                &PatchParams::apply(field_managers::REGISTRATION).force(),
                &Patch::Apply(json!({
                    "apiVersion": Cluster::api_version(&()),
                    "kind": Cluster::kind(&()),
                    "status": plan.status,
                })),
            )
            .await?;
        let old = cluster.status.clone().unwrap_or_default();
        publish_transitions(cluster, &old, &plan.verdicts, self).await;
        Ok(Action::requeue(plan.requeue))
    }

    async fn cleanup(&self, cluster: &Cluster) -> Result<Cleanup, Error> {
        cleanup(cluster, self).await
    }
}

/// Runs the Cluster controller until `ctx.shutdown`.
/// `clusters` are the Clusters of `--cluster-selector` (a Cluster with a value this controller
/// cannot read stands as last seen; the others go on).
pub async fn run(
    ctx: Context,
    args: RegistrationArgs,
    clusters: SharedCache<Cluster>,
) -> anyhow::Result<()> {
    let state = Arc::new(Registration::new(ctx.clone(), args.clone())?);
    let controller = controller::Controller::for_stream(
        clusters
            .applied()
            .predicate_filter(inputs, Default::default()),
        clusters.store(),
    )
    .with_config(controller::Config::default().concurrency(16));
    let store = controller.store();

    // Readiness once the cache is synced, then the clusters-by-condition gauge.
    let gauge_state = state.clone();
    let shutdown = ctx.shutdown.clone();
    tokio::spawn(async move {
        if !flotilla_runtime::cache::wait_until_synced(&store).await {
            return;
        }
        tracing::info!("cache of Clusters synced");
        gauge_state.ctx.health.set_caches_synced(true);
        loop {
            let mut counts: BTreeMap<(String, String), i64> = BTreeMap::new();
            for cluster in store.state() {
                for c in cluster.status.iter().flat_map(|s| s.conditions.iter()) {
                    *counts
                        .entry((c.type_.clone(), c.status.clone()))
                        .or_default() += 1;
                }
            }
            gauge_state.clusters.reset();
            for ((type_, status), n) in counts {
                gauge_state
                    .clusters
                    .with_label_values(&[type_.as_str(), status.as_str()])
                    .set(n);
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(10)) => {}
            }
        }
    });

    drive(controller, state).await;
    Ok(())
}

/// What of a Cluster makes registration look at it again before its next probe: its spec,
/// labels, annotations, finalizers and deletion, and what a pull member's agent reports of it
/// (its version and capacity). Not the rest of its status — registration's own write of it after
/// every probe (its heartbeat) and the negotiator's — each of which started a second probe of the
/// member and a second status write right after the first.
fn inputs(cluster: &Cluster) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (
        cluster.metadata.generation,
        cluster.metadata.deletion_timestamp.is_some(),
        cluster.finalizers(),
        cluster.labels(),
        cluster.annotations(),
    )
        .hash(&mut h);
    if let Some(status) = &cluster.status {
        status.kubernetes_version.hash(&mut h);
        for (k, v) in &status.allocatable {
            (k, &v.0).hash(&mut h);
        }
    }
    Some(h.finish())
}

/// The outcome of probing a push-mode member.
async fn probe_push(cluster: &Cluster, state: &Registration) -> ProbeOutcome {
    let name = cluster.name_any();
    let client = state
        .clients
        .reader(
            &state.ctx.client,
            cluster,
            &state.args.member_secrets.reader_secrets(),
        )
        .await
        .map(|(client, _)| client);
    let client = match client {
        Ok(c) => c,
        Err(e) => {
            let reason = match &e {
                MemberClientError::NoReader(message) => {
                    let reason = if cluster.spec.kubeconfig_secret_ref.is_some() {
                        reasons::READ_ONLY_KUBECONFIG_REQUIRED
                    } else {
                        reasons::INVALID_KUBECONFIG
                    };
                    return ProbeOutcome::BadCredentials {
                        reason,
                        message: message.clone(),
                    };
                }
                MemberClientError::SecretNotFound { .. } => reasons::SECRET_NOT_FOUND,
                MemberClientError::KeyMissing { .. } => reasons::SECRET_KEY_NOT_FOUND,
                MemberClientError::SecretUnreadable { .. } => {
                    return ProbeOutcome::Unreachable(e.to_string());
                }
                _ => reasons::INVALID_KUBECONFIG,
            };
            state.clients.forget(&name);
            return ProbeOutcome::BadCredentials {
                reason,
                message: e.to_string(),
            };
        }
    };
    let started = Instant::now();
    let outcome = probe(&client.requests, PROBE_TIMEOUT).await;
    state
        .probe_duration
        .with_label_values(&[name.as_str()])
        .observe(started.elapsed().as_secs_f64());
    outcome
}

/// An Event for every condition whose status or reason changed.
async fn publish_transitions(
    cluster: &Cluster,
    old: &ClusterStatus,
    verdicts: &[Verdict],
    state: &Registration,
) {
    for v in verdicts {
        let before = condition(old, v.type_);
        if before.is_some_and(|c| c.status == v.status && c.reason == v.reason) {
            continue;
        }
        let note = format!("{} is {}: {}", v.type_, v.status, v.message);
        if health::is_bad(v) {
            state
                .ctx
                .events
                .warning(cluster, v.reason, v.type_, note)
                .await;
        } else {
            state
                .ctx
                .events
                .normal(cluster, v.reason, v.type_, note)
                .await;
        }
    }
}

/// Makes the Cluster's hub namespace `flotilla-cluster-<name>` (`make`), or applies its mark
/// and label, marked with the Cluster's UID.
async fn ensure_namespace(
    client: &kube::Client,
    cluster: &Cluster,
    make: bool,
) -> Result<(), Error> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let cluster_name = cluster.name_any();
    let uid = cluster.metadata.uid.clone().unwrap_or_default();
    let name = names::cluster_namespace(&cluster_name);
    let ours = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some([(labels::CLUSTER.to_string(), cluster_name.clone())].into()),
            annotations: Some([(annotations::CLUSTER_UID.to_string(), uid)].into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    if make {
        match namespaces.create(&PostParams::default(), &ours).await {
            Ok(_) => {}
            // Made meanwhile, by someone: looked at again on the next pass.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                return Err(Error::WaitingForNamespace(name));
            }
            Err(e) => return Err(e.into()),
        }
    }
    namespaces
        .patch(
            &name,
            &apply_params(),
            &Patch::Apply(typed(ours, "v1", "Namespace")),
        )
        .await?;
    Ok(())
}

fn apply_params() -> PatchParams {
    PatchParams::apply(field_managers::REGISTRATION).force()
}

/// The object as JSON with apiVersion and kind, as server-side apply needs.
fn typed<T: serde::Serialize>(object: T, api_version: &str, kind: &str) -> serde_json::Value {
    let mut value = serde_json::to_value(object).unwrap_or_default();
    value["apiVersion"] = json!(api_version);
    value["kind"] = json!(kind);
    value
}

async fn apply_agent_rbac(
    client: &kube::Client,
    cluster: &Cluster,
    agent_cluster_role: &str,
) -> Result<(), Error> {
    let name = cluster.name_any();
    let uid = cluster.metadata.uid.as_deref().unwrap_or_default();
    let bootstrapping = !cluster
        .annotations()
        .contains_key(annotations::BOOTSTRAP_REQUEST);
    let ns = names::cluster_namespace(&name);
    let rbac_v1 = "rbac.authorization.k8s.io/v1";
    let bindings = Api::<RoleBinding>::namespaced(client.clone(), &ns);
    let binding = Patch::Apply(typed(
        rbac::agent_role_binding(&name, uid, agent_cluster_role),
        rbac_v1,
        "RoleBinding",
    ));
    match bindings
        .patch(rbac::AGENT_ROLE, &apply_params(), &binding)
        .await
    {
        Ok(_) => {}
        // Earlier versions bound a Role of their own, and a binding's roleRef cannot change
        // (the apiserver says Invalid): the binding and that Role are made again.
        Err(kube::Error::Api(s)) if s.code == 422 => {
            delete_if_present(&bindings, rbac::AGENT_ROLE).await?;
            delete_if_present(
                &Api::<Role>::namespaced(client.clone(), &ns),
                rbac::AGENT_ROLE,
            )
            .await?;
            bindings
                .patch(rbac::AGENT_ROLE, &apply_params(), &binding)
                .await?;
        }
        Err(e) => return Err(e.into()),
    }
    let cluster_role = rbac::agent_cluster_role(&name);
    Api::<ClusterRole>::all(client.clone())
        .patch(
            &cluster_role,
            &apply_params(),
            &Patch::Apply(typed(
                rbac::agent_cluster_role_object(&name),
                rbac_v1,
                "ClusterRole",
            )),
        )
        .await?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(
            &cluster_role,
            &apply_params(),
            &Patch::Apply(typed(
                rbac::agent_cluster_role_binding(&name, uid, bootstrapping),
                rbac_v1,
                "ClusterRoleBinding",
            )),
        )
        .await?;
    Ok(())
}

/// Lets the hub syncer read the data of the Secrets placed on push-mode member `cluster`.
async fn apply_syncer_rbac(
    client: &kube::Client,
    cluster: &str,
    grant: &rbac::SyncerGrant,
) -> Result<(), Error> {
    let bindings =
        Api::<RoleBinding>::namespaced(client.clone(), &names::cluster_namespace(cluster));
    let binding = Patch::Apply(typed(
        rbac::syncer_role_binding(cluster, grant),
        "rbac.authorization.k8s.io/v1",
        "RoleBinding",
    ));
    match bindings
        .patch(rbac::SYNCER_ROLE_BINDING, &apply_params(), &binding)
        .await
    {
        Ok(_) => Ok(()),
        // A binding's roleRef cannot change (another --syncer-cluster-role): made again.
        Err(kube::Error::Api(s)) if s.code == 422 => {
            delete_if_present(&bindings, rbac::SYNCER_ROLE_BINDING).await?;
            bindings
                .patch(rbac::SYNCER_ROLE_BINDING, &apply_params(), &binding)
                .await?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Deletes `name` if it exists.
async fn delete_if_present<K>(api: &Api<K>, name: &str) -> Result<bool, Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Removes every grant of the cluster's agent (a no-op when there is none).
async fn revoke_agent_rbac(client: &kube::Client, cluster: &str) -> Result<(), Error> {
    let cluster_role = rbac::agent_cluster_role(cluster);
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    if bindings.get_opt(&cluster_role).await?.is_none() {
        let roles: Api<RoleBinding> =
            Api::namespaced(client.clone(), &names::cluster_namespace(cluster));
        if roles.get_opt(rbac::AGENT_ROLE).await?.is_none() {
            return Ok(());
        }
    }
    let ns = names::cluster_namespace(cluster);
    delete_if_present(&bindings, &cluster_role).await?;
    delete_if_present(&Api::<ClusterRole>::all(client.clone()), &cluster_role).await?;
    delete_if_present(
        &Api::<RoleBinding>::namespaced(client.clone(), &ns),
        rbac::AGENT_ROLE,
    )
    .await?;
    delete_if_present(
        &Api::<Role>::namespaced(client.clone(), &ns),
        rbac::AGENT_ROLE,
    )
    .await?;
    tracing::info!(cluster, "revoked the agent's access");
    Ok(())
}

/// Removal: revoke access, delete the namespace (with its Works, whose member objects the
/// syncers leave in place), and let the finalizer go once it is gone.
async fn cleanup(cluster: &Cluster, state: &Registration) -> Result<Cleanup, Error> {
    let name = cluster.name_any();
    let client = state.ctx.client.clone();
    revoke_agent_rbac(&client, &name).await?;
    state.clients.forget(&name);
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns_name = names::cluster_namespace(&name);
    // An unmarked namespace is the Cluster's only if it joined before namespaces were marked.
    let joined = cluster
        .status
        .as_ref()
        .and_then(|s| condition(s, conditions::JOINED))
        .is_some_and(|c| c.status == "True");
    // A namespace of this name that is someone else's is left to them.
    let Some(ns) = namespaces
        .get_opt(&ns_name)
        .await?
        .filter(|ns| is_clusters_namespace(ns, cluster, joined))
    else {
        state
            .ctx
            .events
            .normal(
                cluster,
                "Removed",
                "Remove",
                format!("namespace {ns_name} is gone; the Cluster can go"),
            )
            .await;
        return Ok(Cleanup::Done);
    };
    if ns.metadata.deletion_timestamp.is_none() {
        // The Works go with the namespace, and the syncers leave their objects in the member: a
        // namespace's deletion never deletes what members run.
        namespaces
            .delete(&ns_name, &DeleteParams::background())
            .await?;
        state
            .ctx
            .events
            .normal(
                cluster,
                "Removing",
                "Remove",
                format!(
                    "revoked the agent's access and deleting namespace {ns_name} with its Works \
                     (objects in the member are left in place)"
                ),
            )
            .await;
    }
    // The namespace is going: looked at again in moments, the finalizer kept meanwhile.
    Ok(Cleanup::Pending(NAMESPACE_WAIT))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::{ClusterSpec, ClusterStatus};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    #[test]
    fn registrations_own_status_write_and_the_negotiators_start_no_pass() {
        let mut cluster = Cluster::new("east", ClusterSpec::default());
        cluster.metadata.generation = Some(1);
        cluster.status = Some(ClusterStatus {
            kubernetes_version: Some("v1.37.2".into()),
            ..ClusterStatus::default()
        });
        let before = inputs(&cluster);
        // A probe's status: a new heartbeat and conditions; the negotiator's compatibility.
        let mut written = cluster.clone();
        written.status = Some(
            serde_json::from_value(json!({
                "kubernetesVersion": "v1.37.2",
                "lastHeartbeatTime": "2026-12-07T12:00:00Z",
                "conditions": [{"type": "Ready", "status": "True", "reason": "Probed",
                                "message": "", "lastTransitionTime": "2026-12-07T12:00:00Z"}],
                "resources": [{"group": "apps", "version": "v1", "resource": "deployments",
                               "compatibility": "Compatible"}]
            }))
            .expect("a status"),
        );
        assert_eq!(inputs(&written), before);
        // What starts one: the spec, labels, deletion, and what a pull member's agent reports.
        let mut edited = cluster.clone();
        edited.metadata.generation = Some(2);
        assert_ne!(inputs(&edited), before);
        let mut labelled = cluster.clone();
        labelled.labels_mut().insert("region".into(), "eu".into());
        assert_ne!(inputs(&labelled), before);
        let mut reported = cluster.clone();
        let status = reported.status.as_mut().expect("a status");
        status.kubernetes_version = Some("v1.37.3".into());
        assert_ne!(inputs(&reported), before);
        let mut grown = cluster.clone();
        grown
            .status
            .as_mut()
            .expect("a status")
            .allocatable
            .insert("cpu".into(), Quantity("8".into()));
        assert_ne!(inputs(&grown), before);
    }
}
