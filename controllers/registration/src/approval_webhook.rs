//! The certificate approval webhook (hub).
//!
//! Registration's ServiceAccount may approve CertificateSigningRequests of the signer
//! `kubernetes.io/kube-apiserver-client`, and every certificate that signer issues authenticates
//! whatever user it names. The chart's admission policy lets registration decide only requests
//! that pull agents and their bootstrap identities made, but a policy cannot read the subject
//! inside a request. So the hub's apiserver asks this webhook before registration's approval of
//! a request is stored, and it answers with the registration controller's own policy
//! ([`crate::csr::review_approval`]): an agent's identity for its own, accepted Cluster, or
//! nothing. Whoever stole registration's token cannot approve a certificate for another user.
//!
//! It reads Clusters (`get`) with an identity of its own and holds no other right; it keeps no
//! state, so every replica answers alike and none elects a leader.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::post;
use flotilla_api::cluster::Cluster;
use flotilla_runtime::Context;
use flotilla_runtime::cli::parse_duration;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::Api;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use prometheus::{IntCounterVec, Opts};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

use crate::csr::{self, CsrConfig};

/// The path the webhook answers on.
pub const PATH: &str = "/csr-approval";

/// How long a client may take to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Flags of `flotilla-registration approval-webhook`.
#[derive(clap::Args, Debug, Clone)]
pub struct ApprovalWebhookArgs {
    /// Address of the HTTPS server the hub's apiserver calls (path /csr-approval).
    #[arg(long, default_value = "0.0.0.0:9443", value_name = "HOST:PORT")]
    pub webhook_address: SocketAddr,

    /// The server's certificate (PEM; the chain, leaf first). The webhook configuration's
    /// caBundle must verify it for the webhook's address.
    #[arg(long, value_name = "PATH")]
    pub tls_cert_file: PathBuf,

    /// The private key of --tls-cert-file (PEM).
    #[arg(long, value_name = "PATH")]
    pub tls_private_key_file: PathBuf,

    /// As registration's --auto-accept: approvals need no spec.hubAcceptsClient. Give both the
    /// same value, or registration's approvals of unaccepted Clusters are refused.
    #[arg(long, default_value_t = false)]
    pub auto_accept: bool,

    /// As registration's --max-agent-certificate-lifetime: approvals of requests for a longer
    /// lifetime are refused.
    #[arg(long, default_value = "720h", value_parser = parse_duration, value_name = "DURATION")]
    pub max_agent_certificate_lifetime: Duration,
}

/// What every review shares.
struct Reviewer {
    clusters: Api<Cluster>,
    config: CsrConfig,
    verdicts: IntCounterVec,
}

impl Reviewer {
    /// `Ok` lets the update through; `Err` refuses it with the message.
    async fn review(
        &self,
        request: &AdmissionRequest<CertificateSigningRequest>,
    ) -> Result<(), String> {
        let (Some(old), Some(new)) = (&request.old_object, &request.object) else {
            return Err(format!(
                "{} of a CertificateSigningRequest's approval without the object and the old \
                 object: not an update this webhook reviews",
                serde_json::to_string(&request.operation).unwrap_or_default()
            ));
        };
        let found = match csr::requested_cluster(old) {
            None => None,
            Some(name) => match self.clusters.get_opt(&name).await {
                Ok(found) => found.map(Ok),
                Err(e) => {
                    tracing::warn!(cluster = %name, error = %e, "cannot read the Cluster of a request");
                    Some(Err(()))
                }
            },
        };
        let cluster = found.as_ref().map(|c| c.as_ref().map_err(|_| ()));
        csr::review_approval(old, new, cluster, &self.config)
    }
}

/// Serves the webhook until `ctx.shutdown`.
pub async fn run(ctx: Context, args: ApprovalWebhookArgs) -> anyhow::Result<()> {
    let acceptor = TlsAcceptor::from(Arc::new(server_config(
        &args.tls_cert_file,
        &args.tls_private_key_file,
    )?));
    let verdicts = IntCounterVec::new(
        Opts::new(
            format!("{}_reviews_total", ctx.metrics.prefix()),
            "Reviews of registration's approvals of certificate requests, by verdict \
             (allowed, refused).",
        ),
        &["verdict"],
    )?;
    ctx.metrics
        .registry()
        .register(Box::new(verdicts.clone()))?;
    let reviewer = Arc::new(Reviewer {
        clusters: Api::all(ctx.client.clone()),
        config: CsrConfig {
            auto_accept: args.auto_accept,
            max_lifetime: args.max_agent_certificate_lifetime,
        },
        verdicts,
    });
    let app = axum::Router::new()
        .route(PATH, post(review))
        .with_state(reviewer);
    let listener = TcpListener::bind(args.webhook_address)
        .await
        .with_context(|| format!("listening on {} (--webhook-address)", args.webhook_address))?;
    ctx.health.set_caches_synced(true);
    tracing::info!(address = %args.webhook_address, path = PATH, "serving the certificate approval webhook");
    loop {
        let (tcp, peer) = tokio::select! {
            _ = ctx.shutdown.cancelled() => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection");
                    continue;
                }
            },
        };
        let (acceptor, app, shutdown) = (acceptor.clone(), app.clone(), ctx.shutdown.clone());
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
            };
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
            tokio::pin!(connection);
            let served = tokio::select! {
                served = connection.as_mut() => served,
                _ = shutdown.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = served {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}

async fn review(State(reviewer): State<Arc<Reviewer>>, body: Bytes) -> impl IntoResponse {
    let review = answer(&reviewer, &body).await;
    (
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(&review).unwrap_or_default(),
    )
}

/// The AdmissionReview answering the one in `body`.
async fn answer(reviewer: &Reviewer, body: &[u8]) -> AdmissionReview<DynamicObject> {
    let request: AdmissionRequest<CertificateSigningRequest> =
        match serde_json::from_slice::<AdmissionReview<CertificateSigningRequest>>(body)
            .map_err(|e| e.to_string())
            .and_then(|review| {
                review
                    .try_into()
                    .map_err(|e: kube::core::admission::ConvertAdmissionReviewError| e.to_string())
            }) {
            Ok(request) => request,
            Err(e) => return AdmissionResponse::invalid(e).into_review(),
        };
    let response = AdmissionResponse::from(&request);
    let response = match reviewer.review(&request).await {
        Ok(()) => {
            reviewer.verdicts.with_label_values(&["allowed"]).inc();
            response
        }
        Err(message) => {
            reviewer.verdicts.with_label_values(&["refused"]).inc();
            // Someone with registration's token tried to approve what registration would not:
            // worth an SRE's attention.
            tracing::warn!(
                request = %request.name,
                user = %request.user_info.username.as_deref().unwrap_or_default(),
                %message,
                "refused an approval of a certificate request"
            );
            response.deny(message)
        }
    };
    response.into_review()
}

/// The TLS configuration of the server: the certificate chain and key in the files, TLS 1.2 and
/// 1.3 with ring's algorithms.
fn server_config(cert: &Path, key: &Path) -> anyhow::Result<rustls::ServerConfig> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| {
            format!(
                "reading the certificates of {} (--tls-cert-file)",
                cert.display()
            )
        })?;
    anyhow::ensure!(
        !chain.is_empty(),
        "{} (--tls-cert-file) has no certificate",
        cert.display()
    );
    let key = PrivateKeyDer::from_pem_file(key).with_context(|| {
        format!(
            "reading the private key of {} (--tls-private-key-file)",
            key.display()
        )
    })?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .context("the certificate and the private key do not make a TLS server configuration")?;
    Ok(config)
}
