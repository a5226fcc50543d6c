//! The importer on the hub, for push-mode members: a controller of Clusters. For every Joined
//! push-mode Cluster (of `--cluster-selector`) it keeps a client and a watch of the member's CRDs,
//! and imports every wanted type (see [`crate::types`]) into `flotilla-cluster-<name>`. It runs
//! again when the Cluster changes (a new `kubernetesVersion` re-reads built-in types), when a
//! member CRD changes, when a Placement changes (the wanted types may change), and every
//! `--import-interval`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flotilla_api::condition::is_condition_true;
use flotilla_api::{ApiResourceImport, Cluster, SyncMode, conditions, names};
use flotilla_runtime::{Context, MemberClients};
use futures::channel::mpsc;
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};

use crate::NegotiatorArgs;
use crate::importer::{ImportError, ImportWriter, MemberReader, ReadResult, Step, steps};
use crate::metrics::NegotiatorMetrics;
use crate::negotiation::Shared;
use crate::types::{self, ResourceType};
use flotilla_runtime::reconcile::{Reconciler, Retry, drive};

/// A member's reader, and the credential it was built with.
struct Member {
    key: String,
    reader: Arc<MemberReader>,
}

struct HubImporter {
    ctx: Context,
    args: NegotiatorArgs,
    shared: Shared,
    metrics: NegotiatorMetrics,
    clusters: Store<Cluster>,
    clients: MemberClients,
    members: Mutex<HashMap<String, Member>>,
    /// Ticks when a member's CRDs change: every Cluster is imported again (reading CRDs from
    /// the watched caches and built-in types from the last read costs no API call, and only
    /// changed imports are written).
    trigger: mpsc::UnboundedSender<()>,
}

/// Runs the importer of push-mode members until `ctx.shutdown`.
pub async fn run(
    ctx: Context,
    args: NegotiatorArgs,
    shared: Shared,
    metrics: NegotiatorMetrics,
) -> anyhow::Result<()> {
    let controller = shared.clusters.controller().with_config(
        controller::Config::default()
            .concurrency(args.concurrency)
            .debounce(Duration::from_millis(500)),
    );
    let (trigger, member_changes) = mpsc::unbounded();
    let state = Arc::new(HubImporter {
        ctx: ctx.clone(),
        clusters: controller.store(),
        args,
        shared: shared.clone(),
        metrics,
        clients: MemberClients::new(),
        members: Mutex::default(),
        trigger,
    });
    // A Placement changes: the types to import may have (ticks coalesce: one pending is enough).
    let (tick, placements_changed) = mpsc::channel(1);
    let tick = Mutex::new(tick);
    shared.placements.subscribe(move |_| {
        let _ = tick.lock().unwrap_or_else(|e| e.into_inner()).try_send(());
    });
    let controller = controller
        .reconcile_all_on(member_changes)
        .reconcile_all_on(placements_changed);
    drive(controller, state).await;
    Ok(())
}

impl HubImporter {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Member>> {
        self.members.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops watching members whose Cluster went away (or is no longer selected).
    fn forget_gone(&self) {
        let gone: Vec<String> = self
            .lock()
            .keys()
            .filter(|name| self.clusters.get(&ObjectRef::new(name)).is_none())
            .cloned()
            .collect();
        for name in gone {
            self.forget(&name);
        }
    }

    fn forget(&self, name: &str) {
        if self.lock().remove(name).is_some() {
            tracing::info!(cluster = name, "stopped importing from the member");
        }
        self.clients.forget(name);
    }

    /// The reader of a push-mode member, built from its read-only kubeconfig Secret (or the
    /// only one); rebuilt when the Secret changes.
    async fn reader(&self, cluster: &Cluster) -> Result<Arc<MemberReader>, ImportError> {
        let name = cluster.name_any();
        let (client, key) = self
            .clients
            .reader(
                &self.ctx.client,
                cluster,
                &self.args.member_secrets.reader_secrets(),
            )
            .await
            .map_err(|e| ImportError::NoClient(e.to_string()))?;
        if let Some(m) = self.lock().get(&name).filter(|m| m.key == key) {
            return Ok(m.reader.clone());
        }
        let trigger = self.trigger.clone();
        let reader = Arc::new(MemberReader::start(&name, client, move || {
            let _ = trigger.unbounded_send(());
        }));
        tracing::info!(
            cluster = name,
            "importing from the member (watching its CRDs)"
        );
        self.lock().insert(
            name,
            Member {
                key,
                reader: reader.clone(),
            },
        );
        Ok(reader)
    }
}

/// Whether the importer reads this Cluster from the hub: push mode, Joined, not being deleted.
fn imports_from_hub(cluster: &Cluster) -> bool {
    cluster.metadata.deletion_timestamp.is_none()
        && cluster.spec.sync_mode == SyncMode::Push
        && is_condition_true(cluster.conditions(), conditions::JOINED)
}

/// What a pass over a Cluster read.
enum Observed {
    /// Its schemas are not imported from the hub ([`imports_from_hub`]).
    NotImported,
    /// Its member cannot be read at all.
    Unreachable(ImportError),
    /// What was read of every wanted type, and the member's imports on the hub now.
    Read {
        results: Vec<(ResourceType, ReadResult)>,
        current: Vec<Arc<ApiResourceImport>>,
    },
}

/// What a pass does.
enum Plan {
    /// Stop watching the member.
    Forget,
    /// Mark every import of the member as not refreshed, and fail.
    FailAll(ImportError),
    /// Bring the member's imports to what was read.
    Sync(Vec<Step>),
}

impl HubImporter {
    fn writer<'a>(&'a self, cluster: &'a str) -> ImportWriter<'a> {
        ImportWriter {
            cluster,
            api: Api::namespaced(self.ctx.client.clone(), &names::cluster_namespace(cluster)),
            imports: &self.shared.imports,
            metrics: &self.metrics,
            status_forbidden: Default::default(),
        }
    }
}

impl Reconciler for HubImporter {
    type Object = Cluster;
    type Observed = Observed;
    type Plan = Plan;
    type Outcome = ();
    type Error = ImportError;

    const NAME: &'static str = "import";
    const RETRY: Retry = Retry {
        transient: Duration::from_secs(10),
        permanent: None,
    };

    fn context(&self) -> &Context {
        &self.ctx
    }

    /// A permanent failure is tried again at the next import.
    fn retry(&self) -> Retry {
        Retry {
            permanent: Some(self.args.import.import_interval),
            ..Self::RETRY
        }
    }

    fn api(&self, _: &Cluster) -> Api<Cluster> {
        Api::all(self.ctx.client.clone())
    }

    async fn observe(&self, cluster: &Cluster) -> Result<Observed, ImportError> {
        self.forget_gone();
        if !imports_from_hub(cluster) {
            return Ok(Observed::NotImported);
        }
        let reader = match self.reader(cluster).await {
            Ok(r) => r,
            Err(e) => return Ok(Observed::Unreachable(e)),
        };
        let placements = self.shared.placements.state();
        let wanted = types::wanted(
            placements.iter().map(|p| &**p),
            &self.args.import.extra_types,
        );
        let version = cluster
            .status
            .as_ref()
            .and_then(|s| s.kubernetes_version.as_deref());
        let results = reader
            .read(
                &wanted,
                version,
                self.args.import.import_interval,
                &self.args.import.limits(),
            )
            .await;
        let namespace = names::cluster_namespace(&cluster.name_any());
        let current = self
            .shared
            .imports
            .state()
            .into_iter()
            .filter(|i| i.namespace().as_deref() == Some(namespace.as_str()))
            .collect();
        Ok(Observed::Read { results, current })
    }

    fn plan(&self, cluster: &Cluster, observed: &Observed) -> Result<Plan, ImportError> {
        Ok(match observed {
            Observed::NotImported => Plan::Forget,
            Observed::Unreachable(e) => Plan::FailAll(e.clone()),
            Observed::Read { results, current } => {
                Plan::Sync(steps(&cluster.name_any(), results, current))
            }
        })
    }

    async fn execute(
        &self,
        cluster: &Cluster,
        _: &Observed,
        plan: &Plan,
    ) -> Result<(), ImportError> {
        let name = cluster.name_any();
        match plan {
            Plan::Forget => self.forget(&name),
            Plan::FailAll(e) => self.writer(&name).fail_all(e).await,
            Plan::Sync(steps) => self.writer(&name).execute(steps).await?,
        }
        Ok(())
    }

    async fn report(
        &self,
        _: &Cluster,
        _: &Observed,
        plan: &Plan,
        (): (),
    ) -> Result<Action, ImportError> {
        match plan {
            Plan::FailAll(e) => Err(e.clone()),
            Plan::Forget | Plan::Sync(_) => Ok(Action::requeue(self.args.import.import_interval)),
        }
    }
}
