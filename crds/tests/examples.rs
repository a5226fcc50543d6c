//! The example objects in `deploy/examples/` and the profiles in `deploy/profiles/` are valid
//! instances of the Rust types: they parse, name the kinds they claim, and cover every kind. (That the apiserver accepts them, CEL rules
//! included, is checked by the end-to-end tests in `tests/e2e/tests/api.rs`.)

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use flotilla_api::{
    ApiResourceImport, Cluster, ClusterPlacement, NegotiatedApiResource, Placement,
    ReplicaScheduling, SyncMode, Work, WorkloadProfile,
};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn deploy_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(name)
}

/// Every document of every `*.yaml` file in `deploy/examples` and `deploy/profiles`, with its
/// file name.
fn example_documents() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = ["examples", "profiles"]
        .into_iter()
        .flat_map(|dir| fs::read_dir(deploy_dir(dir)).expect("the deploy directory exists"))
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for path in files {
        let text = fs::read_to_string(&path).expect("readable example");
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let parsed: Vec<Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{name} is not valid YAML: {e}"));
        docs.extend(parsed.into_iter().map(|d| (name.clone(), d)));
    }
    docs
}

fn parse<K: Resource<DynamicType = ()> + DeserializeOwned>(file: &str, doc: &Value) -> K {
    assert_eq!(
        doc["apiVersion"],
        K::api_version(&()).as_ref(),
        "{file}: apiVersion"
    );
    serde_json::from_value(doc.clone())
        .unwrap_or_else(|e| panic!("{file} is not a valid {}: {e}", K::kind(&())))
}

#[test]
fn every_example_is_a_valid_object_of_its_kind() {
    let docs = example_documents();
    let mut kinds = BTreeSet::new();
    for (file, doc) in &docs {
        let kind = doc["kind"].as_str().unwrap_or_default();
        match kind {
            "Cluster" => {
                let c: Cluster = parse(file, doc);
                if c.spec.sync_mode == SyncMode::Push {
                    assert!(c.spec.kubeconfig_secret_ref.is_some(), "{file}");
                }
            }
            "ClusterPlacement" => {
                let p: ClusterPlacement = parse(file, doc);
                assert!(
                    !p.spec.resource_selectors.is_empty(),
                    "{file}: a ClusterPlacement names what it places"
                );
            }
            "Placement" => {
                let p: Placement = parse(file, doc);
                assert!(
                    p.spec.replica_scheduling.strategy().is_some(),
                    "{file}: replicaScheduling {:?} names no valid strategy",
                    p.spec.replica_scheduling
                );
            }
            "Work" => {
                let w: Work = parse(file, doc);
                assert!(
                    w.cluster_name().is_some(),
                    "{file}: not in a cluster namespace"
                );
            }
            "APIResourceImport" => {
                let i: ApiResourceImport = parse(file, doc);
                assert_eq!(
                    i.metadata.name.as_deref(),
                    Some(i.spec.resource.object_name().as_str()),
                    "{file}"
                );
                assert!(
                    i.cluster_name().is_some(),
                    "{file}: not in a cluster namespace"
                );
            }
            "NegotiatedAPIResource" => {
                let n: NegotiatedApiResource = parse(file, doc);
                assert_eq!(
                    n.metadata.name.as_deref(),
                    Some(n.spec.resource.object_name().as_str()),
                    "{file}"
                );
            }
            "WorkloadProfile" => {
                let p: WorkloadProfile = parse(file, doc);
                let kind = p.spec.kind.to_lowercase();
                assert!(
                    p.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with(&kind) && n.ends_with(&p.spec.group)),
                    "{file}: named <plural>.<group> of its kind"
                );
            }
            other => panic!("{file}: unexpected kind {other:?}"),
        }
        kinds.insert(kind.to_string());
    }
    let expected: BTreeSet<String> = [
        "APIResourceImport",
        "Cluster",
        "ClusterPlacement",
        "NegotiatedAPIResource",
        "Placement",
        "Work",
        "WorkloadProfile",
    ]
    .map(String::from)
    .into();
    assert_eq!(kinds, expected, "deploy/examples must cover every kind");
}

#[test]
fn the_examples_show_every_replica_strategy() {
    let strategies: BTreeSet<String> = example_documents()
        .iter()
        .filter(|(_, d)| d["kind"] == "Placement")
        .map(|(file, d)| {
            let p: Placement = parse(file, d);
            let ReplicaScheduling {
                type_, division, ..
            } = p.spec.replica_scheduling;
            format!("{type_:?}/{division:?}")
        })
        .collect();
    for s in [
        "Divided/Some(Even)",
        "Divided/Some(Weighted)",
        "Duplicated/None",
    ] {
        assert!(
            strategies.contains(s),
            "no example Placement uses {s}: {strategies:?}"
        );
    }
}
