//! The local environment is what it claims to be: a hub without workload controllers, members
//! that run Deployments to Available, credentials that are per cluster, RBAC that is enforced,
//! and members that can be stopped and started without losing data.

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use flotilla_e2e::{
    Environment, ScratchMember, Seen, TestNamespace, client_from, holds_for, parse_version,
    wait_for,
};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, ServiceAccount};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

fn deployment(name: &str, replicas: i32) -> Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": { "containers": [{ "name": "app", "image": "registry.k8s.io/pause:3.10" }] }
            }
        }
    }))?)
}

fn api_status_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

#[tokio::test]
async fn hub_runs_no_workload_controllers() -> Result<()> {
    let env = Environment::get();
    let ns = TestNamespace::create("hub-nowork", &[&env.hub]).await?;
    let hub = env.hub.client().await?;

    // The hub's controller-manager does run: the service-account controller fills the namespace.
    let sas: Api<ServiceAccount> = Api::namespaced(hub.clone(), ns.name());
    wait_for(
        "the hub's service-account controller to create the default ServiceAccount",
        Duration::from_secs(60),
        || async {
            Ok(match sas.get_opt("default").await? {
                Some(_) => Seen::Done(()),
                None => Seen::not_yet("no ServiceAccount default"),
            })
        },
    )
    .await?;

    // ... but no deployment controller: a Deployment on the hub gets no ReplicaSet and no status.
    let deployments: Api<Deployment> = Api::namespaced(hub.clone(), ns.name());
    deployments
        .create(&PostParams::default(), &deployment("idle", 2)?)
        .await?;
    let replicasets: Api<ReplicaSet> = Api::namespaced(hub.clone(), ns.name());
    holds_for(
        "no ReplicaSet and no Deployment status on the hub",
        Duration::from_secs(20),
        || async {
            let rs = replicasets.list(&ListParams::default()).await?;
            if let Some(r) = rs.items.first() {
                return Ok(Err(format!(
                    "ReplicaSet {:?} exists",
                    r.metadata.name.as_deref().unwrap_or_default()
                )));
            }
            let d = deployments.get("idle").await?;
            match d.status.and_then(|s| s.observed_generation) {
                Some(g) => Ok(Err(format!("Deployment status.observedGeneration = {g}"))),
                None => Ok(Ok(())),
            }
        },
    )
    .await
}

#[tokio::test]
async fn every_member_runs_a_deployment_to_available() -> Result<()> {
    let env = Environment::get();
    let members = env.require_members(2)?;
    let ns = TestNamespace::create("member-deploy", &members.iter().collect::<Vec<_>>()).await?;

    let checks = members.iter().map(|member| {
        let ns = ns.name().to_string();
        async move {
            let client = member.client().await?;
            let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
            deployments
                .create(&PostParams::default(), &deployment("web", 3)?)
                .await?;
            wait_for(
                &format!(
                    "Deployment web in {} to be Available with 3 replicas",
                    member.name
                ),
                Duration::from_secs(120),
                || async {
                    let d = deployments.get("web").await?;
                    let status = d.status.unwrap_or_default();
                    let available = status.conditions.unwrap_or_default().iter().any(|c| {
                        c.type_.as_deref() == Some("Available")
                            && c.status.as_deref() == Some("True")
                    });
                    let n = status.available_replicas.unwrap_or(0);
                    Ok(if available && n == 3 {
                        Seen::Done(())
                    } else {
                        Seen::not_yet(format!("Available={available}, availableReplicas={n}"))
                    })
                },
            )
            .await?;
            // The pods really exist, are bound to this member's fake nodes and are Running.
            let pods: Api<Pod> = Api::namespaced(client, &ns);
            let pods = pods.list(&ListParams::default().labels("app=web")).await?;
            anyhow::ensure!(
                pods.items.len() == 3,
                "expected 3 pods in {}, got {}",
                member.name,
                pods.items.len()
            );
            for p in &pods.items {
                let node = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default();
                anyhow::ensure!(
                    node.starts_with(&format!("{}-node-", member.name)),
                    "pod {:?} in {} is on node {node:?}",
                    p.metadata.name,
                    member.name
                );
                let phase = p
                    .status
                    .as_ref()
                    .and_then(|s| s.phase.clone())
                    .unwrap_or_default();
                anyhow::ensure!(
                    phase == "Running",
                    "pod {:?} in {} is {phase}",
                    p.metadata.name,
                    member.name
                );
            }
            Ok::<_, anyhow::Error>(())
        }
    });
    for result in futures::future::join_all(checks).await {
        result?;
    }
    Ok(())
}

/// A client for `target` that presents the bearer token of `source`.
async fn client_with_token_of(
    target: &flotilla_e2e::ClusterInfo,
    source: &flotilla_e2e::ClusterInfo,
) -> Result<Client> {
    let token = source
        .read_kubeconfig()?
        .auth_infos
        .into_iter()
        .find_map(|a| a.auth_info.and_then(|i| i.token))
        .ok_or_else(|| anyhow!("no token in {}'s kubeconfig", source.name))?;
    let mut kubeconfig = target.read_kubeconfig()?;
    for auth in &mut kubeconfig.auth_infos {
        if let Some(info) = auth.auth_info.as_mut() {
            info.token = Some(token.clone());
        }
    }
    client_from(kubeconfig).await
}

#[tokio::test]
async fn credentials_of_one_cluster_are_rejected_by_another() -> Result<()> {
    let env = Environment::get();
    let members = env.require_members(2)?;
    let pairs = [
        (&members[0], &members[1]),
        (&members[1], &members[0]),
        (&env.hub, &members[0]),
        (&members[0], &env.hub),
    ];
    for (source, target) in pairs {
        // Positive control: the token works where it belongs.
        let own: Api<Namespace> = Api::all(source.client().await?);
        own.list(&ListParams::default().limit(1))
            .await
            .with_context(|| {
                format!("{}'s admin token must work in {}", source.name, source.name)
            })?;

        let foreign: Api<Namespace> = Api::all(client_with_token_of(target, source).await?);
        match foreign.list(&ListParams::default().limit(1)).await {
            Err(e) if api_status_code(&e) == Some(401) => {}
            Err(e) => anyhow::bail!(
                "{}'s token in {}: expected 401 Unauthorized, got error {e}",
                source.name,
                target.name
            ),
            Ok(_) => anyhow::bail!(
                "{}'s token was accepted by {}: clusters must not share credentials",
                source.name,
                target.name
            ),
        }
    }
    Ok(())
}

#[tokio::test]
async fn non_admin_user_is_limited_by_rbac() -> Result<()> {
    let env = Environment::get();
    for cluster in env.all_clusters() {
        let user = cluster.user_client().await?;
        // ClusterRole view: reading pods is allowed ...
        let pods: Api<Pod> = Api::namespaced(user.clone(), "kube-system");
        pods.list(&ListParams::default().limit(1))
            .await
            .with_context(|| {
                format!(
                    "the non-admin user must be able to list pods in {}",
                    cluster.name
                )
            })?;
        // ... reading Secrets and creating anything is not.
        let secrets: Api<Secret> = Api::namespaced(user.clone(), "kube-system");
        let denied = secrets.list(&ListParams::default().limit(1)).await;
        anyhow::ensure!(
            denied.as_ref().err().and_then(api_status_code) == Some(403),
            "listing Secrets as the non-admin user in {}: expected 403 Forbidden, got {:?}",
            cluster.name,
            denied.map(|l| l.items.len())
        );
        let namespaces: Api<Namespace> = Api::all(user);
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "e2e-forbidden"}}))?;
        let created = namespaces.create(&PostParams::default(), &ns).await;
        anyhow::ensure!(
            created.as_ref().err().and_then(api_status_code) == Some(403),
            "creating a Namespace as the non-admin user in {}: expected 403 Forbidden, got {:?}",
            cluster.name,
            created.map(|n| n.metadata.name)
        );
    }
    Ok(())
}

#[tokio::test]
async fn stopped_member_is_unreachable_and_comes_back_intact() -> Result<()> {
    let env = Environment::get();
    // Of the oldest version a member of the environment runs, so that add-member and
    // start-member are shown to keep a member's version.
    let mut oldest = env.hub.version().await?;
    for m in &env.members {
        let v = m.version().await?;
        if parse_version(&v)? < parse_version(&oldest)? {
            oldest = v;
        }
    }
    let scratch = ScratchMember::add_version(&env, "e2e-stop", Some(&oldest)).await?;
    let name = scratch.info.name.clone();
    let client = scratch.info.client().await?;
    anyhow::ensure!(
        scratch.info.version().await? == oldest,
        "add-member --version {oldest}: {name} runs {}",
        scratch.info.version().await?
    );

    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "survivor" },
        "data": { "key": "value" }
    }))?;
    let created = cms.create(&PostParams::default(), &cm).await?;
    let uid = created.metadata.uid.clone();

    env.clusters_sh(&["stop-member", &name]).await?;
    // A fresh client, so no pooled connection hides the outage.
    let down: Api<ConfigMap> = Api::namespaced(scratch.info.client().await?, "default");
    match down.get("survivor").await {
        Err(e) if api_status_code(&e).is_none() => {}
        other => anyhow::bail!(
            "expected {name} to be unreachable after stop-member, got {:?}",
            other.map(|c| c.metadata.name)
        ),
    }

    env.clusters_sh(&["start-member", &name]).await?;
    anyhow::ensure!(
        scratch.info.version().await? == oldest,
        "{name} came back as {} instead of {oldest}",
        scratch.info.version().await?
    );
    let up: Api<ConfigMap> = Api::namespaced(scratch.info.client().await?, "default");
    let back = wait_for(
        &format!("ConfigMap survivor to be readable in {name} again"),
        Duration::from_secs(60),
        || async { Ok(Seen::Done(up.get("survivor").await?)) },
    )
    .await?;
    anyhow::ensure!(
        back.metadata.uid == uid,
        "ConfigMap survivor was recreated: uid {:?} != {uid:?}",
        back.metadata.uid
    );
    anyhow::ensure!(
        back.data.unwrap_or_default().get("key").map(String::as_str) == Some("value"),
        "ConfigMap survivor lost its data"
    );
    Ok(())
}
