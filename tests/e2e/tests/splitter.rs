//! The splitter end to end: a Deployment applied to the hub runs spread over real members, the
//! hub status is the truth of all copies, scaling divides only the change, a cordoned member takes
//! no new replicas, a drained one gives its replicas away, referenced ConfigMaps follow their
//! Deployment, the most specific Placement places an object (ties reported), and deleting the hub
//! Deployment removes the copies.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Result, ensure};
use flotilla_api::{Placement, Work, annotations, finalizers, labels, names, reasons};
use flotilla_e2e::api::ClusterScopedObjects;
use flotilla_e2e::chart;
use flotilla_e2e::fleet::{Fleet, SPLITTER_OUT, Second, deployment, hub_available};
use flotilla_e2e::{ClusterInfo, Environment, ScratchMember, Seen, api, random_suffix, wait_for};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, PodTemplate, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// Replicas of Deployment `web` per member, by member Cluster name.
async fn member_replicas(members: &[(String, Client)], ns: &str) -> Result<BTreeMap<String, i32>> {
    replicas_in_members(members, ns, "web", |d: &Deployment| d.spec.replicas).await
}

/// Replicas of the workload `name` of kind `K` per member that has a copy, by member Cluster
/// name.
async fn replicas_in_members<K>(
    members: &[(String, Client)],
    ns: &str,
    name: &str,
    replicas: impl Fn(&K) -> Option<i32>,
) -> Result<BTreeMap<String, i32>>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let mut out = BTreeMap::new();
    for (cluster, client) in members {
        let api: Api<K> = Api::namespaced(client.clone(), ns);
        if let Some(copy) = api.get_opt(name).await? {
            out.insert(cluster.clone(), replicas(&copy).unwrap_or(0));
        }
    }
    Ok(out)
}

/// Waits until Placement `name`'s `Scheduled` condition satisfies `accept` (it is to `what`).
async fn wait_scheduled(
    placements: &Api<Placement>,
    name: &str,
    what: &str,
    accept: impl Fn(&Condition) -> bool,
) -> Result<()> {
    wait_for(
        &format!("Placement {name} to {what}"),
        Duration::from_secs(60),
        || async {
            let scheduled = placements
                .get(name)
                .await?
                .status
                .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Scheduled"));
            Ok(match scheduled {
                Some(c) if accept(&c) => Seen::Done(()),
                other => Seen::not_yet(format!("{other:?}")),
            })
        },
    )
    .await
}

/// Scales the hub Deployment `web` to `n` and waits until the hub says `n` are available.
async fn scale(hub: &Api<Deployment>, n: i32) -> Result<Deployment> {
    hub.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": n}})),
    )
    .await?;
    hub_available(hub, n).await
}

/// Two of the environment's members and, last, a member of the test's own, to stop or pause
/// (removed when the returned value is dropped: drop it after the fleet).
async fn two_and_a_scratch_member(
    env: &Environment,
    prefix: &str,
) -> Result<(ScratchMember, Vec<ClusterInfo>)> {
    let scratch = ScratchMember::add(env, prefix).await?;
    let mut infos = env.require_members(2)?[..2].to_vec();
    infos.push(scratch.info.clone());
    Ok((scratch, infos))
}

#[tokio::test]
async fn a_deployment_on_the_hub_runs_spread_over_the_members() -> Result<()> {
    let fleet = Fleet::builder("split").start().await?;
    let Fleet {
        hub,
        ns,
        clusters,
        members,
        splitter,
        ..
    } = &fleet;
    fleet.spread_deployments().await?;
    // The Placement selects Deployments only; the ConfigMap the Deployment refers to follows it.
    let settings: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "web-settings"}, "data": {"greeting": "hello"}
    }))?;
    Api::<ConfigMap>::namespaced(hub.clone(), ns.name())
        .create(&PostParams::default(), &settings)
        .await?;
    let deployments: Api<Deployment> = Api::namespaced(hub.clone(), ns.name());
    deployments
        .create(&PostParams::default(), &deployment(10)?)
        .await?;

    // 10 replicas over 3 members: 4 + 3 + 3, and the hub says 10/10.
    let d = hub_available(&deployments, 10)
        .await
        .map_err(|e| e.context(splitter.log()))?;
    let spread = member_replicas(members, ns.name()).await?;
    let mut counts: Vec<i32> = spread.values().copied().collect();
    counts.sort_unstable();
    ensure!(
        counts == vec![3, 3, 4],
        "10 replicas spread 4+3+3 over the members, got {spread:?}"
    );
    for (cluster, client) in members.iter() {
        wait_for(
            &format!("the referenced ConfigMap to follow the Deployment to {cluster}"),
            Duration::from_secs(30),
            || async {
                let cm = Api::<ConfigMap>::namespaced(client.clone(), ns.name())
                    .get_opt("web-settings")
                    .await?;
                Ok(match cm.and_then(|c| c.data) {
                    Some(d) if d.get("greeting").map(String::as_str) == Some("hello") => {
                        Seen::Done(())
                    }
                    other => Seen::not_yet(format!("{other:?}")),
                })
            },
        )
        .await?;
    }
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
    scale(&deployments, 13).await?;
    let scaled = member_replicas(members, ns.name()).await?;
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
    let held = format!("{cordoned}: the Cluster is cordoned");
    wait_scheduled(&placements, "spread", "report the cordoned member", |c| {
        c.message.contains(&held)
    })
    .await?;
    scale(&deployments, 16).await?;
    let after_cordon = member_replicas(members, ns.name()).await?;
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
            let now = member_replicas(members, ns.name()).await?;
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

    // A Placement that selects no member says so and deletes nothing: what runs stays.
    let running = member_replicas(members, ns.name()).await?;
    placements
        .patch(
            "spread",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"clusterAffinity": {"clusterNames": ["no-such-member"]}}}),
            ),
        )
        .await?;
    wait_scheduled(&placements, "spread", "say no member is eligible", |c| {
        c.status == "False" && c.message.contains("left running")
    })
    .await?;
    flotilla_e2e::holds_for(
        "the copies to stay while no member is eligible",
        Duration::from_secs(3),
        || async {
            let now = member_replicas(members, ns.name()).await?;
            Ok(if now == running {
                Ok(())
            } else {
                Err(format!("{running:?} -> {now:?}"))
            })
        },
    )
    .await?;
    placements
        .patch(
            "spread",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"clusterAffinity": null}})),
        )
        .await?;

    // Scale down to 4: replicas go in proportion to where they run.
    scale(&deployments, 4).await?;
    let four = member_replicas(members, ns.name()).await?;
    ensure!(
        four.values().sum::<i32>() == 4,
        "scaling to 4 leaves 4 replicas in the members: {four:?}"
    );

    // Deleting the hub Deployment removes every copy.
    deployments.delete("web", &DeleteParams::default()).await?;
    wait_for(
        "the member copies to be removed",
        Duration::from_secs(90),
        || async {
            let left = member_replicas(members, ns.name()).await?;
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

#[tokio::test]
async fn scaling_to_zero_empties_the_members_and_keeps_their_copies() -> Result<()> {
    let fleet = Fleet::builder("zero").start().await?;
    let (ns, members) = (fleet.ns.name(), &fleet.members);
    let deployments = fleet.spread_web(6).await?;
    let before = copy_uids::<Deployment>(members, ns, "web").await?;

    // Scale to 0: every member's copy goes to 0 replicas, and the hub says 0 of 0.
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await?;
    wait_for(
        "every member's copy at 0 replicas and the hub's status at 0",
        Duration::from_secs(60),
        || async {
            let spread = member_replicas(members, ns).await?;
            let d = deployments.get("web").await?;
            let status = d.status.clone().unwrap_or_default();
            let observed = status.observed_generation == d.metadata.generation;
            Ok(
                if spread.len() == members.len()
                    && spread.values().all(|n| *n == 0)
                    && observed
                    && status.replicas.unwrap_or(0) == 0
                {
                    Seen::Done(())
                } else {
                    Seen::not_yet(format!(
                        "members {spread:?}, hub observed={observed} replicas={:?}",
                        status.replicas
                    ))
                },
            )
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    ensure!(
        copy_uids::<Deployment>(members, ns, "web").await? == before,
        "scaling to 0 keeps the member copies (same UIDs): {before:?}"
    );

    // And back: the same copies take the replicas again.
    scale(&deployments, 3).await?;
    ensure!(
        copy_uids::<Deployment>(members, ns, "web").await? == before,
        "scaling up from 0 reuses the member copies: {before:?}"
    );
    Ok(())
}

#[tokio::test]
async fn deleting_a_cluster_orphans_its_copies_and_moves_its_replicas() -> Result<()> {
    let fleet = Fleet::builder("cl-delete").start().await?;
    let (ns, members) = (fleet.ns.name(), &fleet.members);
    let deployments = fleet.spread_web(6).await?;
    let (victim, victim_client) = members[2].clone();
    let member_deployments: Api<Deployment> = Api::namespaced(victim_client, ns);
    let uid = member_deployments.get("web").await?.metadata.uid;

    // Removing a push-mode Cluster orphans what runs there (registration marks its Works
    // Orphan); the splitter neither writes them back nor places anything new there.
    fleet
        .clusters
        .delete(&victim, &DeleteParams::default())
        .await?;
    let rest = &members[..2];
    wait_for(
        "the removed member's replicas to move to the others",
        Duration::from_secs(90),
        || async {
            let spread = member_replicas(rest, ns).await?;
            let gone = fleet.clusters.get_opt(&victim).await?.is_none();
            Ok(if gone && spread.values().sum::<i32>() == 6 {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("Cluster gone: {gone}, the others run {spread:?}"))
            })
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    hub_available(&deployments, 6).await?;
    flotilla_e2e::holds_for(
        "the removed member's copy to stay, orphaned",
        Duration::from_secs(5),
        || async {
            let now = member_deployments
                .get_opt("web")
                .await?
                .and_then(|d| d.metadata.uid);
            Ok(if now == uid {
                Ok(())
            } else {
                Err(format!("its Deployment web: {now:?}, was {uid:?}"))
            })
        },
    )
    .await
}

/// The `team` of ConfigMap `settings`, the replicas and the UID of Deployment `web` in each
/// member's namespace `ns`.
async fn team_copies(
    members: &[(String, Client)],
    ns: &str,
) -> Result<BTreeMap<String, (Option<String>, i32, Option<String>)>> {
    let mut out = BTreeMap::new();
    for (cluster, client) in members {
        let team = Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get_opt("settings")
            .await?
            .and_then(|c| c.data)
            .and_then(|d| d.get("team").cloned());
        let web = Api::<Deployment>::namespaced(client.clone(), ns)
            .get_opt("web")
            .await?;
        let replicas = web.as_ref().and_then(|d| d.spec.replicas).unwrap_or(0);
        out.insert(
            cluster.clone(),
            (team, replicas, web.and_then(|d| d.metadata.uid)),
        );
    }
    Ok(out)
}

#[tokio::test]
async fn two_teams_with_the_same_names_keep_their_own_copies() -> Result<()> {
    let fleet = Fleet::builder("teams")
        .second_namespace(Second::Everywhere)
        .start()
        .await?;
    let (hub, members) = (&fleet.hub, &fleet.members);
    let a = fleet.ns.name();
    let b = fleet
        .other
        .as_ref()
        .map(|o| o.name().to_string())
        .unwrap_or_default();
    // The same Placement, Deployment and ConfigMap names in both namespaces; other counts.
    for (ns, team, replicas) in [(a, "a", 6), (b.as_str(), "b", 3)] {
        for object in [
            json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                   "metadata": {"name": "spread", "namespace": ns},
                   "spec": {"replicaScheduling": {"type": "Divided", "division": "Even"}}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": ns},
                   "data": {"team": team}}),
        ] {
            api::apply(hub, &object, false).await??;
        }
        Api::<Deployment>::namespaced(hub.clone(), ns)
            .create(&PostParams::default(), &deployment(replicas)?)
            .await?;
    }
    for (ns, replicas) in [(a, 6), (b.as_str(), 3)] {
        hub_available(&Api::namespaced(hub.clone(), ns), replicas)
            .await
            .map_err(|e| e.context(fleet.splitter.log()))?;
    }
    let expect = |ns: &str, team: &str, replicas: i32| {
        let ns = ns.to_string();
        let team = team.to_string();
        async move {
            let copies = team_copies(members, &ns).await?;
            let total: i32 = copies.values().map(|(_, n, _)| n).sum();
            let teams_ok = copies
                .values()
                .all(|(t, _, _)| t.as_deref() == Some(team.as_str()));
            Ok::<_, anyhow::Error>((teams_ok && total == replicas, copies))
        }
    };
    let (ok_a, first_a) = expect(a, "a", 6).await?;
    let (ok_b, first_b) = expect(&b, "b", 3).await?;
    ensure!(
        ok_a && ok_b,
        "each team's copies are its own: {first_a:?} / {first_b:?}"
    );
    // Nothing flips between the two.
    flotilla_e2e::holds_for(
        "both teams' copies to stay as they are",
        Duration::from_secs(8),
        || async {
            let (_, now_a) = expect(a, "a", 6).await?;
            let (_, now_b) = expect(&b, "b", 3).await?;
            Ok(if now_a == first_a && now_b == first_b {
                Ok(())
            } else {
                Err(format!(
                    "{first_a:?} -> {now_a:?}; {first_b:?} -> {now_b:?}"
                ))
            })
        },
    )
    .await?;
    // Deleting team a's Deployment leaves team b's copies, with their UIDs.
    Api::<Deployment>::namespaced(hub.clone(), a)
        .delete("web", &DeleteParams::default())
        .await?;
    wait_for(
        "team a's member copies of web to go",
        Duration::from_secs(60),
        || async {
            let copies = team_copies(members, a).await?;
            Ok(if copies.values().all(|(_, _, uid)| uid.is_none()) {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("{copies:?}"))
            })
        },
    )
    .await?;
    ensure!(
        team_copies(members, &b).await? == first_b,
        "team b's copies changed when team a deleted its Deployment: {first_b:?}"
    );
    Ok(())
}

#[tokio::test]
async fn works_named_the_old_way_are_renamed_without_touching_the_members() -> Result<()> {
    let fleet = Fleet::builder("rename").start().await?;
    let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);
    let settings = json!({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "settings", "namespace": ns}, "data": {"a": "b"}});
    let uid = api::apply(hub, &settings, false)
        .await??
        .metadata
        .uid
        .unwrap_or_default();
    // What an earlier splitter wrote: Works named `<kind>-<name>`.
    let old = "configmap-settings";
    for (cluster, _) in members {
        let work: Work = serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
            "metadata": {"name": old, "namespace": names::cluster_namespace(cluster),
                "labels": {labels::CLUSTER: cluster, labels::PLACEMENT: "spread", labels::SOURCE_UID: uid},
                "annotations": {annotations::SOURCE_API_VERSION: "v1", annotations::SOURCE_KIND: "ConfigMap",
                                annotations::SOURCE_NAMESPACE: ns, annotations::SOURCE_NAME: "settings",
                                annotations::SOURCE_GENERATION: "1"},
                "finalizers": [finalizers::SYNCER]},
            "spec": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": "settings", "namespace": ns}, "data": {"a": "b"}}]}
        }))?;
        Api::<Work>::namespaced(hub.clone(), &names::cluster_namespace(cluster))
            .create(&PostParams::default(), &work)
            .await?;
    }
    let member_uids = || async {
        let mut out = BTreeMap::new();
        for (cluster, client) in members {
            let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
                .get_opt("settings")
                .await?;
            let owner = cm
                .as_ref()
                .and_then(|c| c.metadata.annotations.as_ref())
                .and_then(|a| a.get(annotations::WORK).cloned());
            out.insert(cluster.clone(), (cm.and_then(|c| c.metadata.uid), owner));
        }
        Ok::<_, anyhow::Error>(out)
    };
    let before = wait_for(
        "the old Works' ConfigMaps in every member",
        Duration::from_secs(60),
        || async {
            let now = member_uids().await?;
            Ok(if now.values().all(|(u, _)| u.is_some()) {
                Seen::Done(now)
            } else {
                Seen::not_yet(format!("{now:?}"))
            })
        },
    )
    .await?;

    // The Placement those Works belong to: the splitter writes the new names and hands over.
    let new = names::bundle_name("", "ConfigMap", ns, "spread", 0);
    api::apply(
        hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "spread", "namespace": ns},
                "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "settings"}]}}),
        false,
    )
    .await??;
    let after = wait_for(
        "the old Works to give way to the new ones",
        Duration::from_secs(60),
        || async {
            let mut old_left = Vec::new();
            for (cluster, _) in members {
                let works: Api<Work> =
                    Api::namespaced(hub.clone(), &names::cluster_namespace(cluster));
                if works.get_opt(old).await?.is_some() {
                    old_left.push(cluster.clone());
                }
            }
            let now = member_uids().await?;
            let handed = now.iter().all(|(cluster, (_, owner))| {
                owner.as_deref()
                    == Some(format!("{}/{new}", names::cluster_namespace(cluster)).as_str())
            });
            Ok(if old_left.is_empty() && handed {
                Seen::Done(now)
            } else {
                Seen::not_yet(format!(
                    "old Works left on {old_left:?}; member objects {now:?}"
                ))
            })
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    let uids = |m: &BTreeMap<String, (Option<String>, Option<String>)>| {
        m.iter()
            .map(|(c, (u, _))| (c.clone(), u.clone()))
            .collect::<BTreeMap<_, _>>()
    };
    ensure!(
        uids(&after) == uids(&before),
        "renaming the Works recreated member objects: {before:?} -> {after:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_new_or_edited_configmap_reaches_every_member_at_once() -> Result<()> {
    let fleet = Fleet::builder("latency").start().await?;
    let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);
    // Only the ConfigMap: no other Work's status changes set the splitter going by chance.
    api::apply(
        hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "everything", "namespace": ns},
                "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "settings"}]}}),
        false,
    )
    .await??;
    // Until every member has `value`; how long that took. Far above the second it takes, far
    // below the 60 s resync it used to wait for.
    let everywhere = |value: &'static str| async move {
        let started = std::time::Instant::now();
        settings_everywhere(members, ns, value, Duration::from_secs(15)).await?;
        Ok::<_, anyhow::Error>(started.elapsed())
    };
    // Let the Placement settle first, so that what is timed is the object's own change.
    wait_scheduled(
        &Api::namespaced(hub.clone(), ns),
        "everything",
        "be scheduled",
        |c| c.status == "True",
    )
    .await?;
    let settings = |value: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "settings", "namespace": ns}, "data": {"value": value}})
    };
    api::apply(hub, &settings("one"), false).await??;
    let created = everywhere("one")
        .await
        .map_err(|e| e.context(fleet.splitter.log()))?;
    api::apply(hub, &settings("two"), false).await??;
    let edited = everywhere("two")
        .await
        .map_err(|e| e.context(fleet.splitter.log()))?;
    eprintln!("created in {created:?}, edited in {edited:?}");

    // What users wait on: the Placement's Available condition, and its printer column.
    let env = Environment::get();
    let waited = crate::api::kubectl(
        &env,
        &[
            "-n",
            ns,
            "wait",
            "placement/everything",
            "--for",
            "condition=Available",
            "--timeout",
            "30s",
        ],
    )
    .await?;
    ensure!(waited.contains("condition met"), "{waited}");
    let placement = Api::<Placement>::namespaced(hub.clone(), ns)
        .get("everything")
        .await?;
    let status = placement.status.unwrap_or_default();
    let copies = status.copies.unwrap_or_default();
    ensure!(
        copies.placed == 3 && copies.applied == 3 && copies.available == 3,
        "{copies:?}"
    );
    ensure!(
        status.clusters.len() == 3 && status.clusters.iter().all(|c| c.placed == 1),
        "{:?}",
        status.clusters
    );
    let table = crate::api::kubectl(&env, &["-n", ns, "get", "placement", "everything"]).await?;
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    ensure!(row.get(4) == Some(&"True"), "the Available column: {table}");
    Ok(())
}

#[tokio::test]
async fn a_work_the_hub_refuses_does_not_stall_the_others() -> Result<()> {
    let env = Environment::get();
    let fleet = Fleet::builder("refused").start().await?;
    let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);
    // An admission policy that refuses the Works holding one ConfigMap of this test, as a size
    // limit or a site policy would.
    let name = format!("{ns}-refuse-poison");
    let rule = format!(
        "!(has(object.metadata.annotations) \
          && 'flotilla.dev/source-namespace' in object.metadata.annotations \
          && object.metadata.annotations['flotilla.dev/source-namespace'] == '{ns}' \
          && object.spec.manifests.exists(m, type(m) == string \
                                             && m.contains('\"name\":\"poison\"')))"
    );
    let mut policy = ClusterScopedObjects::new(&env.hub);
    for object in [
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
               "metadata": {"name": name},
               "spec": {"failurePolicy": "Fail",
                        "matchConstraints": {"resourceRules": [{"apiGroups": ["flotilla.dev"], "apiVersions": ["*"],
                                                                "operations": ["CREATE", "UPDATE"], "resources": ["works"]}]},
                        "validations": [{"expression": rule, "message": "e2e: the Works of poison are refused"}]}}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": name},
               "spec": {"policyName": name, "validationActions": ["Deny"]}}),
    ] {
        let (resource, _) = api::resource_of(hub, &object).await?;
        api::apply(hub, &object, false).await??;
        policy.add(resource, name.clone());
    }
    // The policy is in force once a Work like that is refused.
    let (cluster, _) = &members[0];
    let probe: Work = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
        "metadata": {"name": "probe", "namespace": names::cluster_namespace(cluster),
                     "labels": {labels::CLUSTER: cluster},
                     "annotations": {annotations::SOURCE_NAMESPACE: ns, annotations::SOURCE_NAME: "poison"}},
        "spec": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": "poison", "namespace": ns}}]}
    }))?;
    let works: Api<Work> = Api::namespaced(hub.clone(), &names::cluster_namespace(cluster));
    wait_for(
        "the admission policy to refuse the Works of poison",
        Duration::from_secs(30),
        || async {
            let dry = PostParams {
                dry_run: true,
                ..PostParams::default()
            };
            // Refused by the policy itself (a Work the schema refuses would prove nothing).
            Ok(match works.create(&dry, &probe).await {
                Err(kube::Error::Api(s))
                    if s.message.contains("the Works of poison are refused") =>
                {
                    Seen::Done(())
                }
                other => Seen::not_yet(format!("{:?}", other.map(|w| w.metadata.name))),
            })
        },
    )
    .await?;

    let placements: Api<Placement> = Api::namespaced(hub.clone(), ns);
    api::apply(
        hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "configs", "namespace": ns},
                "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"},
                                               {"apiVersion": "v1", "kind": "Secret"}]}}),
        false,
    )
    .await??;
    // A refused Work holds back the copies it holds (those of one type), not the others.
    for kind in ["ConfigMap", "Secret"] {
        let name = if kind == "ConfigMap" {
            "poison"
        } else {
            "fine"
        };
        api::apply(
            hub,
            &json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": ns},
                    "data": {"a": "Yg=="}}),
            false,
        )
        .await??;
    }
    wait_scheduled(&placements, "configs", "report the refused Works", |c| {
        c.status == "False"
            && c.reason == reasons::WORK_WRITE_FAILED
            && c.message.contains("ConfigMap poison")
            && c.message.contains("refused")
    })
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    // ... while the Secret goes everywhere.
    in_every_member::<Secret>(members, ns, "fine").await?;
    Ok(())
}

/// Waits until object `name` of `K` exists in namespace `ns` of every member.
async fn in_every_member<K>(members: &[(String, Client)], ns: &str, name: &str) -> Result<()>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    wait_for(
        &format!("{} {name} in every member", K::kind(&())),
        Duration::from_secs(30),
        || async {
            let missing: Vec<String> = copy_uids::<K>(members, ns, name)
                .await?
                .into_iter()
                .filter_map(|(cluster, uid)| uid.is_none().then_some(cluster))
                .collect();
            Ok(if missing.is_empty() {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("missing in {missing:?}"))
            })
        },
    )
    .await
}

/// The UID of object `name` of `K` in namespace `ns` of every member, by Cluster name (`None`
/// where there is none): unchanged UIDs mean nothing was deleted and recreated.
async fn copy_uids<K>(
    members: &[(String, Client)],
    ns: &str,
    name: &str,
) -> Result<BTreeMap<String, Option<String>>>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let mut out = BTreeMap::new();
    for (cluster, client) in members {
        let o = Api::<K>::namespaced(client.clone(), ns)
            .get_opt(name)
            .await?;
        out.insert(cluster.clone(), o.and_then(|o| o.meta().uid.clone()));
    }
    Ok(out)
}

#[tokio::test]
async fn kubectl_replace_force_keeps_the_member_copies() -> Result<()> {
    let env = Environment::get();
    let fleet = Fleet::builder("replace").start().await?;
    let (ns, members) = (fleet.ns.name(), &fleet.members);
    let deployments = fleet.spread_web(6).await?;
    let first = deployments.get("web").await?;
    let before = copy_uids::<Deployment>(members, ns, "web").await?;

    // What a user does to change an immutable field, or to start over: delete and create under
    // the same name in one command.
    let file = flotilla_e2e::scratch_dir().join(format!("replace-{ns}.json"));
    let mut manifest = serde_json::to_value(deployment(6)?)?;
    manifest["apiVersion"] = json!("apps/v1");
    manifest["kind"] = json!("Deployment");
    manifest["metadata"]["namespace"] = json!(ns);
    std::fs::write(&file, serde_json::to_vec(&manifest)?)?;
    let kubectl = std::env::var_os("FLOTILLA_TOOLS_BIN")
        .map(|d| std::path::PathBuf::from(d).join("kubectl"))
        .unwrap_or_else(|| "kubectl".into());
    let out = tokio::process::Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(&env.hub.kubeconfig)
        .args(["replace", "--force", "-f"])
        .arg(&file)
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "kubectl replace --force: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let second = wait_for(
        "the replaced Deployment to be Available with 6 replicas",
        Duration::from_secs(90),
        || async {
            let d = deployments.get("web").await?;
            let available = d
                .status
                .as_ref()
                .and_then(|s| s.available_replicas)
                .unwrap_or(0);
            Ok(if d.metadata.uid != first.metadata.uid && available == 6 {
                Seen::Done(d)
            } else {
                Seen::not_yet(format!("uid {:?}, {available} available", d.metadata.uid))
            })
        },
    )
    .await?;
    ensure!(
        second.metadata.uid != first.metadata.uid,
        "a new hub object"
    );
    let after = copy_uids::<Deployment>(members, ns, "web").await?;
    ensure!(
        after == before,
        "kubectl replace --force recreated the member copies: {before:?} -> {after:?}"
    );
    Ok(())
}

/// The Works of the test namespace's objects on every member of the fleet.
async fn works_of_namespace(fleet: &Fleet) -> Result<Vec<Work>> {
    let mut out = Vec::new();
    for (cluster, _) in &fleet.members {
        out.extend(api::works_from(&fleet.hub, cluster, fleet.ns.name()).await?);
    }
    Ok(out)
}

/// The hub Secrets holding the data of the test namespace's Works, on every member of the fleet,
/// as `namespace/name`.
async fn data_secrets_of_namespace(fleet: &Fleet) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for (cluster, _) in &fleet.members {
        let hub_ns = names::cluster_namespace(cluster);
        let secrets = Api::<Secret>::namespaced(fleet.hub.clone(), &hub_ns)
            .list(&ListParams::default().labels(labels::WORK_DATA))
            .await?;
        out.extend(
            secrets
                .items
                .into_iter()
                .filter(|s| {
                    s.annotations()
                        .get(annotations::SOURCE_NAMESPACE)
                        .map(String::as_str)
                        == Some(fleet.ns.name())
                })
                .map(|s| format!("{hub_ns}/{}", s.name_any())),
        );
    }
    Ok(out)
}

/// Placement `name` of the test namespace, placing ConfigMap `settings` and Secret `creds`.
async fn place_settings_and_creds(fleet: &Fleet, name: &str) -> Result<()> {
    api::apply(
        &fleet.hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": name, "namespace": fleet.ns.name()},
                "spec": {"resourceSelectors": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "settings"},
                    {"apiVersion": "v1", "kind": "Secret", "name": "creds"}]}}),
        false,
    )
    .await??;
    Ok(())
}

/// ConfigMap `settings` (`value: one`) and Secret `creds` in the test namespace of the hub,
/// placed by Placement `name` on every member.
async fn settings_and_creds_everywhere(fleet: &Fleet, name: &str) -> Result<()> {
    let (hub, ns) = (&fleet.hub, fleet.ns.name());
    api::apply(
        hub,
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings", "namespace": ns}, "data": {"value": "one"}}),
        false,
    )
    .await??;
    api::apply(
        hub,
        &json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "creds", "namespace": ns},
                "stringData": {"password": "s3cr3t"}}),
        false,
    )
    .await??;
    place_settings_and_creds(fleet, name).await?;
    settings_everywhere(&fleet.members, ns, "one", Duration::from_secs(60))
        .await
        .map_err(|e| e.context(fleet.splitter.log()))?;
    in_every_member::<Secret>(&fleet.members, ns, "creds").await
}

/// A Placement deleted for good: once its Works have been orphaned for `--orphaned-work-grace`
/// the splitter releases them (`deletePolicy: Orphan`, then deleted): the member objects stay as
/// they are, unmanaged (a member-side edit is no longer reverted), the hub Secrets with the data
/// of their Secrets go with them, and so does a work-data Secret left without a Work. The
/// splitter runs as the chart's ServiceAccount: what the chart does not let it do shows.
#[tokio::test]
async fn the_works_of_a_deleted_placement_are_released_after_the_grace_period() -> Result<()> {
    let fleet = Fleet::builder("release")
        .splitter_flags(["--orphaned-work-grace", "5s"])
        .start()
        .await?;
    let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);
    settings_and_creds_everywhere(&fleet, "configs").await?;
    let settings = copy_uids::<ConfigMap>(members, ns, "settings").await?;
    let creds = copy_uids::<Secret>(members, ns, "creds").await?;
    ensure!(
        !works_of_namespace(&fleet).await?.is_empty(),
        "the Placement's Works"
    );
    ensure!(
        !data_secrets_of_namespace(&fleet).await?.is_empty(),
        "the hub Secrets with the data of the Works' Secrets"
    );

    Api::<Placement>::namespaced(hub.clone(), ns)
        .delete("configs", &DeleteParams::default())
        .await?;
    // What a refused write of a new Work leaves: its data Secret, without an owner.
    let (first, _) = &members[0];
    let stray: Secret = serde_json::from_value(json!({
        "metadata": {"name": "configs-stray",
                     "labels": {labels::WORK_DATA: labels::WORK_DATA_VALUE,
                                labels::PLACEMENT: "configs", labels::CLUSTER: first},
                     "annotations": {annotations::SOURCE_NAMESPACE: ns}},
        "type": flotilla_api::work_data::SECRET_TYPE,
        "data": {},
    }))?;
    Api::<Secret>::namespaced(hub.clone(), &names::cluster_namespace(first))
        .create(&PostParams::default(), &stray)
        .await?;

    wait_for(
        "the Works of the deleted Placement to be released",
        Duration::from_secs(60),
        || async {
            let left: Vec<String> = works_of_namespace(&fleet)
                .await?
                .iter()
                .map(|w| {
                    let since = w.annotations().get(annotations::ORPHANED_SINCE);
                    format!("{} (orphaned since {since:?})", w.name_any())
                })
                .collect();
            Ok(Seen::unless(&left, ()))
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    wait_for(
        "the hub Secrets with the data of their Secrets to go",
        Duration::from_secs(60),
        || async {
            let left = data_secrets_of_namespace(&fleet).await?;
            Ok(Seen::unless(&left, ()))
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;

    // The member objects stay, as they were.
    ensure!(
        copy_uids::<ConfigMap>(members, ns, "settings").await? == settings,
        "the member ConfigMaps stay as they were"
    );
    ensure!(
        copy_uids::<Secret>(members, ns, "creds").await? == creds,
        "the member Secrets stay as they were"
    );
    settings_everywhere(members, ns, "one", Duration::from_secs(5)).await?;
    for (cluster, client) in members {
        let data = Api::<Secret>::namespaced(client.clone(), ns)
            .get("creds")
            .await?
            .data
            .unwrap_or_default();
        ensure!(
            data.get("password").map(|p| p.0.as_slice()) == Some(&b"s3cr3t"[..]),
            "Secret creds keeps its data in {cluster}: {data:?}"
        );
    }
    // Unmanaged: an edit in a member stays (the syncer resyncs every 5 s here).
    let (_, client) = &members[0];
    let member_settings = Api::<ConfigMap>::namespaced(client.clone(), ns);
    member_settings
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"value": "edited-in-the-member"}})),
        )
        .await?;
    flotilla_e2e::holds_for(
        "the member's edit to stay",
        Duration::from_secs(12),
        || async {
            let value = member_settings
                .get("settings")
                .await?
                .data
                .and_then(|d| d.get("value").cloned());
            Ok(if value.as_deref() == Some("edited-in-the-member") {
                Ok(())
            } else {
                Err(format!("value {value:?}"))
            })
        },
    )
    .await?;

    // Visible: an Event on each released Work, and the splitter's counter.
    let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(
        hub.clone(),
        &names::cluster_namespace(first),
    )
    .list(&ListParams::default())
    .await?;
    let released: Vec<String> = events
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Released"))
        .filter_map(|e| e.message.clone())
        .collect();
    ensure!(
        released
            .iter()
            .any(|m| m.contains("configs") && m.contains("left in place")),
        "an Event says the Work was released: {released:?}"
    );
    let (_, metrics) = fleet.splitter.get("/metrics").await?;
    ensure!(
        metrics.lines().any(
            |l| l.starts_with("flotilla_splitter_released_total{object=\"work\"}")
                && !l.ends_with(" 0")
        ),
        "the splitter counts the Works it released:\n{metrics}"
    );
    Ok(())
}

/// `kubectl replace --force` of a Placement, or a Placement deleted and created again within
/// `--orphaned-work-grace` (10 minutes by default): its Works are marked orphaned meanwhile and
/// nothing else changes; the Placement created again takes its copies over as they are.
#[tokio::test]
async fn a_placement_created_again_within_the_grace_period_keeps_its_copies() -> Result<()> {
    let fleet = Fleet::builder("regrace").start().await?;
    let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);
    settings_and_creds_everywhere(&fleet, "configs").await?;
    let settings = copy_uids::<ConfigMap>(members, ns, "settings").await?;
    let creds = copy_uids::<Secret>(members, ns, "creds").await?;
    let works: BTreeMap<String, Option<String>> = works_of_namespace(&fleet)
        .await?
        .iter()
        .map(|w| (w.name_any(), w.uid()))
        .collect();

    Api::<Placement>::namespaced(hub.clone(), ns)
        .delete("configs", &DeleteParams::default())
        .await?;
    // The clock of each Work starts (in an annotation: it survives a restart of the splitter).
    wait_for(
        "the Works of the deleted Placement to be marked orphaned",
        Duration::from_secs(30),
        || async {
            let unmarked: Vec<String> = works_of_namespace(&fleet)
                .await?
                .iter()
                .filter(|w| !w.annotations().contains_key(annotations::ORPHANED_SINCE))
                .map(|w| w.name_any())
                .collect();
            Ok(Seen::unless(&unmarked, ()))
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;

    place_settings_and_creds(&fleet, "configs").await?;
    wait_for(
        "the Works to be the Placement's again, unmarked",
        Duration::from_secs(30),
        || async {
            let marked: Vec<String> = works_of_namespace(&fleet)
                .await?
                .iter()
                .filter(|w| w.annotations().contains_key(annotations::ORPHANED_SINCE))
                .map(|w| w.name_any())
                .collect();
            Ok(Seen::unless(&marked, ()))
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    let now: BTreeMap<String, Option<String>> = works_of_namespace(&fleet)
        .await?
        .iter()
        .map(|w| (w.name_any(), w.uid()))
        .collect();
    ensure!(now == works, "the same Works: {works:?} -> {now:?}");
    // Managed again: a change on the hub reaches every member, into the same objects.
    api::apply(
        hub,
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings", "namespace": ns}, "data": {"value": "two"}}),
        false,
    )
    .await??;
    settings_everywhere(members, ns, "two", Duration::from_secs(30))
        .await
        .map_err(|e| e.context(fleet.splitter.log()))?;
    ensure!(
        copy_uids::<ConfigMap>(members, ns, "settings").await? == settings,
        "the member ConfigMaps were not recreated"
    );
    ensure!(
        copy_uids::<Secret>(members, ns, "creds").await? == creds,
        "the member Secrets were not recreated"
    );
    Ok(())
}

#[tokio::test]
async fn a_type_the_splitter_may_not_read_gets_a_condition_and_keeps_its_copies() -> Result<()> {
    let env = Environment::get();
    let fleet = Fleet::builder("forbid").start().await?;
    let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);
    let release = fleet.identities.release.clone();
    let placements: Api<Placement> = Api::namespaced(hub.clone(), ns);
    placements
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "templates"},
                "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "PodTemplate"},
                                               {"apiVersion": "v1", "kind": "ConfigMap", "name": "settings"}],
                         "replicaScheduling": {"type": "Duplicated"}},
            }))?,
        )
        .await?;
    for object in [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": ns},
               "data": {"a": "b"}}),
        json!({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "reader", "namespace": ns},
               "template": {"spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}),
    ] {
        api::apply(hub, &object, false).await??;
    }

    // The chart lets the splitter read the kinds of the table of kinds, not PodTemplates: said
    // at once, with what to grant.
    let started = std::time::Instant::now();
    wait_scheduled(
        &placements,
        "templates",
        "say PodTemplates are forbidden",
        |c| {
            c.status == "False"
                && c.reason == reasons::FORBIDDEN
                && c.message.contains("podtemplates")
                && c.message.contains("splitter.extraRules")
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    eprintln!("Forbidden reported after {:?}", started.elapsed());
    // ... while the other selected types flow.
    in_every_member::<ConfigMap>(members, ns, "settings").await?;

    // Granted (as splitter.extraRules would): the Placement recovers within seconds.
    let mut rbac = ClusterScopedObjects::new(&env.hub);
    let role = format!("{release}-podtemplates");
    for object in [
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
               "rules": [{"apiGroups": [""], "resources": ["podtemplates"], "verbs": ["get", "list", "watch"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
               "subjects": [{"kind": "ServiceAccount", "name": format!("{release}-splitter"),
                             "namespace": fleet.identities.namespace}]}),
    ] {
        let (resource, _) = api::resource_of(hub, &object).await?;
        api::apply(hub, &object, false).await??;
        rbac.add(resource, role.clone());
    }
    wait_scheduled(&placements, "templates", "recover once allowed", |c| {
        c.status == "True"
    })
    .await?;
    let placed = wait_for(
        "PodTemplate reader in every member",
        Duration::from_secs(30),
        || async {
            let uids = copy_uids::<PodTemplate>(members, ns, "reader").await?;
            Ok(if uids.values().all(Option::is_some) {
                Seen::Done(uids)
            } else {
                Seen::not_yet(format!("{uids:?}"))
            })
        },
    )
    .await?;

    // Revoked: unknown is not absent. The condition says so and every copy stays.
    Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(hub.clone())
        .delete(&role, &DeleteParams::default())
        .await?;
    // A hub Deployment of the namespace makes the splitter look at its Placements now.
    Api::<Deployment>::namespaced(hub.clone(), ns)
        .create(&PostParams::default(), &deployment(1)?)
        .await?;
    wait_scheduled(
        &placements,
        "templates",
        "say PodTemplates are forbidden again",
        |c| c.reason == reasons::FORBIDDEN,
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    flotilla_e2e::holds_for(
        "the member PodTemplates to stay while the splitter may not read them",
        Duration::from_secs(8),
        || async {
            let now = copy_uids::<PodTemplate>(members, ns, "reader").await?;
            Ok(if now == placed {
                Ok(())
            } else {
                Err(format!("{placed:?} -> {now:?}"))
            })
        },
    )
    .await?;
    Ok(())
}

/// The Works on member `cluster` that hold the test namespace's object `kind`/`name`.
async fn works_holding(fleet: &Fleet, cluster: &str, kind: &str, name: &str) -> Result<Vec<Work>> {
    Ok(api::works_from(&fleet.hub, cluster, fleet.ns.name())
        .await?
        .into_iter()
        .filter(|w| {
            w.spec.manifests.iter().any(|m| {
                m.types.as_ref().is_some_and(|t| t.kind == kind)
                    && m.metadata.name.as_deref() == Some(name)
            })
        })
        .collect())
}

/// The Placement whose Work alone holds object `kind`/`name` on the first member (its label),
/// if one does.
async fn placed_by(fleet: &Fleet, kind: &str, name: &str) -> Result<Option<String>> {
    let (cluster, _) = &fleet.members[0];
    let holding = works_holding(fleet, cluster, kind, name).await?;
    Ok(match holding.as_slice() {
        [only] => only.labels().get(labels::PLACEMENT).cloned(),
        _ => None,
    })
}

async fn wait_placed_by(fleet: &Fleet, kind: &str, name: &str, placement: &str) -> Result<()> {
    wait_for(
        &format!("{kind} {name} to be placed by Placement {placement} alone"),
        Duration::from_secs(60),
        || async {
            let by = placed_by(fleet, kind, name).await?;
            Ok(if by.as_deref() == Some(placement) {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("placed by {by:?}"))
            })
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))
}

/// UIDs of the member objects of `web` and `settings` on the first member: unchanged UIDs mean
/// nothing was deleted and recreated while Placements handed objects over.
async fn member_uids(fleet: &Fleet) -> Result<(Option<String>, Option<String>)> {
    let client = fleet.members[0].1.clone();
    let ns = fleet.ns.name();
    Ok((
        Api::<Deployment>::namespaced(client.clone(), ns)
            .get_opt("web")
            .await?
            .and_then(|d| d.metadata.uid),
        Api::<ConfigMap>::namespaced(client, ns)
            .get_opt("settings")
            .await?
            .and_then(|c| c.metadata.uid),
    ))
}

/// A Job applied to the hub runs once in the fleet: its completions are divided among the
/// members (each runs its share, with parallelism in proportion), and an Indexed Job runs whole
/// on one member. The selector and pod labels the hub's apiserver generated from the hub Job's
/// UID stay on the hub (a member refuses a Job that carries them: "`selector` not
/// auto-generated"), and each member's Job completes with its own. The hub Job counts every
/// success once, in the terms `kubectl wait --for=condition=complete` and kstatus read.
#[tokio::test]
async fn a_job_on_the_hub_divides_its_completions_and_completes_once_in_the_fleet() -> Result<()> {
    let fleet = Fleet::builder("job").start().await?;
    let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);
    api::apply(
        hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "batch", "namespace": ns},
                "spec": {"resourceSelectors": [{"apiVersion": "batch/v1", "kind": "Job"}]}}),
        false,
    )
    .await??;
    let job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "pi", "namespace": ns, "labels": {"team": "a"}},
        "spec": {"backoffLimit": 1, "completions": 6, "parallelism": 3,
            "template": {"metadata": {"labels": {"app": "pi"}},
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "pi", "image": "registry.k8s.io/pause:3.10"}]}}}});
    api::apply(hub, &job, false).await??;
    let hub_job = Api::<Job>::namespaced(hub.clone(), ns).get("pi").await?;
    let hub_uid = hub_job.uid().unwrap_or_default();
    ensure!(
        hub_job
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .is_some_and(|s| format!("{s:?}").contains(&hub_uid)),
        "the hub generated a selector of its Job's UID: {:?}",
        hub_job.spec
    );
    let completed = wait_for(
        "Job pi complete in every member",
        Duration::from_secs(60),
        || async {
            let mut out = BTreeMap::new();
            let mut waiting = Vec::new();
            for (cluster, client) in members {
                let copy = Api::<Job>::namespaced(client.clone(), ns)
                    .get_opt("pi")
                    .await?;
                let complete = copy.as_ref().is_some_and(|j| {
                    j.status.as_ref().is_some_and(|s| {
                        s.conditions
                            .iter()
                            .flatten()
                            .any(|c| c.type_ == "Complete" && c.status == "True")
                    })
                });
                match copy {
                    Some(j) if complete => {
                        out.insert(cluster.clone(), j);
                    }
                    other => waiting.push(format!("{cluster}: {:?}", other.and_then(|j| j.status))),
                }
            }
            Ok(Seen::unless(&waiting, out))
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    for (cluster, copy) in &completed {
        let uid = copy.uid().unwrap_or_default();
        let spec = copy.spec.clone().unwrap_or_default();
        ensure!(
            (spec.completions, spec.parallelism) == (Some(2), Some(1)),
            "{cluster}: a third of the completions, one pod at a time: {:?} {:?}",
            spec.completions,
            spec.parallelism
        );
        let selector = format!("{:?}", spec.selector);
        ensure!(
            selector.contains(&uid) && !selector.contains(&hub_uid),
            "{cluster}: the member generated its own selector: {selector}"
        );
        let template = spec
            .template
            .metadata
            .unwrap_or_default()
            .labels
            .unwrap_or_default();
        ensure!(
            template.get("app").map(String::as_str) == Some("pi")
                && template.get("batch.kubernetes.io/controller-uid") == Some(&uid),
            "{cluster}: the user's template labels and the member's own: {template:?}"
        );
        ensure!(
            copy.labels().get("team").map(String::as_str) == Some("a"),
            "{cluster}: the Job's own labels travel: {:?}",
            copy.labels()
        );
    }
    let env = Environment::get();
    let waited = crate::api::kubectl(
        &env,
        &[
            "-n",
            ns,
            "wait",
            "job/pi",
            "--for",
            "condition=complete",
            "--timeout",
            "60s",
        ],
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    ensure!(waited.contains("condition met"), "{waited}");
    // What GitOps tools read: the hub Job is Current.
    crate::api::kstatus_current(&env, ns, "job", "pi").await?;
    let status = Api::<Job>::namespaced(hub.clone(), ns)
        .get("pi")
        .await?
        .status
        .unwrap_or_default();
    ensure!(
        status.succeeded == Some(6)
            && status.active.unwrap_or_default() == 0
            && status.start_time.is_some()
            && status.completion_time.is_some(),
        "the hub Job counts each of its 6 completions once: {status:?}"
    );

    // An Indexed Job's indexes are one whole: it runs on one member.
    let indexed = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "render", "namespace": ns},
        "spec": {"completions": 2, "parallelism": 2, "completionMode": "Indexed",
            "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "r", "image": "registry.k8s.io/pause:3.10"}]}}}});
    api::apply(hub, &indexed, false).await??;
    let waited = crate::api::kubectl(
        &env,
        &[
            "-n",
            ns,
            "wait",
            "job/render",
            "--for",
            "condition=complete",
            "--timeout",
            "60s",
        ],
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    ensure!(waited.contains("condition met"), "{waited}");
    let mut runs_on = Vec::new();
    for (cluster, client) in members {
        if let Some(copy) = Api::<Job>::namespaced(client.clone(), ns)
            .get_opt("render")
            .await?
        {
            let spec = copy.spec.unwrap_or_default();
            ensure!(
                spec.completions == Some(2),
                "{cluster}: the whole Job: {spec:?}"
            );
            runs_on.push(cluster.clone());
        }
    }
    ensure!(
        runs_on.len() == 1,
        "the Indexed Job runs on one member: {runs_on:?}"
    );
    let status = Api::<Job>::namespaced(hub.clone(), ns)
        .get("render")
        .await?
        .status
        .unwrap_or_default();
    ensure!(status.succeeded == Some(2), "{status:?}");
    Ok(())
}

/// A CronJob applied to the hub under the default `Divided` fires on one member — each schedule
/// once in the fleet — and the hub CronJob shows when it last did, what `kubectl get cronjob`
/// prints as LAST SCHEDULE.
#[tokio::test]
async fn a_cronjob_on_the_hub_fires_on_one_member_and_the_hub_says_when() -> Result<()> {
    let fleet = Fleet::builder("cron").start().await?;
    let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);
    api::apply(
        hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "batch", "namespace": ns},
                "spec": {"resourceSelectors": [{"apiVersion": "batch/v1", "kind": "CronJob"}]}}),
        false,
    )
    .await??;
    api::apply(
        hub,
        &json!({"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "tick", "namespace": ns},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "tick", "image": "registry.k8s.io/pause:3.10"}]}}}}}}),
        false,
    )
    .await??;
    // Once a minute: the first run is at most a minute away, and its Job then completes.
    let fired = wait_for(
        "CronJob tick to have succeeded on one member, and to be on no other",
        Duration::from_secs(150),
        || async {
            let mut copies = Vec::new();
            let mut latest = Vec::new();
            for (cluster, client) in members {
                let copy = Api::<CronJob>::namespaced(client.clone(), ns)
                    .get_opt("tick")
                    .await?;
                if let Some(copy) = copy {
                    copies.push(cluster.clone());
                    latest.extend(copy.status.and_then(|s| s.last_successful_time));
                }
            }
            if copies.len() > 1 {
                anyhow::bail!("the CronJob is on {copies:?}: each schedule would fire there");
            }
            Ok(if latest.is_empty() {
                Seen::not_yet(format!("on {copies:?}, not fired yet"))
            } else {
                Seen::Done(latest)
            })
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    let newest = fired.iter().max().cloned();
    wait_for(
        "the hub CronJob to show the latest success of its copies",
        Duration::from_secs(30),
        || async {
            let status = Api::<CronJob>::namespaced(hub.clone(), ns)
                .get("tick")
                .await?
                .status
                .unwrap_or_default();
            Ok(
                match (&status.last_schedule_time, &status.last_successful_time) {
                    (Some(_), Some(t)) if Some(t) >= newest.as_ref() => Seen::Done(()),
                    _ => Seen::not_yet(format!("{status:?}")),
                },
            )
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    Ok(())
}

/// Pod Security through the hub: a Deployment whose pods the hub namespace's Pod Security level
/// forbids (`hostPID`, a hostPath of `/`, root) runs in no member — even one whose namespace
/// enforces nothing — and the Placement and an Event say why, while a compliant Deployment of the
/// same namespace is placed; a compliant Deployment made worse keeps its member copies as they
/// were. The member namespace Flotilla creates carries the hub namespace's labels, its Pod
/// Security level among them, and follows their changes. The splitter runs with the chart's RBAC.
#[tokio::test]
async fn a_workload_the_hub_namespaces_pod_security_forbids_runs_in_no_member() -> Result<()> {
    const ENFORCE: &str = "pod-security.kubernetes.io/enforce";
    let labels = [
        (ENFORCE.to_string(), "restricted".to_string()),
        ("team".to_string(), "a".to_string()),
    ]
    .into();
    let fleet = Fleet::builder("psa")
        .second_namespace(Second::HubOnly(labels))
        .start()
        .await?;
    let (hub, members) = (&fleet.hub, &fleet.members);
    let ns = fleet
        .other
        .as_ref()
        .map(|o| o.name().to_string())
        .unwrap_or_default();
    api::apply(
        hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "apps", "namespace": ns},
                "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                         "replicaScheduling": {"type": "Duplicated"}}}),
        false,
    )
    .await??;
    // Warned by the hub, refused by no one there: the hub runs no pods.
    let deployment = |name: &str, pod: serde_json::Value| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": name, "namespace": ns},
               "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}}, "spec": pod}}})
    };
    let restricted_container = json!({"name": "c", "image": "registry.k8s.io/pause:3.10",
        "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}});
    let good = json!({"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                      "containers": [restricted_container]});
    api::apply(hub, &deployment("good", good.clone()), false).await??;
    api::apply(
        hub,
        &deployment(
            "escape",
            json!({"hostPID": true,
                   "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
                   "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                   "securityContext": {"runAsUser": 0},
                                   "volumeMounts": [{"name": "root", "mountPath": "/host"}]}]}),
        ),
        false,
    )
    .await??;
    let level = |want: &'static str| {
        let ns = ns.clone();
        async move {
            wait_for(
                &format!("{ENFORCE}={want} on {ns} in every member"),
                Duration::from_secs(30),
                || async {
                    let mut wrong = Vec::new();
                    for (cluster, client) in members {
                        let got = Api::<Namespace>::all(client.clone()).get_opt(&ns).await?;
                        let labels = got.as_ref().map(|n| n.labels().clone()).unwrap_or_default();
                        if labels.get(ENFORCE).map(String::as_str) != Some(want)
                            || labels.get("team").map(String::as_str) != Some("a")
                        {
                            wrong.push(format!("{cluster}: {labels:?}"));
                        }
                    }
                    Ok(Seen::unless(&wrong, ()))
                },
            )
            .await
        }
    };
    level("restricted")
        .await
        .map_err(|e| e.context(fleet.splitter.log()))?;
    // The Placement says why `escape` goes nowhere, naming what the level forbids.
    let placements: Api<Placement> = Api::namespaced(hub.clone(), &ns);
    wait_scheduled(
        &placements,
        "apps",
        "name the Pod Security violation",
        |c| {
            c.status == "False"
                && c.reason == reasons::POD_SECURITY_VIOLATION
                && c.message.contains("Deployment escape")
                && c.message.contains("hostPID")
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(hub.clone(), &ns);
    wait_for(
        "a Warning event on the Placement",
        Duration::from_secs(30),
        || async {
            let found = events
                .list(&kube::api::ListParams::default().fields("involvedObject.name=apps"))
                .await?
                .items
                .into_iter()
                .any(|e| e.reason.as_deref() == Some(reasons::POD_SECURITY_VIOLATION));
            Ok(if found {
                Seen::Done(())
            } else {
                Seen::not_yet("none yet")
            })
        },
    )
    .await?;
    // `good` runs in every member, `escape` in none.
    let copies = |name: &'static str| {
        let ns = ns.clone();
        async move {
            let mut out = Vec::new();
            for (cluster, client) in members {
                if let Some(d) = Api::<Deployment>::namespaced(client.clone(), &ns)
                    .get_opt(name)
                    .await?
                {
                    out.push((cluster.clone(), d));
                }
            }
            Ok::<_, anyhow::Error>(out)
        }
    };
    wait_for("good in every member", Duration::from_secs(60), || async {
        let n = copies("good").await?.len();
        Ok(if n == members.len() {
            Seen::Done(())
        } else {
            Seen::not_yet(format!("{n} copies"))
        })
    })
    .await?;
    let escaped = copies("escape").await?;
    ensure!(
        escaped.is_empty(),
        "escape reached members: {:?}",
        escaped.iter().map(|(c, _)| c).collect::<Vec<_>>()
    );

    // `good` made worse on the hub: its member copies stay as they were.
    let mut worse = good.clone();
    worse["hostNetwork"] = json!(true);
    api::apply(hub, &deployment("good", worse), false).await??;
    wait_scheduled(&placements, "apps", "name good's violation", |c| {
        c.reason == reasons::POD_SECURITY_VIOLATION && c.message.contains("Deployment good")
    })
    .await?;
    flotilla_e2e::holds_for(
        "good's member copies to stay without hostNetwork",
        Duration::from_secs(10),
        || async {
            for (cluster, d) in copies("good").await? {
                let spec = d.spec.template.spec;
                if spec.and_then(|s| s.host_network) == Some(true) {
                    return Ok(Err(format!("{cluster} runs good with hostNetwork")));
                }
            }
            Ok(Ok(()))
        },
    )
    .await?;

    // The hub namespace's level changes: so does every member's.
    Api::<Namespace>::all(hub.clone())
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {ENFORCE: "baseline"}}})),
        )
        .await?;
    level("baseline")
        .await
        .map_err(|e| e.context(fleet.splitter.log()))?;
    Ok(())
}

/// A duplicated Deployment runs whole in every member, and `kubectl rollout status` against the
/// hub follows it: the hub's status counts the replicas of every copy, also after an edit.
#[tokio::test]
async fn kubectl_rollout_status_follows_a_duplicated_deployment() -> Result<()> {
    let env = Environment::get();
    let fleet = Fleet::builder("dup").start().await?;
    let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);
    api::apply(
        hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "everywhere", "namespace": ns},
                "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                         "replicaScheduling": {"type": "Duplicated"}}}),
        false,
    )
    .await??;
    let deployments: Api<Deployment> = Api::namespaced(hub.clone(), ns);
    deployments
        .create(&PostParams::default(), &deployment(2)?)
        .await?;
    let rolled_out = || async {
        crate::api::kubectl(
            &env,
            &[
                "-n",
                ns,
                "rollout",
                "status",
                "deployment/web",
                "--timeout",
                "60s",
            ],
        )
        .await
        .map_err(|e| e.context(fleet.splitter.log()))
    };
    let said = rolled_out().await?;
    ensure!(said.contains("successfully rolled out"), "{said}");
    crate::api::kstatus_current(&env, ns, "deployment", "web").await?;
    let replicas = member_replicas(members, ns).await?;
    ensure!(
        replicas.len() == members.len() && replicas.values().all(|n| *n == 2),
        "every member runs the whole Deployment: {replicas:?}"
    );
    // Each member runs the whole Deployment: the hub shows the copy furthest behind, 2 of 2.
    let status = deployments.get("web").await?.status.unwrap_or_default();
    ensure!(
        status.replicas == Some(2) && status.available_replicas == Some(2),
        "the hub shows what each copy runs: {status:?}"
    );

    // An edit rolls out to every member, and the hub says so once all of them have it.
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"template": {"metadata": {"annotations": {"edited": "1"}}}}}),
            ),
        )
        .await?;
    let said = rolled_out().await?;
    ensure!(said.contains("successfully rolled out"), "{said}");
    for (cluster, client) in members {
        let copy = Api::<Deployment>::namespaced(client.clone(), ns)
            .get("web")
            .await?;
        let edited = serde_json::to_value(&copy)?
            .pointer("/spec/template/metadata/annotations/edited")
            .cloned();
        ensure!(
            edited == Some(json!("1")),
            "{cluster} has the edit: {edited:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn the_most_specific_placement_places_an_object_and_ties_are_reported() -> Result<()> {
    let fleet = Fleet::builder("split-who").start().await?;
    let ns = fleet.ns.name();
    let placements: Api<Placement> = Api::namespaced(fleet.hub.clone(), ns);
    let create = |name: &'static str, selectors: serde_json::Value| {
        let placements = placements.clone();
        async move {
            let p: Placement = serde_json::from_value(json!({
                "apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": name},
                "spec": {"resourceSelectors": selectors},
            }))?;
            placements.create(&PostParams::default(), &p).await?;
            anyhow::Ok(())
        }
    };
    create("everything", json!([])).await?;
    Api::<Deployment>::namespaced(fleet.hub.clone(), ns)
        .create(&PostParams::default(), &deployment(3)?)
        .await?;
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "settings"}, "data": {"color": "blue"}
    }))?;
    Api::<ConfigMap>::namespaced(fleet.hub.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await?;
    wait_placed_by(&fleet, "Deployment", "web", "everything").await?;
    wait_placed_by(&fleet, "ConfigMap", "settings", "everything").await?;
    let uids = wait_for(
        "both objects in the first member",
        Duration::from_secs(60),
        || async {
            let uids = member_uids(&fleet).await?;
            Ok(match &uids {
                (Some(_), Some(_)) => Seen::Done(uids),
                other => Seen::not_yet(format!("{other:?}")),
            })
        },
    )
    .await?;

    // A Placement naming the Deployment is more specific: it takes the Deployment over, and the
    // older one reports that it no longer places it. Nothing is deleted on the way.
    create(
        "web-only",
        json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}]),
    )
    .await?;
    wait_placed_by(&fleet, "Deployment", "web", "web-only").await?;
    wait_for(
        "Placement everything to say web is placed by web-only",
        Duration::from_secs(60),
        || async {
            let p = placements.get("everything").await?;
            let overridden = p
                .status
                .iter()
                .flat_map(|s| s.decisions.iter())
                .find(|d| d.kind == "Deployment" && d.name == "web")
                .and_then(|d| d.overridden_by.clone());
            Ok(if overridden.as_deref() == Some("web-only") {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("overriddenBy {overridden:?}"))
            })
        },
    )
    .await?;

    // An equally unspecific newer Placement ties with the first: the older one keeps placing
    // the ConfigMap, and the tie is reported with reason PlacementConflict.
    create("everything-too", json!([])).await?;
    wait_scheduled(&placements, "everything", "report the tie", |c| {
        c.reason == reasons::PLACEMENT_CONFLICT && c.message.contains("everything, everything-too")
    })
    .await?;
    flotilla_e2e::holds_for(
        "the ConfigMap to stay with the older Placement",
        Duration::from_secs(3),
        || async {
            let by = placed_by(&fleet, "ConfigMap", "settings").await?;
            Ok(if by.as_deref() == Some("everything") {
                Ok(())
            } else {
                Err(format!("placed by {by:?}"))
            })
        },
    )
    .await?;

    // The specific Placement goes: the Deployment returns to the oldest of the rest.
    placements
        .delete("web-only", &DeleteParams::default())
        .await?;
    wait_placed_by(&fleet, "Deployment", "web", "everything").await?;
    ensure!(
        member_uids(&fleet).await? == uids,
        "handing objects between Placements must not recreate them in the member"
    );
    Ok(())
}

#[tokio::test]
async fn a_stopped_member_loses_its_replicas_and_gets_its_stale_copy_cleaned_on_return()
-> Result<()> {
    let env = Environment::get();
    // A member of its own to stop; dropped (removed) after the fleet.
    let (scratch, infos) = two_and_a_scratch_member(&env, "split-fo").await?;
    let fleet = Fleet::builder("split-fo")
        .members(infos)
        .grace("6s")
        .start()
        .await?;
    let ns = fleet.ns.name();
    let placement: Placement = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
        "metadata": {"name": "spread"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                 "replicaScheduling": {"type": "Divided", "division": "Even"},
                 "failover": {"tolerationSeconds": 5}},
    }))?;
    Api::<Placement>::namespaced(fleet.hub.clone(), ns)
        .create(&PostParams::default(), &placement)
        .await?;
    let deployments: Api<Deployment> = Api::namespaced(fleet.hub.clone(), ns);
    deployments
        .create(&PostParams::default(), &deployment(9)?)
        .await?;
    hub_available(&deployments, 9)
        .await
        .map_err(|e| e.context(fleet.splitter.log()))?;
    let before = member_replicas(&fleet.members, ns).await?;
    let (stopped, stopped_client) = fleet.members[2].clone();
    ensure!(
        before.get(&stopped) == Some(&3),
        "9 replicas spread 3+3+3: {before:?}"
    );

    // Stop it: after the grace period and the toleration its 3 replicas run on the others and
    // the hub is Available again; its copy waits, Terminating, for the member to come back.
    env.clusters_sh(&["stop-member", &scratch.info.name])
        .await?;
    let live = &fleet.members[..2];
    wait_for(
        "the stopped member's replicas to run on the others",
        Duration::from_secs(120),
        || async {
            let now = member_replicas(live, ns).await?;
            let d = deployments.get("web").await?;
            let placed = d
                .status
                .iter()
                .flat_map(|s| s.conditions.iter().flatten())
                .find(|c| c.type_.as_deref() == Some("Placed"))
                .and_then(|c| c.message.clone())
                .unwrap_or_default();
            let available = d.status.and_then(|s| s.available_replicas);
            Ok(
                if now.values().sum::<i32>() == 9
                    && !placed.contains(&format!("{stopped}="))
                    && available == Some(9)
                {
                    Seen::Done(())
                } else {
                    Seen::not_yet(format!(
                        "{now:?}, placed {placed:?}, available {available:?}"
                    ))
                },
            )
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    hub_available(&deployments, 9).await?;
    let stale = works_holding(&fleet, &stopped, "Deployment", "web")
        .await?
        .pop();
    ensure!(
        stale
            .as_ref()
            .is_some_and(|w| w.metadata.deletion_timestamp.is_some()),
        "the stopped member's Work waits for it, Terminating: {:?}",
        stale.map(|w| w.metadata.deletion_timestamp)
    );

    // Back again: the stale copy is deleted there, and the Work goes.
    env.clusters_sh(&["start-member", &scratch.info.name])
        .await?;
    wait_for(
        "the stale copy to be cleaned from the returning member",
        Duration::from_secs(90),
        || async {
            // Until the member answers again, its copy's fate is unknown.
            let copy = match Api::<Deployment>::namespaced(stopped_client.clone(), ns)
                .get_opt("web")
                .await
            {
                Ok(copy) => copy,
                Err(e) => return Ok(Seen::not_yet(format!("member not answering yet: {e}"))),
            };
            let work = works_holding(&fleet, &stopped, "Deployment", "web")
                .await?
                .pop();
            Ok(if copy.is_none() && work.is_none() {
                Seen::Done(())
            } else {
                Seen::not_yet(format!(
                    "copy present: {}, Work present: {}",
                    copy.is_some(),
                    work.is_some()
                ))
            })
        },
    )
    .await?;
    hub_available(&deployments, 9).await?;
    drop(fleet);
    drop(scratch);
    Ok(())
}

#[tokio::test]
async fn a_cluster_that_leaves_the_splitters_selector_keeps_its_copies() -> Result<()> {
    let fleet = Fleet::builder("relabel").start().await?;
    let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);
    let placements: Api<Placement> = Api::namespaced(hub.clone(), ns);
    api::apply(
        hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "configs", "namespace": ns},
                "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"}]}}),
        false,
    )
    .await??;
    let settings = |value: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "settings", "namespace": ns}, "data": {"value": value}})
    };
    api::apply(hub, &settings("one"), false).await??;
    in_every_member::<ConfigMap>(members, ns, "settings").await?;
    let before = copy_uids::<ConfigMap>(members, ns, "settings").await?;

    // The first member leaves the splitter's selector (registration and the syncer still serve
    // it): the splitter no longer places there, and leaves what is there alone.
    let (out, _) = &members[0];
    fleet
        .clusters
        .patch(
            out,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {SPLITTER_OUT: "true"}}})),
        )
        .await?;
    // An edit reaches the other members; the one outside keeps its copy as it was.
    api::apply(hub, &settings("two"), false).await??;
    settings_everywhere(&members[1..], ns, "two", Duration::from_secs(30)).await?;
    let work = works_holding(&fleet, out, "ConfigMap", "settings")
        .await?
        .pop();
    assert!(
        work.as_ref()
            .is_some_and(|w| w.metadata.deletion_timestamp.is_none()),
        "the Work on {out} is kept: {:?}\n{}",
        work.map(|w| w.metadata),
        fleet.splitter.log()
    );
    assert_eq!(
        copy_uids::<ConfigMap>(members, ns, "settings").await?,
        before,
        "no member copy was deleted"
    );
    wait_scheduled(&placements, "configs", "report the copy left alone", |c| {
        c.message
            .contains("outside this splitter's --cluster-selector")
    })
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;

    // Back in the selector: the copy is brought up to date, not re-created.
    fleet
        .clusters
        .patch(
            out,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {SPLITTER_OUT: null}}})),
        )
        .await?;
    settings_everywhere(&members[..1], ns, "two", Duration::from_secs(30)).await?;
    assert_eq!(
        copy_uids::<ConfigMap>(members, ns, "settings").await?,
        before
    );
    Ok(())
}

#[tokio::test]
async fn a_member_that_hangs_never_delays_the_others() -> Result<()> {
    let env = Environment::get();
    // A member of its own to pause; dropped (removed) after the fleet.
    let (scratch, infos) = two_and_a_scratch_member(&env, "hang").await?;
    let fleet = Fleet::builder("hang")
        .members(infos)
        // The Cluster stays Ready while it hangs: what is tested is the syncer, not failover.
        .grace("120s")
        // Few workers: a hung member that held them all would show at once.
        .syncer_flags(["--concurrency", "2"])
        .start()
        .await?;
    let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);
    api::apply(
        hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "configs", "namespace": ns},
                "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"}]}}),
        false,
    )
    .await??;
    let config = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": ns}, "data": {"a": "b"}})
    };
    api::apply(hub, &config("first"), false).await??;
    in_every_member::<ConfigMap>(members, ns, "first").await?;

    // The member's apiserver hangs: it takes connections and never answers.
    env.clusters_sh(&["pause-member", &scratch.info.name])
        .await?;
    // (If the test fails here, removing the scratch member stops the paused processes too.)
    let names: Vec<String> = (0..12).map(|i| format!("later-{i}")).collect();
    for name in &names {
        api::apply(hub, &config(name), false).await??;
    }
    let live = &members[..2];
    let started = std::time::Instant::now();
    // About a second here; a syncer whose workers wait on the hung member takes far longer.
    wait_for(
        &format!(
            "every ConfigMap in the live members, with {} hung",
            scratch.info.name
        ),
        Duration::from_secs(10),
        || async { missing_configmaps(live, ns, &names).await },
    )
    .await?;
    eprintln!(
        "12 ConfigMaps in the live members {:?} after the member hung",
        started.elapsed()
    );
    env.clusters_sh(&["resume-member", &scratch.info.name])
        .await?;
    // Back: it catches up.
    let mut all = names.clone();
    all.push("first".into());
    wait_for(
        "the resumed member to have every ConfigMap",
        Duration::from_secs(90),
        || async { missing_configmaps(&members[2..], ns, &all).await },
    )
    .await?;
    Ok(())
}

/// Waits until ConfigMap `settings` of namespace `ns` has data `value: <value>` in each of
/// `members`.
async fn settings_everywhere(
    members: &[(String, Client)],
    ns: &str,
    value: &str,
    timeout: Duration,
) -> Result<()> {
    wait_for(
        &format!(
            "ConfigMap settings with value {value} in {} member(s)",
            members.len()
        ),
        timeout,
        || async {
            let mut behind = Vec::new();
            for (cluster, client) in members {
                let seen = Api::<ConfigMap>::namespaced(client.clone(), ns)
                    .get_opt("settings")
                    .await?
                    .and_then(|c| c.data)
                    .and_then(|d| d.get("value").cloned());
                if seen.as_deref() != Some(value) {
                    behind.push(format!("{cluster}: {seen:?}"));
                }
            }
            Ok(if behind.is_empty() {
                Seen::Done(())
            } else {
                Seen::not_yet(behind.join(", "))
            })
        },
    )
    .await
}

/// Done once every member of `members` has every ConfigMap of `names` in namespace `ns`.
async fn missing_configmaps(
    members: &[(String, Client)],
    ns: &str,
    names: &[String],
) -> Result<Seen<()>> {
    let mut missing = Vec::new();
    for (cluster, client) in members {
        let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
        for name in names {
            if api.get_opt(name).await?.is_none() {
                missing.push(format!("{name} in {cluster}"));
            }
        }
    }
    Ok(if missing.is_empty() {
        Seen::Done(())
    } else {
        Seen::not_yet(format!("missing {missing:?}"))
    })
}

/// How many ConfigMaps the large Placement places.
const LARGE: usize = 3000;

#[tokio::test]
async fn a_placement_of_3000_objects_keeps_a_small_status() -> Result<()> {
    use futures::{StreamExt, TryStreamExt};
    // One member: 3,000 Works are enough to show the status stays bounded, and the hub is
    // shared with the other tests.
    let fleet = Fleet::builder("large").first_members(1).start().await?;
    let (hub, ns) = (&fleet.hub, fleet.ns.name());
    api::apply(
        hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "many", "namespace": ns},
                "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap",
                                                "labelSelector": {"matchLabels": {"many": "yes"}}}]}}),
        false,
    )
    .await??;
    let configmaps: Api<ConfigMap> = Api::namespaced(hub.clone(), ns);
    futures::stream::iter(0..LARGE)
        .map(|i| {
            let configmaps = configmaps.clone();
            async move {
                let cm: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("many-{i}"), "labels": {"many": "yes"}},
                    "data": {"index": i.to_string()},
                }))?;
                configmaps.create(&PostParams::default(), &cm).await?;
                Ok::<_, anyhow::Error>(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    let placements: Api<Placement> = Api::namespaced(hub.clone(), ns);
    let counts = |p: &Placement| {
        p.status
            .clone()
            .unwrap_or_default()
            .copies
            .unwrap_or_default()
    };
    wait_for(
        "every copy of the 3,000 ConfigMaps to be applied",
        Duration::from_secs(300),
        || async {
            let copies = counts(&placements.get("many").await?);
            Ok(if usize::try_from(copies.applied)? == LARGE {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("{copies:?}"))
            })
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    let env = Environment::get();
    let json =
        crate::api::kubectl(&env, &["-n", ns, "get", "placement", "many", "-o", "json"]).await?;
    ensure!(
        json.len() < 256 * 1024,
        "the Placement of {LARGE} objects is {} bytes",
        json.len()
    );
    let status = placements.get("many").await?.status.unwrap_or_default();
    ensure!(
        status.decisions.len() <= 100
            && status.omitted_decisions.unwrap_or(0) as usize + status.decisions.len() == LARGE,
        "at most 100 decisions listed, the rest counted: {} listed, {:?} omitted",
        status.decisions.len(),
        status.omitted_decisions
    );
    eprintln!(
        "{LARGE} objects placed: the Placement is {} bytes",
        json.len()
    );

    // All of them deleted at once: every copy leaves the member.
    configmaps
        .delete_collection(
            &DeleteParams::default(),
            &kube::api::ListParams::default().labels("many=yes"),
        )
        .await?;
    wait_for("every copy to leave", Duration::from_secs(300), || async {
        let copies = counts(&placements.get("many").await?);
        Ok(if copies.placed == 0 && copies.removing == 0 {
            Seen::Done(())
        } else {
            Seen::not_yet(format!("{copies:?}"))
        })
    })
    .await?;
    Ok(())
}

/// Which members run each pod of StatefulSet `name` (by ordinal), listing `first` before
/// `last`: a pod only ever leaves `last` (a member letting go), so a pod seen in one of `first`
/// and then in `last` ran in both at the same moment.
async fn ordinals_running(
    first: &[(String, Client)],
    last: &[(String, Client)],
    ns: &str,
    name: &str,
) -> Result<BTreeMap<u32, Vec<String>>> {
    let mut out: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for (cluster, client) in first.iter().chain(last) {
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        for pod in pods
            .list(&kube::api::ListParams::default().labels(&format!("app={name}")))
            .await?
        {
            let ordinal = pod
                .name_any()
                .strip_prefix(&format!("{name}-"))
                .and_then(|o| o.parse::<u32>().ok());
            if let Some(o) = ordinal {
                out.entry(o).or_default().push(cluster.clone());
            }
        }
    }
    Ok(out)
}

/// Waits until the hub StatefulSet `name` says `n` ready, and `kubectl rollout status` agrees.
async fn hub_statefulset_ready(
    env: &Environment,
    hub: &Client,
    ns: &str,
    name: &str,
    n: i32,
) -> Result<()> {
    let api: Api<StatefulSet> = Api::namespaced(hub.clone(), ns);
    wait_for(
        &format!("the hub StatefulSet to say {n} ready"),
        Duration::from_secs(120),
        || async {
            let s = api.get(name).await?.status.unwrap_or_default();
            Ok(if s.ready_replicas == Some(n) && s.replicas == n {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("{s:?}"))
            })
        },
    )
    .await?;
    let said = crate::api::kubectl(
        env,
        &[
            "-n",
            ns,
            "rollout",
            "status",
            &format!("statefulset/{name}"),
            "--timeout",
            "60s",
        ],
    )
    .await?;
    ensure!(said.contains("roll out complete"), "{said}");
    crate::api::kstatus_current(env, ns, "statefulset", name).await
}

#[tokio::test]
async fn a_divided_statefulset_runs_each_ordinal_once_and_moves_one_only_after_its_member_let_go()
-> Result<()> {
    let env = Environment::get();
    // The chart's splitter identity: it may read StatefulSets and write their hub status.
    let fleet = Fleet::builder("sts").start().await?;
    let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);
    for object in [
        json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
               "metadata": {"name": "spread", "namespace": ns},
               "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "StatefulSet"},
                                              {"apiVersion": "v1", "kind": "Service"}],
                        "replicaScheduling": {"type": "Divided", "division": "Even"}}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db", "namespace": ns},
               "spec": {"clusterIP": "None", "selector": {"app": "db"}, "ports": [{"port": 5432}]}}),
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": ns},
               "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                        "template": {"metadata": {"labels": {"app": "db"}},
                                     "spec": {"containers": [{"name": "db", "image": "registry.k8s.io/pause:3.10"}]}}}}),
    ] {
        api::apply(hub, &object, false).await??;
    }
    hub_statefulset_ready(&env, hub, ns, "db", 3)
        .await
        .map_err(|e| e.context(fleet.splitter.log()))?;
    let running = ordinals_running(members, &[], ns, "db").await?;
    ensure!(
        running.keys().copied().collect::<Vec<_>>() == [0, 1, 2]
            && running.values().all(|on| on.len() == 1),
        "each of db-0, db-1 and db-2 runs in exactly one member: {running:?}"
    );
    let on: BTreeMap<&String, usize> = members
        .iter()
        .map(|(c, _)| (c, running.values().filter(|on| on.contains(c)).count()))
        .collect();
    ensure!(on.values().all(|n| *n == 1), "one pod per member: {on:?}");

    // Drain the member that runs db-1: it lets go of the pod first, then another member runs it
    // — never both at once.
    let drained = running[&1][0].clone();
    let (stay, go): (Vec<_>, Vec<_>) = members.iter().cloned().partition(|(c, _)| *c != drained);
    fleet
        .clusters
        .patch(
            &drained,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": [{"key": "e2e.flotilla.dev/drain", "effect": "NoExecute"}]}})),
        )
        .await?;
    let twice = std::sync::Mutex::new(Vec::<String>::new());
    let moved = wait_for(
        "db-1 to move away from the drained member",
        Duration::from_secs(120),
        || async {
            let now = ordinals_running(&stay, &go, ns, "db").await?;
            if let Some((o, on)) = now.iter().find(|(_, on)| on.len() > 1)
                && let Ok(mut seen) = twice.lock()
            {
                seen.push(format!("db-{o} ran in {on:?} at once"));
            }
            let done = now.keys().copied().collect::<Vec<_>>() == [0, 1, 2]
                && !now.values().any(|on| on.contains(&drained));
            Ok(if done {
                Seen::Done(now)
            } else {
                Seen::not_yet(format!("{now:?}"))
            })
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    let twice = twice.into_inner().unwrap_or_default();
    ensure!(twice.is_empty(), "{twice:?}");
    ensure!(
        moved[&0] == running[&0] && moved[&2] == running[&2],
        "only db-1 moved: {running:?} -> {moved:?}"
    );
    hub_statefulset_ready(&env, hub, ns, "db", 3).await?;

    // Scaled up, the new ordinals are added and no pod moves.
    Api::<StatefulSet>::namespaced(hub.clone(), ns)
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await?;
    hub_statefulset_ready(&env, hub, ns, "db", 5).await?;
    let five = ordinals_running(&stay, &go, ns, "db").await?;
    ensure!(
        five.keys().copied().collect::<Vec<_>>() == [0, 1, 2, 3, 4]
            && five.values().all(|on| on.len() == 1)
            && (0..3).all(|o| five[&o] == moved[&o]),
        "5 ordinals once each, the first 3 where they were: {moved:?} -> {five:?}"
    );
    Ok(())
}

#[tokio::test]
async fn kubectl_rollout_history_and_undo_work_against_the_hub() -> Result<()> {
    let env = Environment::get();
    // The chart's splitter identity: it may keep the Deployments' ReplicaSet records.
    let fleet = Fleet::builder("undo").start().await?;
    let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);
    api::apply(
        hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "spread", "namespace": ns},
                "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                         "replicaScheduling": {"type": "Divided", "division": "Even"}}}),
        false,
    )
    .await??;
    let deployments: Api<Deployment> = Api::namespaced(hub.clone(), ns);
    let mut web = deployment(3)?;
    web.metadata.annotations = Some([("kubernetes.io/change-cause".into(), "first".into())].into());
    deployments.create(&PostParams::default(), &web).await?;
    let kubectl = |args: Vec<&str>| {
        let env = &env;
        let mut all = vec!["-n", ns];
        all.extend(args);
        let all: Vec<String> = all.into_iter().map(str::to_string).collect();
        async move {
            let args: Vec<&str> = all.iter().map(String::as_str).collect();
            crate::api::kubectl(env, &args).await
        }
    };
    let rolled_out = || async {
        kubectl(vec![
            "rollout",
            "status",
            "deployment/web",
            "--timeout",
            "90s",
        ])
        .await
        .map_err(|e| e.context(fleet.splitter.log()))
    };
    rolled_out().await?;
    crate::api::kstatus_current(&env, ns, "deployment", "web").await?;
    let history = wait_for(
        "kubectl rollout history to show revision 1",
        Duration::from_secs(30),
        || async {
            let said = kubectl(vec!["rollout", "history", "deployment/web"]).await?;
            Ok(if said.contains("first") {
                Seen::Done(said)
            } else {
                Seen::not_yet(said)
            })
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    ensure!(history.contains('1'), "{history}");

    // A new template: revision 2, the first one kept at 0 replicas.
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"annotations": {"kubernetes.io/change-cause": "second"}},
                "spec": {"template": {"spec": {"containers": [
                    {"name": "app", "image": "registry.k8s.io/pause:3.9"}]}}}})),
        )
        .await?;
    rolled_out().await?;
    let history = wait_for(
        "kubectl rollout history to show revisions 1 and 2",
        Duration::from_secs(30),
        || async {
            let said = kubectl(vec!["rollout", "history", "deployment/web"]).await?;
            Ok(if said.contains("first") && said.contains("second") {
                Seen::Done(said)
            } else {
                Seen::not_yet(said)
            })
        },
    )
    .await?;
    eprintln!("{history}");
    let described = kubectl(vec!["describe", "deployment", "web"]).await?;
    ensure!(
        described.contains("NewReplicaSet:") && !described.contains("NewReplicaSet:    <none>"),
        "kubectl describe names the current ReplicaSet:\n{described}"
    );

    // Undo: the hub Deployment gets the first template back, and so do the members.
    let said = kubectl(vec!["rollout", "undo", "deployment/web"]).await?;
    ensure!(said.contains("rolled back"), "{said}");
    rolled_out().await?;
    let back = wait_for(
        "every member to run the first image again",
        Duration::from_secs(60),
        || async {
            // Every member's image (`None`: no copy there), so that a wait that times out says
            // which member lacks what.
            let mut images = BTreeMap::new();
            for (cluster, client) in members {
                let d = Api::<Deployment>::namespaced(client.clone(), ns)
                    .get_opt("web")
                    .await?;
                let image = d.and_then(|d| {
                    d.spec
                        .template
                        .spec
                        .and_then(|s| s.containers.first().and_then(|c| c.image.clone()))
                });
                images.insert(cluster.clone(), image);
            }
            Ok(
                if images
                    .values()
                    .all(|i| i.as_deref() == Some("registry.k8s.io/pause:3.10"))
                {
                    Seen::Done(())
                } else {
                    Seen::not_yet(format!("{images:?}"))
                },
            )
        },
    )
    .await;
    if let Err(e) = back {
        // What the Placement decided, and the splitter's log, for a copy that is missing.
        let status = match Api::<Placement>::namespaced(hub.clone(), ns)
            .get("spread")
            .await
        {
            Ok(p) => serde_json::to_string_pretty(&p.status)?,
            Err(e) => format!("the Placement could not be read: {e}"),
        };
        return Err(e.context(format!(
            "Placement spread: {status}\n{}",
            fleet.splitter.log()
        )));
    }
    let history = wait_for(
        "the first template to come back as revision 3",
        Duration::from_secs(30),
        || async {
            let said = kubectl(vec!["rollout", "history", "deployment/web"]).await?;
            let revisions: Vec<&str> = said
                .lines()
                .filter_map(|l| l.split_whitespace().next())
                .filter(|w| w.chars().all(|c| c.is_ascii_digit()))
                .collect();
            Ok(if revisions == ["2", "3"] {
                Seen::Done(said)
            } else {
                Seen::not_yet(said)
            })
        },
    )
    .await?;
    ensure!(history.contains("first"), "{history}");
    Ok(())
}

#[tokio::test]
async fn helm_install_wait_of_a_stock_chart_succeeds_against_the_hub() -> Result<()> {
    let env = Environment::get();
    let fleet = Fleet::builder("helm").start().await?;
    let (hub, ns) = (&fleet.hub, fleet.ns.name());
    api::apply(
        hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "app", "namespace": ns},
                "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"},
                                               {"apiVersion": "v1", "kind": "Service"},
                                               {"apiVersion": "v1", "kind": "ServiceAccount"}],
                         "replicaScheduling": {"type": "Divided", "division": "Even"}}}),
        false,
    )
    .await??;
    let dir = flotilla_e2e::scratch_dir().join(format!("helm-create-{}", random_suffix()));
    std::fs::create_dir_all(&dir)?;
    let chart = dir.join("shop");
    let chart_path = chart.to_string_lossy().into_owned();
    chart::helm_run(&["create", &chart_path]).await?;
    let kubeconfig = env.hub.kubeconfig.to_string_lossy().into_owned();
    let installed = chart::helm_run(&[
        "install",
        "shop",
        &chart_path,
        "--kubeconfig",
        &kubeconfig,
        "--namespace",
        ns,
        "--set",
        "replicaCount=3",
        "--wait",
        "--timeout",
        "120s",
    ])
    .await
    .map_err(|e| e.context(fleet.splitter.log()));
    let _ = std::fs::remove_dir_all(&dir);
    let installed = installed?;
    ensure!(installed.contains("STATUS: deployed"), "{installed}");
    let d = Api::<Deployment>::namespaced(hub.clone(), ns)
        .get("shop")
        .await?;
    let ready = d.status.and_then(|s| s.ready_replicas);
    ensure!(
        ready == Some(3),
        "3 replicas ready across the members: {ready:?}"
    );
    for kind in ["deployment", "service", "serviceaccount"] {
        crate::api::kstatus_current(&env, ns, kind, "shop").await?;
    }
    Ok(())
}

#[tokio::test]
async fn a_hub_deployment_a_member_refuses_is_not_current_for_gitops_tools() -> Result<()> {
    let env = Environment::get();
    let fleet = Fleet::builder("refuse").start().await?;
    let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);
    // The first member has a Deployment `web` of its own: Flotilla's copy is refused there.
    let (refusing, member) = members[0].clone();
    let theirs: Api<Deployment> = Api::namespaced(member, ns);
    theirs
        .create(&PostParams::default(), &deployment(1)?)
        .await?;
    api::apply(
        hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "spread", "namespace": ns},
                "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                         "replicaScheduling": {"type": "Divided", "division": "Even"}}}),
        false,
    )
    .await??;
    Api::<Deployment>::namespaced(hub.clone(), ns)
        .create(&PostParams::default(), &deployment(3)?)
        .await?;
    wait_for(
        "the refusing member's copy to be reported in conflict",
        Duration::from_secs(60),
        || async {
            let works = works_holding(&fleet, &refusing, "Deployment", "web").await?;
            let reasons: Vec<Option<String>> = works
                .iter()
                .flat_map(|w| w.status.iter().flat_map(|s| s.manifests.iter()))
                .map(|m| m.reason.clone())
                .collect();
            Ok(
                if reasons
                    .iter()
                    .any(|r| r.as_deref() == Some(reasons::CONFLICT))
                {
                    Seen::Done(())
                } else {
                    Seen::not_yet(format!("{reasons:?}"))
                },
            )
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    // The other members run their share; GitOps tools still see the hub Deployment in progress.
    flotilla_e2e::holds_for(
        "kstatus to keep the hub Deployment out of Current while a member refuses its copy",
        Duration::from_secs(6),
        || async {
            let (verdict, message) = crate::api::kstatus(&env, ns, "deployment", "web").await?;
            Ok(if verdict == "InProgress" || verdict == "Failed" {
                Ok(())
            } else {
                Err(format!("{verdict}: {message}"))
            })
        },
    )
    .await?;
    // Their Deployment goes: Flotilla's copy is applied, and the hub Deployment is Current.
    theirs.delete("web", &DeleteParams::default()).await?;
    crate::api::kstatus_current(&env, ns, "deployment", "web")
        .await
        .map_err(|e| e.context(fleet.splitter.log()))?;
    Ok(())
}

#[tokio::test]
async fn a_daemonset_runs_on_every_members_nodes_and_the_hub_counts_them_all() -> Result<()> {
    let env = Environment::get();
    // The chart's splitter identity: it may read DaemonSets and write their hub status.
    let fleet = Fleet::builder("ds").start().await?;
    let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);
    for object in [
        json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
               "metadata": {"name": "agents", "namespace": ns},
               "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "DaemonSet"}]}}),
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": ns},
               "spec": {"selector": {"matchLabels": {"app": "agent"}},
                        "template": {"metadata": {"labels": {"app": "agent"}},
                                     "spec": {"containers": [{"name": "agent", "image": "registry.k8s.io/pause:3.10"}]}}}}),
    ] {
        api::apply(hub, &object, false).await??;
    }
    // Every member's DaemonSet runs a pod per node of that member; the hub counts them all.
    let expected = wait_for(
        "every member's DaemonSet to run on all its nodes",
        Duration::from_secs(90),
        || async {
            let mut total = 0;
            let mut short = Vec::new();
            for (cluster, client) in members {
                let status =
                    Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(client.clone(), ns)
                        .get_opt("agent")
                        .await?
                        .and_then(|d| d.status);
                match status {
                    Some(s)
                        if s.desired_number_scheduled > 0
                            && s.number_available == Some(s.desired_number_scheduled) =>
                    {
                        total += s.desired_number_scheduled;
                    }
                    other => short.push(format!("{cluster}: {other:?}")),
                }
            }
            Ok(Seen::unless(&short, total))
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    let said = crate::api::kubectl(
        &env,
        &[
            "-n",
            ns,
            "rollout",
            "status",
            "daemonset/agent",
            "--timeout",
            "60s",
        ],
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    ensure!(said.contains("successfully rolled out"), "{said}");
    // The hub's sum follows each member's report of its copy: polled, not read once.
    let daemonsets = Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(hub.clone(), ns);
    wait_for(
        &format!("the hub to count the pods of every member ({expected})"),
        Duration::from_secs(60),
        || async {
            let status = daemonsets.get("agent").await?.status.unwrap_or_default();
            Ok(
                if status.desired_number_scheduled == expected
                    && status.number_available == Some(expected)
                {
                    Seen::Done(())
                } else {
                    Seen::not_yet(format!("{status:?}"))
                },
            )
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    crate::api::kstatus_current(&env, ns, "daemonset", "agent").await?;
    Ok(())
}

/// The `spec.minAvailable` of each member's copy of PodDisruptionBudget `name`.
async fn budgets(members: &[(String, Client)], ns: &str, name: &str) -> Result<Vec<i64>> {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let mut out = Vec::new();
    for (_, client) in members {
        let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
        if let Some(pdb) = api.get_opt(name).await? {
            out.push(match pdb.spec.and_then(|s| s.min_available) {
                Some(IntOrString::Int(n)) => i64::from(n),
                _ => -1,
            });
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// A PersistentVolumeClaim, a LoadBalancer Service, a PodDisruptionBudget and a
/// HorizontalPodAutoscaler through the hub: the claim is `Bound` on the hub only once every
/// member bound its copy to a volume of its own (the hub's binding never travels), the hub
/// Service and Ingress list the load-balancer ingress of every member, a budget's `minAvailable` and an
/// autoscaler's `maxReplicas` are divided among the members like replicas. kstatus says the
/// claim and the Service are `Current` only then.
#[tokio::test]
async fn claims_load_balancers_and_budgets_show_every_member_on_the_hub() -> Result<()> {
    let fleet = Fleet::builder("kinds").start().await?;
    let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);
    let env = Environment::get();
    const CLASS: &str = "flotilla-e2e-manual";
    // A volume in a member, bound in advance to the test's claim (no other claim takes it).
    let volume = |i: usize| {
        json!({"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": format!("{ns}-data-{i}")},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "storageClassName": CLASS, "hostPath": {"path": format!("/tmp/{ns}-{i}")},
                     "claimRef": {"namespace": ns, "name": "data"}}})
    };
    let mut volumes: Vec<ClusterScopedObjects> = Vec::new();
    for (i, (_, client)) in members.iter().enumerate() {
        let mut owned = ClusterScopedObjects::new(&env.members[i]);
        owned.add(
            kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::PersistentVolume>(&()),
            format!("{ns}-data-{i}"),
        );
        volumes.push(owned);
        // The last member gets its volume later: until then its copy stays Pending.
        if i + 1 < members.len() {
            api::apply(client, &volume(i), false).await??;
        }
    }
    api::apply(
        hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
            "metadata": {"name": "kinds", "namespace": ns},
            "spec": {"replicaScheduling": {"type": "Divided", "division": "Even"},
                     "resourceSelectors": [
                {"apiVersion": "v1", "kind": "PersistentVolumeClaim"},
                {"apiVersion": "v1", "kind": "Service"},
                {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget"},
                {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler"},
                {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress"}]}}),
        false,
    )
    .await??;
    for object in [
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": ns},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": CLASS,
                     "resources": {"requests": {"storage": "1Gi"}}}}),
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {"type": "LoadBalancer", "selector": {"app": "web"},
                     "ports": [{"port": 80, "targetPort": 8080}]}}),
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {"minAvailable": 5, "selector": {"matchLabels": {"app": "web"}}}}),
        json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {"minReplicas": 3, "maxReplicas": 10,
                     "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}}),
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}}),
    ] {
        api::apply(hub, &object, false).await??;
    }

    // The budget: 5 pods kept available in the fleet, as 2 + 2 + 1.
    wait_for("the budget divided", Duration::from_secs(60), || async {
        let b = budgets(members, ns, "web").await?;
        Ok(if b == [1, 2, 2] {
            Seen::Done(())
        } else {
            Seen::not_yet(format!("minAvailable per member: {b:?}"))
        })
    })
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;

    // The autoscaler: at most 10 replicas in the fleet, each member's at least 1.
    wait_for(
        "the autoscaler's bounds divided",
        Duration::from_secs(60),
        || async {
            use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
            let mut bounds = Vec::new();
            for (_, client) in members {
                let api: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), ns);
                if let Some(spec) = api.get_opt("web").await?.map(|h| h.spec) {
                    bounds.push((spec.min_replicas.unwrap_or(1), spec.max_replicas));
                }
            }
            bounds.sort_unstable();
            Ok(if bounds == [(1, 3), (1, 3), (1, 4)] {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("(min, max) per member: {bounds:?}"))
            })
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;

    // The claim: bound in two members, pending in the third, so pending on the hub.
    let claim_phase = |client: Client| async move {
        let api: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
            Api::namespaced(client, ns);
        Ok::<_, anyhow::Error>(
            api.get_opt("data")
                .await?
                .and_then(|c| c.status?.phase)
                .unwrap_or_default(),
        )
    };
    wait_for(
        "two copies bound, one pending",
        Duration::from_secs(60),
        || async {
            let mut phases = Vec::new();
            for (_, client) in members {
                phases.push(claim_phase(client.clone()).await?);
            }
            Ok(if phases == ["Bound", "Bound", "Pending"] {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("{phases:?}"))
            })
        },
    )
    .await?;
    // Long enough for the splitter to have reported the copies.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (verdict, message) = crate::api::kstatus(&env, ns, "pvc", "data").await?;
    ensure!(
        verdict != "Current" && claim_phase(hub.clone()).await? == "Pending",
        "a claim one member has not bound is not ready on the hub: {verdict} {message}"
    );
    api::apply(&members[2].1, &volume(2), false).await??;
    wait_for("the hub claim bound", Duration::from_secs(60), || async {
        let phase = claim_phase(hub.clone()).await?;
        Ok(if phase == "Bound" {
            Seen::Done(())
        } else {
            Seen::not_yet(phase)
        })
    })
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    crate::api::kstatus_current(&env, ns, "pvc", "data").await?;
    for (cluster, client) in members {
        let copy: k8s_openapi::api::core::v1::PersistentVolumeClaim =
            Api::namespaced(client.clone(), ns).get("data").await?;
        let bound_to = copy.spec.and_then(|s| s.volume_name).unwrap_or_default();
        ensure!(
            bound_to.starts_with(&format!("{ns}-data-")),
            "{cluster}: bound to its own volume: {bound_to}"
        );
    }

    // The load balancers: each member's (as its cloud's or ingress controller would report
    // it) on the hub, for the Service and for the Ingress.
    let service = kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&());
    let ingress = kube::api::ApiResource::erase::<k8s_openapi::api::networking::v1::Ingress>(&());
    for resource in [&service, &ingress] {
        for (i, (_, client)) in members.iter().take(2).enumerate() {
            let copies: Api<kube::api::DynamicObject> =
                Api::namespaced_with(client.clone(), ns, resource);
            wait_for("the member's copy", Duration::from_secs(30), || async {
                Ok(match copies.get_opt("web").await? {
                    Some(_) => Seen::Done(()),
                    None => Seen::not_yet("not there"),
                })
            })
            .await?;
            copies
                .patch_status(
                    "web",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"loadBalancer": {
                        "ingress": [{"ip": format!("192.0.2.{}", i + 10)}]}}})),
                )
                .await?;
        }
        let hub_api: Api<kube::api::DynamicObject> =
            Api::namespaced_with(hub.clone(), ns, resource);
        wait_for("the hub's ingress", Duration::from_secs(60), || async {
            let object = hub_api.get("web").await?;
            let ips: Vec<&str> = object.data["status"]["loadBalancer"]["ingress"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|i| i["ip"].as_str())
                .collect();
            Ok(if ips == ["192.0.2.10", "192.0.2.11"] {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("{} {ips:?}", resource.kind))
            })
        })
        .await
        .map_err(|e| e.context(fleet.splitter.log()))?;
    }
    crate::api::kstatus_current(&env, ns, "service", "web").await?;
    drop(volumes);
    Ok(())
}

/// A divided StatefulSet whose member hangs (its apiserver stopped with SIGSTOP: it takes
/// connections and never answers): the hub says 2 of 3 ready, and the hung member's ordinal runs
/// nowhere else — it may still be running there — however long it hangs. Deleting its Cluster
/// says the member is gone: its ordinal then runs on one of the others, once, and the hub says
/// 3 of 3 again.
#[tokio::test]
async fn a_hung_members_statefulset_ordinal_runs_nowhere_else_until_its_cluster_is_deleted()
-> Result<()> {
    let env = Environment::get();
    let (scratch, infos) = two_and_a_scratch_member(&env, "sts-hang").await?;
    let fleet = Fleet::builder("sts-hang")
        .members(infos)
        .grace("6s")
        .start()
        .await?;
    let (hub, ns) = (&fleet.hub, fleet.ns.name());
    for object in [
        json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
               "metadata": {"name": "spread", "namespace": ns},
               "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "StatefulSet"}],
                        "replicaScheduling": {"type": "Divided", "division": "Even"},
                        "failover": {"tolerationSeconds": 2}}}),
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": ns},
               "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                        "template": {"metadata": {"labels": {"app": "db"}},
                                     "spec": {"containers": [{"name": "db", "image": "registry.k8s.io/pause:3.10"}]}}}}),
    ] {
        api::apply(hub, &object, false).await??;
    }
    hub_statefulset_ready(&env, hub, ns, "db", 3)
        .await
        .map_err(|e| e.context(fleet.splitter.log()))?;
    let (live, hung) = fleet.members.split_at(2);
    let hung_name = hung[0].0.clone();
    let running = ordinals_running(&fleet.members, &[], ns, "db").await?;
    let held: Vec<u32> = running
        .iter()
        .filter(|(_, on)| on.contains(&hung_name))
        .map(|(o, _)| *o)
        .collect();
    ensure!(held.len() == 1, "one ordinal on each member: {running:?}");

    env.clusters_sh(&["pause-member", &scratch.info.name])
        .await?;
    let api: Api<StatefulSet> = Api::namespaced(hub.clone(), ns);
    wait_for(
        "the hub to count the hung member's pod as not ready",
        Duration::from_secs(90),
        || async {
            let s = api.get("db").await?.status.unwrap_or_default();
            Ok(if s.ready_replicas == Some(2) {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("{s:?}"))
            })
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    // Well past the grace period and the toleration: the ordinal stays where it may still run.
    flotilla_e2e::holds_for(
        &format!("db-{} to run on no live member", held[0]),
        Duration::from_secs(20),
        || async {
            let now = ordinals_running(live, &[], ns, "db").await?;
            Ok(if now.contains_key(&held[0]) {
                Err(format!("db-{} runs in a live member: {now:?}", held[0]))
            } else {
                Ok(())
            })
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;

    // The Cluster is deleted: the member is gone, and its ordinal runs once on the others.
    fleet
        .clusters
        .delete(&hung_name, &DeleteParams::default())
        .await?;
    wait_for(
        "the hung member's ordinal to run on a live member",
        Duration::from_secs(120),
        || async {
            let now = ordinals_running(live, &[], ns, "db").await?;
            Ok(
                if now.keys().copied().collect::<Vec<_>>() == [0, 1, 2]
                    && now.values().all(|on| on.len() == 1)
                {
                    Seen::Done(())
                } else {
                    Seen::not_yet(format!("{now:?}"))
                },
            )
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    let s = api.get("db").await?.status.unwrap_or_default();
    wait_for(
        "the hub to say 3 of 3 ready",
        Duration::from_secs(60),
        || async {
            let s = api.get("db").await?.status.unwrap_or_default();
            Ok(if s.ready_replicas == Some(3) {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("{s:?}"))
            })
        },
    )
    .await
    .map_err(|e| e.context(format!("{s:?}")))?;
    env.clusters_sh(&["resume-member", &scratch.info.name])
        .await?;
    drop(fleet);
    drop(scratch);
    Ok(())
}

/// A ReplicaSet applied to the hub on its own (not a Deployment's): its replicas are divided
/// like a Deployment's, and the hub ReplicaSet counts the pods of every member, so kstatus says
/// `Current` once they all run.
#[tokio::test]
async fn a_standalone_replicaset_is_divided_and_the_hub_counts_its_pods() -> Result<()> {
    let env = Environment::get();
    let fleet = Fleet::builder("rs").start().await?;
    let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);
    for object in [
        json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
               "metadata": {"name": "spread", "namespace": ns},
               "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "ReplicaSet"}],
                        "replicaScheduling": {"type": "Divided", "division": "Even"}}}),
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "cache", "namespace": ns},
               "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "cache"}},
                        "template": {"metadata": {"labels": {"app": "cache"}},
                                     "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}}),
    ] {
        api::apply(hub, &object, false).await??;
    }
    let api: Api<ReplicaSet> = Api::namespaced(hub.clone(), ns);
    wait_for(
        "the hub ReplicaSet 4 of 4 ready",
        Duration::from_secs(90),
        || async {
            let s = api.get("cache").await?.status.unwrap_or_default();
            Ok(
                if (s.replicas, s.ready_replicas, s.available_replicas) == (4, Some(4), Some(4)) {
                    Seen::Done(())
                } else {
                    Seen::not_yet(format!("{s:?}"))
                },
            )
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    // Evenly over the three members. (A member that cannot take the type yet — its API not
    // imported, say, on a loaded machine — gets its share once it can: the hub may count 4 of
    // 4 on two members first.)
    wait_for(
        "4 replicas divided 1 + 1 + 2 over the three members",
        Duration::from_secs(60),
        || async {
            let shares =
                replicas_in_members(members, ns, "cache", |r: &ReplicaSet| r.spec.replicas).await?;
            let mut counts: Vec<i32> = members
                .iter()
                .map(|(cluster, _)| shares.get(cluster).copied().unwrap_or(0))
                .collect();
            counts.sort_unstable();
            Ok(if counts == [1, 1, 2] {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("replicas per member with a copy: {shares:?}"))
            })
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    crate::api::kstatus_current(&env, ns, "replicaset", "cache").await
}

/// A tenant cannot take over a member's own objects: a Placement's `conflictPolicy: Adopt`
/// counts as `Abort` until an admin annotates the hub namespace `flotilla.dev/allow-adopt`. The
/// member's ConfigMap of the same name is left as its users made it, and the Placement says why;
/// once allowed, Flotilla takes it over.
#[tokio::test]
async fn a_tenants_adopt_takes_over_nothing_until_an_admin_allows_it() -> Result<()> {
    let fleet = Fleet::builder("adopt").start().await?;
    let (hub, ns, members) = (&fleet.hub, fleet.ns.name(), &fleet.members);
    let (first, first_client) = &members[0];
    let theirs: Api<ConfigMap> = Api::namespaced(first_client.clone(), ns);
    theirs
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "settings"}, "data": {"owner": "member"}}),
            )?,
        )
        .await?;
    api::apply(
        hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "grab", "namespace": ns},
                "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "settings"}],
                         "conflictPolicy": "Adopt"}}),
        false,
    )
    .await??;
    api::apply(
        hub,
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings", "namespace": ns}, "data": {"owner": "tenant"}}),
        false,
    )
    .await??;
    let placements: Api<Placement> = Api::namespaced(hub.clone(), ns);
    wait_scheduled(&placements, "grab", "say Adopt is not allowed", |c| {
        c.reason == reasons::ADOPT_NOT_ALLOWED && c.message.contains("flotilla.dev/allow-adopt")
    })
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    // The other members get the tenant's ConfigMap; the first keeps its own.
    for (cluster, client) in &members[1..] {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        wait_for(
            &format!("the tenant's ConfigMap in {cluster}"),
            Duration::from_secs(60),
            || async {
                let owner = api
                    .get_opt("settings")
                    .await?
                    .and_then(|c| c.data)
                    .and_then(|d| d.get("owner").cloned());
                Ok(match owner.as_deref() {
                    Some("tenant") => Seen::Done(()),
                    other => Seen::not_yet(format!("{other:?}")),
                })
            },
        )
        .await?;
    }
    flotilla_e2e::holds_for(
        "the member's own ConfigMap to stay its own",
        Duration::from_secs(8),
        || async {
            let data = theirs.get("settings").await?.data.unwrap_or_default();
            Ok(if data.get("owner").map(String::as_str) == Some("member") {
                Ok(())
            } else {
                Err(format!("{first}: {data:?}"))
            })
        },
    )
    .await?;

    // An admin allows it: the member's ConfigMap is Flotilla's now.
    Api::<Namespace>::all(hub.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"flotilla.dev/allow-adopt": "true"}}}),
            ),
        )
        .await?;
    wait_for(
        &format!("the tenant's ConfigMap to take over {first}'s"),
        Duration::from_secs(60),
        || async {
            let data = theirs.get("settings").await?.data.unwrap_or_default();
            Ok(match data.get("owner").map(String::as_str) {
                Some("tenant") => Seen::Done(()),
                other => Seen::not_yet(format!("{other:?}")),
            })
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    Ok(())
}
