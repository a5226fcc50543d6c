//! The deleted Works this syncer let go of, until its cache of Works has them no more.
//!
//! Once a deleted Work's member objects are gone, the syncer removes its finalizer and the hub
//! deletes the Work. The cache still holds the Work, with the finalizer, until the watch brings
//! that deletion; meanwhile the member's deletion events of the Work's objects start more
//! reconciliations of it. Judged by the cache, each would clean the Work up again: look for
//! every one of its objects in the member (one GET each) and remove a finalizer that is no
//! longer there. The Work is done with, so those reconciliations do nothing.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use flotilla_api::Work;
use kube::ResourceExt;

/// How long a let-go Work is skipped at most: a watch that lags more is broken, and a
/// cleanup that finds nothing to do is safe.
const TRUSTED_FOR: Duration = Duration::from_secs(15);

/// The Works let go of, by UID.
#[derive(Default)]
pub struct Released {
    by_uid: Mutex<HashMap<String, Instant>>,
}

impl Released {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.by_uid.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `work`, being deleted, has nothing of this syncer's left: no member object, no finalizer.
    pub fn let_go(&self, work: &Work) {
        let Some(uid) = work.uid() else {
            return;
        };
        let mut by_uid = self.lock();
        by_uid.retain(|_, at| at.elapsed() < TRUSTED_FOR);
        by_uid.insert(uid, Instant::now());
    }

    /// Whether `work` (as the cache has it) is one this syncer let go of.
    pub fn done_with(&self, work: &Work) -> bool {
        work.metadata.deletion_timestamp.is_some()
            && work
                .uid()
                .and_then(|uid| self.lock().get(&uid).copied())
                .is_some_and(|at| at.elapsed() < TRUSTED_FOR)
    }

    /// Keeps only the Works `cached` says the cache still has.
    pub fn retain(&self, cached: impl Fn(&str) -> bool) {
        self.lock()
            .retain(|uid, at| at.elapsed() < TRUSTED_FOR && cached(uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn work(uid: &str, deleting: bool) -> Work {
        let mut w: Work = serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
            "metadata": {"name": "w", "namespace": "flotilla-cluster-m1", "uid": uid},
            "spec": {"manifests": []}
        }))
        .expect("work");
        if deleting {
            w.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        }
        w
    }

    #[test]
    fn a_work_let_go_is_done_with_until_its_deletion_is_seen() {
        let released = Released::default();
        let deleted = work("u1", true);
        assert!(!released.done_with(&deleted));
        released.let_go(&deleted);
        assert!(released.done_with(&deleted));
        // Another Work under the same name (a new UID) is not.
        assert!(!released.done_with(&work("u2", true)));
        // Once the cache has it no more, it is forgotten.
        released.retain(|uid| uid != "u1");
        assert!(!released.done_with(&deleted));
    }

    #[test]
    fn only_a_work_being_deleted_is_done_with() {
        let released = Released::default();
        released.let_go(&work("u1", true));
        assert!(!released.done_with(&work("u1", false)));
    }
}
