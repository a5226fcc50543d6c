//! Writing a Work's objects into a member, and deleting them: discovery, namespaces, the
//! conflict check, server-side apply.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use flotilla_api::condition::ConditionStatus;
use flotilla_api::{
    ConflictPolicy, ManifestIdentity, ManifestStatus, annotations, field_managers, labels,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ObjectMeta, Patch, PatchParams,
    PostParams, Preconditions,
};
use kube::discovery::{self, Scope};
use kube::{Api, Client};
use serde_json::Value;

use flotilla_api::Work;
use futures::FutureExt;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::data::HubData;
use crate::lean::Manifests;
use crate::manifest::{Prepared, belongs_to, is_managed, with_data};
use crate::watches::MemberWatches;

/// What happened to one manifest.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Applied; the object as the member stored it.
    Applied(Box<DynamicObject>),
    /// Not sent: the member object is as this syncer last applied it; the object as the Work's
    /// status last reported it.
    Unchanged(Box<DynamicObject>),
    /// An object of that name exists in the member and is not this Work's.
    Conflict(String),
    /// The member refused the manifest, or its type is unknown there.
    Failed {
        reason: &'static str,
        message: String,
    },
}

/// API resources of each member, discovered once per (member, group, version, kind).
#[derive(Default)]
pub struct DiscoveryCache {
    cache: Mutex<HashMap<(String, GroupVersionKind), (ApiResource, Scope)>>,
}

impl DiscoveryCache {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(String, GroupVersionKind), (ApiResource, Scope)>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The API resource of `id`'s type in member `cluster`.
    pub async fn resolve(
        &self,
        cluster: &str,
        client: &Client,
        id: &ManifestIdentity,
    ) -> Result<(ApiResource, Scope), kube::Error> {
        let gvk = GroupVersionKind::gvk(&id.group, &id.version, &id.kind);
        let key = (cluster.to_string(), gvk.clone());
        if let Some(hit) = self.lock().get(&key) {
            return Ok(hit.clone());
        }
        let (resource, caps) = discovery::pinned_kind(client, &gvk).await?;
        let value = (resource, caps.scope);
        self.lock().insert(key, value.clone());
        Ok(value)
    }

    /// Forgets what was discovered of member `cluster` (its types may have changed).
    pub fn forget(&self, cluster: &str) {
        self.lock().retain(|(c, _), _| c != cluster);
    }
}

/// Why object `id` must not be applied to (or deleted from) the member, whose type has `scope`
/// there: the hub and the member disagree on whether the type is namespaced. Applied anyway, a
/// tenant's namespaced object would become cluster-wide in the member (and a cluster-scoped one
/// would land in its `default` namespace).
fn scope_differs(scope: &Scope, id: &ManifestIdentity) -> Option<String> {
    match (scope, &id.namespace) {
        (Scope::Cluster, Some(ns)) => Some(format!(
            "kind {} is cluster-scoped in the member but namespaced on the hub (this object is in \
             namespace {ns}): not applied, or it would be cluster-wide there",
            id.kind
        )),
        (Scope::Namespaced, None) => Some(format!(
            "kind {} is namespaced in the member but cluster-scoped on the hub: not applied",
            id.kind
        )),
        _ => None,
    }
}

/// The API for the object `id` in the member, and its namespace (for namespaced types).
fn api_for(
    client: &Client,
    resource: &ApiResource,
    scope: &Scope,
    id: &ManifestIdentity,
) -> (Api<DynamicObject>, Option<String>) {
    match scope {
        Scope::Cluster => (Api::all_with(client.clone(), resource), None),
        Scope::Namespaced => {
            let ns = id.namespace.clone().unwrap_or_else(|| "default".into());
            (
                Api::namespaced_with(client.clone(), &ns, resource),
                Some(ns),
            )
        }
    }
}

/// Namespaces known to exist in each member with the labels their Works ask for, so that they
/// are not read before every apply. Concurrent applies into a namespace not known yet wait for
/// one check, not one each.
#[derive(Default)]
pub struct NamespaceCache {
    /// Per member and namespace: what is known of it (see [`ensure_namespace`]).
    known: Mutex<HashMap<(String, String), Checked>>,
}

/// What is known of one namespace of one member, held while it is checked.
type Checked = Arc<tokio::sync::Mutex<Known>>;

/// What is known of one namespace of one member.
#[derive(Debug, Default, PartialEq)]
struct Known {
    exists: bool,
    /// It existed before Flotilla came and no Work places it: the member's own.
    members_own: bool,
    /// The labels last given to it, when a Work said what they are.
    labels: Option<BTreeMap<String, String>>,
}

impl Known {
    /// Whether the namespace must be looked at again for a Work that wants `labels` (`None`:
    /// the Work has no say in them): it is not known to exist, or was given other labels.
    fn stale_for(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        !self.exists || labels.is_some_and(|l| self.labels.as_ref() != Some(l))
    }
}

impl NamespaceCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Checked>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates namespace `name` in member `cluster` and gives it `labels` (see
    /// [`ensure_namespace`]), unless it is known to exist with them. Whether it is the member's
    /// own (Flotilla did not create it).
    async fn ensure(
        &self,
        cluster: &str,
        client: &Client,
        name: &str,
        labels: Option<&BTreeMap<String, String>>,
    ) -> Result<bool, kube::Error> {
        let entry = self
            .lock()
            .entry((cluster.to_string(), name.to_string()))
            .or_default()
            .clone();
        let mut known = entry.lock().await;
        if known.stale_for(labels) {
            known.members_own = ensure_namespace(client, name, labels).await?;
            known.exists = true;
            if let Some(l) = labels {
                known.labels = Some(l.clone());
            }
        }
        Ok(known.members_own)
    }

    /// Namespace `name` of member `cluster` may be gone (an apply into it failed).
    fn forget(&self, cluster: &str, name: &str) {
        self.lock().remove(&(cluster.to_string(), name.to_string()));
    }

    /// Forgets every namespace of member `cluster`.
    pub fn forget_cluster(&self, cluster: &str) {
        self.lock().retain(|(c, _), _| c != cluster);
    }
}

/// Whether discovery failed because the member does not serve the type (as opposed to not
/// answering).
fn is_unknown_type(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(s) => s.code == 404,
        kube::Error::Discovery(_) => true,
        _ => false,
    }
}

/// The reason an apply failed with `error`: the member refused it (`ApplyFailed`, with the
/// server's message), or it could not be reached (`ClusterUnavailable`).
fn reason_of(error: &kube::Error) -> &'static str {
    match error {
        kube::Error::Api(_) => flotilla_api::reasons::APPLY_FAILED,
        _ => flotilla_api::reasons::CLUSTER_UNAVAILABLE,
    }
}

/// Creates namespace `name` in the member if it is missing, marked as created by Flotilla, and
/// gives a namespace Flotilla created `labels` (the hub namespace's, its Pod Security level
/// among them), with server-side apply, so that a label the hub namespace drops goes too;
/// `None` leaves its labels as they are. A namespace the member had already is the member's,
/// and is left as it is. Whether it is the member's own: neither created by Flotilla nor placed
/// by a Work (a ClusterPlacement's, an admin's).
async fn ensure_namespace(
    client: &Client,
    name: &str,
    labels: Option<&BTreeMap<String, String>>,
) -> Result<bool, kube::Error> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match namespaces.get_opt(name).await? {
        // Placed itself by a Work (a ClusterPlacement's copy of the hub Namespace, with its
        // labels): the Work keeps it.
        Some(existing) if placed_by_a_work(&existing) => return Ok(false),
        // Not ours.
        Some(existing) if !created_by_flotilla(&existing) => return Ok(true),
        Some(_) => {}
        None => create_namespace(&namespaces, name).await?,
    }
    let Some(labels) = labels else {
        return Ok(false);
    };
    let mut applied = labels.clone();
    applied.insert(
        labels::MANAGED.to_string(),
        labels::MANAGED_VALUE.to_string(),
    );
    let patch = serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": applied},
    });
    namespaces
        .patch(
            name,
            &PatchParams::apply(field_managers::SYNCER).force(),
            &Patch::Apply(patch),
        )
        .await?;
    Ok(false)
}

fn placed_by_a_work(ns: &Namespace) -> bool {
    kube::ResourceExt::annotations(ns).contains_key(annotations::WORK)
}

fn created_by_flotilla(ns: &Namespace) -> bool {
    kube::ResourceExt::annotations(ns)
        .get(annotations::CREATED_NAMESPACE)
        .is_some_and(|v| v == "true")
}

async fn create_namespace(namespaces: &Api<Namespace>, name: &str) -> Result<(), kube::Error> {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                [(
                    labels::MANAGED.to_string(),
                    labels::MANAGED_VALUE.to_string(),
                )]
                .into(),
            ),
            annotations: Some(
                [(
                    annotations::CREATED_NAMESPACE.to_string(),
                    "true".to_string(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

pub fn describe(id: &ManifestIdentity) -> String {
    let group = if id.group.is_empty() {
        String::new()
    } else {
        format!(".{}", id.group)
    };
    match &id.namespace {
        Some(ns) => format!("{}{group} {ns}/{}", id.kind, id.name),
        None => format!("{}{group} {}", id.kind, id.name),
    }
}

fn failed(reason: &'static str, id: &ManifestIdentity, e: impl std::fmt::Display) -> Outcome {
    Outcome::Failed {
        reason,
        message: format!("{}: {e}", describe(id)),
    }
}

/// What the syncer shares between the applies of all Works.
pub struct Appliers<'a> {
    pub discovery: &'a DiscoveryCache,
    pub namespaces: &'a NamespaceCache,
    pub watches: &'a MemberWatches,
    /// The Works this syncer serves, to tell whether an object's Work still holds it.
    pub works: &'a Store<Work>,
    /// What the cached Works name.
    pub manifests: &'a Manifests,
}

/// The Work a member object belongs to, as `(namespace, name)`, from its `flotilla.dev/work`.
fn owner_of(existing: &DynamicObject) -> Option<(&str, &str)> {
    existing
        .metadata
        .annotations
        .as_ref()?
        .get(annotations::WORK)?
        .split_once('/')
}

/// Whether the Work that owns `existing` (object `id` in the member) has let go of it: that Work
/// is in the namespace of `work_ref` (so this syncer sees it) and, once the cache of Works is
/// complete, is gone or names the object no more. Its object may then be taken over instead of
/// deleted and created again.
pub fn owner_let_go(
    works: &Store<Work>,
    manifests: &Manifests,
    existing: &DynamicObject,
    id: &ManifestIdentity,
    work_ref: &str,
) -> bool {
    let Some((namespace, name)) = owner_of(existing) else {
        return false;
    };
    let same_namespace = work_ref.split_once('/').map(|(ns, _)| ns) == Some(namespace);
    if !same_namespace || works.wait_until_ready().now_or_never().is_none() {
        return false;
    }
    works
        .get(&ObjectRef::new(name).within(namespace))
        .is_none_or(|owner| !manifests.may_list(&owner, id))
}

/// The Work a manifest is applied for: its `<namespace>/<name>`, the Works it replaces (its
/// `flotilla.dev/replaces`, each as `<namespace>/<name>`), and its conflict policy.
#[derive(Clone, Copy, Debug)]
pub struct WorkRef<'a> {
    pub name: &'a str,
    pub replaces: &'a [String],
    pub policy: ConflictPolicy,
    /// The labels of the member namespaces its objects go to, if it says.
    pub namespace_labels: Option<&'a BTreeMap<String, String>>,
    /// Whether its objects may go into the members' own namespaces (unset: yes; see
    /// [`flotilla_api::WorkSpec::allow_existing_namespaces`]).
    pub allow_existing_namespaces: Option<bool>,
    /// Where its Secret manifests' data is read from.
    pub data: &'a HubData,
}

/// The member object as the Work's status last reported it, if that report says it was applied
/// at a known resourceVersion: the object to judge its health by when nothing changed since.
fn last_applied(
    prepared: &Prepared,
    previous: Option<&ManifestStatus>,
) -> Option<(String, DynamicObject)> {
    let previous = previous?;
    let applied = previous.applied == ConditionStatus::True;
    let rv = previous.resource_version.clone().filter(|_| applied)?;
    let mut object: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": prepared.object.get("apiVersion")?,
        "kind": prepared.object.get("kind")?,
        "metadata": {"name": previous.identity.name},
    }))
    .ok()?;
    object.metadata.namespace = previous.identity.namespace.clone();
    object.metadata.generation = previous.generation;
    object.metadata.resource_version = Some(rv.clone());
    if let Some(status) = &previous.status {
        object.data["status"] = status.clone();
    }
    Some((rv, object))
}

/// Whether Work `work_ref` may write `existing`, an object already in the member; the error
/// completes "<object> ...". With `Abort`, only objects Flotilla created for this Work, for a
/// Work it replaces (a renamed Work takes over without deleting and recreating them), or for a
/// Work that let go of them (`owner_let_go`: an object moved from one Work to another); with
/// `Adopt`, any.
pub fn may_write(
    existing: &DynamicObject,
    work_ref: &str,
    replaces: &[String],
    policy: ConflictPolicy,
    owner_let_go: bool,
) -> Result<(), String> {
    if policy == ConflictPolicy::Adopt {
        return Ok(());
    }
    if !is_managed(existing) {
        return Err("exists in the member and was not created by Flotilla; it is left untouched (set conflictPolicy: Adopt to take it over)".into());
    }
    if belongs_to(existing, work_ref)
        || replaces.iter().any(|r| belongs_to(existing, r))
        || owner_let_go
        || created_for_placed_objects(existing)
    {
        return Ok(());
    }
    let owner = existing
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::WORK))
        .cloned()
        .unwrap_or_default();
    Err(format!("is managed by Work {owner}"))
}

/// Whether `existing` is a namespace the syncer created to hold placed objects and no Work owns:
/// Flotilla's, so a Work that places the Namespace itself (a ClusterPlacement's) takes it over.
fn created_for_placed_objects(existing: &DynamicObject) -> bool {
    let annotations = existing.metadata.annotations.as_ref();
    existing
        .types
        .as_ref()
        .is_some_and(|t| t.kind == "Namespace")
        && annotations.and_then(|a| a.get(annotations::CREATED_NAMESPACE)) == Some(&"true".into())
        && annotations.is_none_or(|a| !a.contains_key(annotations::WORK))
}

/// The resourceVersion of a create-only apply: one no object has (etcd's revisions count from 1
/// and never reach it), so a write to an object that exists is refused with a conflict, while a
/// create ignores it.
const CREATE_ONLY: &str = "18446744073709551615";

/// Applies one prepared manifest into member `cluster`, unless the member object is exactly as
/// this syncer last applied it (`previous`: the manifest's last status). Returns the member's
/// API resource of the manifest's type (when the member serves it) and what happened.
pub async fn apply_manifest(
    shared: &Appliers<'_>,
    cluster: &str,
    client: &Client,
    prepared: &Prepared,
    previous: Option<&ManifestStatus>,
    work: &WorkRef<'_>,
) -> (Option<ApiResource>, Outcome) {
    let WorkRef {
        name: work_ref,
        replaces,
        policy,
        namespace_labels,
        allow_existing_namespaces,
        data,
    } = *work;
    let id = &prepared.identity;
    let (resource, scope) = match shared.discovery.resolve(cluster, client, id).await {
        Ok(r) => r,
        Err(e) if is_unknown_type(&e) => {
            let version = if id.group.is_empty() {
                id.version.clone()
            } else {
                format!("{}/{}", id.group, id.version)
            };
            return (
                None,
                failed(
                    flotilla_api::reasons::UNKNOWN_RESOURCE_TYPE,
                    id,
                    format!(
                        "the member does not serve kind {} in {version} (is its CRD installed there?): {e}",
                        id.kind
                    ),
                ),
            );
        }
        Err(e) => return (None, failed(reason_of(&e), id, e)),
    };
    if let Some(why) = scope_differs(&scope, id) {
        return (
            Some(resource),
            failed(flotilla_api::reasons::SCOPE_DIFFERS, id, why),
        );
    }
    let (api, namespace) = api_for(client, &resource, &scope, id);
    if let Some(ns) = &namespace {
        match shared
            .namespaces
            .ensure(cluster, client, ns, namespace_labels)
            .await
        {
            Ok(true) if allow_existing_namespaces == Some(false) => {
                return (
                    Some(resource),
                    failed(
                        flotilla_api::reasons::NAMESPACE_NOT_FLOTILLAS,
                        id,
                        format!(
                            "namespace {ns} exists in the member and Flotilla did not create it: \
                             it is the member's, with what its admins put there, and takes the \
                             hub namespace's objects only where the hub admin allows it \
                             (annotation {}: \"true\" on the hub namespace)",
                            flotilla_api::annotations::ALLOW_EXISTING_NAMESPACES
                        ),
                    ),
                );
            }
            Ok(_) => {}
            Err(e) => {
                return (
                    Some(resource),
                    failed(reason_of(&e), id, format!("creating namespace {ns}: {e}")),
                );
            }
        }
    }
    // Nothing changed since this syncer applied it: nothing to send, no conflict to check.
    let hash = prepared.object["metadata"]["annotations"][annotations::MANIFEST_HASH].as_str();
    let stale = match (hash, last_applied(prepared, previous)) {
        (Some(hash), Some((rv, object))) => match shared.watches.unchanged(
            cluster,
            &resource,
            namespace.as_deref(),
            &id.name,
            work_ref,
            hash,
            &rv,
        ) {
            Ok(()) => return (Some(resource), Outcome::Unchanged(Box::new(object))),
            Err(stale) => Some(stale),
        },
        _ => None,
    };
    tracing::debug!(cluster, object = %describe(id), work = work_ref, ?stale, "applying");
    // A Secret's data, from the hub Secret its Work keeps it in. Without it nothing is sent:
    // the member's copy stays as it is, never emptied.
    let mut object: Value = match &prepared.data {
        None => prepared.object.clone(),
        Some(reference) => match data.of(&reference.secret, &id.name).await {
            Ok(data) => with_data(prepared, &data),
            Err(why) => {
                return (
                    Some(resource),
                    failed(
                        flotilla_api::reasons::SECRET_DATA_MISSING,
                        id,
                        format!("{why}; nothing was applied, the member's copy is left as it is"),
                    ),
                );
            }
        },
    };
    // An object the member watch knows as this Work's needs no conflict check; one its synced
    // watch does not have is created without a read first, on the condition that it is not
    // there (a resourceVersion no object has: a create ignores it, a write to an object that
    // exists is refused with a conflict, and the object is then read and checked after all).
    let known = shared
        .watches
        .knows(cluster, &resource, namespace.as_deref(), &id.name, work_ref);
    let create_only = !known
        && shared
            .watches
            .listed_without(cluster, &resource, namespace.as_deref(), &id.name);
    let check = || async {
        let let_go = |existing: &DynamicObject| {
            owner_let_go(shared.works, shared.manifests, existing, id, work_ref)
        };
        match api.get_opt(&id.name).await {
            Ok(Some(existing)) => {
                may_write(&existing, work_ref, replaces, policy, let_go(&existing))
                    .map_err(|why| Outcome::Conflict(format!("{} {why}", describe(id))))
            }
            Ok(None) => Ok(()),
            Err(e) => Err(failed(reason_of(&e), id, e)),
        }
    };
    if !known
        && !create_only
        && let Err(outcome) = check().await
    {
        return (Some(resource), outcome);
    }
    if let Some(ns) = &namespace {
        object["metadata"]["namespace"] = Value::String(ns.clone());
    }
    let params = PatchParams::apply(field_managers::SYNCER).force();
    shared
        .watches
        .writing(cluster, &resource, namespace.as_deref(), &id.name);
    if create_only {
        object["metadata"]["resourceVersion"] = Value::String(CREATE_ONLY.into());
    }
    let mut patched = api.patch(&id.name, &params, &Patch::Apply(&object)).await;
    if create_only && matches!(&patched, Err(kube::Error::Api(s)) if s.code == 409) {
        tracing::debug!(cluster, object = %describe(id), work = work_ref, "exists after all: checking it");
        if let Err(outcome) = check().await {
            shared
                .watches
                .wrote(cluster, &resource, namespace.as_deref(), &id.name, None);
            return (Some(resource), outcome);
        }
        if let Some(metadata) = object["metadata"].as_object_mut() {
            metadata.remove("resourceVersion");
        }
        patched = api.patch(&id.name, &params, &Patch::Apply(&object)).await;
    }
    if patched.is_err() {
        shared
            .watches
            .wrote(cluster, &resource, namespace.as_deref(), &id.name, None);
    }
    let outcome = match patched {
        Ok(mut applied) => {
            // Kept until the status is written: what it reports needs no managed fields.
            applied.metadata.managed_fields = None;
            shared.watches.wrote(
                cluster,
                &resource,
                namespace.as_deref(),
                &id.name,
                Some(&applied.metadata),
            );
            Outcome::Applied(Box::new(applied))
        }
        Err(kube::Error::Api(s)) if s.code == 404 => {
            // The namespace went away (it is created again on the next try), or the type did.
            let namespace_gone = s.details.as_ref().is_some_and(|d| d.kind == "namespaces");
            if let Some(ns) = &namespace {
                shared.namespaces.forget(cluster, ns);
            }
            if namespace_gone {
                failed(flotilla_api::reasons::APPLY_FAILED, id, s.message)
            } else {
                shared.discovery.forget(cluster);
                failed(flotilla_api::reasons::UNKNOWN_RESOURCE_TYPE, id, s.message)
            }
        }
        Err(kube::Error::Api(s)) => failed(
            flotilla_api::reasons::APPLY_FAILED,
            id,
            format!("{} ({})", s.message, s.code),
        ),
        Err(e) => failed(reason_of(&e), id, e),
    };
    (Some(resource), outcome)
}

/// Deletes this Work's object `id` from the member. `Ok(true)` once it is gone (or was never
/// there, or belongs to someone else and is left alone). When the member's watch has the object
/// as this Work's, one DELETE with its UID and resourceVersion as preconditions does; otherwise
/// (or when it changed since) the object is read first.
pub async fn delete_manifest(
    shared: &Appliers<'_>,
    cluster: &str,
    client: &Client,
    id: &ManifestIdentity,
    work_ref: &str,
) -> Result<bool, String> {
    let discovery = shared.discovery;
    let (resource, scope) = match discovery.resolve(cluster, client, id).await {
        Ok(r) => r,
        // The type is gone from the member: so are its objects.
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(true),
        Err(e) => return Err(format!("{}: {e}", describe(id))),
    };
    if scope_differs(&scope, id).is_some() {
        // Never applied there: nothing of this Work to delete (an object of that name is not
        // its own).
        return Ok(true);
    }
    let (api, namespace) = api_for(client, &resource, &scope, id);
    let known = shared
        .watches
        .owned(cluster, &resource, namespace.as_deref(), &id.name, work_ref);
    tracing::debug!(cluster, object = %describe(id), work = work_ref, watched = known.is_some(), "deleting");
    if let Some((uid, resource_version)) = known {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid),
                resource_version: Some(resource_version),
            }),
            ..DeleteParams::background()
        };
        match api.delete(&id.name, &params).await {
            // A `Status` answer: the object is gone (an object that still has finalizers, or a
            // grace period, comes back as it is now, and its watch tells when it is gone).
            Ok(answer) => return Ok(answer.is_right()),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(true),
            // Changed since the watch saw it: look at it as it is.
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(format!("{}: {e}", describe(id))),
        }
    }
    match api.get_opt(&id.name).await {
        Ok(None) => Ok(true),
        Ok(Some(existing)) if !is_managed(&existing) || !belongs_to(&existing, work_ref) => {
            Ok(true)
        }
        Ok(Some(existing)) if existing.metadata.deletion_timestamp.is_some() => Ok(false),
        Ok(Some(existing)) => {
            // Exactly the object just read: one made since under the name is not this Work's.
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: existing.metadata.uid.clone(),
                    resource_version: existing.metadata.resource_version.clone(),
                }),
                ..DeleteParams::background()
            };
            match api.delete(&id.name, &params).await {
                Ok(answer) => Ok(answer.is_right()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(true),
                // Changed since it was read: the next look decides.
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(format!("{}: {e}", describe(id))),
            }
        }
        Err(e) => Err(format!("{}: {e}", describe(id))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_whose_kind_has_another_scope_in_the_member_is_not_applied() {
        let id = |namespace: Option<&str>| ManifestIdentity {
            group: "example.com".into(),
            version: "v1".into(),
            kind: "Widget".into(),
            namespace: namespace.map(String::from),
            name: "w".into(),
            ..ManifestIdentity::default()
        };
        let escape = scope_differs(&Scope::Cluster, &id(Some("team-a"))).expect("refused");
        assert!(escape.contains("cluster-scoped in the member"), "{escape}");
        assert!(escape.contains("team-a"), "{escape}");
        assert!(scope_differs(&Scope::Namespaced, &id(None)).is_some());
        assert_eq!(scope_differs(&Scope::Namespaced, &id(Some("team-a"))), None);
        assert_eq!(scope_differs(&Scope::Cluster, &id(None)), None);
    }

    #[test]
    fn a_work_with_no_say_in_its_namespaces_labels_leaves_those_another_gave() {
        let restricted: BTreeMap<String, String> = [(
            "pod-security.kubernetes.io/enforce".to_string(),
            "restricted".to_string(),
        )]
        .into();
        let unknown = Known::default();
        assert!(unknown.stale_for(None), "not known to exist");
        let labelled = Known {
            exists: true,
            members_own: false,
            labels: Some(restricted.clone()),
        };
        // A Work written by hand (no namespaceLabels) next to the splitter's: nothing to do.
        assert!(!labelled.stale_for(None));
        assert!(!labelled.stale_for(Some(&restricted)));
        assert!(labelled.stale_for(Some(&BTreeMap::new())), "other labels");
    }
    use serde_json::json;

    fn member_object(labels: Value, annotations: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "shop", "labels": labels, "annotations": annotations}
        }))
        .expect("object")
    }

    fn owned_by(work: &str) -> DynamicObject {
        member_object(
            json!({labels::MANAGED: labels::MANAGED_VALUE}),
            json!({annotations::WORK: work}),
        )
    }

    const NEW: &str = "flotilla-cluster-m1/configmap-shop-settings-0123456789";
    const OLD: &str = "flotilla-cluster-m1/configmap-settings";

    /// A Work that replaces [`OLD`] and another.
    fn old() -> [String; 2] {
        [
            "flotilla-cluster-m1/configmap-other".to_string(),
            OLD.to_string(),
        ]
    }

    #[test]
    fn a_work_writes_its_own_objects_and_those_of_the_work_it_replaces() {
        let abort = ConflictPolicy::Abort;
        assert_eq!(may_write(&owned_by(NEW), NEW, &[], abort, false), Ok(()));
        assert_eq!(may_write(&owned_by(OLD), NEW, &old(), abort, false), Ok(()));
        // The old Work does not take it back: it replaces nothing.
        let back = may_write(&owned_by(NEW), OLD, &[], abort, false).expect_err("conflict");
        assert!(back.contains(NEW), "{back}");
        // Another Work's object stays another's, whatever this one replaces...
        let other = "flotilla-cluster-m1/configmap-team-b-settings-9876543210";
        assert!(may_write(&owned_by(other), NEW, &old(), abort, false).is_err());
        // ... until that Work lets go of it.
        assert_eq!(may_write(&owned_by(other), NEW, &[], abort, true), Ok(()));
    }

    #[test]
    fn a_namespace_flotilla_created_for_placed_objects_is_taken_over_by_the_work_placing_it() {
        let namespace = |annotations: Value| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "shop", "labels": {labels::MANAGED: labels::MANAGED_VALUE},
                             "annotations": annotations}
            }))
            .expect("namespace")
        };
        let abort = ConflictPolicy::Abort;
        let created = namespace(json!({annotations::CREATED_NAMESPACE: "true"}));
        assert_eq!(may_write(&created, NEW, &[], abort, false), Ok(()));
        // Once a Work placed it, it is that Work's.
        let placed =
            namespace(json!({annotations::CREATED_NAMESPACE: "true", annotations::WORK: OLD}));
        assert!(may_write(&placed, NEW, &[], abort, false).is_err());
        // A namespace the member's own users made is theirs.
        let theirs: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}
        }))
        .expect("namespace");
        assert!(may_write(&theirs, NEW, &[], abort, false).is_err());
    }

    #[test]
    fn objects_flotilla_did_not_create_need_adopt() {
        let foreign = member_object(json!({}), json!({}));
        let why =
            may_write(&foreign, NEW, &old(), ConflictPolicy::Abort, true).expect_err("conflict");
        assert!(why.contains("not created by Flotilla"), "{why}");
        assert_eq!(
            may_write(&foreign, NEW, &[], ConflictPolicy::Adopt, false),
            Ok(())
        );
        assert_eq!(
            may_write(&owned_by(OLD), NEW, &[], ConflictPolicy::Adopt, false),
            Ok(())
        );
    }
}
