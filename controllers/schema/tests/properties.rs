//! Property tests: compare(x, x) is identical; the LCD of random schemas is accepted by every
//! input; reading never panics.

use flotilla_schema::{Schema, Verdict, compare_parsed, lcd_of_parsed};
use proptest::prelude::*;
use serde_json::{Value, json};

/// A random scalar schema: types, formats, enums, bounds, patterns, flags. No defaults: two
/// inputs with different defaults cannot both be honoured, which [`lcd`] reports as a conflict.
fn scalar() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            Just("integer"),
            Just("number"),
            Just("string"),
            Just("int-or-string"),
            Just("boolean")
        ],
        proptest::option::of(prop::sample::subsequence(vec![1, 2, 3, 4], 1..4)),
        proptest::option::of(0u32..5),
        proptest::option::of(5u32..20),
        proptest::option::of(prop_oneof![Just("^a"), Just("b$"), Just("^[a-z]+$")]),
        proptest::option::of(prop_oneof![Just(2u32), Just(3), Just(4)]),
        any::<bool>(),
        proptest::option::of(prop_oneof![Just("int32"), Just("int64")]),
    )
        .prop_map(|(t, en, lo, hi, pattern, mult, nullable, format)| {
            let mut s = match t {
                "int-or-string" => json!({"x-kubernetes-int-or-string": true}),
                t => json!({"type": t}),
            };
            let numeric = matches!(t, "integer" | "number");
            if let Some(en) = en
                && numeric
            {
                s["enum"] = json!(en);
            }
            if numeric {
                if let Some(lo) = lo {
                    s["minimum"] = json!(lo);
                }
                if let Some(hi) = hi {
                    s["maximum"] = json!(hi);
                }
                if let Some(m) = mult {
                    s["multipleOf"] = json!(m);
                }
                if t == "integer"
                    && let Some(f) = format
                {
                    s["format"] = json!(f);
                }
            }
            if t == "string" {
                if let Some(lo) = lo {
                    s["minLength"] = json!(lo);
                }
                if let Some(hi) = hi {
                    s["maxLength"] = json!(hi);
                }
                if let Some(p) = pattern {
                    s["pattern"] = json!(p);
                }
            }
            if nullable {
                s["nullable"] = json!(true);
            }
            s
        })
}

/// A random structural schema over a small set of property names, so that random schemas
/// overlap.
fn schema() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            (
                prop::collection::btree_map(
                    prop_oneof![Just("a"), Just("b"), Just("c"), Just("d")],
                    inner.clone(),
                    0..4
                ),
                prop::sample::subsequence(vec!["a", "b"], 0..2),
                any::<bool>(),
                proptest::option::of(0u32..3),
            )
                .prop_map(|(props, required, preserve, max_props)| {
                    let props: serde_json::Map<String, Value> =
                        props.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
                    let required: Vec<&str> = required
                        .into_iter()
                        .filter(|r| props.contains_key(*r))
                        .collect();
                    let mut s = json!({"type": "object", "properties": props});
                    if !required.is_empty() {
                        s["required"] = json!(required);
                    }
                    if preserve {
                        s["x-kubernetes-preserve-unknown-fields"] = json!(true);
                    }
                    if let Some(m) = max_props {
                        s["minProperties"] = json!(m);
                    }
                    s
                }),
            (inner.clone(), any::<bool>(), proptest::option::of(0u32..4)).prop_map(
                |(items, set, max)| {
                    let mut s = json!({"type": "array", "items": items});
                    if set {
                        s["x-kubernetes-list-type"] = json!("set");
                    }
                    if let Some(m) = max {
                        s["maxItems"] = json!(m);
                    }
                    s
                }
            ),
            inner
                .clone()
                .prop_map(|v| json!({"type": "object", "additionalProperties": v})),
        ]
    })
}

fn parse(v: &Value) -> Schema {
    Schema::from_value(v).expect("generated schemas are structural")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn compare_with_itself_is_identical(s in schema()) {
        let s = parse(&s);
        let c = compare_parsed(&s, &s);
        prop_assert!(c.is_identical(), "{:#?}", c.changes);
    }

    #[test]
    fn writing_and_reading_back_is_lossless(s in schema()) {
        let parsed = parse(&s);
        prop_assert_eq!(parse(&parsed.to_value()), parsed);
    }

    #[test]
    fn every_input_accepts_what_the_lcd_accepts(inputs in prop::collection::vec(schema(), 1..5)) {
        let parsed: Vec<Schema> = inputs.iter().map(parse).collect();
        if let Ok(result) = lcd_of_parsed(&parsed) {
            let negotiated = parse(&result.schema);
            for (i, input) in parsed.iter().enumerate() {
                // Every input accepts everything the LCD accepts ...
                let c = compare_parsed(&negotiated, input);
                prop_assert_eq!(c.verdict(), Verdict::Safe, "input {}: {:#?}", i, c.changes);
                // ... and the LCD only narrows each input, it never reinterprets it.
                let c = compare_parsed(input, &negotiated);
                prop_assert!(
                    c.changes.iter().all(|ch| matches!(ch.verdict, Verdict::Safe | Verdict::Narrowing)),
                    "input {}: {:#?}", i, c.changes
                );
            }
        }
    }

    #[test]
    fn arbitrary_json_never_panics(v in arbitrary_json()) {
        let _ = Schema::from_value(&v);
        let _ = flotilla_schema::check_object(&v, &json!({"type": "object"}));
    }
}

fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-z$#/]{0,8}".prop_map(Value::from),
        prop_oneof![
            Just("object"),
            Just("array"),
            Just("string"),
            Just("#/definitions/a")
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    Just("type".to_string()),
                    Just("properties".to_string()),
                    Just("items".to_string()),
                    Just("$ref".to_string()),
                    Just("definitions".to_string()),
                    Just("a".to_string()),
                    Just("allOf".to_string()),
                    Just("additionalProperties".to_string()),
                    Just("enum".to_string()),
                ],
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}
