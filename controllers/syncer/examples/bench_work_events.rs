//! What the syncer's watch of Works spends on one Work event, side by side: the Work decoded
//! whole (every manifest and status entry into objects) and then kept lean, as the syncer did,
//! against the Work decoded as served ([`Incoming`]: manifests and entries left as the JSON
//! strings they arrive as), as it does now. Both go through kube's `DeserializeGuard`, as the
//! watch does. The Work is one of 50 ConfigMaps of 256 characters of data each, with a status
//! entry per manifest, as the splitter and the syncer write them; most events of a Work are of
//! its status (the manifests of its generation are kept already), which the first row of each
//! pair measures, and a new generation the second.
//!
//! Usage: `cargo run --release -p flotilla-syncer --example bench_work_events [events]`

use std::time::Instant;

use flotilla_api::{ManifestStatus, Work, WorkSpec, WorkStatus};
use flotilla_syncer::lean::{Incoming, Manifests};
use kube::core::DeserializeGuard;
use serde_json::json;

fn work(generation: i64) -> Work {
    let manifests = (0..50u64)
        .map(|i| {
            serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("bench-{i}"), "namespace": "bench-user",
                             "labels": {"bench": "user"},
                             "annotations": {"flotilla.dev/source-api-version": "v1",
                                             "flotilla.dev/source-kind": "ConfigMap"}},
                "data": {"version": format!("v{generation}"),
                         "payload": format!("{:064x}", u128::from(i) * 0x9e37_79b9_7f4a_7c15).repeat(4)}
            }))
            .expect("a ConfigMap")
        })
        .collect();
    let mut w = Work::new(
        "configmap-bench-user-0",
        WorkSpec {
            manifests,
            delete_policy: Default::default(),
            conflict_policy: Default::default(),
            ignore_fields: vec![],
            namespace_labels: None,
            allow_existing_namespaces: None,
            health: None,
        },
    );
    w.metadata.namespace = Some("flotilla-cluster-member1".into());
    w.metadata.uid = Some("0b5d5e0c-9f5a-4b7e-8d7e-2f0c0f1a2b3c".into());
    w.metadata.generation = Some(generation);
    let entries: Vec<ManifestStatus> = (0..50)
        .map(|i| {
            serde_json::from_value(json!({
                "ordinal": i, "applied": "True", "available": "True",
                "identity": {"group": "", "version": "v1", "kind": "ConfigMap",
                             "namespace": "bench-user", "name": format!("bench-{i}")},
                "resourceVersion": format!("{}", 1000 + i), "generation": 1
            }))
            .expect("an entry")
        })
        .collect();
    w.status = Some(WorkStatus {
        observed_generation: Some(generation),
        manifests: entries,
        ..Default::default()
    });
    w
}

/// Microseconds per event of `events` events of `bytes`, each decoded and kept by `take`.
fn per_event(events: usize, bytes: &[Vec<u8>], mut take: impl FnMut(&[u8])) -> f64 {
    let start = Instant::now();
    for i in 0..events {
        take(&bytes[i % bytes.len()]);
    }
    start.elapsed().as_secs_f64() * 1e6 / events as f64
}

fn main() {
    let events: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(5000);
    let status_only = vec![serde_json::to_vec(&work(1)).expect("json")];
    let generations: Vec<Vec<u8>> = (1..=2)
        .map(|g| serde_json::to_vec(&work(g)).expect("json"))
        .collect();
    let whole = |manifests: &Manifests, bytes: &[u8]| {
        let g: DeserializeGuard<Work> = serde_json::from_slice(bytes).expect("json");
        let mut w = g.0.expect("a Work");
        manifests.take(&mut w);
    };
    let served = |manifests: &Manifests, bytes: &[u8]| {
        let g: DeserializeGuard<Incoming> = serde_json::from_slice(bytes).expect("json");
        let mut i = g.0.expect("a Work");
        manifests.take_incoming(&mut i);
        let _ = i.into_work();
    };
    println!(
        "A Work of 50 ConfigMaps and their status entries, {} bytes as the hub serves it; {events} events each.",
        status_only[0].len()
    );
    println!();
    println!(
        "| event | decoded whole, then kept lean (before), µs | decoded as served (now), µs | ratio |"
    );
    println!("|---|---:|---:|---:|");
    for (what, bytes) in [
        ("status only (same generation)", &status_only),
        ("a new generation each time", &generations),
    ] {
        let before = {
            let m = Manifests::default();
            per_event(events, bytes, |b| whole(&m, b))
        };
        let now = {
            let m = Manifests::default();
            per_event(events, bytes, |b| served(&m, b))
        };
        println!("| {what} | {before:.0} | {now:.0} | {:.2} |", now / before);
    }
}
