//! Pure: the hub's ControllerRevisions of a placed StatefulSet or DaemonSet, one per revision of
//! its pod template, so that `kubectl rollout history|undo` work against the hub as they do for
//! Deployments (whose history is [`crate::history`]).
//!
//! The hub runs neither a StatefulSet nor a DaemonSet controller, so the splitter keeps their
//! revisions as those controllers do: each is controlled by the workload, named
//! `<workload>-<hash>`, labelled with the template's labels (kubectl finds them with the
//! workload's selector) and `controller-revision-hash`, and its `data` is the patch that puts
//! that template back (`{"spec":{"template":{…,"$patch":"replace"}}}`, what `kubectl rollout
//! undo` applies). The current template's revision has the highest number; an old template that
//! becomes current again (an undo) is renumbered after the newest. Old revisions beyond
//! `spec.revisionHistoryLimit` (default 10) are pruned. Revisions are never placed: a controller
//! owns them.

use serde_json::{Value, json};

use crate::history::{RECORD, template_hash};

/// The label with a revision's template hash, as the workload controllers set it.
pub const REVISION_HASH: &str = "controller-revision-hash";

/// A revision as the hub has it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Revision {
    pub name: String,
    pub uid: Option<String>,
    pub revision: i64,
}

/// What a workload's revisions need.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Revisions {
    /// The current template's revision, whole, for a server-side apply (`None`: it exists with
    /// the right number).
    pub apply: Option<(String, Value)>,
    /// Old revisions beyond `revisionHistoryLimit`, oldest first: to delete.
    pub prune: Vec<Revision>,
}

/// The revisions `workload` (a hub StatefulSet or DaemonSet: apiVersion, kind, name, uid, spec)
/// needs, given those it controls (`existing`).
pub fn revisions(workload: &Value, existing: &[Revision]) -> Revisions {
    let name = workload["metadata"]["name"].as_str().unwrap_or_default();
    let template = &workload["spec"]["template"];
    // With the kind: a StatefulSet and a DaemonSet of the same name and template in one namespace
    // each have revisions of their own.
    let hash = template_hash(&json!({"kind": workload["kind"], "template": template}));
    let current = format!("{name}-{hash}");
    let newest_old = existing
        .iter()
        .filter(|r| r.name != current)
        .map(|r| r.revision)
        .max()
        .unwrap_or(0);
    let mine = existing.iter().find(|r| r.name == current);
    let revision = match mine {
        Some(r) if r.revision > newest_old => r.revision,
        _ => newest_old + 1,
    };
    let mut out = Revisions::default();
    if mine.is_none_or(|r| r.revision != revision) {
        let mut labels = template["metadata"]["labels"].clone();
        if !labels.is_object() {
            labels = json!({});
        }
        labels[REVISION_HASH] = json!(hash);
        labels[RECORD] = json!(hash);
        let mut data_template = template.clone();
        data_template["$patch"] = json!("replace");
        out.apply = Some((
            current.clone(),
            json!({
                "apiVersion": "apps/v1",
                "kind": "ControllerRevision",
                "metadata": {
                    "name": current,
                    "labels": labels,
                    "ownerReferences": [{
                        "apiVersion": workload["apiVersion"],
                        "kind": workload["kind"],
                        "name": name,
                        "uid": workload["metadata"]["uid"],
                        "controller": true,
                        "blockOwnerDeletion": true,
                    }],
                },
                "data": {"spec": {"template": data_template}},
                "revision": revision,
            }),
        ));
    }
    let limit = workload["spec"]["revisionHistoryLimit"]
        .as_u64()
        .map_or(10, |l| usize::try_from(l).unwrap_or(usize::MAX));
    let mut old: Vec<&Revision> = existing.iter().filter(|r| r.name != current).collect();
    old.sort_by_key(|r| (r.revision, r.name.clone()));
    let excess = old.len().saturating_sub(limit);
    out.prune = old[..excess].iter().map(|r| (*r).clone()).collect();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sts(image: &str, limit: Option<u64>) -> Value {
        let mut v = json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "uid": "u1"},
            "spec": {"selector": {"matchLabels": {"app": "db"}},
                     "template": {"metadata": {"labels": {"app": "db"}},
                                  "spec": {"containers": [{"name": "db", "image": image}]}}},
        });
        if let Some(l) = limit {
            v["spec"]["revisionHistoryLimit"] = json!(l);
        }
        v
    }

    fn written(r: &Revisions) -> (String, i64) {
        let (name, m) = r.apply.clone().expect("a revision to write");
        (name, m["revision"].as_i64().expect("revision"))
    }

    #[test]
    fn each_template_gets_a_revision_undo_renumbers_and_old_ones_are_pruned() {
        let first = revisions(&sts("db:1", None), &[]);
        let (v1, n) = written(&first);
        assert_eq!(n, 1);
        let (_, manifest) = first.apply.clone().expect("manifest");
        assert_eq!(manifest["metadata"]["labels"]["app"], "db");
        assert_eq!(manifest["metadata"]["ownerReferences"][0]["uid"], "u1");
        assert_eq!(
            manifest["metadata"]["ownerReferences"][0]["controller"],
            true
        );
        assert_eq!(manifest["data"]["spec"]["template"]["$patch"], "replace");
        assert_eq!(
            manifest["data"]["spec"]["template"]["spec"]["containers"][0]["image"],
            "db:1"
        );
        let existing = vec![Revision {
            name: v1.clone(),
            uid: None,
            revision: 1,
        }];
        // Unchanged: nothing to write.
        assert_eq!(
            revisions(&sts("db:1", None), &existing),
            Revisions::default()
        );
        // A new template: revision 2.
        let (v2, n) = written(&revisions(&sts("db:2", None), &existing));
        assert_ne!(v2, v1);
        assert_eq!(n, 2);
        // Undo to the first template: renumbered 3.
        let both = vec![
            existing[0].clone(),
            Revision {
                name: v2,
                uid: None,
                revision: 2,
            },
        ];
        assert_eq!(
            written(&revisions(&sts("db:1", None), &both)),
            (v1.clone(), 3)
        );
        // A DaemonSet of the same name and template has revisions of its own.
        let mut ds = sts("db:1", None);
        ds["kind"] = json!("DaemonSet");
        assert_ne!(written(&revisions(&ds, &[])).0, v1);
        // A limit of 1 old revision prunes the oldest.
        let pruned = revisions(&sts("db:3", Some(1)), &both);
        assert_eq!(pruned.prune, vec![both[0].clone()]);
        assert_eq!(written(&pruned).1, 3);
    }
}
