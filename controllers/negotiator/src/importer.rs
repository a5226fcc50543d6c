//! The importer's core, shared by the hub (push-mode members) and `flotilla-negotiator importer`
//! (inside a pull-mode member): read a member's schemas ([`MemberReader`]) and write them as
//! APIResourceImports in the member's hub namespace ([`ImportWriter`]).
//!
//! Custom types are read from the member's CRDs, which are watched (one watch per member, so a
//! changed CRD is imported at once); built-in types from the member's discovery and OpenAPI v3,
//! read again when the member's Kubernetes version changes and every import interval. An import
//! is written only when its content changed. When the member cannot be read, the last import is
//! kept (never deleted because of an error) and its `Imported` condition says why; an import is
//! deleted only when the member answers that it does not serve the type (any more).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_api::condition::{Verdict, set_condition};
use flotilla_api::{
    ApiResourceImport, ApiResourceSpec, conditions, field_managers, labels, names, reasons,
};
use flotilla_runtime::{ErrorCategory, MemberClient};
use flotilla_schema::Limits;
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::metrics::NegotiatorMetrics;
use crate::schemas::{self, SchemaReadError};
use crate::types::ResourceType;

/// How long a read waits for the member's CRD watch to list everything before giving up.
const CRD_SYNC_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a member's schema of a type could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("reading the member: {0}")]
    Member(#[source] Arc<kube::Error>),
    #[error(transparent)]
    Schema(Arc<SchemaReadError>),
    #[error("the member's CRDs are not listed yet (is the member reachable?)")]
    CrdsNotSynced,
    #[error("no client for the member: {0}")]
    NoClient(String),
    #[error("writing to the hub: {0}")]
    Hub(#[source] kube::Error),
}

impl Clone for ImportError {
    fn clone(&self) -> Self {
        match self {
            Self::Member(e) => Self::Member(e.clone()),
            Self::Schema(e) => Self::Schema(e.clone()),
            Self::CrdsNotSynced => Self::CrdsNotSynced,
            Self::NoClient(m) => Self::NoClient(m.clone()),
            // Hub errors are never kept in a cache; their message is enough.
            Self::Hub(e) => Self::NoClient(format!("writing to the hub: {e}")),
        }
    }
}

impl From<kube::Error> for ImportError {
    fn from(e: kube::Error) -> Self {
        Self::Member(Arc::new(e))
    }
}

impl ErrorCategory for ImportError {
    fn category(&self) -> &'static str {
        match self {
            Self::Member(e) => e.category(),
            Self::Schema(_) => "InvalidSchema",
            Self::CrdsNotSynced => "Unreachable",
            Self::NoClient(_) => "NoClient",
            Self::Hub(e) => e.category(),
        }
    }

    fn is_transient(&self) -> bool {
        !matches!(self, Self::Schema(_))
    }
}

/// What the member says about one type.
pub type ReadResult = Result<Option<ApiResourceSpec>, ImportError>;

/// GETs an OpenAPI v3 document; `None` when the server has none at `path` (404).
pub async fn fetch_openapi(client: &Client, path: &str) -> Result<Option<Value>, kube::Error> {
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    match client.request::<Value>(request).await {
        Ok(doc) => Ok(Some(doc)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// The built-in types of one member as last read, with when and at which version.
#[derive(Default)]
struct BuiltinCache {
    version: Option<String>,
    read_at: Option<Instant>,
    by_type: BTreeMap<ResourceType, Option<ApiResourceSpec>>,
}

/// Reads one member's schemas: a watched cache of its CRDs, and its built-in types.
pub struct MemberReader {
    client: Client,
    crds: Store<CustomResourceDefinition>,
    builtins: Mutex<BuiltinCache>,
    watch: JoinHandle<()>,
}

impl Drop for MemberReader {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

impl MemberReader {
    /// Starts watching the member's CRDs (with `client.watches`; reads use `client.requests`);
    /// `on_change` is called for every CRD added, changed or deleted (the initial list
    /// included). The watch stops when the reader is dropped.
    pub fn start(
        cluster: &str,
        client: MemberClient,
        on_change: impl Fn() + Send + 'static,
    ) -> Self {
        let (crds, writer) = reflector::store();
        let stream = reflector::reflector(
            writer,
            watcher(
                Api::<CustomResourceDefinition>::all(client.watches.clone()),
                watcher::Config::default(),
            ),
        )
        .default_backoff()
        .touched_objects();
        let cluster = cluster.to_string();
        let watch = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            let mut failing = false;
            while let Some(next) = stream.next().await {
                match next {
                    Ok(_) => {
                        failing = false;
                        on_change();
                    }
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!(cluster, error = %e, "watching the member's CRDs failed; retrying with backoff");
                    }
                    Err(e) => {
                        tracing::debug!(cluster, error = %e, "watching the member's CRDs failed")
                    }
                }
            }
        });
        Self {
            client: client.requests,
            crds,
            builtins: Mutex::default(),
            watch,
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, BuiltinCache> {
        self.builtins.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads every type of `types`: custom types from the CRD cache, built-in types from the
    /// cache of the last read unless the member's `version` changed, `interval` passed or a type
    /// is new.
    pub async fn read(
        &self,
        types: &BTreeSet<ResourceType>,
        version: Option<&str>,
        interval: Duration,
        limits: &Limits,
    ) -> Vec<(ResourceType, ReadResult)> {
        let synced = tokio::time::timeout(
            CRD_SYNC_TIMEOUT,
            flotilla_runtime::cache::wait_until_synced(&self.crds),
        )
        .await
        .unwrap_or(false);
        if !synced {
            return types
                .iter()
                .map(|t| (t.clone(), Err(ImportError::CrdsNotSynced)))
                .collect();
        }
        let crds = self.crds.state();
        let mut out = Vec::new();
        let mut builtin = Vec::new();
        let mut read_custom = BTreeSet::new();
        for t in types {
            let Some(crd) = schemas::find_crd(crds.iter().map(|c| &**c), t) else {
                builtin.push(t.clone());
                continue;
            };
            // Every version the CRD lists, not only the one asked for: the hub publishes every
            // version all members serve, so that clients of each keep working.
            let versions = std::iter::once(t.version.clone())
                .chain(crd.spec.versions.iter().map(|v| v.name.clone()));
            for version in versions {
                let t = ResourceType::new(&t.group, &version, &t.kind);
                if read_custom.insert(t.clone()) {
                    let spec = schemas::crd_spec(crd, &version)
                        .map_err(|e| ImportError::Schema(Arc::new(e)));
                    out.push((t, spec));
                }
            }
        }
        let stale = {
            let cache = self.cache();
            cache.version.as_deref() != version
                || cache.read_at.is_none_or(|at| at.elapsed() >= interval)
                || builtin.iter().any(|t| !cache.by_type.contains_key(t))
        };
        if stale {
            let read = self.read_builtins(&builtin, limits).await;
            let mut cache = self.cache();
            let complete = read.iter().all(|(_, r)| r.is_ok());
            if complete {
                cache.version = version.map(str::to_string);
                cache.read_at = Some(Instant::now());
            }
            for (t, r) in read {
                match r {
                    Ok(spec) => {
                        cache.by_type.insert(t.clone(), spec.clone());
                        out.push((t, Ok(spec)));
                    }
                    Err(e) => out.push((t, Err(e))),
                }
            }
        } else {
            let cache = self.cache();
            out.extend(
                builtin
                    .into_iter()
                    .map(|t| (t.clone(), Ok(cache.by_type.get(&t).cloned().flatten()))),
            );
        }
        out
    }

    /// Reads built-in types from discovery and OpenAPI v3, one group/version at a time.
    async fn read_builtins(
        &self,
        types: &[ResourceType],
        limits: &Limits,
    ) -> Vec<(ResourceType, ReadResult)> {
        let mut by_gv: BTreeMap<(String, String), Vec<&ResourceType>> = BTreeMap::new();
        for t in types {
            by_gv
                .entry((t.group.clone(), t.version.clone()))
                .or_default()
                .push(t);
        }
        let mut out = Vec::new();
        for ((group, version), types) in by_gv {
            match self.read_group(&group, &version, &types, limits).await {
                Ok(read) => out.extend(read),
                Err(e) => out.extend(types.into_iter().map(|t| (t.clone(), Err(e.clone())))),
            }
        }
        out
    }

    async fn read_group(
        &self,
        group: &str,
        version: &str,
        types: &[&ResourceType],
        limits: &Limits,
    ) -> Result<Vec<(ResourceType, ReadResult)>, ImportError> {
        let gv = kube::core::GroupVersion::gv(group, version);
        let api_group = match kube::discovery::pinned_group(&self.client, &gv).await {
            Ok(g) => g,
            Err(kube::Error::Api(s)) if s.code == 404 => {
                return Ok(types.iter().map(|t| ((*t).clone(), Ok(None))).collect());
            }
            Err(e) => return Err(e.into()),
        };
        let resources = api_group.versioned_resources(version);
        let served: Vec<_> = types
            .iter()
            .map(|t| {
                let found = resources
                    .iter()
                    .find(|(r, _)| r.kind == t.kind && !r.plural.contains('/'));
                (*t, found)
            })
            .collect();
        if served.iter().all(|(_, f)| f.is_none()) {
            return Ok(types.iter().map(|t| ((*t).clone(), Ok(None))).collect());
        }
        let path = schemas::openapi_path(group, version);
        let Some(document) = fetch_openapi(&self.client, &path).await? else {
            return Err(ImportError::Schema(Arc::new(
                SchemaReadError::NotInDocument {
                    path: format!("{path} (the member serves no OpenAPI v3 there)"),
                    type_: format!("{group}/{version}"),
                },
            )));
        };
        Ok(served
            .into_iter()
            .map(|(t, found)| {
                let result = match found {
                    None => Ok(None),
                    Some((resource, caps)) => schemas::builtin_schema(&document, &path, t, limits)
                        .map(|schema| Some(schemas::builtin_spec(t, resource, caps, schema)))
                        .map_err(|e| ImportError::Schema(Arc::new(e))),
                };
                (t.clone(), result)
            })
            .collect())
    }
}

/// Writes one member's APIResourceImports into `flotilla-cluster-<name>` on the hub.
pub struct ImportWriter<'a> {
    pub cluster: &'a str,
    /// APIResourceImports of the member's namespace on the hub.
    pub api: Api<ApiResourceImport>,
    /// A cache of (at least) the member's imports.
    pub imports: &'a Store<ApiResourceImport>,
    pub metrics: &'a NegotiatorMetrics,
    /// Set when the hub refused a status write (a pull-mode agent's credential may lack
    /// `apiresourceimports/status`): the `Imported` condition is then not reported.
    pub status_forbidden: std::sync::atomic::AtomicBool,
}

/// The import of `spec` for `cluster`, for server-side apply.
pub fn import_object(cluster: &str, spec: &ApiResourceSpec) -> Value {
    json!({
        "apiVersion": ApiResourceImport::api_version(&()),
        "kind": ApiResourceImport::kind(&()),
        "metadata": {
            "name": spec.object_name(),
            "namespace": names::cluster_namespace(cluster),
            "labels": {labels::CLUSTER: cluster},
        },
        "spec": spec,
    })
}

/// What to do with a member's imports of one type after reading its schema.
#[derive(Clone, Debug)]
pub enum Step {
    /// The schema is new or changed: apply its import, then mark it imported.
    Apply(Box<ApiResourceSpec>),
    /// The import says what the member serves: mark it imported.
    Keep(Arc<ApiResourceImport>),
    /// The member answered that it does not serve the type: delete its imports.
    Remove(Vec<Arc<ApiResourceImport>>),
    /// The schema could not be read: keep the imports of the type, marked with why, never
    /// deleted because of an error.
    Failed {
        type_: ResourceType,
        error: ImportError,
        imports: Vec<Arc<ApiResourceImport>>,
    },
}

/// The steps that bring `cluster`'s imports (`current`, those in its hub namespace) to what was
/// read of its schemas: one per type read.
pub fn steps(
    cluster: &str,
    results: &[(ResourceType, ReadResult)],
    current: &[Arc<ApiResourceImport>],
) -> Vec<Step> {
    // The imports of a type, whatever their plural.
    let of = |type_: &ResourceType| -> Vec<Arc<ApiResourceImport>> {
        current
            .iter()
            .filter(|i| {
                let r = &i.spec.resource;
                type_.is(
                    &r.group_version.group,
                    &r.group_version.version,
                    &r.names.kind,
                )
            })
            .cloned()
            .collect()
    };
    results
        .iter()
        .map(|(type_, result)| match result {
            Ok(Some(spec)) => {
                let name = spec.object_name();
                match current.iter().find(|i| i.name_any() == name) {
                    Some(i)
                        if schemas::same_spec(&i.spec.resource, spec)
                            && i.labels().get(labels::CLUSTER).map(String::as_str)
                                == Some(cluster) =>
                    {
                        Step::Keep(i.clone())
                    }
                    _ => Step::Apply(Box::new(spec.clone())),
                }
            }
            Ok(None) => Step::Remove(of(type_)),
            Err(error) => Step::Failed {
                imports: of(type_),
                type_: type_.clone(),
                error: error.clone(),
            },
        })
        .collect()
}

/// The `Imported` condition of a schema read.
fn imported() -> Verdict {
    Verdict::new(
        conditions::IMPORTED,
        "True",
        reasons::IMPORTED,
        "the member's schema was read",
    )
}

/// The `Imported` condition of a schema that could not be read.
fn failed(error: &ImportError) -> Verdict {
    Verdict::new(
        conditions::IMPORTED,
        "False",
        reasons::IMPORT_FAILED,
        format!("{error}; the last import is kept"),
    )
}

impl ImportWriter<'_> {
    fn namespace(&self) -> String {
        names::cluster_namespace(self.cluster)
    }

    /// The member's imports on the hub, from the cache.
    fn current(&self) -> Vec<Arc<ApiResourceImport>> {
        let ns = self.namespace();
        self.imports
            .state()
            .into_iter()
            .filter(|i| i.namespace().as_deref() == Some(ns.as_str()))
            .collect()
    }

    /// Writes what was read: changed imports are applied, imports of types the member does not
    /// serve are deleted, and failures are reported on the imports they keep. Returns the first
    /// failure, so the caller retries with backoff.
    pub async fn sync(&self, results: Vec<(ResourceType, ReadResult)>) -> Result<(), ImportError> {
        let steps = steps(self.cluster, &results, &self.current());
        self.execute(&steps).await
    }

    /// Makes the steps' writes; returns the first failure (of a read or a write).
    pub async fn execute(&self, steps: &[Step]) -> Result<(), ImportError> {
        let mut first_error = None;
        for step in steps {
            let outcome = match step {
                Step::Apply(spec) => self.write(spec).await,
                Step::Keep(import) => self.set_imported(import, &imported()).await,
                Step::Remove(imports) => self.remove(imports).await,
                Step::Failed {
                    type_,
                    error,
                    imports,
                } => {
                    tracing::warn!(cluster = self.cluster, type_ = %type_, error = %error, "cannot read the member's schema; keeping the last import");
                    self.metrics
                        .import_errors
                        .with_label_values(&[self.cluster, error.category()])
                        .inc();
                    let failed = failed(error);
                    let mut outcome = Err(error.clone());
                    for import in imports {
                        if let Err(e) = self.set_imported(import, &failed).await {
                            outcome = Err(e);
                        }
                    }
                    outcome
                }
            };
            if let Err(e) = outcome {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Marks every import of the member as not refreshed because of `error` (the member could
    /// not be reached at all).
    pub async fn fail_all(&self, error: &ImportError) {
        let failed = failed(error);
        for import in self.current() {
            let _ = self.set_imported(&import, &failed).await;
        }
    }

    /// Applies the import of `spec` and marks it imported.
    async fn write(&self, spec: &ApiResourceSpec) -> Result<(), ImportError> {
        let name = spec.object_name();
        let applied = self
            .api
            .patch(
                &name,
                &PatchParams::apply(field_managers::IMPORTER).force(),
                &Patch::Apply(import_object(self.cluster, spec)),
            )
            .await
            .map_err(ImportError::Hub)?;
        self.metrics
            .imports_written
            .with_label_values(&[self.cluster])
            .inc();
        tracing::info!(
            cluster = self.cluster,
            import = name,
            "imported the member's schema"
        );
        self.set_imported(&applied, &imported()).await
    }

    async fn remove(&self, imports: &[Arc<ApiResourceImport>]) -> Result<(), ImportError> {
        for import in imports {
            let name = import.name_any();
            match self.api.delete(&name, &DeleteParams::background()).await {
                Ok(_) => {
                    tracing::info!(
                        cluster = self.cluster,
                        import = name,
                        "the member no longer serves the type: removed its import"
                    )
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(ImportError::Hub(e)),
            }
        }
        Ok(())
    }

    /// Applies the `Imported` condition of `import` when it changes.
    async fn set_imported(
        &self,
        import: &ApiResourceImport,
        verdict: &Verdict,
    ) -> Result<(), ImportError> {
        let mut conditions = import
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        if !set_condition(
            &mut conditions,
            verdict.into_condition(Timestamp::now(), import.metadata.generation),
        ) {
            return Ok(());
        }
        if self
            .status_forbidden
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Ok(());
        }
        let condition = conditions.iter().find(|c| c.type_ == verdict.type_);
        let written = self
            .api
            .patch_status(
                &import.name_any(),
                &PatchParams::apply(field_managers::IMPORTER).force(),
                &Patch::Apply(json!({
                    "apiVersion": ApiResourceImport::api_version(&()),
                    "kind": ApiResourceImport::kind(&()),
                    "status": {"conditions": [condition]},
                })),
            )
            .await;
        match written {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 403 => {
                self.status_forbidden
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                tracing::info!(
                    cluster = self.cluster,
                    "the hub credential may not write APIResourceImport status: the Imported condition is not reported"
                );
                Ok(())
            }
            Err(e) => Err(ImportError::Hub(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use flotilla_api::{ApiResourceNames, GroupVersion, ResourceScope};

    use super::*;

    fn spec(kind: &str, plural: &str, fields: &[&str]) -> ApiResourceSpec {
        let properties: serde_json::Map<String, Value> = fields
            .iter()
            .map(|f| (f.to_string(), json!({"type": "string"})))
            .collect();
        ApiResourceSpec {
            group_version: GroupVersion {
                group: "example.com".into(),
                version: "v1".into(),
            },
            names: ApiResourceNames {
                plural: plural.into(),
                kind: kind.into(),
                ..Default::default()
            },
            scope: ResourceScope::Namespaced,
            subresources: None,
            column_definitions: vec![],
            api_approved: None,
            open_api_v3_schema: json!({"type": "object", "properties": properties}),
        }
    }

    /// An import of `spec` on the hub, as `import_object` writes it for `cluster`.
    fn import(cluster: &str, spec: &ApiResourceSpec) -> Arc<ApiResourceImport> {
        Arc::new(serde_json::from_value(import_object(cluster, spec)).expect("an import"))
    }

    fn widget() -> ResourceType {
        ResourceType::new("example.com", "v1", "Widget")
    }

    fn names(imports: &[Arc<ApiResourceImport>]) -> Vec<String> {
        imports.iter().map(|i| i.name_any()).collect()
    }

    #[test]
    fn an_import_is_written_only_when_what_the_member_serves_changed() {
        let served = spec("Widget", "widgets", &["size"]);
        let current = [import("m1", &served)];
        let unchanged = steps("m1", &[(widget(), Ok(Some(served.clone())))], &current);
        assert!(matches!(&unchanged[..], [Step::Keep(_)]), "{unchanged:?}");

        let wider = spec("Widget", "widgets", &["size", "color"]);
        let changed = steps("m1", &[(widget(), Ok(Some(wider)))], &current);
        assert!(
            matches!(&changed[..], [Step::Apply(s)] if s.open_api_v3_schema["properties"].get("color").is_some()),
            "{changed:?}"
        );

        // An import that is not labelled as this member's is made so.
        let mut unlabelled = (*current[0]).clone();
        unlabelled.metadata.labels = None;
        let relabel = steps(
            "m1",
            &[(widget(), Ok(Some(served)))],
            &[Arc::new(unlabelled)],
        );
        assert!(matches!(&relabel[..], [Step::Apply(_)]), "{relabel:?}");
    }

    #[test]
    fn only_a_member_saying_it_serves_no_such_type_removes_its_imports() {
        let widgets = import("m1", &spec("Widget", "widgets", &[]));
        let renamed = import("m1", &spec("Widget", "widgetz", &[]));
        let gadgets = import("m1", &spec("Gadget", "gadgets", &[]));
        let current = [widgets, renamed, gadgets];

        let gone = steps("m1", &[(widget(), Ok(None))], &current);
        let [Step::Remove(removed)] = &gone[..] else {
            panic!("{gone:?}");
        };
        // Every import of the type, whatever its plural; no other type's.
        assert_eq!(
            names(removed),
            ["widgets.v1.example.com", "widgetz.v1.example.com"]
        );

        // A read that failed keeps them, marked with why.
        let unread = steps(
            "m1",
            &[(widget(), Err(ImportError::CrdsNotSynced))],
            &current,
        );
        let [Step::Failed { imports, error, .. }] = &unread[..] else {
            panic!("{unread:?}");
        };
        assert_eq!(
            names(imports),
            ["widgets.v1.example.com", "widgetz.v1.example.com"]
        );
        assert!(failed(error).message.ends_with("the last import is kept"));
    }
}
