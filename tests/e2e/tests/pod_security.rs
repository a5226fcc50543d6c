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
use flotilla_e2e::fleet::{Fleet, Second};
use flotilla_e2e::{Seen, api, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

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
    let fleet = Fleet::builder("psa-default")
        .second_namespace(Second::HubOnly(BTreeMap::new()))
        .start()
        .await?;
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
    let fleet = Fleet::builder("psa-limits")
        .second_namespace(Second::HubOnly(labels))
        .start()
        .await?;
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

/// A tenant whose hub namespace is named like a namespace the members have of their own
/// (`monitoring`, `argocd`, …) gets neither that namespace nor its ServiceAccounts: nothing is
/// applied into a member namespace Flotilla did not create unless the hub admin allows it, and a
/// workload whose pods would run as a ServiceAccount the hub namespace does not have (so, in a
/// member, the member's) is held back — also once the namespace is allowed.
#[tokio::test]
async fn a_tenant_gets_neither_a_members_own_namespace_nor_its_service_accounts() -> Result<()> {
    use flotilla_api::{Work, annotations};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Patch, PatchParams};

    let fleet = Fleet::builder("own-ns")
        .second_namespace(Second::HubOnly(BTreeMap::new()))
        .start()
        .await?;
    let ns = fleet
        .other
        .as_ref()
        .map(|o| o.name().to_string())
        .unwrap_or_default();
    // The members' admins made this namespace, with an identity of their own that may do much.
    for (_, client) in &fleet.members {
        api::apply(
            client,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            false,
        )
        .await??;
        api::apply(
            client,
            &json!({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "admin", "namespace": ns}}),
            false,
        )
        .await??;
    }
    api::apply(
        &fleet.hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "apps", "namespace": ns},
                "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"},
                                               {"apiVersion": "v1", "kind": "ConfigMap"}],
                         "replicaScheduling": {"type": "Duplicated"}}}),
        false,
    )
    .await??;
    api::apply(
        &fleet.hub,
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings", "namespace": ns}, "data": {"a": "b"}}),
        false,
    )
    .await??;
    let mut pod = good();
    pod["serviceAccountName"] = json!("admin");
    api::apply(&fleet.hub, &deployment(&ns, "escape", pod), false).await??;

    // The ConfigMap's copies report the member's namespace as not Flotilla's.
    let refused = |cluster: String| {
        let fleet = &fleet;
        let ns = ns.clone();
        async move {
            let works: Vec<Work> = api::works_from(&fleet.hub, &cluster, &ns).await?;
            Ok::<_, anyhow::Error>(
                works
                    .iter()
                    .flat_map(|w| w.status.iter().flat_map(|s| s.manifests.iter()))
                    .filter(|m| m.identity.kind == "ConfigMap")
                    .map(|m| m.reason.clone().unwrap_or_default())
                    .collect::<Vec<_>>(),
            )
        }
    };
    wait_for(
        "every member's copy of the ConfigMap to be refused: the namespace is the member's",
        Duration::from_secs(60),
        || async {
            let mut wrong = Vec::new();
            for (cluster, _) in &fleet.members {
                let reasons = refused(cluster.clone()).await?;
                if reasons != [flotilla_api::reasons::NAMESPACE_NOT_FLOTILLAS] {
                    wrong.push(format!("{cluster}: {reasons:?}"));
                }
            }
            Ok(Seen::unless(&wrong, ()))
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    for (cluster, client) in &fleet.members {
        ensure!(
            Api::<ConfigMap>::namespaced(client.clone(), &ns)
                .get_opt("settings")
                .await?
                .is_none(),
            "{cluster}: nothing is applied into the member's own namespace"
        );
    }
    let placements: Api<Placement> = Api::namespaced(fleet.hub.clone(), &ns);
    let says_service_account = || async {
        let scheduled = placements
            .get("apps")
            .await?
            .status
            .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Scheduled"));
        Ok(match scheduled {
            Some(c)
                if c.reason == reasons::POD_SECURITY_VIOLATION
                    && c.message.contains("Deployment escape")
                    && c.message.contains("ServiceAccount admin") =>
            {
                Seen::Done(())
            }
            other => Seen::not_yet(format!("{other:?}")),
        })
    };
    wait_for(
        "the Placement to say escape runs as a ServiceAccount the hub does not have",
        Duration::from_secs(60),
        says_service_account,
    )
    .await?;

    // The hub admin allows the members' namespace: the ConfigMap goes in, the workload still not.
    Api::<Namespace>::all(fleet.hub.clone())
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                annotations::ALLOW_EXISTING_NAMESPACES: "true"}}})),
        )
        .await?;
    wait_for(
        "the ConfigMap in every member once the admin allows it",
        Duration::from_secs(60),
        || async {
            let mut missing = Vec::new();
            for (cluster, client) in &fleet.members {
                if Api::<ConfigMap>::namespaced(client.clone(), &ns)
                    .get_opt("settings")
                    .await?
                    .is_none()
                {
                    missing.push(cluster.clone());
                }
            }
            Ok(Seen::unless(&missing, ()))
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    wait_for(
        "the workload still held back",
        Duration::from_secs(30),
        says_service_account,
    )
    .await?;
    let escaped = copies(&fleet, &ns, "escape").await?;
    ensure!(escaped.is_empty(), "escape runs in {escaped:?}");
    Ok(())
}
