//! The Helm chart: it lints and renders, and its RBAC is enough — and no more than enough — for
//! each controller: the controllers run against the real hub with the chart's own
//! ServiceAccount tokens.

use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use flotilla_api::{ApiResourceImport, Cluster, names};
use flotilla_e2e::access::{self, Request};
use flotilla_e2e::api;
use flotilla_e2e::chart::{ChartIdentities, chart, helm_run, render};
use flotilla_e2e::clusters::{ClusterCleanup, register_push};
use flotilla_e2e::process::ControllerProcess;
use flotilla_e2e::{Environment, Seen, TestNamespace, random_suffix, wait_for};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

const CONTROLLERS: [&str; 4] = ["registration", "syncer", "splitter", "negotiator"];

#[tokio::test]
async fn the_chart_lints_and_renders_every_controller() -> Result<()> {
    let chart = chart().to_string_lossy().into_owned();
    helm_run(&["lint", &chart, "--strict"]).await?;
    // The hub's CRDs are applied by the setup Job from its ConfigMap (embedded and external).
    for mode in ["embedded", "external"] {
        let docs = render(
            "flotilla",
            "flotilla-system",
            &[
                "--set",
                &format!("hub.mode={mode}"),
                "--set",
                "hub.external.kubeconfigSecret=hub",
            ],
        )
        .await?;
        let setup = docs
            .iter()
            .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "flotilla-hub-setup")
            .context("the ConfigMap of the setup Job")?;
        let crds = setup["data"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, v)| {
                v.as_str()
                    .is_some_and(|v| v.contains("kind: CustomResourceDefinition"))
            })
            .count();
        ensure!(
            crds == 7,
            "{mode}: the setup Job applies the 7 CRDs, got {crds}"
        );
    }
    let docs = render("flotilla", "flotilla-system", &[]).await?;
    let count = |kind: &str| docs.iter().filter(|d| d["kind"] == kind).count();
    // One of each per controller; and for pull-mode agents two ClusterRoles (in their
    // namespace, and certificate requests) and the binding of the second, the syncer's
    // ClusterRole for Works' Secret data (which registration binds per member), the splitter's
    // Role and RoleBinding in each of its two Pod Security check namespaces, the Role and
    // RoleBinding that let registration and the negotiator read the read-only kubeconfigs, and
    // the certificate approval webhook's Deployment, ServiceAccount and ClusterRole (get
    // Clusters) with its binding.
    for (kind, more) in [
        ("Deployment", 1),
        ("ServiceAccount", 1),
        ("ClusterRole", 4),
        ("ClusterRoleBinding", 2),
        ("Role", 3),
        ("RoleBinding", 3),
    ] {
        ensure!(
            count(kind) == CONTROLLERS.len() + more,
            "one {kind} per controller (and {more} more), got {}",
            count(kind)
        );
    }
    // The check namespaces enforce their level; the splitter's ClusterRole creates no Pods.
    for level in ["baseline", "restricted"] {
        let ns = docs
            .iter()
            .find(|d| {
                d["kind"] == "Namespace"
                    && d["metadata"]["name"] == format!("flotilla-pod-security-{level}").as_str()
            })
            .with_context(|| format!("the {level} check namespace"))?;
        ensure!(
            ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == level,
            "the {level} check namespace enforces {level}"
        );
    }
    ensure!(
        !docs
            .iter()
            .any(|d| d["kind"] == "ClusterRole" && d["rules"].to_string().contains("\"pods\"")),
        "no ClusterRole of the chart creates Pods"
    );
    // An unknown default level fails the install, naming the value.
    let bad = helm_run(&[
        "template",
        "flotilla",
        &chart,
        "--set",
        "hub.mode=inCluster",
        "--set",
        "podSecurity.defaultLevel=strict",
    ])
    .await
    .err()
    .map(|e| format!("{e:#}"))
    .unwrap_or_default();
    ensure!(
        bad.contains("podSecurity.defaultLevel: \"strict\" is not a Pod Security level"),
        "podSecurity.defaultLevel=strict fails the install: {bad}"
    );
    // The agent ClusterRole grants what the one of deploy/bootstrap does.
    let rules_of = |docs: &[Value], name: &str| {
        docs.iter()
            .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == name)
            .map(|d| d["rules"].clone())
    };
    let bootstrap: Vec<Value> = serde_saphyr::from_multiple(&std::fs::read_to_string(
        flotilla_e2e::bootstrap::bootstrap_dir().join("agent-clusterrole.yaml"),
    )?)?;
    ensure!(
        rules_of(&docs, "flotilla:flotilla:agent").is_some()
            && rules_of(&docs, "flotilla:flotilla:agent") == rules_of(&bootstrap, "flotilla:agent"),
        "the chart's agent ClusterRole and deploy/bootstrap's must grant the same"
    );
    for d in docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
    {
        for rule in d["rules"].as_array().into_iter().flatten() {
            let text = rule.to_string();
            ensure!(!text.contains("\"*\""), "no wildcard rights: {text}");
        }
    }
    // The splitter may read every kind of the table of kinds, and write the status of those
    // whose status it shows on the hub.
    let splitter = rules_of(&docs, "flotilla:flotilla:splitter").context("the splitter's rules")?;
    let grants = |group: &str, resource: &str, verb: &str| {
        splitter.as_array().into_iter().flatten().any(|r| {
            let has = |field: &str, v: &str| {
                r[field]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|x| x == v))
            };
            has("apiGroups", group)
                && has("resources", resource)
                && has("verbs", verb)
                && r.get("resourceNames").is_none()
        })
    };
    let mut missing = Vec::new();
    for kind in flotilla_interpreter::KINDS {
        for (resource, verbs) in kind.hub_rights() {
            for verb in verbs {
                if !grants(kind.group, &resource, verb) {
                    missing.push(format!("{verb} {resource}.{}", kind.group));
                }
            }
        }
    }
    ensure!(
        missing.is_empty(),
        "the chart's splitter lacks rights the table of kinds needs: {}",
        missing.join(", ")
    );
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

/// The pod templates' `checksum/*` annotations are strings in the YAML itself: a hash that
/// happens to read as a number (`3e77060726409293` is a float, out of range; all digits an
/// integer) would make the annotation a number, which the apiserver refuses, failing one
/// install in about a thousand.
#[tokio::test]
async fn every_checksum_annotation_is_a_quoted_string_whatever_the_hash() -> Result<()> {
    let chart = chart().to_string_lossy().into_owned();
    for mode in ["embedded", "inCluster"] {
        let set = format!("hub.mode={mode}");
        let yaml = helm_run(&[
            "template",
            "flotilla",
            &chart,
            "--namespace",
            "flotilla-system",
            "--set",
            &set,
        ])
        .await?;
        let checksums: Vec<&str> = yaml
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("checksum/"))
            .collect();
        ensure!(
            !checksums.is_empty(),
            "{mode}: no checksum annotation rendered"
        );
        let bare: Vec<&&str> = checksums
            .iter()
            .filter(|l| l.split_once(": ").is_none_or(|(_, v)| !v.starts_with('"')))
            .collect();
        ensure!(bare.is_empty(), "{mode}: checksums not quoted: {bare:?}");
    }
    Ok(())
}

#[tokio::test]
async fn controllers_run_with_the_charts_own_service_accounts() -> Result<()> {
    let _one_at_a_time = crate::ONE_NEGOTIATOR.lock().await;
    let env = Environment::get();
    let hub = env.hub.client().await?;
    api::install_crds(&hub).await?;
    let ns = TestNamespace::create("chart", &[&env.hub]).await?;

    // Install the chart's ServiceAccounts and RBAC (there are no container images here, so the
    // binaries run as local processes with the same identity).
    let identities = ChartIdentities::install(ns.name()).await?;
    let release = identities.release.clone();

    let selector = format!("e2e.flotilla.dev/chart={release}");
    // Declared before the processes, so dropped after them.
    let _cleanup = ClusterCleanup::new(&env.hub, selector.clone());
    let mut processes = Vec::new();
    for controller in CONTROLLERS {
        let own = identities.args(controller)?;
        let mut args: Vec<&str> = own.iter().map(String::as_str).collect();
        args.extend(["--lease-namespace", ns.name()]);
        if controller == "splitter" {
            args.extend([
                "--cluster-selector",
                selector.as_str(),
                "--namespace",
                ns.name(),
            ]);
        }
        if controller == "negotiator" {
            args.extend([
                "--cluster-selector",
                selector.as_str(),
                "--kubeconfig-secret-namespace",
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

    // Registration with its own identity: a push member gets Ready (reads the read-only
    // kubeconfig Secret in the readers' namespace), a pull member gets its agent RBAC (no privilege escalation needed), and
    // removal cleans up.
    let member = &env.require_members(1)?[0];
    let clusters: Api<Cluster> = Api::all(hub.clone());
    let push = format!("e2e-{}", random_suffix());
    let pull = format!("e2e-{}", random_suffix());
    register_push(
        &hub,
        ns.name(),
        &push,
        member,
        ("e2e.flotilla.dev/chart", &release),
    )
    .await?;
    let c: Cluster = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "Cluster",
        "metadata": {"name": pull, "labels": {"e2e.flotilla.dev/chart": release}},
        "spec": {"syncMode": "Pull", "hubAcceptsClient": true},
    }))?;
    clusters.create(&PostParams::default(), &c).await?;
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
    // The negotiator with its own identity: imports the push member's Deployment schema
    // (reading the kubeconfig Secret and the member) and negotiates it.
    let negotiator = &processes[3].1;
    let imports: Api<ApiResourceImport> =
        Api::namespaced(hub.clone(), &names::cluster_namespace(&push));
    wait_for(
        &format!("the negotiator ServiceAccount to import {push}'s Deployment schema"),
        Duration::from_secs(60),
        || async {
            let import = imports.get_opt("deployments.v1.apps").await?;
            let compatible = import.as_ref().and_then(|i| {
                let conditions = &i.status.as_ref()?.conditions;
                conditions.iter().find(|c| c.type_ == "Compatible").cloned()
            });
            Ok(match compatible {
                Some(c) if c.status == "True" => Seen::Done(()),
                other => Seen::not_yet(format!("{other:?}; log:\n{}", negotiator.log())),
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
    // ... and lists, in the pull member's namespace, the types its importer imports (it may not
    // read Placements): its RBAC and admission policy let it write that one ConfigMap there.
    let lists: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(hub.clone(), &names::cluster_namespace(&pull));
    wait_for(
        &format!("the negotiator ServiceAccount to list the types {pull} imports"),
        Duration::from_secs(30),
        || async {
            let list = lists
                .get_opt(names::IMPORT_TYPES_CONFIGMAP)
                .await?
                .and_then(|cm| cm.data?.remove("types"));
            Ok(match list {
                Some(l) if l.lines().any(|t| t == "apps/v1/Deployment") => Seen::Done(()),
                other => Seen::not_yet(format!("{other:?}; log:\n{}", negotiator.log())),
            })
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
        ("negotiator", "get", "", "secrets", Some("kube-system")),
        // The writable member kubeconfigs are the syncer's alone.
        ("registration", "get", "", "secrets", Some(ns.name())),
        ("negotiator", "get", "", "secrets", Some(ns.name())),
        ("negotiator", "list", "", "configmaps", None),
        // The approval webhook reads single Clusters, nothing else.
        ("csr-approval", "list", "flotilla.dev", "clusters", None),
        ("csr-approval", "patch", "flotilla.dev", "clusters", None),
        ("csr-approval", "get", "", "secrets", Some(ns.name())),
        (
            "csr-approval",
            "update",
            "certificates.k8s.io",
            "certificatesigningrequests",
            None,
        ),
        ("negotiator", "get", "", "configmaps", Some("kube-system")),
        (
            "negotiator",
            "delete",
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            None,
        ),
    ];
    for (controller, verb, group, resource, namespace) in denied {
        ensure!(
            !allowed(&hub, &user(controller), verb, group, resource, namespace).await?,
            "flotilla-{controller}'s ServiceAccount must not {verb} {resource} in {namespace:?}"
        );
    }
    let readers = flotilla_e2e::clusters::readers_namespace(ns.name());
    for controller in ["registration", "negotiator"] {
        ensure!(
            allowed(
                &hub,
                &user(controller),
                "get",
                "",
                "secrets",
                Some(&readers)
            )
            .await?,
            "flotilla-{controller} reads the read-only kubeconfigs in {readers}"
        );
    }
    ensure!(allowed(&hub, &user("syncer"), "get", "", "secrets", Some(ns.name())).await?);
    ensure!(!names::agent_user_name(&pull).is_empty());
    Ok(())
}

/// Every container's args in rendered `docs`, with the name of its workload.
fn every_container_args(docs: &[Value]) -> Vec<(String, Vec<String>)> {
    docs.iter()
        .filter(|d| {
            matches!(
                d["kind"].as_str(),
                Some("Deployment" | "StatefulSet" | "DaemonSet")
            )
        })
        .flat_map(|d| {
            let name = d["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            d["spec"]["template"]["spec"]["containers"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |c| {
                    let args = c["args"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|a| a.as_str().map(String::from))
                        .collect();
                    (name.clone(), args)
                })
        })
        .collect()
}

/// The hosts of the addresses a container's `args` listen on: `--metrics-address=`,
/// `--health-address=`, `--*bind-address=` and etcd's `--listen-*-urls=`.
fn listen_hosts(args: &[String]) -> Vec<(String, String)> {
    let mut hosts = Vec::new();
    for arg in args {
        let Some((flag, value)) = arg.split_once('=') else {
            continue;
        };
        let listens = matches!(flag, "--metrics-address" | "--health-address")
            || flag.ends_with("bind-address")
            || (flag.starts_with("--listen-") && flag.ends_with("-urls"));
        if !listens {
            continue;
        }
        for address in value.split(',') {
            let address = address.split_once("://").map_or(address, |(_, rest)| rest);
            let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
            hosts.push((flag.to_string(), host.to_string()));
        }
    }
    hosts
}

/// With hostNetwork the pods share the node's network: nothing of the hub listens there but the
/// hub's apiserver (its `bindAddress`): etcd's client, peer and metrics ports, the
/// controller-manager and every controller's metrics and health listen on 127.0.0.1, and etcd's
/// peer port takes only TLS clients with a certificate of the hub's etcd CA.
#[tokio::test]
async fn with_host_network_only_the_hub_apiserver_listens_on_the_nodes_network() -> Result<()> {
    let docs = render(
        "flotilla",
        "flotilla-system",
        &["--set", "hub.mode=embedded", "--set", "hostNetwork=true"],
    )
    .await?;
    let containers = every_container_args(&docs);
    ensure!(
        containers.len() >= 7,
        "hub and controllers rendered: {containers:?}"
    );
    let mut checked = 0;
    for (workload, args) in &containers {
        for (flag, host) in listen_hosts(args) {
            if workload.ends_with("-apiserver") && flag == "--bind-address" {
                continue;
            }
            ensure!(
                host == "127.0.0.1",
                "{workload} {flag} listens on {host}, on the node's network"
            );
            checked += 1;
        }
        if args.iter().any(|a| a.starts_with("--listen-peer-urls=")) {
            for needed in [
                "--listen-peer-urls=https://",
                "--peer-cert-file=",
                "--peer-trusted-ca-file=",
                "--peer-client-cert-auth=true",
            ] {
                ensure!(
                    args.iter().any(|a| a.starts_with(needed)),
                    "{workload}: etcd's peer port must take TLS clients only ({needed}): {args:?}"
                );
            }
        }
    }
    ensure!(checked >= 12, "every listener checked: {checked}");
    // Without hostNetwork, the pod's own addresses (a Service or Prometheus reaches them).
    let docs = render(
        "flotilla",
        "flotilla-system",
        &["--set", "hub.mode=embedded"],
    )
    .await?;
    let metrics = deployment_args(&docs, "splitter")?;
    ensure!(
        metrics
            .iter()
            .any(|a| a.starts_with("--metrics-address=0.0.0.0:")),
        "{metrics:?}"
    );
    Ok(())
}

/// No tenant fills the hub's etcd: it has a quota below its volume and a defragmentation
/// CronJob, and the splitter's byte budget per namespace is an eighth of that quota unless set;
/// a quota that does not fit the volume, or a budget that is no quantity, fails the render.
/// The Secret `name` of a render, its key `key` decoded.
fn secret_value(docs: &[Value], name: &str, key: &str) -> Result<String> {
    use base64::Engine as _;
    let secret = docs
        .iter()
        .find(|d| d["kind"] == "Secret" && d["metadata"]["name"] == name)
        .with_context(|| format!("the Secret {name}"))?;
    let encoded = secret["data"][key]
        .as_str()
        .with_context(|| format!("{name} has no {key}"))?;
    Ok(String::from_utf8(
        base64::engine::general_purpose::STANDARD.decode(encoded)?,
    )?)
}

#[tokio::test]
async fn the_embedded_hubs_admin_credential_expires_and_is_no_system_master() -> Result<()> {
    use base64::Engine as _;
    let render_with = |extra: &'static [&'static str]| async move {
        let mut set = vec!["--set", "hub.mode=embedded"];
        set.extend_from_slice(extra);
        render("flotilla", "flotilla-system", &set).await
    };
    // The admin's certificate: its user, groups and how long it is valid.
    let admin = |docs: &[Value]| -> Result<(String, Vec<String>, i64)> {
        let kubeconfig: Value = serde_saphyr::from_str(&secret_value(
            docs,
            "flotilla-hub-admin-kubeconfig",
            "kubeconfig",
        )?)?;
        let user = &kubeconfig["users"][0]["user"];
        ensure!(
            user.get("token").is_none(),
            "the admin kubeconfig holds no static token: {user}"
        );
        let pem = base64::engine::general_purpose::STANDARD.decode(
            user["client-certificate-data"]
                .as_str()
                .context("the admin kubeconfig has a client certificate")?,
        )?;
        let (_, pem) = x509_parser::pem::parse_x509_pem(&pem)?;
        let cert = pem.parse_x509()?;
        let subject = cert.subject();
        let cn = subject
            .iter_common_name()
            .filter_map(|a| a.as_str().ok())
            .collect::<Vec<_>>()
            .join(",");
        let groups = subject
            .iter_organization()
            .filter_map(|a| a.as_str().ok().map(str::to_string))
            .collect();
        let validity = cert.validity();
        let days = (validity.not_after.timestamp() - validity.not_before.timestamp()) / 86_400;
        Ok((cn, groups, days))
    };
    // What the setup Job applies binds cluster-admin to that user only.
    let bound = |docs: &[Value]| -> Result<String> {
        let setup = docs
            .iter()
            .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "flotilla-hub-setup")
            .context("the ConfigMap of the setup Job")?;
        let objects: Vec<Value> = serde_saphyr::from_multiple(
            setup["data"]["20-flotilla.yaml"]
                .as_str()
                .context("the setup Job's objects")?,
        )?;
        let binding = objects
            .iter()
            .find(|o| {
                o["kind"] == "ClusterRoleBinding"
                    && o["metadata"]["name"] == "flotilla:flotilla:hub-admin"
            })
            .context("the hub admin's ClusterRoleBinding")?;
        ensure!(binding["roleRef"]["name"] == "cluster-admin", "{binding}");
        let subjects = binding["subjects"].as_array().cloned().unwrap_or_default();
        ensure!(
            subjects.len() == 1 && subjects[0]["kind"] == "User",
            "{binding}"
        );
        Ok(subjects[0]["name"].as_str().unwrap_or_default().to_string())
    };

    let docs = render_with(&[]).await?;
    let (user, groups, days) = admin(&docs)?;
    ensure!(user == "flotilla-admin-g1", "the admin's user: {user}");
    ensure!(
        groups.is_empty(),
        "the admin is in no group (no system:masters): {groups:?}"
    );
    ensure!(
        days == 30,
        "the admin's certificate is valid 30 days, not {days}"
    );
    ensure!(bound(&docs)? == user, "cluster-admin is bound to {user}");
    let tokens = secret_value(&docs, "flotilla-hub-pki", "tokens.csv")?;
    let masters: Vec<&str> = tokens
        .lines()
        .filter(|l| l.contains("system:masters"))
        .map(|l| l.split(',').nth(1).unwrap_or_default())
        .collect();
    ensure!(
        masters == ["flotilla-setup"],
        "only the setup Job's token is in system:masters: {masters:?}"
    );
    let job = docs
        .iter()
        .find(|d| {
            d["kind"] == "Job"
                && d["metadata"]["labels"]["app.kubernetes.io/component"] == "hub-setup"
        })
        .context("the setup Job")?;
    ensure!(
        job.to_string().contains("flotilla-hub-setup-kubeconfig"),
        "the setup Job uses its own kubeconfig, not the admin's"
    );

    // Rotated: a new user, the only one bound; valid as long as asked.
    let docs = render_with(&[
        "--set",
        "hub.adminCredential.generation=2",
        "--set",
        "hub.adminCredential.validityDays=7",
    ])
    .await?;
    let (user, _, days) = admin(&docs)?;
    ensure!(
        user == "flotilla-admin-g2" && days == 7,
        "{user} for {days} days"
    );
    ensure!(bound(&docs)? == user, "only the rotated user is bound");
    Ok(())
}

#[tokio::test]
async fn the_hubs_etcd_has_a_quota_and_is_defragmented_and_each_namespace_a_byte_budget()
-> Result<()> {
    let embedded = ["--set", "hub.mode=embedded"];
    let docs = render("flotilla", "flotilla-system", &embedded).await?;
    let etcd = every_container_args(&docs)
        .into_iter()
        .find(|(w, _)| w == "flotilla-etcd")
        .map(|(_, a)| a)
        .context("the etcd StatefulSet")?;
    ensure!(
        etcd.contains(&"--quota-backend-bytes=4294967296".to_string()),
        "{etcd:?}"
    );
    let splitter = deployment_args(&docs, "splitter")?;
    ensure!(
        splitter.contains(&"--max-copy-bytes-per-namespace=536870912".to_string()),
        "an eighth of the quota: {splitter:?}"
    );
    let cronjob = docs
        .iter()
        .find(|d| d["kind"] == "CronJob" && d["metadata"]["name"] == "flotilla-etcd-defrag")
        .context("the defragmentation CronJob")?;
    let pod = &cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    ensure!(
        pod["initContainers"][0]["args"]
            .as_array()
            .is_some_and(|a| a.last() == Some(&json!("defrag"))),
        "{pod}"
    );
    let mut set = embedded.to_vec();
    set.extend(["--set", "splitter.maxCopyBytesPerNamespace=64Mi"]);
    let docs = render("flotilla", "flotilla-system", &set).await?;
    ensure!(
        deployment_args(&docs, "splitter")?
            .contains(&"--max-copy-bytes-per-namespace=67108864".to_string())
    );
    let docs = render("flotilla", "flotilla-system", &[]).await?;
    ensure!(
        !deployment_args(&docs, "splitter")?
            .iter()
            .any(|a| a.starts_with("--max-copy-bytes-per-namespace")),
        "another hub: the splitter's own default"
    );
    for (value, says) in [
        (
            "hub.etcd.quotaBackendBytes=9Gi",
            "must be below hub.etcd.persistence.size",
        ),
        (
            "splitter.maxCopyBytesPerNamespace=lots",
            "splitter.maxCopyBytesPerNamespace: \"lots\" is not a quantity",
        ),
    ] {
        let mut set = embedded.to_vec();
        set.extend(["--set", value]);
        match render("flotilla", "flotilla-system", &set).await {
            Ok(_) => anyhow::bail!("{value} must fail the render"),
            Err(e) => ensure!(format!("{e:#}").contains(says), "{value}: {e:#}"),
        }
    }
    Ok(())
}

/// The container args of `controller`'s Deployment in rendered `docs`.
fn deployment_args(docs: &[Value], controller: &str) -> Result<Vec<String>> {
    let deployment = docs
        .iter()
        .find(|d| {
            d["kind"] == "Deployment" && d["metadata"]["name"] == format!("flotilla-{controller}")
        })
        .ok_or_else(|| anyhow!("no Deployment flotilla-{controller}"))?;
    Ok(
        deployment["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a.as_str().map(String::from))
            .collect(),
    )
}

/// Whether the Role of `controller` grants listing every Lease of the release namespace.
fn lists_leases(docs: &[Value], controller: &str) -> bool {
    docs.iter()
        .filter(|d| {
            d["kind"] == "Role" && d["metadata"]["name"] == format!("flotilla-{controller}")
        })
        .flat_map(|d| d["rules"].as_array().cloned().unwrap_or_default())
        .any(|r| {
            r["resources"] == json!(["leases"])
                && r["resourceNames"].is_null()
                && r["verbs"]
                    .as_array()
                    .is_some_and(|v| v.contains(&json!("list")))
        })
}

#[tokio::test]
async fn syncer_shard_by_cluster_renders_sharding_for_the_syncer_only() -> Result<()> {
    const SHARD_FLAGS: [&str; 5] = [
        "--leader-elect=false",
        "--shard-by-cluster",
        "--shard-lease-namespace=flotilla-system",
        "--shard-lease-duration=15s",
        "--shard-retry-period=2s",
    ];
    // Default: every controller, the syncer too, elects a leader; no Lease is listable.
    let docs = render("flotilla", "flotilla-system", &[]).await?;
    for controller in CONTROLLERS {
        let args = deployment_args(&docs, controller)?;
        ensure!(
            args.iter().any(|a| a == "--leader-elect=true")
                && !args.iter().any(|a| a.starts_with("--shard-")),
            "{controller} without sharding: {args:?}"
        );
        ensure!(
            !lists_leases(&docs, controller),
            "{controller} lists Leases"
        );
    }

    // syncer.shardByCluster=true: the syncer shares the members by Lease and needs no leader;
    // extraArgs come last, for the controller they are given to only.
    let docs = render(
        "flotilla",
        "flotilla-system",
        &[
            "--set",
            "syncer.shardByCluster=true",
            "--set",
            "syncer.extraArgs={--resync-interval=1m}",
            "--set",
            "splitter.extraArgs={--namespace=apps}",
            "--set-json",
            r#"splitter.extraRules=[{"apiGroups":["example.com"],"resources":["widgets"],"verbs":["get","list","watch"]}]"#,
        ],
    )
    .await?;
    // extraRules reach the splitter's ClusterRole only.
    let widget_readers: Vec<String> = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRole")
        .filter(|d| {
            d["rules"].as_array().is_some_and(|rules| {
                rules.iter().any(|r| {
                    r["apiGroups"] == json!(["example.com"]) && r["resources"] == json!(["widgets"])
                })
            })
        })
        .filter_map(|d| d["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    ensure!(
        widget_readers == ["flotilla:flotilla:splitter"],
        "splitter.extraRules must reach the splitter's ClusterRole only: {widget_readers:?}"
    );
    let syncer = deployment_args(&docs, "syncer")?;
    for flag in SHARD_FLAGS {
        ensure!(
            syncer.iter().any(|a| a == flag),
            "syncer has {flag}: {syncer:?}"
        );
    }
    ensure!(
        syncer
            .iter()
            .filter(|a| a.starts_with("--leader-elect"))
            .count()
            == 1
            && !syncer.iter().any(|a| a.starts_with("--lease-")),
        "a sharded syncer has no leader-election flags but --leader-elect=false: {syncer:?}"
    );
    ensure!(
        syncer.last().map(String::as_str) == Some("--resync-interval=1m"),
        "extraArgs come last: {syncer:?}"
    );
    ensure!(
        lists_leases(&docs, "syncer"),
        "the sharded syncer may list its Leases"
    );
    for controller in ["registration", "splitter", "negotiator"] {
        let args = deployment_args(&docs, controller)?;
        ensure!(
            args.iter().any(|a| a == "--leader-elect=true")
                && !args
                    .iter()
                    .any(|a| a.starts_with("--shard-") || a == "--resync-interval=1m"),
            "{controller} keeps leader election: {args:?}"
        );
        ensure!(
            !lists_leases(&docs, controller),
            "{controller} lists Leases"
        );
    }
    let splitter = deployment_args(&docs, "splitter")?;
    ensure!(
        splitter.last().map(String::as_str) == Some("--namespace=apps"),
        "splitter.extraArgs: {splitter:?}"
    );
    Ok(())
}

/// What RBAC cannot say, the chart's admission policies do: the negotiator's ServiceAccount may
/// write the CRDs it publishes, and no other — not Flotilla's own (it could otherwise give
/// `works.flotilla.dev` a conversion webhook), not one it did not publish.
#[tokio::test]
async fn the_negotiator_writes_only_the_crds_it_publishes() -> Result<()> {
    let env = Environment::get();
    let hub = env.hub.client().await?;
    api::install_crds(&hub).await?;
    let ns = TestNamespace::create("chart-vap", &[&env.hub]).await?;
    let identities = ChartIdentities::install(ns.name()).await?;
    let negotiator = identities.client("negotiator").await?;
    let crd = |name: &str, group: &str, published: bool| {
        let labels = if published {
            json!({"flotilla.dev/published": "true"})
        } else {
            json!({})
        };
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": format!("{name}.{group}"), "labels": labels},
               "spec": {"group": group, "scope": "Namespaced",
                        "names": {"plural": name, "singular": name.trim_end_matches('s'), "kind": "Gadget"},
                        "versions": [{"name": "v1", "served": true, "storage": true,
                                      "schema": {"openAPIV3Schema": {"type": "object"}}}]}})
    };
    let group = format!("e2e-{}.example.com", random_suffix());
    let denied = |result: Result<std::result::Result<kube::api::DynamicObject, kube::Error>>,
                  says: &str|
     -> Result<Seen<()>> {
        Ok(match result? {
            Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains(says) => Seen::Done(()),
            other => Seen::not_yet(format!("{other:?}")),
        })
    };
    // Policies take a moment to be enforced once created.
    wait_for(
        "a patch of works.flotilla.dev by the negotiator to be refused",
        Duration::from_secs(30),
        || async {
            let mut works = serde_json::to_value(
                Api::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>::all(hub.clone())
                    .get("works.flotilla.dev")
                    .await?,
            )?;
            works["metadata"]["labels"] = json!({"e2e": "poke"});
            works["metadata"]["managedFields"] = Value::Null;
            denied(
                api::apply(&negotiator, &works, true).await,
                "only write the CRDs it publishes",
            )
        },
    )
    .await?;
    // Labelling Flotilla's own group published changes nothing.
    let own = denied(
        api::create(&negotiator, &crd("gadgets", "flotilla.dev", true), true).await,
        "Flotilla's own CRDs",
    )?;
    ensure!(
        matches!(own, Seen::Done(())),
        "a published CRD of group flotilla.dev must be refused"
    );
    // What it publishes, it may write.
    api::create(&negotiator, &crd("gadgets", &group, true), true)
        .await?
        .map_err(|e| anyhow!("the negotiator may create a CRD it publishes: {e}"))?;
    // And nothing else.
    let unlabelled = denied(
        api::create(&negotiator, &crd("gadgets", &group, false), true).await,
        "only write the CRDs it publishes",
    )?;
    ensure!(
        matches!(unlabelled, Seen::Done(())),
        "an unlabelled CRD from the negotiator must be refused"
    );
    Ok(())
}

/// The code of a refused request, and its message.
fn refusal<T: std::fmt::Debug>(result: std::result::Result<T, kube::Error>) -> (u16, String) {
    match result {
        Ok(o) => (200, format!("succeeded: {o:?}")),
        Err(kube::Error::Api(s)) => (s.code, s.message),
        Err(e) => (0, e.to_string()),
    }
}

/// Each controller's ServiceAccount, with the chart's RBAC and admission policies, is refused
/// what its job does not need — with real requests, not access reviews: the registration token
/// cannot make itself a certificate for `kubeadm:cluster-admins` (neither create nor approve one),
/// cannot bind anything outside the agents' own bindings, delete a tenant's namespace or write a
/// Lease in kube-system; the syncer cannot read Secrets outside the release namespace or make
/// Works; the splitter cannot run a Pod (only dry-run one), make Clusters, or write or delete a
/// tenant's Secrets; the negotiator cannot delete CRDs, nor write a ConfigMap but its list of
/// types in a member's namespace.
#[tokio::test]
async fn no_identity_of_the_chart_can_do_more_than_its_job() -> Result<()> {
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequest, CertificateSigningRequestCondition,
        CertificateSigningRequestSpec, CertificateSigningRequestStatus,
    };
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
    use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};

    let env = Environment::get();
    let hub = env.hub.client().await?;
    api::install_crds(&hub).await?;
    let ns = TestNamespace::create("chart-deny", &[&env.hub]).await?;
    let tenant = TestNamespace::create("chart-tenant", &[&env.hub]).await?;
    let identities = ChartIdentities::install(ns.name()).await?;
    let release = identities.release.clone();
    let mut clients = std::collections::BTreeMap::new();
    for controller in CONTROLLERS {
        clients.insert(controller, identities.client(controller).await?);
    }
    let registration = clients["registration"].clone();

    // Admission policies take a moment to be enforced once created: wait until a namespace
    // registration may not make is refused (one made meanwhile is deleted with the test).
    let mut cleanup = flotilla_e2e::api::ClusterScopedObjects::new(&env.hub);
    let probe = format!("e2e-not-a-member-{}", random_suffix());
    cleanup.add(
        kube::api::ApiResource::erase::<Namespace>(&()),
        probe.clone(),
    );
    wait_for(
        "registration's policy to refuse a namespace outside flotilla-cluster-*",
        Duration::from_secs(30),
        || async {
            let (code, message) = refusal(
                Api::<Namespace>::all(registration.clone())
                    .create(
                        &PostParams::default(),
                        &serde_json::from_value(json!({"metadata": {"name": probe}}))?,
                    )
                    .await,
            );
            if code == 200 {
                Api::<Namespace>::all(hub.clone())
                    .delete(&probe, &Default::default())
                    .await?;
            }
            Ok(
                if code == 403 && message.contains("only write the flotilla-cluster-* namespaces") {
                    Seen::Done(())
                } else {
                    Seen::not_yet(format!("{code} {message}"))
                },
            )
        },
    )
    .await?;

    // A certificate request for a group a kubeadm hub binds to cluster-admin.
    let request = flotilla_e2e::bootstrap::openssl_request("mallory", &["kubeadm:cluster-admins"])?;
    let csr = |name: &str| CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        spec: CertificateSigningRequestSpec {
            request: k8s_openapi::ByteString(request.clone()),
            signer_name: names::AGENT_CSR_SIGNER.into(),
            usages: Some(vec!["client auth".into()]),
            expiration_seconds: Some(3600),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    };
    let name = format!("e2e-mallory-{}", random_suffix());
    let (code, message) = refusal(
        Api::<CertificateSigningRequest>::all(registration.clone())
            .create(&PostParams::default(), &csr(&name))
            .await,
    );
    ensure!(
        code == 403,
        "registration must not create certificate requests: {code} {message}"
    );
    // Made by someone else, registration cannot approve it either.
    let admin_csrs = Api::<CertificateSigningRequest>::all(hub.clone());
    admin_csrs
        .create(&PostParams::default(), &csr(&name))
        .await?;
    cleanup.add(
        kube::api::ApiResource::erase::<CertificateSigningRequest>(&()),
        name.clone(),
    );
    let approval = Some(CertificateSigningRequestStatus {
        conditions: Some(vec![CertificateSigningRequestCondition {
            type_: "Approved".into(),
            status: "True".into(),
            reason: Some("Evil".into()),
            message: Some("approved by a stolen token".into()),
            ..CertificateSigningRequestCondition::default()
        }]),
        ..CertificateSigningRequestStatus::default()
    });
    let mut made = admin_csrs.get(&name).await?;
    made.status = approval;
    let (code, message) = refusal(
        Api::<CertificateSigningRequest>::all(registration.clone())
            .replace_subresource("approval", &name, &PostParams::default(), &made)
            .await,
    );
    ensure!(
        code == 403 && message.contains("may only decide certificate requests"),
        "registration must not approve another requester's CSR: {code} {message}"
    );
    let approved = admin_csrs
        .get(&name)
        .await?
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default();
    ensure!(
        approved.is_empty(),
        "the request stays undecided: {approved:?}"
    );

    // RBAC: only the agents' own bindings, in their namespaces, of the agent roles.
    let agent_role = format!("flotilla:{release}:agent");
    let binding = |namespace: Option<&str>, name: &str, role: &str, subject: Value| {
        let mut b = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": if namespace.is_some() { "RoleBinding" } else { "ClusterRoleBinding" },
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [subject],
        });
        if let Some(ns) = namespace {
            b["metadata"]["namespace"] = json!(ns);
        }
        b
    };
    let me = json!({"kind": "ServiceAccount", "name": format!("{release}-registration"),
                    "namespace": ns.name()});
    let masters = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                         "name": "system:masters"});
    let uid_group = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                           "name": "system:flotilla:cluster-uid:0000"});
    let syncer_data_role = format!("flotilla:{release}:syncer-work-data");
    let syncer = json!({"kind": "ServiceAccount", "name": format!("{release}-syncer"),
                        "namespace": ns.name()});
    let member_ns = format!("flotilla-cluster-e2e-{}", random_suffix());
    Api::<Namespace>::all(hub.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": member_ns}}))?,
        )
        .await?;
    cleanup.add(
        kube::api::ApiResource::erase::<Namespace>(&()),
        member_ns.clone(),
    );
    let attempts = [
        (
            "bind the agent role in a tenant's namespace",
            binding(Some(tenant.name()), "evil", &agent_role, uid_group.clone()),
        ),
        (
            "bind cluster-admin in a member namespace",
            binding(
                Some(&member_ns),
                "flotilla-agent",
                "cluster-admin",
                uid_group.clone(),
            ),
        ),
        (
            "bind the agent role to itself",
            binding(Some(&member_ns), "flotilla-agent", &agent_role, me.clone()),
        ),
        (
            "bind cluster-admin to system:masters under an agent's name",
            binding(
                None,
                "flotilla:cluster:evil:agent",
                "cluster-admin",
                masters.clone(),
            ),
        ),
        (
            "bind its own ClusterRole to itself",
            binding(
                None,
                "e2e-evil",
                &format!("flotilla:{release}:registration"),
                me.clone(),
            ),
        ),
        (
            "bind the syncer's role for Works' Secret data to itself",
            binding(
                Some(&member_ns),
                "flotilla-syncer",
                &syncer_data_role,
                me.clone(),
            ),
        ),
        (
            "bind the syncer's role for Works' Secret data in a tenant's namespace",
            binding(
                Some(tenant.name()),
                "flotilla-syncer",
                &syncer_data_role,
                syncer.clone(),
            ),
        ),
        (
            "bind the syncer's role to the syncer and to system:masters",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": "flotilla-syncer", "namespace": member_ns},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                               "name": syncer_data_role},
                   "subjects": [syncer.clone(), masters.clone()]}),
        ),
        (
            "grant every Cluster under an agent's name",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": "flotilla:cluster:evil:agent"},
                   "rules": [{"apiGroups": ["flotilla.dev"], "resources": ["clusters"],
                              "verbs": ["get", "list", "watch"]}]}),
        ),
        (
            "grant Secrets under an agent's name",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": "flotilla:cluster:evil:agent"},
                   "rules": [{"apiGroups": [""], "resources": ["secrets"],
                              "verbs": ["get"]}]}),
        ),
    ];
    for (what, object) in &attempts {
        let result = api::create(&registration, object, false).await?;
        let (code, message) = refusal(result);
        ensure!(
            code == 403,
            "registration must not {what}: {code} {message}"
        );
    }
    // What it must do: let the release's syncer read Secrets in a member's namespace, and
    // nothing more there.
    let grant = binding(
        Some(&member_ns),
        "flotilla-syncer",
        &syncer_data_role,
        syncer.clone(),
    );
    api::create(&registration, &grant, false)
        .await?
        .context("registration binds the syncer's role for Works' Secret data")?;
    let syncer_may = |verb: &'static str, namespace: String| {
        let hub = hub.clone();
        let user = format!("system:serviceaccount:{}:{release}-syncer", ns.name());
        async move {
            let request = Request {
                verb,
                group: "",
                resource: "secrets",
                namespace: Some(&namespace),
                name: None,
            };
            access::allowed(&hub, &user, &[], request).await
        }
    };
    // The apiserver's authorizer learns of a new binding from its cache: allow it a moment.
    wait_for(
        "the syncer to get Secrets in the member's namespace",
        Duration::from_secs(30),
        || async {
            Ok(if syncer_may("get", member_ns.clone()).await? {
                Seen::Done(())
            } else {
                Seen::not_yet("not yet allowed")
            })
        },
    )
    .await?;
    for (verb, namespace) in [
        ("list", member_ns.clone()),
        ("get", tenant.name().to_string()),
    ] {
        let may = syncer_may(verb, namespace.clone()).await?;
        ensure!(!may, "the syncer must not {verb} Secrets in {namespace}");
    }
    // Namespaces: not a tenant's; Leases: not kube-system's; Secrets: only the release's.
    let (code, message) = refusal(
        Api::<Namespace>::all(registration.clone())
            .delete(tenant.name(), &Default::default())
            .await,
    );
    ensure!(
        code == 403,
        "registration must not delete a tenant's namespace: {code} {message}"
    );
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(format!("e2e-evil-{}", random_suffix())),
            ..ObjectMeta::default()
        },
        spec: None,
    };
    for controller in CONTROLLERS {
        let (code, message) = refusal(
            Api::<Lease>::namespaced(clients[controller].clone(), "kube-system")
                .create(&PostParams::default(), &lease)
                .await,
        );
        ensure!(
            code == 403,
            "{controller} must not write Leases in kube-system: {code} {message}"
        );
    }
    for controller in ["registration", "syncer", "negotiator"] {
        let (code, message) = refusal(
            Api::<Secret>::namespaced(clients[controller].clone(), "kube-system")
                .list(&ListParams::default())
                .await,
        );
        ensure!(
            code == 403,
            "{controller} must not read Secrets outside its namespace: {code} {message}"
        );
    }

    // The syncer makes no Works; the splitter makes no Clusters and runs no Pods; the negotiator
    // deletes no CRDs.
    let work = json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
                      "metadata": {"name": "evil", "namespace": tenant.name()},
                      "spec": {"manifests": []}});
    let (code, message) = refusal(api::create(&clients["syncer"], &work, false).await?);
    ensure!(
        code == 403,
        "the syncer must not create Works: {code} {message}"
    );
    let cluster = json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Cluster",
                         "metadata": {"name": format!("e2e-evil-{}", random_suffix())},
                         "spec": {"syncMode": "Pull"}});
    let (code, message) = refusal(api::create(&clients["splitter"], &cluster, false).await?);
    ensure!(
        code == 403,
        "the splitter must not create Clusters: {code} {message}"
    );
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"generateName": "evil-"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))?;
    // The splitter creates Pods (dry runs, for Pod Security) only in its own check namespaces:
    // not in a tenant's, not even as a dry run.
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let (code, message) = refusal(
        Api::<Pod>::namespaced(clients["splitter"].clone(), tenant.name())
            .create(&dry_run, &pod)
            .await,
    );
    ensure!(
        code == 403,
        "the splitter must not create Pods in a tenant's namespace: {code} {message}"
    );
    let check_namespace = format!("{release}-pod-security-baseline");
    let pods = Api::<Pod>::namespaced(clients["splitter"].clone(), &check_namespace);
    // Each admission policy is enforced a moment after it is created: one made meanwhile is
    // deleted and tried again.
    let (code, message) = wait_for(
        "the splitter's policy to refuse a Pod made for real",
        Duration::from_secs(30),
        || async {
            match pods.create(&PostParams::default(), &pod).await {
                Ok(made) => {
                    Api::<Pod>::namespaced(hub.clone(), &check_namespace)
                        .delete(&kube::ResourceExt::name_any(&made), &Default::default())
                        .await?;
                    Ok(Seen::not_yet("created"))
                }
                other => Ok(Seen::Done(refusal(other))),
            }
        },
    )
    .await?;
    ensure!(
        code == 403 && message.contains("only as a dry run"),
        "the splitter must not create a Pod for real: {code} {message}"
    );
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "evil"}, "type": "flotilla.dev/work-data",
        "stringData": {"k": "v"}}))?;
    let (code, message) = refusal(
        Api::<Secret>::namespaced(clients["splitter"].clone(), tenant.name())
            .create(&PostParams::default(), &secret)
            .await,
    );
    ensure!(
        code == 403 && message.contains("data Secrets of Works"),
        "the splitter must not write a tenant's Secrets: {code} {message}"
    );
    // Nor delete one: RBAC lets it delete Secrets (a Work's data Secret left without its Work),
    // the policy only those.
    let precious: Secret = serde_json::from_value(json!({
        "metadata": {"name": "precious"}, "stringData": {"k": "v"}}))?;
    Api::<Secret>::namespaced(hub.clone(), tenant.name())
        .create(&PostParams::default(), &precious)
        .await?;
    let (code, message) = refusal(
        Api::<Secret>::namespaced(clients["splitter"].clone(), tenant.name())
            .delete("precious", &Default::default())
            .await,
    );
    ensure!(
        code == 403 && message.contains("data Secrets of Works"),
        "the splitter must not delete a tenant's Secrets: {code} {message}"
    );
    pods.create(&dry_run, &pod)
        .await
        .context("the splitter may dry-run a Pod in its check namespace")?;
    // The negotiator may create ConfigMaps (RBAC cannot restrict create by name): its policy
    // refuses any but its list of types, flotilla-import-types, in a flotilla-cluster-* namespace.
    let config_map = |namespace: &str, name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": namespace},
               "data": {"types": "v1/Pod\n"}})
    };
    wait_for(
        "the negotiator's policy to refuse its list of types in a tenant's namespace",
        Duration::from_secs(30),
        || async {
            let (code, message) = refusal(
                api::apply(
                    &clients["negotiator"],
                    &config_map(tenant.name(), names::IMPORT_TYPES_CONFIGMAP),
                    false,
                )
                .await?,
            );
            Ok(
                if code == 403 && message.contains("only write the ConfigMap flotilla-import-types")
                {
                    Seen::Done(())
                } else {
                    Seen::not_yet(format!("{code} {message}"))
                },
            )
        },
    )
    .await?;
    for (what, object) in [
        (
            "create a ConfigMap in a tenant's namespace",
            config_map(tenant.name(), "settings"),
        ),
        (
            "create another ConfigMap in a member's namespace",
            config_map(&member_ns, "settings"),
        ),
    ] {
        let (code, message) = refusal(api::create(&clients["negotiator"], &object, false).await?);
        ensure!(
            code == 403,
            "the negotiator must not {what}: {code} {message}"
        );
    }
    let (code, message) = refusal(
        Api::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>::all(
            clients["negotiator"].clone(),
        )
        .delete("works.flotilla.dev", &Default::default())
        .await,
    );
    ensure!(
        code == 403,
        "the negotiator must not delete CRDs: {code} {message}"
    );

    // The negotiator writes a Cluster's compatibility summary, and nothing else of its status: a
    // forged Ready=False would move every replica away from the member.
    let member = format!("e2e-evil-{}", random_suffix());
    let clusters: Api<Cluster> = Api::all(hub.clone());
    clusters
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Cluster",
                "metadata": {"name": member}, "spec": {"syncMode": "Pull"}}),
            )?,
        )
        .await?;
    cleanup.add(
        kube::api::ApiResource::erase::<Cluster>(&()),
        member.clone(),
    );
    let ready = |status: &str| {
        json!({"status": {"conditions": [{"type": "Ready", "status": status, "reason": "Evil",
            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    };
    clusters
        .patch_status(
            &member,
            &PatchParams::default(),
            &Patch::Merge(ready("True")),
        )
        .await?;
    let as_negotiator: Api<Cluster> = Api::all(clients["negotiator"].clone());
    let (code, message) = wait_for(
        "the negotiator's policy to refuse a forged Ready condition",
        Duration::from_secs(30),
        || async {
            match as_negotiator
                .patch_status(
                    &member,
                    &PatchParams::default(),
                    &Patch::Merge(ready("False")),
                )
                .await
            {
                Ok(_) => {
                    clusters
                        .patch_status(
                            &member,
                            &PatchParams::default(),
                            &Patch::Merge(ready("True")),
                        )
                        .await?;
                    Ok(Seen::not_yet("written"))
                }
                other => Ok(Seen::Done(refusal(other))),
            }
        },
    )
    .await?;
    ensure!(
        code == 403 && message.contains("only write status.resources"),
        "the negotiator must not write a Cluster's conditions: {code} {message}"
    );
    as_negotiator
        .patch_status(
            &member,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"resources": [{"group": "apps", "version": "v1",
                "resource": "deployments", "compatibility": "Compatible"}]}}),
            ),
        )
        .await
        .context("the negotiator writes a Cluster's compatibility summary")?;

    // The splitter writes and deletes ReplicaSets and ControllerRevisions only as the history
    // records of placed workloads: not a tenant's own.
    let replica_set = |labels: Value| {
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
               "metadata": {"name": "tenants", "namespace": tenant.name(), "labels": labels},
               "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "x"}},
                        "template": {"metadata": {"labels": {"app": "x"}},
                                     "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}})
    };
    let (code, message) = refusal(
        api::create(
            &clients["splitter"],
            &replica_set(json!({"app": "x"})),
            false,
        )
        .await?,
    );
    ensure!(
        code == 403 && message.contains("history records"),
        "the splitter must not create a ReplicaSet that is no history record: {code} {message}"
    );
    api::create(&hub, &replica_set(json!({"app": "x"})), false)
        .await?
        .map_err(|e| anyhow!("the tenant's ReplicaSet: {e}"))?;
    let tenants_sets: Api<k8s_openapi::api::apps::v1::ReplicaSet> =
        Api::namespaced(clients["splitter"].clone(), tenant.name());
    let (code, message) = refusal(tenants_sets.delete("tenants", &Default::default()).await);
    ensure!(
        code == 403 && message.contains("history records"),
        "the splitter must not delete a tenant's ReplicaSet: {code} {message}"
    );
    let (code, message) = refusal(
        tenants_sets
            .patch(
                "tenants",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"flotilla.dev/record": "x"}}})),
            )
            .await,
    );
    ensure!(
        code == 403 && message.contains("history records"),
        "the splitter must not take a tenant's ReplicaSet over as a record: {code} {message}"
    );
    Ok(())
}
