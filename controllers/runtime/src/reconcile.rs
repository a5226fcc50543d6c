//! What every reconciler shares around its own logic: measuring each reconciliation
//! ([`crate::Metrics::measure`]) and deciding when an object is tried again after an error
//! ([`Retry`], [`error_policy`]).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use crate::{ErrorCategory, Metrics};

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

/// The error policy of a `kube::runtime::Controller` that retries as `retry` says:
/// `controller.run(reconcile, error_policy(RETRY), state)`.
pub fn error_policy<K, E, S>(retry: Retry) -> impl Fn(Arc<K>, &E, Arc<S>) -> Action
where
    K: Resource,
    K::DynamicType: Default,
    E: ErrorCategory,
{
    move |object, error, _| retry.action(object.as_ref(), error)
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
}
