//! The data of a Work's Secrets, read from the hub (see [`flotilla_api::work_data`]): the
//! Work's Secret manifests have none, and name the hub Secret, in the Work's namespace, that
//! holds it. It is read only when a Secret manifest is sent to the member (not for one the
//! member has as it was applied), once per reconciliation of the Work, and never kept: a quorum
//! read sees the Secret the splitter wrote before the Work.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use flotilla_api::work_data;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

/// A hub Secret as read: its data (of every Secret manifest of the Work), or why it cannot be
/// had.
type Held = Result<Arc<BTreeMap<String, ByteString>>, String>;

/// What one reconciliation of a Work read of the hub Secrets its Secret manifests name.
pub struct HubData {
    secrets: Api<Secret>,
    namespace: String,
    /// By name.
    read: tokio::sync::Mutex<HashMap<String, Held>>,
}

/// Never the data.
impl std::fmt::Debug for HubData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubData")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl HubData {
    /// The hub Secrets of the Work's namespace `namespace`, read with `client` (the syncer's
    /// hub client; in pull mode the agent's credential).
    pub fn new(client: Client, namespace: &str) -> Self {
        Self {
            secrets: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            read: Default::default(),
        }
    }

    /// The data of Secret manifest `name`, held in hub Secret `secret`; or why it cannot be
    /// had, completing "<the Secret>: ...".
    pub async fn of(
        &self,
        secret: &str,
        name: &str,
    ) -> Result<BTreeMap<String, ByteString>, String> {
        let held = {
            // Held while the Secret is read: the Work's other manifests wait for this read.
            let mut read = self.read.lock().await;
            match read.get(secret) {
                Some(held) => held.clone(),
                None => {
                    let held = self.fetch(secret).await;
                    read.insert(secret.to_string(), held.clone());
                    held
                }
            }
        }?;
        let at = format!("hub Secret {}/{secret}", self.namespace);
        let value = held
            .get(name)
            .ok_or_else(|| format!("its data is not in {at}"))?;
        work_data::decode(&value.0).map_err(|e| format!("its data in {at} cannot be read: {e}"))
    }

    async fn fetch(&self, secret: &str) -> Held {
        let at = format!("hub Secret {}/{secret}", self.namespace);
        match self.secrets.get_opt(secret).await {
            Ok(Some(s)) if s.type_.as_deref() == Some(work_data::SECRET_TYPE) => {
                Ok(Arc::new(s.data.unwrap_or_default()))
            }
            // Only what the splitter wrote for Works: a Work cannot copy any Secret of its
            // namespace into the member by naming it.
            Ok(Some(s)) => Err(format!(
                "its data would be in {at}, which is of type {:?}, not {}",
                s.type_.unwrap_or_default(),
                work_data::SECRET_TYPE
            )),
            Ok(None) => Err(format!("its data is in {at}, which does not exist")),
            Err(e) => Err(format!("its data is in {at}, which cannot be read: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A hub whose Secrets are `secrets` (JSON objects), counting the reads.
    fn hub(secrets: Vec<serde_json::Value>, reads: Arc<AtomicUsize>) -> Client {
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            reads.fetch_add(1, Ordering::SeqCst);
            let name = req
                .uri()
                .path()
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_string();
            let found = secrets
                .iter()
                .find(|s| s["metadata"]["name"] == name.as_str())
                .cloned();
            let (status, body) = match found {
                Some(s) => (200, s),
                None => (
                    404,
                    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                       "reason": "NotFound", "code": 404,
                                       "message": format!("secrets \"{name}\" not found")}),
                ),
            };
            let response = http::Response::builder()
                .status(status)
                .body(kube::client::Body::from(body.to_string().into_bytes()));
            async move { response }
        });
        Client::new(service, "default")
    }

    /// One Secret manifest's data: its name, and its keys and values.
    type Manifest<'a> = (&'a str, &'a [(&'a str, &'a [u8])]);

    fn work_data(name: &str, type_: &str, manifests: &[Manifest<'_>]) -> serde_json::Value {
        let data: BTreeMap<String, ByteString> = manifests
            .iter()
            .map(|(m, d)| {
                let d: BTreeMap<String, ByteString> = d
                    .iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                    .collect();
                (m.to_string(), work_data::encode(&d))
            })
            .collect();
        serde_json::json!({"apiVersion": "v1", "kind": "Secret", "type": type_,
                           "metadata": {"name": name, "namespace": "flotilla-cluster-m1"},
                           "data": data})
    }

    #[tokio::test]
    async fn a_works_secrets_read_their_data_from_its_hub_secret_once() {
        let reads = Arc::new(AtomicUsize::new(0));
        let held = work_data(
            "w",
            work_data::SECRET_TYPE,
            &[
                ("db", &[("password", b"s3cr3t")]),
                ("api", &[("token", b"t0k3n")]),
            ],
        );
        let data = HubData::new(hub(vec![held], reads.clone()), "flotilla-cluster-m1");
        let db = data.of("w", "db").await.expect("db's data");
        assert_eq!(db["password"].0, b"s3cr3t");
        let api = data.of("w", "api").await.expect("api's data");
        assert_eq!(api["token"].0, b"t0k3n");
        assert_eq!(
            reads.load(Ordering::SeqCst),
            1,
            "one read for the Work's manifests"
        );
        let why = data.of("w", "other").await.expect_err("no data for it");
        assert!(
            why.contains("not in hub Secret flotilla-cluster-m1/w"),
            "{why}"
        );
    }

    #[tokio::test]
    async fn a_missing_or_foreign_hub_secret_gives_no_data() {
        let reads = Arc::new(AtomicUsize::new(0));
        let foreign = work_data("kubeconfig", "Opaque", &[("db", &[("k", b"v")])]);
        let data = HubData::new(hub(vec![foreign], reads.clone()), "flotilla-cluster-m1");
        let why = data.of("gone", "db").await.expect_err("missing");
        assert!(
            why.contains("hub Secret flotilla-cluster-m1/gone, which does not exist"),
            "{why}"
        );
        let why = data
            .of("kubeconfig", "db")
            .await
            .expect_err("not Flotilla's");
        assert!(why.contains("not flotilla.dev/work-data"), "{why}");
        // What could not be had is not asked again in the same reconciliation.
        let _ = data.of("gone", "api").await;
        assert_eq!(reads.load(Ordering::SeqCst), 2);
        let mut damaged = work_data("w", work_data::SECRET_TYPE, &[]);
        damaged["data"]["db"] = serde_json::json!("AAAA");
        let data = HubData::new(hub(vec![damaged], reads), "flotilla-cluster-m1");
        let why = data.of("w", "db").await.expect_err("damaged");
        assert!(why.contains("cannot be read"), "{why}");
    }
}
