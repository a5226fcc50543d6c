//! The pull-mode syncer's grants in a member (`deploy/agent/syncer.yaml`) cover every namespaced
//! kind of the interpreter's table of kinds: what a Placement without `resourceSelectors` places
//! reaches a pull-mode member as it reaches a push-mode one.

use std::collections::BTreeSet;

use flotilla_interpreter::table;
use serde_json::Value;

/// What the member lets the syncer do, as (group, resource, verb).
fn granted() -> BTreeSet<(String, String, String)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/agent/syncer.yaml"
    );
    let text = std::fs::read_to_string(path).expect("reading deploy/agent/syncer.yaml");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("parsing the syncer's file");
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect()
    };
    let mut out = BTreeSet::new();
    for doc in docs.iter().filter(|d| {
        d["kind"] == "ClusterRole"
            && d["metadata"]["labels"]["flotilla.dev/aggregate-to-syncer"] == "true"
    }) {
        for rule in doc["rules"].as_array().into_iter().flatten() {
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    for verb in strings(&rule["verbs"]) {
                        out.insert((group.clone(), resource.clone(), verb));
                    }
                }
            }
        }
    }
    out
}

#[test]
fn the_pull_syncer_may_apply_every_namespaced_kind_of_the_table() {
    let granted = granted();
    let mut missing = Vec::new();
    for k in table::defaults(true) {
        for verb in ["get", "list", "watch", "create", "patch", "delete"] {
            if !granted.contains(&(k.group.into(), k.plural.into(), verb.into())) {
                missing.push(format!("{verb} {}.{}", k.plural, k.group));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "deploy/agent/syncer.yaml does not grant: {}",
        missing.join(", ")
    );
    // Placing RBAC needs escalate on Roles and bind on the roles a binding names.
    for (resource, verb) in [
        ("roles", "escalate"),
        ("roles", "bind"),
        ("clusterroles", "bind"),
    ] {
        assert!(
            granted.contains(&(
                "rbac.authorization.k8s.io".into(),
                resource.into(),
                verb.into()
            )),
            "{verb} {resource}"
        );
    }
}
