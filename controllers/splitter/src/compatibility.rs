//! Pure: whether a member's API can take one object (Rule 5: an incompatible API is not an
//! outage). The negotiator's `APIResourceImport` of the object's type in the member's namespace
//! says whether the member accepts everything the hub accepts (`Compatible=True`). When it does
//! not, the object itself is checked against the member's schema: an object that uses only
//! fields the member has still goes there; one that sets a field the member lacks or cannot
//! accept, or that fails one of the member's CEL rules, does not, and the reason names the paths
//! (with the rule's message). What cannot be decided (a transition rule, a Kubernetes CEL
//! function the checker lacks) never excludes an object.

use flotilla_api::{ApiResourceImport, conditions, reasons};
use flotilla_schema::{ProblemKind, Schema, check_parsed};
use serde_json::Value;

/// Why a member cannot take an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incompatible {
    /// `Incompatible` or `MissingFields` (from the import's `Compatible` condition).
    pub reason: String,
    pub message: String,
}

/// At most this many paths in a message.
const MAX_PATHS: usize = 5;

/// What a member's API can take of one type, when its import says it cannot take everything the
/// hub can: the schema objects are checked against, parsed once for all objects of the type.
#[derive(Debug)]
pub struct MemberSchema {
    /// The import's `Compatible` reason (`Incompatible`, `MissingFields`).
    reason: String,
    schema: Schema,
}

impl MemberSchema {
    /// The schema to check objects against on the member whose import of the type is `import`,
    /// or `None` when there is nothing to check: no import (the negotiator has not imported the
    /// type from that member: the syncer reports what the member says), a compatible or
    /// undecided one (Pending, Undecidable), or a schema the checker cannot read (the import's
    /// condition says why).
    pub fn of(import: Option<&ApiResourceImport>) -> Option<Self> {
        let compatible = import?
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::COMPATIBLE)?;
        if compatible.status != "False" {
            return None;
        }
        let reason = Some(compatible.reason.clone())
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| reasons::INCOMPATIBLE.to_string());
        let schema = match Schema::from_value(&import?.spec.resource.open_api_v3_schema) {
            Ok(schema) => schema,
            // No object of the type goes there, whatever its schema.
            Err(_) if reason == reasons::SCOPE_DIFFERS => {
                Schema::from_value(&serde_json::json!({})).ok()?
            }
            Err(_) => return None,
        };
        Some(Self { reason, schema })
    }

    /// Whether the member can take `manifest` (the object as it would be applied there).
    pub fn check(&self, manifest: &Value) -> Result<(), Incompatible> {
        if self.reason == reasons::SCOPE_DIFFERS {
            return Err(Incompatible {
                reason: self.reason.clone(),
                message: "the member serves this type with another scope than the hub \
                          (namespaced against cluster-scoped): placed there, the object would \
                          change scope"
                    .into(),
            });
        }
        // Object metadata is the API server's own, whatever a CRD's schema says of it.
        let mut body = manifest.clone();
        if let Some(o) = body.as_object_mut() {
            o.remove("metadata");
        }
        let problems: Vec<_> = check_parsed(&body, &self.schema)
            .into_iter()
            .filter(|p| p.kind != ProblemKind::Undecidable)
            .collect();
        if problems.is_empty() {
            return Ok(());
        }
        let mut paths: Vec<String> = problems
            .iter()
            .take(MAX_PATHS)
            .map(|p| format!("{} ({})", p.path, p.message))
            .collect();
        if problems.len() > MAX_PATHS {
            paths.push(format!("and {} more", problems.len() - MAX_PATHS));
        }
        Err(Incompatible {
            reason: self.reason.clone(),
            message: format!(
                "the member's API for this type cannot take the object: {}",
                paths.join("; ")
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn import(compatible: Option<(&str, &str)>) -> ApiResourceImport {
        import_with(
            compatible,
            json!({"type": "object", "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}
            }}),
        )
    }

    fn import_with(compatible: Option<(&str, &str)>, schema: Value) -> ApiResourceImport {
        let conditions: Vec<Value> = compatible
            .map(|(status, reason)| {
                vec![
                    json!({"type": "Compatible", "status": status, "reason": reason,
                            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}),
                ]
            })
            .unwrap_or_default();
        serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "APIResourceImport",
            "metadata": {"name": "widgets.v1.example.com", "namespace": "flotilla-cluster-m3"},
            "spec": {
                "groupVersion": {"group": "example.com", "version": "v1"},
                "names": {"plural": "widgets", "kind": "Widget"},
                "scope": "Namespaced",
                "openAPIV3Schema": schema
            },
            "status": {"conditions": conditions}
        }))
        .expect("import")
    }

    #[test]
    fn no_object_goes_to_a_member_that_serves_its_type_with_another_scope() {
        let import = import(Some(("False", reasons::SCOPE_DIFFERS)));
        let fits = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                          "metadata": {"name": "w", "namespace": "team-a"}, "spec": {"size": 1}});
        let refused = check(Some(&import), &fits).expect_err("held back");
        assert_eq!(refused.reason, reasons::SCOPE_DIFFERS);
        assert!(
            refused.message.contains("another scope"),
            "{}",
            refused.message
        );
    }

    /// The verdict on `object` for the member whose import is `import`.
    fn check(import: Option<&ApiResourceImport>, object: &Value) -> Result<(), Incompatible> {
        MemberSchema::of(import).map_or(Ok(()), |s| s.check(object))
    }

    fn widget(spec: Value) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": "w", "namespace": "shop"}, "spec": spec})
    }

    #[test]
    fn an_object_using_only_what_the_member_has_still_goes_there() {
        let partial = import(Some(("False", "MissingFields")));
        assert_eq!(check(Some(&partial), &widget(json!({"size": 3}))), Ok(()));
        let refused = check(Some(&partial), &widget(json!({"size": 3, "color": "red"})))
            .expect_err("color is missing in the member");
        assert_eq!(refused.reason, "MissingFields");
        assert!(
            refused.message.contains(".spec.color"),
            "{}",
            refused.message
        );
        let retyped = check(Some(&partial), &widget(json!({"size": "big"})))
            .expect_err("size is an integer in the member");
        assert!(
            retyped.message.contains(".spec.size"),
            "{}",
            retyped.message
        );
    }

    #[test]
    fn no_import_pending_or_compatible_decides_nothing() {
        let object = widget(json!({"color": "red"}));
        assert_eq!(check(None, &object), Ok(()));
        assert_eq!(check(Some(&import(None)), &object), Ok(()));
        assert_eq!(
            check(Some(&import(Some(("Unknown", "Pending")))), &object),
            Ok(())
        );
        assert_eq!(
            check(Some(&import(Some(("True", "Superset")))), &object),
            Ok(())
        );
    }

    #[test]
    fn a_violated_cel_rule_excludes_the_object_with_its_message_and_path() {
        let member = import_with(
            Some(("False", "Incompatible")),
            json!({"type": "object", "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": {"type": "object", "properties": {
                    "size": {"type": "integer"}, "stamp": {"type": "string"}},
                    "x-kubernetes-validations": [
                        {"rule": "!has(self.size) || self.size % 2 == 0",
                         "message": "size must be even", "fieldPath": ".size"},
                        {"rule": "!has(self.stamp) || self.stamp == oldSelf.stamp"}]}
            }}),
        );
        assert_eq!(check(Some(&member), &widget(json!({"size": 4}))), Ok(()));
        let refused = check(Some(&member), &widget(json!({"size": 3})))
            .expect_err("the member's rule rejects an odd size");
        assert!(
            refused.message.contains(".spec.size (size must be even)"),
            "{}",
            refused.message
        );
        // A transition rule cannot be evaluated without the stored object: undecided, not excluded.
        assert_eq!(
            check(Some(&member), &widget(json!({"size": 4, "stamp": "x"}))),
            Ok(())
        );
    }
}
