//! Observation: everything one pass of a Placement reads, gathered before any decision. Clusters,
//! Placements, Works and imports come from the controller's caches; the selected objects are
//! listed from the hub (a copy is only ever deleted on what the hub says, never on a cache of the
//! splitter's own), never older than the newest state of their type seen before (the change
//! that started the pass included: see [`crate::watermarks`]), and a type that cannot be
//! resolved or read now is reported as unreadable, never as empty.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use flotilla_api::placement::ResourceSelector;
use flotilla_api::{Placement, Work, WorkloadProfile, annotations, labels, names};
use flotilla_interpreter::{Kinds, Profile, table};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::Value;

use crate::keys::{CopyKey, ObjectKey, import_name, member_namespace_labels, resource};
use crate::observation::{Listed, Observation, Other, Unreadable};
use crate::pod_security::{
    Level, Verdict, VerdictKey, Verdicts, pod_for_check, pod_templates, verdict_of,
    with_enforced_level,
};
use crate::references::references;
use crate::specificity::{Selectable, specificity};
use crate::state::Splitter;

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

/// What one pass of `placement` reads (a ClusterPlacement's: a Placement without a namespace,
/// which selects cluster-scoped objects).
pub async fn observe(state: &Splitter, placement: Arc<Placement>) -> Observation {
    let scope = placement.namespace();
    let ns = scope.clone().unwrap_or_default();
    let name = placement.name_any();
    let (clusters, elsewhere) = state.clusters.split();
    let neighbours = state
        .placements
        .state()
        .into_iter()
        .filter(|p| p.namespace() == scope)
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
        .filter(|p| p.namespace() == scope)
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
        selected_types(state, &placement.spec.resource_selectors, scope.is_some()).await;
    let mut types = Vec::with_capacity(resolved.len());
    for ar in resolved {
        let api: Api<DynamicObject> = match &scope {
            Some(ns) => Api::namespaced_with(state.ctx.client.clone(), ns, &ar),
            None => Api::all_with(state.ctx.client.clone(), &ar),
        };
        // Not older than the newest state seen of the type (the change that started this pass
        // included), from the apiserver's cache; consistently if that cannot be served.
        let marked = state.watermarks.list_params(&ar.group, &ar.kind);
        let list = match api.list(&marked).await {
            Err(e) if marked.resource_version.is_some() => {
                tracing::debug!(kind = %ar.kind, error = %e,
                    "listing not older than the newest state seen failed; listing consistently");
                api.list(&ListParams::default()).await
            }
            list => list,
        };
        match list {
            Ok(list) => {
                let rv = list.metadata.resource_version.as_deref();
                state.watermarks.saw(&ar.group, &ar.kind, rv);
                types.push(Listed {
                    resource: ar,
                    objects: list.items,
                });
            }
            // Unknown is not absent: this type's copies stay as they are, the others go on.
            Err(e) => unreadable.push(Unreadable::new(
                &ar.api_version,
                &ar.kind,
                &match &scope {
                    Some(ns) => format!("list {} in namespace {ns}", ar.plural),
                    None => format!("list {}", ar.plural),
                },
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
    let pod_security = match &scope {
        Some(ns) => {
            pod_security(
                state,
                ns,
                &placement.spec.resource_selectors,
                &types,
                &referenced,
            )
            .await
        }
        None => BTreeMap::new(),
    };
    let (rest_of_namespace, rest_unreadable) = match &scope {
        Some(ns) => state.inventory.rest_of_namespace(ns, &types),
        None => (Vec::new(), Vec::new()),
    };
    let bindings = bindings(state, &placement, &types, &referenced).await;
    let external_ips = external_ips(state, &placement, &types);
    let absent_since = state.absent_since(&placement);
    // Cluster-scoped objects go to no member namespace.
    let namespace_labels = scope.as_ref().and_then(|ns| {
        state.namespaces.get(&ObjectRef::new(ns)).map(|n| {
            with_enforced_level(
                member_namespace_labels(n.labels()),
                state.pod_security.default,
            )
        })
    });
    let records = state
        .records
        .state()
        .into_iter()
        .filter(|r| scope.is_some() && r.namespace() == scope)
        .collect();
    let held_back = held_back(state, &works, &[&pod_security, &bindings, &external_ips]).await;
    // Adopting is an admin's decision: theirs for a ClusterPlacement, and where they annotated
    // the namespace.
    let adopt_allowed = scope.as_ref().is_none_or(|ns| {
        state.namespaces.get(&ObjectRef::new(ns)).is_some_and(|n| {
            n.annotations()
                .get(flotilla_api::annotations::ALLOW_ADOPT)
                .map(String::as_str)
                == Some("true")
        })
    });
    let existing_namespaces_allowed = adopt_allowed
        || scope.as_ref().is_none_or(|ns| {
            state.namespaces.get(&ObjectRef::new(ns)).is_some_and(|n| {
                n.annotations()
                    .get(flotilla_api::annotations::ALLOW_EXISTING_NAMESPACES)
                    .map(String::as_str)
                    == Some("true")
            })
        });
    let copy_limit = scope.as_ref().and_then(|ns| {
        copy_limit(
            state.namespaces.get(&ObjectRef::new(ns)).as_deref(),
            state.max_copies,
        )
    });
    let byte_limit = scope.as_ref().and_then(|ns| {
        byte_limit(
            state.namespaces.get(&ObjectRef::new(ns)).as_deref(),
            state.max_copy_bytes,
        )
    });
    let data_secrets = state
        .data_secrets
        .state()
        .iter()
        .filter(|s| {
            s.labels().get(labels::PLACEMENT) == Some(&name)
                && s.annotations().get(annotations::SOURCE_NAMESPACE) == Some(&ns)
        })
        .map(|s| {
            let owners = s.owner_references().iter().map(|o| o.uid.clone());
            (
                (s.namespace().unwrap_or_default(), s.name_any()),
                owners.collect(),
            )
        })
        .collect();
    Observation {
        copy_limit,
        byte_limit,
        data_secrets,
        adopt_allowed,
        existing_namespaces_allowed,
        held_back,
        pod_security,
        bindings,
        external_ips,
        rest_of_namespace,
        rest_unreadable,
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

/// The most copies the Placements of a namespace may keep: its annotation
/// [`flotilla_api::annotations::MAX_COPIES`] (a hub admin's), else the splitter's `default`. An
/// annotation that is not a number counts as 0 (no new copies) rather than as no limit: a typo
/// must not lift the limit.
pub fn copy_limit(
    namespace: Option<&kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Namespace>>,
    default: Option<usize>,
) -> Option<usize> {
    match namespace.and_then(|n| n.annotations().get(flotilla_api::annotations::MAX_COPIES)) {
        Some(value) => Some(value.trim().parse().unwrap_or(0)),
        None => default,
    }
}

/// The most bytes the copies of a namespace's Placements may take in the hub: its annotation
/// [`flotilla_api::annotations::MAX_COPY_BYTES`] (a hub admin's), else the splitter's `default`.
/// An annotation that is not a quantity of bytes counts as 0 (no new copies), as for
/// [`copy_limit`].
pub fn byte_limit(
    namespace: Option<&kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Namespace>>,
    default: Option<u64>,
) -> Option<u64> {
    match namespace.and_then(|n| {
        n.annotations()
            .get(flotilla_api::annotations::MAX_COPY_BYTES)
    }) {
        Some(value) => Some(flotilla_api::quantity::bytes(value).unwrap_or(0)),
        None => default,
    }
}

/// The hub's Pod Security verdict on every selected workload of namespace `ns` (among the
/// objects of `types`) whose pods it does not let in, or could not judge now (see
/// [`crate::pod_security`]): a server-side dry run of a Pod built from its pod template, asked
/// once per template and namespace level. A workload whose pods would run as a ServiceAccount
/// not placed with it (`referenced`: what its references found on the hub) is held back too.
async fn pod_security(
    state: &Splitter,
    ns: &str,
    selectors: &[ResourceSelector],
    types: &[Listed],
    referenced: &BTreeMap<crate::references::Reference, Option<DynamicObject>>,
) -> BTreeMap<ObjectKey, Verdict> {
    use futures::StreamExt;
    let level = state
        .namespaces
        .get(&ObjectRef::new(ns))
        .map(|n| Level::enforced(n.labels(), state.pod_security.default))
        .unwrap_or(state.pod_security.default);
    // The ServiceAccounts the Placement selects itself.
    let accounts: std::collections::BTreeSet<String> =
        selected(types, selectors, "v1", "ServiceAccount")
            .map(|o| o.name_any())
            .collect();
    // Asked in the chart's namespace of that level, not the tenant's (see crate::pod_security).
    let pods: Api<DynamicObject> = Api::namespaced_with(
        state.ctx.client.clone(),
        &format!("{}{level}", state.pod_security.check_namespace_prefix),
        &ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
    );
    // Verdicts the cache has are read here; only new templates are cloned and sent.
    let mut verdicts = BTreeMap::new();
    let mut unknown: Vec<(ObjectKey, Value, VerdictKey)> = Vec::new();
    for t in types {
        for o in &t.objects {
            let name = o.name_any();
            let selectable = Selectable {
                api_version: &t.resource.api_version,
                kind: &t.resource.kind,
                name: &name,
                labels: o.labels(),
            };
            if specificity(selectors, &selectable).is_none() {
                continue;
            }
            let key = ObjectKey::new(&t.resource.api_version, &t.resource.kind, &name);
            // Every pod template of the object is judged; its verdict is the worst of theirs.
            for template in pod_templates(&o.data) {
                if let Some(account) = service_account(template)
                    && !accounts.contains(account)
                {
                    let reference = crate::references::Reference {
                        kind: crate::references::RefKind::ServiceAccount,
                        name: account.to_string(),
                    };
                    let why = match referenced.get(&reference) {
                        Some(Some(_)) => None,
                        Some(None) => Some(format!(
                            "namespace {ns} of the hub has no ServiceAccount {account}"
                        )),
                        None => Some(format!(
                            "the ServiceAccount {account} is not placed with it (select it, or \
                             let the Placement follow references)"
                        )),
                    };
                    if let Some(why) = why {
                        merge_verdict(
                            &mut verdicts,
                            key.clone(),
                            Verdict::Violates(format!(
                                "its pods run as the ServiceAccount {account}, and {why}: in a \
                                 member that name may be another identity, with rights the \
                                 namespace does not have on the hub"
                            )),
                        );
                        continue;
                    }
                }
                if level == Level::Privileged {
                    continue;
                }
                let cached = Verdicts::key(level, template);
                match state.pod_security.verdicts.get(cached) {
                    Some(verdict) => merge_verdict(&mut verdicts, key.clone(), verdict),
                    None => unknown.push((key.clone(), template.clone(), cached)),
                }
            }
        }
    }
    let asked: Vec<(ObjectKey, Verdict)> = futures::stream::iter(
        unknown
            .into_iter()
            .map(|(key, template, cached)| dry_run(state, pods.clone(), key, template, cached)),
    )
    .buffer_unordered(POD_SECURITY_CONCURRENCY)
    .collect()
    .await;
    for (key, verdict) in asked {
        merge_verdict(&mut verdicts, key, verdict);
    }
    verdicts.retain(|_, v| *v != Verdict::Allowed);
    verdicts
}

/// Keeps the worse of an object's verdict so far and `verdict` (of another of its pod
/// templates): a violation over an unknown over allowed.
fn merge_verdict(verdicts: &mut BTreeMap<ObjectKey, Verdict>, key: ObjectKey, verdict: Verdict) {
    let rank = |v: &Verdict| match v {
        Verdict::Allowed => 0,
        Verdict::Unknown(_) => 1,
        Verdict::Violates(_) => 2,
    };
    match verdicts.get(&key) {
        Some(current) if rank(current) >= rank(&verdict) => {}
        _ => {
            verdicts.insert(key, verdict);
        }
    }
}

/// The ServiceAccount the pods of `template` run as, unless it is the namespace's `default`.
fn service_account(template: &Value) -> Option<&str> {
    let spec = template.get("spec")?;
    spec.get("serviceAccountName")
        .or_else(|| spec.get("serviceAccount"))
        .and_then(Value::as_str)
        .filter(|a| !a.is_empty() && *a != "default")
}

/// The hub's verdict on the pods of `template` (of workload `key`), asked now and remembered under
/// `cached`.
async fn dry_run(
    state: &Splitter,
    pods: Api<DynamicObject>,
    key: ObjectKey,
    template: Value,
    cached: VerdictKey,
) -> (ObjectKey, Verdict) {
    let verdict = match serde_json::from_value::<DynamicObject>(pod_for_check(&template)) {
        Ok(pod) => {
            let params = PostParams {
                dry_run: true,
                field_manager: Some(flotilla_api::field_managers::SPLITTER.into()),
            };
            match pods.create(&params, &pod).await {
                Ok(_) => Verdict::Allowed,
                Err(e) => verdict_of(Err(&e)),
            }
        }
        // A template that is no Pod: nothing vouches for its pods.
        Err(e) => Verdict::Violates(format!("its pod template is not a valid Pod: {e}")),
    };
    state.pod_security.verdicts.remember(cached, &verdict);
    (key, verdict)
}

/// The manifests in this Placement's `works` of the workloads Pod Security holds back (those in
/// `verdicts`), read whole from the hub (the cache keeps Works lean): their copies keep them. A
/// Work that cannot be read now is left out (the plan then leaves its Works as they are).
async fn held_back(
    state: &Splitter,
    works: &[Arc<Work>],
    verdicts: &[&BTreeMap<ObjectKey, Verdict>],
) -> BTreeMap<CopyKey, DynamicObject> {
    let verdicts: BTreeMap<&ObjectKey, &Verdict> = verdicts
        .iter()
        .flat_map(|m| m.iter())
        .filter(|(_, v)| **v != Verdict::Allowed)
        .collect();
    // Nothing held back (the common case): no Work's manifests to read.
    if verdicts.is_empty() {
        return BTreeMap::new();
    }
    let key_of = |m: &DynamicObject| {
        let t = m.types.as_ref()?;
        Some(ObjectKey::new(
            &t.api_version,
            &t.kind,
            m.metadata.name.as_deref()?,
        ))
    };
    let mut out = BTreeMap::new();
    for lean in works {
        let holds = crate::digest::manifests(lean)
            .iter()
            .any(|m| key_of(m).is_some_and(|k| verdicts.contains_key(&k)));
        let (Some(cluster), Some(ns)) = (lean.cluster_name(), lean.namespace()) else {
            continue;
        };
        if !holds || lean.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let api: Api<Work> = Api::namespaced(state.ctx.client.clone(), &ns);
        let work = match api.get(&lean.name_any()).await {
            Ok(w) => w,
            Err(e) => {
                tracing::debug!(work = %lean.name_any(), error = %e, "reading a Work failed");
                continue;
            }
        };
        for m in work.spec.manifests {
            if let Some(k) = key_of(&m).filter(|k| verdicts.contains_key(k)) {
                out.insert(CopyKey::new(k, cluster), m);
            }
        }
    }
    out
}

/// The listed objects of `api_version`/`kind` that `selectors` select.
fn selected<'a, 'b>(
    types: &'a [Listed],
    selectors: &'b [ResourceSelector],
    api_version: &'b str,
    kind: &'b str,
) -> impl Iterator<Item = &'a DynamicObject> + 'b
where
    'a: 'b,
{
    types
        .iter()
        .filter(move |t| t.resource.api_version == api_version && t.resource.kind == kind)
        .flat_map(|t| t.objects.iter())
        .filter(move |o| {
            let name = o.name_any();
            let selectable = Selectable {
                api_version,
                kind,
                name: &name,
                labels: o.labels(),
            };
            specificity(selectors, &selectable).is_some()
        })
}

/// The verdicts on the bindings `placement` selects (see [`crate::bindings`]): a Placement's
/// RoleBindings, judged by what it places with them (its ServiceAccounts and Roles, and the
/// ServiceAccounts its workloads run as); a ClusterPlacement's ClusterRoleBindings, judged by
/// the ServiceAccounts the hub has in tenants' namespaces; and for both whether the hub has the
/// ClusterRoles they bind.
async fn bindings(
    state: &Splitter,
    placement: &Placement,
    types: &[Listed],
    referenced: &BTreeMap<crate::references::Reference, Option<DynamicObject>>,
) -> BTreeMap<ObjectKey, Verdict> {
    use crate::bindings::{
        CLUSTER_ROLE, CLUSTER_ROLE_BINDING, Facts, RBAC_API_VERSION, ROLE, ROLE_BINDING, judge,
    };
    let scope = placement.namespace();
    let selectors = &placement.spec.resource_selectors;
    let selected = |api_version: &'static str, kind: &'static str| {
        selected(types, selectors, api_version, kind)
            .filter(|o| o.metadata.deletion_timestamp.is_none())
            .collect::<Vec<_>>()
    };
    let kind = if scope.is_some() {
        ROLE_BINDING
    } else {
        CLUSTER_ROLE_BINDING
    };
    let bindings = selected(RBAC_API_VERSION, kind);
    if bindings.is_empty() {
        return BTreeMap::new();
    }
    let allows = |annotations: &BTreeMap<String, String>| {
        annotations
            .get(crate::bindings::ALLOW_ANY_BINDING_SUBJECT)
            .map(String::as_str)
            == Some("true")
    };
    let mut facts = Facts {
        namespace: scope.clone().unwrap_or_default(),
        any_subject: match &scope {
            Some(ns) => state
                .namespaces
                .get(&ObjectRef::new(ns))
                .is_some_and(|n| allows(n.annotations())),
            None => allows(placement.annotations()),
        },
        ..Facts::default()
    };
    match &scope {
        Some(ns) => {
            facts.accounts = selected("v1", "ServiceAccount")
                .into_iter()
                .map(|o| o.name_any())
                .chain(
                    referenced
                        .iter()
                        .filter(|(r, o)| {
                            r.kind == crate::references::RefKind::ServiceAccount && o.is_some()
                        })
                        .map(|(r, _)| r.name.clone()),
                )
                .map(|name| (ns.clone(), name))
                .collect();
            facts.roles = selected(RBAC_API_VERSION, ROLE)
                .into_iter()
                .map(|o| o.name_any())
                .collect();
        }
        None => {
            // The ServiceAccounts the ClusterRoleBindings name, outside the hub's own
            // namespaces, that the hub has.
            let named: BTreeSet<(String, String)> = bindings
                .iter()
                .flat_map(|b| b.data["subjects"].as_array().into_iter().flatten())
                .filter(|s| s["kind"] == "ServiceAccount")
                .filter_map(|s| Some((s["namespace"].as_str()?, s["name"].as_str()?)))
                .filter(|(ns, _)| !state.hub_identity_namespace(ns))
                .map(|(ns, name)| (ns.to_string(), name.to_string()))
                .collect();
            for (ns, name) in named {
                let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
                    Api::namespaced(state.ctx.client.clone(), &ns);
                match accounts.get_metadata_opt(&name).await {
                    Ok(Some(_)) => {
                        facts.accounts.insert((ns, name));
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::debug!(%ns, %name, error = %e, "reading a ServiceAccount failed");
                        facts.accounts_unknown.insert((ns, name));
                    }
                }
            }
        }
    }
    let cluster_roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> =
        Api::all(state.ctx.client.clone());
    for b in &bindings {
        let role = &b.data["roleRef"];
        if role["kind"] != CLUSTER_ROLE {
            continue;
        }
        let Some(name) = role["name"].as_str() else {
            continue;
        };
        if facts.cluster_roles.contains_key(name) {
            continue;
        }
        let exists = match cluster_roles.get_metadata_opt(name).await {
            Ok(found) => Some(found.is_some()),
            Err(e) => {
                tracing::debug!(role = name, error = %e, "reading a ClusterRole failed");
                None
            }
        };
        facts.cluster_roles.insert(name.to_string(), exists);
    }
    bindings
        .into_iter()
        .map(|b| {
            (
                ObjectKey::new(RBAC_API_VERSION, kind, &b.name_any()),
                judge(&b.data, &facts),
            )
        })
        .collect()
}

/// The verdicts on the Services with `spec.externalIPs` that a Placement selects (see
/// [`crate::external_ips`]).
fn external_ips(
    state: &Splitter,
    placement: &Placement,
    types: &[Listed],
) -> BTreeMap<ObjectKey, Verdict> {
    let Some(ns) = placement.namespace() else {
        return BTreeMap::new();
    };
    let allowed = state.namespaces.get(&ObjectRef::new(&ns)).is_some_and(|n| {
        n.annotations()
            .get(flotilla_api::annotations::ALLOW_EXTERNAL_IPS)
            .map(String::as_str)
            == Some("true")
    });
    selected(types, &placement.spec.resource_selectors, "v1", "Service")
        .map(|o| {
            (
                ObjectKey::new("v1", "Service", &o.name_any()),
                crate::external_ips::judge(&o.data, allowed),
            )
        })
        .filter(|(_, v)| *v != Verdict::Allowed)
        .collect()
}

/// How many dry runs one pass sends at once.
const POD_SECURITY_CONCURRENCY: usize = 8;

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
            Profile::accepted(
                &p.spec,
                p.status
                    .as_ref()
                    .map_or(&[][..], |s| &s.ready_condition_fields),
            ),
        )
    }))
}

/// The types a Placement (`namespaced`) or a ClusterPlacement selects, as API resources, each
/// once, with the selectors naming a type it cannot place (the hub does not serve it, or not in
/// the placement's scope) and those naming a type that cannot be looked up now. An empty list
/// selects every kind of the interpreter's table in the placement's scope. The table's kinds are
/// known; others are looked up in the hub's discovery once, remembered, and watched from then on.
async fn selected_types(
    state: &Splitter,
    selectors: &[ResourceSelector],
    namespaced: bool,
) -> (Vec<ApiResource>, Vec<String>, Vec<Unreadable>) {
    if selectors.is_empty() {
        let types = table::defaults(namespaced)
            .map(|k| known(state, k))
            .collect();
        return (types, Vec::new(), Vec::new());
    }
    let (mut types, mut unsupported, mut unreadable) = (Vec::new(), Vec::new(), Vec::new());
    for s in selectors {
        match resolve(state, &s.api_version, &s.kind, namespaced).await {
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

/// The API resource of `api_version`/`kind`, if a Placement (`namespaced`) or a ClusterPlacement
/// may place its objects.
async fn resolve(
    state: &Splitter,
    api_version: &str,
    kind: &str,
    namespaced: bool,
) -> Result<ApiResource, TypeLookupError> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    if let Some(why) = never_placed(group, kind) {
        return Err(TypeLookupError::Absent(why.into()));
    }
    if let Some(k) = table::lookup(api_version, kind) {
        return in_scope(known(state, k), k.namespaced(), namespaced);
    }
    if let Some((ar, type_namespaced)) = state.known_type(api_version, kind) {
        return in_scope(ar, type_namespaced, namespaced);
    }
    let gvk = GroupVersionKind::gvk(group, version, kind);
    match kube::discovery::pinned_kind(&state.ctx.client, &gvk).await {
        Ok((ar, caps)) => {
            let type_namespaced = caps.scope == kube::discovery::Scope::Namespaced;
            let ar = in_scope(ar, type_namespaced, namespaced)?;
            // Watched once it is known to be placeable here.
            state.learn_type(api_version, kind, &ar, type_namespaced);
            Ok(ar)
        }
        Err(e) if proves_absent(&e) => {
            Err(TypeLookupError::Absent("the hub does not serve it".into()))
        }
        Err(e) => Err(TypeLookupError::Unknown(e)),
    }
}

/// The API resource of a kind of the table, watched (from start-up, or from now on).
fn known(state: &Splitter, k: &table::Kind) -> ApiResource {
    let ar = resource(k.group, k.version, k.kind, k.plural);
    if !crate::state::WATCHED_FROM_START
        .iter()
        .any(|(g, v, kind)| (*g, *v, *kind) == (k.group, k.version, k.kind))
    {
        state.learn_type(&k.api_version(), k.kind, &ar, k.namespaced());
    }
    ar
}

/// `ar` when a Placement (`placement_namespaced`) or a ClusterPlacement may place objects of it
/// (`type_namespaced`): a Placement those of its namespace, a ClusterPlacement cluster-scoped ones.
fn in_scope(
    ar: ApiResource,
    type_namespaced: bool,
    placement_namespaced: bool,
) -> Result<ApiResource, TypeLookupError> {
    match (type_namespaced, placement_namespaced) {
        (true, true) | (false, false) => Ok(ar),
        (false, true) => Err(TypeLookupError::Absent(
            "cluster-scoped: a Placement places objects of its namespace; use a ClusterPlacement"
                .into(),
        )),
        (true, false) => Err(TypeLookupError::Absent(
            "namespaced: a ClusterPlacement places cluster-scoped objects; use a Placement in the \
             objects' namespace"
                .into(),
        )),
    }
}

/// Why objects of `group`/`kind` are never placed, whatever a selector says: they describe the
/// hub itself (Flotilla's own kinds, its nodes, its certificate requests, its API services).
pub fn never_placed(group: &str, kind: &str) -> Option<&'static str> {
    match (group, kind) {
        (flotilla_api::GROUP, _) => Some("Flotilla's own kinds describe the hub and its members"),
        ("", "Node") => Some("nodes are the hub's own"),
        ("certificates.k8s.io", "CertificateSigningRequest") => {
            Some("certificate requests are made to the hub's own signers")
        }
        ("apiregistration.k8s.io", "APIService") => Some("API services describe the hub's own API"),
        _ => None,
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
