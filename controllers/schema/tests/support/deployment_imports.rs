//! The real apps/v1 Deployment schema (`testdata/deployment-apps-v1.json`, descriptions
//! stripped) and ten imports of it that differ the way members of mixed versions do. Shared by
//! `tests/deployment.rs` and `examples/bench_negotiate.rs`.

use flotilla_schema::{Schema, Verdict, compare_parsed, lcd_of_parsed};
use serde_json::{Value, json};

fn deployment() -> Value {
    let text = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/deployment-apps-v1.json"
    ));
    serde_json::from_str(text).expect("fixture is JSON")
}

fn spec(s: &mut Schema) -> &mut Schema {
    s.properties.get_mut("spec").expect("spec")
}

/// Ten imports of the Deployment schema: the fixture, and variations of it.
pub fn ten_imports() -> Vec<Schema> {
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

pub fn negotiate(imports: &[Schema]) -> Value {
    let result = lcd_of_parsed(imports).expect("negotiable");
    let negotiated = Schema::from_value(&result.schema).expect("the LCD is structural");
    for input in imports {
        assert_eq!(compare_parsed(&negotiated, input).verdict(), Verdict::Safe);
    }
    result.schema
}
