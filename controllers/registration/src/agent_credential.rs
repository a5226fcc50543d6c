//! The agent's hub credential: its private key and certificate request, the kubeconfig it
//! keeps in a member Secret, and when to rotate it. Pure functions over plain data: no I/O
//! except reading a bootstrap kubeconfig's CA file.
//!
//! Nothing here logs, and [`Credential`]'s `Debug` shows no key material: the private key, the
//! certificate and the kubeconfig never reach logs, events or status.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use flotilla_api::names;
use kube::config::{Cluster as KubeconfigCluster, Kubeconfig};
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, PublicKeyData};
use secrecy::ExposeSecret;
use serde_json::json;
use x509_parser::prelude::{FromDer, X509Certificate};

/// Key usages the agent asks for (`client auth` is what matters; the other two are what
/// client-go asks for too).
pub const USAGES: [&str; 3] = ["digital signature", "key encipherment", "client auth"];

/// The name of the single cluster, user and context in the agent's hub kubeconfig.
const KUBECONFIG_ENTRY: &str = "flotilla-hub";

/// Why a credential could not be built or read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CredentialError {
    #[error("generating a private key or certificate request failed: {0}")]
    Generate(String),
    #[error("the hub kubeconfig is unusable: {0}")]
    Kubeconfig(String),
    #[error("the certificate is unusable: {0}")]
    Certificate(String),
    #[error("the certificate is for {found:?}, not for {expected:?}")]
    WrongSubject { expected: String, found: String },
    #[error("the certificate does not belong to the private key")]
    KeyMismatch,
}

impl flotilla_runtime::ErrorCategory for CredentialError {
    fn category(&self) -> &'static str {
        match self {
            Self::Generate(_) => "KeyGenerationFailed",
            Self::Kubeconfig(_) => "InvalidKubeconfig",
            Self::Certificate(_) | Self::WrongSubject { .. } | Self::KeyMismatch => {
                "InvalidCertificate"
            }
        }
    }

    fn is_transient(&self) -> bool {
        false
    }
}

/// A new private key and the PEM certificate request for the agent of `cluster` with UID `uid`:
/// `CN=system:flotilla:cluster:<cluster>:agent, O=system:flotilla:agents,
/// O=system:flotilla:cluster-uid:<uid>`, no extensions.
pub struct KeyAndRequest {
    /// PKCS#8 PEM. Secret.
    pub key_pem: String,
    /// PKCS#10 PEM.
    pub request_pem: String,
}

impl fmt::Debug for KeyAndRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyAndRequest").finish_non_exhaustive()
    }
}

/// The OID of organizationName (2.5.4.10). rcgen keeps one value per attribute type, so the
/// second organization is written with the same OID as a "custom" type.
const ORGANIZATION_NAME_OID: [u64; 4] = [2, 5, 4, 10];

/// Generates an ECDSA P-256 key and a certificate request for the agent of `cluster`, the
/// Cluster object with UID `uid`.
pub fn generate_key_and_request(
    cluster: &str,
    uid: &str,
) -> Result<KeyAndRequest, CredentialError> {
    let generate = |e: rcgen::Error| CredentialError::Generate(e.to_string());
    let key = KeyPair::generate().map_err(generate)?;
    let mut params = CertificateParams::default();
    let mut subject = DistinguishedName::new();
    subject.push(DnType::CommonName, names::agent_user_name(cluster));
    subject.push(DnType::OrganizationName, names::AGENT_GROUP);
    subject.push(
        DnType::CustomDnType(ORGANIZATION_NAME_OID.to_vec()),
        names::cluster_uid_group(uid),
    );
    params.distinguished_name = subject;
    let request_pem = params
        .serialize_request(&key)
        .and_then(|r| r.pem())
        .map_err(generate)?;
    Ok(KeyAndRequest {
        key_pem: key.serialize_pem(),
        request_pem,
    })
}

/// The hub's address and CA, as the `cluster` entry of a kubeconfig, with the CA inline.
#[derive(Clone)]
pub struct HubEndpoint(pub KubeconfigCluster);

impl PartialEq for HubEndpoint {
    fn eq(&self, other: &Self) -> bool {
        serde_json::to_value(&self.0).ok() == serde_json::to_value(&other.0).ok()
    }
}

impl fmt::Debug for HubEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HubEndpoint")
            .field("server", &self.server())
            .finish_non_exhaustive()
    }
}

impl HubEndpoint {
    /// The hub apiserver's URL.
    pub fn server(&self) -> &str {
        self.0.server.as_deref().unwrap_or_default()
    }

    /// The endpoint of the current context of a bootstrap kubeconfig read from `path`; a CA
    /// given as a file (relative to the kubeconfig's directory) is read and inlined.
    pub fn from_bootstrap(
        kubeconfig: &Kubeconfig,
        path: &Path,
    ) -> Result<HubEndpoint, CredentialError> {
        let invalid = |m: String| CredentialError::Kubeconfig(m);
        let context_name = kubeconfig
            .current_context
            .as_deref()
            .filter(|c| !c.is_empty())
            .ok_or_else(|| invalid("current-context is not set".into()))?;
        let context = kubeconfig
            .contexts
            .iter()
            .find(|c| c.name == context_name)
            .and_then(|c| c.context.as_ref())
            .ok_or_else(|| invalid(format!("context {context_name:?} is missing")))?;
        let mut cluster = kubeconfig
            .clusters
            .iter()
            .find(|c| c.name == context.cluster)
            .and_then(|c| c.cluster.clone())
            .ok_or_else(|| invalid(format!("cluster {:?} is missing", context.cluster)))?;
        if cluster.server.as_deref().is_none_or(str::is_empty) {
            return Err(invalid(format!(
                "cluster {:?} has no server",
                context.cluster
            )));
        }
        if let Some(file) = cluster.certificate_authority.take() {
            let file = Path::new(&file);
            let file = if file.is_relative() {
                path.parent().unwrap_or(Path::new(".")).join(file)
            } else {
                file.to_path_buf()
            };
            let pem = std::fs::read(&file).map_err(|e| {
                invalid(format!(
                    "reading certificate-authority {}: {e}",
                    file.display()
                ))
            })?;
            cluster.certificate_authority_data = Some(BASE64.encode(pem));
        }
        Ok(HubEndpoint(cluster))
    }
}

/// A usable hub credential: the kubeconfig the agent stores and uses, and what it knows about
/// its certificate.
#[derive(Clone)]
pub struct Credential {
    /// The kubeconfig (YAML) with the client certificate and key inline. Secret.
    kubeconfig: String,
    /// Where the hub is.
    pub endpoint: HubEndpoint,
    /// Certificate validity, in seconds since the epoch.
    pub not_before: i64,
    pub not_after: i64,
    /// The certificate's serial number (hex), to tell certificates apart in logs.
    pub serial: String,
    /// The UID of the Cluster object the certificate was issued for (its
    /// `system:flotilla:cluster-uid:<uid>` organization); `None` for a certificate without one.
    pub cluster_uid: Option<String>,
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credential")
            .field("endpoint", &self.endpoint)
            .field("serial", &self.serial)
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

impl Credential {
    /// Builds the credential of `cluster`'s agent from a signed certificate and its key.
    pub fn new(
        cluster: &str,
        endpoint: HubEndpoint,
        certificate_pem: &[u8],
        key_pem: &str,
    ) -> Result<Self, CredentialError> {
        let info = certificate_info(cluster, certificate_pem, Some(key_pem))?;
        let endpoint_value = serde_json::to_value(&endpoint.0)
            .map_err(|e| CredentialError::Kubeconfig(e.to_string()))?;
        let kubeconfig = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{ "name": KUBECONFIG_ENTRY, "cluster": endpoint_value }],
            "users": [{
                "name": KUBECONFIG_ENTRY,
                "user": {
                    "client-certificate-data": BASE64.encode(certificate_pem),
                    "client-key-data": BASE64.encode(key_pem),
                },
            }],
            "contexts": [{
                "name": KUBECONFIG_ENTRY,
                "context": { "cluster": KUBECONFIG_ENTRY, "user": KUBECONFIG_ENTRY },
            }],
            "current-context": KUBECONFIG_ENTRY,
        });
        let kubeconfig = serde_saphyr::to_string(&kubeconfig)
            .map_err(|e| CredentialError::Kubeconfig(e.to_string()))?;
        Ok(Self {
            kubeconfig,
            endpoint,
            not_before: info.not_before,
            not_after: info.not_after,
            serial: info.serial,
            cluster_uid: info.cluster_uid,
        })
    }

    /// Reads a credential the agent stored before: a checked kubeconfig (see
    /// [`flotilla_runtime::member_client::kubeconfig_from_secret`]) whose client certificate is
    /// `cluster`'s agent's and belongs to its key.
    pub fn from_kubeconfig(
        cluster: &str,
        kubeconfig: &Kubeconfig,
        text: String,
    ) -> Result<Self, CredentialError> {
        let invalid = |m: &str| CredentialError::Kubeconfig(m.to_string());
        let context_name = kubeconfig
            .current_context
            .as_deref()
            .ok_or_else(|| invalid("current-context is not set"))?;
        let context = kubeconfig
            .contexts
            .iter()
            .find(|c| c.name == context_name)
            .and_then(|c| c.context.as_ref())
            .ok_or_else(|| invalid("the current context is missing"))?;
        let endpoint = kubeconfig
            .clusters
            .iter()
            .find(|c| c.name == context.cluster)
            .and_then(|c| c.cluster.clone())
            .ok_or_else(|| invalid("the context's cluster is missing"))?;
        let user = context
            .user
            .as_deref()
            .and_then(|u| kubeconfig.auth_infos.iter().find(|a| a.name == u))
            .and_then(|a| a.auth_info.as_ref())
            .ok_or_else(|| invalid("the context's user is missing"))?;
        let decode = |field: Option<&str>, what: &str| {
            field
                .ok_or_else(|| CredentialError::Kubeconfig(format!("{what} is missing")))
                .and_then(|b| {
                    BASE64
                        .decode(b.trim())
                        .map_err(|_| CredentialError::Kubeconfig(format!("{what} is not base64")))
                })
        };
        let certificate = decode(
            user.client_certificate_data.as_deref(),
            "client-certificate-data",
        )?;
        let key = decode(
            user.client_key_data.as_ref().map(|k| k.expose_secret()),
            "client-key-data",
        )?;
        let key = String::from_utf8(key)
            .map_err(|_| CredentialError::Kubeconfig("client-key-data is not PEM".into()))?;
        let info = certificate_info(cluster, &certificate, Some(&key))?;
        Ok(Self {
            kubeconfig: text,
            endpoint: HubEndpoint(endpoint),
            not_before: info.not_before,
            not_after: info.not_after,
            serial: info.serial,
            cluster_uid: info.cluster_uid,
        })
    }

    /// The kubeconfig to store and to build a client from. Secret: never log it.
    pub fn kubeconfig_yaml(&self) -> &str {
        &self.kubeconfig
    }

    /// Whether the certificate is still valid `margin` after `now` (seconds since the epoch).
    pub fn is_valid_at(&self, now: i64, margin: Duration) -> bool {
        let margin = i64::try_from(margin.as_secs()).unwrap_or(i64::MAX);
        now.saturating_add(margin) < self.not_after
    }

    /// When to ask for the next certificate (seconds since the epoch): once `threshold` (0..1)
    /// of the certificate's lifetime has passed. The lifetime is the shorter of the requested
    /// one and the certificate's validity, because signers backdate `notBefore` (the
    /// kube-controller-manager by 5 minutes) and may shorten what was asked for.
    pub fn rotation_time(&self, requested_lifetime: Duration, threshold: f64) -> i64 {
        let validity = self.not_after.saturating_sub(self.not_before).max(0);
        let requested = i64::try_from(requested_lifetime.as_secs()).unwrap_or(i64::MAX);
        let lifetime = validity.min(requested);
        // Lifetimes are at most years: far inside f64's exact integer range.
        let remaining = (lifetime as f64 * (1.0 - threshold.clamp(0.0, 1.0))).round() as i64;
        self.not_after
            .saturating_sub(remaining)
            .max(self.not_before)
    }
}

/// What the agent needs to know about a certificate.
#[derive(Debug, PartialEq, Eq)]
struct CertificateInfo {
    not_before: i64,
    not_after: i64,
    serial: String,
    cluster_uid: Option<String>,
}

/// Parses the first certificate of `pem`, checks it is `cluster`'s agent's and, when a key is
/// given, that it belongs to that key.
fn certificate_info(
    cluster: &str,
    pem: &[u8],
    key_pem: Option<&str>,
) -> Result<CertificateInfo, CredentialError> {
    let invalid = |m: &str| CredentialError::Certificate(m.to_string());
    let (_, block) =
        x509_parser::pem::parse_x509_pem(pem).map_err(|_| invalid("not a PEM certificate"))?;
    if block.label != "CERTIFICATE" {
        return Err(invalid("the PEM block is not a CERTIFICATE"));
    }
    let (_, certificate) = X509Certificate::from_der(&block.contents)
        .map_err(|_| invalid("not an X.509 certificate"))?;
    let expected = names::agent_user_name(cluster);
    let found = certificate
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default()
        .to_string();
    if found != expected {
        return Err(CredentialError::WrongSubject { expected, found });
    }
    if let Some(key_pem) = key_pem {
        let key = KeyPair::from_pem(key_pem).map_err(|_| invalid("the private key is not PEM"))?;
        if key.der_bytes() != certificate.public_key().subject_public_key.data.as_ref() {
            return Err(CredentialError::KeyMismatch);
        }
    }
    let validity = certificate.validity();
    Ok(CertificateInfo {
        not_before: validity.not_before.timestamp(),
        not_after: validity.not_after.timestamp(),
        serial: certificate.raw_serial_as_string(),
        cluster_uid: certificate
            .subject()
            .iter_organization()
            .filter_map(|o| o.as_str().ok())
            .find_map(|o| o.strip_prefix(names::CLUSTER_UID_GROUP_PREFIX))
            .map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::Issuer;

    const C: &str = "member1";
    const UID: &str = "0b5e7f4e-5f0a-4d3c-9d1e-2f7f1c0a9e11";

    /// Signs, with a throw-away CA, a certificate for the agent of [`C`] and the key `key_pem`,
    /// valid for `seconds` from `not_before` — what the hub's signer does with a request.
    fn sign(key_pem: &str, not_before: i64, seconds: i64) -> String {
        let ca_key = KeyPair::generate().expect("ca key");
        let mut ca_params = CertificateParams::default();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let issuer = Issuer::new(ca_params, ca_key);
        let mut params = CertificateParams::default();
        let mut subject = DistinguishedName::new();
        subject.push(DnType::CommonName, names::agent_user_name(C));
        subject.push(DnType::OrganizationName, names::AGENT_GROUP);
        subject.push(
            DnType::CustomDnType(ORGANIZATION_NAME_OID.to_vec()),
            names::cluster_uid_group(UID),
        );
        params.distinguished_name = subject;
        params.not_before = rcgen::date_time_ymd(1970, 1, 1) + time_offset(not_before);
        params.not_after = rcgen::date_time_ymd(1970, 1, 1) + time_offset(not_before + seconds);
        let key = KeyPair::from_pem(key_pem).expect("key");
        params.signed_by(&key, &issuer).expect("signed").pem()
    }

    fn time_offset(seconds: i64) -> std::time::Duration {
        std::time::Duration::from_secs(u64::try_from(seconds).expect("positive"))
    }

    fn endpoint() -> HubEndpoint {
        HubEndpoint(KubeconfigCluster {
            server: Some("https://127.0.0.1:6443".into()),
            certificate_authority_data: Some(BASE64.encode("ca")),
            ..Default::default()
        })
    }

    #[test]
    fn requests_carry_exactly_the_agent_subject() {
        let generated = generate_key_and_request(C, UID).expect("generated");
        let subject = crate::csr::parse_request(generated.request_pem.as_bytes()).expect("parses");
        assert_eq!(subject.common_names, [names::agent_user_name(C)]);
        assert_eq!(
            subject.organizations,
            [
                names::AGENT_GROUP.to_string(),
                names::cluster_uid_group(UID)
            ]
        );
        assert!(!subject.has_subject_alt_names);
        assert!(!format!("{generated:?}").contains("PRIVATE"));
    }

    #[test]
    fn a_credential_round_trips_through_its_kubeconfig() {
        let generated = generate_key_and_request(C, UID).expect("generated");
        let certificate = sign(&generated.key_pem, 1_000_000_000, 3600);
        let credential = Credential::new(C, endpoint(), certificate.as_bytes(), &generated.key_pem)
            .expect("credential");
        assert_eq!(credential.not_before, 1_000_000_000);
        assert_eq!(credential.cluster_uid.as_deref(), Some(UID));
        assert_eq!(credential.not_after, 1_000_003_600);
        let debug = format!("{credential:?}");
        assert!(
            !debug.contains("PRIVATE") && !debug.contains("client-key"),
            "{debug}"
        );

        let parsed = Kubeconfig::from_yaml(credential.kubeconfig_yaml()).expect("kubeconfig");
        let read = Credential::from_kubeconfig(C, &parsed, credential.kubeconfig_yaml().into())
            .expect("read back");
        assert_eq!(read.serial, credential.serial);
        assert_eq!(read.endpoint, endpoint());
        // Another cluster's agent cannot use it.
        assert!(matches!(
            Credential::from_kubeconfig("member2", &parsed, String::new()),
            Err(CredentialError::WrongSubject { .. })
        ));
    }

    #[test]
    fn a_certificate_must_belong_to_the_key() {
        let generated = generate_key_and_request(C, UID).expect("generated");
        let other = generate_key_and_request(C, UID).expect("generated");
        let certificate = sign(&generated.key_pem, 1_000_000_000, 3600);
        assert_eq!(
            Credential::new(C, endpoint(), certificate.as_bytes(), &other.key_pem).err(),
            Some(CredentialError::KeyMismatch)
        );
    }

    #[test]
    fn rotation_happens_after_the_threshold_of_the_lifetime() {
        let credential = |not_before, not_after| Credential {
            kubeconfig: String::new(),
            endpoint: endpoint(),
            not_before,
            not_after,
            serial: String::new(),
            cluster_uid: None,
        };
        let day = Duration::from_secs(86_400);
        // Not backdated: 75% of a day.
        assert_eq!(credential(0, 86_400).rotation_time(day, 0.75), 64_800);
        // Backdated by 5 minutes: the requested lifetime counts, not the longer validity.
        let ten_minutes = Duration::from_secs(600);
        assert_eq!(
            credential(1_000 - 300, 1_600).rotation_time(ten_minutes, 0.05),
            1_600 - 570
        );
        // A signer that shortened the lifetime: its validity counts.
        assert_eq!(credential(0, 3_600).rotation_time(day, 0.5), 1_800);
        // Validity checks with a margin.
        assert!(credential(0, 100).is_valid_at(50, Duration::from_secs(10)));
        assert!(!credential(0, 100).is_valid_at(95, Duration::from_secs(10)));
    }

    #[test]
    fn bootstrap_endpoints_inline_their_ca_file() {
        let dir = std::env::temp_dir().join(format!("flotilla-agent-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("ca.crt"), "CA PEM").expect("ca");
        let kubeconfig = Kubeconfig::from_yaml(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
             contexts: [{name: c, context: {cluster: hub, user: u}}]\n\
             clusters: [{name: hub, cluster: {server: 'https://hub:6443', certificate-authority: ca.crt}}]\n\
             users: [{name: u, user: {token: t}}]\n",
        )
        .expect("kubeconfig");
        let endpoint = HubEndpoint::from_bootstrap(&kubeconfig, &dir.join("bootstrap.kubeconfig"))
            .expect("endpoint");
        assert_eq!(endpoint.server(), "https://hub:6443");
        assert_eq!(endpoint.0.certificate_authority, None);
        assert_eq!(
            endpoint.0.certificate_authority_data.as_deref(),
            Some(BASE64.encode("CA PEM").as_str())
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
