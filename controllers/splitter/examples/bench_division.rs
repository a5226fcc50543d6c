//! Re-plans 10,000 Deployments over 100 clusters with the pure division code and prints how
//! long it took: `cargo run --release -p flotilla-splitter --example bench_division`.

use std::time::Instant;

use flotilla_splitter::division::{Candidate, Division, divide};

fn main() {
    let clusters: Vec<Candidate> = (0..100)
        .map(|i| Candidate::new(format!("member{i:03}"), 1 + (i % 7) as u64))
        .collect();
    // Each Deployment runs somewhere already; re-planning scales it and drops one cluster.
    let previous: Vec<(u32, Division)> = (0..10_000u32)
        .map(|i| {
            let total = 1 + i % 200;
            let d = divide(total, &clusters, &Division::new(), false).unwrap_or_default();
            (total, d)
        })
        .collect();
    let remaining: Vec<Candidate> = clusters[1..].to_vec();
    let started = Instant::now();
    let mut replicas: u64 = 0;
    for (total, prev) in &previous {
        let next = divide(total + 3, &remaining, prev, false).unwrap_or_default();
        replicas += next.values().map(|&n| u64::from(n)).sum::<u64>();
    }
    let elapsed = started.elapsed();
    println!("| workload | clusters | replicas placed | seconds |");
    println!("|---|---:|---:|---:|");
    println!(
        "| re-plan 10,000 Deployments (scale +3, one cluster gone) | 100 | {replicas} | {:.3} |",
        elapsed.as_secs_f64()
    );
}
