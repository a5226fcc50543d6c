//! `flotilla-negotiator compat` over a corpus of real CRDs: every consecutive pair of releases of
//! Gateway API, Prometheus Operator and Argo Rollouts (`hack/build-tools.sh` puts them into the
//! tool cache, `crds/releases/<project>/<version>/<file>.yaml`; the versions are pinned in
//! `hack/versions.env`). A pair is one file in release N and N+1; a CRD that appears or
//! disappears is no pair.
//!
//! Every change `compat` cannot decide (verdict unknown) must be explained in
//! `docs/schema-compatibility.md`, section "Real releases: what stays unknown" (a row per pair and
//! change, with its versions and paths, and why it cannot be decided); and everything a row lists
//! must still occur, so the table cannot go stale.
//! Prints a summary table (`hack/compat-corpus.sh` runs this test and shows it).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use flotilla_negotiator::compat::{Report, check};
use flotilla_schema::Verdict;

/// The section of docs/schema-compatibility.md that explains the unknowns.
const SECTION: &str = "## Real releases: what stays unknown";

/// The corpus directory in the tool cache; fails clearly without it.
fn corpus() -> PathBuf {
    let tools = std::env::var_os("FLOTILLA_TOOLS_BIN").unwrap_or_else(|| {
        panic!(
            "FLOTILLA_TOOLS_BIN is not set: run the tests with hack/test.sh, or \
             FLOTILLA_TOOLS_BIN=$(hack/build-tools.sh --print-dir) cargo test -p flotilla-negotiator \
             --test compat_corpus (after hack/build-tools.sh)"
        )
    });
    let dir = PathBuf::from(tools).join("crds/releases");
    assert!(
        dir.is_dir(),
        "{} does not exist: run hack/build-tools.sh (it fetches the corpus of CRD releases)",
        dir.display()
    );
    dir
}

/// `v1.10.0` → (1, 10, 0), so that releases sort as versions, not as text.
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
            e.expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    names
}

/// Every project and its releases (complete ones: with the `.ready` marker), oldest first.
fn releases(root: &Path) -> Vec<(String, Vec<String>)> {
    entries(root)
        .into_iter()
        .map(|project| {
            let mut versions: Vec<String> = entries(&root.join(&project))
                .into_iter()
                .filter(|v| root.join(&project).join(v).join(".ready").is_file())
                .collect();
            versions.sort_by_key(|v| version_key(v));
            (project, versions)
        })
        .collect()
}

/// One pair (a file of a project in two consecutive releases) and `compat`'s report on it.
struct Pair {
    project: String,
    old: String,
    new: String,
    report: Report,
}

fn pairs(root: &Path) -> Vec<Pair> {
    let mut out = Vec::new();
    for (project, versions) in releases(root) {
        for w in versions.windows(2) {
            let (old_dir, new_dir) = (
                root.join(&project).join(&w[0]),
                root.join(&project).join(&w[1]),
            );
            let new_files: BTreeSet<String> = entries(&new_dir).into_iter().collect();
            for file in entries(&old_dir)
                .into_iter()
                .filter(|f| new_files.contains(f))
            {
                let report =
                    check(&old_dir.join(&file), &new_dir.join(&file)).unwrap_or_else(|e| {
                        panic!("compat {project} {} -> {} {file}: {e}", w[0], w[1])
                    });
                out.push(Pair {
                    project: project.clone(),
                    old: w[0].clone(),
                    new: w[1].clone(),
                    report,
                });
            }
        }
    }
    out
}

/// One row of the table: project, CRD, releases (`old → new`), version, path, change.
type Row = [String; 6];

/// The unknown changes `compat` finds in the corpus.
fn unknowns(pairs: &[Pair]) -> BTreeSet<Row> {
    let mut rows = BTreeSet::new();
    for p in pairs {
        for f in p
            .report
            .changes
            .iter()
            .filter(|f| f.change.verdict == Verdict::Unknown)
        {
            rows.insert([
                p.project.clone(),
                f.crd.clone(),
                format!("{} → {}", p.old, p.new),
                f.change.version.clone().unwrap_or_default(),
                f.change.path.clone(),
                f.change.kind.to_string(),
            ]);
        }
    }
    rows
}

/// The cells of a Markdown table row, trimmed; `\|` is a `|` inside a cell.
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    let mut cells = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cells.last_mut().expect("a cell").push('|');
                chars.next();
            }
            '|' => cells.push(String::new()),
            c => cells.last_mut().expect("a cell").push(c),
        }
    }
    cells.into_iter().map(|c| c.trim().to_string()).collect()
}

/// The code spans of a cell (`` `a`<br>`b` `` → a, b), or the cell without backticks.
fn spans(cell: &str) -> Vec<String> {
    let spans: Vec<String> = cell
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    if spans.is_empty() {
        vec![cell.trim_matches('`').to_string()]
    } else {
        spans
    }
}

/// Whether a documented path matches a path: `…` in it stands for any text (`.spec.…proxyUrl`).
fn path_matches(pattern: &str, path: &str) -> bool {
    let parts: Vec<&str> = pattern.split('…').collect();
    if parts.len() == 1 {
        return pattern == path;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !path.starts_with(first) || !path[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &path[first.len()..path.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

fn row_matches(documented: &Row, found: &Row) -> bool {
    (0..6).all(|k| {
        if k == 4 {
            path_matches(&documented[k], &found[k])
        } else {
            documented[k] == found[k]
        }
    })
}

/// The rows of the docs' table, expanded (a row may list several versions, comma-separated, and
/// several paths, each a code span, where `…` stands for any text), with the line each is on.
/// Every row must say why.
fn documented() -> Vec<(Row, usize)> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/schema-compatibility.md");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let start = text
        .lines()
        .position(|l| l.trim() == SECTION)
        .unwrap_or_else(|| panic!("{} has no section {SECTION:?}", path.display()));
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate().skip(start + 1) {
        if line.starts_with("## ") {
            break;
        }
        if !line.trim_start().starts_with('|') {
            continue;
        }
        let c = cells(line);
        if c.len() < 7 || c[0] == "Project" || c[0].starts_with("---") {
            continue;
        }
        assert!(
            !c[6].is_empty(),
            "docs/schema-compatibility.md:{}: the row says not why the change is undecidable",
            i + 1
        );
        for version in c[3].split(',').map(str::trim) {
            for p in spans(&c[4]) {
                let row: Row = [
                    c[0].clone(),
                    c[1].clone(),
                    c[2].clone(),
                    version.to_string(),
                    p,
                    c[5].trim_matches('`').to_string(),
                ];
                rows.push((row, i + 1));
            }
        }
    }
    rows
}

/// Rows to paste for unknowns the table lacks: one per pair and change, with every version and
/// path it occurs at (versions together when they share the paths).
fn markdown_rows(missing: &[&Row]) -> Vec<String> {
    let mut by_version: BTreeMap<[&str; 5], Vec<&str>> = BTreeMap::new();
    for r in missing {
        by_version
            .entry([&r[0], &r[1], &r[2], &r[5], &r[3]])
            .or_default()
            .push(&r[4]);
    }
    let mut by_paths: BTreeMap<([&str; 4], Vec<&str>), Vec<&str>> = BTreeMap::new();
    for ([project, crd, releases, change, version], paths) in by_version {
        by_paths
            .entry(([project, crd, releases, change], paths))
            .or_default()
            .push(version);
    }
    by_paths
        .into_iter()
        .map(|(([project, crd, releases, change], paths), versions)| {
            let paths: Vec<String> = paths
                .iter()
                .map(|p| format!("`{}`", p.replace('|', "\\|")))
                .collect();
            format!(
                "| {project} | {crd} | {releases} | {} | {} | {change} | TODO: why (read the rule) |",
                versions.join(", "),
                paths.join("<br>")
            )
        })
        .collect()
}

/// The summary: pairs per project by verdict (a pair's verdict is its worst change's).
fn summary(pairs: &[Pair]) -> String {
    let mut by_project: BTreeMap<&str, [usize; 5]> = BTreeMap::new();
    for p in pairs {
        let counts = by_project.entry(&p.project).or_default();
        counts[0] += 1;
        counts[match p.report.verdict {
            Verdict::Safe => 1,
            Verdict::Narrowing => 2,
            Verdict::Breaking => 3,
            Verdict::Unknown => 4,
        }] += 1;
    }
    let mut total = [0; 5];
    let mut out = format!(
        "{:<22} {:>6} {:>6} {:>10} {:>9} {:>8}\n",
        "project", "pairs", "safe", "narrowing", "breaking", "unknown"
    );
    for (project, c) in &by_project {
        out.push_str(&format!(
            "{project:<22} {:>6} {:>6} {:>10} {:>9} {:>8}\n",
            c[0], c[1], c[2], c[3], c[4]
        ));
        for k in 0..5 {
            total[k] += c[k];
        }
    }
    out.push_str(&format!(
        "{:<22} {:>6} {:>6} {:>10} {:>9} {:>8}\n",
        "total", total[0], total[1], total[2], total[3], total[4]
    ));
    out
}

#[test]
fn every_unknown_of_consecutive_releases_is_explained_in_the_docs() {
    let root = corpus();
    let pairs = pairs(&root);
    assert!(
        !pairs.is_empty(),
        "{} holds no consecutive releases: run hack/build-tools.sh",
        root.display()
    );
    let found = unknowns(&pairs);
    println!(
        "compat over every consecutive pair of releases in {}:\n{}unknown changes: {}",
        root.display(),
        summary(&pairs),
        found.len()
    );
    let documented = documented();
    let missing = markdown_rows(
        &found
            .iter()
            .filter(|r| !documented.iter().any(|(d, _)| row_matches(d, r)))
            .collect::<Vec<_>>(),
    );
    let stale: Vec<String> = documented
        .iter()
        .filter(|(d, _)| !found.iter().any(|r| row_matches(d, r)))
        .map(|(r, line)| format!("docs/schema-compatibility.md:{line}: {}", r.join(" | ")))
        .collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/schema-compatibility.md, {SECTION:?}, is not what compat finds.\n\
         Unknown changes without a row ({}):\n{}\n\
         Rows that no longer occur ({}):\n{}",
        missing.len(),
        missing.join("\n"),
        stale.len(),
        stale.join("\n")
    );
}
