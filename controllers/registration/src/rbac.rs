//! The RBAC of a pull-mode agent on the hub — exactly what it needs and nothing else: read its
//! Works and write their status, write APIResourceImports and renew its Lease in its own
//! namespace, read its own Cluster and write its status, and request certificates (renewal).

use flotilla_api::{labels, names};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::ObjectMeta;

/// Name of the agent's Role and RoleBinding in `flotilla-cluster-<name>`.
pub const AGENT_ROLE: &str = "flotilla-agent";

/// Name of the agent's ClusterRole and ClusterRoleBinding: `flotilla:cluster:<name>:agent`.
pub fn agent_cluster_role(cluster: &str) -> String {
    format!("flotilla:cluster:{cluster}:agent")
}

fn meta(name: String, namespace: Option<String>, cluster: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace,
        labels: Some([(labels::CLUSTER.to_string(), cluster.to_string())].into()),
        ..ObjectMeta::default()
    }
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str], names: &[&str]) -> PolicyRule {
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(strings(groups)),
        resources: Some(strings(resources)),
        verbs: strings(verbs),
        resource_names: (!names.is_empty()).then(|| strings(names)),
        non_resource_urls: None,
    }
}

fn subject(cluster: &str) -> Vec<Subject> {
    vec![Subject {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: "User".into(),
        name: names::agent_user_name(cluster),
        namespace: None,
    }]
}

/// The agent's Role in its namespace.
pub fn agent_role(cluster: &str) -> Role {
    Role {
        metadata: meta(
            AGENT_ROLE.into(),
            Some(names::cluster_namespace(cluster)),
            cluster,
        ),
        rules: Some(vec![
            // patch/update: only the syncer's finalizer, which the admission policy
            // flotilla-agent-works (deploy/bootstrap) enforces; RBAC cannot name a field.
            rule(
                &["flotilla.dev"],
                &["works"],
                &["get", "list", "watch", "patch", "update"],
                &[],
            ),
            rule(
                &["flotilla.dev"],
                &["works/status"],
                &["get", "update", "patch"],
                &[],
            ),
            rule(
                &["flotilla.dev"],
                &["apiresourceimports"],
                &[
                    "get", "list", "watch", "create", "update", "patch", "delete",
                ],
                &[],
            ),
            // The Imported condition of its imports (the negotiator writes Compatible).
            rule(
                &["flotilla.dev"],
                &["apiresourceimports/status"],
                &["get", "patch"],
                &[],
            ),
            // Events on its Works (conflicts, apply errors).
            rule(&["events.k8s.io"], &["events"], &["create", "patch"], &[]),
            // RBAC cannot restrict create by name; get/update only the agent's own Lease.
            rule(&["coordination.k8s.io"], &["leases"], &["create"], &[]),
            rule(
                &["coordination.k8s.io"],
                &["leases"],
                &["get", "update", "patch"],
                &[names::AGENT_LEASE_NAME],
            ),
        ]),
    }
}

pub fn agent_role_binding(cluster: &str) -> RoleBinding {
    RoleBinding {
        metadata: meta(
            AGENT_ROLE.into(),
            Some(names::cluster_namespace(cluster)),
            cluster,
        ),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: AGENT_ROLE.into(),
        },
        subjects: Some(subject(cluster)),
    }
}

/// The agent's cluster-wide rights: its own Cluster, and certificate requests for renewal.
pub fn agent_cluster_role_object(cluster: &str) -> ClusterRole {
    ClusterRole {
        metadata: meta(agent_cluster_role(cluster), None, cluster),
        rules: Some(vec![
            rule(
                &["flotilla.dev"],
                &["clusters"],
                &["get", "list", "watch"],
                &[cluster],
            ),
            rule(
                &["flotilla.dev"],
                &["clusters/status"],
                &["get", "update", "patch"],
                &[cluster],
            ),
            rule(
                &["certificates.k8s.io"],
                &["certificatesigningrequests"],
                &["create", "get", "list", "watch"],
                &[],
            ),
        ]),
        aggregation_rule: None,
    }
}

pub fn agent_cluster_role_binding(cluster: &str) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(agent_cluster_role(cluster), None, cluster),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: agent_cluster_role(cluster),
        },
        subjects: Some(subject(cluster)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_gets_no_secrets_and_only_its_own_names() {
        let role = agent_role("m1");
        assert_eq!(
            role.metadata.namespace.as_deref(),
            Some("flotilla-cluster-m1")
        );
        let cr = agent_cluster_role_object("m1");
        for r in role.rules.iter().flatten().chain(cr.rules.iter().flatten()) {
            let resources = r.resources.clone().unwrap_or_default();
            assert!(
                !resources.iter().any(|x| x == "secrets" || x == "*"),
                "{r:?}"
            );
            assert!(!r.verbs.iter().any(|v| v == "*"), "{r:?}");
        }
        let cluster_rule = &cr.rules.as_ref().expect("rules")[0];
        assert_eq!(
            cluster_rule.resource_names.as_deref(),
            Some(&["m1".to_string()][..])
        );
        let binding = agent_cluster_role_binding("m1");
        assert_eq!(
            binding.subjects.expect("subjects")[0].name,
            "system:flotilla:cluster:m1:agent"
        );
    }
}
