//! The syncer watches what it applied in the member: status flows up and member edits are
//! reverted on the member's watch events, long before the (here: five-minute) resync.

use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, ensure};
use flotilla_e2e::fleet::Fleet;
use flotilla_e2e::process::http_get;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

/// The value of metric `name` with label `cluster="<cluster>"` (and no other label), if any.
fn cluster_metric(text: &str, name: &str, cluster: &str) -> Option<f64> {
    let prefix = format!("{name}{{cluster=\"{cluster}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
}

#[tokio::test]
async fn status_and_drift_follow_member_events_not_the_resync() -> Result<()> {
    let s = Fleet::syncer_only("sync-watch")
        .resync("5m")
        .start()
        .await?;
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": s.ns.name()},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}}
    });
    s.create_work(
        "web",
        json!({"manifests": [s.configmap("settings", json!({"color": "blue"})), deployment]}),
    )
    .await?;
    s.work_condition("web", "Applied", "True", None, Duration::from_secs(30))
        .await?;

    // The Deployment becomes available in the member after the first apply; only its watch
    // event can bring that up (the resync is minutes away).
    let work = s
        .work_condition("web", "Available", "True", None, Duration::from_secs(60))
        .await?;
    let status = work.status.unwrap_or_default();
    let d = status
        .manifests
        .iter()
        .find(|m| m.identity.kind == "Deployment")
        .ok_or_else(|| anyhow!("no Deployment in Work status: {:?}", status.manifests))?;
    ensure!(
        d.status
            .as_ref()
            .and_then(|s| s.get("availableReplicas"))
            .and_then(Value::as_i64)
            == Some(1),
        "the member's Deployment status is copied into the Work: {:?}",
        d.status
    );

    // A hand edit in the member is reverted at once.
    let edited = Instant::now();
    s.member_configmaps()
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"color": "red"}})),
        )
        .await?;
    s.wait_member_data("settings", "color", Some("blue"), Duration::from_secs(10))
        .await?;
    let reverted = edited.elapsed();
    ensure!(
        reverted < Duration::from_secs(5),
        "the edit took {reverted:?} to revert"
    );

    // A managed object deleted in the member comes back at once.
    s.member_configmaps()
        .delete("settings", &DeleteParams::default())
        .await?;
    s.wait_member_data("settings", "color", Some("blue"), Duration::from_secs(10))
        .await?;

    // The metrics say what happened, per cluster.
    let syncer = s.syncer.process().ok_or_else(|| anyhow!("no syncer"))?;
    let (_, metrics) = http_get(syncer.http, "/metrics").await?;
    let c = s.member(0).cluster;
    ensure!(
        cluster_metric(&metrics, "flotilla_syncer_managed_objects", c) == Some(2.0),
        "managed objects:\n{metrics}"
    );
    ensure!(
        cluster_metric(&metrics, "flotilla_syncer_member_watches", c) == Some(2.0),
        "one watch per type (ConfigMap, Deployment):\n{metrics}"
    );
    ensure!(
        cluster_metric(&metrics, "flotilla_syncer_status_latency_seconds_count", c)
            .is_some_and(|n| n >= 1.0),
        "status latency observed:\n{metrics}"
    );
    ensure!(
        cluster_metric(&metrics, "flotilla_syncer_apply_latency_seconds_count", c)
            .is_some_and(|n| n >= 1.0),
        "apply latency observed:\n{metrics}"
    );

    // Deleting the Work deletes its objects and stops the watches.
    s.works().delete("web", &DeleteParams::default()).await?;
    flotilla_e2e::wait_for(
        "the Work to be gone and its watches stopped",
        Duration::from_secs(30),
        || async {
            let (_, metrics) = http_get(syncer.http, "/metrics").await?;
            let watches = cluster_metric(&metrics, "flotilla_syncer_member_watches", c);
            let managed = cluster_metric(&metrics, "flotilla_syncer_managed_objects", c);
            let gone = s.works().get_opt("web").await?.is_none();
            Ok(if gone && watches == Some(0.0) && managed == Some(0.0) {
                flotilla_e2e::Seen::Done(())
            } else {
                flotilla_e2e::Seen::not_yet(format!(
                    "work gone={gone} watches={watches:?} managed={managed:?}"
                ))
            })
        },
    )
    .await?;
    Ok(())
}
