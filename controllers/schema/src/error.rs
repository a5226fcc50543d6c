//! Errors: input that is not a schema this crate can reason about. Every error names the path
//! where it was found. Nothing in this crate panics on bad input, and all work is bounded by
//! [`Limits`](crate::Limits).

/// Why a schema (or CRD) could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SchemaError {
    /// A keyword has a value of the wrong JSON type, e.g. `minimum: "3"`.
    #[error("{path}: invalid {keyword}: {message}")]
    InvalidKeyword {
        path: String,
        keyword: String,
        message: String,
    },

    /// The schema breaks a Kubernetes structural-schema rule, e.g. a node without `type`,
    /// `additionalProperties` next to `properties`, or `patternProperties`.
    #[error("{path}: not a structural schema: {message}")]
    NonStructural { path: String, message: String },

    /// A `$ref` points at nothing in `#/definitions` or `#/components/schemas`.
    #[error("{path}: dangling $ref {reference}")]
    DanglingRef { path: String, reference: String },

    /// A `$ref` that is not local (`#/definitions/...` or `#/components/schemas/...`).
    #[error(
        "{path}: unsupported $ref {reference}: only local #/definitions/ and #/components/schemas/ references are resolved"
    )]
    UnsupportedRef { path: String, reference: String },

    /// A `$ref` that refers to itself, directly or through others. Structural schemas cannot be
    /// recursive.
    #[error("{path}: recursive $ref {reference}: structural schemas cannot be recursive")]
    RecursiveRef { path: String, reference: String },

    /// The schema nests deeper than [`Limits::max_depth`](crate::Limits::max_depth).
    #[error("{path}: schema nested deeper than {limit} levels")]
    TooDeep { path: String, limit: usize },

    /// The schema (with its `$ref`s expanded) has more nodes than
    /// [`Limits::max_nodes`](crate::Limits::max_nodes).
    #[error("{path}: schema has more than {limit} nodes once $refs are expanded")]
    TooLarge { path: String, limit: usize },

    /// No schema accepts what every input accepts (e.g. the roots have different types).
    #[error("{path}: the schemas have nothing in common: {message}")]
    NoCommonSchema { path: String, message: String },

    /// [`lcd`](crate::lcd) was called without any schema.
    #[error("no schemas to negotiate")]
    NoInputs,

    /// An error in the schema of one version of a CRD.
    #[error("version {version}: {source}")]
    InVersion {
        version: String,
        #[source]
        source: Box<SchemaError>,
    },
}

impl SchemaError {
    /// A short CamelCase category, for metrics and condition reasons. Never includes names.
    pub fn category(&self) -> &'static str {
        match self {
            SchemaError::InvalidKeyword { .. } => "InvalidSchema",
            SchemaError::NonStructural { .. } => "NonStructural",
            SchemaError::DanglingRef { .. } => "DanglingRef",
            SchemaError::UnsupportedRef { .. } => "UnsupportedRef",
            SchemaError::RecursiveRef { .. } => "RecursiveRef",
            SchemaError::TooDeep { .. } => "SchemaTooDeep",
            SchemaError::TooLarge { .. } => "SchemaTooLarge",
            SchemaError::NoCommonSchema { .. } => "NoCommonSchema",
            SchemaError::NoInputs => "NoInputs",
            SchemaError::InVersion { source, .. } => source.category(),
        }
    }
}
