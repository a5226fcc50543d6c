//! The member chart (`charts/flotilla-agent`): it lints and renders; each component gets its
//! own ServiceAccount and RBAC, and no more than its job (the pull syncer's grants cover every
//! namespaced kind of the table of kinds, so what a Placement without `resourceSelectors` places
//! reaches a pull-mode member as it reaches a push-mode one); the hosted install renders no
//! identity and reaches the member with the kubeconfigs it is given; bad values fail the install
//! naming the value. The pull-mode tests (registration_pull, syncer_pull) run the agent, syncer
//! and importer with the identities it renders, and chart_install installs it on the real node.

use std::collections::BTreeSet;

use anyhow::{Context, Result, ensure};
use flotilla_e2e::bootstrap::member_chart;
use flotilla_e2e::chart::{helm, helm_run};
use flotilla_interpreter::table;
use serde_json::Value;

const COMPONENTS: [&str; 3] = ["agent", "syncer", "importer"];

/// `helm template <release> charts/flotilla-agent --namespace flotilla-system <values>`.
async fn render(release: &str, values: &[&str]) -> Result<Vec<Value>> {
    let chart = member_chart().to_string_lossy().into_owned();
    let mut args = vec![
        "template",
        release,
        &chart,
        "--namespace",
        "flotilla-system",
    ];
    args.extend_from_slice(values);
    let yaml = helm_run(&args).await?;
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&yaml).context("parsing helm template output")?;
    Ok(docs.into_iter().filter(|d| d.is_object()).collect())
}

/// `helm template` that must fail: its error output.
async fn refused(values: &[&str]) -> Result<String> {
    let chart = member_chart().to_string_lossy().into_owned();
    let out = tokio::process::Command::new(helm())
        .args([
            "template",
            "flotilla",
            &chart,
            "--namespace",
            "flotilla-system",
        ])
        .args(values)
        .output()
        .await?;
    ensure!(
        !out.status.success(),
        "helm template {values:?} should fail, it rendered"
    );
    Ok(String::from_utf8_lossy(&out.stderr).into_owned())
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Result<&'a Value> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .with_context(|| format!("the chart renders no {kind} {name}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(String::from)
        .collect()
}

/// What the ClusterRoles bound to the ServiceAccount `account` grant, as (group, resource, verb).
fn cluster_grants(docs: &[Value], account: &str) -> BTreeSet<(String, String, String)> {
    let bound: BTreeSet<&str> = docs
        .iter()
        .filter(|d| {
            d["kind"] == "ClusterRoleBinding"
                && d["subjects"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|s| s["kind"] == "ServiceAccount" && s["name"] == account)
        })
        .filter_map(|d| d["roleRef"]["name"].as_str())
        .collect();
    let mut out = BTreeSet::new();
    for doc in docs.iter().filter(|d| {
        d["kind"] == "ClusterRole"
            && d["metadata"]["name"]
                .as_str()
                .is_some_and(|n| bound.contains(n))
    }) {
        for rule in doc["rules"].as_array().into_iter().flatten() {
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    for verb in strings(&rule["verbs"]) {
                        out.insert((group.clone(), resource.clone(), verb));
                    }
                }
            }
        }
    }
    out
}

fn container(deployment: &Value) -> &Value {
    &deployment["spec"]["template"]["spec"]["containers"][0]
}

fn flag(deployment: &Value, name: &str) -> Option<String> {
    strings(&container(deployment)["args"])
        .into_iter()
        .find_map(|a| a.strip_prefix(&format!("{name}=")).map(String::from))
}

fn env(deployment: &Value, name: &str) -> Value {
    container(deployment)["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == name)
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn the_member_chart_gives_each_component_its_own_least_privilege_identity() -> Result<()> {
    let chart = member_chart().to_string_lossy().into_owned();
    helm_run(&["lint", &chart, "--strict", "--set", "clusterName=member2"]).await?;
    let docs = render("flotilla", &["--set", "clusterName=member2"]).await?;
    let count = |kind: &str| docs.iter().filter(|d| d["kind"] == kind).count();
    for (kind, n) in [
        ("Deployment", 3),
        ("ServiceAccount", 3),
        ("Role", 3),
        ("RoleBinding", 3),
        // agent, syncer, syncer:rbac, importer; each bound by a binding of its own (no
        // aggregation: the controller-manager's server-side apply would bring a deleted
        // aggregated role back)
        ("ClusterRole", 4),
        ("ClusterRoleBinding", 4),
    ] {
        ensure!(count(kind) == n, "{n} {kind}s, got {}", count(kind));
    }
    ensure!(docs.len() == 20, "nothing else is rendered: {}", docs.len());
    // No aggregated ClusterRole: the controller-manager aggregates with server-side apply, which
    // brings one back when it is deleted while a labelled role changes (helm uninstall --wait
    // then waits for it in vain, and it stays behind).
    ensure!(
        !docs.iter().any(|d| d.get("aggregationRule").is_some()),
        "no aggregated ClusterRole"
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

    // Each Deployment runs with its own ServiceAccount, and its Role names exactly the Lease
    // and the credential Secret its flags name (a mismatch would fail leader election or the
    // hub credential in a real member).
    for component in COMPONENTS {
        let name = format!("flotilla-{component}");
        let deployment = find(&docs, "Deployment", &name)?;
        let spec = &deployment["spec"]["template"]["spec"];
        ensure!(
            spec["serviceAccountName"] == name.as_str(),
            "{name} runs as its own ServiceAccount: {}",
            spec["serviceAccountName"]
        );
        ensure!(
            flag(deployment, "--cluster-name").as_deref() == Some("member2"),
            "{name} serves member2"
        );
        let lease = flag(deployment, "--lease-name").context("a --lease-name")?;
        ensure!(lease == name, "{name}'s Lease is {name}, got {lease}");
        let credential =
            flag(deployment, "--hub-credential-secret").context("a --hub-credential-secret")?;
        let role = find(&docs, "Role", &name)?;
        let named = |resource: &str| -> Vec<(Vec<String>, Vec<String>)> {
            role["rules"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|r| strings(&r["resources"]) == [resource])
                .filter(|r| r.get("resourceNames").is_some())
                .map(|r| (strings(&r["resourceNames"]), strings(&r["verbs"])))
                .collect()
        };
        ensure!(
            named("leases")
                == [(
                    vec![lease.clone()],
                    vec!["get".into(), "update".into(), "patch".into()]
                )],
            "{name} may renew its own Lease only: {:?}",
            named("leases")
        );
        let secret_verbs: Vec<String> = if component == "agent" {
            vec!["get".into(), "update".into(), "patch".into()]
        } else {
            vec!["get".into()]
        };
        ensure!(
            named("secrets") == [(vec![credential.clone()], secret_verbs)],
            "{name} reads (the agent writes) the credential Secret {credential} only: {:?}",
            named("secrets")
        );
        let binding = find(&docs, "RoleBinding", &name)?;
        ensure!(
            binding["subjects"][0]["name"] == name.as_str()
                && binding["roleRef"]["name"] == name.as_str(),
            "{name}'s RoleBinding binds its Role to its ServiceAccount"
        );
        let cluster_binding = find(
            &docs,
            "ClusterRoleBinding",
            &format!("flotilla:{component}"),
        )?;
        ensure!(
            cluster_binding["subjects"].as_array().map(Vec::len) == Some(1)
                && cluster_binding["subjects"][0]["name"] == name.as_str(),
            "flotilla:{component} is bound to {name} alone"
        );
        // In the member the pod's own namespace holds the credential and the Leases.
        ensure!(
            env(deployment, "POD_NAMESPACE")["valueFrom"]["fieldRef"]["fieldPath"]
                == "metadata.namespace",
            "{name}: POD_NAMESPACE is the pod's namespace"
        );
    }
    // Only the agent may create Secrets (its credential; create cannot be limited by name).
    for component in ["syncer", "importer"] {
        let role = find(&docs, "Role", &format!("flotilla-{component}"))?;
        ensure!(
            !role["rules"].as_array().into_iter().flatten().any(|r| {
                strings(&r["resources"]).contains(&"secrets".to_string())
                    && r.get("resourceNames").is_none()
            }),
            "the {component} has no right on Secrets but the credential"
        );
    }
    ensure!(
        find(&docs, "ClusterRole", "flotilla:agent")?["rules"]
            == serde_json::json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]),
        "the agent lists Nodes, and nothing else cluster-wide"
    );
    let importer = find(&docs, "ClusterRole", "flotilla:importer")?;
    ensure!(
        !importer.to_string().contains("create") && !importer.to_string().contains("patch"),
        "the importer writes nothing in the member: {importer}"
    );

    // The pull syncer may apply every namespaced kind of the table of kinds, and place RBAC.
    let granted = cluster_grants(&docs, "flotilla-syncer");
    let mut missing = Vec::new();
    for k in table::defaults(true) {
        for verb in ["get", "list", "watch", "create", "patch", "delete"] {
            if !granted.contains(&(k.group.into(), k.plural.into(), verb.into())) {
                missing.push(format!("{verb} {}.{}", k.plural, k.group));
            }
        }
    }
    ensure!(
        missing.is_empty(),
        "the member chart's syncer may not: {}",
        missing.join(", ")
    );
    for (resource, verb) in [
        ("roles", "escalate"),
        ("roles", "bind"),
        ("clusterroles", "bind"),
    ] {
        ensure!(
            granted.contains(&(
                "rbac.authorization.k8s.io".into(),
                resource.into(),
                verb.into()
            )),
            "the syncer may {verb} {resource} (placed RBAC)"
        );
    }
    // ... and never delete a namespace, nor write cluster-wide RBAC.
    for (group, resource, verb) in [
        ("", "namespaces", "delete"),
        ("rbac.authorization.k8s.io", "clusterroles", "create"),
        ("rbac.authorization.k8s.io", "clusterrolebindings", "create"),
        ("rbac.authorization.k8s.io", "clusterroles", "escalate"),
    ] {
        ensure!(
            !granted.contains(&(group.into(), resource.into(), verb.into())),
            "the syncer must not {verb} {resource}"
        );
    }

    // placeRBAC=false leaves RBAC out; extraRules are bound to the syncer.
    let docs = render(
        "flotilla",
        &[
            "--set",
            "clusterName=member2",
            "--set",
            "syncer.placeRBAC=false",
            "--set-json",
            r#"syncer.extraRules=[{"apiGroups":["example.com"],"resources":["widgets"],"verbs":["get","list","watch","create","patch","delete"]}]"#,
        ],
    )
    .await?;
    let granted = cluster_grants(&docs, "flotilla-syncer");
    ensure!(
        !granted
            .iter()
            .any(|(g, _, _)| g == "rbac.authorization.k8s.io"),
        "syncer.placeRBAC=false: no RBAC rights"
    );
    ensure!(
        granted.contains(&("example.com".into(), "widgets".into(), "patch".into())),
        "syncer.extraRules are granted to the syncer"
    );
    // A component left out leaves no object behind.
    let docs = render(
        "flotilla",
        &[
            "--set",
            "clusterName=member2",
            "--set",
            "importer.enabled=false",
        ],
    )
    .await?;
    ensure!(
        !docs.iter().any(|d| d.to_string().contains("importer")),
        "importer.enabled=false renders no importer objects"
    );
    Ok(())
}

#[tokio::test]
async fn a_hosted_member_chart_renders_no_identity_and_reaches_the_member_with_its_kubeconfigs()
-> Result<()> {
    // Step 1, in the member: identities only.
    let identities = render("flotilla", &["--set", "install.controllers=false"]).await?;
    ensure!(
        !identities.iter().any(|d| d["kind"] == "Deployment"),
        "install.controllers=false renders no Deployment"
    );
    ensure!(
        identities
            .iter()
            .filter(|d| d["kind"] == "ServiceAccount")
            .count()
            == 3,
        "... but the three ServiceAccounts"
    );
    // Step 2, in the hosting cluster: Deployments only.
    let docs = render(
        "member3",
        &[
            "--set",
            "clusterName=member3",
            "--set",
            "install.identities=false",
            "--set",
            "member.kubeconfigSecret=member3-kubeconfigs",
            "--set",
            "member.namespace=flotilla-system",
            "--set",
            "member.release=flotilla",
        ],
    )
    .await?;
    ensure!(
        docs.iter().all(|d| d["kind"] == "Deployment") && docs.len() == 3,
        "install.identities=false renders the three Deployments only: {:?}",
        docs.iter().map(|d| d["kind"].clone()).collect::<Vec<_>>()
    );
    for component in COMPONENTS {
        let deployment = find(&docs, "Deployment", &format!("member3-{component}"))?;
        let spec = &deployment["spec"]["template"]["spec"];
        ensure!(
            spec["automountServiceAccountToken"] == false
                && spec.get("serviceAccountName").is_none(),
            "{component}: no identity of the hosting cluster"
        );
        ensure!(
            env(deployment, "FLOTILLA_KUBECONFIG")["value"] == "/etc/flotilla/member/kubeconfig"
                && env(deployment, "POD_NAMESPACE")["value"] == "flotilla-system",
            "{component}: the member through its kubeconfig, the credential and Leases in the member's namespace"
        );
        let volume = spec["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == "member")
            .context("the member kubeconfig volume")?;
        ensure!(
            volume["secret"]["secretName"] == "member3-kubeconfigs"
                && volume["secret"]["items"][0]["key"] == component,
            "{component}: its own kubeconfig of the Secret: {volume}"
        );
        // The Lease the member's Role (release flotilla) lets it hold.
        let lease = flag(deployment, "--lease-name");
        let want = format!("flotilla-{component}");
        ensure!(
            lease.as_deref() == Some(want.as_str()),
            "{component}: Lease {want}, got {lease:?}"
        );
        let role = find(&identities, "Role", &want)?;
        ensure!(
            role.to_string().contains(&format!("\"{want}\"")),
            "the member's Role {want} names that Lease"
        );
    }

    // Bad values fail, naming the value and what to do.
    for (values, says) in [
        (vec![], "clusterName is required"),
        (vec!["--set", "clusterName=Member_2"], "is not a DNS label"),
        (
            vec![
                "--set",
                "clusterName=a-name-that-is-far-too-long-for-a-hub-namespace-x",
            ],
            "longer than 46 characters",
        ),
        (
            vec![
                "--set",
                "clusterName=m",
                "--set",
                "member.kubeconfigSecret=k",
            ],
            "set install.identities=false here",
        ),
        (
            vec!["--set", "clusterName=m", "--set", "member.namespace=x"],
            "set member.kubeconfigSecret too",
        ),
        (
            vec![
                "--set",
                "install.identities=false",
                "--set",
                "install.controllers=false",
            ],
            "would install nothing",
        ),
    ] {
        let error = refused(&values).await?;
        ensure!(error.contains(says), "{values:?}: says {says:?}: {error}");
    }
    Ok(())
}

/// With hostNetwork the member's components share the node's network: their metrics and health
/// listen on 127.0.0.1 (the probes ask there), unless `metrics.bindAddress` says otherwise.
#[tokio::test]
async fn with_host_network_the_member_chart_listens_on_the_nodes_loopback_only() -> Result<()> {
    let args_of = |docs: &[Value]| -> Vec<String> {
        docs.iter()
            .filter(|d| d["kind"] == "Deployment")
            .flat_map(|d| {
                d["spec"]["template"]["spec"]["containers"][0]["args"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|a| a.as_str().map(String::from))
            .filter(|a| a.starts_with("--metrics-address=") || a.starts_with("--health-address="))
            .collect()
    };
    let base = ["--set", "clusterName=member2"];
    let mut values = base.to_vec();
    values.extend(["--set", "hostNetwork=true"]);
    let listening = args_of(&render("flotilla", &values).await?);
    ensure!(listening.len() == 2 * COMPONENTS.len(), "{listening:?}");
    for arg in &listening {
        ensure!(arg.contains("=127.0.0.1:"), "with hostNetwork: {arg}");
    }
    values.extend(["--set", "metrics.bindAddress=0.0.0.0"]);
    let widened = args_of(&render("flotilla", &values).await?);
    ensure!(
        widened
            .iter()
            .filter(|a| a.starts_with("--metrics-address=0.0.0.0:"))
            .count()
            == COMPONENTS.len(),
        "metrics.bindAddress widens /metrics only: {widened:?}"
    );
    let pods = args_of(&render("flotilla", &base).await?);
    ensure!(pods.iter().all(|a| a.contains("=0.0.0.0:")), "{pods:?}");
    Ok(())
}
