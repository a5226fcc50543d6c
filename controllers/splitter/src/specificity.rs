//! Pure: which of several Placements places an object.
//!
//! A Placement selects an object through one of its resource selectors, more or less
//! specifically: by name, by labels, by type, or — with no resource selectors at all — as one of
//! every supported type in its namespace. The most specific Placement places the object. Between
//! equally specific ones the oldest wins (then the name that sorts first), so a new Placement
//! never takes objects away from an existing one by accident — and the tie is reported.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use flotilla_api::Placement;
use flotilla_api::placement::ResourceSelector;
use kube::ResourceExt;

use crate::eligibility::selector_matches;

/// How specifically a Placement selects an object; more specific sorts greater.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Specificity {
    /// No resource selectors: every supported type.
    Everything,
    /// A selector for the object's type, without name or labels.
    Type,
    /// A selector for the object's type with a label selector that matches it.
    Labels,
    /// A selector naming the object.
    Name,
}

/// An object as Placements select it.
#[derive(Clone, Copy, Debug)]
pub struct Selectable<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
}

fn selector_specificity(s: &ResourceSelector, object: &Selectable<'_>) -> Option<Specificity> {
    if s.api_version != object.api_version || s.kind != object.kind {
        return None;
    }
    if let Some(name) = &s.name {
        return (name == object.name).then_some(Specificity::Name);
    }
    match &s.label_selector {
        Some(sel) => selector_matches(sel, object.labels).then_some(Specificity::Labels),
        None => Some(Specificity::Type),
    }
}

/// How specifically `selectors` select `object` (None: not at all). An empty list selects
/// every object of a supported type; the caller decides which types are supported.
pub fn specificity(selectors: &[ResourceSelector], object: &Selectable<'_>) -> Option<Specificity> {
    if selectors.is_empty() {
        return Some(Specificity::Everything);
    }
    selectors
        .iter()
        .filter_map(|s| selector_specificity(s, object))
        .max()
}

/// Who places an object among the Placements that select it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The Placement that places it.
    pub winner: String,
    /// Other Placements exactly as specific as the winner: the tie to report.
    pub tied: Vec<String>,
}

/// The Placement that places `object` among `placements` (those of its namespace), if any
/// selects it.
pub fn winner(placements: &[&Placement], object: &Selectable<'_>) -> Option<Verdict> {
    let mut matching: Vec<(Specificity, &Placement)> = placements
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| Some((specificity(&p.spec.resource_selectors, object)?, *p)))
        .collect();
    // Most specific first; then the oldest; then by name.
    matching.sort_by_key(|(s, p)| {
        (
            Reverse(*s),
            p.metadata.creation_timestamp.as_ref().map(|t| t.0),
            p.name_any(),
        )
    });
    let (best, first) = matching.first()?;
    Some(Verdict {
        winner: first.name_any(),
        tied: matching[1..]
            .iter()
            .filter(|(s, _)| s == best)
            .map(|(_, p)| p.name_any())
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn placement(name: &str, created: &str, selectors: serde_json::Value) -> Placement {
        serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
            "metadata": {"name": name, "namespace": "shop", "creationTimestamp": created},
            "spec": {"resourceSelectors": selectors},
        }))
        .expect("placement")
    }

    fn web(labels: &BTreeMap<String, String>) -> Selectable<'_> {
        Selectable {
            api_version: "apps/v1",
            kind: "Deployment",
            name: "web",
            labels,
        }
    }

    #[test]
    fn the_most_specific_placement_wins() {
        let labels: BTreeMap<String, String> = [("tier".to_string(), "front".to_string())].into();
        let all = placement("all", "2026-01-01T00:00:00Z", json!([]));
        let by_type = placement(
            "by-type",
            "2026-01-02T00:00:00Z",
            json!([{"apiVersion": "apps/v1", "kind": "Deployment"}]),
        );
        let by_labels = placement(
            "by-labels",
            "2026-01-03T00:00:00Z",
            json!([{"apiVersion": "apps/v1", "kind": "Deployment", "labelSelector": {"matchLabels": {"tier": "front"}}}]),
        );
        let by_name = placement(
            "by-name",
            "2026-01-04T00:00:00Z",
            json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}]),
        );
        let other = placement(
            "other",
            "2026-01-01T00:00:00Z",
            json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"}]),
        );
        let object = web(&labels);
        let mut ps = vec![&all, &by_type, &by_labels, &by_name, &other];
        let verdicts = |ps: &[&Placement]| winner(ps, &object).map(|v| v.winner);
        assert_eq!(verdicts(&ps).as_deref(), Some("by-name"));
        ps.retain(|p| p.name_any() != "by-name");
        assert_eq!(verdicts(&ps).as_deref(), Some("by-labels"));
        ps.retain(|p| p.name_any() != "by-labels");
        assert_eq!(verdicts(&ps).as_deref(), Some("by-type"));
        ps.retain(|p| p.name_any() != "by-type");
        assert_eq!(verdicts(&ps).as_deref(), Some("all"));
        assert_eq!(winner(&[&other], &object), None);
        assert_eq!(
            specificity(&other.spec.resource_selectors, &object),
            None,
            "a selector for another name does not select it"
        );
    }

    #[test]
    fn a_tie_goes_to_the_oldest_and_is_reported() {
        let labels = BTreeMap::new();
        let young = placement("a-young", "2026-02-01T00:00:00Z", json!([]));
        let old = placement("z-old", "2026-01-01T00:00:00Z", json!([]));
        let twin = placement("b-twin", "2026-01-01T00:00:00Z", json!([]));
        let got = winner(&[&young, &old, &twin], &web(&labels)).expect("selected");
        assert_eq!(
            got,
            Verdict {
                winner: "b-twin".into(),
                tied: vec!["z-old".into(), "a-young".into()],
            }
        );
    }
}
