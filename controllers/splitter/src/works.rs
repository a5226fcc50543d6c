//! What a hub Work says of its copies: its conditions and each copy's, as its member reported
//! them for the Work's current spec.

use flotilla_api::condition::ConditionStatus;
use flotilla_api::{ManifestStatus, Work, conditions};
use serde_json::Value;

use crate::keys::ObjectKey;

/// Whether condition `type_` of a Work is True for the Work's current spec (generation).
pub fn holds_now(w: &Work, type_: &str) -> bool {
    w.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
        .is_some_and(|c| c.status == "True" && c.observed_generation == w.metadata.generation)
}

/// What the member reports of object `key` in Work `w`: its entry in the Work's status.
pub fn manifest_status<'a>(w: &'a Work, key: &ObjectKey) -> Option<&'a ManifestStatus> {
    w.status
        .as_ref()?
        .manifests
        .iter()
        .find(|m| key.is(&m.identity))
}

/// Whether condition `type_` of object `key` in Work `w` is True for the Work's current spec: a
/// copy just given more replicas is not available until its member has them.
pub fn copy_holds_now(w: &Work, key: &ObjectKey, type_: &str) -> bool {
    copy_condition_now(w, key, type_) == ConditionStatus::True
}

/// Condition `type_` of object `key` in Work `w` as its member reports it for the Work's
/// current spec; `Unknown` until the member has been reached with that spec.
pub fn copy_condition_now(w: &Work, key: &ObjectKey, type_: &str) -> ConditionStatus {
    condition_now(w, manifest_status(w, key), type_)
}

/// Condition `type_` of `entry`, the entry in Work `w`'s status of one of its objects (as
/// [`manifest_status`] finds it), for the Work's current spec: `Unknown` until the member has
/// been reached with that spec.
pub fn condition_now(w: &Work, entry: Option<&ManifestStatus>, type_: &str) -> ConditionStatus {
    let current = w
        .status
        .as_ref()
        .is_some_and(|s| s.observed_generation == w.metadata.generation);
    match entry {
        Some(m) if current => m.get(type_),
        _ => ConditionStatus::Unknown,
    }
}

/// Whether the member of Work `w` settled on the copy of StatefulSet `key` that the Work asks
/// for (`count` pods): it applied the Work's current spec, its StatefulSet observed it, and it
/// runs at most `count` pods (`status.replicas` counts pods being deleted too). A member that
/// cannot be reached has not settled: what it runs is not known.
pub fn settled(w: &Work, key: &ObjectKey, count: u32) -> bool {
    let reachable = !unreachable(w);
    let Some(m) = manifest_status(w, key) else {
        return false;
    };
    let observed = matches!((m.generation, m.observed_generation), (Some(g), Some(o)) if o >= g);
    let pods = m
        .status
        .as_ref()
        .and_then(|s| s.get("replicas"))
        .map_or(Some(0), Value::as_u64);
    reachable
        && copy_holds_now(w, key, conditions::APPLIED)
        && observed
        && pods.is_some_and(|p| p <= u64::from(count))
}

/// Whether the member of Work `w` cannot be reached: its `Applied` is `Unknown` (what the Work
/// reports is its last word, not its state).
pub fn unreachable(w: &Work) -> bool {
    w.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == conditions::APPLIED))
        .is_some_and(|c| c.status == "Unknown")
}
