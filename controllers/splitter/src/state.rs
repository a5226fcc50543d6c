//! What every pass of the Placement controller shares: its caches and what earlier passes
//! learned ([`Splitter`]), which Placements it serves ([`Scope`]), and how a pass fails
//! ([`Error`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use flotilla_api::{ApiResourceImport, Placement, Work, WorkloadProfile};
use flotilla_runtime::gather::Urgency;
use flotilla_runtime::{Context, ErrorCategory};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

use crate::keys::ObjectKey;
use crate::observation::Observation;
use crate::plan::Plan;
use crate::recent::RecentWrites;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("rendering a Work: {0}")]
    Render(#[from] serde_json::Error),
}

impl ErrorCategory for Error {
    fn category(&self) -> &'static str {
        match self {
            Self::Kube(e) => e.category(),
            Self::Render(_) => "RenderFailed",
        }
    }
    fn is_transient(&self) -> bool {
        match self {
            Self::Kube(e) => e.is_transient(),
            // The same hub object renders the same way: wait for it to change.
            Self::Render(_) => false,
        }
    }
}

/// What every pass shares: the caches, and what earlier passes learned.
pub struct Splitter {
    pub(crate) ctx: Context,
    /// Every Cluster, and those this splitter places on (its `--cluster-selector`): a Cluster
    /// outside it still exists, and its Works are not this splitter's to delete.
    pub(crate) clusters: crate::watches::Clusters,
    /// The Works the splitter wrote (labelled with their Placement), cached.
    pub(crate) works: Store<Work>,
    /// The hub Secrets that hold the data of the Secrets the Works place (metadata only; see
    /// [`flotilla_api::work_data`]).
    pub(crate) data_secrets: Store<PartialObjectMeta<Secret>>,
    /// Every Placement in scope, to settle which one places an object, and every
    /// ClusterPlacement (as a Placement without a namespace, see
    /// [`ClusterPlacement::as_placement`]) when the splitter serves every namespace.
    pub(crate) placements: Store<Placement>,
    /// The negotiator's imports of the members' schemas, for the per-object check.
    pub(crate) imports: Store<ApiResourceImport>,
    /// The hub's namespaces (metadata): their labels go to the member namespaces.
    pub(crate) namespaces: Store<PartialObjectMeta<Namespace>>,
    /// The hub ReplicaSet records of placed Deployments, without their pod templates.
    pub(crate) records: Store<ReplicaSet>,
    /// The WorkloadProfiles of custom kinds (only accepted ones are used).
    pub(crate) profiles: Store<WorkloadProfile>,
    /// The hub's objects of every namespaced kind, as the report of what is not placed reads
    /// them.
    pub(crate) inventory: crate::inventory::Inventory,
    /// How pod templates are judged, and the hub's Pod Security verdicts on those of placed
    /// workloads.
    pub(crate) pod_security: crate::pod_security::PodSecurity,
    /// The Works written by recent passes, until the cache has them.
    pub(crate) recent: Arc<RecentWrites>,
    /// Types found in the hub's discovery, by apiVersion and kind, each watched, with whether
    /// they are namespaced.
    pub(crate) types: Mutex<HashMap<(String, String), (ApiResource, bool)>>,
    /// Per Placement: the objects of its Works missing on the hub, and since when.
    pub(crate) absent: Mutex<HashMap<ObjectRef<Placement>, BTreeMap<ObjectKey, Timestamp>>>,
    /// Per namespace: the objects no Placement places that an Event already announced, with
    /// the reason (see [`Splitter::announce_left_out`]).
    pub(crate) announced: Mutex<HashMap<String, BTreeSet<Announced>>>,
    /// The namespace this controller serves (`None`: every namespace).
    pub(crate) namespace: Option<String>,
    /// `--max-copies-per-namespace` (`None`: no limit).
    pub(crate) max_copies: Option<usize>,
    /// `--max-copy-bytes-per-namespace`, unless 0.
    pub(crate) max_copy_bytes: Option<u64>,
    /// `--hub-identity-namespaces`.
    pub(crate) hub_identity_namespaces: BTreeSet<String>,
    /// Starts passes of Placements from the watches of custom types.
    pub(crate) triggers: crate::watches::Triggers,
    /// The newest state of each type seen by its watches and lists: how a pass lists it.
    pub(crate) watermarks: Arc<crate::watermarks::Watermarks>,
}

/// An object announced as placed nowhere: apiVersion, kind, name and reason.
type Announced = (String, String, String, String);

/// The kinds whose hub objects [`run`] watches from start-up, as (group, version, kind): the
/// most placed ones. Every other kind is watched once a pass selects it
/// ([`Splitter::learn_type`]).
pub(crate) const WATCHED_FROM_START: [(&str, &str, &str); 5] = [
    ("apps", "v1", "Deployment"),
    ("", "v1", "ConfigMap"),
    ("", "v1", "Secret"),
    ("", "v1", "Service"),
    ("", "v1", "ServiceAccount"),
];

impl Splitter {
    /// Whether the ServiceAccounts of hub namespace `ns` are the hub's own identities: its
    /// system namespaces, the members' namespaces, the Pod Security check namespaces and
    /// `--hub-identity-namespaces`.
    pub(crate) fn hub_identity_namespace(&self, ns: &str) -> bool {
        flotilla_interpreter::hub_made::SYSTEM_NAMESPACES
            .iter()
            .any(|s| *s != "default" && *s == ns)
            || ns.starts_with(flotilla_api::names::CLUSTER_NAMESPACE_PREFIX)
            || (!self.pod_security.check_namespace_prefix.is_empty()
                && ns.starts_with(&self.pod_security.check_namespace_prefix))
            || self.hub_identity_namespaces.contains(ns)
    }

    /// A type found before, and whether it is namespaced.
    pub(crate) fn known_type(&self, api_version: &str, kind: &str) -> Option<(ApiResource, bool)> {
        self.types
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(api_version.to_string(), kind.to_string()))
            .cloned()
    }

    /// Remembers a type found in discovery (`namespaced` or not) and watches its objects
    /// (metadata only), so that their changes reach the members in about a second, as for the
    /// default types.
    pub(crate) fn learn_type(
        &self,
        api_version: &str,
        kind: &str,
        ar: &ApiResource,
        namespaced: bool,
    ) {
        let first = self
            .types
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                (api_version.to_string(), kind.to_string()),
                (ar.clone(), namespaced),
            )
            .is_none();
        if !first || self.ctx.shutdown.is_cancelled() {
            return;
        }
        let api: Api<PartialObjectMeta<DynamicObject>> = match &self.namespace {
            Some(ns) if namespaced => Api::namespaced_with(self.ctx.client.clone(), ns, ar),
            _ => Api::all_with(self.ctx.client.clone(), ar),
        };
        let events = watcher(api, watcher::Config::default())
            .default_backoff()
            .touched_objects();
        let (placements, triggers) = (self.placements.clone(), self.triggers.clone());
        let shutdown = self.ctx.shutdown.clone();
        let (kind, group, watermarks) =
            (ar.kind.clone(), ar.group.clone(), self.watermarks.clone());
        tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    next = events.next() => match next {
                        Some(Ok(object)) => {
                            watermarks.saw(&group, &kind, object.metadata.resource_version.as_deref());
                            for p in placements_in(&placements, object.namespace()) {
                                if triggers.unbounded_send((p, Urgency::Now)).is_err() {
                                    return;
                                }
                            }
                        }
                        Some(Err(e)) => tracing::warn!(%kind, error = %e,
                            "watch of a selected type failed; retrying with backoff"),
                        None => break,
                    },
                }
            }
        });
    }

    /// An Event on each hub object of the namespace that no Placement places, once per object
    /// and reason, from one Placement of the namespace (the oldest), so that `kubectl describe`
    /// of the object says it is not placed and why.
    pub(crate) async fn announce_left_out(&self, obs: &Observation, plan: &Plan) {
        /// At most this many Events per pass (the next passes announce the rest).
        const MAX_EVENTS: usize = 50;
        let placement = &*obs.placement;
        let Some(ns) = placement.namespace() else {
            return;
        };
        let oldest = obs
            .neighbours
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .min_by_key(|p| (p.metadata.creation_timestamp.clone(), p.name_any()));
        if oldest.is_none_or(|p| p.name_any() != placement.name_any()) {
            return;
        }
        let key = |l: &crate::coverage::LeftOut| {
            (
                l.entry.api_version.clone(),
                l.entry.kind.clone(),
                l.entry.name.clone(),
                l.entry.reason.clone(),
            )
        };
        let now: BTreeSet<_> = plan.findings.left_out.iter().map(key).collect();
        let before = self
            .announced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&ns)
            .cloned()
            .unwrap_or_default();
        let mut announced: BTreeSet<_> = before.intersection(&now).cloned().collect();
        for l in plan
            .findings
            .left_out
            .iter()
            .filter(|l| !l.entry.name.is_empty() && !before.contains(&key(l)))
            .take(MAX_EVENTS)
        {
            let reference = k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some(l.entry.api_version.clone()),
                kind: Some(l.entry.kind.clone()),
                name: Some(l.entry.name.clone()),
                namespace: Some(ns.clone()),
                uid: l.uid.clone(),
                ..Default::default()
            };
            self.ctx
                .events
                .normal_ref(
                    &reference,
                    flotilla_api::reasons::NOT_PLACED,
                    "Place",
                    format!(
                        "not placed on any member: {} ({})",
                        l.entry.message, l.entry.reason
                    ),
                )
                .await;
            announced.insert(key(l));
        }
        self.announced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(ns, announced);
    }

    /// What earlier passes of `placement` found missing on the hub, and since when.
    pub(crate) fn absent_since(&self, placement: &Placement) -> BTreeMap<ObjectKey, Timestamp> {
        self.absent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&ObjectRef::from_obj(placement))
            .cloned()
            .unwrap_or_default()
    }

    pub(crate) fn remember_absent(
        &self,
        placement: &Placement,
        absent: BTreeMap<ObjectKey, Timestamp>,
    ) {
        let mut all = self.absent.lock().unwrap_or_else(|e| e.into_inner());
        // What was remembered for Placements deleted since goes with them.
        all.retain(|p, _| self.placements.get(p).is_some());
        let key = ObjectRef::from_obj(placement);
        if absent.is_empty() {
            all.remove(&key);
        } else {
            all.insert(key, absent);
        }
    }
}

/// Which placements one controller serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope<'a> {
    /// Every Placement and every ClusterPlacement.
    Everything,
    /// Every Placement.
    Namespaces,
    /// The Placements of one namespace.
    Namespace(&'a str),
    /// The ClusterPlacements.
    ClusterPlacements,
}

impl Scope<'_> {
    /// The one namespace served, if only one is.
    pub(crate) fn namespace(&self) -> Option<&str> {
        match self {
            Self::Namespace(ns) => Some(ns),
            _ => None,
        }
    }

    pub(crate) fn placements(&self) -> bool {
        *self != Self::ClusterPlacements
    }

    pub(crate) fn cluster_placements(&self) -> bool {
        matches!(self, Self::Everything | Self::ClusterPlacements)
    }
}

/// The Placements of namespace `ns` (`None`: the ClusterPlacements).
pub(crate) fn placements_in(
    store: &Store<Placement>,
    ns: Option<String>,
) -> Vec<ObjectRef<Placement>> {
    store
        .state()
        .iter()
        .filter(|p| p.namespace() == ns)
        .map(|p| ObjectRef::from_obj(&**p))
        .collect()
}
