//! Syncer replicas share the member clusters (`--shard-by-cluster`): a second replica takes half
//! of them, and when a replica is killed the other takes its clusters over. The replicas run with
//! the ServiceAccount and RBAC the chart installs with `syncer.shardByCluster=true`, so the shard
//! Leases are proven to be covered by it.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use flotilla_api::{Work, labels, names};
use flotilla_e2e::chart::ChartIdentities;
use flotilla_e2e::clusters::{ClusterCleanup, register_push};
use flotilla_e2e::fleet::SELECTOR_LABEL;
use flotilla_e2e::process::ControllerProcess;
use flotilla_e2e::{Environment, Seen, TestNamespace, api, random_suffix, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;

const CLUSTERS: usize = 4;

fn start_syncer(identity: &str, own: &[String], common: &[String]) -> Result<ControllerProcess> {
    let mut args: Vec<&str> = own.iter().map(String::as_str).collect();
    args.extend(common.iter().map(String::as_str));
    args.extend([
        "--identity",
        identity,
        "--leader-elect=false",
        "--shard-by-cluster",
        "--shard-lease-duration",
        "6s",
        "--shard-retry-period",
        "1s",
        "--resync-interval",
        "3s",
    ]);
    ControllerProcess::start("flotilla-syncer", &args)
}

/// The holder of each cluster's shard Lease (`None`: no Lease or no holder yet).
async fn holders(leases: &Api<Lease>, clusters: &[String]) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for c in clusters {
        let holder = leases
            .get_opt(&format!("flotilla-syncer-cluster-{c}"))
            .await?
            .and_then(|l| l.spec?.holder_identity)
            .unwrap_or_default();
        out.insert(c.clone(), holder);
    }
    Ok(out)
}

async fn wait_holders(
    leases: &Api<Lease>,
    clusters: &[String],
    expected: &str,
    ok: impl Fn(&BTreeMap<String, String>) -> bool,
) -> Result<BTreeMap<String, String>> {
    wait_for(expected, Duration::from_secs(45), || async {
        let h = holders(leases, clusters).await?;
        Ok(if ok(&h) {
            Seen::Done(h)
        } else {
            Seen::not_yet(format!("{h:?}"))
        })
    })
    .await
}

async fn create_work(hub: &Client, cluster: &str, name: &str, ns: &str) -> Result<()> {
    let work: Work = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
        "metadata": {"name": name, "labels": {labels::CLUSTER: cluster}},
        "spec": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": name, "namespace": ns},
                                "data": {"cluster": cluster}}]},
    }))?;
    Api::<Work>::namespaced(hub.clone(), &names::cluster_namespace(cluster))
        .create(&PostParams::default(), &work)
        .await?;
    Ok(())
}

async fn wait_in_member(member: &Client, ns: &str, name: &str) -> Result<()> {
    let cms: Api<ConfigMap> = Api::namespaced(member.clone(), ns);
    wait_for(
        &format!("ConfigMap {name} in its member"),
        Duration::from_secs(30),
        || async {
            Ok(if cms.get_opt(name).await?.is_some() {
                Seen::Done(())
            } else {
                Seen::not_yet("absent")
            })
        },
    )
    .await
}

#[tokio::test]
async fn replicas_split_the_clusters_and_take_over_a_killed_ones() -> Result<()> {
    let env = Environment::get();
    let hub = env.hub.client().await?;
    api::install_crds(&hub).await?;
    let members = env.require_members(3)?.to_vec();
    let member_refs: Vec<_> = std::iter::once(&env.hub).chain(members.iter()).collect();
    let ns = TestNamespace::create("sync-shard", &member_refs).await?;
    let id = random_suffix();
    let selector = format!("{SELECTOR_LABEL}={id}");
    // The controllers' identities: the chart's, installed as if into the test namespace.
    let identities =
        ChartIdentities::install_with(ns.name(), &["--set", "syncer.shardByCluster=true"]).await?;
    let syncer_identity = identities.args("syncer")?;
    let reg_identity = identities.args("registration")?;
    let common: Vec<String> = [
        "--lease-namespace",
        ns.name(),
        "--kubeconfig-secret-namespace",
        ns.name(),
        "--cluster-selector",
        selector.as_str(),
    ]
    .map(String::from)
    .to_vec();
    let mut reg_args: Vec<&str> = reg_identity.iter().map(String::as_str).collect();
    reg_args.extend(common.iter().map(String::as_str));
    reg_args.extend(["--probe-interval", "2s"]);
    let _registration = ControllerProcess::start("flotilla-registration", &reg_args)?;
    let common: Vec<String> = common
        .into_iter()
        .chain(["--shard-lease-namespace".to_string(), ns.name().to_string()])
        .collect();
    let mut syncer_a = start_syncer("syncer-a", &syncer_identity, &common)?;
    let cleanup = ClusterCleanup::new(&env.hub, selector.clone());

    // Four Clusters on three members (two Clusters may share a member: their objects differ).
    let mut clusters = Vec::new();
    let mut member_of = BTreeMap::new();
    for i in 0..CLUSTERS {
        let member = &members[i % members.len()];
        let name = format!("e2e-{}-{i}", random_suffix());
        register_push(&hub, ns.name(), &name, member, (SELECTOR_LABEL, &id)).await?;
        member_of.insert(name.clone(), member.client().await?);
        clusters.push(name);
    }
    let leases: Api<Lease> = Api::namespaced(hub.clone(), ns.name());

    // One replica serves every cluster.
    wait_holders(&leases, &clusters, "syncer-a to hold every cluster", |h| {
        h.values().all(|v| v == "syncer-a")
    })
    .await?;

    // A second replica takes half of them.
    let _syncer_b = start_syncer("syncer-b", &syncer_identity, &common)?;
    let split = wait_holders(
        &leases,
        &clusters,
        "the clusters to be split two and two",
        |h| {
            h.values().filter(|v| *v == "syncer-a").count() == CLUSTERS / 2
                && h.values().filter(|v| *v == "syncer-b").count() == CLUSTERS / 2
        },
    )
    .await?;
    for c in &clusters {
        create_work(&hub, c, &format!("shard-{c}"), ns.name()).await?;
    }
    for c in &clusters {
        wait_in_member(&member_of[c], ns.name(), &format!("shard-{c}")).await?;
    }

    // syncer-a dies: syncer-b takes its clusters over once their Leases expire.
    syncer_a.signal("KILL")?;
    syncer_a.wait_exit(Duration::from_secs(10)).await?;
    wait_holders(&leases, &clusters, "syncer-b to hold every cluster", |h| {
        h.values().all(|v| v == "syncer-b")
    })
    .await?;
    let taken = split
        .iter()
        .find(|(_, holder)| *holder == "syncer-a")
        .map(|(c, _)| c.clone())
        .unwrap_or_default();
    create_work(&hub, &taken, "after-takeover", ns.name()).await?;
    wait_in_member(&member_of[&taken], ns.name(), "after-takeover").await?;
    drop(cleanup);
    Ok(())
}
