//! `flotilla-negotiator compat OLD.yaml NEW.yaml`: the CRD upgrade check for CI.
//!
//! Reads every CustomResourceDefinition in two YAML files (multi-document files allowed; CRDs are
//! paired by name), compares them with [`flotilla_schema::compare_crds`] and prints every change
//! with its JSON path, kind and verdict. Exit code: 0 safe, 1 breaking (a breaking or narrowing
//! change), 2 unknown (a change that could not be decided) or unreadable input.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use flotilla_schema::{Change, ChangeKind, Verdict, compare_crds};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use serde_json::Value;

/// Flags of `compat`.
#[derive(clap::Args, Debug, Clone)]
pub struct CompatArgs {
    /// The CRD file as it is today (one or more CustomResourceDefinitions).
    pub old: PathBuf,
    /// The CRD file as it is proposed.
    pub new: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

/// How `compat` prints its report.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Text,
    Json,
}

/// One change, with the CRD it is in.
#[derive(Debug, Serialize)]
pub struct Finding {
    pub crd: String,
    #[serde(flatten)]
    pub change: Change,
}

/// The whole report.
#[derive(Debug, Serialize)]
pub struct Report {
    pub verdict: Verdict,
    pub changes: Vec<Finding>,
}

impl Report {
    /// 0 safe, 1 breaking or narrowing, 2 unknown.
    pub fn exit_code(&self) -> u8 {
        match self.verdict {
            Verdict::Safe => 0,
            Verdict::Narrowing | Verdict::Breaking => 1,
            Verdict::Unknown => 2,
        }
    }
}

/// Runs `compat`: prints the report on stdout (errors on stderr) and returns the exit code.
pub fn run(args: &CompatArgs) -> ExitCode {
    match check(&args.old, &args.new) {
        Ok(report) => {
            match args.output {
                Output::Json => match serde_json::to_string_pretty(&report) {
                    Ok(json) => println!("{json}"),
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::from(2);
                    }
                },
                Output::Text => print!("{}", text(&report)),
            }
            ExitCode::from(report.exit_code())
        }
        Err(message) => {
            if args.output == Output::Json {
                println!(
                    "{}",
                    serde_json::json!({"verdict": "Unknown", "error": message})
                );
            }
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}

/// Compares the CRDs of two files.
pub fn check(old: &Path, new: &Path) -> Result<Report, String> {
    let (old_crds, new_crds) = (read_crds(old)?, read_crds(new)?);
    let mut changes = Vec::new();
    for (name, o) in &old_crds {
        let Some(n) = new_crds.get(name) else {
            changes.push(Finding {
                crd: name.clone(),
                change: Change {
                    version: None,
                    path: ".".into(),
                    kind: ChangeKind::CrdRemoved,
                    verdict: Verdict::Breaking,
                    message: format!("CRD {name} removed: its objects are deleted"),
                },
            });
            continue;
        };
        let comparison = compare_crds(o, n).map_err(|e| format!("{name}: {e}"))?;
        changes.extend(comparison.changes.into_iter().map(|change| Finding {
            crd: name.clone(),
            change,
        }));
    }
    for name in new_crds.keys().filter(|n| !old_crds.contains_key(*n)) {
        changes.push(Finding {
            crd: name.clone(),
            change: Change {
                version: None,
                path: ".".into(),
                kind: ChangeKind::CrdAdded,
                verdict: Verdict::Safe,
                message: format!("CRD {name} added"),
            },
        });
    }
    let verdict = changes
        .iter()
        .map(|f| f.change.verdict)
        .max()
        .unwrap_or(Verdict::Safe);
    Ok(Report { verdict, changes })
}

/// Every CRD in a YAML file, by name.
pub(crate) fn read_crds(path: &Path) -> Result<BTreeMap<String, CustomResourceDefinition>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let documents: Vec<Value> = serde_saphyr::from_multiple(&text)
        .map_err(|e| format!("{}: not YAML: {e}", path.display()))?;
    let mut crds = BTreeMap::new();
    for (i, doc) in documents.into_iter().enumerate() {
        if doc.is_null() {
            continue;
        }
        let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
        let api_version = doc
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if kind != "CustomResourceDefinition" || api_version != "apiextensions.k8s.io/v1" {
            return Err(format!(
                "{} document {}: expected an apiextensions.k8s.io/v1 CustomResourceDefinition, got {api_version:?} {kind:?}",
                path.display(),
                i + 1
            ));
        }
        let crd: CustomResourceDefinition = serde_json::from_value(doc)
            .map_err(|e| format!("{} document {}: {e}", path.display(), i + 1))?;
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.insert(name, crd);
    }
    if crds.is_empty() {
        return Err(format!(
            "{}: no CustomResourceDefinition found",
            path.display()
        ));
    }
    Ok(crds)
}

/// The text report: one line per change, worst first, then a summary.
pub fn text(report: &Report) -> String {
    let mut findings: Vec<&Finding> = report.changes.iter().collect();
    findings.sort_by_key(|f| std::cmp::Reverse(f.change.verdict));
    let mut out = String::new();
    for f in findings {
        let c = &f.change;
        let version = c
            .version
            .as_deref()
            .map(|v| format!(" {v}"))
            .unwrap_or_default();
        out.push_str(&format!(
            "{:<9} {}{version} {} {}: {}\n",
            c.verdict.as_str(),
            f.crd,
            c.path,
            c.kind,
            c.message
        ));
    }
    let count = |v| {
        report
            .changes
            .iter()
            .filter(|f| f.change.verdict == v)
            .count()
    };
    out.push_str(&format!(
        "verdict: {} ({} breaking, {} narrowing, {} unknown, {} safe)\n",
        report.verdict.as_str(),
        count(Verdict::Breaking),
        count(Verdict::Narrowing),
        count(Verdict::Unknown),
        count(Verdict::Safe)
    ));
    out
}
