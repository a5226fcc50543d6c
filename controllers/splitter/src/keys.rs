//! How the splitter names what it places: a hub object and its copies, the Works that hold
//! them, and the types it reads.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex};

use flotilla_api::{ManifestIdentity, Work, names};
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};

/// A name in a key, shared by the keys that carry it: cloning one counts a reference, and two
/// keys made from one interned name ([`Name::interned`]: API versions, kinds, members) compare
/// equal without reading it. A plan keys every copy of its Placement in ordered maps, in every
/// pass: with the names as strings of their own, `memcmp` alone was a sixth of the splitter's
/// CPU in single edits at 10 members, and the plan a third faster without it
/// (`hack/bench.sh plan`, docs/benchmarks.md).
#[derive(Clone)]
pub struct Name(Arc<str>);

impl Name {
    /// `name`, not shared with other keys (an object's name).
    pub fn new(name: &str) -> Self {
        Self(Arc::from(name))
    }

    /// `name`, shared with every key that interned the same: for the few values every key
    /// repeats (API versions, kinds, members). What is interned stays for the process's life.
    pub fn interned(name: &str) -> Self {
        static NAMES: LazyLock<Mutex<HashSet<Arc<str>>>> = LazyLock::new(Default::default);
        let mut names = NAMES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(shared) = names.get(name) {
            return Self(shared.clone());
        }
        let shared: Arc<str> = Arc::from(name);
        names.insert(shared.clone());
        Self(shared)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for Name {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for Name {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl Eq for Name {}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            return std::cmp::Ordering::Equal;
        }
        self.0.cmp(&other.0)
    }
}

impl std::hash::Hash for Name {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for Name {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<Name> for String {
    fn eq(&self, other: &Name) -> bool {
        **self == *other.0
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

/// Which hub object a copy is of: its type and name (in the Placement's namespace).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub api_version: Name,
    pub kind: Name,
    pub name: Name,
}

impl ObjectKey {
    pub fn new(api_version: &str, kind: &str, name: &str) -> Self {
        Self {
            api_version: Name::interned(api_version),
            kind: Name::interned(kind),
            name: Name::new(name),
        }
    }

    /// Its API group (empty for the core group).
    pub fn group(&self) -> &str {
        self.api_version.split_once('/').map_or("", |(g, _)| g)
    }

    /// Whether a member's report of an object (its identity in a Work's status) is of this one.
    pub fn is(&self, id: &ManifestIdentity) -> bool {
        id.group == self.group() && id.kind == *self.kind && id.name == *self.name
    }
}

/// Which copy: the object and its member.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CopyKey {
    pub object: ObjectKey,
    pub cluster: Name,
}

impl CopyKey {
    pub fn new(object: ObjectKey, cluster: &str) -> Self {
        Self {
            object,
            cluster: Name::interned(cluster),
        }
    }

    /// The Works it goes into: those of its member and type.
    pub fn shelf(&self) -> Shelf {
        Shelf {
            cluster: self.cluster.to_string(),
            api_version: self.object.api_version.to_string(),
            kind: self.object.kind.to_string(),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys order and compare as the tuples of their strings, whether their names were
    /// interned (shared) or made apart.
    #[test]
    fn keys_order_as_their_strings_however_their_names_were_made() {
        let strings = [
            ("apps/v1", "Deployment", "web", "member1"),
            ("v1", "ConfigMap", "a", "member2"),
            ("v1", "ConfigMap", "a", "member10"),
            ("v1", "ConfigMap", "ab", "member1"),
            ("v1", "Secret", "a", "member1"),
            ("v1", "ConfigMap", "", "member1"),
        ];
        let interned: Vec<CopyKey> = strings
            .iter()
            .map(|(v, k, n, c)| CopyKey::new(ObjectKey::new(v, k, n), c))
            .collect();
        let apart: Vec<CopyKey> = strings
            .iter()
            .map(|(v, k, n, c)| CopyKey {
                object: ObjectKey {
                    api_version: Name::new(v),
                    kind: Name::new(k),
                    name: Name::new(n),
                },
                cluster: Name::new(c),
            })
            .collect();
        for (i, a) in strings.iter().enumerate() {
            for (j, b) in strings.iter().enumerate() {
                let want = a.cmp(b);
                assert_eq!(interned[i].cmp(&interned[j]), want, "{a:?} against {b:?}");
                assert_eq!(interned[i].cmp(&apart[j]), want, "{a:?} against {b:?}");
                assert_eq!(apart[i].cmp(&apart[j]), want, "{a:?} against {b:?}");
                assert_eq!(interned[i] == apart[j], a == b, "{a:?} against {b:?}");
            }
        }
        // Interned names are one allocation, shared.
        assert!(Arc::ptr_eq(
            &interned[1].cluster.0,
            &Name::interned("member2").0
        ));
        assert!(Arc::ptr_eq(
            &interned[1].object.kind.0,
            &interned[2].object.kind.0
        ));
        assert!(!Arc::ptr_eq(
            &apart[1].object.kind.0,
            &apart[2].object.kind.0
        ));
    }
}
