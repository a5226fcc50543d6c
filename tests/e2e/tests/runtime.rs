//! The shared controller runtime, exercised through the real controller binaries against the
//! real hub: leader election with hand-over, health and metrics endpoints, graceful shutdown,
//! an unreachable hub, and flags that explain themselves.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use flotilla_e2e::chart::ChartIdentities;
use flotilla_e2e::process::{ControllerProcess, controller_binary, free_port, metric_value};
use flotilla_e2e::{Environment, Seen, TestNamespace, api, wait_for};
use flotilla_runtime::member_client::{MemberClients, kubeconfig_from_secret};
use k8s_openapi::ByteString;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::Api;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams};

const CONTROLLERS: [&str; 4] = ["registration", "syncer", "splitter", "negotiator"];

/// Short Lease timings so hand-over is quick to test.
const LEASE_DURATION: Duration = Duration::from_secs(4);
const LEASE_FLAGS: [&str; 6] = [
    "--lease-duration",
    "4s",
    "--lease-renew-deadline",
    "3s",
    "--lease-retry-period",
    "1s",
];

/// Starts controller `name` with the chart's identity of it, its Lease in the identities'
/// namespace, with the given Lease flags (none: the defaults).
fn start(
    name: &str,
    identities: &ChartIdentities,
    identity: &str,
    lease_flags: &[&str],
) -> Result<ControllerProcess> {
    let own = identities.args(name)?;
    let mut args: Vec<&str> = own.iter().map(String::as_str).collect();
    args.extend([
        "--lease-namespace",
        identities.namespace.as_str(),
        "--identity",
        identity,
    ]);
    args.extend(lease_flags);
    ControllerProcess::start(&format!("flotilla-{name}"), &args)
}

async fn holder(leases: &Api<Lease>, name: &str) -> Result<Option<String>> {
    Ok(leases
        .get_opt(name)
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty()))
}

async fn is_leader(p: &ControllerProcess, metric: &str) -> Result<bool> {
    let (_, body) = p.get("/metrics").await?;
    Ok(metric_value(&body, metric) == Some(1.0))
}

#[tokio::test]
async fn two_replicas_elect_one_leader_and_hand_over() -> Result<()> {
    let env = Environment::get();
    let hub = env.hub.client().await?;
    api::install_crds(&hub).await?;
    let ns = TestNamespace::create("lease", &[&env.hub]).await?;
    let leases: Api<Lease> = Api::namespaced(hub, ns.name());
    let metric = "flotilla_syncer_leader";

    let identities = ChartIdentities::install(ns.name()).await?;
    let mut a = start("syncer", &identities, "replica-a", &LEASE_FLAGS)?;
    let mut b = start("syncer", &identities, "replica-b", &LEASE_FLAGS)?;

    let first = wait_for(
        "one replica to hold the Lease flotilla-syncer",
        Duration::from_secs(30),
        || async {
            Ok(match holder(&leases, "flotilla-syncer").await? {
                Some(h) => Seen::Done(h),
                None => Seen::not_yet("no holder"),
            })
        },
    )
    .await?;
    let (leader, standby) = if first == "replica-a" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };

    // Exactly one leader, and both replicas ready (the standby without caches).
    wait_for(
        "the leader's metrics to say leader=1 and both replicas to be ready",
        Duration::from_secs(30),
        || async {
            let l = is_leader(leader, metric).await?;
            let s = is_leader(standby, metric).await?;
            let lr = leader.get("/readyz").await?.0;
            let sr = standby.get("/readyz").await?.0;
            Ok(if l && !s && lr == 200 && sr == 200 {
                Seen::Done(())
            } else {
                Seen::not_yet(format!(
                    "leader: leader={l} readyz={lr}; standby: leader={s} readyz={sr}"
                ))
            })
        },
    )
    .await?;
    ensure!(
        standby.get("/healthz").await?.0 == 200,
        "the standby's /healthz"
    );

    // The leader dies without releasing the Lease: the standby takes over within the Lease's
    // duration (plus one retry period and slack for a loaded machine).
    leader.signal("KILL")?;
    let killed = Instant::now();
    let second = if first == "replica-a" {
        "replica-b"
    } else {
        "replica-a"
    };
    wait_for(
        &format!("{second} to take the Lease over"),
        Duration::from_secs(30),
        || async {
            Ok(match holder(&leases, "flotilla-syncer").await? {
                Some(h) if h == second => Seen::Done(()),
                other => Seen::not_yet(format!("holder {other:?}")),
            })
        },
    )
    .await?;
    let takeover = killed.elapsed();
    ensure!(
        takeover <= LEASE_DURATION + Duration::from_secs(4),
        "take-over took {takeover:?}, more than the Lease duration {LEASE_DURATION:?} plus slack"
    );
    eprintln!("take-over after the leader was killed: {takeover:?}");
    wait_for(
        "the new leader's metrics to say leader=1",
        Duration::from_secs(10),
        || async {
            Ok(if is_leader(standby, metric).await? {
                Seen::Done(())
            } else {
                Seen::not_yet("leader=0")
            })
        },
    )
    .await?;

    // A graceful stop releases the Lease at once.
    standby.signal("TERM")?;
    let status = standby.wait_exit(Duration::from_secs(15)).await?;
    ensure!(
        status.success(),
        "SIGTERM must stop the controller cleanly, got {status}:\n{}",
        standby.log()
    );
    ensure!(
        holder(&leases, "flotilla-syncer").await?.is_none(),
        "the Lease must be released on shutdown:\n{}",
        standby.log()
    );
    Ok(())
}

#[tokio::test]
async fn every_controller_serves_health_and_metrics_and_stops_cleanly() -> Result<()> {
    let env = Environment::get();
    api::install_crds(&env.hub.client().await?).await?;
    let ns = TestNamespace::create("controllers", &[&env.hub]).await?;
    let identities = ChartIdentities::install(ns.name()).await?;
    for name in CONTROLLERS {
        // The default Lease timings: the short ones of the hand-over test step a leader down
        // when a loaded machine delays one renewal by 3 s, which is not what this test is about.
        let mut p = start(name, &identities, &format!("{name}-0"), &[])?;
        wait_for(
            &format!("flotilla-{name} to be ready"),
            Duration::from_secs(60),
            || async {
                let (code, body) = p.get("/readyz").await?;
                Ok(if code == 200 {
                    Seen::Done(())
                } else {
                    Seen::not_yet(format!("{code} {body}"))
                })
            },
        )
        .await?;
        let (code, _) = p.get("/healthz").await?;
        ensure!(code == 200, "flotilla-{name} /healthz answered {code}");
        let (code, metrics) = p.get("/metrics").await?;
        ensure!(code == 200, "flotilla-{name} /metrics answered {code}");
        let prefix = format!("flotilla_{name}");
        ensure!(
            metric_value(&metrics, &format!("{prefix}_leader")) == Some(1.0),
            "flotilla-{name} must report itself leader:\n{metrics}"
        );
        for family in ["leader", "build_info"] {
            ensure!(
                metrics.contains(&format!("# TYPE {prefix}_{family}")),
                "flotilla-{name} /metrics lacks {prefix}_{family}:\n{metrics}"
            );
        }
        p.signal("TERM")?;
        let status = p.wait_exit(Duration::from_secs(15)).await?;
        ensure!(
            status.success(),
            "flotilla-{name} exited with {status} on SIGTERM:\n{}",
            p.log()
        );
        let log = p.log();
        ensure!(
            log.contains("released the Lease"),
            "flotilla-{name} did not release its Lease:\n{log}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_controller_started_against_an_unreachable_hub_says_so_and_retries() -> Result<()> {
    let env = Environment::get();
    let unreachable = format!("https://127.0.0.1:{}", free_port()?);
    let original = std::fs::read_to_string(&env.hub.kubeconfig)?;
    let server = original
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .ok_or_else(|| anyhow::anyhow!("no server in the hub kubeconfig"))?;
    let path = flotilla_e2e::scratch_dir().join(format!(
        "flotilla-e2e-unreachable-{}.kubeconfig",
        flotilla_e2e::random_suffix()
    ));
    // No credentials at all: nothing answers there to check them.
    let token = original
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .ok_or_else(|| anyhow::anyhow!("no token in the hub kubeconfig"))?;
    std::fs::write(
        &path,
        original
            .replace(server, &unreachable)
            .replace(token, "no-credentials"),
    )?;

    let path_arg = path.to_string_lossy().into_owned();
    let mut p = ControllerProcess::start(
        "flotilla-syncer",
        &["--kubeconfig", &path_arg, "--lease-namespace", "default"],
    )?;
    wait_for(
        "the controller to report the unreachable hub twice (it retries)",
        Duration::from_secs(20),
        || async {
            let log = p.log();
            let n = log.matches("the hub is unreachable; retrying").count();
            Ok(if n >= 2 {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("{n} reports; log:\n{log}"))
            })
        },
    )
    .await?;
    ensure!(
        p.log().contains(&unreachable),
        "the log must name the hub it cannot reach:\n{}",
        p.log()
    );
    ensure!(p.get("/healthz").await?.0 == 200, "alive while retrying");
    let (code, body) = p.get("/readyz").await?;
    ensure!(
        code == 503,
        "not ready while the hub is unreachable, got {code} {body}"
    );
    p.signal("TERM")?;
    let status = p.wait_exit(Duration::from_secs(10)).await?;
    ensure!(
        status.success(),
        "SIGTERM while retrying must stop cleanly, got {status}"
    );
    let _ = std::fs::remove_file(&path);
    Ok(())
}

#[tokio::test]
async fn flags_explain_themselves_and_bad_values_are_refused() -> Result<()> {
    for name in CONTROLLERS {
        let bin = controller_binary(&format!("flotilla-{name}"))?;
        let help = tokio::process::Command::new(&bin)
            .arg("--help")
            .output()
            .await?;
        let text = String::from_utf8_lossy(&help.stdout);
        ensure!(help.status.success(), "flotilla-{name} --help failed");
        for flag in [
            "--kubeconfig",
            "--metrics-address",
            "--health-address",
            "--leader-elect",
            "--lease-namespace",
            "--log-format",
            "--log-level",
        ] {
            ensure!(
                text.contains(flag),
                "flotilla-{name} --help does not explain {flag}:\n{text}"
            );
        }
    }
    let bin = controller_binary("flotilla-syncer")?;
    for (args, expected) in [
        (
            vec!["--lease-renew-deadline", "20s"],
            "--lease-renew-deadline",
        ),
        (vec!["--lease-duration", "soon"], "invalid duration"),
        (vec!["--log-format", "xml"], "--log-format"),
        (vec!["--log-level", "info,=="], "--log-level"),
        (vec!["--metrics-address", "nowhere"], "--metrics-address"),
    ] {
        let out = tokio::process::Command::new(&bin)
            .args(&args)
            .output()
            .await?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(!out.status.success(), "flotilla-syncer {args:?} must fail");
        ensure!(
            stderr.contains(expected),
            "flotilla-syncer {args:?}: expected {expected:?} in:\n{stderr}"
        );
    }
    Ok(())
}

/// A Secret holding `kubeconfig` under the key `kubeconfig`.
fn kubeconfig_secret(name: &str, kubeconfig: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some(
            [(
                "kubeconfig".to_string(),
                ByteString(kubeconfig.as_bytes().to_vec()),
            )]
            .into(),
        ),
        ..Secret::default()
    }
}

async fn node_names(client: kube::Client) -> Result<Vec<String>> {
    let nodes: Api<Node> = Api::all(client);
    Ok(nodes
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect())
}

#[tokio::test]
async fn member_clients_come_from_secrets_and_follow_their_changes() -> Result<()> {
    let env = Environment::get();
    let members = env.require_members(2)?;
    let ns = TestNamespace::create("member-client", &[&env.hub]).await?;
    let secrets: Api<Secret> = Api::namespaced(env.hub.client().await?, ns.name());
    let apply = |kubeconfig: String| {
        let secrets = secrets.clone();
        async move {
            secrets
                .patch(
                    "member",
                    &PatchParams::apply("flotilla-e2e").force(),
                    &Patch::Apply(kubeconfig_secret("member", &kubeconfig)),
                )
                .await
        }
    };
    let clients = MemberClients::new();

    apply(std::fs::read_to_string(&members[0].kubeconfig)?).await?;
    let secret = secrets.get("member").await?;
    let nodes = node_names(
        clients
            .client_for(
                "m",
                &secret,
                "kubeconfig",
                flotilla_runtime::member_client::Transport::Verified,
            )
            .await?
            .requests,
    )
    .await?;
    ensure!(
        nodes
            .iter()
            .all(|n| n.starts_with(&format!("{}-", members[0].name)))
            && !nodes.is_empty(),
        "the client from the Secret must reach {}: nodes {nodes:?}",
        members[0].name
    );

    // The Secret now points at another member: the cached client is rebuilt.
    apply(std::fs::read_to_string(&members[1].kubeconfig)?).await?;
    let secret = secrets.get("member").await?;
    let nodes = node_names(
        clients
            .client_for(
                "m",
                &secret,
                "kubeconfig",
                flotilla_runtime::member_client::Transport::Verified,
            )
            .await?
            .requests,
    )
    .await?;
    ensure!(
        nodes
            .iter()
            .all(|n| n.starts_with(&format!("{}-", members[1].name)))
            && !nodes.is_empty(),
        "after the Secret changed the client must reach {}: nodes {nodes:?}",
        members[1].name
    );
    ensure!(clients.len() == 1, "one client per member");

    // A malformed kubeconfig is a clear error naming the Secret, never a panic.
    apply("this: [is not a kubeconfig".into()).await?;
    let secret = secrets.get("member").await?;
    let err = kubeconfig_from_secret(&secret, "kubeconfig").expect_err("malformed");
    ensure!(
        err.to_string().contains(&format!("{}/member", ns.name())),
        "the error must name the Secret: {err}"
    );
    let Err(err) = clients
        .client_for(
            "m",
            &secret,
            "missing-key",
            flotilla_runtime::member_client::Transport::Verified,
        )
        .await
    else {
        anyhow::bail!("a missing key must be an error");
    };
    ensure!(err.to_string().contains("has no key"), "{err}");
    Ok(())
}

#[tokio::test]
async fn the_suite_refuses_to_run_a_controller_with_admin_credentials() -> Result<()> {
    let env = Environment::get();
    for cluster in std::iter::once(&env.hub).chain(env.members.iter()) {
        let kubeconfig = cluster.kubeconfig.to_string_lossy().into_owned();
        for args in [
            vec!["--kubeconfig", kubeconfig.as_str()],
            vec!["--hub-kubeconfig", kubeconfig.as_str()],
        ] {
            match ControllerProcess::start("flotilla-syncer", &args) {
                Ok(_) => anyhow::bail!(
                    "a controller started with {}'s admin kubeconfig ({args:?})",
                    cluster.name
                ),
                Err(e) => ensure!(
                    format!("{e:#}").contains("admin credentials"),
                    "the refusal must say why: {e:#}"
                ),
            }
        }
        let equals = format!("--kubeconfig={kubeconfig}");
        ensure!(
            ControllerProcess::start("flotilla-syncer", &[equals.as_str()]).is_err(),
            "a controller started with {}'s admin kubeconfig as --kubeconfig=PATH",
            cluster.name
        );
    }
    Ok(())
}
