//! Times schema negotiation and comparison, with the peak memory of each workload:
//! `cargo run --release -p flotilla-schema --example bench_negotiate [CORPUS-DIR]`.
//!
//! | workload | what one run does |
//! |---|---|
//! | `deployment` | the LCD of 10 imports of the real Deployment schema, plus the 10 comparisons of each import against it (the baseline) |
//! | `largest-crd` | the same for the largest CRD schema of the corpus of real releases (by the size of its `openAPIV3Schema` as JSON), one import per release, the releases repeated to make 10 |
//! | `compat-corpus` | [`compare_crds`] over every consecutive pair of releases of every CRD file of the corpus (what `flotilla-negotiator compat` does, without reading the files) |
//!
//! The corpus is `hack/build-tools.sh`'s `crds/releases/<project>/<version>/<file>.yaml` in the
//! tool cache: CORPUS-DIR, else `$FLOTILLA_TOOLS_BIN/crds/releases`. Without it only the baseline
//! runs, and the table says so.
//!
//! Each workload runs in a child process of its own (this example with `--workload NAME`), which
//! loads and parses its inputs, then resets its peak resident set size (`/proc/self/clear_refs`)
//! and runs the workload: "peak RSS" is the child's `VmHWM` after the runs (its inputs included),
//! "above inputs" that minus its `VmRSS` before them — the memory the workload itself needed at
//! its peak, as far as the allocator returned pages to the kernel in between.

#[path = "../tests/support/deployment_imports.rs"]
mod imports;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use flotilla_schema::{Schema, compare_crds, compare_parsed, lcd_of_parsed};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

const WORKLOADS: [&str; 3] = ["deployment", "largest-crd", "compat-corpus"];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--workload") {
        let name = args.get(1).expect("--workload NAME");
        run_workload(name, args.get(2).map(PathBuf::from));
        return;
    }
    let corpus = args
        .first()
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("FLOTILLA_TOOLS_BIN").map(|t| PathBuf::from(t).join("crds/releases"))
        })
        .filter(|d| d.is_dir());
    match &corpus {
        Some(dir) => println!("corpus: {}", dir.display()),
        None => println!(
            "corpus: ABSENT (give its directory as the argument, or set FLOTILLA_TOOLS_BIN; \
             hack/build-tools.sh fetches it): only the Deployment baseline runs"
        ),
    }
    println!(
        "{:<15} {:>5} {:>11} {:>11} {:>11} {:>10} {:>12}  input",
        "workload", "runs", "median", "min", "max", "peak RSS", "above inputs"
    );
    let exe = std::env::current_exe().expect("this example's path");
    for name in WORKLOADS {
        if name != "deployment" && corpus.is_none() {
            println!("{name:<15} skipped: no corpus");
            continue;
        }
        let mut cmd = Command::new(&exe);
        cmd.args(["--workload", name]);
        if let Some(dir) = &corpus {
            cmd.arg(dir);
        }
        let out = cmd.output().expect("the workload runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            println!(
                "{name:<15} failed: {}{stdout}",
                String::from_utf8_lossy(&out.stderr)
            );
            continue;
        }
        print!("{stdout}");
    }
}

/// `VmHWM` and `VmRSS` of this process, in KiB.
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// Runs `work` `runs` times after resetting the peak RSS; prints one row of the table.
fn measure(name: &str, runs: usize, input: &str, mut work: impl FnMut()) {
    let (_, before) = memory();
    // "5" resets VmHWM to the current RSS (Linux >= 4.0).
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let started = Instant::now();
            work();
            started.elapsed()
        })
        .collect();
    times.sort();
    let (peak, _) = memory();
    println!(
        "{name:<15} {runs:>5} {:>11} {:>11} {:>11} {:>10} {:>12}  {input}{}",
        format!("{:.2?}", times[runs / 2]),
        format!("{:.2?}", times[0]),
        format!("{:.2?}", times[runs - 1]),
        mib(peak),
        mib(peak.saturating_sub(before)),
        if reset {
            ""
        } else {
            " (peak RSS not reset: includes loading)"
        }
    );
}

fn run_workload(name: &str, corpus: Option<PathBuf>) {
    match name {
        "deployment" => {
            let imports = imports::ten_imports();
            measure(
                name,
                20,
                "apps/v1 Deployment, 10 imports: LCD + 10 comparisons",
                || {
                    std::hint::black_box(imports::negotiate(std::hint::black_box(&imports)));
                },
            );
        }
        "largest-crd" => {
            let corpus = load(&corpus.expect("a corpus"));
            let (crd, version, bytes, schemas) = largest(&corpus);
            let releases = schemas.len();
            let imports: Vec<Schema> = schemas
                .iter()
                .cycle()
                .take(10)
                .map(|s| Schema::from_value(s).expect("a structural schema"))
                .collect();
            measure(
                name,
                10,
                &format!(
                    "{crd} {version} ({} KiB of schema), {releases} releases repeated to 10 imports: LCD + 10 comparisons",
                    bytes / 1024
                ),
                || {
                    let lcd = lcd_of_parsed(std::hint::black_box(&imports)).expect("negotiable");
                    let negotiated = Schema::from_value(&lcd.schema).expect("structural");
                    for import in &imports {
                        std::hint::black_box(compare_parsed(&negotiated, import));
                    }
                },
            );
        }
        "compat-corpus" => {
            let corpus = load(&corpus.expect("a corpus"));
            let pairs = consecutive_pairs(&corpus);
            measure(
                name,
                10,
                &format!(
                    "compare_crds over all {} consecutive pairs of {} projects",
                    pairs.len(),
                    corpus.len()
                ),
                || {
                    for (old, new) in &pairs {
                        std::hint::black_box(compare_crds(old, new).expect("comparable"));
                    }
                },
            );
        }
        other => panic!("unknown workload {other}"),
    }
}

/// project → releases, oldest first → file → its CRD.
type Corpus = BTreeMap<String, Vec<(String, BTreeMap<String, CustomResourceDefinition>)>>;

fn version_key(v: &str) -> Vec<u64> {
    v.trim_start_matches('v')
        .split(['.', '-'])
        .map(|p| p.parse().unwrap_or(0))
        .collect()
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    names
}

fn load(root: &Path) -> Corpus {
    let mut corpus = Corpus::new();
    for project in entries(root) {
        let mut versions: Vec<String> = entries(&root.join(&project))
            .into_iter()
            .filter(|v| root.join(&project).join(v).join(".ready").is_file())
            .collect();
        versions.sort_by_key(|v| version_key(v));
        let releases = corpus.entry(project.clone()).or_default();
        for version in versions {
            let dir = root.join(&project).join(&version);
            let files = entries(&dir)
                .into_iter()
                .map(|file| {
                    let text = std::fs::read_to_string(dir.join(&file)).expect("readable");
                    let doc: Value = serde_saphyr::from_multiple::<Value>(&text)
                        .expect("YAML")
                        .into_iter()
                        .find(|d| !d.is_null())
                        .expect("a document");
                    (file, serde_json::from_value(doc).expect("a CRD"))
                })
                .collect();
            releases.push((version, files));
        }
    }
    corpus
}

fn consecutive_pairs(
    corpus: &Corpus,
) -> Vec<(&CustomResourceDefinition, &CustomResourceDefinition)> {
    let mut pairs = Vec::new();
    for releases in corpus.values() {
        for w in releases.windows(2) {
            let new_files: BTreeSet<&String> = w[1].1.keys().collect();
            for (file, old) in &w[0].1 {
                if new_files.contains(file) {
                    pairs.push((old, &w[1].1[file]));
                }
            }
        }
    }
    pairs
}

fn schema_of(crd: &CustomResourceDefinition, version: &str) -> Option<Value> {
    crd.spec
        .versions
        .iter()
        .find(|v| v.name == version)
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .map(|s| serde_json::to_value(s).expect("serializable"))
}

/// The largest schema of the corpus (CRD, version, its size as JSON) and that CRD version's
/// schema in every release that has it, oldest first.
fn largest(corpus: &Corpus) -> (String, String, usize, Vec<Value>) {
    let mut best: Option<(usize, &str, &str, &str)> = None;
    for (project, releases) in corpus {
        for (_, files) in releases {
            for (file, crd) in files {
                for v in &crd.spec.versions {
                    let size = schema_of(crd, &v.name).map_or(0, |s| s.to_string().len());
                    if best.is_none_or(|(b, ..)| size > b) {
                        best = Some((size, project, file, &v.name));
                    }
                }
            }
        }
    }
    let (bytes, project, file, version) = best.expect("a CRD in the corpus");
    let mut name = String::new();
    let schemas = corpus[project]
        .iter()
        .filter_map(|(_, files)| files.get(file))
        .filter_map(|crd| {
            name = crd.metadata.name.clone().unwrap_or_default();
            schema_of(crd, version)
        })
        .collect();
    (name, version.to_string(), bytes, schemas)
}
