//! A push-mode member served by a syncer of the test's own, for the syncer's end-to-end tests.
//!
//! Each [`SyncerSetup`] registers one member under a fresh Cluster name, labelled so that only
//! the test's own registration controller and syncer (started with `--cluster-selector`) serve
//! it, and creates a namespace of the same random name in the hub and in the member.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Result, anyhow};
use flotilla_api::{Cluster, Work, labels, names};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::chart::ChartIdentities;
use crate::clusters::ClusterCleanup;
use crate::process::ControllerProcess;
use crate::{ClusterInfo, Environment, Seen, TestNamespace, api, random_suffix, wait_for};

/// The label that scopes a test's controllers to its Clusters.
pub const SELECTOR_LABEL: &str = "e2e.flotilla.dev/syncer";

/// How a [`SyncerSetup`] starts.
pub struct Options {
    /// The member to register; default: the environment's first member.
    pub member: Option<ClusterInfo>,
    /// `--resync-interval` of the syncer.
    pub resync: &'static str,
    /// `--grace-period` of the registration controller.
    pub grace: &'static str,
    /// Extra flags of the syncer.
    pub syncer_args: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            member: None,
            resync: "3s",
            grace: "40s",
            syncer_args: Vec::new(),
        }
    }
}

/// A Cluster with a registration controller and a syncer serving only it.
pub struct SyncerSetup {
    pub hub: Client,
    pub member: Client,
    pub member_info: ClusterInfo,
    pub cluster: String,
    pub ns: TestNamespace,
    syncer_args: Vec<String>,
    pub syncer: Option<ControllerProcess>,
    pub registration: ControllerProcess,
    _cleanup: ClusterCleanup,
    // Last: the controllers' identities outlive them.
    _identities: ChartIdentities,
}

impl SyncerSetup {
    pub async fn start(prefix: &str, options: Options) -> Result<Self> {
        let env = Environment::get();
        let hub = env.hub.client().await?;
        api::install_crds(&hub).await?;
        let member_info = match options.member {
            Some(m) => m,
            None => env.require_members(1)?[0].clone(),
        };
        let ns = TestNamespace::create(prefix, &[&env.hub, &member_info]).await?;
        let id = random_suffix();
        let selector = format!("{SELECTOR_LABEL}={id}");
        let identities = ChartIdentities::install(ns.name()).await?;
        let common: Vec<String> = [
            "--lease-namespace",
            ns.name(),
            "--kubeconfig-secret-namespace",
            ns.name(),
            "--cluster-selector",
            selector.as_str(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut reg_args = identities.args("registration")?;
        reg_args.extend(common.iter().cloned());
        reg_args
            .extend(["--probe-interval", "2s", "--grace-period", options.grace].map(String::from));
        let registration = ControllerProcess::start("flotilla-registration", &as_strs(&reg_args))?;
        let mut syncer_args = identities.args("syncer")?;
        syncer_args.extend(common);
        syncer_args.extend(["--resync-interval".to_string(), options.resync.to_string()]);
        syncer_args.extend(options.syncer_args);
        let syncer = ControllerProcess::start("flotilla-syncer", &as_strs(&syncer_args))?;
        let cleanup = ClusterCleanup::new(&env.hub, selector);

        crate::clusters::kubeconfig_secret(&hub, ns.name(), "member", &member_info).await?;
        let cluster = format!("e2e-{}", random_suffix());
        crate::clusters::push_cluster(&hub, &cluster, "member", (SELECTOR_LABEL, &id)).await?;
        let setup = Self {
            hub,
            member: member_info.client().await?,
            member_info,
            cluster,
            ns,
            syncer_args,
            syncer: Some(syncer),
            registration,
            _cleanup: cleanup,
            _identities: identities,
        };
        setup.cluster_ready("True", Duration::from_secs(60)).await?;
        Ok(setup)
    }

    /// Waits until the Cluster's Ready condition is `status`.
    pub async fn cluster_ready(&self, status: &str, timeout: Duration) -> Result<()> {
        let clusters: Api<Cluster> = Api::all(self.hub.clone());
        wait_for(
            &format!("Cluster {} to be Ready={status}", self.cluster),
            timeout,
            || async {
                let c = clusters.get(&self.cluster).await?;
                let ready = c
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.iter().find(|x| x.type_ == "Ready").cloned());
                Ok(match ready {
                    Some(r) if r.status == status => Seen::Done(()),
                    other => Seen::not_yet(format!("{other:?}")),
                })
            },
        )
        .await
    }

    /// Starts the syncer again (after [`Self::kill_syncer`]).
    pub fn restart_syncer(&mut self) -> Result<()> {
        self.syncer = Some(ControllerProcess::start(
            "flotilla-syncer",
            &as_strs(&self.syncer_args),
        )?);
        Ok(())
    }

    /// Kills the syncer with SIGKILL and waits until it is gone.
    pub async fn kill_syncer(&mut self) -> Result<()> {
        let mut syncer = self
            .syncer
            .take()
            .ok_or_else(|| anyhow!("the syncer is not running"))?;
        syncer.signal("KILL")?;
        syncer.wait_exit(Duration::from_secs(10)).await?;
        Ok(())
    }

    /// The syncer's counter `applies_total` for this Cluster and `result` (`applied`,
    /// `unchanged`, `conflict`, `failed`).
    pub async fn applies(&self, result: &str) -> Result<f64> {
        let syncer = self
            .syncer
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("no syncer running"))?;
        let (_, text) = syncer.get("/metrics").await?;
        let cluster = format!("cluster=\"{}\"", self.cluster);
        let result = format!("result=\"{result}\"");
        Ok(text
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains("_applies_total{"))
            .filter(|l| l.contains(&cluster) && l.contains(&result))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }

    /// The syncer's log so far.
    pub fn syncer_log(&self) -> String {
        self.syncer
            .as_ref()
            .map(ControllerProcess::log)
            .unwrap_or_default()
    }

    /// The identities of the chart the controllers run with (to act as one of them).
    pub fn identities(&self) -> &ChartIdentities {
        &self._identities
    }

    pub fn works(&self) -> Api<Work> {
        Api::namespaced(self.hub.clone(), &names::cluster_namespace(&self.cluster))
    }

    pub fn configmap(&self, name: &str, data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": self.ns.name()}, "data": data})
    }

    pub fn work(&self, name: &str, spec: Value) -> Result<Work> {
        Ok(serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
            "metadata": {"name": name, "labels": {labels::CLUSTER: self.cluster}},
            "spec": spec,
        }))?)
    }

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
        let works = self.works();
        wait_for(
            &format!("Work {name} to have {type_}={status} ({reason:?})"),
            timeout,
            || async {
                let w = works.get(name).await?;
                let c = w
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_).cloned());
                Ok(match c {
                    Some(c) if c.status == status && reason.is_none_or(|r| c.reason == r) => {
                        Seen::Done(w)
                    }
                    other => Seen::not_yet(format!("{other:?}")),
                })
            },
        )
        .await
    }

    pub fn member_configmaps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.member.clone(), self.ns.name())
    }

    pub async fn member_data(&self, name: &str) -> Result<Option<BTreeMap<String, String>>> {
        Ok(self
            .member_configmaps()
            .get_opt(name)
            .await?
            .map(|c| c.data.unwrap_or_default()))
    }

    pub async fn wait_member_data(
        &self,
        name: &str,
        key: &str,
        value: Option<&str>,
        timeout: Duration,
    ) -> Result<()> {
        wait_for(
            &format!("ConfigMap {name} in the member to have {key}={value:?}"),
            timeout,
            || async {
                let data = self.member_data(name).await?;
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

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}
