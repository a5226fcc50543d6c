//! An incompatible API is not an outage (Rule 5), end to end: a custom workload type placed on
//! three members; one member's CRD drifts (it drops a field). The negotiator's import of that
//! member turns `Compatible=False`, and the splitter checks each object against the member's
//! schema: an object that sets the dropped field leaves that member — its copy there goes once
//! the others are available — while an object that does not use it stays on all three.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Result, ensure};
use flotilla_api::Placement;
use flotilla_e2e::process::ControllerProcess;
use flotilla_e2e::{Seen, random_suffix, wait_for};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use serde_json::json;

use crate::negotiator::{crd, install_crd};
use crate::splitter::Fleet;

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
    let fleet = Fleet::start("split-api").await?;
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
    let kubeconfig = flotilla_e2e::Environment::get()
        .hub
        .kubeconfig
        .to_string_lossy()
        .into_owned();
    let negotiator = ControllerProcess::start(
        "flotilla-negotiator",
        &[
            "--kubeconfig",
            &kubeconfig,
            "--lease-namespace",
            fleet.ns.name(),
            "--cluster-selector",
            &fleet.selector,
            "--kubeconfig-secret-namespace",
            fleet.ns.name(),
            "--import-interval",
            "5s",
        ],
    )?;

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
    let placements: Api<Placement> = Api::namespaced(fleet.hub.clone(), fleet.ns.name());
    let decision = placements
        .get("widgets")
        .await?
        .status
        .and_then(|s| s.decisions.into_iter().find(|d| d.name == "colored"));
    let exclusion = decision
        .iter()
        .flat_map(|d| d.excluded.iter())
        .find(|e| e.cluster == drifted)
        .cloned();
    ensure!(
        exclusion.as_ref().is_some_and(|e| e
            .message
            .as_deref()
            .unwrap_or_default()
            .contains(".spec.color")),
        "the decision for the colored Widget names the field the member lacks: {exclusion:?}"
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
    let fleet = Fleet::start("split-crd").await?;
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
                // About a second; far below the 60 s resync an unwatched type waits for.
                Duration::from_secs(15),
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
