//! The `flotilla.dev/v1alpha1` API: the Rust types of Flotilla's custom resources, the constants
//! every controller shares, and the generation of the CRDs.
//!
//! | kind | scope | what it is |
//! |---|---|---|
//! | [`Cluster`] | cluster | a member cluster: how to reach it, whether it may get work, its health |
//! | [`Placement`] | namespaced | which objects of a namespace go to which clusters, replica division |
//! | [`ClusterPlacement`] | cluster | which cluster-scoped objects (Namespaces, CRDs, ClusterRoles) go where |
//! | [`Work`] | `flotilla-cluster-<name>` | objects to apply to one member, and their observed status |
//! | [`ApiResourceImport`] | `flotilla-cluster-<name>` | one member's schema for one resource type |
//! | [`NegotiatedApiResource`] | cluster | the schema of one resource type every member can honour |
//! | [`WorkloadProfile`] | cluster | how a custom kind divides, sums its status and is healthy |
//!
//! The CRD YAML in `crds/yaml/` is generated from these types by
//! `cargo run -p flotilla-api --bin crdgen`; a test fails when it is stale.

pub mod api_resource;
pub mod api_resource_import;
pub mod cluster;
pub mod cluster_placement;
mod common;
pub mod condition;
mod constants;
pub mod crdgen;
pub mod names;
pub mod negotiated_api_resource;
pub mod placement;
pub mod quantity;
pub mod work;
pub mod work_data;
pub mod workload_profile;

pub use api_resource::{ApiResourceNames, ApiResourceSpec, GroupVersion, ResourceScope};
pub use api_resource_import::{
    ApiResourceImport, ApiResourceImportSpec, ApiResourceImportStatus, DifferenceVerdict,
    SchemaDifference, SchemaUpdateStrategy,
};
pub use cluster::{
    Cluster, ClusterSpec, ClusterStatus, Compatibility, KubeconfigSecretRef, ResourceCompatibility,
    SyncMode, Taint, TaintEffect,
};
pub use cluster_placement::{ClusterPlacement, ClusterPlacementSpec};
pub use common::{ConflictPolicy, DeletePolicy, IgnoreFields, ManifestSelector};
pub use condition::ConditionStatus;
pub use constants::{annotations, conditions, field_managers, finalizers, labels, reasons};
pub use negotiated_api_resource::{
    ImportSummary, NegotiatedApiResource, NegotiatedApiResourceSpec, NegotiatedApiResourceStatus,
};
pub use placement::{
    ClusterAffinity, ClusterDecision, ClusterExclusion, ClusterWeight, Failover, NotPlaced,
    ObjectDecision, Placement, PlacementSpec, PlacementStatus, ReplicaDivision, ReplicaScheduling,
    ReplicaSchedulingType, ReplicaStrategy, ResourceSelector, Toleration, TolerationOperator,
};
pub use work::{ManifestIdentity, ManifestStatus, Work, WorkSpec, WorkStatus};
pub use workload_profile::{WorkloadProfile, WorkloadProfileSpec, WorkloadProfileStatus};

/// The API group of every Flotilla kind.
pub const GROUP: &str = "flotilla.dev";

/// The API version of every Flotilla kind.
pub const VERSION: &str = "v1alpha1";

/// `flotilla.dev/v1alpha1`.
pub const API_VERSION: &str = "flotilla.dev/v1alpha1";

/// The `kubectl` category of every Flotilla kind: `kubectl get flotilla` lists them all.
pub const CATEGORY: &str = "flotilla";
