//! Pull-mode registration against the real hub and members: the bootstrap identity's limits,
//! the two-step join (the member asks, the hub admin accepts), the approver's denials, the
//! agent's least-privilege credential and its revocation, and certificate rotation.
//!
//! Each test registers members under random names and runs its own hub controller, restricted
//! by `--cluster-selector` to the test's Clusters, and its own agent processes.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use flotilla_api::cluster::{Cluster, ClusterSpec, SyncMode};
use flotilla_api::work::Work;
use flotilla_api::{annotations, names};
use flotilla_e2e::bootstrap::{
    AgentProcess, CLUSTER_LABEL, MEMBER_AGENT, MemberIdentity, Registration, openssl_request,
};
use flotilla_e2e::chart::ChartIdentities;
use flotilla_e2e::process::ControllerProcess;
use flotilla_e2e::{
    ClusterInfo, Environment, Seen, TestNamespace, api, holds_for, random_suffix, wait_for,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::Kubeconfig;
use kube::{Api, Client};
use serde_json::json;

/// The label the test's hub controller selects Clusters by.
const SELECTOR_LABEL: &str = "e2e.flotilla.dev/pull";
/// The agent's credential Secret in the member.
const CREDENTIAL_SECRET: &str = "flotilla-hub-kubeconfig";
/// How long joining may take (CSR approval, signing, namespace and RBAC, first heartbeat).
const JOIN_TIMEOUT: Duration = Duration::from_secs(90);

/// One test's pull-mode set-up: a selector value, a hub controller, a member namespace.
struct Fixture {
    env: Environment,
    hub: Client,
    selector: String,
    member: ClusterInfo,
    member_ns: TestNamespace,
    _hub_ns: TestNamespace,
    hub_controller: ControllerProcess,
    /// The agent's identity in the member (the member chart's).
    agent_identity: MemberIdentity,
    /// Last: the hub controllers' identities outlive them.
    identities: ChartIdentities,
}

impl Fixture {
    async fn new(prefix: &str) -> Result<Self> {
        let env = Environment::get();
        let hub = env.hub.client().await?;
        api::install_crds(&hub).await?;
        flotilla_e2e::bootstrap::install_bootstrap(&hub).await?;
        let member = env.require_members(1)?[0].clone();
        let member_ns = TestNamespace::create(prefix, &[&member]).await?;
        let hub_ns = TestNamespace::create(prefix, &[&env.hub]).await?;
        let selector = random_suffix();
        let identities = ChartIdentities::install(hub_ns.name()).await?;
        let mut args = identities.args("registration")?;
        args.extend([
            "--lease-namespace".to_string(),
            hub_ns.name().to_string(),
            "--identity".to_string(),
            format!("hub-{selector}"),
            "--cluster-selector".to_string(),
            format!("{SELECTOR_LABEL}={selector}"),
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let hub_controller = ControllerProcess::start("flotilla-registration", &args)?;
        let agent_identity =
            MemberIdentity::install(&member, MEMBER_AGENT, member_ns.name(), CREDENTIAL_SECRET)
                .await?;
        Ok(Self {
            env,
            hub,
            selector,
            member,
            member_ns,
            _hub_ns: hub_ns,
            hub_controller,
            agent_identity,
            identities,
        })
    }

    /// A fresh cluster name with its bootstrap identity.
    async fn registration(&self) -> Result<Registration> {
        Registration::create(&self.env, &format!("e2e-pull-{}", random_suffix())).await
    }

    fn agent(&self, registration: &Registration, extra: &[&str]) -> Result<AgentProcess> {
        AgentProcess::start(
            &self.agent_identity,
            self.member_ns.name(),
            registration,
            extra,
        )
    }

    fn clusters(&self) -> Api<Cluster> {
        Api::all(self.hub.clone())
    }

    /// Creates the pull-mode Cluster `name` as the hub admin, labelled for this test.
    async fn create_cluster(&self, name: &str, accepted: bool) -> Result<()> {
        let mut cluster = Cluster::new(
            name,
            ClusterSpec {
                sync_mode: SyncMode::Pull,
                hub_accepts_client: accepted,
                ..Default::default()
            },
        );
        cluster.metadata.labels =
            Some([(SELECTOR_LABEL.to_string(), self.selector.clone())].into());
        self.clusters()
            .create(&PostParams::default(), &cluster)
            .await
            .with_context(|| format!("creating Cluster {name}"))?;
        Ok(())
    }

    /// Labels the Cluster `name` (created by an agent) for this test's hub controller.
    async fn label(&self, name: &str) -> Result<()> {
        let patch = json!({ "metadata": { "labels": { SELECTOR_LABEL: self.selector } } });
        self.clusters()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("labelling Cluster {name}"))?;
        Ok(())
    }

    /// Sets `spec.hubAcceptsClient` of `name`, as the hub admin.
    async fn accept(&self, name: &str, accepted: bool) -> Result<()> {
        let patch = json!({ "spec": { "hubAcceptsClient": accepted } });
        self.clusters()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("setting hubAcceptsClient={accepted} on Cluster {name}"))?;
        Ok(())
    }

    /// The certificate requests the agent of `cluster` sent, oldest first.
    async fn agent_requests(&self, cluster: &str) -> Result<Vec<CertificateSigningRequest>> {
        let api: Api<CertificateSigningRequest> = Api::all(self.hub.clone());
        let mut list = api
            .list(&ListParams::default().labels(&format!("{CLUSTER_LABEL}={cluster}")))
            .await?
            .items;
        list.sort_by_key(|c| c.metadata.creation_timestamp.clone().map(|t| t.0));
        Ok(list)
    }

    /// Waits until certificate request `name` is in `state` (see [`request_state`]), then
    /// deletes it.
    async fn wait_request(&self, name: &str, state: &str) -> Result<()> {
        let api: Api<CertificateSigningRequest> = Api::all(self.hub.clone());
        wait_for(
            &format!("certificate request {name} to be {state}"),
            Duration::from_secs(30),
            || async {
                let seen = request_state(&api.get(name).await?);
                Ok(if seen == state {
                    Seen::Done(())
                } else {
                    Seen::not_yet(seen)
                })
            },
        )
        .await
        .with_context(|| format!("hub log:\n{}", self.hub_controller.log()))?;
        api.delete(name, &DeleteParams::default()).await?;
        Ok(())
    }

    /// The kubeconfig the agent stored in the member, if any.
    async fn stored_kubeconfig(&self) -> Result<Option<String>> {
        let secrets: Api<Secret> =
            Api::namespaced(self.member.client().await?, self.member_ns.name());
        Ok(secrets
            .get_opt(CREDENTIAL_SECRET)
            .await?
            .and_then(|s| s.data)
            .and_then(|d| d.get("kubeconfig").cloned())
            .map(|b| String::from_utf8_lossy(&b.0).into_owned()))
    }

    /// Waits for the agent's stored credential and returns a hub client with it.
    async fn agent_client(&self) -> Result<(Client, String)> {
        let text = wait_for(
            "the agent to store its hub credential in the member",
            JOIN_TIMEOUT,
            || async {
                Ok(match self.stored_kubeconfig().await? {
                    Some(t) => Seen::Done(t),
                    None => Seen::not_yet("no Secret"),
                })
            },
        )
        .await?;
        let kubeconfig = Kubeconfig::from_yaml(&text).context("the stored kubeconfig")?;
        Ok((flotilla_e2e::client_from(kubeconfig).await?, text))
    }
}

/// The state of a certificate request: `Approved/<reason>`, `Denied/<reason>` or `Pending`,
/// and `+issued` once signed.
fn request_state(csr: &CertificateSigningRequest) -> String {
    let status = csr.status.as_ref();
    let decided = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.status == "True"))
        .map(|c| format!("{}/{}", c.type_, c.reason.as_deref().unwrap_or_default()))
        .unwrap_or_else(|| "Pending".into());
    let issued = status
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty());
    if issued {
        format!("{decided}+issued")
    } else {
        decided
    }
}

/// The HTTP status of a failed request, or `None` if it succeeded.
fn status_of<T>(result: &std::result::Result<T, kube::Error>) -> Option<u16> {
    match result {
        Ok(_) => None,
        Err(kube::Error::Api(s)) => Some(s.code),
        Err(_) => Some(0),
    }
}

/// Sends a certificate request with `client`, returns its name. It asks for no lifetime (the
/// signer's default), which the approver denies: see [`send_request_for`].
async fn send_request(
    client: &Client,
    cluster_label: &str,
    request: Vec<u8>,
    usages: &[&str],
) -> Result<std::result::Result<String, kube::Error>> {
    send_request_for(client, cluster_label, request, usages, None).await
}

/// [`send_request`] asking for a certificate valid for `lifetime` seconds.
async fn send_request_for(
    client: &Client,
    cluster_label: &str,
    request: Vec<u8>,
    usages: &[&str],
    lifetime: Option<i32>,
) -> Result<std::result::Result<String, kube::Error>> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            generate_name: Some("e2e-pull-".into()),
            labels: Some([(CLUSTER_LABEL.to_string(), cluster_label.to_string())].into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request),
            signer_name: names::AGENT_CSR_SIGNER.into(),
            usages: Some(usages.iter().map(|u| u.to_string()).collect()),
            expiration_seconds: lifetime,
            ..Default::default()
        },
        status: None,
    };
    Ok(api
        .create(&PostParams::default(), &csr)
        .await
        .map(|c| c.metadata.name.unwrap_or_default()))
}

#[tokio::test]
async fn bootstrap_identity_may_only_create_its_own_unaccepted_pull_cluster() -> Result<()> {
    let env = Environment::get();
    let hub = env.hub.client().await?;
    api::install_crds(&hub).await?;
    let me = Registration::create(&env, &format!("e2e-pull-{}", random_suffix())).await?;
    let other = format!("e2e-pull-{}", random_suffix());
    let bootstrap: Api<Cluster> = Api::all(me.client().await?);
    let pull = |name: &str, accepted: bool| {
        Cluster::new(
            name,
            ClusterSpec {
                sync_mode: SyncMode::Pull,
                hub_accepts_client: accepted,
                ..Default::default()
            },
        )
    };
    // The policy may take a moment to be enforced after it was first installed.
    wait_for(
        "the admission policy to refuse another cluster's name",
        Duration::from_secs(30),
        || async {
            let r = bootstrap
                .create(&PostParams::default(), &pull(&other, false))
                .await;
            Ok(match r {
                Err(kube::Error::Api(s)) if s.code == 403 || s.code == 422 => {
                    ensure!(
                        s.message.contains(&me.cluster) || s.message.contains("may only create"),
                        "the refusal should say which Cluster it may create: {}",
                        s.message
                    );
                    Seen::Done(())
                }
                Ok(_) => {
                    // Enforcement lagged: remove the intruder and try again.
                    let _ = Api::<Cluster>::all(hub.clone())
                        .delete(&other, &DeleteParams::default())
                        .await;
                    Seen::not_yet("created")
                }
                Err(e) => Seen::not_yet(e),
            })
        },
    )
    .await?;
    let accepted = bootstrap
        .create(&PostParams::default(), &pull(&me.cluster, true))
        .await;
    ensure!(
        matches!(status_of(&accepted), Some(403 | 422)),
        "a bootstrap identity must not create its Cluster already accepted: {accepted:?}"
    );
    let push = json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "Cluster",
        "metadata": { "name": me.cluster },
        "spec": { "syncMode": "Push", "kubeconfigSecretRef": { "name": "x" } },
    });
    let push = bootstrap
        .create(
            &PostParams::default(),
            &serde_json::from_value::<Cluster>(push)?,
        )
        .await;
    ensure!(
        matches!(status_of(&push), Some(403 | 422)),
        "a bootstrap identity must not create a push-mode Cluster: {push:?}"
    );
    // Nor steer the work it gets once accepted: labels (env=prod), taints and weight are the
    // hub admin's.
    let mut labelled = pull(&me.cluster, false);
    labelled.metadata.labels = Some([("env".to_string(), "prod".to_string())].into());
    let mut weighty = pull(&me.cluster, false);
    weighty.spec.weight = 10000;
    for (what, cluster) in [("labelled", labelled), ("weighted", weighty)] {
        let r = bootstrap.create(&PostParams::default(), &cluster).await;
        ensure!(
            matches!(status_of(&r), Some(403 | 422)),
            "a bootstrap identity must not create its Cluster {what}: {r:?}"
        );
    }
    bootstrap
        .create(&PostParams::default(), &pull(&me.cluster, false))
        .await
        .context("a bootstrap identity must be able to create its own pull-mode Cluster")?;
    // Accepting itself afterwards is not possible either.
    let patch = json!({ "spec": { "hubAcceptsClient": true } });
    let update = bootstrap
        .patch(&me.cluster, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    ensure!(
        status_of(&update) == Some(403),
        "a bootstrap identity must not accept its own Cluster: {update:?}"
    );
    let delete = bootstrap
        .delete(&me.cluster, &DeleteParams::default())
        .await;
    ensure!(status_of(&delete) == Some(403), "nor delete it: {delete:?}");
    // It reads no other Cluster: the fleet is none of its business.
    let others = format!("e2e-pull-{}", random_suffix());
    let admin: Api<Cluster> = Api::all(hub.clone());
    admin
        .create(&PostParams::default(), &pull(&others, true))
        .await?;
    let read = bootstrap.get(&others).await;
    admin.delete(&others, &DeleteParams::default()).await?;
    ensure!(
        status_of(&read) == Some(403),
        "a bootstrap identity must not read another Cluster: {read:?}"
    );
    let listed = bootstrap.list(&ListParams::default()).await;
    ensure!(
        status_of(&listed) == Some(403),
        "nor list Clusters: {listed:?}"
    );
    // And it reads no Secrets.
    let secrets: Api<Secret> = Api::all(me.client().await?);
    let list = secrets.list(&ListParams::default()).await;
    ensure!(status_of(&list) == Some(403), "nor Secrets: {list:?}");
    Ok(())
}

#[tokio::test]
async fn agent_registers_only_after_the_hub_accepts_it() -> Result<()> {
    let f = Fixture::new("pull-join").await?;
    let me = f.registration().await?;
    let mut agent = f.agent(&me, &[])?;

    // The agent creates its Cluster, unaccepted, and asks for a certificate.
    let created = wait_for(
        "the agent to create its pull-mode Cluster",
        Duration::from_secs(60),
        || async {
            Ok(match f.clusters().get_opt(&me.cluster).await? {
                Some(c) => Seen::Done(c),
                None => Seen::not_yet("no Cluster"),
            })
        },
    )
    .await
    .with_context(|| format!("agent log:\n{}", agent.log()))?;
    ensure!(created.spec.sync_mode == SyncMode::Pull && !created.spec.hub_accepts_client);
    f.label(&me.cluster).await?;
    wait_for(
        "the agent's certificate request",
        Duration::from_secs(30),
        || async {
            let requests = f.agent_requests(&me.cluster).await?;
            Ok(if requests.is_empty() {
                Seen::not_yet("none")
            } else {
                Seen::Done(())
            })
        },
    )
    .await?;

    // Until the hub admin accepts the Cluster, the request stays pending and nothing is stored.
    holds_for(
        "the request to stay pending while the Cluster is not accepted",
        Duration::from_secs(8),
        || async {
            let requests = f.agent_requests(&me.cluster).await?;
            let states: Vec<String> = requests.iter().map(request_state).collect();
            if states.iter().any(|s| s != "Pending") {
                return Ok(Err(format!("requests {states:?}")));
            }
            if f.stored_kubeconfig().await?.is_some() {
                return Ok(Err("a credential was stored".into()));
            }
            Ok(Ok(()))
        },
    )
    .await?;

    // The admin accepts: the request is approved and signed, the credential stored.
    f.accept(&me.cluster, true).await?;
    let approved = wait_for(
        "the agent's request to be approved and signed",
        JOIN_TIMEOUT,
        || async {
            let requests = f.agent_requests(&me.cluster).await?;
            let states: Vec<String> = requests.iter().map(request_state).collect();
            Ok(match requests.last() {
                Some(r) if request_state(r) == "Approved/FlotillaAgentApproved+issued" => {
                    Seen::Done(r.clone())
                }
                _ => Seen::not_yet(format!("requests {states:?}")),
            })
        },
    )
    .await
    .with_context(|| format!("hub log:\n{}", f.hub_controller.log()))?;
    ensure!(
        approved.spec.username.as_deref()
            == Some(
                format!(
                    "system:serviceaccount:flotilla-system:{}",
                    Registration::service_account(&me.cluster)
                )
                .as_str()
            ),
        "the first request is the bootstrap identity's: {:?}",
        approved.spec.username
    );
    let (client, stored) = f
        .agent_client()
        .await
        .with_context(|| format!("agent log:\n{}", agent.log()))?;

    // The stored credential is the agent's user, in the agents' group.
    let review = Api::<SelfSubjectReview>::all(client)
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .context("asking the hub who the agent's credential is")?;
    let user = review.status.and_then(|s| s.user_info).unwrap_or_default();
    ensure!(
        user.username.as_deref() == Some(names::agent_user_name(&me.cluster).as_str()),
        "the agent's user: {:?}",
        user.username
    );
    ensure!(
        user.groups
            .unwrap_or_default()
            .iter()
            .any(|g| g == names::AGENT_GROUP),
        "the agent's groups must include {}",
        names::AGENT_GROUP
    );
    let log = agent.log();
    ensure!(
        !log.contains("PRIVATE KEY") && !log.contains("client-key-data") && !log.contains("token:"),
        "the agent must not log credentials:\n{log}"
    );

    // A restarted agent reuses the stored credential: no new request. Its bootstrap kubeconfig
    // is gone meanwhile (an admin may delete the bootstrap Secret once the member joined; the
    // member chart mounts it as an optional volume): the agent starts all the same.
    agent.kill().await?;
    std::fs::remove_file(&me.kubeconfig)?;
    let before = f.agent_requests(&me.cluster).await?.len();
    let restarted = f.agent(&me, &[])?;
    wait_for(
        "the restarted agent to use the stored credential",
        Duration::from_secs(30),
        || async {
            let log = restarted.log();
            Ok(
                if log.contains("using the stored hub credential")
                    && log.contains("the bootstrap kubeconfig does not exist")
                {
                    Seen::Done(())
                } else {
                    Seen::not_yet("not yet in its log")
                },
            )
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    ensure!(
        f.agent_requests(&me.cluster).await?.len() == before,
        "a restart must not request another certificate:\n{}",
        restarted.log()
    );
    ensure!(
        f.stored_kubeconfig().await?.as_deref() == Some(stored.as_str()),
        "the stored credential must be unchanged after a restart"
    );
    Ok(())
}

#[tokio::test]
async fn certificate_requests_for_another_cluster_are_denied() -> Result<()> {
    let f = Fixture::new("pull-deny").await?;
    let attacker = f.registration().await?;
    let victim = f.registration().await?;
    f.create_cluster(&attacker.cluster, false).await?;
    f.create_cluster(&victim.cluster, true).await?;
    let client = attacker.client().await?;
    let usages = ["digital signature", "key encipherment", "client auth"];
    let uid_group = |name: &str| {
        let clusters = f.clusters();
        let name = name.to_string();
        async move {
            let uid = clusters.get(&name).await?.metadata.uid.unwrap_or_default();
            anyhow::Ok(names::cluster_uid_group(&uid))
        }
    };
    let victim_group = uid_group(&victim.cluster).await?;
    let attacker_group = uid_group(&attacker.cluster).await?;

    // The attacker's bootstrap identity asks for the victim's agent certificate.
    let stolen = send_request(
        &client,
        &victim.cluster,
        openssl_request(
            &names::agent_user_name(&victim.cluster),
            &[names::AGENT_GROUP, &victim_group],
        )?,
        &usages,
    )
    .await?
    .context("a bootstrap identity may create certificate requests")?;
    // Its own name, but an extra group (the apiserver itself refuses system:masters; any other
    // group could be bound to more rights).
    let escalated = send_request(
        &client,
        &attacker.cluster,
        openssl_request(
            &names::agent_user_name(&attacker.cluster),
            &[names::AGENT_GROUP, &attacker_group, "e2e-admins"],
        )?,
        &usages,
    )
    .await??;
    // Its own name, server usages.
    let server = send_request(
        &client,
        &attacker.cluster,
        openssl_request(
            &names::agent_user_name(&attacker.cluster),
            &[names::AGENT_GROUP, &attacker_group],
        )?,
        &["digital signature", "server auth", "client auth"],
    )
    .await??;

    // Its own name and usages, but no lifetime: the signer's default (a year) is too long.
    let forever = send_request(
        &client,
        &attacker.cluster,
        openssl_request(
            &names::agent_user_name(&attacker.cluster),
            &[names::AGENT_GROUP, &attacker_group],
        )?,
        &usages,
    )
    .await??;

    let api: Api<CertificateSigningRequest> = Api::all(f.hub.clone());
    for (name, reason, mentions) in [
        (&stolen, "RequesterMismatch", attacker.cluster.as_str()),
        (&escalated, "SubjectMismatch", "e2e-admins"),
        (&server, "UnexpectedUsages", "server auth"),
        (&forever, "UnboundedLifetime", "expirationSeconds"),
    ] {
        wait_for(
            &format!("request {name} to be denied with reason {reason}"),
            Duration::from_secs(30),
            || async {
                let csr = api.get(name).await?;
                let state = request_state(&csr);
                Ok(if state == format!("Denied/{reason}") {
                    let message = csr
                        .status
                        .and_then(|s| s.conditions)
                        .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Denied"))
                        .and_then(|c| c.message)
                        .unwrap_or_default();
                    ensure!(
                        message.contains(mentions),
                        "the denial of {name} should mention {mentions:?}: {message}"
                    );
                    Seen::Done(())
                } else {
                    Seen::not_yet(state)
                })
            },
        )
        .await
        .with_context(|| format!("hub log:\n{}", f.hub_controller.log()))?;
        api.delete(name, &DeleteParams::default()).await?;
    }

    let (_, metrics) = f.hub_controller.get("/metrics").await?;
    ensure!(
        metrics.contains("flotilla_registration_csr_decisions_total{decision=\"denied\""),
        "denials must be counted:\n{metrics}"
    );
    Ok(())
}

/// Registration's ServiceAccount token, if stolen, approves no certificate but an agent's own:
/// the hub asks the chart's approval webhook before it stores registration's approval, and the
/// webhook answers with registration's own policy. With a bootstrap identity (or an agent's
/// credential) the thief could otherwise ask for a certificate of any user — the hub's
/// controller-manager, its admin — and approve it: the admission policy sees only who asked.
#[tokio::test]
async fn a_stolen_registration_token_approves_no_certificate_but_an_agents_own() -> Result<()> {
    let f = Fixture::new("pull-stolen").await?;
    let stolen = f.identities.client("registration").await?;
    // Clusters no registration controller of the suite handles (unlabelled): only the stolen
    // token decides their requests.
    let member = f.registration().await?;
    let other = f.registration().await?;
    let waiting = f.registration().await?;
    let mut groups = std::collections::BTreeMap::new();
    for (r, accepted) in [(&member, true), (&other, true), (&waiting, false)] {
        let cluster = Cluster::new(
            &r.cluster,
            ClusterSpec {
                sync_mode: SyncMode::Pull,
                hub_accepts_client: accepted,
                ..Default::default()
            },
        );
        let created = f
            .clusters()
            .create(&PostParams::default(), &cluster)
            .await?;
        groups.insert(
            r.cluster.clone(),
            names::cluster_uid_group(&created.metadata.uid.unwrap_or_default()),
        );
    }
    let usages = ["digital signature", "key encipherment", "client auth"];
    let api: Api<CertificateSigningRequest> = Api::all(f.hub.clone());
    let agent = names::agent_user_name(&member.cluster);
    let refused = [
        (
            &member,
            openssl_request("system:kube-controller-manager", &[])?,
            "registration approves only pull-mode agents' certificate requests",
        ),
        (
            &member,
            openssl_request(&agent, &[names::AGENT_GROUP, &groups[&other.cluster]])?,
            "SubjectMismatch",
        ),
        (
            &waiting,
            openssl_request(
                &names::agent_user_name(&waiting.cluster),
                &[names::AGENT_GROUP, &groups[&waiting.cluster]],
            )?,
            "AwaitingAcceptance",
        ),
    ];
    for (registration, request, reason) in refused {
        let bootstrap = registration.client().await?;
        let name = send_request_for(
            &bootstrap,
            &registration.cluster,
            request,
            &usages,
            Some(3600),
        )
        .await??;
        match approve(&stolen, &name).await {
            Ok(_) => anyhow::bail!(
                "registration's token approved request {name}, which should be refused with \
                 {reason:?}"
            ),
            Err(e) => ensure!(
                e.to_string().contains(reason),
                "the refusal of {name} should say {reason:?}: {e}"
            ),
        }
        let csr = api.get(&name).await?;
        ensure!(
            request_state(&csr) == "Pending" && csr.status.and_then(|s| s.certificate).is_none(),
            "request {name} must stay pending, without a certificate"
        );
        api.delete(&name, &DeleteParams::default()).await?;
    }

    // The agent's own identity for its accepted Cluster: approved, and signed.
    let bootstrap = member.client().await?;
    let own = send_request_for(
        &bootstrap,
        &member.cluster,
        openssl_request(&agent, &[names::AGENT_GROUP, &groups[&member.cluster]])?,
        &usages,
        Some(3600),
    )
    .await??;
    approve(&stolen, &own)
        .await
        .context("registration's token must approve an agent's own request")?;
    wait_for(
        "the hub to sign the agent's approved request",
        Duration::from_secs(60),
        || async {
            let csr = api.get(&own).await?;
            Ok(match csr.status.and_then(|s| s.certificate) {
                Some(_) => Seen::Done(()),
                None => Seen::not_yet(request_state(&api.get(&own).await?)),
            })
        },
    )
    .await?;
    for r in [&member, &other, &waiting] {
        f.clusters()
            .delete(&r.cluster, &DeleteParams::default())
            .await?;
    }
    Ok(())
}

/// Approves the request `name` as registration does: an update (not a patch) of its approval.
async fn approve(
    client: &Client,
    name: &str,
) -> std::result::Result<CertificateSigningRequest, kube::Error> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let mut csr = api.get(name).await?;
    csr.status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new)
        .push(
            k8s_openapi::api::certificates::v1::CertificateSigningRequestCondition {
                type_: "Approved".into(),
                status: "True".into(),
                reason: Some("E2E".into()),
                message: Some("approved with registration's token".into()),
                ..Default::default()
            },
        );
    api.replace_subresource("approval", name, &PostParams::default(), &csr)
        .await
}

/// Joins a fresh member through its agent (accepted from the start) and waits until the hub
/// sees its heartbeat. Returns the registration, the agent and its hub client.
async fn join(f: &Fixture, extra: &[&str]) -> Result<(Registration, AgentProcess, Client)> {
    let me = f.registration().await?;
    f.create_cluster(&me.cluster, true).await?;
    let agent = f.agent(&me, extra)?;
    let (client, _) = f
        .agent_client()
        .await
        .with_context(|| format!("agent log:\n{}", agent.log()))?;
    let leases: Api<Lease> = Api::namespaced(f.hub.clone(), &names::cluster_namespace(&me.cluster));
    wait_for("the agent's Lease on the hub", JOIN_TIMEOUT, || async {
        Ok(match leases.get_opt(names::AGENT_LEASE_NAME).await? {
            Some(l)
                if l.spec
                    .as_ref()
                    .and_then(|s| s.renew_time.as_ref())
                    .is_some() =>
            {
                Seen::Done(())
            }
            other => Seen::not_yet(format!("{:?}", other.map(|l| l.spec))),
        })
    })
    .await
    .with_context(|| {
        format!(
            "agent log:\n{}\nhub log:\n{}",
            agent.log(),
            f.hub_controller.log()
        )
    })?;
    Ok((me, agent, client))
}

#[tokio::test]
async fn accepted_agent_heartbeats_with_least_privilege_until_acceptance_is_revoked() -> Result<()>
{
    let f = Fixture::new("pull-rbac").await?;
    let (me, agent, client) = join(&f, &[]).await?;
    let other = f.registration().await?;
    f.create_cluster(&other.cluster, true).await?;

    // The hub sees the member: Ready, with the member's version and capacity from the agent.
    let member_version = f
        .member
        .client()
        .await?
        .apiserver_version()
        .await?
        .git_version;
    wait_for(
        "the Cluster to be Ready with the member's version and allocatable",
        JOIN_TIMEOUT,
        || async {
            let c = f.clusters().get(&me.cluster).await?;
            let status = c.status.clone().unwrap_or_default();
            Ok(
                if c.is_ready()
                    && status.kubernetes_version.as_deref() == Some(member_version.as_str())
                    && status.allocatable.contains_key("cpu")
                {
                    Seen::Done(())
                } else {
                    Seen::not_yet(format!("{status:?}"))
                },
            )
        },
    )
    .await
    .with_context(|| format!("agent log:\n{}", agent.log()))?;

    // Its own namespace: Works readable; Secrets not, anywhere.
    let own_ns = names::cluster_namespace(&me.cluster);
    let other_ns = names::cluster_namespace(&other.cluster);
    let own_works: Api<Work> = Api::namespaced(client.clone(), &own_ns);
    own_works
        .list(&ListParams::default())
        .await
        .context("the agent must read Works in its own namespace")?;
    let other_works: Api<Work> = Api::namespaced(client.clone(), &other_ns);
    let r = other_works.list(&ListParams::default()).await;
    ensure!(
        status_of(&r) == Some(403),
        "another cluster's Works must be forbidden: {r:?}"
    );
    // Nor may it describe another member's API: its imports are that member's.
    let import = json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "APIResourceImport",
        "metadata": {"name": "widgets.v1.example.com", "namespace": other_ns},
        "spec": {"groupVersion": {"group": "example.com", "version": "v1"},
                 "names": {"plural": "widgets", "kind": "Widget"}, "scope": "Namespaced",
                 "openAPIV3Schema": {"type": "object"}}});
    let r = api::create(&client, &import, false).await?;
    ensure!(
        status_of(&r) == Some(403),
        "another cluster's imports must be forbidden: {r:?}"
    );
    for ns in [
        own_ns.as_str(),
        other_ns.as_str(),
        "flotilla-system",
        "default",
    ] {
        let r = Api::<Secret>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await;
        ensure!(
            status_of(&r) == Some(403),
            "Secrets in {ns} must be forbidden: {r:?}"
        );
    }
    let r = Api::<Secret>::all(client.clone())
        .list(&ListParams::default())
        .await;
    ensure!(status_of(&r) == Some(403), "Secrets cluster-wide: {r:?}");
    let r = f_clusters(&client).get(&other.cluster).await;
    ensure!(
        status_of(&r) == Some(403),
        "another Cluster must be forbidden: {r:?}"
    );
    f_clusters(&client)
        .get(&me.cluster)
        .await
        .context("the agent reads its own Cluster")?;

    // The bootstrap identity got its one certificate: another request of it is denied, and it
    // lost its read of the Cluster.
    let cluster = f.clusters().get(&me.cluster).await?;
    let used = cluster
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::BOOTSTRAP_REQUEST))
        .cloned();
    ensure!(used.is_some(), "the Cluster records its bootstrap request");
    let uid = cluster.metadata.uid.clone().unwrap_or_default();
    let again = send_request_for(
        &me.client().await?,
        &me.cluster,
        openssl_request(
            &names::agent_user_name(&me.cluster),
            &[names::AGENT_GROUP, &names::cluster_uid_group(&uid)],
        )?,
        &["digital signature", "key encipherment", "client auth"],
        Some(3600),
    )
    .await??;
    // A second request of the bootstrap identity is denied.
    f.wait_request(&again, "Denied/BootstrapUsed").await?;
    wait_for(
        "the bootstrap identity to lose its read of the Cluster",
        Duration::from_secs(30),
        || async {
            let r = f_clusters(&me.client().await?).get(&me.cluster).await;
            Ok(match status_of(&r) {
                Some(403) => Seen::Done(()),
                other => Seen::not_yet(format!("{other:?}")),
            })
        },
    )
    .await?;

    // Revoking acceptance revokes access.
    f.accept(&me.cluster, false).await?;
    wait_for(
        "the agent's access to its Works to be revoked",
        Duration::from_secs(60),
        || async {
            let r = own_works.list(&ListParams::default()).await;
            Ok(match status_of(&r) {
                Some(403 | 401) => Seen::Done(()),
                other => Seen::not_yet(format!("status {other:?}")),
            })
        },
    )
    .await?;
    drop(agent);
    Ok(())
}

fn f_clusters(client: &Client) -> Api<Cluster> {
    Api::all(client.clone())
}

#[tokio::test]
async fn deleting_the_cluster_revokes_the_agents_access() -> Result<()> {
    let f = Fixture::new("pull-delete").await?;
    let (me, mut agent, client) = join(&f, &[]).await?;
    // Stop the agent first: it would register its Cluster again (unaccepted).
    agent.kill().await?;
    let works: Api<Work> = Api::namespaced(client.clone(), &names::cluster_namespace(&me.cluster));
    works
        .list(&ListParams::default())
        .await
        .context("the agent reads its Works before the deletion")?;
    f.clusters()
        .delete(&me.cluster, &DeleteParams::default())
        .await?;
    wait_for(
        "the deleted Cluster's agent to lose its access",
        Duration::from_secs(90),
        || async {
            let r = works.list(&ListParams::default()).await;
            let lease =
                Api::<Lease>::namespaced(client.clone(), &names::cluster_namespace(&me.cluster))
                    .get(names::AGENT_LEASE_NAME)
                    .await;
            Ok(match (status_of(&r), status_of(&lease)) {
                (Some(403 | 401), Some(403 | 401)) => Seen::Done(()),
                other => Seen::not_yet(format!("Works, Lease: {other:?}")),
            })
        },
    )
    .await
    .with_context(|| format!("hub log:\n{}", f.hub_controller.log()))?;

    // A new Cluster of the same name, accepted by the admin, is another Cluster: the old
    // certificate gets nothing of it, and cannot renew itself into it.
    wait_for(
        "the deleted Cluster to be gone",
        Duration::from_secs(60),
        || async {
            Ok(match f.clusters().get_opt(&me.cluster).await? {
                None => Seen::Done(()),
                Some(_) => Seen::not_yet("still there"),
            })
        },
    )
    .await?;
    f.create_cluster(&me.cluster, true).await?;
    let uid = f
        .clusters()
        .get(&me.cluster)
        .await?
        .metadata
        .uid
        .unwrap_or_default();
    let bindings: Api<RoleBinding> =
        Api::namespaced(f.hub.clone(), &names::cluster_namespace(&me.cluster));
    wait_for(
        "the new Cluster's agent RoleBinding",
        Duration::from_secs(60),
        || async {
            Ok(match bindings.get_opt("flotilla-agent").await? {
                Some(_) => Seen::Done(()),
                None => Seen::not_yet("none"),
            })
        },
    )
    .await
    .with_context(|| format!("hub log:\n{}", f.hub_controller.log()))?;
    holds_for(
        "the old certificate to stay without access to the new Cluster",
        Duration::from_secs(5),
        || async {
            let works = works.list(&ListParams::default()).await;
            let cluster = f_clusters(&client).get(&me.cluster).await;
            Ok(match (status_of(&works), status_of(&cluster)) {
                (Some(403 | 401), Some(403 | 401)) => Ok(()),
                other => Err(format!("Works, Cluster: {other:?}")),
            })
        },
    )
    .await?;
    let renewal = send_request_for(
        &client,
        &me.cluster,
        openssl_request(
            &names::agent_user_name(&me.cluster),
            &[names::AGENT_GROUP, &names::cluster_uid_group(&uid)],
        )?,
        &["digital signature", "key encipherment", "client auth"],
        Some(3600),
    )
    .await?
    .context("any agent certificate may send certificate requests")?;
    // The old certificate's renewal into the new Cluster is denied.
    f.wait_request(&renewal, "Denied/RequesterMismatch").await?;
    f.clusters()
        .delete(&me.cluster, &DeleteParams::default())
        .await?;
    Ok(())
}

#[tokio::test]
async fn agent_rotates_its_certificate_before_expiry_without_a_gap() -> Result<()> {
    let f = Fixture::new("pull-rotate").await?;
    // 10 minutes is the CSR API's minimum lifetime; rotate after 3% of it (18 s).
    let (me, agent, _) = join(
        &f,
        &[
            "--certificate-lifetime",
            "10m",
            "--certificate-rotation-threshold",
            "0.03",
            "--heartbeat-interval",
            "2s",
        ],
    )
    .await?;
    let first = f.stored_kubeconfig().await?.unwrap_or_default();
    // Heartbeats may fail while the hub sets up the namespace and RBAC; count from here on.
    let failed_before = failed_heartbeats(&agent.get("/metrics").await?.1);
    let rotated = wait_for(
        "the agent to rotate its certificate",
        Duration::from_secs(90),
        || async {
            let now = f.stored_kubeconfig().await?.unwrap_or_default();
            Ok(if !now.is_empty() && now != first {
                Seen::Done(now)
            } else {
                Seen::not_yet("the same credential")
            })
        },
    )
    .await
    .with_context(|| format!("agent log:\n{}", agent.log()))?;

    // The renewal was requested by the agent itself and approved.
    let requests = f.agent_requests(&me.cluster).await?;
    let renewal = requests
        .iter()
        .rev()
        .find(|r| r.spec.username.as_deref() == Some(names::agent_user_name(&me.cluster).as_str()))
        .with_context(|| format!("no renewal request by the agent among {}", requests.len()))?;
    ensure!(
        request_state(renewal) == "Approved/FlotillaAgentApproved+issued",
        "the renewal: {}",
        request_state(renewal)
    );

    // The new credential works, and heartbeats never failed across the switch.
    let client = flotilla_e2e::client_from(Kubeconfig::from_yaml(&rotated)?).await?;
    Api::<Work>::namespaced(client, &names::cluster_namespace(&me.cluster))
        .list(&ListParams::default())
        .await
        .context("the rotated credential must work")?;
    let leases: Api<Lease> = Api::namespaced(f.hub.clone(), &names::cluster_namespace(&me.cluster));
    let renew_time = |l: Lease| l.spec.and_then(|s| s.renew_time).map(|t| t.0);
    let before = renew_time(leases.get(names::AGENT_LEASE_NAME).await?);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = renew_time(leases.get(names::AGENT_LEASE_NAME).await?);
    ensure!(
        after > before,
        "the Lease must keep being renewed after the rotation ({before:?} -> {after:?})"
    );
    let (_, metrics) = agent.get("/metrics").await?;
    ensure!(
        metrics.contains("flotilla_agent_certificates_issued_total{how=\"rotation\"}"),
        "the agent must count its rotation:\n{metrics}"
    );
    ensure!(
        failed_heartbeats(&metrics) == failed_before,
        "no heartbeat may fail around a rotation:\n{metrics}\nagent log:\n{}",
        agent.log()
    );
    Ok(())
}

/// The number of failed heartbeats in the agent's metrics.
fn failed_heartbeats(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("flotilla_agent_heartbeats_total{") && !l.contains("success"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A pull-mode member's importer imports the custom types Placements select, though the agent's
/// credential it imports with may not read Placements: the negotiator on the hub lists the types
/// in the member's namespace (the ConfigMap `flotilla-import-types`), and the agent's credential
/// may read that one ConfigMap — no other, and not list them.
#[tokio::test]
async fn a_pull_members_importer_imports_the_custom_types_placements_select() -> Result<()> {
    use flotilla_api::ApiResourceImport;
    use flotilla_e2e::api::ClusterScopedObjects;
    use flotilla_e2e::bootstrap::{MEMBER_IMPORTER, MemberIdentity};
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::ApiResource;

    let _one_at_a_time = crate::ONE_NEGOTIATOR.lock().await;
    let f = Fixture::new("pull-types").await?;
    let (me, agent, agent_hub) = join(&f, &[]).await?;
    let own_ns = names::cluster_namespace(&me.cluster);
    let member = f.member.client().await?;

    // A custom type only this member serves.
    let group = format!("e2e-{}.example.com", random_suffix());
    let crd_name = format!("gadgets.{group}");
    let mut member_objects = ClusterScopedObjects::new(&f.member);
    member_objects.add(
        ApiResource::erase::<CustomResourceDefinition>(&()),
        crd_name.clone(),
    );
    api::apply(
        &member,
        &json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": crd_name},
                "spec": {"group": group, "scope": "Namespaced",
                         "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                         "versions": [{"name": "v1", "served": true, "storage": true,
                                       "schema": {"openAPIV3Schema": {"type": "object",
                                           "properties": {"spec": {"type": "object",
                                               "properties": {"size": {"type": "integer"}}}}}}}]}}),
        false,
    )
    .await?
    .context("installing the member's CRD")?;

    // The importer runs in the member with the member chart's identity for it, and
    // reaches the hub with the agent's credential only. No negotiator runs yet: the hub keeps no
    // list for the member, and the importer imports the defaults.
    let identity = MemberIdentity::install(
        &f.member,
        MEMBER_IMPORTER,
        f.member_ns.name(),
        CREDENTIAL_SECRET,
    )
    .await?;
    let mut importer_args = identity.flags();
    importer_args.extend(
        [
            "--lease-namespace",
            f.member_ns.name(),
            "--cluster-name",
            &me.cluster,
            "--hub-credential-namespace",
            f.member_ns.name(),
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
    let imports: Api<ApiResourceImport> = Api::namespaced(f.hub.clone(), &own_ns);
    let gadgets = format!("gadgets.v1.{group}");
    wait_for(
        "the member's Deployment schema imported by the pull-mode importer",
        Duration::from_secs(60),
        || async {
            Ok(match imports.get_opt("deployments.v1.apps").await? {
                Some(_) => Seen::Done(()),
                None => Seen::not_yet("no import"),
            })
        },
    )
    .await
    .with_context(|| format!("importer log:\n{}", importer.log()))?;
    ensure!(
        imports.get_opt(&gadgets).await?.is_none(),
        "no Placement selects the custom type yet: it is not imported"
    );

    // A tenant's Placement selects the custom type, and the hub's negotiator (of this test's
    // Clusters) lists it for the member.
    let tenant = TestNamespace::create("pull-types", &[&f.env.hub]).await?;
    api::apply(
        &f.hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "gadgets", "namespace": tenant.name()},
                "spec": {"resourceSelectors": [{"apiVersion": format!("{group}/v1"), "kind": "Gadget"}]}}),
        false,
    )
    .await?
    .context("creating the Placement")?;
    let mut args = f.identities.args("negotiator")?;
    args.extend([
        "--lease-namespace".to_string(),
        f._hub_ns.name().to_string(),
        "--cluster-selector".to_string(),
        format!("{SELECTOR_LABEL}={}", f.selector),
        "--import-push-members=false".to_string(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let negotiator = ControllerProcess::start("flotilla-negotiator", &args)?;
    wait_for(
        "the custom type a Placement selects imported from the pull-mode member",
        Duration::from_secs(90),
        || async {
            Ok(match imports.get_opt(&gadgets).await? {
                Some(i) if i.spec.resource.names.kind == "Gadget" => Seen::Done(()),
                other => Seen::not_yet(format!("{:?}", other.map(|i| i.spec.resource.names))),
            })
        },
    )
    .await
    .with_context(|| {
        format!(
            "importer log:\n{}\nnegotiator log:\n{}",
            importer.log(),
            negotiator.log()
        )
    })?;

    // The list: one <apiVersion>/<Kind> a line, the defaults and the Placement's type.
    let lists: Api<ConfigMap> = Api::namespaced(f.hub.clone(), &own_ns);
    let list = lists
        .get(names::IMPORT_TYPES_CONFIGMAP)
        .await?
        .data
        .and_then(|mut d| d.remove("types"))
        .unwrap_or_default();
    for line in [
        "apps/v1/Deployment",
        "v1/ConfigMap",
        &format!("{group}/v1/Gadget"),
    ] {
        ensure!(
            list.lines().any(|l| l == line),
            "the hub's list must name {line}:\n{list}"
        );
    }
    // The defaults stay imported.
    ensure!(
        imports.get_opt("deployments.v1.apps").await?.is_some(),
        "the Deployment import must stay"
    );

    // The agent's credential reads its list, and no other ConfigMap: not by name, not by listing.
    let agent_lists: Api<ConfigMap> = Api::namespaced(agent_hub.clone(), &own_ns);
    agent_lists
        .get(names::IMPORT_TYPES_CONFIGMAP)
        .await
        .context("the agent's credential must read its list of types")?;
    let r = agent_lists.get("kube-root-ca.crt").await;
    ensure!(
        status_of(&r) == Some(403),
        "another ConfigMap of its namespace must be forbidden: {r:?}"
    );
    let r = agent_lists.list(&ListParams::default()).await;
    ensure!(
        status_of(&r) == Some(403),
        "listing ConfigMaps must be forbidden: {r:?}"
    );
    let r = Api::<flotilla_api::Placement>::all(agent_hub.clone())
        .list(&ListParams::default())
        .await;
    ensure!(
        status_of(&r) == Some(403),
        "listing Placements must be forbidden: {r:?}"
    );
    drop(negotiator);
    drop(importer);
    drop(agent);
    Ok(())
}
