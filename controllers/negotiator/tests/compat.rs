//! `flotilla-negotiator compat`: output and exit codes of the built binary.

use std::path::PathBuf;
use std::process::{Command, Output};

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/testdata")
        .join(name)
}

fn compat(old: &str, new: &str, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flotilla-negotiator"))
        .arg("compat")
        .arg(testdata(old))
        .arg(testdata(new))
        .args(extra)
        .output()
        .expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn identical_files_are_safe() {
    let o = compat("old.yaml", "old.yaml", &[]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("verdict: safe (0 breaking"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn an_added_property_is_safe() {
    let o = compat("old.yaml", "safe.yaml", &[]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("safe      widgets.example.com v1 .spec.color PropertyAdded"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_type_change_is_breaking_with_its_path() {
    let o = compat("old.yaml", "breaking.yaml", &[]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("breaking  widgets.example.com v1 .spec.mode TypeChanged"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("verdict: breaking"), "{}", stdout(&o));
}

#[test]
fn an_undecidable_change_exits_2() {
    let o = compat("old.yaml", "unknown.yaml", &[]);
    assert_eq!(o.status.code(), Some(2), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains(".spec.name PatternChanged"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn json_output() {
    let o = compat("old.yaml", "breaking.yaml", &["--output", "json"]);
    assert_eq!(o.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(report["verdict"], "Breaking");
    let changes = report["changes"].as_array().expect("changes");
    assert!(changes.iter().any(|c| c["crd"] == "widgets.example.com"
        && c["version"] == "v1"
        && c["path"] == ".spec.mode"
        && c["kind"] == "TypeChanged"
        && c["verdict"] == "Breaking"));
}

#[test]
fn crds_are_paired_by_name_in_multi_document_files() {
    let o = compat("two-crds.yaml", "old.yaml", &[]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("gadgets.example.com . CrdRemoved"),
        "{}",
        stdout(&o)
    );
    let o = compat("old.yaml", "two-crds.yaml", &[]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
}

#[test]
fn unreadable_input_exits_2_with_a_clear_message() {
    for (file, message) in [
        ("missing.yaml", "missing.yaml"),
        ("invalid.yaml", "not YAML"),
        (
            "not-a-crd.yaml",
            "expected an apiextensions.k8s.io/v1 CustomResourceDefinition",
        ),
        (
            "non-structural.yaml",
            ".spec.bad: not a structural schema: type is missing",
        ),
    ] {
        let o = compat("old.yaml", file, &[]);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{file}: {}{}",
            stdout(&o),
            stderr(&o)
        );
        assert!(stderr(&o).contains(message), "{file}: {}", stderr(&o));
    }
    let o = compat("old.yaml", "invalid.yaml", &["--output", "json"]);
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(report["verdict"], "Unknown");
}

#[test]
fn controller_flags_and_compat_do_not_mix() {
    let o = Command::new(env!("CARGO_BIN_EXE_flotilla-negotiator"))
        .args(["--kubeconfig", "/dev/null", "compat", "a", "b"])
        .output()
        .expect("the binary runs");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
