//! Times the negotiation of the real Deployment schema across 10 imports (the LCD plus the 10
//! comparisons of each import against it):
//! `cargo run --release -p flotilla-schema --example bench_negotiate`.

#[path = "../tests/support/deployment_imports.rs"]
mod imports;

use std::time::Instant;

fn main() {
    let imports = imports::ten_imports();
    let runs = 20;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        std::hint::black_box(imports::negotiate(std::hint::black_box(&imports)));
        times.push(started.elapsed());
    }
    times.sort();
    println!(
        "negotiate_deployment_10_imports: median {:?}, min {:?}, max {:?} ({runs} runs; LCD + 10 comparisons)",
        times[runs / 2],
        times[0],
        times[runs - 1]
    );
}
