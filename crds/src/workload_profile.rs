//! `WorkloadProfile`: what Flotilla should know about a custom workload kind that it has no
//! built-in rules for — where its replica count is, which status fields the hub object shows
//! summed over the members, and when a member's copy is healthy.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::common::patterns;

/// How Flotilla treats the objects of one custom kind: the rules the built-in kinds have in code
/// (see the kinds table of `docs/placement.md`), given as data.
// Clippy reads the repeated `type_ = "string"` of the printer columns as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "flotilla.dev",
    version = "v1alpha1",
    kind = "WorkloadProfile",
    plural = "workloadprofiles",
    status = "WorkloadProfileStatus",
    derive = "PartialEq",
    shortname = "fwp",
    category = "flotilla",
    doc = "How Flotilla places the objects of one custom kind: the path of its replica count \
           (divided among the members under a Divided Placement), the status fields the hub \
           object shows summed over its copies, and a CEL rule that says when a member's copy is \
           healthy. The negotiator checks every path against the kind's negotiated schema and \
           says so in the Accepted condition; the splitter and the syncer use only an accepted \
           profile. One profile per kind: the oldest wins.",
    printcolumn(name = "Group", type_ = "string", json_path = ".spec.group"),
    printcolumn(name = "Kind", type_ = "string", json_path = ".spec.kind"),
    printcolumn(name = "Replicas", type_ = "string", json_path = ".spec.replicas"),
    printcolumn(
        name = "Accepted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Accepted\")].status",
        description = "The paths exist in the kind's negotiated schema and the rule compiles"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadProfileSpec {
    /// API group of the kind, e.g. `argoproj.io`.
    #[schemars(length(min = 1, max = 253), regex(pattern = patterns::API_GROUP))]
    pub group: String,

    /// The kind, e.g. `Rollout`.
    #[schemars(length(min = 1, max = 63), regex(pattern = patterns::KIND))]
    pub kind: String,

    /// Where the object's replica count is, e.g. `.spec.replicas` (an integer field of the
    /// schema). Under a `Divided` Placement it is divided among the members as a Deployment's
    /// replicas are. Unset: every member runs the whole object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256), regex(pattern = patterns::FIELD_PATH))]
    pub replicas: Option<String>,

    /// Integer status fields, e.g. `.status.readyReplicas`, that the hub object's status shows
    /// summed over its copies. The kind must have a status subresource, and the splitter may
    /// have to be granted `patch` on it (the chart's `splitter.extraRules`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 16),
        inner(length(max = 256), regex(pattern = patterns::FIELD_PATH)),
        extend("x-kubernetes-list-type" = "set")
    )]
    pub status_sums: Vec<String>,

    /// When a member's copy is healthy (its `Available` in the Work): a CEL expression over
    /// `self`, the member's object with its status, e.g.
    /// `has(self.status.availableReplicas) && self.status.availableReplicas >= self.spec.replicas`.
    /// An error (a field the object does not have yet) counts as not healthy. Unset: the generic
    /// rules (an `Available` or `Ready` condition, or else existing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub health: Option<String>,

    /// Whether the hub object's status gets a `Ready` condition: `True` once every member's copy
    /// is healthy (by `health`), `False` naming the members whose copies are not (a member that
    /// refused its copy among them). kstatus — what Flux and other GitOps tools judge readiness
    /// by — and `kubectl wait --for=condition=Ready` then work against the hub. The kind must have
    /// a status subresource whose `conditions` list takes items with `type` and `status` (and
    /// requires nothing besides `reason`, `message`, `lastTransitionTime` and `lastUpdateTime`,
    /// which the splitter fills too). Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ready_condition: bool,
}

/// The negotiator's verdict on a profile.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadProfileStatus {
    /// `Accepted`: True when every path is in the kind's negotiated schema with the right type
    /// and the health rule compiles; False with the reason (`NoNegotiatedSchema`,
    /// `PathNotInSchema`, `NotAnInteger`, `NoStatusSubresource`, `InvalidHealthRule`,
    /// `NoConditionsList`, `Duplicate`) and a message naming the field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::common::conditions_schema")]
    pub conditions: Vec<Condition>,

    /// The generation the conditions are about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The NegotiatedAPIResource the profile was checked against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub negotiated: Option<String>,

    /// With `readyCondition`: the fields of the `Ready` condition that the kind's schema declares
    /// in every negotiated version (`type`, `status`, and of `reason`, `message`,
    /// `lastTransitionTime` and `lastUpdateTime` those it has). The splitter writes only these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 6), inner(length(max = 32)))]
    pub ready_condition_fields: Vec<String>,
}

impl WorkloadProfile {
    /// Whether the negotiator accepted the profile as it is now (its current generation).
    pub fn accepted(&self) -> bool {
        self.status.as_ref().is_some_and(|s| {
            s.observed_generation == self.metadata.generation
                && s.conditions
                    .iter()
                    .any(|c| c.type_ == crate::conditions::ACCEPTED && c.status == "True")
        })
    }
}
