//! What every reconciler shares around its own logic.
//!
//! A controller states its logic as a [`Reconciler`]: **observe** what one object's pass reads,
//! **plan** — a pure function from the object and that observation to a typed value, unit
//! tested on values — **execute** the plan's writes and **report** (status, Events). [`drive`]
//! runs it under a `kube::runtime::Controller`: it measures each pass
//! ([`crate::Metrics::measure`]), keeps the reconciler's finalizer and calls
//! [`Reconciler::cleanup`] on deletion, turns a failure into a Warning Event of the error's
//! category (once per streak or change of category), and backs off per object: a transient
//! error is tried again after [`Retry::transient`], doubled with every failure in a row up to
//! [`Retry::MAX_BACKOFF`].
//!
//! Every controller of the workspace runs this way; a reconciler that must not touch some
//! objects (another replica's) says so in [`Reconciler::admit`].

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{self, Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::Instrument;

use crate::{Context, ErrorCategory, Metrics};

/// One controller's logic, in four steps per pass over one object.
pub trait Reconciler: Send + Sync + 'static {
    /// The kind reconciled (cluster-scoped or namespaced).
    type Object: Resource<DynamicType = ()>
        + Clone
        + Debug
        + DeserializeOwned
        + Serialize
        + Send
        + Sync
        + 'static;
    /// What a pass reads besides the object.
    type Observed: Send + Sync;
    /// What a pass decided: the writes to make, the status, the Events.
    type Plan: Send + Sync;
    /// What the writes came to, where the report depends on the member's or hub's answer (a
    /// dry run refused, an apply's result); `()` when the plan says it all.
    type Outcome: Send + Sync;
    type Error: ErrorCategory + Send + Sync + 'static;

    /// The controller's name in metrics (`controller` label) and logs.
    const NAME: &'static str;
    /// When an object is tried again after a failure.
    const RETRY: Retry;
    /// The finalizer kept on every object until [`Reconciler::cleanup`] finished, if any.
    const FINALIZER: Option<&'static str> = None;

    fn context(&self) -> &Context;

    /// When an object is tried again after a failure: [`Reconciler::RETRY`] unless the
    /// reconciler's settings say otherwise.
    fn retry(&self) -> Retry {
        Self::RETRY
    }

    /// The API of `object` (of its namespace, for a namespaced kind): the finalizer is kept
    /// through it.
    fn api(&self, object: &Self::Object) -> Api<Self::Object>;

    /// Whether the pass goes ahead at all. An object this reconciler may not touch now (another
    /// replica's, another mode's) is left as it is — not even its finalizer is added — until it
    /// changes. Every object by default.
    fn admit(
        &self,
        object: &Self::Object,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send {
        let _ = object;
        async { Ok(true) }
    }

    /// Called after a pass that left a deleted object without the reconciler's finalizer: the
    /// reconciler is done with it, though its cache may hold it a while.
    fn released(&self, object: &Self::Object) {
        let _ = object;
    }

    /// Reads what the pass needs.
    fn observe(
        &self,
        object: &Self::Object,
    ) -> impl Future<Output = Result<Self::Observed, Self::Error>> + Send;

    /// Decides, with no I/O. It fails only on what no retry can mend until the object (or what
    /// it reads) changes, such as an object that cannot be rendered.
    fn plan(
        &self,
        object: &Self::Object,
        observed: &Self::Observed,
    ) -> Result<Self::Plan, Self::Error>;

    /// Makes the plan's writes (not the object's status).
    fn execute(
        &self,
        object: &Self::Object,
        observed: &Self::Observed,
        plan: &Self::Plan,
    ) -> impl Future<Output = Result<Self::Outcome, Self::Error>> + Send;

    /// Writes the object's status and Events from what was observed, the plan and what its
    /// writes came to; says when to look again.
    fn report(
        &self,
        object: &Self::Object,
        observed: &Self::Observed,
        plan: &Self::Plan,
        outcome: Self::Outcome,
    ) -> impl Future<Output = Result<Action, Self::Error>> + Send;

    /// Undoes what the reconciler made for a deleted object; the finalizer goes once it
    /// returns [`Cleanup::Done`]. Only called with a [`Reconciler::FINALIZER`].
    fn cleanup(
        &self,
        object: &Self::Object,
    ) -> impl Future<Output = Result<Cleanup, Self::Error>> + Send {
        let _ = object;
        async { Ok(Cleanup::Done) }
    }
}

/// How far the cleanup of a deleted object got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cleanup {
    /// Everything is undone: the finalizer goes.
    Done,
    /// Still being undone (what it made is being deleted): looked at again after this long,
    /// the finalizer kept. Not a failure: no Event.
    Pending(Duration),
}

/// Why a pass failed: the reconciler's error, or its finalizer could not be added or removed.
#[derive(Debug, thiserror::Error)]
pub enum Failure<E: std::error::Error + 'static> {
    #[error(transparent)]
    Reconcile(E),
    #[error("finalizer: {0}")]
    Finalizer(String),
    /// The cleanup of a deleted object goes on ([`Cleanup::Pending`]).
    #[error("cleanup in progress; looking again in {0:?}")]
    Pending(Duration),
}

impl<E: ErrorCategory + 'static> ErrorCategory for Failure<E> {
    fn category(&self) -> &'static str {
        match self {
            Self::Reconcile(e) => e.category(),
            Self::Finalizer(_) => "Finalizer",
            Self::Pending(_) => "Waiting",
        }
    }

    fn is_transient(&self) -> bool {
        match self {
            Self::Reconcile(e) => e.is_transient(),
            Self::Finalizer(_) | Self::Pending(_) => true,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Reconcile(e) => e.retry_after(),
            Self::Finalizer(_) => None,
            Self::Pending(wait) => Some(*wait),
        }
    }
}

/// The failures in a row of each object, with the category of the last.
struct Streaks<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    by_object: Mutex<HashMap<ObjectRef<K>, (u32, &'static str)>>,
    /// The objects the controller knows: a streak of one no longer there (deleted while failing)
    /// is forgotten.
    known: Store<K>,
}

impl<K> Streaks<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    /// Records a failure of `category`: the failures in a row now, and whether the category is
    /// new to the streak. Streaks of objects the controller no longer knows go.
    fn fail(&self, object: ObjectRef<K>, category: &'static str) -> (u32, bool) {
        let mut by_object = self.by_object.lock().unwrap_or_else(|p| p.into_inner());
        by_object.retain(|o, _| *o == object || self.known.get(o).is_some());
        let entry = by_object.entry(object).or_insert((0, category));
        let changed = entry.0 == 0 || entry.1 != category;
        *entry = (entry.0.saturating_add(1), category);
        (entry.0, changed)
    }

    fn succeed(&self, object: &ObjectRef<K>) {
        self.by_object
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(object);
    }

    fn failures(&self, object: &ObjectRef<K>) -> u32 {
        self.by_object
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(object)
            .map_or(0, |(n, _)| *n)
    }
}

/// A reconciler with the failure streaks of its objects.
struct Driven<R: Reconciler> {
    reconciler: Arc<R>,
    streaks: Streaks<R::Object>,
}

/// Runs `reconciler` over the objects `controller` watches until the context's shutdown.
pub async fn drive<R: Reconciler>(controller: Controller<R::Object>, reconciler: Arc<R>) {
    let shutdown = reconciler.context().shutdown.clone();
    let driven = Arc::new(Driven {
        reconciler,
        streaks: Streaks {
            by_object: Mutex::new(HashMap::new()),
            known: controller.store(),
        },
    });
    controller
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(pass::<R>, retry_after_failure::<R>, driven)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(controller = R::NAME, error = %e, "reconcile failed");
            }
        })
        .await;
}

/// One pass: measured; a failure becomes a Warning Event once per streak or change of category.
async fn pass<R: Reconciler>(
    object: Arc<R::Object>,
    driven: Arc<Driven<R>>,
) -> Result<Action, Failure<R::Error>> {
    let r = &driven.reconciler;
    let ctx = r.context();
    let span = tracing::info_span!(
        "reconcile",
        controller = R::NAME,
        object = %ObjectRef::from_obj(&*object)
    );
    let result = ctx
        .metrics
        .measure(R::NAME, steps(object.clone(), r.clone()))
        .instrument(span)
        .await;
    let key = ObjectRef::from_obj(&*object);
    match &result {
        Ok(_) | Err(Failure::Pending(_)) => driven.streaks.succeed(&key),
        Err(e) => {
            let (_, new) = driven.streaks.fail(key, e.category());
            if new {
                ctx.events
                    .warning(&*object, e.category(), "Reconcile", e.to_string())
                    .await;
            }
        }
    }
    result
}

/// The four steps, behind the finalizer when the reconciler has one.
async fn steps<R: Reconciler>(
    object: Arc<R::Object>,
    r: Arc<R>,
) -> Result<Action, Failure<R::Error>> {
    let apply = |object: Arc<R::Object>| {
        let r = r.clone();
        async move {
            let started = Instant::now();
            let observed = r.observe(&object).await.map_err(Failure::Reconcile)?;
            let seen = started.elapsed();
            let plan = r.plan(&object, &observed).map_err(Failure::Reconcile)?;
            let planned = started.elapsed();
            let outcome = r
                .execute(&object, &observed, &plan)
                .await
                .map_err(Failure::Reconcile)?;
            let executed = started.elapsed();
            let action = r
                .report(&object, &observed, &plan, outcome)
                .await
                .map_err(Failure::Reconcile);
            // In the pass's `reconcile` span, which names the controller and the object.
            tracing::debug!(
                observe_ms = seen.as_millis(),
                plan_ms = (planned - seen).as_millis(),
                execute_ms = (executed - planned).as_millis(),
                report_ms = (started.elapsed() - executed).as_millis(),
                "pass"
            );
            action
        }
    };
    if !r.admit(&object).await.map_err(Failure::Reconcile)? {
        return Ok(Action::await_change());
    }
    let Some(name) = R::FINALIZER else {
        return apply(object).await;
    };
    let api = r.api(&object);
    let deleted = object.meta().deletion_timestamp.is_some();
    let released = object.clone();
    let result = finalizer(&api, name, object, |event| async {
        match event {
            FinalizerEvent::Apply(o) => apply(o).await,
            // Kube's finalizer helper keeps the finalizer while cleanup fails: a pending one
            // is told as a failure that is not announced.
            FinalizerEvent::Cleanup(o) => match r.cleanup(&o).await {
                Ok(Cleanup::Done) => Ok(Action::await_change()),
                Ok(Cleanup::Pending(wait)) => Err(Failure::Pending(wait)),
                Err(e) => Err(Failure::Reconcile(e)),
            },
        }
    })
    .await
    .map_err(|e| match e {
        finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => e,
        other => Failure::Finalizer(other.to_string()),
    });
    if deleted && result.is_ok() {
        r.released(&released);
    }
    result
}

/// The error policy of [`drive`]: [`Reconciler::RETRY`], backed off per object.
fn retry_after_failure<R: Reconciler>(
    object: Arc<R::Object>,
    error: &Failure<R::Error>,
    driven: Arc<Driven<R>>,
) -> Action {
    if let Failure::Pending(wait) = error {
        return Action::requeue(*wait);
    }
    let failures = driven.streaks.failures(&ObjectRef::from_obj(&*object));
    driven
        .reconciler
        .retry()
        .backed_off(failures)
        .action(object.as_ref(), error)
}

impl Metrics {
    /// Runs `reconcile`, one reconciliation of `controller`, and records how long it took and,
    /// when it failed, its error's category (`*_reconcile_duration_seconds`,
    /// `*_reconcile_errors_total`).
    pub async fn measure<T, E: ErrorCategory>(
        &self,
        controller: &str,
        reconcile: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let started = Instant::now();
        let result = reconcile.await;
        self.observe_reconcile(
            controller,
            started.elapsed().as_secs_f64(),
            result.as_ref().err().map(ErrorCategory::category),
        );
        result
    }
}

/// When a controller tries an object again after a failed reconciliation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    /// After an error that retrying can help ([`ErrorCategory::is_transient`]).
    pub transient: Duration,
    /// After one only a change of the object can fix; `None`: wait for that change.
    pub permanent: Option<Duration>,
}

impl Retry {
    /// The longest a transient failure waits when backed off ([`Retry::backed_off`]).
    pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

    /// This retry after `failures` failures in a row: the transient wait doubled for each but
    /// the first, at most [`Retry::MAX_BACKOFF`] (never shorter than it was).
    pub fn backed_off(&self, failures: u32) -> Self {
        let doublings = failures.saturating_sub(1).min(16);
        let transient = self
            .transient
            .saturating_mul(1 << doublings)
            .min(Self::MAX_BACKOFF)
            .max(self.transient);
        Self { transient, ..*self }
    }

    /// How long to wait before trying again after `error`; `None`: until the object changes.
    /// An error that names its own wait ([`ErrorCategory::retry_after`]) gets it.
    pub fn delay<E: ErrorCategory + ?Sized>(&self, error: &E) -> Option<Duration> {
        error.retry_after().or(if error.is_transient() {
            Some(self.transient)
        } else {
            self.permanent
        })
    }

    /// The Action after `error` reconciling `object`, logged once as a warning with the error's
    /// category and when the object is tried again.
    pub fn action<K, E>(&self, object: &K, error: &E) -> Action
    where
        K: Resource,
        K::DynamicType: Default,
        E: ErrorCategory + ?Sized,
    {
        let delay = self.delay(error);
        let retry = delay.map_or_else(
            || "when it changes".to_string(),
            |d| format!("in {}", humantime::format_duration(d)),
        );
        tracing::warn!(
            kind = %K::kind(&K::DynamicType::default()),
            object = %match object.namespace() {
                Some(ns) => format!("{ns}/{}", object.name_any()),
                None => object.name_any(),
            },
            category = error.category(),
            error = %error,
            "reconcile failed; trying again {retry}"
        );
        delay.map_or_else(Action::await_change, Action::requeue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum E {
        #[error("transient")]
        Transient,
        #[error("permanent")]
        Permanent,
        #[error("waiting")]
        Waiting,
    }

    impl ErrorCategory for E {
        fn category(&self) -> &'static str {
            "Test"
        }
        fn is_transient(&self) -> bool {
            !matches!(self, Self::Permanent)
        }
        fn retry_after(&self) -> Option<Duration> {
            matches!(self, Self::Waiting).then_some(Duration::from_secs(2))
        }
    }

    #[test]
    fn transient_errors_retry_soon_permanent_ones_late_or_on_a_change() {
        let s = Duration::from_secs;
        let retry = Retry {
            transient: s(5),
            permanent: Some(s(60)),
        };
        assert_eq!(retry.delay(&E::Transient), Some(s(5)));
        assert_eq!(retry.delay(&E::Permanent), Some(s(60)));
        assert_eq!(retry.delay(&E::Waiting), Some(s(2)));
        let on_change = Retry {
            permanent: None,
            ..retry
        };
        assert_eq!(on_change.delay(&E::Permanent), None);
        assert_eq!(on_change.delay(&E::Transient), Some(s(5)));
    }

    #[test]
    fn a_transient_failure_in_a_row_waits_twice_as_long_up_to_a_limit() {
        let s = Duration::from_secs;
        let retry = Retry {
            transient: s(5),
            permanent: Some(s(60)),
        };
        let waits: Vec<_> = [0, 1, 2, 3, 7, 40]
            .into_iter()
            .map(|n| retry.backed_off(n).delay(&E::Transient))
            .collect();
        assert_eq!(
            waits,
            [s(5), s(5), s(10), s(20), s(300), s(300)]
                .map(Some)
                .to_vec()
        );
        // What a failure asks for itself, and a permanent one, are not backed off.
        assert_eq!(retry.backed_off(5).delay(&E::Waiting), Some(s(2)));
        assert_eq!(retry.backed_off(5).delay(&E::Permanent), Some(s(60)));
    }

    #[test]
    fn a_streak_announces_its_first_failure_and_each_new_category() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let (known, mut writer) = kube::runtime::reflector::store::<ConfigMap>();
        let streaks: Streaks<ConfigMap> = Streaks {
            by_object: Mutex::new(HashMap::new()),
            known,
        };
        let a = ObjectRef::<ConfigMap>::new("a").within("ns");
        assert_eq!(streaks.fail(a.clone(), "Timeout"), (1, true));
        assert_eq!(streaks.fail(a.clone(), "Timeout"), (2, false));
        assert_eq!(streaks.fail(a.clone(), "Forbidden"), (3, true));
        assert_eq!(streaks.failures(&a), 3);
        streaks.succeed(&a);
        assert_eq!(streaks.failures(&a), 0);
        assert_eq!(streaks.fail(a.clone(), "Forbidden"), (1, true));

        // A failing object the controller still knows keeps its streak when another fails; one
        // deleted meanwhile (no finalizer kept it) is forgotten.
        let mut known = ConfigMap::default();
        known.metadata.name = Some("b".into());
        known.metadata.namespace = Some("ns".into());
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(known));
        let b = ObjectRef::<ConfigMap>::new("b").within("ns");
        assert_eq!(streaks.fail(b.clone(), "Timeout"), (1, true));
        assert_eq!(
            streaks.failures(&a),
            0,
            "a is gone from the controller's cache"
        );
        assert_eq!(
            streaks.fail(ObjectRef::new("c").within("ns"), "Timeout"),
            (1, true)
        );
        assert_eq!(streaks.failures(&b), 1, "b is still known");
    }
}
