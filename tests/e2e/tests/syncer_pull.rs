//! The syncer in pull mode: it runs against the member, reaches the hub only with the credential
//! the registration agent obtained (least privilege: Works of its own namespace), applies the
//! member's Works, brings their status up, reverts drift and deletes on an observed deletion.

use std::time::Duration;

use anyhow::{Context, Result};
use flotilla_api::cluster::{Cluster, ClusterSpec, SyncMode};
use flotilla_api::{Work, labels, names};
use flotilla_e2e::bootstrap::{AgentProcess, Registration};
use flotilla_e2e::process::ControllerProcess;
use flotilla_e2e::{Environment, Seen, TestNamespace, api, random_suffix, wait_for};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

const SELECTOR_LABEL: &str = "e2e.flotilla.dev/syncer-pull";
const CREDENTIAL_SECRET: &str = "flotilla-hub-kubeconfig";

#[tokio::test]
async fn a_pull_mode_syncer_serves_its_member_with_the_agents_credential() -> Result<()> {
    let env = Environment::get();
    let hub = env.hub.client().await?;
    api::install_crds(&hub).await?;
    flotilla_e2e::bootstrap::install_bootstrap(&hub).await?;
    let member_info = env.require_members(1)?[0].clone();
    let member = member_info.client().await?;
    let member_ns = TestNamespace::create("sync-pull", &[&member_info]).await?;
    let hub_ns = TestNamespace::create("sync-pull", &[&env.hub]).await?;
    let selector = random_suffix();
    let hub_kubeconfig = env.hub.kubeconfig.to_string_lossy().into_owned();
    let hub_controller = ControllerProcess::start(
        "flotilla-registration",
        &[
            "--kubeconfig",
            &hub_kubeconfig,
            "--lease-namespace",
            hub_ns.name(),
            "--cluster-selector",
            &format!("{SELECTOR_LABEL}={selector}"),
        ],
    )?;

    // The member joins in pull mode and the hub accepts it.
    let registration =
        Registration::create(&env, &format!("e2e-spull-{}", random_suffix())).await?;
    let cluster = registration.cluster.clone();
    let mut c = Cluster::new(
        &cluster,
        ClusterSpec {
            sync_mode: SyncMode::Pull,
            hub_accepts_client: true,
            ..Default::default()
        },
    );
    c.metadata.labels = Some([(SELECTOR_LABEL.to_string(), selector.clone())].into());
    Api::<Cluster>::all(hub.clone())
        .create(&PostParams::default(), &c)
        .await?;
    let agent = AgentProcess::start(&member_info, member_ns.name(), &registration, &[])?;
    let secrets: Api<Secret> = Api::namespaced(member.clone(), member_ns.name());
    wait_for(
        "the agent to store its hub credential in the member",
        Duration::from_secs(90),
        || async {
            Ok(if secrets.get_opt(CREDENTIAL_SECRET).await?.is_some() {
                Seen::Done(())
            } else {
                Seen::not_yet("no Secret")
            })
        },
    )
    .await
    .with_context(|| {
        format!(
            "agent log:\n{}\nhub log:\n{}",
            agent.log(),
            hub_controller.log()
        )
    })?;

    // The syncer runs "in the member": its own cluster is the member, the hub is reached with
    // the agent's credential only.
    let member_kubeconfig = member_info.kubeconfig.to_string_lossy().into_owned();
    let syncer = ControllerProcess::start(
        "flotilla-syncer",
        &[
            "--kubeconfig",
            &member_kubeconfig,
            "--lease-namespace",
            member_ns.name(),
            "--pull",
            "--cluster-name",
            &cluster,
            "--hub-credential-namespace",
            member_ns.name(),
            "--hub-credential-secret",
            CREDENTIAL_SECRET,
            "--resync-interval",
            "5m",
        ],
    )?;

    let works: Api<Work> = Api::namespaced(hub.clone(), &names::cluster_namespace(&cluster));
    let work: Work = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
        "metadata": {"name": "settings", "labels": {labels::CLUSTER: cluster}},
        "spec": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": "settings", "namespace": member_ns.name()},
                                "data": {"color": "blue"}}]},
    }))?;
    wait_for(
        "the Work to be created in the member's namespace",
        Duration::from_secs(30),
        || async {
            Ok(match works.create(&PostParams::default(), &work).await {
                Ok(_) => Seen::Done(()),
                Err(e) => Seen::not_yet(e),
            })
        },
    )
    .await?;

    let cms: Api<ConfigMap> = Api::namespaced(member.clone(), member_ns.name());
    wait_color(&cms, "blue")
        .await
        .with_context(|| format!("syncer log:\n{}", syncer.log()))?;
    wait_for(
        "the Work's status to say Applied=True",
        Duration::from_secs(30),
        || async {
            let w = works.get("settings").await?;
            let applied = w
                .status
                .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Applied"));
            Ok(match applied {
                Some(c) if c.status == "True" => Seen::Done(()),
                other => Seen::not_yet(format!("{other:?}")),
            })
        },
    )
    .await
    .with_context(|| format!("syncer log:\n{}", syncer.log()))?;

    // Drift is reverted on the member's watch event.
    cms.patch(
        "settings",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"color": "red"}})),
    )
    .await?;
    wait_color(&cms, "blue").await?;

    // The Work's deletion, observed on the hub, deletes the member object.
    works.delete("settings", &DeleteParams::default()).await?;
    wait_for(
        "the member object to be deleted with its Work",
        Duration::from_secs(30),
        || async {
            Ok(if cms.get_opt("settings").await?.is_none() {
                Seen::Done(())
            } else {
                Seen::not_yet("still there")
            })
        },
    )
    .await
    .with_context(|| format!("syncer log:\n{}", syncer.log()))?;
    drop(syncer);
    drop(agent);
    let _ = Api::<Cluster>::all(hub.clone())
        .delete(&cluster, &DeleteParams::default())
        .await;
    drop(registration);
    Ok(())
}

async fn wait_color(cms: &Api<ConfigMap>, want: &str) -> Result<()> {
    wait_for(
        &format!("ConfigMap settings in the member with color={want}"),
        Duration::from_secs(30),
        || async {
            let seen = cms
                .get_opt("settings")
                .await?
                .and_then(|c| c.data)
                .and_then(|d| d.get("color").cloned());
            Ok(if seen.as_deref() == Some(want) {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("{seen:?}"))
            })
        },
    )
    .await
}
