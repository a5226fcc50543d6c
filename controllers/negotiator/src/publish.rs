//! Pure: which versions of a type the published hub CRD serves, which of them stores, and why a
//! version is left out.
//!
//! A type is negotiated per version (one NegotiatedAPIResource each). When one of them is to be
//! published, the hub CRD serves every version that all the members serving the published
//! version also serve, each with its own negotiated schema — so clients of every common version
//! keep working. The hub has no conversion webhook: it converts between versions with `None`
//! (only `apiVersion` changes, the stored fields stay). That is faithful only when the versions
//! have the same fields; a version whose fields differ from the storage version's (a field only
//! one has, another type, other items) is left out and said so, since a write in it would lose
//! fields in storage or a read in it show fields it does not define. Value constraints (enums,
//! limits, patterns, CEL rules, defaults) may differ: None conversion keeps every field either
//! way, and each version validates writes in it.
//!
//! Stability: a version once published stays (a published schema is never narrowed
//! automatically, and removing a served version would strand its clients); the storage version
//! is the existing CRD's, or for a new CRD the most stable version by Kubernetes' version
//! priority (`v1` over `v1beta2` over `v1alpha1`), whatever order the reconciliations run in.

use std::collections::BTreeSet;

use flotilla_api::ApiResourceSpec;
use flotilla_schema::{ChangeKind, Limits, Schema, compare_parsed};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::Version;
use serde_json::{Value, json};

use crate::negotiation::published_crd;

/// One negotiated version of the type.
#[derive(Clone, Debug)]
pub struct NegotiatedVersion<'a> {
    /// The version's negotiated resource (names, scope, subresources, columns and schema).
    pub resource: &'a ApiResourceSpec,
    /// The members whose imports of this version took part in its negotiation.
    pub clusters: BTreeSet<String>,
}

/// A version that is not published, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeftOut {
    pub version: String,
    pub why: String,
}

/// The CRD to publish and what it leaves out.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The CRD, for server-side apply.
    pub crd: Value,
    /// The storage version.
    pub storage: String,
    /// The versions served.
    pub served: Vec<String>,
    /// Negotiated versions that are not served, each with why.
    pub left_out: Vec<LeftOut>,
}

impl Plan {
    /// `serves v1, v1beta1 (storage version v1)`.
    pub fn served_and_storage(&self) -> String {
        format!(
            "serves {} (storage version {})",
            self.served.join(", "),
            self.storage
        )
    }

    /// One sentence on the versions, for the `Published` condition.
    pub fn describe(&self) -> String {
        let mut out = self.served_and_storage();
        for l in &self.left_out {
            out.push_str(&format!("; {} is not published: {}", l.version, l.why));
        }
        out
    }
}

/// The change kinds that say two versions do not have the same fields: None conversion between
/// them would lose or invent fields.
fn is_structural(kind: ChangeKind) -> bool {
    use ChangeKind::*;
    matches!(
        kind,
        TypeChanged
            | TypeWidened
            | TypeNarrowed
            | TypeAdded
            | TypeRemoved
            | IntOrStringAdded
            | IntOrStringRemoved
            | PropertyAdded
            | PropertyRemoved
            | AdditionalPropertiesAdded
            | AdditionalPropertiesRemoved
            | ItemsAdded
            | ItemsRemoved
            | PreserveUnknownFieldsAdded
            | PreserveUnknownFieldsRemoved
    )
}

/// At most this many paths in a reason.
const MAX_PATHS: usize = 3;

/// Where `other` does not have the same fields as `storage` (empty: None conversion between them
/// keeps every field). An unreadable schema differs everywhere.
pub fn field_differences(storage: &Value, other: &Value, limits: &Limits) -> Vec<String> {
    let (Ok(a), Ok(b)) = (
        Schema::from_value_with(storage, limits),
        Schema::from_value_with(other, limits),
    ) else {
        return vec!["(a schema cannot be read)".into()];
    };
    let mut paths: Vec<String> = compare_parsed(&a, &b)
        .changes
        .iter()
        .filter(|c| is_structural(c.kind))
        .map(|c| c.path.to_string())
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

fn show_paths(paths: &[String]) -> String {
    let mut shown: Vec<String> = paths.iter().take(MAX_PATHS).cloned().collect();
    if paths.len() > MAX_PATHS {
        shown.push(format!("and {} more", paths.len() - MAX_PATHS));
    }
    shown.join(", ")
}

/// The CRD that publishes `publisher` (the version whose NegotiatedAPIResource asks for it)
/// together with the `siblings` (the type's other negotiated versions), given the hub's
/// `existing` CRD if Flotilla published it.
pub fn plan(
    publisher: &NegotiatedVersion<'_>,
    siblings: &[NegotiatedVersion<'_>],
    existing: Option<&CustomResourceDefinition>,
    limits: &Limits,
) -> Plan {
    let existing_versions: Vec<&str> = existing
        .map(|c| c.spec.versions.iter().map(|v| v.name.as_str()).collect())
        .unwrap_or_default();
    let mut left_out = Vec::new();
    let mut candidates: Vec<&NegotiatedVersion<'_>> = vec![publisher];
    for s in siblings {
        let version = &s.resource.group_version.version;
        if version == &publisher.resource.group_version.version {
            continue;
        }
        let missing: Vec<&str> = publisher
            .clusters
            .iter()
            .filter(|c| !s.clusters.contains(*c))
            .map(String::as_str)
            .collect();
        if missing.is_empty() || existing_versions.contains(&version.as_str()) {
            candidates.push(s);
        } else {
            left_out.push(LeftOut {
                version: version.clone(),
                why: format!("not served by {}", missing.join(", ")),
            });
        }
    }
    let existing_storage = existing.and_then(|c| {
        c.spec
            .versions
            .iter()
            .find(|v| v.storage)
            .map(|v| v.name.clone())
    });
    let storage = existing_storage.clone().unwrap_or_else(|| {
        candidates
            .iter()
            .map(|c| c.resource.group_version.version.clone())
            .max_by_key(|v| Version::parse(v).priority())
            .unwrap_or_default()
    });
    // The stored objects are shaped by the storage version's schema: the existing CRD's, or the
    // negotiated one of a new CRD.
    let storage_schema: Option<Value> = match existing_storage.as_ref().zip(existing) {
        Some((name, crd)) => crd
            .spec
            .versions
            .iter()
            .find(|v| &v.name == name)
            .and_then(|v| v.schema.as_ref()?.open_api_v3_schema.as_ref())
            .and_then(|s| serde_json::to_value(s).ok()),
        None => candidates
            .iter()
            .find(|c| c.resource.group_version.version == storage)
            .map(|c| c.resource.open_api_v3_schema.clone()),
    };

    // Build the CRD one version at a time; published_crd keeps the versions already in it.
    let mut crd: Option<CustomResourceDefinition> = existing.cloned();
    let mut served = Vec::new();
    // The storage version first, so that a new CRD stores it.
    candidates.sort_by_key(|c| c.resource.group_version.version != storage);
    for c in candidates {
        let version = &c.resource.group_version.version;
        let already = existing_versions.contains(&version.as_str());
        if version != &storage && !already {
            let differences = storage_schema
                .as_ref()
                .map(|s| field_differences(s, &c.resource.open_api_v3_schema, limits))
                .unwrap_or_default();
            if !differences.is_empty() {
                left_out.push(LeftOut {
                    version: version.clone(),
                    why: format!(
                        "its fields differ from the storage version {storage}'s ({}) and the hub \
                         can only convert between versions with None, which would lose them",
                        show_paths(&differences)
                    ),
                });
                continue;
            }
        }
        let value = published_crd(
            // Names, scope and the protected group's approval are the publisher's.
            &ApiResourceSpec {
                names: publisher.resource.names.clone(),
                scope: publisher.resource.scope,
                api_approved: publisher.resource.api_approved.clone(),
                ..c.resource.clone()
            },
            &c.resource.open_api_v3_schema,
            crd.as_ref(),
        );
        crd = serde_json::from_value(value).ok();
        served.push(version.clone());
    }
    let mut crd = crd
        .and_then(|c| serde_json::to_value(c).ok())
        .unwrap_or_else(|| json!({}));
    // Only what Flotilla decides: no status, no server-set metadata.
    if let Some(o) = crd.as_object_mut() {
        o.remove("status");
    }
    let metadata = crd["metadata"].clone();
    crd["metadata"] = json!({"name": metadata["name"], "labels": metadata["labels"]});
    if let Some(a) = metadata.get("annotations").filter(|a| !a.is_null()) {
        crd["metadata"]["annotations"] = a.clone();
    }
    let mut all: Vec<String> = crd["spec"]["versions"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .filter_map(|v| v["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    all.sort_by_key(|v| std::cmp::Reverse(Version::parse(v).priority()));
    served = all;
    left_out.sort_by(|a, b| a.version.cmp(&b.version));
    Plan {
        crd,
        storage,
        served,
        left_out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::{ApiResourceNames, GroupVersion, ResourceScope};

    fn routes(version: &str, spec_props: Value) -> ApiResourceSpec {
        ApiResourceSpec {
            group_version: GroupVersion {
                group: "gateway.example.com".into(),
                version: version.into(),
            },
            names: ApiResourceNames {
                plural: "routes".into(),
                kind: "Route".into(),
                ..Default::default()
            },
            scope: ResourceScope::Namespaced,
            subresources: None,
            column_definitions: vec![],
            api_approved: None,
            open_api_v3_schema: json!({"type": "object", "properties": {
                "spec": {"type": "object", "properties": spec_props}}}),
        }
    }

    fn clusters(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn versions(plan: &Plan) -> Vec<(String, bool)> {
        plan.crd["spec"]["versions"]
            .as_array()
            .expect("versions")
            .iter()
            .map(|v| {
                (
                    v["name"].as_str().expect("name").to_string(),
                    v["storage"].as_bool().expect("storage"),
                )
            })
            .collect()
    }

    #[test]
    fn every_version_all_members_serve_is_published_and_the_most_stable_stores() {
        let all = clusters(&["m1", "m2", "m3"]);
        let props = json!({"host": {"type": "string"}});
        let (v1, beta, alpha) = (
            routes("v1", props.clone()),
            routes("v1beta1", props.clone()),
            routes("v1alpha2", props),
        );
        let limits = Limits::default();
        // Whichever version asks, and in whichever order the others come, v1 stores.
        for (publisher, others) in [
            (&beta, [&v1, &alpha]),
            (&alpha, [&beta, &v1]),
            (&v1, [&alpha, &beta]),
        ] {
            let me = NegotiatedVersion {
                resource: publisher,
                clusters: all.clone(),
            };
            let others: Vec<_> = others
                .iter()
                .map(|r| NegotiatedVersion {
                    resource: r,
                    clusters: all.clone(),
                })
                .collect();
            let plan = plan(&me, &others, None, &limits);
            assert_eq!(plan.storage, "v1");
            assert_eq!(plan.served, ["v1", "v1beta1", "v1alpha2"]);
            assert!(plan.left_out.is_empty(), "{:?}", plan.left_out);
            let mut got = versions(&plan);
            got.sort();
            assert_eq!(
                got,
                [
                    ("v1".to_string(), true),
                    ("v1alpha2".to_string(), false),
                    ("v1beta1".to_string(), false)
                ]
            );
        }
    }

    #[test]
    fn a_version_not_all_members_serve_or_with_other_fields_is_left_out_and_said_so() {
        let limits = Limits::default();
        let v1 = routes("v1", json!({"host": {"type": "string"}}));
        let beta = routes("v1beta1", json!({"host": {"type": "string"}}));
        let alpha = routes(
            "v1alpha2",
            json!({"host": {"type": "string"}, "weight": {"type": "integer"}}),
        );
        // Constraints may differ: None conversion keeps every field either way.
        let beta_enum = routes(
            "v1beta2",
            json!({"host": {"type": "string", "enum": ["a", "b"]}}),
        );
        let me = NegotiatedVersion {
            resource: &v1,
            clusters: clusters(&["m1", "m2", "m3"]),
        };
        let others = [
            NegotiatedVersion {
                resource: &beta,
                clusters: clusters(&["m1", "m3"]),
            },
            NegotiatedVersion {
                resource: &alpha,
                clusters: clusters(&["m1", "m2", "m3"]),
            },
            NegotiatedVersion {
                resource: &beta_enum,
                clusters: clusters(&["m1", "m2", "m3", "m4"]),
            },
        ];
        let plan = plan(&me, &others, None, &limits);
        assert_eq!(plan.served, ["v1", "v1beta2"]);
        assert_eq!(plan.left_out.len(), 2, "{:?}", plan.left_out);
        assert_eq!(plan.left_out[0].version, "v1alpha2");
        assert!(
            plan.left_out[0].why.contains("spec.weight") && plan.left_out[0].why.contains("None"),
            "{}",
            plan.left_out[0].why
        );
        assert_eq!(plan.left_out[1].version, "v1beta1");
        assert_eq!(plan.left_out[1].why, "not served by m2");
        assert!(
            plan.describe()
                .contains("v1beta1 is not published: not served by m2")
        );
    }

    #[test]
    fn the_existing_storage_version_and_published_versions_stay() {
        let limits = Limits::default();
        let props = json!({"host": {"type": "string"}});
        let beta = routes("v1beta1", props.clone());
        let v1 = routes("v1", props);
        // Published earlier with v1beta1 alone.
        let first = plan(
            &NegotiatedVersion {
                resource: &beta,
                clusters: clusters(&["m1"]),
            },
            &[],
            None,
            &limits,
        );
        assert_eq!(first.storage, "v1beta1");
        let existing: CustomResourceDefinition = serde_json::from_value(first.crd).expect("a CRD");
        // v1 comes later: it is served, v1beta1 still stores.
        let next = plan(
            &NegotiatedVersion {
                resource: &v1,
                clusters: clusters(&["m1", "m2"]),
            },
            &[NegotiatedVersion {
                resource: &beta,
                clusters: clusters(&["m1"]),
            }],
            Some(&existing),
            &limits,
        );
        assert_eq!(next.storage, "v1beta1");
        let mut got = versions(&next);
        got.sort();
        assert_eq!(
            got,
            [("v1".to_string(), false), ("v1beta1".to_string(), true)]
        );
        assert!(next.left_out.is_empty(), "{:?}", next.left_out);
        assert_eq!(next.crd["metadata"]["name"], "routes.gateway.example.com");
        assert!(next.crd.get("status").is_none());
    }
}
