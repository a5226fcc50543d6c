//! The negotiation's rules on values: what is published, what each import is told, what the
//! status says and which changes are announced.

use flotilla_api::{ApiResourceNames, ConditionStatus, GroupVersion, ResourceScope, names};
use serde_json::json;

use super::*;
use crate::negotiation::published_crd;

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(second).expect("a time")
}

fn limits() -> Limits {
    Limits::default()
}

fn schema(fields: &[&str]) -> Value {
    let properties: serde_json::Map<String, Value> = fields
        .iter()
        .map(|f| (f.to_string(), json!({"type": "string"})))
        .collect();
    json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": properties}}})
}

/// The widgets of `example.com` at `version`, with a string field of `spec` per `fields`.
pub(crate) fn widgets(version: &str, fields: &[&str]) -> ApiResourceSpec {
    ApiResourceSpec {
        group_version: GroupVersion {
            group: "example.com".into(),
            version: version.into(),
        },
        names: ApiResourceNames {
            plural: "widgets".into(),
            kind: "Widget".into(),
            ..Default::default()
        },
        scope: ResourceScope::Namespaced,
        subresources: None,
        column_definitions: vec![],
        api_approved: None,
        open_api_v3_schema: schema(fields),
    }
}

fn negotiation(version: &str, publish: bool) -> NegotiatedApiResource {
    let mut spec = serde_json::to_value(widgets(version, &["size"])).expect("a spec");
    spec["publish"] = json!(publish);
    serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "NegotiatedAPIResource",
        "metadata": {"name": format!("widgets.{version}.example.com"), "generation": 1},
        "spec": spec,
    }))
    .expect("a NegotiatedAPIResource")
}

fn import(cluster: &str, fields: &[&str]) -> Arc<ApiResourceImport> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "APIResourceImport",
            "metadata": {
                "name": "widgets.v1.example.com",
                "namespace": names::cluster_namespace(cluster),
                "generation": 1,
            },
            "spec": widgets("v1", fields),
        }))
        .expect("an APIResourceImport"),
    )
}

/// What a pass over widgets/v1 reads when two members import it and the hub has no CRD.
fn observed(imports: Vec<Arc<ApiResourceImport>>) -> Observed {
    Observed {
        now: at(1_000),
        imports,
        reference: Reference::None,
        hub_crd: None,
        siblings: vec![],
        foreign: None,
    }
}

fn published_by_flotilla(resource: &ApiResourceSpec) -> CustomResourceDefinition {
    serde_json::from_value(published_crd(resource, &resource.open_api_v3_schema, None))
        .expect("a CRD")
}

/// The plan's `Published` condition when it decided without a write.
fn decided(plan: &Plan) -> &Verdict {
    match &plan.publish {
        Publish::Decided(v) => v,
        Publish::Apply { crd_name, .. } => panic!("applies {crd_name}"),
    }
}

/// A pass's plan as the next pass sees it: the imports and the NegotiatedAPIResource with the
/// status this pass wrote.
fn after(
    negotiation: &NegotiatedApiResource,
    observed: &Observed,
    plan: &Plan,
    published: &Verdict,
) -> (NegotiatedApiResource, Observed) {
    let status = plan.status(negotiation, published);
    let mut next = negotiation.clone();
    next.status = Some(flotilla_api::NegotiatedApiResourceStatus {
        conditions: status.conditions,
        imports: status.summaries,
    });
    if let Some(resource) = &plan.resource {
        next.spec.resource = resource.clone();
    }
    let imports = observed
        .imports
        .iter()
        .zip(&plan.imports)
        .map(|(i, step)| {
            let mut i = (**i).clone();
            let status = i.status.get_or_insert_with(Default::default);
            status.conditions = vec![step.condition.clone()];
            status.differences = step.differences.clone();
            Arc::new(i)
        })
        .collect();
    (
        next,
        Observed {
            now: at(2_000),
            imports,
            ..observed.clone()
        },
    )
}

#[test]
fn the_negotiated_schema_goes_into_the_spec_and_a_second_pass_writes_nothing() {
    let nar = negotiation("v1", false);
    let seen = observed(vec![
        import("m1", &["size"]),
        import("m2", &["size", "color"]),
    ]);
    let plan = plan(&nar, &seen, &limits());
    assert_eq!(plan.submitted.status, "True", "{:?}", plan.submitted);
    // Not published: asked for by nobody.
    assert_eq!(decided(&plan).reason, reasons::NOT_PUBLISHED);
    assert!(plan.imports.iter().all(|s| s.write && s.announce.is_some()));
    let status = plan.status(&nar, decided(&plan));
    assert!(status.write);
    assert_eq!(
        status
            .summaries
            .iter()
            .map(|s| s.cluster.as_str())
            .collect::<Vec<_>>(),
        ["m1", "m2"]
    );
    assert!(
        status
            .transitions
            .iter()
            .any(|v| v.type_ == conditions::SUBMITTED)
    );

    let (nar, seen) = after(&nar, &seen, &plan, decided(&plan));
    let again = super::plan(&nar, &seen, &limits());
    assert_eq!(again.resource, None, "the spec is written once");
    assert!(
        again
            .imports
            .iter()
            .all(|s| !s.write && s.announce.is_none())
    );
    let status = again.status(&nar, decided(&again));
    assert!(!status.write, "nothing changed: {status:?}");
    assert!(status.transitions.is_empty());
    // Unchanged conditions keep the time they first took their status.
    assert!(
        status
            .conditions
            .iter()
            .all(|c| c.last_transition_time.0 == at(1_000))
    );
}

#[test]
fn publishing_applies_the_crd_once_and_then_only_when_it_would_change() {
    let nar = negotiation("v1", true);
    let seen = observed(vec![import("m1", &["size"]), import("m2", &["size"])]);
    let first = plan(&nar, &seen, &limits());
    let Publish::Apply { crd_name, crd, .. } = &first.publish else {
        panic!("no CRD on the hub yet: {:?}", first.publish);
    };
    assert_eq!(crd_name, "widgets.example.com");
    assert_eq!(
        crd["metadata"]["labels"][flotilla_api::labels::PUBLISHED],
        "true"
    );

    // The hub now serves the published CRD: nothing to apply.
    let resource = first.resource.clone().unwrap_or(nar.spec.resource.clone());
    let mut seen = seen;
    seen.hub_crd = Some(published_by_flotilla(&resource));
    seen.reference = Reference::Published(resource.open_api_v3_schema.clone());
    let again = plan(&nar, &seen, &limits());
    assert_eq!(decided(&again).status, "True");
    assert_eq!(decided(&again).reason, reasons::PUBLISHED);

    // A member that drops a field narrows what every member serves: the CRD changes.
    seen.imports = vec![import("m1", &["size"]), import("m2", &[])];
    seen.reference = Reference::None;
    let narrowed = plan(&nar, &seen, &limits());
    assert!(
        matches!(narrowed.publish, Publish::Apply { .. }),
        "{:?}",
        narrowed.publish
    );
}

#[test]
fn a_crd_flotilla_did_not_make_is_left_alone() {
    let nar = negotiation("v1", true);
    let mut seen = observed(vec![import("m1", &["size"])]);
    let mut theirs = published_by_flotilla(&widgets("v2", &["size"]));
    theirs.metadata.labels = None;
    seen.hub_crd = Some(theirs);
    let plan = plan(&nar, &seen, &limits());
    let v = decided(&plan);
    assert_eq!((v.status, v.reason), ("False", reasons::PUBLISH_FAILED));
    assert!(
        v.message.contains("not created by Flotilla"),
        "{}",
        v.message
    );
    assert!(is_warning(v));
}

#[test]
fn a_type_the_hub_serves_itself_is_enforced_and_named_as_the_hub_says() {
    let nar = negotiation("v1", true);
    let mut hub = widgets("v1", &["size"]);
    hub.names.short_names = vec!["wd".into()];
    let mut crd = published_by_flotilla(&hub);
    crd.metadata.labels = None;
    let mut seen = observed(vec![import("m1", &["size", "color"])]);
    seen.reference = Reference::Enforced {
        reason: reasons::HUB_CRD,
        schema: hub.open_api_v3_schema.clone(),
    };
    seen.hub_crd = Some(crd);
    let plan = plan(&nar, &seen, &limits());
    let v = decided(&plan);
    assert_eq!((v.status, v.reason), ("False", reasons::NOT_PUBLISHED));
    assert!(
        !is_warning(v),
        "not publishing what the hub serves is no failure"
    );
    assert_eq!(plan.enforced.status, "True");
    let resource = plan.resource.as_ref().expect("the hub's names");
    assert_eq!(resource.names.short_names, ["wd"]);
}

#[test]
fn a_sibling_that_publishes_publishes_this_version_with_it() {
    let nar = negotiation("v1beta1", false);
    let mut publisher = negotiation("v1", true);
    let summary = |cluster: &str| ImportSummary {
        cluster: cluster.into(),
        compatible: ConditionStatus::True,
        reason: Some(reasons::IDENTICAL.into()),
    };
    publisher.status = Some(flotilla_api::NegotiatedApiResourceStatus {
        conditions: vec![
            Verdict::new(conditions::SUBMITTED, "True", reasons::NEGOTIATED, "")
                .into_condition(at(0), Some(1)),
        ],
        imports: vec![summary("m1")],
    });
    let mut beta = import("m1", &["size"]);
    Arc::make_mut(&mut beta).spec.resource.group_version.version = "v1beta1".into();
    let mut seen = observed(vec![beta]);
    seen.siblings = vec![Arc::new(publisher)];
    let plan = plan(&nar, &seen, &limits());
    let Publish::Apply { crd, .. } = &plan.publish else {
        panic!("{:?}", plan.publish);
    };
    let served: Vec<&str> = crd["spec"]["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(served, ["v1", "v1beta1"]);
}

#[test]
fn only_a_changed_status_or_reason_is_announced() {
    let nar = negotiation("v1", false);
    let seen = observed(vec![import("m1", &["size"])]);
    let first = plan(&nar, &seen, &limits());
    let (nar, mut seen) = after(&nar, &seen, &first, decided(&first));
    // The same verdict with another message: written, not announced.
    let import = Arc::make_mut(&mut seen.imports[0]);
    let condition = &mut import.status.as_mut().expect("a status").conditions[0];
    condition.message = "an older message".into();
    let second = plan(&nar, &seen, &limits());
    assert!(second.imports[0].write);
    assert_eq!(second.imports[0].announce, None);
    // Another status: announced, as a Warning when it is False.
    condition_of(&mut seen).status = "Unknown".into();
    let third = plan(&nar, &seen, &limits());
    assert!(third.imports[0].write);
    assert_eq!(
        third.imports[0].announce.as_ref().map(|v| v.status),
        Some("True")
    );
}

fn condition_of(observed: &mut Observed) -> &mut Condition {
    &mut Arc::make_mut(&mut observed.imports[0])
        .status
        .as_mut()
        .expect("a status")
        .conditions[0]
}

#[test]
fn another_negotiators_summaries_stay_in_cluster_order() {
    let nar = negotiation("v1", false);
    let mut seen = observed(vec![import("m3", &["size"])]);
    let theirs = |cluster: &str| ImportSummary {
        cluster: cluster.into(),
        compatible: ConditionStatus::True,
        reason: Some(reasons::IDENTICAL.into()),
    };
    seen.foreign = Some(vec![theirs("m4"), theirs("m1")]);
    let plan = plan(&nar, &seen, &limits());
    let clusters: Vec<&str> = plan.summaries.iter().map(|s| s.cluster.as_str()).collect();
    assert_eq!(clusters, ["m1", "m3", "m4"]);
}

#[test]
fn a_member_serving_the_type_with_another_scope_takes_no_part() {
    let nar = negotiation("v1", false);
    let mut cluster_scoped = import("m2", &["other"]);
    Arc::make_mut(&mut cluster_scoped).spec.resource.scope = ResourceScope::Cluster;
    let seen = observed(vec![import("m1", &["size"]), cluster_scoped]);
    let plan = plan(&nar, &seen, &limits());
    let m2 = &plan.imports[1];
    assert_eq!(
        (m2.condition.status.as_str(), m2.condition.reason.as_str()),
        ("False", reasons::SCOPE_DIFFERS)
    );
    assert_eq!(
        plan.summaries[1].reason.as_deref(),
        Some(reasons::SCOPE_DIFFERS)
    );
    // The negotiated schema is m1's alone.
    let resource = plan.resource.as_ref().unwrap_or(&nar.spec.resource);
    assert!(
        resource.open_api_v3_schema["properties"]["spec"]["properties"]
            .get("other")
            .is_none()
    );
}
