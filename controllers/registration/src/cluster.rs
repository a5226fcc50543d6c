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

use flotilla_api::condition::set_condition;
use flotilla_api::{
    Cluster, ClusterStatus, SyncMode, annotations, conditions, field_managers, finalizers, labels,
    names, reasons,
};
use flotilla_runtime::member_client::{MemberClientError, read_secret};
use flotilla_runtime::{Context, ErrorCategory, MemberClients};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::DeserializeGuard;
use kube::runtime::controller::{self, Action};
use kube::runtime::finalizer::{self, Event as FinalizerEvent, finalizer};
use kube::{Api, Resource, ResourceExt};
use prometheus::{HistogramOpts, HistogramVec, IntGaugeVec, Opts};
use serde_json::json;

use crate::RegistrationArgs;
use crate::health::{self, ProbeOutcome, Timing, Verdict};
use crate::probe::probe;
use crate::rbac;
use flotilla_runtime::reconcile::{Retry, error_policy};

/// When an object is tried again after a failed reconciliation.
const RETRY: Retry = Retry {
    transient: Duration::from_secs(5),
    permanent: Some(Duration::from_secs(60)),
};

/// How long one probe of a member may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a reconciliation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("waiting for namespace {0} (and its Works) to be deleted")]
    WaitingForNamespace(String),
    #[error("namespace {0} is being deleted (a Cluster of this name was removed); waiting")]
    NamespaceTerminating(String),
    #[error("finalizer: {0}")]
    Finalizer(String),
}

impl ErrorCategory for Error {
    fn category(&self) -> &'static str {
        match self {
            Self::Kube(e) => e.category(),
            Self::WaitingForNamespace(_) | Self::NamespaceTerminating(_) => "Waiting",
            Self::Finalizer(_) => "Finalizer",
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        // The namespace is being made: moments.
        matches!(self, Self::WaitingForNamespace(_)).then_some(Duration::from_secs(2))
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

/// Runs the Cluster controller until `ctx.shutdown`.
pub async fn run(ctx: Context, args: RegistrationArgs) -> anyhow::Result<()> {
    let state = Arc::new(Registration::new(ctx.clone(), args.clone())?);
    let watch = flotilla_runtime::cache::selected(&args.cluster_selector);
    // A Cluster with a value this controller cannot read stands as last seen; the others go on.
    let controller = flotilla_runtime::guard::controller(
        Api::<DeserializeGuard<Cluster>>::all(ctx.client.clone()),
        watch,
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

    controller
        .graceful_shutdown_on(ctx.shutdown.clone().cancelled_owned())
        .run(reconcile, error_policy(RETRY), state)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "reconcile failed");
            }
        })
        .await;
    Ok(())
}

async fn reconcile(cluster: Arc<Cluster>, state: Arc<Registration>) -> Result<Action, Error> {
    let metrics = state.ctx.metrics.clone();
    metrics
        .measure("cluster", reconcile_inner(cluster, state))
        .await
}

async fn reconcile_inner(cluster: Arc<Cluster>, state: Arc<Registration>) -> Result<Action, Error> {
    let api = Api::<Cluster>::all(state.ctx.client.clone());
    finalizer(&api, finalizers::REGISTRATION, cluster, |event| async {
        match event {
            FinalizerEvent::Apply(c) => apply(&c, &state).await,
            FinalizerEvent::Cleanup(c) => cleanup(&c, &state).await,
        }
    })
    .await
    .map_err(|e| match e {
        finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => e,
        other => Error::Finalizer(other.to_string()),
    })
}

fn condition<'a>(status: &'a ClusterStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// The outcome of probing a push-mode member.
async fn probe_push(cluster: &Cluster, state: &Registration) -> ProbeOutcome {
    let name = cluster.name_any();
    let (namespace, reference) = match cluster
        .spec
        .reader_kubeconfig(&state.args.member_secrets.reader_secrets())
    {
        Ok(found) => found,
        Err(message) => {
            let reason = if cluster.spec.kubeconfig_secret_ref.is_some() {
                reasons::READ_ONLY_KUBECONFIG_REQUIRED
            } else {
                reasons::INVALID_KUBECONFIG
            };
            return ProbeOutcome::BadCredentials { reason, message };
        }
    };
    let secrets: Api<Secret> = Api::namespaced(state.ctx.client.clone(), &namespace);
    let client = match read_secret(&secrets, &namespace, &reference.name).await {
        Ok(secret) => {
            state
                .clients
                .client_for(
                    &name,
                    &secret,
                    &reference.key,
                    flotilla_runtime::member_client::Transport::of(
                        cluster.spec.allow_insecure_transport,
                    ),
                )
                .await
        }
        Err(e) => Err(e),
    };
    let client = match client {
        Ok(c) => c,
        Err(e) => {
            let reason = match &e {
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

async fn apply(cluster: &Cluster, state: &Registration) -> Result<Action, Error> {
    let name = cluster.name_any();
    let client = state.ctx.client.clone();
    let old = cluster.status.clone().unwrap_or_default();
    let now = Timestamp::now();
    let spec = &cluster.spec;

    stamp_taints(cluster, &client, now).await?;
    let accepted = health::accepted(
        spec,
        state.args.auto_accept,
        condition(&old, conditions::ACCEPTED),
    );
    let is_accepted = accepted.status == "True";
    let joined_before = condition(&old, conditions::JOINED).is_some_and(|c| c.status == "True");
    // Someone else's namespace of this Cluster's name is never used: its Works and bindings are
    // theirs.
    let taken = if is_accepted {
        ensure_namespace(&client, cluster, joined_before).await?
    } else {
        None
    };
    if spec.sync_mode == SyncMode::Pull {
        if is_accepted && taken.is_none() {
            apply_agent_rbac(&client, cluster, &state.args.agent_cluster_role).await?;
        } else {
            revoke_agent_rbac(&client, &name).await?;
        }
    }
    if let Some(grant) = state.args.syncer_grant()
        && is_accepted
        && taken.is_none()
    {
        // The hub syncer serves push-mode members only; a pull member's syncer reads with the
        // agent's rights.
        if spec.sync_mode == SyncMode::Push {
            apply_syncer_rbac(&client, &name, &grant).await?;
        } else {
            delete_if_present(
                &Api::<RoleBinding>::namespaced(client.clone(), &names::cluster_namespace(&name)),
                rbac::SYNCER_ROLE_BINDING,
            )
            .await?;
        }
    }

    let timing = |last: Option<Timestamp>| Timing {
        now,
        last_heartbeat: last,
        created: cluster.metadata.creation_timestamp.as_ref().map(|t| t.0),
        grace: state.args.grace_period,
    };
    let mut status = json!({});
    let mut version = old.kubernetes_version.clone();
    let mut allocatable = old.allocatable.clone();
    let mut cluster_id = old.cluster_id.clone();
    let mut last_heartbeat = old.last_heartbeat_time.as_ref().map(|t| t.0);
    let (mut joined, mut ready) = match spec.sync_mode {
        SyncMode::Push => {
            let mut outcome = probe_push(cluster, state).await;
            if let ProbeOutcome::Healthy(facts) = &outcome {
                match (&old.cluster_id, &facts.cluster_id) {
                    (Some(registered), Some(seen)) if registered != seen => {
                        outcome = ProbeOutcome::BadCredentials {
                            reason: reasons::DUPLICATE_NAME,
                            message: format!(
                                "the kubeconfig now reaches a different cluster (kube-system UID {seen}, \
                                 registered {registered}); register it under another name, or clear \
                                 status.clusterId if the member was rebuilt"
                            ),
                        };
                    }
                    _ => {
                        version = Some(facts.kubernetes_version.clone());
                        allocatable = facts.allocatable.clone();
                        cluster_id = cluster_id.or(facts.cluster_id.clone());
                        last_heartbeat = Some(now);
                    }
                }
            }
            let joined_before =
                condition(&old, conditions::JOINED).is_some_and(|c| c.status == "True");
            let verdicts = health::push_health(
                &outcome,
                condition(&old, conditions::READY),
                joined_before,
                &timing(last_heartbeat),
            );
            // Push mode: this controller owns every observed field.
            status["kubernetesVersion"] = json!(version);
            status["allocatable"] = json!(allocatable);
            status["clusterId"] = json!(cluster_id);
            verdicts
        }
        SyncMode::Pull => {
            let renewed = if is_accepted {
                let leases: Api<Lease> =
                    Api::namespaced(client.clone(), &names::cluster_namespace(&name));
                leases
                    .get_opt(names::AGENT_LEASE_NAME)
                    .await?
                    .and_then(|l| l.spec?.renew_time)
                    .map(|t| t.0)
            } else {
                None
            };
            last_heartbeat = renewed.or(last_heartbeat);
            // Pull mode: the agent reports version and allocatable; this controller owns the
            // conditions and the heartbeat time.
            health::pull_health(is_accepted, renewed, &timing(renewed))
        }
    };
    status["lastHeartbeatTime"] = json!(last_heartbeat.map(Time));
    if let Some(why) = &taken {
        joined = Verdict::new(
            conditions::JOINED,
            "False",
            reasons::NAMESPACE_TAKEN,
            why.clone(),
        );
        ready = Verdict::new(
            conditions::READY,
            "False",
            reasons::NAMESPACE_TAKEN,
            why.clone(),
        );
    }

    let verdicts = [accepted, joined, ready, health::schedulable(spec)];
    let mut conditions = old.conditions.clone();
    for v in &verdicts {
        set_condition(
            &mut conditions,
            v.into_condition(now, cluster.metadata.generation),
        );
    }
    // Only the condition types this controller owns.
    let owned: Vec<&Condition> = conditions
        .iter()
        .filter(|c| verdicts.iter().any(|v| v.type_ == c.type_))
        .collect();
    status["conditions"] = json!(owned);

    Api::<Cluster>::all(client)
        .patch_status(
            &name,
            &PatchParams::apply(field_managers::REGISTRATION).force(),
            &Patch::Apply(json!({
                "apiVersion": Cluster::api_version(&()),
                "kind": Cluster::kind(&()),
                "status": status,
            })),
        )
        .await?;
    publish_transitions(cluster, &old, &verdicts, state).await;
    Ok(Action::requeue(state.args.probe_interval))
}

/// Sets `timeAdded` on taints that lack it: `tolerationSeconds` of `NoExecute` tolerations count
/// from there. The patch carries the resourceVersion, so a concurrent edit of the taints wins and
/// the next reconciliation stamps again.
async fn stamp_taints(
    cluster: &Cluster,
    client: &kube::Client,
    now: Timestamp,
) -> Result<(), Error> {
    if cluster.spec.taints.iter().all(|t| t.time_added.is_some()) {
        return Ok(());
    }
    let taints: Vec<_> = cluster
        .spec
        .taints
        .iter()
        .cloned()
        .map(|mut t| {
            t.time_added.get_or_insert(Time(now));
            t
        })
        .collect();
    Api::<Cluster>::all(client.clone())
        .patch(
            &cluster.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": { "resourceVersion": cluster.metadata.resource_version },
                "spec": { "taints": taints },
            })),
        )
        .await?;
    Ok(())
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

/// Makes the Cluster's hub namespace `flotilla-cluster-<name>`, marked with the Cluster's UID.
/// Returns why the Cluster cannot use it when a namespace of that name exists that registration
/// did not make for this Cluster (someone made it first, with their own RoleBindings and Works):
/// it is left as it is and never used. (A Cluster that joined before namespaces were marked
/// (`joined_before`) has its mark added.)
async fn ensure_namespace(
    client: &kube::Client,
    cluster: &Cluster,
    joined_before: bool,
) -> Result<Option<String>, Error> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let cluster_name = cluster.name_any();
    let uid = cluster.metadata.uid.clone().unwrap_or_default();
    let name = names::cluster_namespace(&cluster_name);
    let ours = ObjectMeta {
        name: Some(name.clone()),
        labels: Some([(labels::CLUSTER.to_string(), cluster_name.clone())].into()),
        annotations: Some([(annotations::CLUSTER_UID.to_string(), uid.clone())].into()),
        ..ObjectMeta::default()
    };
    match namespaces.get_opt(&name).await? {
        Some(ns) if ns.metadata.deletion_timestamp.is_some() => {
            return Err(Error::NamespaceTerminating(name));
        }
        Some(ns) if is_clusters_namespace(&ns, cluster, joined_before) => {}
        Some(ns) => {
            return Ok(Some(match cluster_uid_mark(&ns) {
                Some(other) => format!(
                    "namespace {name} was made for another Cluster of this name (UID {other}) and \
                     is not this one's; it is left as it is"
                ),
                None => format!(
                    "namespace {name} exists and registration did not make it for this Cluster \
                     (someone made it first); it is left as it is and never used: delete it, or \
                     register the member under another name"
                ),
            }));
        }
        None => {
            let created = namespaces
                .create(
                    &PostParams::default(),
                    &Namespace {
                        metadata: ours.clone(),
                        ..Namespace::default()
                    },
                )
                .await;
            match created {
                Ok(_) => {}
                // Made meanwhile, by someone: looked at again on the next pass.
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    return Err(Error::WaitingForNamespace(name));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    namespaces
        .patch(
            &name,
            &apply_params(),
            &Patch::Apply(typed(
                Namespace {
                    metadata: ours,
                    ..Namespace::default()
                },
                "v1",
                "Namespace",
            )),
        )
        .await?;
    Ok(None)
}

/// The Cluster UID a hub namespace is marked with, if any.
fn cluster_uid_mark(ns: &Namespace) -> Option<&String> {
    ns.metadata
        .annotations
        .as_ref()?
        .get(annotations::CLUSTER_UID)
}

/// Whether `ns` is `cluster`'s hub namespace: marked with its UID, or unmarked but labelled as
/// its namespace for a Cluster that `joined` before namespaces were marked.
fn is_clusters_namespace(ns: &Namespace, cluster: &Cluster, joined: bool) -> bool {
    match cluster_uid_mark(ns) {
        Some(uid) => Some(uid) == cluster.metadata.uid.as_ref(),
        None => joined && ns.labels().get(labels::CLUSTER) == Some(&cluster.name_any()),
    }
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
async fn cleanup(cluster: &Cluster, state: &Registration) -> Result<Action, Error> {
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
        return Ok(Action::await_change());
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
    Err(Error::WaitingForNamespace(ns_name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn namespace(label: Option<&str>, mark: Option<&str>) -> Namespace {
        Namespace {
            metadata: ObjectMeta {
                name: Some(names::cluster_namespace("east")),
                labels: label.map(|l| [(labels::CLUSTER.to_string(), l.to_string())].into()),
                annotations: mark
                    .map(|m| [(annotations::CLUSTER_UID.to_string(), m.to_string())].into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        }
    }

    #[test]
    fn a_hub_namespace_is_the_clusters_only_with_its_mark_or_from_before_marks() {
        let mut east = Cluster::new("east", Default::default());
        east.metadata.uid = Some("u1".into());
        assert!(is_clusters_namespace(
            &namespace(Some("east"), Some("u1")),
            &east,
            false
        ));
        // Another Cluster of the name, deleted and made again, marked it.
        assert!(!is_clusters_namespace(
            &namespace(Some("east"), Some("u0")),
            &east,
            true
        ));
        // Unmarked: a squatter's, unless the Cluster joined before namespaces were marked.
        assert!(!is_clusters_namespace(
            &namespace(Some("east"), None),
            &east,
            false
        ));
        assert!(is_clusters_namespace(
            &namespace(Some("east"), None),
            &east,
            true
        ));
        assert!(!is_clusters_namespace(&namespace(None, None), &east, true));
    }
}
