//! Pure: whether a placed RoleBinding or ClusterRoleBinding grants no more in a member than it
//! grants on the hub (design rule 9).
//!
//! A binding names its subjects by name, and a name means what each cluster says it means: the
//! user `alice` or the group `ops` of a member are whoever that member's authenticators say, not
//! the hub's; a ServiceAccount of another namespace is another tenant's; a ClusterRole of a given
//! name is whatever the member's admin made it. So a RoleBinding is placed by default only when
//! every subject is a ServiceAccount of its own namespace that the same Placement places, and its
//! role is a Role the Placement places or a ClusterRole the hub has (the tenant could bind it on
//! the hub, so the hub's RBAC already allowed the grant). A ClusterRoleBinding (placed by an
//! admin's ClusterPlacement) is placed by default only when its ClusterRole is the hub's and
//! every subject is a ServiceAccount the hub has in a tenant's namespace: not the hub's own
//! identities (its system namespaces, Flotilla's namespace, the members' `flotilla-cluster-*`
//! namespaces), whose names mean the members' own controllers there. This keeps the
//! ClusterRoleBindings of third-party charts (`cert-manager/cert-manager` bound to its
//! ClusterRole) working. Anything else waits for an admin: the annotation
//! [`ALLOW_ANY_BINDING_SUBJECT`] on the hub namespace (or the ClusterPlacement) lets other
//! subjects through. A binding held back is placed nowhere; copies it already has stay as they
//! are.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::pod_security::Verdict;

/// On a hub Namespace or a ClusterPlacement, set by an admin: `"true"` lets its bindings name
/// users, groups or ServiceAccounts not placed with them.
pub const ALLOW_ANY_BINDING_SUBJECT: &str = flotilla_api::annotations::ALLOW_ANY_BINDING_SUBJECT;

/// The API version and kind of the objects this module judges.
pub const RBAC_API_VERSION: &str = "rbac.authorization.k8s.io/v1";
pub const ROLE_BINDING: &str = "RoleBinding";
pub const CLUSTER_ROLE_BINDING: &str = "ClusterRoleBinding";
pub const ROLE: &str = "Role";
pub const CLUSTER_ROLE: &str = "ClusterRole";

/// A ServiceAccount by namespace and name.
pub type Account = (String, String);

/// What the verdict on a binding depends on, gathered by one pass.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// The namespace of the RoleBindings judged (the Placement's); empty for ClusterRoleBindings,
    /// whose ServiceAccount subjects name their namespace.
    pub namespace: String,
    /// The ServiceAccounts a binding may name: those the Placement places (selected, or followed
    /// by a placed workload), or for a ClusterPlacement those the hub has in tenants' namespaces.
    pub accounts: BTreeSet<Account>,
    /// ServiceAccounts that could not be looked up on the hub now.
    pub accounts_unknown: BTreeSet<Account>,
    /// The Roles the Placement places.
    pub roles: BTreeSet<String>,
    /// The ClusterRoles the bindings name: whether the hub has each (`None`: could not tell now).
    pub cluster_roles: BTreeMap<String, Option<bool>>,
    /// The hub namespace (or the ClusterPlacement) carries [`ALLOW_ANY_BINDING_SUBJECT`].
    pub any_subject: bool,
}

impl Facts {
    /// Where an admin sets [`ALLOW_ANY_BINDING_SUBJECT`] for these bindings.
    fn switch(&self) -> &'static str {
        if self.namespace.is_empty() {
            "the ClusterPlacement"
        } else {
            "the hub namespace"
        }
    }
}

/// Whether `binding` (a RoleBinding or ClusterRoleBinding) may be placed.
pub fn judge(binding: &Value, facts: &Facts) -> Verdict {
    let role = &binding["roleRef"];
    let role_name = role["name"].as_str().unwrap_or_default();
    match role["kind"].as_str() {
        Some(ROLE) if facts.roles.contains(role_name) => {}
        Some(ROLE) => {
            return Verdict::Violates(format!("its Role {role_name} is not placed with it"));
        }
        Some(CLUSTER_ROLE) => match facts.cluster_roles.get(role_name) {
            Some(Some(true)) => {}
            Some(Some(false)) => {
                return Verdict::Violates(format!(
                    "the ClusterRole {role_name} it binds does not exist on the hub"
                ));
            }
            _ => {
                return Verdict::Unknown(format!(
                    "the ClusterRole {role_name} it binds could not be read on the hub now"
                ));
            }
        },
        other => {
            return Verdict::Violates(format!(
                "its roleRef kind {} is neither Role nor ClusterRole",
                other.unwrap_or("(none)")
            ));
        }
    }
    if facts.any_subject {
        return Verdict::Allowed;
    }
    let subjects: Vec<&Value> = binding["subjects"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    if let Some(unknown) = subjects
        .iter()
        .filter_map(|s| account(s, facts))
        .find(|a| facts.accounts_unknown.contains(a))
    {
        return Verdict::Unknown(format!(
            "the ServiceAccount {}/{} it binds could not be read on the hub now",
            unknown.0, unknown.1
        ));
    }
    let foreign: Vec<String> = subjects
        .into_iter()
        .filter(|s| account(s, facts).is_none_or(|a| !facts.accounts.contains(&a)))
        .map(describe)
        .collect();
    if foreign.is_empty() {
        return Verdict::Allowed;
    }
    let allowed = if facts.namespace.is_empty() {
        "only ServiceAccounts the hub has in tenants' namespaces are bound there"
    } else {
        "only ServiceAccounts placed with it are bound there"
    };
    Verdict::Violates(format!(
        "it binds {}, which may mean someone else in a member; {allowed} unless an admin \
         annotates {} {}: \"true\"",
        foreign.join(", "),
        facts.switch(),
        ALLOW_ANY_BINDING_SUBJECT
    ))
}

/// The ServiceAccount `subject` names, if it names one (a RoleBinding's own namespace when it
/// names none).
fn account(subject: &Value, facts: &Facts) -> Option<Account> {
    if subject["kind"] != "ServiceAccount" {
        return None;
    }
    let namespace = subject["namespace"].as_str().unwrap_or(&facts.namespace);
    let name = subject["name"].as_str()?;
    (!namespace.is_empty()).then(|| (namespace.to_string(), name.to_string()))
}

fn describe(subject: &Value) -> String {
    let kind = subject["kind"].as_str().unwrap_or("subject");
    let name = subject["name"].as_str().unwrap_or_default();
    match subject["namespace"].as_str() {
        Some(ns) if kind == "ServiceAccount" => format!("{kind} {ns}/{name}"),
        _ => format!("{kind} {name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    /// A verdict as the cases name it.
    fn seen(verdict: &Verdict) -> &'static str {
        match verdict {
            Verdict::Allowed => "allowed",
            Verdict::Violates(_) => "held",
            Verdict::Unknown(_) => "unknown",
        }
    }

    fn facts() -> Facts {
        Facts {
            namespace: "shop".into(),
            accounts: [("shop".to_string(), "web".to_string())].into(),
            roles: ["reader".to_string()].into(),
            cluster_roles: [
                ("view".to_string(), Some(true)),
                ("gone".to_string(), Some(false)),
                ("unknown".to_string(), None),
            ]
            .into(),
            any_subject: false,
            ..Facts::default()
        }
    }

    fn binding(role_kind: &str, role: &str, subjects: Value) -> Value {
        json!({"apiVersion": RBAC_API_VERSION, "kind": ROLE_BINDING,
               "metadata": {"name": "b", "namespace": "shop"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
               "subjects": subjects})
    }

    fn sa(name: &str, ns: Option<&str>) -> Value {
        match ns {
            Some(ns) => json!({"kind": "ServiceAccount", "name": name, "namespace": ns}),
            None => json!({"kind": "ServiceAccount", "name": name}),
        }
    }

    #[rstest]
    #[case::placed_account_and_role(binding(ROLE, "reader", json!([sa("web", Some("shop"))])), "allowed")]
    #[case::account_without_namespace(binding(ROLE, "reader", json!([sa("web", None)])), "allowed")]
    #[case::hub_cluster_role(binding(CLUSTER_ROLE, "view", json!([sa("web", Some("shop"))])), "allowed")]
    #[case::no_subjects(binding(ROLE, "reader", json!([])), "allowed")]
    #[case::role_not_placed(binding(ROLE, "admin", json!([sa("web", Some("shop"))])), "held")]
    #[case::cluster_role_absent(binding(CLUSTER_ROLE, "gone", json!([sa("web", Some("shop"))])), "held")]
    #[case::cluster_role_unreadable(binding(CLUSTER_ROLE, "unknown", json!([sa("web", Some("shop"))])), "unknown")]
    #[case::cluster_role_never_looked_up(binding(CLUSTER_ROLE, "edit", json!([sa("web", Some("shop"))])), "unknown")]
    #[case::account_not_placed(binding(ROLE, "reader", json!([sa("db", Some("shop"))])), "held")]
    #[case::account_of_another_namespace(binding(ROLE, "reader", json!([sa("web", Some("kube-system"))])), "held")]
    #[case::user(binding(ROLE, "reader", json!([{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}])), "held")]
    #[case::group(binding(CLUSTER_ROLE, "view", json!([sa("web", Some("shop")), {"kind": "Group", "name": "system:authenticated"}])), "held")]
    fn a_binding_is_placed_only_when_it_grants_no_more_than_on_the_hub(
        #[case] binding: Value,
        #[case] expected: &str,
    ) {
        let verdict = judge(&binding, &facts());
        assert_eq!(seen(&verdict), expected, "{verdict:?}");
    }

    #[test]
    fn an_admin_lets_other_subjects_through_but_not_a_missing_role() {
        let facts = Facts {
            any_subject: true,
            ..facts()
        };
        let user = json!([{"kind": "User", "name": "alice"}]);
        assert_eq!(
            judge(&binding(ROLE, "reader", user.clone()), &facts),
            Verdict::Allowed
        );
        assert!(matches!(
            judge(&binding(ROLE, "admin", user), &facts),
            Verdict::Violates(_)
        ));
    }

    #[test]
    fn the_reason_names_each_foreign_subject_and_the_annotation() {
        let b = binding(
            ROLE,
            "reader",
            json!([{"kind": "User", "name": "alice"}, sa("x", Some("other"))]),
        );
        let Verdict::Violates(why) = judge(&b, &facts()) else {
            panic!("held back")
        };
        assert!(why.contains("User alice"), "{why}");
        assert!(why.contains("ServiceAccount other/x"), "{why}");
        assert!(why.contains(ALLOW_ANY_BINDING_SUBJECT), "{why}");
    }

    /// A ClusterPlacement's facts: the hub has `shop/web` and `cert-manager/cert-manager`; it
    /// could not read `slow/x` now.
    fn cluster_facts() -> Facts {
        Facts {
            namespace: String::new(),
            accounts: [
                ("shop".to_string(), "web".to_string()),
                ("cert-manager".to_string(), "cert-manager".to_string()),
            ]
            .into(),
            accounts_unknown: [("slow".to_string(), "x".to_string())].into(),
            cluster_roles: [("cert-manager-controller".to_string(), Some(true))].into(),
            ..Facts::default()
        }
    }

    fn cluster_binding(subjects: Value) -> Value {
        json!({"apiVersion": RBAC_API_VERSION, "kind": CLUSTER_ROLE_BINDING,
               "metadata": {"name": "b"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": CLUSTER_ROLE,
                           "name": "cert-manager-controller"},
               "subjects": subjects})
    }

    #[rstest]
    #[case::a_charts_account(json!([sa("cert-manager", Some("cert-manager"))]), "allowed")]
    #[case::tenant_accounts(json!([sa("web", Some("shop")), sa("cert-manager", Some("cert-manager"))]), "allowed")]
    #[case::an_account_the_hub_lacks_or_its_own(json!([sa("default", Some("kube-system"))]), "held")]
    #[case::an_account_without_namespace(json!([sa("web", None)]), "held")]
    #[case::user(json!([{"kind": "User", "name": "alice"}]), "held")]
    #[case::group(json!([sa("web", Some("shop")), {"kind": "Group", "name": "system:masters"}]), "held")]
    #[case::unreadable_account(json!([sa("x", Some("slow"))]), "unknown")]
    fn a_cluster_role_binding_is_placed_only_for_tenants_accounts_of_the_hub(
        #[case] subjects: Value,
        #[case] expected: &str,
    ) {
        let verdict = judge(&cluster_binding(subjects), &cluster_facts());
        assert_eq!(seen(&verdict), expected, "{verdict:?}");
    }

    #[test]
    fn a_held_cluster_role_binding_names_the_cluster_placements_switch() {
        let b = cluster_binding(json!([{"kind": "Group", "name": "ops"}]));
        let Verdict::Violates(why) = judge(&b, &cluster_facts()) else {
            panic!("held back")
        };
        assert!(why.contains("Group ops"), "{why}");
        assert!(why.contains("the ClusterPlacement"), "{why}");
        let facts = Facts {
            any_subject: true,
            ..cluster_facts()
        };
        assert_eq!(judge(&b, &facts), Verdict::Allowed);
    }
}
