//! The syncer against real members: Works reach the member and their status comes back, drift
//! is reverted, objects Flotilla did not create are reported as conflicts and left alone (or
//! adopted when asked), and deletion follows deletePolicy.
//!
//! Each test runs its own registration controller and syncer, scoped to its own Cluster with
//! `--cluster-selector`.

use std::time::Duration;

use anyhow::{Result, ensure};
use flotilla_api::{Cluster, Work, labels, names};
use flotilla_e2e::clusters::ClusterCleanup;
use flotilla_e2e::process::ControllerProcess;
use flotilla_e2e::{Environment, Seen, TestNamespace, api, random_suffix, wait_for};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

const SELECTOR_LABEL: &str = "e2e.flotilla.dev/syncer";

/// A push-mode Cluster for member1 with a registration controller and a syncer serving only it,
/// and a namespace of the same name in the hub and in the member for the test's objects.
struct Setup {
    hub: Client,
    member: Client,
    cluster: String,
    ns: TestNamespace,
    _registration: ControllerProcess,
    _syncer: ControllerProcess,
    _cleanup: ClusterCleanup,
}

impl Setup {
    async fn start(prefix: &str) -> Result<Self> {
        let env = Environment::get();
        let hub = env.hub.client().await?;
        api::install_crds(&hub).await?;
        let member_info = env.require_members(1)?[0].clone();
        let ns = TestNamespace::create(prefix, &[&env.hub, &member_info]).await?;
        let id = random_suffix();
        let selector = format!("{SELECTOR_LABEL}={id}");
        let kubeconfig = env.hub.kubeconfig.to_string_lossy().into_owned();
        let common = [
            "--kubeconfig",
            kubeconfig.as_str(),
            "--lease-namespace",
            ns.name(),
            "--kubeconfig-secret-namespace",
            ns.name(),
            "--cluster-selector",
            selector.as_str(),
        ];
        let mut reg_args = common.to_vec();
        reg_args.extend(["--probe-interval", "2s"]);
        let registration = ControllerProcess::start("flotilla-registration", &reg_args)?;
        let mut sync_args = common.to_vec();
        sync_args.extend(["--resync-interval", "3s"]);
        let syncer = ControllerProcess::start("flotilla-syncer", &sync_args)?;
        let cleanup = ClusterCleanup::new(&env.hub, selector);

        let secret = Secret {
            metadata: ObjectMeta {
                name: Some("member".into()),
                ..ObjectMeta::default()
            },
            data: Some(
                [(
                    "kubeconfig".to_string(),
                    ByteString(std::fs::read(&member_info.kubeconfig)?),
                )]
                .into(),
            ),
            ..Secret::default()
        };
        Api::<Secret>::namespaced(hub.clone(), ns.name())
            .create(&PostParams::default(), &secret)
            .await?;
        let cluster = format!("e2e-{}", random_suffix());
        let c: Cluster = serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Cluster",
            "metadata": {"name": cluster, "labels": {SELECTOR_LABEL: id}},
            "spec": {"syncMode": "Push", "kubeconfigSecretRef": {"name": "member"}},
        }))?;
        Api::<Cluster>::all(hub.clone())
            .create(&PostParams::default(), &c)
            .await?;
        let clusters: Api<Cluster> = Api::all(hub.clone());
        wait_for(
            &format!("Cluster {cluster} to be Ready"),
            Duration::from_secs(60),
            || async {
                let c = clusters.get(&cluster).await?;
                let ready = c
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.iter().find(|x| x.type_ == "Ready").cloned());
                Ok(match ready {
                    Some(r) if r.status == "True" => Seen::Done(()),
                    other => Seen::not_yet(format!("{other:?}")),
                })
            },
        )
        .await?;
        Ok(Self {
            hub,
            member: member_info.client().await?,
            cluster,
            ns,
            _registration: registration,
            _syncer: syncer,
            _cleanup: cleanup,
        })
    }

    fn works(&self) -> Api<Work> {
        Api::namespaced(self.hub.clone(), &names::cluster_namespace(&self.cluster))
    }

    fn configmap(&self, name: &str, data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": self.ns.name()}, "data": data})
    }

    async fn create_work(&self, name: &str, spec: Value) -> Result<()> {
        let work: Work = serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
            "metadata": {"name": name, "labels": {labels::CLUSTER: self.cluster}},
            "spec": spec,
        }))?;
        self.works().create(&PostParams::default(), &work).await?;
        Ok(())
    }

    /// Waits until condition `type_` of Work `name` is `status` (with `reason`, if given).
    async fn work_condition(
        &self,
        name: &str,
        type_: &str,
        status: &str,
        reason: Option<&str>,
    ) -> Result<Work> {
        let works = self.works();
        wait_for(
            &format!("Work {name} to have {type_}={status}"),
            Duration::from_secs(60),
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

    fn member_configmaps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.member.clone(), self.ns.name())
    }

    async fn member_data(
        &self,
        name: &str,
    ) -> Result<Option<std::collections::BTreeMap<String, String>>> {
        Ok(self
            .member_configmaps()
            .get_opt(name)
            .await?
            .map(|c| c.data.unwrap_or_default()))
    }

    async fn wait_member_data(&self, name: &str, key: &str, value: Option<&str>) -> Result<()> {
        wait_for(
            &format!("ConfigMap {name} in the member to have {key}={value:?}"),
            Duration::from_secs(60),
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

#[tokio::test]
async fn works_reach_the_member_status_flows_up_and_drift_is_reverted() -> Result<()> {
    let s = Setup::start("sync-flow").await?;
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": s.ns.name()},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}}
    });
    s.create_work(
        "web",
        json!({"manifests": [s.configmap("settings", json!({"color": "blue"})), deployment.clone()]}),
    )
    .await?;

    let work = s.work_condition("web", "Available", "True", None).await?;
    s.work_condition("web", "Applied", "True", Some("Applied"))
        .await?;
    let status = work.status.unwrap_or_default();
    let d = status
        .manifests
        .iter()
        .find(|m| m.identity.kind == "Deployment")
        .ok_or_else(|| anyhow::anyhow!("no Deployment in Work status: {:?}", status.manifests))?;
    ensure!(
        d.status
            .as_ref()
            .and_then(|s| s.get("availableReplicas"))
            .and_then(Value::as_i64)
            == Some(2),
        "the member's Deployment status is copied into the Work: {:?}",
        d.status
    );
    let cm = s.member_configmaps().get("settings").await?;
    let cm_labels = cm.metadata.labels.unwrap_or_default();
    ensure!(
        cm_labels.get(labels::MANAGED).map(String::as_str) == Some("true"),
        "managed label: {cm_labels:?}"
    );
    let member_deploy: Api<Deployment> = Api::namespaced(s.member.clone(), s.ns.name());
    ensure!(
        member_deploy.get_opt("web").await?.is_some(),
        "the Deployment is in the member"
    );

    // An update of the Work reaches the member.
    let works = s.works();
    let manifests = json!([
        s.configmap("settings", json!({"color": "green"})),
        deployment
    ]);
    works
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"manifests": manifests}})),
        )
        .await?;
    s.wait_member_data("settings", "color", Some("green"))
        .await?;

    // A hand edit in the member is reverted.
    s.member_configmaps()
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"color": "red"}})),
        )
        .await?;
    s.wait_member_data("settings", "color", Some("green"))
        .await?;

    // Deleting the Work deletes its objects from the member (deletePolicy Delete by default).
    works.delete("web", &DeleteParams::default()).await?;
    wait_for(
        "the Work's objects to leave the member",
        Duration::from_secs(60),
        || async {
            let cm = s.member_configmaps().get_opt("settings").await?.is_some();
            let dep = member_deploy.get_opt("web").await?.is_some();
            let work = works.get_opt("web").await?.is_some();
            Ok(if !cm && !dep && !work {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("configmap={cm} deployment={dep} work={work}"))
            })
        },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn unmanaged_objects_are_conflicts_until_adopted_and_orphan_leaves_objects() -> Result<()> {
    let s = Setup::start("sync-conflict").await?;
    let existing: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "precious", "namespace": s.ns.name()}, "data": {"owner": "someone else"}
    }))?;
    s.member_configmaps()
        .create(&PostParams::default(), &existing)
        .await?;

    s.create_work(
        "take",
        json!({"manifests": [s.configmap("precious", json!({"owner": "flotilla"}))]}),
    )
    .await?;
    let w = s
        .work_condition("take", "Applied", "False", Some("Conflict"))
        .await?;
    let message = w
        .status
        .and_then(|st| st.conditions.into_iter().find(|c| c.type_ == "Applied"))
        .map(|c| c.message)
        .unwrap_or_default();
    ensure!(
        message.contains(&format!("{}/precious", s.ns.name())),
        "the conflict names the object: {message}"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    s.wait_member_data("precious", "owner", Some("someone else"))
        .await?;

    // Adopt takes it over.
    s.works()
        .patch(
            "take",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"conflictPolicy": "Adopt", "deletePolicy": "Orphan"}})),
        )
        .await?;
    s.wait_member_data("precious", "owner", Some("flotilla"))
        .await?;
    s.work_condition("take", "Applied", "True", None).await?;

    // Orphan: deleting the Work leaves the object in the member.
    s.works().delete("take", &DeleteParams::default()).await?;
    let works = s.works();
    wait_for(
        "the Work to be deleted",
        Duration::from_secs(30),
        || async {
            Ok(if works.get_opt("take").await?.is_none() {
                Seen::Done(())
            } else {
                Seen::not_yet("still there")
            })
        },
    )
    .await?;
    ensure!(
        s.member_data("precious").await?.is_some(),
        "deletePolicy Orphan must leave the object in the member"
    );
    Ok(())
}
