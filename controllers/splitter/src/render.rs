//! Pure Work rendering: one Work per hub object and member, with a name of its own
//! ([`names::work_name`]), the manifest stripped of hub-only metadata and of what the hub's
//! apiserver allocated, and that member's replica count.

use flotilla_api::{PlacementSpec, Work, WorkSpec, annotations, finalizers, labels, names};

use crate::hub_made::strip_allocated;
use kube::api::{DynamicObject, ObjectMeta};
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

/// The manifest for a member: the hub object without hub-only metadata, status and the values
/// the hub's apiserver allocated (see [`crate::hub_made`]), with `replicas` (when given) as its
/// `spec.replicas`.
pub fn member_manifest(object: &DynamicObject, replicas: Option<u32>) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Some(types) = &object.types {
        let managed = object
            .metadata
            .managed_fields
            .as_deref()
            .unwrap_or_default();
        strip_allocated(&types.api_version, &types.kind, &mut value, managed);
    }
    if let Some(obj) = value.as_object_mut() {
        obj.remove("status");
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            for key in HUB_ONLY_METADATA {
                meta.remove(key);
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
        if let Some(n) = replicas
            && let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
        {
            spec.insert("replicas".into(), Value::from(n));
        }
    }
    value
}

/// The Work that places `object` on member `cluster` for Placement `placement`.
pub fn render(
    object: &DynamicObject,
    cluster: &str,
    replicas: Option<u32>,
    placement: &str,
    spec: &PlacementSpec,
) -> Result<Work, serde_json::Error> {
    let types = object.types.clone().unwrap_or_default();
    let name = object.metadata.name.clone().unwrap_or_default();
    let namespace = object.metadata.namespace.clone().unwrap_or_default();
    let group = types.api_version.split_once('/').map_or("", |(g, _)| g);
    let mut work = Work::new(
        &names::work_name(group, &types.kind, &namespace, &name),
        WorkSpec {
            manifests: vec![serde_json::from_value(member_manifest(object, replicas))?],
            delete_policy: spec.delete_policy,
            conflict_policy: spec.conflict_policy,
            ignore_fields: spec.ignore_fields.clone(),
        },
    );
    let mut label_map = std::collections::BTreeMap::from([
        (labels::CLUSTER.to_string(), cluster.to_string()),
        (labels::PLACEMENT.to_string(), placement.to_string()),
    ]);
    if let Some(uid) = &object.metadata.uid {
        label_map.insert(labels::SOURCE_UID.to_string(), uid.clone());
    }
    work.metadata = ObjectMeta {
        name: work.metadata.name.take(),
        namespace: Some(names::cluster_namespace(cluster)),
        labels: Some(label_map),
        annotations: Some(
            [
                (annotations::SOURCE_API_VERSION, types.api_version),
                (annotations::SOURCE_KIND, types.kind),
                (annotations::SOURCE_NAMESPACE, namespace),
                (annotations::SOURCE_NAME, name),
                (
                    annotations::SOURCE_GENERATION,
                    object.metadata.generation.unwrap_or(0).to_string(),
                ),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        ),
        // Written with the syncer's finalizer, so the syncer's first look at a new Work applies
        // it instead of spending a hub write (and a reconciliation) on adding the finalizer.
        finalizers: Some(vec![finalizers::SYNCER.to_string()]),
        ..ObjectMeta::default()
    };
    Ok(work)
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
        let m = member_manifest(&deployment(), Some(4));
        assert_eq!(m["spec"]["replicas"], 4);
        assert!(m.get("status").is_none());
        let meta = &m["metadata"];
        for key in ["uid", "resourceVersion", "generation", "finalizers"] {
            assert!(meta.get(key).is_none(), "{key} must not reach the member");
        }
        assert_eq!(meta["annotations"], json!({"team": "a"}));
        assert_eq!(meta["labels"]["app"], "web");
        assert_eq!(member_manifest(&deployment(), None)["spec"]["replicas"], 10);
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
        let m = member_manifest(&service, None);
        assert!(m["spec"].get("clusterIP").is_none(), "{m}");
        assert!(m["spec"]["ports"][0].get("nodePort").is_none(), "{m}");
        assert!(m["metadata"].get("managedFields").is_none(), "{m}");
    }

    #[test]
    fn works_are_named_and_linked_deterministically() {
        let spec: PlacementSpec = serde_json::from_value(json!({})).expect("spec");
        let w = render(&deployment(), "member1", Some(4), "spread", &spec).expect("work");
        assert_eq!(
            w.metadata.name,
            Some(names::work_name("apps", "Deployment", "shop", "web"))
        );
        assert_eq!(
            w.metadata.namespace.as_deref(),
            Some("flotilla-cluster-member1")
        );
        let l = w.metadata.labels.clone().unwrap_or_default();
        assert_eq!(l[labels::CLUSTER], "member1");
        assert_eq!(l[labels::PLACEMENT], "spread");
        assert_eq!(l[labels::SOURCE_UID], "u-1");
        let a = w.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(a[annotations::SOURCE_KIND], "Deployment");
        assert_eq!(a[annotations::SOURCE_NAMESPACE], "shop");
        // Born with the syncer's finalizer; none of the hub object's finalizers travel.
        assert_eq!(w.finalizers(), [finalizers::SYNCER]);
        assert_eq!(
            render(&deployment(), "member1", Some(4), "spread", &spec).expect("again"),
            w
        );
    }
}
