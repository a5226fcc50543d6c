//! How the splitter names what it places: a hub object and its copies, the Works that hold
//! them, and the types it reads.

use std::collections::BTreeMap;

use flotilla_api::{ManifestIdentity, Work, names};
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};

/// Which hub object a copy is of: its type and name (in the Placement's namespace).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub api_version: String,
    pub kind: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(api_version: &str, kind: &str, name: &str) -> Self {
        Self {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            name: name.to_string(),
        }
    }

    /// Its API group (empty for the core group).
    pub fn group(&self) -> &str {
        self.api_version.split_once('/').map_or("", |(g, _)| g)
    }

    /// Whether a member's report of an object (its identity in a Work's status) is of this one.
    pub fn is(&self, id: &ManifestIdentity) -> bool {
        id.group == self.group() && id.kind == self.kind && id.name == self.name
    }
}

/// Which copy: the object and its member.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CopyKey {
    pub object: ObjectKey,
    pub cluster: String,
}

impl CopyKey {
    pub fn new(object: ObjectKey, cluster: &str) -> Self {
        Self {
            object,
            cluster: cluster.to_string(),
        }
    }

    /// The Works it goes into: those of its member and type.
    pub fn shelf(&self) -> Shelf {
        Shelf {
            cluster: self.cluster.clone(),
            api_version: self.object.api_version.clone(),
            kind: self.object.kind.clone(),
        }
    }

    /// `Kind/name on member`, as messages name it.
    pub fn describe(&self) -> String {
        format!(
            "{}/{} on {}",
            self.object.kind, self.object.name, self.cluster
        )
    }
}

/// The Works of one Placement that place objects of one type on one member.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shelf {
    pub cluster: String,
    pub api_version: String,
    pub kind: String,
}

/// The labels of a hub namespace that its member namespaces carry: all but the one the
/// apiserver sets on every namespace (`kubernetes.io/metadata.name`, which the member sets
/// itself).
pub fn member_namespace_labels(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    labels
        .iter()
        .filter(|(k, _)| k.as_str() != "kubernetes.io/metadata.name")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A Work's namespace and name.
pub type WorkId = (String, String);

/// A Work's namespace and name.
pub fn key_of(w: &Work) -> WorkId {
    (w.namespace().unwrap_or_default(), w.name_any())
}

/// The object with its type set (lists of dynamic objects leave it out).
pub fn typed(mut object: DynamicObject, ar: &ApiResource) -> DynamicObject {
    object.types = Some(kube::api::TypeMeta {
        api_version: ar.api_version.clone(),
        kind: ar.kind.clone(),
    });
    object
}

/// The name of the APIResourceImport (and NegotiatedAPIResource) of a type.
pub fn import_name(ar: &ApiResource) -> String {
    names::api_resource_name(&ar.group, &ar.version, &ar.plural)
}

/// The API resource of a type, by group, version, kind and plural.
pub fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}
