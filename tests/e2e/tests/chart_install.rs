//! The chart as users install it: `helm install --wait` of a whole hub (etcd, kube-apiserver,
//! controller-manager, the CRD Job and the four controllers) into the host member, as pods on the
//! environment's real node (`hack/clusters.sh up --host-node`); then the hub at work, its
//! apiserver pod killed, `helm upgrade` and `helm uninstall` — which must never touch what the
//! hub placed on its members — and installing again, which brings the same hub back.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use flotilla_e2e::chart::{chart, helm};
use flotilla_e2e::{
    ClusterInfo, Environment, Seen, client_from_kubeconfig, clusters, process::free_port,
    random_suffix, repo_root, scratch_dir, wait_for,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

const CONTROLLERS: [&str; 4] = ["registration", "syncer", "splitter", "negotiator"];
const HUB_AND_CONTROLLERS: [&str; 7] = [
    "etcd",
    "apiserver",
    "controller-manager",
    "registration",
    "syncer",
    "splitter",
    "negotiator",
];

/// The host member and its real node, as `hack/clusters.sh env` names them.
fn host() -> Result<(ClusterInfo, String)> {
    let member = std::env::var("FLOTILLA_HOST_MEMBER").context(
        "FLOTILLA_HOST_MEMBER is not set: the chart's tests need the real node \
         (hack/clusters.sh up --host-node member1, as hack/test.sh starts it)",
    )?;
    let node = std::env::var("FLOTILLA_HOST_NODE").context("FLOTILLA_HOST_NODE is not set")?;
    Ok((Environment::get().member(&member)?.clone(), node))
}

/// Node ports each release's pods listen on (hostNetwork): the hub's 5, 2 per controller and 2
/// of the certificate approval webhook.
const PORTS_PER_RELEASE: u16 = 15;
/// Releases taken so far by this test process.
static RELEASES: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);

/// A block of node ports of its own for one release: from the environment's port base + 2637
/// on (FLOTILLA_PORT_BASE, as hack/quickstart.sh places the chart), 15 per release. Below the
/// ephemeral range, so no outgoing connection holds one, and never handed to two releases — a
/// port asked of the kernel (bind to port 0) and released may be handed out again at once.
fn node_ports() -> Result<Vec<u16>> {
    let base: u16 = std::env::var("FLOTILLA_PORT_BASE")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(16443);
    let slot = RELEASES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let first = base + 2637 + slot * PORTS_PER_RELEASE;
    ensure!(
        first + PORTS_PER_RELEASE < 32768,
        "node port block {first}.. reaches the ephemeral range: lower FLOTILLA_PORT_BASE"
    );
    Ok((first..first + PORTS_PER_RELEASE).collect())
}

/// One release of the chart in the host member: its own namespace, node ports and etcd volume.
struct Release {
    name: String,
    namespace: String,
    host: ClusterInfo,
    host_client: Client,
    node: String,
    ports: Vec<u16>,
    volume: PathBuf,
}

impl Release {
    async fn new(prefix: &str) -> Result<Self> {
        let (host, node) = host()?;
        let host_client = host.client().await?;
        let name = format!("{prefix}{}", random_suffix());
        let ports = node_ports()?;
        let volume = scratch_dir().join(format!("{name}-etcd"));
        std::fs::create_dir_all(&volume)?;
        // etcd runs as a non-root user on a hostPath volume, which keeps the directory's owner.
        std::fs::set_permissions(&volume, std::fs::Permissions::from_mode(0o777))?;
        let release = Self {
            namespace: format!("{name}-system"),
            name,
            host,
            host_client,
            node,
            ports,
            volume,
        };
        release.persistent_volume().await?;
        Ok(release)
    }

    /// A hostPath PersistentVolume bound in advance to the etcd claim of this release, so that
    /// releases installed side by side never take each other's.
    async fn persistent_volume(&self) -> Result<()> {
        let pv = json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": format!("{}-etcd", self.name)},
            "spec": {
                "capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "flotilla-local",
                "hostPath": {"path": self.volume, "type": "Directory"},
                "claimRef": {"namespace": self.namespace, "name": format!("data-{}-etcd-0", self.name)},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [self.node]}]}]}},
            },
        });
        flotilla_e2e::api::apply(&self.host_client, &pv, false)
            .await?
            .context("creating the etcd PersistentVolume")?;
        Ok(())
    }

    /// `helm <args>` against the host member; its output (stdout and stderr) or an error that
    /// holds it.
    async fn helm(&self, args: &[&str]) -> Result<std::result::Result<String, String>> {
        let out = tokio::process::Command::new(helm())
            .args(args)
            .arg("--kubeconfig")
            .arg(&self.host.kubeconfig)
            .arg("--namespace")
            .arg(&self.namespace)
            .output()
            .await
            .context("running helm")?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(if out.status.success() {
            Ok(text)
        } else {
            Err(text)
        })
    }

    /// The values of the quick start, with this release's own ports.
    fn values(&self) -> Vec<String> {
        let values = repo_root().join("deploy/quickstart/values-local.yaml");
        let p = &self.ports;
        let mut args = vec![
            "--values".to_string(),
            values.to_string_lossy().into_owned(),
        ];
        let mut set = |key: &str, value: u16| {
            args.push("--set".into());
            args.push(format!("{key}={value}"));
        };
        set("hub.apiserver.port", p[0]);
        set("hub.etcd.clientPort", p[1]);
        set("hub.etcd.peerPort", p[2]);
        set("hub.etcd.metricsPort", p[3]);
        set("hub.controllerManager.port", p[4]);
        for c in CONTROLLERS {
            set(&format!("{c}.metricsPort"), self.health_port(c) - 1);
            set(&format!("{c}.healthPort"), self.health_port(c));
        }
        set("registration.approvalWebhook.port", p[13]);
        set("registration.approvalWebhook.metricsPort", p[14]);
        args
    }

    /// The node port of a controller's /healthz and /readyz (its metrics port is the one before).
    fn health_port(&self, controller: &str) -> u16 {
        let i = CONTROLLERS
            .iter()
            .position(|c| *c == controller)
            .unwrap_or_default();
        self.ports[6 + 2 * i]
    }

    /// Fails unless helm's `--debug` output `message` names the controller's Deployment as the
    /// one not ready.
    /// `helm --debug` named one of the Deployments of `components` as not ready.
    fn names_not_ready(&self, message: &str, components: &[&str]) -> Result<()> {
        ensure!(
            components.iter().any(|c| message.contains(&format!(
                "Deployment is not ready: {}/{}-{c}",
                self.namespace, self.name
            ))),
            "helm names the Deployment that is not ready (one of {components:?}): {message}"
        );
        Ok(())
    }

    /// `helm install --wait` (or upgrade) with the quick start's values and `extra`.
    async fn install(
        &self,
        verb: &str,
        extra: &[&str],
        timeout: &str,
    ) -> Result<std::result::Result<String, String>> {
        let chart = chart().to_string_lossy().into_owned();
        let values = self.values();
        let mut args: Vec<&str> = vec![verb, &self.name, &chart, "--create-namespace"];
        args.extend(values.iter().map(String::as_str));
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--wait", "--wait-for-jobs", "--timeout", timeout]);
        self.helm(&args).await
    }

    /// A client of the hub, from the admin kubeconfig the chart keeps in a Secret.
    async fn hub(&self) -> Result<Client> {
        let secret = Api::<Secret>::namespaced(self.host_client.clone(), &self.namespace)
            .get(&format!("{}-hub-admin-kubeconfig", self.name))
            .await?;
        let data = secret
            .data
            .and_then(|d| d.get("kubeconfig").cloned())
            .context("the admin kubeconfig Secret has no key kubeconfig")?;
        let path = scratch_dir().join(format!("{}-hub.kubeconfig", self.name));
        std::fs::write(&path, data.0)?;
        client_from_kubeconfig(&path).await
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.host_client.clone(), &self.namespace)
    }

    /// Every pod of the release Running and Ready on the real node (the setup Job's Succeeded),
    /// the hub's and the controllers'; their uids by component.
    async fn wait_all_ready(&self, what: &str) -> Result<BTreeMap<String, String>> {
        self.wait_ready(what, &HUB_AND_CONTROLLERS).await
    }

    /// Every pod of the release Running and Ready on the real node, one of each of `components`.
    async fn wait_ready(
        &self,
        what: &str,
        components: &[&str],
    ) -> Result<BTreeMap<String, String>> {
        let pods = self.pods();
        wait_for(what, Duration::from_secs(180), || async {
            let mut wrong = Vec::new();
            let mut ready = BTreeMap::new();
            for pod in pods.list(&ListParams::default()).await? {
                let component = pod
                    .labels()
                    .get("app.kubernetes.io/component")
                    .cloned()
                    .unwrap_or_default();
                let status = pod.status.clone().unwrap_or_default();
                let phase = status.phase.clone().unwrap_or_default();
                let node = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default();
                if node != self.node {
                    wrong.push(format!("{} on node {node:?}", pod.name_any()));
                }
                if component == "hub-setup" {
                    continue;
                }
                let is_ready = status
                    .conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                if phase != "Running" || !is_ready || pod.metadata.deletion_timestamp.is_some() {
                    wrong.push(format!("{} {phase} ready={is_ready}", pod.name_any()));
                } else {
                    ready.insert(component, pod.uid().unwrap_or_default());
                }
            }
            for c in components {
                if !ready.contains_key(*c) {
                    wrong.push(format!("no ready {c} pod"));
                }
            }
            Ok(Seen::unless(&wrong, ready))
        })
        .await
    }

    /// Deletes what the release kept on purpose (the etcd claim, the PKI Secret), its volume and
    /// its namespace. Errors are ignored: this runs after failures too.
    async fn clean_up(&self) {
        let _ = self
            .helm(&["uninstall", &self.name, "--wait", "--timeout", "2m"])
            .await;
        let _ = Api::<PersistentVolumeClaim>::namespaced(self.host_client.clone(), &self.namespace)
            .delete(
                &format!("data-{}-etcd-0", self.name),
                &DeleteParams::default(),
            )
            .await;
        let _ = Api::<Namespace>::all(self.host_client.clone())
            .delete(&self.namespace, &DeleteParams::default())
            .await;
        let _ = Api::<k8s_openapi::api::core::v1::PersistentVolume>::all(self.host_client.clone())
            .delete(&format!("{}-etcd", self.name), &DeleteParams::default())
            .await;
    }
}

/// The Lease of each controller in the hub, held: each controller reached the hub with its own
/// identity, which the chart's RBAC lets take its Lease. Returns each Lease's renew time.
async fn controllers_lead(hub: &Client, namespace: &str) -> Result<BTreeMap<String, String>> {
    let leases = Api::<Lease>::namespaced(hub.clone(), namespace);
    wait_for(
        "every controller holding its Lease in the hub",
        Duration::from_secs(120),
        || async {
            let mut wrong = Vec::new();
            let mut renewed = BTreeMap::new();
            for c in CONTROLLERS {
                match leases.get_opt(&format!("flotilla-{c}")).await? {
                    Some(l) => {
                        let spec = l.spec.unwrap_or_default();
                        match (spec.holder_identity, spec.renew_time) {
                            (Some(_), Some(t)) => {
                                renewed.insert(c.to_string(), format!("{:?}", t.0));
                            }
                            _ => wrong.push(format!("Lease flotilla-{c} not held")),
                        }
                    }
                    None => wrong.push(format!("no Lease flotilla-{c}")),
                }
            }
            Ok(Seen::unless(&wrong, renewed))
        },
    )
    .await
}

#[tokio::test]
async fn helm_installs_upgrades_and_uninstalls_a_whole_hub_on_the_real_node() -> Result<()> {
    let release = Release::new("hub").await?;
    let result = install_upgrade_uninstall(&release).await;
    release.clean_up().await;
    result
}

async fn install_upgrade_uninstall(release: &Release) -> Result<()> {
    let env = Environment::get();
    // -- install
    let started = Instant::now();
    release
        .install("install", &[], "5m")
        .await?
        .map_err(|e| anyhow!("helm install --wait failed:\n{e}"))?;
    eprintln!(
        "helm install --wait of a whole hub took {:?}",
        started.elapsed()
    );
    let pods = release
        .wait_all_ready("every pod of the release Running and Ready")
        .await?;
    let hub = release.hub().await?;
    let crds = Api::<CustomResourceDefinition>::all(hub.clone());
    for crd in [
        "placements.flotilla.dev",
        "works.flotilla.dev",
        "clusters.flotilla.dev",
    ] {
        let crd = crds
            .get(crd)
            .await
            .with_context(|| format!("the setup Job installed {crd}"))?;
        ensure!(
            crd.status
                .iter()
                .flat_map(|s| s.conditions.iter().flatten())
                .any(|c| c.type_ == "Established" && c.status == "True"),
            "{} is Established in the hub",
            crd.name_any()
        );
    }
    controllers_lead(&hub, &release.namespace).await?;
    hub_signs_client_certificates(&hub, &release.name).await?;
    hub_refuses_registrations_approval_of_another_user(release, &hub).await?;
    hub_enforces_baseline_by_default(&hub).await?;
    hub_refuses_external_ips(&hub).await?;
    hub_encrypts_at_rest_and_audits(release, &hub).await?;
    etcd_defragments(release).await?;

    // -- the hub at work: a member, a Placement, a Deployment placed on the member
    let member = env
        .members
        .iter()
        .find(|m| m.name != release.host.name)
        .context("a member other than the host")?;
    let cluster = format!("{}-{}", member.name, release.name);
    clusters::register_push(
        &hub,
        &release.namespace,
        &cluster,
        member,
        ("flotilla.dev/e2e", &release.name),
    )
    .await?;
    let app = format!("{}-app", release.name);
    let member_client = member.client().await?;
    let result = place_and_kill(release, &hub, &member_client, &app, &pods).await;
    let _ = Api::<Namespace>::all(member_client.clone())
        .delete(&app, &DeleteParams::default())
        .await;
    result
}

async fn place_and_kill(
    release: &Release,
    hub: &Client,
    member_client: &Client,
    app: &str,
    pods: &BTreeMap<String, String>,
) -> Result<()> {
    for object in [
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": app}}),
        json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
               "metadata": {"name": "web", "namespace": app},
               "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                        "clusterAffinity": {"labelSelector": {"matchLabels": {"flotilla.dev/e2e": release.name}}},
                        "replicaScheduling": {"type": "Duplicated"}}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": app},
               "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                                     "spec": {"containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}]}}}}),
    ] {
        flotilla_e2e::api::apply(hub, &object, false)
            .await?
            .with_context(|| format!("applying {} to the chart's hub", object["kind"]))?;
    }
    let on_member = Api::<Deployment>::namespaced(member_client.clone(), app);
    let replicas = |want: i32| {
        let on_member = on_member.clone();
        async move {
            let d = on_member.get_opt("web").await?;
            let available = d
                .as_ref()
                .and_then(|d| d.status.as_ref())
                .and_then(|s| s.available_replicas)
                .unwrap_or(0);
            let spec = d.as_ref().and_then(|d| d.spec.replicas).unwrap_or(0);
            Ok(if spec == want && available == want {
                Seen::Done(d.and_then(|d| d.uid()).unwrap_or_default())
            } else {
                Seen::not_yet(format!("{spec} replicas, {available} available"))
            })
        }
    };
    let uid = wait_for(
        "the Deployment placed on the member, 2 available",
        Duration::from_secs(120),
        || replicas(2),
    )
    .await?;

    let before_kill = on_member.get("web").await?.resource_version();
    // -- kill the hub's apiserver pod: the controllers reconnect once it is back
    let pod_api = release.pods();
    let apiserver = pod_api
        .list(&ListParams::default().labels("app.kubernetes.io/component=apiserver"))
        .await?
        .items
        .into_iter()
        .next()
        .context("the hub apiserver pod")?;
    pod_api
        .delete(
            &apiserver.name_any(),
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            },
        )
        .await?;
    let after = release
        .wait_all_ready("the hub back, every pod Ready again")
        .await?;
    ensure!(
        after.get("apiserver") != pods.get("apiserver"),
        "a new apiserver pod replaced the killed one"
    );
    // Meanwhile nothing changed in the member; then a change on the hub reaches it again.
    let d = on_member.get("web").await?;
    ensure!(
        d.uid().as_deref() == Some(uid.as_str()) && d.resource_version() == before_kill,
        "the member's Deployment is untouched while the hub was down and came back: {:?} -> {:?}",
        before_kill,
        d.resource_version()
    );
    Api::<Deployment>::namespaced(hub.clone(), app)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await?;
    let uid_after = wait_for(
        "the scaled Deployment on the member, 3 available",
        Duration::from_secs(180),
        || replicas(3),
    )
    .await?;
    ensure!(
        uid_after == uid,
        "the member's Deployment was updated, not replaced"
    );

    // -- helm upgrade, changing a value: only the controllers restart, the hub keeps its data
    let pki_before = secret_data(release, &format!("{}-hub-pki", release.name)).await?;
    let before = release
        .wait_all_ready("every pod Ready before the upgrade")
        .await?;
    release
        .install("upgrade", &["--set", "logLevel=debug"], "5m")
        .await?
        .map_err(|e| anyhow!("helm upgrade --wait failed:\n{e}"))?;
    // Each controller's pod replaced (a Deployment is replaced, not rolled, with hostNetwork).
    let started = Instant::now();
    let upgraded = loop {
        let now = release
            .wait_all_ready("every pod Ready after the upgrade")
            .await?;
        if CONTROLLERS.iter().all(|c| now.get(*c) != before.get(*c))
            || started.elapsed() > Duration::from_secs(120)
        {
            break now;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    for c in CONTROLLERS {
        let d = Api::<Deployment>::namespaced(release.host_client.clone(), &release.namespace)
            .get(&format!("{}-{c}", release.name))
            .await?;
        let args = d
            .spec
            .template
            .spec
            .map(|s| s.containers[0].args.clone().unwrap_or_default())
            .unwrap_or_default();
        ensure!(
            args.iter().any(|a| a == "--log-level=debug"),
            "{c} runs with the new value: {args:?}"
        );
        ensure!(
            upgraded.get(c) != before.get(c),
            "{c} was restarted by the upgrade"
        );
    }
    for c in ["etcd", "apiserver", "controller-manager"] {
        ensure!(
            upgraded.get(c) == before.get(c),
            "the upgrade left the hub's {c} pod alone"
        );
    }
    ensure!(
        secret_data(release, &format!("{}-hub-pki", release.name)).await? == pki_before,
        "the upgrade kept the hub's CAs, keys and tokens"
    );
    let hub = release.hub().await?;
    controllers_lead(&hub, &release.namespace).await?;

    // -- the admin's credential: an expiring certificate of a user bound to cluster-admin, not
    //    system:masters; rotating it (hub.adminCredential.generation) leaves the old one without
    //    rights at once, the Secret's new one works, the controllers keep theirs
    let whoami = |client: Client| async move {
        let review: SelfSubjectReview = Api::all(client)
            .create(&PostParams::default(), &SelfSubjectReview::default())
            .await?;
        let user = review.status.and_then(|s| s.user_info).unwrap_or_default();
        anyhow::Ok((
            user.username.unwrap_or_default(),
            user.groups.unwrap_or_default(),
        ))
    };
    let (user, groups) = whoami(hub.clone()).await?;
    ensure!(
        user == "flotilla-admin-g1" && !groups.iter().any(|g| g == "system:masters"),
        "the hub admin is {user} in {groups:?}"
    );
    release
        .install(
            "upgrade",
            &[
                "--set",
                "logLevel=debug",
                "--set",
                "hub.adminCredential.generation=2",
            ],
            "5m",
        )
        .await?
        .map_err(|e| anyhow!("helm upgrade rotating the admin credential failed:\n{e}"))?;
    let pki_rotated = secret_data(release, &format!("{}-hub-pki", release.name)).await?;
    ensure!(
        pki_rotated.get("admin.crt") != pki_before.get("admin.crt"),
        "a new admin certificate"
    );
    for c in CONTROLLERS {
        let key = format!("token-{c}");
        ensure!(
            pki_rotated.get(&key) == pki_before.get(&key),
            "{c} keeps its token"
        );
    }
    match Api::<Namespace>::all(hub.clone())
        .list(&ListParams::default().limit(1))
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => bail!(
            "the rotated-out admin certificate is refused: {:?}",
            other.map(|l| l.items.len())
        ),
    }
    let hub = release.hub().await?;
    Api::<Namespace>::all(hub.clone())
        .list(&ListParams::default().limit(1))
        .await
        .context("the rotated admin certificate in the Secret works")?;
    ensure!(
        whoami(hub.clone()).await?.0 == "flotilla-admin-g2",
        "the Secret holds the new user's certificate"
    );
    controllers_lead(&hub, &release.namespace).await?;
    let pki_before = pki_rotated;

    // -- helm uninstall: the hub's pods go, its data and every member workload stay
    release
        .helm(&["uninstall", &release.name, "--wait", "--timeout", "3m"])
        .await?
        .map_err(|e| anyhow!("helm uninstall failed:\n{e}"))?;
    wait_for(
        "no pod of the release left",
        Duration::from_secs(120),
        || async {
            let left: Vec<String> = pod_api
                .list(&ListParams::default())
                .await?
                .iter()
                .map(|p| p.name_any())
                .collect();
            Ok(Seen::unless(&left, ()))
        },
    )
    .await?;
    ensure!(
        on_member.get("web").await?.uid().as_deref() == Some(uid.as_str()),
        "uninstalling left the member's Deployment"
    );
    ensure!(
        Api::<PersistentVolumeClaim>::namespaced(release.host_client.clone(), &release.namespace)
            .get_opt(&format!("data-{}-etcd-0", release.name))
            .await?
            .is_some(),
        "uninstalling keeps the etcd claim (hub.keepDataOnUninstall)"
    );
    ensure!(
        secret_data(release, &format!("{}-hub-pki", release.name)).await? == pki_before,
        "uninstalling keeps the PKI Secret"
    );

    // -- install again: the same hub comes back, with its Clusters and Placements
    release
        .install("install", &[], "5m")
        .await?
        .map_err(|e| anyhow!("installing again failed:\n{e}"))?;
    release
        .wait_all_ready("every pod Ready after installing again")
        .await?;
    let hub = release.hub().await?;
    let placements = Api::<flotilla_api::Placement>::namespaced(hub.clone(), app);
    ensure!(
        placements.get_opt("web").await?.is_some(),
        "the hub kept its Placement"
    );
    let d = on_member.get("web").await?;
    ensure!(
        d.uid().as_deref() == Some(uid.as_str()),
        "the member's Deployment is still the same object"
    );
    Ok(())
}

/// The hub's controller-manager signs an approved client certificate request, as it must for
/// pull-mode agents: its signing controller runs, with the rights it needs.
async fn hub_signs_client_certificates(hub: &Client, name: &str) -> Result<()> {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("e2e-{name}"));
    let request = params.serialize_request(&key)?.pem()?;
    let csr: CertificateSigningRequest = serde_json::from_value(json!({
        "metadata": {"name": format!("e2e-{name}")},
        "spec": {"request": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, request),
                 "signerName": "kubernetes.io/kube-apiserver-client",
                 "usages": ["client auth"], "expirationSeconds": 600},
    }))?;
    let csrs = Api::<CertificateSigningRequest>::all(hub.clone());
    let created = csrs.create(&Default::default(), &csr).await?;
    let approval = json!({"status": {"conditions": [{
        "type": "Approved", "status": "True", "reason": "E2E", "message": "the chart's test"}]}});
    csrs.patch_approval(
        &created.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&approval),
    )
    .await?;
    wait_for(
        "the hub's controller-manager to sign the request",
        Duration::from_secs(90),
        || async {
            let csr = csrs.get(&created.name_any()).await?;
            Ok(match csr.status.and_then(|s| s.certificate) {
                Some(_) => Seen::Done(()),
                None => Seen::not_yet("approved, no certificate yet"),
            })
        },
    )
    .await
}

/// The hub asks the chart's approval webhook (its own Deployment, reached on the node's
/// loopback) before it stores registration's approval of a certificate request: registration's
/// token cannot approve a certificate for another user, even one that a bootstrap identity
/// asked for (the chart's admission policy sees only who asked).
async fn hub_refuses_registrations_approval_of_another_user(
    release: &Release,
    hub: &Client,
) -> Result<()> {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use kube::config::Kubeconfig;

    // A bootstrap identity as deploy/bootstrap makes one: a ServiceAccount of flotilla-system
    // that may create certificate requests.
    let account = format!("flotilla-bootstrap-e2e-{}", random_suffix());
    let namespaces = Api::<Namespace>::all(hub.clone());
    if namespaces.get_opt(BOOTSTRAP_NAMESPACE).await?.is_none() {
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": BOOTSTRAP_NAMESPACE}}))?,
            )
            .await?;
    }
    let accounts = Api::<ServiceAccount>::namespaced(hub.clone(), BOOTSTRAP_NAMESPACE);
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": account}}))?,
        )
        .await?;
    Api::<ClusterRole>::all(hub.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": account},
                "rules": [{"apiGroups": ["certificates.k8s.io"],
                           "resources": ["certificatesigningrequests"],
                           "verbs": ["create", "get"]}]}))?,
        )
        .await?;
    Api::<ClusterRoleBinding>::all(hub.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": account},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": account},
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": BOOTSTRAP_NAMESPACE}]}))?,
        )
        .await?;
    let token = accounts
        .create_token_request(&account, &PostParams::default(), &Default::default())
        .await?
        .status
        .and_then(|s| s.token)
        .context("no token for the bootstrap identity")?;
    let admin = secret_data(release, &format!("{}-hub-admin-kubeconfig", release.name)).await?;
    let mut kubeconfig = Kubeconfig::from_yaml(&String::from_utf8_lossy(
        admin.get("kubeconfig").context("no admin kubeconfig")?,
    ))?;
    for user in &mut kubeconfig.auth_infos {
        user.auth_info = Some(kube::config::AuthInfo {
            token: Some(token.clone().into()),
            ..Default::default()
        });
    }
    let bootstrap = flotilla_e2e::client_from(kubeconfig).await?;

    // It asks for a certificate of the hub's controller-manager.
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "system:kube-controller-manager");
    let request = params.serialize_request(&key)?.pem()?;
    let csr: CertificateSigningRequest = serde_json::from_value(json!({
        "metadata": {"generateName": "e2e-stolen-"},
        "spec": {"request": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, request),
                 "signerName": "kubernetes.io/kube-apiserver-client",
                 "usages": ["client auth"], "expirationSeconds": 600},
    }))?;
    let made = Api::<CertificateSigningRequest>::all(bootstrap)
        .create(&PostParams::default(), &csr)
        .await?;
    let name = made.name_any();

    // Registration's token, as its pods hold it, approves it.
    let registration = secret_data(
        release,
        &format!("{}-registration-hub-kubeconfig", release.name),
    )
    .await?;
    let path = scratch_dir().join(format!("{}-registration.kubeconfig", release.name));
    std::fs::write(
        &path,
        registration
            .get("kubeconfig")
            .context("no registration kubeconfig")?,
    )?;
    let stolen = Api::<CertificateSigningRequest>::all(client_from_kubeconfig(&path).await?);
    let mut approved = made.clone();
    approved.status = Some(serde_json::from_value(json!({"conditions": [{
        "type": "Approved", "status": "True", "reason": "Stolen", "message": "a stolen token"}]}))?);
    let refused = wait_for(
        "the hub to refuse registration's approval of another user's certificate",
        Duration::from_secs(60),
        || async {
            match stolen
                .replace_subresource("approval", &name, &PostParams::default(), &approved)
                .await
            {
                Ok(_) => bail!(
                    "registration's token approved a certificate for system:kube-controller-manager"
                ),
                Err(e)
                    if e.to_string()
                        .contains("registration approves only pull-mode agents") =>
                {
                    Ok(Seen::Done(e.to_string()))
                }
                // The webhook's pod may still be starting.
                Err(e) => Ok(Seen::not_yet(e)),
            }
        },
    )
    .await?;
    ensure!(
        refused.contains("system:kube-controller-manager"),
        "the refusal names what was asked for: {refused}"
    );
    let csrs = Api::<CertificateSigningRequest>::all(hub.clone());
    ensure!(
        csrs.get(&name)
            .await?
            .status
            .and_then(|s| s.certificate)
            .is_none(),
        "no certificate was issued"
    );
    csrs.delete(&name, &DeleteParams::default()).await?;
    accounts.delete(&account, &DeleteParams::default()).await?;
    Api::<ClusterRoleBinding>::all(hub.clone())
        .delete(&account, &DeleteParams::default())
        .await?;
    Api::<ClusterRole>::all(hub.clone())
        .delete(&account, &DeleteParams::default())
        .await?;
    Ok(())
}

/// The namespace of pull-mode agents' bootstrap ServiceAccounts on the hub.
const BOOTSTRAP_NAMESPACE: &str = "flotilla-system";

/// The embedded hub's AdmissionConfiguration makes `baseline` (podSecurity.defaultLevel) the
/// level of a namespace without Pod Security labels: a host-PID Pod is refused there, even as a
/// dry run, and an ordinary one is not.
async fn hub_enforces_baseline_by_default(hub: &Client) -> Result<()> {
    let ns = format!("e2e-psa-{}", random_suffix());
    Api::<Namespace>::all(hub.clone())
        .create(
            &kube::api::PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
        )
        .await?;
    let pods = Api::<Pod>::namespaced(hub.clone(), &ns);
    let dry_run = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    let pod = |host_pid: bool| -> Result<Pod> {
        Ok(serde_json::from_value(json!({
            "metadata": {"generateName": "psa-"},
            "spec": {"hostPID": host_pid, "automountServiceAccountToken": false,
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}))?)
    };
    // The namespace's default ServiceAccount comes a moment after the namespace.
    wait_for(
        "an ordinary Pod admitted in an unlabelled hub namespace",
        Duration::from_secs(30),
        || async {
            Ok(match pods.create(&dry_run, &pod(false)?).await {
                Ok(_) => Seen::Done(()),
                Err(e) => Seen::not_yet(e),
            })
        },
    )
    .await?;
    let refused = pods.create(&dry_run, &pod(true)?).await;
    let _ = Api::<Namespace>::all(hub.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
    match refused {
        Err(kube::Error::Api(s))
            if s.code == 403
                && s.message
                    .contains("violates PodSecurity \"baseline:latest\"") =>
        {
            Ok(())
        }
        other => Err(anyhow!(
            "a host-PID Pod must be refused at baseline in an unlabelled namespace: {other:?}"
        )),
    }
}

/// The embedded hub refuses Services with `externalIPs` (DenyServiceExternalIPs): placed on every
/// member, one would take the traffic for those addresses there.
async fn hub_refuses_external_ips(hub: &Client) -> Result<()> {
    use k8s_openapi::api::core::v1::Service;
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "intercept"},
        "spec": {"ports": [{"port": 80}], "externalIPs": ["8.8.8.8"]}}))?;
    let dry_run = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    match Api::<Service>::namespaced(hub.clone(), "default")
        .create(&dry_run, &service)
        .await
    {
        Err(kube::Error::Api(s))
            if s.code == 403 && s.message.contains("external IPs is denied") =>
        {
            Ok(())
        }
        other => Err(anyhow!(
            "a Service with externalIPs must be refused by the hub: {other:?}"
        )),
    }
}

/// The value of `key` in the hub's etcd, read there directly (etcd's JSON gateway, with the
/// apiserver's etcd client certificate from the hub's credentials Secret).
async fn etcd_value(release: &Release, key: &str) -> Result<Vec<u8>> {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let pki = secret_data(release, &format!("{}-hub-pki", release.name)).await?;
    let dir = scratch_dir().join(format!("{}-etcd-client", release.name));
    std::fs::create_dir_all(&dir)?;
    for file in ["etcd-ca.crt", "etcd-client.crt", "etcd-client.key"] {
        let data = pki
            .get(file)
            .with_context(|| format!("{file} in the hub's credentials"))?;
        std::fs::write(dir.join(file), data)?;
    }
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--fail", "--cacert"])
        .arg(dir.join("etcd-ca.crt"))
        .arg("--cert")
        .arg(dir.join("etcd-client.crt"))
        .arg("--key")
        .arg(dir.join("etcd-client.key"))
        .arg(format!(
            "https://127.0.0.1:{}/v3/kv/range",
            release.ports[1]
        ))
        .args(["-X", "POST", "-d"])
        .arg(json!({"key": b64.encode(key)}).to_string())
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "reading {key} in etcd: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let value = answer["kvs"][0]["value"]
        .as_str()
        .with_context(|| format!("no {key} in etcd: {answer}"))?;
    Ok(b64.decode(value)?)
}

/// Secrets and Works (tenants' objects) are encrypted in the hub's etcd, read there directly; a
/// ConfigMap, which is not, shows its data there (so the reading sees what is stored). The audit
/// log on the apiserver's stdout names the Secret written, and never holds its data.
async fn hub_encrypts_at_rest_and_audits(release: &Release, hub: &Client) -> Result<()> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let marker = format!("flotilla-plaintext-{}", random_suffix());
    let name = format!("e2e-at-rest-{}", random_suffix());
    let configmap = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"}, "data": {"k": marker}});
    let objects = [
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": name, "namespace": "default"}, "stringData": {"k": marker}}),
        configmap.clone(),
        json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
               "metadata": {"name": name, "namespace": "default"},
               "spec": {"manifests": [configmap]}}),
    ];
    for object in &objects {
        flotilla_e2e::api::apply(hub, object, false)
            .await?
            .map_err(|e| anyhow!("writing {}: {e}", object["kind"]))?;
    }
    for (key, encrypted) in [
        (format!("/registry/secrets/default/{name}"), true),
        (format!("/registry/flotilla.dev/works/default/{name}"), true),
        (format!("/registry/configmaps/default/{name}"), false),
    ] {
        let stored = etcd_value(release, &key).await?;
        let plain = String::from_utf8_lossy(&stored).contains(&marker);
        if encrypted {
            ensure!(
                stored.starts_with(b"k8s:enc:secretbox:v1:key1:") && !plain,
                "{key} must be encrypted in etcd: {:?}",
                String::from_utf8_lossy(&stored[..stored.len().min(64)])
            );
        } else {
            ensure!(plain, "{key} is stored as it is");
        }
    }
    let apiserver = release
        .pods()
        .list(&ListParams::default().labels("app.kubernetes.io/component=apiserver"))
        .await?
        .items
        .into_iter()
        .next()
        .context("the hub's apiserver pod")?
        .name_any();
    let log = wait_for(
        "the audit log to name the Secret written",
        Duration::from_secs(30),
        || async {
            let log = release
                .pods()
                .logs(&apiserver, &kube::api::LogParams::default())
                .await?;
            let audited = log.lines().any(|l| {
                l.contains("\"apiVersion\":\"audit.k8s.io/v1\"")
                    && l.contains("\"resource\":\"secrets\"")
                    && l.contains(&format!("\"name\":\"{name}\""))
            });
            Ok(if audited {
                Seen::Done(log)
            } else {
                Seen::not_yet("not in the log yet")
            })
        },
    )
    .await?;
    ensure!(
        !log.contains(&marker),
        "the audit log must not hold a Secret's data"
    );
    let _ = Api::<Secret>::namespaced(hub.clone(), "default")
        .delete(&name, &DeleteParams::default())
        .await;
    let _ = Api::<ConfigMap>::namespaced(hub.clone(), "default")
        .delete(&name, &DeleteParams::default())
        .await;
    let _ = Api::<flotilla_api::Work>::namespaced(hub.clone(), "default")
        .delete(&name, &DeleteParams::default())
        .await;
    Ok(())
}

/// The chart's defragmentation CronJob works: a Job made from it (as `kubectl create job
/// --from=cronjob/...` does) defragments the hub's etcd and clears its alarms.
async fn etcd_defragments(release: &Release) -> Result<()> {
    use k8s_openapi::api::batch::v1::{CronJob, Job};
    let cronjob = Api::<CronJob>::namespaced(release.host_client.clone(), &release.namespace)
        .get(&format!("{}-etcd-defrag", release.name))
        .await
        .context("the chart's etcd defragmentation CronJob")?;
    let template = cronjob.spec.job_template;
    let name = format!("{}-etcd-defrag-now", release.name);
    let job = Job {
        metadata: kube::api::ObjectMeta {
            name: Some(name.clone()),
            labels: template.metadata.and_then(|m| m.labels),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    };
    let jobs = Api::<Job>::namespaced(release.host_client.clone(), &release.namespace);
    jobs.create(&Default::default(), &job).await?;
    wait_for(
        "the defragmentation Job to succeed",
        Duration::from_secs(120),
        || async {
            let status = jobs.get(&name).await?.status.unwrap_or_default();
            Ok(match (status.succeeded, status.failed) {
                (Some(n), _) if n > 0 => Seen::Done(()),
                (_, Some(n)) if n > 0 => Seen::not_yet(format!("{n} failed pod(s)")),
                _ => Seen::not_yet("running"),
            })
        },
    )
    .await?;
    let pod = release
        .pods()
        .list(&ListParams::default().labels(&format!("job-name={name}")))
        .await?
        .items
        .into_iter()
        .next()
        .context("the Job's pod")?
        .name_any();
    let log = release
        .pods()
        .logs(
            &pod,
            &kube::api::LogParams {
                container: Some("defrag".into()),
                ..Default::default()
            },
        )
        .await?;
    ensure!(
        log.contains("Finished defragmenting etcd member"),
        "etcdctl defrag says it defragmented: {log}"
    );
    let _ = jobs.delete(&name, &DeleteParams::background()).await;
    Ok(())
}

async fn secret_data(release: &Release, name: &str) -> Result<BTreeMap<String, Vec<u8>>> {
    let secret = Api::<Secret>::namespaced(release.host_client.clone(), &release.namespace)
        .get(name)
        .await?;
    Ok(secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect())
}

#[tokio::test]
async fn a_missing_storage_class_fails_the_install_at_once_naming_it() -> Result<()> {
    let release = Release::new("nosc").await?;
    let out = release
        .install(
            "install",
            &[
                "--set",
                "hub.etcd.persistence.storageClassName=no-such-class",
            ],
            "1m",
        )
        .await?;
    release.clean_up().await;
    let Err(message) = out else {
        anyhow::bail!("helm install succeeded without the StorageClass");
    };
    ensure!(
        message.contains("StorageClass \"no-such-class\" does not exist"),
        "helm says which StorageClass is missing: {message}"
    );
    Ok(())
}

#[tokio::test]
async fn an_image_that_cannot_be_pulled_fails_the_install_and_the_pod_says_which() -> Result<()> {
    let release = Release::new("noimg").await?;
    let result = missing_image(&release).await;
    release.clean_up().await;
    result
}

async fn missing_image(release: &Release) -> Result<()> {
    let out = release
        .install(
            "install",
            &["--set", "image.tag=no-such-tag", "--debug"],
            "90s",
        )
        .await?;
    let Err(message) = out else {
        anyhow::bail!("helm install --wait succeeded without the controllers' image");
    };
    // helm --debug names what it waits for (a Deployment of the controllers' image); the pod
    // says why.
    release.names_not_ready(&message, &["csr-approval", "registration"])?;
    let pods = release
        .pods()
        .list(&ListParams::default().labels("app.kubernetes.io/component=registration"))
        .await?;
    let waiting = pods
        .iter()
        .flat_map(|p| {
            p.status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
        })
        .filter_map(|c| c.state.as_ref().and_then(|s| s.waiting.clone()))
        .next()
        .context("the registration pod's container is waiting")?;
    ensure!(
        waiting.reason.as_deref() == Some("ErrImageNeverPull")
            && waiting
                .message
                .as_deref()
                .is_some_and(|m| m.contains("flotilla.local/flotilla:no-such-tag")),
        "the pod says the image cannot be pulled, and which: {waiting:?}"
    );
    // The hub itself came up: only the controllers wait for their image.
    let hub_ready = release
        .pods()
        .list(&ListParams::default().labels("app.kubernetes.io/component=apiserver"))
        .await?;
    ensure!(
        hub_ready.iter().any(|p| p
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .any(|c| c.type_ == "Ready" && c.status == "True")),
        "the hub's apiserver is Ready"
    );
    Ok(())
}

#[tokio::test]
async fn external_mode_runs_the_controllers_against_an_existing_hub() -> Result<()> {
    let env = Environment::get();
    // An existing hub: a cluster of its own, added for this test.
    let existing = flotilla_e2e::ScratchMember::add(&env, "exthub").await?;
    let release = Release::new("ext").await?;
    let result = external_mode(&release, &existing.info).await;
    release.clean_up().await;
    result
}

/// A Secret of the release namespace with a kubeconfig (key `kubeconfig`).
async fn kubeconfig_secret(release: &Release, name: &str, kubeconfig: &str) -> Result<()> {
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
                           "metadata": {"name": release.namespace}});
    flotilla_e2e::api::apply(&release.host_client, &namespace, false)
        .await?
        .context("creating the release namespace")?;
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": name, "namespace": release.namespace},
                        "stringData": {"kubeconfig": kubeconfig}});
    flotilla_e2e::api::apply(&release.host_client, &secret, false)
        .await?
        .context("creating a kubeconfig Secret")?;
    Ok(())
}

async fn external_mode(release: &Release, existing: &ClusterInfo) -> Result<()> {
    kubeconfig_secret(
        release,
        "hub-admin",
        &std::fs::read_to_string(&existing.kubeconfig)?,
    )
    .await?;
    let external = [
        "--set",
        "hub.mode=external",
        "--set",
        "hub.external.kubeconfigSecret=hub-admin",
    ];
    let out = release
        .install("install", &external, "4m")
        .await?
        .map_err(|e| anyhow!("helm install --wait (external) failed:\n{e}"))?;
    ensure!(
        out.contains("WARNING: registration has no kubeconfig of its own"),
        "NOTES warn that the controllers run with the admin kubeconfig: {out}"
    );
    let pods = release
        .wait_ready(
            "the controllers Ready against the existing hub",
            &CONTROLLERS,
        )
        .await?;
    ensure!(
        !pods.contains_key("etcd") && !pods.contains_key("apiserver"),
        "external mode runs no hub of its own: {pods:?}"
    );
    let hub = existing.client().await?;
    Api::<CustomResourceDefinition>::all(hub.clone())
        .get("placements.flotilla.dev")
        .await
        .context("the setup Job installed the CRDs into the existing hub")?;
    controllers_lead(&hub, &release.namespace).await?;

    // A controller whose hub does not answer: helm --wait fails naming its Deployment, and the
    // controller's /readyz says which hub it cannot reach.
    let closed = free_port()?;
    let server = existing.read_kubeconfig()?.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.server.clone())
        .context("the existing hub's server")?;
    let unreachable = std::fs::read_to_string(&existing.kubeconfig)?
        .replace(&server, &format!("https://127.0.0.1:{closed}"));
    kubeconfig_secret(release, "unreachable", &unreachable).await?;
    let mut args = external.to_vec();
    args.extend([
        "--set",
        "hub.external.controllerKubeconfigSecrets.negotiator=unreachable",
        "--debug",
    ]);
    let Err(message) = release.install("upgrade", &args, "45s").await? else {
        anyhow::bail!("helm upgrade --wait succeeded with an unreachable hub");
    };
    release.names_not_ready(&message, &["negotiator"])?;
    let health = release.health_port("negotiator");
    let (status, body) = flotilla_e2e::process::http_get(
        std::net::SocketAddr::from(([127, 0, 0, 1], health)),
        "/readyz",
    )
    .await?;
    ensure!(
        status == 503
            && body.contains(&format!(
                "the hub is unreachable: https://127.0.0.1:{closed}"
            )),
        "the negotiator's /readyz says which hub it cannot reach: {status} {body}"
    );
    Ok(())
}

/// The member chart as a user installs it for a member without nodes of its own (as the quick
/// start does for member3): `helm install --wait` of the identities in the member, and of the
/// agent, syncer and importer, hosted, as pods on the real node that reach the member with
/// kubeconfigs of those identities. The member joins the hub from the bootstrap kubeconfig, its
/// schemas are imported and a Work is applied into it; `helm uninstall --wait` removes both
/// releases and leaves what was applied in place.
#[tokio::test]
async fn the_member_chart_joins_a_pull_member_from_the_real_node() -> Result<()> {
    use flotilla_api::cluster::{Cluster, ClusterSpec, SyncMode};
    use flotilla_api::{ApiResourceImport, Work, labels, names};
    use flotilla_e2e::TestNamespace;
    use flotilla_e2e::bootstrap::{Registration, install_bootstrap, member_chart};
    use flotilla_e2e::chart::{ChartIdentities, cluster_kubeconfig_with_token, token_for};
    use flotilla_e2e::process::ControllerProcess;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::api::rbac::v1::ClusterRole;
    use kube::api::PostParams;

    const LABEL: &str = "e2e.flotilla.dev/agent-chart";
    let env = Environment::get();
    let (host, node) = host()?;
    let member = env
        .members
        .iter()
        .find(|m| m.name != host.name)
        .context("a member other than the host")?
        .clone();
    let hub = env.hub.client().await?;
    flotilla_e2e::api::install_crds(&hub).await?;
    install_bootstrap(&hub).await?;
    let hub_ns = TestNamespace::create("agent-chart", &[&env.hub]).await?;
    let member_ns = TestNamespace::create("agent-chart", &[&member]).await?;
    let host_ns = TestNamespace::create("agent-chart", &[&host]).await?;
    let selector = random_suffix();
    // The hub's registration controller with the hub chart's identity, serving this test's Cluster.
    let identities = ChartIdentities::install(hub_ns.name()).await?;
    let mut args = identities.args("registration")?;
    args.extend(
        [
            "--lease-namespace",
            hub_ns.name(),
            "--cluster-selector",
            &format!("{LABEL}={selector}"),
        ]
        .map(String::from),
    );
    let registration_controller = ControllerProcess::start(
        "flotilla-registration",
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    )?;
    let registration = Registration::create(&env, &format!("e2e-achart-{selector}")).await?;
    let cluster = registration.cluster.clone();
    let mut c = Cluster::new(
        &cluster,
        ClusterSpec {
            sync_mode: SyncMode::Pull,
            hub_accepts_client: true,
            ..Default::default()
        },
    );
    c.metadata.labels = Some([(LABEL.to_string(), selector.clone())].into());
    Api::<Cluster>::all(hub.clone())
        .create(&PostParams::default(), &c)
        .await?;

    let chart = member_chart().to_string_lossy().into_owned();
    let identity_release = format!("ids-{selector}");
    let hosted_release = format!("agent-{selector}");
    let helm_in = |cluster: &ClusterInfo, namespace: &str, args: Vec<String>| {
        let kubeconfig = cluster.kubeconfig.clone();
        let namespace = namespace.to_string();
        async move {
            let out = tokio::process::Command::new(helm())
                .args(&args)
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .arg("--namespace")
                .arg(&namespace)
                .output()
                .await
                .context("running helm")?;
            ensure!(
                out.status.success(),
                "helm {} failed:\n{}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        }
    };
    let strings = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<_>>();

    let result = async {
        // -- in the member: the identities
        helm_in(
            &member,
            member_ns.name(),
            strings(&[
                "install",
                &identity_release,
                &chart,
                "--set",
                "install.controllers=false",
                "--wait",
                "--timeout",
                "2m",
            ]),
        )
        .await?;
        let member_client = member.client().await?;
        let mut kubeconfigs = BTreeMap::new();
        for component in ["agent", "syncer", "importer"] {
            let token = token_for(
                &member_client,
                member_ns.name(),
                &format!("{identity_release}-{component}"),
            )
            .await?;
            let path = cluster_kubeconfig_with_token(&member, &token)?;
            kubeconfigs.insert(
                component.to_string(),
                k8s_openapi::ByteString(std::fs::read(path)?),
            );
        }
        // -- on the host: the Deployments, which need the member's kubeconfigs and the
        // bootstrap kubeconfig: without them the install fails at once, naming the Secret.
        let ports = node_ports()?;
        let values = repo_root().join("deploy/quickstart/values-member3.yaml");
        let mut install = strings(&[
            "install",
            &hosted_release,
            &chart,
            "--values",
            &values.to_string_lossy(),
            "--set",
            &format!("clusterName={cluster}"),
            "--set",
            "member.kubeconfigSecret=member-kubeconfigs",
            "--set",
            &format!("member.namespace={}", member_ns.name()),
            "--set",
            &format!("member.release={identity_release}"),
            "--wait",
            "--timeout",
            "3m",
        ]);
        for (i, component) in ["agent", "syncer", "importer"].iter().enumerate() {
            install.push("--set".into());
            install.push(format!("{component}.metricsPort={}", ports[2 * i]));
            install.push("--set".into());
            install.push(format!("{component}.healthPort={}", ports[2 * i + 1]));
        }
        let missing = helm_in(&host, host_ns.name(), install.clone()).await;
        ensure!(
            missing
                .as_ref()
                .is_err_and(|e| format!("{e:#}").contains("member.kubeconfigSecret: the Secret")),
            "helm install without the member's kubeconfigs fails naming them: {missing:?}"
        );
        let host_client = host.client().await?;
        let secrets = Api::<Secret>::namespaced(host_client.clone(), host_ns.name());
        for (name, data) in [
            ("member-kubeconfigs", kubeconfigs),
            (
                "flotilla-bootstrap",
                [(
                    "kubeconfig".to_string(),
                    k8s_openapi::ByteString(std::fs::read(&registration.kubeconfig)?),
                )]
                .into(),
            ),
        ] {
            let secret = Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                data: Some(data),
                ..Default::default()
            };
            secrets.create(&PostParams::default(), &secret).await?;
        }
        let started = Instant::now();
        helm_in(&host, host_ns.name(), install)
            .await
            .with_context(|| format!("registration log:\n{}", registration_controller.log()))?;
        eprintln!(
            "helm install --wait of the hosted agent, syncer and importer took {:?}",
            started.elapsed()
        );
        let pods = Api::<Pod>::namespaced(host_client.clone(), host_ns.name())
            .list(&ListParams::default())
            .await?;
        ensure!(
            pods.items.len() == 3
                && pods
                    .items
                    .iter()
                    .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref())
                        == Some(node.as_str())),
            "one pod per component, on the real node"
        );

        // -- the member joined, with its own credential, and is Ready
        wait_for(
            "the Cluster to be Ready from the hosted agent's heartbeats",
            Duration::from_secs(90),
            || async {
                let c = Api::<Cluster>::all(hub.clone()).get(&cluster).await?;
                let ready = c
                    .status
                    .iter()
                    .flat_map(|s| s.conditions.iter())
                    .find(|c| c.type_ == "Ready")
                    .map(|c| c.status.clone());
                Ok(if ready.as_deref() == Some("True") {
                    Seen::Done(())
                } else {
                    Seen::not_yet(format!("Ready={ready:?}"))
                })
            },
        )
        .await?;
        ensure!(
            Api::<Secret>::namespaced(member_client.clone(), member_ns.name())
                .get_opt("flotilla-hub-kubeconfig")
                .await?
                .is_some(),
            "the agent keeps the hub credential in the member, not on the host"
        );
        // -- the importer sent the member's schemas
        let imports: Api<ApiResourceImport> =
            Api::namespaced(hub.clone(), &names::cluster_namespace(&cluster));
        wait_for(
            "the member's Deployment schema imported by the hosted importer",
            Duration::from_secs(60),
            || async {
                Ok(match imports.get_opt("deployments.v1.apps").await? {
                    Some(_) => Seen::Done(()),
                    None => Seen::not_yet("no import"),
                })
            },
        )
        .await?;
        // -- the syncer applies a Work into the member
        let work: Work = serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
            "metadata": {"name": "settings", "labels": {labels::CLUSTER: cluster}},
            "spec": {"manifests": [
                {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "settings", "namespace": member_ns.name()},
                 "data": {"color": "blue"}}]},
        }))?;
        Api::<Work>::namespaced(hub.clone(), &names::cluster_namespace(&cluster))
            .create(&PostParams::default(), &work)
            .await?;
        let configmaps = Api::<ConfigMap>::namespaced(member_client.clone(), member_ns.name());
        wait_for(
            "the Work's ConfigMap applied into the member by the hosted syncer",
            Duration::from_secs(60),
            || async {
                let color = configmaps
                    .get_opt("settings")
                    .await?
                    .and_then(|c| c.data)
                    .and_then(|d| d.get("color").cloned());
                Ok(match color.as_deref() {
                    Some("blue") => Seen::Done(()),
                    other => Seen::not_yet(format!("color {other:?}")),
                })
            },
        )
        .await?;

        // -- helm uninstall --wait: both releases go, the applied object stays
        helm_in(
            &host,
            host_ns.name(),
            strings(&["uninstall", &hosted_release, "--wait", "--timeout", "2m"]),
        )
        .await?;
        helm_in(
            &member,
            member_ns.name(),
            strings(&["uninstall", &identity_release, "--wait", "--timeout", "2m"]),
        )
        .await?;
        ensure!(
            Api::<ClusterRole>::all(member_client.clone())
                .get_opt(&format!("{identity_release}:syncer"))
                .await?
                .is_none(),
            "helm uninstall removes the member chart's ClusterRoles"
        );
        ensure!(
            configmaps.get_opt("settings").await?.is_some(),
            "uninstalling the member chart leaves what the syncer applied in place"
        );
        Ok(())
    }
    .await;
    if result.is_err() {
        eprintln!("registration log:\n{}", registration_controller.log());
        let _ = helm_in(
            &host,
            host_ns.name(),
            strings(&["uninstall", &hosted_release, "--wait", "--timeout", "1m"]),
        )
        .await;
        let _ = helm_in(
            &member,
            member_ns.name(),
            strings(&["uninstall", &identity_release, "--timeout", "1m"]),
        )
        .await;
    }
    drop(registration);
    result
}
