//! The syncer under bad input and faults: manifests the member rejects or does not know, a member
//! stopped for longer than the grace period, and a syncer killed in the middle of an apply.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Result, ensure};
use flotilla_api::labels;
use flotilla_e2e::fleet::Fleet;
use flotilla_e2e::{Environment, ScratchMember, Seen, wait_for};
use kube::ResourceExt;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn applied_message(work: &flotilla_api::Work) -> String {
    work.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Applied"))
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn rejected_and_unknown_manifests_are_reported_and_the_rest_applied() -> Result<()> {
    let s = Fleet::syncer_only("sync-invalid").start().await?;
    // A Deployment without selector or template: the member's apiserver refuses it.
    let invalid = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "broken", "namespace": s.ns.name()},
        "spec": {"replicas": 1}
    });
    s.create_work(
        "mixed",
        json!({"manifests": [s.configmap("fine", json!({"k": "v"})), invalid,
                             s.configmap("fine-too", json!({"k": "v"}))]}),
    )
    .await?;
    let w = s
        .work_condition(
            "mixed",
            "Applied",
            "False",
            Some("ApplyFailed"),
            Duration::from_secs(30),
        )
        .await?;
    let message = applied_message(&w);
    ensure!(
        message.contains("1 of 3 manifests failed")
            && message.contains("Deployment.apps")
            && message.contains("spec.selector"),
        "the server's message names the object and the field: {message}"
    );
    for name in ["fine", "fine-too"] {
        ensure!(
            s.member_data(name).await?.is_some(),
            "the valid manifest {name} is applied although another one failed"
        );
    }

    let widget = json!({
        "apiVersion": "widgets.example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": s.ns.name()}, "spec": {"size": 3}
    });
    s.create_work("unknown", json!({"manifests": [widget]}))
        .await?;
    let w = s
        .work_condition(
            "unknown",
            "Applied",
            "False",
            Some("UnknownResourceType"),
            Duration::from_secs(30),
        )
        .await?;
    let message = applied_message(&w);
    ensure!(
        message.contains("does not serve kind Widget in widgets.example.com/v1"),
        "the condition says which type is missing: {message}"
    );
    Ok(())
}

#[tokio::test]
async fn a_member_stopped_beyond_the_grace_period_loses_nothing_and_converges() -> Result<()> {
    let env = Environment::get();
    let scratch = ScratchMember::add(&env, "sync-stop").await?;
    let s = Fleet::syncer_only("sync-stop")
        .members(vec![scratch.info.clone()])
        .grace("6s")
        .start()
        .await?;
    let manifests: Vec<_> = (0..3)
        .map(|i| s.configmap(&format!("cm-{i}"), json!({"color": "blue"})))
        .collect();
    s.create_work("keep", json!({"manifests": manifests}))
        .await?;
    s.work_condition("keep", "Applied", "True", None, Duration::from_secs(30))
        .await?;
    let uids: BTreeSet<String> = s
        .member_configmaps()
        .list(&ListParams::default().labels(&format!("{}=true", labels::MANAGED)))
        .await?
        .items
        .iter()
        .filter_map(|c| c.uid())
        .collect();
    ensure!(uids.len() == 3, "3 objects in the member: {uids:?}");

    env.clusters_sh(&["stop-member", &scratch.info.name])
        .await?;
    s.cluster_ready("Unknown", Duration::from_secs(40)).await?;
    s.work_condition(
        "keep",
        "Applied",
        "Unknown",
        Some("ClusterUnavailable"),
        Duration::from_secs(30),
    )
    .await?;
    // A change made on the hub while the member is away.
    let changed: Vec<_> = (0..3)
        .map(|i| s.configmap(&format!("cm-{i}"), json!({"color": "green"})))
        .collect();
    s.works()
        .patch(
            "keep",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"manifests": changed}})),
        )
        .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;

    env.clusters_sh(&["start-member", &scratch.info.name])
        .await?;
    s.cluster_ready("True", Duration::from_secs(60)).await?;
    for i in 0..3 {
        s.wait_member_data(
            &format!("cm-{i}"),
            "color",
            Some("green"),
            Duration::from_secs(30),
        )
        .await?;
    }
    s.work_condition("keep", "Applied", "True", None, Duration::from_secs(30))
        .await?;
    let after: BTreeSet<String> = s
        .member_configmaps()
        .list(&ListParams::default().labels(&format!("{}=true", labels::MANAGED)))
        .await?
        .items
        .iter()
        .filter_map(|c| c.uid())
        .collect();
    ensure!(
        after == uids,
        "the same objects (never deleted and re-created): before {uids:?}, after {after:?}"
    );
    drop(s);
    drop(scratch);
    Ok(())
}

#[tokio::test]
async fn a_syncer_killed_mid_apply_converges_with_every_object_exactly_once() -> Result<()> {
    const WORKS: usize = 50;
    const PER_WORK: usize = 10;
    let mut s = Fleet::syncer_only("sync-kill")
        // Slow enough that the kill lands in the middle of the apply.
        .syncer_flags(["--concurrency", "2"])
        .start()
        .await?;
    let works = s.works();
    for w in 0..WORKS {
        let manifests: Vec<_> = (0..PER_WORK)
            .map(|i| s.configmap(&format!("w{w}-cm{i}"), json!({"n": i.to_string()})))
            .collect();
        works
            .create(
                &PostParams::default(),
                &s.work(&format!("w{w}"), json!({"manifests": manifests}))?,
            )
            .await?;
    }
    let managed = ListParams::default().labels(&format!("{}=true", labels::MANAGED));
    let cms = s.member_configmaps();
    let before_kill = wait_for(
        "the apply to be under way",
        Duration::from_secs(60),
        || async {
            let n = cms.list_metadata(&managed).await?.items.len();
            Ok(if n >= 50 {
                Seen::Done(n)
            } else {
                Seen::not_yet(format!("{n} objects"))
            })
        },
    )
    .await?;
    s.kill_syncer().await?;
    let at_kill = cms.list_metadata(&managed).await?.items.len();
    ensure!(
        at_kill < WORKS * PER_WORK,
        "the syncer was killed mid-apply ({before_kill} objects seen before, {at_kill} at the kill)"
    );

    s.restart_syncer()?;
    let names = wait_for(
        "every object in the member",
        Duration::from_secs(75),
        || async {
            let items = cms.list_metadata(&managed).await?.items;
            Ok(if items.len() >= WORKS * PER_WORK {
                Seen::Done(items.iter().map(|o| o.name_any()).collect::<Vec<_>>())
            } else {
                Seen::not_yet(format!("{} objects", items.len()))
            })
        },
    )
    .await?;
    let expected: BTreeSet<String> = (0..WORKS)
        .flat_map(|w| (0..PER_WORK).map(move |i| format!("w{w}-cm{i}")))
        .collect();
    let unique: BTreeSet<String> = names.iter().cloned().collect();
    ensure!(
        names.len() == expected.len() && unique == expected,
        "every object exactly once: {} objects, {} distinct, expected {}",
        names.len(),
        unique.len(),
        expected.len()
    );
    Ok(())
}
