//! Flotilla's API on a real hub: the CRDs install and are Established, every example in
//! `deploy/examples` applies and reads back as the Rust types, `kubectl` shows the kinds the way
//! it shows built-in ones, and every invalid object a user could write is rejected by the
//! apiserver with a message that names the field.

use std::collections::BTreeSet;

use anyhow::{Context, Result, anyhow, bail, ensure};
use flotilla_api::{
    ApiResourceImport, Cluster, NegotiatedApiResource, Placement, ReplicaDivision,
    ReplicaSchedulingType, SyncMode, Work,
};
use flotilla_e2e::api::{self, ClusterScopedObjects, Example};
use flotilla_e2e::{Environment, TestNamespace, random_suffix};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::DynamicObject;
use kube::discovery::{Discovery, Scope};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The five kinds, their plural and whether they are namespaced.
const KINDS: [(&str, &str, bool); 6] = [
    ("Cluster", "clusters", false),
    ("Placement", "placements", true),
    ("ClusterPlacement", "clusterplacements", false),
    ("Work", "works", true),
    ("APIResourceImport", "apiresourceimports", true),
    ("NegotiatedAPIResource", "negotiatedapiresources", false),
];

async fn hub() -> Result<(Environment, Client)> {
    let env = Environment::get();
    let client = env.hub.client().await?;
    api::install_crds(&client).await?;
    Ok((env, client))
}

#[tokio::test]
async fn crds_install_and_are_established() -> Result<()> {
    let (_env, client) = hub().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for expected in api::read_crds()? {
        let name = expected.metadata.name.clone().unwrap_or_default();
        let served = crds.get(&name).await?;
        let conditions = served
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        for t in ["Established", "NamesAccepted"] {
            ensure!(
                conditions
                    .iter()
                    .any(|c| c.type_ == t && c.status == "True"),
                "CRD {name}: expected {t}=True, conditions are {conditions:?}"
            );
        }
        ensure!(
            served.spec.names.categories.as_deref() == Some(&["flotilla".to_string()][..]),
            "CRD {name}: categories {:?}",
            served.spec.names.categories
        );
    }

    // Discovery serves every kind in flotilla.dev/v1alpha1, with the right scope.
    let discovery = Discovery::new(client.clone())
        .filter(&[flotilla_api::GROUP])
        .run()
        .await?;
    let group = discovery
        .get(flotilla_api::GROUP)
        .ok_or_else(|| anyhow!("discovery does not list group {}", flotilla_api::GROUP))?;
    let served: Vec<_> = group.versioned_resources(flotilla_api::VERSION);
    for (kind, plural, namespaced) in KINDS {
        let (resource, caps) = served
            .iter()
            .find(|(r, _)| r.kind == kind)
            .ok_or_else(|| anyhow!("discovery does not serve {kind}"))?;
        ensure!(
            resource.plural == plural,
            "{kind}: plural {}",
            resource.plural
        );
        let scope_ok = matches!(
            (&caps.scope, namespaced),
            (Scope::Namespaced, true) | (Scope::Cluster, false)
        );
        ensure!(scope_ok, "{kind}: scope {:?}", caps.scope);
        ensure!(
            caps.subresources.iter().any(|(r, _)| r.plural == "status"),
            "{kind} serves no status subresource: {:?}",
            caps.subresources
                .iter()
                .map(|(r, _)| &r.plural)
                .collect::<Vec<_>>()
        );
    }

    // Applying the same CRDs again changes nothing: the generated YAML is stable.
    let before: Vec<_> = api::read_crds()?
        .iter()
        .map(|c| c.metadata.name.clone().unwrap_or_default())
        .collect();
    let generations = |list: Vec<CustomResourceDefinition>| {
        list.into_iter()
            .filter(|c| before.contains(c.metadata.name.as_ref().unwrap_or(&String::new())))
            .map(|c| (c.metadata.name, c.metadata.generation))
            .collect::<Vec<_>>()
    };
    let first = generations(crds.list(&Default::default()).await?.items);
    api::apply_crds(&client).await?;
    let second = generations(crds.list(&Default::default()).await?.items);
    ensure!(
        first == second,
        "re-applying the CRDs changed their generation: {first:?} -> {second:?}"
    );
    Ok(())
}

/// The examples, ready to apply in `namespace`: namespaced objects are moved there, cluster-scoped
/// ones get a random suffix (a NegotiatedAPIResource's name follows its plural, so the suffix
/// goes there). A NegotiatedAPIResource is not published, so that a negotiator running against
/// the shared hub creates no CRD for it.
fn prepared_examples(namespace: &str, suffix: &str) -> Result<Vec<Example>> {
    let mut examples = api::read_examples()?;
    for e in &mut examples {
        let (kind, _, namespaced) = KINDS
            .iter()
            .find(|(k, _, _)| *k == e.kind())
            .copied()
            .ok_or_else(|| anyhow!("{}: unexpected kind {:?}", e.file, e.kind()))?;
        let name = e.name().to_string();
        let object = &mut e.object;
        if namespaced {
            object["metadata"]["namespace"] = json!(namespace);
        } else if kind == "NegotiatedAPIResource" {
            let plural = format!(
                "{}{suffix}",
                object["spec"]["names"]["plural"]
                    .as_str()
                    .unwrap_or_default()
            );
            let spec = &object["spec"];
            let group = spec["groupVersion"]["group"].as_str().unwrap_or_default();
            let version = spec["groupVersion"]["version"].as_str().unwrap_or_default();
            object["metadata"]["name"] = json!(flotilla_api::names::api_resource_name(
                group, version, &plural
            ));
            object["spec"]["names"]["plural"] = json!(plural);
            object["spec"]["publish"] = json!(false);
        } else {
            object["metadata"]["name"] = json!(format!("{name}-{suffix}"));
        }
    }
    Ok(examples)
}

/// Applies every example (see [`prepared_examples`]); returns them with what the server stored.
async fn apply_examples(
    client: &Client,
    namespace: &str,
    cleanup: &mut ClusterScopedObjects,
) -> Result<Vec<(Example, DynamicObject)>> {
    let suffix = random_suffix();
    let mut applied = Vec::new();
    for example in prepared_examples(namespace, &suffix)? {
        let (resource, scope) = api::resource_of(client, &example.object).await?;
        if matches!(scope, Scope::Cluster) {
            cleanup.add(resource, example.name());
        }
        let stored = api::apply(client, &example.object, false)
            .await?
            .with_context(|| {
                format!(
                    "the apiserver rejected {} {} from deploy/examples/{}",
                    example.kind(),
                    example.name(),
                    example.file
                )
            })?;
        applied.push((example, stored));
    }
    Ok(applied)
}

fn typed<K: DeserializeOwned>(stored: &DynamicObject) -> Result<K> {
    serde_json::from_value(serde_json::to_value(stored)?)
        .with_context(|| format!("reading back {:?} as a Rust type", stored.metadata.name))
}

#[tokio::test]
async fn every_example_applies_and_reads_back() -> Result<()> {
    let (env, client) = hub().await?;
    let ns = TestNamespace::create("api-examples", &[&env.hub]).await?;
    let mut cleanup = ClusterScopedObjects::new(&env.hub);
    let applied = apply_examples(&client, ns.name(), &mut cleanup).await?;

    let kinds: BTreeSet<&str> = applied.iter().map(|(e, _)| e.kind()).collect();
    ensure!(
        kinds.len() == KINDS.len(),
        "deploy/examples covers only {kinds:?}"
    );

    // What the server stored parses as the Rust types, with the server's defaults filled in.
    for (example, stored) in &applied {
        let what = format!("{} from {}", example.kind(), example.file);
        match example.kind() {
            "Cluster" => {
                let c: Cluster = typed(stored)?;
                if c.spec.sync_mode == SyncMode::Pull {
                    ensure!(
                        c.spec.weight == 1,
                        "{what}: default weight {}",
                        c.spec.weight
                    );
                    ensure!(c.spec.kubeconfig_secret_ref.is_none(), "{what}");
                }
            }
            "Placement" => {
                let p: Placement = typed(stored)?;
                ensure!(
                    p.spec.replica_scheduling.strategy().is_some(),
                    "{what}: {:?}",
                    p.spec.replica_scheduling
                );
                ensure!(
                    p.spec.failover.enabled,
                    "{what}: failover defaults to enabled"
                );
                ensure!(
                    p.spec.follow_references,
                    "{what}: followReferences defaults to true"
                );
            }
            "Work" => {
                let w: Work = typed(stored)?;
                ensure!(
                    w.spec.manifests.len()
                        == example.object["spec"]["manifests"]
                            .as_array()
                            .map_or(0, Vec::len),
                    "{what}: manifests were not kept"
                );
                // Embedded objects keep every field (preserve-unknown-fields).
                let replicas = &serde_json::to_value(&w.spec.manifests[0])?["spec"]["replicas"];
                ensure!(
                    *replicas == json!(4),
                    "{what}: manifest lost spec.replicas: {replicas}"
                );
            }
            "APIResourceImport" => {
                let i: ApiResourceImport = typed(stored)?;
                ensure!(
                    i.spec.resource.open_api_v3_schema["properties"]["spec"]["properties"]["size"]
                        ["minimum"]
                        == json!(1),
                    "{what}: the imported schema was not kept as it is"
                );
            }
            "NegotiatedAPIResource" => {
                let n: NegotiatedApiResource = typed(stored)?;
                ensure!(
                    n.metadata.name.as_deref() == Some(n.spec.resource.object_name().as_str()),
                    "{what}: named {:?}",
                    n.metadata.name
                );
            }
            "ClusterPlacement" => {
                let p: flotilla_api::ClusterPlacement = typed(stored)?;
                ensure!(
                    p.spec.failover.enabled && !p.spec.resource_selectors.is_empty(),
                    "{what}: {:?}",
                    p.spec
                );
            }
            other => bail!("unexpected kind {other}"),
        }
    }

    // A ClusterPlacement without selectors selects every cluster-scoped kind of the table of
    // kinds, as a Placement without selectors does the namespaced ones; a dry run, so that no
    // splitter places the hub's cluster-scoped objects.
    let everything = json!({
        "apiVersion": flotilla_api::API_VERSION,
        "kind": "ClusterPlacement",
        "metadata": { "name": format!("everything-{}", random_suffix()) },
        "spec": {"resourceSelectors": []}
    });
    let accepted = api::create(&client, &everything, true).await?;
    ensure!(
        accepted.is_ok(),
        "an empty ClusterPlacement is valid: {accepted:?}"
    );

    // A Placement without replicaScheduling divides evenly: the server fills in the default.
    let bare = json!({
        "apiVersion": flotilla_api::API_VERSION,
        "kind": "Placement",
        "metadata": { "name": "defaults", "namespace": ns.name() },
        "spec": {}
    });
    let created: Placement = typed(&api::create(&client, &bare, false).await??)?;
    let rs = &created.spec.replica_scheduling;
    ensure!(
        rs.type_ == ReplicaSchedulingType::Divided && rs.division == Some(ReplicaDivision::Even),
        "an empty Placement should default to Divided/Even, got {rs:?}"
    );
    Ok(())
}

/// Runs the tools' `kubectl` against the hub.
pub(crate) async fn kubectl(env: &Environment, args: &[&str]) -> Result<String> {
    let bin = std::env::var_os("FLOTILLA_TOOLS_BIN")
        .map(|dir| std::path::PathBuf::from(dir).join("kubectl"))
        .unwrap_or_else(|| "kubectl".into());
    // A discovery cache of its own: kubectl caches discovery for minutes, and a cache written
    // before the CRDs were installed would hide them.
    let cache =
        flotilla_e2e::scratch_dir().join(format!("flotilla-e2e-kubectl-{}", random_suffix()));
    let out = tokio::process::Command::new(&bin)
        .arg("--kubeconfig")
        .arg(&env.hub.kubeconfig)
        .arg("--cache-dir")
        .arg(&cache)
        .args(args)
        .output()
        .await
        .with_context(|| format!("running {} (set FLOTILLA_TOOLS_BIN)", bin.display()));
    let _ = std::fs::remove_dir_all(&cache);
    let out = out?;
    if !out.status.success() {
        bail!(
            "kubectl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What GitOps tools make of hub object `kind/name` in `namespace`: the verdict of
/// sigs.k8s.io/cli-utils' kstatus (`Current`, `InProgress`, `Failed`, ...) and its message, as
/// the tools' `kstatus` (hack/kstatus) prints them.
pub(crate) async fn kstatus(
    env: &Environment,
    namespace: &str,
    kind: &str,
    name: &str,
) -> Result<(String, String)> {
    let json = kubectl(env, &["-n", namespace, "get", kind, name, "-o", "json"]).await?;
    let bin = std::env::var_os("FLOTILLA_TOOLS_BIN")
        .map(|dir| std::path::PathBuf::from(dir).join("kstatus"))
        .unwrap_or_else(|| "kstatus".into());
    let mut child = tokio::process::Command::new(&bin)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("running {} (set FLOTILLA_TOOLS_BIN)", bin.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        use tokio::io::AsyncWriteExt;
        stdin.write_all(json.as_bytes()).await?;
    }
    let out = child.wait_with_output().await?;
    if !out.status.success() {
        bail!("kstatus failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let mut words = line.splitn(3, ' ');
    let _object = words.next();
    let verdict = words.next().unwrap_or_default().to_string();
    Ok((verdict, words.next().unwrap_or_default().to_string()))
}

/// Waits until kstatus says `Current` of hub object `kind/name`.
pub(crate) async fn kstatus_current(
    env: &Environment,
    namespace: &str,
    kind: &str,
    name: &str,
) -> Result<()> {
    flotilla_e2e::wait_for(
        &format!("kstatus to say {kind}/{name} is Current"),
        std::time::Duration::from_secs(60),
        || async {
            let (verdict, message) = kstatus(env, namespace, kind, name).await?;
            Ok(if verdict == "Current" {
                flotilla_e2e::Seen::Done(())
            } else {
                flotilla_e2e::Seen::not_yet(format!("{verdict}: {message}"))
            })
        },
    )
    .await
}

/// The header of `kubectl get` output, as column names.
fn header(output: &str) -> Vec<&str> {
    output
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect()
}

#[tokio::test]
async fn kubectl_shows_flotilla_kinds_natively() -> Result<()> {
    let (env, client) = hub().await?;
    let ns = TestNamespace::create("api-kubectl", &[&env.hub]).await?;
    let mut cleanup = ClusterScopedObjects::new(&env.hub);
    let applied = apply_examples(&client, ns.name(), &mut cleanup).await?;
    let name_of = |kind: &str| -> Result<String> {
        applied
            .iter()
            .find(|(e, _)| e.kind() == kind)
            .map(|(e, _)| e.name().to_string())
            .ok_or_else(|| anyhow!("no {kind} example"))
    };

    // `kubectl get flotilla` lists every kind (the category).
    let listed = kubectl(&env, &["get", "flotilla", "-A", "-o", "name"]).await?;
    for (example, _) in &applied {
        let singular = example.kind().to_lowercase();
        let line = format!("{singular}.flotilla.dev/{}", example.name());
        ensure!(
            listed.lines().any(|l| l == line),
            "`kubectl get flotilla -A` does not list {line}:\n{listed}"
        );
    }

    // Printer columns and short names.
    let cluster = name_of("Cluster")?;
    let out = kubectl(&env, &["get", "fcl", &cluster]).await?;
    ensure!(
        header(&out) == ["NAME", "READY", "MODE", "VERSION", "AGE"],
        "kubectl get clusters:\n{out}"
    );
    let work = name_of("Work")?;
    let out = kubectl(&env, &["get", "fw", "-n", ns.name(), &work]).await?;
    ensure!(
        header(&out) == ["NAME", "CLUSTER", "APPLIED", "AVAILABLE", "AGE"],
        "kubectl get works:\n{out}"
    );
    ensure!(
        out.lines()
            .nth(1)
            .is_some_and(|row| row.split_whitespace().nth(1) == Some("member1")),
        "the CLUSTER column of a Work shows its flotilla.dev/cluster label:\n{out}"
    );
    let import = name_of("APIResourceImport")?;
    let out = kubectl(&env, &["get", "ari", "-n", ns.name(), &import]).await?;
    ensure!(
        header(&out) == ["NAME", "CLUSTER", "COMPATIBLE", "REASON", "AGE"],
        "kubectl get apiresourceimports:\n{out}"
    );
    let nar = name_of("NegotiatedAPIResource")?;
    let out = kubectl(&env, &["get", "nar", &nar]).await?;
    ensure!(
        header(&out) == ["NAME", "PUBLISHED", "ENFORCED", "AGE"],
        "kubectl get negotiatedapiresources:\n{out}"
    );
    let out = kubectl(&env, &["get", "fpl", "-n", ns.name()]).await?;
    ensure!(
        header(&out)
            == [
                "NAME",
                "SCHEDULING",
                "OBJECTS",
                "SCHEDULED",
                "AVAILABLE",
                "AGE"
            ],
        "kubectl get placements:\n{out}"
    );

    // The doc comments are what `kubectl explain` shows.
    let out = kubectl(&env, &["explain", "clusters.spec.kubeconfigSecretRef"]).await?;
    ensure!(
        out.contains("Required in `Push` mode"),
        "kubectl explain shows the field's documentation:\n{out}"
    );
    Ok(())
}

/// RFC 7386 JSON merge patch: `patch` merged into a copy of `base`; `null` removes a field.
fn with(base: &Value, patch: Value) -> Value {
    fn merge(target: &mut Value, patch: Value) {
        match (target, patch) {
            (Value::Object(t), Value::Object(p)) => {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(&k);
                    } else {
                        merge(t.entry(k).or_insert(Value::Null), v);
                    }
                }
            }
            (t, p) => *t = p,
        }
    }
    let mut out = base.clone();
    merge(&mut out, patch);
    out
}

/// A valid object of each kind; every invalid case below breaks exactly one rule of one of them.
struct Valid {
    cluster: Value,
    placement: Value,
    work: Value,
    import: Value,
    negotiated: Value,
}

impl Valid {
    fn new(namespace: &str, suffix: &str) -> Self {
        let api_version = flotilla_api::API_VERSION;
        let resource = |plural: &str| {
            json!({
                "groupVersion": { "group": "example.com", "version": "v1" },
                "names": { "plural": plural, "kind": "Widget" },
                "scope": "Namespaced",
                "openAPIV3Schema": { "type": "object" }
            })
        };
        let nar_plural = format!("widgets{suffix}");
        Self {
            cluster: json!({
                "apiVersion": api_version, "kind": "Cluster",
                "metadata": { "name": format!("e2e-invalid-{suffix}") },
                "spec": {
                    "syncMode": "Push",
                    "kubeconfigSecretRef": { "name": "member-kubeconfig" },
                    "taints": [{ "key": "example.com/maintenance", "effect": "NoSchedule" }],
                    "weight": 1
                }
            }),
            placement: json!({
                "apiVersion": api_version, "kind": "Placement",
                "metadata": { "name": "invalid", "namespace": namespace },
                "spec": {
                    "resourceSelectors": [{ "apiVersion": "apps/v1", "kind": "Deployment", "name": "web" }],
                    "clusterAffinity": { "clusterNames": ["member1"], "maxClusters": 1 },
                    "tolerations": [{
                        "key": "example.com/maintenance", "operator": "Equal", "value": "true",
                        "effect": "NoExecute", "tolerationSeconds": 10
                    }],
                    "replicaScheduling": {
                        "type": "Divided", "division": "Weighted",
                        "weights": [{ "cluster": "member1", "weight": 1 }]
                    },
                    "failover": { "tolerationSeconds": 5 },
                    "ignoreFields": [{ "manifest": { "kind": "Deployment" }, "jsonPaths": [".spec.replicas"] }]
                }
            }),
            work: json!({
                "apiVersion": api_version, "kind": "Work",
                "metadata": { "name": "invalid", "namespace": namespace },
                "spec": {
                    "manifests": [{
                        "apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": { "name": "settings", "namespace": "shop" },
                        "data": { "color": "blue" }
                    }],
                    "deletePolicy": "Delete",
                    "conflictPolicy": "Abort"
                }
            }),
            import: json!({
                "apiVersion": api_version, "kind": "APIResourceImport",
                "metadata": { "name": "widgets.v1.example.com", "namespace": namespace },
                "spec": with(&resource("widgets"), json!({ "schemaUpdateStrategy": "UpdateNever" }))
            }),
            negotiated: json!({
                "apiVersion": api_version, "kind": "NegotiatedAPIResource",
                "metadata": { "name": format!("{nar_plural}.v1.example.com") },
                "spec": with(&resource(&nar_plural), json!({ "publish": false }))
            }),
        }
    }
}

/// Every invalid object a user could write: (case, object, what the apiserver's message must
/// contain — the field's path and what is wrong with it).
fn invalid_cases(v: &Valid) -> Vec<(&'static str, Value, String)> {
    let (c, p, w, i, n) = (&v.cluster, &v.placement, &v.work, &v.import, &v.negotiated);
    let long_cluster_name = format!("e2e-{}", "x".repeat(43));
    let long_placement_name = "p".repeat(64);
    let wrong_nar_name = format!(
        "{}.v2.example.com",
        n["spec"]["names"]["plural"].as_str().unwrap_or_default()
    );
    let expected_nar_name = n["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let cases: Vec<(&'static str, Value, &'static str)> = vec![
        // Cluster
        (
            "cluster: push without kubeconfig",
            with(c, json!({"spec": {"kubeconfigSecretRef": null}})),
            "spec.kubeconfigSecretRef: Required value: spec.kubeconfigSecretRef is required when spec.syncMode is Push",
        ),
        (
            "cluster: default mode (push) without kubeconfig",
            with(
                c,
                json!({"spec": {"syncMode": null, "kubeconfigSecretRef": null}}),
            ),
            "spec.kubeconfigSecretRef: Required value: spec.kubeconfigSecretRef is required when spec.syncMode is Push",
        ),
        (
            "cluster: pull with a kubeconfig",
            with(c, json!({"spec": {"syncMode": "Pull"}})),
            "spec.kubeconfigSecretRef: Forbidden: spec.kubeconfigSecretRef must not be set when spec.syncMode is Pull",
        ),
        (
            "cluster: unknown sync mode",
            with(c, json!({"spec": {"syncMode": "Sideways"}})),
            "spec.syncMode: Unsupported value: \"Sideways\"",
        ),
        (
            "cluster: kubeconfig reference without a Secret name",
            with(
                c,
                json!({"spec": {"kubeconfigSecretRef": {"name": null, "key": "kubeconfig"}}}),
            ),
            "spec.kubeconfigSecretRef.name: Required value",
        ),
        (
            "cluster: kubeconfig Secret key with a slash",
            with(c, json!({"spec": {"kubeconfigSecretRef": {"key": "a/b"}}})),
            "spec.kubeconfigSecretRef.key in body should match",
        ),
        (
            "cluster: negative weight",
            with(c, json!({"spec": {"weight": -1}})),
            "spec.weight in body should be greater than or equal to 0",
        ),
        (
            "cluster: taint with an unknown effect",
            with(
                c,
                json!({"spec": {"taints": [{"key": "a", "effect": "Evict"}]}}),
            ),
            "spec.taints[0].effect: Unsupported value: \"Evict\"",
        ),
        (
            "cluster: taint key that is not a qualified name",
            with(
                c,
                json!({"spec": {"taints": [{"key": "not a key", "effect": "NoSchedule"}]}}),
            ),
            "spec.taints[0].key in body should match",
        ),
        (
            "cluster: the same taint twice",
            with(
                c,
                json!({"spec": {"taints": [
             {"key": "a", "effect": "NoSchedule"}, {"key": "a", "value": "b", "effect": "NoSchedule"}]}}),
            ),
            "spec.taints[1]: Duplicate value",
        ),
        (
            "cluster: name with a dot (namespace flotilla-cluster-<name> would be invalid)",
            with(
                c,
                json!({"metadata": {"name": format!("e2e.{}", random_suffix())}}),
            ),
            "metadata.name must be a lowercase RFC 1123 label",
        ),
        (
            "cluster: name longer than 46 characters",
            with(c, json!({"metadata": {"name": long_cluster_name}})),
            "metadata.name must be a lowercase RFC 1123 label (letters, digits, '-') of at most 46 characters",
        ),
        // Placement
        (
            "placement: Divided without a division",
            with(
                p,
                json!({"spec": {"replicaScheduling": {"division": null, "weights": null}}}),
            ),
            "spec.replicaScheduling.division: Required value: spec.replicaScheduling.division is required when type is Divided",
        ),
        (
            "placement: Duplicated with a division",
            with(
                p,
                json!({"spec": {"replicaScheduling": {"type": "Duplicated", "division": "Even", "weights": null}}}),
            ),
            "spec.replicaScheduling.division: Forbidden: spec.replicaScheduling.division may only be set when type is Divided",
        ),
        (
            "placement: Weighted without weights",
            with(p, json!({"spec": {"replicaScheduling": {"weights": null}}})),
            "spec.replicaScheduling.weights: Required value: spec.replicaScheduling.weights is required when division is Weighted",
        ),
        (
            "placement: weights with Even",
            with(
                p,
                json!({"spec": {"replicaScheduling": {"division": "Even"}}}),
            ),
            "spec.replicaScheduling.weights: Forbidden: spec.replicaScheduling.weights may only be set when division is Weighted",
        ),
        (
            "placement: unknown division",
            with(
                p,
                json!({"spec": {"replicaScheduling": {"division": "Random", "weights": null}}}),
            ),
            "spec.replicaScheduling.division: Unsupported value: \"Random\"",
        ),
        (
            "placement: unknown replica scheduling type",
            with(
                p,
                json!({"spec": {"replicaScheduling": {"type": "Spread"}}}),
            ),
            "spec.replicaScheduling.type: Unsupported value: \"Spread\"",
        ),
        (
            "placement: negative weight",
            with(
                p,
                json!({"spec": {"replicaScheduling": {"weights": [{"cluster": "member1", "weight": -2}]}}}),
            ),
            "spec.replicaScheduling.weights[0].weight in body should be greater than or equal to 0",
        ),
        (
            "placement: weight for a cluster name that cannot exist",
            with(
                p,
                json!({"spec": {"replicaScheduling": {"weights": [{"cluster": "Member_1", "weight": 1}]}}}),
            ),
            "spec.replicaScheduling.weights[0].cluster in body should match",
        ),
        (
            "placement: maxClusters 0",
            with(p, json!({"spec": {"clusterAffinity": {"maxClusters": 0}}})),
            "spec.clusterAffinity.maxClusters in body should be greater than or equal to 1",
        ),
        // A value the apiserver would store but the controllers' types cannot hold is refused at
        // the door: one such object would otherwise be a poison for every reader.
        (
            "placement: maxClusters beyond int32",
            with(
                p,
                json!({"spec": {"clusterAffinity": {"maxClusters": 2147483648_u64}}}),
            ),
            "spec.clusterAffinity.maxClusters in body should be less than or equal to 10000",
        ),
        (
            "placement: invalid cluster name",
            with(
                p,
                json!({"spec": {"clusterAffinity": {"clusterNames": ["Member_1"]}}}),
            ),
            "spec.clusterAffinity.clusterNames[0] in body should match",
        ),
        (
            "placement: a cluster named twice",
            with(
                p,
                json!({"spec": {"clusterAffinity": {"clusterNames": ["member1", "member1"]}}}),
            ),
            "spec.clusterAffinity.clusterNames[1]: Duplicate value",
        ),
        (
            "placement: toleration Exists with a value",
            with(
                p,
                json!({"spec": {"tolerations": [{"key": "a", "operator": "Exists", "value": "b"}]}}),
            ),
            "spec.tolerations[0].value: Invalid value: value must be empty when operator is Exists",
        ),
        (
            "placement: toleration Equal without a key",
            with(
                p,
                json!({"spec": {"tolerations": [{"operator": "Equal", "value": "b"}]}}),
            ),
            "spec.tolerations[0].key: Required value: key is required unless operator is Exists",
        ),
        (
            "placement: tolerationSeconds without NoExecute",
            with(
                p,
                json!({"spec": {"tolerations": [{"key": "a", "effect": "NoSchedule", "tolerationSeconds": 5}]}}),
            ),
            "spec.tolerations[0].tolerationSeconds: Forbidden: tolerationSeconds may only be set when effect is NoExecute",
        ),
        (
            "placement: negative tolerationSeconds",
            with(
                p,
                json!({"spec": {"tolerations": [{"key": "a", "effect": "NoExecute", "tolerationSeconds": -5}]}}),
            ),
            "spec.tolerations[0].tolerationSeconds in body should be greater than or equal to 0",
        ),
        (
            "placement: toleration with an unknown effect",
            with(
                p,
                json!({"spec": {"tolerations": [{"key": "a", "effect": "Evict"}]}}),
            ),
            "spec.tolerations[0].effect: Unsupported value: \"Evict\"",
        ),
        (
            "placement: toleration with an unknown operator",
            with(
                p,
                json!({"spec": {"tolerations": [{"key": "a", "operator": "In"}]}}),
            ),
            "spec.tolerations[0].operator: Unsupported value: \"In\"",
        ),
        (
            "placement: resource selector with name and labelSelector",
            with(
                p,
                json!({"spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment",
             "name": "web", "labelSelector": {"matchLabels": {"app": "web"}}}]}}),
            ),
            "spec.resourceSelectors[0]: Invalid value: name and labelSelector are mutually exclusive",
        ),
        (
            "placement: resource selector without a kind",
            with(
                p,
                json!({"spec": {"resourceSelectors": [{"apiVersion": "apps/v1"}]}}),
            ),
            "spec.resourceSelectors[0].kind: Required value",
        ),
        (
            "placement: resource selector with a malformed apiVersion",
            with(
                p,
                json!({"spec": {"resourceSelectors": [{"apiVersion": "apps/v1/extra", "kind": "Deployment"}]}}),
            ),
            "spec.resourceSelectors[0].apiVersion in body should match",
        ),
        (
            "placement: negative failover tolerationSeconds",
            with(p, json!({"spec": {"failover": {"tolerationSeconds": -1}}})),
            "spec.failover.tolerationSeconds in body should be greater than or equal to 0",
        ),
        (
            "placement: unknown deletePolicy",
            with(p, json!({"spec": {"deletePolicy": "Keep"}})),
            "spec.deletePolicy: Unsupported value: \"Keep\"",
        ),
        (
            "placement: unknown conflictPolicy",
            with(p, json!({"spec": {"conflictPolicy": "Overwrite"}})),
            "spec.conflictPolicy: Unsupported value: \"Overwrite\"",
        ),
        (
            "placement: ignoring the object's name",
            with(
                p,
                json!({"spec": {"ignoreFields": [{"jsonPaths": [".metadata.name"]}]}}),
            ),
            "spec.ignoreFields[0].jsonPaths: Invalid value: jsonPaths must not include .apiVersion, .kind, .metadata, .metadata.name or .metadata.namespace",
        ),
        (
            "placement: ignoreFields path without the leading dot",
            with(
                p,
                json!({"spec": {"ignoreFields": [{"jsonPaths": ["spec.replicas"]}]}}),
            ),
            "spec.ignoreFields[0].jsonPaths[0] in body should match",
        ),
        (
            "placement: ignoreFields without paths",
            with(p, json!({"spec": {"ignoreFields": [{"jsonPaths": []}]}})),
            "spec.ignoreFields[0].jsonPaths in body should have at least 1 items",
        ),
        (
            "placement: name longer than a label value",
            with(p, json!({"metadata": {"name": long_placement_name}})),
            "metadata.name must be at most 63 characters",
        ),
        // Work
        (
            "work: no manifests",
            with(w, json!({"spec": {"manifests": []}})),
            "spec.manifests in body should have at least 1 items",
        ),
        (
            "work: manifests missing",
            with(w, json!({"spec": {"manifests": null}})),
            "spec.manifests: Required value",
        ),
        (
            "work: unknown deletePolicy",
            with(w, json!({"spec": {"deletePolicy": "Foreground"}})),
            "spec.deletePolicy: Unsupported value: \"Foreground\"",
        ),
        (
            "work: unknown conflictPolicy",
            with(w, json!({"spec": {"conflictPolicy": "Overwrite"}})),
            "spec.conflictPolicy: Unsupported value: \"Overwrite\"",
        ),
        (
            "work: ignoring the object's kind",
            with(
                w,
                json!({"spec": {"ignoreFields": [{"jsonPaths": [".spec.replicas", ".kind"]}]}}),
            ),
            "spec.ignoreFields[0].jsonPaths: Invalid value: jsonPaths must not include",
        ),
        // APIResourceImport
        (
            "import: name that is not <plural>.<version>.<group>",
            with(i, json!({"metadata": {"name": "widgets"}})),
            "metadata.name must be <plural>.<version>.<group> (core for the empty group), here widgets.v1.example.com",
        ),
        (
            "import: core type not named <plural>.<version>.core",
            with(
                i,
                json!({"metadata": {"name": "configmaps.v1"},
             "spec": {"groupVersion": {"group": ""}, "names": {"plural": "configmaps", "kind": "ConfigMap"}}}),
            ),
            "metadata.name must be <plural>.<version>.<group> (core for the empty group), here configmaps.v1.core",
        ),
        (
            "import: unknown scope",
            with(i, json!({"spec": {"scope": "Global"}})),
            "spec.scope: Unsupported value: \"Global\"",
        ),
        (
            "import: unknown schemaUpdateStrategy",
            with(i, json!({"spec": {"schemaUpdateStrategy": "Always"}})),
            "spec.schemaUpdateStrategy: Unsupported value: \"Always\"",
        ),
        (
            "import: plural that is not a DNS label",
            with(
                i,
                json!({"metadata": {"name": "Widgets.v1.example.com"}, "spec": {"names": {"plural": "Widgets"}}}),
            ),
            "spec.names.plural in body should match",
        ),
        (
            "import: no kind",
            with(i, json!({"spec": {"names": {"kind": null}}})),
            "spec.names.kind: Required value",
        ),
        (
            "import: no schema",
            with(i, json!({"spec": {"openAPIV3Schema": null}})),
            "spec.openAPIV3Schema: Required value",
        ),
        (
            "import: no version",
            with(i, json!({"spec": {"groupVersion": {"version": null}}})),
            "spec.groupVersion.version: Required value",
        ),
        // NegotiatedAPIResource
        (
            "negotiated: publish that is not a boolean",
            with(n, json!({"spec": {"publish": "yes"}})),
            "spec.publish: Invalid value: \"string\": spec.publish in body must be of type boolean",
        ),
        (
            "negotiated: unknown scope",
            with(n, json!({"spec": {"scope": "Global"}})),
            "spec.scope: Unsupported value: \"Global\"",
        ),
    ];
    let mut cases: Vec<_> = cases
        .into_iter()
        .map(|(name, object, expected)| (name, object, expected.to_string()))
        .collect();
    cases.push((
        "negotiated: name of another version",
        with(n, json!({"metadata": {"name": wrong_nar_name}})),
        format!(
            "metadata.name must be <plural>.<version>.<group> (core for the empty group), here {expected_nar_name}"
        ),
    ));
    cases
}

#[tokio::test]
async fn invalid_objects_are_rejected_with_the_field_named() -> Result<()> {
    let (env, client) = hub().await?;
    let ns = TestNamespace::create("api-invalid", &[&env.hub]).await?;
    let valid = Valid::new(ns.name(), &random_suffix());

    // Positive control: each valid object passes, so a rejection below is the case's own rule.
    // Everything is sent with dryRun: the apiserver validates fully and stores nothing.
    for object in [
        &valid.cluster,
        &valid.placement,
        &valid.work,
        &valid.import,
        &valid.negotiated,
    ] {
        api::create(&client, object, true)
            .await?
            .with_context(|| format!("the valid {} should be accepted", object["kind"]))?;
        api::apply(&client, object, true).await?.with_context(|| {
            format!(
                "the valid {} should be accepted by server-side apply",
                object["kind"]
            )
        })?;
    }

    let cases = invalid_cases(&valid);
    let mut failures = Vec::new();
    for (case, object, expected) in &cases {
        // As `kubectl create` (and a first `kubectl apply`) sends it: a 422 naming the field.
        match api::create(&client, object, true).await? {
            Ok(_) => failures.push(format!(
                "{case}: accepted, expected a rejection naming {expected:?}"
            )),
            Err(kube::Error::Api(status))
                if status.code == 422 && status.message.contains(expected.as_str()) => {}
            Err(kube::Error::Api(status)) => failures.push(format!(
                "{case}: expected 422 with {expected:?}, got {}: {}",
                status.code, status.message
            )),
            Err(e) => failures.push(format!(
                "{case}: expected 422 with {expected:?}, got error {e}"
            )),
        }
        // As a controller sends it (server-side apply): rejected too. For duplicate list keys and
        // wrong types the apiserver answers before validation, with its own wording.
        if let Ok(stored) = api::apply(&client, object, true).await? {
            failures.push(format!(
                "{case}: server-side apply accepted it: {:?}",
                stored.metadata.name
            ));
        }
    }
    ensure!(
        failures.is_empty(),
        "{} of {} invalid cases were not rejected as expected:\n  {}",
        failures.len(),
        cases.len(),
        failures.join("\n  ")
    );
    // Report the count, so a shrinking table is noticed in the log.
    eprintln!(
        "all {} invalid cases were rejected with their field named",
        cases.len()
    );
    // Nothing was stored.
    let clusters: Api<Cluster> = Api::all(client.clone());
    let name = valid.cluster["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    ensure!(
        clusters.get_opt(name).await?.is_none(),
        "dry-run stored Cluster {name}"
    );
    Ok(())
}

/// A Work status entry no controller can hold (an ordinal beyond int32, not JSON, not an object),
/// as a member's agent that lies or a hand edit may write it: the hub stores the entries as they
/// come (it checks no field of them: each cost it CPU on every write of the Work), and every
/// controller reads the Work without that entry — it never fails the decoding of the Work, nor
/// of the other Works of a watch.
#[tokio::test]
async fn a_status_entry_no_controller_can_read_is_left_out_and_the_work_still_reads() -> Result<()>
{
    let (env, client) = hub().await?;
    let ns = TestNamespace::create("api-status", &[&env.hub]).await?;
    let valid = Valid::new(ns.name(), &random_suffix());
    let created = api::create(&client, &valid.work, false).await??;
    let name = created.metadata.name.clone().unwrap_or_default();
    let works: Api<flotilla_api::Work> = Api::namespaced(client.clone(), ns.name());
    let good = json!({"ordinal": 0, "applied": "True",
        "identity": {"group": "apps", "version": "v1", "kind": "Deployment", "name": "web", "namespace": "shop"}});
    let beyond_int32 = json!({"ordinal": 4_294_967_296_u64,
        "identity": {"group": "apps", "version": "v1", "kind": "Deployment", "name": "web", "namespace": "shop"}});
    let poison = json!({"status": {"manifests": [
        beyond_int32.clone(), beyond_int32.to_string(), "{not json", 7, good.to_string(),
    ]}});
    works
        .patch_status(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&poison),
        )
        .await
        .context("the hub stores status entries as they come")?;
    let read = works
        .get(&name)
        .await
        .context("a Work with entries no controller can hold still reads")?;
    let entries = read.status.unwrap_or_default().manifests;
    ensure!(
        entries.len() == 1
            && entries[0].identity.name == "web"
            && entries[0].applied == flotilla_api::ConditionStatus::True,
        "only the readable entry is read: {entries:?}"
    );
    // The other Works of the namespace still read in one list (one watch's decoding).
    let listed = works.list(&Default::default()).await?;
    ensure!(
        listed
            .items
            .iter()
            .any(|w| w.metadata.name.as_deref() == Some(name.as_str())),
        "the list holds the Work"
    );
    Ok(())
}
