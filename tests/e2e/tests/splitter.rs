//! The splitter end to end: a Deployment applied to the hub runs spread over real members, the
//! hub status is the truth of all copies, scaling divides only the change, a cordoned member takes
//! no new replicas, a drained one gives its replicas away, and deleting the hub
//! Deployment removes the copies.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Result, ensure};
use flotilla_api::{Cluster, Placement};
use flotilla_e2e::clusters::ClusterCleanup;
use flotilla_e2e::process::ControllerProcess;
use flotilla_e2e::{Environment, Seen, TestNamespace, api, random_suffix, wait_for};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const SELECTOR_LABEL: &str = "e2e.flotilla.dev/splitter";

fn deployment(replicas: i32) -> Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}}
    }))?)
}

/// Replicas of `web` per member, by member Cluster name.
async fn member_replicas(members: &[(String, Client)], ns: &str) -> Result<BTreeMap<String, i32>> {
    let mut out = BTreeMap::new();
    for (cluster, client) in members {
        let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
        if let Some(d) = api.get_opt("web").await? {
            out.insert(cluster.clone(), d.spec.replicas.unwrap_or(0));
        }
    }
    Ok(out)
}

/// Waits until the hub Deployment says `n` replicas available and Available=True.
async fn hub_available(hub: &Api<Deployment>, n: i32) -> Result<Deployment> {
    wait_for(
        &format!("the hub Deployment to report {n} available replicas"),
        Duration::from_secs(120),
        || async {
            let d = hub.get("web").await?;
            let status = d.status.clone().unwrap_or_default();
            let available = status.conditions.iter().flatten().any(|c| {
                c.type_.as_deref() == Some("Available") && c.status.as_deref() == Some("True")
            });
            Ok(if available && status.available_replicas == Some(n) {
                Seen::Done(d)
            } else {
                Seen::not_yet(format!(
                    "available={available} availableReplicas={:?}",
                    status.available_replicas
                ))
            })
        },
    )
    .await
}

#[tokio::test]
async fn a_deployment_on_the_hub_runs_spread_over_the_members() -> Result<()> {
    let env = Environment::get();
    let hub = env.hub.client().await?;
    api::install_crds(&hub).await?;
    let members_info = env.require_members(3)?.to_vec();
    let mut all = vec![&env.hub];
    all.extend(members_info.iter());
    let ns = TestNamespace::create("split", &all).await?;
    let id = random_suffix();
    let selector = format!("{SELECTOR_LABEL}={id}");
    let kubeconfig = env.hub.kubeconfig.to_string_lossy().into_owned();
    let common = [
        "--kubeconfig",
        kubeconfig.as_str(),
        "--lease-namespace",
        ns.name(),
        "--cluster-selector",
        selector.as_str(),
    ];
    let mut reg = common.to_vec();
    reg.extend([
        "--probe-interval",
        "2s",
        "--kubeconfig-secret-namespace",
        ns.name(),
    ]);
    let mut sync = common.to_vec();
    sync.extend([
        "--resync-interval",
        "5s",
        "--kubeconfig-secret-namespace",
        ns.name(),
    ]);
    let mut split = common.to_vec();
    split.extend(["--namespace", ns.name()]);
    let _registration = ControllerProcess::start("flotilla-registration", &reg)?;
    let _syncer = ControllerProcess::start("flotilla-syncer", &sync)?;
    let splitter = ControllerProcess::start("flotilla-splitter", &split)?;
    let _cleanup = ClusterCleanup::new(&env.hub, selector.clone());

    // Three push-mode members.
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), ns.name());
    let clusters: Api<Cluster> = Api::all(hub.clone());
    let mut members = Vec::new();
    for info in &members_info {
        let name = format!("e2e-{}", random_suffix());
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            data: Some(
                [(
                    "kubeconfig".to_string(),
                    ByteString(std::fs::read(&info.kubeconfig)?),
                )]
                .into(),
            ),
            ..Secret::default()
        };
        secrets.create(&PostParams::default(), &secret).await?;
        let c: Cluster = serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Cluster",
            "metadata": {"name": name, "labels": {SELECTOR_LABEL: id}},
            "spec": {"syncMode": "Push", "kubeconfigSecretRef": {"name": name}},
        }))?;
        clusters.create(&PostParams::default(), &c).await?;
        members.push((name, info.client().await?));
    }
    // All three Ready before the Deployment appears: a member that joins later gets no replicas
    // (no rebalanceOnJoin), which is not what this test is about.
    wait_for(
        "the three members to be Ready",
        Duration::from_secs(60),
        || async {
            let mut not_ready = Vec::new();
            for (name, _) in &members {
                let c = clusters.get(name).await?;
                let ready = c
                    .status
                    .iter()
                    .flat_map(|s| s.conditions.iter())
                    .any(|x| x.type_ == "Ready" && x.status == "True");
                if !ready {
                    not_ready.push(name.clone());
                }
            }
            Ok(if not_ready.is_empty() {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("not Ready: {not_ready:?}"))
            })
        },
    )
    .await?;

    let placement: Placement = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
        "metadata": {"name": "spread"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                 "replicaScheduling": {"type": "Divided", "division": "Even"}},
    }))?;
    Api::<Placement>::namespaced(hub.clone(), ns.name())
        .create(&PostParams::default(), &placement)
        .await?;
    let deployments: Api<Deployment> = Api::namespaced(hub.clone(), ns.name());
    deployments
        .create(&PostParams::default(), &deployment(10)?)
        .await?;

    // 10 replicas over 3 members: 4 + 3 + 3, and the hub says 10/10.
    let d = hub_available(&deployments, 10)
        .await
        .map_err(|e| e.context(splitter.log()))?;
    let spread = member_replicas(&members, ns.name()).await?;
    let mut counts: Vec<i32> = spread.values().copied().collect();
    counts.sort_unstable();
    ensure!(
        counts == vec![3, 3, 4],
        "10 replicas spread 4+3+3 over the members, got {spread:?}"
    );
    let placed = d
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_.as_deref() == Some("Placed"))
        .and_then(|c| c.message)
        .unwrap_or_default();
    ensure!(
        placed.split(' ').count() == 3 && placed.contains("=4"),
        "the Placed condition gives the distribution: {placed:?}"
    );

    // Scale to 13: only the 3 new replicas are divided.
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 13}})),
        )
        .await?;
    hub_available(&deployments, 13).await?;
    let scaled = member_replicas(&members, ns.name()).await?;
    let moved: i32 = spread
        .iter()
        .map(|(c, n)| (scaled.get(c).copied().unwrap_or(0) - n).abs())
        .sum();
    ensure!(
        moved == 3,
        "scaling 10 -> 13 moves exactly 3 replicas: {spread:?} -> {scaled:?}"
    );

    // Cordon one member: it keeps its replicas but takes none of a scale-up.
    let (cordoned, _) = members[0].clone();
    clusters
        .patch(
            &cordoned,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await?;
    // The Placement reports it held (and why) before the scale-up, so the test cannot race it.
    let placements: Api<Placement> = Api::namespaced(hub.clone(), ns.name());
    wait_for(
        "the Placement to report the cordoned member",
        Duration::from_secs(30),
        || async {
            let message = placements
                .get("spread")
                .await?
                .status
                .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Scheduled"))
                .map(|c| c.message)
                .unwrap_or_default();
            Ok(
                if message.contains(&format!("{cordoned}: the Cluster is cordoned")) {
                    Seen::Done(())
                } else {
                    Seen::not_yet(message)
                },
            )
        },
    )
    .await?;
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 16}})),
        )
        .await?;
    hub_available(&deployments, 16).await?;
    let after_cordon = member_replicas(&members, ns.name()).await?;
    ensure!(
        after_cordon.get(&cordoned) == scaled.get(&cordoned),
        "a cordoned member takes no new replicas: {scaled:?} -> {after_cordon:?}"
    );

    // Drain it (an untolerated NoExecute taint): its replicas move, the hub stays at 16.
    clusters
        .patch(
            &cordoned,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": [{"key": "e2e.flotilla.dev/drain", "effect": "NoExecute"}]}})),
        )
        .await?;
    wait_for(
        "the drained member's replicas to move",
        Duration::from_secs(120),
        || async {
            let now = member_replicas(&members, ns.name()).await?;
            let total: i32 = now.values().sum();
            Ok(if !now.contains_key(&cordoned) && total == 16 {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("{now:?}"))
            })
        },
    )
    .await
    .map_err(|e| e.context(splitter.log()))?;
    hub_available(&deployments, 16).await?;

    // Deleting the hub Deployment removes every copy.
    deployments.delete("web", &DeleteParams::default()).await?;
    wait_for(
        "the member copies to be removed",
        Duration::from_secs(90),
        || async {
            let left = member_replicas(&members, ns.name()).await?;
            Ok(if left.is_empty() {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("{left:?}"))
            })
        },
    )
    .await?;
    Ok(())
}
