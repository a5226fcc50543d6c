//! An incompatible API is not an outage (Rule 5), end to end: a custom workload type placed on
//! three members; one member's CRD drifts (it drops a field). The negotiator's import of that
//! member turns `Compatible=False`, and the splitter checks each object against the member's
//! schema: an object that sets the dropped field leaves that member — its copy there goes once
//! the others are available — while an object that does not use it stays on all three.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use flotilla_api::{Placement, conditions, reasons};
use flotilla_e2e::api::ClusterScopedObjects;
use flotilla_e2e::fleet::Fleet;
use flotilla_e2e::process::ControllerProcess;
use flotilla_e2e::{Environment, Seen, random_suffix, wait_for};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

use crate::negotiator::{
    crd, crd_resource, has_condition, install_crd, nar_resource, real_httproutes, wait_negotiation,
};

const TIMEOUT: Duration = Duration::from_secs(90);

/// The members (by Cluster name) that hold Widget `name`.
async fn holders(fleet: &Fleet, widgets: &ApiResource, name: &str) -> Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    for (cluster, client) in &fleet.members {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), fleet.ns.name(), widgets);
        if api.get_opt(name).await?.is_some() {
            out.insert(cluster.clone());
        }
    }
    Ok(out)
}

async fn wait_holders(
    fleet: &Fleet,
    widgets: &ApiResource,
    name: &str,
    want: &BTreeSet<String>,
    log: &ControllerProcess,
) -> Result<()> {
    wait_for(
        &format!("Widget {name} on exactly {want:?}"),
        TIMEOUT,
        || async {
            let got = holders(fleet, widgets, name).await?;
            Ok(if &got == want {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("{got:?}"))
            })
        },
    )
    .await
    .map_err(|e| {
        e.context(format!(
            "splitter log:\n{}\nnegotiator log:\n{}",
            fleet.splitter.log(),
            log.log()
        ))
    })
}

/// Placement `widgets` of the fleet's namespace, placing every Widget of `group`; the Widgets'
/// API resource.
async fn place_widgets(fleet: &Fleet, group: &str) -> Result<ApiResource> {
    fleet.identities.allow_splitter(group, "widgets").await?;
    let placement: Placement = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
        "metadata": {"name": "widgets"},
        "spec": {"resourceSelectors": [{"apiVersion": format!("{group}/v1"), "kind": "Widget"}]},
    }))?;
    Api::<Placement>::namespaced(fleet.hub.clone(), fleet.ns.name())
        .create(&PostParams::default(), &placement)
        .await?;
    Ok(ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, "v1", "Widget"),
        "widgets",
    ))
}

#[tokio::test]
async fn a_member_whose_api_drifts_loses_only_the_objects_it_cannot_take() -> Result<()> {
    let _one_at_a_time = crate::ONE_NEGOTIATOR.lock().await;
    let fleet = Fleet::builder("split-api").start().await?;
    let group = format!("w{}.e2e.flotilla.dev", random_suffix());
    let full = crd(
        &group,
        "Widget",
        json!({"size": {"type": "integer"}, "color": {"type": "string"}}),
    );
    // The hub serves the type (its schema is enforced); so do the members, for now alike.
    install_crd(&fleet.hub, &full).await?;
    for (_, client) in &fleet.members {
        install_crd(client, &full).await?;
    }
    let negotiator = start_negotiator(&fleet)?;

    let widgets = place_widgets(&fleet, &group).await?;
    let hub_widgets: Api<DynamicObject> =
        Api::namespaced_with(fleet.hub.clone(), fleet.ns.name(), &widgets);
    for (name, spec) in [
        ("colored", json!({"size": 3, "color": "red"})),
        ("plain", json!({"size": 5})),
    ] {
        let w: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{group}/v1"), "kind": "Widget",
            "metadata": {"name": name}, "spec": spec,
        }))?;
        hub_widgets.create(&PostParams::default(), &w).await?;
    }
    let everywhere: BTreeSet<String> = fleet.members.iter().map(|(c, _)| c.clone()).collect();
    wait_holders(&fleet, &widgets, "colored", &everywhere, &negotiator).await?;
    wait_holders(&fleet, &widgets, "plain", &everywhere, &negotiator).await?;

    // The third member's CRD drops `color`.
    let (drifted, drifted_client) = fleet.members[2].clone();
    let narrower = crd(&group, "Widget", json!({"size": {"type": "integer"}}));
    flotilla_e2e::api::apply(&drifted_client, &narrower, false).await??;
    let mut rest = everywhere.clone();
    rest.remove(&drifted);
    wait_holders(&fleet, &widgets, "colored", &rest, &negotiator).await?;

    // The object that does not use the field stays everywhere, and the Placement says why the
    // other one left, naming the field.
    ensure!(
        holders(&fleet, &widgets, "plain").await? == everywhere,
        "an object using only fields the drifted member has must stay there"
    );
    // The Placement's status is written after the Works: polled, not read once.
    let exclusion = exclusion(&fleet, "widgets", "colored", &drifted).await?;
    ensure!(
        exclusion.contains(".spec.color"),
        "the decision for the colored Widget names the field the member lacks: {exclusion}"
    );

    // Cleanup of what the shared environment keeps: the CRDs.
    let crd_name = format!("widgets.{group}");
    for client in std::iter::once(&fleet.hub).chain(fleet.members.iter().map(|(_, c)| c)) {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let _ = crds.delete(&crd_name, &Default::default()).await;
    }
    Ok(())
}

#[tokio::test]
async fn an_edit_of_a_custom_object_reaches_every_member_in_seconds() -> Result<()> {
    let fleet = Fleet::builder("split-crd").start().await?;
    let group = format!("w{}.e2e.flotilla.dev", random_suffix());
    let widget_crd = crd(&group, "Widget", json!({"size": {"type": "integer"}}));
    install_crd(&fleet.hub, &widget_crd).await?;
    for (_, client) in &fleet.members {
        install_crd(client, &widget_crd).await?;
    }
    let widgets = place_widgets(&fleet, &group).await?;
    let widget = |size: i64| {
        json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
               "metadata": {"name": "gadget", "namespace": fleet.ns.name()},
               "spec": {"size": size}})
    };
    // Until every member has the Widget at `size`; how long that took.
    let everywhere = |size: i64| {
        let (fleet, widgets) = (&fleet, &widgets);
        async move {
            let started = std::time::Instant::now();
            wait_for(
                &format!("Widget gadget of size {size} in every member"),
                // About a second; well below the 60 s resync an unwatched type waits for, with
                // room for a loaded machine.
                Duration::from_secs(30),
                || async {
                    let mut behind = Vec::new();
                    for (cluster, client) in &fleet.members {
                        let api: Api<DynamicObject> =
                            Api::namespaced_with(client.clone(), fleet.ns.name(), widgets);
                        let seen = api
                            .get_opt("gadget")
                            .await?
                            .and_then(|w| w.data["spec"]["size"].as_i64());
                        if seen != Some(size) {
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
            .map_err(|e| e.context(fleet.splitter.log()))?;
            Ok::<_, anyhow::Error>(started.elapsed())
        }
    };
    flotilla_e2e::api::apply(&fleet.hub, &widget(1), false).await??;
    let created = everywhere(1).await?;
    // Let the first pass's Work status changes settle, so that only the edit starts a pass.
    tokio::time::sleep(Duration::from_secs(3)).await;
    flotilla_e2e::api::apply(&fleet.hub, &widget(2), false).await??;
    let edited = everywhere(2).await?;
    eprintln!("Widget created everywhere in {created:?}, edited in {edited:?}");
    Ok(())
}

/// A negotiator (the chart's identity of it) for the fleet's Clusters.
fn start_negotiator(fleet: &Fleet) -> Result<ControllerProcess> {
    let mut args = fleet.identities.args("negotiator")?;
    args.extend(
        [
            "--lease-namespace",
            &fleet.identities.namespace,
            "--cluster-selector",
            &fleet.selector,
            "--kubeconfig-secret-namespace",
            &fleet.identities.namespace,
            "--import-interval",
            "5s",
        ]
        .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ControllerProcess::start("flotilla-negotiator", &args)
}

/// Placement `name` of the fleet's namespace, placing every object of one type on every member
/// (a whole copy each).
async fn place(fleet: &Fleet, name: &str, api_version: &str, kind: &str) -> Result<()> {
    let placement: Placement = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
        "metadata": {"name": name},
        "spec": {"resourceSelectors": [{"apiVersion": api_version, "kind": kind}],
                 "replicaScheduling": {"type": "Duplicated"}},
    }))?;
    Api::<Placement>::namespaced(fleet.hub.clone(), fleet.ns.name())
        .create(&PostParams::default(), &placement)
        .await?;
    Ok(())
}

/// The message of Placement `placement`'s exclusion of `cluster` from object `object`, once its
/// status has one.
async fn exclusion(fleet: &Fleet, placement: &str, object: &str, cluster: &str) -> Result<String> {
    let placements: Api<Placement> = Api::namespaced(fleet.hub.clone(), fleet.ns.name());
    wait_for(
        &format!("Placement {placement} excluding {cluster} from {object}"),
        Duration::from_secs(30),
        || async {
            let status = placements.get(placement).await?.status;
            let message = status
                .iter()
                .flat_map(|s| &s.decisions)
                .filter(|d| d.name == object)
                .flat_map(|d| &d.excluded)
                .find(|e| e.cluster == cluster)
                .and_then(|e| e.message.clone());
            Ok(match message {
                Some(m) => Seen::Done(m),
                None => Seen::not_yet(serde_json::to_string(&status)?),
            })
        },
    )
    .await
}

/// Rule 5 with a real CRD across its releases. Gateway API's HTTPRoute of v1.6.1 is in two
/// members and the hub CRD is published from them; then the third member gets v1.0.0. Its
/// import lacks what was added since — `timeouts` came in v1.2 — and the published schema is
/// never narrowed: a route that sets `timeouts` goes only to the two newer members, the older
/// member's exclusion naming the path, while a plain route goes to all three.
#[tokio::test]
async fn a_route_using_a_newer_releases_field_skips_the_member_on_the_older_release() -> Result<()>
{
    let _one_at_a_time = crate::ONE_NEGOTIATOR.lock().await;
    let env = Environment::get();
    let (new, old) = (real_httproutes("v1.6.1")?, real_httproutes("v1.0.0")?);
    let fleet = Fleet::builder("split-routes").start().await?;
    let crd_name = "httproutes.gateway.networking.k8s.io";
    let nar = "httproutes.v1.gateway.networking.k8s.io";
    // What the shared environment must not keep: the CRDs and the negotiations.
    let mut hub_objects = ClusterScopedObjects::new(&env.hub);
    hub_objects.add(crd_resource(), crd_name);
    for version in ["v1", "v1beta1"] {
        hub_objects.add(
            nar_resource(),
            format!("httproutes.{version}.gateway.networking.k8s.io"),
        );
    }
    let _member_objects: Vec<ClusterScopedObjects> = env
        .require_members(3)?
        .iter()
        .map(|m| {
            let mut o = ClusterScopedObjects::new(m);
            o.add(crd_resource(), crd_name);
            o
        })
        .collect();
    let (older, older_client) = fleet.members[1].clone();
    for (i, (_, client)) in fleet.members.iter().enumerate() {
        if i != 1 {
            install_crd(client, &new).await?;
        }
    }
    let negotiator = start_negotiator(&fleet)?;
    fleet
        .identities
        .allow_splitter("gateway.networking.k8s.io", "httproutes")
        .await?;
    place(
        &fleet,
        "routes",
        "gateway.networking.k8s.io/v1",
        "HTTPRoute",
    )
    .await?;
    wait_negotiation(
        &fleet.hub,
        nar,
        "negotiated over the two v1.6.1 imports",
        |n| {
            has_condition(n, conditions::SUBMITTED, "True", reasons::NEGOTIATED)?;
            let summaries = n.status.as_ref().map_or(0, |s| s.imports.len());
            (summaries == 2)
                .then_some(())
                .ok_or(format!("{summaries} import summaries"))
        },
    )
    .await
    .with_context(|| negotiator.log())?;
    Api::<flotilla_api::NegotiatedApiResource>::all(fleet.hub.clone())
        .patch(
            nar,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"publish": true}})),
        )
        .await?;
    wait_negotiation(&fleet.hub, nar, "published", |n| {
        has_condition(n, conditions::PUBLISHED, "True", reasons::PUBLISHED)
    })
    .await
    .with_context(|| negotiator.log())?;

    // The older release joins: its import misses the newer fields, the published CRD stays.
    install_crd(&older_client, &old).await?;
    wait_negotiation(&fleet.hub, nar, "the older member's import judged", |n| {
        let summary = n
            .status
            .iter()
            .flat_map(|s| &s.imports)
            .find(|s| s.cluster == older)
            .ok_or("no summary of the older member yet")?;
        (summary.compatible.as_str() == "False")
            .then_some(())
            .ok_or(format!("{summary:?}"))
    })
    .await
    .with_context(|| negotiator.log())?;

    let routes = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "HTTPRoute"),
        "httproutes",
    );
    let hub_routes: Api<DynamicObject> =
        Api::namespaced_with(fleet.hub.clone(), fleet.ns.name(), &routes);
    let route = |name: &str, rule: Value| -> Result<DynamicObject> {
        Ok(serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": name},
            "spec": {"parentRefs": [{"name": "gateway"}],
                     "rules": [rule]},
        }))?)
    };
    let backend = json!([{"name": "web", "port": 80}]);
    hub_routes
        .create(
            &PostParams::default(),
            &route(
                "timed",
                json!({"timeouts": {"request": "10s"}, "backendRefs": backend}),
            )?,
        )
        .await?;
    hub_routes
        .create(
            &PostParams::default(),
            &route("plain", json!({"backendRefs": backend}))?,
        )
        .await?;
    let everywhere: BTreeSet<String> = fleet.members.iter().map(|(c, _)| c.clone()).collect();
    let mut newer = everywhere.clone();
    newer.remove(&older);
    wait_holders(&fleet, &routes, "plain", &everywhere, &negotiator).await?;
    wait_holders(&fleet, &routes, "timed", &newer, &negotiator).await?;
    let message = exclusion(&fleet, "routes", "timed", &older).await?;
    ensure!(
        message.contains(".spec.rules[0].timeouts"),
        "the older member's exclusion names the path it lacks: {message:?}"
    );
    ensure!(
        holders(&fleet, &routes, "plain").await? == everywhere,
        "a route that uses only v1.0.0's fields stays on every member"
    );
    Ok(())
}

/// Rule 5 for a built-in type across Kubernetes minors: the hub and two members serve
/// `volumeMounts[].bindMountOptions` (hack/clusters.sh enables its gate on the newest minor), the
/// older member's apps/v1 does not have it. A Deployment that sets it goes only to the newer
/// members, the older member's exclusion naming the path; one that does not goes to all three.
#[tokio::test]
async fn a_deployment_using_a_field_the_older_kubernetes_lacks_skips_that_member() -> Result<()> {
    let _one_at_a_time = crate::ONE_NEGOTIATOR.lock().await;
    let fleet = Fleet::builder("split-versions").start().await?;
    let hub_version = fleet.hub.apiserver_version().await?.git_version;
    let mut older = Vec::new();
    for (cluster, client) in &fleet.members {
        if client.apiserver_version().await?.git_version != hub_version {
            older.push(cluster.clone());
        }
    }
    ensure!(
        older.len() == 1,
        "exactly one member runs an older Kubernetes than the hub ({hub_version}): {older:?}"
    );
    let older = older.remove(0);
    let negotiator = start_negotiator(&fleet)?;
    place(&fleet, "deployments", "apps/v1", "Deployment").await?;
    let deployment = |name: &str, mount: Value| -> Result<DynamicObject> {
        Ok(serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                                                           "volumeMounts": [mount]}],
                                           "volumes": [{"name": "scratch", "emptyDir": {}}]}}},
        }))?)
    };
    let deployments = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apps", "v1", "Deployment"),
        "deployments",
    );
    let hub_deployments: Api<DynamicObject> =
        Api::namespaced_with(fleet.hub.clone(), fleet.ns.name(), &deployments);
    let created = hub_deployments
        .create(
            &PostParams::default(),
            &deployment(
                "hardened",
                json!({"name": "scratch", "mountPath": "/tmp", "bindMountOptions": ["nosuid"]}),
            )?,
        )
        .await?;
    ensure!(
        created.data["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["bindMountOptions"]
            == json!(["nosuid"]),
        "the hub keeps bindMountOptions (its feature gate is on): {}",
        created.data["spec"]["template"]["spec"]["containers"][0]
    );
    hub_deployments
        .create(
            &PostParams::default(),
            &deployment("plain", json!({"name": "scratch", "mountPath": "/tmp"}))?,
        )
        .await?;
    let everywhere: BTreeSet<String> = fleet.members.iter().map(|(c, _)| c.clone()).collect();
    let mut newer = everywhere.clone();
    newer.remove(&older);
    wait_holders(&fleet, &deployments, "plain", &everywhere, &negotiator).await?;
    wait_holders(&fleet, &deployments, "hardened", &newer, &negotiator).await?;
    let message = exclusion(&fleet, "deployments", "hardened", &older).await?;
    ensure!(
        message.contains("volumeMounts[0].bindMountOptions"),
        "the older member's exclusion names the path it lacks: {message:?}"
    );
    Ok(())
}
