//! Structural schema compatibility for Flotilla: the pure core of the negotiator.
//!
//! Members run different Kubernetes versions and different versions of the same CRDs. This
//! crate answers, without any I/O:
//!
//! - [`compare`]: does a `new` schema accept everything an `old` one accepts? Every difference
//!   is a [`Change`] with its JSON path, its [`ChangeKind`] and a [`Verdict`]: `Safe`,
//!   `Narrowing` (accepts less, same meaning), `Breaking` (other meaning or shape) or `Unknown`
//!   (cannot be decided: never a silent pass). [`compare_crds`] does the same for whole CRDs
//!   (scope, versions, subresources, and each version's schema).
//! - [`lcd`]: the least common denominator of several schemas, the one schema that every member
//!   can honour, with the conflicts and per-input narrowings it took.
//! - [`check_object`]: which fields an object sets that a member's schema cannot accept, so that
//!   an object that uses only fields a member has can still go there.
//!
//! Schemas are CRD-style `openAPIV3Schema` values with `x-kubernetes-*` extensions; local
//! `$ref`s (`#/definitions/...`, `#/components/schemas/...`) are resolved. Input is never
//! trusted: recursion, dangling references, non-structural schemas and huge schemas are
//! [`SchemaError`]s that name the path, and all work is bounded by [`Limits`].
//!
//! The rules, with their sources (kcp's `schemacompat`, OLM's CRD upgrade safety, Kubernetes'
//! structural schemas), are documented on the modules that implement them: `compare` (one rule
//! per keyword), [`lcd`](mod@lcd), [`object`] and [`crd`].
//!
//! ```
//! use serde_json::json;
//! use flotilla_schema::{compare, Verdict};
//!
//! let old = json!({"type": "object", "properties": {"size": {"type": "integer"}}});
//! let new = json!({"type": "object", "properties": {"size": {"type": "number"}}});
//! let c = compare(&old, &new).unwrap();
//! assert_eq!(c.verdict(), Verdict::Safe);
//! assert_eq!(c.changes[0].path, ".size");
//! ```

pub mod cel;
mod change;
mod compare;
pub mod crd;
mod error;
pub mod lcd;
pub mod object;
mod path;
mod resolve;
mod schema;

use serde_json::Value;

pub use change::{Change, ChangeKind, Comparison, Limit, LimitChange, Verdict};
pub use crd::{compare_crds, compare_crds_with};
pub use error::SchemaError;
pub use lcd::{Lcd, Narrowing, lcd, lcd_of_parsed, lcd_with};
pub use object::{ObjectProblem, ProblemKind, check_object, check_parsed};
pub use path::{Path, Segment};
pub use schema::{AdditionalProperties, Bound, Schema, Type};

/// Bounds on the work done for one schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How deep a schema may nest (properties, items, map values, junctor branches).
    pub max_depth: usize,
    /// How many schema nodes a schema may have once its `$ref`s are expanded.
    pub max_nodes: usize,
}

impl Default for Limits {
    /// 64 levels and 100 000 nodes: the apps/v1 Deployment schema, fully expanded, is about 20
    /// levels and a few thousand nodes.
    fn default() -> Self {
        Self {
            max_depth: 64,
            max_nodes: 100_000,
        }
    }
}

/// Compares two schemas: does `new` accept everything `old` accepts? See the crate docs.
pub fn compare(old: &Value, new: &Value) -> Result<Comparison, SchemaError> {
    compare_with(old, new, &Limits::default())
}

/// [`compare`] within `limits`.
pub fn compare_with(old: &Value, new: &Value, limits: &Limits) -> Result<Comparison, SchemaError> {
    let old = Schema::from_value_with(old, limits)?;
    let new = Schema::from_value_with(new, limits)?;
    Ok(compare_parsed(&old, &new))
}

/// [`compare`] of schemas already parsed.
pub fn compare_parsed(old: &Schema, new: &Schema) -> Comparison {
    let mut c = compare::Comparer::default();
    c.node(&Path::root(), old, new);
    Comparison { changes: c.changes }
}
