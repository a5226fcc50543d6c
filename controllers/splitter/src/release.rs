//! Release: the Works of Placements that no longer exist.
//!
//! Deleting a Placement (or ClusterPlacement) leaves its Works, so that a Placement created again
//! under the same name (`kubectl replace --force`) or another one that places the same objects
//! takes the member objects over as they are. A Work nobody takes over would be applied to its
//! member for ever, by nobody's will: its tenant can neither see nor delete it. So once a Work's
//! Placement has been gone for `--orphaned-work-grace`, the splitter releases it: it marks it
//! `deletePolicy: Orphan` and deletes it, and the syncer lets go of its member objects without
//! deleting them. The hub Secret with the data of its Secrets (see [`flotilla_api::work_data`])
//! goes with it (its owner); one that never got its Work (the Work's write was refused) is
//! deleted the same way.
//!
//! When a Work was first seen orphaned is kept on it ([`annotations::ORPHANED_SINCE`]), so a
//! restart does not start the clock again; a Placement of that name appearing removes it.
//! [`decide`] is pure; [`Releaser`] reads the caches, confirms with the hub that a Placement is
//! gone before acting on it (one that exists but does not decode is in no cache, and counts as
//! existing), and writes.

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use flotilla_api::{
    ClusterPlacement, Placement, Work, annotations, field_managers, labels, names, work_data,
};
use flotilla_runtime::{Context, Metrics};
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource, ResourceExt};
use prometheus::{IntCounterVec, Opts};
use serde_json::json;
use tokio::sync::Notify;

use crate::state::Scope;

/// The reason of the Event on a released Work.
pub const RELEASED: &str = "Released";

/// How often the Works are looked at without any change.
const TICK: Duration = Duration::from_secs(30);

/// The least time between two looks: a burst of changes makes one.
const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// A Placement by its namespace (empty: a ClusterPlacement) and name.
pub type PlacementKey = (String, String);

/// What an object to release is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Work,
    /// A hub Secret with the data of a Work's Secrets.
    DataSecret,
}

/// A Work, or a hub data Secret, as the caches have it: what [`decide`] reads of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub kind: Kind,
    /// Its hub namespace (`flotilla-cluster-<member>`).
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    /// The Placement it belongs to (its label, and the source namespace annotation).
    pub placement: Option<PlacementKey>,
    /// Its [`annotations::ORPHANED_SINCE`].
    pub orphaned_since: Option<String>,
    /// Being deleted already.
    pub deleting: bool,
    /// A data Secret that has an owner (its Work): it goes with its owner.
    pub owned: bool,
}

impl Candidate {
    fn of<K: Resource>(kind: Kind, o: &K) -> Self {
        let placement = o.labels().get(labels::PLACEMENT).and_then(|name| {
            let ns = o.annotations().get(annotations::SOURCE_NAMESPACE)?;
            Some((ns.clone(), name.clone()))
        });
        Self {
            kind,
            namespace: o.namespace().unwrap_or_default(),
            name: o.name_any(),
            uid: o.uid(),
            resource_version: o.resource_version(),
            placement,
            orphaned_since: o.annotations().get(annotations::ORPHANED_SINCE).cloned(),
            deleting: o.meta().deletion_timestamp.is_some(),
            owned: !o.owner_references().is_empty(),
        }
    }

    pub fn of_work(work: &Work) -> Self {
        Self {
            // A Work's ownerReferences (none that the splitter sets) say nothing here.
            owned: false,
            ..Self::of(Kind::Work, work)
        }
    }

    pub fn of_data_secret(secret: &PartialObjectMeta<Secret>) -> Self {
        Self::of(Kind::DataSecret, secret)
    }

    /// The member it is for.
    fn cluster(&self) -> Option<&str> {
        names::cluster_from_namespace(&self.namespace)
    }
}

/// Whose objects a splitter may release: those of the Placements it serves, on the Clusters it
/// serves. Two splitters that share a hub never release each other's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Served {
    /// The namespaces whose Placements it serves; `None`: every namespace.
    pub namespaces: Option<BTreeSet<String>>,
    /// Whether it serves every ClusterPlacement. With `--cluster-placement-selector` it serves
    /// some, and a deleted one's labels are not known: none is released.
    pub cluster_placements: bool,
    /// The Clusters it serves (its `--cluster-selector`).
    pub clusters: BTreeSet<String>,
}

impl Served {
    /// What a controller of `scope` serves, with `--cluster-placement-selector`
    /// `cluster_placement_selector` (the Clusters are filled in from its cache).
    pub fn of(scope: Scope<'_>, cluster_placement_selector: &str) -> Self {
        let every_cluster_placement = cluster_placement_selector.trim().is_empty();
        let (namespaces, cluster_placements) = match scope {
            Scope::Everything => (None, every_cluster_placement),
            Scope::Namespaces => (None, false),
            Scope::Namespace(ns) => (Some([ns.to_string()].into()), false),
            Scope::ClusterPlacements => (Some(BTreeSet::new()), every_cluster_placement),
        };
        Self {
            namespaces,
            cluster_placements,
            clusters: BTreeSet::new(),
        }
    }

    fn serves(&self, c: &Candidate) -> bool {
        let Some((ns, _)) = &c.placement else {
            return false;
        };
        let placement = if ns.is_empty() {
            self.cluster_placements
        } else {
            self.namespaces.as_ref().is_none_or(|n| n.contains(ns))
        };
        placement && c.cluster().is_some_and(|c| self.clusters.contains(c))
    }
}

/// What one look reads.
pub struct View<'a> {
    pub now: Timestamp,
    /// `--orphaned-work-grace`; zero: nothing is released.
    pub grace: Duration,
    pub served: &'a Served,
    /// The Placements that exist: in the cache, or found by a read of the hub.
    pub existing: &'a BTreeSet<PlacementKey>,
    /// The Placements the hub could not be asked about now: their objects stay as they are.
    pub unknown: &'a BTreeSet<PlacementKey>,
    pub candidates: &'a [Candidate],
}

/// What to do with one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Its Placement is gone, and it is not marked yet: mark it orphaned from now.
    Mark,
    /// Its Placement exists (again): the mark goes.
    Unmark,
    /// Its Placement has been gone since `since`, for the grace period: release it.
    Release { since: Timestamp },
}

/// What [`decide`] decided.
#[derive(Debug, Default, PartialEq)]
pub struct Decisions<'a> {
    pub steps: Vec<(&'a Candidate, Step)>,
    /// When the next release is due, if one will be.
    pub next: Option<Duration>,
}

/// Whether `c`'s Placement is gone: what [`Step::Mark`] and [`Step::Release`] act on.
pub fn assumes_gone(step: &Step) -> bool {
    !matches!(step, Step::Unmark)
}

/// What to do with each object of `view`: only objects the splitter serves (see [`Served`]),
/// not being deleted, of Placements known to exist or known to be gone; a data Secret only
/// while it has no owner.
pub fn decide<'a>(view: &View<'a>) -> Decisions<'a> {
    let mut out = Decisions::default();
    let mut due = |left: Duration| {
        out.next = Some(out.next.map_or(left, |n: Duration| n.min(left)));
    };
    let mut steps = Vec::new();
    for c in view.candidates {
        if c.deleting || !view.served.serves(c) {
            continue;
        }
        let Some(placement) = &c.placement else {
            continue;
        };
        if view.unknown.contains(placement) {
            continue;
        }
        let orphaned = !view.existing.contains(placement) && !c.owned;
        if !orphaned {
            if c.orphaned_since.is_some() {
                steps.push((c, Step::Unmark));
            }
            continue;
        }
        if view.grace.is_zero() {
            continue;
        }
        // A mark that cannot be read starts the clock again.
        match c
            .orphaned_since
            .as_deref()
            .and_then(|s| s.parse::<Timestamp>().ok())
        {
            None => {
                steps.push((c, Step::Mark));
                due(view.grace);
            }
            Some(since) => {
                // A mark from the future (a clock ahead) counts from now.
                let gone_for =
                    Duration::try_from(view.now.duration_since(since)).unwrap_or_default();
                if gone_for >= view.grace {
                    steps.push((c, Step::Release { since }));
                } else {
                    due(view.grace - gone_for);
                }
            }
        }
    }
    out.steps = steps;
    out
}

/// Whether a change of `work` may be one for the releaser to look at: it is marked, or its
/// Placement is not in `placements`.
pub fn concerns(work: &Work, placements: &Store<Placement>) -> bool {
    if work.annotations().contains_key(annotations::ORPHANED_SINCE) {
        return true;
    }
    let Some((ns, name)) = Candidate::of_work(work).placement else {
        return false;
    };
    let mut key = ObjectRef::<Placement>::new(&name);
    if !ns.is_empty() {
        key = key.within(&ns);
    }
    placements.get(&key).is_none()
}

/// The counter of released objects, registered once per process.
fn released_total(metrics: &Metrics) -> Option<&'static IntCounterVec> {
    static COUNTER: OnceLock<Option<IntCounterVec>> = OnceLock::new();
    COUNTER
        .get_or_init(|| {
            let counter = IntCounterVec::new(
                Opts::new(
                    format!("{}_released_total", metrics.prefix()),
                    "Objects of deleted Placements released after --orphaned-work-grace, by \
                     object (work: a Work, its member objects left in place; secret: a hub \
                     Secret with the data of a Work's Secrets that had no Work).",
                ),
                &["object"],
            )
            .and_then(|c| {
                metrics.registry().register(Box::new(c.clone()))?;
                Ok(c)
            });
            match counter {
                Ok(c) => {
                    for object in ["work", "secret"] {
                        c.with_label_values(&[object]);
                    }
                    Some(c)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not register the released objects counter");
                    None
                }
            }
        })
        .as_ref()
}

/// Releases the Works (and ownerless data Secrets) of deleted Placements of one controller's
/// scope: looks every 30 s, and soon after `wake`.
pub struct Releaser {
    pub ctx: Context,
    pub grace: Duration,
    /// What the controller serves (its Clusters are read from `clusters` at each look).
    pub served: Served,
    pub placements: Store<Placement>,
    pub clusters: crate::watches::Clusters,
    pub works: Store<Work>,
    pub data_secrets: Store<PartialObjectMeta<Secret>>,
    pub wake: Arc<Notify>,
}

impl Releaser {
    /// Runs until `ctx.shutdown`; does nothing with a grace of zero.
    pub async fn run(self) {
        if self.grace.is_zero() {
            return;
        }
        let shutdown = self.ctx.shutdown.clone();
        // Never on a partial view: not before the Placements are listed.
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = flotilla_runtime::cache::wait_until_synced(&self.placements) => {}
        }
        let counter = released_total(&self.ctx.metrics);
        loop {
            let next = self.look(counter).await;
            // A little after the next release is due (its time is rounded to the second).
            let sleep = next.map_or(TICK, |n| (n + Duration::from_millis(500)).min(TICK));
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(sleep.max(MIN_INTERVAL)) => {}
                _ = self.wake.notified() => {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(MIN_INTERVAL) => {}
                    }
                }
            }
        }
    }

    /// One look: decides on what the caches say, asks the hub about the Placements it would act
    /// on as gone, and acts on what is decided then. When to look again, if sooner than a tick.
    async fn look(&self, counter: Option<&IntCounterVec>) -> Option<Duration> {
        let works = self.works.state();
        let secrets = self.data_secrets.state();
        let candidates: Vec<Candidate> = works
            .iter()
            .map(|w| Candidate::of_work(w))
            .chain(secrets.iter().map(|s| Candidate::of_data_secret(s)))
            .collect();
        let served = Served {
            clusters: self
                .clusters
                .selected()
                .iter()
                .map(|c| c.name_any())
                .collect(),
            ..self.served.clone()
        };
        let mut existing: BTreeSet<PlacementKey> = self
            .placements
            .state()
            .iter()
            .map(|p| (p.namespace().unwrap_or_default(), p.name_any()))
            .collect();
        let mut unknown = BTreeSet::new();
        let now = Timestamp::now();
        let suspects: BTreeSet<PlacementKey> = decide(&View {
            now,
            grace: self.grace,
            served: &served,
            existing: &existing,
            unknown: &unknown,
            candidates: &candidates,
        })
        .steps
        .iter()
        .filter(|(_, step)| assumes_gone(step))
        .filter_map(|(c, _)| c.placement.clone())
        .collect();
        // The cache may be behind, and leaves out a Placement that does not decode: the hub
        // says whether each is gone.
        for key in suspects {
            match self.exists(&key).await {
                Ok(true) => {
                    existing.insert(key);
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(namespace = %key.0, placement = %key.1, error = %e,
                        "could not tell whether a Placement exists; its Works stay as they are");
                    unknown.insert(key);
                }
            }
        }
        let view = View {
            now,
            grace: self.grace,
            served: &served,
            existing: &existing,
            unknown: &unknown,
            candidates: &candidates,
        };
        let decisions = decide(&view);
        for (c, step) in &decisions.steps {
            let done = match (step, c.kind) {
                (Step::Mark, _) => self.mark(c, Some(&second(now))).await,
                (Step::Unmark, _) => {
                    tracing::info!(kind = ?c.kind, namespace = %c.namespace, name = %c.name,
                        placement = %describe(c), "its Placement exists again: no longer orphaned");
                    self.mark(c, None).await
                }
                (Step::Release { since }, Kind::Work) => self.release_work(c, *since).await,
                (Step::Release { since }, Kind::DataSecret) => self.release_secret(c, *since).await,
            };
            match done {
                Ok(true) => {
                    if let (Step::Release { .. }, Some(counter)) = (step, counter) {
                        let object = match c.kind {
                            Kind::Work => "work",
                            Kind::DataSecret => "secret",
                        };
                        counter.with_label_values(&[object]).inc();
                    }
                }
                Ok(false) => {}
                // Changed since (409), gone (404): the next look decides again.
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => tracing::warn!(namespace = %c.namespace, name = %c.name,
                    step = ?step, error = %e, "could not release an object of a deleted Placement"),
            }
        }
        decisions.next
    }

    /// Whether Placement (or ClusterPlacement) `key` exists, as the hub says now (its metadata:
    /// one that does not decode exists too).
    async fn exists(&self, (ns, name): &PlacementKey) -> Result<bool, kube::Error> {
        let client = self.ctx.client.clone();
        Ok(if ns.is_empty() {
            Api::<ClusterPlacement>::all(client)
                .get_metadata_opt(name)
                .await?
                .is_some()
        } else {
            Api::<Placement>::namespaced(client, ns)
                .get_metadata_opt(name)
                .await?
                .is_some()
        })
    }

    /// The API of `c`'s kind in its namespace, read as it comes (a Work that does not decode
    /// is released too).
    fn api(&self, c: &Candidate) -> Api<DynamicObject> {
        let resource = match c.kind {
            Kind::Work => ApiResource::erase::<Work>(&()),
            Kind::DataSecret => ApiResource::erase::<Secret>(&()),
        };
        Api::namespaced_with(self.ctx.client.clone(), &c.namespace, &resource)
    }

    /// Sets `c`'s [`annotations::ORPHANED_SINCE`] to `since`, or removes it (`None`), if `c` is
    /// still as decided on.
    async fn mark(&self, c: &Candidate, since: Option<&str>) -> Result<bool, kube::Error> {
        let patch = json!({"metadata": {
            "resourceVersion": c.resource_version,
            "annotations": {annotations::ORPHANED_SINCE: since},
        }});
        self.api(c)
            .patch_metadata(&c.name, &splitter_params(), &Patch::Merge(&patch))
            .await?;
        if let Some(since) = since {
            tracing::info!(kind = ?c.kind, namespace = %c.namespace, name = %c.name,
                placement = %describe(c), %since, grace = ?self.grace,
                "its Placement is gone: released after the grace period unless one of that name appears");
        }
        Ok(true)
    }

    /// Marks Work `c` `deletePolicy: Orphan` and deletes it, if it is still as decided on: the
    /// syncer lets go of its member objects without deleting them.
    async fn release_work(&self, c: &Candidate, since: Timestamp) -> Result<bool, kube::Error> {
        let api = self.api(c);
        let patch = json!({
            "metadata": {"resourceVersion": c.resource_version},
            "spec": {"deletePolicy": "Orphan"},
        });
        let orphan = api
            .patch(&c.name, &splitter_params(), &Patch::Merge(&patch))
            .await?;
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: c.uid.clone(),
                resource_version: orphan.resource_version(),
            }),
            ..DeleteParams::background()
        };
        api.delete(&c.name, &params).await?;
        let placement = describe(c);
        let cluster = c.cluster().unwrap_or_default();
        tracing::info!(namespace = %c.namespace, work = %c.name, %placement, %since,
            "released a Work of a deleted Placement; its member objects are left in place");
        let reference = ObjectReference {
            api_version: Some(Work::api_version(&()).into_owned()),
            kind: Some(Work::kind(&()).into_owned()),
            namespace: Some(c.namespace.clone()),
            name: Some(c.name.clone()),
            uid: c.uid.clone(),
            ..ObjectReference::default()
        };
        self.ctx
            .events
            .normal_ref(
                &reference,
                RELEASED,
                "Release",
                format!(
                    "{placement} has been gone since {since} (--orphaned-work-grace {:?}): \
                     the Work is released (deletePolicy Orphan, then deleted) and its objects \
                     in member {cluster} are left in place, unmanaged",
                    self.grace
                ),
            )
            .await;
        Ok(true)
    }

    /// Deletes data Secret `c`, if it still has no owner and is of the type the splitter
    /// writes.
    async fn release_secret(&self, c: &Candidate, since: Timestamp) -> Result<bool, kube::Error> {
        let secrets: Api<Secret> = Api::namespaced(self.ctx.client.clone(), &c.namespace);
        let Some(now) = secrets.get_opt(&c.name).await? else {
            return Ok(false);
        };
        let ours = now.uid() == c.uid
            && now.owner_references().is_empty()
            && now.type_.as_deref() == Some(work_data::SECRET_TYPE)
            && now.labels().get(labels::WORK_DATA).map(String::as_str)
                == Some(labels::WORK_DATA_VALUE);
        if !ours {
            return Ok(false);
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: now.uid(),
                resource_version: now.resource_version(),
            }),
            ..DeleteParams::background()
        };
        secrets.delete(&c.name, &params).await?;
        tracing::info!(namespace = %c.namespace, secret = %c.name, placement = %describe(c),
            %since, "deleted a hub data Secret without a Work, of a deleted Placement");
        Ok(true)
    }
}

/// `Placement <namespace>/<name>` or `ClusterPlacement <name>`: the Placement of `c`.
fn describe(c: &Candidate) -> String {
    match &c.placement {
        Some((ns, name)) if ns.is_empty() => format!("ClusterPlacement {name}"),
        Some((ns, name)) => format!("Placement {ns}/{name}"),
        None => "no Placement".into(),
    }
}

/// `now`, to the second, as the mark says it.
fn second(now: Timestamp) -> String {
    Timestamp::from_second(now.as_second())
        .unwrap_or(now)
        .to_string()
}

fn splitter_params() -> PatchParams {
    PatchParams {
        field_manager: Some(field_managers::SPLITTER.into()),
        ..PatchParams::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(600);

    fn now() -> Timestamp {
        "2030-01-01T12:00:00Z".parse().expect("a time")
    }

    fn ago(seconds: i64) -> String {
        Timestamp::from_second(now().as_second() - seconds)
            .expect("a time")
            .to_string()
    }

    fn work(ns: &str, placement: &str, cluster: &str) -> Candidate {
        Candidate {
            kind: Kind::Work,
            namespace: names::cluster_namespace(cluster),
            name: format!("configmap-{ns}-{placement}-0"),
            uid: Some("uid".into()),
            resource_version: Some("1".into()),
            placement: Some((ns.into(), placement.into())),
            orphaned_since: None,
            deleting: false,
            owned: false,
        }
    }

    fn marked(mut c: Candidate, since: &str) -> Candidate {
        c.orphaned_since = Some(since.into());
        c
    }

    fn served() -> Served {
        Served {
            namespaces: None,
            cluster_placements: true,
            clusters: ["m1".to_string(), "m2".to_string()].into(),
        }
    }

    fn keys(keys: &[(&str, &str)]) -> BTreeSet<PlacementKey> {
        keys.iter()
            .map(|(ns, n)| (ns.to_string(), n.to_string()))
            .collect()
    }

    /// The steps for `candidates` with Placements `existing` (and `served`, `GRACE`).
    fn steps_with(
        served: &Served,
        existing: &[(&str, &str)],
        unknown: &[(&str, &str)],
        grace: Duration,
        candidates: &[Candidate],
    ) -> (Vec<Step>, Option<Duration>) {
        let (existing, unknown) = (keys(existing), keys(unknown));
        let view = View {
            now: now(),
            grace,
            served,
            existing: &existing,
            unknown: &unknown,
            candidates,
        };
        let d = decide(&view);
        (d.steps.into_iter().map(|(_, s)| s).collect(), d.next)
    }

    fn steps(existing: &[(&str, &str)], candidates: &[Candidate]) -> (Vec<Step>, Option<Duration>) {
        steps_with(&served(), existing, &[], GRACE, candidates)
    }

    #[test]
    fn a_work_of_an_existing_placement_is_left_alone() {
        assert_eq!(
            steps(&[("shop", "web")], &[work("shop", "web", "m1")]),
            (vec![], None)
        );
    }

    #[test]
    fn a_work_first_seen_orphaned_is_marked_and_due_after_the_grace_period() {
        assert_eq!(
            steps(&[("shop", "other")], &[work("shop", "web", "m1")]),
            (vec![Step::Mark], Some(GRACE))
        );
        // A mark that does not read as a time starts the clock again.
        assert_eq!(
            steps(&[], &[marked(work("shop", "web", "m1"), "yesterday")]),
            (vec![Step::Mark], Some(GRACE))
        );
    }

    #[test]
    fn a_marked_work_waits_out_the_grace_period_then_is_released() {
        let waiting = marked(work("shop", "web", "m1"), &ago(60));
        assert_eq!(
            steps(&[], &[waiting]),
            (vec![], Some(GRACE - Duration::from_secs(60)))
        );
        for gone_for in [600, 601, 86_400] {
            let due = marked(work("shop", "web", "m1"), &ago(gone_for));
            let since = ago(gone_for).parse().expect("a time");
            assert_eq!(
                steps(&[], &[due]),
                (vec![Step::Release { since }], None),
                "gone for {gone_for}s"
            );
        }
        // A mark from the future counts from now.
        let ahead = marked(work("shop", "web", "m1"), &ago(-3600));
        assert_eq!(steps(&[], &[ahead]), (vec![], Some(GRACE)));
    }

    #[test]
    fn a_placement_that_appears_again_unmarks_its_works() {
        let since = ago(599);
        assert_eq!(
            steps(
                &[("shop", "web")],
                &[marked(work("shop", "web", "m1"), &since)]
            ),
            (vec![Step::Unmark], None)
        );
        // Even long past the grace period: it is no longer orphaned.
        assert_eq!(
            steps(
                &[("shop", "web")],
                &[marked(work("shop", "web", "m1"), &ago(10_000))]
            ),
            (vec![Step::Unmark], None)
        );
    }

    #[test]
    fn a_grace_of_zero_never_releases() {
        let candidates = [
            work("shop", "web", "m1"),
            marked(work("shop", "web", "m2"), &ago(10_000)),
        ];
        assert_eq!(
            steps_with(&served(), &[], &[], Duration::ZERO, &candidates),
            (vec![], None)
        );
    }

    #[test]
    fn what_the_splitter_does_not_serve_is_left_alone() {
        let old = ago(10_000);
        // Another splitter's namespace.
        let shop_only = Served {
            namespaces: Some(["shop".to_string()].into()),
            cluster_placements: false,
            ..served()
        };
        let theirs = marked(work("bank", "web", "m1"), &old);
        assert_eq!(
            steps_with(&shop_only, &[], &[], GRACE, &[theirs]),
            (vec![], None)
        );
        // A ClusterPlacement's, when it does not serve them all.
        let cluster_scoped = marked(work("", "crds", "m1"), &old);
        assert_eq!(
            steps_with(
                &shop_only,
                &[],
                &[],
                GRACE,
                std::slice::from_ref(&cluster_scoped)
            ),
            (vec![], None)
        );
        assert_eq!(
            steps(&[], &[cluster_scoped]).0,
            vec![Step::Release {
                since: old.parse().expect("a time")
            }]
        );
        // A Cluster outside its --cluster-selector.
        let elsewhere = marked(work("shop", "web", "m9"), &old);
        assert_eq!(steps(&[], &[elsewhere]), (vec![], None));
        // Nor one being deleted, one without a Placement, or one whose Placement the hub could
        // not be asked about.
        let mut deleting = marked(work("shop", "web", "m1"), &old);
        deleting.deleting = true;
        let mut nameless = marked(work("shop", "web", "m1"), &old);
        nameless.placement = None;
        let unknown = marked(work("shop", "web", "m1"), &old);
        assert_eq!(
            steps_with(
                &served(),
                &[],
                &[("shop", "web")],
                GRACE,
                &[deleting, nameless, unknown]
            ),
            (vec![], None)
        );
    }

    #[test]
    fn an_ownerless_data_secret_of_a_deleted_placement_is_released_an_owned_one_goes_with_its_work()
    {
        let secret = |owned: bool| Candidate {
            kind: Kind::DataSecret,
            owned,
            ..work("shop", "web", "m1")
        };
        assert_eq!(steps(&[], &[secret(false)]).0, vec![Step::Mark]);
        assert_eq!(steps(&[], &[secret(true)]), (vec![], None));
        let since = ago(600);
        assert_eq!(
            steps(&[], &[marked(secret(false), &since)]).0,
            vec![Step::Release {
                since: since.parse().expect("a time")
            }]
        );
        // Given to its Work since it was marked: the mark goes.
        assert_eq!(
            steps(&[], &[marked(secret(true), &since)]).0,
            vec![Step::Unmark]
        );
    }

    #[test]
    fn the_next_look_is_when_the_first_release_is_due() {
        let candidates = [
            marked(work("shop", "a", "m1"), &ago(500)),
            marked(work("shop", "b", "m1"), &ago(100)),
            work("shop", "c", "m1"),
        ];
        assert_eq!(
            steps(&[], &candidates),
            (vec![Step::Mark], Some(Duration::from_secs(100)))
        );
    }

    #[test]
    fn a_scope_serves_its_placements_and_every_cluster_placement_only_without_a_selector() {
        let of = |scope, selector| {
            let s = Served::of(scope, selector);
            (s.namespaces, s.cluster_placements)
        };
        assert_eq!(of(Scope::Everything, ""), (None, true));
        assert_eq!(of(Scope::Everything, "team=a"), (None, false));
        assert_eq!(of(Scope::Namespaces, ""), (None, false));
        assert_eq!(
            of(Scope::Namespace("shop"), ""),
            (Some(["shop".to_string()].into()), false)
        );
        assert_eq!(
            of(Scope::ClusterPlacements, ""),
            (Some(BTreeSet::new()), true)
        );
        assert_eq!(
            of(Scope::ClusterPlacements, "team=a"),
            (Some(BTreeSet::new()), false)
        );
    }

    #[test]
    fn a_candidate_reads_its_placement_mark_and_owner() {
        let mut w = Work::new(
            "w",
            flotilla_api::WorkSpec {
                manifests: vec![],
                delete_policy: flotilla_api::DeletePolicy::Delete,
                conflict_policy: flotilla_api::ConflictPolicy::Abort,
                ignore_fields: vec![],
                namespace_labels: Default::default(),
                allow_existing_namespaces: None,
                health: None,
            },
        );
        w.metadata.namespace = Some(names::cluster_namespace("m1"));
        w.metadata.labels = Some([(labels::PLACEMENT.to_string(), "web".to_string())].into());
        w.metadata.annotations = Some(
            [
                (
                    annotations::SOURCE_NAMESPACE.to_string(),
                    "shop".to_string(),
                ),
                (annotations::ORPHANED_SINCE.to_string(), ago(5)),
            ]
            .into(),
        );
        let c = Candidate::of_work(&w);
        assert_eq!(c.placement, Some(("shop".into(), "web".into())));
        assert_eq!(c.orphaned_since, Some(ago(5)));
        assert_eq!(c.cluster(), Some("m1"));
        assert!(!c.owned && !c.deleting);
        // A Work without its source namespace names no Placement.
        w.annotations_mut().remove(annotations::SOURCE_NAMESPACE);
        assert_eq!(Candidate::of_work(&w).placement, None);
    }
}
