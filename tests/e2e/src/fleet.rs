//! A fleet of push-mode members for one test, served by controllers of the test's own.
//!
//! [`Fleet::builder`] registers members under fresh Cluster names labelled with a value of the
//! test's own ([`SELECTOR_LABEL`]), and starts the registration controller, the syncer and the
//! splitter with `--cluster-selector` for that label: on the shared hub they serve the test's
//! Clusters and no other test's. The controllers run with the identities of a chart release of
//! the test's own ([`ChartIdentities::install_in_own_namespace`]), whose release namespace holds
//! their Leases and the members' kubeconfig Secrets, as in a real install: the test's namespace
//! holds only what the test puts there.
//!
//! The splitter's tests start from [`Fleet::builder`] (three members, splitter included); the
//! syncer's from [`Fleet::syncer_only`] (one member, no splitter). Helpers that concern one
//! member live on [`Member`] (`fleet.member(i)`); the [`Fleet`] has the same helpers for its
//! first member, which is all a one-member fleet has.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, ensure};
use flotilla_api::{Cluster, Placement, Work, annotations, labels, names};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::api::Expect;
use crate::chart::ChartIdentities;
use crate::clusters::{ClusterCleanup, register_push};
use crate::process::ControllerProcess;
use crate::{ClusterInfo, Environment, Seen, TestNamespace, api, random_suffix, wait_for};

/// The label that scopes a test's controllers to its Clusters.
pub const SELECTOR_LABEL: &str = "e2e.flotilla.dev/fleet";

/// A Cluster label that takes a Cluster out of the splitter's `--cluster-selector` only: a
/// Cluster that leaves the splitter's selector while registration and the syncer still serve it.
pub const SPLITTER_OUT: &str = "e2e.flotilla.dev/splitter-out";

/// How long [`FleetBuilder::start`] waits for every Cluster to be Ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The second namespace of a [`Fleet`], served by the same splitter as the first.
pub enum Second {
    /// One namespace only.
    None,
    /// In the hub and every member, open to the splitter like the first: two teams on one hub.
    Everywhere,
    /// In the hub only, with these labels: Flotilla creates it in the members.
    HubOnly(BTreeMap<String, String>),
}

/// Which members a [`Fleet`] registers.
enum Members {
    /// The environment's first `n`.
    First(usize),
    These(Vec<ClusterInfo>),
}

/// How a [`Fleet`] starts; made by [`Fleet::builder`] or [`Fleet::syncer_only`].
pub struct FleetBuilder {
    prefix: String,
    members: Members,
    registration_flags: Vec<String>,
    grace: Option<String>,
    syncer_flags: Vec<String>,
    resync: String,
    splitter: bool,
    splitter_flags: Vec<String>,
    second: Second,
    cluster_placements: bool,
}

impl FleetBuilder {
    /// Registers these members, in this order (e.g. a [`crate::ScratchMember`] to break).
    pub fn members(mut self, members: Vec<ClusterInfo>) -> Self {
        self.members = Members::These(members);
        self
    }

    /// Registers the environment's first `n` members.
    pub fn first_members(mut self, n: usize) -> Self {
        self.members = Members::First(n);
        self
    }

    /// More flags for the registration controller.
    pub fn registration_flags<S: Into<String>>(
        mut self,
        flags: impl IntoIterator<Item = S>,
    ) -> Self {
        self.registration_flags
            .extend(flags.into_iter().map(Into::into));
        self
    }

    /// The registration controller's `--grace-period` (default: its own, 30s).
    pub fn grace(mut self, grace: impl Into<String>) -> Self {
        self.grace = Some(grace.into());
        self
    }

    /// More flags for the syncer.
    pub fn syncer_flags<S: Into<String>>(mut self, flags: impl IntoIterator<Item = S>) -> Self {
        self.syncer_flags.extend(flags.into_iter().map(Into::into));
        self
    }

    /// The syncer's `--resync-interval`.
    pub fn resync(mut self, resync: impl Into<String>) -> Self {
        self.resync = resync.into();
        self
    }

    /// Whether the splitter starts with the fleet; without it, `fleet.splitter` is ready to be
    /// started with [`Controller::start`].
    pub fn splitter(mut self, start: bool) -> Self {
        self.splitter = start;
        self
    }

    /// More flags for the splitter.
    pub fn splitter_flags<S: Into<String>>(mut self, flags: impl IntoIterator<Item = S>) -> Self {
        self.splitter_flags
            .extend(flags.into_iter().map(Into::into));
        self
    }

    /// A second namespace served by the same splitter ([`Fleet::other`]).
    pub fn second_namespace(mut self, second: Second) -> Self {
        self.second = second;
        self
    }

    /// The splitter also serves the ClusterPlacements labelled with the fleet's selector
    /// ([`Fleet::selector`]).
    pub fn cluster_placements(mut self) -> Self {
        self.cluster_placements = true;
        self
    }

    /// Creates the namespaces, installs the identities, starts the controllers, registers the
    /// members and waits until every Cluster is Ready: a member that joins after a workload
    /// gets none of its replicas (no `rebalanceOnJoin`), which is not what the tests are about.
    pub async fn start(self) -> Result<Fleet> {
        let env = Environment::get();
        let infos = match self.members {
            Members::First(n) => env.require_members(n)?[..n].to_vec(),
            Members::These(infos) => infos,
        };
        let hub = env.hub.client().await?;
        api::install_crds(&hub).await?;
        let all: Vec<&ClusterInfo> = std::iter::once(&env.hub).chain(&infos).collect();
        let ns = TestNamespace::create(&self.prefix, &all).await?;
        allow_existing_namespaces(&hub, ns.name()).await?;
        let other_prefix = format!("{}-b", self.prefix);
        let other = match self.second {
            Second::None => None,
            Second::Everywhere => {
                let other = TestNamespace::create(&other_prefix, &all).await?;
                allow_existing_namespaces(&hub, other.name()).await?;
                Some(other)
            }
            Second::HubOnly(labels) => {
                Some(TestNamespace::create_in(&other_prefix, &[&env.hub], &all, labels).await?)
            }
        };
        let id = random_suffix();
        let selector = format!("{SELECTOR_LABEL}={id}");
        let identities = ChartIdentities::install_in_own_namespace(&self.prefix).await?;
        let system = identities.namespace.as_str();
        let scoped = |controller: &str, selector: &str| -> Result<Vec<String>> {
            let mut args = identities.args(controller)?;
            args.extend(strings([
                "--lease-namespace",
                system,
                "--cluster-selector",
                selector,
            ]));
            Ok(args)
        };

        let mut registration = scoped("registration", &selector)?;
        registration.extend(strings([
            "--probe-interval",
            "2s",
            "--kubeconfig-secret-namespace",
            system,
        ]));
        if let Some(grace) = &self.grace {
            registration.extend(strings(["--grace-period", grace]));
        }
        registration.extend(self.registration_flags);

        let mut syncer = scoped("syncer", &selector)?;
        syncer.extend(strings([
            "--resync-interval",
            &self.resync,
            "--kubeconfig-secret-namespace",
            system,
        ]));
        syncer.extend(self.syncer_flags);

        let namespaces = match &other {
            Some(o) => format!("{},{}", ns.name(), o.name()),
            None => ns.name().to_string(),
        };
        let mut splitter = scoped("splitter", &format!("{selector},{SPLITTER_OUT}!=true"))?;
        // The release namespace holds the hub's own identities (the chart's POD_NAMESPACE).
        splitter.extend(strings([
            "--namespace",
            &namespaces,
            "--hub-identity-namespaces",
            system,
        ]));
        if self.cluster_placements {
            splitter.extend(strings([
                "--cluster-placements=true",
                "--cluster-placement-selector",
                &selector,
            ]));
        }
        splitter.extend(self.splitter_flags);

        let mut splitter = Controller::new("flotilla-splitter", splitter);
        if self.splitter {
            splitter.start()?;
        }
        let mut fleet = Fleet {
            clusters: Api::all(hub.clone()),
            ns,
            other,
            members: Vec::new(),
            infos: Vec::new(),
            splitter,
            registration: Controller::started("flotilla-registration", registration)?,
            syncer: Controller::started("flotilla-syncer", syncer)?,
            _cleanup: ClusterCleanup::new(&env.hub, selector.clone()),
            selector,
            hub,
            identities,
        };
        for info in infos {
            let cluster = format!("e2e-{}", random_suffix());
            let system = &fleet.identities.namespace;
            register_push(&fleet.hub, system, &cluster, &info, (SELECTOR_LABEL, &id)).await?;
            fleet.members.push((cluster, info.client().await?));
            fleet.infos.push(info);
        }
        let deadline = Instant::now() + READY_TIMEOUT;
        for i in 0..fleet.members.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            fleet.member(i).cluster_ready("True", left).await?;
        }
        Ok(fleet)
    }
}

fn strings<const N: usize>(args: [&str; N]) -> [String; N] {
    args.map(String::from)
}

/// The hub admin lets the namespace's Placements use the members' namespaces of the same name
/// although Flotilla did not create them: the test made them, as an admin who made them for the
/// same team would.
async fn allow_existing_namespaces(hub: &Client, ns: &str) -> Result<()> {
    Api::<Namespace>::all(hub.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                annotations::ALLOW_EXISTING_NAMESPACES: "true"}}})),
        )
        .await?;
    Ok(())
}

/// One of a fleet's controllers: its command line, and its process while it runs.
pub struct Controller {
    binary: &'static str,
    args: Vec<String>,
    process: Option<ControllerProcess>,
}

impl Controller {
    fn new(binary: &'static str, args: Vec<String>) -> Self {
        Self {
            binary,
            args,
            process: None,
        }
    }

    fn started(binary: &'static str, args: Vec<String>) -> Result<Self> {
        let mut controller = Self::new(binary, args);
        controller.start()?;
        Ok(controller)
    }

    /// Starts the controller with the fleet's flags: one the builder did not start, or again
    /// after [`Controller::kill`].
    pub fn start(&mut self) -> Result<()> {
        ensure!(self.process.is_none(), "{} is running already", self.binary);
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        self.process = Some(ControllerProcess::start(self.binary, &args)?);
        Ok(())
    }

    /// Kills the controller with SIGKILL and waits until it is gone.
    pub async fn kill(&mut self) -> Result<()> {
        let mut process = self
            .process
            .take()
            .ok_or_else(|| anyhow!("{} is not running", self.binary))?;
        process.signal("KILL")?;
        process.wait_exit(Duration::from_secs(10)).await?;
        Ok(())
    }

    /// The running process, if any.
    pub fn process(&self) -> Option<&ControllerProcess> {
        self.process.as_ref()
    }

    /// What the running process wrote so far; empty when none runs.
    pub fn log(&self) -> String {
        self.process
            .as_ref()
            .map(ControllerProcess::log)
            .unwrap_or_default()
    }

    /// `GET path` on the running process's HTTP server: status code and body.
    pub async fn get(&self, path: &str) -> Result<(u16, String)> {
        self.process
            .as_ref()
            .ok_or_else(|| anyhow!("{} is not running", self.binary))?
            .get(path)
            .await
    }
}

/// Push-mode members registered for one test, with the registration controller, the syncer and
/// (unless left out) the splitter scoped to them and to the test's namespace. Dropping it deletes
/// the test's namespaces, stops the controllers, deletes the Clusters (finalizers and all, as no
/// controller is left to remove them) and, last, the identities, whose RBAC must outlive the
/// controllers.
pub struct Fleet {
    pub hub: Client,
    /// The test's namespace, in the hub and every member.
    pub ns: TestNamespace,
    /// With [`FleetBuilder::second_namespace`]: the second namespace the splitter serves.
    pub other: Option<TestNamespace>,
    /// Every Cluster of the hub, not only the fleet's.
    pub clusters: Api<Cluster>,
    /// Cluster name and admin client of each member, in the order they were given.
    pub members: Vec<(String, Client)>,
    infos: Vec<ClusterInfo>,
    /// The label selector of the test's Clusters, `label=value`.
    pub selector: String,
    pub splitter: Controller,
    pub registration: Controller,
    pub syncer: Controller,
    _cleanup: ClusterCleanup,
    /// The chart release whose identities run the controllers (to act as one of them).
    pub identities: ChartIdentities,
}

impl Fleet {
    /// The environment's first three members, with registration, the syncer (resync every 5s)
    /// and the splitter: what the splitter's tests need.
    pub fn builder(prefix: &str) -> FleetBuilder {
        FleetBuilder {
            prefix: prefix.to_string(),
            members: Members::First(3),
            registration_flags: Vec::new(),
            grace: None,
            syncer_flags: Vec::new(),
            resync: "5s".into(),
            splitter: true,
            splitter_flags: Vec::new(),
            second: Second::None,
            cluster_placements: false,
        }
    }

    /// The environment's first member with registration and a syncer (resync every 3s) but no
    /// splitter: the syncer's tests write the Works themselves.
    pub fn syncer_only(prefix: &str) -> FleetBuilder {
        Self::builder(prefix)
            .first_members(1)
            .resync("3s")
            .splitter(false)
    }

    /// Member `i`, in the order the members were given.
    ///
    /// # Panics
    /// If the fleet has no member `i`.
    pub fn member(&self, i: usize) -> Member<'_> {
        let (cluster, client) = &self.members[i];
        Member {
            cluster,
            client,
            info: &self.infos[i],
            fleet: self,
        }
    }

    /// Kills the syncer with SIGKILL and waits until it is gone.
    pub async fn kill_syncer(&mut self) -> Result<()> {
        self.syncer.kill().await
    }

    /// Starts the syncer again (after [`Fleet::kill_syncer`]).
    pub fn restart_syncer(&mut self) -> Result<()> {
        self.syncer.start()
    }

    /// The syncer's log so far.
    pub fn syncer_log(&self) -> String {
        self.syncer.log()
    }

    /// A ConfigMap manifest in the test's namespace.
    pub fn configmap(&self, name: &str, data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": self.ns.name()}, "data": data})
    }

    /// Placement `spread` in the test's namespace, dividing its Deployments evenly.
    pub async fn spread_deployments(&self) -> Result<()> {
        let placement: Placement = serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
            "metadata": {"name": "spread"},
            "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                     "replicaScheduling": {"type": "Divided", "division": "Even"}},
        }))?;
        Api::<Placement>::namespaced(self.hub.clone(), self.ns.name())
            .create(&PostParams::default(), &placement)
            .await?;
        Ok(())
    }

    /// Placement `spread`, dividing the namespace's Deployments evenly, and Deployment `web` of
    /// `replicas`, once the hub says it is Available.
    pub async fn spread_web(&self, replicas: i32) -> Result<Api<Deployment>> {
        let ns = self.ns.name();
        self.spread_deployments().await?;
        let deployments: Api<Deployment> = Api::namespaced(self.hub.clone(), ns);
        deployments
            .create(&PostParams::default(), &deployment(replicas)?)
            .await?;
        hub_available(&deployments, replicas)
            .await
            .map_err(|e| e.context(self.splitter.log()))?;
        Ok(deployments)
    }

    /// [`Member::cluster_ready`] of the first member.
    pub async fn cluster_ready(&self, status: &str, timeout: Duration) -> Result<()> {
        self.member(0).cluster_ready(status, timeout).await
    }

    /// [`Member::applies`] of the first member.
    pub async fn applies(&self, result: &str) -> Result<f64> {
        self.member(0).applies(result).await
    }

    /// [`Member::works`] of the first member.
    pub fn works(&self) -> Api<Work> {
        self.member(0).works()
    }

    /// [`Member::work`] of the first member.
    pub fn work(&self, name: &str, spec: Value) -> Result<Work> {
        self.member(0).work(name, spec)
    }

    /// [`Member::create_work`] of the first member.
    pub async fn create_work(&self, name: &str, spec: Value) -> Result<()> {
        self.member(0).create_work(name, spec).await
    }

    /// [`Member::work_condition`] of the first member.
    pub async fn work_condition(
        &self,
        name: &str,
        type_: &str,
        status: &str,
        reason: Option<&str>,
        timeout: Duration,
    ) -> Result<Work> {
        self.member(0)
            .work_condition(name, type_, status, reason, timeout)
            .await
    }

    /// [`Member::configmaps`] of the first member.
    pub fn member_configmaps(&self) -> Api<ConfigMap> {
        self.member(0).configmaps()
    }

    /// [`Member::data`] of the first member.
    pub async fn member_data(&self, name: &str) -> Result<Option<BTreeMap<String, String>>> {
        self.member(0).data(name).await
    }

    /// [`Member::wait_data`] of the first member.
    pub async fn wait_member_data(
        &self,
        name: &str,
        key: &str,
        value: Option<&str>,
        timeout: Duration,
    ) -> Result<()> {
        self.member(0).wait_data(name, key, value, timeout).await
    }
}

/// One member of a [`Fleet`] (see [`Fleet::member`]).
#[derive(Clone, Copy)]
pub struct Member<'a> {
    /// The name of its Cluster on the hub.
    pub cluster: &'a str,
    /// A client with the member's admin credentials.
    pub client: &'a Client,
    pub info: &'a ClusterInfo,
    fleet: &'a Fleet,
}

impl Member<'_> {
    /// Waits until the Cluster's Ready condition is `status`.
    pub async fn cluster_ready(&self, status: &str, timeout: Duration) -> Result<()> {
        let ready = Expect {
            type_: "Ready",
            status,
            reason: None,
        };
        api::wait_condition(&self.fleet.clusters, self.cluster, ready, timeout, |c| {
            c.conditions()
        })
        .await?;
        Ok(())
    }

    /// The syncer's counter `applies_total` for this Cluster and `result` (`applied`,
    /// `unchanged`, `conflict`, `failed`).
    pub async fn applies(&self, result: &str) -> Result<f64> {
        self.syncer_counter("applies_total", ("result", result))
            .await
    }

    /// The syncer's counter `member_requests_total` for this Cluster and `verb` (`get`,
    /// `watch`, `create`, `patch`, `update`, `delete`): the requests it sent to the member.
    pub async fn requests(&self, verb: &str) -> Result<f64> {
        self.syncer_counter("member_requests_total", ("verb", verb))
            .await
    }

    /// The syncer's counter `<prefix>_<name>` for this Cluster and one more label.
    async fn syncer_counter(&self, name: &str, label: (&str, &str)) -> Result<f64> {
        let (_, text) = self.fleet.syncer.get("/metrics").await?;
        let metric = format!("_{name}{{");
        let cluster = format!("cluster=\"{}\"", self.cluster);
        let label = format!("{}=\"{}\"", label.0, label.1);
        Ok(text
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains(&metric))
            .filter(|l| l.contains(&cluster) && l.contains(&label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }

    /// The Works of this member: those in its Cluster's namespace on the hub.
    pub fn works(&self) -> Api<Work> {
        Api::namespaced(
            self.fleet.hub.clone(),
            &names::cluster_namespace(self.cluster),
        )
    }

    /// Work `name` for this member with `spec`.
    pub fn work(&self, name: &str, spec: Value) -> Result<Work> {
        Ok(serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
            "metadata": {"name": name, "labels": {labels::CLUSTER: self.cluster}},
            "spec": spec,
        }))?)
    }

    /// Creates Work `name` for this member with `spec`.
    pub async fn create_work(&self, name: &str, spec: Value) -> Result<()> {
        self.works()
            .create(&PostParams::default(), &self.work(name, spec)?)
            .await?;
        Ok(())
    }

    /// Waits until condition `type_` of Work `name` is `status` (with `reason`, if given).
    pub async fn work_condition(
        &self,
        name: &str,
        type_: &str,
        status: &str,
        reason: Option<&str>,
        timeout: Duration,
    ) -> Result<Work> {
        let expected = Expect {
            type_,
            status,
            reason,
        };
        api::wait_condition(&self.works(), name, expected, timeout, |w: &Work| {
            w.status.as_ref().map_or(&[], |s| &s.conditions)
        })
        .await
    }

    /// The ConfigMaps of the test's namespace in this member.
    pub fn configmaps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), self.fleet.ns.name())
    }

    /// The data of ConfigMap `name` of the test's namespace in this member, if it exists.
    pub async fn data(&self, name: &str) -> Result<Option<BTreeMap<String, String>>> {
        Ok(self
            .configmaps()
            .get_opt(name)
            .await?
            .map(|c| c.data.unwrap_or_default()))
    }

    /// Waits until key `key` of ConfigMap `name` in this member is `value` (`None`: absent).
    pub async fn wait_data(
        &self,
        name: &str,
        key: &str,
        value: Option<&str>,
        timeout: Duration,
    ) -> Result<()> {
        wait_for(
            &format!(
                "ConfigMap {name} in member {} to have {key}={value:?}",
                self.info.name
            ),
            timeout,
            || async {
                let data = self.data(name).await?;
                let seen = data.as_ref().and_then(|d| d.get(key)).map(String::as_str);
                Ok(if seen == value {
                    Seen::Done(())
                } else {
                    Seen::not_yet(format!("{data:?}"))
                })
            },
        )
        .await
    }
}

/// Deployment `web` of `replicas` pause containers that read ConfigMap `web-settings` when there
/// is one: the splitter tests' workload.
pub fn deployment(replicas: i32) -> Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                                                       "envFrom": [{"configMapRef": {"name": "web-settings", "optional": true}}]}]}}}
    }))?)
}

/// Waits until the hub Deployment `web` says `n` replicas available and Available=True.
pub async fn hub_available(hub: &Api<Deployment>, n: i32) -> Result<Deployment> {
    wait_for(
        &format!("the hub Deployment to report {n} available replicas"),
        Duration::from_secs(120),
        || async {
            let d = hub.get("web").await?;
            let status = d.status.clone().unwrap_or_default();
            let available = status.conditions.iter().flatten().any(|c| {
                c.type_.as_deref() == Some("Available") && c.status.as_deref() == Some("True")
            });
            Ok(if available && status.available_replicas == Some(n) {
                Seen::Done(d)
            } else {
                Seen::not_yet(format!(
                    "available={available} availableReplicas={:?}",
                    status.available_replicas
                ))
            })
        },
    )
    .await
}
