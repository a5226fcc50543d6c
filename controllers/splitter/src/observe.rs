//! Observation: everything one pass of a Placement reads, gathered before any decision. Clusters,
//! Placements, Works and imports come from the controller's caches; the selected objects are
//! listed fresh (a copy is only ever deleted on what the hub says now, never on a stale cache),
//! and a type that cannot be resolved or read now is reported as unreadable, never as empty.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use flotilla_api::placement::{DEFAULT_TYPES, ResourceSelector};
use flotilla_api::{Placement, Work, WorkloadProfile, annotations, labels, names};
use flotilla_interpreter::{Kinds, Profile};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use crate::controller::Splitter;
use crate::plan::{Listed, Observation, Other, Unreadable, import_name, member_namespace_labels};
use crate::references::references;

pub fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// Why a selected type was not found.
pub enum TypeLookupError {
    /// The hub says it does not serve it (in namespaces).
    Absent(String),
    /// The hub could not say now: unknown, not absent.
    Unknown(kube::Error),
}

/// Whether a discovery error proves a type absent: the hub does not serve its group/version
/// (404), or serves it without the kind. Anything else (a timeout, a 5xx, Forbidden) says
/// nothing about the type.
pub fn proves_absent(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 404,
        kube::Error::Discovery(kube::error::DiscoveryError::MissingKind(_)) => true,
        _ => false,
    }
}

/// What one pass of `placement` reads.
pub async fn observe(state: &Splitter, placement: Arc<Placement>) -> Observation {
    let ns = placement.namespace().unwrap_or_default();
    let name = placement.name_any();
    let clusters = state.clusters.state();
    let in_scope: BTreeSet<String> = clusters.iter().map(|c| c.name_any()).collect();
    let elsewhere = state
        .all_clusters
        .as_ref()
        .map(|all| {
            all.state()
                .iter()
                .map(|c| c.name_any())
                .filter(|c| !in_scope.contains(c))
                .collect()
        })
        .unwrap_or_default();
    let neighbours = state
        .placements
        .state()
        .into_iter()
        .filter(|p| p.namespace().as_deref() == Some(ns.as_str()))
        .collect();
    let of_namespace = |w: &Work| w.annotations().get(annotations::SOURCE_NAMESPACE) == Some(&ns);
    let cached: Vec<Arc<Work>> = state
        .works
        .state()
        .into_iter()
        .filter(|w| of_namespace(w))
        .collect();
    // With what recent passes wrote and the cache does not have yet.
    let (works, others): (Vec<_>, Vec<_>) = state
        .recent
        .overlay(cached, of_namespace)
        .into_iter()
        .partition(|w| w.labels().get(labels::PLACEMENT) == Some(&name));
    let placements: BTreeSet<String> = state
        .placements
        .state()
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(ns.as_str()))
        .map(|p| p.name_any())
        .collect();
    // Works of other Placements: those of a Placement that no longer exists may be adopted.
    let others: Vec<Other> = others
        .into_iter()
        .filter(|w| w.metadata.deletion_timestamp.is_none())
        .map(|work| Other {
            orphaned: work
                .labels()
                .get(labels::PLACEMENT)
                .is_none_or(|p| !placements.contains(p)),
            work,
        })
        .collect();

    let (resolved, unsupported, mut unreadable) =
        selected_types(state, &placement.spec.resource_selectors).await;
    let mut types = Vec::with_capacity(resolved.len());
    for ar in resolved {
        let api: Api<DynamicObject> = Api::namespaced_with(state.ctx.client.clone(), &ns, &ar);
        match api.list(&ListParams::default()).await {
            Ok(list) => types.push(Listed {
                resource: ar,
                objects: list.items,
            }),
            // Unknown is not absent: this type's copies stay as they are, the others go on.
            Err(e) => unreadable.push(Unreadable::new(
                &ar.api_version,
                &ar.kind,
                &format!("list {} in namespace {ns}", ar.plural),
                &e,
            )),
        }
    }

    // What the selected workloads refer to: from the lists when the type was listed, else read.
    let mut referenced = BTreeMap::new();
    if placement.spec.follow_references {
        let wanted: BTreeSet<_> = types
            .iter()
            .flat_map(|t| t.objects.iter())
            .flat_map(|o| references(&o.data))
            .collect();
        for reference in wanted {
            let (g, v, k, p) = reference.kind.resource();
            let ar = resource(g, v, k, p);
            let listed = types
                .iter()
                .filter(|t| t.resource == ar)
                .flat_map(|t| t.objects.iter())
                .find(|o| o.name_any() == reference.name);
            let object = match listed {
                Some(o) => Some(o.clone()),
                None => {
                    let api: Api<DynamicObject> =
                        Api::namespaced_with(state.ctx.client.clone(), &ns, &ar);
                    match api.get_opt(&reference.name).await {
                        Ok(o) => o,
                        Err(e) => {
                            tracing::debug!(%ns, name = %reference.name, error = %e,
                                "reading a referenced object failed");
                            // Not known now: it neither follows nor counts as missing; its
                            // copies (if any) are kept as they are.
                            unreadable.push(Unreadable::new(
                                &ar.api_version,
                                &ar.kind,
                                &format!("get {} {} in namespace {ns}", ar.plural, reference.name),
                                &e,
                            ));
                            continue;
                        }
                    }
                }
            };
            referenced.insert(reference, object);
        }
    }

    let mut imports = BTreeMap::new();
    for t in &types {
        let import = import_name(&t.resource);
        for c in clusters.iter() {
            let cluster = c.name_any();
            if let Some(i) = state
                .imports
                .get(&ObjectRef::new(&import).within(&names::cluster_namespace(&cluster)))
            {
                imports.insert((import.clone(), cluster), i);
            }
        }
    }
    let absent_since = state.absent_since(&placement);
    let namespace_labels = state
        .namespaces
        .get(&ObjectRef::new(&ns))
        .map(|n| member_namespace_labels(n.labels()));
    let records = state
        .records
        .state()
        .into_iter()
        .filter(|r| r.namespace().as_deref() == Some(ns.as_str()))
        .collect();
    Observation {
        kinds: kinds(&state.profiles.state()),
        records,
        namespace_labels,
        placement,
        now: Timestamp::now(),
        clusters,
        elsewhere,
        neighbours,
        works,
        types,
        unsupported,
        unreadable,
        referenced,
        imports,
        absent_since,
        others,
    }
}

/// The interpreter of every kind: the built-in ones and those of accepted `profiles` (the oldest
/// of a kind, should two be accepted at once).
pub fn kinds(profiles: &[Arc<WorkloadProfile>]) -> Kinds {
    let mut accepted: Vec<&Arc<WorkloadProfile>> =
        profiles.iter().filter(|p| p.accepted()).collect();
    accepted.sort_by_key(|p| (p.metadata.creation_timestamp.clone(), p.name_any()));
    Kinds::new(accepted.into_iter().map(|p| {
        (
            p.spec.group.clone(),
            p.spec.kind.clone(),
            Profile::new(&p.spec),
        )
    }))
}

/// The types a Placement selects, as API resources, each once, with the selectors naming a type
/// the hub does not serve and those naming a type that cannot be looked up now. The default
/// types are known; others (custom resources) are looked up in the hub's discovery once,
/// remembered, and watched from then on.
async fn selected_types(
    state: &Splitter,
    selectors: &[ResourceSelector],
) -> (Vec<ApiResource>, Vec<String>, Vec<Unreadable>) {
    if selectors.is_empty() {
        let types = DEFAULT_TYPES
            .iter()
            .map(|(g, v, k, p)| resource(g, v, k, p))
            .collect();
        return (types, Vec::new(), Vec::new());
    }
    let (mut types, mut unsupported, mut unreadable) = (Vec::new(), Vec::new(), Vec::new());
    for s in selectors {
        match resolve(state, &s.api_version, &s.kind).await {
            Ok(ar) if !types.contains(&ar) => types.push(ar),
            Ok(_) => {}
            Err(TypeLookupError::Absent(why)) => {
                unsupported.push(format!("{} {}: {why}", s.api_version, s.kind));
            }
            Err(TypeLookupError::Unknown(e)) => unreadable.push(Unreadable::new(
                &s.api_version,
                &s.kind,
                "look the type up in the hub's discovery",
                &e,
            )),
        }
    }
    (types, unsupported, unreadable)
}

async fn resolve(
    state: &Splitter,
    api_version: &str,
    kind: &str,
) -> Result<ApiResource, TypeLookupError> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    if let Some((g, v, k, p)) = DEFAULT_TYPES
        .iter()
        .find(|(g, v, k, _)| *g == group && *v == version && *k == kind)
    {
        return Ok(resource(g, v, k, p));
    }
    if let Some(ar) = state.known_type(api_version, kind) {
        return Ok(ar);
    }
    let gvk = GroupVersionKind::gvk(group, version, kind);
    match kube::discovery::pinned_kind(&state.ctx.client, &gvk).await {
        Ok((ar, caps)) if caps.scope == kube::discovery::Scope::Namespaced => {
            state.learn_type(api_version, kind, &ar);
            Ok(ar)
        }
        Ok(_) => Err(TypeLookupError::Absent(
            "cluster-scoped: a Placement places objects of its namespace".into(),
        )),
        Err(e) if proves_absent(&e) => {
            Err(TypeLookupError::Absent("the hub does not serve it".into()))
        }
        Err(e) => Err(TypeLookupError::Unknown(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("no", "Reason")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn only_an_answer_that_the_type_is_not_served_proves_it_absent() {
        assert!(proves_absent(&api_error(404)));
        assert!(proves_absent(&kube::Error::Discovery(
            kube::error::DiscoveryError::MissingKind("Widget".into())
        )));
        for unknown in [
            api_error(403),
            api_error(500),
            api_error(503),
            api_error(429),
        ] {
            assert!(!proves_absent(&unknown), "{unknown}");
        }
        assert!(!proves_absent(&kube::Error::Discovery(
            kube::error::DiscoveryError::EmptyApiGroup("example.com".into())
        )));
    }
}
