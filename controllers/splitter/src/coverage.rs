//! Pure: the objects of a Placement's namespace that no Placement places, and why (design rule
//! 11: nothing is left out silently).
//!
//! The namespace's objects of every namespaced kind of the interpreter's table are looked at
//! (objects of other kinds are placed only when a selector names them, so none is left out by
//! default). An object is left out when no Placement of the namespace selects it, when the hub
//! made it for itself, when a policy holds it back (Pod Security, a binding that would grant more
//! in a member; the Placement that selects it says so), or when its type cannot be read. The root
//! CA bundle and the `default` ServiceAccount, which every namespace of every cluster has of its
//! own, and Flotilla's own records of Deployments' revisions are not listed.

use std::collections::BTreeMap;
use std::sync::Arc;

use flotilla_api::{NotPlaced, Placement, reasons};
use flotilla_interpreter::hub_made::{
    DEFAULT_SERVICE_ACCOUNT, HELM_RELEASE_TYPE, ROOT_CA_CONFIGMAP, made_by_the_hub,
};
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::Value;

use crate::keys::ObjectKey;
use crate::observation::{Listed, Unreadable};
use crate::specificity::{Selectable, specificity};

/// How many objects a Placement's status lists.
pub const MAX_LISTED: usize = 20;

/// One object left out, with the UID of the hub object (for its Event).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LeftOut {
    pub entry: NotPlaced,
    pub uid: Option<String>,
}

/// The objects of `namespace_objects` (every listed namespaced kind of the table) that no
/// Placement of `neighbours` places, with those this Placement holds back (`held`: reason and
/// message by object) and the types that could not be read, sorted by kind and name.
pub fn left_out(
    namespace_objects: &[&Listed],
    neighbours: &[Arc<Placement>],
    held: &BTreeMap<ObjectKey, (String, String)>,
    unreadable: &[&Unreadable],
) -> Vec<LeftOut> {
    let mut out = Vec::new();
    for listed in namespace_objects {
        let ar = &listed.resource;
        for object in &listed.objects {
            let name = object.name_any();
            if object.metadata.deletion_timestamp.is_some() || everywhere(&ar.kind, object) {
                continue;
            }
            let key = ObjectKey::new(&ar.api_version, &ar.kind, &name);
            let why = if let Some((reason, message)) = held.get(&key) {
                Some((reason.clone(), message.clone()))
            } else if made_by_the_hub(&ar.api_version, &ar.kind, object) {
                Some((reasons::MADE_BY_THE_HUB.to_string(), made_by(object)))
            } else {
                let selectable = Selectable {
                    api_version: &ar.api_version,
                    kind: &ar.kind,
                    name: &name,
                    labels: object.labels(),
                };
                let selected = neighbours.iter().any(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && specificity(&p.spec.resource_selectors, &selectable).is_some()
                });
                (!selected).then(|| {
                    (
                        reasons::NOT_SELECTED.to_string(),
                        "no Placement of the namespace selects it".to_string(),
                    )
                })
            };
            if let Some((reason, message)) = why {
                out.push(LeftOut {
                    entry: NotPlaced {
                        api_version: ar.api_version.clone(),
                        kind: ar.kind.clone(),
                        name,
                        reason,
                        message,
                    },
                    uid: object.metadata.uid.clone(),
                });
            }
        }
    }
    for t in unreadable {
        out.push(LeftOut {
            entry: NotPlaced {
                api_version: t.api_version.clone(),
                kind: t.kind.clone(),
                name: String::new(),
                reason: if t.forbidden {
                    reasons::FORBIDDEN.to_string()
                } else {
                    reasons::TYPE_UNREADABLE.to_string()
                },
                message: t.message.clone(),
            },
            uid: None,
        });
    }
    out.sort_by(|a, b| {
        (&a.entry.kind, &a.entry.name, &a.entry.api_version).cmp(&(
            &b.entry.kind,
            &b.entry.name,
            &b.entry.api_version,
        ))
    });
    out
}

/// What every namespace of every cluster has of its own, and Flotilla's own revision records:
/// never listed.
fn everywhere(kind: &str, object: &DynamicObject) -> bool {
    let name = object.metadata.name.as_deref().unwrap_or_default();
    (kind == "ConfigMap" && name == ROOT_CA_CONFIGMAP)
        || (kind == "ServiceAccount" && name == DEFAULT_SERVICE_ACCOUNT)
        || object.labels().contains_key(crate::history::RECORD)
}

/// Why the hub's own object stays on the hub.
fn made_by(object: &DynamicObject) -> String {
    if let Some(owner) = object
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
    {
        return format!(
            "the hub made it for {} {} (its controller owner): each member makes its own",
            owner.kind, owner.name
        );
    }
    if object.data.get("type").and_then(Value::as_str) == Some(HELM_RELEASE_TYPE) {
        return "Helm's record of a release installed into the hub stays on the hub".into();
    }
    "the hub's Kubernetes made it for itself; each member has its own".into()
}

/// Kind, name and reason of each object left out, in order (for tests).
#[cfg(test)]
pub(crate) fn summary(out: &[LeftOut]) -> Vec<(&str, &str, &str)> {
    out.iter()
        .map(|l| {
            (
                l.entry.kind.as_str(),
                l.entry.name.as_str(),
                l.entry.reason.as_str(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::resource;
    use serde_json::json;

    fn object(kind: &str, name: &str, extra: Value) -> DynamicObject {
        let mut v = json!({"apiVersion": "v1", "kind": kind,
                           "metadata": {"name": name, "namespace": "shop", "uid": format!("u-{name}")}});
        if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
            for (k, x) in extra {
                if k == "metadata" {
                    for (mk, mx) in x.as_object().into_iter().flatten() {
                        v["metadata"][mk] = mx.clone();
                    }
                } else {
                    v.insert(k.clone(), x.clone());
                }
            }
        }
        serde_json::from_value(v).expect("object")
    }

    fn placement(selectors: Value) -> Arc<Placement> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "p", "namespace": "shop"},
                "spec": {"resourceSelectors": selectors},
            }))
            .expect("placement"),
        )
    }

    #[test]
    fn what_no_placement_selects_and_what_the_hub_made_is_listed_with_the_reason() {
        let configmaps = Listed {
            resource: resource("", "v1", "ConfigMap", "configmaps"),
            objects: vec![
                object("ConfigMap", "settings", json!({})),
                object("ConfigMap", "kube-root-ca.crt", json!({})),
                object(
                    "ConfigMap",
                    "owned",
                    json!({"metadata": {"ownerReferences": [
                    {"apiVersion": "v1", "kind": "Service", "name": "web", "uid": "s", "controller": true}]}}),
                ),
            ],
        };
        let secrets = Listed {
            resource: resource("", "v1", "Secret", "secrets"),
            objects: vec![
                object(
                    "Secret",
                    "sh.helm.release.v1.web.v1",
                    json!({"type": "helm.sh/release.v1"}),
                ),
                object("Secret", "placed", json!({})),
            ],
        };
        let accounts = Listed {
            resource: resource("", "v1", "ServiceAccount", "serviceaccounts"),
            objects: vec![object("ServiceAccount", "default", json!({}))],
        };
        let neighbours = [placement(
            json!([{"apiVersion": "v1", "kind": "Secret", "name": "placed"}]),
        )];
        let unreadable = Unreadable {
            api_version: "v1".into(),
            kind: "LimitRange".into(),
            forbidden: true,
            message: "may not list".into(),
        };
        let out = left_out(
            &[&configmaps, &secrets, &accounts],
            &neighbours,
            &BTreeMap::new(),
            &[&unreadable],
        );
        assert_eq!(
            summary(&out),
            [
                ("ConfigMap", "owned", reasons::MADE_BY_THE_HUB),
                ("ConfigMap", "settings", reasons::NOT_SELECTED),
                ("LimitRange", "", reasons::FORBIDDEN),
                (
                    "Secret",
                    "sh.helm.release.v1.web.v1",
                    reasons::MADE_BY_THE_HUB
                ),
            ]
        );
        assert!(out[0].entry.message.contains("Service web"));
        assert!(out[3].entry.message.contains("Helm"));
        assert_eq!(out[1].uid.as_deref(), Some("u-settings"));
    }

    #[test]
    fn an_empty_selector_places_everything_and_a_held_back_object_says_why() {
        let bindings = Listed {
            resource: resource(
                "rbac.authorization.k8s.io",
                "v1",
                "RoleBinding",
                "rolebindings",
            ),
            objects: vec![
                object("RoleBinding", "app", json!({})),
                object("RoleBinding", "ops", json!({})),
            ],
        };
        let held: BTreeMap<ObjectKey, (String, String)> = [(
            ObjectKey::new("rbac.authorization.k8s.io/v1", "RoleBinding", "ops"),
            (
                reasons::BINDING_HELD_BACK.to_string(),
                "it binds Group ops".to_string(),
            ),
        )]
        .into();
        let out = left_out(&[&bindings], &[placement(json!([]))], &held, &[]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].entry.name, "ops");
        assert_eq!(out[0].entry.reason, reasons::BINDING_HELD_BACK);
        assert!(left_out(&[&bindings], &[placement(json!([]))], &BTreeMap::new(), &[]).is_empty());
    }
}
