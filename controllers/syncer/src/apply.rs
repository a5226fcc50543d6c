//! Writing a Work's objects into a member, and deleting them: discovery, namespaces, the
//! conflict check, server-side apply.

use std::collections::HashMap;
use std::sync::Mutex;

use flotilla_api::{ConflictPolicy, ManifestIdentity, annotations, field_managers, labels};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ObjectMeta, Patch, PatchParams,
    PostParams,
};
use kube::discovery::{self, Scope};
use kube::{Api, Client};
use serde_json::Value;

use crate::manifest::{Prepared, belongs_to, is_managed};

/// What happened to one manifest.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Applied; the object as the member stored it.
    Applied(Box<DynamicObject>),
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

/// Creates namespace `name` in the member if it is missing, marked as created by Flotilla.
async fn ensure_namespace(client: &Client, name: &str) -> Result<(), kube::Error> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(name).await?.is_some() {
        return Ok(());
    }
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

fn describe(id: &ManifestIdentity) -> String {
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

/// Applies one prepared manifest into member `cluster`.
pub async fn apply_manifest(
    discovery: &DiscoveryCache,
    cluster: &str,
    client: &Client,
    prepared: &Prepared,
    work_ref: &str,
    policy: ConflictPolicy,
) -> Outcome {
    let id = &prepared.identity;
    let (resource, scope) = match discovery.resolve(cluster, client, id).await {
        Ok(r) => r,
        Err(e) => {
            return failed(
                flotilla_api::reasons::UNKNOWN_RESOURCE_TYPE,
                id,
                format!("the member does not serve this type: {e}"),
            );
        }
    };
    let (api, namespace) = api_for(client, &resource, &scope, id);
    if let Some(ns) = &namespace
        && let Err(e) = ensure_namespace(client, ns).await
    {
        return failed(
            flotilla_api::reasons::APPLY_FAILED,
            id,
            format!("creating namespace {ns}: {e}"),
        );
    }
    match api.get_opt(&id.name).await {
        Ok(Some(existing)) if policy == ConflictPolicy::Abort => {
            if !is_managed(&existing) {
                return Outcome::Conflict(format!(
                    "{} exists in the member and was not created by Flotilla; it is left untouched (set conflictPolicy: Adopt to take it over)",
                    describe(id)
                ));
            }
            if !belongs_to(&existing, work_ref) {
                let owner = existing
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(annotations::WORK))
                    .cloned()
                    .unwrap_or_default();
                return Outcome::Conflict(format!("{} is managed by Work {owner}", describe(id)));
            }
        }
        Ok(_) => {}
        Err(e) => return failed(flotilla_api::reasons::APPLY_FAILED, id, e),
    }
    let mut object: Value = prepared.object.clone();
    if let Some(ns) = &namespace {
        object["metadata"]["namespace"] = Value::String(ns.clone());
    }
    let params = PatchParams::apply(field_managers::SYNCER).force();
    match api.patch(&id.name, &params, &Patch::Apply(&object)).await {
        Ok(applied) => Outcome::Applied(Box::new(applied)),
        Err(kube::Error::Api(s)) if s.code == 404 => {
            discovery.forget(cluster);
            failed(flotilla_api::reasons::UNKNOWN_RESOURCE_TYPE, id, s.message)
        }
        Err(kube::Error::Api(s)) => failed(
            flotilla_api::reasons::APPLY_FAILED,
            id,
            format!("{} ({})", s.message, s.code),
        ),
        Err(e) => failed(flotilla_api::reasons::APPLY_FAILED, id, e),
    }
}

/// Deletes this Work's object `id` from the member. `Ok(true)` once it is gone (or was never
/// there, or belongs to someone else and is left alone).
pub async fn delete_manifest(
    discovery: &DiscoveryCache,
    cluster: &str,
    client: &Client,
    id: &ManifestIdentity,
    work_ref: &str,
) -> Result<bool, String> {
    let (resource, scope) = match discovery.resolve(cluster, client, id).await {
        Ok(r) => r,
        // The type is gone from the member: so are its objects.
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(true),
        Err(e) => return Err(format!("{}: {e}", describe(id))),
    };
    let (api, _) = api_for(client, &resource, &scope, id);
    match api.get_opt(&id.name).await {
        Ok(None) => Ok(true),
        Ok(Some(existing)) if !is_managed(&existing) || !belongs_to(&existing, work_ref) => {
            Ok(true)
        }
        Ok(Some(existing)) if existing.metadata.deletion_timestamp.is_some() => Ok(false),
        Ok(Some(_)) => match api.delete(&id.name, &DeleteParams::background()).await {
            Ok(_) => Ok(false),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(true),
            Err(e) => Err(format!("{}: {e}", describe(id))),
        },
        Err(e) => Err(format!("{}: {e}", describe(id))),
    }
}
