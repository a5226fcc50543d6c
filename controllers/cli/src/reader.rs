//! The read-only identity in a push member (`deploy/member/reader.yaml`): registration probes the
//! member with it and the negotiator reads its schemas with it, so that only the syncer's
//! credential can write to the member.

use anyhow::{Context as _, anyhow};
use serde_json::{Value, json};

/// `deploy/member/reader.yaml`, as the docs tell a user to apply it.
const MANIFEST: &str = include_str!("../../../deploy/member/reader.yaml");

/// The namespace `deploy/member/reader.yaml` puts the reader's ServiceAccount in.
pub const DEFAULT_NAMESPACE: &str = "flotilla-system";

/// The reader's ServiceAccount.
pub const ACCOUNT: &str = "flotilla-reader";

/// The objects of the reader identity with its ServiceAccount in `namespace`: exactly
/// `deploy/member/reader.yaml` in [`DEFAULT_NAMESPACE`]; in another namespace, a binding of its
/// own (`flotilla:reader:<namespace>`), so readers in several namespaces of one member (several
/// hubs, or tests side by side) do not take the binding from each other.
pub fn objects(namespace: &str) -> anyhow::Result<Vec<Value>> {
    let mut objects: Vec<Value> =
        serde_saphyr::from_multiple(MANIFEST).context("parsing deploy/member/reader.yaml")?;
    for object in &mut objects {
        match object["kind"].as_str() {
            Some("Namespace") => object["metadata"]["name"] = json!(namespace),
            Some("ServiceAccount") => object["metadata"]["namespace"] = json!(namespace),
            Some("ClusterRoleBinding") => {
                if namespace != DEFAULT_NAMESPACE {
                    let name = object["metadata"]["name"].as_str().unwrap_or_default();
                    object["metadata"]["name"] = json!(format!("{name}:{namespace}"));
                }
                object["subjects"] = json!([
                    {"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}
                ]);
            }
            Some("ClusterRole") => {}
            other => {
                return Err(anyhow!(
                    "deploy/member/reader.yaml has an unexpected {other:?}"
                ));
            }
        }
    }
    Ok(objects)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(objects: &[Value]) -> Vec<&str> {
        objects.iter().filter_map(|o| o["kind"].as_str()).collect()
    }

    #[test]
    fn in_its_own_namespace_it_is_the_manifest_the_docs_apply() {
        let objects = objects(DEFAULT_NAMESPACE).expect("renders");
        let manifest: Vec<Value> = serde_saphyr::from_multiple(MANIFEST).expect("parses");
        assert_eq!(objects, manifest);
        assert_eq!(
            kinds(&objects),
            [
                "Namespace",
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding"
            ]
        );
    }

    #[test]
    fn in_another_namespace_it_has_a_binding_of_its_own_for_the_account_there() {
        let objects = objects("team-a").expect("renders");
        let binding = &objects[3];
        assert_eq!(binding["metadata"]["name"], "flotilla:reader:team-a");
        assert_eq!(binding["roleRef"]["name"], "flotilla:reader");
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": "team-a"}])
        );
        assert_eq!(objects[0]["metadata"]["name"], "team-a");
        assert_eq!(objects[1]["metadata"]["namespace"], "team-a");
        // The role is shared: one ClusterRole, whichever namespace binds it.
        assert_eq!(objects[2]["metadata"]["name"], "flotilla:reader");
    }
}
