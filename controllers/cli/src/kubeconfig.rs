//! The member's kubeconfig as the hub will keep it: one context, its credentials inline, checked
//! as the controllers check it before they use it.

use std::path::Path;

use anyhow::{Context as _, anyhow};
use base64::Engine as _;
use flotilla_runtime::member_client::{Transport, check_kubeconfig};
use kube::config::{Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext};

/// Reads the kubeconfig at `path` and keeps only `context` (its current context when `None`),
/// with that context's cluster and user, every file it names read into the matching `*-data`
/// field. The result is what a hub Secret may hold: a kubeconfig the controllers refuse (an exec
/// plugin, an unverified server without `transport` allowing it) is refused here, naming the
/// field, before anything is written anywhere.
pub fn for_member(
    path: &Path,
    context: Option<&str>,
    transport: Transport,
) -> anyhow::Result<Kubeconfig> {
    let full = Kubeconfig::read_from(path)
        .with_context(|| format!("reading the member kubeconfig {}", path.display()))?;
    let kubeconfig = inline_files(minify(full, context)?)?;
    check_kubeconfig(&kubeconfig, transport)
        .map_err(|problem| anyhow!("the member kubeconfig {}: {problem}", path.display()))?;
    Ok(kubeconfig)
}

/// Only `context` (the current context when `None`), its cluster and its user.
pub fn minify(full: Kubeconfig, context: Option<&str>) -> anyhow::Result<Kubeconfig> {
    let name = match context {
        Some(c) => c.to_string(),
        None => full
            .current_context
            .clone()
            .filter(|c| !c.is_empty())
            .ok_or_else(|| anyhow!("it sets no current-context: name one with --member-context"))?,
    };
    let named: NamedContext = full
        .contexts
        .iter()
        .find(|c| c.name == name)
        .cloned()
        .ok_or_else(|| {
            let known: Vec<&str> = full.contexts.iter().map(|c| c.name.as_str()).collect();
            anyhow!("it has no context {name:?} (it has: {})", known.join(", "))
        })?;
    let context = named
        .context
        .as_ref()
        .ok_or_else(|| anyhow!("context {name:?} is empty"))?;
    let cluster: NamedCluster = full
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .cloned()
        .ok_or_else(|| {
            anyhow!(
                "context {name:?} names cluster {:?}, which it does not have",
                context.cluster
            )
        })?;
    let user: Vec<NamedAuthInfo> = match &context.user {
        Some(user) => vec![
            full.auth_infos
                .iter()
                .find(|u| &u.name == user)
                .cloned()
                .ok_or_else(|| {
                    anyhow!("context {name:?} names user {user:?}, which it does not have")
                })?,
        ],
        None => Vec::new(),
    };
    Ok(Kubeconfig {
        clusters: vec![cluster],
        auth_infos: user,
        contexts: vec![named],
        current_context: Some(name),
        ..Kubeconfig::default()
    })
}

/// Reads every file the kubeconfig names (the CA, a client certificate and key, a token file)
/// into the kubeconfig itself, since a Secret cannot take files along.
pub fn inline_files(mut kubeconfig: Kubeconfig) -> anyhow::Result<Kubeconfig> {
    let read = |what: &str, path: &str| {
        std::fs::read(path).with_context(|| format!("reading the {what} file {path}"))
    };
    let b64 = |bytes: Vec<u8>| base64::engine::general_purpose::STANDARD.encode(bytes);
    for named in &mut kubeconfig.clusters {
        let Some(cluster) = named.cluster.as_mut() else {
            continue;
        };
        if let Some(path) = cluster.certificate_authority.take() {
            cluster.certificate_authority_data = Some(b64(read("certificate-authority", &path)?));
        }
    }
    for named in &mut kubeconfig.auth_infos {
        let Some(user) = named.auth_info.as_mut() else {
            continue;
        };
        if let Some(path) = user.client_certificate.take() {
            user.client_certificate_data = Some(b64(read("client-certificate", &path)?));
        }
        if let Some(path) = user.client_key.take() {
            user.client_key_data = Some(b64(read("client-key", &path)?).into());
        }
        if let Some(path) = user.token_file.take() {
            let token = String::from_utf8(read("tokenFile", &path)?)
                .map_err(|_| anyhow!("the tokenFile {path} is not text"))?;
            user.token = Some(token.trim().to_string().into());
        }
    }
    Ok(kubeconfig)
}

/// `kubeconfig` (minified) authenticating with `token` instead of its own user.
pub fn with_token(kubeconfig: &Kubeconfig, user: &str, token: String) -> Kubeconfig {
    let mut out = kubeconfig.clone();
    out.auth_infos = vec![NamedAuthInfo {
        name: user.to_string(),
        auth_info: Some(kube::config::AuthInfo {
            token: Some(token.into()),
            ..Default::default()
        }),
        ..Default::default()
    }];
    for named in &mut out.contexts {
        if let Some(context) = named.context.as_mut() {
            context.user = Some(user.to_string());
        }
    }
    out
}

/// The kubeconfig as the text a Secret holds (YAML; JSON is YAML).
pub fn to_text(kubeconfig: &Kubeconfig) -> anyhow::Result<String> {
    serde_json::to_string_pretty(kubeconfig).context("writing a kubeconfig")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    const TWO_CONTEXTS: &str = r#"
apiVersion: v1
kind: Config
current-context: a
clusters:
- name: a
  cluster: {server: "https://a.example:6443", certificate-authority: ca.crt}
- name: b
  cluster: {server: "https://b.example:6443", certificate-authority-data: QkI=}
users:
- name: a
  user: {client-certificate: a.crt, client-key: a.key}
- name: b
  user: {tokenFile: b.token}
- name: c
  user: {exec: {command: gcloud, apiVersion: client.authentication.k8s.io/v1}}
contexts:
- name: a
  context: {cluster: a, user: a}
- name: b
  context: {cluster: b, user: b}
- name: c
  context: {cluster: b, user: c}
"#;

    /// A directory holding the kubeconfig above and the files it names.
    fn fixture() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("a temporary directory");
        for (name, content) in [
            ("config", TWO_CONTEXTS),
            ("ca.crt", "CA"),
            ("a.crt", "CERT"),
            ("a.key", "KEY"),
            ("b.token", "TOKEN\n"),
        ] {
            let mut f = std::fs::File::create(dir.path().join(name)).expect("a fixture file");
            f.write_all(content.as_bytes()).expect("written");
        }
        dir
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn the_current_context_is_kept_alone_with_its_files_read_in_relative_to_the_kubeconfig() {
        let dir = fixture();
        let k = for_member(&dir.path().join("config"), None, Transport::Verified)
            .expect("context a is usable");
        assert_eq!(k.current_context.as_deref(), Some("a"));
        assert_eq!(k.contexts.len(), 1);
        assert_eq!(k.clusters.len(), 1);
        assert_eq!(k.auth_infos.len(), 1);
        let cluster = k.clusters[0].cluster.as_ref().expect("a cluster");
        assert_eq!(cluster.certificate_authority, None);
        assert_eq!(cluster.certificate_authority_data, Some(b64("CA")));
        let user = k.auth_infos[0].auth_info.as_ref().expect("a user");
        assert_eq!(user.client_certificate, None);
        assert_eq!(user.client_certificate_data, Some(b64("CERT")));
        assert!(user.client_key.is_none() && user.client_key_data.is_some());
    }

    #[test]
    fn another_context_is_chosen_by_name_and_its_token_file_becomes_its_token() {
        let dir = fixture();
        let k = for_member(&dir.path().join("config"), Some("b"), Transport::Verified)
            .expect("context b is usable");
        let user = k.auth_infos[0].auth_info.as_ref().expect("a user");
        assert!(user.token_file.is_none());
        let text = to_text(&k).expect("text");
        assert!(text.contains("\"TOKEN\""), "{text}");
        // The text is a kubeconfig again, and one the controllers accept.
        let back = Kubeconfig::from_yaml(&text).expect("parses");
        check_kubeconfig(&back, Transport::Verified).expect("usable");
    }

    #[test]
    fn an_exec_plugin_is_refused_naming_the_field() {
        let dir = fixture();
        let e = for_member(&dir.path().join("config"), Some("c"), Transport::Verified)
            .expect_err("an exec plugin cannot go into a Secret");
        let message = format!("{e:#}");
        assert!(message.contains("users[c].user.exec"), "{message}");
    }

    #[test]
    fn an_unknown_context_is_refused_listing_the_known_ones() {
        let dir = fixture();
        let e = for_member(&dir.path().join("config"), Some("z"), Transport::Verified)
            .expect_err("no such context");
        assert!(format!("{e:#}").contains("has no context \"z\" (it has: a, b, c)"));
    }

    #[test]
    fn an_unverified_server_is_refused_unless_the_cluster_allows_it() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("config");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: x\n\
             clusters: [{name: x, cluster: {server: 'https://x:6443', insecure-skip-tls-verify: true}}]\n\
             users: [{name: x, user: {token: T}}]\n\
             contexts: [{name: x, context: {cluster: x, user: x}}]\n",
        )
        .expect("written");
        let e = for_member(&path, None, Transport::Verified).expect_err("unverified");
        assert!(format!("{e:#}").contains("clusters[x].cluster.insecure-skip-tls-verify"));
        for_member(&path, None, Transport::InsecureAllowed).expect("allowed when asked for");
    }

    #[test]
    fn a_token_replaces_the_user_and_keeps_the_server_and_its_ca() {
        let dir = fixture();
        let k = for_member(&dir.path().join("config"), None, Transport::Verified).expect("usable");
        let reader = with_token(&k, "flotilla-reader", "READER".into());
        assert_eq!(reader.auth_infos.len(), 1);
        assert_eq!(reader.auth_infos[0].name, "flotilla-reader");
        let user = reader.auth_infos[0].auth_info.as_ref().expect("a user");
        assert!(user.client_certificate_data.is_none() && user.client_key_data.is_none());
        let context = reader.contexts[0].context.as_ref().expect("a context");
        assert_eq!(context.user.as_deref(), Some("flotilla-reader"));
        assert_eq!(
            serde_json::to_value(&reader.clusters).expect("json"),
            serde_json::to_value(&k.clusters).expect("json")
        );
        check_kubeconfig(&reader, Transport::Verified).expect("usable");
    }
}
