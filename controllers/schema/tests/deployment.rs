//! The real apps/v1 Deployment schema negotiated across 10 imports that differ the way members
//! of mixed versions do. The timing of the same negotiation is
//! `cargo run --release -p flotilla-schema --example bench_negotiate`.

#[path = "support/deployment_imports.rs"]
mod imports;

use flotilla_schema::{check_parsed, compare_parsed};
use imports::{negotiate, ten_imports};
use serde_json::json;

#[test]
fn the_deployment_schema_negotiates() {
    let imports = ten_imports();
    assert!(compare_parsed(&imports[0], &imports[0]).is_identical());
    let negotiated = negotiate(&imports);
    let spec = &negotiated["properties"]["spec"]["properties"];
    assert!(spec.get("minReadySeconds").is_none());
    assert_eq!(spec["replicas"]["maximum"], json!(100));
    assert_eq!(
        spec["strategy"]["properties"]["type"]["enum"],
        json!(["RollingUpdate"])
    );
    // Per object: a Deployment setting minReadySeconds cannot go to the older member.
    let object = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 3, "minReadySeconds": 5, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
                {"name": "web", "image": "nginx", "ports": [{"containerPort": 80}],
                 "resources": {"limits": {"cpu": "500m", "memory": 1024}}}]}}}});
    assert!(
        check_parsed(&object, &imports[0]).is_empty(),
        "{:#?}",
        check_parsed(&object, &imports[0])
    );
    let problems = check_parsed(&object, &imports[1]);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].path, ".spec.minReadySeconds");
}

#[test]
fn a_schema_is_read_by_reference_into_an_openapi_document() {
    use flotilla_schema::{Limits, Schema, SchemaError};
    let doc = json!({"components": {"schemas": {
        "Widget": {"type": "object", "description": "a widget", "properties": {
            "spec": {"allOf": [{"$ref": "#/components/schemas/Spec"}], "description": "its spec"}}},
        "Spec": {"type": "object", "properties": {"size": {"type": "integer", "description": "n"}}},
        "Broken": {"type": "object", "properties": {"x": {"$ref": "#/components/schemas/Gone"}}},
    }}});
    let limits = Limits::default();
    let mut widget =
        Schema::from_document_ref(&doc, "#/components/schemas/Widget", &limits).expect("readable");
    let whole = json!({"$ref": "#/components/schemas/Widget", "components": doc["components"]});
    assert!(compare_parsed(&Schema::from_value(&whole).expect("readable"), &widget).is_identical());
    assert!(widget.to_value().to_string().contains("its spec"));
    widget.strip_docs();
    let stripped = widget.to_value();
    assert!(!stripped.to_string().contains("description"), "{stripped}");
    assert_eq!(
        stripped["properties"]["spec"]["properties"]["size"]["type"],
        "integer"
    );
    let e = Schema::from_document_ref(&doc, "#/components/schemas/Broken", &limits)
        .expect_err("dangling");
    assert!(matches!(e, SchemaError::DanglingRef { .. }), "{e}");
}
