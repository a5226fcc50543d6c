//! The full apps/v1 Deployment schema (from a Kubernetes 1.37 API server's `/openapi/v3`,
//! descriptions stripped): negotiated across 10 imports that differ the way members of mixed
//! versions do.
//!
//! Benchmark hook: `cargo test --release -p flotilla-schema --test deployment -- --ignored
//! --nocapture` prints the time to negotiate the Deployment schema across 10 imports.

use std::time::Instant;

use flotilla_schema::{Schema, Verdict, check_parsed, compare_parsed, lcd_of_parsed};
use serde_json::{Value, json};

fn deployment() -> Value {
    let text = include_str!("../testdata/deployment-apps-v1.json");
    serde_json::from_str(text).expect("fixture is JSON")
}

fn spec(s: &mut Schema) -> &mut Schema {
    s.properties.get_mut("spec").expect("spec")
}

/// Ten imports of the Deployment schema: the fixture, and variations of it.
fn ten_imports() -> Vec<Schema> {
    let base = Schema::from_value(&deployment()).expect("the Deployment schema is structural");
    let mut imports = vec![base.clone(); 10];
    // An older member: no spec.minReadySeconds.
    spec(&mut imports[1]).properties.remove("minReadySeconds");
    // A member with a tighter bound.
    spec(&mut imports[2])
        .properties
        .get_mut("replicas")
        .expect("replicas")
        .maximum = Some(flotilla_schema::Bound {
        value: 100.0,
        exclusive: false,
    });
    // A member whose strategy type knows one value only.
    spec(&mut imports[3])
        .properties
        .get_mut("strategy")
        .expect("strategy")
        .properties
        .get_mut("type")
        .expect("type")
        .enum_values = Some(vec![json!("RollingUpdate")]);
    imports
}

fn negotiate(imports: &[Schema]) -> Value {
    let result = lcd_of_parsed(imports).expect("negotiable");
    let negotiated = Schema::from_value(&result.schema).expect("the LCD is structural");
    for input in imports {
        assert_eq!(compare_parsed(&negotiated, input).verdict(), Verdict::Safe);
    }
    result.schema
}

#[test]
fn the_deployment_schema_negotiates() {
    let imports = ten_imports();
    assert!(compare_parsed(&imports[0], &imports[0]).is_identical());
    let negotiated = negotiate(&imports);
    let spec = &negotiated["properties"]["spec"]["properties"];
    assert!(spec.get("minReadySeconds").is_none());
    assert_eq!(spec["replicas"]["maximum"], json!(100));
    assert_eq!(
        spec["strategy"]["properties"]["type"]["enum"],
        json!(["RollingUpdate"])
    );
    // Per object: a Deployment setting minReadySeconds cannot go to the older member.
    let object = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 3, "minReadySeconds": 5, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
                {"name": "web", "image": "nginx", "ports": [{"containerPort": 80}],
                 "resources": {"limits": {"cpu": "500m", "memory": 1024}}}]}}}});
    assert!(
        check_parsed(&object, &imports[0]).is_empty(),
        "{:#?}",
        check_parsed(&object, &imports[0])
    );
    let problems = check_parsed(&object, &imports[1]);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].path, ".spec.minReadySeconds");
}

#[test]
#[ignore = "benchmark: run with --release --ignored --nocapture"]
fn bench_negotiate_deployment_10_imports() {
    let imports = ten_imports();
    let runs = 20;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        std::hint::black_box(negotiate(std::hint::black_box(&imports)));
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
