//! The RBAC of a pull-mode agent on the hub — exactly what it needs and nothing else.
//!
//! - In its namespace `flotilla-cluster-<name>`: the static ClusterRole
//!   [`names::AGENT_CLUSTER_ROLE`] (read its Works and write their status, write
//!   APIResourceImports, renew its Lease), bound by a RoleBinding. Registration creates only the
//!   binding, which needs `bind` on that one ClusterRole instead of holding every right in it.
//! - Cluster-wide: a ClusterRole of its own Cluster by name (read it, write its status) and of
//!   its own namespace (read it).
//! - Certificate requests (renewal): the static binding of the group [`names::AGENT_GROUP`] in
//!   `deploy/bootstrap` and the chart.
//!
//! The subject of both bindings is the group [`names::cluster_uid_group`] of the Cluster's UID,
//! which only certificates issued for this Cluster object carry.
//!
//! And the hub syncer's read of the data of placed Secrets, which the splitter keeps in each
//! member's namespace: a RoleBinding [`SYNCER_ROLE_BINDING`] in the namespace of every accepted
//! push-mode Cluster (the syncer that serves it), of a ClusterRole the chart makes
//! ([`SyncerGrant`]). RBAC cannot grant by namespace prefix, and a cluster-wide read of Secrets
//! would let the syncer read every tenant's.

use flotilla_api::{labels, names};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, RoleBinding, RoleRef, Subject,
};
use kube::api::ObjectMeta;

/// Name of the agent's RoleBinding in `flotilla-cluster-<name>` (and of the Role that earlier
/// versions made there).
pub const AGENT_ROLE: &str = "flotilla-agent";

/// Name of the agent's ClusterRole and ClusterRoleBinding: `flotilla:cluster:<name>:agent`.
pub fn agent_cluster_role(cluster: &str) -> String {
    format!("flotilla:cluster:{cluster}:agent")
}

/// Name of the hub syncer's RoleBinding in a push-mode member's namespace `flotilla-cluster-<name>`.
pub const SYNCER_ROLE_BINDING: &str = "flotilla-syncer";

/// Who the hub syncer is and which ClusterRole gives it the data of placed Secrets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncerGrant {
    pub namespace: String,
    pub service_account: String,
    pub cluster_role: String,
}

/// Binds the grant's ClusterRole to the hub syncer in `cluster`'s namespace.
pub fn syncer_role_binding(cluster: &str, grant: &SyncerGrant) -> RoleBinding {
    RoleBinding {
        metadata: meta(
            SYNCER_ROLE_BINDING.into(),
            Some(names::cluster_namespace(cluster)),
            cluster,
        ),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: grant.cluster_role.clone(),
        },
        subjects: Some(vec![Subject {
            api_group: None,
            kind: "ServiceAccount".into(),
            name: grant.service_account.clone(),
            namespace: Some(grant.namespace.clone()),
        }]),
    }
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

/// The subject of the agent's bindings: the group of the Cluster's UID.
fn subject(uid: &str) -> Vec<Subject> {
    vec![Subject {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: "Group".into(),
        name: names::cluster_uid_group(uid),
        namespace: None,
    }]
}

/// The rules of the static ClusterRole [`names::AGENT_CLUSTER_ROLE`], which the agent holds in
/// its namespace only. `deploy/bootstrap/agent-clusterrole.yaml` and the chart must say the same
/// (a test compares them).
pub fn agent_namespace_rules() -> Vec<PolicyRule> {
    vec![
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
        // The data of the Secrets its Works place, each named by a Work (never listed).
        rule(&[""], &["secrets"], &["get"], &[]),
        // The list of types its importer imports, which the negotiator keeps (no list or watch).
        rule(
            &[""],
            &["configmaps"],
            &["get"],
            &[names::IMPORT_TYPES_CONFIGMAP],
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
    ]
}

/// Binds `agent_cluster_role` (the static ClusterRole) to the agent of the Cluster with UID
/// `uid`, in the Cluster's namespace.
pub fn agent_role_binding(cluster: &str, uid: &str, agent_cluster_role: &str) -> RoleBinding {
    RoleBinding {
        metadata: meta(
            AGENT_ROLE.into(),
            Some(names::cluster_namespace(cluster)),
            cluster,
        ),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: agent_cluster_role.into(),
        },
        subjects: Some(subject(uid)),
    }
}

/// The agent's cluster-wide rights: its own Cluster and its own namespace, by name.
pub fn agent_cluster_role_object(cluster: &str) -> ClusterRole {
    let namespace = names::cluster_namespace(cluster);
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
            // Whether its namespace is being deleted (a Work deleted with it leaves its member
            // objects in place); granted cluster-wide because its RoleBinding there goes first.
            rule(&[""], &["namespaces"], &["get"], &[&namespace]),
        ]),
        aggregation_rule: None,
    }
}

/// Binds the agent's ClusterRole to the agent of the Cluster with UID `uid` and, while the
/// Cluster's bootstrap identity has not got its certificate (`bootstrapping`), to that identity
/// too: it reads no Cluster otherwise, and needs this one's UID for its certificate request when
/// the Cluster existed before the agent (made by the hub admin, or by an earlier run).
pub fn agent_cluster_role_binding(
    cluster: &str,
    uid: &str,
    bootstrapping: bool,
) -> ClusterRoleBinding {
    let mut subjects = subject(uid);
    if bootstrapping {
        subjects.push(Subject {
            api_group: None,
            kind: "ServiceAccount".into(),
            name: crate::csr::bootstrap_service_account(cluster),
            namespace: Some(crate::csr::BOOTSTRAP_NAMESPACE.into()),
        });
    }
    ClusterRoleBinding {
        metadata: meta(agent_cluster_role(cluster), None, cluster),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: agent_cluster_role(cluster),
        },
        subjects: Some(subjects),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::rbac::v1::ClusterRole;

    #[test]
    fn the_agent_lists_no_secrets_and_gets_only_its_own_names() {
        let cr = agent_cluster_role_object("m1");
        for r in agent_namespace_rules()
            .iter()
            .chain(cr.rules.iter().flatten())
        {
            let resources = r.resources.clone().unwrap_or_default();
            assert!(!resources.iter().any(|x| x == "*"), "{r:?}");
            // Secrets: only `get` of one named by a Work, in its own namespace.
            if resources.iter().any(|x| x == "secrets") {
                assert_eq!(r.verbs, ["get"], "{r:?}");
            }
            assert!(!r.verbs.iter().any(|v| v == "*"), "{r:?}");
        }
        assert!(
            cr.rules.iter().flatten().all(|r| !r
                .resources
                .iter()
                .flatten()
                .any(|x| x == "secrets"))
        );
        for r in cr.rules.iter().flatten() {
            let own = if r.resources.as_deref() == Some(&["namespaces".to_string()][..]) {
                assert_eq!(r.verbs, ["get"], "{r:?}");
                "flotilla-cluster-m1"
            } else {
                "m1"
            };
            assert_eq!(r.resource_names.as_deref(), Some(&[own.to_string()][..]));
        }
        let binding = agent_role_binding("m1", "u1", names::AGENT_CLUSTER_ROLE);
        assert_eq!(
            binding.metadata.namespace.as_deref(),
            Some("flotilla-cluster-m1")
        );
        assert_eq!(binding.role_ref.kind, "ClusterRole");
        let subjects = agent_cluster_role_binding("m1", "u1", false)
            .subjects
            .expect("subjects");
        assert_eq!(subjects.len(), 1);
        assert_eq!(subjects[0].kind, "Group");
        assert_eq!(subjects[0].name, "system:flotilla:cluster-uid:u1");
        let subjects = agent_cluster_role_binding("m1", "u1", true)
            .subjects
            .expect("subjects");
        assert_eq!(subjects[1].kind, "ServiceAccount");
        assert_eq!(subjects[1].name, "flotilla-bootstrap-m1");
    }

    #[test]
    fn the_syncer_is_bound_in_the_members_namespace_only() {
        let grant = SyncerGrant {
            namespace: "flotilla-system".into(),
            service_account: "flotilla-syncer".into(),
            cluster_role: "flotilla:flotilla:syncer-work-data".into(),
        };
        let binding = syncer_role_binding("m1", &grant);
        assert_eq!(
            binding.metadata.namespace.as_deref(),
            Some("flotilla-cluster-m1")
        );
        assert_eq!(binding.metadata.name.as_deref(), Some(SYNCER_ROLE_BINDING));
        assert_eq!(binding.role_ref.kind, "ClusterRole");
        assert_eq!(binding.role_ref.name, grant.cluster_role);
        let subjects = binding.subjects.expect("subjects");
        assert_eq!(subjects.len(), 1);
        assert_eq!(subjects[0].kind, "ServiceAccount");
        assert_eq!(subjects[0].name, "flotilla-syncer");
        assert_eq!(subjects[0].namespace.as_deref(), Some("flotilla-system"));
    }

    /// The static ClusterRole of `deploy/bootstrap` grants exactly [`agent_namespace_rules`].
    #[test]
    fn the_bootstrap_agent_cluster_role_matches() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/bootstrap/agent-clusterrole.yaml"
        );
        let text = std::fs::read_to_string(path).expect("reading the agent ClusterRole");
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&text).expect("parsing the agent ClusterRole");
        let role = docs
            .into_iter()
            .find(|d| {
                d["kind"] == "ClusterRole" && d["metadata"]["name"] == names::AGENT_CLUSTER_ROLE
            })
            .expect("the ClusterRole flotilla:agent");
        let role: ClusterRole = serde_json::from_value(role).expect("a ClusterRole");
        assert_eq!(role.rules.unwrap_or_default(), agent_namespace_rules());
    }
}
