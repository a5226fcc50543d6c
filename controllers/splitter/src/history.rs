//! Pure: the hub's ReplicaSet records of a placed Deployment, one per revision of its pod
//! template, so that the tools that read a Deployment's history work against the hub unchanged
//! (`kubectl rollout history|undo`, `kubectl describe deployment`, Helm's `--wait`).
//!
//! The hub runs no Deployment controller, so it has no ReplicaSets of its own; the splitter keeps
//! them as the Deployment controller would: each is controlled by the Deployment, named
//! `<deployment>-<pod-template-hash>`, labelled with the hash, its template is the Deployment's
//! template of that revision and its selector the Deployment's plus the hash, and it carries the
//! `deployment.kubernetes.io/revision` annotation. The record of the current template gets the
//! highest revision (an old template that becomes current again — a `kubectl rollout undo` —
//! is renumbered, its earlier numbers in `deployment.kubernetes.io/revision-history`) and the
//! Deployment's replicas; the others have 0 and are pruned to `spec.revisionHistoryLimit`
//! (default 10). Records are never placed (a controller owns them) and run nothing: the hub has
//! no ReplicaSet controller. Their status is the members' (see [`record_status`]).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::aggregate::Copy;

/// The annotation with a record's revision.
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// The annotation with the earlier revisions of a record whose template became current again.
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
/// The annotation with the Deployment's replicas, on the current record.
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
/// The annotation with the Deployment's replicas plus its surge, on the current record.
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// The label with a record's template hash, also in its selector and template.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// On records: a digest of what the splitter last wrote of the record (a label, so that a
/// `kubectl rollout undo`, which copies a record's annotations to the Deployment, leaves it).
pub const RECORD: &str = "flotilla.dev/record";

/// The Deployment annotations a record does not take over (nor gives back on undo), as the
/// Deployment controller and kubectl skip them.
const NOT_COPIED: [&str; 6] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

/// A record as the splitter's cache has it (metadata only).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub name: String,
    pub uid: Option<String>,
    pub revision: u64,
    /// Its `deployment.kubernetes.io/revision-history`.
    pub history: Vec<u64>,
    /// Its [`RECORD`] label.
    pub digest: Option<String>,
}

/// A write of one record.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// The current template's record, whole, for a server-side apply.
    Apply { name: String, manifest: Value },
    /// An old record: a merge patch of its replicas and metadata.
    Patch { name: String, patch: Value },
}

/// What a Deployment's records need.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    /// The current template's record.
    pub current: String,
    /// Its revision.
    pub revision: u64,
    /// The records to write (only those whose [`RECORD`] digest differs).
    pub writes: Vec<Write>,
    /// Old records beyond `revisionHistoryLimit`, oldest first: to delete.
    pub prune: Vec<Record>,
    /// The newest old record (its pods are those not yet at the current template).
    pub previous: Option<String>,
}

/// The hash of a pod template, spelled as the Deployment controller spells its hashes (ten
/// characters or fewer of `bcdfghjklmnpqrstvwxz2456789`): FNV-1a of the template's JSON (keys
/// sorted), folded to 32 bits. Not the hash the members compute (theirs hashes Go structs); it
/// only has to be stable and differ between templates.
pub fn template_hash(template: &Value) -> String {
    let json = serde_json::to_vec(template).unwrap_or_default();
    let h = flotilla_api::names::fnv1a(json);
    let folded = (h >> 32) as u32 ^ (h as u32);
    const SAFE: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    folded
        .to_string()
        .bytes()
        .map(|b| SAFE[usize::from(b) % SAFE.len()] as char)
        .collect()
}

fn digest(v: &Value) -> String {
    format!(
        "{:016x}",
        flotilla_api::names::fnv1a(serde_json::to_vec(v).unwrap_or_default())
    )
}

/// `name-hash`, as the Deployment controller names its ReplicaSets.
pub fn record_name(deployment: &str, hash: &str) -> String {
    format!("{deployment}-{hash}")
}

/// The records Deployment `deployment` (as the hub has it: name, uid, spec, annotations) needs,
/// given the records it has (`existing`, those it controls). `max_surge` is its surge in pods.
pub fn history(deployment: &Value, existing: &[Record], max_surge: u32) -> History {
    let name = deployment["metadata"]["name"].as_str().unwrap_or_default();
    let spec = &deployment["spec"];
    let template = &spec["template"];
    let hash = template_hash(template);
    let current = record_name(name, &hash);
    let replicas = spec["replicas"].as_u64().unwrap_or(1);
    let limit = spec["revisionHistoryLimit"]
        .as_u64()
        .map_or(10, |l| usize::try_from(l).unwrap_or(usize::MAX));
    let newest_old = existing
        .iter()
        .filter(|r| r.name != current)
        .map(|r| r.revision)
        .max()
        .unwrap_or(0);
    let mine = existing.iter().find(|r| r.name == current);
    // The current template keeps its revision while it is the newest; an old one that became
    // current again (an undo) is renumbered after the newest.
    let (revision, history) = match mine {
        Some(r) if r.revision > newest_old => (r.revision, r.history.clone()),
        Some(r) => {
            let mut h = r.history.clone();
            if r.revision > 0 {
                h.push(r.revision);
            }
            (newest_old + 1, h)
        }
        None => (newest_old + 1, Vec::new()),
    };
    let mut annotations: BTreeMap<String, Value> = deployment["metadata"]["annotations"]
        .as_object()
        .map(|a| {
            a.iter()
                .filter(|(k, _)| !NOT_COPIED.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    annotations.insert(REVISION.into(), json!(revision.to_string()));
    annotations.insert(DESIRED_REPLICAS.into(), json!(replicas.to_string()));
    annotations.insert(
        MAX_REPLICAS.into(),
        json!((replicas + u64::from(max_surge)).to_string()),
    );
    if !history.is_empty() {
        let h: Vec<String> = history.iter().map(u64::to_string).collect();
        annotations.insert(REVISION_HISTORY.into(), json!(h.join(",")));
    }
    let mut record_template = template.clone();
    record_template["metadata"]["labels"][POD_TEMPLATE_HASH] = json!(hash);
    let mut selector = spec["selector"].clone();
    selector["matchLabels"][POD_TEMPLATE_HASH] = json!(hash);
    let mut labels = template["metadata"]["labels"].clone();
    labels[POD_TEMPLATE_HASH] = json!(hash);
    let body = json!({
        "metadata": {"labels": labels, "annotations": annotations},
        "spec": {
            "replicas": replicas,
            "minReadySeconds": spec["minReadySeconds"].as_u64().unwrap_or(0),
            "selector": selector,
            "template": record_template,
        },
    });
    let record_digest = digest(&body);
    let mut manifest = body;
    manifest["apiVersion"] = json!("apps/v1");
    manifest["kind"] = json!("ReplicaSet");
    manifest["metadata"]["name"] = json!(current);
    manifest["metadata"]["labels"][RECORD] = json!(record_digest);
    manifest["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "apps/v1", "kind": "Deployment", "name": name,
        "uid": deployment["metadata"]["uid"], "controller": true,
    }]);
    let mut out = History {
        current: current.clone(),
        revision,
        ..History::default()
    };
    if mine.and_then(|r| r.digest.as_deref()) != Some(record_digest.as_str()) {
        out.writes.push(Write::Apply {
            name: current.clone(),
            manifest,
        });
    }
    let mut old: Vec<&Record> = existing.iter().filter(|r| r.name != current).collect();
    old.sort_by_key(|r| (r.revision, r.name.clone()));
    out.previous = old.last().map(|r| r.name.clone());
    let excess = old.len().saturating_sub(limit);
    out.prune = old[..excess].iter().map(|r| (*r).clone()).collect();
    for r in &old[excess..] {
        let patch_body = json!({"spec": {"replicas": 0}, "revision": r.revision});
        let d = digest(&patch_body);
        if r.digest.as_deref() != Some(d.as_str()) {
            out.writes.push(Write::Patch {
                name: r.name.clone(),
                patch: json!({"metadata": {"labels": {RECORD: d}}, "spec": {"replicas": 0}}),
            });
        }
    }
    out
}

/// A record's status from the Deployment's copies (`current`: whether it is the current
/// template's record, `previous`: the newest old one). The members' pods of the current
/// template are counted on the current record: all of a copy's ready pods once it runs only
/// updated ones, and while it rolls out no more than its ready pods beyond those not updated yet
/// (never more ready than there are). The pods not yet updated are counted on the previous
/// record; older records run none. An unreachable member's pods count as neither ready nor
/// available.
pub fn record_status(copies: &[Copy], current: bool, previous: bool, generation: i64) -> Value {
    let new_pods = |c: &Copy, counted: i64| -> i64 {
        let old = (c.replicas - c.updated).max(0);
        (counted - old).clamp(0, c.updated.max(0))
    };
    let (replicas, ready, available) = if current {
        copies.iter().fold((0, 0, 0), |(r, rd, av), c| {
            let fresh = !c.stale;
            (
                r + c.updated,
                rd + if fresh { new_pods(c, c.ready) } else { 0 },
                av + if fresh {
                    new_pods(c, c.available_replicas)
                } else {
                    0
                },
            )
        })
    } else if previous {
        let old: i64 = copies.iter().map(|c| (c.replicas - c.updated).max(0)).sum();
        (old, 0, 0)
    } else {
        (0, 0, 0)
    };
    json!({
        "replicas": replicas,
        "fullyLabeledReplicas": replicas,
        "readyReplicas": ready,
        "availableReplicas": available,
        "observedGeneration": generation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(image: &str, replicas: u64, annotations: Value) -> Value {
        json!({
            "metadata": {"name": "web", "uid": "u-1", "annotations": annotations},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [{"name": "c", "image": image}]}},
            },
        })
    }

    /// The records as the hub has them once `h`'s writes landed on `before`.
    fn after(h: &History, before: &[Record]) -> Vec<Record> {
        let mut out: Vec<Record> = before
            .iter()
            .filter(|r| !h.prune.iter().any(|p| p.name == r.name))
            .cloned()
            .collect();
        for w in &h.writes {
            match w {
                Write::Apply { name, manifest } => {
                    let a = &manifest["metadata"]["annotations"];
                    let record = Record {
                        name: name.clone(),
                        revision: a[REVISION]
                            .as_str()
                            .and_then(|r| r.parse().ok())
                            .unwrap_or(0),
                        history: a[REVISION_HISTORY]
                            .as_str()
                            .map(|h| h.split(',').filter_map(|n| n.parse().ok()).collect())
                            .unwrap_or_default(),
                        digest: manifest["metadata"]["labels"][RECORD]
                            .as_str()
                            .map(str::to_string),
                        ..Record::default()
                    };
                    out.retain(|r| r.name != *name);
                    out.push(record);
                }
                Write::Patch { name, patch } => {
                    if let Some(r) = out.iter_mut().find(|r| r.name == *name) {
                        r.digest = patch["metadata"]["labels"][RECORD]
                            .as_str()
                            .map(str::to_string);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn each_template_gets_a_revision_and_an_undo_renumbers_the_old_one() {
        let v1 = deployment("i:1", 3, json!({"kubernetes.io/change-cause": "first"}));
        let h1 = history(&v1, &[], 1);
        assert_eq!(h1.revision, 1);
        let Write::Apply { manifest, .. } = &h1.writes[0] else {
            panic!("the first record is applied whole: {h1:?}");
        };
        let hash = template_hash(&v1["spec"]["template"]);
        assert_eq!(manifest["metadata"]["name"], format!("web-{hash}"));
        assert_eq!(manifest["spec"]["replicas"], 3);
        assert_eq!(
            manifest["spec"]["selector"]["matchLabels"][POD_TEMPLATE_HASH],
            hash
        );
        assert_eq!(
            manifest["spec"]["template"]["metadata"]["labels"][POD_TEMPLATE_HASH],
            hash
        );
        assert_eq!(manifest["metadata"]["annotations"][REVISION], "1");
        assert_eq!(manifest["metadata"]["annotations"][MAX_REPLICAS], "4");
        assert_eq!(
            manifest["metadata"]["annotations"]["kubernetes.io/change-cause"],
            "first"
        );
        assert_eq!(
            manifest["metadata"]["ownerReferences"][0]["controller"],
            true
        );
        let r1 = after(&h1, &[]);
        // Nothing changed: nothing to write.
        assert!(history(&v1, &r1, 1).writes.is_empty());

        let v2 = deployment("i:2", 3, json!({}));
        let h2 = history(&v2, &r1, 1);
        assert_eq!(h2.revision, 2);
        assert_eq!(h2.previous.as_deref(), Some(h1.current.as_str()));
        assert!(
            h2.writes
                .iter()
                .any(|w| matches!(w, Write::Patch { name, patch }
                if *name == h1.current && patch["spec"]["replicas"] == 0)),
            "the old record goes to 0: {h2:?}"
        );
        let r2 = after(&h2, &r1);

        // Undo: the first template is current again, as revision 3, remembering 1.
        let h3 = history(&v1, &r2, 1);
        assert_eq!(h3.current, h1.current);
        assert_eq!(h3.revision, 3);
        let Some(Write::Apply { manifest, .. }) =
            h3.writes.iter().find(|w| matches!(w, Write::Apply { .. }))
        else {
            panic!("{h3:?}");
        };
        assert_eq!(manifest["metadata"]["annotations"][REVISION_HISTORY], "1");
        let r3 = after(&h3, &r2);
        assert_eq!(history(&v1, &r3, 1).revision, 3, "stable once renumbered");
    }

    #[test]
    fn old_records_are_pruned_to_the_history_limit() {
        let mut records = Vec::new();
        for i in 1..=5 {
            let mut d = deployment(&format!("i:{i}"), 2, json!({}));
            d["spec"]["revisionHistoryLimit"] = json!(2);
            let h = history(&d, &records, 0);
            records = after(&h, &records);
        }
        let revisions: Vec<u64> = {
            let mut r: Vec<u64> = records.iter().map(|r| r.revision).collect();
            r.sort_unstable();
            r
        };
        assert_eq!(revisions, [3, 4, 5], "the current one and 2 old ones stay");
    }

    #[test]
    fn hashes_are_stable_and_differ_between_templates() {
        let a = json!({"spec": {"containers": [{"image": "a"}]}});
        let b = json!({"spec": {"containers": [{"image": "b"}]}});
        assert_eq!(template_hash(&a), template_hash(&a.clone()));
        assert_ne!(template_hash(&a), template_hash(&b));
        assert!(
            template_hash(&a)
                .chars()
                .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c))
        );
    }

    #[test]
    fn the_current_record_counts_only_pods_known_to_be_new_and_ready() {
        let copy = |replicas, updated, ready, stale| Copy {
            cluster: "m".into(),
            replicas,
            updated,
            ready,
            available_replicas: ready,
            stale,
            ..Copy::default()
        };
        // Rolled out: every ready pod is new.
        let s = record_status(
            &[copy(3, 3, 3, false), copy(2, 2, 2, false)],
            true,
            false,
            4,
        );
        assert_eq!(
            (s["replicas"].clone(), s["readyReplicas"].clone()),
            (json!(5), json!(5))
        );
        assert_eq!(s["observedGeneration"], 4);
        // Mid-rollout: 2 new of 4, 3 ready; at least 1 new pod is ready.
        let s = record_status(&[copy(4, 2, 3, false)], true, false, 1);
        assert_eq!(s["replicas"], 2);
        assert_eq!(s["readyReplicas"], 1);
        let old = record_status(&[copy(4, 2, 3, false)], false, true, 2);
        assert_eq!(old["replicas"], 2);
        // An unreachable member's pods are not ready.
        let s = record_status(&[copy(3, 3, 3, true)], true, false, 1);
        assert_eq!(s["readyReplicas"], 0);
    }
}
