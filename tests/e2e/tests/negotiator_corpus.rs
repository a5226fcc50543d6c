//! The CRD the negotiator would publish for two real releases of a CRD passes the hub
//! apiserver's CRD validation — for every CRD of the corpus of real releases in the tool cache
//! (`hack/build-tools.sh`: Gateway API, Prometheus Operator and Argo Rollouts,
//! `crds/releases/<project>/<version>/<file>.yaml`): every consecutive pair of its releases and
//! the first with the last. `FLOTILLA_E2E_CORPUS_ALL_PAIRS=1` takes every pair of releases
//! instead (91 pairs, 548 published CRDs: about 230 s on two cores, against about 65 s).
//!
//! The published CRD is what `flotilla-negotiator lcd OLD NEW` prints (the built binary, as the
//! harness runs every controller; it prints `lcd::negotiate`'s CRDs). Each is sent to the hub as
//! a server-side dry-run create, so nothing is stored. Starts no controller: no negotiator lock.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use flotilla_e2e::process::controller_binary;
use flotilla_e2e::{Environment, random_suffix, scratch_dir};
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::Value;

/// Invocations of `lcd` and dry runs at the same time (the machine may have two cores, and other
/// tests run alongside).
const CONCURRENCY: usize = 2;

/// Set to 1: every pair of releases, not only consecutive ones and first with last.
const ALL_PAIRS: &str = "FLOTILLA_E2E_CORPUS_ALL_PAIRS";

fn corpus() -> Result<PathBuf> {
    let tools = std::env::var("FLOTILLA_TOOLS_BIN")
        .map_err(|_| anyhow!("FLOTILLA_TOOLS_BIN is not set: run the tests with hack/test.sh"))?;
    let dir = Path::new(&tools).join("crds/releases");
    if !dir.is_dir() {
        bail!("{} does not exist: run hack/build-tools.sh", dir.display());
    }
    Ok(dir)
}

fn entries(dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| dir.display().to_string())? {
        let name = e?.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

fn version_key(v: &str) -> Vec<u64> {
    v.trim_start_matches('v')
        .split(['.', '-'])
        .map(|p| p.parse().unwrap_or(0))
        .collect()
}

/// One project's release: all its CRD files in one multi-document file (in the scratch dir), so
/// that one `lcd` run negotiates every CRD the two releases have in common.
struct Release {
    project: String,
    version: String,
    all: PathBuf,
}

fn releases(root: &Path, scratch: &Path) -> Result<Vec<Vec<Release>>> {
    let mut out = Vec::new();
    for project in entries(root)? {
        let mut versions: Vec<String> = entries(&root.join(&project))?
            .into_iter()
            .filter(|v| root.join(&project).join(v).join(".ready").is_file())
            .collect();
        versions.sort_by_key(|v| version_key(v));
        let mut list = Vec::new();
        for version in versions {
            let dir = root.join(&project).join(&version);
            let mut text = String::new();
            for file in entries(&dir)? {
                let crd = std::fs::read_to_string(dir.join(&file))
                    .with_context(|| format!("{}/{file}", dir.display()))?;
                text.push_str("\n---\n");
                text.push_str(&crd);
            }
            let all = scratch.join(format!("{project}@{version}.yaml"));
            std::fs::write(&all, text).with_context(|| all.display().to_string())?;
            list.push(Release {
                project: project.clone(),
                version,
                all,
            });
        }
        out.push(list);
    }
    Ok(out)
}

/// `flotilla-negotiator lcd OLD NEW`: the CRDs it would publish.
async fn lcd(binary: &Path, old: &Path, new: &Path) -> Result<Vec<CustomResourceDefinition>> {
    let out = tokio::process::Command::new(binary)
        .arg("lcd")
        .arg(old)
        .arg(new)
        .output()
        .await
        .with_context(|| format!("running {}", binary.display()))?;
    if !out.status.success() {
        bail!(
            "flotilla-negotiator lcd {} {} failed ({}): {}",
            old.display(),
            new.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let docs: Vec<Value> = serde_saphyr::from_multiple(&String::from_utf8_lossy(&out.stdout))
        .context("the output of lcd is not YAML")?;
    docs.into_iter()
        .filter(|d| !d.is_null())
        .map(|d| serde_json::from_value(d).context("the output of lcd is not a CRD"))
        .collect()
}

/// A dry-run create of `crd` on the hub: `None` when accepted, else the apiserver's refusal. A
/// CRD of that name that exists on the hub (another test's) is tried again under a plural of its
/// own, same group, kind and schema.
async fn dry_run(hub: &Client, crd: &CustomResourceDefinition) -> Result<Option<String>> {
    let api: Api<CustomResourceDefinition> = Api::all(hub.clone());
    let pp = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let refusal = |e: kube::Error| -> Result<Option<String>> {
        match e {
            kube::Error::Api(s) => Ok(Some(format!(
                "{} {}: {}{}",
                s.code,
                s.reason,
                s.message,
                s.details
                    .map(|d| d
                        .causes
                        .iter()
                        .map(|c| format!("\n      {}: {}", c.field, c.message))
                        .collect::<String>())
                    .unwrap_or_default()
            ))),
            other => Err(other.into()),
        }
    };
    match api.create(&pp, crd).await {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let mut own = crd.clone();
            let suffix = format!("e2e{}", random_suffix().replace('-', ""));
            own.spec.names.plural = format!("{}{suffix}", own.spec.names.plural);
            own.spec.names.singular = own.spec.names.singular.map(|s| format!("{s}{suffix}"));
            own.metadata.name = Some(format!("{}.{}", own.spec.names.plural, own.spec.group));
            match api.create(&pp, &own).await {
                Ok(_) => Ok(None),
                Err(e) => refusal(e),
            }
        }
        Err(e) => refusal(e),
    }
}

/// A pair of releases and, per CRD published for it, its name and the hub's refusal if any.
type Published = (String, Vec<(String, Option<String>)>);

/// The property: the LCD of any two releases of a real CRD is a CRD the hub accepts.
#[tokio::test]
async fn the_lcd_of_any_two_releases_is_accepted_by_the_hub() -> Result<()> {
    let env = Environment::get();
    let hub = env.hub.client().await?;
    let root = corpus()?;
    let binary = controller_binary("flotilla-negotiator")?;
    let scratch = scratch_dir().join(format!("negotiator-corpus-{}", random_suffix()));
    std::fs::create_dir_all(&scratch)?;
    let projects = releases(&root, &scratch)?;
    let started = Instant::now();

    let all_pairs = std::env::var(ALL_PAIRS).is_ok_and(|v| v == "1");
    let mut pairs = Vec::new();
    for list in &projects {
        for (i, old) in list.iter().enumerate() {
            for (j, new) in list.iter().enumerate().skip(i + 1) {
                let first_and_last = i == 0 && j == list.len() - 1;
                if all_pairs || j == i + 1 || first_and_last {
                    pairs.push((old, new));
                }
            }
        }
    }
    let results: Vec<Result<Published>> = futures::stream::iter(pairs.iter().map(|(old, new)| {
        let (binary, hub) = (&binary, &hub);
        async move {
            let what = format!("{} {} → {}", old.project, old.version, new.version);
            let crds = lcd(binary, &old.all, &new.all)
                .await
                .with_context(|| what.clone())?;
            let mut verdicts = Vec::new();
            for crd in &crds {
                let name = crd.metadata.name.clone().unwrap_or_default();
                verdicts.push((name, dry_run(hub, crd).await.with_context(|| what.clone())?));
            }
            Ok((what, verdicts))
        }
    }))
    .buffer_unordered(CONCURRENCY)
    .collect()
    .await;

    let (mut published, mut refused, mut failed) = (0, Vec::new(), Vec::new());
    let mut crds = BTreeSet::new();
    for r in results {
        match r {
            Ok((what, verdicts)) => {
                for (name, refusal) in verdicts {
                    published += 1;
                    crds.insert(name.clone());
                    if let Some(why) = refusal {
                        refused.push(format!("  {what} {name}: {why}"));
                    }
                }
            }
            Err(e) => failed.push(format!("  {e:#}")),
        }
    }
    refused.sort();
    failed.sort();
    println!(
        "{} release pairs of {} projects, {} published CRDs ({} distinct names) dry-run created \
         on the hub in {:.1?}: {} refused, {} pairs without an LCD ({})",
        pairs.len(),
        projects.len(),
        published,
        crds.len(),
        started.elapsed(),
        refused.len(),
        failed.len(),
        if all_pairs {
            "every pair of releases"
        } else {
            "consecutive releases and first with last; every pair with FLOTILLA_E2E_CORPUS_ALL_PAIRS=1"
        }
    );
    let _ = std::fs::remove_dir_all(&scratch);
    if !refused.is_empty() || !failed.is_empty() {
        bail!(
            "the hub refuses {} of the {published} CRDs the negotiator would publish:\n{}\n\
             and lcd found nothing to publish for {} pairs:\n{}",
            refused.len(),
            refused.join("\n"),
            failed.len(),
            failed.join("\n")
        );
    }
    Ok(())
}
