//! The Placement controller: renders one Work per selected object and eligible member, divides
//! Deployment replicas, keeps a failed member's copy until its replacement is available, and
//! writes the aggregated status onto the hub Deployment.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_api::condition::ConditionStatus;
use flotilla_api::placement::{
    ClusterDecision, ClusterExclusion, ObjectDecision, ReplicaSchedulingType, ResourceSelector,
};
use flotilla_api::{
    ApiResourceImport, Cluster, Placement, Work, annotations, conditions, field_managers, labels,
    names, reasons,
};
use flotilla_runtime::{Context, ErrorCategory};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    Preconditions,
};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use crate::aggregate::{copy_of, deployment_status, max_unavailable};
use crate::compatibility::MemberSchema;
use crate::division::Candidate;
use crate::division::{Division, DivisionError, divide};
use crate::eligibility::{Selection, select};
use crate::hub_made::made_by_kubernetes;
use crate::references::{Reference, references};
use crate::render::{member_manifest, render};
use crate::specificity::{Selectable, specificity, winner};

/// The types placed when a Placement selects none explicitly.
const DEFAULT_TYPES: [(&str, &str, &str, &str); 5] = [
    ("apps", "v1", "Deployment", "deployments"),
    ("", "v1", "ConfigMap", "configmaps"),
    ("", "v1", "Secret", "secrets"),
    ("", "v1", "Service", "services"),
    ("", "v1", "ServiceAccount", "serviceaccounts"),
];

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

struct Splitter {
    ctx: Context,
    clusters: Store<Cluster>,
    /// The Works the splitter wrote (labelled with their Placement), cached.
    works: Store<Work>,
    /// Every Placement in scope, to settle which one places an object.
    placements: Store<Placement>,
    /// The negotiator's imports of the members' schemas, for the per-object check.
    imports: Store<ApiResourceImport>,
    /// Custom types found in the hub's discovery, by apiVersion and kind.
    types: std::sync::Mutex<HashMap<(String, String), ApiResource>>,
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// The object with its type set (lists of dynamic objects leave it out).
fn typed(mut object: DynamicObject, ar: &ApiResource) -> DynamicObject {
    object.types = Some(kube::api::TypeMeta {
        api_version: ar.api_version.clone(),
        kind: ar.kind.clone(),
    });
    object
}

/// The name of the APIResourceImport (and NegotiatedAPIResource) of a type.
fn import_name(ar: &ApiResource) -> String {
    names::api_resource_name(&ar.group, &ar.version, &ar.plural)
}

impl Splitter {
    /// The cached Works of Placement `name` in namespace `ns`.
    fn works_of(&self, name: &str, ns: &str) -> Vec<Work> {
        self.works
            .state()
            .iter()
            .filter(|w| {
                w.labels().get(labels::PLACEMENT).map(String::as_str) == Some(name)
                    && w.annotations()
                        .get(annotations::SOURCE_NAMESPACE)
                        .map(String::as_str)
                        == Some(ns)
            })
            .map(|w| (**w).clone())
            .collect()
    }

    /// The types a Placement selects, as API resources, each once, with the selectors naming a
    /// type the hub does not serve and those naming a type that cannot be looked up now. The
    /// default types are known; others (custom resources) are looked up in the hub's discovery
    /// once and remembered.
    async fn selected_types(&self, selectors: &[ResourceSelector]) -> SelectedTypes {
        let mut selected = SelectedTypes::default();
        if selectors.is_empty() {
            selected.types = DEFAULT_TYPES
                .iter()
                .map(|(g, v, k, p)| resource(g, v, k, p))
                .collect();
            return selected;
        }
        for s in selectors {
            match self.resolve(&s.api_version, &s.kind).await {
                Ok(ar) if !selected.types.contains(&ar) => selected.types.push(ar),
                Ok(_) => {}
                Err(TypeLookupError::Absent(why)) => selected
                    .unsupported
                    .push(format!("{} {}: {why}", s.api_version, s.kind)),
                Err(TypeLookupError::Unknown(e)) => selected.unreadable.push(Unreadable::new(
                    &s.api_version,
                    &s.kind,
                    "look the type up in the hub's discovery",
                    &e,
                )),
            }
        }
        selected
    }

    async fn resolve(&self, api_version: &str, kind: &str) -> Result<ApiResource, TypeLookupError> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        if let Some((g, v, k, p)) = DEFAULT_TYPES
            .iter()
            .find(|(g, v, k, _)| *g == group && *v == version && *k == kind)
        {
            return Ok(resource(g, v, k, p));
        }
        let key = (api_version.to_string(), kind.to_string());
        if let Some(ar) = self
            .types
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(ar.clone());
        }
        let gvk = GroupVersionKind::gvk(group, version, kind);
        match kube::discovery::pinned_kind(&self.ctx.client, &gvk).await {
            Ok((ar, caps)) if caps.scope == kube::discovery::Scope::Namespaced => {
                self.types
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key, ar.clone());
                Ok(ar)
            }
            Ok(_) => Err(TypeLookupError::Absent(
                "cluster-scoped: a Placement places objects of its namespace".into(),
            )),
            Err(e) if proves_absent(&e) => {
                Err(TypeLookupError::Absent("the hub does not serve it".into()))
            }
            Err(e) => Err(TypeLookupError::Unknown(e)),
        }
    }
}

/// The types a Placement selects, as far as the splitter can tell now.
#[derive(Default)]
struct SelectedTypes {
    types: Vec<ApiResource>,
    /// Selectors naming a type the hub does not serve (or not in namespaces), with why.
    unsupported: Vec<String>,
    /// Types that cannot be looked up or listed now: their Works are kept as they are.
    unreadable: Vec<Unreadable>,
}

/// A selected type the splitter cannot read now, and why.
struct Unreadable {
    api_version: String,
    kind: String,
    forbidden: bool,
    message: String,
}

impl Unreadable {
    fn new(api_version: &str, kind: &str, doing: &str, e: &kube::Error) -> Self {
        let forbidden = matches!(e, kube::Error::Api(s) if s.code == 403);
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
    fn places(&self, w: &Work) -> bool {
        let a = w.annotations();
        a.get(annotations::SOURCE_API_VERSION) == Some(&self.api_version)
            && a.get(annotations::SOURCE_KIND) == Some(&self.kind)
    }
}

/// Why a selected type was not found.
enum TypeLookupError {
    /// The hub says it does not serve it (in namespaces).
    Absent(String),
    /// The hub could not say now: unknown, not absent.
    Unknown(kube::Error),
}

/// Whether a discovery error proves a type absent: the hub does not serve its group/version
/// (404), or serves it without the kind. Anything else (a timeout, a 5xx, Forbidden) says
/// nothing about the type.
fn proves_absent(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 404,
        kube::Error::Discovery(kube::error::DiscoveryError::MissingKind(_)) => true,
        _ => false,
    }
}

/// Runs the Placement controller of `namespace` (`None`: every namespace), placing on the
/// Clusters `cluster_selector` selects, until `ctx.shutdown`.
pub async fn run(
    ctx: Context,
    namespace: Option<&str>,
    cluster_selector: &str,
) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let cluster_watch = flotilla_runtime::cache::selected(cluster_selector);
    let (placements_api, deployments_api): (Api<Placement>, Api<Deployment>) = match namespace {
        None => (Api::all(client.clone()), Api::all(client.clone())),
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
    };

    let clusters = flotilla_runtime::cache::spawn_store(
        &ctx,
        Api::<Cluster>::all(client.clone()),
        cluster_watch.clone(),
    );

    // Placements, cached; only spec changes (and deletion) trigger: the splitter's own status
    // writes do not.
    let (placements, writer) = reflector::store::<Placement>();
    // Another Placement of the namespace appears, changes or goes: which one places an object
    // may change.
    let neighbour_events = spec_changes_and_deletions(
        watcher(placements_api.clone(), watcher::Config::default()).default_backoff(),
    );
    let placement_events = watcher(placements_api, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default());
    // Clusters: what selection reads, not heartbeats.
    let cluster_events = watcher(Api::<Cluster>::all(client.clone()), cluster_watch)
        .default_backoff()
        .applied_objects()
        .predicate_filter(cluster_inputs, Default::default());
    // Hub Deployments: their spec and deletion, not the status the splitter writes.
    let deployment_events = spec_changes_and_deletions(
        watcher(deployments_api, watcher::Config::default()).default_backoff(),
    );
    let all = placements.clone();
    let neighbours = placements.clone();
    let same_namespace = placements.clone();
    let by_label = placements.clone();
    let works = flotilla_runtime::cache::spawn_store(
        &ctx,
        Api::<Work>::all(client.clone()),
        watcher::Config::default().labels(labels::PLACEMENT),
    );
    // The negotiator's verdicts on the members' APIs: cached for the per-object check, and a
    // changed verdict looks at every Placement again.
    let (imports, import_writer) = reflector::store::<ApiResourceImport>();
    let import_events = watcher(
        Api::<ApiResourceImport>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(import_writer)
    .applied_objects()
    .predicate_filter(import_inputs, Default::default());
    let every = placements.clone();
    let others = placements.clone();
    let controller = Controller::for_stream(placement_events, placements)
        .watches_stream(import_events, move |_: ApiResourceImport| {
            every
                .state()
                .iter()
                .map(|p| ObjectRef::from_obj(&**p))
                .collect::<Vec<_>>()
        })
        .watches_stream(neighbour_events, move |changed: Placement| {
            let ns = changed.namespace();
            others
                .state()
                .iter()
                .filter(|p| p.namespace() == ns && p.name_any() != changed.name_any())
                .map(|p| ObjectRef::from_obj(&**p))
                .collect::<Vec<_>>()
        })
        // A Cluster change may change the eligibility of members for every Placement.
        .watches_stream(cluster_events, move |_: Cluster| {
            all.state()
                .iter()
                .map(|p| ObjectRef::from_obj(&**p))
                .collect::<Vec<_>>()
        })
        // A hub Deployment changes: the Placements of its namespace.
        .watches_stream(deployment_events, in_namespace_of(same_namespace.clone()))
        // So does any other object of the default types (metadata only: any change at all).
        .watches_stream(
            object_changes::<ConfigMap>(&client, namespace),
            in_namespace_of(same_namespace.clone()),
        )
        .watches_stream(
            object_changes::<Secret>(&client, namespace),
            in_namespace_of(same_namespace.clone()),
        )
        .watches_stream(
            object_changes::<Service>(&client, namespace),
            in_namespace_of(same_namespace.clone()),
        )
        .watches_stream(
            object_changes::<ServiceAccount>(&client, namespace),
            in_namespace_of(same_namespace.clone()),
        )
        // A Work's status changes: its Placement aggregates again.
        .watches(
            Api::<Work>::all(client.clone()),
            watcher::Config::default().labels(labels::PLACEMENT),
            move |w: Work| {
                let name = w.labels().get(labels::PLACEMENT).cloned();
                let ns = w.annotations().get(annotations::SOURCE_NAMESPACE).cloned();
                by_label
                    .state()
                    .iter()
                    .filter(|p| Some(p.name_any()) == name && p.namespace() == ns)
                    .map(|p| ObjectRef::from_obj(&**p))
                    .collect::<Vec<_>>()
            },
        );

    // Nothing is placed before the caches are full: an empty cache of Works would look like
    // "no copy yet".
    tokio::select! {
        _ = ctx.shutdown.cancelled() => return Ok(()),
        _ = async {
            flotilla_runtime::cache::wait_until_synced(&clusters).await;
            flotilla_runtime::cache::wait_until_synced(&works).await;
        } => {}
    }
    ctx.health.set_caches_synced(true);
    let state = Arc::new(Splitter {
        ctx: ctx.clone(),
        clusters,
        works,
        placements: neighbours,
        imports,
        types: Default::default(),
    });
    controller
        // Events close together make one pass: a delete and a create under the same name
        // (`kubectl replace --force`) are seen as the replacement they are, never as a deletion.
        .with_config(kube::runtime::controller::Config::default().debounce(DEBOUNCE))
        .graceful_shutdown_on(ctx.shutdown.clone().cancelled_owned())
        .run(reconcile, error_policy, state)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "reconcile failed");
            }
        })
        .await;
    Ok(())
}

/// The Placements of namespace `ns`.
fn placements_in(store: &Store<Placement>, ns: Option<String>) -> Vec<ObjectRef<Placement>> {
    store
        .state()
        .iter()
        .filter(|p| p.namespace() == ns)
        .map(|p| ObjectRef::from_obj(&**p))
        .collect()
}

/// A mapper from an object to the Placements of its namespace.
fn in_namespace_of<K: Resource>(
    store: Store<Placement>,
) -> impl Fn(K) -> Vec<ObjectRef<Placement>> + Send + Sync + 'static {
    move |o: K| placements_in(&store, o.namespace())
}

/// Every change of an object of `K` (created, changed, deleted) in `namespace` (`None`: every
/// namespace), from a metadata-only watch: what the splitter places must reach the members in
/// about a second, not at the next resync.
fn object_changes<K>(
    client: &kube::Client,
    namespace: Option<&str>,
) -> impl futures::Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let api: Api<PartialObjectMeta<K>> = match namespace {
        None => Api::all(client.clone()),
        Some(ns) => Api::namespaced(client.clone(), ns),
    };
    watcher(api, watcher::Config::default())
        .default_backoff()
        .touched_objects()
        .predicate_filter(predicates::resource_version, Default::default())
}

/// The objects of a watch whose generation changed, and every deleted one (a predicate on the
/// generation alone would drop deletions: a deleted object keeps its last generation).
fn spec_changes_and_deletions<K>(
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
) -> impl futures::Stream<Item = Result<K, watcher::Error>>
where
    K: Resource,
{
    let mut generations: std::collections::HashMap<String, Option<i64>> = Default::default();
    events.filter_map(move |event| {
        let changed = match event {
            Ok(watcher::Event::Delete(o)) => {
                generations.remove(&o.uid().unwrap_or_default());
                Some(Ok(o))
            }
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                let generation = o.meta().generation;
                let before = generations.insert(o.uid().unwrap_or_default(), generation);
                (before != Some(generation)).then_some(Ok(o))
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
            Err(e) => Some(Err(e)),
        };
        std::future::ready(changed)
    })
}

/// What of an import the per-object check reads: its schema and its `Compatible` verdict.
fn import_inputs(import: &ApiResourceImport) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    import.metadata.generation.hash(&mut h);
    if let Some(c) = import.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == conditions::COMPATIBLE)
    }) {
        (&c.status, &c.reason).hash(&mut h);
    }
    Some(h.finish())
}

/// What of a Cluster selection reads: labels, spec, conditions (not their heartbeat times) and
/// allocatable capacity.
fn cluster_inputs(cluster: &Cluster) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    cluster.metadata.labels.hash(&mut h);
    cluster.metadata.generation.hash(&mut h);
    if let Some(status) = &cluster.status {
        for c in &status.conditions {
            (
                &c.type_,
                &c.status,
                &c.reason,
                &c.last_transition_time.0.to_string(),
            )
                .hash(&mut h);
        }
        for (k, v) in &status.allocatable {
            (k, &v.0).hash(&mut h);
        }
    }
    Some(h.finish())
}

fn error_policy(p: Arc<Placement>, e: &Error, _s: Arc<Splitter>) -> Action {
    tracing::warn!(placement = %p.name_any(), error = %e, "reconcile failed");
    Action::requeue(if e.is_transient() {
        Duration::from_secs(5)
    } else {
        Duration::from_secs(60)
    })
}

/// Replicas a Work asks its member to run (its manifest's `spec.replicas`).
fn work_replicas(w: &Work) -> Option<u32> {
    let m = w.spec.manifests.first()?;
    m.data
        .get("spec")?
        .get("replicas")?
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
}

fn cluster_of(w: &Work) -> Option<String> {
    w.cluster_name().map(str::to_string)
}

/// Which copy a Work is: its hub object's UID and its member.
fn copy_key(w: &Work) -> Option<(String, String)> {
    Some((w.labels().get(labels::SOURCE_UID)?.clone(), cluster_of(w)?))
}

/// Whether condition `type_` of a Work is True for the Work's current spec (generation): a copy
/// just given more replicas is not available until its member has them.
fn holds_now(w: &Work, type_: &str) -> bool {
    w.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
        .is_some_and(|c| c.status == "True" && c.observed_generation == w.metadata.generation)
}

async fn reconcile(placement: Arc<Placement>, state: Arc<Splitter>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = reconcile_inner(&placement, &state).await;
    state.ctx.metrics.observe_reconcile(
        "placement",
        started.elapsed().as_secs_f64(),
        result.as_ref().err().map(|e| e.category()),
    );
    result
}

async fn reconcile_inner(placement: &Placement, state: &Splitter) -> Result<Action, Error> {
    let client = state.ctx.client.clone();
    let ns = placement.namespace().unwrap_or_default();
    let name = placement.name_any();
    let spec = &placement.spec;
    let cluster_objects = state.clusters.state();
    let cluster_refs: Vec<&Cluster> = cluster_objects.iter().map(|c| &**c).collect();
    let selection: Selection = select(spec, &cluster_refs, Timestamp::now());
    let eligible: BTreeSet<String> = selection
        .candidates
        .iter()
        .map(|c| c.cluster.clone())
        .collect();

    let existing: Vec<Work> = state.works_of(&name, &ns);

    let held: BTreeSet<&str> = selection
        .candidates
        .iter()
        .filter(|c| c.held)
        .map(|c| c.cluster.as_str())
        .collect();
    let has_copy = |uid: &str, cluster: &str| {
        existing.iter().any(|w| {
            w.labels().get(labels::SOURCE_UID).map(String::as_str) == Some(uid)
                && w.cluster_name() == Some(cluster)
                && w.metadata.deletion_timestamp.is_none()
        })
    };
    let mut desired: BTreeMap<(String, String), Work> = BTreeMap::new();
    let mut divisions: Vec<(DynamicObject, Division, u32)> = Vec::new();
    let mut decisions: Vec<ObjectDecision> = Vec::new();
    let mut followed: BTreeMap<Reference, BTreeSet<String>> = BTreeMap::new();
    let mut object_excluded: BTreeSet<(String, String)> = BTreeSet::new();
    // Objects this Placement places (selected, not placed by another Placement), and those of
    // them no member can take now.
    let mut placing: BTreeSet<String> = BTreeSet::new();
    let mut stranded: BTreeSet<String> = BTreeSet::new();
    // The objects another Placement places (more specific, or as specific and older): their
    // Works are that Placement's now, never deleted from here.
    let mut handed_over: BTreeSet<String> = BTreeSet::new();
    let mut conflicts: Vec<String> = Vec::new();
    let neighbours: Vec<Arc<Placement>> = state
        .placements
        .state()
        .into_iter()
        .filter(|p| p.namespace().as_deref() == Some(ns.as_str()))
        .collect();
    let neighbours: Vec<&Placement> = neighbours.iter().map(|p| &**p).collect();
    let SelectedTypes {
        types,
        unsupported,
        mut unreadable,
    } = state.selected_types(&spec.resource_selectors).await;
    for ar in types {
        // What members that cannot take every object of the type can take: parsed once here.
        let member_schemas: BTreeMap<&str, MemberSchema> = selection
            .candidates
            .iter()
            .filter_map(|c| {
                let import = state.imports.get(
                    &ObjectRef::new(&import_name(&ar))
                        .within(&names::cluster_namespace(&c.cluster)),
                );
                Some((c.cluster.as_str(), MemberSchema::of(import.as_deref())?))
            })
            .collect();
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
        let listed = match api.list(&ListParams::default()).await {
            Ok(list) => list.items,
            // Unknown is not absent: this type's copies stay as they are, the others go on.
            Err(e) => {
                unreadable.push(Unreadable::new(
                    &ar.api_version,
                    &ar.kind,
                    &format!("list {} in namespace {ns}", ar.plural),
                    &e,
                ));
                continue;
            }
        };
        for object in listed {
            let object = typed(object, &ar);
            let object_name = object.name_any();
            let selectable = Selectable {
                api_version: &ar.api_version,
                kind: &ar.kind,
                name: &object_name,
                labels: object.labels(),
            };
            if specificity(&spec.resource_selectors, &selectable).is_none()
                || object.metadata.deletion_timestamp.is_some()
                || made_by_kubernetes(&ar.api_version, &ar.kind, &object)
            {
                continue;
            }
            let uid = object.metadata.uid.clone().unwrap_or_default();
            if let Some(verdict) = winner(&neighbours, &selectable)
                && (verdict.winner != name || !verdict.tied.is_empty())
            {
                let tie = verdict.tied.contains(&name) || verdict.winner == name;
                if tie {
                    let mut all = verdict.tied.clone();
                    all.push(verdict.winner.clone());
                    all.sort();
                    conflicts.push(format!(
                        "{} {object_name} is selected as specifically by Placements {}; {} (the oldest) places it",
                        ar.kind,
                        all.join(", "),
                        verdict.winner
                    ));
                }
                if verdict.winner != name {
                    handed_over.insert(uid);
                    decisions.push(ObjectDecision {
                        api_version: ar.api_version.clone(),
                        kind: ar.kind.clone(),
                        name: object_name,
                        overridden_by: Some(verdict.winner),
                        ..Default::default()
                    });
                    continue;
                }
            }
            placing.insert(uid.clone());
            // Members whose API cannot take this object (Rule 5: checked per object).
            let manifest = member_manifest(&object, None);
            let mut incompatible: Vec<ClusterExclusion> = Vec::new();
            let candidates: Vec<Candidate> = selection
                .candidates
                .iter()
                .filter(|c| {
                    let verdict = member_schemas
                        .get(c.cluster.as_str())
                        .map_or(Ok(()), |schema| schema.check(&manifest));
                    match verdict {
                        Ok(()) => true,
                        Err(why) => {
                            object_excluded.insert((uid.clone(), c.cluster.clone()));
                            incompatible.push(ClusterExclusion {
                                cluster: c.cluster.clone(),
                                reason: why.reason,
                                message: Some(why.message),
                            });
                            false
                        }
                    }
                })
                .cloned()
                .collect();
            let divisible = ar.kind == "Deployment"
                && spec.replica_scheduling.type_ == ReplicaSchedulingType::Divided;
            let division: Division = if divisible {
                let total = object.data["spec"]["replicas"]
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(1);
                let previous: Division = existing
                    .iter()
                    .filter(|w| w.labels().get(labels::SOURCE_UID) == Some(&uid))
                    // A copy being removed no longer counts: a member coming back after its
                    // replicas moved does not take them back unless asked (rebalanceOnJoin).
                    .filter(|w| w.metadata.deletion_timestamp.is_none())
                    .filter_map(|w| Some((cluster_of(w)?, work_replicas(w)?)))
                    .collect();
                match divide(total, &candidates, &previous, spec.rebalance_on_join) {
                    Ok(d) => {
                        divisions.push((object.clone(), d.clone(), total));
                        d
                    }
                    Err(DivisionError::NoCandidates | DivisionError::ZeroWeight) => Division::new(),
                }
            } else {
                // A copy everywhere, except that a held member keeps only the copy it has.
                candidates
                    .iter()
                    .filter(|c| !c.held || has_copy(&uid, &c.cluster))
                    .map(|c| (c.cluster.clone(), 0))
                    .collect()
            };
            let mut excluded = exclusions(&selection, &held, &division);
            excluded.extend(incompatible);
            let mut decision = ObjectDecision {
                api_version: ar.api_version.clone(),
                kind: ar.kind.clone(),
                name: object.name_any(),
                excluded,
                ..Default::default()
            };
            // Scaled to 0, a Deployment keeps its copies, at 0 replicas, so that the members
            // agree with the hub and scaling up again reuses them.
            let scaled_to_zero = divisible && object.data["spec"]["replicas"].as_u64() == Some(0);
            for (cluster, n) in &division {
                if divisible && *n == 0 && !(scaled_to_zero && has_copy(&uid, cluster)) {
                    continue;
                }
                let work = render(&object, cluster, divisible.then_some(*n), &name, spec)?;
                desired.insert((uid.clone(), cluster.clone()), work);
                decision.clusters.push(ClusterDecision {
                    cluster: cluster.clone(),
                    replicas: divisible.then(|| i32::try_from(*n).unwrap_or(i32::MAX)),
                    ..Default::default()
                });
            }
            if spec.follow_references {
                let runs_on = decision.clusters.iter().map(|c| c.cluster.clone());
                for reference in references(&object.data) {
                    followed
                        .entry(reference)
                        .or_default()
                        .extend(runs_on.clone());
                }
            }
            decisions.push(decision);
        }
    }

    // What the placed workloads refer to follows them to their members, unless a Placement
    // selects it (then that Placement places it).
    let mut missing: Vec<String> = Vec::new();
    for (reference, clusters) in followed {
        let (g, v, k, p) = reference.kind.resource();
        let ar = resource(g, v, k, p);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
        let Some(object) = api.get_opt(&reference.name).await? else {
            missing.push(format!("{k} {}", reference.name));
            continue;
        };
        let selectable = Selectable {
            api_version: &ar.api_version,
            kind: &ar.kind,
            name: &reference.name,
            labels: object.labels(),
        };
        // A member has its own (its root CA bundle, a token of its own); never the hub's.
        if object.metadata.deletion_timestamp.is_some()
            || made_by_kubernetes(&ar.api_version, &ar.kind, &object)
            || winner(&neighbours, &selectable).is_some()
        {
            continue;
        }
        let object = typed(object, &ar);
        let uid = object.metadata.uid.clone().unwrap_or_default();
        // It follows a workload this Placement places: its copies stay while the workload's do.
        placing.insert(uid.clone());
        let mut decision = ObjectDecision {
            api_version: ar.api_version.clone(),
            kind: ar.kind.clone(),
            name: reference.name.clone(),
            ..Default::default()
        };
        for cluster in clusters {
            desired.insert(
                (uid.clone(), cluster.clone()),
                render(&object, &cluster, None, &name, spec)?,
            );
            decision.clusters.push(ClusterDecision {
                cluster,
                ..Default::default()
            });
        }
        decisions.push(decision);
    }

    // A copy whose Work has another name (written before names held the namespace and group)
    // is renamed by handing over: the new Work names the old one, the syncer lets it take over
    // the member objects, and the old Work goes once the new one is applied.
    let replaced: Vec<(String, (String, String))> = existing
        .iter()
        .filter(|w| w.metadata.deletion_timestamp.is_none())
        .filter_map(|w| {
            let key = copy_key(w)?;
            let other_name = desired.get(&key)?.name_any() != w.name_any();
            other_name.then(|| (w.name_any(), key))
        })
        .collect();
    for (old, key) in replaced {
        if let Some(work) = desired.get_mut(&key) {
            work.annotations_mut()
                .insert(annotations::REPLACES.to_string(), old);
        }
    }
    // The wanted Work of a copy whose Work has another name.
    let renamed = |w: &Work| -> Option<&Work> {
        desired
            .get(&copy_key(w)?)
            .filter(|d| d.name_any() != w.name_any())
    };

    let params = PatchParams::apply(field_managers::SPLITTER).force();
    // The Works as the hub has them now: what the writes return for the wanted ones (their new
    // generation, and their status at that moment), the cache for the others.
    let mut current: Vec<Work> = Vec::with_capacity(desired.len());
    let mut failed_writes: Vec<String> = Vec::new();
    for work in desired.values() {
        let api: Api<Work> = Api::namespaced(client.clone(), &work.namespace().unwrap_or_default());
        let mut value = serde_json::to_value(work)?;
        value["apiVersion"] = json!(Work::api_version(&()));
        value["kind"] = json!(Work::kind(&()));
        // One Work that cannot be written (too large, refused by an admission policy) must not
        // stall the tenant's other objects: it is reported, the rest goes on.
        match api
            .patch(&work.name_any(), &params, &Patch::Apply(&value))
            .await
        {
            Ok(written) => current.push(written),
            Err(e) => {
                let a = work.annotations();
                let source = |k: &str| a.get(k).cloned().unwrap_or_default();
                failed_writes.push(format!(
                    "{} {} on {}: {}",
                    source(annotations::SOURCE_KIND),
                    source(annotations::SOURCE_NAME),
                    work.cluster_name().unwrap_or_default(),
                    match &e {
                        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
                        other => other.to_string(),
                    }
                ));
            }
        }
    }
    let written: BTreeSet<(String, String)> = current
        .iter()
        .map(|w| (w.namespace().unwrap_or_default(), w.name_any()))
        .collect();
    current.extend(
        state
            .works_of(&name, &ns)
            .into_iter()
            .filter(|w| !written.contains(&(w.namespace().unwrap_or_default(), w.name_any())))
            // A copy's Work under its old name is not a copy of its own.
            .filter(|w| renamed(w).is_none()),
    );

    // Stale Works: gone objects and no-longer-wanted copies go; a copy on a member that failed
    // stays until every wanted copy of that object is available (or its Cluster is gone).
    // Available means for the Work's current spec: a copy just given more replicas is not
    // available until its member has them.
    for work in &existing {
        let uid = work
            .labels()
            .get(labels::SOURCE_UID)
            .cloned()
            .unwrap_or_default();
        let Some(cluster) = cluster_of(work) else {
            continue;
        };
        // A Cluster being deleted: registration decides what becomes of its Works.
        let cluster_deleting = state
            .clusters
            .get(&ObjectRef::new(&cluster))
            .is_some_and(|c| c.metadata.deletion_timestamp.is_some());
        // Written in this pass (for another object of the same name, e.g. after `kubectl replace
        // --force`): the cached copy of it is stale.
        let rewritten = written.contains(&(work.namespace().unwrap_or_default(), work.name_any()));
        // Under its old name: it goes once the Work that replaces it is applied.
        let replacement_pending = renamed(work).is_some_and(|new| {
            !current.iter().any(|c| {
                c.name_any() == new.name_any()
                    && cluster_of(c) == Some(cluster.clone())
                    && holds_now(c, conditions::APPLIED)
            })
        });
        let under_its_name = desired
            .get(&(uid.clone(), cluster.clone()))
            .is_some_and(|d| d.name_any() == work.name_any());
        if rewritten
            || under_its_name
            || replacement_pending
            || handed_over.contains(&uid)
            || unreadable.iter().any(|t| t.places(work))
            || cluster_deleting
        {
            continue;
        }
        let object_wanted = desired.keys().any(|(u, _)| *u == uid);
        if !object_wanted && placing.contains(&uid) {
            // Still selected, but no member can take it now (none eligible, or none whose API
            // can): what runs stays where it runs — never deleted for want of a better place.
            stranded.insert(uid);
            continue;
        }
        // A member that failed, or whose API can no longer take the object, keeps its copy
        // until the replacements are available.
        let member_failed = (!eligible.contains(&cluster)
            && state.clusters.get(&ObjectRef::new(&cluster)).is_some())
            || object_excluded.contains(&(uid.clone(), cluster.clone()));
        if object_wanted && member_failed {
            // Every wanted copy exists and is available for its current spec.
            let replacements_ready = desired.keys().filter(|(u, _)| *u == uid).all(|(u, c)| {
                current.iter().any(|w| {
                    w.labels().get(labels::SOURCE_UID) == Some(u)
                        && w.cluster_name() == Some(c.as_str())
                        && holds_now(w, conditions::AVAILABLE)
                })
            });
            if !replacements_ready {
                continue;
            }
        }
        let api: Api<Work> = Api::namespaced(client.clone(), &names::cluster_namespace(&cluster));
        // Only the Work this decision was made on: changed since (409), the next pass decides.
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: work.metadata.uid.clone(),
                resource_version: work.metadata.resource_version.clone(),
            }),
            ..DeleteParams::background()
        };
        match api.delete(&work.name_any(), &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }

    // What each copy reports, for the decisions.
    for decision in &mut decisions {
        let kind = decision.kind.clone();
        let object_name = decision.name.clone();
        for c in &mut decision.clusters {
            let work = current.iter().find(|w| {
                w.cluster_name() == Some(c.cluster.as_str())
                    && w.annotations().get(annotations::SOURCE_KIND) == Some(&kind)
                    && w.annotations().get(annotations::SOURCE_NAME) == Some(&object_name)
            });
            c.applied = work.map(|w| work_condition(w, conditions::APPLIED));
            c.available = work.map(|w| work_condition(w, conditions::AVAILABLE));
        }
    }

    // Aggregated status of every divided Deployment, written when it says something new.
    let now = Timestamp::now().to_string();
    for (object, division, total) in &divisions {
        let uid = object.metadata.uid.clone().unwrap_or_default();
        let copies: Vec<_> = current
            .iter()
            .filter(|w| w.labels().get(labels::SOURCE_UID) == Some(&uid))
            .filter_map(|w| {
                let c = cluster_of(w)?;
                // Copies of the division; at 0 replicas only when the Deployment is at 0.
                division.get(&c).filter(|n| **n > 0 || *total == 0)?;
                Some(copy_of(w, &c, object.metadata.generation))
            })
            .collect();
        let old = object.data.get("status");
        let mut status = deployment_status(
            object.metadata.generation,
            *total,
            max_unavailable(&object.data["spec"], *total),
            &copies,
            division,
            &now,
        );
        keep_condition_times(&mut status, old);
        if old.is_some_and(|o| same_ignoring_times(o, &status)) {
            continue;
        }
        let placed_before = old.and_then(|o| condition_message(o, conditions::PLACED));
        let placed_now = condition_message(&status, conditions::PLACED);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar_deployment());
        api.patch_status(
            &object.name_any(),
            &params,
            &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "Deployment", "status": status})),
        )
        .await?;
        if placed_now.is_some() && placed_before != placed_now {
            let message = placed_now.unwrap_or_default();
            let reference = object.object_ref(&ar_deployment());
            state
                .ctx
                .events
                .normal_ref(&reference, conditions::PLACED, "Place", message)
                .await;
        }
    }

    let status = placement_status(
        placement,
        &selection,
        decisions,
        &Findings {
            conflicts: &conflicts,
            missing: &missing,
            unsupported: &unsupported,
            unreadable: &unreadable,
            failed_writes: &failed_writes,
            removing: &removing(&current),
            stranded: stranded.len(),
        },
        &now,
    );
    let old = placement
        .status
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok());
    if old
        .as_ref()
        .is_none_or(|old| !same_ignoring_times(old, &status["status"]))
    {
        Api::<Placement>::namespaced(client, &ns)
            .patch_status(&name, &params, &Patch::Apply(&status))
            .await?;
        let message = |s: Option<&serde_json::Value>| {
            s.and_then(|s| condition_message(s, conditions::SCHEDULED))
        };
        let (before, after) = (message(old.as_ref()), message(Some(&status["status"])));
        if old.is_some() && before != after {
            // Which members take, keep or lose work changed: say so where users look.
            state
                .ctx
                .events
                .normal(
                    placement,
                    "Rescheduled",
                    "Place",
                    after.clone().unwrap_or_default(),
                )
                .await;
        }
        if (!unreadable.is_empty() || !failed_writes.is_empty()) && before != after {
            // What a user (or the admin) can fix: say so where they look.
            let reason = status["status"]["conditions"][0]["reason"]
                .as_str()
                .unwrap_or(reasons::TYPE_UNREADABLE)
                .to_string();
            let what: Vec<&str> = unreadable
                .iter()
                .map(|u| u.message.as_str())
                .chain(failed_writes.iter().map(String::as_str))
                .collect();
            state
                .ctx
                .events
                .warning(placement, &reason, "Place", what.join("; "))
                .await;
        }
        if !conflicts.is_empty() && before != after {
            state
                .ctx
                .events
                .warning(
                    placement,
                    reasons::PLACEMENT_CONFLICT,
                    "Place",
                    conflicts.join("; "),
                )
                .await;
        }
    }
    if !unreadable.is_empty() || !failed_writes.is_empty() {
        // Soon again: RBAC granted, discovery back or the refusal lifted, the Placement recovers
        // in seconds.
        return Ok(Action::requeue(UNREADABLE_RETRY));
    }
    Ok(Action::requeue(
        selection
            .recheck_after
            .map_or(RESYNC, |r| r.min(RESYNC) + Duration::from_secs(1)),
    ))
}

/// How soon a Placement with a type that cannot be read now is looked at again.
const UNREADABLE_RETRY: Duration = Duration::from_secs(5);

/// How often a Placement is looked at again without any change.
const RESYNC: Duration = Duration::from_secs(60);

/// How long a Placement waits after a change for more changes before it is looked at.
const DEBOUNCE: Duration = Duration::from_millis(500);

fn ar_deployment() -> ApiResource {
    resource("apps", "v1", "Deployment", "deployments")
}

/// The status of a Work's condition `type_` (Unknown when it has none).
fn work_condition(work: &Work, type_: &str) -> ConditionStatus {
    work.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
        .map_or(ConditionStatus::Unknown, |c| match c.status.as_str() {
            "True" => ConditionStatus::True,
            "False" => ConditionStatus::False,
            _ => ConditionStatus::Unknown,
        })
}

/// The selected members an object does not go to (or keeps only what it runs on), with why.
fn exclusions(
    selection: &Selection,
    held: &BTreeSet<&str>,
    division: &Division,
) -> Vec<ClusterExclusion> {
    let to = |e: &crate::eligibility::Excluded| ClusterExclusion {
        cluster: e.cluster.clone(),
        reason: e.reason.to_string(),
        message: Some(e.message.clone()),
    };
    selection
        .excluded
        .iter()
        .map(to)
        .chain(
            selection
                .held
                .iter()
                .filter(|e| held.contains(e.cluster.as_str()) && !division.contains_key(&e.cluster))
                .map(to),
        )
        .collect()
}

/// What a reconciliation found that the Placement's status reports.
struct Findings<'a> {
    /// Objects selected by equally specific Placements.
    conflicts: &'a [String],
    /// Objects placed workloads refer to that do not exist on the hub.
    missing: &'a [String],
    /// Resource selectors naming types the hub does not serve in namespaces.
    unsupported: &'a [String],
    /// Selected types the splitter cannot read now (their copies are kept).
    unreadable: &'a [Unreadable],
    /// Works the hub refused to store, as `kind name on member: why`.
    failed_writes: &'a [String],
    /// Copies being removed from their members (Works being deleted), as `kind/name on member`.
    removing: &'a [String],
    /// Selected objects no member can take now, left running where they run.
    stranded: usize,
}

/// The copies whose Works are being deleted: the syncer is removing them from their members
/// (or waiting for an unreachable member to answer).
fn removing(works: &[Work]) -> Vec<String> {
    works
        .iter()
        .filter(|w| w.metadata.deletion_timestamp.is_some())
        .map(|w| {
            format!(
                "{}/{} on {}",
                w.annotations()
                    .get(annotations::SOURCE_KIND)
                    .map_or("?", String::as_str),
                w.annotations()
                    .get(annotations::SOURCE_NAME)
                    .map_or("?", String::as_str),
                w.cluster_name().unwrap_or("?")
            )
        })
        .collect()
}

/// The Placement's status: `Scheduled`, how many objects it selects and the decision for each.
fn placement_status(
    placement: &Placement,
    selection: &Selection,
    decisions: Vec<ObjectDecision>,
    findings: &Findings<'_>,
    now: &str,
) -> serde_json::Value {
    let &Findings {
        conflicts,
        missing,
        unsupported,
        unreadable,
        failed_writes,
        removing,
        stranded,
    } = findings;
    let scheduled = !selection.candidates.is_empty();
    let works: usize = decisions.iter().map(|d| d.clusters.len()).sum();
    let overridden = decisions
        .iter()
        .filter(|d| d.overridden_by.is_some())
        .count();
    let mut message = format!(
        "{works} Work(s) for {} object(s) on {} member(s)",
        decisions.len() - overridden,
        selection.candidates.len()
    );
    if overridden > 0 {
        message.push_str(&format!(
            "; {overridden} selected object(s) placed by a more specific or older Placement"
        ));
    }
    for e in selection.held.iter().chain(&selection.excluded) {
        message.push_str(&format!("; {}: {}", e.cluster, e.message));
    }
    for c in conflicts {
        message.push_str(&format!("; {c}"));
    }
    if stranded > 0 {
        message.push_str(&format!(
            "; {stranded} selected object(s) no member can take now are left running where they run"
        ));
    }
    if !removing.is_empty() {
        let shown: Vec<&str> = removing.iter().take(5).map(String::as_str).collect();
        let more = removing.len().saturating_sub(shown.len());
        message.push_str(&format!(
            "; removing {} copy(ies) from members: {}{}",
            removing.len(),
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ));
    }
    if !missing.is_empty() {
        message.push_str(&format!(
            "; referred to by placed workloads but missing on the hub: {}",
            missing.join(", ")
        ));
    }
    if !unsupported.is_empty() {
        message = format!(
            "resource selectors name types the hub does not place: {}; {message}",
            unsupported.join(", ")
        );
    }
    if !unreadable.is_empty() {
        let what: Vec<&str> = unreadable.iter().map(|u| u.message.as_str()).collect();
        message = format!(
            "selected types cannot be read now, their copies are kept as they are: {}; {message}",
            what.join("; ")
        );
    }
    if !failed_writes.is_empty() {
        let shown: Vec<&str> = failed_writes.iter().take(5).map(String::as_str).collect();
        let more = failed_writes.len().saturating_sub(shown.len());
        message = format!(
            "{} Work(s) could not be written, the others were: {}{}; {message}",
            failed_writes.len(),
            shown.join("; "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        );
    }
    let reason = if unreadable.iter().any(|u| u.forbidden) {
        reasons::FORBIDDEN
    } else if !unreadable.is_empty() {
        reasons::TYPE_UNREADABLE
    } else if !failed_writes.is_empty() {
        reasons::WORK_WRITE_FAILED
    } else if !unsupported.is_empty() {
        reasons::UNSUPPORTED_TYPE
    } else if !scheduled {
        reasons::NO_ELIGIBLE_CLUSTER
    } else if !conflicts.is_empty() {
        reasons::PLACEMENT_CONFLICT
    } else {
        conditions::SCHEDULED
    };
    let ok =
        scheduled && unsupported.is_empty() && unreadable.is_empty() && failed_writes.is_empty();
    let mut status = json!({
        "conditions": [{
            "type": conditions::SCHEDULED,
            "status": if ok { "True" } else { "False" },
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
            "observedGeneration": placement.metadata.generation,
        }],
        "selectedObjects": decisions.len(),
        "decisions": decisions,
    });
    let old = placement
        .status
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok());
    keep_condition_times(&mut status, old.as_ref());
    json!({
        "apiVersion": Placement::api_version(&()),
        "kind": Placement::kind(&()),
        "status": status,
    })
}

/// The `message` of condition `type_` in a status object.
fn condition_message(status: &serde_json::Value, type_: &str) -> Option<String> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["message"].as_str())
        .map(str::to_string)
}

const TIME_FIELDS: [&str; 2] = ["lastTransitionTime", "lastUpdateTime"];

/// Carries the times of `old`'s conditions over to `new`'s: `lastTransitionTime` while the
/// status is the same, `lastUpdateTime` while nothing of the condition changed. A status that
/// says the same thing is then equal to the one written before.
fn keep_condition_times(new: &mut serde_json::Value, old: Option<&serde_json::Value>) {
    let Some(old_conditions) = old.and_then(|o| o["conditions"].as_array()) else {
        return;
    };
    let Some(conditions) = new["conditions"].as_array_mut() else {
        return;
    };
    for c in conditions {
        let Some(before) = old_conditions.iter().find(|o| o["type"] == c["type"]) else {
            continue;
        };
        if before["status"] != c["status"] {
            continue;
        }
        let unchanged = ["reason", "message"].iter().all(|k| before[k] == c[k]);
        for field in TIME_FIELDS {
            let keep = field == "lastTransitionTime" || unchanged;
            if keep && let Some(t) = before.get(field) {
                c[field] = t.clone();
            }
        }
    }
}

/// Whether two status objects are equal apart from condition times.
fn same_ignoring_times(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    fn strip(v: &serde_json::Value) -> serde_json::Value {
        let mut v = v.clone();
        if let Some(cs) = v["conditions"].as_array_mut() {
            for c in cs {
                if let Some(o) = c.as_object_mut() {
                    for f in TIME_FIELDS {
                        o.remove(f);
                    }
                }
            }
        }
        v
    }
    strip(a) == strip(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("no", "Reason")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn only_an_answer_that_the_type_is_not_served_proves_it_absent() {
        assert!(proves_absent(&api_error(404)));
        assert!(proves_absent(&kube::Error::Discovery(
            kube::error::DiscoveryError::MissingKind("Widget".into())
        )));
        for unknown in [
            api_error(403),
            api_error(500),
            api_error(503),
            api_error(429),
        ] {
            assert!(!proves_absent(&unknown), "{unknown}");
        }
        assert!(!proves_absent(&kube::Error::Discovery(
            kube::error::DiscoveryError::EmptyApiGroup("example.com".into())
        )));
    }

    #[test]
    fn a_forbidden_type_says_what_the_splitter_lacks_and_how_to_grant_it() {
        let u = Unreadable::new(
            "apps/v1",
            "StatefulSet",
            "list statefulsets in namespace shop",
            &api_error(403),
        );
        assert!(u.forbidden);
        assert!(
            u.message
                .contains("may not list statefulsets in namespace shop")
                && u.message.contains("splitter.extraRules"),
            "{}",
            u.message
        );
        let u = Unreadable::new(
            "example.com/v1",
            "Widget",
            "look the type up",
            &api_error(503),
        );
        assert!(!u.forbidden);
        assert!(
            u.message.contains("could not look the type up"),
            "{}",
            u.message
        );
        let work: Work = serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
            "metadata": {"name": "w", "annotations": {
                annotations::SOURCE_API_VERSION: "example.com/v1",
                annotations::SOURCE_KIND: "Widget"}},
            "spec": {"manifests": []}
        }))
        .expect("work");
        assert!(u.places(&work));
        assert!(!Unreadable::new("v1", "ConfigMap", "list", &api_error(503)).places(&work));
    }

    #[test]
    fn a_status_that_says_the_same_keeps_its_times_and_is_not_written_again() {
        let old = json!({"replicas": 3, "conditions": [
            {"type": "Available", "status": "True", "reason": "R", "message": "m",
             "lastTransitionTime": "t0", "lastUpdateTime": "t0"}]});
        let mut same = json!({"replicas": 3, "conditions": [
            {"type": "Available", "status": "True", "reason": "R", "message": "m",
             "lastTransitionTime": "t1", "lastUpdateTime": "t1"}]});
        keep_condition_times(&mut same, Some(&old));
        assert_eq!(same, old);
        assert!(same_ignoring_times(&old, &same));

        let mut reworded = json!({"replicas": 3, "conditions": [
            {"type": "Available", "status": "True", "reason": "R", "message": "m2",
             "lastTransitionTime": "t1", "lastUpdateTime": "t1"}]});
        keep_condition_times(&mut reworded, Some(&old));
        assert_eq!(reworded["conditions"][0]["lastTransitionTime"], "t0");
        assert_eq!(reworded["conditions"][0]["lastUpdateTime"], "t1");
        assert!(!same_ignoring_times(&old, &reworded));

        let mut flipped = json!({"conditions": [
            {"type": "Available", "status": "False", "lastTransitionTime": "t1"}]});
        keep_condition_times(&mut flipped, Some(&old));
        assert_eq!(flipped["conditions"][0]["lastTransitionTime"], "t1");
    }
}
