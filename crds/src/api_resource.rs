//! The shape of one resource type, shared by `APIResourceImport` (what one member serves) and
//! `NegotiatedAPIResource` (what every member can honour).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinitionNames, CustomResourceSubresources,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::patterns;
use crate::names;

/// The CEL rule that pins the name of an APIResourceImport or NegotiatedAPIResource to
/// `<plural>.<version>.<group>` (`core` for the empty group), so there is one per resource type
/// (per member, for imports).
pub(crate) const NAME_RULE: &str = "self.metadata.name == self.spec.names.plural + '.' + self.spec.groupVersion.version + '.' + (self.spec.groupVersion.group == '' ? 'core' : self.spec.groupVersion.group)";

/// Message of [`NAME_RULE`], naming the expected value.
pub(crate) const NAME_RULE_MESSAGE: &str = "'metadata.name must be <plural>.<version>.<group> (core for the empty group), here ' + self.spec.names.plural + '.' + self.spec.groupVersion.version + '.' + (self.spec.groupVersion.group == '' ? 'core' : self.spec.groupVersion.group)";

/// A resource type as a CRD would declare it: group/version, names, scope, subresources, printer
/// columns and a structural schema.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiResourceSpec {
    /// API group and version of the type.
    pub group_version: GroupVersion,

    /// Names of the type (plural, singular, kind, ...).
    pub names: ApiResourceNames,

    /// `Namespaced` or `Cluster`.
    pub scope: ResourceScope,

    /// Subresources the type serves (`status`, `scale`), as in a CRD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subresources: Option<CustomResourceSubresources>,

    /// Printer columns, as in a CRD.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub column_definitions: Vec<CustomResourceColumnDefinition>,

    /// The CRD's `api-approved.kubernetes.io` annotation, which CRDs of the protected groups
    /// (`*.k8s.io`, `*.kubernetes.io`) must carry: a published CRD carries it too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_approved: Option<String>,

    /// The type's schema as a CRD-style structural OpenAPI v3 schema (`$ref`s resolved,
    /// `x-kubernetes-*` extensions kept), rooted at the object (apiVersion, kind, metadata, spec,
    /// status).
    #[serde(rename = "openAPIV3Schema")]
    #[schemars(schema_with = "crate::common::preserve_unknown_object")]
    pub open_api_v3_schema: serde_json::Value,
}

/// An API group and version.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupVersion {
    /// API group, e.g. `apps`; empty for the core group.
    #[serde(default)]
    #[schemars(length(max = 253), regex(pattern = patterns::API_GROUP))]
    pub group: String,

    /// API version, e.g. `v1`.
    #[schemars(length(min = 1, max = 63), regex(pattern = patterns::DNS_LABEL))]
    pub version: String,
}

/// The names of a resource type.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiResourceNames {
    /// Plural resource name, as in URLs: `deployments`.
    #[schemars(length(min = 1, max = 63), regex(pattern = patterns::DNS_LABEL))]
    pub plural: String,

    /// Singular name: `deployment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), regex(pattern = patterns::DNS_LABEL))]
    pub singular: Option<String>,

    /// Kind: `Deployment`.
    #[schemars(length(min = 1, max = 63), regex(pattern = patterns::KIND))]
    pub kind: String,

    /// Kind of lists: `DeploymentList`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), regex(pattern = patterns::KIND))]
    pub list_kind: Option<String>,

    /// Short names: `deploy`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(max = 63), regex(pattern = patterns::DNS_LABEL)))]
    pub short_names: Vec<String>,

    /// Categories, e.g. `all`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(max = 63), regex(pattern = patterns::DNS_LABEL)))]
    pub categories: Vec<String>,
}

/// Whether objects of a type live in namespaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ResourceScope {
    /// Objects live in namespaces.
    Namespaced,
    /// Objects are cluster-wide.
    Cluster,
}

impl ApiResourceSpec {
    /// The name an APIResourceImport or NegotiatedAPIResource of this type must have:
    /// `<plural>.<version>.<group>`.
    pub fn object_name(&self) -> String {
        names::api_resource_name(
            &self.group_version.group,
            &self.group_version.version,
            &self.names.plural,
        )
    }
}

impl GroupVersion {
    /// `apps/v1`, or `v1` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl ResourceScope {
    /// The spelling of a CRD's `spec.scope`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Namespaced => "Namespaced",
            Self::Cluster => "Cluster",
        }
    }
}

impl From<ApiResourceNames> for CustomResourceDefinitionNames {
    fn from(n: ApiResourceNames) -> Self {
        Self {
            plural: n.plural,
            singular: n.singular,
            kind: n.kind,
            list_kind: n.list_kind,
            short_names: (!n.short_names.is_empty()).then_some(n.short_names),
            categories: (!n.categories.is_empty()).then_some(n.categories),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_versions_and_names() {
        let core = GroupVersion {
            group: String::new(),
            version: "v1".into(),
        };
        assert_eq!(core.api_version(), "v1");
        let apps = GroupVersion {
            group: "apps".into(),
            version: "v1".into(),
        };
        assert_eq!(apps.api_version(), "apps/v1");
        let spec = ApiResourceSpec {
            group_version: apps,
            names: ApiResourceNames {
                plural: "deployments".into(),
                kind: "Deployment".into(),
                ..Default::default()
            },
            scope: ResourceScope::Namespaced,
            subresources: None,
            column_definitions: vec![],
            api_approved: None,
            open_api_v3_schema: serde_json::json!({"type": "object"}),
        };
        assert_eq!(spec.object_name(), "deployments.v1.apps");
        assert_eq!(spec.scope.as_str(), "Namespaced");
    }

    #[test]
    fn names_convert_to_crd_names() {
        let names = ApiResourceNames {
            plural: "widgets".into(),
            singular: Some("widget".into()),
            kind: "Widget".into(),
            list_kind: None,
            short_names: vec!["wd".into()],
            categories: vec![],
        };
        let crd: CustomResourceDefinitionNames = names.into();
        assert_eq!(crd.plural, "widgets");
        assert_eq!(crd.short_names, Some(vec!["wd".to_string()]));
        assert_eq!(crd.categories, None);
    }
}
