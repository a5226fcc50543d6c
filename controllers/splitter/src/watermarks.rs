//! The newest state of each type the splitter has seen, so that a pass lists the selected
//! objects from the hub apiserver's cache as soon as it has that state, not after a round trip
//! to etcd.
//!
//! A pass lists its selected types whole (see [`crate::observe`]): what the hub says, never a
//! cache of the splitter's own. A list without a resourceVersion is consistent: the apiserver
//! asks etcd for its current revision and waits until its watch cache has caught up with it,
//! which under load takes longer than the list itself. What a pass must see is narrower: the
//! change that started it, which came from one of the splitter's watches of that type, and
//! nothing older than what an earlier pass saw. So every watch of a type notes the
//! resourceVersion of each event before the event starts a pass, every list notes the
//! resourceVersion it was served at, and a pass lists `resourceVersionMatch=NotOlderThan` the
//! newest of them: the apiserver's cache has it already (the watch event came from it), so the
//! list is served at once. What a pass sees of a type never goes back in time; a change after the
//! watermark the list may miss starts a pass of its own. (With several hub apiservers, one whose
//! cache is behind waits for it or refuses; the pass then lists consistently.)

use std::collections::HashMap;
use std::sync::Mutex;

use kube::api::{ListParams, VersionMatch};

/// The newest resourceVersion seen of each type, by API group and kind.
#[derive(Debug, Default)]
pub struct Watermarks(Mutex<HashMap<(String, String), u64>>);

impl Watermarks {
    /// Notes that the hub served `resource_version` of `group`/`kind`. A resourceVersion that is
    /// not a number (the apiserver's are etcd revisions, but promise nothing) is not noted.
    pub fn saw(&self, group: &str, kind: &str, resource_version: Option<&str>) {
        let Some(rv) = resource_version.and_then(|rv| rv.parse::<u64>().ok()) else {
            return;
        };
        let mut marks = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match marks.get_mut(&(group.to_string(), kind.to_string())) {
            Some(mark) => *mark = (*mark).max(rv),
            None => {
                marks.insert((group.to_string(), kind.to_string()), rv);
            }
        }
    }

    /// How a pass lists `group`/`kind`: not older than the newest state seen of it, or
    /// consistently when none was seen yet.
    pub fn list_params(&self, group: &str, kind: &str) -> ListParams {
        let mark = self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(group.to_string(), kind.to_string()))
            .copied();
        match mark {
            Some(rv) => ListParams::default()
                .at(&rv.to_string())
                .matching(VersionMatch::NotOlderThan),
            None => ListParams::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_is_never_older_than_the_newest_state_seen_of_its_type() {
        let marks = Watermarks::default();
        let consistent = marks.list_params("apps", "Deployment");
        assert_eq!(
            consistent.resource_version, None,
            "nothing seen: consistent"
        );
        assert_eq!(consistent.version_match, None);

        marks.saw("apps", "Deployment", Some("120"));
        marks.saw("apps", "Deployment", Some("90"));
        marks.saw("apps", "Deployment", Some("not a number"));
        marks.saw("apps", "Deployment", None);
        marks.saw("", "ConfigMap", Some("500"));
        let p = marks.list_params("apps", "Deployment");
        assert_eq!(p.resource_version.as_deref(), Some("120"));
        assert_eq!(p.version_match, Some(VersionMatch::NotOlderThan));
        // Another type's state says nothing of this one.
        assert_eq!(
            marks
                .list_params("", "ConfigMap")
                .resource_version
                .as_deref(),
            Some("500")
        );
        assert_eq!(marks.list_params("", "Secret").resource_version, None);
    }
}
