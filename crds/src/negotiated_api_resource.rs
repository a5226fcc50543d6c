//! `NegotiatedAPIResource`: the schema of one resource type that every member can honour.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api_resource::{ApiResourceSpec, NAME_RULE, NAME_RULE_MESSAGE};
use crate::common::is_default;
use crate::condition::ConditionStatus;

/// The least-common-denominator schema of one resource type across the members' imports.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "flotilla.dev",
    version = "v1alpha1",
    kind = "NegotiatedAPIResource",
    root = "NegotiatedApiResource",
    plural = "negotiatedapiresources",
    singular = "negotiatedapiresource",
    status = "NegotiatedApiResourceStatus",
    derive = "PartialEq",
    shortname = "nar",
    category = "flotilla",
    doc = "The schema of one resource type (group, version, resource) that every member can \
           honour: the least common denominator of the members' APIResourceImports, named \
           <plural>.<version>.<group> (core for the empty group). When the hub already serves the \
           type (built in, or a CRD Flotilla did not create) that schema is Enforced and imports \
           are only checked against it; otherwise publish: true creates the hub CRD from this \
           schema, which is never narrowed automatically afterwards.",
    printcolumn(
        name = "Publish",
        type_ = "boolean",
        json_path = ".spec.publish",
        description = "Whether the hub CRD should be created from this schema",
        priority = 1
    ),
    printcolumn(
        name = "Published",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Published\")].status",
        description = "The hub serves a CRD created from this schema"
    ),
    printcolumn(
        name = "Enforced",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Enforced\")].status",
        description = "The hub's own schema is enforced"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new(NAME_RULE).message(Message::Expression(NAME_RULE_MESSAGE.into()))
)]
#[serde(rename_all = "camelCase")]
pub struct NegotiatedApiResourceSpec {
    /// The negotiated type.
    #[serde(flatten)]
    pub resource: ApiResourceSpec,

    /// Create (and keep updated) a CRD on the hub from this schema, so users can create objects
    /// of the type there. Ignored when the hub's own schema is enforced. Default false.
    #[serde(default, skip_serializing_if = "is_default")]
    #[schemars(extend("default" = false))]
    pub publish: bool,

    /// Whether a member's import may widen the published schema (an import's
    /// `schemaUpdateStrategy: UpdatePublished`). The member's agent writes its imports, so that
    /// strategy alone would let one member drop the published CRD's validation (CEL rules,
    /// enums, required fields) for every member; it takes effect only when the hub admin also
    /// says so here. Default false: an import's `UpdatePublished` counts as `UpdateUnpublished`.
    #[serde(default, skip_serializing_if = "is_default")]
    #[schemars(extend("default" = false))]
    pub allow_published_updates: bool,
}

/// The negotiator's view of the type.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NegotiatedApiResourceStatus {
    /// `Submitted` (a schema was negotiated), `Published` (the hub serves a CRD made from it),
    /// `Enforced` (the hub's own schema is fixed; reasons `BuiltIn`, `HubCRD`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::common::conditions_schema")]
    pub conditions: Vec<Condition>,

    /// The `Compatible` condition of each member's import, in short.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["cluster"]
    ))]
    pub imports: Vec<ImportSummary>,
}

/// The verdict on one member's import.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImportSummary {
    /// Name of the Cluster.
    pub cluster: String,

    /// Status of the import's `Compatible` condition: `True`, `False` or `Unknown`.
    pub compatible: ConditionStatus,

    /// Reason of the import's `Compatible` condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
