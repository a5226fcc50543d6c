//! Names derived from other names: the per-cluster namespace, the agent's identity, the names of
//! APIResourceImports and NegotiatedAPIResources. Pure functions, mirrored by the CRDs' CEL rules.

/// Prefix of the hub namespace that holds a member's Works, APIResourceImports and agent Lease.
pub const CLUSTER_NAMESPACE_PREFIX: &str = "flotilla-cluster-";

/// The longest Cluster name: `flotilla-cluster-<name>` must still be a namespace name (63).
pub const MAX_CLUSTER_NAME_LENGTH: usize = 63 - CLUSTER_NAMESPACE_PREFIX.len();

/// The namespace the controllers run in and, by default, where kubeconfig Secrets live.
pub const SYSTEM_NAMESPACE: &str = "flotilla-system";

/// The key of a kubeconfig Secret used when `kubeconfigSecretRef.key` is not set.
pub const DEFAULT_KUBECONFIG_KEY: &str = "kubeconfig";

/// Name of the Lease a pull-mode agent renews in `flotilla-cluster-<name>`.
pub const AGENT_LEASE_NAME: &str = "flotilla-agent";

/// Name of the ConfigMap in `flotilla-cluster-<name>` that lists the types a pull-mode member's
/// importer imports: the negotiator on the hub writes it, the importer reads it with the agent's
/// credential (which may `get` that one ConfigMap of its namespace).
pub const IMPORT_TYPES_CONFIGMAP: &str = "flotilla-import-types";

/// Group of every pull-mode agent's client certificate.
pub const AGENT_GROUP: &str = "system:flotilla:agents";

/// The ClusterRole of an agent's rights in its hub namespace (`deploy/bootstrap`; the chart ships
/// one per release), bound there by registration with a RoleBinding.
pub const AGENT_CLUSTER_ROLE: &str = "flotilla:agent";

/// Prefix of the group that ties an agent's certificate to one Cluster object:
/// `system:flotilla:cluster-uid:<uid>`.
pub const CLUSTER_UID_GROUP_PREFIX: &str = "system:flotilla:cluster-uid:";

/// The group in the certificates of the agent of the Cluster with UID `uid`. The agent's RBAC is
/// bound to it, not to the user name, so a certificate issued for a deleted Cluster grants
/// nothing to a new Cluster of the same name.
pub fn cluster_uid_group(uid: &str) -> String {
    format!("{CLUSTER_UID_GROUP_PREFIX}{uid}")
}

/// Signer of the agents' client certificates.
pub const AGENT_CSR_SIGNER: &str = "kubernetes.io/kube-apiserver-client";

/// The hub namespace of a member: `flotilla-cluster-<name>`.
pub fn cluster_namespace(cluster: &str) -> String {
    format!("{CLUSTER_NAMESPACE_PREFIX}{cluster}")
}

/// Longest Kubernetes object name.
const MAX_OBJECT_NAME: usize = 253;

/// The name of the Work that places the hub object `namespace/name` of `group` and `kind` on a
/// member: `<kind>-<namespace>-<name>-<hash>` in lower case, e.g.
/// `deployment-shop-web-1b2f3c4d5e` (any character but a letter or digit becomes '-'). The hash
/// is of all four parts, so two objects never share a
/// Work even where the readable part is the same (`a-b`/`c` and `a`/`b-c`, or two groups with a
/// kind of the same name); names too long for Kubernetes are cut before the hash.
pub fn work_name(group: &str, kind: &str, namespace: &str, name: &str) -> String {
    hashed_name(&[group, kind, namespace, name], "")
}

/// The name of Work `index` of those that place the objects of `group` and `kind` of Placement
/// `namespace/placement` on a member: `<kind>-<namespace>-<placement>-<hash>-<index>` in lower
/// case, e.g. `configmap-shop-spread-1b2f3c4d5e-0`. As for [`work_name`], the hash keeps two
/// Placements (or two types) from ever sharing a Work.
pub fn bundle_name(
    group: &str,
    kind: &str,
    namespace: &str,
    placement: &str,
    index: u32,
) -> String {
    hashed_name(&[group, kind, namespace, placement], &format!("-{index}"))
}

/// `<kind>-<namespace>-<name>-<hash><tail>` of `parts` (group, kind, namespace, name), cut to fit.
fn hashed_name(parts: &[&str; 4], tail: &str) -> String {
    // Over the parts with a separator no part contains.
    let hash = fnv1a(
        parts
            .iter()
            .flat_map(|p| p.bytes().chain(std::iter::once(b'/'))),
    );
    let suffix = format!("-{:010x}{tail}", hash & 0xff_ffff_ffff);
    // Only lower-case letters, digits and '-' (RBAC names may hold ':' or capitals).
    let readable: String = format!("{}-{}-{}", parts[1], parts[2], parts[3])
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    let mut cut = readable.len().min(MAX_OBJECT_NAME - suffix.len());
    while !readable.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{suffix}", readable[..cut].trim_end_matches(['-', '.']))
}

/// 64-bit FNV-1a of `bytes`: stable across processes and versions, unlike std's hasher, for
/// names and digests that must not change from one build to the next.
pub fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The member a hub namespace belongs to, if it is a `flotilla-cluster-<name>` namespace.
pub fn cluster_from_namespace(namespace: &str) -> Option<&str> {
    namespace
        .strip_prefix(CLUSTER_NAMESPACE_PREFIX)
        .filter(|name| validate_cluster_name(name).is_ok())
}

/// The user name in a pull-mode agent's client certificate: `system:flotilla:cluster:<name>:agent`.
pub fn agent_user_name(cluster: &str) -> String {
    format!("system:flotilla:cluster:{cluster}:agent")
}

/// The cluster a certificate user name belongs to, if it is an agent's user name.
pub fn cluster_from_agent_user_name(user: &str) -> Option<&str> {
    user.strip_prefix("system:flotilla:cluster:")
        .and_then(|rest| rest.strip_suffix(":agent"))
        .filter(|name| validate_cluster_name(name).is_ok())
}

/// Why a string cannot name a Cluster.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidClusterName {
    #[error("a cluster name must not be empty")]
    Empty,
    #[error("cluster name {0:?} is longer than {MAX_CLUSTER_NAME_LENGTH} characters")]
    TooLong(String),
    #[error(
        "cluster name {0:?} must consist of lowercase letters, digits and '-', and start and end \
         with a letter or digit"
    )]
    NotADnsLabel(String),
}

/// Checks that `name` can name a Cluster: a lowercase RFC 1123 label of at most
/// [`MAX_CLUSTER_NAME_LENGTH`] characters. The Cluster CRD enforces the same rule.
pub fn validate_cluster_name(name: &str) -> Result<(), InvalidClusterName> {
    if name.is_empty() {
        return Err(InvalidClusterName::Empty);
    }
    if name.len() > MAX_CLUSTER_NAME_LENGTH {
        return Err(InvalidClusterName::TooLong(name.to_string()));
    }
    if !is_dns_label(name) {
        return Err(InvalidClusterName::NotADnsLabel(name.to_string()));
    }
    Ok(())
}

/// The name of the APIResourceImport (in `flotilla-cluster-<c>`) and of the NegotiatedAPIResource
/// for one resource type: `<plural>.<version>.<group>`, with `core` for the empty (legacy) group,
/// e.g. `deployments.v1.apps`, `configmaps.v1.core`.
pub fn api_resource_name(group: &str, version: &str, plural: &str) -> String {
    let group = if group.is_empty() { "core" } else { group };
    format!("{plural}.{version}.{group}")
}

/// RFC 1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first() != Some(&b'-')
        && bytes.last() != Some(&b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hub_object_has_a_work_name_of_its_own() {
        let web = work_name("apps", "Deployment", "shop", "web");
        assert!(web.starts_with("deployment-shop-web-"), "{web}");
        assert_eq!(
            web,
            work_name("apps", "Deployment", "shop", "web"),
            "stable"
        );
        let others = [
            work_name("apps", "Deployment", "team-b", "web"),
            work_name("example.com", "Deployment", "shop", "web"),
            work_name("", "ConfigMap", "shop", "web"),
            // The same readable part from other parts.
            work_name("apps", "Deployment", "shop-web", ""),
            work_name("apps", "Deployment", "a-b", "c"),
            work_name("apps", "Deployment", "a", "b-c"),
        ];
        let mut all: Vec<&String> = others.iter().chain([&web]).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), others.len() + 1, "{all:?}");
        let long = work_name("", "ConfigMap", "shop", &"x".repeat(300));
        let longer = work_name("", "ConfigMap", "shop", &format!("{}y", "x".repeat(299)));
        assert!(long.len() <= 253 && longer.len() <= 253);
        assert_ne!(long, longer);
        let rbac = work_name(
            "rbac.authorization.k8s.io",
            "Role",
            "shop",
            "system:Reader.v1",
        );
        assert!(rbac.starts_with("role-shop-system-reader-v1-"), "{rbac}");
        for n in [&web, &long, &rbac] {
            assert!(
                n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{n}"
            );
        }
    }

    #[test]
    fn each_placement_and_type_has_works_of_its_own() {
        let first = bundle_name("", "ConfigMap", "shop", "spread", 0);
        assert!(first.starts_with("configmap-shop-spread-"), "{first}");
        assert!(first.ends_with("-0"), "{first}");
        let others = [
            bundle_name("", "ConfigMap", "shop", "spread", 1),
            bundle_name("", "ConfigMap", "team-b", "spread", 0),
            bundle_name("", "Secret", "shop", "spread", 0),
            bundle_name("example.com", "ConfigMap", "shop", "spread", 0),
            bundle_name("", "ConfigMap", "shop-spread", "", 0),
            work_name("", "ConfigMap", "shop", "spread"),
        ];
        let mut all: Vec<&String> = others.iter().chain([&first]).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), others.len() + 1, "{all:?}");
        let long = bundle_name(
            "",
            "ConfigMap",
            &"n".repeat(63),
            &"p".repeat(253),
            4_000_000_000,
        );
        assert!(long.len() <= 253 && long.ends_with("-4000000000"), "{long}");
    }

    #[test]
    fn cluster_namespace_round_trips() {
        assert_eq!(cluster_namespace("member1"), "flotilla-cluster-member1");
        assert_eq!(
            cluster_from_namespace("flotilla-cluster-member1"),
            Some("member1")
        );
        assert_eq!(cluster_from_namespace("flotilla-cluster-"), None);
        assert_eq!(cluster_from_namespace("flotilla-system"), None);
        assert_eq!(cluster_from_namespace("default"), None);
    }

    #[test]
    fn longest_cluster_name_gives_a_valid_namespace() {
        let name = "a".repeat(MAX_CLUSTER_NAME_LENGTH);
        assert!(validate_cluster_name(&name).is_ok());
        assert!(is_dns_label(&cluster_namespace(&name)));
        let too_long = "a".repeat(MAX_CLUSTER_NAME_LENGTH + 1);
        let err = validate_cluster_name(&too_long).expect_err("too long");
        assert_eq!(err, InvalidClusterName::TooLong(too_long.clone()));
        assert!(err.to_string().contains("longer than 46"), "{err}");
    }

    #[test]
    fn cluster_names_are_dns_labels() {
        for ok in ["a", "member1", "eu-west-1", "0"] {
            assert!(validate_cluster_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Member1", "a.b", "-a", "a-", "a_b", "a b"] {
            assert!(validate_cluster_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn agent_user_names_round_trip() {
        let user = agent_user_name("member1");
        assert_eq!(user, "system:flotilla:cluster:member1:agent");
        assert_eq!(cluster_from_agent_user_name(&user), Some("member1"));
        assert_eq!(
            cluster_from_agent_user_name("system:flotilla:cluster:a:b:agent"),
            None
        );
        assert_eq!(cluster_from_agent_user_name("system:admin"), None);
    }

    #[test]
    fn api_resource_names_use_core_for_the_legacy_group() {
        assert_eq!(
            api_resource_name("apps", "v1", "deployments"),
            "deployments.v1.apps"
        );
        assert_eq!(
            api_resource_name("", "v1", "configmaps"),
            "configmaps.v1.core"
        );
    }
}
