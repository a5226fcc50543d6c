//! The CRD upgrade corpus (`testdata/corpus`, written by its `generate.py`): every pair gives
//! the verdict and the change its `expected.yaml` entry names.

use std::path::{Path, PathBuf};

use flotilla_schema::compare_crds;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Deserialize;

#[derive(Deserialize)]
struct Expected {
    name: String,
    verdict: String,
    change: Option<ExpectedChange>,
}

#[derive(Deserialize)]
struct ExpectedChange {
    path: String,
    kind: String,
    version: Option<String>,
}

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/corpus")
}

fn read(path: &Path) -> CustomResourceDefinition {
    let text = std::fs::read_to_string(path).expect("readable");
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn corpus_verdicts() {
    let text = std::fs::read_to_string(corpus().join("expected.yaml")).expect("expected.yaml");
    let expected: Vec<Expected> = serde_saphyr::from_str(&text).expect("expected.yaml parses");
    assert!(
        expected.len() >= 40,
        "the corpus has {} pairs",
        expected.len()
    );
    let mut failures = Vec::new();
    for e in &expected {
        let dir = corpus().join(&e.name);
        let (old, new) = (read(&dir.join("old.yaml")), read(&dir.join("new.yaml")));
        let c = compare_crds(&old, &new).unwrap_or_else(|err| panic!("{}: {err}", e.name));
        let verdict = format!("{:?}", c.verdict());
        if verdict != e.verdict {
            failures.push(format!(
                "{}: verdict {verdict}, expected {}: {:#?}",
                e.name, e.verdict, c.changes
            ));
        }
        match &e.change {
            None if !c.is_identical() => {
                failures.push(format!("{}: expected no change: {:#?}", e.name, c.changes))
            }
            None => {}
            Some(x) => {
                let found = c.changes.iter().any(|ch| {
                    ch.path == x.path && ch.kind.to_string() == x.kind && ch.version == x.version
                });
                if !found {
                    failures.push(format!(
                        "{}: expected {} at {:?} {}: {:#?}",
                        e.name, x.kind, x.version, x.path, c.changes
                    ));
                }
            }
        }
        // compare(x, x) is identical for every CRD of the corpus.
        assert!(compare_crds(&old, &old).expect("valid").is_identical());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
