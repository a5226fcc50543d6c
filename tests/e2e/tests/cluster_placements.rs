//! ClusterPlacements end to end: cluster-scoped objects of the hub — Namespaces with their labels
//! (Pod Security labels among them) and a CRD — placed on every member, with a Placement's
//! safety rules: a namespace a member's own users made is left untouched (a conflict, reported),
//! a namespace Flotilla made for a Placement's objects is taken over, a label changed on the hub
//! reaches the members, and neither a Namespace nor a CRD that leaves the selection (or the hub)
//! is deleted from a member (what is in them is the members' users' too). A ClusterRoleBinding
//! goes only where its subjects mean the same: tenants' ServiceAccounts of the hub, not users,
//! groups or the hub's own controllers, until an admin says otherwise.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use flotilla_api::{ClusterPlacement, Placement, Work, annotations, labels, reasons};
use flotilla_e2e::api::ClusterScopedObjects;
use flotilla_e2e::fleet::{Fleet, Second};
use flotilla_e2e::{Environment, Seen, TestNamespace, holds_for, random_suffix, wait_for};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::api::kubectl;

const RESTRICTED: &str = "pod-security.kubernetes.io/enforce";

fn crd_resource() -> ApiResource {
    ApiResource::erase::<CustomResourceDefinition>(&())
}

/// The labels of namespace `name` in a cluster, if it exists.
async fn namespace_labels(client: &Client, name: &str) -> Result<Option<BTreeMap<String, String>>> {
    Ok(Api::<Namespace>::all(client.clone())
        .get_opt(name)
        .await?
        .map(|n| n.labels().clone()))
}

#[tokio::test]
async fn a_cluster_placement_places_namespaces_with_their_labels_and_a_crd() -> Result<()> {
    let env = Environment::get();
    let infos = env.require_members(3)?.to_vec();
    // A hub-only namespace with a Placement of its own: Flotilla creates it in the members.
    let fleet = Fleet::builder("cplace")
        .second_namespace(Second::HubOnly(
            [("team".to_string(), "a".to_string())].into(),
        ))
        .cluster_placements()
        .start()
        .await?;
    let Fleet {
        hub,
        members,
        selector,
        splitter,
        ..
    } = &fleet;
    let made = fleet.other.as_ref().context("the hub-only namespace")?;
    let (label, id) = selector
        .split_once('=')
        .context("the fleet's selector is label=value")?;
    let all: Vec<_> = infos.iter().collect();

    // Flotilla makes namespace `made` in every member for the ConfigMap placed into it.
    Api::<Placement>::namespaced(hub.clone(), made.name())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "settings"},
                "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "settings"}]},
            }))?,
        )
        .await?;
    Api::<ConfigMap>::namespaced(hub.clone(), made.name())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "settings"}, "data": {"a": "1"}}))?,
        )
        .await?;
    for (cluster, client) in members {
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), made.name());
        wait_for(
            &format!("the ConfigMap (and the namespace Flotilla makes for it) in {cluster}"),
            Duration::from_secs(60),
            || async {
                Ok(match configmaps.get_opt("settings").await? {
                    Some(_) => Seen::Done(()),
                    None => Seen::not_yet("absent"),
                })
            },
        )
        .await
        .map_err(|e| e.context(splitter.log()))?;
    }

    // Two more hub namespaces: `fresh` exists in no member; `theirs` is also a namespace the
    // first member's own users made, with their label.
    let selected = |extra: (&str, &str)| -> BTreeMap<String, String> {
        [
            (label.to_string(), id.to_string()),
            (extra.0.to_string(), extra.1.to_string()),
            (RESTRICTED.to_string(), "restricted".to_string()),
        ]
        .into()
    };
    let fresh =
        TestNamespace::create_in("cplace-fresh", &[&env.hub], &all, selected(("team", "b")))
            .await?;
    let theirs =
        TestNamespace::create_in("cplace-theirs", &[&env.hub], &all, selected(("team", "c")))
            .await?;
    let (first, first_client) = &members[0];
    Api::<Namespace>::all(first_client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": theirs.name(), "labels": {"owner": "member-team"}}}),
            )?,
        )
        .await?;
    // And `made` is selected too.
    let namespaces: Api<Namespace> = Api::all(hub.clone());
    namespaces
        .patch(
            made.name(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {label: id}}})),
        )
        .await?;

    // A CRD of the hub, cleaned up everywhere.
    let group = format!("e2e-{id}.example.com");
    let crd_name = format!("widgets.{group}");
    let mut crds_made = Vec::new();
    for info in env.all_clusters() {
        let mut objects = ClusterScopedObjects::new(info);
        objects.add(crd_resource(), crd_name.clone());
        crds_made.push(objects);
    }
    crate::negotiator::install_crd(
        hub,
        &json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": crd_name, "labels": {label: id}},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                     "versions": [{"name": "v1", "served": true, "storage": true,
                                   "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                       "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}}}]},
        }),
    )
    .await?;

    // The ClusterPlacement (labelled for the test's splitter), cleaned up on the hub.
    let name = format!("e2e-{}", random_suffix());
    let resource = ApiResource::erase::<ClusterPlacement>(&());
    let mut placed = ClusterScopedObjects::new(&env.hub);
    placed.add(resource.clone(), name.clone());
    let cluster_placements: Api<ClusterPlacement> = Api::all(hub.clone());
    cluster_placements
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "flotilla.dev/v1alpha1", "kind": "ClusterPlacement",
                "metadata": {"name": name, "labels": {label: id}},
                "spec": {"resourceSelectors": [
                    {"apiVersion": "v1", "kind": "Namespace", "labelSelector": {"matchLabels": {label: id}}},
                    {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                     "labelSelector": {"matchLabels": {label: id}}},
                ]},
            }))?,
        )
        .await?;

    // Every member gets the namespaces with the hub's labels, and the CRD.
    for (i, (cluster, client)) in members.iter().enumerate() {
        for (ns, team) in [
            (fresh.name(), "b"),
            (made.name(), "a"),
            (theirs.name(), "c"),
        ] {
            if i == 0 && ns == theirs.name() {
                continue;
            }
            wait_for(
                &format!("namespace {ns} in {cluster} with the hub's labels"),
                Duration::from_secs(90),
                || async {
                    let labels = namespace_labels(client, ns).await?;
                    Ok(match labels {
                        Some(l)
                            if l.get("team").map(String::as_str) == Some(team)
                                && l.get(label).map(String::as_str) == Some(id) =>
                        {
                            Seen::Done(())
                        }
                        other => Seen::not_yet(format!("{other:?}")),
                    })
                },
            )
            .await
            .map_err(|e| e.context(splitter.log()))?;
        }
        let fresh_labels = namespace_labels(client, fresh.name())
            .await?
            .unwrap_or_default();
        ensure!(
            fresh_labels.get(RESTRICTED).map(String::as_str) == Some("restricted"),
            "the Pod Security label reaches {cluster}: {fresh_labels:?}"
        );
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        wait_for(
            &format!("CRD {crd_name} established in {cluster}"),
            Duration::from_secs(60),
            || async {
                let established = crds.get_opt(&crd_name).await?.is_some_and(|c| {
                    c.status
                        .iter()
                        .flat_map(|s| s.conditions.iter().flatten())
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
                Ok(if established {
                    Seen::Done(())
                } else {
                    Seen::not_yet("not established")
                })
            },
        )
        .await?;
    }

    // The first member's own namespace is left as its users made it, and the ClusterPlacement
    // says so (the copy there is not applied) and counts four objects.
    let first_labels = namespace_labels(first_client, theirs.name())
        .await?
        .unwrap_or_default();
    ensure!(
        first_labels.get("owner").map(String::as_str) == Some("member-team")
            && !first_labels.contains_key("team"),
        "the member's own namespace is untouched: {first_labels:?}"
    );
    wait_for(
        "the ClusterPlacement to report the conflict in the first member",
        Duration::from_secs(60),
        || async {
            let status = cluster_placements
                .get(&name)
                .await?
                .status
                .unwrap_or_default();
            let conflict = status.decisions.iter().any(|d| {
                d.kind == "Namespace"
                    && d.name == theirs.name()
                    && d.clusters.iter().any(|c| {
                        &c.cluster == first
                            && c.applied == Some(flotilla_api::ConditionStatus::False)
                    })
            });
            Ok(if status.selected_objects == Some(4) && conflict {
                Seen::Done(())
            } else {
                Seen::not_yet(format!(
                    "selected {:?}, decisions {:?}",
                    status.selected_objects, status.decisions
                ))
            })
        },
    )
    .await?;
    // What users run against the hub.
    let table = kubectl(&env, &["get", "clusterplacement", &name]).await?;
    ensure!(
        table.contains("SCHEDULED") && table.contains("True"),
        "kubectl get clusterplacement: {table}"
    );
    kubectl(
        &env,
        &[
            "wait",
            "--for=condition=Scheduled",
            "--timeout=30s",
            &format!("clusterplacement/{name}"),
        ],
    )
    .await?;

    // The namespace Flotilla made for the ConfigMap is now the ClusterPlacement's Work's.
    for (cluster, client) in members {
        let ns = Api::<Namespace>::all(client.clone())
            .get(made.name())
            .await?;
        ensure!(
            ns.annotations().contains_key(annotations::WORK),
            "namespace {} in {cluster} is placed by a Work: {:?}",
            made.name(),
            ns.annotations()
        );
    }

    // A label changed on the hub reaches every member.
    namespaces
        .patch(
            fresh.name(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "b2"}}})),
        )
        .await?;
    for (cluster, client) in members {
        wait_for(
            &format!("the new label in {cluster}"),
            Duration::from_secs(60),
            || async {
                let labels = namespace_labels(client, fresh.name()).await?;
                Ok(
                    match labels
                        .as_ref()
                        .and_then(|l| l.get("team"))
                        .map(String::as_str)
                    {
                        Some("b2") => Seen::Done(()),
                        other => Seen::not_yet(format!("{other:?}")),
                    },
                )
            },
        )
        .await?;
    }

    // A namespaced kind is not a ClusterPlacement's: it says so.
    let wrong = format!("e2e-{}", random_suffix());
    placed.add(resource, wrong.clone());
    cluster_placements
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "flotilla.dev/v1alpha1", "kind": "ClusterPlacement",
                "metadata": {"name": wrong, "labels": {label: id}},
                "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"}]},
            }))?,
        )
        .await?;
    wait_for(
        "the ClusterPlacement of ConfigMaps to say why it places nothing",
        Duration::from_secs(60),
        || async {
            let status = cluster_placements
                .get(&wrong)
                .await?
                .status
                .unwrap_or_default();
            let scheduled = status.conditions.iter().find(|c| c.type_ == "Scheduled");
            Ok(match scheduled {
                Some(c)
                    if c.status == "False"
                        && c.reason == reasons::UNSUPPORTED_TYPE
                        && c.message.contains("use a Placement") =>
                {
                    Seen::Done(())
                }
                other => Seen::not_yet(format!("{other:?}")),
            })
        },
    )
    .await?;

    // Data of the members' users: a Widget in the second member.
    let (_, second_client) = &members[1];
    let widgets: Api<DynamicObject> = Api::namespaced_with(
        second_client.clone(),
        fresh.name(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&group, "v1", "Widget"),
            "widgets",
        ),
    );
    widgets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": format!("{group}/v1"), "kind": "Widget",
                "metadata": {"name": "keep-me"}, "spec": {"size": 3},
            }))?,
        )
        .await?;

    // A namespace no longer selected, and the CRD deleted from the hub: their copies leave the
    // ClusterPlacement, and neither the namespace nor the CRD (nor the Widget) leaves a member.
    namespaces
        .patch(
            fresh.name(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {label: null}}})),
        )
        .await?;
    Api::<CustomResourceDefinition>::all(hub.clone())
        .delete(&crd_name, &Default::default())
        .await?;
    wait_for(
        "the ClusterPlacement to let go of the namespace and the CRD",
        Duration::from_secs(60),
        || async {
            let status = cluster_placements
                .get(&name)
                .await?
                .status
                .unwrap_or_default();
            let mut crd_works = 0;
            for (cluster, _) in members {
                let works: Api<Work> = Api::namespaced(
                    hub.clone(),
                    &flotilla_api::names::cluster_namespace(cluster),
                );
                crd_works += works
                    .list(&ListParams::default().labels(&format!("{}={name}", labels::PLACEMENT)))
                    .await?
                    .items
                    .iter()
                    .filter(|w| {
                        w.annotations()
                            .get(annotations::SOURCE_KIND)
                            .map(String::as_str)
                            == Some("CustomResourceDefinition")
                    })
                    .count();
            }
            Ok(if status.selected_objects == Some(2) && crd_works == 0 {
                Seen::Done(())
            } else {
                Seen::not_yet(format!(
                    "selected {:?}, {crd_works} Works of the CRD",
                    status.selected_objects
                ))
            })
        },
    )
    .await
    .map_err(|e| e.context(splitter.log()))?;
    holds_for(
        "the namespace, the CRD and the member's Widget to stay",
        Duration::from_secs(10),
        || async {
            for (cluster, client) in members {
                if namespace_labels(client, fresh.name()).await?.is_none() {
                    return Ok(Err(format!(
                        "namespace {} is gone from {cluster}",
                        fresh.name()
                    )));
                }
                let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
                if crds.get_opt(&crd_name).await?.is_none() {
                    return Ok(Err(format!("CRD {crd_name} is gone from {cluster}")));
                }
            }
            if widgets.get_opt("keep-me").await?.is_none() {
                return Ok(Err("the member's Widget is gone".to_string()));
            }
            Ok(Ok(()))
        },
    )
    .await?;
    drop(crds_made);
    Ok(())
}

#[tokio::test]
async fn a_cluster_placement_binds_no_hub_identity_in_the_members() -> Result<()> {
    let env = Environment::get();
    let fleet = Fleet::builder("cbind")
        .second_namespace(Second::HubOnly(
            [("team".to_string(), "a".to_string())].into(),
        ))
        .cluster_placements()
        .start()
        .await?;
    let Fleet {
        hub,
        members,
        selector,
        splitter,
        identities,
        ..
    } = &fleet;
    let (label, id) = selector
        .split_once('=')
        .context("the fleet's selector is label=value")?;
    let tenant = fleet.ns.name();
    // A tenant's ServiceAccount on the hub, as a chart installed into the hub makes it.
    Api::<ServiceAccount>::namespaced(hub.clone(), tenant)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "web"}}))?,
        )
        .await?;
    // One of the hub's own controllers (the chart's release namespace).
    let controller = Api::<ServiceAccount>::namespaced(hub.clone(), &identities.namespace)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|sa| sa.name_any())
        .find(|n| n != "default")
        .context("a ServiceAccount of the chart's identities")?;

    let role = format!("e2e-{id}-reader");
    let crb = |suffix: &str| format!("e2e-{id}-{suffix}");
    let account =
        |ns: &str, name: &str| json!({"kind": "ServiceAccount", "namespace": ns, "name": name});
    let bindings = [
        ("tenant", json!([account(tenant, "web")])),
        (
            "people",
            json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"},
                   {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "ops"}]),
        ),
        ("kube-system", json!([account("kube-system", "default")])),
        (
            "controller",
            json!([account(&identities.namespace, &controller)]),
        ),
    ];
    let mut made = Vec::new();
    for info in env.all_clusters() {
        let mut objects = ClusterScopedObjects::new(info);
        objects.add(ApiResource::erase::<ClusterRole>(&()), role.clone());
        for (suffix, _) in &bindings {
            objects.add(ApiResource::erase::<ClusterRoleBinding>(&()), crb(suffix));
        }
        made.push(objects);
    }
    Api::<ClusterRole>::all(hub.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": role, "labels": {label: id}},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
            }))?,
        )
        .await?;
    for (suffix, subjects) in &bindings {
        Api::<ClusterRoleBinding>::all(hub.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": crb(suffix), "labels": {label: id}},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                    "subjects": subjects,
                }))?,
            )
            .await?;
    }
    let name = format!("e2e-{}", random_suffix());
    let mut placed = ClusterScopedObjects::new(&env.hub);
    placed.add(ApiResource::erase::<ClusterPlacement>(&()), name.clone());
    let cluster_placements: Api<ClusterPlacement> = Api::all(hub.clone());
    cluster_placements
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "flotilla.dev/v1alpha1", "kind": "ClusterPlacement",
                "metadata": {"name": name, "labels": {label: id}},
                "spec": {"resourceSelectors": [
                    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                     "labelSelector": {"matchLabels": {label: id}}},
                    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                     "labelSelector": {"matchLabels": {label: id}}},
                ]},
            }))?,
        )
        .await?;

    // Only the tenant's binding reaches the members; the Placement says why not the others.
    let in_members = |want: Vec<String>, absent: Vec<String>| async move {
        wait_for(
            "the members to have exactly the bindings that may go",
            Duration::from_secs(90),
            || async {
                let mut wrong = Vec::new();
                for (cluster, client) in members {
                    let api: Api<ClusterRoleBinding> = Api::all(client.clone());
                    for b in &want {
                        if api.get_opt(b).await?.is_none() {
                            wrong.push(format!("{cluster}: no {b}"));
                        }
                    }
                    for b in &absent {
                        if api.get_opt(b).await?.is_some() {
                            wrong.push(format!("{cluster}: {b} is there"));
                        }
                    }
                }
                Ok(if wrong.is_empty() {
                    Seen::Done(())
                } else {
                    Seen::not_yet(wrong.join(", "))
                })
            },
        )
        .await
        .map_err(|e| e.context(splitter.log()))
    };
    let held = vec![crb("people"), crb("kube-system"), crb("controller")];
    in_members(vec![crb("tenant")], held.clone()).await?;
    // The splitter writes the status after the Works: polled, not read once.
    wait_for(
        "the ClusterPlacement to say which bindings are held back and why",
        Duration::from_secs(60),
        || async {
            let status = cluster_placements
                .get(&name)
                .await?
                .status
                .unwrap_or_default();
            let scheduled = status
                .conditions
                .iter()
                .find(|c| c.type_ == "Scheduled")
                .context("no Scheduled condition")?;
            let message = &scheduled.message;
            Ok(
                if scheduled.reason == reasons::BINDING_HELD_BACK
                    && message.contains("User alice")
                    && message.contains("Group ops")
                    && message.contains("ServiceAccount kube-system/default")
                    && message.contains(&format!(
                        "ServiceAccount {}/{controller}",
                        identities.namespace
                    ))
                    && !message.contains(&crb("tenant"))
                {
                    Seen::Done(())
                } else {
                    Seen::not_yet(format!("{}: {message}", scheduled.reason))
                },
            )
        },
    )
    .await?;
    // Nothing of the held bindings appears while the splitter keeps deciding.
    holds_for(
        "no held binding in a member",
        Duration::from_secs(5),
        || async {
            for (cluster, client) in members {
                for b in &held {
                    if Api::<ClusterRoleBinding>::all(client.clone())
                        .get_opt(b)
                        .await?
                        .is_some()
                    {
                        return Ok(Err(format!("{b} reached {cluster}")));
                    }
                }
            }
            Ok(Ok(()))
        },
    )
    .await?;

    // The admin allows any subject on this ClusterPlacement: the others follow.
    cluster_placements
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                annotations::ALLOW_ANY_BINDING_SUBJECT: "true"}}})),
        )
        .await?;
    let mut all = held;
    all.push(crb("tenant"));
    in_members(all, Vec::new()).await?;
    Ok(())
}
