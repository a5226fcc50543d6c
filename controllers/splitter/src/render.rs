//! Pure Work rendering: a member's manifest of a hub object, stripped of hub-only metadata and of
//! what the hub's apiserver allocated, with that member's replica count; and the Works that hold
//! the manifests of one Placement, member and type ([`names::bundle_name`]).

use flotilla_api::{
    ConflictPolicy, DeletePolicy, PlacementSpec, Work, WorkSpec, annotations, finalizers, labels,
    names,
};

use std::collections::BTreeMap;

use crate::keys::Shelf;
use flotilla_interpreter::{Interpreter, generic, interpreter};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DynamicObject, ObjectMeta};
use kube::{Resource, ResourceExt};
use serde_json::Value;

/// Metadata that belongs to the hub object only.
const HUB_ONLY_METADATA: [&str; 9] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "ownerReferences",
    "finalizers",
];

/// Annotations that describe the hub object's history, not the object.
const HUB_ONLY_ANNOTATIONS: [&str; 1] = ["kubectl.kubernetes.io/last-applied-configuration"];

/// A member's share of a divided object: the count its kind divides (at its interpreter's
/// [`replicas_pointer`](flotilla_interpreter::Interpreter::replicas_pointer): a Deployment's or
/// StatefulSet's `spec.replicas`, a Job's `spec.completions`, a PodDisruptionBudget's
/// `spec.minAvailable`), a StatefulSet's `spec.ordinals.start`, and the count that follows the
/// share ([`follower_pointer`](flotilla_interpreter::Interpreter::follower_pointer): a Job's
/// `spec.parallelism`). The default is the whole object, as on the hub.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Share {
    pub replicas: Option<u32>,
    pub ordinals_start: Option<u32>,
    pub follower: Option<u32>,
}

/// Where a StatefulSet's first ordinal is.
const ORDINALS_START: &str = "/spec/ordinals/start";

impl Share {
    /// `n` replicas.
    pub fn replicas(n: u32) -> Self {
        Self {
            replicas: Some(n),
            ..Self::default()
        }
    }

    /// The ordinals of `range` (its count as the replicas).
    pub fn ordinals(range: crate::ordinals::Range) -> Self {
        Self {
            replicas: Some(range.count),
            ordinals_start: Some(range.start),
            follower: None,
        }
    }

    /// `n` of the divided count of `object` (the hub object, of `kind`), with the count that
    /// follows it.
    pub fn of_count(kind: &dyn Interpreter, object: &DynamicObject, n: u32) -> Self {
        Self {
            replicas: Some(n),
            ordinals_start: None,
            follower: kind.follower(&object.data, n),
        }
    }

    /// The share a member's manifest (`object`, of `kind`) asks for.
    pub fn of(kind: &dyn Interpreter, object: &DynamicObject) -> Self {
        let number = |pointer: &str| {
            object
                .data
                .pointer(pointer)
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
        };
        Self {
            replicas: number(kind.replicas_pointer()),
            ordinals_start: number(ORDINALS_START),
            follower: kind.follower_pointer().and_then(number),
        }
    }

    /// Writes the share into `data` (an object's fields but its type) of kind `kind`, where
    /// [`Share::of`] reads it for an object of the same type.
    pub fn write(&self, data: &mut Value, kind: &dyn Interpreter) {
        let pointers = [
            (Some(kind.replicas_pointer()), self.replicas),
            (Some(ORDINALS_START), self.ordinals_start),
            (kind.follower_pointer(), self.follower),
        ];
        for (pointer, value) in pointers {
            if let (Some(pointer), Some(n)) = (pointer, value) {
                set(data, pointer, Value::from(n));
            }
        }
    }

    /// The range of ordinals it runs, from `spec.ordinals.start` (0 when unset).
    pub fn range(&self) -> crate::ordinals::Range {
        crate::ordinals::Range::new(self.ordinals_start.unwrap_or(0), self.replicas.unwrap_or(1))
    }
}

/// The built-in interpreter of `object`'s kind (the generic one when it has no type, or a kind
/// without built-in rules).
pub fn kind_of(object: &DynamicObject) -> &'static dyn Interpreter {
    object
        .types
        .as_ref()
        .map_or(generic(), |t| interpreter(&t.api_version, &t.kind))
}

/// Sets the value at JSON `pointer` in `data`, making the objects on the way.
fn set(data: &mut Value, pointer: &str, value: Value) {
    let mut at = data;
    let mut keys = pointer.split('/').skip(1).peekable();
    while let Some(key) = keys.next() {
        if !at.is_object() {
            *at = Value::Object(Default::default());
        }
        let Some(map) = at.as_object_mut() else {
            return;
        };
        if keys.peek().is_none() {
            map.insert(key.to_string(), value);
            return;
        }
        at = map
            .entry(key.to_string())
            .or_insert_with(|| Value::Object(Default::default()));
    }
}

/// Whether objects of `api_version`/`kind` are Secrets, whose data never goes into a Work (see
/// [`flotilla_api::work_data`]).
pub fn is_secret(api_version: &str, kind: &str) -> bool {
    api_version == "v1" && kind == "Secret"
}

/// The manifest for a member: the hub object (of `kind`) without hub-only metadata, status and
/// the values the hub's apiserver allocated (see [`flotilla_interpreter::hub_made`]), with the
/// member's `share` of it. A Secret's manifest still has its data (see [`take_secret_data`]),
/// and carries the version of the hub object as
/// [`DATA_VERSION`](flotilla_api::annotations::DATA_VERSION).
pub fn member_manifest(kind: &dyn Interpreter, object: &DynamicObject, share: Share) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
    let managed = object
        .metadata
        .managed_fields
        .as_deref()
        .unwrap_or_default();
    kind.prune(&mut value, managed);
    let secret = object
        .types
        .as_ref()
        .is_some_and(|t| is_secret(&t.api_version, &t.kind));
    if let Some(obj) = value.as_object_mut() {
        obj.remove("status");
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            let version = meta.get("resourceVersion").cloned().filter(|_| secret);
            for key in HUB_ONLY_METADATA {
                meta.remove(key);
            }
            if let Some(version) = version {
                let ann = meta
                    .entry("annotations")
                    .or_insert_with(|| Value::Object(Default::default()));
                if let Some(ann) = ann.as_object_mut() {
                    ann.insert(annotations::DATA_VERSION.to_string(), version);
                }
            }
            if let Some(ann) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
                for key in HUB_ONLY_ANNOTATIONS {
                    ann.remove(key);
                }
                if ann.is_empty() {
                    meta.remove("annotations");
                }
            }
        }
    }
    if value.get("spec").is_some_and(Value::is_object) {
        share.write(&mut value, kind);
    }
    value
}

/// Takes the data out of a Secret's manifest: its `data` and `stringData` (a key of both gets
/// the value of `stringData`, as the apiserver merges them), which go into the hub Secret of the
/// Work that holds the manifest, never into the Work.
pub fn take_secret_data(
    manifest: &mut Value,
) -> Result<BTreeMap<String, ByteString>, serde_json::Error> {
    let Some(obj) = manifest.as_object_mut() else {
        return Ok(BTreeMap::new());
    };
    let mut data: BTreeMap<String, ByteString> = match obj.remove("data") {
        Some(Value::Null) | None => BTreeMap::new(),
        Some(data) => serde_json::from_value(data)?,
    };
    if let Some(Value::Object(strings)) = obj.remove("stringData") {
        for (key, value) in strings {
            let text = value.as_str().unwrap_or_default();
            data.insert(key, ByteString(text.as_bytes().to_vec()));
        }
    }
    Ok(data)
}

/// Names in a Secret's manifest (without its data) the hub Secret that holds its data:
/// [`work_data::secret_name`](flotilla_api::work_data::secret_name) of the Work `work` that
/// holds it.
pub fn refer_to_data(manifest: &mut DynamicObject, work: &str) {
    manifest.annotations_mut().insert(
        annotations::DATA_SECRET.to_string(),
        flotilla_api::work_data::secret_name(work),
    );
}

/// The hub Secret that holds the data of the Secrets one Work places (see
/// [`flotilla_api::work_data`]), written before the Work.
#[derive(Clone, PartialEq)]
pub struct DataSecret {
    /// The Work's namespace and name.
    pub work: (String, String),
    /// Its labels: Flotilla's ([`labels::WORK_DATA`]), and the Work's member and Placement.
    pub labels: BTreeMap<String, String>,
    /// Its annotations: the Work's source namespace (with the Placement label, whose pass it
    /// is of).
    pub annotations: BTreeMap<String, String>,
    /// The UID of the Work, when it exists: the Secret belongs to it. A Secret written before
    /// its new Work is given to it once the Work is written.
    pub owner: Option<String>,
    /// Each Secret's data, [encoded](flotilla_api::work_data::encode), by the Secret's name.
    pub data: BTreeMap<String, ByteString>,
}

/// Never the data.
impl std::fmt::Debug for DataSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataSecret")
            .field("work", &self.work)
            .field("owner", &self.owner)
            .field("secrets", &self.data.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl DataSecret {
    /// The hub Secret of `work`, with the data of its Secrets by name (each as
    /// [`take_secret_data`] took it), owned by the Work with UID `owner` when it exists.
    pub fn of(
        work: &Work,
        owner: Option<String>,
        data: BTreeMap<String, BTreeMap<String, ByteString>>,
    ) -> Self {
        let mut labels: BTreeMap<String, String> = [labels::CLUSTER, labels::PLACEMENT]
            .into_iter()
            .filter_map(|k| Some((k.to_string(), work.labels().get(k)?.clone())))
            .collect();
        labels.insert(
            labels::WORK_DATA.to_string(),
            labels::WORK_DATA_VALUE.to_string(),
        );
        let annotations = [annotations::SOURCE_NAMESPACE]
            .into_iter()
            .filter_map(|k| Some((k.to_string(), work.annotations().get(k)?.clone())))
            .collect();
        Self {
            work: (work.namespace().unwrap_or_default(), work.name_any()),
            labels,
            annotations,
            owner,
            data: data
                .iter()
                .map(|(name, d)| (name.clone(), flotilla_api::work_data::encode(d)))
                .collect(),
        }
    }

    /// Its name: the Work's (see [`flotilla_api::work_data::secret_name`]).
    pub fn name(&self) -> String {
        flotilla_api::work_data::secret_name(&self.work.1)
    }

    /// The reference to the Work with UID `uid` that owns the Secret.
    pub fn owner_reference(&self, uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: Work::api_version(&()).into_owned(),
            kind: Work::kind(&()).into_owned(),
            name: self.work.1.clone(),
            uid: uid.to_string(),
            controller: Some(true),
            block_owner_deletion: None,
        }
    }

    /// The Secret to write (with server-side apply).
    pub fn secret(&self) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(self.name()),
                namespace: Some(self.work.0.clone()),
                labels: Some(self.labels.clone()),
                annotations: Some(self.annotations.clone()),
                owner_references: self
                    .owner
                    .as_ref()
                    .map(|uid| vec![self.owner_reference(uid)]),
                ..ObjectMeta::default()
            },
            type_: Some(flotilla_api::work_data::SECRET_TYPE.to_string()),
            data: Some(self.data.clone()),
            ..Secret::default()
        }
    }
}

/// What the Works of one Placement share: the Placement, and the labels of the namespace its
/// objects come from (see [`flotilla_api::WorkSpec::namespace_labels`]).
pub struct Origin<'a> {
    pub namespace: &'a str,
    pub placement: &'a str,
    pub spec: &'a PlacementSpec,
    /// The Works' conflict policy (the Placement's, unless its `Adopt` is not allowed).
    pub conflict_policy: ConflictPolicy,
    pub namespace_labels: Option<&'a BTreeMap<String, String>>,
    /// See [`flotilla_api::WorkSpec::allow_existing_namespaces`].
    pub allow_existing_namespaces: Option<bool>,
}

/// Work `index` of Placement `namespace/placement` (`origin`) for the objects of one type on one
/// member (`shelf`), holding `manifests` in order, and replacing the Works `replaces` (Works of
/// one object each, by an older splitter).
pub fn bundle(
    origin: &Origin<'_>,
    shelf: &Shelf,
    index: u32,
    manifests: Vec<DynamicObject>,
    replaces: &[String],
) -> Work {
    let Origin {
        namespace,
        placement,
        spec,
        conflict_policy,
        namespace_labels,
        allow_existing_namespaces,
    } = *origin;
    let group = shelf.api_version.split_once('/').map_or("", |(g, _)| g);
    let mut work = Work::new(
        &names::bundle_name(group, &shelf.kind, namespace, placement, index),
        WorkSpec {
            manifests,
            delete_policy: if flotilla_interpreter::deletion_cascades(
                &shelf.api_version,
                &shelf.kind,
            ) {
                DeletePolicy::Orphan
            } else {
                spec.delete_policy
            },
            conflict_policy,
            ignore_fields: spec.ignore_fields.clone(),
            namespace_labels: namespace_labels.cloned(),
            allow_existing_namespaces,
            health: None,
        },
    );
    let labels = [
        (labels::CLUSTER, shelf.cluster.clone()),
        (labels::PLACEMENT, placement.to_string()),
        (labels::BUNDLE, index.to_string()),
    ];
    let mut annotations: BTreeMap<String, String> = [
        (annotations::SOURCE_API_VERSION, shelf.api_version.clone()),
        (annotations::SOURCE_KIND, shelf.kind.clone()),
        (annotations::SOURCE_NAMESPACE, namespace.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    if !replaces.is_empty() {
        annotations.insert(annotations::REPLACES.to_string(), replaces.join(","));
    }
    work.metadata = ObjectMeta {
        name: work.metadata.name.take(),
        namespace: Some(names::cluster_namespace(&shelf.cluster)),
        labels: Some(
            labels
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        ),
        annotations: Some(annotations),
        // Written with the syncer's finalizer, so the syncer's first look at a new Work applies
        // it instead of spending a hub write (and a reconciliation) on adding the finalizer.
        finalizers: Some(vec![finalizers::SYNCER.to_string()]),
        ..ObjectMeta::default()
    };
    work
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;
    use serde_json::json;

    fn deployment() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "shop", "uid": "u-1", "resourceVersion": "9", "generation": 3,
                "finalizers": ["flotilla.dev/splitter"],
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "a"},
                "labels": {"app": "web"}
            },
            "spec": {"replicas": 10, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"replicas": 10}
        }))
        .expect("deployment")
    }

    #[test]
    fn the_member_gets_the_object_without_hub_metadata_and_with_its_share() {
        let m = member_manifest(kind_of(&deployment()), &deployment(), Share::replicas(4));
        assert_eq!(m["spec"]["replicas"], 4);
        assert!(m.get("status").is_none());
        let meta = &m["metadata"];
        for key in ["uid", "resourceVersion", "generation", "finalizers"] {
            assert!(meta.get(key).is_none(), "{key} must not reach the member");
        }
        assert_eq!(meta["annotations"], json!({"team": "a"}));
        assert_eq!(meta["labels"]["app"], "web");
        assert_eq!(
            member_manifest(kind_of(&deployment()), &deployment(), Share::default())["spec"]["replicas"],
            10
        );
    }

    #[test]
    fn a_statefulset_member_runs_its_range_of_ordinals() {
        let sts: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": "shop"},
            "spec": {"replicas": 5, "ordinals": {"start": 2}, "serviceName": "db"}
        }))
        .expect("statefulset");
        let share = Share::ordinals(crate::ordinals::Range::new(4, 2));
        let m = member_manifest(kind_of(&sts), &sts, share);
        assert_eq!(m["spec"]["replicas"], 2);
        assert_eq!(m["spec"]["ordinals"], json!({"start": 4}));
        assert_eq!(share_of(&m), share);
        assert_eq!(share_of(&m).range(), crate::ordinals::Range::new(4, 2));
        // The hub's own start travels when the object is not divided.
        assert_eq!(
            member_manifest(kind_of(&sts), &sts, Share::default())["spec"]["ordinals"]["start"],
            2
        );
    }

    fn share_of(manifest: &Value) -> Share {
        let object: DynamicObject = serde_json::from_value(manifest.clone()).expect("manifest");
        Share::of(kind_of(&object), &object)
    }

    #[test]
    fn a_job_member_runs_its_share_of_completions_with_parallelism_in_proportion() {
        let job: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "crunch", "namespace": "shop"},
            "spec": {"completions": 6, "parallelism": 3, "template": {"spec": {}}}
        }))
        .expect("job");
        let share = Share::of_count(kind_of(&job), &job, 2);
        let m = member_manifest(kind_of(&job), &job, share);
        assert_eq!(m["spec"]["completions"], 2);
        assert_eq!(m["spec"]["parallelism"], 1);
        assert!(m["spec"].get("replicas").is_none(), "{m}");
        assert_eq!(share_of(&m), share);
    }

    #[test]
    fn a_budget_member_protects_its_share_of_min_available() {
        let pdb: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"minAvailable": 5, "selector": {"matchLabels": {"app": "web"}}}
        }))
        .expect("pdb");
        let m = member_manifest(kind_of(&pdb), &pdb, Share::replicas(2));
        assert_eq!(m["spec"]["minAvailable"], 2);
        assert!(m["spec"].get("replicas").is_none(), "{m}");
        assert_eq!(share_of(&m), Share::replicas(2));
    }

    #[test]
    fn a_service_reaches_the_member_without_the_hubs_addresses() {
        let service: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "shop", "managedFields": [{
                "manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {"f:port": {}}}}}}]},
            "spec": {"clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20"], "type": "NodePort",
                     "ports": [{"port": 80, "protocol": "TCP", "nodePort": 31000}]}
        }))
        .expect("service");
        let m = member_manifest(kind_of(&service), &service, Share::default());
        assert!(m["spec"].get("clusterIP").is_none(), "{m}");
        assert!(m["spec"]["ports"][0].get("nodePort").is_none(), "{m}");
        assert!(m["metadata"].get("managedFields").is_none(), "{m}");
    }

    #[test]
    fn a_secrets_manifest_carries_the_version_of_its_data_and_gives_the_data_up() {
        let secret: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "db", "namespace": "shop", "uid": "u-1", "resourceVersion": "42"},
            "data": {"password": "czNjcjN0", "user": "YWRtaW4="},
            "stringData": {"user": "root"}
        }))
        .expect("secret");
        let mut m = member_manifest(kind_of(&secret), &secret, Share::default());
        assert_eq!(
            m["metadata"]["annotations"][annotations::DATA_VERSION],
            "42"
        );
        assert!(m["metadata"].get("resourceVersion").is_none());
        let data = take_secret_data(&mut m).expect("data");
        let text: BTreeMap<&str, &str> = data
            .iter()
            .map(|(k, v)| (k.as_str(), std::str::from_utf8(&v.0).expect("text")))
            .collect();
        // stringData wins, as the apiserver merges it.
        assert_eq!(text, [("password", "s3cr3t"), ("user", "root")].into());
        assert!(
            m.get("data").is_none() && m.get("stringData").is_none(),
            "{m}"
        );
        assert_eq!(m["type"], "Opaque");
        // Other kinds carry no version.
        let cm = member_manifest(kind_of(&deployment()), &deployment(), Share::default());
        assert!(
            cm["metadata"]["annotations"]
                .get(annotations::DATA_VERSION)
                .is_none()
        );

        let mut manifest: DynamicObject = serde_json::from_value(m).expect("manifest");
        refer_to_data(&mut manifest, "secret-shop-p-0123456789-0");
        assert_eq!(
            manifest.annotations()[annotations::DATA_SECRET],
            "secret-shop-p-0123456789-0"
        );
    }

    #[test]
    fn a_works_hub_secret_is_flotillas_and_the_works() {
        let mut work = Work::new(
            "secret-shop-p-0123456789-0",
            WorkSpec {
                manifests: vec![],
                delete_policy: DeletePolicy::Delete,
                conflict_policy: ConflictPolicy::Abort,
                ignore_fields: vec![],
                namespace_labels: None,
                allow_existing_namespaces: None,
                health: None,
            },
        );
        work.metadata.namespace = Some("flotilla-cluster-m1".into());
        work.metadata.labels = Some(
            [
                (labels::CLUSTER.to_string(), "m1".to_string()),
                (labels::PLACEMENT.to_string(), "p".to_string()),
                (labels::BUNDLE.to_string(), "0".to_string()),
            ]
            .into(),
        );
        work.metadata.annotations = Some(
            [(
                annotations::SOURCE_NAMESPACE.to_string(),
                "shop".to_string(),
            )]
            .into(),
        );
        let data: BTreeMap<String, ByteString> =
            [("password".to_string(), ByteString(b"s3cr3t".to_vec()))].into();
        let held = DataSecret::of(&work, None, [("db".to_string(), data.clone())].into());
        let secret = held.secret();
        assert_eq!(
            secret.metadata.name.as_deref(),
            Some("secret-shop-p-0123456789-0")
        );
        assert_eq!(
            secret.metadata.namespace.as_deref(),
            Some("flotilla-cluster-m1")
        );
        assert_eq!(
            secret.type_.as_deref(),
            Some(flotilla_api::work_data::SECRET_TYPE)
        );
        assert_eq!(
            secret.metadata.labels.clone().unwrap_or_default(),
            [
                (labels::CLUSTER.to_string(), "m1".to_string()),
                (labels::PLACEMENT.to_string(), "p".to_string()),
                (labels::WORK_DATA.to_string(), "true".to_string()),
            ]
            .into()
        );
        assert_eq!(secret.metadata.owner_references, None);
        let stored = secret.data.unwrap_or_default();
        assert_eq!(flotilla_api::work_data::decode(&stored["db"].0), Ok(data));
        let owned = DataSecret {
            owner: Some("w-1".into()),
            ..held
        }
        .secret();
        let owner = &owned.metadata.owner_references.unwrap_or_default()[0];
        assert_eq!(
            (
                owner.kind.as_str(),
                owner.name.as_str(),
                owner.uid.as_str(),
                owner.controller
            ),
            ("Work", "secret-shop-p-0123456789-0", "w-1", Some(true))
        );
        assert_eq!(owner.api_version, "flotilla.dev/v1alpha1");
    }

    #[test]
    fn works_are_named_and_linked_deterministically() {
        let spec: PlacementSpec = serde_json::from_value(json!({})).expect("spec");
        let shelf = Shelf {
            cluster: "member1".into(),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
        };
        let manifest: DynamicObject = serde_json::from_value(member_manifest(
            kind_of(&deployment()),
            &deployment(),
            Share::replicas(4),
        ))
        .expect("manifest");
        let labels = [(
            "pod-security.kubernetes.io/enforce".to_string(),
            "restricted".to_string(),
        )]
        .into();
        let origin = Origin {
            namespace: "shop",
            placement: "spread",
            spec: &spec,
            conflict_policy: ConflictPolicy::Abort,
            namespace_labels: Some(&labels),
            allow_existing_namespaces: Some(false),
        };
        let w = bundle(&origin, &shelf, 2, vec![manifest.clone()], &[]);
        // The member namespace carries the hub namespace's labels.
        assert_eq!(
            w.spec.namespace_labels.as_ref().expect("labels")["pod-security.kubernetes.io/enforce"],
            "restricted"
        );
        assert_eq!(
            w.metadata.name,
            Some(names::bundle_name(
                "apps",
                "Deployment",
                "shop",
                "spread",
                2
            ))
        );
        assert_eq!(
            w.metadata.namespace.as_deref(),
            Some("flotilla-cluster-member1")
        );
        let l = w.metadata.labels.clone().unwrap_or_default();
        assert_eq!(l[labels::CLUSTER], "member1");
        assert_eq!(l[labels::PLACEMENT], "spread");
        assert_eq!(l[labels::BUNDLE], "2");
        let a = w.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(a[annotations::SOURCE_KIND], "Deployment");
        assert_eq!(a[annotations::SOURCE_NAMESPACE], "shop");
        assert!(!a.contains_key(annotations::REPLACES));
        // Born with the syncer's finalizer; none of the hub object's finalizers travel.
        assert_eq!(w.finalizers(), [finalizers::SYNCER]);
        assert_eq!(bundle(&origin, &shelf, 2, vec![manifest.clone()], &[]), w);
        let moving = bundle(
            &origin,
            &shelf,
            2,
            vec![manifest],
            &["a".into(), "b".into()],
        );
        assert_eq!(moving.annotations()[annotations::REPLACES], "a,b");
    }
}
