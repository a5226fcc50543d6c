//! Types shared by several kinds, and the schema pieces the CRDs have in common.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// Regular expressions used as OpenAPI `pattern`s. The apiserver reports a mismatch with the
/// field's path, e.g. `spec.weights[0].cluster in body should match '...'`.
pub(crate) mod patterns {
    /// RFC 1123 label: a Cluster name, a namespace, a version.
    pub const DNS_LABEL: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
    /// RFC 1123 subdomain: object names, API groups.
    pub const DNS_SUBDOMAIN: &str =
        r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
    /// An API group: a subdomain, or empty for the core group.
    pub const API_GROUP: &str =
        r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$";
    /// `<group>/<version>` or `<version>` (core group).
    pub const API_VERSION: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
    /// A kind: `Deployment`, `ConfigMap`.
    pub const KIND: &str = "^[A-Za-z]([-A-Za-z0-9]*[A-Za-z0-9])?$";
    /// A qualified name as used for label and taint keys: `[prefix/]name`.
    pub const QUALIFIED_NAME: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$";
    /// A qualified name, or empty (a toleration's key).
    pub const OPTIONAL_QUALIFIED_NAME: &str = r"^$|^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$";
    /// A label value (may be empty).
    pub const LABEL_VALUE: &str = "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
    /// A key of a Secret's data.
    pub const SECRET_KEY: &str = "^[-._a-zA-Z0-9]+$";
    /// A path to a field through objects only, JSONPath style: `.spec.replicas`.
    pub const FIELD_PATH: &str = r"^(\.[A-Za-z_$][A-Za-z0-9_$-]*)+$";
    /// A path into an object, JSONPath style: `.spec.replicas`.
    pub const JSON_PATH: &str = r"^(\.[^.\[\]]+(\[[^\[\]]+\])?)+$";
}

/// What happens to the member copies of objects when Flotilla stops placing them (the hub object
/// or the Work is deleted, or a cluster is no longer selected).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum DeletePolicy {
    /// Delete the member copies, and finish only once they are gone.
    #[default]
    Delete,
    /// Leave the member copies in place, no longer managed by Flotilla.
    Orphan,
}

/// What the syncer does when an object it is about to create already exists in the member and
/// was not created by Flotilla.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConflictPolicy {
    /// Leave the existing object untouched and report `Applied=False, reason=Conflict`.
    #[default]
    Abort,
    /// Take the existing object over: apply the manifest to it and manage it from now on.
    Adopt,
}

/// Selects manifests (rendered objects) by identity; every criterion that is set must match, and
/// an empty selector matches every manifest.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestSelector {
    /// API group of the object (`apps`; empty string for the core group). Any group when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), regex(pattern = patterns::API_GROUP))]
    pub group: Option<String>,

    /// Kind of the object (`Deployment`). Any kind when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = patterns::KIND))]
    pub kind: Option<String>,

    /// Namespace of the object. Any namespace when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = patterns::DNS_LABEL))]
    pub namespace: Option<String>,

    /// Name of the object. Any name when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub name: Option<String>,
}

/// Fields that Flotilla sets when it creates an object in a member and then leaves to the member:
/// later changes on the hub are not applied to them and changes in the member are not reverted.
/// Typical use: `.spec.replicas` of a Deployment scaled by a HorizontalPodAutoscaler in the member.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IgnoreFields {
    /// Which manifests the paths apply to. Every manifest when empty.
    #[serde(default)]
    pub manifest: ManifestSelector,

    /// Paths of the fields, JSONPath style from the object's root, e.g. `.spec.replicas` or
    /// `.metadata.annotations`. The identity of an object (`.apiVersion`, `.kind`,
    /// `.metadata.name`, `.metadata.namespace`) cannot be ignored.
    #[schemars(
        length(min = 1, max = 64),
        inner(length(max = 256), regex(pattern = patterns::JSON_PATH)),
        extend("x-kubernetes-list-type" = "set", "x-kubernetes-validations" = [{
            "rule": "self.all(p, !(p in ['.apiVersion', '.kind', '.metadata', '.metadata.name', '.metadata.namespace']))",
            "message": "jsonPaths must not include .apiVersion, .kind, .metadata, .metadata.name or .metadata.namespace: they identify the object",
        }])
    )]
    pub json_paths: Vec<String>,
}

impl ManifestSelector {
    /// Whether the selector matches an object of this group, kind, namespace and name.
    pub fn matches(&self, group: &str, kind: &str, namespace: Option<&str>, name: &str) -> bool {
        self.group.as_deref().is_none_or(|g| g == group)
            && self.kind.as_deref().is_none_or(|k| k == kind)
            && self
                .namespace
                .as_deref()
                .is_none_or(|n| Some(n) == namespace)
            && self.name.as_deref().is_none_or(|n| n == name)
    }
}

/// Used with `skip_serializing_if` so that a default value is left out of an apply patch and the
/// applier does not take ownership of a field it does not care about.
pub(crate) fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// Schema of a list of standard conditions, keyed by `type` so that several controllers can own
/// one condition each under server-side apply.
pub(crate) fn conditions_schema(generator: &mut SchemaGenerator) -> Schema {
    let mut schema =
        generator.subschema_for::<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>();
    schema.insert("x-kubernetes-list-type".into(), "map".into());
    schema.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["type"]),
    );
    schema
}

/// Schema of a map of resource quantities (`cpu: "4"`, `memory: 16Gi`), as Kubernetes' own CRDs
/// declare one: an integer or a string in quantity syntax.
pub(crate) fn quantity_map_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {
            "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
            "x-kubernetes-int-or-string": true,
        },
    })
}

/// Schema of an arbitrary JSON object whose fields the apiserver keeps as they are.
pub(crate) fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_selector_matches_everything() {
        let s = ManifestSelector::default();
        assert!(s.matches("apps", "Deployment", Some("web"), "api"));
        assert!(s.matches("", "Namespace", None, "web"));
    }

    #[test]
    fn selector_criteria_are_anded() {
        let s = ManifestSelector {
            group: Some("apps".into()),
            kind: Some("Deployment".into()),
            namespace: None,
            name: Some("api".into()),
        };
        assert!(s.matches("apps", "Deployment", Some("web"), "api"));
        assert!(!s.matches("apps", "Deployment", Some("web"), "db"));
        assert!(!s.matches("", "Deployment", Some("web"), "api"));
        assert!(!s.matches("apps", "StatefulSet", Some("web"), "api"));
        let core = ManifestSelector {
            group: Some(String::new()),
            namespace: Some("web".into()),
            ..Default::default()
        };
        assert!(core.matches("", "ConfigMap", Some("web"), "x"));
        assert!(!core.matches("", "Namespace", None, "web"));
    }

    #[test]
    fn default_values_are_skipped() {
        assert!(is_default(&false));
        assert!(!is_default(&true));
        assert!(is_default(&DeletePolicy::Delete));
        assert!(!is_default(&ConflictPolicy::Adopt));
    }
}
