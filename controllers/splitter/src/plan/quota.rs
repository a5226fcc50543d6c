//! Stage 3, the namespace's copy limits (design: no tenant fills the hub).

use std::collections::BTreeMap;

use flotilla_api::placement::ClusterExclusion;
use flotilla_api::{Work, annotations, reasons};
use kube::ResourceExt;

use super::Plan;
use super::entry::Entry;
use super::holdings::Holder;
use crate::keys::CopyKey;
use crate::observation::Observation;

/// What a Work's copies take in the hub: its manifests and the data of its Secrets, as the
/// splitter wrote them ([`annotations::COPY_BYTES`]); for a Work written before that annotation,
/// its manifests as they serialize.
pub(super) fn work_bytes(work: &Work) -> u64 {
    work.annotations()
        .get(annotations::COPY_BYTES)
        .and_then(|b| b.parse().ok())
        .unwrap_or_else(|| {
            crate::digest::manifests(work)
                .iter()
                .map(|m| serde_json::to_vec(m).map_or(0, |v| v.len() as u64))
                .sum()
        })
}

/// What the copies of the namespace's other Placements take in the hub.
pub(super) fn elsewhere_bytes(obs: &Observation) -> u64 {
    obs.others.iter().map(|o| work_bytes(&o.work)).sum()
}

/// Why `what` is not placed: the namespace is at its byte budget.
pub(super) fn byte_budget_message(
    obs: &Observation,
    namespace: &str,
    what: &str,
    name: &str,
) -> String {
    format!(
        "namespace {namespace} is at its limit of {} bytes of copies in the hub ({} or the \
         splitter's --max-copy-bytes-per-namespace): {what}{name} are not written, and its members \
         keep what they have",
        obs.byte_limit.unwrap_or_default(),
        annotations::MAX_COPY_BYTES,
    )
}

/// The namespace's copy limits (design: no tenant fills the hub): when this pass would make the
/// namespace's Placements keep more copies than [`Observation::copy_limit`], or copies of more
/// bytes than [`Observation::byte_limit`], the copies this Placement does not hold yet are not
/// placed — all of them, so that no workload is half placed — and the decisions say so. The
/// copies it holds stay and follow their hub objects (within the byte budget: see [`pack`]),
/// and a pass that adds no copy is never held back, so a Placement over a limit (the limit was
/// lowered) can still shrink.
pub(super) fn withhold_beyond_quota(
    obs: &Observation,
    held: &BTreeMap<&CopyKey, Vec<&Holder<'_>>>,
    wanted: &mut BTreeMap<CopyKey, Entry>,
    out: &mut Plan,
) {
    if obs.copy_limit.is_none() && obs.byte_limit.is_none() {
        return;
    }
    let new: Vec<CopyKey> = wanted
        .keys()
        .filter(|k| !held.contains_key(k))
        .cloned()
        .collect();
    if new.is_empty() {
        return;
    }
    let namespace = obs.placement.namespace().unwrap_or_default();
    let elsewhere: usize = obs
        .others
        .iter()
        .map(|o| crate::digest::manifest_count(&o.work))
        .sum();
    let total = elsewhere.saturating_add(wanted.len());
    let here_bytes: u64 = wanted.values().map(|e| e.bytes() as u64).sum();
    let elsewhere_bytes = elsewhere_bytes(obs);
    let total_bytes = elsewhere_bytes.saturating_add(here_bytes);
    let (message, short) = match (obs.copy_limit, obs.byte_limit) {
        (Some(limit), _) if total > limit => (
            format!(
                "placing what it selects would make namespace {namespace} keep {total} copies in \
                 the members ({} of this Placement, {elsewhere} of its other Placements), more \
                 than its limit of {limit} ({} or the splitter's --max-copies-per-namespace): {} \
                 new copies are not placed",
                wanted.len(),
                annotations::MAX_COPIES,
                new.len()
            ),
            format!("namespace {namespace} is at its limit of {limit} copies"),
        ),
        (_, Some(limit)) if total_bytes > limit => (
            format!(
                "placing what it selects would make the copies of namespace {namespace} take \
                 {total_bytes} bytes in the hub ({here_bytes} of this Placement, \
                 {elsewhere_bytes} of its other Placements), more than its limit of {limit} \
                 ({} or the splitter's --max-copy-bytes-per-namespace): {} new copies are not \
                 placed",
                annotations::MAX_COPY_BYTES,
                new.len()
            ),
            format!("namespace {namespace} is at its limit of {limit} bytes of copies"),
        ),
        _ => return,
    };
    for key in &new {
        wanted.remove(key);
        if let Some((_, decision)) = out.decisions.iter_mut().find(|(k, _)| *k == key.object) {
            decision.clusters.retain(|c| c.cluster != key.cluster);
            decision.excluded.push(ClusterExclusion {
                cluster: key.cluster.to_string(),
                reason: reasons::COPY_QUOTA_EXCEEDED.to_string(),
                message: Some(short.clone()),
            });
        }
    }
    out.findings.copy_quota = Some(message);
}
