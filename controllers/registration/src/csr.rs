//! Approval of pull-mode agents' certificate requests (hub).
//!
//! A pull-mode agent asks for a client certificate of the hub's apiserver with a
//! CertificateSigningRequest (signer `kubernetes.io/kube-apiserver-client`) for the user
//! `system:flotilla:cluster:<name>:agent` in the group `system:flotilla:agents`. The hub's
//! kube-controller-manager signs approved requests; this controller decides which to approve:
//!
//! - only requests whose subject, usages and requester match one Cluster exactly: the requester
//!   is that cluster's bootstrap identity (`system:serviceaccount:flotilla-system:
//!   flotilla-bootstrap-<name>`) or, to renew, the agent itself;
//! - only once the Cluster is a pull-mode Cluster that the hub admin accepted
//!   (`spec.hubAcceptsClient: true`, or `--auto-accept`), and is not being deleted.
//!
//! Requests that can never become valid (another cluster's requester, a wrong subject, usages
//! or subject alternative names, a push-mode Cluster) are denied with a precise reason. Requests
//! that only wait for the admin stay pending and are decided again when their Cluster changes.
//! Requests that do not look like an agent's (another signer, another common name) are left to
//! whoever else approves certificates in the hub. A decided request is never touched again.
//!
//! [`decide`] is the whole policy, a pure function of the request, the Cluster and the
//! configuration; [`run`] feeds it from watches and writes its decisions.

use std::sync::Arc;
use std::time::Duration;

use flotilla_api::cluster::{Cluster, SyncMode};
use flotilla_api::{annotations, names};
use flotilla_runtime::reconcile::{Reconciler, Retry, drive};
use flotilla_runtime::shared::SharedCache;
use flotilla_runtime::{Context, ErrorCategory};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ListParams, PostParams};
use kube::core::DeserializeGuard;
use kube::runtime::controller::{Action, Config as ControllerConfig};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Api, ResourceExt};
use prometheus::{IntCounterVec, Opts};
use x509_parser::extensions::ParsedExtension;
use x509_parser::prelude::{FromDer, X509CertificationRequest};

/// When an object is tried again after a failed reconciliation.
const RETRY: Retry = Retry {
    transient: Duration::from_secs(5),
    permanent: None,
};

/// Namespace of the pull-mode agents' bootstrap ServiceAccounts on the hub.
pub const BOOTSTRAP_NAMESPACE: &str = names::SYSTEM_NAMESPACE;

/// Prefix of a bootstrap ServiceAccount's name: `flotilla-bootstrap-<cluster>`.
pub const BOOTSTRAP_SERVICE_ACCOUNT_PREFIX: &str = "flotilla-bootstrap-";

/// Usages an agent's certificate may have; `client auth` is required.
pub const ALLOWED_USAGES: [&str; 3] = ["client auth", "digital signature", "key encipherment"];

/// The usage every agent certificate needs.
pub const CLIENT_AUTH: &str = "client auth";

/// Condition types of a CertificateSigningRequest.
const APPROVED: &str = "Approved";
const DENIED: &str = "Denied";
const FAILED: &str = "Failed";

/// The reasons written into approval conditions, counted in metrics and used as Event reasons.
pub mod reasons {
    /// The request matches an accepted pull-mode Cluster.
    pub const APPROVED: &str = "FlotillaAgentApproved";
    /// The subject is not exactly `CN=system:flotilla:cluster:<name>:agent, O=system:flotilla:agents`.
    pub const SUBJECT_MISMATCH: &str = "SubjectMismatch";
    /// The request asks for usages other than client auth, digital signature, key encipherment,
    /// or lacks client auth.
    pub const UNEXPECTED_USAGES: &str = "UnexpectedUsages";
    /// The request asks for no certificate lifetime, or a longer one than the approver allows
    /// (`--max-agent-certificate-lifetime`).
    pub const UNBOUNDED_LIFETIME: &str = "UnboundedLifetime";
    /// The request asks for subject alternative names, which an agent never needs.
    pub const UNEXPECTED_SUBJECT_ALT_NAMES: &str = "UnexpectedSubjectAltNames";
    /// The requester is neither the cluster's bootstrap identity nor its agent.
    pub const REQUESTER_MISMATCH: &str = "RequesterMismatch";
    /// The bootstrap identity already got the Cluster's agent a certificate (the Cluster's
    /// `flotilla.dev/bootstrap-request` names that request).
    pub const BOOTSTRAP_USED: &str = "BootstrapUsed";
    /// The Cluster is a push-mode Cluster: it has no agent.
    pub const CLUSTER_NOT_PULL: &str = "ClusterNotPullMode";
    /// The Cluster is being deleted.
    pub const CLUSTER_DELETING: &str = "ClusterDeleting";
    /// The request cannot be parsed (PKCS#10 PEM).
    pub const MALFORMED_REQUEST: &str = "MalformedRequest";

    // Pending, never written: why a request waits.
    /// The Cluster does not exist (yet).
    pub const CLUSTER_NOT_FOUND: &str = "ClusterNotFound";
    /// The Cluster exists but cannot be read (does not match the schema this controller knows).
    pub const CLUSTER_INVALID: &str = "ClusterInvalid";
    /// The hub admin has not set `spec.hubAcceptsClient: true` yet.
    pub const AWAITING_ACCEPTANCE: &str = "AwaitingAcceptance";
}

/// How the approver decides.
#[derive(Clone, Debug)]
pub struct CsrConfig {
    /// Approve without waiting for `spec.hubAcceptsClient`.
    pub auto_accept: bool,
    /// The longest certificate lifetime (`spec.expirationSeconds`) approved; a request without one
    /// would get the signer's default (a year with kube-controller-manager's), and is denied.
    pub max_lifetime: std::time::Duration,
}

/// The longest agent certificate lifetime approved by default (`--max-agent-certificate-lifetime`):
/// 30 days.
pub const DEFAULT_MAX_LIFETIME: std::time::Duration = std::time::Duration::from_secs(30 * 86_400);

impl Default for CsrConfig {
    fn default() -> Self {
        Self {
            auto_accept: false,
            max_lifetime: DEFAULT_MAX_LIFETIME,
        }
    }
}

/// The bootstrap ServiceAccount of `cluster`: `flotilla-bootstrap-<cluster>` in `flotilla-system`.
pub fn bootstrap_service_account(cluster: &str) -> String {
    format!("{BOOTSTRAP_SERVICE_ACCOUNT_PREFIX}{cluster}")
}

/// The user name of `cluster`'s bootstrap identity:
/// `system:serviceaccount:flotilla-system:flotilla-bootstrap-<cluster>`.
pub fn bootstrap_user_name(cluster: &str) -> String {
    format!(
        "system:serviceaccount:{BOOTSTRAP_NAMESPACE}:{}",
        bootstrap_service_account(cluster)
    )
}

/// The cluster whose bootstrap identity `user` is, if it is one.
pub fn cluster_from_bootstrap_user_name(user: &str) -> Option<&str> {
    user.strip_prefix("system:serviceaccount:")?
        .strip_prefix(BOOTSTRAP_NAMESPACE)?
        .strip_prefix(':')?
        .strip_prefix(BOOTSTRAP_SERVICE_ACCOUNT_PREFIX)
        .filter(|c| names::validate_cluster_name(c).is_ok())
}

/// The subject and extensions a PKCS#10 request asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestedSubject {
    /// Every common name (CN) in the subject.
    pub common_names: Vec<String>,
    /// Every organization (O) in the subject, in order.
    pub organizations: Vec<String>,
    /// Whether the request asks for subject alternative names.
    pub has_subject_alt_names: bool,
}

/// Why a request could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RequestParseError {
    #[error("spec.request is not a PEM block")]
    NotPem,
    #[error("spec.request is a PEM block of type {0:?}, not CERTIFICATE REQUEST")]
    WrongPemLabel(String),
    #[error("spec.request is not a PKCS#10 certificate request")]
    NotPkcs10,
    #[error("the subject of the request has an attribute that is not a string")]
    BadAttribute,
}

/// Parses the PEM-encoded PKCS#10 request of a CertificateSigningRequest.
pub fn parse_request(pem: &[u8]) -> Result<RequestedSubject, RequestParseError> {
    let (_, block) =
        x509_parser::pem::parse_x509_pem(pem).map_err(|_| RequestParseError::NotPem)?;
    if block.label != "CERTIFICATE REQUEST" && block.label != "NEW CERTIFICATE REQUEST" {
        return Err(RequestParseError::WrongPemLabel(block.label));
    }
    let (_, request) = X509CertificationRequest::from_der(&block.contents)
        .map_err(|_| RequestParseError::NotPkcs10)?;
    let subject = &request.certification_request_info.subject;
    let strings = |it: &mut dyn Iterator<Item = &x509_parser::x509::AttributeTypeAndValue<'_>>| {
        it.map(|a| a.as_str().map(str::to_string))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| RequestParseError::BadAttribute)
    };
    let common_names = strings(&mut subject.iter_common_name())?;
    let organizations = strings(&mut subject.iter_organization())?;
    let has_subject_alt_names = request.requested_extensions().is_some_and(|mut exts| {
        exts.any(|e| matches!(e, ParsedExtension::SubjectAlternativeName(san) if !san.general_names.is_empty()))
    });
    Ok(RequestedSubject {
        common_names,
        organizations,
        has_subject_alt_names,
    })
}

/// The cluster a request is about: the one named by its common name, if the request is for
/// Flotilla's signer and its common name is an agent's user name. `None`: not an agent's request.
pub fn requested_cluster(csr: &CertificateSigningRequest) -> Option<String> {
    if csr.spec.signer_name != names::AGENT_CSR_SIGNER {
        return None;
    }
    let subject = parse_request(&csr.spec.request.0).ok()?;
    match subject.common_names.as_slice() {
        [cn] => names::cluster_from_agent_user_name(cn).map(str::to_string),
        _ => None,
    }
}

/// Whether the request already has a final condition (Approved, Denied or Failed).
pub fn is_decided(csr: &CertificateSigningRequest) -> bool {
    [APPROVED, DENIED, FAILED]
        .iter()
        .any(|type_| has_condition(csr, type_))
}

/// What to do with a CertificateSigningRequest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Not ours to decide: another signer, not an agent's subject, or already decided.
    Ignore,
    /// Leave it pending: it may become valid when its Cluster changes.
    Pending {
        cluster: String,
        reason: &'static str,
        message: String,
    },
    /// Approve it.
    Approve { cluster: String, message: String },
    /// Deny it: it can never become valid.
    Deny {
        cluster: String,
        reason: &'static str,
        message: String,
    },
}

impl Decision {
    /// The reason, for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Ignore => "Ignored",
            Self::Pending { reason, .. } | Self::Deny { reason, .. } => reason,
            Self::Approve { .. } => reasons::APPROVED,
        }
    }
}

/// The whole approval policy. `cluster` is the Cluster named by the request's common name
/// (see [`requested_cluster`]); `None` when it does not exist, `Some(Err(_))` when it exists but
/// cannot be read.
pub fn decide(
    csr: &CertificateSigningRequest,
    cluster: Option<Result<&Cluster, ()>>,
    config: &CsrConfig,
) -> Decision {
    if is_decided(csr) || csr.spec.signer_name != names::AGENT_CSR_SIGNER {
        return Decision::Ignore;
    }
    let Ok(subject) = parse_request(&csr.spec.request.0) else {
        // The apiserver validates requests, so this is not expected; without a subject we cannot
        // tell whether the request is an agent's, so it is not ours to deny.
        return Decision::Ignore;
    };
    let [cn] = subject.common_names.as_slice() else {
        return Decision::Ignore;
    };
    let Some(name) = names::cluster_from_agent_user_name(cn) else {
        return Decision::Ignore;
    };
    let deny = |reason, message: String| Decision::Deny {
        cluster: name.to_string(),
        reason,
        message,
    };

    // What can be decided from the request alone.
    let requested_uid = match subject.organizations.as_slice() {
        [group, uid] if group == names::AGENT_GROUP => uid
            .strip_prefix(names::CLUSTER_UID_GROUP_PREFIX)
            .filter(|uid| !uid.is_empty()),
        _ => None,
    };
    let Some(requested_uid) = requested_uid else {
        return deny(
            reasons::SUBJECT_MISMATCH,
            format!(
                "the subject must have exactly two organizations (O), {:?} and \
                 \"{}<the Cluster's UID>\"; the request has {:?}",
                names::AGENT_GROUP,
                names::CLUSTER_UID_GROUP_PREFIX,
                subject.organizations
            ),
        );
    };
    if subject.has_subject_alt_names {
        return deny(
            reasons::UNEXPECTED_SUBJECT_ALT_NAMES,
            "an agent's client certificate must not ask for subject alternative names".into(),
        );
    }
    let usages = csr.spec.usages.as_deref().unwrap_or_default();
    let unexpected: Vec<&str> = usages
        .iter()
        .map(String::as_str)
        .filter(|u| !ALLOWED_USAGES.contains(u))
        .collect();
    if !unexpected.is_empty() || !usages.iter().any(|u| u == CLIENT_AUTH) {
        return deny(
            reasons::UNEXPECTED_USAGES,
            format!(
                "usages must include {CLIENT_AUTH:?} and be among {ALLOWED_USAGES:?}; the request \
                 has {usages:?}"
            ),
        );
    }
    let requester = csr.spec.username.as_deref().unwrap_or_default();
    let bootstrap = bootstrap_user_name(name);
    let agent = names::agent_user_name(name);
    if requester != bootstrap && requester != agent {
        let whose = cluster_from_bootstrap_user_name(requester)
            .map(|c| format!(" (the bootstrap identity of cluster {c:?})"))
            .or_else(|| {
                names::cluster_from_agent_user_name(requester)
                    .map(|c| format!(" (the agent of cluster {c:?})"))
            })
            .unwrap_or_default();
        return deny(
            reasons::REQUESTER_MISMATCH,
            format!(
                "a certificate for cluster {name:?} may only be requested by {bootstrap:?} or \
                 {agent:?}; it was requested by {requester:?}{whose}"
            ),
        );
    }

    let max = config.max_lifetime.as_secs();
    match csr.spec.expiration_seconds {
        Some(s) if u64::try_from(s).is_ok_and(|s| s <= max) => {}
        asked => {
            return deny(
                reasons::UNBOUNDED_LIFETIME,
                format!(
                    "an agent's certificate must ask for a lifetime (spec.expirationSeconds) of at \
                     most {max} s (--max-agent-certificate-lifetime); the request asks for {}",
                    asked.map_or("none".to_string(), |s| format!("{s} s"))
                ),
            );
        }
    }

    // What depends on the Cluster.
    let pending = |reason, message: String| Decision::Pending {
        cluster: name.to_string(),
        reason,
        message,
    };
    let cluster = match cluster {
        None => {
            return pending(
                reasons::CLUSTER_NOT_FOUND,
                format!("Cluster {name:?} does not exist"),
            );
        }
        Some(Err(())) => {
            return pending(
                reasons::CLUSTER_INVALID,
                format!("Cluster {name:?} cannot be read"),
            );
        }
        Some(Ok(cluster)) => cluster,
    };
    if cluster.metadata.deletion_timestamp.is_some() {
        return deny(
            reasons::CLUSTER_DELETING,
            format!("Cluster {name:?} is being deleted"),
        );
    }
    // A Cluster deleted and made again under the same name is another Cluster: neither a request
    // for the old one nor a request made with the old one's certificate is this one's.
    let uid = cluster.metadata.uid.as_deref().unwrap_or_default();
    if requested_uid != uid {
        return deny(
            reasons::SUBJECT_MISMATCH,
            format!(
                "the request is for the Cluster {name:?} with UID {requested_uid}, which is not \
                 this Cluster (UID {uid}): it was deleted and made again"
            ),
        );
    }
    let uid_group = names::cluster_uid_group(uid);
    if requester == agent
        && !csr
            .spec
            .groups
            .as_ref()
            .is_some_and(|groups| groups.contains(&uid_group))
    {
        return deny(
            reasons::REQUESTER_MISMATCH,
            format!(
                "the renewal was requested with a certificate that is not for this Cluster \
                 object (it lacks the group {uid_group:?}): one of an earlier Cluster named \
                 {name:?}"
            ),
        );
    }
    if cluster.spec.sync_mode != SyncMode::Pull {
        return deny(
            reasons::CLUSTER_NOT_PULL,
            format!(
                "Cluster {name:?} has syncMode {:?}: only pull-mode Clusters have an agent",
                cluster.spec.sync_mode
            ),
        );
    }
    if !cluster.spec.hub_accepts_client && !config.auto_accept {
        return pending(
            reasons::AWAITING_ACCEPTANCE,
            format!(
                "waiting for the hub admin to accept Cluster {name:?} (spec.hubAcceptsClient: true)"
            ),
        );
    }
    // A bootstrap identity gets one certificate: a stolen bootstrap token is worth nothing once
    // the member joined.
    let used = cluster
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::BOOTSTRAP_REQUEST))
        .filter(|used| Some(used.as_str()) != csr.metadata.name.as_deref());
    if requester == bootstrap
        && let Some(used) = used
    {
        return deny(
            reasons::BOOTSTRAP_USED,
            format!(
                "the bootstrap identity of Cluster {name:?} got its agent a certificate already \
                 (request {used}); the agent renews with its own. To let the member register \
                 again (it lost its credential), remove the annotation {} from the Cluster",
                annotations::BOOTSTRAP_REQUEST
            ),
        );
    }
    let how = if cluster.spec.hub_accepts_client {
        "the hub accepts it (spec.hubAcceptsClient)"
    } else {
        "the approver auto-accepts agents (--auto-accept)"
    };
    let who = if requester == agent {
        "renewal requested by the agent"
    } else {
        "requested by the cluster's bootstrap identity"
    };
    Decision::Approve {
        cluster: name.to_string(),
        message: format!("agent certificate of pull-mode Cluster {name:?}: {who}; {how}"),
    }
}

/// Whether the request has the final condition `type_` (Approved, Denied or Failed).
fn has_condition(csr: &CertificateSigningRequest, type_: &str) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.status == "True" && c.type_ == type_))
}

/// The approval webhook's answer to registration's update of a request's approval: `Ok` lets it
/// through, `Err` refuses it with the message. An update that approves the request passes only
/// when [`decide`] approves the request as it was before the update (`old`), for the Cluster it
/// names; denying, and every update that approves nothing new, passes.
///
/// So registration's ServiceAccount token approves exactly what the registration controller
/// would: an agent's own identity for its Cluster, never another subject. Whoever stole the
/// token cannot mint a certificate for another user (`system:kube-controller-manager`, the hub
/// admin's) through an agent's or a bootstrap identity's request.
pub fn review_approval(
    old: &CertificateSigningRequest,
    new: &CertificateSigningRequest,
    cluster: Option<Result<&Cluster, ()>>,
    config: &CsrConfig,
) -> Result<(), String> {
    if !has_condition(new, APPROVED) || has_condition(old, APPROVED) {
        return Ok(());
    }
    match decide(old, cluster, config) {
        Decision::Approve { .. } => Ok(()),
        Decision::Ignore => Err(format!(
            "registration approves only pull-mode agents' certificate requests: signer {:?}, one \
             common name {:?}, organizations {:?} and {:?}; this request {}",
            names::AGENT_CSR_SIGNER,
            names::agent_user_name("<cluster>"),
            names::AGENT_GROUP,
            names::cluster_uid_group("<the Cluster's UID>"),
            describe_request(old),
        )),
        Decision::Pending {
            reason, message, ..
        }
        | Decision::Deny {
            reason, message, ..
        } => Err(format!("{reason}: {message}")),
    }
}

/// What a request asks for, in words, for a refusal.
fn describe_request(csr: &CertificateSigningRequest) -> String {
    if is_decided(csr) {
        return "was decided already".to_string();
    }
    if csr.spec.signer_name != names::AGENT_CSR_SIGNER {
        return format!("is for the signer {:?}", csr.spec.signer_name);
    }
    match parse_request(&csr.spec.request.0) {
        Err(e) => format!("cannot be read: {e}"),
        Ok(subject) => format!(
            "asks for the common names {:?} and organizations {:?}",
            subject.common_names, subject.organizations
        ),
    }
}

/// Why writing a decision failed.
#[derive(Debug, thiserror::Error)]
pub enum CsrError {
    #[error("writing the approval of CertificateSigningRequest {name}: {source}")]
    WriteApproval {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("reading Cluster {name}: {source}")]
    ReadCluster {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("recording the bootstrap request on Cluster {name}: {source}")]
    RecordBootstrap {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("the CertificateSigningRequest has no name")]
    Unnamed,
}

impl ErrorCategory for CsrError {
    fn category(&self) -> &'static str {
        match self {
            Self::WriteApproval { source, .. }
            | Self::ReadCluster { source, .. }
            | Self::RecordBootstrap { source, .. } => source.category(),
            Self::Unnamed => "InvalidObject",
        }
    }

    fn is_transient(&self) -> bool {
        match self {
            Self::WriteApproval { source, .. }
            | Self::ReadCluster { source, .. }
            | Self::RecordBootstrap { source, .. } => source.is_transient(),
            Self::Unnamed => false,
        }
    }
}

/// The approver's metrics.
#[derive(Clone)]
struct CsrMetrics {
    decisions: IntCounterVec,
}

impl CsrMetrics {
    fn register(ctx: &Context) -> anyhow::Result<Self> {
        let decisions = IntCounterVec::new(
            Opts::new(
                format!("{}_csr_decisions_total", ctx.metrics.prefix()),
                "Decisions on pull-mode agents' certificate requests, by decision and reason.",
            ),
            &["decision", "reason"],
        )?;
        ctx.metrics
            .registry()
            .register(Box::new(decisions.clone()))?;
        Ok(Self { decisions })
    }
}

/// What every reconciliation shares.
struct State {
    ctx: Context,
    api: Api<CertificateSigningRequest>,
    clusters: Api<DeserializeGuard<Cluster>>,
    config: CsrConfig,
    /// Only Clusters matching this label selector are handled (empty: all).
    cluster_selector: String,
    metrics: CsrMetrics,
}

/// How often a pending request is looked at again even without a change of its Cluster.
const PENDING_RECHECK: Duration = Duration::from_secs(300);

/// Runs the approver until `ctx.shutdown`, deciding only requests for the Clusters matching the
/// label selector `cluster_selector` (empty: all Clusters). With a selector, a request for a
/// Cluster that does not exist or does not match is left alone: it belongs to another instance.
/// `watched` are those Clusters: a change of one decides its requests again.
pub async fn run_scoped(
    ctx: Context,
    config: CsrConfig,
    cluster_selector: &str,
    watched: &SharedCache<Cluster>,
) -> anyhow::Result<()> {
    let metrics = CsrMetrics::register(&ctx)?;
    let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());

    let clusters: Api<DeserializeGuard<Cluster>> = Api::all(ctx.client.clone());

    let controller = Controller::new(api.clone(), watcher::Config::default())
        .with_config(ControllerConfig::default().concurrency(4));
    let requests = controller.store();
    // A Cluster changed: decide again every undecided request about it.
    let controller = controller.watches_stream(watched.touched(), move |cluster| {
        let name = cluster.name_any();
        requests
            .state()
            .into_iter()
            .filter(|csr| !is_decided(csr))
            .filter(|csr| requested_cluster(csr).as_deref() == Some(name.as_str()))
            .map(|csr| ObjectRef::from_obj(csr.as_ref()))
            .collect::<Vec<_>>()
    });

    let state = Arc::new(State {
        ctx: ctx.clone(),
        api,
        clusters,
        config,
        cluster_selector: cluster_selector.to_string(),
        metrics,
    });
    tracing::info!(
        auto_accept = state.config.auto_accept,
        cluster_selector,
        "approving pull-mode agents' certificate requests"
    );
    drive(controller, state).await;
    Ok(())
}

/// What a pass over a request read.
enum Observed {
    /// Not a request this approver decides: decided already, not an agent's, or about a Cluster
    /// another instance handles.
    NotOurs,
    /// The Cluster the request names, read from the server: `None` when it does not exist,
    /// `Err` when it does not decode.
    Cluster {
        name: String,
        cluster: Option<Result<Box<Cluster>, ()>>,
    },
}

/// What a pass does with a request.
struct Plan {
    decision: Decision,
    /// Record the request on its Cluster before approving it: it is the Cluster's bootstrap
    /// identity's, and no second one may be approved.
    record_bootstrap: Option<String>,
    /// The Cluster, for Events.
    cluster: Option<Cluster>,
}

/// The decision on `csr`, and what it takes.
fn plan(csr: &CertificateSigningRequest, observed: &Observed, config: &CsrConfig) -> Plan {
    let Observed::Cluster {
        name: cluster_name,
        cluster,
    } = observed
    else {
        return Plan {
            decision: Decision::Ignore,
            record_bootstrap: None,
            cluster: None,
        };
    };
    let decision = decide(
        csr,
        cluster.as_ref().map(|c| c.as_deref().map_err(|_| ())),
        config,
    );
    let bootstrap =
        csr.spec.username.as_deref() == Some(bootstrap_user_name(cluster_name).as_str());
    Plan {
        record_bootstrap: (bootstrap && matches!(decision, Decision::Approve { .. }))
            .then(|| cluster_name.clone()),
        decision,
        cluster: cluster.clone().and_then(Result::ok).map(|c| *c),
    }
}

impl Reconciler for State {
    type Object = CertificateSigningRequest;
    type Observed = Observed;
    type Plan = Plan;
    type Outcome = ();
    type Error = CsrError;

    const NAME: &'static str = "certificatesigningrequest";
    const RETRY: Retry = RETRY;

    fn context(&self) -> &Context {
        &self.ctx
    }

    fn api(&self, _: &CertificateSigningRequest) -> Api<CertificateSigningRequest> {
        self.api.clone()
    }

    async fn observe(&self, csr: &CertificateSigningRequest) -> Result<Observed, CsrError> {
        if is_decided(csr) {
            return Ok(Observed::NotOurs);
        }
        let Some(name) = requested_cluster(csr) else {
            return Ok(Observed::NotOurs);
        };
        let guard = find_cluster(self, &name).await?;
        if !self.cluster_selector.is_empty() && guard.is_none() {
            // Not one of the Clusters this instance handles.
            return Ok(Observed::NotOurs);
        }
        Ok(Observed::Cluster {
            name,
            cluster: guard.map(|g| g.0.map(Box::new).map_err(|_| ())),
        })
    }

    fn plan(&self, csr: &CertificateSigningRequest, observed: &Observed) -> Result<Plan, CsrError> {
        Ok(plan(csr, observed, &self.config))
    }

    async fn execute(
        &self,
        csr: &CertificateSigningRequest,
        _: &Observed,
        plan: &Plan,
    ) -> Result<(), CsrError> {
        let name = csr.metadata.name.clone().ok_or(CsrError::Unnamed)?;
        let (type_, reason, message) = match &plan.decision {
            Decision::Ignore | Decision::Pending { .. } => return Ok(()),
            Decision::Approve { message, .. } => (APPROVED, reasons::APPROVED, message),
            Decision::Deny {
                reason, message, ..
            } => (DENIED, *reason, message),
        };
        // Recorded before the approval, so that no second bootstrap request is approved
        // meanwhile; approving this one again after a failure is still allowed.
        if let Some(cluster) = &plan.record_bootstrap {
            let patch = serde_json::json!({"metadata": {"annotations": {
                annotations::BOOTSTRAP_REQUEST: name,
            }}});
            self.clusters
                .patch_metadata(
                    cluster,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await
                .map_err(|source| CsrError::RecordBootstrap {
                    name: cluster.clone(),
                    source,
                })?;
        }
        write_condition(self, csr, &name, type_, reason, message).await
    }

    async fn report(
        &self,
        csr: &CertificateSigningRequest,
        _: &Observed,
        plan: &Plan,
        (): (),
    ) -> Result<Action, CsrError> {
        let name = csr.name_any();
        let events = &self.ctx.events;
        match &plan.decision {
            Decision::Ignore => {}
            Decision::Pending {
                cluster,
                reason,
                message,
            } => {
                tracing::debug!(csr = %name, %cluster, reason, %message, "certificate request stays pending");
                return Ok(Action::requeue(PENDING_RECHECK));
            }
            Decision::Approve { cluster, message } => {
                tracing::info!(csr = %name, %cluster, %message, "approved an agent's certificate request");
                self.metrics
                    .decisions
                    .with_label_values(&["approved", reasons::APPROVED])
                    .inc();
                if let Some(cluster) = &plan.cluster {
                    let note = format!("approved CertificateSigningRequest {name}: {message}");
                    events
                        .normal(cluster, "CertificateApproved", "ApproveCertificate", note)
                        .await;
                }
            }
            Decision::Deny {
                cluster,
                reason,
                message,
            } => {
                tracing::warn!(csr = %name, %cluster, reason, %message, "denied a certificate request");
                self.metrics
                    .decisions
                    .with_label_values(&["denied", reason])
                    .inc();
                if let Some(cluster) = &plan.cluster {
                    let note = format!("denied CertificateSigningRequest {name}: {message}");
                    events
                        .warning(cluster, reason, "DenyCertificate", note)
                        .await;
                }
            }
        }
        Ok(Action::await_change())
    }
}

/// The Cluster `name` if it exists and matches the selector. Read from the server rather than a
/// cache: a decision must not rest on a stale `hubAcceptsClient`.
async fn find_cluster(
    state: &State,
    name: &str,
) -> Result<Option<DeserializeGuard<Cluster>>, CsrError> {
    let mut params = ListParams::default().fields(&format!("metadata.name={name}"));
    if !state.cluster_selector.is_empty() {
        params = params.labels(&state.cluster_selector);
    }
    let list = state
        .clusters
        .list(&params)
        .await
        .map_err(|source| CsrError::ReadCluster {
            name: name.to_string(),
            source,
        })?;
    Ok(list.items.into_iter().next())
}

/// Adds an Approved or Denied condition through the `approval` subresource. The write carries the
/// request's resourceVersion, so of two approvers (or an approver and an admin) racing, exactly
/// one decides; the loser gets a conflict and looks again.
async fn write_condition(
    state: &State,
    csr: &CertificateSigningRequest,
    name: &str,
    type_: &str,
    reason: &str,
    message: &str,
) -> Result<(), CsrError> {
    let mut updated = csr.clone();
    let status = updated
        .status
        .get_or_insert_with(CertificateSigningRequestStatus::default);
    status
        .conditions
        .get_or_insert_with(Vec::new)
        .push(CertificateSigningRequestCondition {
            type_: type_.to_string(),
            status: "True".into(),
            reason: Some(reason.to_string()),
            message: Some(message.to_string()),
            last_update_time: Some(Time(k8s_openapi::jiff::Timestamp::now())),
            last_transition_time: None,
        });
    state
        .api
        .replace_subresource("approval", name, &PostParams::default(), &updated)
        .await
        .map(|_| ())
        .map_err(|source| CsrError::WriteApproval {
            name: name.to_string(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::cluster::ClusterSpec;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::certificates::v1::CertificateSigningRequestSpec;
    use kube::api::ObjectMeta;
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};
    use rstest::rstest;

    const C: &str = "member1";
    /// The UID of the Cluster in these tests, and the group it gives its agent.
    const UID: &str = "u-1";
    const UID_GROUP: &str = "system:flotilla:cluster-uid:u-1";

    /// A PEM request with the given common name, organizations and DNS names. (rcgen keeps one
    /// value per attribute type: organizations after the first are written as a custom type with
    /// organizationName's OID, as the agent does.)
    fn request(cn: &str, orgs: &[&str], dns: &[&str]) -> Vec<u8> {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, cn);
        assert!(orgs.len() <= 2, "at most two organizations");
        for (i, o) in orgs.iter().enumerate() {
            let ty = if i == 0 {
                DnType::OrganizationName
            } else {
                DnType::CustomDnType(vec![2, 5, 4, 10])
            };
            dn.push(ty, *o);
        }
        params.distinguished_name = dn;
        params.subject_alt_names = dns
            .iter()
            .map(|d| SanType::DnsName((*d).try_into().expect("dns name")))
            .collect();
        params
            .serialize_request(&key)
            .expect("request")
            .pem()
            .expect("pem")
            .into_bytes()
    }

    fn csr(request: Vec<u8>, requester: &str, usages: &[&str]) -> CertificateSigningRequest {
        CertificateSigningRequest {
            metadata: ObjectMeta {
                name: Some("csr-1".into()),
                ..Default::default()
            },
            spec: CertificateSigningRequestSpec {
                request: ByteString(request),
                signer_name: names::AGENT_CSR_SIGNER.into(),
                usages: Some(usages.iter().map(|u| u.to_string()).collect()),
                username: Some(requester.into()),
                // What the apiserver records for a requester with this Cluster's certificate.
                groups: names::cluster_from_agent_user_name(requester)
                    .is_some()
                    .then(|| vec![names::AGENT_GROUP.to_string(), UID_GROUP.to_string()]),
                expiration_seconds: Some(86_400),
                ..Default::default()
            },
            status: None,
        }
    }

    /// The approver's lifetime bound in these tests: 30 days.
    const MAX: std::time::Duration = std::time::Duration::from_secs(30 * 86_400);

    #[test]
    fn a_request_for_no_or_a_long_lifetime_is_denied() {
        let c = cluster(SyncMode::Pull, true);
        let config = CsrConfig {
            auto_accept: false,
            max_lifetime: MAX,
        };
        for asked in [None, Some(31 * 86_400), Some(i32::MAX)] {
            let mut r = agent_csr(&names::agent_user_name(C));
            r.spec.expiration_seconds = asked;
            let d = decide(&r, Some(Ok(&c)), &config);
            assert_eq!(reason(&d), reasons::UNBOUNDED_LIFETIME, "{asked:?}: {d:?}");
        }
        let mut r = agent_csr(&names::agent_user_name(C));
        r.spec.expiration_seconds = Some(30 * 86_400);
        assert_eq!(
            reason(&decide(&r, Some(Ok(&c)), &config)),
            reasons::APPROVED
        );
    }

    fn agent_csr(requester: &str) -> CertificateSigningRequest {
        csr(
            request(
                &names::agent_user_name(C),
                &[names::AGENT_GROUP, UID_GROUP],
                &[],
            ),
            requester,
            &ALLOWED_USAGES,
        )
    }

    fn cluster(mode: SyncMode, accepted: bool) -> Cluster {
        let mut cluster = Cluster::new(
            C,
            ClusterSpec {
                sync_mode: mode,
                hub_accepts_client: accepted,
                ..Default::default()
            },
        );
        cluster.metadata.uid = Some(UID.into());
        cluster
    }

    /// A bootstrap identity gets one certificate; its own request may be approved again (a
    /// retry after the Cluster was marked), the agent's renewals go on.
    #[test]
    fn a_bootstrap_identity_is_used_once() {
        let mut c = cluster(SyncMode::Pull, true);
        c.metadata.annotations = Some(
            [(
                annotations::BOOTSTRAP_REQUEST.to_string(),
                "csr-0".to_string(),
            )]
            .into(),
        );
        let d = decide(
            &agent_csr(&bootstrap_user_name(C)),
            Some(Ok(&c)),
            &CsrConfig::default(),
        );
        assert_eq!(reason(&d), reasons::BOOTSTRAP_USED, "{d:?}");
        assert!(format!("{d:?}").contains("remove the annotation"), "{d:?}");
        let mut same = agent_csr(&bootstrap_user_name(C));
        same.metadata.name = Some("csr-0".into());
        let d = decide(&same, Some(Ok(&c)), &CsrConfig::default());
        assert_eq!(reason(&d), reasons::APPROVED, "{d:?}");
        let d = decide(
            &agent_csr(&names::agent_user_name(C)),
            Some(Ok(&c)),
            &CsrConfig::default(),
        );
        assert_eq!(reason(&d), reasons::APPROVED, "{d:?}");
    }

    /// Only an approval of the bootstrap identity's request is recorded on the Cluster first;
    /// the agent's renewals and every denial are not.
    #[test]
    fn only_an_approved_bootstrap_request_is_recorded_on_its_cluster() {
        let accepted = Observed::Cluster {
            name: C.into(),
            cluster: Some(Ok(Box::new(cluster(SyncMode::Pull, true)))),
        };
        let config = CsrConfig::default();
        let bootstrap = plan(&agent_csr(&bootstrap_user_name(C)), &accepted, &config);
        assert_eq!(bootstrap.decision.reason(), reasons::APPROVED);
        assert_eq!(bootstrap.record_bootstrap.as_deref(), Some(C));
        assert!(bootstrap.cluster.is_some(), "its Events go on the Cluster");

        let renewal = plan(&agent_csr(&names::agent_user_name(C)), &accepted, &config);
        assert_eq!(renewal.decision.reason(), reasons::APPROVED);
        assert_eq!(renewal.record_bootstrap, None);

        let push = Observed::Cluster {
            name: C.into(),
            cluster: Some(Ok(Box::new(cluster(SyncMode::Push, true)))),
        };
        let denied = plan(&agent_csr(&bootstrap_user_name(C)), &push, &config);
        assert_eq!(denied.decision.reason(), reasons::CLUSTER_NOT_PULL);
        assert_eq!(denied.record_bootstrap, None);

        let theirs = plan(
            &agent_csr(&bootstrap_user_name(C)),
            &Observed::NotOurs,
            &config,
        );
        assert!(matches!(theirs.decision, Decision::Ignore));
    }

    /// A Cluster deleted and made again under the same name is another Cluster: a request for
    /// the old one, or a renewal with the old one's certificate, is denied.
    #[test]
    fn a_cluster_made_again_trusts_nothing_of_the_one_before() {
        let c = cluster(SyncMode::Pull, true);
        let old = csr(
            request(
                &names::agent_user_name(C),
                &[names::AGENT_GROUP, "system:flotilla:cluster-uid:u-0"],
                &[],
            ),
            &bootstrap_user_name(C),
            &ALLOWED_USAGES,
        );
        let d = decide(&old, Some(Ok(&c)), &CsrConfig::default());
        assert_eq!(reason(&d), reasons::SUBJECT_MISMATCH, "{d:?}");
        let mut renewal = agent_csr(&names::agent_user_name(C));
        renewal.spec.groups = Some(vec![
            names::AGENT_GROUP.into(),
            "system:flotilla:cluster-uid:u-0".into(),
        ]);
        let d = decide(&renewal, Some(Ok(&c)), &CsrConfig::default());
        assert_eq!(reason(&d), reasons::REQUESTER_MISMATCH, "{d:?}");
        assert!(format!("{d:?}").contains("earlier Cluster"), "{d:?}");
        renewal.spec.groups = None;
        let d = decide(&renewal, Some(Ok(&c)), &CsrConfig::default());
        assert_eq!(reason(&d), reasons::REQUESTER_MISMATCH, "{d:?}");
    }

    fn reason(d: &Decision) -> &'static str {
        d.reason()
    }

    #[test]
    fn identities_round_trip() {
        assert_eq!(
            bootstrap_user_name(C),
            "system:serviceaccount:flotilla-system:flotilla-bootstrap-member1"
        );
        assert_eq!(
            cluster_from_bootstrap_user_name(&bootstrap_user_name(C)),
            Some(C)
        );
        assert_eq!(
            cluster_from_bootstrap_user_name("system:serviceaccount:default:flotilla-bootstrap-a"),
            None
        );
        assert_eq!(
            cluster_from_bootstrap_user_name("system:serviceaccount:flotilla-system:other"),
            None
        );
    }

    #[test]
    fn parses_subjects_of_requests() {
        let parsed = parse_request(&request("a", &["x"], &["example.com"])).expect("parses");
        assert_eq!(parsed.common_names, ["a"]);
        assert_eq!(parsed.organizations, ["x"]);
        assert!(parsed.has_subject_alt_names);
        assert_eq!(parse_request(b"nonsense"), Err(RequestParseError::NotPem));
        let cert = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(matches!(
            parse_request(cert),
            Err(RequestParseError::WrongPemLabel(_))
        ));
    }

    #[rstest]
    #[case::bootstrap_accepted(
        bootstrap_user_name(C),
        SyncMode::Pull,
        true,
        false,
        "FlotillaAgentApproved"
    )]
    #[case::renewal_accepted(
        names::agent_user_name(C),
        SyncMode::Pull,
        true,
        false,
        "FlotillaAgentApproved"
    )]
    #[case::not_accepted_yet(
        bootstrap_user_name(C),
        SyncMode::Pull,
        false,
        false,
        "AwaitingAcceptance"
    )]
    #[case::auto_accept(
        bootstrap_user_name(C),
        SyncMode::Pull,
        false,
        true,
        "FlotillaAgentApproved"
    )]
    #[case::push_mode(
        bootstrap_user_name(C),
        SyncMode::Push,
        true,
        false,
        "ClusterNotPullMode"
    )]
    #[case::other_bootstrap(
        bootstrap_user_name("member2"),
        SyncMode::Pull,
        true,
        false,
        "RequesterMismatch"
    )]
    #[case::other_agent(
        names::agent_user_name("member2"),
        SyncMode::Pull,
        true,
        false,
        "RequesterMismatch"
    )]
    #[case::admin(
        String::from("kubernetes-admin"),
        SyncMode::Pull,
        true,
        false,
        "RequesterMismatch"
    )]
    #[case::other_namespace_sa(
        String::from("system:serviceaccount:default:flotilla-bootstrap-member1"),
        SyncMode::Pull,
        true,
        false,
        "RequesterMismatch"
    )]
    fn decides_by_requester_and_cluster(
        #[case] requester: String,
        #[case] mode: SyncMode,
        #[case] accepted: bool,
        #[case] auto_accept: bool,
        #[case] expected: &str,
    ) {
        let c = cluster(mode, accepted);
        let d = decide(
            &agent_csr(&requester),
            Some(Ok(&c)),
            &CsrConfig {
                auto_accept,
                max_lifetime: MAX,
            },
        );
        assert_eq!(reason(&d), expected, "{d:?}");
    }

    #[rstest]
    #[case::no_org(&[], &[], &ALLOWED_USAGES, "SubjectMismatch")]
    #[case::other_org(&["system:masters"], &[], &ALLOWED_USAGES, "SubjectMismatch")]
    #[case::no_uid(&[names::AGENT_GROUP], &[], &ALLOWED_USAGES, "SubjectMismatch")]
    #[case::masters_too(&[names::AGENT_GROUP, "system:masters"], &[], &ALLOWED_USAGES, "SubjectMismatch")]
    #[case::sans(&[names::AGENT_GROUP, UID_GROUP], &["evil.example.com"], &ALLOWED_USAGES, "UnexpectedSubjectAltNames")]
    #[case::server_auth(&[names::AGENT_GROUP, UID_GROUP], &[], &["client auth", "server auth"], "UnexpectedUsages")]
    #[case::no_client_auth(&[names::AGENT_GROUP, UID_GROUP], &[], &["digital signature"], "UnexpectedUsages")]
    #[case::only_client_auth(&[names::AGENT_GROUP, UID_GROUP], &[], &["client auth"], "FlotillaAgentApproved")]
    fn denies_requests_that_can_never_be_valid(
        #[case] orgs: &[&str],
        #[case] dns: &[&str],
        #[case] usages: &[&str],
        #[case] expected: &str,
    ) {
        let c = cluster(SyncMode::Pull, true);
        let r = csr(
            request(&names::agent_user_name(C), orgs, dns),
            &bootstrap_user_name(C),
            usages,
        );
        let d = decide(&r, Some(Ok(&c)), &CsrConfig::default());
        assert_eq!(reason(&d), expected, "{d:?}");
        if let Decision::Deny { message, .. } = &d {
            assert!(!message.is_empty());
        }
    }

    #[test]
    fn static_denials_do_not_need_the_cluster() {
        let d = decide(
            &agent_csr(&bootstrap_user_name("member2")),
            None,
            &CsrConfig::default(),
        );
        match d {
            Decision::Deny {
                cluster,
                reason,
                message,
            } => {
                assert_eq!(cluster, C);
                assert_eq!(reason, reasons::REQUESTER_MISMATCH);
                assert!(message.contains("cluster \"member2\""), "{message}");
            }
            other => panic!("expected a denial, got {other:?}"),
        }
    }

    #[test]
    fn waits_for_a_missing_or_unreadable_cluster() {
        let r = agent_csr(&bootstrap_user_name(C));
        assert_eq!(
            reason(&decide(
                &r,
                None,
                &CsrConfig {
                    auto_accept: true,
                    max_lifetime: MAX
                }
            )),
            "ClusterNotFound"
        );
        assert_eq!(
            reason(&decide(&r, Some(Err(())), &CsrConfig::default())),
            "ClusterInvalid"
        );
    }

    #[test]
    fn denies_for_a_cluster_being_deleted() {
        let mut c = cluster(SyncMode::Pull, true);
        c.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        let d = decide(
            &agent_csr(&bootstrap_user_name(C)),
            Some(Ok(&c)),
            &CsrConfig::default(),
        );
        assert_eq!(reason(&d), "ClusterDeleting");
    }

    #[test]
    fn ignores_what_is_not_an_agents_undecided_request() {
        let c = cluster(SyncMode::Pull, true);
        let config = CsrConfig::default();
        // Another signer.
        let mut other_signer = agent_csr(&bootstrap_user_name(C));
        other_signer.spec.signer_name = "kubernetes.io/kubelet-serving".into();
        assert_eq!(
            decide(&other_signer, Some(Ok(&c)), &config),
            Decision::Ignore
        );
        assert_eq!(requested_cluster(&other_signer), None);
        // Another common name.
        let other_cn = csr(
            request("system:node:n1", &["system:nodes"], &[]),
            &bootstrap_user_name(C),
            &ALLOWED_USAGES,
        );
        assert_eq!(decide(&other_cn, Some(Ok(&c)), &config), Decision::Ignore);
        assert_eq!(requested_cluster(&other_cn), None);
        // Already decided.
        for type_ in [APPROVED, DENIED, FAILED] {
            let decided = with_condition(&agent_csr(&bootstrap_user_name(C)), type_);
            assert_eq!(decide(&decided, Some(Ok(&c)), &config), Decision::Ignore);
        }
        // An agent's request names its cluster.
        assert_eq!(
            requested_cluster(&agent_csr(&bootstrap_user_name(C))).as_deref(),
            Some(C)
        );
    }

    /// `csr` with the final condition `type_`, as an update of its approval writes it.
    fn with_condition(csr: &CertificateSigningRequest, type_: &str) -> CertificateSigningRequest {
        let mut decided = csr.clone();
        decided.status = Some(CertificateSigningRequestStatus {
            conditions: Some(vec![CertificateSigningRequestCondition {
                type_: type_.into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        decided
    }

    /// The webhook lets registration's token approve exactly what the controller would: a
    /// request an agent's bootstrap identity made for another user is refused, with what it asks
    /// for; so is an agent's own request for another Cluster object, or before the admin
    /// accepted the Cluster. Denials, and updates that approve nothing new, pass.
    #[rstest]
    #[case::another_user(request("system:kube-controller-manager", &[], &[]), Some("system:kube-controller-manager"))]
    #[case::the_masters(request("x", &["system:masters"], &[]), Some("system:masters"))]
    #[case::another_cluster_object(
        request(&names::agent_user_name(C), &[names::AGENT_GROUP, "system:flotilla:cluster-uid:u-0"], &[]),
        Some(reasons::SUBJECT_MISMATCH)
    )]
    #[case::the_agent(request(&names::agent_user_name(C), &[names::AGENT_GROUP, UID_GROUP], &[]), None)]
    fn registrations_approval_passes_only_for_an_agents_own_identity(
        #[case] pem: Vec<u8>,
        #[case] refused_with: Option<&str>,
    ) {
        let config = CsrConfig::default();
        let c = cluster(SyncMode::Pull, true);
        let old = csr(pem, &bootstrap_user_name(C), &ALLOWED_USAGES);
        let approved = with_condition(&old, APPROVED);
        let verdict = review_approval(&old, &approved, Some(Ok(&c)), &config);
        match refused_with {
            None => assert_eq!(verdict, Ok(())),
            Some(text) => {
                let message = verdict.expect_err("must be refused");
                assert!(message.contains(text), "{message}");
            }
        }
        // Denying it, or writing an approval again, approves nothing.
        let denied = with_condition(&old, DENIED);
        assert_eq!(
            review_approval(&old, &denied, Some(Ok(&c)), &config),
            Ok(())
        );
        assert_eq!(
            review_approval(&approved, &approved, Some(Ok(&c)), &config),
            Ok(())
        );
    }

    #[test]
    fn registration_cannot_approve_what_waits_for_the_admin_or_has_no_cluster() {
        let config = CsrConfig::default();
        let old = agent_csr(&bootstrap_user_name(C));
        let approved = with_condition(&old, APPROVED);
        let not_accepted = cluster(SyncMode::Pull, false);
        let refused = review_approval(&old, &approved, Some(Ok(&not_accepted)), &config)
            .expect_err("not accepted");
        assert!(
            refused.starts_with(reasons::AWAITING_ACCEPTANCE),
            "{refused}"
        );
        let refused = review_approval(&old, &approved, None, &config).expect_err("no Cluster");
        assert!(refused.starts_with(reasons::CLUSTER_NOT_FOUND), "{refused}");
        let refused =
            review_approval(&old, &approved, Some(Err(())), &config).expect_err("unreadable");
        assert!(refused.starts_with(reasons::CLUSTER_INVALID), "{refused}");
    }
}
