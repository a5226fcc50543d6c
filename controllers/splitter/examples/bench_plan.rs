//! The splitter's plan alone, without I/O: what one pass costs in CPU for a Placement of N
//! ConfigMaps placed on M members, on a settled fleet after one object was edited (the pass of a
//! single edit). Every Work is as the hub has it once the members applied it (lean, with a status
//! entry per manifest), so the pass writes the Works of the edited object only.
//!
//! Usage: `cargo run --release -p flotilla-splitter --example bench_plan [objects] [members,...]
//! [passes]` (defaults: 200, `3,10,20`, 200). Prints a Markdown table: per member count, the
//! copies, the Works, and the pass's plan time (mean, p50, p99 of `passes`) in ms and per copy
//! in µs. Run it at two commits to compare them; the machine's other load moves it, so compare
//! runs made one after the other.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use flotilla_api::{Cluster, Placement, Work, conditions};
use flotilla_splitter::digest::lean;
use flotilla_splitter::keys::{key_of, resource};
use flotilla_splitter::observation::{Listed, Observation};
use flotilla_splitter::plan::{Plan, plan};
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::{Value, json};

/// The controllers' allocator, so that the plan's allocations cost what they cost the splitter.
#[global_allocator]
static GLOBAL: flotilla_runtime::allocator::Jemalloc = flotilla_runtime::allocator::Jemalloc;

const NOW: &str = "2026-06-01T12:00:00Z";

fn cluster(name: &str) -> Result<Arc<Cluster>> {
    Ok(Arc::new(serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "Cluster",
        "metadata": {"name": name},
        "spec": {"syncMode": "Push", "kubeconfigSecretRef": {"name": "kc"}},
        "status": {
            "allocatable": {"pods": "100"},
            "conditions": [
                {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Ready", "status": "True", "reason": "Reachable", "message": "",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ]
        }
    }))?))
}

/// A ConfigMap as the bench of the user's path makes them: 256 hex digits of data.
fn configmap(i: usize, version: &str) -> Result<DynamicObject> {
    let payload: String = (0..32)
        .map(|j| format!("{:08x}", (i * 7919 + j * 104_729) as u32))
        .collect();
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("bench-{i}"), "namespace": "bench", "uid": format!("uid-{i}"),
                     "resourceVersion": "1", "labels": {"bench": "user"}},
        "data": {"version": version, "payload": payload},
    }))?)
}

/// A Work as the splitter's cache holds it once its member applied every manifest.
fn applied(wanted: &Work) -> Result<Arc<Work>> {
    let mut w = wanted.clone();
    let condition = |type_: &str| {
        json!({"type": type_, "status": "True", "reason": "R", "message": "",
               "lastTransitionTime": NOW, "observedGeneration": 1})
    };
    let entries: Vec<Value> = w
        .spec
        .manifests
        .iter()
        .enumerate()
        .map(|(i, m)| {
            json!({"ordinal": i,
                   "identity": {"group": "", "version": "v1", "kind": "ConfigMap",
                                "namespace": m.metadata.namespace, "name": m.name_any()},
                   "applied": "True", "available": "True"})
        })
        .collect();
    lean(&mut w);
    w.metadata.uid = Some(format!("work-{}", wanted.name_any()));
    w.metadata.resource_version = Some("7".into());
    w.metadata.generation = Some(1);
    w.status = Some(serde_json::from_value(json!({
        "conditions": [condition(conditions::APPLIED), condition(conditions::AVAILABLE)],
        "observedGeneration": 1,
        "manifests": entries,
    }))?);
    Ok(Arc::new(w))
}

fn observation(
    placement: &Arc<Placement>,
    clusters: &[Arc<Cluster>],
    objects: Vec<DynamicObject>,
    works: Vec<Arc<Work>>,
) -> Result<Observation> {
    let types = vec![Listed {
        resource: resource("", "v1", "ConfigMap", "configmaps"),
        objects,
    }];
    Ok(Observation::of(
        placement.clone(),
        NOW.parse()?,
        clusters.to_vec(),
        types,
        works,
    ))
}

/// The Works once `p` was carried out and applied: the written ones replaced.
fn carried_out(p: &Plan, before: &[Arc<Work>]) -> Result<Vec<Arc<Work>>> {
    let mut works: Vec<Arc<Work>> = before
        .iter()
        .filter(|w| !p.writes.contains(&key_of(w)))
        .cloned()
        .collect();
    for id in &p.writes {
        works.push(applied(&p.wanted[id])?);
    }
    Ok(works)
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let objects: usize = args.next().map_or(Ok(200), |a| a.parse())?;
    let members: Vec<usize> = args
        .next()
        .unwrap_or_else(|| "3,10,20".into())
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let passes: usize = args.next().map_or(Ok(200), |a| a.parse())?;
    let placement: Arc<Placement> = Arc::new(serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
        "metadata": {"name": "user", "namespace": "bench", "generation": 1,
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"}]},
    }))?);
    println!(
        "| members | copies | Works | plan of a single edit's pass, mean / p50 / p99, ms | per copy, µs |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for m in members {
        let clusters: Vec<Arc<Cluster>> = (1..=m)
            .map(|i| cluster(&format!("member{i}")))
            .collect::<Result<_>>()?;
        let mut current: Vec<DynamicObject> = (0..objects)
            .map(|i| configmap(i, "v0"))
            .collect::<Result<_>>()?;
        // Settle: the first pass writes every Work, the next finds them applied.
        let first = plan(&observation(
            &placement,
            &clusters,
            current.clone(),
            vec![],
        )?)?;
        let mut works = carried_out(&first, &[])?;
        let settled = plan(&observation(
            &placement,
            &clusters,
            current.clone(),
            works.clone(),
        )?)?;
        anyhow::ensure!(settled.writes.is_empty(), "a settled fleet wrote Works");
        let mut times = Vec::with_capacity(passes);
        for pass in 0..passes {
            let edited = pass % objects;
            current[edited] = configmap(edited, &format!("v{}", pass + 1))?;
            let obs = observation(&placement, &clusters, current.clone(), works.clone())?;
            let started = Instant::now();
            let p = plan(&obs)?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            anyhow::ensure!(
                p.writes.len() == m,
                "an edit wrote {} Works on {m} members",
                p.writes.len()
            );
            works = carried_out(&p, &works)?;
        }
        times.sort_by(f64::total_cmp);
        let mean = times.iter().sum::<f64>() / times.len() as f64;
        let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
        let copies = objects * m;
        println!(
            "| {m} | {copies} | {} | {mean:.2} / {:.2} / {:.2} | {:.2} |",
            works.len(),
            at(0.5),
            at(0.99),
            mean * 1000.0 / copies as f64
        );
    }
    Ok(())
}
