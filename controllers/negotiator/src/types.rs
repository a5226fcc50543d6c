//! Pure: which resource types are imported from the members.
//!
//! The defaults (Deployments, ConfigMaps, Secrets, Services, ServiceAccounts: what the splitter
//! places when a Placement names no type), every type some Placement's resource selectors name,
//! and the types given with `--extra-type`.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use flotilla_api::Placement;
use kube::api::GroupVersionKind;

/// A resource type by group, version and kind, as Placements name them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceType {
    /// API group; empty for the core group.
    pub group: String,
    pub version: String,
    pub kind: String,
}

/// The types imported even when no Placement names any: what the splitter places by default.
pub use flotilla_api::placement::DEFAULT_TYPES;

impl ResourceType {
    pub fn new(group: &str, version: &str, kind: &str) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
        }
    }

    /// From an `apiVersion` (`apps/v1`, `v1`) and a kind.
    pub fn from_api_version(api_version: &str, kind: &str) -> Result<Self, String> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        if version.is_empty() || version.contains('/') || kind.is_empty() {
            return Err(format!(
                "{api_version:?} {kind:?} is not an apiVersion and kind"
            ));
        }
        Ok(Self::new(group, version, kind))
    }

    /// `apps/v1`, or `v1` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn gvk(&self) -> GroupVersionKind {
        GroupVersionKind::gvk(&self.group, &self.version, &self.kind)
    }

    /// Whether an object's `apiVersion`/`kind` (e.g. an import's spec) is this type.
    pub fn is(&self, group: &str, version: &str, kind: &str) -> bool {
        self.group == group && self.version == version && self.kind == kind
    }

    /// The plural of a default type, known without asking the member.
    pub fn default_plural(&self) -> Option<&'static str> {
        DEFAULT_TYPES
            .iter()
            .find(|(g, v, k, _)| self.is(g, v, k))
            .map(|(_, _, _, p)| *p)
    }
}

impl fmt::Display for ResourceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.api_version(), self.kind)
    }
}

/// Parses `--extra-type` values: `<apiVersion>/<Kind>`, e.g. `batch/v1/Job`, `v1/Pod`,
/// `example.com/v1alpha1/Widget`.
impl FromStr for ResourceType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (api_version, kind) = s.rsplit_once('/').ok_or_else(|| {
            format!("{s:?}: expected <apiVersion>/<Kind>, e.g. batch/v1/Job or v1/Pod")
        })?;
        Self::from_api_version(api_version, kind)
    }
}

/// The default types.
pub fn defaults() -> impl Iterator<Item = ResourceType> {
    DEFAULT_TYPES
        .iter()
        .map(|(g, v, k, _)| ResourceType::new(g, v, k))
}

/// Every type to import: the defaults, the `extra` ones and every type a Placement selects.
/// Selectors that are not a valid apiVersion/kind are skipped (the splitter reports them).
pub fn wanted<'a>(
    placements: impl IntoIterator<Item = &'a Placement>,
    extra: &[ResourceType],
) -> BTreeSet<ResourceType> {
    let mut types: BTreeSet<ResourceType> = defaults().chain(extra.iter().cloned()).collect();
    for p in placements {
        for s in &p.spec.resource_selectors {
            if let Ok(t) = ResourceType::from_api_version(&s.api_version, &s.kind) {
                types.insert(t);
            }
        }
    }
    types
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_extra_types() {
        assert_eq!(
            "batch/v1/Job".parse::<ResourceType>(),
            Ok(ResourceType::new("batch", "v1", "Job"))
        );
        assert_eq!(
            "v1/Pod".parse::<ResourceType>(),
            Ok(ResourceType::new("", "v1", "Pod"))
        );
        assert!("Pod".parse::<ResourceType>().is_err());
        assert!("a/b/c/Kind".parse::<ResourceType>().is_err());
        assert_eq!(ResourceType::new("", "v1", "Pod").api_version(), "v1");
    }

    #[test]
    fn wanted_types_are_the_defaults_extras_and_placement_selections() {
        let placement: Placement = serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
            "metadata": {"name": "p", "namespace": "n"},
            "spec": {"resourceSelectors": [
                {"apiVersion": "example.com/v1", "kind": "Widget"},
                {"apiVersion": "apps/v1", "kind": "Deployment"},
            ]},
        }))
        .expect("a Placement");
        let extra = [ResourceType::new("batch", "v1", "Job")];
        let types = wanted([&placement], &extra);
        assert_eq!(types.len(), 7, "{types:?}");
        assert!(types.contains(&ResourceType::new("example.com", "v1", "Widget")));
        assert!(types.contains(&ResourceType::new("batch", "v1", "Job")));
        assert_eq!(
            ResourceType::new("apps", "v1", "Deployment").default_plural(),
            Some("deployments")
        );
    }
}
