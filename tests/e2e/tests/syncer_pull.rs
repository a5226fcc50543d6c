//! The syncer in pull mode: it runs against the member with the ServiceAccount and RBAC the
//! member chart (`charts/flotilla-agent`) gives it only, reaches the hub only with the
//! credential the registration agent obtained (least privilege: Works of its own namespace),
//! applies the member's Works (creating their target namespaces), brings their status up,
//! reverts drift, holds each Work with its finalizer (the only change to a Work its credential
//! may make) and deletes the member objects of a deleted Work — also one deleted while the
//! syncer was not running. The negotiator's importer, also in the member, writes the member's
//! schemas with the same credential.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use flotilla_api::cluster::{Cluster, ClusterSpec, SyncMode};
use flotilla_api::{ApiResourceImport, Work, conditions, finalizers, labels, names};
use flotilla_e2e::access::{self, Request};
use flotilla_e2e::api::ClusterScopedObjects;
use flotilla_e2e::bootstrap::{
    AgentProcess, MEMBER_AGENT, MEMBER_IMPORTER, MEMBER_SYNCER, MemberIdentity, Registration,
};
use flotilla_e2e::chart::ChartIdentities;
use flotilla_e2e::process::ControllerProcess;
use flotilla_e2e::{Environment, Seen, TestNamespace, api, random_suffix, wait_for};
use flotilla_runtime::member_client::{client_from_kubeconfig, kubeconfig_from_secret};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{ApiResource, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
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
    let cluster_selector = format!("{SELECTOR_LABEL}={selector}");
    // The hub's controllers of this test, with the chart's identities: its own Clusters only.
    let identities = ChartIdentities::install(hub_ns.name()).await?;
    let reg_identity = identities.args("registration")?;
    let hub_flags = [
        "--lease-namespace",
        hub_ns.name(),
        "--cluster-selector",
        cluster_selector.as_str(),
    ];
    let mut reg_flags: Vec<&str> = reg_identity.iter().map(String::as_str).collect();
    reg_flags.extend(hub_flags);
    let hub_controller = ControllerProcess::start("flotilla-registration", &reg_flags)?;
    let agent_identity = MemberIdentity::install(
        &member_info,
        MEMBER_AGENT,
        member_ns.name(),
        CREDENTIAL_SECRET,
    )
    .await?;

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
    let agent = AgentProcess::start(&agent_identity, member_ns.name(), &registration, &[])?;
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

    // The syncer runs "in the member": its own cluster is the member, where it has only the
    // ServiceAccount and RBAC the member chart gives it (flotilla-system being the test's
    // namespace); the hub is reached with the agent's credential only.
    let identity = MemberIdentity::install(
        &member_info,
        MEMBER_SYNCER,
        member_ns.name(),
        CREDENTIAL_SECRET,
    )
    .await?;
    let account = identity.username().to_string();
    // Least privilege: what a syncer may not do in the member.
    for (verb, group, resource, name) in [
        ("delete", "", "namespaces", None),
        (
            "create",
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            None,
        ),
        (
            "update",
            "coordination.k8s.io",
            "leases",
            Some(agent_identity.lease_name()),
        ),
        ("patch", "", "nodes", None),
        // Placed Roles and RoleBindings, yes (flotilla:syncer:rbac); cluster-wide grants, no.
        ("create", "rbac.authorization.k8s.io", "clusterroles", None),
        (
            "escalate",
            "rbac.authorization.k8s.io",
            "clusterroles",
            None,
        ),
    ] {
        let request = Request {
            verb,
            group,
            resource,
            namespace: Some(member_ns.name()),
            name,
        };
        ensure!(
            !access::allowed(&member, &account, &[], request).await?,
            "the member syncer must not {verb} {resource}"
        );
    }
    // ... and what it must do for every workload kind the splitter places.
    for (group, resource) in [
        ("apps", "deployments"),
        ("apps", "statefulsets"),
        ("apps", "daemonsets"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
        ("", "services"),
        ("rbac.authorization.k8s.io", "roles"),
        ("rbac.authorization.k8s.io", "rolebindings"),
        ("networking.k8s.io", "networkpolicies"),
    ] {
        let request = Request {
            verb: "patch",
            group,
            resource,
            namespace: Some(member_ns.name()),
            name: None,
        };
        ensure!(
            access::allowed(&member, &account, &[], request).await?,
            "the member syncer may patch {resource}"
        );
    }
    let mut syncer_args = identity.flags();
    syncer_args.extend(
        [
            "--lease-namespace",
            member_ns.name(),
            "--pull",
            "--cluster-name",
            &cluster,
            "--hub-credential-namespace",
            member_ns.name(),
            "--resync-interval",
            "5m",
        ]
        .map(String::from),
    );
    let start_syncer = || {
        ControllerProcess::start(
            "flotilla-syncer",
            &syncer_args.iter().map(String::as_str).collect::<Vec<_>>(),
        )
    };
    let syncer = start_syncer()?;

    // The negotiator's importer runs in the member too, with the ServiceAccount and RBAC of
    // the member chart's identity only (leader election included), and writes the member's
    // schemas into its namespace on the hub with nothing but the agent's credential.
    let importer_identity = MemberIdentity::install(
        &member_info,
        MEMBER_IMPORTER,
        member_ns.name(),
        CREDENTIAL_SECRET,
    )
    .await?;
    let mut importer_args = importer_identity.flags();
    importer_args.extend(
        [
            "--lease-namespace",
            member_ns.name(),
            "--cluster-name",
            &cluster,
            "--hub-credential-namespace",
            member_ns.name(),
            "--import-interval",
            "5s",
        ]
        .map(String::from),
    );
    let importer = ControllerProcess::start_subcommand(
        "flotilla-negotiator",
        &["importer"],
        &importer_args.iter().map(String::as_str).collect::<Vec<_>>(),
    )?;
    let imports: Api<ApiResourceImport> =
        Api::namespaced(hub.clone(), &names::cluster_namespace(&cluster));
    wait_for(
        "the member's Deployment schema imported with the agent's credential",
        Duration::from_secs(60),
        || async {
            let import = imports.get_opt("deployments.v1.apps").await?;
            let imported = import.as_ref().and_then(|i| {
                i.status
                    .as_ref()?
                    .conditions
                    .iter()
                    .find(|c| c.type_ == conditions::IMPORTED)
                    .map(|c| c.status.clone())
            });
            Ok(match import {
                Some(i)
                    if i.spec.resource.names.kind == "Deployment"
                        && imported.as_deref() == Some("True") =>
                {
                    Seen::Done(())
                }
                other => Seen::not_yet(format!(
                    "import present: {}, Imported={imported:?}",
                    other.is_some()
                )),
            })
        },
    )
    .await
    .with_context(|| format!("importer log:\n{}", importer.log()))?;
    drop(importer);
    drop(importer_identity);

    // A namespace the syncer creates: deleted at the end (the syncer never deletes one).
    let apps_ns = format!("{}-apps", member_ns.name());
    let mut created = ClusterScopedObjects::new(&member_info);
    created.add(ApiResource::erase::<Namespace>(&()), apps_ns.clone());
    let works: Api<Work> = Api::namespaced(hub.clone(), &names::cluster_namespace(&cluster));
    let work: Work = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
        "metadata": {"name": "settings", "labels": {labels::CLUSTER: cluster}},
        "spec": {"manifests": [
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "settings", "namespace": member_ns.name()},
             "data": {"color": "blue"}},
            // Its data is in the hub Secret the Work names, which the agent may read.
            {"apiVersion": "v1", "kind": "Secret",
             "metadata": {"name": "token", "namespace": member_ns.name(),
                          "annotations": {flotilla_api::annotations::DATA_SECRET: "settings",
                                          flotilla_api::annotations::DATA_VERSION: "1"}}},
            {"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"name": "web", "namespace": apps_ns},
             "spec": {"replicas": 1,
                      "selector": {"matchLabels": {"app": "web"}},
                      "template": {"metadata": {"labels": {"app": "web"}},
                                   "spec": {"containers": [{"name": "web", "image": "example.com/web:1"}]}}}},
        ]},
    }))?;
    // The data of the Work's Secret, as the splitter keeps it: a hub Secret of the Work's name.
    let data = flotilla_api::work_data::encode(
        &[("token".to_string(), ByteString(b"s3cret".to_vec()))].into(),
    );
    let data_secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": flotilla_api::work_data::secret_name("settings")},
        "type": flotilla_api::work_data::SECRET_TYPE,
    }))
    .map(|mut s: Secret| {
        s.data = Some([("token".to_string(), data)].into());
        s
    })?;
    wait_for(
        "the Work's data Secret to be created in the member's namespace",
        Duration::from_secs(30),
        || async {
            Ok(
                match Api::<Secret>::namespaced(hub.clone(), &names::cluster_namespace(&cluster))
                    .create(&PostParams::default(), &data_secret)
                    .await
                {
                    Ok(_) => Seen::Done(()),
                    Err(e) => Seen::not_yet(e),
                },
            )
        },
    )
    .await?;
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
    // The Secret got its data with the agent's credential (a get of the one Secret its Work
    // names).
    let token = Api::<Secret>::namespaced(member.clone(), member_ns.name())
        .get("token")
        .await?;
    ensure!(
        token
            .data
            .as_ref()
            .and_then(|d| d.get("token"))
            .is_some_and(|v| v.0 == b"s3cret"),
        "the member's Secret must have the data of the hub's data Secret: {:?}",
        token.data.as_ref().map(|d| d.keys().collect::<Vec<_>>())
    );
    let deployments: Api<Deployment> = Api::namespaced(member.clone(), &apps_ns);
    ensure!(
        deployments.get_opt("web").await?.is_some(),
        "the Work's Deployment must be in the member"
    );
    let namespace = Api::<Namespace>::all(member.clone()).get(&apps_ns).await?;
    ensure!(
        namespace
            .annotations()
            .contains_key(flotilla_api::annotations::CREATED_NAMESPACE),
        "the syncer creates the missing target namespace, marked: {:?}",
        namespace.annotations()
    );

    // Drift is reverted on the member's watch event.
    cms.patch(
        "settings",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"color": "red"}})),
    )
    .await?;
    wait_color(&cms, "blue").await?;

    // The syncer holds the Work with its finalizer, using the agent's credential; that credential
    // may change nothing else of a Work (admission policy flotilla-agent-works).
    let held = works.get("settings").await?;
    ensure!(
        held.finalizers().iter().any(|f| f == finalizers::SYNCER),
        "the pull-mode syncer must hold the Work with its finalizer: {:?}",
        held.finalizers()
    );
    let as_agent: Api<Work> = Api::namespaced(
        agent_hub_client(&secrets).await?,
        &names::cluster_namespace(&cluster),
    );
    for (what, patch) in [
        ("spec", json!({"spec": {"deletePolicy": "Orphan"}})),
        ("labels", json!({"metadata": {"labels": {"x": "y"}}})),
        (
            "finalizers",
            json!({"metadata": {"finalizers": [finalizers::SYNCER, "example.com/other"]}}),
        ),
    ] {
        let refused = as_agent
            .patch("settings", &PatchParams::default(), &Patch::Merge(patch))
            .await;
        ensure!(
            matches!(&refused, Err(kube::Error::Api(s)) if s.message.contains("an agent may")),
            "the agent's credential must not change the {what} of a Work: {refused:?}"
        );
    }

    // A Work deleted while the syncer is not running waits for it: its member object is deleted
    // once the syncer is back, and only then does the Work go.
    drop(syncer);
    works.delete("settings", &DeleteParams::default()).await?;
    flotilla_e2e::holds_for(
        "the deleted Work and its member object to stay while no syncer runs",
        Duration::from_secs(3),
        || async {
            let work = works.get_opt("settings").await?;
            let object = cms.get_opt("settings").await?;
            Ok(match (work, object) {
                (Some(w), Some(_)) if w.metadata.deletion_timestamp.is_some() => Ok(()),
                (w, o) => Err(format!(
                    "work {:?}, object present: {}",
                    w.map(|w| w.metadata.deletion_timestamp),
                    o.is_some()
                )),
            })
        },
    )
    .await?;
    let syncer = start_syncer()?;
    wait_for(
        "the member object and then the Work to be deleted",
        Duration::from_secs(30),
        || async {
            let object = cms.get_opt("settings").await?;
            let work = works.get_opt("settings").await?;
            Ok(match (object, work) {
                (None, None) => Seen::Done(()),
                (o, w) => Seen::not_yet(format!(
                    "object present: {}, Work present: {}",
                    o.is_some(),
                    w.is_some()
                )),
            })
        },
    )
    .await
    .with_context(|| format!("syncer log:\n{}", syncer.log()))?;

    // The member's hub namespace deleted (registration's token may): its Works go, and the
    // member keeps their objects — the agent loses its access with the namespace's RoleBinding,
    // and the hub's syncer lets the Works go.
    let hold = || async {
        wait_for(
            "the syncer to hold the new Work",
            Duration::from_secs(30),
            || async {
                let w = works.get("settings").await?;
                Ok(if w.finalizers().iter().any(|f| f == finalizers::SYNCER) {
                    Seen::Done(())
                } else {
                    Seen::not_yet(format!("{:?}", w.finalizers()))
                })
            },
        )
        .await
    };
    works.create(&PostParams::default(), &work).await?;
    wait_color(&cms, "blue").await?;
    hold().await?;
    let syncer_identity = identities.args("syncer")?;
    let mut syncer_flags: Vec<&str> = syncer_identity.iter().map(String::as_str).collect();
    syncer_flags.extend(hub_flags);
    let hub_syncer = ControllerProcess::start("flotilla-syncer", &syncer_flags)?;
    let hub_namespace = names::cluster_namespace(&cluster);
    Api::<Namespace>::all(identities.client("registration").await?)
        .delete(&hub_namespace, &DeleteParams::default())
        .await?;
    wait_for(
        "the Work to go with its namespace",
        Duration::from_secs(60),
        || async {
            Ok(match works.get_opt("settings").await? {
                None => Seen::Done(()),
                Some(w) => Seen::not_yet(format!("finalizers {:?}", w.finalizers())),
            })
        },
    )
    .await
    .with_context(|| format!("hub syncer log:\n{}", hub_syncer.log()))?;
    ensure!(
        cms.get_opt("settings").await?.is_some(),
        "a Work deleted with its hub namespace must leave its object in the member"
    );

    // Removing the Cluster: the agent loses its access first, so it cannot let go of its Works;
    // registration deletes them with the namespace and the hub's syncer lets them go. The member
    // keeps the object. (Registration made the namespace again meanwhile: the Cluster is still
    // there.)
    wait_for(
        "registration to make the member's namespace again",
        Duration::from_secs(60),
        || async {
            Ok(
                match Api::<Namespace>::all(hub.clone())
                    .get_opt(&hub_namespace)
                    .await?
                {
                    Some(ns) if ns.metadata.deletion_timestamp.is_none() => Seen::Done(()),
                    other => Seen::not_yet(format!(
                        "{:?}",
                        other.map(|n| n.metadata.deletion_timestamp)
                    )),
                },
            )
        },
    )
    .await?;
    works.create(&PostParams::default(), &work).await?;
    hold().await?;
    let clusters: Api<Cluster> = Api::all(hub.clone());
    clusters.delete(&cluster, &DeleteParams::default()).await?;
    wait_for(
        "the Cluster to be removed",
        Duration::from_secs(60),
        || async {
            Ok(match clusters.get_opt(&cluster).await? {
                None => Seen::Done(()),
                Some(c) => Seen::not_yet(format!("finalizers {:?}", c.finalizers())),
            })
        },
    )
    .await
    .with_context(|| {
        format!(
            "hub syncer log:\n{}\nregistration log:\n{}",
            hub_syncer.log(),
            hub_controller.log()
        )
    })?;
    ensure!(
        cms.get_opt("settings").await?.is_some(),
        "the member object of an orphaned Work must stay in the member"
    );
    drop(hub_syncer);
    drop(syncer);
    drop(agent);
    drop(registration);
    drop(identity);
    drop(created);
    Ok(())
}

/// A hub client with the agent's own credential, as it keeps it in the member.
async fn agent_hub_client(secrets: &Api<Secret>) -> Result<kube::Client> {
    let secret = secrets.get(CREDENTIAL_SECRET).await?;
    let key = names::DEFAULT_KUBECONFIG_KEY;
    let kubeconfig = kubeconfig_from_secret(&secret, key)?;
    Ok(client_from_kubeconfig(kubeconfig, CREDENTIAL_SECRET, key).await?)
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
