//! The Placement controller: renders one Work per selected object and eligible member, divides
//! Deployment replicas, keeps a failed member's copy until its replacement is available, and
//! writes the aggregated status onto the hub Deployment.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_api::placement::{ReplicaSchedulingType, ResourceSelector};
use flotilla_api::{
    Cluster, Placement, Work, annotations, conditions, field_managers, labels, names,
};
use flotilla_runtime::{Context, ErrorCategory};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use crate::aggregate::{copy_of, deployment_status};
use crate::division::{Division, DivisionError, divide};
use crate::eligibility::{Selection, select, selector_matches};
use crate::render::render;

/// The types placed when a Placement selects none explicitly.
const DEFAULT_TYPES: [(&str, &str, &str, &str); 5] = [
    ("apps", "v1", "Deployment", "deployments"),
    ("", "v1", "ConfigMap", "configmaps"),
    ("", "v1", "Secret", "secrets"),
    ("", "v1", "Service", "services"),
    ("", "v1", "ServiceAccount", "serviceaccounts"),
];

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("rendering a Work: {0}")]
    Render(#[from] serde_json::Error),
    #[error(
        "unsupported type {0}: the splitter places Deployments, ConfigMaps, Secrets, Services and ServiceAccounts"
    )]
    UnsupportedType(String),
}

impl ErrorCategory for Error {
    fn category(&self) -> &'static str {
        match self {
            Self::Kube(e) => e.category(),
            Self::Render(_) => "RenderFailed",
            Self::UnsupportedType(_) => "UnsupportedType",
        }
    }
    fn is_transient(&self) -> bool {
        !matches!(self, Self::UnsupportedType(_))
    }
}

struct Splitter {
    ctx: Context,
    clusters: Store<Cluster>,
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// The types a Placement selects, as API resources.
fn selected_types(
    selectors: &[ResourceSelector],
) -> Result<Vec<(ApiResource, Option<&ResourceSelector>)>, Error> {
    if selectors.is_empty() {
        return Ok(DEFAULT_TYPES
            .iter()
            .map(|(g, v, k, p)| (resource(g, v, k, p), None))
            .collect());
    }
    selectors
        .iter()
        .map(|s| {
            let (group, version) = s
                .api_version
                .split_once('/')
                .unwrap_or(("", s.api_version.as_str()));
            DEFAULT_TYPES
                .iter()
                .find(|(g, v, k, _)| *g == group && *v == version && *k == s.kind)
                .map(|(g, v, k, p)| (resource(g, v, k, p), Some(s)))
                .ok_or_else(|| Error::UnsupportedType(format!("{} {}", s.api_version, s.kind)))
        })
        .collect()
}

/// Runs the Placement controller until `ctx.shutdown`.
pub async fn run(ctx: Context, args: crate::SplitterArgs) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let mut cluster_watch = watcher::Config::default();
    if !args.cluster_selector.is_empty() {
        cluster_watch = cluster_watch.labels(&args.cluster_selector);
    }
    let (placements_api, deployments_api): (Api<Placement>, Api<Deployment>) =
        if args.namespace.is_empty() {
            (Api::all(client.clone()), Api::all(client.clone()))
        } else {
            (
                Api::namespaced(client.clone(), &args.namespace),
                Api::namespaced(client.clone(), &args.namespace),
            )
        };
    let clusters = flotilla_runtime::cache::spawn_store(
        &ctx,
        Api::<Cluster>::all(client.clone()),
        cluster_watch.clone(),
    );

    let controller = Controller::new(placements_api, watcher::Config::default());
    let placements = controller.store();
    let all = placements.clone();
    let same_namespace = placements.clone();
    let by_label = placements.clone();
    let controller = controller
        // Any Cluster change may change eligibility of every Placement.
        .watches(
            Api::<Cluster>::all(client.clone()),
            cluster_watch,
            move |_: Cluster| {
                all.state()
                    .iter()
                    .map(|p| ObjectRef::from_obj(&**p))
                    .collect::<Vec<_>>()
            },
        )
        // A hub Deployment changes: the Placements of its namespace.
        .watches(
            deployments_api,
            watcher::Config::default(),
            move |d: Deployment| {
                let ns = d.namespace();
                same_namespace
                    .state()
                    .iter()
                    .filter(|p| p.namespace() == ns)
                    .map(|p| ObjectRef::from_obj(&**p))
                    .collect::<Vec<_>>()
            },
        )
        // A Work's status changes: its Placement aggregates again.
        .watches(
            Api::<Work>::all(client.clone()),
            watcher::Config::default().labels(labels::PLACEMENT),
            move |w: Work| {
                let name = w.labels().get(labels::PLACEMENT).cloned();
                let ns = w.annotations().get(annotations::SOURCE_NAMESPACE).cloned();
                by_label
                    .state()
                    .iter()
                    .filter(|p| Some(p.name_any()) == name && p.namespace() == ns)
                    .map(|p| ObjectRef::from_obj(&**p))
                    .collect::<Vec<_>>()
            },
        );

    tokio::select! {
        _ = ctx.shutdown.cancelled() => return Ok(()),
        _ = flotilla_runtime::cache::wait_until_synced(&clusters) => {}
    }
    ctx.health.set_caches_synced(true);
    let state = Arc::new(Splitter {
        ctx: ctx.clone(),
        clusters,
    });
    controller
        .graceful_shutdown_on(ctx.shutdown.clone().cancelled_owned())
        .run(reconcile, error_policy, state)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "reconcile failed");
            }
        })
        .await;
    Ok(())
}

fn error_policy(p: Arc<Placement>, e: &Error, _s: Arc<Splitter>) -> Action {
    tracing::warn!(placement = %p.name_any(), error = %e, "reconcile failed");
    Action::requeue(if e.is_transient() {
        Duration::from_secs(5)
    } else {
        Duration::from_secs(60)
    })
}

/// Replicas a Work asks its member to run (its manifest's `spec.replicas`).
fn work_replicas(w: &Work) -> Option<u32> {
    let m = w.spec.manifests.first()?;
    m.data
        .get("spec")?
        .get("replicas")?
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
}

fn cluster_of(w: &Work) -> Option<String> {
    w.cluster_name().map(str::to_string)
}

async fn reconcile(placement: Arc<Placement>, state: Arc<Splitter>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = reconcile_inner(&placement, &state).await;
    state.ctx.metrics.observe_reconcile(
        "placement",
        started.elapsed().as_secs_f64(),
        result.as_ref().err().map(|e| e.category()),
    );
    result
}

async fn reconcile_inner(placement: &Placement, state: &Splitter) -> Result<Action, Error> {
    let client = state.ctx.client.clone();
    let ns = placement.namespace().unwrap_or_default();
    let name = placement.name_any();
    let spec = &placement.spec;
    let cluster_objects = state.clusters.state();
    let cluster_refs: Vec<&Cluster> = cluster_objects.iter().map(|c| &**c).collect();
    let selection: Selection = select(spec, &cluster_refs);
    let eligible: BTreeSet<String> = selection
        .candidates
        .iter()
        .map(|c| c.cluster.clone())
        .collect();

    let works_api: Api<Work> = Api::all(client.clone());
    let existing: Vec<Work> = works_api
        .list(&ListParams::default().labels(&format!("{}={name}", labels::PLACEMENT)))
        .await?
        .items
        .into_iter()
        .filter(|w| w.annotations().get(annotations::SOURCE_NAMESPACE) == Some(&ns))
        .collect();

    let mut desired: BTreeMap<(String, String), Work> = BTreeMap::new();
    let mut divisions: Vec<(DynamicObject, Division, u32)> = Vec::new();
    for (ar, selector) in selected_types(&spec.resource_selectors)? {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
        for object in api.list(&ListParams::default()).await?.items {
            if let Some(s) = selector {
                if s.name.as_ref().is_some_and(|n| *n != object.name_any()) {
                    continue;
                }
                if let Some(sel) = &s.label_selector
                    && !selector_matches(sel, &object.labels().clone())
                {
                    continue;
                }
            }
            if object.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let uid = object.metadata.uid.clone().unwrap_or_default();
            let divisible = ar.kind == "Deployment"
                && spec.replica_scheduling.type_ == ReplicaSchedulingType::Divided;
            let division: Division = if divisible {
                let total = object.data["spec"]["replicas"]
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(1);
                let previous: Division = existing
                    .iter()
                    .filter(|w| w.labels().get(labels::SOURCE_UID) == Some(&uid))
                    // A copy being removed no longer counts: a member coming back after its
                    // replicas moved does not take them back unless asked (rebalanceOnJoin).
                    .filter(|w| w.metadata.deletion_timestamp.is_none())
                    .filter_map(|w| Some((cluster_of(w)?, work_replicas(w)?)))
                    .collect();
                match divide(
                    total,
                    &selection.candidates,
                    &previous,
                    spec.rebalance_on_join,
                ) {
                    Ok(d) => {
                        divisions.push((object.clone(), d.clone(), total));
                        d
                    }
                    Err(DivisionError::NoCandidates | DivisionError::ZeroWeight) => Division::new(),
                }
            } else {
                selection
                    .candidates
                    .iter()
                    .map(|c| (c.cluster.clone(), 0))
                    .collect()
            };
            let mut object = object;
            object.types = Some(kube::api::TypeMeta {
                api_version: ar.api_version.clone(),
                kind: ar.kind.clone(),
            });
            for (cluster, n) in &division {
                if divisible && *n == 0 {
                    continue;
                }
                let work = render(&object, cluster, divisible.then_some(*n), &name, spec)?;
                desired.insert((uid.clone(), cluster.clone()), work);
            }
        }
    }

    let params = PatchParams::apply(field_managers::SPLITTER).force();
    for work in desired.values() {
        let api: Api<Work> = Api::namespaced(client.clone(), &work.namespace().unwrap_or_default());
        let mut value = serde_json::to_value(work)?;
        value["apiVersion"] = json!(Work::api_version(&()));
        value["kind"] = json!(Work::kind(&()));
        api.patch(&work.name_any(), &params, &Patch::Apply(&value))
            .await?;
    }

    // Stale Works: gone objects and no-longer-wanted copies go; a copy on a member that failed
    // stays until every wanted copy of that object is available (or its Cluster is gone).
    let current: Vec<Work> = works_api
        .list(&ListParams::default().labels(&format!("{}={name}", labels::PLACEMENT)))
        .await?
        .items
        .into_iter()
        .filter(|w| w.annotations().get(annotations::SOURCE_NAMESPACE) == Some(&ns))
        .collect();
    let available = |w: &Work| {
        w.status
            .as_ref()
            .and_then(|s| {
                s.conditions
                    .iter()
                    .find(|c| c.type_ == conditions::AVAILABLE)
            })
            .is_some_and(|c| c.status == "True")
    };
    for work in &existing {
        let uid = work
            .labels()
            .get(labels::SOURCE_UID)
            .cloned()
            .unwrap_or_default();
        let Some(cluster) = cluster_of(work) else {
            continue;
        };
        if desired.contains_key(&(uid.clone(), cluster.clone())) {
            continue;
        }
        let object_wanted = desired.keys().any(|(u, _)| *u == uid);
        let member_failed =
            !eligible.contains(&cluster) && state.clusters.get(&ObjectRef::new(&cluster)).is_some();
        if object_wanted && member_failed {
            let replacements_ready = current
                .iter()
                .filter(|w| w.labels().get(labels::SOURCE_UID) == Some(&uid))
                .filter(|w| cluster_of(w).is_some_and(|c| eligible.contains(&c)))
                .all(available);
            if !replacements_ready {
                continue;
            }
        }
        let api: Api<Work> = Api::namespaced(client.clone(), &names::cluster_namespace(&cluster));
        match api
            .delete(&work.name_any(), &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }

    // Aggregated status of every divided Deployment.
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    for (object, division, total) in &divisions {
        let uid = object.metadata.uid.clone().unwrap_or_default();
        let copies: Vec<_> = current
            .iter()
            .filter(|w| w.labels().get(labels::SOURCE_UID) == Some(&uid))
            .filter_map(|w| {
                let c = cluster_of(w)?;
                division.get(&c).filter(|n| **n > 0)?;
                Some(copy_of(w, &c, object.metadata.generation))
            })
            .collect();
        let status = deployment_status(object.metadata.generation, *total, &copies, division, &now);
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            &ns,
            &resource("apps", "v1", "Deployment", "deployments"),
        );
        api.patch_status(
            &object.name_any(),
            &params,
            &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "Deployment", "status": status})),
        )
        .await?;
    }

    let placed = desired.len();
    let status = json!({
        "apiVersion": Placement::api_version(&()),
        "kind": Placement::kind(&()),
        "status": {
            "conditions": [{
                "type": conditions::SCHEDULED,
                "status": if eligible.is_empty() { "False" } else { "True" },
                "reason": if eligible.is_empty() { flotilla_api::reasons::NO_ELIGIBLE_CLUSTER } else { conditions::SCHEDULED },
                "message": format!("{placed} Work(s) on {} eligible member(s){}", eligible.len(),
                    selection.excluded.iter().map(|e| format!("; {} excluded: {}", e.cluster, e.message)).collect::<String>()),
                "lastTransitionTime": now,
                "observedGeneration": placement.metadata.generation,
            }],
        },
    });
    Api::<Placement>::namespaced(client, &ns)
        .patch_status(&name, &params, &Patch::Apply(&status))
        .await?;
    Ok(Action::requeue(Duration::from_secs(15)))
}
