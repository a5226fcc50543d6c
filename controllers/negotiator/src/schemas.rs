//! Pure: a member's schema of one type, as an [`ApiResourceSpec`].
//!
//! - Built-in types come from the member's OpenAPI v3 document of their group/version
//!   (`/openapi/v3/apis/apps/v1`, `/openapi/v3/api/v1`): the component whose
//!   `x-kubernetes-group-version-kind` names the type is read with every `$ref` resolved into one
//!   structural schema rooted at the object (apiVersion, kind, metadata, spec, status), bounded
//!   by [`Limits`]. Documentation keywords are dropped: they are never compared, and the
//!   expanded Deployment schema is several times larger with them. So are defaults, which the
//!   apiserver does not apply to built-in types.
//! - Custom types come from the member's CRD: the version's `openAPIV3Schema`, names, scope,
//!   subresources and printer columns, as they are.

use flotilla_api::{ApiResourceNames, ApiResourceSpec, GroupVersion, ResourceScope};
use flotilla_schema::{Limits, Schema, SchemaError};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceSubresourceScale, CustomResourceSubresourceStatus,
    CustomResourceSubresources,
};
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use serde_json::Value;

use crate::types::ResourceType;

/// Why a member's schema of a type could not be read. The last import is kept.
#[derive(Debug, thiserror::Error)]
pub enum SchemaReadError {
    #[error("the member's OpenAPI v3 document {path} has no schema for {type_}")]
    NotInDocument { path: String, type_: String },
    #[error("the member's schema of {type_} cannot be read: {source}")]
    Invalid {
        type_: String,
        #[source]
        source: SchemaError,
    },
    #[error("the member's CRD {crd} has no schema for version {version}")]
    NoCrdSchema { crd: String, version: String },
    #[error("the member's CRD {crd} has a schema that cannot be written as JSON: {message}")]
    Unserializable { crd: String, message: String },
}

/// The path of the OpenAPI v3 document that describes `group`/`version` on an apiserver.
pub fn openapi_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("/openapi/v3/api/{version}")
    } else {
        format!("/openapi/v3/apis/{group}/{version}")
    }
}

/// The name, in `components.schemas` of an OpenAPI v3 document, of the schema of `type_`.
pub fn component_name<'a>(document: &'a Value, type_: &ResourceType) -> Option<&'a str> {
    let schemas = document.get("components")?.get("schemas")?.as_object()?;
    schemas.iter().find_map(|(name, schema)| {
        let gvks = schema.get("x-kubernetes-group-version-kind")?.as_array()?;
        gvks.iter()
            .any(|gvk| {
                let field = |k: &str| gvk.get(k).and_then(Value::as_str).unwrap_or_default();
                type_.is(field("group"), field("version"), field("kind"))
            })
            .then_some(name.as_str())
    })
}

/// The structural schema of `type_` in an OpenAPI v3 document (`document_path` is only for
/// messages), without documentation keywords.
pub fn builtin_schema(
    document: &Value,
    document_path: &str,
    type_: &ResourceType,
    limits: &Limits,
) -> Result<Value, SchemaReadError> {
    let name = component_name(document, type_).ok_or_else(|| SchemaReadError::NotInDocument {
        path: document_path.to_string(),
        type_: type_.to_string(),
    })?;
    let reference = format!(
        "#/components/schemas/{}",
        name.replace('~', "~0").replace('/', "~1")
    );
    let mut schema = Schema::from_document_ref(document, &reference, limits).map_err(|source| {
        SchemaReadError::Invalid {
            type_: type_.to_string(),
            source,
        }
    })?;
    schema.strip_docs();
    // The apiserver never applies a built-in type's OpenAPI defaults (Go code defaults it), and
    // the hub has already defaulted every object it places, so they say nothing about what a
    // member accepts; comparing them only reports noise between releases.
    schema.strip_defaults();
    Ok(schema.to_value())
}

/// A built-in type's spec: names and scope from discovery, the schema from OpenAPI v3.
pub fn builtin_spec(
    type_: &ResourceType,
    resource: &ApiResource,
    capabilities: &ApiCapabilities,
    schema: Value,
) -> ApiResourceSpec {
    let has = |name: &str| {
        capabilities
            .subresources
            .iter()
            .any(|(r, _)| r.plural == name)
    };
    let subresources = (has("status") || has("scale")).then(|| CustomResourceSubresources {
        status: has("status")
            .then(|| CustomResourceSubresourceStatus(Value::Object(Default::default()))),
        scale: has("scale").then(|| CustomResourceSubresourceScale {
            spec_replicas_path: ".spec.replicas".into(),
            status_replicas_path: ".status.replicas".into(),
            label_selector_path: None,
        }),
    });
    ApiResourceSpec {
        group_version: GroupVersion {
            group: type_.group.clone(),
            version: type_.version.clone(),
        },
        names: ApiResourceNames {
            plural: resource.plural.clone(),
            singular: None,
            kind: type_.kind.clone(),
            list_kind: Some(format!("{}List", type_.kind)),
            short_names: Vec::new(),
            categories: Vec::new(),
        },
        scope: match capabilities.scope {
            Scope::Namespaced => ResourceScope::Namespaced,
            Scope::Cluster => ResourceScope::Cluster,
        },
        subresources,
        column_definitions: Vec::new(),
        api_approved: None,
        open_api_v3_schema: schema,
    }
}

/// The CRD among `crds` that defines `type_` (its group and kind), if any.
pub fn find_crd<'a, I>(crds: I, type_: &ResourceType) -> Option<&'a CustomResourceDefinition>
where
    I: IntoIterator<Item = &'a CustomResourceDefinition>,
{
    crds.into_iter()
        .find(|c| c.spec.group == type_.group && c.spec.names.kind == type_.kind)
}

/// The annotation CRDs of the protected API groups must carry (KEP 1111).
pub const API_APPROVED: &str = "api-approved.kubernetes.io";

/// Whether CRDs of `group` must carry [`API_APPROVED`]: `k8s.io`, `kubernetes.io` and their
/// subdomains.
pub fn is_protected_group(group: &str) -> bool {
    ["k8s.io", "kubernetes.io"]
        .iter()
        .any(|g| group == *g || group.ends_with(&format!(".{g}")))
}

/// A custom type's spec from its CRD; `Ok(None)` when the CRD does not serve `version`.
pub fn crd_spec(
    crd: &CustomResourceDefinition,
    version: &str,
) -> Result<Option<ApiResourceSpec>, SchemaReadError> {
    let crd_name = crd.metadata.name.clone().unwrap_or_default();
    let Some(v) = crd
        .spec
        .versions
        .iter()
        .find(|v| v.name == version && v.served)
    else {
        return Ok(None);
    };
    let props = v
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .ok_or_else(|| SchemaReadError::NoCrdSchema {
            crd: crd_name.clone(),
            version: version.to_string(),
        })?;
    let schema = serde_json::to_value(props).map_err(|e| SchemaReadError::Unserializable {
        crd: crd_name,
        message: e.to_string(),
    })?;
    let names = &crd.spec.names;
    Ok(Some(ApiResourceSpec {
        group_version: GroupVersion {
            group: crd.spec.group.clone(),
            version: version.to_string(),
        },
        names: ApiResourceNames {
            plural: names.plural.clone(),
            singular: names.singular.clone().filter(|s| !s.is_empty()),
            kind: names.kind.clone(),
            list_kind: names.list_kind.clone().filter(|s| !s.is_empty()),
            short_names: names.short_names.clone().unwrap_or_default(),
            categories: names.categories.clone().unwrap_or_default(),
        },
        scope: if crd.spec.scope == "Cluster" {
            ResourceScope::Cluster
        } else {
            ResourceScope::Namespaced
        },
        subresources: v.subresources.clone(),
        column_definitions: v.additional_printer_columns.clone().unwrap_or_default(),
        api_approved: crd
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(API_APPROVED))
            .cloned(),
        open_api_v3_schema: schema,
    }))
}

/// `value` with every float that holds an integer written as an integer, so that a schema read
/// back from the apiserver (`maximum: 100`) equals the one written (`maximum: 100.0`).
pub fn normalized(value: &Value) -> Value {
    match value {
        Value::Number(n) if !n.is_i64() && !n.is_u64() => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Value::from(f as i64),
            _ => value.clone(),
        },
        Value::Array(items) => Value::Array(items.iter().map(normalized).collect()),
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), normalized(v))).collect())
        }
        _ => value.clone(),
    }
}

/// Whether two specs say the same (numbers compared by value).
pub fn same_spec(a: &ApiResourceSpec, b: &ApiResourceSpec) -> bool {
    match (serde_json::to_value(a), serde_json::to_value(b)) {
        (Ok(a), Ok(b)) => normalized(&a) == normalized(&b),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The real apps/v1 OpenAPI v3 document's Deployment schemas (descriptions stripped), as the
    /// schema crate's fixture keeps them.
    fn apps_v1() -> Value {
        let text = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../schema/testdata/deployment-apps-v1.json"
        ));
        serde_json::from_str(text).expect("fixture is JSON")
    }

    /// The same, from Kubernetes v1.34.4 (the older member of the local fleet).
    fn apps_v1_34() -> Value {
        let text = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../schema/testdata/deployment-apps-v1.34.json"
        ));
        serde_json::from_str(text).expect("fixture is JSON")
    }

    #[test]
    fn an_older_minors_deployment_only_lacks_fields() {
        let deployment = ResourceType::new("apps", "v1", "Deployment");
        let read = |doc: &Value| {
            builtin_schema(
                doc,
                "/openapi/v3/apis/apps/v1",
                &deployment,
                &Limits::default(),
            )
            .expect("readable")
        };
        let (hub, older) = (read(&apps_v1()), read(&apps_v1_34()));
        // v1.34 documents `default: ""` on every string of a map or list; none are kept.
        assert!(
            !older.to_string().contains("\"default\""),
            "no defaults survive"
        );
        // What the negotiator asks: can the member take everything the hub's schema allows?
        let c = flotilla_schema::compare(&hub, &older).expect("comparable");
        assert!(!c.changes.is_empty(), "v1.37 added fields since v1.34");
        // Narrower, never incompatible: in the spec, fields added since (e.g. in pod templates)
        // and operators the older one does not know (tolerations' Gt and Lt).
        use flotilla_schema::{ChangeKind, Verdict};
        for change in &c.changes {
            assert!(
                matches!(change.verdict, Verdict::Safe | Verdict::Narrowing),
                "{change:?}"
            );
            if change.path.starts_with(".spec") && change.verdict == Verdict::Narrowing {
                assert!(
                    matches!(
                        change.kind,
                        ChangeKind::PropertyRemoved | ChangeKind::EnumValuesRemoved
                    ),
                    "{change:?}"
                );
            }
        }
        assert_eq!(c.verdict(), flotilla_schema::Verdict::Narrowing);
        // And the other way round no field of the older one is missing in the newer one.
        let back = flotilla_schema::compare(&older, &hub).expect("comparable");
        assert!(
            back.changes
                .iter()
                .all(|c| c.kind != ChangeKind::PropertyRemoved),
            "{:?}",
            back.changes
        );
    }

    #[test]
    fn the_deployment_schema_is_read_from_openapi_v3() {
        let doc = apps_v1();
        let deployment = ResourceType::new("apps", "v1", "Deployment");
        assert_eq!(
            component_name(&doc, &deployment),
            Some("io.k8s.api.apps.v1.Deployment")
        );
        let schema = builtin_schema(
            &doc,
            "/openapi/v3/apis/apps/v1",
            &deployment,
            &Limits::default(),
        )
        .expect("readable");
        // One structural schema rooted at the object, with every $ref resolved.
        assert!(!schema.to_string().contains("$ref"));
        assert_eq!(schema["type"], "object");
        let spec = &schema["properties"]["spec"]["properties"];
        assert_eq!(spec["replicas"]["type"], "integer");
        let containers = &spec["template"]["properties"]["spec"]["properties"]["containers"];
        assert_eq!(containers["type"], "array");
        assert_eq!(containers["x-kubernetes-list-type"], "map");
        assert_eq!(containers["items"]["properties"]["image"]["type"], "string");
        assert!(schema["properties"]["metadata"]["properties"]["labels"].is_object());
        // Readable as a structural schema again, identical to the document's.
        let reread = Schema::from_value(&schema).expect("structural");
        let mut original = Schema::from_value(&doc).expect("the fixture parses");
        original.strip_defaults();
        assert!(flotilla_schema::compare_parsed(&original, &reread).is_identical());
    }

    #[test]
    fn a_built_in_spec_has_names_scope_and_subresources_from_discovery() {
        let t = ResourceType::new("apps", "v1", "Deployment");
        let gvk = t.gvk();
        let resource = ApiResource::from_gvk_with_plural(&gvk, "deployments");
        let sub = |plural: &str| {
            (
                ApiResource::from_gvk_with_plural(&gvk, plural),
                ApiCapabilities {
                    scope: Scope::Namespaced,
                    subresources: vec![],
                    operations: vec![],
                },
            )
        };
        let caps = ApiCapabilities {
            scope: Scope::Namespaced,
            subresources: vec![sub("status"), sub("scale")],
            operations: vec![],
        };
        let spec = builtin_spec(&t, &resource, &caps, json!({"type": "object"}));
        assert_eq!(spec.object_name(), "deployments.v1.apps");
        assert_eq!(spec.scope, ResourceScope::Namespaced);
        let written = serde_json::to_value(&spec).expect("serializable");
        // The CRD schema wants an object, never null.
        assert_eq!(written["subresources"]["status"], json!({}));
        assert_eq!(
            written["subresources"]["scale"]["specReplicasPath"],
            ".spec.replicas"
        );
    }

    #[test]
    fn a_type_the_document_lacks_is_an_error_naming_it() {
        let e = builtin_schema(
            &apps_v1(),
            "/openapi/v3/apis/apps/v1",
            &ResourceType::new("apps", "v1", "StatefulSet"),
            &Limits::default(),
        )
        .expect_err("not there");
        assert!(e.to_string().contains("apps/v1 StatefulSet"), "{e}");
    }

    #[test]
    fn bad_documents_are_errors_with_the_path_never_a_hang() {
        let gvk = json!([{"group": "example.com", "version": "v1", "kind": "Loop"}]);
        let recursive = json!({"components": {"schemas": {
            "Loop": {"type": "object", "x-kubernetes-group-version-kind": gvk,
                     "properties": {"next": {"$ref": "#/components/schemas/Loop"}}}}}});
        let t = ResourceType::new("example.com", "v1", "Loop");
        let e = builtin_schema(
            &recursive,
            "/openapi/v3/apis/example.com/v1",
            &t,
            &Limits::default(),
        )
        .expect_err("recursive");
        assert!(e.to_string().contains(".next"), "{e}");
        let dangling = json!({"components": {"schemas": {
            "Loop": {"type": "object", "x-kubernetes-group-version-kind": gvk,
                     "properties": {"next": {"$ref": "#/components/schemas/Gone"}}}}}});
        let e = builtin_schema(&dangling, "/x", &t, &Limits::default()).expect_err("dangling");
        assert!(e.to_string().contains("Gone"), "{e}");
        let tiny = Limits {
            max_depth: 64,
            max_nodes: 10,
        };
        let e = builtin_schema(
            &apps_v1(),
            "/x",
            &ResourceType::new("apps", "v1", "Deployment"),
            &tiny,
        )
        .expect_err("too large");
        assert!(matches!(
            e,
            SchemaReadError::Invalid {
                source: SchemaError::TooLarge { .. },
                ..
            }
        ));
    }

    #[test]
    fn a_crd_version_becomes_a_spec() {
        let crd: CustomResourceDefinition = serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                "versions": [
                    {"name": "v1", "served": true, "storage": true,
                     "subresources": {"status": {}},
                     "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {"size": {"type": "integer", "maximum": 10}}}}}}},
                    {"name": "v0", "served": false, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object"}}},
                ]},
        }))
        .expect("a CRD");
        let t = ResourceType::new("example.com", "v1", "Widget");
        let found = find_crd([&crd], &t).expect("found");
        let spec = crd_spec(found, "v1").expect("readable").expect("served");
        assert_eq!(spec.object_name(), "widgets.v1.example.com");
        assert_eq!(spec.names.singular.as_deref(), Some("widget"));
        assert!(spec.subresources.is_some());
        assert_eq!(
            spec.open_api_v3_schema["properties"]["spec"]["properties"]["size"]["maximum"],
            json!(10.0)
        );
        assert!(crd_spec(found, "v0").expect("readable").is_none());
        assert!(crd_spec(found, "v2").expect("readable").is_none());
        assert!(find_crd([&crd], &ResourceType::new("other.com", "v1", "Widget")).is_none());
    }

    #[test]
    fn numbers_compare_by_value() {
        assert_eq!(
            normalized(&json!({"a": [1.0, 2.5, 3]})),
            json!({"a": [1, 2.5, 3]})
        );
    }
}
