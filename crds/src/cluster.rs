//! `Cluster`: a member cluster registered with the hub.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{is_default, patterns};
use crate::condition::is_condition_true;
use crate::{conditions, names};

/// How the hub reaches a member cluster and whether the member may be given work.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "flotilla.dev",
    version = "v1alpha1",
    kind = "Cluster",
    plural = "clusters",
    status = "ClusterStatus",
    derive = "PartialEq",
    shortname = "fcl",
    category = "flotilla",
    doc = "A member cluster registered with the Flotilla hub: how the hub reaches it (push with a \
           kubeconfig Secret, or pull through an agent in the member), whether it may be given \
           work, and what the hub last observed of it. The hub keeps the member's Works, \
           APIResourceImports and agent Lease in the namespace flotilla-cluster-<name>.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.syncMode"),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".status.kubernetesVersion"
    ),
    printcolumn(
        name = "Accepted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Accepted\")].status",
        priority = 1
    ),
    printcolumn(
        name = "Joined",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Joined\")].status",
        priority = 1
    ),
    printcolumn(
        name = "Unschedulable",
        type_ = "boolean",
        json_path = ".spec.unschedulable",
        priority = 1
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new(
        "self.metadata.name.size() <= 46 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')"
    )
    .message(
        "metadata.name must be a lowercase RFC 1123 label (letters, digits, '-') of at most 46 \
         characters, so that the namespace flotilla-cluster-<name> is valid"
    )
)]
#[x_kube(
    validation = Rule::new("self.syncMode != 'Push' || has(self.kubeconfigSecretRef)")
        .message("spec.kubeconfigSecretRef is required when spec.syncMode is Push")
        .field_path(".kubeconfigSecretRef")
        .reason(Reason::FieldValueRequired),
    validation = Rule::new("self.syncMode != 'Pull' || !has(self.readOnlyKubeconfigSecretRef)")
        .message(
            "spec.readOnlyKubeconfigSecretRef must not be set when spec.syncMode is Pull: the hub \
             never connects to the member"
        )
        .field_path(".readOnlyKubeconfigSecretRef")
        .reason(Reason::FieldValueForbidden),
    validation = Rule::new("self.syncMode != 'Pull' || !has(self.kubeconfigSecretRef)")
        .message(
            "spec.kubeconfigSecretRef must not be set when spec.syncMode is Pull: the agent in the \
             member registers itself and the hub never connects to the member"
        )
        .field_path(".kubeconfigSecretRef")
        .reason(Reason::FieldValueForbidden)
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// How work reaches the member. `Push` (default): the hub connects to the member's apiserver
    /// with the kubeconfig in `kubeconfigSecretRef`, probes it and applies Works into it.
    /// `Pull`: an agent in the member registers itself (CSR), renews a Lease on the hub and pulls
    /// its Works; the hub never connects to the member.
    #[serde(default)]
    pub sync_mode: SyncMode,

    /// The Secret holding the member's kubeconfig. Required in `Push` mode, not allowed in `Pull`
    /// mode. Credentials live only in Secrets, never in a Cluster. The syncer applies Works with
    /// it; only the syncer may read it (registration and the negotiator too where the hub admin
    /// allows it, the chart's `memberCredentials.readWritableKubeconfigs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_secret_ref: Option<KubeconfigSecretRef>,

    /// The Secret holding a second, read-only member kubeconfig (`Push` mode): registration
    /// probes the member with it and the negotiator reads its schemas with it, so that only the
    /// syncer holds a credential that can write to the member. `deploy/member/reader.yaml` is the
    /// identity it needs in the member. Its namespace defaults to the readers' namespace (the
    /// chart's `<release namespace>-readers`), the only one whose Secrets registration and the
    /// negotiator may read. Required unless the hub lets them read members with
    /// `kubeconfigSecretRef` (then `Ready=False, reason=ReadOnlyKubeconfigRequired` names it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_kubeconfig_secret_ref: Option<KubeconfigSecretRef>,

    /// Whether the hub admin accepts this cluster — the second step of pull-mode registration
    /// (the member asks, the hub accepts). While false, the agent's certificate request is not
    /// approved and it gets no access to the hub; setting it back to false revokes that access.
    /// A push-mode Cluster is accepted by being created with a kubeconfig and ignores this field.
    #[serde(default, skip_serializing_if = "is_default")]
    #[schemars(extend("default" = false))]
    pub hub_accepts_client: bool,

    /// Cordon: when true, no new work is placed on the member. Work already there stays (use
    /// `flotilla drain` or a `NoExecute` taint to move it away).
    #[serde(default, skip_serializing_if = "is_default")]
    #[schemars(extend("default" = false))]
    pub unschedulable: bool,

    /// Taints repel work from the member unless a Placement tolerates them. Keys are unique per
    /// effect.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["key", "effect"])
    )]
    pub taints: Vec<Taint>,

    /// Weight of the member when a Placement divides replicas with `division: Weighted` and does
    /// not list the member in its own `weights`. 0 gives it no replicas. Default 1.
    #[serde(default = "default_weight", skip_serializing_if = "is_default_weight")]
    #[schemars(range(min = 0, max = 10000), extend("default" = 1))]
    pub weight: i32,

    /// Accept a member kubeconfig that does not verify the member's TLS certificate
    /// (`insecure-skip-tls-verify`) or talks plain `http://`. Off by default: such a kubeconfig
    /// makes the Cluster `Ready=False` (reason `InvalidKubeconfig`, naming the field). Only for
    /// throwaway test clusters: anyone on the path can read and change everything Flotilla sends
    /// there, the kubeconfig's credentials included.
    #[serde(default, skip_serializing_if = "is_default")]
    #[schemars(extend("default" = false))]
    pub allow_insecure_transport: bool,
}

/// How work reaches a member.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum SyncMode {
    /// The hub connects to the member.
    #[default]
    Push,
    /// An agent in the member connects to the hub.
    Pull,
}

/// A key of a Secret that holds a kubeconfig.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeconfigSecretRef {
    /// Namespace of the Secret. Defaults to the namespace the registration controller runs in
    /// (`flotilla-system` when installed with the chart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = patterns::DNS_LABEL))]
    pub namespace: Option<String>,

    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253), regex(pattern = patterns::DNS_SUBDOMAIN))]
    pub name: String,

    /// Key in the Secret's data that holds the kubeconfig. Default `kubeconfig`.
    #[serde(default = "default_kubeconfig_key")]
    #[schemars(length(min = 1, max = 253), regex(pattern = patterns::SECRET_KEY))]
    pub key: String,
}

/// A taint on a member cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    /// The taint key, a qualified name such as `example.com/maintenance`.
    #[schemars(length(min = 1, max = 316), regex(pattern = patterns::QUALIFIED_NAME))]
    pub key: String,

    /// The taint value, matched by tolerations with operator `Equal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), regex(pattern = patterns::LABEL_VALUE))]
    pub value: Option<String>,

    /// What the taint does to work that does not tolerate it: `NoSchedule` (no new placements),
    /// `PreferNoSchedule` (avoid the member when others are eligible) or `NoExecute` (also move
    /// existing work away, after the toleration's `tolerationSeconds`).
    pub effect: TaintEffect,

    /// When the taint was added; `tolerationSeconds` of `NoExecute` tolerations count from here.
    /// Set by the registration controller when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_added: Option<Time>,
}

/// The effect of a taint: `NoSchedule` (no new placements on the member), `PreferNoSchedule`
/// (avoid the member when other members are eligible) or `NoExecute` (no new placements, and
/// existing work moves away).
// No doc comments on the variants: see `ConditionStatus` (this type is used in an `Option`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

/// What the hub observes of a member.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// `Accepted`, `Joined`, `Ready` and `Schedulable`, each `True`, `False` or `Unknown` with a
    /// reason (e.g. `Ready=False, reason=Unauthorized`; `Ready=Unknown, reason=HeartbeatExpired`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::common::conditions_schema")]
    pub conditions: Vec<Condition>,

    /// The member's Kubernetes version (`gitVersion` of its `/version`), e.g. `v1.37.2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,

    /// Resources available for pods, summed over the member's Nodes (e.g. `cpu`, `memory`,
    /// `pods`). Used to divide replicas with `division: Capacity`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::common::quantity_map_schema")]
    pub allocatable: BTreeMap<String, Quantity>,

    /// When the member last answered a probe (push) or renewed its Lease (pull).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<Time>,

    /// Identity of the member (the UID of its `kube-system` namespace), recorded when it first
    /// joined. A different cluster registering under this name is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,

    /// Per resource type Flotilla places, whether the member's API for it is compatible with the
    /// negotiated (or enforced) one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["group", "version", "resource"]
    ))]
    pub resources: Vec<ResourceCompatibility>,
}

/// The compatibility of a member's API for one resource type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceCompatibility {
    /// API group (empty for the core group).
    #[serde(default)]
    pub group: String,

    /// API version, e.g. `v1`.
    pub version: String,

    /// Resource (plural), e.g. `deployments`.
    pub resource: String,

    /// `Compatible`, `Partial` (some fields are missing: objects that do not use them can still
    /// go to this member), `Incompatible` or `Pending` (not imported or compared yet).
    pub compatibility: Compatibility,

    /// Details, with the field paths that differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Summary of an APIResourceImport's `Compatible` condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Compatibility {
    /// The member accepts everything the hub's schema accepts.
    Compatible,
    /// The member lacks some fields; objects that do not use them can go there.
    Partial,
    /// The member cannot accept what the hub's schema accepts.
    Incompatible,
    /// Not imported or compared yet.
    Pending,
}

fn default_weight() -> i32 {
    1
}

fn is_default_weight(weight: &i32) -> bool {
    *weight == default_weight()
}

fn default_kubeconfig_key() -> String {
    names::DEFAULT_KUBECONFIG_KEY.to_string()
}

impl Default for ClusterSpec {
    fn default() -> Self {
        Self {
            sync_mode: SyncMode::default(),
            kubeconfig_secret_ref: None,
            read_only_kubeconfig_secret_ref: None,
            hub_accepts_client: false,
            unschedulable: false,
            taints: Vec::new(),
            weight: default_weight(),
            allow_insecure_transport: false,
        }
    }
}

/// Where the controllers that only read a member (registration's probes, the negotiator's
/// imports) find the kubeconfig they read it with, and in which namespace when the reference
/// names none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReaderSecrets<'a> {
    /// The namespace of read-only kubeconfig Secrets (`--reader-kubeconfig-secret-namespace`).
    pub read_only_namespace: &'a str,
    /// The namespace of writable ones (`--kubeconfig-secret-namespace`).
    pub writable_namespace: &'a str,
    /// Whether a member without a read-only kubeconfig is read with its writable one
    /// (`--read-writable-kubeconfigs`).
    pub writable_allowed: bool,
}

impl ClusterSpec {
    /// The kubeconfig Secret to read the member with (probes, schema imports) and its namespace:
    /// the read-only one when set, else — only where `secrets` allows it — the one the syncer
    /// applies with. The error says what is missing, naming the field.
    pub fn reader_kubeconfig<'a>(
        &'a self,
        secrets: &ReaderSecrets<'_>,
    ) -> Result<(String, &'a KubeconfigSecretRef), String> {
        let in_namespace = |r: &'a KubeconfigSecretRef, default: &str| {
            (
                r.namespace.clone().unwrap_or_else(|| default.to_string()),
                r,
            )
        };
        match (
            &self.read_only_kubeconfig_secret_ref,
            &self.kubeconfig_secret_ref,
        ) {
            (Some(r), _) => Ok(in_namespace(r, secrets.read_only_namespace)),
            (None, Some(r)) if secrets.writable_allowed => {
                Ok(in_namespace(r, secrets.writable_namespace))
            }
            (None, Some(_)) => Err(format!(
                "spec.readOnlyKubeconfigSecretRef is not set: registration and the negotiator read \
                 a member only with a read-only kubeconfig (the identity of \
                 deploy/member/reader.yaml), kept in namespace {}, so that only the syncer holds \
                 a credential that writes to the member",
                secrets.read_only_namespace
            )),
            (None, None) => Err("spec.kubeconfigSecretRef is not set".into()),
        }
    }
}

impl KubeconfigSecretRef {
    /// A reference to `key` of Secret `name`, in the controller's namespace.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            namespace: None,
            name: name.into(),
            key: default_kubeconfig_key(),
        }
    }
}

impl Cluster {
    /// The hub namespace of this member, `flotilla-cluster-<name>`.
    pub fn hub_namespace(&self) -> Option<String> {
        self.metadata.name.as_deref().map(names::cluster_namespace)
    }

    /// The status conditions (empty when there is no status yet).
    pub fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }

    /// Whether the member is `Ready=True`.
    pub fn is_ready(&self) -> bool {
        is_condition_true(self.conditions(), conditions::READY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_fill_an_almost_empty_spec() {
        let spec: ClusterSpec = serde_json::from_value(json!({
            "kubeconfigSecretRef": { "name": "member1-kubeconfig" }
        }))
        .expect("valid spec");
        assert_eq!(spec.sync_mode, SyncMode::Push);
        assert_eq!(spec.weight, 1);
        assert!(!spec.hub_accepts_client && !spec.unschedulable);
        assert_eq!(
            spec.kubeconfig_secret_ref,
            Some(KubeconfigSecretRef::new("member1-kubeconfig"))
        );
    }

    #[test]
    fn defaults_are_left_out_of_apply_patches() {
        // An agent that applies its own Cluster must not take ownership of the fields the hub
        // admin sets (hubAcceptsClient, unschedulable, weight, taints).
        let spec = ClusterSpec {
            sync_mode: SyncMode::Pull,
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&spec).expect("serializes"),
            json!({ "syncMode": "Pull" })
        );
    }

    #[test]
    fn hub_namespace_and_readiness() {
        let mut cluster = Cluster::new("member1", ClusterSpec::default());
        assert_eq!(
            cluster.hub_namespace().as_deref(),
            Some("flotilla-cluster-member1")
        );
        assert!(!cluster.is_ready());
        cluster.status = Some(ClusterStatus {
            conditions: vec![crate::condition::new_condition(
                conditions::READY,
                crate::ConditionStatus::True,
                crate::reasons::REACHABLE,
                "",
                None,
                Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            )],
            ..Default::default()
        });
        assert!(cluster.is_ready());
    }

    /// The chart's admission policy lets the negotiator write only `status.resources` of a
    /// Cluster: it must name every other field of the status, or a field added later would be
    /// the negotiator's to forge.
    #[test]
    fn the_negotiators_policy_names_every_cluster_status_field_but_resources() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../charts/flotilla/templates/_hub-admission-policies.tpl"
        );
        let text = std::fs::read_to_string(path).expect("reading the admission policies");
        let policy = text
            .split("name: {{ $prefix }}-negotiator-clusters")
            .nth(1)
            .expect("the policy <release>-negotiator-clusters");
        let schema = schemars::schema_for!(ClusterStatus);
        let fields = schema
            .as_object()
            .and_then(|o| o.get("properties"))
            .and_then(|p| p.as_object())
            .expect("the properties of ClusterStatus");
        assert!(fields.contains_key("resources"));
        for field in fields.keys().filter(|f| *f != "resources") {
            let compared = format!("object.?status.?{field} == oldObject.?status.?{field}");
            assert!(
                policy.contains(&compared),
                "the policy must compare status.{field}"
            );
        }
    }
}
