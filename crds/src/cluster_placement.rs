//! `ClusterPlacement`: which cluster-scoped objects of the hub (Namespaces, CRDs, ClusterRoles,
//! ClusterRoleBindings, …) go to which member clusters.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{ConflictPolicy, DeletePolicy, IgnoreFields};
use crate::placement::{
    ClusterAffinity, Failover, PlacementSpec, PlacementStatus, ReplicaScheduling,
    ReplicaSchedulingType, ResourceSelector, Toleration,
};

/// Which cluster-scoped objects go to which member clusters. A cluster-scoped object is copied
/// whole to every chosen cluster.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "flotilla.dev",
    version = "v1alpha1",
    kind = "ClusterPlacement",
    plural = "clusterplacements",
    status = "PlacementStatus",
    derive = "PartialEq",
    shortname = "fcpl",
    category = "flotilla",
    doc = "Places cluster-scoped objects of the hub (Namespaces with their labels, \
           CustomResourceDefinitions, ClusterRoles, ClusterRoleBindings, …) on member clusters, \
           with the cluster selection, status and safety rules of a Placement. Objects the hub \
           itself made (kube-* and default namespaces, system: roles, Flotilla's own kinds) are \
           never placed. Namespaces and CustomResourceDefinitions are never deleted from a \
           member: deleting one would delete everything in it, including what the member's own \
           users made.",
    printcolumn(
        name = "Objects",
        type_ = "integer",
        json_path = ".status.selectedObjects",
        description = "Objects the ClusterPlacement selects"
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
pub struct ClusterPlacementSpec {
    /// Which cluster-scoped objects to place: an object is selected when any selector matches
    /// it. Empty: every object of every cluster-scoped kind in Flotilla's table of kinds
    /// (Namespaces, CustomResourceDefinitions, ClusterRoles, ClusterRoleBindings, IngressClasses,
    /// PriorityClasses, StorageClasses; docs/placement.md "Kinds"), but for those every cluster
    /// has of its own, which are never placed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub resource_selectors: Vec<ResourceSelector>,

    /// Which clusters get the selected objects. Every cluster when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_affinity: Option<ClusterAffinity>,

    /// Cluster taints this ClusterPlacement tolerates, as in a Placement.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub tolerations: Vec<Toleration>,

    /// With `maxClusters`: when a cluster becomes eligible, choose the clusters again. Default
    /// false.
    #[serde(default)]
    pub rebalance_on_join: bool,

    /// What happens when a chosen cluster stops being Ready.
    #[serde(default)]
    pub failover: Failover,

    /// What happens to the member copies when an object is deleted from the hub or no longer
    /// selected: `Delete` (default) or `Orphan`. Namespaces and CustomResourceDefinitions are
    /// always orphaned (left in the member, unmanaged).
    #[serde(default)]
    pub delete_policy: DeletePolicy,

    /// What happens when a copy would replace an object that exists in a member but was not
    /// created by Flotilla: `Abort` (default: leave it and report a conflict) or `Adopt`. A
    /// namespace Flotilla created for a Placement's objects is Flotilla's: it is taken over
    /// without a conflict.
    #[serde(default)]
    pub conflict_policy: ConflictPolicy,

    /// Fields set when the copy is created and then left to the member.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub ignore_fields: Vec<IgnoreFields>,
}

impl ClusterPlacement {
    /// This ClusterPlacement as the splitter handles every placement: a [`Placement`] without a
    /// namespace (`metadata.namespace` unset), whose objects are copied whole to every chosen
    /// cluster and refer to nothing that follows them.
    ///
    /// [`Placement`]: crate::Placement
    pub fn as_placement(&self) -> crate::Placement {
        let spec = &self.spec;
        let mut placement = crate::Placement::new(
            &self.metadata.name.clone().unwrap_or_default(),
            PlacementSpec {
                resource_selectors: spec.resource_selectors.clone(),
                cluster_affinity: spec.cluster_affinity.clone(),
                tolerations: spec.tolerations.clone(),
                replica_scheduling: ReplicaScheduling {
                    type_: ReplicaSchedulingType::Duplicated,
                    division: None,
                    weights: Vec::new(),
                },
                rebalance_on_join: spec.rebalance_on_join,
                failover: spec.failover.clone(),
                follow_references: false,
                delete_policy: spec.delete_policy,
                conflict_policy: spec.conflict_policy,
                ignore_fields: spec.ignore_fields.clone(),
            },
        );
        placement.metadata = self.metadata.clone();
        placement.metadata.namespace = None;
        placement.status = self.status.clone();
        placement
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;

    #[test]
    fn a_cluster_placement_is_a_placement_without_a_namespace_that_copies_objects_whole() {
        let mut cp = ClusterPlacement::new(
            "namespaces",
            ClusterPlacementSpec {
                resource_selectors: vec![ResourceSelector {
                    api_version: "v1".into(),
                    kind: "Namespace".into(),
                    name: None,
                    label_selector: None,
                }],
                cluster_affinity: None,
                tolerations: Vec::new(),
                rebalance_on_join: false,
                failover: Failover::default(),
                delete_policy: DeletePolicy::Orphan,
                conflict_policy: ConflictPolicy::Abort,
                ignore_fields: Vec::new(),
            },
        );
        cp.metadata.uid = Some("u1".into());
        cp.metadata.generation = Some(3);
        let p = cp.as_placement();
        assert_eq!(p.name_any(), "namespaces");
        assert_eq!(p.namespace(), None);
        assert_eq!(p.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(p.metadata.generation, Some(3));
        assert_eq!(
            p.spec.replica_scheduling.type_,
            ReplicaSchedulingType::Duplicated
        );
        assert!(!p.spec.follow_references);
        assert_eq!(p.spec.delete_policy, DeletePolicy::Orphan);
        assert_eq!(p.spec.resource_selectors, cp.spec.resource_selectors);
    }
}
