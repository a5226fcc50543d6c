//! The Helm chart: it lints and renders, and its RBAC is enough — and no more than enough — for
//! each controller: the controllers run against the real hub with the chart's own
//! ServiceAccount tokens.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use flotilla_api::{Cluster, names};
use flotilla_e2e::access::{self, Request};
use flotilla_e2e::api::{self, ClusterScopedObjects};
use flotilla_e2e::clusters::ClusterCleanup;
use flotilla_e2e::process::ControllerProcess;
use flotilla_e2e::{Environment, Seen, TestNamespace, random_suffix, repo_root, wait_for};
use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

const CONTROLLERS: [&str; 4] = ["registration", "syncer", "splitter", "negotiator"];

fn helm() -> PathBuf {
    std::env::var_os("FLOTILLA_TOOLS_BIN")
        .map(|d| PathBuf::from(d).join("helm"))
        .unwrap_or_else(|| "helm".into())
}

fn chart() -> PathBuf {
    repo_root().join("charts/flotilla")
}

async fn helm_run(args: &[&str]) -> Result<String> {
    let out = tokio::process::Command::new(helm())
        .args(args)
        .output()
        .await
        .with_context(|| format!("running {} (set FLOTILLA_TOOLS_BIN)", helm().display()))?;
    ensure!(
        out.status.success(),
        "helm {} failed:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `helm template` of the chart as a release `release` in `namespace`, as JSON documents.
async fn render(release: &str, namespace: &str, extra: &[&str]) -> Result<Vec<Value>> {
    let chart = chart().to_string_lossy().into_owned();
    let mut args = vec![
        "template",
        release,
        chart.as_str(),
        "--namespace",
        namespace,
    ];
    args.extend_from_slice(extra);
    let yaml = helm_run(&args).await?;
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&yaml).context("parsing helm template output")?;
    Ok(docs.into_iter().filter(|d| d.is_object()).collect())
}

#[tokio::test]
async fn the_chart_lints_and_renders_every_controller() -> Result<()> {
    let chart = chart().to_string_lossy().into_owned();
    helm_run(&["lint", &chart, "--strict"]).await?;
    let docs = render("flotilla", "flotilla-system", &["--include-crds"]).await?;
    let count = |kind: &str| docs.iter().filter(|d| d["kind"] == kind).count();
    ensure!(
        count("CustomResourceDefinition") == 5,
        "the chart installs the 5 CRDs"
    );
    for kind in [
        "Deployment",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ] {
        ensure!(
            count(kind) == CONTROLLERS.len(),
            "one {kind} per controller, got {}",
            count(kind)
        );
    }
    for d in docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
    {
        for rule in d["rules"].as_array().into_iter().flatten() {
            let text = rule.to_string();
            ensure!(!text.contains("\"*\""), "no wildcard rights: {text}");
        }
    }
    // Disabling a controller removes all of its objects.
    let docs = render(
        "flotilla",
        "flotilla-system",
        &["--set", "syncer.enabled=false"],
    )
    .await?;
    ensure!(
        !docs.iter().any(|d| d["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.contains("syncer"))),
        "syncer.enabled=false renders no syncer objects"
    );
    Ok(())
}

/// A kubeconfig for the hub that authenticates with `token`.
fn kubeconfig_with_token(env: &Environment, token: &str) -> Result<PathBuf> {
    let admin = std::fs::read_to_string(&env.hub.kubeconfig)?;
    let admin_token = admin
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .ok_or_else(|| anyhow!("no token in the hub kubeconfig"))?;
    let path =
        flotilla_e2e::scratch_dir().join(format!("flotilla-e2e-sa-{}.kubeconfig", random_suffix()));
    std::fs::write(&path, admin.replace(admin_token, token))?;
    Ok(path)
}

async fn token_for(hub: &Client, namespace: &str, service_account: &str) -> Result<String> {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let response = Api::<ServiceAccount>::namespaced(hub.clone(), namespace)
        .create_token_request(service_account, &PostParams::default(), &request)
        .await?;
    response
        .status
        .and_then(|s| s.token)
        .ok_or_else(|| anyhow!("no token for {namespace}/{service_account}"))
}

/// Asks the hub whether `user` may `verb` `resource` in `namespace`.
async fn allowed(
    hub: &Client,
    user: &str,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
) -> Result<bool> {
    let request = Request {
        verb,
        group,
        resource,
        namespace,
        name: None,
    };
    access::allowed(hub, user, &[], request).await
}

#[tokio::test]
async fn controllers_run_with_the_charts_own_service_accounts() -> Result<()> {
    let env = Environment::get();
    let hub = env.hub.client().await?;
    api::install_crds(&hub).await?;
    let ns = TestNamespace::create("chart", &[&env.hub]).await?;
    let release = format!("e2e-{}", random_suffix());
    let mut cleanup = ClusterScopedObjects::new(&env.hub);

    // Install the chart's ServiceAccounts and RBAC (there are no container images here, so the
    // Deployments are left out and the binaries run as local processes with the same identity).
    for doc in render(&release, ns.name(), &[]).await? {
        if doc["kind"] == "Deployment" {
            continue;
        }
        let (resource, scope) = api::resource_of(&hub, &doc).await?;
        let name = doc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        api::apply(&hub, &doc, false)
            .await?
            .with_context(|| format!("applying {} {name}", resource.kind))?;
        if scope == kube::discovery::Scope::Cluster {
            cleanup.add(resource, name);
        }
    }

    let selector = format!("e2e.flotilla.dev/chart={release}");
    // Declared before the processes, so dropped after them.
    let _cleanup = ClusterCleanup::new(&env.hub, selector.clone());
    let mut processes = Vec::new();
    for controller in CONTROLLERS {
        let sa = format!("{release}-{controller}");
        let token = token_for(&hub, ns.name(), &sa).await?;
        let kubeconfig = kubeconfig_with_token(&env, &token)?;
        let kubeconfig = kubeconfig.to_string_lossy().into_owned();
        let mut args = vec![
            "--kubeconfig",
            kubeconfig.as_str(),
            "--lease-namespace",
            ns.name(),
        ];
        if controller == "splitter" {
            args.extend([
                "--cluster-selector",
                selector.as_str(),
                "--namespace",
                ns.name(),
            ]);
        }
        if controller == "syncer" {
            args.extend([
                "--cluster-selector",
                selector.as_str(),
                "--kubeconfig-secret-namespace",
                ns.name(),
            ]);
        }
        if controller == "registration" {
            args.extend([
                "--cluster-selector",
                selector.as_str(),
                "--kubeconfig-secret-namespace",
                ns.name(),
                "--probe-interval",
                "2s",
            ]);
        }
        let p = ControllerProcess::start(&format!("flotilla-{controller}"), &args)?;
        processes.push((controller, p));
    }
    for (controller, p) in &processes {
        wait_for(
            &format!("flotilla-{controller} with its ServiceAccount to be ready (Lease held, caches synced)"),
            Duration::from_secs(30),
            || async {
                let (code, body) = p.get("/readyz").await?;
                Ok(if code == 200 {
                    Seen::Done(())
                } else {
                    Seen::not_yet(format!("{code} {body}; log:\n{}", p.log()))
                })
            },
        )
        .await?;
    }

    // Registration with its own identity: a push member gets Ready (reads the kubeconfig Secret
    // in its namespace), a pull member gets its agent RBAC (no privilege escalation needed), and
    // removal cleans up.
    let member = &env.require_members(1)?[0];
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("member-kubeconfig".into()),
            ..ObjectMeta::default()
        },
        data: Some(
            [(
                "kubeconfig".to_string(),
                ByteString(std::fs::read(&member.kubeconfig)?),
            )]
            .into(),
        ),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(hub.clone(), ns.name())
        .create(&PostParams::default(), &secret)
        .await?;
    let clusters: Api<Cluster> = Api::all(hub.clone());
    let push = format!("e2e-{}", random_suffix());
    let pull = format!("e2e-{}", random_suffix());
    for (name, spec) in [
        (
            &push,
            json!({"syncMode": "Push", "kubeconfigSecretRef": {"name": "member-kubeconfig"}}),
        ),
        (&pull, json!({"syncMode": "Pull", "hubAcceptsClient": true})),
    ] {
        let c: Cluster = serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Cluster",
            "metadata": {"name": name, "labels": {"e2e.flotilla.dev/chart": release}},
            "spec": spec,
        }))?;
        clusters.create(&PostParams::default(), &c).await?;
    }
    let registration = &processes[0].1;
    wait_for(
        &format!("Cluster {push} to be Ready with the registration ServiceAccount"),
        Duration::from_secs(60),
        || async {
            let c = clusters.get(&push).await?;
            let ready = c
                .status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|x| x.type_ == "Ready").cloned());
            Ok(match ready {
                Some(r) if r.status == "True" => Seen::Done(()),
                other => Seen::not_yet(format!("{other:?}; log:\n{}", registration.log())),
            })
        },
    )
    .await?;
    let bindings: Api<ClusterRoleBinding> = Api::all(hub.clone());
    wait_for(
        &format!("the agent RBAC of {pull}"),
        Duration::from_secs(30),
        || async {
            Ok(
                match bindings
                    .get_opt(&format!("flotilla:cluster:{pull}:agent"))
                    .await?
                {
                    Some(_) => Seen::Done(()),
                    None => Seen::not_yet(format!("no binding; log:\n{}", registration.log())),
                },
            )
        },
    )
    .await?;
    for name in [&push, &pull] {
        clusters.delete(name, &DeleteParams::default()).await?;
    }
    wait_for(
        "both Clusters to be removed by the registration ServiceAccount",
        Duration::from_secs(60),
        || async {
            let mut left = Vec::new();
            for name in [&push, &pull] {
                if clusters.get_opt(name).await?.is_some() {
                    left.push(name.clone());
                }
            }
            Ok(if left.is_empty() {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("left: {left:?}"))
            })
        },
    )
    .await?;
    ensure!(
        bindings
            .get_opt(&format!("flotilla:cluster:{pull}:agent"))
            .await?
            .is_none(),
        "the agent RBAC is gone"
    );

    // ... and nothing more than it needs.
    let user = |c: &str| format!("system:serviceaccount:{}:{release}-{c}", ns.name());
    let denied = [
        ("registration", "get", "", "secrets", Some("kube-system")),
        (
            "registration",
            "create",
            "apps",
            "deployments",
            Some(ns.name()),
        ),
        ("syncer", "list", "", "secrets", Some("kube-system")),
        ("syncer", "delete", "flotilla.dev", "clusters", None),
        ("splitter", "create", "flotilla.dev", "clusters", None),
        ("negotiator", "get", "", "secrets", Some(ns.name())),
    ];
    for (controller, verb, group, resource, namespace) in denied {
        ensure!(
            !allowed(&hub, &user(controller), verb, group, resource, namespace).await?,
            "flotilla-{controller}'s ServiceAccount must not {verb} {resource} in {namespace:?}"
        );
    }
    ensure!(
        allowed(
            &hub,
            &user("registration"),
            "get",
            "",
            "secrets",
            Some(ns.name())
        )
        .await?
    );
    ensure!(!names::agent_user_name(&pull).is_empty());
    Ok(())
}
