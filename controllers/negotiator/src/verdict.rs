//! Pure: the negotiation of one resource type and the verdicts it gives.
//!
//! [`negotiate`] takes the reference schema of the type on the hub ([`Reference`]) and the
//! members' imports, and computes the negotiated schema and every import's `Compatible`
//! condition:
//!
//! - **Enforced** (the hub serves the type: built in, or a CRD Flotilla did not create): the
//!   hub's schema is the negotiated one; each import is compared against it.
//! - **Published** (the hub serves a CRD Flotilla created from this negotiation): that schema
//!   stays. It is never narrowed automatically; imports with `schemaUpdateStrategy:
//!   UpdatePublished` may widen it (their LCD replaces it only if it accepts everything it
//!   accepts). An import that cannot accept it is `Compatible=False` with the paths.
//! - Otherwise the least common denominator of the imports that may update it
//!   (`schemaUpdateStrategy` other than `UpdateNever`; all of them if none may) is negotiated.
//!
//! Each import is compared with `flotilla_schema::compare(negotiated, import)` ("does the member
//! accept everything the negotiated schema accepts?"): identical → `True/Identical`; only safe
//! differences → `True/Superset`; a narrowing (a missing field, a smaller enum or bound) →
//! `False/MissingFields` (objects that do not use it can still go there); a breaking change →
//! `False/Incompatible`; undecidable → `Unknown/Undecidable`. An import whose schema cannot be
//! read (recursive, dangling `$ref`, too large, not structural) is `Unknown/Undecidable` with the
//! error and its path, and takes no part in the negotiation.

use flotilla_api::condition::Verdict;
use flotilla_api::{
    ApiResourceImport, Compatibility, ConditionStatus, DifferenceVerdict, ImportSummary,
    ResourceScope, SchemaDifference, SchemaUpdateStrategy, conditions, reasons,
};
use flotilla_schema::{
    Change, Comparison, Limits, Schema, SchemaError, Verdict as SchemaVerdict, compare_parsed,
    lcd_of_parsed,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde_json::Value;

/// The most differences kept on an import (the CRD allows 100).
pub const MAX_DIFFERENCES: usize = 100;

/// How many paths a condition message names before it says "and N more".
const PATHS_IN_MESSAGE: usize = 10;

/// The verdict on one import: its `Compatible` condition and its differences.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportVerdict {
    pub condition: Verdict,
    pub differences: Vec<SchemaDifference>,
}

fn compatible(status: &'static str, reason: &'static str, message: String) -> ImportVerdict {
    ImportVerdict {
        condition: Verdict::new(conditions::COMPATIBLE, status, reason, message),
        differences: Vec::new(),
    }
}

/// Not decided yet: never "incompatible".
pub fn pending(message: impl Into<String>) -> ImportVerdict {
    compatible("Unknown", reasons::PENDING, message.into())
}

/// The import's schema cannot be read; the error names the path.
pub fn undecidable(error: &SchemaError) -> ImportVerdict {
    compatible(
        "Unknown",
        reasons::UNDECIDABLE,
        format!("the member's schema cannot be compared: {error}"),
    )
}

fn difference_verdict(v: SchemaVerdict) -> DifferenceVerdict {
    match v {
        SchemaVerdict::Safe => DifferenceVerdict::Safe,
        SchemaVerdict::Narrowing => DifferenceVerdict::Narrowing,
        SchemaVerdict::Breaking => DifferenceVerdict::Breaking,
        SchemaVerdict::Unknown => DifferenceVerdict::Unknown,
    }
}

/// `path (Kind), path (Kind), ... and N more`.
fn paths(changes: &[&Change]) -> String {
    let mut out = changes
        .iter()
        .take(PATHS_IN_MESSAGE)
        .map(|c| format!("{} ({})", c.path, c.kind))
        .collect::<Vec<_>>()
        .join(", ");
    if changes.len() > PATHS_IN_MESSAGE {
        out.push_str(&format!(" and {} more", changes.len() - PATHS_IN_MESSAGE));
    }
    out
}

/// The verdict of a comparison of the negotiated schema (old) with an import (new).
pub fn judge(comparison: &Comparison) -> ImportVerdict {
    let mut changes: Vec<&Change> = comparison.changes.iter().collect();
    // Worst first, so the kept differences and the message name what matters.
    changes.sort_by_key(|c| std::cmp::Reverse(c.verdict));
    let not_safe: Vec<&Change> = changes
        .iter()
        .copied()
        .filter(|c| c.verdict != SchemaVerdict::Safe)
        .collect();
    let more = |kept: usize| {
        if changes.len() > kept {
            format!(" ({} differences, {kept} listed)", changes.len())
        } else {
            String::new()
        }
    };
    let mut verdict = match comparison.verdict() {
        _ if comparison.is_identical() => compatible(
            "True",
            reasons::IDENTICAL,
            "the member's schema is the same as the negotiated one".into(),
        ),
        SchemaVerdict::Safe => compatible(
            "True",
            reasons::SUPERSET,
            format!(
                "the member accepts everything the negotiated schema accepts, and more: {}",
                paths(&changes)
            ),
        ),
        SchemaVerdict::Narrowing => compatible(
            "False",
            reasons::MISSING_FIELDS,
            format!(
                "the member cannot accept everything the negotiated schema accepts; objects that \
                 do not use these can still go there: {}",
                paths(&not_safe)
            ),
        ),
        SchemaVerdict::Breaking => compatible(
            "False",
            reasons::INCOMPATIBLE,
            format!(
                "the member's schema is incompatible with the negotiated one: {}",
                paths(&not_safe)
            ),
        ),
        SchemaVerdict::Unknown => compatible(
            "Unknown",
            reasons::UNDECIDABLE,
            format!("these differences cannot be decided: {}", paths(&not_safe)),
        ),
    };
    verdict.differences = changes
        .iter()
        .take(MAX_DIFFERENCES)
        .map(|c| SchemaDifference {
            path: c.path.clone(),
            change: c.kind.to_string(),
            verdict: difference_verdict(c.verdict),
            message: Some(c.message.clone()).filter(|m| !m.is_empty()),
        })
        .collect();
    verdict
        .condition
        .message
        .push_str(&more(verdict.differences.len()));
    verdict
}

/// What the hub says about the type.
#[derive(Clone, Debug, PartialEq)]
pub enum Reference {
    /// The hub serves the type itself: `reason` is `BuiltIn` or `HubCRD`.
    Enforced { reason: &'static str, schema: Value },
    /// The hub serves a CRD Flotilla published from this negotiation, with this schema.
    Published(Value),
    /// The hub does not serve the type.
    None,
}

/// The strategy an import's `requested` one amounts to: a member may ask never to update the
/// negotiated schema, or to update it while unpublished, but updating a published schema needs the
/// hub admin's consent too (`allowPublishedUpdates` of the NegotiatedAPIResource).
pub fn effective_strategy(
    requested: SchemaUpdateStrategy,
    allow_published_updates: bool,
) -> SchemaUpdateStrategy {
    match requested {
        SchemaUpdateStrategy::UpdatePublished if !allow_published_updates => {
            SchemaUpdateStrategy::UpdateUnpublished
        }
        other => other,
    }
}

/// One member's import, as the negotiation reads it.
#[derive(Clone, Copy, Debug)]
pub struct ImportInput<'a> {
    pub cluster: &'a str,
    pub schema: &'a Value,
    pub strategy: SchemaUpdateStrategy,
    /// The scope the member serves the type with.
    pub scope: ResourceScope,
}

/// The outcome of a negotiation.
#[derive(Clone, Debug, PartialEq)]
pub struct Negotiation {
    /// The negotiated (or enforced) schema; `None` when there is none.
    pub schema: Option<Value>,
    /// The `Submitted` condition.
    pub submitted: Verdict,
    /// The `Enforced` condition.
    pub enforced: Verdict,
    /// One verdict per input import, in order.
    pub verdicts: Vec<ImportVerdict>,
}

/// [`negotiate`] for a type of `scope` (the NegotiatedAPIResource's, or the hub's): an import
/// that serves the type with another scope is Incompatible (`ScopeDiffers`) and takes no part in
/// the negotiation, whatever its schema.
pub fn negotiate_scoped(
    scope: ResourceScope,
    reference: &Reference,
    imports: &[ImportInput<'_>],
    limits: &Limits,
) -> Negotiation {
    let same: Vec<ImportInput<'_>> = imports
        .iter()
        .filter(|i| i.scope == scope)
        .copied()
        .collect();
    let mut negotiation = negotiate(reference, &same, limits);
    let mut verdicts = std::mem::take(&mut negotiation.verdicts).into_iter();
    negotiation.verdicts = imports
        .iter()
        .map(|i| {
            if i.scope == scope {
                verdicts.next().unwrap_or_else(|| pending(""))
            } else {
                compatible(
                    "False",
                    reasons::SCOPE_DIFFERS,
                    format!(
                        "the member serves the type {}-scoped, the negotiated type is {}-scoped: \
                         none of its objects can go there",
                        i.scope.as_str(),
                        scope.as_str()
                    ),
                )
            }
        })
        .collect();
    negotiation
}

/// Negotiates one type (see the module docs).
pub fn negotiate(
    reference: &Reference,
    imports: &[ImportInput<'_>],
    limits: &Limits,
) -> Negotiation {
    let enforced = match reference {
        Reference::Enforced { reason, .. } => Verdict::new(
            conditions::ENFORCED,
            "True",
            reason,
            if *reason == reasons::BUILT_IN {
                "the type is built into the hub: its schema is enforced and imports are checked \
                 against it"
            } else {
                "the hub serves the type from a CRD Flotilla did not create: its schema is \
                 enforced and imports are checked against it"
            },
        ),
        _ => Verdict::new(
            conditions::ENFORCED,
            "False",
            reasons::NOT_ENFORCED,
            "the hub does not serve the type itself: the negotiated schema is used",
        ),
    };
    let parsed: Vec<Result<Schema, SchemaError>> = imports
        .iter()
        .map(|i| Schema::from_value_with(i.schema, limits))
        .collect();
    let readable: Vec<usize> = (0..imports.len()).filter(|&i| parsed[i].is_ok()).collect();
    let schema_of = |i: usize| parsed[i].as_ref().ok();

    let fail = |reason: &'static str, message: String, verdict: ImportVerdict| Negotiation {
        schema: None,
        submitted: Verdict::new(conditions::SUBMITTED, "False", reason, message),
        enforced: enforced.clone(),
        verdicts: parsed
            .iter()
            .map(|p| match p {
                Err(e) => undecidable(e),
                Ok(_) => verdict.clone(),
            })
            .collect(),
    };
    if imports.is_empty() && !matches!(reference, Reference::Enforced { .. }) {
        return fail(
            reasons::NO_IMPORTS,
            "no member has imported this type yet".into(),
            pending(""),
        );
    }

    // The LCD of the imports at `indices`.
    let lcd_of = |indices: &[usize]| {
        let schemas: Vec<Schema> = indices
            .iter()
            .filter_map(|&i| schema_of(i).cloned())
            .collect();
        lcd_of_parsed(&schemas)
    };
    let may_update = |i: &usize, published: bool| match imports[*i].strategy {
        SchemaUpdateStrategy::UpdateNever => false,
        SchemaUpdateStrategy::UpdateUnpublished => !published,
        SchemaUpdateStrategy::UpdatePublished => true,
    };

    let (negotiated, how): (Schema, String) = match reference {
        Reference::Enforced { schema, .. } | Reference::Published(schema) => {
            let fixed = match Schema::from_value_with(schema, limits) {
                Ok(s) => s,
                Err(e) => {
                    return fail(
                        reasons::NO_COMMON_SCHEMA,
                        format!("the hub's schema of the type cannot be read: {e}"),
                        pending("the hub's schema cannot be read"),
                    );
                }
            };
            let updaters: Vec<usize> = readable
                .iter()
                .copied()
                .filter(|i| may_update(i, true))
                .collect();
            let widened = match reference {
                Reference::Published(_) if !updaters.is_empty() => lcd_of(&updaters)
                    .ok()
                    .and_then(|l| Schema::from_value_with(&l.schema, limits).ok())
                    .filter(|l| {
                        let c = compare_parsed(&fixed, l);
                        c.verdict() == SchemaVerdict::Safe && !c.is_identical()
                    }),
                _ => None,
            };
            match (reference, widened) {
                (_, Some(w)) => (
                    w,
                    format!(
                        "the published schema was widened by the imports that may update it ({})",
                        updaters
                            .iter()
                            .map(|&i| imports[i].cluster)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ),
                (Reference::Published(_), None) => (
                    fixed,
                    "the published schema is kept (it is never narrowed automatically)".into(),
                ),
                _ => (fixed, "the hub's schema is enforced".into()),
            }
        }
        Reference::None => {
            let mut contributors: Vec<usize> = readable
                .iter()
                .copied()
                .filter(|i| may_update(i, false))
                .collect();
            if contributors.is_empty() {
                contributors = readable.clone();
            }
            if contributors.is_empty() {
                return fail(
                    reasons::NO_COMMON_SCHEMA,
                    "no import's schema can be read".into(),
                    pending(""),
                );
            }
            match lcd_of(&contributors) {
                Err(e) => {
                    return fail(
                        reasons::NO_COMMON_SCHEMA,
                        format!("the imports have no common schema: {e}"),
                        compatible(
                            "Unknown",
                            reasons::UNDECIDABLE,
                            format!("the imports have no common schema: {e}"),
                        ),
                    );
                }
                Ok(lcd) => {
                    let conflicts: Vec<&Change> = lcd.conflicts.iter().collect();
                    let mut how = format!(
                        "the least common denominator of {} import(s) ({})",
                        contributors.len(),
                        contributors
                            .iter()
                            .map(|&i| imports[i].cluster)
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                    if !conflicts.is_empty() {
                        how.push_str(&format!(
                            "; left out because the members disagree: {}",
                            paths(&conflicts)
                        ));
                    }
                    match Schema::from_value_with(&lcd.schema, limits) {
                        Ok(s) => (s, how),
                        Err(e) => {
                            return fail(
                                reasons::NO_COMMON_SCHEMA,
                                format!("the negotiated schema cannot be read back: {e}"),
                                pending(""),
                            );
                        }
                    }
                }
            }
        }
    };

    let verdicts = parsed
        .iter()
        .map(|p| match p {
            Ok(s) => judge(&compare_parsed(&negotiated, s)),
            Err(e) => undecidable(e),
        })
        .collect();
    Negotiation {
        schema: Some(negotiated.to_value()),
        submitted: Verdict::new(conditions::SUBMITTED, "True", reasons::NEGOTIATED, how),
        enforced,
        verdicts,
    }
}

/// The short form of an import's `Compatible` condition, for the NegotiatedAPIResource.
pub fn summary(cluster: &str, conditions: &[Condition]) -> ImportSummary {
    let c = flotilla_api::condition::find_condition(conditions, conditions::COMPATIBLE);
    ImportSummary {
        cluster: cluster.to_string(),
        compatible: c
            .map(|c| ConditionStatus::parse(&c.status))
            .unwrap_or_default(),
        reason: Some(
            c.map(|c| c.reason.clone())
                .unwrap_or_else(|| reasons::PENDING.to_string()),
        ),
    }
}

/// What a Cluster's status says about one of its imports: Compatible, Partial (some fields
/// missing), Incompatible or Pending (not compared yet, or undecidable), with the message.
pub fn compatibility(import: &ApiResourceImport) -> (Compatibility, Option<String>) {
    let conditions = import
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    match flotilla_api::condition::find_condition(conditions, conditions::COMPATIBLE) {
        None => (
            Compatibility::Pending,
            Some("not compared with the negotiated schema yet".into()),
        ),
        Some(c) => {
            let compat = match (ConditionStatus::parse(&c.status), c.reason.as_str()) {
                (ConditionStatus::True, _) => Compatibility::Compatible,
                (ConditionStatus::False, reasons::MISSING_FIELDS) => Compatibility::Partial,
                (ConditionStatus::False, _) => Compatibility::Incompatible,
                (ConditionStatus::Unknown, _) => Compatibility::Pending,
            };
            (compat, Some(format!("{}: {}", c.reason, c.message)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn widget(props: Value) -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": props}}})
    }

    fn base() -> Value {
        widget(json!({"size": {"type": "integer"}, "color": {"type": "string"}}))
    }

    fn input<'a>(cluster: &'a str, schema: &'a Value) -> ImportInput<'a> {
        ImportInput {
            cluster,
            schema,
            strategy: SchemaUpdateStrategy::UpdateUnpublished,
            scope: ResourceScope::Namespaced,
        }
    }

    /// A member that serves the type with another scope is Incompatible whatever its schema,
    /// and does not narrow what the others negotiate.
    #[test]
    fn an_import_of_another_scope_differs_and_takes_no_part() {
        let wide = widget(json!({"a": {"type": "string"}, "b": {"type": "string"}}));
        let narrow = widget(json!({"a": {"type": "string"}}));
        let mut cluster_scoped = input("m2", &narrow);
        cluster_scoped.scope = ResourceScope::Cluster;
        let imports = [input("m1", &wide), cluster_scoped, input("m3", &wide)];
        let n = negotiate_scoped(
            ResourceScope::Namespaced,
            &Reference::None,
            &imports,
            &Limits::default(),
        );
        assert_eq!(
            reasons_of(&n),
            [
                ("True", reasons::IDENTICAL),
                ("False", reasons::SCOPE_DIFFERS),
                ("True", reasons::IDENTICAL)
            ]
        );
        assert!(
            n.verdicts[1]
                .condition
                .message
                .contains("Cluster-scoped, the negotiated type is Namespaced-scoped"),
            "{:?}",
            n.verdicts[1]
        );
        // m2's narrower schema left nothing out.
        assert_eq!(
            n.schema
                .as_ref()
                .map(|s| s["properties"]["spec"]["properties"]
                    .as_object()
                    .map(|p| p.len())),
            Some(Some(2))
        );
    }

    fn reasons_of(n: &Negotiation) -> Vec<(&str, &str)> {
        n.verdicts
            .iter()
            .map(|v| (v.condition.status, v.condition.reason))
            .collect()
    }

    #[test]
    fn three_shapes_negotiate_to_their_common_part() {
        let same = base();
        let added = widget(
            json!({"size": {"type": "integer"}, "color": {"type": "string"},
                                  "shape": {"type": "string"}}),
        );
        let lacks = widget(json!({"size": {"type": "integer"}}));
        let retyped = widget(json!({"size": {"type": "integer"}, "color": {"type": "integer"}}));
        let imports = [
            input("a", &same),
            input("b", &added),
            input("c", &retyped),
            input("d", &lacks),
        ];
        let n = negotiate(&Reference::None, &imports, &Limits::default());
        let schema = n.schema.as_ref().expect("negotiated");
        let props = &schema["properties"]["spec"]["properties"];
        assert!(props.get("shape").is_none(), "{schema}");
        assert!(props.get("color").is_none(), "{schema}");
        assert_eq!(props["size"]["type"], "integer", "{schema}");
        assert_eq!(n.submitted.status, "True");
        assert!(
            n.submitted.message.contains(".spec.color"),
            "a conflict is named: {}",
            n.submitted.message
        );
        assert_eq!(n.enforced.reason, reasons::NOT_ENFORCED);
        // The LCD is accepted by every import.
        for v in &n.verdicts {
            assert_eq!(v.condition.status, "True", "{v:?}");
        }
        assert_eq!(n.verdicts[3].condition.reason, reasons::IDENTICAL);
        assert_eq!(n.verdicts[1].condition.reason, reasons::SUPERSET);
        assert!(
            n.verdicts[1]
                .differences
                .iter()
                .any(|d| d.path == ".spec.shape" && d.verdict == DifferenceVerdict::Safe)
        );
    }

    #[test]
    fn a_published_schema_is_never_narrowed() {
        let published = base();
        let lacks = widget(json!({"size": {"type": "integer"}}));
        let retyped = widget(json!({"size": {"type": "string"}, "color": {"type": "string"}}));
        let same = base();
        let imports = [input("a", &same), input("b", &lacks), input("c", &retyped)];
        let n = negotiate(
            &Reference::Published(published.clone()),
            &imports,
            &Limits::default(),
        );
        assert_eq!(
            n.schema.as_ref(),
            Some(&Schema::from_value(&published).expect("ok").to_value())
        );
        assert_eq!(
            reasons_of(&n),
            [
                ("True", reasons::IDENTICAL),
                ("False", reasons::MISSING_FIELDS),
                ("False", reasons::INCOMPATIBLE)
            ]
        );
        assert!(n.verdicts[1].condition.message.contains(".spec.color"));
        assert!(n.verdicts[2].condition.message.contains(".spec.size"));
        assert_eq!(
            n.verdicts[2].differences[0].verdict,
            DifferenceVerdict::Breaking
        );
    }

    #[test]
    fn a_member_widens_a_published_schema_only_with_the_admins_consent() {
        use SchemaUpdateStrategy::*;
        assert_eq!(
            effective_strategy(UpdatePublished, false),
            UpdateUnpublished
        );
        assert_eq!(effective_strategy(UpdatePublished, true), UpdatePublished);
        for s in [UpdateNever, UpdateUnpublished] {
            assert_eq!(effective_strategy(s, false), s);
            assert_eq!(effective_strategy(s, true), s);
        }
        // The member asks to widen; without consent the published schema stays as it is.
        let published = widget(json!({"size": {"type": "integer"}}));
        let wider = base();
        let mut a = input("a", &wider);
        a.strategy = effective_strategy(UpdatePublished, false);
        let n = negotiate(
            &Reference::Published(published.clone()),
            &[a],
            &Limits::default(),
        );
        let schema = n.schema.expect("negotiated");
        assert!(
            schema["properties"]["spec"]["properties"]
                .get("color")
                .is_none(),
            "{schema}"
        );
    }

    #[test]
    fn imports_that_may_update_a_published_schema_only_widen_it() {
        let published = widget(json!({"size": {"type": "integer"}}));
        let wider = base();
        let mut a = input("a", &wider);
        a.strategy = SchemaUpdateStrategy::UpdatePublished;
        let n = negotiate(&Reference::Published(published), &[a], &Limits::default());
        let schema = n.schema.expect("negotiated");
        assert!(
            schema["properties"]["spec"]["properties"]
                .get("color")
                .is_some()
        );
        assert_eq!(n.verdicts[0].condition.reason, reasons::IDENTICAL);
    }

    #[test]
    fn an_enforced_schema_checks_every_import() {
        let hub = base();
        let lacks = widget(json!({"size": {"type": "integer"}}));
        let n = negotiate(
            &Reference::Enforced {
                reason: reasons::HUB_CRD,
                schema: hub,
            },
            &[input("a", &lacks)],
            &Limits::default(),
        );
        assert_eq!(n.enforced.status, "True");
        assert_eq!(n.enforced.reason, reasons::HUB_CRD);
        assert_eq!(reasons_of(&n), [("False", reasons::MISSING_FIELDS)]);
    }

    #[test]
    fn unreadable_imports_are_undecidable_with_the_path_and_left_out() {
        let dangling =
            json!({"type": "object", "properties": {"spec": {"$ref": "#/definitions/Gone"}}});
        let good = base();
        let n = negotiate(
            &Reference::None,
            &[input("a", &dangling), input("b", &good)],
            &Limits::default(),
        );
        assert_eq!(
            reasons_of(&n),
            [
                ("Unknown", reasons::UNDECIDABLE),
                ("True", reasons::IDENTICAL)
            ]
        );
        assert!(
            n.verdicts[0].condition.message.contains(".spec"),
            "{:?}",
            n.verdicts[0]
        );
        let none = negotiate(&Reference::None, &[], &Limits::default());
        assert_eq!(none.submitted.reason, reasons::NO_IMPORTS);
    }

    #[test]
    fn differences_are_bounded() {
        let many: serde_json::Map<String, Value> = (0..150)
            .map(|i| (format!("f{i}"), json!({"type": "string"})))
            .collect();
        let negotiated = widget(Value::Object(many));
        let empty = widget(json!({}));
        let c = flotilla_schema::compare(&negotiated, &empty).expect("comparable");
        let v = judge(&c);
        assert_eq!(v.differences.len(), MAX_DIFFERENCES);
        assert!(
            v.condition.message.contains("150 differences, 100 listed"),
            "{}",
            v.condition.message
        );
        assert!(
            v.condition.message.contains("and 140 more"),
            "{}",
            v.condition.message
        );
    }

    #[test]
    fn summaries_and_cluster_compatibility_follow_the_condition() {
        let mut import: ApiResourceImport = serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "APIResourceImport",
            "metadata": {"name": "widgets.v1.example.com", "namespace": "flotilla-cluster-a"},
            "spec": {"groupVersion": {"group": "example.com", "version": "v1"},
                     "names": {"plural": "widgets", "kind": "Widget"}, "scope": "Namespaced",
                     "openAPIV3Schema": {"type": "object"}},
        }))
        .expect("an import");
        assert_eq!(compatibility(&import).0, Compatibility::Pending);
        assert_eq!(summary("a", &[]).compatible, ConditionStatus::Unknown);
        for (status, reason, expected) in [
            ("True", reasons::SUPERSET, Compatibility::Compatible),
            ("False", reasons::MISSING_FIELDS, Compatibility::Partial),
            ("False", reasons::INCOMPATIBLE, Compatibility::Incompatible),
            ("Unknown", reasons::UNDECIDABLE, Compatibility::Pending),
        ] {
            let c = Verdict::new(conditions::COMPATIBLE, status, reason, "m")
                .into_condition(k8s_openapi::jiff::Timestamp::UNIX_EPOCH, None);
            import.status = Some(flotilla_api::ApiResourceImportStatus {
                conditions: vec![c.clone()],
                differences: vec![],
            });
            assert_eq!(compatibility(&import).0, expected);
            let s = summary("a", &[c]);
            assert_eq!(s.compatible.as_str(), status);
            assert_eq!(s.reason.as_deref(), Some(reason));
        }
    }
}
