//! `Work`: the objects to apply to one member cluster, and what the member reports back.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use kube::api::DynamicObject;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::common::{ConflictPolicy, DeletePolicy, IgnoreFields};
use crate::condition::ConditionStatus;
use crate::names;

/// The objects to apply to the member cluster, and how.
// Clippy takes the repeated keys of separate `printcolumn(...)` entries for duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "flotilla.dev",
    version = "v1alpha1",
    kind = "Work",
    plural = "works",
    namespaced,
    status = "WorkStatus",
    derive = "PartialEq",
    shortname = "fw",
    category = "flotilla",
    doc = "Objects to apply to one member cluster, rendered by the splitter from one hub object, \
           and the status the member reports back. A Work lives in the hub namespace \
           flotilla-cluster-<name> of its member; the syncer applies its manifests there with \
           server-side apply and copies their status back. Deleting a Work deletes (or orphans, \
           per deletePolicy) its objects in the member.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.flotilla\\.dev/cluster",
        description = "The member cluster"
    ),
    printcolumn(
        name = "Applied",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Applied\")].status",
        description = "Every manifest is applied in the member"
    ),
    printcolumn(
        name = "Available",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Available\")].status",
        description = "Every applied object is available"
    ),
    printcolumn(
        name = "Degraded",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Degraded\")].status",
        description = "An applied object reports a failure",
        priority = 1
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Applied\")].reason",
        description = "Reason of the Applied condition",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct WorkSpec {
    /// The objects to apply to the member, complete Kubernetes objects (apiVersion, kind,
    /// metadata with a name, and the rest), stripped of hub-only metadata. Namespaced objects are
    /// applied in their `metadata.namespace`, which is created in the member when missing. An
    /// object whose manifest is removed from the list is deleted from the member like those of
    /// a deleted Work (per `deletePolicy`), unless another Work of the member names it: that
    /// Work takes it over as it is. The splitter writes a Secret without its `data` and
    /// `stringData`: its annotation `flotilla.dev/data-secret` names the Secret of the Work's
    /// namespace that holds them, which the syncer reads and puts back when it applies it.
    ///
    /// Each manifest is the object itself or the same object as a JSON string. The splitter
    /// writes strings: the hub decodes, checks and copies a string at a fraction of what an
    /// object of fields costs it, on every Work write and every status write (a quarter less
    /// hub CPU per copy with Works of 50 manifests, docs/benchmarks.md). A manifest the syncer
    /// cannot read as an object with an apiVersion, a kind and a `metadata.name` is reported in
    /// `status.manifests` (`Applied=False`), not applied.
    #[schemars(schema_with = "manifests_schema")]
    #[serde(with = "manifests_json")]
    pub manifests: Vec<DynamicObject>,

    /// What happens to the member objects when the Work is deleted, or their manifests are
    /// removed from it: `Delete` (default; a deleted Work goes only once they are gone) or
    /// `Orphan` (they stay, unmanaged).
    #[serde(default)]
    pub delete_policy: DeletePolicy,

    /// What happens when a manifest names an object that exists in the member and is not this
    /// Work's — not created by Flotilla, or held by another Work that still names it: `Abort`
    /// (default: leave it, report `Applied=False, reason=Conflict`) or `Adopt` (take it over).
    #[serde(default)]
    pub conflict_policy: ConflictPolicy,

    /// Fields set when an object is created and then left to the member.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub ignore_fields: Vec<IgnoreFields>,

    /// Labels of the member namespaces the manifests are applied in: the splitter copies those
    /// of the hub namespace the objects come from (its Pod Security labels among them). The
    /// syncer sets them on a namespace it creates, and keeps them there (a label left out is
    /// removed); a namespace the member had already is left as it is. Unset: the Work has no
    /// say in its namespaces' labels (an empty map does: no labels but Flotilla's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_labels: Option<BTreeMap<String, String>>,

    /// Whether the manifests may be applied in member namespaces that exist and that Flotilla
    /// did not create (the members' own). The splitter sets it: `true` where the hub namespace's
    /// admin allows it (annotation `flotilla.dev/allow-existing-namespaces` or
    /// `flotilla.dev/allow-adopt`) and for a ClusterPlacement's Works, else `false`, and such a
    /// manifest reports `Applied=False, reason=NamespaceNotFlotillas`. Unset (a Work written by
    /// hand, an admin's): yes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_existing_namespaces: Option<bool>,

    /// When a manifest's object is healthy in the member (its `available`): a CEL expression over
    /// `self`, the member's object with its status. The splitter copies it from the accepted
    /// WorkloadProfile of the manifests' kind. Unset: the syncer's rules for the kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub health: Option<String>,
}

/// Schema of `spec.manifests`: each item an object or a JSON string (see [`manifests_json`]),
/// kept as it is. The hub checks no more of an item: an object's fields cost the hub per field
/// on every write of the Work and of its status, and a string's content is not JSON to it. The
/// syncer checks every manifest before it applies it, and reports the one it cannot apply.
fn manifests_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "minItems": 1,
        "maxItems": 100,
        "items": {
            "x-kubernetes-preserve-unknown-fields": true,
        },
    })
}

/// How `spec.manifests` is written and read: written as JSON strings, read from strings or
/// objects.
///
/// A string that is not the JSON of an object with a type reads as a manifest of no type and
/// no name (the syncer then reports it as such), so that one bad manifest in a Work written
/// by hand fails that manifest, not the decoding of every Work of a watch.
pub mod manifests_json {
    use kube::api::DynamicObject;
    use serde::{Deserializer, Serializer};

    /// Writes each manifest as its compact JSON.
    pub fn serialize<S: Serializer>(
        manifests: &[DynamicObject],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        super::json_strings::serialize(manifests, serializer)
    }

    /// Reads each manifest from a JSON string or an object.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<DynamicObject>, D::Error> {
        super::json_strings::deserialize(deserializer, "manifests", || Some(unreadable()))
    }

    /// What a manifest that is no object reads as: no type, no name.
    fn unreadable() -> DynamicObject {
        DynamicObject {
            types: None,
            metadata: Default::default(),
            data: serde_json::Value::Object(Default::default()),
        }
    }
}

/// Lists whose items are written as their compact JSON (a string each) and read from a string
/// or an object, an item that does not read standing for what `unreadable` says (`None`: left
/// out): one bad item fails that item, never the decoding of the object it is in.
mod json_strings {
    use serde::de::{DeserializeOwned, Deserializer, SeqAccess, Visitor};
    use serde::ser::{Error as _, SerializeSeq, Serializer};
    use serde::{Deserialize, Serialize};

    pub fn serialize<S: Serializer, T: Serialize>(
        items: &[T],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(items.len()))?;
        for item in items {
            let json = serde_json::to_string(item).map_err(S::Error::custom)?;
            seq.serialize_element(&json)?;
        }
        seq.end()
    }

    /// One item as the hub serves it.
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Item {
        Json(String),
        /// An object, or anything else (which then does not read).
        Other(serde_json::Value),
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: DeserializeOwned>(
        deserializer: D,
        what: &'static str,
        unreadable: fn() -> Option<T>,
    ) -> Result<Vec<T>, D::Error> {
        struct Items<T> {
            what: &'static str,
            unreadable: fn() -> Option<T>,
        }
        impl<'de, T: DeserializeOwned> Visitor<'de> for Items<T> {
            type Value = Vec<T>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                write!(f, "a list of {}, JSON strings or objects", self.what)
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(100));
                while let Some(item) = seq.next_element::<Item>()? {
                    let read = match item {
                        Item::Json(json) => serde_json::from_str(&json),
                        Item::Other(value) => serde_json::from_value(value),
                    };
                    out.extend(read.ok().or_else(self.unreadable));
                }
                Ok(out)
            }

            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(Vec::new())
            }
        }
        deserializer.deserialize_any(Items { what, unreadable })
    }
}

/// Schema of `status.manifests`: each item a [`ManifestStatus`] as a JSON string, or (as the
/// syncer wrote it before) as an object. As for `spec.manifests`, the hub checks no more of an
/// item: each field of an entry cost the hub on every write of the Work, its spec's too (with
/// 50 entries of about ten fields, 43% of the hub's CPU for a Work and its status writes,
/// `hack/bench.sh envelopes`). Readers skip an entry they cannot read ([`entries_json`]).
fn entries_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "x-kubernetes-list-type": "atomic",
        "items": {
            "description": "The observed state of one manifest's object in the member: a JSON \
                string (or an object) of ordinal, identity (group, version, kind, resource, \
                namespace, name), resourceVersion, generation, observedGeneration, status, \
                applied, available, reason, message and lastTransitionTime.",
            "x-kubernetes-preserve-unknown-fields": true,
        },
    })
}

/// How `status.manifests` is written and read: each entry written as its compact JSON, read
/// from a string or an object. An entry that does not read as a [`ManifestStatus`] (written by
/// hand, or by a member's agent that lies) is left out: it fails that entry, never the
/// decoding of the Work (and of every Work of a watch), and no reader takes the absence of an
/// entry for anything but "not reported".
pub mod entries_json {
    use serde::{Deserializer, Serializer};

    use super::ManifestStatus;

    pub fn serialize<S: Serializer>(
        entries: &[ManifestStatus],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        super::json_strings::serialize(entries, serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<ManifestStatus>, D::Error> {
        super::json_strings::deserialize(deserializer, "manifest statuses", || None)
    }
}

/// What the syncer observed in the member.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkStatus {
    /// `Applied` (every manifest was applied; reasons such as `Conflict`, `ApplyFailed`,
    /// `UnknownResourceType`, `ClusterUnavailable`), `Available` (every object is available) and
    /// `Degraded` (an object reports a failure).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::common::conditions_schema")]
    pub conditions: Vec<Condition>,

    /// The Work's `metadata.generation` that `manifests` reports on: the syncer last applied
    /// that spec to the member (an entry's `applied` and `available` say how it went). Older
    /// than the Work's generation while the member has not been reached since the spec changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The observed state of each manifest's object in the member, each entry written as its
    /// JSON (a string), as `spec.manifests` is.
    // Atomic: the syncer is its only writer and writes it whole, so ownership per entry is of
    // no use, and would have the hub keep (and merge on every status write) managed fields as
    // large as the list itself.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "entries_json")]
    #[schemars(schema_with = "entries_schema")]
    pub manifests: Vec<ManifestStatus>,

    /// Objects this Work applied whose manifests it no longer has: the syncer deletes them from
    /// the member (unless `deletePolicy` is `Orphan`, or another Work of the member now holds
    /// them) and lists them here until they are gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub removing: Vec<ManifestIdentity>,
}

/// The observed state of one manifest's object in the member.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestStatus {
    /// Index of the manifest in `spec.manifests`.
    #[schemars(range(min = 0, max = 2147483647))]
    pub ordinal: i32,

    /// Which object this is.
    pub identity: ManifestIdentity,

    /// `metadata.resourceVersion` of the object in the member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,

    /// `metadata.generation` of the object in the member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,

    /// `status.observedGeneration` of the object in the member, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The object's `status` as the member reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::common::preserve_unknown_object")]
    pub status: Option<serde_json::Value>,

    /// `True` when the member holds the manifest as written; `False` when it was not applied
    /// (`reason` and `message` say why, such as the member's answer).
    #[serde(default)]
    pub applied: ConditionStatus,

    /// `True` when the applied object is available (read from its status: a workload's
    /// `Available` or `Ready` condition, a newer spec observed; an object without such a status
    /// is available once it exists); `False` with a `reason` of `NotAvailable` or `Degraded`.
    /// Unset while the manifest is not applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available: Option<ConditionStatus>,

    /// Why `applied` or `available` is not `True`, in CamelCase (`Conflict`, `ApplyFailed`,
    /// `UnknownResourceType`, `NotAvailable`, `Degraded`, ...); unset when both are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,

    /// What went wrong, for people: the member's message when it refused the manifest, or what
    /// the object's status says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,

    /// When `applied` or `available` last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

impl ManifestStatus {
    /// `applied` for [`conditions::APPLIED`](crate::conditions::APPLIED), `available` for
    /// [`conditions::AVAILABLE`](crate::conditions::AVAILABLE) (`Unknown` when unset), and
    /// `Unknown` for anything else.
    pub fn get(&self, type_: &str) -> ConditionStatus {
        match type_ {
            crate::conditions::APPLIED => self.applied,
            crate::conditions::AVAILABLE => self.available.unwrap_or_default(),
            _ => ConditionStatus::Unknown,
        }
    }
}

/// The identity of an object in a member.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestIdentity {
    /// API group (empty or unset for the core group).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,

    /// API version.
    pub version: String,

    /// Kind.
    pub kind: String,

    /// Resource (plural), as the member's discovery names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,

    /// Namespace; unset for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,

    /// Name.
    pub name: String,
}

impl Work {
    /// The member this Work is for, from its namespace `flotilla-cluster-<name>`.
    pub fn cluster_name(&self) -> Option<&str> {
        self.metadata
            .namespace
            .as_deref()
            .and_then(names::cluster_from_namespace)
    }
}

impl ManifestIdentity {
    /// The identity of a manifest, from its apiVersion, kind and metadata.
    pub fn of(manifest: &DynamicObject) -> Option<Self> {
        let types = manifest.types.as_ref()?;
        let (group, version) = match types.api_version.split_once('/') {
            Some((group, version)) => (group.to_string(), version.to_string()),
            None => (String::new(), types.api_version.clone()),
        };
        Some(Self {
            group,
            version,
            kind: types.kind.clone(),
            resource: None,
            namespace: manifest.metadata.namespace.clone(),
            name: manifest.metadata.name.clone()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": { "name": "web", "namespace": "shop" },
            "spec": { "replicas": 4 }
        }))
        .expect("valid object")
    }

    #[test]
    fn manifests_round_trip_unchanged() {
        let spec = WorkSpec {
            manifests: vec![deployment()],
            delete_policy: DeletePolicy::Orphan,
            conflict_policy: ConflictPolicy::Abort,
            ignore_fields: vec![],
            namespace_labels: Default::default(),
            allow_existing_namespaces: None,
            health: None,
        };
        let value = serde_json::to_value(&spec).expect("serializes");
        let written = value["manifests"][0]
            .as_str()
            .expect("written as a JSON string");
        let object: serde_json::Value = serde_json::from_str(written).expect("JSON");
        assert_eq!(object["spec"]["replicas"], 4);
        assert_eq!(object["apiVersion"], "apps/v1");
        let back: WorkSpec = serde_json::from_value(value).expect("deserializes");
        assert_eq!(back, spec);
    }

    #[test]
    fn manifests_are_read_from_objects_and_strings_alike() {
        let object = serde_json::to_value(deployment()).expect("serializes");
        let spec: WorkSpec = serde_json::from_value(json!({
            "manifests": [object.clone(), object.to_string()],
        }))
        .expect("deserializes");
        assert_eq!(spec.manifests, vec![deployment(), deployment()]);
    }

    #[test]
    fn a_manifest_that_is_no_object_reads_as_one_without_type_or_name() {
        let spec: WorkSpec = serde_json::from_value(json!({
            "manifests": ["{not json", "[1, 2]", 7, serde_json::to_value(deployment()).expect("JSON")],
        }))
        .expect("one bad manifest does not fail the Work");
        assert_eq!(spec.manifests.len(), 4);
        for bad in &spec.manifests[..3] {
            assert_eq!(ManifestIdentity::of(bad), None, "{bad:?}");
            assert_eq!(bad.metadata.name, None);
        }
        assert_eq!(spec.manifests[3], deployment());
    }

    fn entry(ordinal: i32, name: &str) -> ManifestStatus {
        ManifestStatus {
            ordinal,
            identity: ManifestIdentity {
                version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some("shop".into()),
                name: name.into(),
                ..Default::default()
            },
            resource_version: Some("42".into()),
            applied: ConditionStatus::True,
            available: Some(ConditionStatus::True),
            status: Some(json!({"observedGeneration": 3})),
            ..Default::default()
        }
    }

    #[test]
    fn status_entries_are_written_as_json_strings_and_read_back_unchanged() {
        let status = WorkStatus {
            observed_generation: Some(3),
            manifests: vec![entry(0, "a"), entry(1, "b")],
            ..Default::default()
        };
        let value = serde_json::to_value(&status).expect("serializes");
        let written = value["manifests"][1]
            .as_str()
            .expect("written as a JSON string");
        let object: serde_json::Value = serde_json::from_str(written).expect("JSON");
        assert_eq!(object["identity"]["name"], "b");
        assert_eq!(object["applied"], "True");
        let back: WorkStatus = serde_json::from_value(value).expect("deserializes");
        assert_eq!(back, status);
    }

    #[test]
    fn status_entries_written_as_objects_before_are_read_alike() {
        let object = serde_json::to_value(entry(0, "a")).expect("serializes");
        let status: WorkStatus = serde_json::from_value(json!({
            "manifests": [object, serde_json::to_string(&entry(1, "b")).expect("JSON")],
        }))
        .expect("deserializes");
        assert_eq!(status.manifests, vec![entry(0, "a"), entry(1, "b")]);
    }

    #[test]
    fn a_status_entry_no_reader_can_hold_is_left_out_and_the_work_still_reads() {
        // What a member's agent that lies, or a hand edit, may write: the hub checks no more of
        // an entry than that it is there.
        let beyond_int32 = json!({"ordinal": 4_294_967_296_u64,
            "identity": {"version": "v1", "kind": "ConfigMap", "name": "x"}});
        let work: Work = serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
            "metadata": {"name": "w", "namespace": "flotilla-cluster-member1"},
            "spec": {"manifests": [serde_json::to_value(deployment()).expect("JSON")]},
            "status": {"manifests": [
                beyond_int32.clone(), beyond_int32.to_string(), "{not json", 7, [1],
                {"ordinal": 0}, serde_json::to_string(&entry(0, "a")).expect("JSON"),
            ]},
        }))
        .expect("bad entries do not fail the Work");
        assert_eq!(work.status.expect("status").manifests, vec![entry(0, "a")]);
    }

    #[test]
    fn identity_of_a_manifest() {
        let id = ManifestIdentity::of(&deployment()).expect("has identity");
        assert_eq!(
            id,
            ManifestIdentity {
                group: "apps".into(),
                version: "v1".into(),
                kind: "Deployment".into(),
                resource: None,
                namespace: Some("shop".into()),
                name: "web".into(),
            }
        );
        let ns: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "shop" }
        }))
        .expect("valid object");
        let id = ManifestIdentity::of(&ns).expect("has identity");
        assert_eq!((id.group.as_str(), id.version.as_str()), ("", "v1"));
        assert_eq!(id.namespace, None);
    }

    #[test]
    fn cluster_name_comes_from_the_namespace() {
        let mut work = Work::new(
            "web",
            WorkSpec {
                manifests: vec![deployment()],
                delete_policy: DeletePolicy::Delete,
                conflict_policy: ConflictPolicy::Abort,
                ignore_fields: vec![],
                namespace_labels: Default::default(),
                allow_existing_namespaces: None,
                health: None,
            },
        );
        assert_eq!(work.cluster_name(), None);
        work.metadata.namespace = Some(names::cluster_namespace("member2"));
        assert_eq!(work.cluster_name(), Some("member2"));
    }
}
