//! `kubectl flotilla`, run as a user runs it: the binary on the PATH, called through kubectl's
//! plugin mechanism, against the hub with the test's controllers running under the chart's
//! identities.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, ensure};
use base64::Engine as _;
use flotilla_api::Cluster;
use flotilla_e2e::fleet::{Fleet, SELECTOR_LABEL};
use flotilla_e2e::process::controller_binary;
use flotilla_e2e::{ClusterInfo, Environment, Seen, random_suffix, scratch_dir, wait_for};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::config::Kubeconfig;
use kube::{Api, ResourceExt};
use serde_json::json;

/// What one run of a command said.
struct Said {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl std::fmt::Display for Said {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\nstdout:\n{}\nstderr:\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// `kubectl flotilla ARGS` with the hub's kubeconfig in $KUBECONFIG, kubectl-flotilla found on
/// the PATH as kubectl finds plugins.
async fn kubectl_flotilla(hub: &ClusterInfo, args: &[&str]) -> Result<Said> {
    let tools = std::env::var_os("FLOTILLA_TOOLS_BIN")
        .map(PathBuf::from)
        .context("FLOTILLA_TOOLS_BIN (the directory of kubectl) is not set")?;
    let plugin = controller_binary("kubectl-flotilla")?;
    let plugin_dir = plugin.parent().context("the plugin's directory")?;
    let path = std::env::join_paths([
        plugin_dir,
        tools.as_path(),
        Path::new("/usr/bin"),
        Path::new("/bin"),
    ])?;
    let out = tokio::process::Command::new(tools.join("kubectl"))
        .arg("flotilla")
        .args(args)
        .env("PATH", path)
        .env("KUBECONFIG", &hub.kubeconfig)
        .output()
        .await
        .context("running kubectl flotilla")?;
    Ok(Said {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into(),
        stderr: String::from_utf8_lossy(&out.stderr).into(),
    })
}

/// `member`'s kubeconfig as users often have it: the CA, the client certificate and key (or the
/// token) in files beside it, named relative to it. Returns the kubeconfig's path.
fn kubeconfig_with_files(member: &ClusterInfo, dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let mut k = member.read_kubeconfig()?;
    let decode = |data: &str| base64::engine::general_purpose::STANDARD.decode(data.trim());
    for named in &mut k.clusters {
        if let Some(c) = named.cluster.as_mut()
            && let Some(data) = c.certificate_authority_data.take()
        {
            std::fs::write(dir.join("ca.crt"), decode(&data)?)?;
            c.certificate_authority = Some("ca.crt".into());
        }
    }
    for named in &mut k.auth_infos {
        let Some(u) = named.auth_info.as_mut() else {
            continue;
        };
        if let Some(data) = u.client_certificate_data.take() {
            std::fs::write(dir.join("client.crt"), decode(&data)?)?;
            u.client_certificate = Some("client.crt".into());
        }
        if let Some(data) = u.client_key_data.take() {
            use secrecy::ExposeSecret as _;
            std::fs::write(dir.join("client.key"), decode(data.expose_secret())?)?;
            u.client_key = Some("client.key".into());
        }
        if let Some(token) = u.token.take() {
            use secrecy::ExposeSecret as _;
            std::fs::write(dir.join("token"), token.expose_secret())?;
            u.token_file = Some("token".into());
        }
    }
    let path = dir.join("kubeconfig");
    std::fs::write(&path, serde_json::to_string(&k)?)?;
    Ok(path)
}

/// A kubeconfig of `member` whose user runs an exec plugin, which a Secret must not hold.
fn kubeconfig_with_exec(member: &ClusterInfo, dir: &Path) -> Result<PathBuf> {
    let mut k: serde_json::Value = serde_json::to_value(member.read_kubeconfig()?)?;
    for user in k["users"].as_array_mut().context("users")? {
        user["user"] = json!({"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                       "command": "cloud-login", "interactiveMode": "Never"}});
    }
    let path = dir.join("exec.kubeconfig");
    std::fs::write(&path, k.to_string())?;
    Ok(path)
}

/// The Secrets `join` wrote for Cluster `name` in `namespaces`.
async fn secrets_of(hub: &kube::Client, namespaces: &[&str], name: &str) -> Result<Vec<Secret>> {
    let mut found = Vec::new();
    for ns in namespaces {
        let list = Api::<Secret>::namespaced(hub.clone(), ns)
            .list(&ListParams::default().labels(&format!("flotilla.dev/cluster={name}")))
            .await?;
        found.extend(list.items);
    }
    Ok(found)
}

fn kubeconfig_in(secret: &Secret) -> Result<String> {
    let data = secret
        .data
        .as_ref()
        .and_then(|d| d.get("kubeconfig"))
        .ok_or_else(|| anyhow!("Secret {} has no kubeconfig", secret.name_any()))?;
    Ok(String::from_utf8(data.0.clone())?)
}

/// The token of the read-only kubeconfig in `secret`.
fn reader_token(secret: &Secret) -> Result<String> {
    use secrecy::ExposeSecret as _;
    let k = Kubeconfig::from_yaml(&kubeconfig_in(secret)?)?;
    k.auth_infos
        .first()
        .and_then(|u| u.auth_info.as_ref())
        .and_then(|u| u.token.as_ref())
        .map(|t| t.expose_secret().to_string())
        .ok_or_else(|| anyhow!("no token in {}", secret.name_any()))
}

#[tokio::test]
async fn kubectl_flotilla_join_registers_a_push_member_that_flotilla_then_serves() -> Result<()> {
    let env = Environment::get();
    let member = env.members.last().context("a member")?.clone();
    let fleet = Fleet::builder("cli-join").first_members(0).start().await?;
    let release_ns = fleet.identities.namespace.clone();
    let readers_ns = flotilla_e2e::clusters::readers_namespace(&release_ns);
    let dir = scratch_dir().join(format!("cli-join-{}", random_suffix()));
    let kubeconfig = kubeconfig_with_files(&member, &dir)?;
    let kubeconfig = kubeconfig.to_str().context("a UTF-8 path")?;
    let name = format!("e2e-{}", random_suffix());
    let label = fleet.selector.clone();
    let join = |name: String, kubeconfig: String, extra: Vec<String>| {
        let release_ns = release_ns.clone();
        let label = label.clone();
        let hub = env.hub.clone();
        async move {
            let mut args = vec![
                "join".to_string(),
                name,
                "--member-kubeconfig".into(),
                kubeconfig,
                "-n".into(),
                release_ns,
                // Not the member's flotilla-system, which chart tests on the host member delete.
                "--reader-namespace".into(),
                "flotilla-e2e-reader".into(),
                "--label".into(),
                label,
            ];
            args.extend(extra);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            kubectl_flotilla(&hub, &args).await
        }
    };
    let nothing_written = |what: &'static str, name: String| {
        let hub = fleet.hub.clone();
        let (release_ns, readers_ns) = (release_ns.clone(), readers_ns.clone());
        async move {
            ensure!(
                Api::<Cluster>::all(hub.clone())
                    .get_opt(&name)
                    .await?
                    .is_none(),
                "{what}: Cluster {name} was created"
            );
            let secrets = secrets_of(&hub, &[&release_ns, &readers_ns], &name).await?;
            ensure!(
                secrets.is_empty(),
                "{what}: Secrets were written: {:?}",
                secrets
                    .iter()
                    .map(ResourceExt::name_any)
                    .collect::<Vec<_>>()
            );
            Ok(())
        }
    };

    // Bad input is refused before anything is written, naming what is wrong.
    let exec = kubeconfig_with_exec(&member, &dir)?;
    let said = join(name.clone(), exec.display().to_string(), vec![]).await?;
    ensure!(
        said.code == Some(1) && said.stderr.contains("user.exec is not allowed"),
        "an exec plugin: {said}"
    );
    nothing_written("an exec plugin", name.clone()).await?;

    let said = join(
        name.clone(),
        kubeconfig.into(),
        vec!["--readers-namespace".into(), "no-such-readers".into()],
    )
    .await?;
    ensure!(
        said.code == Some(1)
            && said
                .stderr
                .contains("the hub has no namespace no-such-readers"),
        "a readers' namespace that does not exist: {said}"
    );
    nothing_written("no readers' namespace", name.clone()).await?;

    // The hub's own validation of the Cluster speaks in the dry run, before the Secrets.
    let bad_name = format!("e2e-{}-{}", random_suffix(), "x".repeat(50));
    let said = join(bad_name.clone(), kubeconfig.into(), vec![]).await?;
    ensure!(
        said.code == Some(1) && said.stderr.contains("the hub refused Cluster"),
        "a name too long for the member's hub namespace: {said}"
    );
    nothing_written("a name the hub refuses", bad_name).await?;

    // Joined: Ready with the registration controller's own (chart) identity.
    let said = join(
        name.clone(),
        kubeconfig.into(),
        vec!["--wait".into(), "--timeout".into(), "60s".into()],
    )
    .await?;
    ensure!(said.code == Some(0), "join: {said}");
    for line in [
        format!("secret/{name}-kubeconfig stored in {release_ns}"),
        format!("secret/{name}-reader stored in {readers_ns}"),
        format!("cluster.flotilla.dev/{name} joined (Push)"),
        format!("cluster.flotilla.dev/{name} is Ready"),
    ] {
        ensure!(
            said.stdout.contains(&line),
            "join does not say {line:?}: {said}"
        );
    }
    let secrets = secrets_of(&fleet.hub, &[&readers_ns], &name).await?;
    let reader = secrets.first().context("the reader's Secret")?;
    let token = reader_token(reader)?;
    ensure!(
        !said.stdout.contains(&token) && !said.stderr.contains(&token),
        "join printed the reader's token"
    );
    let syncer_secret = secrets_of(&fleet.hub, &[&release_ns], &name).await?;
    let stored = kubeconfig_in(syncer_secret.first().context("the syncer's Secret")?)?;
    ensure!(
        stored.contains("certificate-authority-data") && !stored.contains("ca.crt"),
        "the files the member kubeconfig names were not read in: {stored}"
    );

    // The syncer writes with the stored kubeconfig: a ConfigMap placed on the member.
    let ns = fleet.ns.name();
    Api::<flotilla_api::Placement>::namespaced(fleet.hub.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "everywhere"},
                "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"}]},
            }))?,
        )
        .await?;
    Api::<ConfigMap>::namespaced(fleet.hub.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(fleet.configmap("joined", json!({"k": "v"})))?,
        )
        .await?;
    let member_client = member.client().await?;
    let result = wait_for(
        "the ConfigMap on the joined member",
        Duration::from_secs(60),
        || async {
            let got = Api::<ConfigMap>::namespaced(member_client.clone(), ns)
                .get_opt("joined")
                .await?;
            Ok(match got.and_then(|c| c.data) {
                Some(d) if d == BTreeMap::from([("k".to_string(), "v".to_string())]) => {
                    Seen::Done(())
                }
                other => Seen::not_yet(format!("{other:?}")),
            })
        },
    )
    .await
    .map_err(|e| e.context(fleet.syncer_log()));

    // Joining again renews the reader's token and leaves the Cluster as it was.
    let before = fleet.clusters.get(&name).await?;
    let said = join(name.clone(), kubeconfig.into(), vec![]).await?;
    ensure!(said.code == Some(0), "joining again: {said}");
    let after = fleet.clusters.get(&name).await?;
    ensure!(
        after.metadata.generation == before.metadata.generation,
        "joining again changed the Cluster's spec"
    );
    let renewed = secrets_of(&fleet.hub, &[&readers_ns], &name).await?;
    ensure!(
        reader_token(renewed.first().context("the reader's Secret")?)? != token,
        "joining again did not renew the reader's token"
    );

    // A pull member of the same name is not turned into a push member.
    let pull = format!("e2e-{}", random_suffix());
    fleet
        .clusters
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "flotilla.dev/v1alpha1", "kind": "Cluster",
                "metadata": {"name": pull, "labels": {SELECTOR_LABEL: "cli-pull"}},
                "spec": {"syncMode": "Pull"},
            }))?,
        )
        .await?;
    let said = join(pull.clone(), kubeconfig.into(), vec![]).await?;
    let _ = fleet.clusters.delete(&pull, &DeleteParams::default()).await;
    ensure!(
        said.code == Some(1) && said.stderr.contains("exists as a pull member"),
        "joining a pull member's name: {said}"
    );

    // Flotilla made the test namespace in the member (it was not registered when the fleet made
    // its namespaces): remove it.
    let _ = Api::<Namespace>::all(member_client)
        .delete(ns, &DeleteParams::background())
        .await;
    result
}
