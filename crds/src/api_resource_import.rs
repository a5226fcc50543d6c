//! `APIResourceImport`: one member's schema for one resource type.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api_resource::{ApiResourceSpec, NAME_RULE, NAME_RULE_MESSAGE};
use crate::common::is_default;
use crate::names;

/// One member's schema for one resource type, as the importer read it from the member.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "flotilla.dev",
    version = "v1alpha1",
    kind = "APIResourceImport",
    root = "ApiResourceImport",
    plural = "apiresourceimports",
    singular = "apiresourceimport",
    namespaced,
    status = "ApiResourceImportStatus",
    derive = "PartialEq",
    shortname = "ari",
    category = "flotilla",
    doc = "One member's schema for one resource type (group, version, resource), as imported from \
           the member's OpenAPI v3 or CRD. It lives in the hub namespace flotilla-cluster-<name> of \
           that member and is named <plural>.<version>.<group> (core for the empty group). Its \
           Compatible condition says whether the member can honour the negotiated (or enforced) \
           schema of the type, naming the field paths that differ.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.flotilla\\.dev/cluster",
        description = "The member cluster"
    ),
    printcolumn(
        name = "Kind",
        type_ = "string",
        json_path = ".spec.names.kind",
        priority = 1
    ),
    printcolumn(
        name = "Compatible",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Compatible\")].status",
        description = "The member can honour the negotiated or enforced schema"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Compatible\")].reason",
        description = "Identical, Superset, MissingFields, Incompatible, Pending, ..."
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new(NAME_RULE).message(Message::Expression(NAME_RULE_MESSAGE.into()))
)]
#[serde(rename_all = "camelCase")]
pub struct ApiResourceImportSpec {
    /// The type as the member serves it.
    #[serde(flatten)]
    pub resource: ApiResourceSpec,

    /// Whether this import may change the negotiated schema: `UpdateUnpublished` (default: only
    /// while the negotiated type is not published on the hub), `UpdatePublished` (also when it is
    /// published — only where the NegotiatedAPIResource says `allowPublishedUpdates`: a member
    /// cannot widen what every member is held to on its own) or `UpdateNever`.
    #[serde(default, skip_serializing_if = "is_default")]
    #[schemars(extend("default" = "UpdateUnpublished"))]
    pub schema_update_strategy: SchemaUpdateStrategy,
}

/// Whether an import may change the negotiated schema.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum SchemaUpdateStrategy {
    /// Never.
    UpdateNever,
    /// Only while the negotiated type is not published.
    #[default]
    UpdateUnpublished,
    /// Also when it is published.
    UpdatePublished,
}

/// The negotiator's verdict on an import.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiResourceImportStatus {
    /// `Compatible`: `True` (reasons `Identical`, `Superset`), `False` (`MissingFields`,
    /// `Incompatible`), or `Unknown` (`Pending`, `Undecidable`); the message names the paths.
    /// `Imported`: whether the last read of the member's schema succeeded (`False`,
    /// `ImportFailed`: the last import is kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::common::conditions_schema")]
    pub conditions: Vec<Condition>,

    /// The differences between this member's schema and the negotiated (or enforced) one, at most
    /// 100; the `Compatible` message says when there are more.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub differences: Vec<SchemaDifference>,
}

/// One difference between two schemas.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchemaDifference {
    /// JSON path of the field, e.g. `.spec.template.spec.containers[*].resizePolicy`.
    pub path: String,

    /// What changed, e.g. `FieldMissing`, `TypeChanged`, `EnumNarrowed`.
    pub change: String,

    /// `Safe`, `Narrowing` (objects using the difference cannot go to this member),
    /// `Breaking`, or `Unknown` (the comparison could not decide).
    pub verdict: DifferenceVerdict,

    /// Details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// How much a schema difference matters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum DifferenceVerdict {
    /// Accepts everything the other accepts.
    Safe,
    /// Accepts less: objects using the difference cannot go to this member.
    Narrowing,
    /// Incompatible.
    Breaking,
    /// Could not be decided.
    #[default]
    Unknown,
}

impl ApiResourceImport {
    /// The member this import describes, from its namespace `flotilla-cluster-<name>`.
    pub fn cluster_name(&self) -> Option<&str> {
        self.metadata
            .namespace
            .as_deref()
            .and_then(names::cluster_from_namespace)
    }
}
