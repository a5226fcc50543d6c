//! The pull-mode agent, running in a member cluster (`flotilla-registration agent`).
//!
//! 1. **Credential.** It looks for its hub credential — a kubeconfig with a client certificate —
//!    in a Secret of the member (`--hub-credential-secret` in `--hub-credential-namespace`). If
//!    there is none, or it expired, belongs to another cluster or another hub, the agent
//!    registers with the bootstrap kubeconfig (`--hub-kubeconfig`): it creates its Cluster
//!    (`syncMode: Pull`) if missing, sends a CertificateSigningRequest for
//!    `system:flotilla:cluster:<name>:agent` and waits until the hub approves it (once the hub
//!    admin sets `spec.hubAcceptsClient: true`) and signs it, then stores the credential.
//! 2. **Heartbeat.** With that credential, every `--heartbeat-interval` it renews the Lease
//!    `flotilla-agent` in `flotilla-cluster-<name>` on the hub and server-side applies its
//!    Cluster's `status.kubernetesVersion` and `status.allocatable` (summed over the member's
//!    Nodes). The hub controller owns the conditions and `lastHeartbeatTime`.
//! 3. **Rotation.** Once `--certificate-rotation-threshold` of the certificate's lifetime has
//!    passed it requests a new certificate with its current one (the renewal's requester is the
//!    agent itself), checks the hub accepts it, stores it and switches to it; heartbeats go on
//!    meanwhile with the old certificate, so there is no gap.
//!
//! Every failure is logged with what the agent will do next, and retried with backoff; the
//! private key, certificates and tokens are never logged.

#[path = "agent_credential.rs"]
pub mod credential;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::cluster::{Cluster, ClusterSpec, SyncMode};
use flotilla_api::{field_managers, labels, names};
use flotilla_runtime::cli::parse_duration;
use flotilla_runtime::member_client::kubeconfig_from_secret;
use flotilla_runtime::{Context, ErrorCategory};
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use prometheus::{IntCounterVec, IntGauge, Opts};
use serde_json::json;
use tokio::sync::watch;

use credential::{Credential, CredentialError, HubEndpoint, generate_key_and_request};

/// The key of the credential Secret that holds the hub kubeconfig.
pub const CREDENTIAL_KEY: &str = names::DEFAULT_KUBECONFIG_KEY;

/// The shortest certificate lifetime the CertificateSigningRequest API accepts.
pub const MIN_CERTIFICATE_LIFETIME: Duration = Duration::from_secs(600);

/// A credential with less than this left is not used: the agent registers again.
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);

/// Backoff of registration and rotation attempts.
const FIRST_RETRY: Duration = Duration::from_secs(2);
const MAX_RETRY: Duration = Duration::from_secs(120);

/// How often to say that a certificate request is still pending.
const PENDING_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// Time limit of one request to the hub or the member.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// Heartbeats rejected as unauthenticated (401) for this long mean the hub no longer accepts
/// the certificate (e.g. its client CA changed): register again.
const REJECTED_FOR: Duration = Duration::from_secs(60);

/// Flags of `flotilla-registration agent`.
#[derive(clap::Args, Debug, Clone)]
pub struct AgentArgs {
    /// Name of this member's Cluster on the hub.
    #[arg(long, env = "FLOTILLA_CLUSTER_NAME", value_name = "NAME", value_parser = parse_cluster_name)]
    pub cluster_name: String,

    /// Bootstrap kubeconfig of the hub: a credential that may only create this member's Cluster
    /// and certificate requests. Needed to register, and again only when the stored credential
    /// is lost or expired. A path that does not exist is taken as no bootstrap credential (the
    /// admin may delete it once the member joined).
    #[arg(long, env = "FLOTILLA_BOOTSTRAP_KUBECONFIG", value_name = "PATH")]
    pub hub_kubeconfig: Option<PathBuf>,

    /// Namespace (in the member) of the Secret that holds the agent's hub credential (in a Pod:
    /// set POD_NAMESPACE).
    #[arg(
        long,
        env = "POD_NAMESPACE",
        default_value = names::SYSTEM_NAMESPACE,
        value_name = "NAMESPACE"
    )]
    pub hub_credential_namespace: String,

    /// Name of the Secret (in the member) that holds the agent's hub credential, a kubeconfig in
    /// the key `kubeconfig`.
    #[arg(long, default_value = "flotilla-hub-kubeconfig", value_name = "NAME")]
    pub hub_credential_secret: String,

    /// How often the agent renews its Lease on the hub and reports its version and capacity.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub heartbeat_interval: Duration,

    /// Lifetime to ask for the agent's certificates (at least 10m, the CSR API's minimum; the
    /// hub's signer may issue shorter ones).
    #[arg(long, default_value = "24h", value_parser = parse_certificate_lifetime, value_name = "DURATION")]
    pub certificate_lifetime: Duration,

    /// Fraction of a certificate's lifetime after which the agent requests the next one
    /// (between 0 and 1, e.g. 0.75).
    #[arg(long, default_value_t = 0.75, value_parser = parse_fraction, value_name = "FRACTION")]
    pub certificate_rotation_threshold: f64,
}

fn parse_cluster_name(s: &str) -> Result<String, String> {
    names::validate_cluster_name(s)
        .map(|()| s.to_string())
        .map_err(|e| e.to_string())
}

fn parse_certificate_lifetime(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < MIN_CERTIFICATE_LIFETIME {
        return Err(format!(
            "{s} is shorter than 10m, the shortest lifetime the CertificateSigningRequest API \
             accepts (use --certificate-rotation-threshold to rotate sooner)"
        ));
    }
    Ok(d)
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    let f: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if f > 0.0 && f < 1.0 {
        Ok(f)
    } else {
        Err(format!("{s} must be between 0 and 1 (exclusive)"))
    }
}

/// Why the agent could not do something; each is logged and retried.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("no usable hub credential in Secret {secret} and no --hub-kubeconfig to register with")]
    NoBootstrapCredential { secret: String },
    #[error("reading the bootstrap kubeconfig {path}: {reason}")]
    BootstrapKubeconfig { path: String, reason: String },
    #[error("{action} on the hub: {}", describe(source))]
    Hub {
        action: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("{action} in the member: {}", describe(source))]
    Member {
        action: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("{action}: no answer within {REQUEST_TIMEOUT:?}")]
    Timeout { action: &'static str },
    #[error(
        "Cluster {0} exists on the hub with syncMode Push; a pull-mode agent cannot register it"
    )]
    ClusterNotPullMode(String),
    #[error("the hub denied certificate request {name} ({reason}): {message}")]
    CertificateDenied {
        name: String,
        reason: String,
        message: String,
    },
    #[error("certificate request {0} disappeared before it was signed")]
    CertificateRequestGone(String),
    #[error("the hub rejects the new certificate: {0}")]
    CertificateRejected(String),
    #[error(transparent)]
    Credential(#[from] CredentialError),
    #[error("building a hub client: {0}")]
    Client(String),
}

impl ErrorCategory for AgentError {
    fn category(&self) -> &'static str {
        match self {
            Self::NoBootstrapCredential { .. } => "NoBootstrapCredential",
            Self::BootstrapKubeconfig { .. } | Self::Client(_) => "InvalidKubeconfig",
            Self::Hub { source, .. } | Self::Member { source, .. } => source.category(),
            Self::Timeout { .. } => "Timeout",
            Self::ClusterNotPullMode(_) => "ClusterNotPullMode",
            Self::CertificateDenied { .. } => "CertificateDenied",
            Self::CertificateRequestGone(_) => "CertificateRequestGone",
            Self::CertificateRejected(_) => "CertificateRejected",
            Self::Credential(e) => e.category(),
        }
    }
}

/// A client error in one line: for API errors the server's code and message (kube's own
/// rendering repeats them in a debug dump of the whole Status).
fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(s) => format!("{} {}: {}", s.code, s.reason, s.message),
        other => other.to_string(),
    }
}

/// Exponential backoff: 2 s doubling to 2 min.
struct Backoff(Duration);

impl Backoff {
    fn new() -> Self {
        Self(FIRST_RETRY)
    }

    fn next(&mut self) -> Duration {
        let d = self.0;
        self.0 = (self.0 * 2).min(MAX_RETRY);
        d
    }

    fn reset(&mut self) {
        self.0 = FIRST_RETRY;
    }
}

/// The agent's metrics.
#[derive(Clone)]
struct AgentMetrics {
    /// Heartbeats by result (`success` or an error category).
    heartbeats: IntCounterVec,
    /// Certificates obtained, by how (`bootstrap`, `rotation`).
    certificates: IntCounterVec,
    /// When the current certificate expires (seconds since the epoch).
    certificate_expiry: IntGauge,
}

impl AgentMetrics {
    fn register(ctx: &Context) -> prometheus::Result<Self> {
        let prefix = ctx.metrics.prefix();
        let heartbeats = IntCounterVec::new(
            Opts::new(
                format!("{prefix}_heartbeats_total"),
                "Heartbeats (Lease renewals) to the hub, by result.",
            ),
            &["result"],
        )?;
        let certificates = IntCounterVec::new(
            Opts::new(
                format!("{prefix}_certificates_issued_total"),
                "Hub client certificates obtained, by how (bootstrap, rotation).",
            ),
            &["how"],
        )?;
        let certificate_expiry = IntGauge::new(
            format!("{prefix}_certificate_expiry_timestamp_seconds"),
            "When the agent's current hub client certificate expires.",
        )?;
        let registry = ctx.metrics.registry();
        registry.register(Box::new(heartbeats.clone()))?;
        registry.register(Box::new(certificates.clone()))?;
        registry.register(Box::new(certificate_expiry.clone()))?;
        Ok(Self {
            heartbeats,
            certificates,
            certificate_expiry,
        })
    }
}

/// A credential in use, with its client.
#[derive(Clone)]
struct Session {
    credential: Credential,
    client: Client,
}

/// How serving with one credential ended.
enum Ended {
    Shutdown,
    /// The credential expired or the hub keeps rejecting it: register again.
    CredentialUnusable(&'static str),
}

/// The agent.
struct Agent {
    ctx: Context,
    args: AgentArgs,
    /// The bootstrap kubeconfig and the hub endpoint in it, if given.
    bootstrap: Option<(Kubeconfig, HubEndpoint)>,
    secrets: Api<Secret>,
    metrics: AgentMetrics,
}

/// Runs the agent until `ctx.shutdown`. `ctx.client` is the member's client.
pub async fn run(ctx: Context, args: AgentArgs) -> anyhow::Result<()> {
    let bootstrap = match &args.hub_kubeconfig {
        // An admin may delete the bootstrap credential once the member joined (the member chart
        // mounts it as an optional volume): the stored credential serves from then on.
        Some(path) if !path.exists() => {
            tracing::warn!(
                path = %path.display(),
                "the bootstrap kubeconfig does not exist: only the stored hub credential can be used"
            );
            None
        }
        Some(path) => {
            let invalid = |reason: String| AgentError::BootstrapKubeconfig {
                path: path.display().to_string(),
                reason,
            };
            // Parser messages may quote the file, which holds a token: report no details.
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|_| invalid("it cannot be read as a kubeconfig".into()))?;
            let endpoint = HubEndpoint::from_bootstrap(&kubeconfig, path)
                .map_err(|e| invalid(e.to_string()))?;
            Some((kubeconfig, endpoint))
        }
        None => None,
    };
    let agent = Agent {
        secrets: Api::namespaced(ctx.client.clone(), &args.hub_credential_namespace),
        metrics: AgentMetrics::register(&ctx)?,
        ctx,
        args,
        bootstrap,
    };
    // The agent keeps no caches: it is ready once it leads.
    agent.ctx.health.set_caches_synced(true);
    tracing::info!(
        cluster = %agent.args.cluster_name,
        secret = %agent.secret_ref(),
        hub = agent.bootstrap.as_ref().map(|(_, e)| e.server()).unwrap_or("(from the stored credential)"),
        "starting the pull-mode agent"
    );
    agent.run().await;
    Ok(())
}

impl Agent {
    fn cluster(&self) -> &str {
        &self.args.cluster_name
    }

    fn secret_ref(&self) -> String {
        format!(
            "{}/{}",
            self.args.hub_credential_namespace, self.args.hub_credential_secret
        )
    }

    async fn sleep(&self, d: Duration) -> bool {
        tokio::select! {
            _ = self.ctx.shutdown.cancelled() => false,
            _ = tokio::time::sleep(d) => true,
        }
    }

    /// Obtain a credential, serve with it until it is unusable, repeat; until shutdown.
    async fn run(&self) {
        let mut backoff = Backoff::new();
        loop {
            if self.ctx.shutdown.is_cancelled() {
                return;
            }
            let credential = match self.stored_credential().await {
                Ok(Some(credential)) => Ok(credential),
                Ok(None) => self.register().await,
                Err(e) => Err(e),
            };
            let credential = match credential {
                Ok(c) => c,
                Err(_) if self.ctx.shutdown.is_cancelled() => return,
                Err(e) => {
                    let retry = match e {
                        // Denials need the admin's attention: do not flood the hub.
                        AgentError::CertificateDenied { .. } => MAX_RETRY,
                        _ => backoff.next(),
                    };
                    tracing::error!(
                        cluster = %self.cluster(),
                        category = e.category(),
                        error = %e,
                        retry_in = ?retry,
                        "could not obtain a hub credential"
                    );
                    if !self.sleep(retry).await {
                        return;
                    }
                    continue;
                }
            };
            backoff.reset();
            match self.serve(credential).await {
                Ended::Shutdown => return,
                Ended::CredentialUnusable(why) => {
                    tracing::warn!(cluster = %self.cluster(), why, "registering again");
                }
            }
        }
    }

    /// The credential stored in the member, if it is usable: this cluster's, for the hub of
    /// the bootstrap kubeconfig (when given), and not about to expire.
    async fn stored_credential(&self) -> Result<Option<Credential>, AgentError> {
        let secret = with_timeout(
            "reading the credential Secret",
            self.secrets.get_opt(&self.args.hub_credential_secret),
        )
        .await?
        .map_err(|source| AgentError::Member {
            action: "reading the credential Secret",
            source,
        })?;
        let Some(secret) = secret else {
            tracing::info!(secret = %self.secret_ref(), "no stored hub credential");
            return Ok(None);
        };
        let unusable = |why: String| {
            tracing::warn!(secret = %self.secret_ref(), %why, "the stored hub credential is unusable");
            Ok(None)
        };
        let kubeconfig = match kubeconfig_from_secret(&secret, CREDENTIAL_KEY) {
            Ok(k) => k,
            Err(e) => return unusable(e.to_string()),
        };
        let text = secret
            .data
            .as_ref()
            .and_then(|d| d.get(CREDENTIAL_KEY))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default();
        let credential = match Credential::from_kubeconfig(self.cluster(), &kubeconfig, text) {
            Ok(c) => c,
            Err(e) => return unusable(e.to_string()),
        };
        if let Some((_, endpoint)) = &self.bootstrap
            && endpoint.server() != credential.endpoint.server()
        {
            return unusable(format!(
                "it is for the hub {}, the bootstrap kubeconfig names {}",
                credential.endpoint.server(),
                endpoint.server()
            ));
        }
        if !credential.is_valid_at(Timestamp::now().as_second(), EXPIRY_MARGIN) {
            return unusable(format!(
                "its certificate expires at {}",
                format_time(credential.not_after)
            ));
        }
        tracing::info!(
            serial = %credential.serial,
            expires = %format_time(credential.not_after),
            "using the stored hub credential"
        );
        Ok(Some(credential))
    }

    /// Registers with the bootstrap credential: the Cluster, a certificate, the Secret.
    async fn register(&self) -> Result<Credential, AgentError> {
        let (kubeconfig, endpoint) =
            self.bootstrap
                .as_ref()
                .ok_or_else(|| AgentError::NoBootstrapCredential {
                    secret: self.secret_ref(),
                })?;
        let client = client_from_kubeconfig(kubeconfig.clone()).await?;
        let uid = self.ensure_cluster(&client).await?;
        let credential = self
            .request_certificate(&client, endpoint.clone(), &uid, "bootstrap")
            .await?;
        self.store(&credential).await?;
        Ok(credential)
    }

    /// Creates this member's Cluster (`syncMode: Pull`) unless it exists; refuses a push-mode one.
    /// Returns the Cluster's UID, which the agent's certificate names. The bootstrap identity may
    /// read an existing Cluster only once the hub admin accepted it (registration then grants it
    /// that one Cluster by name), so a Cluster made before the agent waits for acceptance here.
    async fn ensure_cluster(&self, client: &Client) -> Result<String, AgentError> {
        let api: Api<Cluster> = Api::all(client.clone());
        let hub = |action| move |source| AgentError::Hub { action, source };
        let cluster = Cluster::new(
            self.cluster(),
            ClusterSpec {
                sync_mode: SyncMode::Pull,
                hub_accepts_client: false,
                ..Default::default()
            },
        );
        let params = PostParams {
            field_manager: Some(field_managers::AGENT.into()),
            ..Default::default()
        };
        let existing = match with_timeout("creating the Cluster", api.create(&params, &cluster))
            .await?
        {
            Ok(created) => {
                tracing::info!(cluster = %self.cluster(), "created the Cluster on the hub (syncMode Pull); the hub admin accepts it with spec.hubAcceptsClient: true");
                return Ok(created.metadata.uid.unwrap_or_default());
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                with_timeout("reading the Cluster", api.get(self.cluster()))
                    .await?
                    .map_err(hub("reading the Cluster (the bootstrap identity may read it once the hub admin accepted it)"))?
            }
            Err(source) => {
                return Err(AgentError::Hub {
                    action: "creating the Cluster",
                    source,
                });
            }
        };
        if existing.spec.sync_mode != SyncMode::Pull {
            return Err(AgentError::ClusterNotPullMode(self.cluster().into()));
        }
        Ok(existing.metadata.uid.unwrap_or_default())
    }

    /// Sends a certificate request with `client` (bootstrap or current credential) and waits
    /// until it is signed or denied.
    async fn request_certificate(
        &self,
        client: &Client,
        endpoint: HubEndpoint,
        uid: &str,
        how: &'static str,
    ) -> Result<Credential, AgentError> {
        let generated = generate_key_and_request(self.cluster(), uid)?;
        let api: Api<CertificateSigningRequest> = Api::all(client.clone());
        let request = CertificateSigningRequest {
            metadata: ObjectMeta {
                generate_name: Some(format!("flotilla-agent-{}-", self.cluster())),
                labels: Some(BTreeMap::from([(
                    labels::CLUSTER.to_string(),
                    self.cluster().to_string(),
                )])),
                ..Default::default()
            },
            spec: CertificateSigningRequestSpec {
                request: ByteString(generated.request_pem.clone().into_bytes()),
                signer_name: names::AGENT_CSR_SIGNER.into(),
                usages: Some(credential::USAGES.iter().map(|u| u.to_string()).collect()),
                expiration_seconds: Some(
                    i32::try_from(self.args.certificate_lifetime.as_secs()).unwrap_or(i32::MAX),
                ),
                ..Default::default()
            },
            status: None,
        };
        let created = with_timeout(
            "creating the certificate request",
            api.create(&PostParams::default(), &request),
        )
        .await?
        .map_err(|source| AgentError::Hub {
            action: "creating the certificate request",
            source,
        })?;
        let name = created.metadata.name.unwrap_or_default();
        tracing::info!(csr = %name, how, "sent a certificate request to the hub");
        let certificate = self.await_certificate(&api, &name).await?;
        let credential =
            Credential::new(self.cluster(), endpoint, &certificate, &generated.key_pem)?;
        self.metrics.certificates.with_label_values(&[how]).inc();
        tracing::info!(
            csr = %name,
            serial = %credential.serial,
            expires = %format_time(credential.not_after),
            how,
            "obtained a hub client certificate"
        );
        Ok(credential)
    }

    /// Waits until certificate request `name` is signed (its certificate) or denied (an
    /// error), saying every minute that it is still pending and why that may be.
    async fn await_certificate(
        &self,
        api: &Api<CertificateSigningRequest>,
        name: &str,
    ) -> Result<Vec<u8>, AgentError> {
        let mut backoff = Backoff::new();
        loop {
            let watch = kube::runtime::wait::await_condition(api.clone(), name, is_finished);
            let outcome = tokio::select! {
                _ = self.ctx.shutdown.cancelled() => {
                    return Err(AgentError::Timeout { action: "waiting for the certificate (shutting down)" });
                }
                outcome = tokio::time::timeout(PENDING_LOG_INTERVAL, watch) => outcome,
            };
            match outcome {
                Err(_) => tracing::info!(
                    csr = %name,
                    cluster = %self.cluster(),
                    "the certificate request is still pending: the hub approves it once the hub \
                     admin accepts the Cluster (spec.hubAcceptsClient: true)"
                ),
                Ok(Ok(None)) => return Err(AgentError::CertificateRequestGone(name.into())),
                Ok(Ok(Some(csr))) => {
                    if let Some(denied) = final_condition(&csr, &["Denied", "Failed"]) {
                        return Err(AgentError::CertificateDenied {
                            name: name.into(),
                            reason: denied.reason.clone().unwrap_or_default(),
                            message: denied.message.clone().unwrap_or_default(),
                        });
                    }
                    if let Some(certificate) = csr.status.and_then(|s| s.certificate) {
                        return Ok(certificate.0);
                    }
                }
                Ok(Err(e)) => {
                    let retry = backoff.next();
                    tracing::warn!(csr = %name, error = %e, retry_in = ?retry, "watching the certificate request failed");
                    if !self.sleep(retry).await {
                        return Err(AgentError::Timeout {
                            action: "waiting for the certificate (shutting down)",
                        });
                    }
                }
            }
        }
    }

    /// Stores `credential` in the member Secret (server-side apply).
    async fn store(&self, credential: &Credential) -> Result<(), AgentError> {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(self.args.hub_credential_secret.clone()),
                namespace: Some(self.args.hub_credential_namespace.clone()),
                labels: Some(BTreeMap::from([(
                    labels::CLUSTER.to_string(),
                    self.cluster().to_string(),
                )])),
                ..Default::default()
            },
            type_: Some("Opaque".into()),
            data: Some(BTreeMap::from([(
                CREDENTIAL_KEY.to_string(),
                ByteString(credential.kubeconfig_yaml().as_bytes().to_vec()),
            )])),
            ..Default::default()
        };
        let params = PatchParams::apply(field_managers::AGENT).force();
        with_timeout(
            "storing the credential Secret",
            self.secrets.patch(
                &self.args.hub_credential_secret,
                &params,
                &Patch::Apply(&secret),
            ),
        )
        .await?
        .map_err(|source| AgentError::Member {
            action: "storing the credential Secret",
            source,
        })?;
        tracing::info!(secret = %self.secret_ref(), serial = %credential.serial, "stored the hub credential");
        Ok(())
    }

    /// Heartbeats with `credential` while rotating it in the background.
    async fn serve(&self, credential: Credential) -> Ended {
        let client = match client_from_kubeconfig_text(credential.kubeconfig_yaml()).await {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "the hub credential cannot be used");
                return Ended::CredentialUnusable("the stored credential cannot build a client");
            }
        };
        self.metrics.certificate_expiry.set(credential.not_after);
        let (tx, rx) = watch::channel(Arc::new(Session { credential, client }));
        tokio::select! {
            _ = self.ctx.shutdown.cancelled() => Ended::Shutdown,
            ended = self.heartbeats(rx) => ended,
            ended = self.rotations(tx) => ended,
        }
    }

    /// Renews the Lease and reports status every interval, with the current session.
    async fn heartbeats(&self, sessions: watch::Receiver<Arc<Session>>) -> Ended {
        let mut failures: u32 = 0;
        let mut unauthenticated_since: Option<tokio::time::Instant> = None;
        let mut last_status: Option<serde_json::Value> = None;
        let mut beats: u64 = 0;
        loop {
            let session = sessions.borrow().clone();
            match self.heartbeat(&session, &mut last_status, beats).await {
                Ok(()) => {
                    if failures > 0 || beats == 0 {
                        tracing::info!(cluster = %self.cluster(), "heartbeating to the hub");
                    }
                    failures = 0;
                    unauthenticated_since = None;
                    self.metrics
                        .heartbeats
                        .with_label_values(&["success"])
                        .inc();
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    self.metrics
                        .heartbeats
                        .with_label_values(&[e.category()])
                        .inc();
                    let hint = match e.category() {
                        "Forbidden" | "NotFound" => {
                            "the hub has not accepted this Cluster (spec.hubAcceptsClient) or revoked it"
                        }
                        "Unauthorized" => "the hub does not accept the certificate",
                        _ => "the hub or the member is unreachable or failing",
                    };
                    // Say it on the first failure and then every tenth, not every beat.
                    if failures == 1 || failures.is_multiple_of(10) {
                        tracing::warn!(
                            cluster = %self.cluster(),
                            category = e.category(),
                            error = %e,
                            failures,
                            hint,
                            "heartbeat failed; retrying"
                        );
                    }
                    if e.category() == "Unauthorized" {
                        let since =
                            *unauthenticated_since.get_or_insert_with(tokio::time::Instant::now);
                        if since.elapsed() >= REJECTED_FOR {
                            return Ended::CredentialUnusable(
                                "the hub has rejected the certificate for a minute",
                            );
                        }
                    }
                }
            }
            beats = beats.wrapping_add(1);
            // Failures retry sooner (1 s doubling) but never later than the interval.
            let wait = if failures == 0 {
                self.args.heartbeat_interval
            } else {
                (FIRST_RETRY / 2 * 2u32.saturating_pow(failures.min(8) - 1))
                    .min(self.args.heartbeat_interval)
            };
            if !self.sleep(wait).await {
                return Ended::Shutdown;
            }
        }
    }

    /// One heartbeat: the member answers, the Lease is renewed, and the status is applied
    /// when it changed (and every 30 beats, in case someone else changed it).
    async fn heartbeat(
        &self,
        session: &Session,
        last_status: &mut Option<serde_json::Value>,
        beat: u64,
    ) -> Result<(), AgentError> {
        let status = self.member_status().await?;
        renew_lease(
            &session.client,
            self.cluster(),
            &self.ctx.identity,
            self.args.heartbeat_interval,
        )
        .await?;
        if last_status.as_ref() != Some(&status) || beat.is_multiple_of(30) {
            let api: Api<Cluster> = Api::all(session.client.clone());
            let patch = json!({
                "apiVersion": "flotilla.dev/v1alpha1",
                "kind": "Cluster",
                "status": status,
            });
            with_timeout(
                "applying the Cluster status",
                api.patch_status(
                    self.cluster(),
                    &PatchParams::apply(field_managers::AGENT).force(),
                    &Patch::Apply(&patch),
                ),
            )
            .await?
            .map_err(|source| AgentError::Hub {
                action: "applying the Cluster status",
                source,
            })?;
            *last_status = Some(status);
        }
        Ok(())
    }

    /// The member's version and allocatable resources, as the status fields the agent owns.
    async fn member_status(&self) -> Result<serde_json::Value, AgentError> {
        let member = |action| move |source| AgentError::Member { action, source };
        let version = with_timeout("reading /version", self.ctx.client.apiserver_version())
            .await?
            .map_err(member("reading /version"))?;
        let nodes: Api<Node> = Api::all(self.ctx.client.clone());
        let nodes = with_timeout("listing Nodes", nodes.list(&ListParams::default()))
            .await?
            .map_err(member("listing Nodes"))?;
        let allocatable: BTreeMap<String, Quantity> = crate::probe::sum_allocatable(
            nodes
                .items
                .iter()
                .filter_map(|n| n.status.as_ref()?.allocatable.as_ref()),
        );
        Ok(json!({
            "kubernetesVersion": version.git_version,
            "allocatable": allocatable,
        }))
    }

    /// Rotates the certificate whenever the current one passes the rotation threshold; ends
    /// when the current one expired without a successor.
    async fn rotations(&self, sessions: watch::Sender<Arc<Session>>) -> Ended {
        let mut backoff = Backoff::new();
        loop {
            let current = sessions.borrow().clone();
            let now = Timestamp::now().as_second();
            if !current.credential.is_valid_at(now, EXPIRY_MARGIN) {
                return Ended::CredentialUnusable("the certificate expired before it was rotated");
            }
            let due = current.credential.rotation_time(
                self.args.certificate_lifetime,
                self.args.certificate_rotation_threshold,
            );
            if now < due {
                let wait = Duration::from_secs(u64::try_from(due - now).unwrap_or(0));
                tracing::info!(
                    serial = %current.credential.serial,
                    rotate_at = %format_time(due),
                    expires = %format_time(current.credential.not_after),
                    "certificate rotation scheduled"
                );
                if !self.sleep(wait).await {
                    return Ended::Shutdown;
                }
                continue;
            }
            match self.rotate(&current).await {
                Ok(next) => {
                    backoff.reset();
                    self.metrics
                        .certificate_expiry
                        .set(next.credential.not_after);
                    tracing::info!(
                        old = %current.credential.serial,
                        new = %next.credential.serial,
                        "switched to the new hub client certificate"
                    );
                    // No receiver only during shutdown.
                    let _ = sessions.send(Arc::new(next));
                }
                Err(e) => {
                    let retry = backoff.next();
                    tracing::error!(
                        category = e.category(),
                        error = %e,
                        retry_in = ?retry,
                        expires = %format_time(current.credential.not_after),
                        "certificate rotation failed; the current certificate stays in use"
                    );
                    if !self.sleep(retry).await {
                        return Ended::Shutdown;
                    }
                }
            }
        }
    }

    /// Requests a certificate with the current one, checks the hub accepts it, stores it.
    async fn rotate(&self, current: &Session) -> Result<Session, AgentError> {
        // The new certificate is for the same Cluster object as the current one.
        let uid = match &current.credential.cluster_uid {
            Some(uid) => uid.clone(),
            None => {
                let api: Api<Cluster> = Api::all(current.client.clone());
                with_timeout("reading the Cluster", api.get(self.cluster()))
                    .await?
                    .map_err(|source| AgentError::Hub {
                        action: "reading the Cluster",
                        source,
                    })?
                    .metadata
                    .uid
                    .unwrap_or_default()
            }
        };
        let credential = self
            .request_certificate(
                &current.client,
                current.credential.endpoint.clone(),
                &uid,
                "rotation",
            )
            .await?;
        let client = client_from_kubeconfig_text(credential.kubeconfig_yaml()).await?;
        // The hub must take the new certificate before the old one goes.
        with_timeout("checking the new certificate", client.apiserver_version())
            .await?
            .map_err(|e| AgentError::CertificateRejected(e.to_string()))?;
        self.store(&credential).await?;
        Ok(Session { credential, client })
    }
}

/// Whether a certificate request is finished: signed, denied or failed (or gone).
fn is_finished(csr: Option<&CertificateSigningRequest>) -> bool {
    match csr {
        None => true,
        Some(csr) => {
            final_condition(csr, &["Denied", "Failed"]).is_some()
                || csr
                    .status
                    .as_ref()
                    .and_then(|s| s.certificate.as_ref())
                    .is_some_and(|c| !c.0.is_empty())
        }
    }
}

fn final_condition<'a>(
    csr: &'a CertificateSigningRequest,
    types: &[&str],
) -> Option<&'a k8s_openapi::api::certificates::v1::CertificateSigningRequestCondition> {
    csr.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.status == "True" && types.contains(&c.type_.as_str()))
}

/// Renews the agent's Lease in `flotilla-cluster-<cluster>`, creating it if missing.
async fn renew_lease(
    client: &Client,
    cluster: &str,
    identity: &str,
    interval: Duration,
) -> Result<(), AgentError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), &names::cluster_namespace(cluster));
    let now = MicroTime(Timestamp::now());
    // Four missed heartbeats: the Lease says how long the agent may be silent.
    let duration = i32::try_from(interval.as_secs().saturating_mul(4).max(1)).unwrap_or(i32::MAX);
    let patch = json!({ "spec": {
        "holderIdentity": identity,
        "leaseDurationSeconds": duration,
        "renewTime": now,
    }});
    let renewed = with_timeout(
        "renewing the Lease",
        api.patch(
            names::AGENT_LEASE_NAME,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        ),
    )
    .await?;
    match renewed {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(names::AGENT_LEASE_NAME.into()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(identity.into()),
                    lease_duration_seconds: Some(duration),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    ..Default::default()
                }),
            };
            with_timeout(
                "creating the Lease",
                api.create(&PostParams::default(), &lease),
            )
            .await?
            .map(|_| ())
            .map_err(|source| AgentError::Hub {
                action: "creating the Lease",
                source,
            })
        }
        Err(source) => Err(AgentError::Hub {
            action: "renewing the Lease",
            source,
        }),
    }
}

/// Runs `f` with the request time limit.
async fn with_timeout<T>(
    action: &'static str,
    f: impl std::future::Future<Output = T>,
) -> Result<T, AgentError> {
    tokio::time::timeout(REQUEST_TIMEOUT, f)
        .await
        .map_err(|_| AgentError::Timeout { action })
}

async fn client_from_kubeconfig(kubeconfig: Kubeconfig) -> Result<Client, AgentError> {
    // kube's messages may echo configuration values: keep the part that names the problem.
    let redact = |e: &dyn std::fmt::Display| {
        e.to_string()
            .split(':')
            .next()
            .unwrap_or("unusable configuration")
            .to_string()
    };
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| AgentError::Client(redact(&e)))?;
    config.connect_timeout = Some(Duration::from_secs(5));
    config.read_timeout = Some(Duration::from_secs(60));
    flotilla_runtime::pool::client(&config, None, flotilla_runtime::pool::Retries::Patient)
        .map_err(|e| AgentError::Client(redact(&e)))
}

async fn client_from_kubeconfig_text(text: &str) -> Result<Client, AgentError> {
    let kubeconfig = Kubeconfig::from_yaml(text)
        .map_err(|_| AgentError::Client("the credential is not a kubeconfig".into()))?;
    client_from_kubeconfig(kubeconfig).await
}

fn format_time(seconds: i64) -> String {
    Timestamp::from_second(seconds)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| seconds.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        agent: AgentArgs,
    }

    fn parse(args: &[&str]) -> Result<AgentArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("agent").chain(args.iter().copied())).map(|c| c.agent)
    }

    #[test]
    fn flags_have_safe_defaults_and_are_checked() {
        let a = parse(&["--cluster-name", "member1"]).expect("parses");
        assert_eq!(a.heartbeat_interval, Duration::from_secs(10));
        assert_eq!(a.certificate_lifetime, Duration::from_secs(86_400));
        assert!((a.certificate_rotation_threshold - 0.75).abs() < f64::EPSILON);
        assert_eq!(a.hub_credential_secret, "flotilla-hub-kubeconfig");
        assert!(parse(&["--cluster-name", "Member_1"]).is_err());
        let short = parse(&["--cluster-name", "m", "--certificate-lifetime", "5m"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(short.contains("10m"), "{short}");
        assert!(
            parse(&[
                "--cluster-name",
                "m",
                "--certificate-rotation-threshold",
                "1"
            ])
            .is_err()
        );
        assert!(
            parse(&[
                "--cluster-name",
                "m",
                "--certificate-rotation-threshold",
                "0.05"
            ])
            .is_ok()
        );
    }

    #[test]
    fn backoff_doubles_to_a_ceiling() {
        let mut b = Backoff::new();
        assert_eq!(b.next(), Duration::from_secs(2));
        assert_eq!(b.next(), Duration::from_secs(4));
        for _ in 0..10 {
            b.next();
        }
        assert_eq!(b.next(), MAX_RETRY);
        b.reset();
        assert_eq!(b.next(), FIRST_RETRY);
    }

    #[test]
    fn finished_requests_are_signed_denied_or_gone() {
        use k8s_openapi::api::certificates::v1::{
            CertificateSigningRequestCondition, CertificateSigningRequestStatus,
        };
        assert!(is_finished(None));
        let mut csr = CertificateSigningRequest::default();
        assert!(!is_finished(Some(&csr)));
        csr.status = Some(CertificateSigningRequestStatus {
            conditions: Some(vec![CertificateSigningRequestCondition {
                type_: "Approved".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert!(!is_finished(Some(&csr)), "approved but not signed yet");
        if let Some(s) = csr.status.as_mut() {
            s.certificate = Some(ByteString(b"PEM".to_vec()));
        }
        assert!(is_finished(Some(&csr)));
        let denied = CertificateSigningRequest {
            status: Some(CertificateSigningRequestStatus {
                conditions: Some(vec![CertificateSigningRequestCondition {
                    type_: "Denied".into(),
                    status: "True".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(is_finished(Some(&denied)));
    }
}
