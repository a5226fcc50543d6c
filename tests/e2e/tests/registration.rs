//! Registration on the hub against real members: push-mode health and status, outages, precise
//! reasons for bad credentials, cordon, pull-mode acceptance with the agent's RBAC, and removal.
//!
//! Every test runs its own `flotilla-registration` that only handles the test's Clusters
//! (`--cluster-selector`), with short probe and grace periods.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use flotilla_api::{Cluster, names};
use flotilla_e2e::access::{self, Request};
use flotilla_e2e::api::Expect;
use flotilla_e2e::chart::ChartIdentities;
use flotilla_e2e::clusters::{ClusterCleanup, readers_namespace};
use flotilla_e2e::process::ControllerProcess;
use flotilla_e2e::{
    ClusterInfo, Environment, ScratchMember, Seen, TestNamespace, api, chart, random_suffix,
    repo_root, wait_for,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Event, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const SELECTOR_LABEL: &str = "e2e.flotilla.dev/registration";
const GRACE: Duration = Duration::from_secs(6);
const INTERVAL: Duration = Duration::from_secs(2);

/// One test's registration controller and the namespace its Secrets live in.
struct Setup {
    env: Environment,
    hub: Client,
    ns: TestNamespace,
    id: String,
    _controller: ControllerProcess,
    // After the controller: dropped once it is gone.
    _cleanup: ClusterCleanup,
    _identities: ChartIdentities,
}

impl Setup {
    async fn start(prefix: &str) -> Result<Self> {
        let env = Environment::get();
        let hub = env.hub.client().await?;
        api::install_crds(&hub).await?;
        // The agent ClusterRole that registration binds for pull members.
        flotilla_e2e::bootstrap::install_bootstrap(&hub).await?;
        let ns = TestNamespace::create(prefix, &[&env.hub]).await?;
        let id = random_suffix();
        let identities = ChartIdentities::install(ns.name()).await?;
        let selector = format!("{SELECTOR_LABEL}={id}");
        let mut args = identities.args("registration")?;
        args.extend(
            [
                "--lease-namespace",
                ns.name(),
                "--kubeconfig-secret-namespace",
                ns.name(),
                "--cluster-selector",
                &selector,
                "--probe-interval",
                "2s",
                "--grace-period",
                "6s",
            ]
            .map(String::from),
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let controller = ControllerProcess::start("flotilla-registration", &args)?;
        let cleanup = ClusterCleanup::new(&env.hub, selector);
        Ok(Self {
            env,
            hub,
            ns,
            id,
            _controller: controller,
            _cleanup: cleanup,
            _identities: identities,
        })
    }

    fn clusters(&self) -> Api<Cluster> {
        Api::all(self.hub.clone())
    }

    /// Stores `kubeconfig` in Secret `name` (key `key`) of the test namespace (the release
    /// namespace, where the syncer's writable kubeconfigs are) and of its readers' namespace
    /// (where registration reads the read-only ones): see [`Setup::refs`].
    async fn secret(&self, name: &str, key: &str, kubeconfig: &str) -> Result<()> {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            data: Some([(key.to_string(), ByteString(kubeconfig.as_bytes().to_vec()))].into()),
            ..Secret::default()
        };
        for ns in [
            self.ns.name().to_string(),
            readers_namespace(self.ns.name()),
        ] {
            Api::<Secret>::namespaced(self.hub.clone(), &ns)
                .create(&PostParams::default(), &secret)
                .await?;
        }
        Ok(())
    }

    /// A push-mode spec naming Secret `name` (key `key`) as both its kubeconfigs.
    fn refs(&self, name: &str, key: &str) -> serde_json::Value {
        json!({
            "syncMode": "Push",
            "kubeconfigSecretRef": {"name": name, "namespace": self.ns.name(), "key": key},
            "readOnlyKubeconfigSecretRef": {"name": name, "key": key},
        })
    }

    /// Creates a Cluster of this test; `spec` is its JSON spec. Returns its name.
    async fn cluster(&self, spec: serde_json::Value) -> Result<String> {
        let name = format!("e2e-{}", random_suffix());
        let cluster: Cluster = serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": { "name": name, "labels": { SELECTOR_LABEL: self.id } },
            "spec": spec,
        }))?;
        self.clusters()
            .create(&PostParams::default(), &cluster)
            .await?;
        Ok(name)
    }

    /// A push-mode Cluster for `member`, with its kubeconfig in a Secret of the same name.
    async fn push_cluster(&self, member: &ClusterInfo) -> Result<String> {
        let secret = format!("kc-{}", random_suffix());
        self.secret(
            &secret,
            "kubeconfig",
            &std::fs::read_to_string(&member.kubeconfig)?,
        )
        .await?;
        self.cluster(self.refs(&secret, "kubeconfig")).await
    }

    /// Waits until condition `type_` of Cluster `name` has `status` (and `reason`, if given).
    async fn condition(
        &self,
        name: &str,
        type_: &str,
        status: &str,
        reason: Option<&str>,
        timeout: Duration,
    ) -> Result<Cluster> {
        let expected = Expect {
            type_,
            status,
            reason,
        };
        api::wait_condition(&self.clusters(), name, expected, timeout, |c| {
            c.conditions()
        })
        .await
    }

    async fn delete_cluster(&self, name: &str) -> Result<()> {
        self.clusters()
            .delete(name, &DeleteParams::default())
            .await?;
        let clusters = self.clusters();
        wait_for(
            &format!("Cluster {name} to be removed"),
            Duration::from_secs(60),
            || async {
                Ok(match clusters.get_opt(name).await? {
                    None => Seen::Done(()),
                    Some(c) => Seen::not_yet(format!("finalizers {:?}", c.metadata.finalizers)),
                })
            },
        )
        .await
    }

    /// The reasons of the Events on Cluster `name`.
    async fn event_reasons(&self, name: &str) -> Result<Vec<String>> {
        let events: Api<Event> = Api::namespaced(self.hub.clone(), "default");
        let list = events
            .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
            .await?;
        Ok(list.items.into_iter().filter_map(|e| e.reason).collect())
    }

    /// Waits for an Event of `reason` about Cluster `name`: registration sends its Events after
    /// the status write they follow, so one may land a moment after the condition.
    async fn wait_event(&self, name: &str, reason: &str) -> Result<()> {
        wait_for(
            &format!("an Event {reason} about Cluster {name}"),
            Duration::from_secs(30),
            || async {
                let reasons = self.event_reasons(name).await?;
                Ok(if reasons.iter().any(|r| r == reason) {
                    Seen::Done(())
                } else {
                    Seen::not_yet(format!("{reasons:?}"))
                })
            },
        )
        .await
    }
}

/// The allocatable cpu, memory and pods of a member's Nodes, summed, in the form registration
/// reports them (whole cores, `Gi`, a count).
async fn node_totals(member: &ClusterInfo) -> Result<BTreeMap<String, String>> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(member.client().await?);
    let (mut cpu, mut gib, mut pods) = (0_u64, 0_u64, 0_u64);
    for n in nodes.list(&ListParams::default()).await?.items {
        let a = n.status.and_then(|s| s.allocatable).unwrap_or_default();
        let get = |k: &str| a.get(k).map(|q| q.0.clone()).unwrap_or_default();
        let parse = |k: &str, v: &str| {
            v.parse::<u64>().map_err(|_| {
                anyhow::anyhow!(
                    "node {} has {k} {v:?}",
                    n.metadata.name.clone().unwrap_or_default()
                )
            })
        };
        cpu += parse("cpu", &get("cpu"))?;
        gib += parse("memory", get("memory").trim_end_matches("Gi"))?;
        pods += parse("pods", &get("pods"))?;
    }
    Ok(BTreeMap::from([
        ("cpu".to_string(), cpu.to_string()),
        ("memory".to_string(), format!("{gib}Gi")),
        ("pods".to_string(), pods.to_string()),
    ]))
}

#[tokio::test]
async fn a_push_member_becomes_ready_with_version_and_allocatable() -> Result<()> {
    let s = Setup::start("reg-push").await?;
    // The member that runs an older Kubernetes than the hub (member2 of hack/clusters.sh), so
    // that what is reported is the member's and not the hub's.
    let hub_version = s.env.hub.version().await?;
    let mut member = &s.env.require_members(1)?[0];
    for m in &s.env.members {
        if m.version().await? != hub_version {
            member = m;
            break;
        }
    }
    let version = member.version().await?;
    ensure!(
        version != hub_version,
        "the environment has no member older than the hub ({hub_version}): see hack/clusters.sh --help"
    );
    let expected = node_totals(member).await?;
    let name = s.push_cluster(member).await?;

    let cluster = s
        .condition(
            &name,
            "Ready",
            "True",
            Some("Reachable"),
            Duration::from_secs(60),
        )
        .await?;
    let status = cluster.status.unwrap_or_default();
    ensure!(
        status.kubernetes_version.as_deref() == Some(version.as_str()),
        "kubernetesVersion: {:?}, the member runs {version}",
        status.kubernetes_version
    );
    // The sums of the member's own Nodes (hack/clusters.sh gives members unequal nodes).
    let reported: BTreeMap<String, String> = status
        .allocatable
        .iter()
        .map(|(k, q)| (k.clone(), q.0.clone()))
        .collect();
    for (k, v) in &expected {
        ensure!(
            reported.get(k) == Some(v),
            "allocatable {k}: {:?}, the member's Nodes sum to {v} ({reported:?})",
            reported.get(k)
        );
    }
    ensure!(
        status.last_heartbeat_time.is_some(),
        "lastHeartbeatTime is set"
    );
    ensure!(status.cluster_id.is_some(), "clusterId is recorded");
    for (t, r) in [
        ("Accepted", "Accepted"),
        ("Joined", "Joined"),
        ("Schedulable", "Schedulable"),
    ] {
        s.condition(&name, t, "True", Some(r), Duration::from_secs(5))
            .await?;
    }
    let namespaces: Api<Namespace> = Api::all(s.hub.clone());
    ensure!(
        namespaces
            .get_opt(&names::cluster_namespace(&name))
            .await?
            .is_some(),
        "namespace flotilla-cluster-{name}"
    );
    s.wait_event(&name, "Reachable").await?;

    // Cordon, then taint: reflected in Schedulable.
    s.clusters()
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await?;
    s.condition(
        &name,
        "Schedulable",
        "False",
        Some("Cordoned"),
        Duration::from_secs(15),
    )
    .await?;
    s.clusters()
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": false, "taints": [{"key": "example.com/maintenance", "effect": "NoSchedule"}]}})),
        )
        .await?;
    s.condition(
        &name,
        "Schedulable",
        "True",
        Some("Tainted"),
        Duration::from_secs(15),
    )
    .await?;
    let clusters = s.clusters();
    wait_for(
        "the taint to get its timeAdded",
        Duration::from_secs(15),
        || async {
            let c = clusters.get(&name).await?;
            Ok(
                match c.spec.taints.first().and_then(|t| t.time_added.clone()) {
                    Some(t) => Seen::Done(t),
                    None => Seen::not_yet(format!("{:?}", c.spec.taints)),
                },
            )
        },
    )
    .await?;

    // Removal: the namespace goes, then the Cluster.
    s.delete_cluster(&name).await?;
    ensure!(
        namespaces
            .get_opt(&names::cluster_namespace(&name))
            .await?
            .is_none(),
        "namespace removed with its Cluster"
    );
    Ok(())
}

#[tokio::test]
async fn a_stopped_member_turns_unknown_and_comes_back() -> Result<()> {
    let s = Setup::start("reg-outage").await?;
    let scratch = ScratchMember::add(&s.env, "e2e-reg").await?;
    let name = s.push_cluster(&scratch.info).await?;
    s.condition(
        &name,
        "Ready",
        "True",
        Some("Reachable"),
        Duration::from_secs(60),
    )
    .await?;

    s.env
        .clusters_sh(&["stop-member", &scratch.info.name])
        .await?;
    let stopped = Instant::now();
    s.condition(
        &name,
        "Ready",
        "Unknown",
        Some("Unreachable"),
        GRACE + INTERVAL + Duration::from_secs(20),
    )
    .await?;
    let detected = stopped.elapsed();
    ensure!(
        detected <= GRACE + INTERVAL + Duration::from_secs(8),
        "Ready became Unknown {detected:?} after the member stopped; expected within grace {GRACE:?} + interval {INTERVAL:?} (+ slack)"
    );
    eprintln!("member outage detected after {detected:?}");
    s.wait_event(&name, "Unreachable").await?;

    s.env
        .clusters_sh(&["start-member", &scratch.info.name])
        .await?;
    s.condition(
        &name,
        "Ready",
        "True",
        Some("Reachable"),
        Duration::from_secs(60),
    )
    .await?;
    s.delete_cluster(&name).await?;
    Ok(())
}

#[tokio::test]
async fn bad_credentials_get_precise_reasons_and_leak_nothing() -> Result<()> {
    let s = Setup::start("reg-bad").await?;
    let member = &s.env.require_members(1)?[0];
    let good = std::fs::read_to_string(&member.kubeconfig)?;
    let token = good
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .ok_or_else(|| anyhow::anyhow!("no token in {}", member.kubeconfig.display()))?
        .to_string();
    let wrong_token = good.replace(&token, "not-a-valid-token-0123456789");
    let exec = good.replace(
        &format!("token: {token}"),
        "exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/cat}",
    );

    s.secret("wrong-token", "kubeconfig", &wrong_token).await?;
    s.secret("garbage", "kubeconfig", &format!("clusters: [{token}"))
        .await?;
    s.secret("exec", "kubeconfig", &exec).await?;
    s.secret("other-key", "config", &good).await?;
    // The same credentials over a connection that verifies nothing.
    let insecure: String = good
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("certificate-authority-data:") {
                "    insecure-skip-tls-verify: true".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    ensure!(insecure.contains("insecure-skip-tls-verify"), "{insecure}");
    s.secret("insecure", "kubeconfig", &insecure).await?;
    let cases = [
        (
            "missing-secret",
            "kubeconfig",
            "SecretNotFound",
            "not found",
        ),
        (
            "other-key",
            "kubeconfig",
            "SecretKeyNotFound",
            "has no key \"kubeconfig\" (keys: config)",
        ),
        (
            "garbage",
            "kubeconfig",
            "InvalidKubeconfig",
            "is not a kubeconfig",
        ),
        ("exec", "kubeconfig", "InvalidKubeconfig", "user.exec"),
        (
            "insecure",
            "kubeconfig",
            "InvalidKubeconfig",
            "insecure-skip-tls-verify",
        ),
        ("wrong-token", "kubeconfig", "Unauthorized", "401"),
    ];
    let mut names = Vec::new();
    for (secret, key, _, _) in &cases {
        names.push(s.cluster(s.refs(secret, key)).await?);
    }
    for ((secret, _, reason, detail), name) in cases.iter().zip(&names) {
        let c = s
            .condition(
                name,
                "Ready",
                "False",
                Some(reason),
                Duration::from_secs(30),
            )
            .await?;
        let ready = c
            .status
            .as_ref()
            .and_then(|st| st.conditions.iter().find(|x| x.type_ == "Ready"))
            .map(|x| x.message.clone())
            .unwrap_or_default();
        ensure!(
            ready.contains(detail),
            "{secret}: the Ready message must say {detail:?}: {ready}"
        );
        let all = serde_json::to_string(&c)?;
        ensure!(
            !all.contains(&token),
            "{secret}: the Cluster must not contain the token"
        );
        let events: Api<Event> = Api::namespaced(s.hub.clone(), "default");
        // The Event follows the status write: allow it a moment on a loaded machine.
        let notes = wait_for(
            &format!("{secret}: a Warning Event"),
            Duration::from_secs(20),
            || async {
                let notes: Vec<String> = events
                    .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
                    .await?
                    .items
                    .into_iter()
                    .filter_map(|e| e.message)
                    .collect();
                Ok(
                    if notes
                        .iter()
                        .any(|n| n.contains(*reason) || n.contains("Ready is False"))
                    {
                        Seen::Done(notes)
                    } else {
                        Seen::not_yet(format!("{notes:?}"))
                    },
                )
            },
        )
        .await?;
        ensure!(
            !notes.iter().any(|n| n.contains(&token)),
            "{secret}: Events must not contain the token"
        );
    }
    // Unless the Cluster explicitly allows it (a throwaway test cluster).
    let allowed = s
        .cluster({
            let mut spec = s.refs("insecure", "kubeconfig");
            spec["allowInsecureTransport"] = json!(true);
            spec
        })
        .await?;
    s.condition(&allowed, "Ready", "True", None, Duration::from_secs(30))
        .await?;
    names.push(allowed);
    for name in &names {
        s.delete_cluster(name).await?;
    }
    Ok(())
}

/// Asks the hub whether the agent `user` (in the agents' group and, with a certificate issued for
/// the Cluster with UID `uid`, in that UID's group) may `verb` `resource` in `namespace`.
#[allow(clippy::too_many_arguments)]
async fn allowed(
    hub: &Client,
    (user, uid): (&str, &str),
    verb: &str,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
    name: Option<&str>,
) -> Result<bool> {
    let uid_group = names::cluster_uid_group(uid);
    let groups = [names::AGENT_GROUP, "system:authenticated", &uid_group];
    let request = Request {
        verb,
        group,
        resource,
        namespace,
        name,
    };
    access::allowed(hub, user, &groups, request).await
}

/// One access check: verb, group, resource, namespace and name.
type Check<'a> = (&'a str, &'a str, &'a str, Option<&'a str>, Option<&'a str>);

/// Waits until every check of `who`'s access answers `want`: the apiserver's authorizer learns
/// of a binding made or deleted from its cache, a moment after the write.
async fn access_becomes(
    hub: &Client,
    who: (&str, &str),
    checks: &[Check<'_>],
    want: bool,
) -> Result<()> {
    wait_for(
        &format!(
            "{} to be {}allowed {checks:?}",
            who.0,
            if want { "" } else { "NOT " }
        ),
        Duration::from_secs(30),
        || async {
            let mut wrong = Vec::new();
            for (verb, group, resource, namespace, object) in checks {
                if allowed(hub, who, verb, group, resource, *namespace, *object).await? != want {
                    wrong.push(format!("{verb} {resource} in {namespace:?} {object:?}"));
                }
            }
            Ok(if wrong.is_empty() {
                Seen::Done(())
            } else {
                Seen::not_yet(wrong.join(", "))
            })
        },
    )
    .await
}

#[tokio::test]
async fn pull_clusters_wait_for_acceptance_and_get_least_privilege() -> Result<()> {
    let s = Setup::start("reg-pull").await?;
    let name = s.cluster(json!({"syncMode": "Pull"})).await?;
    let other = s
        .cluster(json!({"syncMode": "Pull", "hubAcceptsClient": true}))
        .await?;
    s.condition(
        &name,
        "Accepted",
        "False",
        Some("AwaitingAcceptance"),
        Duration::from_secs(30),
    )
    .await?;
    s.condition(
        &name,
        "Ready",
        "Unknown",
        Some("AwaitingAcceptance"),
        Duration::from_secs(5),
    )
    .await?;
    let namespaces: Api<Namespace> = Api::all(s.hub.clone());
    ensure!(
        namespaces
            .get_opt(&names::cluster_namespace(&name))
            .await?
            .is_none(),
        "no namespace before acceptance"
    );

    s.clusters()
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hubAcceptsClient": true}})),
        )
        .await?;
    s.condition(
        &name,
        "Accepted",
        "True",
        Some("Accepted"),
        Duration::from_secs(30),
    )
    .await?;
    s.condition(
        &name,
        "Joined",
        "False",
        Some("AwaitingAgent"),
        Duration::from_secs(10),
    )
    .await?;
    s.condition(&other, "Accepted", "True", None, Duration::from_secs(30))
        .await?;

    let agent = names::agent_user_name(&name);
    let uid = s
        .clusters()
        .get(&name)
        .await?
        .metadata
        .uid
        .unwrap_or_default();
    let other_uid = s
        .clusters()
        .get(&other)
        .await?
        .metadata
        .uid
        .unwrap_or_default();
    let own = names::cluster_namespace(&name);
    let foreign = names::cluster_namespace(&other);
    let hub = &s.hub;
    let may = [
        ("list", "flotilla.dev", "works", Some(own.as_str()), None),
        // Only the syncer's finalizer; admission policy flotilla-agent-works refuses the rest
        // (tests/e2e/tests/syncer_pull.rs).
        ("update", "flotilla.dev", "works", Some(own.as_str()), None),
        (
            "create",
            "events.k8s.io",
            "events",
            Some(own.as_str()),
            None,
        ),
        (
            "patch",
            "flotilla.dev",
            "works/status",
            Some(own.as_str()),
            None,
        ),
        (
            "create",
            "flotilla.dev",
            "apiresourceimports",
            Some(own.as_str()),
            None,
        ),
        (
            "update",
            "coordination.k8s.io",
            "leases",
            Some(own.as_str()),
            Some(names::AGENT_LEASE_NAME),
        ),
        ("get", "flotilla.dev", "clusters", None, Some(name.as_str())),
        // The data of the Secrets its Works place.
        ("get", "", "secrets", Some(own.as_str()), None),
        (
            "patch",
            "flotilla.dev",
            "clusters/status",
            None,
            Some(name.as_str()),
        ),
    ];
    access_becomes(hub, (&agent, &uid), &may, true).await?;
    let may_not = [
        (
            "list",
            "flotilla.dev",
            "works",
            Some(foreign.as_str()),
            None,
        ),
        (
            "patch",
            "flotilla.dev",
            "works",
            Some(foreign.as_str()),
            None,
        ),
        ("create", "flotilla.dev", "works", Some(own.as_str()), None),
        ("delete", "flotilla.dev", "works", Some(own.as_str()), None),
        // Only `get` of the data Secret a Work names: never a list.
        ("list", "", "secrets", Some(own.as_str()), None),
        ("list", "", "secrets", None, None),
        ("get", "", "secrets", Some(foreign.as_str()), None),
        (
            "get",
            "flotilla.dev",
            "clusters",
            None,
            Some(other.as_str()),
        ),
        (
            "patch",
            "flotilla.dev",
            "clusters",
            None,
            Some(name.as_str()),
        ),
        (
            "update",
            "coordination.k8s.io",
            "leases",
            Some(own.as_str()),
            Some("something-else"),
        ),
    ];
    access_becomes(hub, (&agent, &uid), &may_not, false).await?;

    // Revoking acceptance revokes access.
    s.clusters()
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hubAcceptsClient": false}})),
        )
        .await?;
    s.condition(
        &name,
        "Accepted",
        "False",
        Some("AcceptanceRevoked"),
        Duration::from_secs(30),
    )
    .await?;
    let bindings: Api<ClusterRoleBinding> = Api::all(s.hub.clone());
    wait_for(
        "the agent's ClusterRoleBinding to be deleted",
        Duration::from_secs(15),
        || async {
            Ok(
                match bindings
                    .get_opt(&format!("flotilla:cluster:{name}:agent"))
                    .await?
                {
                    None => Seen::Done(()),
                    Some(_) => Seen::not_yet("still there"),
                },
            )
        },
    )
    .await?;
    // After revocation the agent may not list Works.
    let list_works: Check = ("list", "flotilla.dev", "works", Some(&own), None);
    access_becomes(hub, (&agent, &uid), &[list_works], false).await?;

    // Deleting a Cluster revokes access too.
    let other_agent = names::agent_user_name(&other);
    let list_foreign: Check = ("list", "flotilla.dev", "works", Some(&foreign), None);
    access_becomes(hub, (&other_agent, &other_uid), &[list_foreign], true).await?;
    s.delete_cluster(&other).await?;
    // After deletion the agent may not list Works.
    access_becomes(hub, (&other_agent, &other_uid), &[list_foreign], false).await?;
    s.delete_cluster(&name).await?;
    Ok(())
}

/// A tenant who made `flotilla-cluster-<name>` first (with a RoleBinding of its own) gets
/// nothing from it: the Cluster of that name says `Joined=False` and `Ready=False`
/// (`NamespaceTaken`), no agent RBAC goes there, and deleting the Cluster leaves the tenant's
/// namespace alone.
#[tokio::test]
async fn a_squatted_cluster_namespace_is_never_used() -> Result<()> {
    let s = Setup::start("reg-squat").await?;
    let member = &s.env.require_members(1)?[0];
    let name = format!("e2e-{}", random_suffix());
    let squatted = flotilla_api::names::cluster_namespace(&name);
    let namespaces: Api<Namespace> = Api::all(s.hub.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": squatted,
                "labels": {"flotilla.dev/cluster": name}}}))?,
        )
        .await?;
    // Deleted however the test ends.
    let mut _squatted = flotilla_e2e::api::ClusterScopedObjects::new(&s.env.hub);
    _squatted.add(
        kube::api::ApiResource::erase::<Namespace>(&()),
        squatted.clone(),
    );
    let secret = format!("kc-{}", random_suffix());
    s.secret(
        &secret,
        "kubeconfig",
        &std::fs::read_to_string(&member.kubeconfig)?,
    )
    .await?;
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "Cluster",
        "metadata": {"name": name, "labels": {SELECTOR_LABEL: s.id}},
        "spec": s.refs(&secret, "kubeconfig"),
    }))?;
    s.clusters()
        .create(&PostParams::default(), &cluster)
        .await?;
    let c = s
        .condition(
            &name,
            "Joined",
            "False",
            Some("NamespaceTaken"),
            Duration::from_secs(30),
        )
        .await?;
    let ready = c
        .status
        .as_ref()
        .and_then(|st| st.conditions.iter().find(|x| x.type_ == "Ready"))
        .cloned();
    ensure!(
        ready
            .as_ref()
            .is_some_and(|r| r.status == "False" && r.reason == "NamespaceTaken"),
        "Ready must say NamespaceTaken too: {ready:?}"
    );
    let ns = namespaces.get(&squatted).await?;
    ensure!(
        !kube::ResourceExt::annotations(&ns).contains_key(flotilla_api::annotations::CLUSTER_UID),
        "registration must not mark the squatted namespace as its own: {:?}",
        kube::ResourceExt::annotations(&ns)
    );
    // Removing the Cluster leaves the tenant's namespace alone.
    s.delete_cluster(&name).await?;
    let left = namespaces.get_opt(&squatted).await?;
    ensure!(
        left.is_some_and(|n| n.metadata.deletion_timestamp.is_none()),
        "the squatted namespace was deleted with the Cluster"
    );
    Ok(())
}

/// A push-mode member with two credentials: registration probes it with the read-only one
/// (the identity of `deploy/member/reader.yaml`), never with the one the syncer applies with —
/// which here may not even list Nodes — and neither registration's nor the negotiator's token may
/// read the writable one. The read-only one cannot write.
#[tokio::test]
async fn a_member_is_probed_with_its_read_only_credential() -> Result<()> {
    let s = Setup::start("reg-reader").await?;
    let member = &s.env.require_members(1)?[0];
    let member_client = member.client().await?;
    let reader_yaml = std::fs::read_to_string(repo_root().join("deploy/member/reader.yaml"))?;
    for doc in serde_saphyr::from_multiple::<serde_json::Value>(&reader_yaml)? {
        api::apply(&member_client, &doc, false).await??;
    }
    // The applying identity: a ServiceAccount with no rights outside its namespace.
    let own = TestNamespace::create("reg-applier", &[member]).await?;
    Api::<ServiceAccount>::namespaced(member_client.clone(), own.name())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "applier"}}))?,
        )
        .await?;
    let kubeconfig_of = |token: String| -> Result<String> {
        let path = chart::cluster_kubeconfig_with_token(member, &token)?;
        Ok(std::fs::read_to_string(path)?)
    };
    let reader = kubeconfig_of(
        chart::token_for(&member_client, "flotilla-system", "flotilla-reader").await?,
    )?;
    let applier = kubeconfig_of(chart::token_for(&member_client, own.name(), "applier").await?)?;
    s.secret("reader", "kubeconfig", &reader).await?;
    s.secret("applier", "kubeconfig", &applier).await?;
    let secret = |name: &str| json!({"name": name, "namespace": s.ns.name()});

    // With the writable one alone, registration does not read the member: it says why. Neither
    // its token nor the negotiator's may read the writable kubeconfigs at all.
    let applier_only = s
        .cluster(json!({"syncMode": "Push", "kubeconfigSecretRef": secret("applier")}))
        .await?;
    let refused = s
        .condition(
            &applier_only,
            "Ready",
            "False",
            Some(flotilla_api::reasons::READ_ONLY_KUBECONFIG_REQUIRED),
            Duration::from_secs(30),
        )
        .await?;
    ensure!(
        refused
            .conditions()
            .iter()
            .any(|c| c.message.contains("spec.readOnlyKubeconfigSecretRef")),
        "the condition names the field: {:?}",
        refused.status
    );
    for controller in ["registration", "negotiator"] {
        let stolen = s._identities.client(controller).await?;
        for ns in [s.ns.name().to_string(), readers_namespace(s.ns.name())] {
            let read = Api::<Secret>::namespaced(stolen.clone(), &ns)
                .get("applier")
                .await;
            let allowed = ns != s.ns.name();
            ensure!(
                read.is_ok() == allowed,
                "{controller}'s token reading Secret {ns}/applier: {read:?} (allowed: {allowed})"
            );
        }
    }
    let both = s
        .cluster(
            json!({"syncMode": "Push", "kubeconfigSecretRef": secret("applier"),
                        "readOnlyKubeconfigSecretRef": {"name": "reader"}}),
        )
        .await?;
    let ready = s
        .condition(&both, "Ready", "True", None, Duration::from_secs(30))
        .await?;
    ensure!(
        ready
            .status
            .as_ref()
            .is_some_and(|st| st.allocatable.contains_key("cpu")),
        "the read-only credential reads the member's capacity: {:?}",
        ready.status
    );
    let reader_client =
        flotilla_e2e::client_from(kube::config::Kubeconfig::from_yaml(&reader)?).await?;
    let write = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(reader_client, own.name())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "nope"}}))?,
        )
        .await;
    ensure!(
        matches!(&write, Err(kube::Error::Api(e)) if e.code == 403),
        "the read-only credential must not write: {write:?}"
    );
    for name in [&applier_only, &both] {
        s.delete_cluster(name).await?;
    }
    Ok(())
}
