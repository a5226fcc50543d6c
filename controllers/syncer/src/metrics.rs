//! The syncer's own metrics, per member cluster, and the bookkeeping behind its latencies.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `<prefix>_applies_total` | counter | `cluster`, `result` (`applied`, `unchanged` — nothing sent, the member object is as last applied —, `conflict`, `failed`) |
//! | `<prefix>_apply_errors_total` | counter | `cluster`, `category` (a condition reason) |
//! | `<prefix>_apply_latency_seconds` | histogram | `cluster`: a Work generation first seen → its objects written in the member |
//! | `<prefix>_status_latency_seconds` | histogram | `cluster`: a member object changed → the Work's status reflects it |
//! | `<prefix>_status_writes_total` | counter | `cluster`, `result` (`written`, `unchanged`) |
//! | `<prefix>_pending_member_changes` | gauge | `cluster`: Works with a member change not yet reconciled (the queue of member events) |
//! | `<prefix>_reconciles_in_flight` | gauge | `cluster` |
//! | `<prefix>_managed_objects` | gauge | `cluster`: objects applied and not deleted |
//! | `<prefix>_member_watches` | gauge | `cluster`: running watches (one per resource type) |

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use flotilla_api::Work;
use kube::runtime::reflector::ObjectRef;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

/// Latency buckets, in seconds: from 10 ms to a minute.
const LATENCY_BUCKETS: [f64; 13] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

/// The syncer's metrics, registered in the process's registry.
#[derive(Clone)]
pub struct SyncerMetrics {
    pub applies: IntCounterVec,
    pub apply_errors: IntCounterVec,
    pub apply_latency: HistogramVec,
    pub status_latency: HistogramVec,
    pub status_writes: IntCounterVec,
    pub pending_member_changes: IntGaugeVec,
    pub in_flight: IntGaugeVec,
    pub managed_objects: IntGaugeVec,
    pub member_watches: IntGaugeVec,
    pub member_requests: IntCounterVec,
}

impl SyncerMetrics {
    /// Creates the metrics, named `<prefix>_...`, and registers them in `registry`.
    pub fn register(registry: &Registry, prefix: &str) -> prometheus::Result<Self> {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(format!("{prefix}_{name}"), help), labels)
        };
        let gauge = |name: &str, help: &str| {
            IntGaugeVec::new(Opts::new(format!("{prefix}_{name}"), help), &["cluster"])
        };
        let histogram = |name: &str, help: &str| {
            HistogramVec::new(
                HistogramOpts::new(format!("{prefix}_{name}"), help)
                    .buckets(LATENCY_BUCKETS.to_vec()),
                &["cluster"],
            )
        };
        let metrics = Self {
            applies: counter(
                "applies_total",
                "Manifests applied to members, by result.",
                &["cluster", "result"],
            )?,
            apply_errors: counter(
                "apply_errors_total",
                "Manifests not applied, by category (the Applied condition's reason).",
                &["cluster", "category"],
            )?,
            apply_latency: histogram(
                "apply_latency_seconds",
                "From a Work generation first seen to its objects written in the member.",
            )?,
            status_latency: histogram(
                "status_latency_seconds",
                "From a change of a member object to the Work status reflecting it.",
            )?,
            status_writes: counter(
                "status_writes_total",
                "Work status updates, written or skipped because nothing changed.",
                &["cluster", "result"],
            )?,
            pending_member_changes: gauge(
                "pending_member_changes",
                "Works with a change in the member that is not reconciled yet.",
            )?,
            in_flight: gauge("reconciles_in_flight", "Work reconciliations running now.")?,
            managed_objects: gauge(
                "managed_objects",
                "Objects the syncer applied in the member and has not deleted.",
            )?,
            member_watches: gauge(
                "member_watches",
                "Running watches of applied objects in the member (one per resource type).",
            )?,
            member_requests: counter(
                "member_requests_total",
                "Requests sent to the member's apiserver (push mode), by verb: get (reads and \
                 lists), watch, create, patch, update, delete.",
                &["cluster", "verb"],
            )?,
        };
        registry.register(Box::new(metrics.applies.clone()))?;
        registry.register(Box::new(metrics.apply_errors.clone()))?;
        registry.register(Box::new(metrics.apply_latency.clone()))?;
        registry.register(Box::new(metrics.status_latency.clone()))?;
        registry.register(Box::new(metrics.status_writes.clone()))?;
        registry.register(Box::new(metrics.pending_member_changes.clone()))?;
        registry.register(Box::new(metrics.in_flight.clone()))?;
        registry.register(Box::new(metrics.managed_objects.clone()))?;
        registry.register(Box::new(metrics.member_watches.clone()))?;
        registry.register(Box::new(metrics.member_requests.clone()))?;
        Ok(metrics)
    }

    /// Unregistered metrics, for tests.
    #[cfg(test)]
    pub fn unregistered() -> Self {
        // Registering into a throw-away registry cannot fail for these fixed names.
        Self::register(&Registry::new(), "test").unwrap_or_else(|e| panic!("metrics: {e}"))
    }
}

/// The member cluster of a Work reference (`flotilla-cluster-<c>`).
fn cluster_of(work: &ObjectRef<Work>) -> String {
    work.namespace
        .as_deref()
        .and_then(flotilla_api::names::cluster_from_namespace)
        .unwrap_or_default()
        .to_string()
}

#[derive(Default)]
struct State {
    /// When a member change of each Work was first seen and not reconciled yet.
    member_changes: HashMap<ObjectRef<Work>, Instant>,
    /// The generation of each Work first seen, when, and whether its apply was measured.
    generations: HashMap<ObjectRef<Work>, (i64, Instant, bool)>,
    /// How many objects each Work has in its member.
    managed: HashMap<ObjectRef<Work>, i64>,
}

/// Per-Work timestamps and counts behind the latency and managed-object metrics.
pub struct Tracking {
    metrics: SyncerMetrics,
    state: Mutex<State>,
}

impl Tracking {
    pub fn new(metrics: SyncerMetrics) -> Self {
        Self {
            metrics,
            state: Mutex::default(),
        }
    }

    pub fn metrics(&self) -> &SyncerMetrics {
        &self.metrics
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A Work was seen by the hub watch: remember when each new generation arrived.
    pub fn work_seen(&self, work: &Work) {
        let Some(generation) = work.metadata.generation else {
            return;
        };
        let key = ObjectRef::from_obj(work);
        let mut state = self.lock();
        match state.generations.get(&key) {
            Some((g, _, _)) if *g == generation => {}
            _ => {
                state
                    .generations
                    .insert(key, (generation, Instant::now(), false));
            }
        }
    }

    /// The objects of generation `generation` of `work` were written to the member: observe
    /// the apply latency once per generation.
    pub fn applied(&self, work: &ObjectRef<Work>, generation: Option<i64>) {
        let mut state = self.lock();
        if let Some((g, since, measured)) = state.generations.get_mut(work)
            && Some(*g) == generation
            && !*measured
        {
            *measured = true;
            self.metrics
                .apply_latency
                .with_label_values(&[&cluster_of(work)])
                .observe(since.elapsed().as_secs_f64());
        }
    }

    /// An object of `work` changed in the member.
    pub fn member_changed(&self, work: ObjectRef<Work>) {
        let cluster = cluster_of(&work);
        let mut state = self.lock();
        if let std::collections::hash_map::Entry::Vacant(e) = state.member_changes.entry(work) {
            e.insert(Instant::now());
            self.metrics
                .pending_member_changes
                .with_label_values(&[&cluster])
                .inc();
        }
    }

    /// A reconciliation of `work` starts: takes the time of the oldest member change it covers.
    pub fn take_member_change(&self, work: &ObjectRef<Work>) -> Option<Instant> {
        let since = self.lock().member_changes.remove(work)?;
        self.metrics
            .pending_member_changes
            .with_label_values(&[&cluster_of(work)])
            .dec();
        Some(since)
    }

    /// The Work's status now reflects the member change seen at `since`.
    pub fn status_reflects(&self, work: &ObjectRef<Work>, since: Instant) {
        self.metrics
            .status_latency
            .with_label_values(&[&cluster_of(work)])
            .observe(since.elapsed().as_secs_f64());
    }

    /// `work` now has `count` objects in its member.
    pub fn set_managed(&self, work: &ObjectRef<Work>, count: usize) {
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        let before = self.lock().managed.insert(work.clone(), count).unwrap_or(0);
        self.metrics
            .managed_objects
            .with_label_values(&[&cluster_of(work)])
            .add(count - before);
    }

    /// `work` is gone (deleted, or its objects deleted or orphaned): forget it.
    pub fn forget(&self, work: &ObjectRef<Work>) {
        let cluster = cluster_of(work);
        let mut state = self.lock();
        state.generations.remove(work);
        if state.member_changes.remove(work).is_some() {
            self.metrics
                .pending_member_changes
                .with_label_values(&[&cluster])
                .dec();
        }
        if let Some(before) = state.managed.remove(work) {
            self.metrics
                .managed_objects
                .with_label_values(&[&cluster])
                .sub(before);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::WorkSpec;

    fn work(generation: i64) -> Work {
        let mut w = Work::new(
            "web",
            WorkSpec {
                manifests: vec![],
                delete_policy: Default::default(),
                conflict_policy: Default::default(),
                ignore_fields: vec![],
                namespace_labels: Default::default(),
                allow_existing_namespaces: None,
                health: None,
            },
        );
        w.metadata.namespace = Some("flotilla-cluster-m1".into());
        w.metadata.generation = Some(generation);
        w
    }

    #[test]
    fn apply_latency_is_observed_once_per_generation() {
        let t = Tracking::new(SyncerMetrics::unregistered());
        let w = work(1);
        let key = ObjectRef::from_obj(&w);
        t.work_seen(&w);
        t.applied(&key, Some(1));
        t.applied(&key, Some(1));
        let h = t.metrics().apply_latency.with_label_values(&["m1"]);
        assert_eq!(h.get_sample_count(), 1);
        t.work_seen(&work(2));
        t.applied(&key, Some(1));
        assert_eq!(h.get_sample_count(), 1, "an old generation is not measured");
        t.applied(&key, Some(2));
        assert_eq!(h.get_sample_count(), 2);
    }

    #[test]
    fn member_changes_are_coalesced_and_counted() {
        let t = Tracking::new(SyncerMetrics::unregistered());
        let key = ObjectRef::from_obj(&work(1));
        t.member_changed(key.clone());
        t.member_changed(key.clone());
        let pending = t
            .metrics()
            .pending_member_changes
            .with_label_values(&["m1"]);
        assert_eq!(pending.get(), 1);
        assert!(t.take_member_change(&key).is_some());
        assert!(t.take_member_change(&key).is_none());
        assert_eq!(pending.get(), 0);
    }

    #[test]
    fn managed_objects_follow_the_works() {
        let t = Tracking::new(SyncerMetrics::unregistered());
        let key = ObjectRef::from_obj(&work(1));
        let gauge = t.metrics().managed_objects.with_label_values(&["m1"]);
        t.set_managed(&key, 3);
        t.set_managed(&key, 2);
        assert_eq!(gauge.get(), 2);
        t.forget(&key);
        assert_eq!(gauge.get(), 0);
    }
}
