//! A namespace's copy limit: each placed object is copied once per member into Works in the
//! hub's etcd, outside any quota of the namespace, so the hub admin bounds the copies a
//! namespace's Placements keep (`flotilla.dev/max-copies`, `--max-copies-per-namespace`).

use std::time::Duration;

use anyhow::{Result, ensure};
use flotilla_api::{Placement, reasons};
use flotilla_e2e::fleet::Fleet;
use flotilla_e2e::{Seen, api, holds_for, wait_for};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

/// The data of ConfigMap `name` in every member (`None` where it is missing).
async fn member_data(fleet: &Fleet, name: &str) -> Result<Vec<Option<String>>> {
    let mut out = Vec::new();
    for (_, client) in &fleet.members {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), fleet.ns.name());
        out.push(
            api.get_opt(name)
                .await?
                .and_then(|c| c.data)
                .and_then(|d| d.get("v").cloned()),
        );
    }
    Ok(out)
}

/// Waits until ConfigMap `name` has data `want` in every member (`None`: in none).
async fn wait_members(fleet: &Fleet, name: &str, want: Option<&str>) -> Result<()> {
    let expected = vec![want.map(str::to_string); fleet.members.len()];
    wait_for(
        &format!("ConfigMap {name} as {want:?} in every member"),
        Duration::from_secs(60),
        || async {
            let data = member_data(fleet, name).await?;
            Ok(if data == expected {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("{data:?}"))
            })
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))
}

/// Waits until Placement `settings` says `Scheduled=False, reason=CopyQuotaExceeded` with a
/// message that contains `says`.
async fn quota_exceeded(fleet: &Fleet, says: &str) -> Result<()> {
    let placements: Api<Placement> = Api::namespaced(fleet.hub.clone(), fleet.ns.name());
    wait_for(
        &format!("the Placement to say CopyQuotaExceeded ({says})"),
        Duration::from_secs(30),
        || async {
            let p = placements.get("settings").await?;
            let scheduled = p
                .status
                .iter()
                .flat_map(|s| s.conditions.iter())
                .find(|c| c.type_ == "Scheduled")
                .cloned();
            Ok(match scheduled {
                Some(c)
                    if c.status == "False"
                        && c.reason == reasons::COPY_QUOTA_EXCEEDED
                        && c.message.contains(says) =>
                {
                    Seen::Done(())
                }
                other => Seen::not_yet(format!("{other:?}")),
            })
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))
}

async fn set_limit(hub: &Client, ns: &str, limit: &str) -> Result<()> {
    Api::<Namespace>::all(hub.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"flotilla.dev/max-copies": limit}}})),
        )
        .await?;
    Ok(())
}

async fn configmap(hub: &Client, ns: &str, name: &str, value: &str) -> Result<()> {
    api::apply(
        hub,
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": ns, "labels": {"quota": "yes"}},
                "data": {"v": value}}),
        false,
    )
    .await??;
    Ok(())
}

/// With a limit of 4 copies and three members, a second ConfigMap is placed nowhere and the
/// Placement says `CopyQuotaExceeded` (with an Event), while the first one's copies stay and
/// follow its changes; raising the limit places the second one.
#[tokio::test]
async fn a_namespace_beyond_its_copy_limit_places_nothing_new_and_keeps_what_it_has() -> Result<()>
{
    let fleet = Fleet::builder("quota").start().await?;
    let (hub, ns) = (&fleet.hub, fleet.ns.name());
    let none = vec![None; fleet.members.len()];
    set_limit(hub, ns, "4").await?;
    api::apply(
        hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "settings", "namespace": ns},
                "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap",
                                                "labelSelector": {"matchLabels": {"quota": "yes"}}}]}}),
        false,
    )
    .await??;
    configmap(hub, ns, "first", "1").await?;
    wait_members(&fleet, "first", Some("1")).await?;

    configmap(hub, ns, "second", "1").await?;
    quota_exceeded(&fleet, "limit of 4").await?;
    // The first one's copies follow it; the second one goes nowhere.
    configmap(hub, ns, "first", "2").await?;
    wait_members(&fleet, "first", Some("2")).await?;
    holds_for(
        "the second ConfigMap to stay off the members",
        Duration::from_secs(5),
        || async {
            let data = member_data(&fleet, "second").await?;
            Ok(if data == none {
                Ok(())
            } else {
                Err(format!("{data:?}"))
            })
        },
    )
    .await?;
    let events = Api::<Event>::namespaced(hub.clone(), ns)
        .list(&ListParams::default().fields("involvedObject.name=settings"))
        .await?;
    ensure!(
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some(reasons::COPY_QUOTA_EXCEEDED)),
        "a Warning Event says why: {:?}",
        events.items.iter().map(|e| &e.reason).collect::<Vec<_>>()
    );

    // The admin raises the limit: the second one is placed.
    set_limit(hub, ns, "6").await?;
    wait_members(&fleet, "second", Some("1")).await?;
    Ok(())
}

/// A namespace's byte budget (`flotilla.dev/max-copy-bytes`): copies count their bytes once per
/// member. Forty 1 MiB ConfigMaps over 50 members would fill the hub's etcd for every team; here,
/// with a budget of one and a half big ConfigMaps' copies, a second big one is placed nowhere
/// (`CopyQuotaExceeded`), the first one growing beyond the budget is not written (its members
/// keep what they have), shrinking it is, and then the second fits and is placed.
#[tokio::test]
async fn a_namespace_beyond_its_byte_budget_writes_nothing_new_or_bigger() -> Result<()> {
    let fleet = Fleet::builder("bytes").start().await?;
    let (hub, ns) = (&fleet.hub, fleet.ns.name());
    let members = fleet.members.len() as u64;
    let big = |tag: &str, size: usize| format!("{tag}{}", "x".repeat(size));
    let budget = |bytes: u64| async move {
        Api::<Namespace>::all(hub.clone())
            .patch(
                ns,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    "flotilla.dev/max-copy-bytes": bytes.to_string()}}})),
            )
            .await
    };
    budget(members * 75_000).await?;
    api::apply(
        hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "settings", "namespace": ns},
                "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap",
                                                "labelSelector": {"matchLabels": {"quota": "yes"}}}]}}),
        false,
    )
    .await??;
    let first = big("a1", 50_000);
    configmap(hub, ns, "first", &first).await?;
    wait_members(&fleet, "first", Some(&first)).await?;

    configmap(hub, ns, "second", &big("b1", 50_000)).await?;
    quota_exceeded(&fleet, "flotilla.dev/max-copy-bytes").await?;
    let none = vec![None; fleet.members.len()];
    let stays = |name: &'static str, want: Vec<Option<String>>| {
        let fleet = &fleet;
        async move {
            holds_for(
                &format!("ConfigMap {name} to stay as it is in the members"),
                Duration::from_secs(5),
                || async {
                    let data = member_data(fleet, name).await?;
                    Ok(if data == want {
                        Ok(())
                    } else {
                        Err(format!(
                            "{} bytes",
                            data.iter().flatten().map(String::len).sum::<usize>()
                        ))
                    })
                },
            )
            .await
        }
    };
    stays("second", none).await?;

    // Growing the first beyond the budget: not written; shrinking it: written.
    configmap(hub, ns, "first", &big("a2", 100_000)).await?;
    quota_exceeded(&fleet, "flotilla.dev/max-copy-bytes").await?;
    stays("first", vec![Some(first.clone()); fleet.members.len()]).await?;
    configmap(hub, ns, "first", "small").await?;
    wait_members(&fleet, "first", Some("small")).await?;

    // With the first one small again, the second fits: it is placed.
    wait_members(&fleet, "second", Some(&big("b1", 50_000))).await?;
    Ok(())
}
