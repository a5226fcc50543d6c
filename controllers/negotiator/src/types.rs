//! Pure: which resource types are imported from the members.
//!
//! The defaults (Deployments, ConfigMaps, Secrets, Services, ServiceAccounts: what the splitter
//! places when a Placement names no type), every type some Placement's resource selectors name,
//! and the types given with `--extra-type`. A pull-mode member's importer cannot list the hub's
//! Placements: the negotiator writes the same set for it as a list ([`to_list`], [`parse_list`])
//! in the ConfigMap `flotilla-import-types` of the member's hub namespace.

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
pub use flotilla_api::placement::DEFAULT_IMPORTS;

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

    /// `<apiVersion>/<Kind>`, e.g. `apps/v1/Deployment` or `v1/Pod`: what `--extra-type` and
    /// the hub's list take (and [`FromStr`] parses).
    pub fn flag(&self) -> String {
        format!("{}/{}", self.api_version(), self.kind)
    }

    pub fn gvk(&self) -> GroupVersionKind {
        GroupVersionKind::gvk(&self.group, &self.version, &self.kind)
    }

    /// Whether an object's `apiVersion`/`kind` (e.g. an import's spec) is this type.
    pub fn is(&self, group: &str, version: &str, kind: &str) -> bool {
        self.group == group && self.version == version && self.kind == kind
    }

    /// The plural of a built-in type (the table of kinds), known without asking the member.
    pub fn default_plural(&self) -> Option<&'static str> {
        flotilla_interpreter::table::lookup(&self.api_version(), &self.kind).map(|k| k.plural)
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
    DEFAULT_IMPORTS
        .iter()
        .map(|(g, v, k, _)| ResourceType::new(g, v, k))
}

/// Every type to import: the defaults, the `extra` ones and every type a Placement names. (A
/// Placement that names none places every kind of the interpreter's table; of those, only the
/// defaults are imported unless another Placement or `--extra-type` names them: each import is
/// an OpenAPI document per member to read and compare.)
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

/// The key of the list in the ConfigMap `flotilla-import-types` (see [`to_list`]).
pub const LIST_KEY: &str = "types";

/// The list of `types` the negotiator writes for a pull-mode member's importer: one
/// `<apiVersion>/<Kind>` per line (as `--extra-type` takes them), sorted by group, version and
/// kind (the core group first), each line ending with a newline. The same set always gives the
/// same text, so an unchanged list is never written again.
pub fn to_list(types: &BTreeSet<ResourceType>) -> String {
    types.iter().map(|t| t.flag() + "\n").collect()
}

/// Reads a list written by [`to_list`]: its types, and the lines that are not a type (blank
/// lines and lines starting with `#` are skipped). A line that cannot be read is reported, and
/// the other types are still imported.
pub fn parse_list(text: &str) -> (BTreeSet<ResourceType>, Vec<String>) {
    let mut types = BTreeSet::new();
    let mut invalid = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.parse() {
            Ok(t) => {
                types.insert(t);
            }
            Err(_) => invalid.push(line.to_string()),
        }
    }
    (types, invalid)
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

    #[test]
    fn the_hub_list_is_sorted_one_type_a_line_and_reads_back() {
        let extra = [
            ResourceType::new("example.com", "v1alpha1", "Widget"),
            ResourceType::new("batch", "v1", "Job"),
        ];
        let types = wanted([], &extra);
        let list = to_list(&types);
        assert_eq!(
            list,
            "v1/ConfigMap\nv1/Secret\nv1/Service\nv1/ServiceAccount\napps/v1/Deployment\n\
             batch/v1/Job\nexample.com/v1alpha1/Widget\n"
        );
        assert_eq!(
            list,
            to_list(&wanted([], &[extra[1].clone(), extra[0].clone()]))
        );
        assert_eq!(parse_list(&list), (types, vec![]));
    }

    #[test]
    fn a_hub_list_line_that_is_not_a_type_is_reported_and_the_rest_read() {
        let (types, invalid) = parse_list("# comment\n\n  batch/v1/Job  \nWidget\nv1/Pod");
        assert_eq!(
            types,
            [
                ResourceType::new("batch", "v1", "Job"),
                ResourceType::new("", "v1", "Pod")
            ]
            .into()
        );
        assert_eq!(invalid, ["Widget"]);
        assert_eq!(parse_list(""), (BTreeSet::new(), vec![]));
    }
}
