//! Everything one pass of a Placement reads, gathered by [`crate::observe`] before any
//! decision, for [`crate::plan`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use flotilla_api::{ApiResourceImport, Cluster, Placement, Work, annotations};
use flotilla_interpreter::Kinds;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};

use crate::keys::{CopyKey, ObjectKey, WorkId};
use crate::pod_security::Verdict;
use crate::references::Reference;

/// Everything one pass of a Placement reads, gathered before any decision.
#[derive(Clone, Debug)]
pub struct Observation {
    pub placement: Arc<Placement>,
    pub now: Timestamp,
    /// The Clusters this splitter places on (its `--cluster-selector`).
    pub clusters: Vec<Arc<Cluster>>,
    /// Clusters that exist but are outside this splitter's `--cluster-selector`: their Works
    /// are not this splitter's to judge, and are left as they are.
    pub elsewhere: BTreeSet<String>,
    /// Every Placement of the namespace (this one included), to settle which one places what.
    pub neighbours: Vec<Arc<Placement>>,
    /// The hub's Works of this Placement, as cached.
    pub works: Vec<Arc<Work>>,
    /// The selected types read now, with every object of the namespace (a fresh read).
    pub types: Vec<Listed>,
    /// Resource selectors naming a type the hub does not serve in namespaces, with why.
    pub unsupported: Vec<String>,
    /// Selected types that cannot be read now: their Works stay as they are.
    pub unreadable: Vec<Unreadable>,
    /// The objects placed workloads refer to, as read now (`None`: not on the hub).
    pub referenced: BTreeMap<Reference, Option<DynamicObject>>,
    /// The negotiator's imports of the members' schemas, by import name and Cluster.
    pub imports: BTreeMap<(String, String), Arc<ApiResourceImport>>,
    /// Since when the objects of copies this Placement holds have been missing on the hub, as
    /// remembered from earlier passes (see [`Plan::absent`]).
    pub absent_since: BTreeMap<ObjectKey, Timestamp>,
    /// The Works of the namespace's other Placements, as cached (not being deleted).
    pub others: Vec<Other>,
    /// The labels of the Placement's namespace that its member namespaces carry (see
    /// [`flotilla_api::WorkSpec::namespace_labels`]); `None` while the cache has not seen the
    /// namespace (its Works then have no say in them).
    pub namespace_labels: Option<BTreeMap<String, String>>,
    /// The hub ReplicaSet records of the namespace's Deployments (see [`crate::history`]), as
    /// cached: without their pod templates.
    pub records: Vec<Arc<k8s_openapi::api::apps::v1::ReplicaSet>>,
    /// The interpreter of every kind: built in, or from an accepted WorkloadProfile.
    pub kinds: Kinds,
    /// The selected workloads whose pods the hub's Pod Security admission refuses in their
    /// namespace, or could not judge now (see [`crate::pod_security`]); the others passed.
    pub pod_security: BTreeMap<ObjectKey, Verdict>,
    /// The selected RoleBindings (a ClusterPlacement's: ClusterRoleBindings) that would grant
    /// more in a member than on the hub, or whose role or ServiceAccounts could not be looked up
    /// now (see [`crate::bindings`]); the others may be placed.
    pub bindings: BTreeMap<ObjectKey, Verdict>,
    /// The selected Services with `spec.externalIPs` the namespace may not place (see
    /// [`crate::external_ips`]); only those that are held back.
    pub external_ips: BTreeMap<ObjectKey, Verdict>,
    /// The namespace's objects of the table's namespaced kinds this Placement does not select
    /// (listed for [`crate::coverage`]), and those kinds that could not be listed; empty for a
    /// ClusterPlacement.
    pub rest_of_namespace: Vec<Listed>,
    pub rest_unreadable: Vec<Unreadable>,
    /// The manifests the members have now of the objects [`Observation::pod_security`],
    /// [`Observation::bindings`] and [`Observation::external_ips`] hold back, as their Works hold them: those copies keep them,
    /// whatever the hub object says now.
    pub held_back: BTreeMap<CopyKey, DynamicObject>,
    /// Whether the Placement may take over member objects Flotilla did not create
    /// (`conflictPolicy: Adopt`): a ClusterPlacement (an admin's) may; a Placement only where its
    /// hub namespace has [`flotilla_api::annotations::ALLOW_ADOPT`].
    pub adopt_allowed: bool,
    /// Whether its objects may go into member namespaces Flotilla did not create (see
    /// [`flotilla_api::WorkSpec::allow_existing_namespaces`]): a ClusterPlacement's may; a
    /// Placement's only where its hub namespace has
    /// [`flotilla_api::annotations::ALLOW_EXISTING_NAMESPACES`] or
    /// [`flotilla_api::annotations::ALLOW_ADOPT`].
    pub existing_namespaces_allowed: bool,
    /// The hub Secrets that hold the data of the Secrets this Placement's Works place (see
    /// [`flotilla_api::work_data`]), as cached, by namespace and name: the UIDs of their owners.
    pub data_secrets: BTreeMap<WorkId, Vec<String>>,
    /// The most copies the namespace's Placements may keep in the members (`None`: no limit;
    /// see [`flotilla_api::annotations::MAX_COPIES`]).
    pub copy_limit: Option<usize>,
    /// The most bytes the copies of the namespace's Placements may take in the hub (`None`: no
    /// limit; see [`flotilla_api::annotations::MAX_COPY_BYTES`]).
    pub byte_limit: Option<u64>,
}

impl Observation {
    /// What a pass of `placement` observes when nothing but its Clusters, the objects of its
    /// selected types and its Works are there: no neighbour but itself, no import, nothing held
    /// back, no limit; adopting not allowed, existing member namespaces allowed. The start of
    /// an observation built by hand (the planner's tests and benchmark).
    pub fn of(
        placement: Arc<Placement>,
        now: Timestamp,
        clusters: Vec<Arc<Cluster>>,
        types: Vec<Listed>,
        works: Vec<Arc<Work>>,
    ) -> Self {
        Self {
            neighbours: vec![placement.clone()],
            placement,
            now,
            clusters,
            elsewhere: BTreeSet::new(),
            works,
            types,
            unsupported: Vec::new(),
            unreadable: Vec::new(),
            referenced: BTreeMap::new(),
            imports: BTreeMap::new(),
            absent_since: BTreeMap::new(),
            others: Vec::new(),
            namespace_labels: None,
            records: Vec::new(),
            kinds: Kinds::default(),
            pod_security: BTreeMap::new(),
            bindings: BTreeMap::new(),
            external_ips: BTreeMap::new(),
            rest_of_namespace: Vec::new(),
            rest_unreadable: Vec::new(),
            held_back: BTreeMap::new(),
            existing_namespaces_allowed: true,
            adopt_allowed: false,
            data_secrets: BTreeMap::new(),
            copy_limit: None,
            byte_limit: None,
        }
    }

    /// The Placements of this one's namespace (this one included), to settle which one places
    /// an object.
    pub fn neighbours_here(&self) -> Vec<&Placement> {
        self.neighbours
            .iter()
            .map(|p| &**p)
            .filter(|p| p.namespace() == self.placement.namespace())
            .collect()
    }
}

/// A Work of another Placement of the namespace.
#[derive(Clone, Debug)]
pub struct Other {
    pub work: Arc<Work>,
    /// Its Placement no longer exists: a Placement that now places its objects adopts it.
    pub orphaned: bool,
}

/// One selected type and its objects in the Placement's namespace.
#[derive(Clone, Debug)]
pub struct Listed {
    pub resource: ApiResource,
    pub objects: Vec<DynamicObject>,
}

/// A selected type the splitter cannot read now, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable {
    pub api_version: String,
    pub kind: String,
    /// The hub said Forbidden: the splitter lacks RBAC (the admin can grant it).
    pub forbidden: bool,
    pub message: String,
}

impl Unreadable {
    /// Why the splitter cannot `doing` (e.g. "list statefulsets in namespace shop").
    pub fn new(api_version: &str, kind: &str, doing: &str, e: &kube::Error) -> Self {
        let forbidden = matches!(e, kube::Error::Api(s) if s.code == 403);
        Self::failed(api_version, kind, doing, forbidden, e)
    }

    /// Why the splitter cannot `doing`: `e`, which is the hub's Forbidden when `forbidden`.
    pub fn failed(
        api_version: &str,
        kind: &str,
        doing: &str,
        forbidden: bool,
        e: &dyn std::fmt::Display,
    ) -> Self {
        let message = if forbidden {
            format!(
                "{api_version} {kind}: the splitter may not {doing} ({e}); grant it get, list and \
                 watch on this type, e.g. with the chart value splitter.extraRules"
            )
        } else {
            format!("{api_version} {kind}: could not {doing}: {e}")
        };
        Self {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            forbidden,
            message,
        }
    }

    /// Whether Work `w` places an object of this type.
    pub fn places(&self, w: &Work) -> bool {
        let a = w.annotations();
        a.get(annotations::SOURCE_API_VERSION) == Some(&self.api_version)
            && a.get(annotations::SOURCE_KIND) == Some(&self.kind)
    }
}
