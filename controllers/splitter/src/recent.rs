//! Read-your-writes for the cache of Works: the Works a pass wrote, as the hub returned them,
//! until the cache has them. A pass that starts before the cache took the previous pass's writes
//! would otherwise see a Work missing or as it was: it would write it again, or divide a
//! Deployment's replicas as if a member ran none.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_api::Work;
use kube::ResourceExt;

use crate::keys::{WorkId, key_of};

/// How long a write is trusted over the cache at most: the cache normally has it in well under
/// a second; after this, whatever the cache says holds.
pub const TRUSTED_FOR: Duration = Duration::from_secs(15);

/// The Works written recently, by namespace and name.
#[derive(Default)]
pub struct RecentWrites {
    written: Mutex<HashMap<WorkId, (Instant, Arc<Work>)>>,
}

impl RecentWrites {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<WorkId, (Instant, Arc<Work>)>> {
        self.written.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A Work as the hub returned it from a write (lean, like the cache's).
    pub fn record(&self, work: Work) {
        self.lock()
            .insert(key_of(&work), (Instant::now(), Arc::new(work)));
    }

    /// The Work as this splitter last wrote it, while the cache may not have it yet.
    pub fn written(&self, id: &WorkId) -> Option<Arc<Work>> {
        self.lock().get(id).map(|(_, w)| w.clone())
    }

    /// A Work deleted, or seen gone by the cache: nothing of it is trusted any more.
    pub fn forget(&self, id: &WorkId) {
        self.lock().remove(id);
    }

    /// The cache took a change of `work`: a write it has caught up with is no longer needed.
    pub fn seen(&self, work: &Work) {
        let id = key_of(work);
        let mut written = self.lock();
        if written.get(&id).is_some_and(|(_, w)| caught_up(work, w)) {
            written.remove(&id);
        }
    }

    /// `cached` with what was written since in place of what the cache does not have yet, for
    /// the Works `belongs` selects.
    pub fn overlay(
        &self,
        cached: Vec<Arc<Work>>,
        belongs: impl Fn(&Work) -> bool,
    ) -> Vec<Arc<Work>> {
        let now = Instant::now();
        let mut written = self.lock();
        written.retain(|_, (at, _)| now.duration_since(*at) < TRUSTED_FOR);
        let recent: Vec<Arc<Work>> = written
            .values()
            .map(|(_, w)| w.clone())
            .filter(|w| belongs(w))
            .collect();
        drop(written);
        merge(cached, recent)
    }
}

/// Whether the cache's `cached` is at least as new as `written`: the same Work (UID) at the same
/// or a later generation, and being deleted if `written` is; or another Work under the name that
/// is not being deleted.
fn caught_up(cached: &Work, written: &Work) -> bool {
    if cached.uid() != written.uid() {
        return cached.metadata.deletion_timestamp.is_none();
    }
    cached.metadata.generation >= written.metadata.generation
        && (written.metadata.deletion_timestamp.is_none()
            || cached.metadata.deletion_timestamp.is_some())
}

/// The cache's Works, each replaced by a newer write of it, and the Works written that the cache
/// does not have yet. A deletion stands only for a Work the cache still has: one the cache no
/// longer has is gone (its deletion may have completed before the answer was recorded).
pub fn merge(cached: Vec<Arc<Work>>, recent: Vec<Arc<Work>>) -> Vec<Arc<Work>> {
    let mut by_id: HashMap<WorkId, Arc<Work>> =
        recent.into_iter().map(|w| (key_of(&w), w)).collect();
    let mut out: Vec<Arc<Work>> = cached
        .into_iter()
        .map(|c| match by_id.remove(&key_of(&c)) {
            Some(w) if !caught_up(&c, &w) => w,
            _ => c,
        })
        .collect();
    out.extend(
        by_id
            .into_values()
            .filter(|w| w.metadata.deletion_timestamp.is_none()),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn work(name: &str, uid: &str, generation: i64) -> Arc<Work> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
                "metadata": {"name": name, "namespace": "flotilla-cluster-m1", "uid": uid,
                             "generation": generation},
                "spec": {"manifests": []}
            }))
            .expect("work"),
        )
    }

    fn generations(works: &[Arc<Work>]) -> Vec<(String, Option<i64>)> {
        let mut out: Vec<_> = works
            .iter()
            .map(|w| (w.name_any(), w.metadata.generation))
            .collect();
        out.sort();
        out
    }

    #[test]
    fn a_write_counts_until_the_cache_has_it() {
        let cached = vec![work("a", "ua", 1), work("b", "ub", 3)];
        let recent = vec![work("a", "ua", 2), work("b", "ub", 2), work("c", "uc", 1)];
        assert_eq!(
            generations(&merge(cached, recent)),
            [
                ("a".to_string(), Some(2)),
                ("b".to_string(), Some(3)),
                ("c".to_string(), Some(1))
            ]
        );
    }

    #[test]
    fn a_work_created_again_under_its_name_is_taken_from_the_cache() {
        let mut deleting = (*work("a", "old", 5)).clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        // The cache still has the old Work, being deleted: the new one, written, counts.
        let merged = merge(vec![Arc::new(deleting)], vec![work("a", "new", 1)]);
        assert_eq!(merged[0].uid().as_deref(), Some("new"));
        // The cache has another live Work under the name: the cache counts.
        let merged = merge(vec![work("a", "other", 1)], vec![work("a", "new", 1)]);
        assert_eq!(merged[0].uid().as_deref(), Some("other"));
    }

    #[test]
    fn a_deletion_counts_until_the_cache_has_it() {
        let mut deleting = (*work("a", "ua", 2)).clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        let deleting = Arc::new(deleting);
        // The cache still has the Work live, at the same generation: the deletion counts.
        let merged = merge(vec![work("a", "ua", 2)], vec![deleting.clone()]);
        assert!(merged[0].metadata.deletion_timestamp.is_some());
        // The cache has the deletion too: the cache counts.
        let merged = merge(vec![deleting.clone()], vec![deleting.clone()]);
        assert!(merged[0].metadata.deletion_timestamp.is_some());
        // The cache no longer has it: it is gone, whatever was recorded of its deletion.
        assert!(merge(vec![], vec![deleting]).is_empty());
    }

    #[test]
    fn a_write_the_cache_saw_or_a_deletion_is_forgotten() {
        let recent = RecentWrites::default();
        recent.record((*work("a", "ua", 2)).clone());
        recent.record((*work("b", "ub", 1)).clone());
        recent.seen(&work("a", "ua", 1));
        recent.forget(&("flotilla-cluster-m1".into(), "b".into()));
        assert_eq!(
            generations(&recent.overlay(vec![], |_| true)),
            [("a".to_string(), Some(2))]
        );
        recent.seen(&work("a", "ua", 2));
        assert!(recent.overlay(vec![], |_| true).is_empty());
    }
}
