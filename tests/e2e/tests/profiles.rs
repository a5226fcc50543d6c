//! WorkloadProfiles end to end, with a real custom workload kind: Argo Rollouts' Rollout CRD (as
//! `hack/build-tools.sh` takes it from the project's Go module) in the hub and every member, and
//! the profile Flotilla ships for it (`deploy/profiles/argo-rollouts.yaml`).
//!
//! No Argo Rollouts controller runs in the members: the test writes each member copy's status as
//! that controller would, which is the input Flotilla works from.

use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, ensure};
use flotilla_api::{Placement, Work, WorkloadProfile, conditions, reasons};
use flotilla_e2e::api::ClusterScopedObjects;
use flotilla_e2e::fleet::Fleet;
use flotilla_e2e::process::ControllerProcess;
use flotilla_e2e::{Environment, Seen, api, wait_for};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::negotiator::install_crd;

use crate::ONE_NEGOTIATOR;

/// A profile Flotilla ships, from `deploy/profiles/`.
fn shipped(file: &str) -> Result<Value> {
    let path = format!(
        "{}/../../deploy/profiles/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    Ok(serde_saphyr::from_str(&text)?)
}

/// The profile Flotilla ships for Argo Rollouts.
fn shipped_profile() -> Result<Value> {
    shipped("argo-rollouts.yaml")
}

/// A project's real CRD, from the tool cache (`hack/build-tools.sh` fetches it there).
fn cached_crd(file: &str) -> Result<Value> {
    let bin = std::env::var("FLOTILLA_TOOLS_BIN")
        .map_err(|_| anyhow!("FLOTILLA_TOOLS_BIN is not set: run the tests with hack/test.sh"))?;
    let path = std::path::Path::new(&bin).join("crds").join(file);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (hack/build-tools.sh fetches it)",
            path.display()
        )
    })?;
    Ok(serde_saphyr::from_str(&text)?)
}

fn rollouts() -> ApiResource {
    ApiResource {
        group: "argoproj.io".into(),
        version: "v1alpha1".into(),
        api_version: "argoproj.io/v1alpha1".into(),
        kind: "Rollout".into(),
        plural: "rollouts".into(),
    }
}

fn clonesets() -> ApiResource {
    ApiResource {
        group: "apps.kruise.io".into(),
        version: "v1alpha1".into(),
        api_version: "apps.kruise.io/v1alpha1".into(),
        kind: "CloneSet".into(),
        plural: "clonesets".into(),
    }
}

/// A custom kind set up for one test: its real CRD in the hub and every member of the fleet, the
/// negotiator running as the chart's negotiator ServiceAccount for the fleet's clusters, and a
/// Divided Placement `placement` of the kind (so that the members' schemas are imported). The
/// CRDs, the kind's profile (named `<plural>.<group>`, as the shipped ones are) and its
/// negotiated type are removed when it is dropped.
struct CustomKind {
    negotiator: ControllerProcess,
    _cleanup: Vec<ClusterScopedObjects>,
}

impl CustomKind {
    async fn set_up(
        env: &Environment,
        fleet: &Fleet,
        crd: &Value,
        kind: &ApiResource,
        placement: &str,
    ) -> Result<Self> {
        let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);
        let crd_name = format!("{}.{}", kind.plural, kind.group);
        let crd_resource = ApiResource::erase::<CustomResourceDefinition>(&());
        let mut cleanup = vec![ClusterScopedObjects::new(&env.hub)];
        // The admin lets the chart's splitter read the kind and write its status.
        fleet
            .identities
            .allow_splitter(&kind.group, &kind.plural)
            .await?;
        install_crd(hub, crd).await?;
        for (i, (_, client)) in members.iter().enumerate() {
            let mut member = ClusterScopedObjects::new(&env.members[i]);
            member.add(crd_resource.clone(), crd_name.clone());
            cleanup.push(member);
            install_crd(client, crd).await?;
        }
        cleanup[0].add(crd_resource, crd_name.clone());
        cleanup[0].add(ApiResource::erase::<WorkloadProfile>(&()), crd_name);
        cleanup[0].add(
            ApiResource::erase::<flotilla_api::NegotiatedApiResource>(&()),
            format!("{}.{}.{}", kind.plural, kind.version, kind.group),
        );

        let mut args = fleet.identities.args("negotiator")?;
        args.extend(
            [
                "--lease-namespace",
                &fleet.identities.namespace,
                "--cluster-selector",
                &fleet.selector,
                "--kubeconfig-secret-namespace",
                &fleet.identities.namespace,
                "--import-interval",
                "5s",
            ]
            .map(String::from),
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let negotiator = ControllerProcess::start("flotilla-negotiator", &args)?;

        let placement: Placement = serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
            "metadata": {"name": placement, "namespace": ns},
            "spec": {"resourceSelectors": [{"apiVersion": kind.api_version, "kind": kind.kind}],
                     "replicaScheduling": {"type": "Divided", "division": "Even"}},
        }))?;
        api::apply(hub, &serde_json::to_value(&placement)?, false).await??;
        Ok(Self {
            negotiator,
            _cleanup: cleanup,
        })
    }

    /// Applies `profile` and waits until the negotiator accepts it.
    async fn accept(&self, hub: &Client, profile: &Value) -> Result<()> {
        let name = profile["metadata"]["name"].as_str().unwrap_or_default();
        api::apply(hub, profile, false).await??;
        wait_for(
            &format!("profile {name} to be accepted"),
            Duration::from_secs(90),
            || async {
                Ok(match accepted(hub, name).await? {
                    Some((s, _, _)) if s == "True" => Seen::Done(()),
                    other => Seen::not_yet(format!("{other:?}")),
                })
            },
        )
        .await
        .map_err(|e| e.context(self.negotiator.log()))
    }
}

/// The status of Placement `name` as JSON, for a failure's context.
fn placement_status(hub: &Client, ns: &str, name: &str) -> String {
    let (hub, ns, name) = (hub.clone(), ns.to_string(), name.to_string());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        rt.block_on(async {
            let p = Api::<Placement>::namespaced(hub, &ns)
                .get(&name)
                .await
                .ok()?;
            serde_json::to_string_pretty(&p.status).ok()
        })
    })
    .join()
    .ok()
    .flatten()
    .unwrap_or_default()
}

/// What the splitter reads of the Works of namespace `ns` to tell whether a copy is healthy: each
/// Work's generation and the one its member observed, its conditions, and each manifest's
/// generations and verdicts (for the message of a failed wait).
async fn works_summary(hub: &Client, ns: &str) -> String {
    let works = match Api::<Work>::all(hub.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list.items,
        Err(e) => return format!("cannot list the Works: {e}"),
    };
    let mut lines = Vec::new();
    for w in works.iter().filter(|w| {
        w.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(flotilla_api::annotations::SOURCE_NAMESPACE))
            .is_some_and(|source| source == ns)
    }) {
        let status = w.status.as_ref();
        let conditions: Vec<String> = status
            .iter()
            .flat_map(|s| s.conditions.iter())
            .map(|c| format!("{}={} ({})", c.type_, c.status, c.reason))
            .collect();
        let manifests: Vec<String> = status
            .iter()
            .flat_map(|s| s.manifests.iter())
            .map(|m| {
                format!(
                    "{} gen {:?}/{:?} applied {:?} available {:?}",
                    m.identity.name, m.generation, m.observed_generation, m.applied, m.available
                )
            })
            .collect();
        lines.push(format!(
            "{}/{}: generation {:?}, observed {:?}; {}; {}",
            w.metadata.namespace.as_deref().unwrap_or_default(),
            w.metadata.name.as_deref().unwrap_or_default(),
            w.metadata.generation,
            status.and_then(|s| s.observed_generation),
            conditions.join(", "),
            manifests.join("; ")
        ));
    }
    lines.join("\n")
}

/// The profile's `Accepted` condition, as (status, reason, message).
async fn accepted(hub: &Client, name: &str) -> Result<Option<(String, String, String)>> {
    let p = Api::<WorkloadProfile>::all(hub.clone()).get(name).await?;
    let current = p
        .status
        .as_ref()
        .is_some_and(|s| s.observed_generation == p.metadata.generation);
    Ok(p.status
        .filter(|_| current)
        .and_then(|s| {
            s.conditions
                .into_iter()
                .find(|c| c.type_ == conditions::ACCEPTED)
        })
        .map(|c| (c.status, c.reason, c.message)))
}

/// A Rollout through the hub with the shipped profile: a profile naming a field the Rollout's
/// negotiated schema lacks is refused with a condition and an event naming the field; the shipped
/// one is accepted; the Rollout's replicas are divided (5 over three members: 2+2+1); a copy is
/// not available until Argo would call it Healthy; the hub Rollout's status shows the pods of
/// every member.
#[tokio::test]
async fn a_rollout_with_the_shipped_profile_is_divided_and_its_hub_status_summed() -> Result<()> {
    let _one_at_a_time = ONE_NEGOTIATOR.lock().await;
    let env = Environment::get();
    let fleet = Fleet::builder("profile").start().await?;
    let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);

    let kind = CustomKind::set_up(
        &env,
        &fleet,
        &cached_crd("rollouts.argoproj.io.yaml")?,
        &rollouts(),
        "rollouts",
    )
    .await?;
    let negotiator = &kind.negotiator;

    // A profile with a status field the schema lacks is refused, naming it.
    let mut profile = shipped_profile()?;
    let name = profile["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    profile["spec"]["statusSums"] = json!([".status.readyReplicas", ".status.readyReplicaz"]);
    api::apply(hub, &profile, false).await??;
    let refused = wait_for(
        "the profile naming .status.readyReplicaz to be refused",
        Duration::from_secs(90),
        || async {
            Ok(match accepted(hub, &name).await? {
                Some((s, reason, message))
                    if s == "False" && reason == reasons::PATH_NOT_IN_SCHEMA =>
                {
                    Seen::Done(message)
                }
                other => Seen::not_yet(format!("{other:?}")),
            })
        },
    )
    .await
    .map_err(|e| e.context(negotiator.log()))?;
    ensure!(
        refused.contains(".status.readyReplicaz") && refused.contains("spec.statusSums"),
        "the message names the field: {refused}"
    );
    let events: Api<Event> = Api::namespaced(hub.clone(), "default");
    wait_for(
        "a Warning event naming the field",
        Duration::from_secs(30),
        || async {
            let found = events
                .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
                .await?
                .items
                .into_iter()
                .any(|e| {
                    e.type_.as_deref() == Some("Warning")
                        && e.message
                            .as_deref()
                            .is_some_and(|m| m.contains(".status.readyReplicaz"))
                });
            Ok(if found {
                Seen::Done(())
            } else {
                Seen::not_yet("no event yet")
            })
        },
    )
    .await
    .map_err(|e| e.context(negotiator.log()))?;

    // The shipped profile is accepted.
    kind.accept(hub, &shipped_profile()?).await?;

    // A Rollout of 5 replicas: 2 + 2 + 1.
    let rollout = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"replicas": 5, "selector": {"matchLabels": {"app": "web"}},
                 "strategy": {"canary": {"steps": [{"setWeight": 20}, {"pause": {"duration": "10s"}}]}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}]}}}});
    api::apply(hub, &rollout, false).await??;
    let shares = wait_for("the Rollout divided", Duration::from_secs(60), || async {
        let mut shares = Vec::new();
        for (cluster, client) in members {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &rollouts());
            if let Some(copy) = api.get_opt("web").await? {
                shares.push((
                    cluster.clone(),
                    copy.data["spec"]["replicas"].as_i64().unwrap_or(-1),
                ));
            }
        }
        let mut counts: Vec<i64> = shares.iter().map(|(_, n)| *n).collect();
        counts.sort_unstable();
        Ok(if counts == [1, 2, 2] {
            Seen::Done(shares)
        } else {
            Seen::not_yet(format!("{shares:?}"))
        })
    })
    .await
    .map_err(|e| e.context(fleet.splitter.log()))
    .map_err(|e| e.context(placement_status(hub, ns, "rollouts")))?;

    // Not available until Argo would call the copies Healthy: the Work says why.
    let works: Api<Work> = Api::all(hub.clone());
    let reason = wait_for(
        "the copies to wait for the health rule",
        Duration::from_secs(60),
        || async {
            let waiting = works
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|w| {
                    w.spec
                        .manifests
                        .iter()
                        .any(|m| m.types.as_ref().is_some_and(|t| t.kind == "Rollout"))
                })
                .filter_map(|w| {
                    w.status?.manifests.into_iter().find(|m| {
                        m.identity.kind == "Rollout" && m.identity.namespace.as_deref() == Some(ns)
                    })
                })
                .filter(|m| m.available == Some(flotilla_api::ConditionStatus::False))
                .filter_map(|m| m.message)
                .collect::<Vec<_>>();
            Ok(if waiting.len() == 3 {
                Seen::Done(waiting)
            } else {
                Seen::not_yet(format!("{waiting:?}"))
            })
        },
    )
    .await?;
    ensure!(
        reason.iter().all(|m| m.contains("health rule")),
        "the member copies wait for the profile's health rule: {reason:?}"
    );
    // Meanwhile kstatus (what GitOps tools judge readiness by) reads the hub Rollout's Ready
    // condition: in progress, not current.
    wait_for(
        "kstatus to say the hub Rollout is InProgress",
        Duration::from_secs(60),
        || async {
            let (verdict, message) =
                crate::api::kstatus(&env, ns, "rollouts.argoproj.io", "web").await?;
            Ok(
                if verdict == "InProgress" && message.contains("not yet on") {
                    Seen::Done(())
                } else {
                    Seen::not_yet(format!("{verdict}: {message}"))
                },
            )
        },
    )
    .await?;

    // Each member's Argo Rollouts reports its pods: the hub shows them all, and the Placement is
    // Available.
    for (cluster, client) in members {
        let n = shares
            .iter()
            .find(|(c, _)| c == cluster)
            .map(|(_, n)| *n)
            .unwrap_or_default();
        Api::<DynamicObject>::namespaced_with(client.clone(), ns, &rollouts())
            .patch_status(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Healthy", "replicas": n,
                    "readyReplicas": n, "availableReplicas": n, "updatedReplicas": n}})),
            )
            .await?;
    }
    let hub_rollouts: Api<DynamicObject> = Api::namespaced_with(hub.clone(), ns, &rollouts());
    wait_for(
        "the hub Rollout to count 5 ready",
        Duration::from_secs(60),
        || async {
            let status = hub_rollouts.get("web").await?.data["status"].clone();
            Ok(
                if status["readyReplicas"] == 5
                    && status["availableReplicas"] == 5
                    && status["replicas"] == 5
                {
                    Seen::Done(())
                } else {
                    Seen::not_yet(status.to_string())
                },
            )
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    crate::api::kstatus_current(&env, ns, "rollouts.argoproj.io", "web").await?;
    let placements: Api<Placement> = Api::namespaced(hub.clone(), ns);
    wait_for(
        "the Placement to be Available",
        Duration::from_secs(60),
        || async {
            let p = placements.get("rollouts").await?;
            let available = p
                .status
                .iter()
                .flat_map(|s| &s.conditions)
                .any(|c| c.type_ == "Available" && c.status == "True");
            Ok(if available {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("{:?}", p.status.map(|s| s.conditions)))
            })
        },
    )
    .await?;
    drop(kind);
    drop(fleet);
    Ok(())
}

/// An OpenKruise CloneSet through the hub with the shipped profile, against OpenKruise's real
/// CRD: accepted; 4 replicas divided 2+1+1; the hub CloneSet is not Ready (kstatus InProgress)
/// until every member's copy has all its replicas updated and ready, and then shows the sums of
/// every member and reads Current.
#[tokio::test]
async fn a_cloneset_with_the_shipped_profile_is_ready_once_every_member_runs_it() -> Result<()> {
    let _one_at_a_time = ONE_NEGOTIATOR.lock().await;
    let env = Environment::get();
    let fleet = Fleet::builder("cloneset").start().await?;
    let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);
    let kind = CustomKind::set_up(
        &env,
        &fleet,
        &cached_crd("clonesets.apps.kruise.io.yaml")?,
        &clonesets(),
        "clonesets",
    )
    .await?;
    kind.accept(hub, &shipped("openkruise-cloneset.yaml")?)
        .await?;

    let cloneset = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}]}}}});
    api::apply(hub, &cloneset, false).await??;
    wait_for("the CloneSet divided", Duration::from_secs(60), || async {
        let mut shares = Vec::new();
        for (cluster, client) in members {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &clonesets());
            if let Some(copy) = api.get_opt("web").await? {
                shares.push((
                    cluster.clone(),
                    copy.data["spec"]["replicas"].as_i64().unwrap_or(-1),
                    copy.metadata.generation.unwrap_or_default(),
                ));
            }
        }
        let mut counts: Vec<i64> = shares.iter().map(|(_, n, _)| *n).collect();
        counts.sort_unstable();
        Ok(if counts == [1, 1, 2] {
            Seen::Done(shares)
        } else {
            Seen::not_yet(format!("{shares:?}"))
        })
    })
    .await
    .map_err(|e| e.context(fleet.splitter.log()))
    .map_err(|e| e.context(placement_status(hub, ns, "clonesets")))?;

    // No OpenKruise controller runs in the members: as one would, two members report their pods
    // updated and ready; the hub CloneSet is not Ready yet, and says which member it waits for.
    let report = |client: &Client| {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &clonesets());
        async move {
            // As a controller does: for the spec the copy has now (one written again after the
            // division, as the negotiated schema lands, has a newer generation to observe).
            let copy = api.get("web").await?;
            let generation = copy.metadata.generation.unwrap_or_default();
            let n = copy.data["spec"]["replicas"].as_i64().unwrap_or_default();
            api.patch_status(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"observedGeneration": generation,
                    "replicas": n, "readyReplicas": n, "availableReplicas": n,
                    "updatedReplicas": n, "updatedReadyReplicas": n}})),
            )
            .await?;
            anyhow::Ok(())
        }
    };
    let (last, _) = &members[2];
    wait_for(
        "kstatus to say the hub CloneSet is InProgress, waiting for the last member",
        Duration::from_secs(60),
        || async {
            for (_, client) in &members[..2] {
                report(client).await?;
            }
            let (verdict, message) =
                crate::api::kstatus(&env, ns, "clonesets.apps.kruise.io", "web").await?;
            Ok(
                if verdict == "InProgress" && message.contains(&format!("not yet on {last}")) {
                    Seen::Done(())
                } else {
                    Seen::not_yet(format!("{verdict}: {message}"))
                },
            )
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;

    let hub_clonesets: Api<DynamicObject> = Api::namespaced_with(hub.clone(), ns, &clonesets());
    wait_for(
        "the hub CloneSet to count 4 updated and ready",
        Duration::from_secs(60),
        || async {
            for (_, client) in members {
                report(client).await?;
            }
            let status = hub_clonesets.get("web").await?.data["status"].clone();
            Ok(
                if status["updatedReadyReplicas"] == 4 && status["readyReplicas"] == 4 {
                    Seen::Done(())
                } else {
                    Seen::not_yet(status.to_string())
                },
            )
        },
    )
    .await?;
    // (The Works say why a copy does not count as healthy: a flaky wait under load.)
    if let Err(e) = crate::api::kstatus_current(&env, ns, "clonesets.apps.kruise.io", "web").await {
        return Err(e.context(works_summary(hub, ns).await));
    }
    crate::api::kubectl(
        &env,
        &[
            "-n",
            ns,
            "wait",
            "--for=condition=Ready",
            "--timeout=30s",
            "clonesets.apps.kruise.io/web",
        ],
    )
    .await?;
    drop(kind);
    drop(fleet);
    Ok(())
}

/// Pod templates where a custom kind keeps them: a KubeRay RayCluster (its real CRD) whose worker
/// group runs a host escape is placed nowhere — its pods would run in every member though the
/// hub's namespace enforces baseline — while one whose head and workers are ordinary goes to
/// every member. No profile declares where RayCluster keeps its templates: every PodTemplateSpec
/// in an object is judged.
#[tokio::test]
async fn a_rayclusters_host_escape_in_a_worker_group_runs_nowhere() -> Result<()> {
    let _one_at_a_time = ONE_NEGOTIATOR.lock().await;
    let env = Environment::get();
    let fleet = Fleet::builder("raycluster").start().await?;
    let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);
    let rayclusters = ApiResource {
        group: "ray.io".into(),
        version: "v1".into(),
        api_version: "ray.io/v1".into(),
        kind: "RayCluster".into(),
        plural: "rayclusters".into(),
    };
    let _kind = CustomKind::set_up(
        &env,
        &fleet,
        &cached_crd("rayclusters.ray.io.yaml")?,
        &rayclusters,
        "ray",
    )
    .await?;
    let pod = |escape: bool| {
        let mut spec = json!({"containers": [{"name": "ray", "image": "rayproject/ray:2.9.0"}]});
        if escape {
            spec = json!({"hostPID": true,
                "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
                "containers": [{"name": "ray", "image": "rayproject/ray:2.9.0",
                    "securityContext": {"privileged": true, "runAsUser": 0},
                    "volumeMounts": [{"name": "root", "mountPath": "/host"}]}]});
        }
        json!({"spec": spec})
    };
    let cluster = |name: &str, escape: bool| {
        json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": pod(false)},
                     "workerGroupSpecs": [{"groupName": "workers", "replicas": 1, "minReplicas": 0,
                         "maxReplicas": 2, "rayStartParams": {}, "template": pod(escape)}]}})
    };
    api::apply(hub, &cluster("calm", false), false).await??;
    api::apply(hub, &cluster("escape", true), false).await??;
    let on_members = |name: &'static str| {
        let rayclusters = rayclusters.clone();
        async move {
            let mut n = 0;
            for (_, client) in members {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), ns, &rayclusters);
                if api.get_opt(name).await?.is_some() {
                    n += 1;
                }
            }
            Ok::<_, anyhow::Error>(n)
        }
    };
    wait_for("calm in every member", Duration::from_secs(90), || async {
        let n = on_members("calm").await?;
        Ok(if n == members.len() {
            Seen::Done(())
        } else {
            Seen::not_yet(format!("{n} copies"))
        })
    })
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    let placements: Api<Placement> = Api::namespaced(hub.clone(), ns);
    wait_for(
        "the Placement to hold escape back for Pod Security",
        Duration::from_secs(60),
        || async {
            let p = placements.get("ray").await?;
            let decision = p
                .status
                .iter()
                .flat_map(|s| s.decisions.iter())
                .find(|d| d.name == "escape")
                .cloned();
            Ok(match decision {
                Some(d)
                    if d.clusters.is_empty()
                        && !d.excluded.is_empty()
                        && d.excluded
                            .iter()
                            .all(|e| e.reason == reasons::POD_SECURITY_VIOLATION) =>
                {
                    Seen::Done(())
                }
                other => Seen::not_yet(format!("{other:?}")),
            })
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    let n = on_members("escape").await?;
    ensure!(n == 0, "the host escape runs in {n} member(s)");
    Ok(())
}
