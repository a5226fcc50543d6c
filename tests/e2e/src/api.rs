//! Flotilla's API on the hub: installing the CRDs from `crds/yaml`, and applying the example (or
//! any) objects of Flotilla's kinds through discovery, as `kubectl apply --server-side` would.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, ApiResource, Scope};
use kube::{Api, Client};
use serde_json::Value;
use tokio::sync::OnceCell;

use crate::{Seen, wait_for};

/// Field manager of everything the end-to-end tests apply.
pub const FIELD_MANAGER: &str = "flotilla-e2e";

/// How long a CRD may take to become Established.
const ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(60);

static CRDS_INSTALLED: OnceCell<()> = OnceCell::const_new();

/// The directory of the generated CRD YAML.
pub fn crd_dir() -> PathBuf {
    crate::repo_root().join("crds/yaml")
}

/// The directory of the example objects.
pub fn examples_dir() -> PathBuf {
    crate::repo_root().join("deploy/examples")
}

/// The `*.yaml` files of `dir`, sorted.
fn yaml_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry
            .with_context(|| format!("listing {}", dir.display()))?
            .path();
        if path.extension().is_some_and(|e| e == "yaml") {
            files.push(path);
        }
    }
    files.sort();
    if files.is_empty() {
        bail!("no *.yaml files in {}", dir.display());
    }
    Ok(files)
}

/// Every YAML document of a file, as JSON values.
fn read_documents(path: &Path) -> Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_saphyr::from_multiple(&text).with_context(|| format!("parsing {}", path.display()))
}

/// The CRDs in `crds/yaml`, read at run time (so a test run sees the committed files, which a
/// unit test of `flotilla-api` keeps in step with the types).
pub fn read_crds() -> Result<Vec<CustomResourceDefinition>> {
    let mut crds = Vec::new();
    for path in yaml_files(&crd_dir())? {
        for doc in read_documents(&path)? {
            crds.push(
                serde_json::from_value(doc)
                    .with_context(|| format!("{} is not a CRD", path.display()))?,
            );
        }
    }
    Ok(crds)
}

/// Server-side applies every CRD of `crds/yaml` to the cluster of `client` and waits until each
/// is Established. Runs once per test process: the tests share one hub, and applying the same
/// CRDs again changes nothing, so concurrent callers simply wait for the first.
pub async fn install_crds(client: &Client) -> Result<()> {
    CRDS_INSTALLED
        .get_or_try_init(|| apply_crds(client))
        .await
        .map(|_| ())
}

/// Server-side applies every CRD of `crds/yaml` and waits until each is Established, every time
/// it is called. Tests use [`install_crds`]; this is for a test of re-applying itself.
pub async fn apply_crds(client: &Client) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let crds = read_crds()?;
    for crd in &crds {
        let name = crd
            .metadata
            .name
            .as_deref()
            .ok_or_else(|| anyhow!("a CRD in {} has no name", crd_dir().display()))?;
        api.patch(name, &params, &Patch::Apply(crd))
            .await
            .with_context(|| format!("applying CRD {name}"))?;
    }
    for crd in &crds {
        let name = crd.metadata.name.as_deref().unwrap_or_default();
        wait_for(
            &format!("CRD {name} to be Established"),
            ESTABLISHED_TIMEOUT,
            || async {
                let current = api.get(name).await?;
                let conditions = current
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default();
                let status = |t: &str| {
                    conditions
                        .iter()
                        .find(|c| c.type_ == t)
                        .map_or("absent", |c| c.status.as_str())
                        .to_string()
                };
                Ok(
                    if status("Established") == "True" && status("NamesAccepted") == "True" {
                        Seen::Done(())
                    } else {
                        Seen::not_yet(format!(
                            "Established={}, NamesAccepted={}",
                            status("Established"),
                            status("NamesAccepted")
                        ))
                    },
                )
            },
        )
        .await?;
    }
    Ok(())
}

/// One document of one file in `deploy/examples`.
#[derive(Clone, Debug)]
pub struct Example {
    /// The file it comes from.
    pub file: String,
    /// The object.
    pub object: Value,
}

impl Example {
    pub fn kind(&self) -> &str {
        self.object["kind"].as_str().unwrap_or_default()
    }

    pub fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or_default()
    }
}

/// Every object in `deploy/examples`.
pub fn read_examples() -> Result<Vec<Example>> {
    let mut examples = Vec::new();
    for path in yaml_files(&examples_dir())? {
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for object in read_documents(&path)? {
            examples.push(Example {
                file: file.clone(),
                object,
            });
        }
    }
    Ok(examples)
}

/// The type of `object` (from its apiVersion and kind) as the server's discovery describes it.
pub async fn resource_of(client: &Client, object: &Value) -> Result<(ApiResource, Scope)> {
    let api_version = object["apiVersion"]
        .as_str()
        .ok_or_else(|| anyhow!("object has no apiVersion: {object}"))?;
    let kind = object["kind"]
        .as_str()
        .ok_or_else(|| anyhow!("object has no kind: {object}"))?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = discovery::pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("discovering {api_version} {kind}"))?;
    Ok((resource, caps.scope))
}

/// An API for `object`'s type: in `metadata.namespace` for namespaced types, cluster-wide
/// otherwise.
pub async fn api_for(client: &Client, object: &Value) -> Result<Api<DynamicObject>> {
    let (resource, scope) = resource_of(client, object).await?;
    Ok(match scope {
        Scope::Cluster => Api::all_with(client.clone(), &resource),
        Scope::Namespaced => {
            let namespace = object["metadata"]["namespace"]
                .as_str()
                .ok_or_else(|| anyhow!("namespaced {} has no metadata.namespace", resource.kind))?;
            Api::namespaced_with(client.clone(), namespace, &resource)
        }
    })
}

/// Server-side applies `object` (with [`FIELD_MANAGER`]); `dry_run` validates it fully on the
/// server without storing it. The outer error is a problem of the test (no such type, no name);
/// the inner one is the server's answer.
pub async fn apply(
    client: &Client,
    object: &Value,
    dry_run: bool,
) -> Result<std::result::Result<DynamicObject, kube::Error>> {
    let api = api_for(client, object).await?;
    let name = object["metadata"]["name"]
        .as_str()
        .ok_or_else(|| anyhow!("object has no metadata.name: {object}"))?;
    let mut params = PatchParams::apply(FIELD_MANAGER).force();
    params.dry_run = dry_run;
    Ok(api.patch(name, &params, &Patch::Apply(object)).await)
}

/// Creates `object` (a plain POST, as `kubectl create` or a first `kubectl apply` does); with
/// `dry_run` the apiserver validates it fully without storing it. The outer error is a problem of
/// the test (no such type); the inner one is the server's answer.
pub async fn create(
    client: &Client,
    object: &Value,
    dry_run: bool,
) -> Result<std::result::Result<DynamicObject, kube::Error>> {
    let api = api_for(client, object).await?;
    let object: DynamicObject =
        serde_json::from_value(object.clone()).context("object is not a Kubernetes object")?;
    let params = PostParams {
        dry_run,
        field_manager: Some(FIELD_MANAGER.to_string()),
    };
    Ok(api.create(&params, &object).await)
}

/// Cluster-scoped objects a test created in a shared cluster, deleted when the value is dropped —
/// also when the test panics. (Namespaced objects go with their [`crate::TestNamespace`].)
pub struct ClusterScopedObjects {
    kubeconfig: PathBuf,
    objects: Vec<(ApiResource, String)>,
}

impl ClusterScopedObjects {
    pub fn new(cluster: &crate::ClusterInfo) -> Self {
        Self {
            kubeconfig: cluster.kubeconfig.clone(),
            objects: Vec::new(),
        }
    }

    /// Remembers an object to delete.
    pub fn add(&mut self, resource: ApiResource, name: impl Into<String>) {
        self.objects.push((resource, name.into()));
    }
}

impl Drop for ClusterScopedObjects {
    fn drop(&mut self) {
        if self.objects.is_empty() {
            return;
        }
        let kubeconfig = self.kubeconfig.clone();
        let objects = std::mem::take(&mut self.objects);
        // As in TestNamespace: Drop cannot await, so delete from a thread with its own runtime.
        let deleted = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let client = crate::client_from_kubeconfig(&kubeconfig).await?;
                for (resource, name) in objects {
                    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
                    match api.delete(&name, &DeleteParams::background()).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(s)) if s.code == 404 => {}
                        Err(e) => {
                            return Err(
                                anyhow!(e).context(format!("deleting {} {name}", resource.kind))
                            );
                        }
                    }
                }
                Ok::<_, anyhow::Error>(())
            })
        })
        .join();
        match deleted {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("warning: {e:#}"),
            Err(_) => eprintln!("warning: clean-up of cluster-scoped objects panicked"),
        }
    }
}

/// The Works on member `cluster` (in its `flotilla-cluster-<name>` namespace on the hub) whose
/// objects come from hub namespace `namespace`: a test's own, on a hub other tests share.
pub async fn works_from(
    hub: &Client,
    cluster: &str,
    namespace: &str,
) -> Result<Vec<flotilla_api::Work>> {
    use kube::ResourceExt;
    let works: Api<flotilla_api::Work> = Api::namespaced(
        hub.clone(),
        &flotilla_api::names::cluster_namespace(cluster),
    );
    Ok(works
        .list(&kube::api::ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|w| {
            w.annotations()
                .get(flotilla_api::annotations::SOURCE_NAMESPACE)
                .map(String::as_str)
                == Some(namespace)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_crd_and_example_of_the_repository() {
        let crds = read_crds().expect("crds/yaml is readable");
        assert_eq!(crds.len(), 7, "one CRD per Flotilla kind");
        assert!(crds.iter().all(|c| c.spec.group == flotilla_api::GROUP));
        let examples = read_examples().expect("deploy/examples is readable");
        assert!(
            examples
                .iter()
                .all(|e| !e.kind().is_empty() && !e.name().is_empty())
        );
    }
}

/// The condition a wait expects: its type and status, and its reason when given.
#[derive(Clone, Copy, Debug)]
pub struct Expect<'a> {
    pub type_: &'a str,
    pub status: &'a str,
    pub reason: Option<&'a str>,
}

impl std::fmt::Display for Expect<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.type_, self.status)?;
        match self.reason {
            Some(reason) => write!(f, " ({reason})"),
            None => Ok(()),
        }
    }
}

/// Waits until object `name` of `api` has the condition `expected` among those `conditions`
/// reads of it, and returns the object. A time-out says what the condition was last.
pub async fn wait_condition<K>(
    api: &Api<K>,
    name: &str,
    expected: Expect<'_>,
    timeout: Duration,
    conditions: impl Fn(&K) -> &[Condition],
) -> Result<K>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(&format!("{name} to have {expected}"), timeout, || async {
        let object = api.get(name).await?;
        let seen = conditions(&object)
            .iter()
            .find(|c| c.type_ == expected.type_)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()));
        Ok(match seen {
            Some((status, reason, _))
                if status == expected.status && expected.reason.is_none_or(|r| r == reason) =>
            {
                Seen::Done(object)
            }
            Some((status, reason, message)) => {
                Seen::not_yet(format!("{}={status} ({reason}): {message}", expected.type_))
            }
            None => Seen::not_yet(format!("no {} condition", expected.type_)),
        })
    })
    .await
}
