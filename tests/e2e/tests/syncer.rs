//! The syncer against real members: Works reach the member and their status comes back, drift
//! is reverted, objects Flotilla did not create are reported as conflicts and left alone (or
//! adopted when asked), and deletion follows deletePolicy.
//!
//! Each test runs its own registration controller and syncer, scoped to its own Cluster with
//! `--cluster-selector`.

use std::time::Duration;

use anyhow::{Result, ensure};
use flotilla_api::labels;
use flotilla_e2e::syncer_setup::{Options, SyncerSetup};
use flotilla_e2e::{Seen, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// How long each step may take.
const WAIT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn works_reach_the_member_status_flows_up_and_drift_is_reverted() -> Result<()> {
    let s = SyncerSetup::start("sync-flow", Options::default()).await?;
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": s.ns.name()},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}}
    });
    s.create_work(
        "web",
        json!({"manifests": [s.configmap("settings", json!({"color": "blue"})), deployment.clone()]}),
    )
    .await?;

    let work = s
        .work_condition("web", "Available", "True", None, WAIT)
        .await?;
    s.work_condition("web", "Applied", "True", Some("Applied"), WAIT)
        .await?;
    let status = work.status.unwrap_or_default();
    let d = status
        .manifests
        .iter()
        .find(|m| m.identity.kind == "Deployment")
        .ok_or_else(|| anyhow::anyhow!("no Deployment in Work status: {:?}", status.manifests))?;
    ensure!(
        d.status
            .as_ref()
            .and_then(|s| s.get("availableReplicas"))
            .and_then(Value::as_i64)
            == Some(2),
        "the member's Deployment status is copied into the Work: {:?}",
        d.status
    );
    let cm = s.member_configmaps().get("settings").await?;
    let cm_labels = cm.metadata.labels.unwrap_or_default();
    ensure!(
        cm_labels.get(labels::MANAGED).map(String::as_str) == Some("true"),
        "managed label: {cm_labels:?}"
    );
    let member_deploy: Api<Deployment> = Api::namespaced(s.member.clone(), s.ns.name());
    ensure!(
        member_deploy.get_opt("web").await?.is_some(),
        "the Deployment is in the member"
    );

    // An update of the Work reaches the member.
    let works = s.works();
    let manifests = json!([
        s.configmap("settings", json!({"color": "green"})),
        deployment
    ]);
    works
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"manifests": manifests}})),
        )
        .await?;
    s.wait_member_data("settings", "color", Some("green"), WAIT)
        .await?;

    // A hand edit in the member is reverted.
    s.member_configmaps()
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"color": "red"}})),
        )
        .await?;
    s.wait_member_data("settings", "color", Some("green"), WAIT)
        .await?;

    // Deleting the Work deletes its objects from the member (deletePolicy Delete by default).
    works.delete("web", &DeleteParams::default()).await?;
    wait_for(
        "the Work's objects to leave the member",
        Duration::from_secs(60),
        || async {
            let cm = s.member_configmaps().get_opt("settings").await?.is_some();
            let dep = member_deploy.get_opt("web").await?.is_some();
            let work = works.get_opt("web").await?.is_some();
            Ok(if !cm && !dep && !work {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("configmap={cm} deployment={dep} work={work}"))
            })
        },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn unmanaged_objects_are_conflicts_until_adopted_and_orphan_leaves_objects() -> Result<()> {
    let s = SyncerSetup::start("sync-conflict", Options::default()).await?;
    let existing: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "precious", "namespace": s.ns.name()}, "data": {"owner": "someone else"}
    }))?;
    s.member_configmaps()
        .create(&PostParams::default(), &existing)
        .await?;

    s.create_work(
        "take",
        json!({"manifests": [s.configmap("precious", json!({"owner": "flotilla"}))]}),
    )
    .await?;
    let w = s
        .work_condition("take", "Applied", "False", Some("Conflict"), WAIT)
        .await?;
    let message = w
        .status
        .and_then(|st| st.conditions.into_iter().find(|c| c.type_ == "Applied"))
        .map(|c| c.message)
        .unwrap_or_default();
    ensure!(
        message.contains(&format!("{}/precious", s.ns.name())),
        "the conflict names the object: {message}"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    s.wait_member_data("precious", "owner", Some("someone else"), WAIT)
        .await?;

    // Adopt takes it over.
    s.works()
        .patch(
            "take",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"conflictPolicy": "Adopt", "deletePolicy": "Orphan"}})),
        )
        .await?;
    s.wait_member_data("precious", "owner", Some("flotilla"), WAIT)
        .await?;
    s.work_condition("take", "Applied", "True", None, WAIT)
        .await?;

    // Orphan: deleting the Work leaves the object in the member.
    s.works().delete("take", &DeleteParams::default()).await?;
    let works = s.works();
    wait_for(
        "the Work to be deleted",
        Duration::from_secs(30),
        || async {
            Ok(if works.get_opt("take").await?.is_none() {
                Seen::Done(())
            } else {
                Seen::not_yet("still there")
            })
        },
    )
    .await?;
    ensure!(
        s.member_data("precious").await?.is_some(),
        "deletePolicy Orphan must leave the object in the member"
    );
    Ok(())
}
