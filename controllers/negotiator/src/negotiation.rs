//! The negotiation controller: one NegotiatedAPIResource per group/version/resource that some
//! selected member imported.
//!
//! A NegotiatedAPIResource is created (server-side apply, field manager `flotilla/negotiator`,
//! never touching the user's `spec.publish`) when the first import of its type appears. Each
//! reconciliation reads the hub's own schema of the type — a hub CRD (enforced when Flotilla did
//! not create it, labelled [`labels::PUBLISHED`] when it did) or the hub's OpenAPI v3 for
//! built-in types — negotiates ([`crate::verdict`]), publishes the hub CRD when asked, and writes
//! the negotiated schema into the spec, the `Submitted`/`Published`/`Enforced` conditions and the
//! per-import summary into the status, and each import's `Compatible` condition and differences.
//! Every write is skipped when it would change nothing; a changed verdict is an Event.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_api::condition::Verdict;
use flotilla_api::{
    ApiResourceImport, ApiResourceSpec, Cluster, ImportSummary, NegotiatedApiResource, Placement,
    conditions, field_managers, labels, names, reasons,
};
use flotilla_runtime::shared::SharedCache;
use flotilla_runtime::{Context, ErrorCategory};
use flotilla_schema::Limits;
use futures::StreamExt;
use futures::channel::mpsc;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};

use crate::NegotiatorArgs;
use crate::importer::fetch_openapi;
use crate::metrics::NegotiatorMetrics;
use crate::schemas::{self, SchemaReadError};
use crate::types::ResourceType;
use crate::verdict::Reference;
use flotilla_runtime::reconcile::{Reconciler, Retry, drive};

mod plan;

use plan::{Observed, Plan, Publish};

/// When an object is tried again after a failed reconciliation.
const RETRY: Retry = Retry {
    transient: Duration::from_secs(5),
    permanent: Some(Duration::from_secs(60)),
};

/// How long the hub's OpenAPI v3 document of a group/version is reused.
const HUB_OPENAPI_TTL: Duration = Duration::from_secs(60);

/// The hub caches the negotiator's controllers share: one watch of each kind, whose changes
/// each controller subscribes to (see [`flotilla_runtime::shared`]).
#[derive(Clone)]
pub struct Shared {
    /// The selected Clusters (`--cluster-selector`).
    pub clusters: SharedCache<Cluster>,
    /// Every APIResourceImport on the hub.
    pub imports: SharedCache<ApiResourceImport>,
    /// Every NegotiatedAPIResource.
    pub negotiations: SharedCache<NegotiatedApiResource>,
    /// Every Placement on the hub (for the types to import).
    pub placements: SharedCache<Placement>,
}

impl Shared {
    /// Starts the watches.
    pub fn start(ctx: &Context, args: &NegotiatorArgs) -> Self {
        let client = &ctx.client;
        Self {
            clusters: SharedCache::start(
                ctx,
                Api::all(client.clone()),
                flotilla_runtime::cache::selected(&args.cluster_selector),
            ),
            imports: SharedCache::start(ctx, Api::all(client.clone()), watcher::Config::default()),
            negotiations: SharedCache::start(
                ctx,
                Api::all(client.clone()),
                watcher::Config::default(),
            ),
            placements: SharedCache::start(
                ctx,
                Api::all(client.clone()),
                watcher::Config::default(),
            ),
        }
    }

    /// Reports readiness once every shared cache has listed everything.
    pub async fn mark_ready_when_synced(&self, ctx: &Context) {
        use flotilla_runtime::cache::wait_until_synced;
        tokio::select! {
            _ = ctx.shutdown.cancelled() => {}
            _ = async {
                wait_until_synced(&self.clusters).await;
                wait_until_synced(&self.imports).await;
                wait_until_synced(&self.placements).await;
                wait_until_synced(&self.negotiations).await;
            } => {
                tracing::info!("caches synced");
                ctx.health.set_caches_synced(true);
            }
        }
    }

    /// Whether Cluster `name` is one of the selected ones.
    pub fn is_selected(&self, name: &str) -> bool {
        self.clusters.get(&ObjectRef::new(name)).is_some()
    }

    /// The imports of the selected Clusters, optionally only those named `name`, by cluster.
    pub fn selected_imports(&self, name: Option<&str>) -> Vec<Arc<ApiResourceImport>> {
        let mut imports: Vec<_> = self
            .imports
            .state()
            .into_iter()
            .filter(|i| i.metadata.deletion_timestamp.is_none())
            .filter(|i| name.is_none_or(|n| i.name_any() == n))
            .filter(|i| i.cluster_name().is_some_and(|c| self.is_selected(c)))
            .collect();
        imports.sort_by(|a, b| a.cluster_name().cmp(&b.cluster_name()));
        imports
    }
}

/// Why a negotiation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("the hub's schema of the type cannot be read: {0}")]
    HubSchema(#[from] SchemaReadError),
}

impl ErrorCategory for Error {
    fn category(&self) -> &'static str {
        match self {
            Self::Kube(e) => e.category(),
            Self::HubSchema(_) => "InvalidSchema",
        }
    }

    fn is_transient(&self) -> bool {
        match self {
            Self::Kube(e) => e.is_transient(),
            Self::HubSchema(_) => false,
        }
    }
}

/// An OpenAPI v3 document as read at a time (`None`: the hub serves none at that path).
type ReadDocument = (Instant, Option<Arc<Value>>);

/// The hub's OpenAPI v3 documents, reused for [`HUB_OPENAPI_TTL`].
#[derive(Default)]
struct HubOpenApi {
    cache: Mutex<HashMap<String, ReadDocument>>,
}

impl HubOpenApi {
    async fn document(
        &self,
        client: &Client,
        path: &str,
    ) -> Result<Option<Arc<Value>>, kube::Error> {
        if let Some((at, doc)) = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(path)
            && at.elapsed() < HUB_OPENAPI_TTL
        {
            return Ok(doc.clone());
        }
        let doc = fetch_openapi(client, path).await?.map(Arc::new);
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(path.to_string(), (Instant::now(), doc.clone()));
        Ok(doc)
    }
}

struct Negotiator {
    ctx: Context,
    args: NegotiatorArgs,
    shared: Shared,
    metrics: NegotiatorMetrics,
    limits: Limits,
    hub_openapi: HubOpenApi,
    /// Every NegotiatedAPIResource (the other versions of a type, for its publication).
    negotiations: Store<NegotiatedApiResource>,
}

/// The NegotiatedAPIResources hub CRD `crd` concerns: one per version it serves, and every other
/// version of its type (`negotiations`), which a publication may now include.
fn negotiations_of_crd(
    crd: &CustomResourceDefinition,
    negotiations: &[Arc<NegotiatedApiResource>],
) -> Vec<ObjectRef<NegotiatedApiResource>> {
    let mut names: Vec<String> = crd
        .spec
        .versions
        .iter()
        .map(|v| names::api_resource_name(&crd.spec.group, &v.name, &crd.spec.names.plural))
        .collect();
    names.extend(
        negotiations
            .iter()
            .filter(|n| {
                let r = &n.spec.resource;
                r.group_version.group == crd.spec.group && r.names.plural == crd.spec.names.plural
            })
            .map(|n| n.name_any()),
    );
    names.sort();
    names.dedup();
    names.iter().map(|n| ObjectRef::new(n)).collect()
}

/// Runs the negotiation controller until `ctx.shutdown`.
pub async fn run(
    ctx: Context,
    args: NegotiatorArgs,
    shared: Shared,
    metrics: NegotiatorMetrics,
) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let controller = shared.negotiations.controller().with_config(
        controller::Config::default()
            .concurrency(args.concurrency)
            .debounce(Duration::from_millis(500)),
    );
    // An import changes: the negotiation of its type, started once the shared cache of imports
    // has the change (a watch of its own would race the cache the negotiation reads).
    let (import_triggers, imports_changed) = mpsc::unbounded();
    tokio::spawn(ensure_negotiations(
        ctx.clone(),
        shared.clone(),
        import_triggers,
    ));
    let negotiations = shared.negotiations.store();
    let state = Arc::new(Negotiator {
        limits: args.import.limits(),
        ctx: ctx.clone(),
        args,
        shared,
        metrics,
        hub_openapi: HubOpenApi::default(),
        negotiations: negotiations.clone(),
    });
    let controller = controller
        .reconcile_on(imports_changed)
        // A hub CRD changes: it may enforce, or publish, a type.
        .watches(
            Api::<CustomResourceDefinition>::all(client),
            watcher::Config::default(),
            move |crd| negotiations_of_crd(&crd, &negotiations.state()),
        );
    drive(controller, state).await;
    Ok(())
}

/// The NegotiatedAPIResource of a type, as the negotiator first writes it.
fn negotiation_object(name: &str, resource: &ApiResourceSpec) -> Value {
    json!({
        "apiVersion": NegotiatedApiResource::api_version(&()),
        "kind": NegotiatedApiResource::kind(&()),
        "metadata": {"name": name},
        "spec": resource,
    })
}

/// Creates the NegotiatedAPIResource of every imported type of a selected Cluster that has none
/// (its creation then triggers its negotiation), and sends every other import change on to the
/// negotiation of its type through `triggers`.
async fn ensure_negotiations(
    ctx: Context,
    shared: Shared,
    triggers: mpsc::UnboundedSender<ObjectRef<NegotiatedApiResource>>,
) {
    let negotiations = &shared.negotiations;
    let mut changes = shared.imports.touched();
    tokio::select! {
        _ = ctx.shutdown.cancelled() => return,
        _ = flotilla_runtime::cache::wait_until_synced(negotiations) => {}
    }
    let api: Api<NegotiatedApiResource> = Api::all(ctx.client.clone());
    let mut creating = Creating::default();
    loop {
        let import = tokio::select! {
            _ = ctx.shutdown.cancelled() => return,
            next = changes.next() => match next {
                Some(Ok(i)) => i,
                Some(Err(_)) | None => return,
            },
        };
        let name = import.name_any();
        let _ = triggers.unbounded_send(ObjectRef::new(&name));
        let wanted = import.cluster_name().is_some_and(|c| shared.is_selected(c))
            && import.metadata.deletion_timestamp.is_none()
            && shared.imports.get(&ObjectRef::from_obj(&import)).is_some();
        let cached = negotiations.get(&ObjectRef::new(&name)).is_some();
        if wanted && creating.should_create(&name, cached, Instant::now()) {
            match api
                .patch(
                    &name,
                    &PatchParams::apply(field_managers::NEGOTIATOR).force(),
                    &Patch::Apply(negotiation_object(&name, &import.spec.resource)),
                )
                .await
            {
                Ok(_) => {
                    tracing::info!(negotiation = name, "created the NegotiatedAPIResource");
                    creating.created(name, Instant::now());
                }
                Err(e) => {
                    tracing::warn!(negotiation = name, error = %e, "cannot create the NegotiatedAPIResource")
                }
            }
        }
    }
}

/// The NegotiatedAPIResources created that the cache does not show yet: the imports of a type
/// from several members arrive together, and each would create it again.
#[derive(Debug, Default)]
struct Creating {
    since: HashMap<String, Instant>,
}

impl Creating {
    /// How long a creation stands for the object before the cache shows it (after that, or once
    /// the cache showed it, one that is missing is created again: deleted meanwhile).
    const PATIENCE: Duration = Duration::from_secs(30);

    /// Whether to create `name` now, given whether the cache has it.
    fn should_create(&mut self, name: &str, cached: bool, now: Instant) -> bool {
        if cached {
            self.since.remove(name);
            return false;
        }
        self.since
            .get(name)
            .is_none_or(|created| now.duration_since(*created) >= Self::PATIENCE)
    }

    fn created(&mut self, name: String, now: Instant) {
        self.since.insert(name, now);
    }
}

/// A CRD's schema of `version`, if it serves it.
fn crd_version_schema(crd: &CustomResourceDefinition, version: &str) -> Option<Value> {
    crd.spec
        .versions
        .iter()
        .find(|v| v.name == version && v.served)
        .and_then(|v| v.schema.as_ref()?.open_api_v3_schema.as_ref())
        .and_then(|s| serde_json::to_value(s).ok())
}

/// Whether Flotilla published this hub CRD.
fn is_published_by_flotilla(crd: &CustomResourceDefinition) -> bool {
    crd.labels().get(labels::PUBLISHED).map(String::as_str) == Some(labels::PUBLISHED_VALUE)
}

/// Whether the hub's CRD `current` already serves the versions of the `desired` one.
fn same_versions(current: &CustomResourceDefinition, desired: &Value) -> bool {
    serde_json::to_value(&current.spec).is_ok_and(|c| {
        schemas::normalized(&c["versions"]) == schemas::normalized(&desired["spec"]["versions"])
    })
}

/// The hub CRD that publishes `resource` with `schema`, keeping the other versions of an
/// `existing` published CRD (the first published version stays the storage version).
pub fn published_crd(
    resource: &ApiResourceSpec,
    schema: &Value,
    existing: Option<&CustomResourceDefinition>,
) -> Value {
    let gv = &resource.group_version;
    let mut schema = schema.clone();
    // A CRD's schema may only say that metadata is an object.
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut)
        && props.contains_key("metadata")
    {
        props.insert("metadata".into(), json!({"type": "object"}));
    }
    let others: Vec<Value> = existing
        .map(|c| {
            c.spec
                .versions
                .iter()
                .filter(|v| v.name != gv.version)
                .filter_map(|v| serde_json::to_value(v).ok())
                .collect()
        })
        .unwrap_or_default();
    let storage = !others.iter().any(|v| v["storage"] == json!(true));
    let mut version = json!({
        "name": gv.version,
        "served": true,
        "storage": storage,
        "schema": {"openAPIV3Schema": schema},
    });
    if let Some(sub) = &resource.subresources {
        version["subresources"] = json!(sub);
    }
    if !resource.column_definitions.is_empty() {
        version["additionalPrinterColumns"] = json!(resource.column_definitions);
    }
    let mut versions = others;
    versions.push(version);
    versions.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let names: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionNames =
        resource.names.clone().into();
    // A protected group's CRD needs its approval: the members' (an existing published CRD's
    // stays), or a plain statement that it is not approved, which the apiserver accepts.
    let approval = resource
        .api_approved
        .clone()
        .or_else(|| {
            existing
                .and_then(|c| c.metadata.annotations.as_ref())
                .and_then(|a| a.get(schemas::API_APPROVED))
                .cloned()
        })
        .or_else(|| {
            schemas::is_protected_group(&gv.group)
                .then(|| "unapproved, published by Flotilla from its members' CRDs".to_string())
        });
    let mut crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": format!("{}.{}", resource.names.plural, gv.group),
            "labels": {labels::PUBLISHED: labels::PUBLISHED_VALUE},
        },
        "spec": {
            "group": gv.group,
            "names": names,
            "scope": resource.scope.as_str(),
            "versions": versions,
        },
    });
    if let Some(approval) = approval {
        crd["metadata"]["annotations"] = json!({schemas::API_APPROVED: approval});
    }
    crd
}

/// How many of the apiserver's errors a refusal names.
const REFUSAL_CAUSES: usize = 3;

/// The apiserver's refusal in short: its first errors, each with its path and at most a line of
/// message, and how many more there are; its message, cut, when it names no causes.
fn refusal(status: &kube::core::Status) -> String {
    let cut = |s: &str, n: usize| {
        let line = s.lines().next().unwrap_or_default();
        if line.chars().count() > n {
            format!("{}…", line.chars().take(n).collect::<String>())
        } else {
            line.to_string()
        }
    };
    let causes = status
        .details
        .as_ref()
        .map(|d| d.causes.as_slice())
        .unwrap_or_default();
    if causes.is_empty() {
        return cut(&status.message, 300);
    }
    let mut out: Vec<String> = causes
        .iter()
        .take(REFUSAL_CAUSES)
        .map(|c| format!("{}: {}", c.field, cut(&c.message, 160)))
        .collect();
    if causes.len() > REFUSAL_CAUSES {
        out.push(format!("and {} more", causes.len() - REFUSAL_CAUSES));
    }
    out.join("; ")
}

impl Negotiator {
    /// What the hub says about the type, and its CRD if it has one.
    async fn reference(
        &self,
        resource: &ApiResourceSpec,
    ) -> Result<(Reference, Option<CustomResourceDefinition>), Error> {
        let gv = &resource.group_version;
        if !gv.group.is_empty() {
            let crds: Api<CustomResourceDefinition> = Api::all(self.ctx.client.clone());
            let crd_name = format!("{}.{}", resource.names.plural, gv.group);
            if let Some(crd) = crds.get_opt(&crd_name).await? {
                let reference = match (
                    crd_version_schema(&crd, &gv.version),
                    is_published_by_flotilla(&crd),
                ) {
                    (Some(schema), true) => Reference::Published(schema),
                    (Some(schema), false) => Reference::Enforced {
                        reason: reasons::HUB_CRD,
                        schema,
                    },
                    (None, _) => Reference::None,
                };
                return Ok((reference, Some(crd)));
            }
        }
        let path = schemas::openapi_path(&gv.group, &gv.version);
        let type_ = ResourceType::new(&gv.group, &gv.version, &resource.names.kind);
        if let Some(doc) = self.hub_openapi.document(&self.ctx.client, &path).await?
            && schemas::component_name(&doc, &type_).is_some()
        {
            let schema = schemas::builtin_schema(&doc, &path, &type_, &self.limits)?;
            return Ok((
                Reference::Enforced {
                    reason: reasons::BUILT_IN,
                    schema,
                },
                None,
            ));
        }
        Ok((Reference::None, None))
    }

    /// The type's NegotiatedAPIResources of other versions than `negotiation`'s, most stable
    /// first.
    fn siblings(&self, negotiation: &NegotiatedApiResource) -> Vec<Arc<NegotiatedApiResource>> {
        let me = &negotiation.spec.resource;
        let mut siblings: Vec<_> = self
            .negotiations
            .state()
            .into_iter()
            .filter(|n| {
                let r = &n.spec.resource;
                r.group_version.group == me.group_version.group
                    && r.names.plural == me.names.plural
                    && r.group_version.version != me.group_version.version
            })
            .collect();
        siblings.sort_by_key(|n| {
            std::cmp::Reverse(
                kube::core::Version::parse(&n.spec.resource.group_version.version).priority(),
            )
        });
        siblings
    }

    /// With `--cluster-selector`, other negotiators may serve other Clusters of the same hub:
    /// their summaries stay while their imports exist, so that no two negotiators undo each
    /// other.
    fn foreign_summaries(&self, negotiation: &NegotiatedApiResource) -> Option<Vec<ImportSummary>> {
        if self.args.cluster_selector.is_empty() {
            return None;
        }
        let name = negotiation.name_any();
        Some(
            negotiation
                .status
                .iter()
                .flat_map(|s| &s.imports)
                .filter(|s| !self.shared.is_selected(&s.cluster))
                .filter(|s| {
                    let import =
                        ObjectRef::new(&name).within(&names::cluster_namespace(&s.cluster));
                    self.shared.imports.get(&import).is_some()
                })
                .cloned()
                .collect(),
        )
    }

    /// Applies the published CRD, asked first as a dry run: what the hub refuses is said in
    /// short, with the paths. Returns the `Published` condition.
    async fn publish(&self, crd_name: &str, crd: &Value, done: &str) -> Verdict {
        let not_published =
            |reason, message: String| Verdict::new(conditions::PUBLISHED, "False", reason, message);
        let crds: Api<CustomResourceDefinition> = Api::all(self.ctx.client.clone());
        let params = PatchParams::apply(field_managers::NEGOTIATOR).force();
        match crds
            .patch(crd_name, &params.clone().dry_run(), &Patch::Apply(crd))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if matches!(status.code, 400 | 422) => {
                return not_published(
                    reasons::PUBLISH_REFUSED,
                    format!(
                        "the hub refuses CRD {crd_name} (server-side dry run): {}",
                        refusal(&status)
                    ),
                );
            }
            Err(e) => {
                return not_published(
                    reasons::PUBLISH_FAILED,
                    format!("checking CRD {crd_name} with a dry run: {e}"),
                );
            }
        }
        match crds.patch(crd_name, &params, &Patch::Apply(crd)).await {
            Ok(_) => {
                tracing::info!(crd = crd_name, "published the negotiated schema on the hub");
                Verdict::new(conditions::PUBLISHED, "True", reasons::PUBLISHED, done)
            }
            Err(e) => not_published(
                reasons::PUBLISH_FAILED,
                format!("applying CRD {crd_name}: {e}"),
            ),
        }
    }
}

impl Reconciler for Negotiator {
    type Object = NegotiatedApiResource;
    type Observed = Observed;
    type Plan = Plan;
    /// The `Published` condition: the hub may refuse the CRD.
    type Outcome = Verdict;
    type Error = Error;

    const NAME: &'static str = "negotiatedapiresource";
    const RETRY: Retry = RETRY;

    fn context(&self) -> &Context {
        &self.ctx
    }

    fn api(&self, _: &NegotiatedApiResource) -> Api<NegotiatedApiResource> {
        Api::all(self.ctx.client.clone())
    }

    async fn observe(&self, negotiation: &NegotiatedApiResource) -> Result<Observed, Error> {
        let (reference, hub_crd) = self.reference(&negotiation.spec.resource).await?;
        Ok(Observed {
            now: Timestamp::now(),
            imports: self.shared.selected_imports(Some(&negotiation.name_any())),
            reference,
            hub_crd,
            siblings: self.siblings(negotiation),
            foreign: self.foreign_summaries(negotiation),
        })
    }

    fn plan(
        &self,
        negotiation: &NegotiatedApiResource,
        observed: &Observed,
    ) -> Result<Plan, Error> {
        let timer = Instant::now();
        let plan = plan::plan(negotiation, observed, &self.limits);
        self.metrics
            .negotiation_duration
            .observe(timer.elapsed().as_secs_f64());
        Ok(plan)
    }

    async fn execute(
        &self,
        negotiation: &NegotiatedApiResource,
        _: &Observed,
        plan: &Plan,
    ) -> Result<Verdict, Error> {
        let published = match &plan.publish {
            Publish::Decided(v) => v.clone(),
            Publish::Apply {
                crd_name,
                crd,
                done,
            } => self.publish(crd_name, crd, done).await,
        };
        let params = PatchParams::apply(field_managers::NEGOTIATOR).force();
        if let Some(resource) = &plan.resource {
            let name = negotiation.name_any();
            Api::<NegotiatedApiResource>::all(self.ctx.client.clone())
                .patch(
                    &name,
                    &params,
                    &Patch::Apply(negotiation_object(&name, resource)),
                )
                .await?;
        }
        for step in plan.imports.iter().filter(|s| s.write) {
            let import = &step.import;
            Api::<ApiResourceImport>::namespaced(
                self.ctx.client.clone(),
                &import.namespace().unwrap_or_default(),
            )
            .patch_status(
                &import.name_any(),
                &params,
                &Patch::Apply(json!({
                    "apiVersion": ApiResourceImport::api_version(&()),
                    "kind": ApiResourceImport::kind(&()),
                    "status": {"conditions": [step.condition], "differences": step.differences},
                })),
            )
            .await?;
        }
        Ok(published)
    }

    async fn report(
        &self,
        negotiation: &NegotiatedApiResource,
        _: &Observed,
        plan: &Plan,
        published: Verdict,
    ) -> Result<Action, Error> {
        let events = &self.ctx.events;
        for step in &plan.imports {
            let Some(v) = &step.announce else { continue };
            let (import, note) = (
                &*step.import,
                format!("Compatible={} ({}): {}", v.status, v.reason, v.message),
            );
            if v.status == "False" {
                events.warning(import, v.reason, "Negotiate", note).await;
            } else {
                events.normal(import, v.reason, "Negotiate", note).await;
            }
        }
        let status = plan.status(negotiation, &published);
        if status.write {
            Api::<NegotiatedApiResource>::all(self.ctx.client.clone())
                .patch_status(
                    &negotiation.name_any(),
                    &PatchParams::apply(field_managers::NEGOTIATOR).force(),
                    &Patch::Apply(json!({
                        "apiVersion": NegotiatedApiResource::api_version(&()),
                        "kind": NegotiatedApiResource::kind(&()),
                        "status": {"conditions": status.conditions, "imports": status.summaries},
                    })),
                )
                .await?;
        }
        for v in status.transitions {
            let note = format!("{}={} ({}): {}", v.type_, v.status, v.reason, v.message);
            if plan::is_warning(&v) {
                events
                    .warning(negotiation, v.reason, "Negotiate", note)
                    .await;
            } else {
                events
                    .normal(negotiation, v.reason, "Negotiate", note)
                    .await;
            }
        }
        Ok(Action::requeue(self.args.import.import_interval))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The widgets of `example.com` at `version`, with no fields.
    fn widgets(version: &str) -> ApiResourceSpec {
        plan::tests::widgets(version, &[])
    }

    #[test]
    fn a_type_imported_by_several_members_at_once_is_created_once() {
        let mut creating = Creating::default();
        let t0 = Instant::now();
        assert!(
            creating.should_create("widgets", false, t0),
            "the first import"
        );
        creating.created("widgets".into(), t0);
        let soon = t0 + Duration::from_millis(200);
        assert!(
            !creating.should_create("widgets", false, soon),
            "the second member's import, before the cache has the creation"
        );
        assert!(!creating.should_create("widgets", true, soon), "cached");
        assert!(
            creating.should_create("widgets", false, soon),
            "gone from the cache after it had it: deleted, created again"
        );
        creating.created("gadgets".into(), t0);
        assert!(
            creating.should_create("gadgets", false, t0 + Creating::PATIENCE),
            "never shown by the cache within the patience: created again"
        );
    }

    /// The apiserver's refusal, in short: the first causes with their paths, and how many more.
    #[test]
    fn a_refusal_names_its_first_causes_and_counts_the_rest() {
        let cause = |field: &str, message: &str| kube::core::response::StatusCause {
            reason: "FieldValueInvalid".into(),
            message: message.into(),
            field: field.into(),
        };
        let mut status =
            kube::core::Status::failure("CustomResourceDefinition is invalid", "Invalid")
                .with_code(422);
        assert_eq!(refusal(&status), "CustomResourceDefinition is invalid");
        let long = format!("compilation failed: {}\n | self.percent", "x".repeat(400));
        status = status.with_details(kube::core::response::StatusDetails {
            causes: vec![
                cause("spec.validation.a", &long),
                cause("spec.validation.b", "undefined field 'fraction'"),
                cause("metadata.annotations", "Required value"),
                cause("spec.validation.c", "undefined field 'cors'"),
                cause("spec.validation.d", "undefined field 'cors'"),
            ],
            name: "httproutes.gateway.networking.k8s.io".into(),
            group: "apiextensions.k8s.io".into(),
            kind: "CustomResourceDefinition".into(),
            uid: String::new(),
            retry_after_seconds: 0,
        });
        let short = refusal(&status);
        assert!(
            short.starts_with("spec.validation.a: compilation failed"),
            "{short}"
        );
        assert!(
            short.contains("spec.validation.b: undefined field 'fraction'"),
            "{short}"
        );
        assert!(short.ends_with("; and 2 more"), "{short}");
        assert!(
            !short.contains("self.percent") && short.len() < 600,
            "{short}"
        );
    }

    /// A CRD of a protected group (`*.k8s.io`) carries the members' approval, or says it has
    /// none: without the annotation the apiserver refuses it.
    #[test]
    fn a_protected_groups_crd_carries_its_approval() {
        let schema = json!({"type": "object"});
        let mut route = widgets("v1");
        route.group_version.group = "gateway.networking.k8s.io".into();
        let crd = published_crd(&route, &schema, None);
        assert!(
            crd["metadata"]["annotations"][schemas::API_APPROVED]
                .as_str()
                .is_some_and(|a| a.starts_with("unapproved"))
        );
        route.api_approved =
            Some("https://github.com/kubernetes-sigs/gateway-api/pull/2466".into());
        let crd = published_crd(&route, &schema, None);
        assert_eq!(
            crd["metadata"]["annotations"][schemas::API_APPROVED],
            "https://github.com/kubernetes-sigs/gateway-api/pull/2466"
        );
        let plain = published_crd(&widgets("v1"), &schema, None);
        assert!(plain["metadata"].get("annotations").is_none());
        assert!(schemas::is_protected_group("k8s.io") && !schemas::is_protected_group("notk8s.io"));
    }

    #[test]
    fn a_published_crd_is_labelled_and_keeps_other_versions() {
        let schema = json!({"type": "object", "properties": {
            "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
            "spec": {"type": "object"}}});
        let first = published_crd(&widgets("v1"), &schema, None);
        assert_eq!(first["metadata"]["name"], "widgets.example.com");
        assert_eq!(first["metadata"]["labels"][labels::PUBLISHED], "true");
        assert_eq!(first["spec"]["versions"][0]["storage"], true);
        assert_eq!(
            first["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["metadata"],
            json!({"type": "object"})
        );
        let existing: CustomResourceDefinition = serde_json::from_value(first).expect("a CRD");
        assert!(is_published_by_flotilla(&existing));
        let second = published_crd(&widgets("v2"), &schema, Some(&existing));
        let versions = second["spec"]["versions"].as_array().expect("versions");
        assert_eq!(versions.len(), 2);
        assert_eq!(versions[0]["name"], "v1");
        assert_eq!(versions[0]["storage"], true);
        assert_eq!(versions[1]["storage"], false);
        assert_eq!(
            negotiations_of_crd(&existing, &[]),
            vec![ObjectRef::new("widgets.v1.example.com")]
        );
        // Another version's NegotiatedAPIResource is reconciled too: the CRD may now take it.
        let beta: NegotiatedApiResource = serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "NegotiatedAPIResource",
            "metadata": {"name": "widgets.v1beta1.example.com"},
            "spec": widgets("v1beta1"),
        }))
        .expect("a NegotiatedAPIResource");
        assert_eq!(
            negotiations_of_crd(&existing, &[Arc::new(beta)]),
            vec![
                ObjectRef::new("widgets.v1.example.com"),
                ObjectRef::new("widgets.v1beta1.example.com")
            ]
        );
    }
}
