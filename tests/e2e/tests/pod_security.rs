//! Pod Security by default (design rule 9: a tenant gets nothing in a member that it could not do
//! on the hub). The hub's own Pod Security admission never sees the members' pods; the splitter
//! judges each placed pod template against the level of its hub namespace — `baseline` when the
//! namespace says none, as a new namespace does — in a namespace of the chart's own, so that
//! nothing of the tenant's namespace (a LimitRange, a quota, a missing ServiceAccount) can turn a
//! refusal into a pass, and only a definite yes places a workload. The controllers run with the
//! chart's identities.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Result, ensure};
use flotilla_api::{Placement, reasons};
use flotilla_e2e::{Seen, api, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::splitter::Fleet;

const ENFORCE: &str = "pod-security.kubernetes.io/enforce";

/// A Deployment of one replica in `ns` with pod spec `pod`.
fn deployment(ns: &str, name: &str, pod: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}}, "spec": pod}}})
}

/// A pod that owns its node: the host's PIDs, its root filesystem, privileged, as root.
fn host_escape(resources: Value) -> Value {
    json!({"hostPID": true,
           "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
           "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                           "resources": resources,
                           "securityContext": {"privileged": true, "runAsUser": 0},
                           "volumeMounts": [{"name": "root", "mountPath": "/host"}]}]})
}

/// Which members have Deployment `name` of `ns`.
async fn copies(fleet: &Fleet, ns: &str, name: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for (cluster, client) in &fleet.members {
        if Api::<Deployment>::namespaced(client.clone(), ns)
            .get_opt(name)
            .await?
            .is_some()
        {
            out.push(cluster.clone());
        }
    }
    Ok(out)
}

/// Places the namespace's Deployments everywhere; waits until `good` runs in every member and
/// the Placement says `escape` violates Pod Security at `level`; then `escape` must be in none.
async fn held_back_while_good_runs(fleet: &Fleet, ns: &str, level: &str) -> Result<()> {
    let members = fleet.members.len();
    wait_for("good in every member", Duration::from_secs(60), || async {
        let n = copies(fleet, ns, "good").await?.len();
        Ok(if n == members {
            Seen::Done(())
        } else {
            Seen::not_yet(format!("{n} copies"))
        })
    })
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    let placements: Api<Placement> = Api::namespaced(fleet.hub.clone(), ns);
    wait_for(
        "the Placement to name escape's Pod Security violation",
        Duration::from_secs(60),
        || async {
            let scheduled = placements
                .get("apps")
                .await?
                .status
                .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Scheduled"));
            Ok(match scheduled {
                Some(c)
                    if c.reason == reasons::POD_SECURITY_VIOLATION
                        && c.message.contains("Deployment escape")
                        && c.message.contains(&format!("\"{level}:")) =>
                {
                    Seen::Done(())
                }
                other => Seen::not_yet(format!("{other:?}")),
            })
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    let escaped = copies(fleet, ns, "escape").await?;
    ensure!(escaped.is_empty(), "escape runs in {escaped:?}");
    Ok(())
}

fn placement(ns: &str) -> Value {
    json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
           "metadata": {"name": "apps", "namespace": ns},
           "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                    "replicaScheduling": {"type": "Duplicated"}}})
}

fn good() -> Value {
    json!({"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]})
}

/// A new hub namespace has no Pod Security label (the quick start's `demo` neither): its
/// workloads are judged at `baseline`, and the member namespaces Flotilla creates for it enforce
/// `baseline` too. A host escape runs nowhere; an ordinary Deployment runs everywhere.
#[tokio::test]
async fn an_unlabelled_hub_namespace_enforces_baseline_and_a_host_escape_runs_nowhere() -> Result<()>
{
    let fleet = Fleet::start_with_hub_namespace("psa-default", BTreeMap::new()).await?;
    let ns = fleet
        .other
        .as_ref()
        .map(|o| o.name().to_string())
        .unwrap_or_default();
    api::apply(&fleet.hub, &placement(&ns), false).await??;
    api::apply(&fleet.hub, &deployment(&ns, "good", good()), false).await??;
    api::apply(
        &fleet.hub,
        &deployment(&ns, "escape", host_escape(json!({}))),
        false,
    )
    .await??;
    held_back_while_good_runs(&fleet, &ns, "baseline").await?;
    for (cluster, client) in &fleet.members {
        let labels = Api::<Namespace>::all(client.clone())
            .get(&ns)
            .await?
            .labels()
            .clone();
        ensure!(
            labels.get(ENFORCE).map(String::as_str) == Some("baseline"),
            "{cluster}: the namespace Flotilla created enforces baseline: {labels:?}"
        );
    }
    Ok(())
}

/// The tenant's own hub namespace cannot open the check: a LimitRange there refuses a Pod with
/// `limits.cpu: 64` before Pod Security looks at it, and that refusal must not count as a yes.
#[tokio::test]
async fn a_limit_range_in_the_tenants_namespace_does_not_let_a_host_escape_through() -> Result<()> {
    let labels = [(ENFORCE.to_string(), "baseline".to_string())].into();
    let fleet = Fleet::start_with_hub_namespace("psa-limits", labels).await?;
    let ns = fleet
        .other
        .as_ref()
        .map(|o| o.name().to_string())
        .unwrap_or_default();
    api::apply(
        &fleet.hub,
        &json!({"apiVersion": "v1", "kind": "LimitRange",
                "metadata": {"name": "small", "namespace": ns},
                "spec": {"limits": [{"type": "Container", "max": {"cpu": "2"}}]}}),
        false,
    )
    .await??;
    api::apply(&fleet.hub, &placement(&ns), false).await??;
    // Big, but harmless: the hub's LimitRange is the hub's business, not the members'.
    let mut big = good();
    big["containers"][0]["resources"] = json!({"limits": {"cpu": "64"}});
    api::apply(&fleet.hub, &deployment(&ns, "good", big), false).await??;
    api::apply(
        &fleet.hub,
        &deployment(&ns, "escape", host_escape(json!({"limits": {"cpu": "64"}}))),
        false,
    )
    .await??;
    held_back_while_good_runs(&fleet, &ns, "baseline").await
}
