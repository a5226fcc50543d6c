//! Clients for member clusters, built from kubeconfigs kept in Secrets on the hub.
//!
//! A kubeconfig in a Secret is input from whoever may write that Secret, so it is checked before
//! use: it must carry its credentials inline. Exec plugins, auth providers and file references
//! are refused — they would make the controller run commands or send its own files (such as its
//! service-account token) to a server named in the Secret. Error messages name the Secret, the
//! key and the offending field, and never include any content of the Secret.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

use crate::error::ErrorCategory;
use crate::pool::RequestCounter;

/// The key a kubeconfig is read from when a reference names none.
pub const DEFAULT_KUBECONFIG_KEY: &str = "kubeconfig";

/// Why no client could be built for a member.
#[derive(Debug, thiserror::Error)]
pub enum MemberClientError {
    #[error("Secret {namespace}/{name} not found")]
    SecretNotFound { namespace: String, name: String },

    #[error("reading Secret {namespace}/{name}: {source}")]
    SecretUnreadable {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },

    #[error("Secret {secret} has no key {key:?} (keys: {available})")]
    KeyMissing {
        secret: String,
        key: String,
        available: String,
    },

    #[error("the kubeconfig in Secret {secret} key {key:?} is invalid: {reason}")]
    InvalidKubeconfig {
        secret: String,
        key: String,
        reason: String,
    },

    #[error(
        "the kubeconfig in Secret {secret} key {key:?} uses {field}, which is not allowed: {why}"
    )]
    ForbiddenKubeconfigField {
        secret: String,
        key: String,
        field: String,
        why: &'static str,
    },

    /// The Cluster names no kubeconfig it may be read with (see
    /// [`flotilla_api::ClusterSpec::reader_kubeconfig`]); the message names the field.
    #[error("{0}")]
    NoReader(String),
}

impl ErrorCategory for MemberClientError {
    fn category(&self) -> &'static str {
        match self {
            Self::SecretNotFound { .. } => "SecretNotFound",
            Self::SecretUnreadable { source, .. } => crate::error::kube_error_category(source),
            Self::KeyMissing { .. }
            | Self::InvalidKubeconfig { .. }
            | Self::ForbiddenKubeconfigField { .. }
            | Self::NoReader(_) => "InvalidKubeconfig",
        }
    }

    fn is_transient(&self) -> bool {
        matches!(self, Self::SecretUnreadable { .. })
    }
}

fn secret_name(secret: &Secret) -> String {
    format!(
        "{}/{}",
        secret.metadata.namespace.as_deref().unwrap_or_default(),
        secret.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Reads the Secret `namespace/name`.
pub async fn read_secret(
    api: &Api<Secret>,
    namespace: &str,
    name: &str,
) -> Result<Secret, MemberClientError> {
    match api.get_opt(name).await {
        Ok(Some(secret)) => Ok(secret),
        Ok(None) => Err(MemberClientError::SecretNotFound {
            namespace: namespace.into(),
            name: name.into(),
        }),
        Err(source) => Err(MemberClientError::SecretUnreadable {
            namespace: namespace.into(),
            name: name.into(),
            source,
        }),
    }
}

/// The raw bytes of `key` in `secret`.
fn secret_bytes<'a>(secret: &'a Secret, key: &str) -> Result<&'a [u8], MemberClientError> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.as_slice())
        .ok_or_else(|| MemberClientError::KeyMissing {
            secret: secret_name(secret),
            key: key.into(),
            available: secret
                .data
                .as_ref()
                .map(|d| d.keys().cloned().collect::<Vec<_>>().join(", "))
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "none".into()),
        })
}

/// Identifies one version of a kubeconfig in a Secret (`namespace/name/key@resourceVersion`):
/// a client built from it is reused until the Secret changes.
pub fn secret_version_key(namespace: &str, name: &str, key: &str, secret: &Secret) -> String {
    format!(
        "{namespace}/{name}/{key}@{}",
        secret
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default()
    )
}

/// Parses and checks the kubeconfig in `key` of `secret`.
pub fn kubeconfig_from_secret(secret: &Secret, key: &str) -> Result<Kubeconfig, MemberClientError> {
    kubeconfig_from_secret_with(secret, key, Transport::Verified)
}

/// Whether a kubeconfig must reach its server over verified TLS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Transport {
    /// `https://` with the server's certificate verified (the default).
    #[default]
    Verified,
    /// Also `insecure-skip-tls-verify` and `http://`, as a Cluster's `allowInsecureTransport`
    /// allows.
    InsecureAllowed,
}

impl Transport {
    /// What a Cluster's `allowInsecureTransport` says.
    pub fn of(allow_insecure: bool) -> Self {
        if allow_insecure {
            Self::InsecureAllowed
        } else {
            Self::Verified
        }
    }
}

/// [`kubeconfig_from_secret`] with the `transport` a Cluster allows.
pub fn kubeconfig_from_secret_with(
    secret: &Secret,
    key: &str,
    transport: Transport,
) -> Result<Kubeconfig, MemberClientError> {
    let invalid = |reason: String| MemberClientError::InvalidKubeconfig {
        secret: secret_name(secret),
        key: key.into(),
        reason,
    };
    let bytes = secret_bytes(secret, key)?;
    let text = std::str::from_utf8(bytes).map_err(|_| invalid("it is not UTF-8 text".into()))?;
    // Parser messages can quote the input, which may hold credentials: report no details.
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|_| {
        invalid("it is not a kubeconfig (YAML with clusters, users, contexts)".into())
    })?;
    check_kubeconfig(&kubeconfig, transport).map_err(|problem| match problem {
        KubeconfigProblem::Invalid(reason) => invalid(reason),
        KubeconfigProblem::Forbidden(field, why) => MemberClientError::ForbiddenKubeconfigField {
            secret: secret_name(secret),
            key: key.into(),
            field,
            why,
        },
    })?;
    Ok(kubeconfig)
}

/// What makes a kubeconfig unfit for a Secret the controllers read.
#[derive(Debug)]
pub enum KubeconfigProblem {
    /// It is not a usable kubeconfig; the reason names the field.
    Invalid(String),
    /// It uses a field the controllers refuse (the field, and why).
    Forbidden(String, &'static str),
}

impl std::fmt::Display for KubeconfigProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Invalid(reason) => f.write_str(reason),
            Self::Forbidden(field, why) => write!(f, "{field} is not allowed: {why}"),
        }
    }
}

const NO_FILES: &str = "a kubeconfig in a Secret must carry its data inline (the *-data fields), \
                        it must not name files of the controller";
const INSECURE: &str = "the member's certificate would not be verified, so anyone on the path \
                        could read and change what is sent (credentials included); give the \
                        kubeconfig the member's CA (certificate-authority-data), or set \
                        spec.allowInsecureTransport on a throwaway test Cluster";
const NO_PLUGINS: &str = "a kubeconfig in a Secret must not run commands or plugins in the \
                          controller; use a token or a client certificate";

/// Checks a kubeconfig for what a controller may safely use: a current context that resolves to
/// a cluster with a server, and inline credentials only. `kubectl flotilla join` asks the same
/// before it stores a kubeconfig.
pub fn check_kubeconfig(k: &Kubeconfig, transport: Transport) -> Result<(), KubeconfigProblem> {
    for c in &k.clusters {
        let Some(cluster) = &c.cluster else { continue };
        if cluster.certificate_authority.is_some() {
            return Err(KubeconfigProblem::Forbidden(
                format!("clusters[{}].cluster.certificate-authority", c.name),
                NO_FILES,
            ));
        }
        if transport == Transport::Verified {
            if cluster.insecure_skip_tls_verify == Some(true) {
                return Err(KubeconfigProblem::Forbidden(
                    format!("clusters[{}].cluster.insecure-skip-tls-verify", c.name),
                    INSECURE,
                ));
            }
            if cluster
                .server
                .as_deref()
                .is_some_and(|s| s.starts_with("http://"))
            {
                return Err(KubeconfigProblem::Forbidden(
                    format!("clusters[{}].cluster.server (http://)", c.name),
                    INSECURE,
                ));
            }
        }
    }
    for u in &k.auth_infos {
        let Some(auth) = &u.auth_info else { continue };
        let field = |f: &str| format!("users[{}].user.{f}", u.name);
        if auth.exec.is_some() {
            return Err(KubeconfigProblem::Forbidden(field("exec"), NO_PLUGINS));
        }
        if auth.auth_provider.is_some() {
            return Err(KubeconfigProblem::Forbidden(
                field("auth-provider"),
                NO_PLUGINS,
            ));
        }
        for (name, set) in [
            ("tokenFile", auth.token_file.is_some()),
            ("client-certificate", auth.client_certificate.is_some()),
            ("client-key", auth.client_key.is_some()),
        ] {
            if set {
                return Err(KubeconfigProblem::Forbidden(field(name), NO_FILES));
            }
        }
    }
    let context_name = k
        .current_context
        .as_deref()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| KubeconfigProblem::Invalid("current-context is not set".into()))?;
    let context = k
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.as_ref())
        .ok_or_else(|| {
            KubeconfigProblem::Invalid(format!(
                "current-context {context_name:?} is not among its contexts"
            ))
        })?;
    let cluster = k
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| {
            KubeconfigProblem::Invalid(format!(
                "context {context_name:?} names cluster {:?}, which is not among its clusters",
                context.cluster
            ))
        })?;
    match cluster.server.as_deref() {
        Some(s) if s.starts_with("https://") || s.starts_with("http://") => Ok(()),
        Some(_) => Err(KubeconfigProblem::Invalid(format!(
            "clusters[{}].cluster.server is not an http(s) URL",
            context.cluster
        ))),
        None => Err(KubeconfigProblem::Invalid(format!(
            "clusters[{}].cluster.server is not set",
            context.cluster
        ))),
    }
}

/// A client configuration from a checked kubeconfig, with a connect timeout suited to a
/// server that may be unreachable, and the client it makes.
struct Checked<'a> {
    config: Config,
    secret: &'a str,
    key: &'a str,
}

impl<'a> Checked<'a> {
    async fn new(
        kubeconfig: Kubeconfig,
        secret: &'a str,
        key: &'a str,
    ) -> Result<Self, MemberClientError> {
        let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| Self::invalid(secret, key, redact_config_error(&e.to_string())))?;
        config.connect_timeout = Some(Duration::from_secs(5));
        Ok(Self {
            config,
            secret,
            key,
        })
    }

    fn invalid(secret: &str, key: &str, reason: String) -> MemberClientError {
        MemberClientError::InvalidKubeconfig {
            secret: secret.into(),
            key: key.into(),
            reason,
        }
    }

    fn client(&self, retries: crate::pool::Retries) -> Result<Client, MemberClientError> {
        crate::pool::client(&self.config, None, retries).map_err(|e| self.unusable(&e))
    }

    /// A client for a member that counts its requests in `counter`, if given; with a `limit`,
    /// at most that many requests in flight (the others wait for a place).
    fn member_client(
        &self,
        limit: Option<usize>,
        counter: Option<RequestCounter>,
    ) -> Result<Client, MemberClientError> {
        crate::pool::counted_client(&self.config, limit, crate::pool::Retries::Brief, counter)
            .map_err(|e| self.unusable(&e))
    }

    fn unusable(&self, e: &kube::Error) -> MemberClientError {
        Self::invalid(self.secret, self.key, format!("cannot build a client: {e}"))
    }
}

/// Builds a client from a checked kubeconfig, with a connect timeout suited to a server that may
/// be unreachable (and no response timeout: it may watch).
pub async fn client_from_kubeconfig(
    kubeconfig: Kubeconfig,
    secret: &str,
    key: &str,
) -> Result<Client, MemberClientError> {
    // Used for a pull agent's credential for the hub, which it cannot do without: kube's
    // patient retries, as for every controller's own hub client.
    Checked::new(kubeconfig, secret, key)
        .await?
        .client(crate::pool::Retries::Patient)
}

/// How long a request to a member may go unanswered. A member whose apiserver stops answering
/// (hung, paused, a network that drops packets) then fails each request within this time instead
/// of holding the caller forever.
pub const MEMBER_REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// How many requests of one process's `requests` client may be in flight to one member at once.
/// Each needs a connection of its own (HTTP/1.1): without a bound, a syncer applying the Works of
/// a member in parallel held about a hundred connections to it, each a TLS session with its
/// buffers on both sides, for no more throughput than this many give.
pub const MEMBER_REQUESTS_IN_FLIGHT: usize = 16;

/// The clients of one member: `requests` for reads and writes, bounded by
/// [`MEMBER_REQUEST_TIMEOUT`] and [`MEMBER_REQUESTS_IN_FLIGHT`]; `watches` for long-lived watches, which kube's watcher keeps alive
/// (and restarts) on its own and which a response timeout would cut.
#[derive(Clone)]
pub struct MemberClient {
    pub requests: Client,
    pub watches: Client,
}

/// Both clients of a member from a checked kubeconfig.
pub async fn member_client_from_kubeconfig(
    kubeconfig: Kubeconfig,
    secret: &str,
    key: &str,
) -> Result<MemberClient, MemberClientError> {
    counted_member_client(kubeconfig, secret, key, None).await
}

/// [`member_client_from_kubeconfig`], both clients counting their requests in `counter`.
async fn counted_member_client(
    kubeconfig: Kubeconfig,
    secret: &str,
    key: &str,
    counter: Option<RequestCounter>,
) -> Result<MemberClient, MemberClientError> {
    let mut checked = Checked::new(kubeconfig, secret, key).await?;
    let watches = checked.member_client(None, counter.clone())?;
    checked.config.read_timeout = Some(MEMBER_REQUEST_TIMEOUT);
    checked.config.write_timeout = Some(MEMBER_REQUEST_TIMEOUT);
    // Counted from each request, not from when its pooled connection went idle.
    checked.config.reset_reader_on_write = true;
    let requests = checked.member_client(Some(MEMBER_REQUESTS_IN_FLIGHT), counter)?;
    Ok(MemberClient { requests, watches })
}

/// A client from the kubeconfig in `key` of the Secret `namespace/name` (e.g. a pull-mode agent's
/// hub credential), with the Secret's resourceVersion, so a caller can notice a rotation.
pub async fn client_from_secret(
    secrets: &Api<Secret>,
    namespace: &str,
    name: &str,
    key: &str,
) -> Result<(Client, String), MemberClientError> {
    let secret = read_secret(secrets, namespace, name).await?;
    let kubeconfig = kubeconfig_from_secret(&secret, key)?;
    let client = client_from_kubeconfig(kubeconfig, &format!("{namespace}/{name}"), key).await?;
    Ok((client, secret.metadata.resource_version.unwrap_or_default()))
}

/// kube's configuration errors name fields and files but may also echo values; keep the part
/// before the first colon, which names the problem.
fn redact_config_error(message: &str) -> String {
    message
        .split(':')
        .next()
        .unwrap_or("unusable configuration")
        .trim()
        .to_string()
}

struct Cached {
    fingerprint: u64,
    client: MemberClient,
}

/// One client per member, rebuilt when the member's kubeconfig Secret changes and dropped when
/// the member goes.
#[derive(Default)]
pub struct MemberClients {
    cache: Mutex<HashMap<String, Cached>>,
    /// Counts the requests to each member (labels: the member, the verb), if set.
    requests: Option<prometheus::IntCounterVec>,
}

impl MemberClients {
    pub fn new() -> Self {
        Self::default()
    }

    /// Clients that count their requests in `requests`, labelled with the member's name and
    /// the verb (see [`RequestCounter`]).
    pub fn counting(requests: prometheus::IntCounterVec) -> Self {
        Self {
            requests: Some(requests),
            ..Self::default()
        }
    }

    /// The clients of `cluster`, from the kubeconfig in `key` of `secret`, reaching the member
    /// over the `transport` its Cluster allows. Returns the cached clients while the kubeconfig
    /// (and the transport) is unchanged.
    pub async fn client_for(
        &self,
        cluster: &str,
        secret: &Secret,
        key: &str,
        transport: Transport,
    ) -> Result<MemberClient, MemberClientError> {
        let bytes = secret_bytes(secret, key)?;
        let mut hasher = DefaultHasher::new();
        (secret_name(secret), key, bytes, transport).hash(&mut hasher);
        let fingerprint = hasher.finish();
        if let Some(cached) = self.lock().get(cluster)
            && cached.fingerprint == fingerprint
        {
            return Ok(cached.client.clone());
        }
        let kubeconfig = kubeconfig_from_secret_with(secret, key, transport)?;
        let counter = self
            .requests
            .clone()
            .map(|requests| RequestCounter::new(requests, &[cluster]));
        let client = counted_member_client(kubeconfig, &secret_name(secret), key, counter).await?;
        tracing::debug!(cluster, "built a client for the member");
        self.lock().insert(
            cluster.to_string(),
            Cached {
                fingerprint,
                client: client.clone(),
            },
        );
        Ok(client)
    }

    /// The clients of push-mode member `cluster` from the kubeconfig it is read with (its
    /// read-only one or, where `secrets` allows it, the one the syncer writes with; see
    /// [`flotilla_api::ClusterSpec::reader_kubeconfig`]), read from the hub with `hub`; and the
    /// version of that credential (Secret, key, resourceVersion and transport), which changes
    /// when the client does.
    pub async fn reader(
        &self,
        hub: &kube::Client,
        cluster: &flotilla_api::Cluster,
        secrets: &flotilla_api::cluster::ReaderSecrets<'_>,
    ) -> Result<(MemberClient, String), MemberClientError> {
        let (namespace, reference) = cluster
            .spec
            .reader_kubeconfig(secrets)
            .map_err(MemberClientError::NoReader)?;
        let api: Api<Secret> = Api::namespaced(hub.clone(), &namespace);
        let secret = read_secret(&api, &namespace, &reference.name).await?;
        let transport = Transport::of(cluster.spec.allow_insecure_transport);
        let version = format!(
            "{}/{transport:?}",
            secret_version_key(&namespace, &reference.name, &reference.key, &secret)
        );
        let name = cluster.metadata.name.as_deref().unwrap_or_default();
        let client = self
            .client_for(name, &secret, &reference.key, transport)
            .await?;
        Ok((client, version))
    }

    /// Drops the client of a member that went away.
    pub fn forget(&self, cluster: &str) {
        self.lock().remove(cluster);
    }

    /// How many members have a client.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Cached>> {
        // A panic while holding the lock leaves a consistent map: recover it.
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;

    const TOKEN: &str = "s3cr3t-t0ken-value";

    fn kubeconfig(user: &str, server: &str) -> String {
        format!(
            r#"apiVersion: v1
kind: Config
clusters:
- name: m
  cluster:
    server: {server}
users:
- name: u
  user:
{user}
contexts:
- name: c
  context: {{cluster: m, user: u}}
current-context: c
"#
        )
    }

    fn secret(key: &str, value: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("member1-kubeconfig".into()),
                namespace: Some("flotilla-system".into()),
                resource_version: Some("1".into()),
                ..ObjectMeta::default()
            },
            data: Some([(key.to_string(), ByteString(value.as_bytes().to_vec()))].into()),
            ..Secret::default()
        }
    }

    fn token_user() -> String {
        format!("    token: {TOKEN}")
    }

    #[test]
    fn a_valid_kubeconfig_parses() {
        let s = secret(
            "kubeconfig",
            &kubeconfig(&token_user(), "https://127.0.0.1:6443"),
        );
        kubeconfig_from_secret(&s, "kubeconfig").expect("valid");
    }

    #[test]
    fn a_missing_key_lists_the_keys() {
        let s = secret("other", "x");
        let e = kubeconfig_from_secret(&s, "kubeconfig").expect_err("missing");
        assert_eq!(e.category(), "InvalidKubeconfig");
        assert!(
            e.to_string()
                .contains("has no key \"kubeconfig\" (keys: other)"),
            "{e}"
        );
    }

    #[test]
    fn garbage_is_invalid_and_not_echoed() {
        let s = secret("kubeconfig", &format!("clusters: [{TOKEN}"));
        let e = kubeconfig_from_secret(&s, "kubeconfig").expect_err("garbage");
        assert!(!e.to_string().contains(TOKEN), "{e}");
        assert!(
            e.to_string().contains("flotilla-system/member1-kubeconfig"),
            "{e}"
        );
        let binary = Secret {
            data: Some([("kubeconfig".to_string(), ByteString(vec![0xff, 0xfe]))].into()),
            ..secret("x", "")
        };
        let e = kubeconfig_from_secret(&binary, "kubeconfig").expect_err("binary");
        assert!(e.to_string().contains("not UTF-8"), "{e}");
    }

    #[test]
    fn exec_plugins_and_files_are_refused() {
        for (user, field) in [
            (
                "    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh}",
                "user.exec",
            ),
            (
                "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
                "user.tokenFile",
            ),
            (
                "    client-certificate: /etc/cert.pem",
                "user.client-certificate",
            ),
        ] {
            let s = secret("kubeconfig", &kubeconfig(user, "https://127.0.0.1:6443"));
            let e = kubeconfig_from_secret(&s, "kubeconfig").expect_err(field);
            assert!(
                matches!(e, MemberClientError::ForbiddenKubeconfigField { .. }),
                "{e}"
            );
            assert!(e.to_string().contains(field), "{e}");
        }
    }

    #[test]
    fn an_unverified_or_plain_http_member_needs_the_clusters_consent() {
        let insecure = kubeconfig(&token_user(), "https://127.0.0.1:6443").replace(
            "    server: https://127.0.0.1:6443",
            "    server: https://127.0.0.1:6443\n    insecure-skip-tls-verify: true",
        );
        let plain = kubeconfig(&token_user(), "http://127.0.0.1:8080");
        for (text, field) in [
            (insecure, "insecure-skip-tls-verify"),
            (plain, "server (http://)"),
        ] {
            let s = secret("kubeconfig", &text);
            let e = kubeconfig_from_secret(&s, "kubeconfig").expect_err(field);
            assert!(
                matches!(e, MemberClientError::ForbiddenKubeconfigField { .. }),
                "{e}"
            );
            assert!(
                e.to_string().contains(field) && e.to_string().contains("allowInsecureTransport"),
                "{e}"
            );
            assert!(!e.to_string().contains(TOKEN), "{e}");
            kubeconfig_from_secret_with(&s, "kubeconfig", Transport::InsecureAllowed)
                .expect("allowed by the Cluster");
        }
    }

    #[test]
    fn a_server_is_required() {
        let s = secret("kubeconfig", &kubeconfig(&token_user(), "127.0.0.1:6443"));
        let e = kubeconfig_from_secret(&s, "kubeconfig").expect_err("no scheme");
        assert!(
            e.to_string().contains("server is not an http(s) URL"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn clients_are_cached_until_the_secret_changes() {
        let clients = MemberClients::new();
        let s1 = secret(
            "kubeconfig",
            &kubeconfig(&token_user(), "https://127.0.0.1:6443"),
        );
        clients
            .client_for("m1", &s1, "kubeconfig", Transport::Verified)
            .await
            .expect("client");
        let fp1 = clients.lock().get("m1").map(|c| c.fingerprint);
        clients
            .client_for("m1", &s1, "kubeconfig", Transport::Verified)
            .await
            .expect("cached");
        assert_eq!(clients.lock().get("m1").map(|c| c.fingerprint), fp1);
        let s2 = secret(
            "kubeconfig",
            &kubeconfig(&token_user(), "https://127.0.0.1:7443"),
        );
        clients
            .client_for("m1", &s2, "kubeconfig", Transport::Verified)
            .await
            .expect("rebuilt");
        assert_ne!(clients.lock().get("m1").map(|c| c.fingerprint), fp1);
        assert_eq!(clients.len(), 1);
        clients.forget("m1");
        assert!(clients.is_empty());
    }
}
