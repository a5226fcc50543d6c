//! What [`compare`](crate::compare) reports: one [`Change`] per difference, each with its path,
//! its [`ChangeKind`] and its [`Verdict`].

use std::fmt;

use serde::{Serialize, Serializer};

/// How a change affects the objects the old schema accepts.
///
/// Ordered by how bad the news is, as far as it is known: a definite break outranks a narrowing,
/// which outranks a change that could not be decided, which outranks a safe one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Verdict {
    /// The new schema accepts everything the old one accepts, with the same meaning.
    Safe,
    /// The change could not be decided (e.g. a regular expression replaced by another, a new CEL
    /// rule). Never read as safe: a person has to look.
    Unknown,
    /// The new schema accepts a subset of what the old one accepts, with the same meaning: a
    /// field removed, an enum value dropped, a bound tightened, a new required field. Objects
    /// that do not use what was narrowed away are still accepted, which is what lets the
    /// splitter keep sending them to a member that lacks a field.
    Narrowing,
    /// Values mean something else or have another shape: a type change, a format change, a
    /// list or map merge strategy change, a default that changes what is stored, a CRD scope
    /// change, a removed stored version.
    Breaking,
}

impl Verdict {
    /// Lower-case word for text output.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Safe => "safe",
            Verdict::Unknown => "unknown",
            Verdict::Narrowing => "narrowing",
            Verdict::Breaking => "breaking",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A numeric bound keyword: `minimum`/`maximum` and the length, item and property counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limit {
    Minimum,
    Maximum,
    MinLength,
    MaxLength,
    MinItems,
    MaxItems,
    MinProperties,
    MaxProperties,
}

impl Limit {
    /// The JSON Schema keyword.
    pub fn keyword(self) -> &'static str {
        match self {
            Limit::Minimum => "minimum",
            Limit::Maximum => "maximum",
            Limit::MinLength => "minLength",
            Limit::MaxLength => "maxLength",
            Limit::MinItems => "minItems",
            Limit::MaxItems => "maxItems",
            Limit::MinProperties => "minProperties",
            Limit::MaxProperties => "maxProperties",
        }
    }

    /// Whether the keyword bounds from below.
    pub fn is_lower(self) -> bool {
        matches!(
            self,
            Limit::Minimum | Limit::MinLength | Limit::MinItems | Limit::MinProperties
        )
    }

    fn name(self) -> &'static str {
        match self {
            Limit::Minimum => "Minimum",
            Limit::Maximum => "Maximum",
            Limit::MinLength => "MinLength",
            Limit::MaxLength => "MaxLength",
            Limit::MinItems => "MinItems",
            Limit::MaxItems => "MaxItems",
            Limit::MinProperties => "MinProperties",
            Limit::MaxProperties => "MaxProperties",
        }
    }
}

/// How a bound changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LimitChange {
    Added,
    Removed,
    Raised,
    Lowered,
}

/// What changed. Serialized (and displayed) as one CamelCase word, e.g. `TypeChanged`,
/// `EnumValuesRemoved`, `MinimumRaised`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    // Types.
    TypeChanged,
    TypeWidened,
    TypeNarrowed,
    TypeAdded,
    TypeRemoved,
    IntOrStringAdded,
    IntOrStringRemoved,
    // Value validations.
    FormatAdded,
    FormatRemoved,
    FormatChanged,
    EnumAdded,
    EnumRemoved,
    EnumValuesAdded,
    EnumValuesRemoved,
    Limit(Limit, LimitChange),
    MultipleOfAdded,
    MultipleOfRemoved,
    MultipleOfChanged,
    PatternAdded,
    PatternRemoved,
    PatternChanged,
    UniqueItemsAdded,
    UniqueItemsRemoved,
    NullableAdded,
    NullableRemoved,
    DefaultAdded,
    DefaultRemoved,
    DefaultChanged,
    // Structure.
    PropertyAdded,
    PropertyRemoved,
    RequiredAdded,
    RequiredRemoved,
    AdditionalPropertiesAdded,
    AdditionalPropertiesRemoved,
    ItemsAdded,
    ItemsRemoved,
    PreserveUnknownFieldsAdded,
    PreserveUnknownFieldsRemoved,
    EmbeddedResourceChanged,
    ListTypeChanged,
    ListMapKeysChanged,
    MapTypeChanged,
    // Junctors and rules.
    AllOfChanged,
    AnyOfChanged,
    OneOfChanged,
    NotChanged,
    ValidationRuleAdded,
    ValidationRuleRemoved,
    ValidationRuleChanged,
    /// A keyword this crate does not interpret changed.
    KeywordChanged,
    /// [`lcd`](crate::lcd): the inputs cannot be reconciled here; the field was left out.
    Conflict,
    // CRD level.
    CrdAdded,
    CrdRemoved,
    GroupChanged,
    NamesChanged,
    ScopeChanged,
    VersionAdded,
    VersionRemoved,
    StoredVersionRemoved,
    VersionServed,
    VersionUnserved,
    StorageVersionChanged,
    SchemaAdded,
    SchemaRemoved,
    SubresourceAdded,
    SubresourceRemoved,
    SubresourceChanged,
    ConversionChanged,
    /// A version served in the new CRD that the old one did not serve does not accept
    /// everything a version served in both accepts (the path names the pair, `[v1->v2]`).
    ServedVersionNarrower,
}

impl fmt::Display for ChangeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChangeKind::Limit(limit, change) => write!(f, "{}{change:?}", limit.name()),
            other => write!(f, "{other:?}"),
        }
    }
}

impl Serialize for ChangeKind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// One difference between two schemas (or CRDs).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Change {
    /// The CRD version the change is in, for CRD comparisons; `None` for plain schemas and for
    /// changes to the CRD itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// JSON path of the field (see [`Path`](crate::Path)); for CRD-level changes, the path in
    /// the CRD, e.g. `.spec.scope`.
    pub path: String,
    pub kind: ChangeKind,
    pub verdict: Verdict,
    /// What changed, in words, with the old and new values.
    pub message: String,
}

/// The result of comparing an old schema with a new one: every difference found.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Comparison {
    pub changes: Vec<Change>,
}

impl Comparison {
    /// The worst verdict of all changes (see [`Verdict`]'s order); `Safe` when there are none.
    pub fn verdict(&self) -> Verdict {
        self.changes
            .iter()
            .map(|c| c.verdict)
            .max()
            .unwrap_or(Verdict::Safe)
    }

    /// Whether the two sides are the same, up to documentation (descriptions, titles, examples).
    pub fn is_identical(&self) -> bool {
        self.changes.is_empty()
    }

    /// The changes with `verdict`.
    pub fn with_verdict(&self, verdict: Verdict) -> impl Iterator<Item = &Change> {
        self.changes.iter().filter(move |c| c.verdict == verdict)
    }

    /// How many changes have `verdict`.
    pub fn count(&self, verdict: Verdict) -> usize {
        self.with_verdict(verdict).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_print_as_one_word() {
        assert_eq!(ChangeKind::TypeChanged.to_string(), "TypeChanged");
        assert_eq!(
            ChangeKind::Limit(Limit::MinLength, LimitChange::Raised).to_string(),
            "MinLengthRaised"
        );
        assert_eq!(
            serde_json::to_value(ChangeKind::EnumValuesRemoved).ok(),
            Some(serde_json::json!("EnumValuesRemoved"))
        );
    }

    #[test]
    fn a_definite_break_outranks_unknown() {
        let change = |verdict| Change {
            version: None,
            path: ".".into(),
            kind: ChangeKind::KeywordChanged,
            verdict,
            message: String::new(),
        };
        let c = Comparison {
            changes: vec![change(Verdict::Unknown), change(Verdict::Breaking)],
        };
        assert_eq!(c.verdict(), Verdict::Breaking);
        assert_eq!(Comparison::default().verdict(), Verdict::Safe);
    }
}
