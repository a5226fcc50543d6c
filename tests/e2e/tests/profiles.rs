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
use flotilla_e2e::process::ControllerProcess;
use flotilla_e2e::{Environment, Seen, api, chart, random_suffix, wait_for};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::negotiator::install_crd;
use crate::splitter::Fleet;

/// The profile Flotilla ships for Argo Rollouts.
fn shipped_profile() -> Result<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/profiles/argo-rollouts.yaml"
    );
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    Ok(serde_saphyr::from_str(&text)?)
}

/// The Rollout CRD of Argo Rollouts, from the tool cache.
fn rollout_crd() -> Result<Value> {
    let bin = std::env::var("FLOTILLA_TOOLS_BIN")
        .map_err(|_| anyhow!("FLOTILLA_TOOLS_BIN is not set: run the tests with hack/test.sh"))?;
    let path = std::path::Path::new(&bin).join("crds/rollouts.argoproj.io.yaml");
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

/// The Placement's status as JSON, for a failure's context.
fn placement_status(hub: &Client, ns: &str) -> String {
    let (hub, ns) = (hub.clone(), ns.to_string());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        rt.block_on(async {
            let p = Api::<Placement>::namespaced(hub, &ns)
                .get("rollouts")
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
    let env = Environment::get();
    let fleet = Fleet::start("profile").await?;
    let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);

    // The CRD in the hub and every member; the profile and the negotiated type on the hub. All
    // cluster-scoped: removed when the test ends.
    let crd = rollout_crd()?;
    let crd_resource = ApiResource::erase::<CustomResourceDefinition>(&());
    let mut cleanup = vec![ClusterScopedObjects::new(&env.hub)];
    install_crd(hub, &crd).await?;
    for (i, (_, client)) in members.iter().enumerate() {
        let mut member = ClusterScopedObjects::new(&env.members[i]);
        member.add(crd_resource.clone(), "rollouts.argoproj.io");
        cleanup.push(member);
        install_crd(client, &crd).await?;
    }
    cleanup[0].add(crd_resource, "rollouts.argoproj.io");
    cleanup[0].add(
        ApiResource::erase::<WorkloadProfile>(&()),
        "rollouts.argoproj.io",
    );
    cleanup[0].add(
        ApiResource::erase::<flotilla_api::NegotiatedApiResource>(&()),
        "rollouts.v1alpha1.argoproj.io",
    );

    // The negotiator, as the chart's negotiator ServiceAccount.
    let release = format!("e2e-{}", random_suffix());
    let _identities = chart::install_identities(hub, &release, ns).await?;
    let kubeconfig =
        chart::service_account_kubeconfig(&env, hub, ns, &release, "negotiator").await?;
    let kubeconfig = kubeconfig.to_string_lossy().into_owned();
    let negotiator = ControllerProcess::start(
        "flotilla-negotiator",
        &[
            "--kubeconfig",
            &kubeconfig,
            "--lease-namespace",
            ns,
            "--cluster-selector",
            &fleet.selector,
            "--kubeconfig-secret-namespace",
            ns,
            "--import-interval",
            "5s",
        ],
    )?;

    // A Placement selects Rollouts: the members' schemas of the kind are imported.
    let placement: Placement = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
        "metadata": {"name": "rollouts", "namespace": ns},
        "spec": {"resourceSelectors": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout"}],
                 "replicaScheduling": {"type": "Divided", "division": "Even"}},
    }))?;
    api::apply(hub, &serde_json::to_value(&placement)?, false).await??;

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
    .await?;

    // The shipped profile is accepted.
    api::apply(hub, &shipped_profile()?, false).await??;
    wait_for(
        "the shipped profile to be accepted",
        Duration::from_secs(60),
        || async {
            Ok(match accepted(hub, &name).await? {
                Some((s, _, _)) if s == "True" => Seen::Done(()),
                other => Seen::not_yet(format!("{other:?}")),
            })
        },
    )
    .await
    .map_err(|e| e.context(negotiator.log()))?;

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
    .map_err(|e| e.context(placement_status(hub, ns)))?;

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
            Ok(if verdict == "InProgress" && message.contains("not yet on") {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("{verdict}: {message}"))
            })
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
    drop(negotiator);
    drop(fleet);
    drop(cleanup);
    Ok(())
}
