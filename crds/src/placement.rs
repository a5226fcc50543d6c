//! `Placement`: which objects of a namespace go to which member clusters, and how replicas are
//! spread.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cluster::{Taint, TaintEffect};
use crate::common::{ConflictPolicy, DeletePolicy, IgnoreFields, patterns};
use crate::condition::ConditionStatus;

/// The built-in types the negotiator imports from every member whether or not a Placement names
/// them, as (group, version, kind, plural). (What an empty `resourceSelectors` places is the
/// interpreter's table of kinds, `flotilla_interpreter::table`.)
pub const DEFAULT_IMPORTS: [(&str, &str, &str, &str); 5] = [
    ("apps", "v1", "Deployment", "deployments"),
    ("", "v1", "ConfigMap", "configmaps"),
    ("", "v1", "Secret", "secrets"),
    ("", "v1", "Service", "services"),
    ("", "v1", "ServiceAccount", "serviceaccounts"),
];

/// Which objects of the namespace go to which member clusters, and how.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "flotilla.dev",
    version = "v1alpha1",
    kind = "Placement",
    plural = "placements",
    namespaced,
    status = "PlacementStatus",
    derive = "PartialEq",
    shortname = "fpl",
    category = "flotilla",
    doc = "Places objects of its namespace on member clusters: which objects (resource selectors), \
           which clusters (affinity, tolerations), how divisible workloads share their work \
           (duplicated or divided: Deployments and ReplicaSets by replicas, StatefulSets by \
           ordinals, Jobs by completions, PodDisruptionBudgets and HorizontalPodAutoscalers \
           with them, custom kinds by their WorkloadProfile), and what happens on failure and \
           deletion. When two \
           Placements select one object, the more specific one wins (a selector by name over one \
           by labels over one by kind over an empty one); a tie is reported, never resolved \
           silently.",
    printcolumn(
        name = "Scheduling",
        type_ = "string",
        json_path = ".spec.replicaScheduling.type",
        description = "Duplicated or Divided"
    ),
    printcolumn(
        name = "Objects",
        type_ = "integer",
        json_path = ".status.selectedObjects",
        description = "Objects the Placement selects"
    ),
    printcolumn(
        name = "Scheduled",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Scheduled\")].status",
        description = "Every selected object has a placement decision"
    ),
    printcolumn(
        name = "Available",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Available\")].status",
        description = "Every placed copy is available"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("self.metadata.name.size() <= 63").message(
        "metadata.name must be at most 63 characters: it is used as the value of the \
         flotilla.dev/placement label"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PlacementSpec {
    /// Which objects of this namespace to place. An object is selected when any selector matches
    /// it. Empty: every object of every namespaced kind in Flotilla's table of kinds (workloads,
    /// Services, Ingresses, ConfigMaps, Secrets, ServiceAccounts, claims, budgets, autoscalers,
    /// NetworkPolicies, Roles, RoleBindings, LimitRanges, ResourceQuotas; docs/placement.md
    /// "Kinds"); a kind outside the table is placed only when a selector names it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub resource_selectors: Vec<ResourceSelector>,

    /// Which clusters may run the selected objects. Every cluster when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_affinity: Option<ClusterAffinity>,

    /// Cluster taints this Placement tolerates. Work goes only to clusters whose `NoSchedule` and
    /// `NoExecute` taints are all tolerated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub tolerations: Vec<Toleration>,

    /// How divisible workloads share their work over the chosen clusters: Deployments and
    /// ReplicaSets by replicas, StatefulSets by disjoint ordinal ranges, NonIndexed Jobs by
    /// completions (CronJobs and Indexed Jobs run on one cluster), a PodDisruptionBudget's
    /// numeric `minAvailable` and a HorizontalPodAutoscaler's `maxReplicas` like replicas, and
    /// custom kinds as their accepted WorkloadProfile says (docs/placement.md "Kinds"). Default:
    /// `type: Divided, division: Even`, so the count on the hub is the total that runs. Other
    /// objects are copied to every chosen cluster.
    #[serde(default)]
    pub replica_scheduling: ReplicaScheduling,

    /// When a cluster becomes eligible (joins, recovers, is uncordoned), move work to it: divided
    /// replicas are re-divided and, with `maxClusters`, the choice of clusters is made again.
    /// Default false: placements stay stable and a new cluster only takes new work (e.g. replicas
    /// added by a scale-up).
    #[serde(default)]
    pub rebalance_on_join: bool,

    /// What happens when a chosen cluster stops being Ready.
    #[serde(default)]
    pub failover: Failover,

    /// Whether ConfigMaps, Secrets, ServiceAccounts and PersistentVolumeClaims that a placed
    /// workload references follow it to the same clusters. Default true.
    #[serde(default = "default_true")]
    pub follow_references: bool,

    /// What happens to the member copies when an object is deleted from the hub or no longer
    /// selected: `Delete` (default) or `Orphan` (leave them, unmanaged).
    #[serde(default)]
    pub delete_policy: DeletePolicy,

    /// What happens when a copy would replace an object that exists in a member but was not
    /// created by Flotilla: `Abort` (default: leave it and report a conflict) or `Adopt`.
    /// Adopting is an admin's decision: `Adopt` takes effect only in a namespace whose hub
    /// Namespace has the annotation `flotilla.dev/allow-adopt: "true"`; elsewhere it counts as
    /// `Abort` and the `Scheduled` condition says so (reason `AdoptNotAllowed`).
    #[serde(default)]
    pub conflict_policy: ConflictPolicy,

    /// Fields set when the copy is created and then left to the member, e.g. `.spec.replicas` of
    /// a Deployment scaled by a HorizontalPodAutoscaler in the member.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub ignore_fields: Vec<IgnoreFields>,
}

/// Selects objects of the Placement's namespace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new("!(has(self.name) && has(self.labelSelector))").message(
    "name and labelSelector are mutually exclusive: select one object by name, or objects by labels"
))]
#[serde(rename_all = "camelCase")]
pub struct ResourceSelector {
    /// API version of the objects, e.g. `apps/v1` or `v1`.
    #[schemars(length(min = 1, max = 317), regex(pattern = patterns::API_VERSION))]
    pub api_version: String,

    /// Kind of the objects, e.g. `Deployment`.
    #[schemars(length(min = 1, max = 63), regex(pattern = patterns::KIND))]
    pub kind: String,

    /// Name of one object. Every object of the kind when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub name: Option<String>,

    /// Objects of the kind whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

/// Which clusters may run the objects. A cluster must match every criterion that is set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAffinity {
    /// Clusters whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,

    /// Clusters with these names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 1000),
        inner(length(min = 1, max = 46), regex(pattern = patterns::DNS_LABEL)),
        extend("x-kubernetes-list-type" = "set")
    )]
    pub cluster_names: Vec<String>,

    /// At most this many clusters are chosen (1 to 10000). All eligible clusters when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub max_clusters: Option<i32>,
}

/// Tolerates cluster taints, with the semantics of Pod tolerations.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[x_kube(
    validation = Rule::new("self.operator != 'Exists' || !has(self.value) || self.value == ''")
        .message("value must be empty when operator is Exists")
        .field_path(".value"),
    validation = Rule::new("self.operator == 'Exists' || (has(self.key) && self.key != '')")
        .message("key is required unless operator is Exists (an empty key with Exists tolerates every taint)")
        .field_path(".key")
        .reason(Reason::FieldValueRequired),
    validation = Rule::new("!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')")
        .message("tolerationSeconds may only be set when effect is NoExecute")
        .field_path(".tolerationSeconds")
        .reason(Reason::FieldValueForbidden)
)]
#[serde(rename_all = "camelCase")]
pub struct Toleration {
    /// The taint key to tolerate. Empty with operator `Exists`: every taint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 316), regex(pattern = patterns::OPTIONAL_QUALIFIED_NAME))]
    pub key: Option<String>,

    /// `Equal` (default: the taint's value must equal `value`) or `Exists` (any value).
    #[serde(default)]
    pub operator: TolerationOperator,

    /// The value to match with operator `Equal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), regex(pattern = patterns::LABEL_VALUE))]
    pub value: Option<String>,

    /// The taint effect to tolerate: `NoSchedule`, `PreferNoSchedule` or `NoExecute`. Every
    /// effect when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,

    /// For `NoExecute`: how long work stays on a cluster after the taint was added. Forever when
    /// unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub toleration_seconds: Option<i64>,
}

/// How a toleration matches a taint's value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum TolerationOperator {
    /// The values must be equal.
    #[default]
    Equal,
    /// Any value.
    Exists,
}

/// How divisible workloads (Deployments, ReplicaSets, StatefulSets, Jobs, budgets, autoscalers,
/// profiled custom kinds) share their work over the chosen clusters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[x_kube(
    validation = Rule::new("self.type != 'Divided' || has(self.division)")
        .message("spec.replicaScheduling.division is required when type is Divided: Even, Weighted or Capacity")
        .field_path(".division")
        .reason(Reason::FieldValueRequired),
    validation = Rule::new("self.type == 'Divided' || !has(self.division)")
        .message("spec.replicaScheduling.division may only be set when type is Divided")
        .field_path(".division")
        .reason(Reason::FieldValueForbidden),
    validation = Rule::new("!has(self.division) || self.division != 'Weighted' || (has(self.weights) && size(self.weights) > 0)")
        .message("spec.replicaScheduling.weights is required when division is Weighted")
        .field_path(".weights")
        .reason(Reason::FieldValueRequired),
    validation = Rule::new("!has(self.weights) || (has(self.division) && self.division == 'Weighted')")
        .message("spec.replicaScheduling.weights may only be set when division is Weighted")
        .field_path(".weights")
        .reason(Reason::FieldValueForbidden)
)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaScheduling {
    /// `Duplicated`: every chosen cluster runs the full replica count. `Divided`: the replica
    /// count is divided among the chosen clusters as `division` says.
    #[serde(rename = "type")]
    pub type_: ReplicaSchedulingType,

    /// How `Divided` divides: `Even` (equal shares; the remainder goes one replica each to
    /// different clusters, never all to one), `Weighted` (proportional to `weights`) or
    /// `Capacity` (proportional to each cluster's allocatable pods as it reports them, no
    /// cluster counting for more than the other chosen clusters together). Required when `type`
    /// is `Divided`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub division: Option<ReplicaDivision>,

    /// Per-cluster weights for `division: Weighted`. A chosen cluster that is not listed gets the
    /// `spec.weight` of its Cluster (default 1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 1000),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["cluster"])
    )]
    pub weights: Vec<ClusterWeight>,
}

/// `Duplicated` or `Divided`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ReplicaSchedulingType {
    /// Every chosen cluster runs the full replica count.
    Duplicated,
    /// The replica count is divided among the chosen clusters.
    Divided,
}

/// How `Divided` divides replicas: `Even` (equal shares), `Weighted` (in proportion to per-cluster
/// weights) or `Capacity` (in proportion to each cluster's allocatable resources).
// No doc comments on the variants: see `ConditionStatus` (this type is used in an `Option`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ReplicaDivision {
    Even,
    Weighted,
    Capacity,
}

/// The weight of one cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterWeight {
    /// Name of the Cluster.
    #[schemars(length(min = 1, max = 46), regex(pattern = patterns::DNS_LABEL))]
    pub cluster: String,

    /// Its weight; 0 gives it no replicas.
    #[schemars(range(min = 0, max = 10000))]
    pub weight: i32,
}

/// The replica strategy of a [`ReplicaScheduling`], as one value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaStrategy<'a> {
    /// Every chosen cluster runs the full replica count.
    Duplicated,
    /// Equal shares.
    Even,
    /// Proportional to these weights (clusters not listed use their Cluster's weight).
    Weighted(&'a [ClusterWeight]),
    /// Proportional to allocatable resources.
    Capacity,
}

/// What happens when a chosen cluster stops being Ready.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Failover {
    /// Whether work moves away from a cluster that is not Ready. Default true.
    #[serde(default = "default_true")]
    pub enabled: bool,

    /// How long a chosen cluster may be not Ready (after the registration controller's grace
    /// period has turned it Unknown) before its work moves. Default 20. The old copies go only
    /// once the replacements are available, or the Cluster is deleted.
    #[serde(default = "default_failover_toleration_seconds")]
    #[schemars(range(min = 0))]
    pub toleration_seconds: i64,
}

/// What the splitter decided and observed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementStatus {
    /// `Scheduled` (every selected object has a decision; reasons such as `NoEligibleCluster`,
    /// `UnsupportedType`, `PlacementConflict`, `Forbidden`, `TypeUnreadable`,
    /// `WorkWriteFailed`), `Applied` and `Available` (every copy applied, available; the message
    /// counts them and names the first that are not).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::common::conditions_schema")]
    pub conditions: Vec<Condition>,

    /// How many objects the Placement selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected_objects: Option<i32>,

    /// Counts over every copy (one Work per object and member) the Placement places.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copies: Option<CopyCounts>,

    /// Per member: how many copies it has, how many of them are applied and available, and the
    /// replicas of divided workloads it runs.
    // Atomic, as every list of the status but its conditions: the splitter is the only writer of
    // a Placement's status and writes it whole, so ownership per entry is of no use, and would
    // have the hub keep (and merge on every status write) managed fields per entry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub clusters: Vec<ClusterSummary>,

    /// Decisions of selected objects, at most 100 members' worth in all (an object on three
    /// members counts three): objects with something to report (excluded members, copies not
    /// yet applied or available, placed by another Placement) first, then the others by name.
    /// The status stays small for any number of objects; see `omittedDecisions`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub decisions: Vec<ObjectDecision>,

    /// How many selected objects have a decision not listed in `decisions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omitted_decisions: Option<i32>,

    /// Objects of the namespace, of the kinds in Flotilla's table of kinds, that no Placement
    /// places, and why (no Placement selects it, the hub made it, a policy holds it back, the
    /// splitter may not read its type): at most 20, by kind and name; `notPlacedCount` counts
    /// them all. The condition `AllPlaced` says whether there are any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub not_placed: Vec<NotPlaced>,

    /// How many objects of the namespace no Placement places (`notPlaced` lists the first 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_placed_count: Option<i32>,
}

/// An object of a Placement's namespace that no Placement places, and why.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct NotPlaced {
    /// API version of the object.
    pub api_version: String,
    /// Kind of the object.
    pub kind: String,
    /// The object's name; empty when a whole type cannot be read.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `NotSelected`, `MadeByTheHub`, `Forbidden`, `TypeUnreadable`, `PodSecurityViolation`,
    /// `BindingHeldBack`, ...
    pub reason: String,
    /// Why, in words.
    pub message: String,
}

/// Counts over a Placement's copies.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CopyCounts {
    /// Copies placed (one per object and member).
    pub placed: i32,

    /// Copies whose member applied the current spec.
    pub applied: i32,

    /// Copies available in their member for the current spec.
    pub available: i32,

    /// Copies being removed from members (their Works are being deleted).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub removing: i32,

    /// Copies no longer wanted but kept for now: on a failed member until their replacements
    /// are available, of a type that cannot be read now, or of an object no member can take.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub kept: i32,
}

/// One member's share of a Placement.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSummary {
    /// Name of the Cluster.
    pub cluster: String,

    /// Copies placed on it.
    pub placed: i32,

    /// Of those, applied for the current spec.
    pub applied: i32,

    /// Of those, available for the current spec.
    pub available: i32,

    /// Replicas of divided workloads it runs, summed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// Where one object goes, and why not elsewhere.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectDecision {
    /// API version of the object.
    pub api_version: String,

    /// Kind of the object.
    pub kind: String,

    /// Name of the object.
    pub name: String,

    /// The clusters the object goes to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub clusters: Vec<ClusterDecision>,

    /// Selected clusters the object does not go to, each with the reason (e.g. not Ready,
    /// cordoned, an untolerated taint, or fields the member's API lacks, with their paths).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub excluded: Vec<ClusterExclusion>,

    /// Set when a more specific Placement selects the object: its name. This Placement then
    /// does not place the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overridden_by: Option<String>,
}

/// One cluster an object goes to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDecision {
    /// Name of the Cluster.
    pub cluster: String,

    /// The replicas it runs, for divisible workloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// Whether the copy is applied in the member (`Applied` of its Work).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<ConditionStatus>,

    /// Whether the copy is available in the member (`Available` of its Work).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available: Option<ConditionStatus>,

    /// What to know of this copy, e.g. that a Service's member runs none of the pods it selects
    /// (no endpoints there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A selected cluster that an object does not go to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterExclusion {
    /// Name of the Cluster.
    pub cluster: String,

    /// Why, as a CamelCase reason (e.g. `NotReady`, `Cordoned`, `Tainted`, `Incompatible`).
    pub reason: String,

    /// Details, e.g. the field paths the member's API lacks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

fn default_true() -> bool {
    true
}

fn default_failover_toleration_seconds() -> i64 {
    20
}

impl Default for ReplicaScheduling {
    /// `Divided`, `Even`.
    fn default() -> Self {
        Self {
            type_: ReplicaSchedulingType::Divided,
            division: Some(ReplicaDivision::Even),
            weights: Vec::new(),
        }
    }
}

impl ReplicaScheduling {
    /// Every chosen cluster runs the full replica count.
    pub fn duplicated() -> Self {
        Self {
            type_: ReplicaSchedulingType::Duplicated,
            division: None,
            weights: Vec::new(),
        }
    }

    /// Divided in proportion to `weights`.
    pub fn weighted(weights: Vec<ClusterWeight>) -> Self {
        Self {
            type_: ReplicaSchedulingType::Divided,
            division: Some(ReplicaDivision::Weighted),
            weights,
        }
    }

    /// The strategy as one value, or `None` for a combination the CRD rejects (e.g. `Divided`
    /// without a division), which a controller treats as invalid input.
    pub fn strategy(&self) -> Option<ReplicaStrategy<'_>> {
        match (self.type_, self.division) {
            (ReplicaSchedulingType::Duplicated, None) => Some(ReplicaStrategy::Duplicated),
            (ReplicaSchedulingType::Divided, Some(ReplicaDivision::Even)) => {
                Some(ReplicaStrategy::Even)
            }
            (ReplicaSchedulingType::Divided, Some(ReplicaDivision::Capacity)) => {
                Some(ReplicaStrategy::Capacity)
            }
            (ReplicaSchedulingType::Divided, Some(ReplicaDivision::Weighted))
                if !self.weights.is_empty() =>
            {
                Some(ReplicaStrategy::Weighted(&self.weights))
            }
            _ => None,
        }
    }
}

impl Default for PlacementSpec {
    fn default() -> Self {
        Self {
            resource_selectors: Vec::new(),
            cluster_affinity: None,
            tolerations: Vec::new(),
            replica_scheduling: ReplicaScheduling::default(),
            rebalance_on_join: false,
            failover: Failover::default(),
            follow_references: true,
            delete_policy: DeletePolicy::default(),
            conflict_policy: ConflictPolicy::default(),
            ignore_fields: Vec::new(),
        }
    }
}

impl Default for Failover {
    fn default() -> Self {
        Self {
            enabled: true,
            toleration_seconds: default_failover_toleration_seconds(),
        }
    }
}

impl Toleration {
    /// Whether this toleration tolerates `taint` (the rules of Pod tolerations).
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        let key = self.key.as_deref().unwrap_or_default();
        if key.is_empty() {
            return self.operator == TolerationOperator::Exists;
        }
        if key != taint.key {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => {
                self.value.as_deref().unwrap_or_default()
                    == taint.value.as_deref().unwrap_or_default()
            }
        }
    }
}

/// Whether every taint with an effect that repels placement (`NoSchedule`, `NoExecute`) is
/// tolerated by one of `tolerations`. `PreferNoSchedule` taints never exclude a cluster.
pub fn tolerates_all(tolerations: &[Toleration], taints: &[Taint]) -> bool {
    taints
        .iter()
        .filter(|t| t.effect != TaintEffect::PreferNoSchedule)
        .all(|t| tolerations.iter().any(|tol| tol.tolerates(t)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn taint(key: &str, value: Option<&str>, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect,
            time_added: None,
        }
    }

    #[test]
    fn an_empty_spec_divides_evenly_and_follows_references() {
        let spec: PlacementSpec = serde_json::from_value(json!({})).expect("valid spec");
        assert_eq!(spec, PlacementSpec::default());
        assert_eq!(
            spec.replica_scheduling.strategy(),
            Some(ReplicaStrategy::Even)
        );
        assert!(spec.follow_references);
        assert!(spec.failover.enabled);
        assert_eq!(spec.failover.toleration_seconds, 20);
        assert_eq!(spec.delete_policy, DeletePolicy::Delete);
    }

    #[test]
    fn strategies() {
        assert_eq!(
            ReplicaScheduling::duplicated().strategy(),
            Some(ReplicaStrategy::Duplicated)
        );
        let weights = vec![ClusterWeight {
            cluster: "member1".into(),
            weight: 2,
        }];
        let weighted = ReplicaScheduling::weighted(weights.clone());
        assert_eq!(
            weighted.strategy(),
            Some(ReplicaStrategy::Weighted(&weights))
        );
        let capacity: ReplicaScheduling =
            serde_json::from_value(json!({"type": "Divided", "division": "Capacity"}))
                .expect("valid");
        assert_eq!(capacity.strategy(), Some(ReplicaStrategy::Capacity));
        // Combinations the CRD rejects have no strategy.
        for invalid in [
            json!({"type": "Divided"}),
            json!({"type": "Duplicated", "division": "Even"}),
            json!({"type": "Divided", "division": "Weighted"}),
        ] {
            let s: ReplicaScheduling = serde_json::from_value(invalid.clone()).expect("parses");
            assert_eq!(s.strategy(), None, "{invalid}");
        }
    }

    #[test]
    fn toleration_matching_follows_pod_semantics() {
        let maintenance = taint(
            "example.com/maintenance",
            Some("true"),
            TaintEffect::NoSchedule,
        );
        let equal = Toleration {
            key: Some("example.com/maintenance".into()),
            value: Some("true".into()),
            ..Default::default()
        };
        assert!(equal.tolerates(&maintenance));
        let other_value = Toleration {
            value: Some("false".into()),
            ..equal.clone()
        };
        assert!(!other_value.tolerates(&maintenance));
        let exists = Toleration {
            key: Some("example.com/maintenance".into()),
            operator: TolerationOperator::Exists,
            ..Default::default()
        };
        assert!(exists.tolerates(&maintenance));
        let other_effect = Toleration {
            effect: Some(TaintEffect::NoExecute),
            ..exists.clone()
        };
        assert!(!other_effect.tolerates(&maintenance));
        let everything = Toleration {
            operator: TolerationOperator::Exists,
            ..Default::default()
        };
        assert!(everything.tolerates(&maintenance));
        // An empty key with Equal tolerates nothing.
        assert!(!Toleration::default().tolerates(&maintenance));
    }

    #[test]
    fn prefer_no_schedule_never_excludes() {
        let taints = [taint("soft", None, TaintEffect::PreferNoSchedule)];
        assert!(tolerates_all(&[], &taints));
        let taints = [
            taint("soft", None, TaintEffect::PreferNoSchedule),
            taint("hard", None, TaintEffect::NoExecute),
        ];
        assert!(!tolerates_all(&[], &taints));
        let tol = Toleration {
            key: Some("hard".into()),
            operator: TolerationOperator::Exists,
            ..Default::default()
        };
        assert!(tolerates_all(&[tol], &taints));
    }
}
