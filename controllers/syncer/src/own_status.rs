//! The Work statuses this syncer wrote, until its cache of Works has them.
//!
//! A Work is often reconciled again before the watch brings back the status the last
//! reconciliation wrote: the splitter fills a Work of many manifests over several passes, and
//! each new generation starts a reconciliation. Judged by the cached status, every object the
//! last reconciliation applied would look never applied, and be applied again (in a bulk create,
//! about one apply in three was such a repeat). The syncer is the only writer of a Work's status,
//! so the status it wrote last is the Work's status until the cache shows that write.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use flotilla_api::{Work, WorkStatus};
use kube::{Resource, ResourceExt};

/// How long a written status is trusted over the cache at most: a watch that lags more is
/// broken, and the cache is the truth again.
const TRUSTED_FOR: Duration = Duration::from_secs(15);

struct Written {
    at: Instant,
    /// The Work's resourceVersion after the write: the cache has the write once it shows it.
    resource_version: String,
    status: WorkStatus,
}

/// The statuses written and not yet seen in the cache, by Work UID.
#[derive(Default)]
pub struct OwnStatus {
    by_uid: Mutex<HashMap<String, Written>>,
}

impl OwnStatus {
    /// The syncer wrote `status` into `work`, which is now at `resource_version`.
    pub fn wrote(&self, work: &Work, resource_version: String, status: WorkStatus) {
        let Some(uid) = work.uid() else {
            return;
        };
        let mut by_uid = self.lock();
        by_uid.retain(|_, w| w.at.elapsed() < TRUSTED_FOR);
        by_uid.insert(
            uid,
            Written {
                at: Instant::now(),
                resource_version,
                status,
            },
        );
    }

    /// The watch brought `work`: a status written up to this version is the cache's now.
    pub fn seen(&self, work: &Work) {
        let (Some(uid), Some(rv)) = (work.uid(), work.resource_version()) else {
            return;
        };
        let mut by_uid = self.lock();
        if by_uid.get(&uid).is_some_and(|w| w.resource_version == rv) {
            by_uid.remove(&uid);
        }
    }

    /// The status of `work` (from the cache) as this syncer last wrote it, when the cache does
    /// not have that write yet.
    pub fn of(&self, work: &Work) -> Option<WorkStatus> {
        let uid = work.uid()?;
        let by_uid = self.lock();
        by_uid
            .get(&uid)
            .filter(|w| w.at.elapsed() < TRUSTED_FOR)
            .map(|w| w.status.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Written>> {
        self.by_uid.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The patch of a Work's status that makes it `status`: written as the Work's status is, each
/// entry a JSON string (see [`flotilla_api::WorkStatus::manifests`]). Fields left out (empty)
/// are no longer the syncer's, and go.
pub fn status_patch(status: &WorkStatus) -> Result<serde_json::Value, serde_json::Error> {
    Ok(serde_json::json!({
        "apiVersion": Work::api_version(&()),
        "kind": Work::kind(&()),
        "status": serde_json::to_value(status)?,
    }))
}

/// The resourceVersion in the hub's answer to a write of a Work, read without decoding the rest
/// (the whole Work, every manifest).
pub fn resource_version_in(answer: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(rename = "resourceVersion")]
        resource_version: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Answer {
        metadata: Meta,
    }
    serde_json::from_str::<Answer>(answer)
        .ok()?
        .metadata
        .resource_version
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::WorkSpec;

    fn work(rv: &str) -> Work {
        let mut w = Work::new(
            "w",
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
        w.metadata.uid = Some("u-1".into());
        w.metadata.resource_version = Some(rv.into());
        w
    }

    fn status(removing: &str) -> WorkStatus {
        WorkStatus {
            removing: vec![flotilla_api::ManifestIdentity {
                name: removing.into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_written_status_counts_until_the_cache_shows_the_write() {
        let own = OwnStatus::default();
        let cached = work("1");
        assert_eq!(own.of(&cached), None);
        own.wrote(&cached, "3".into(), status("a"));
        assert_eq!(own.of(&cached), Some(status("a")));
        // An event of another write (the splitter's, say) is not this one.
        own.seen(&work("2"));
        assert_eq!(own.of(&work("2")), Some(status("a")));
        own.seen(&work("3"));
        assert_eq!(own.of(&work("3")), None);
    }

    #[test]
    fn the_resource_version_of_an_answer_is_read_without_the_rest() {
        let answer = r#"{"apiVersion":"flotilla.dev/v1alpha1","kind":"Work",
            "metadata":{"name":"w","resourceVersion":"42","labels":{"a":"b"}},
            "spec":{"manifests":[{"apiVersion":"v1","kind":"ConfigMap"}]},"status":{}}"#;
        assert_eq!(resource_version_in(answer).as_deref(), Some("42"));
        assert_eq!(resource_version_in("not json"), None);
    }

    fn entry(name: &str) -> flotilla_api::ManifestStatus {
        flotilla_api::ManifestStatus {
            identity: flotilla_api::ManifestIdentity {
                version: "v1".into(),
                kind: "ConfigMap".into(),
                name: name.into(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_status_is_written_with_its_entries_as_json_strings() {
        // The hub checks every field of an entry written as an object, on every write of the
        // Work (docs/benchmarks.md, "What a Work costs the hub"): the entries go as strings.
        let status = WorkStatus {
            manifests: vec![entry("a"), entry("b")],
            observed_generation: Some(3),
            ..Default::default()
        };
        let patch = status_patch(&status).expect("a status serializes");
        let entries = patch["status"]["manifests"]
            .as_array()
            .expect("a list of entries");
        assert_eq!(entries.len(), 2);
        assert!(
            entries.iter().all(serde_json::Value::is_string),
            "{entries:?}"
        );
        let read: WorkStatus =
            serde_json::from_value(patch["status"].clone()).expect("the status reads back");
        assert_eq!(read, status);
    }
}
