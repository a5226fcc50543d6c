//! Pure preparation of a Work's manifests for a member: what exactly is applied, and whether an
//! object found in the member is Flotilla's.

use std::collections::BTreeMap;

use flotilla_api::{IgnoreFields, ManifestIdentity, Work, WorkStatus, annotations, labels};
use k8s_openapi::ByteString;
use kube::api::DynamicObject;
use serde_json::{Map, Value};

/// Why a manifest cannot be applied as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("spec.manifests[{0}] is not an object with an apiVersion and a kind")]
    NoType(usize),
    #[error("spec.manifests[{0}] has no metadata.name")]
    NoName(usize),
    /// The cache's lean form of a Work (see [`crate::lean`]), without its manifests: never to
    /// be applied.
    #[error("the Work is the cache's lean form of it, without its manifests")]
    Lean,
}

impl ManifestError {
    /// The index in `spec.manifests` of the manifest this is about, if one.
    pub fn ordinal(&self) -> Option<usize> {
        match self {
            Self::NoType(o) | Self::NoName(o) => Some(*o),
            Self::Lean => None,
        }
    }
}

/// A manifest ready to apply: its identity and the object to send (for a Secret whose data is
/// held apart, once [`with_data`] put the data in).
#[derive(Clone, Debug, PartialEq)]
pub struct Prepared {
    pub ordinal: usize,
    pub identity: ManifestIdentity,
    pub object: Value,
    /// For a Secret: where its data is, when the Work holds it apart.
    pub data: Option<DataRef>,
}

/// Where the data of a Secret manifest is (see [`flotilla_api::work_data`]): its
/// [`DATA_SECRET`](annotations::DATA_SECRET) and [`DATA_VERSION`](annotations::DATA_VERSION),
/// which the object sent to the member does not carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataRef {
    /// The hub Secret, in the Work's namespace, whose key named after the Secret holds its data.
    pub secret: String,
    pub version: Option<String>,
    /// The Work's `ignoreFields` paths of this manifest: what they name of the data is left to
    /// the member too.
    pub ignored: Vec<String>,
}

/// Where the data of `manifest` (object `id`) is held, if it is a Secret whose Work holds it
/// apart; `ignored`: the paths the Work leaves to the member.
fn data_reference(
    id: &ManifestIdentity,
    manifest: &DynamicObject,
    ignored: &[&String],
) -> Option<DataRef> {
    if !(id.group.is_empty() && id.version == "v1" && id.kind == "Secret") {
        return None;
    }
    let a = manifest.metadata.annotations.as_ref()?;
    Some(DataRef {
        secret: a.get(annotations::DATA_SECRET)?.clone(),
        version: a.get(annotations::DATA_VERSION).cloned(),
        ignored: ignored.iter().map(|p| (*p).clone()).collect(),
    })
}

/// The object to apply for `prepared`, a Secret whose data is held apart: with `data` (read
/// from the hub Secret its [`DataRef`] names) as its `data`, and without what the Work's
/// `ignoreFields` leave to the member.
pub fn with_data(prepared: &Prepared, data: &BTreeMap<String, ByteString>) -> Value {
    let mut object = prepared.object.clone();
    if let Some(obj) = object.as_object_mut() {
        obj.remove("stringData");
        obj.insert(
            "data".into(),
            serde_json::to_value(data).unwrap_or_default(),
        );
    }
    for path in prepared.data.iter().flat_map(|r| &r.ignored) {
        remove_path(&mut object, path);
    }
    object
}

/// Metadata a member object must not receive from the hub: server-set fields and the links of
/// the hub object itself.
const SERVER_METADATA: [&str; 8] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "ownerReferences",
];

/// Prepares every manifest of `work`: drops server-set metadata and `status`, removes the
/// fields listed in `ignoreFields` (so that the member keeps ownership of them), and adds the
/// labels and annotations that link the object to its Work. A Secret whose data the Work holds
/// apart loses the annotations that say where ([`Prepared::data`] has them); its data is put in
/// when it is sent ([`with_data`]).
pub fn prepare(work: &Work) -> Vec<Result<Prepared, ManifestError>> {
    let work_ref = format!(
        "{}/{}",
        work.metadata.namespace.as_deref().unwrap_or_default(),
        work.metadata.name.as_deref().unwrap_or_default()
    );
    let cluster = work.cluster_name().unwrap_or_default().to_string();
    let source: Vec<(&str, String)> = [
        annotations::SOURCE_API_VERSION,
        annotations::SOURCE_KIND,
        annotations::SOURCE_NAMESPACE,
        annotations::SOURCE_NAME,
    ]
    .into_iter()
    .filter_map(|k| {
        let v = work.metadata.annotations.as_ref()?.get(k)?;
        Some((k, v.clone()))
    })
    .collect();

    if crate::lean::is_lean(work) {
        return vec![Err(ManifestError::Lean)];
    }
    work.spec
        .manifests
        .iter()
        .enumerate()
        .map(|(ordinal, manifest)| {
            let identity = identity(ordinal, manifest)?;
            let ignored: Vec<&String> = work
                .spec
                .ignore_fields
                .iter()
                .filter(|rule| applies_to(rule, &identity))
                .flat_map(|rule| &rule.json_paths)
                .collect();
            // Read off the manifest as the Work has it: an ignored path may take annotations.
            let data = data_reference(&identity, manifest, &ignored);
            let mut object = serde_json::to_value(manifest).unwrap_or(Value::Null);
            let Some(obj) = object.as_object_mut() else {
                return Err(ManifestError::NoType(ordinal));
            };
            obj.remove("status");
            // Ignored fields first: whatever a path names (`.metadata.labels`,
            // `.metadata["name"]`), the object keeps its identity and Flotilla's markers, added
            // below — without them the member object would be nobody's, and never deleted.
            for path in ignored {
                remove_path(&mut object, path);
            }
            let Some(obj) = object.as_object_mut() else {
                return Err(ManifestError::NoType(ordinal));
            };
            let api_version = if identity.group.is_empty() {
                identity.version.clone()
            } else {
                format!("{}/{}", identity.group, identity.version)
            };
            obj.insert("apiVersion".into(), api_version.into());
            obj.insert("kind".into(), identity.kind.clone().into());
            let metadata = obj
                .entry("metadata")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(m) = metadata.as_object_mut() {
                for key in SERVER_METADATA {
                    m.remove(key);
                }
                m.insert("name".into(), identity.name.clone().into());
                match &identity.namespace {
                    Some(ns) => m.insert("namespace".into(), ns.clone().into()),
                    None => m.remove("namespace"),
                };
                let labels_map = m
                    .entry("labels")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Some(l) = labels_map.as_object_mut() {
                    l.insert(labels::MANAGED.into(), labels::MANAGED_VALUE.into());
                    l.insert(labels::CLUSTER.into(), cluster.clone().into());
                }
                let annotations_map = m
                    .entry("annotations")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Some(a) = annotations_map.as_object_mut() {
                    a.insert(annotations::WORK.into(), work_ref.clone().into());
                    for (k, v) in &source {
                        a.insert((*k).into(), v.clone().into());
                    }
                    // The member gets the data, not where the hub keeps it.
                    if data.is_some() {
                        a.remove(annotations::DATA_SECRET);
                        a.remove(annotations::DATA_VERSION);
                    }
                }
            }
            let hash = match &data {
                None => manifest_hash(&object),
                // Of the object with its data by reference, as the Work has it: the data's
                // version changes it, and it is known without reading the data.
                Some(r) => {
                    let mut referring = object.clone();
                    let a = &mut referring["metadata"]["annotations"];
                    a[annotations::DATA_SECRET] = Value::String(r.secret.clone());
                    if let Some(v) = &r.version {
                        a[annotations::DATA_VERSION] = Value::String(v.clone());
                    }
                    manifest_hash(&referring)
                }
            };
            object["metadata"]["annotations"][annotations::MANIFEST_HASH] = Value::String(hash);
            Ok(Prepared {
                ordinal,
                identity,
                object,
                data,
            })
        })
        .collect()
}

/// A hash of the object to apply, the same in every syncer of every version: 64-bit FNV-1a of
/// its JSON (whose keys serde_json keeps sorted), in hex.
pub fn manifest_hash(object: &Value) -> String {
    let json = serde_json::to_vec(object).unwrap_or_default();
    format!("{:016x}", flotilla_api::names::fnv1a(json))
}

/// The hash a member object was applied with (its `flotilla.dev/manifest-hash`).
pub fn applied_hash(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Option<&str> {
    annotations?
        .get(annotations::MANIFEST_HASH)
        .map(String::as_str)
}

fn identity(ordinal: usize, manifest: &DynamicObject) -> Result<ManifestIdentity, ManifestError> {
    if manifest.types.is_none() {
        return Err(ManifestError::NoType(ordinal));
    }
    if manifest
        .metadata
        .name
        .as_deref()
        .unwrap_or_default()
        .is_empty()
    {
        return Err(ManifestError::NoName(ordinal));
    }
    ManifestIdentity::of(manifest).ok_or(ManifestError::NoType(ordinal))
}

fn applies_to(rule: &IgnoreFields, id: &ManifestIdentity) -> bool {
    rule.manifest
        .matches(&id.group, &id.kind, id.namespace.as_deref(), &id.name)
}

/// Removes the field at a JSONPath-style path such as `.spec.replicas` or
/// `.metadata.annotations["example.com/x"]`. Unknown paths change nothing.
pub fn remove_path(object: &mut Value, path: &str) {
    let segments = parse_path(path);
    let Some((last, parents)) = segments.split_last() else {
        return;
    };
    let mut current = object;
    for segment in parents {
        match current.get_mut(segment.as_str()) {
            Some(next) => current = next,
            None => return,
        }
    }
    if let Some(map) = current.as_object_mut() {
        map.remove(last.as_str());
    }
}

/// `.a.b["c.d"].e` -> `["a", "b", "c.d", "e"]`.
fn parse_path(path: &str) -> Vec<String> {
    let mut segments = Vec::new();
    let mut rest = path.trim();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end > 0 {
                segments.push(r[..end].to_string());
            }
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix("[\"").or_else(|| rest.strip_prefix("['")) {
            let end = r.find(['"', '\'']).unwrap_or(r.len());
            segments.push(r[..end].to_string());
            rest = r.get(end + 2..).unwrap_or("");
        } else {
            let end = rest.find(['.', '[']).unwrap_or(rest.len());
            segments.push(rest[..end].to_string());
            rest = &rest[end..];
            if end == 0 {
                break;
            }
        }
    }
    segments
}

/// What makes two identities the same object whatever the API version they name it by: group,
/// kind, namespace (a namespaced manifest without one is applied in `default`) and name.
pub fn same_object(a: &ManifestIdentity, b: &ManifestIdentity) -> bool {
    let ns = |id: &ManifestIdentity| id.namespace.clone().unwrap_or_else(|| "default".into());
    a.group == b.group && a.kind == b.kind && a.name == b.name && ns(a) == ns(b)
}

/// The objects a Work applied before (`status`) or is still removing that none of its
/// manifests (`prepared`, as [`prepare`] made them) names any more: those to remove from the
/// member. Nothing while a manifest cannot be read (it may name one of them).
pub fn removed(
    status: &WorkStatus,
    prepared: &[Result<Prepared, ManifestError>],
) -> Vec<ManifestIdentity> {
    let Ok(current) = prepared
        .iter()
        .map(|p| p.as_ref().map(|p| &p.identity))
        .collect::<Result<Vec<_>, _>>()
    else {
        return Vec::new();
    };
    let mut out: Vec<ManifestIdentity> = Vec::new();
    for id in status
        .manifests
        .iter()
        .map(|m| &m.identity)
        .chain(&status.removing)
        // The entry of a manifest that named no object (`InvalidManifest`) applied nothing.
        .filter(|id| !id.kind.is_empty() && !id.name.is_empty())
    {
        if !current.iter().any(|c| same_object(c, id)) && !out.iter().any(|o| same_object(o, id)) {
            out.push(id.clone());
        }
    }
    out
}

/// The objects `work`'s manifests name, in order, leaving out those that name none (no kind or
/// no name). Of a Work from the cache, [`crate::lean::Manifests::names`] says.
pub fn named(work: &Work) -> Vec<ManifestIdentity> {
    work.spec
        .manifests
        .iter()
        .enumerate()
        .filter_map(|(ordinal, m)| identity(ordinal, m).ok())
        .collect()
}

/// Whether an object found in a member was put there by Flotilla (it carries the managed label).
pub fn is_managed(object: &DynamicObject) -> bool {
    object
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::MANAGED))
        .is_some_and(|v| v == labels::MANAGED_VALUE)
}

/// Whether a managed member object belongs to this Work (and not to another Work that happens to
/// render the same object).
pub fn belongs_to(object: &DynamicObject, work_ref: &str) -> bool {
    object
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::WORK))
        .is_some_and(|w| w == work_ref)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::{ManifestSelector, WorkSpec};
    use kube::api::ObjectMeta;
    use serde_json::json;

    fn work(manifests: Vec<Value>, ignore: Vec<IgnoreFields>) -> Work {
        let mut w = Work::new(
            "web",
            WorkSpec {
                manifests: manifests
                    .into_iter()
                    .map(|m| serde_json::from_value(m).expect("manifest"))
                    .collect(),
                delete_policy: Default::default(),
                conflict_policy: Default::default(),
                ignore_fields: ignore,
                namespace_labels: Default::default(),
                allow_existing_namespaces: None,
                health: None,
            },
        );
        w.metadata = ObjectMeta {
            name: Some("web".into()),
            namespace: Some("flotilla-cluster-m1".into()),
            annotations: Some(
                [(
                    annotations::SOURCE_KIND.to_string(),
                    "Deployment".to_string(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        };
        w
    }

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "uid": "hub-uid", "resourceVersion": "7",
                         "labels": {"app": "web"}},
            "spec": {"replicas": 4, "template": {"metadata": {"annotations": {"a": "b"}}}},
            "status": {"replicas": 4}
        })
    }

    #[test]
    fn server_fields_go_and_links_come() {
        let prepared = prepare(&work(vec![deployment()], vec![]));
        let p = prepared[0].as_ref().expect("prepared");
        assert_eq!(p.identity.group, "apps");
        assert_eq!(p.identity.namespace.as_deref(), Some("shop"));
        let m = &p.object["metadata"];
        assert!(m.get("uid").is_none() && m.get("resourceVersion").is_none());
        assert!(p.object.get("status").is_none());
        assert_eq!(m["labels"]["app"], "web");
        assert_eq!(m["labels"][labels::MANAGED], "true");
        assert_eq!(m["labels"][labels::CLUSTER], "m1");
        assert_eq!(
            m["annotations"][annotations::WORK],
            "flotilla-cluster-m1/web"
        );
        assert_eq!(m["annotations"][annotations::SOURCE_KIND], "Deployment");
    }

    #[test]
    fn ignored_fields_are_left_to_the_member() {
        let ignore = vec![IgnoreFields {
            manifest: ManifestSelector {
                kind: Some("Deployment".into()),
                ..ManifestSelector::default()
            },
            json_paths: vec![
                ".spec.replicas".into(),
                ".spec.template.metadata.annotations[\"a\"]".into(),
            ],
        }];
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"replicas": "1"}});
        let prepared = prepare(&work(vec![deployment(), cm], ignore));
        let d = &prepared[0].as_ref().expect("deployment").object;
        assert!(d["spec"].get("replicas").is_none());
        assert!(
            d["spec"]["template"]["metadata"]["annotations"]
                .get("a")
                .is_none()
        );
        let c = &prepared[1].as_ref().expect("configmap").object;
        assert_eq!(
            c["data"]["replicas"], "1",
            "rules apply only to matching manifests"
        );
    }

    #[test]
    fn no_ignored_path_takes_an_objects_identity_or_flotillas_markers() {
        let ignore = vec![IgnoreFields {
            manifest: ManifestSelector::default(),
            json_paths: vec![
                ".metadata.labels".into(),
                ".metadata.annotations".into(),
                ".metadata[\"name\"]".into(),
                ".metadata['namespace']".into(),
                ".apiVersion".into(),
                ".kind".into(),
            ],
        }];
        let prepared = prepare(&work(vec![deployment()], ignore));
        let d = &prepared[0].as_ref().expect("deployment").object;
        assert_eq!(d["apiVersion"], "apps/v1");
        assert_eq!(d["kind"], "Deployment");
        let m = &d["metadata"];
        assert_eq!(m["name"], "web", "{d}");
        assert_eq!(m["labels"][labels::MANAGED], "true");
        assert_eq!(m["labels"][labels::CLUSTER], "m1");
        assert_eq!(
            m["annotations"][annotations::WORK],
            "flotilla-cluster-m1/web"
        );
        // The ignored user labels are left to the member.
        assert!(m["labels"].get("app").is_none(), "{d}");
    }

    fn configmap(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "shop"}})
    }

    fn id(name: &str, namespace: Option<&str>) -> ManifestIdentity {
        ManifestIdentity {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            resource: None,
            namespace: namespace.map(str::to_string),
            name: name.into(),
        }
    }

    fn status(applied: &[ManifestIdentity], removing: &[ManifestIdentity]) -> WorkStatus {
        WorkStatus {
            manifests: applied
                .iter()
                .enumerate()
                .map(|(i, identity)| flotilla_api::ManifestStatus {
                    ordinal: i32::try_from(i).expect("small"),
                    identity: identity.clone(),
                    ..Default::default()
                })
                .collect(),
            removing: removing.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn what_a_work_applied_and_no_longer_names_is_removed() {
        let (a, b, c) = (
            id("a", Some("shop")),
            id("b", Some("shop")),
            id("c", Some("shop")),
        );
        let current = prepare(&work(vec![configmap("a")], vec![]));
        let s = status(&[a.clone(), b.clone()], std::slice::from_ref(&c));
        assert_eq!(removed(&s, &current), vec![b, c]);
        // Nothing without a status, and nothing that is still named (whatever its version).
        assert!(removed(&WorkStatus::default(), &current).is_empty());
        let mut other_version = a.clone();
        other_version.version = "v2".into();
        let s = status(&[other_version], std::slice::from_ref(&a));
        assert!(removed(&s, &current).is_empty());
    }

    #[test]
    fn a_namespaced_manifest_without_namespace_is_the_object_in_default() {
        let manifest = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
        let current = prepare(&work(vec![manifest], vec![]));
        assert!(removed(&status(&[id("a", Some("default"))], &[]), &current).is_empty());
    }

    #[test]
    fn nothing_is_removed_while_a_manifest_cannot_be_read() {
        let unreadable = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}});
        let current = prepare(&work(vec![unreadable], vec![]));
        assert!(removed(&status(&[id("a", Some("shop"))], &[]), &current).is_empty());
    }

    #[test]
    fn the_caches_lean_work_is_never_prepared_for_a_member() {
        let mut w = work(vec![configmap("a")], vec![]);
        w.metadata.uid = Some("u-1".into());
        w.metadata.generation = Some(1);
        crate::lean::Manifests::default().take(&mut w);
        assert_eq!(prepare(&w), vec![Err(ManifestError::Lean)]);
        // Nor is anything removed for it: it is not a Work that names nothing.
        assert!(removed(&status(&[id("b", Some("shop"))], &[]), &prepare(&w)).is_empty());
    }

    #[test]
    fn a_work_names_the_objects_its_manifests_name() {
        let w = work(vec![configmap("a")], vec![]);
        assert_eq!(named(&w), vec![id("a", Some("shop"))]);
    }

    #[test]
    fn the_manifest_hash_is_that_of_the_object_sent_and_stable() {
        let prepared = prepare(&work(vec![configmap("a")], vec![]));
        let p = prepared[0].as_ref().expect("prepared");
        let hash = p.object["metadata"]["annotations"][annotations::MANIFEST_HASH]
            .as_str()
            .expect("hash")
            .to_string();
        let mut without = p.object.clone();
        without["metadata"]["annotations"]
            .as_object_mut()
            .expect("annotations")
            .remove(annotations::MANIFEST_HASH);
        assert_eq!(manifest_hash(&without), hash);
        // Known value (FNV-1a of `{"a":1}`): the hash must not change between syncer versions.
        assert_eq!(manifest_hash(&json!({"a": 1})), "9c3e82dd6fcae8b1");
        let changed = prepare(&work(
            vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "shop"}, "data": {"k": "v"}})],
            vec![],
        ));
        assert_ne!(
            changed[0].as_ref().expect("prepared").object["metadata"]["annotations"]
                [annotations::MANIFEST_HASH],
            json!(hash)
        );
    }

    fn secret(version: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": "db", "namespace": "shop",
                            "annotations": {annotations::DATA_SECRET: "secret-shop-p-0123456789-0",
                                            annotations::DATA_VERSION: version, "team": "a"}}})
    }

    fn hash(p: &Prepared) -> Value {
        p.object["metadata"]["annotations"][annotations::MANIFEST_HASH].clone()
    }

    #[test]
    fn a_secret_whose_data_is_held_apart_names_where_and_its_version_changes_its_hash() {
        let prepared = prepare(&work(vec![secret("1")], vec![]));
        let p = prepared[0].as_ref().expect("prepared");
        assert_eq!(
            p.data,
            Some(DataRef {
                secret: "secret-shop-p-0123456789-0".into(),
                version: Some("1".into()),
                ignored: vec![],
            })
        );
        let a = &p.object["metadata"]["annotations"];
        assert!(
            a.get(annotations::DATA_SECRET).is_none(),
            "not for the member: {a}"
        );
        assert!(
            a.get(annotations::DATA_VERSION).is_none(),
            "not for the member: {a}"
        );
        assert_eq!(a["team"], "a");
        // The version of the data changes the hash (the member object is applied again); the
        // same Work prepares the same hash.
        let again = prepare(&work(vec![secret("1")], vec![]));
        assert_eq!(hash(again[0].as_ref().expect("prepared")), hash(p));
        let newer = prepare(&work(vec![secret("2")], vec![]));
        assert_ne!(hash(newer[0].as_ref().expect("prepared")), hash(p));

        // An ignored path takes nothing of the reference.
        let ignore = vec![IgnoreFields {
            manifest: ManifestSelector::default(),
            json_paths: vec![".metadata.annotations".into()],
        }];
        let prepared = prepare(&work(vec![secret("1")], ignore));
        let p = prepared[0].as_ref().expect("prepared");
        assert_eq!(
            p.data.as_ref().map(|r| r.secret.as_str()),
            Some("secret-shop-p-0123456789-0")
        );

        // Only Secrets: the annotation on another kind is just an annotation.
        let mut cm = configmap("a");
        cm["metadata"]["annotations"] = json!({annotations::DATA_SECRET: "x"});
        let prepared = prepare(&work(vec![cm], vec![]));
        let p = prepared[0].as_ref().expect("prepared");
        assert_eq!(p.data, None);
        assert_eq!(
            p.object["metadata"]["annotations"][annotations::DATA_SECRET],
            "x"
        );
        // A Secret with its data inline (a Work written by hand) is applied as it is.
        let inline = json!({"apiVersion": "v1", "kind": "Secret",
                            "metadata": {"name": "db", "namespace": "shop"}, "data": {"k": "dg=="}});
        let prepared = prepare(&work(vec![inline], vec![]));
        let p = prepared[0].as_ref().expect("prepared");
        assert_eq!(
            (p.data.as_ref(), &p.object["data"]["k"]),
            (None, &json!("dg=="))
        );
    }

    #[test]
    fn a_secrets_data_is_put_in_when_it_is_sent_but_what_is_ignored() {
        let data: BTreeMap<String, ByteString> = [
            ("password".to_string(), ByteString(b"s3cr3t".to_vec())),
            ("user".to_string(), ByteString(b"admin".to_vec())),
        ]
        .into();
        let prepared = prepare(&work(vec![secret("1")], vec![]));
        let p = prepared[0].as_ref().expect("prepared");
        let sent = with_data(p, &data);
        assert_eq!(
            sent["data"],
            json!({"password": "czNjcjN0", "user": "YWRtaW4="})
        );
        assert_eq!(
            sent["metadata"], p.object["metadata"],
            "the hash is the prepared one"
        );
        assert!(
            p.object.get("data").is_none(),
            "the prepared object holds no data"
        );

        let ignore = vec![IgnoreFields {
            manifest: ManifestSelector {
                kind: Some("Secret".into()),
                ..ManifestSelector::default()
            },
            json_paths: vec![".data.password".into()],
        }];
        let prepared = prepare(&work(vec![secret("1")], ignore));
        let p = prepared[0].as_ref().expect("prepared");
        assert_eq!(with_data(p, &data)["data"], json!({"user": "YWRtaW4="}));
    }

    #[test]
    fn paths_parse() {
        assert_eq!(parse_path(".spec.replicas"), vec!["spec", "replicas"]);
        assert_eq!(
            parse_path(".metadata.annotations[\"example.com/x\"]"),
            vec!["metadata", "annotations", "example.com/x"]
        );
        let mut v = json!({"a": {"b": 1}});
        remove_path(&mut v, ".a.missing.deeper");
        assert_eq!(v, json!({"a": {"b": 1}}));
    }
}
