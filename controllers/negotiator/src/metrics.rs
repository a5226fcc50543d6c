//! The negotiator's own metrics, in the process's one registry.

use prometheus::{Histogram, HistogramOpts, IntCounterVec, IntGaugeVec, Opts, Registry};

/// Metrics of the importer and the negotiation.
#[derive(Clone)]
pub struct NegotiatorMetrics {
    /// APIResourceImports per member (`cluster`).
    pub imports: IntGaugeVec,
    /// Imports per member whose `Compatible` condition is `False`.
    pub incompatible_imports: IntGaugeVec,
    /// Imports written (created or changed) per member.
    pub imports_written: IntCounterVec,
    /// Failed reads of a member's schemas, by member and error category.
    pub import_errors: IntCounterVec,
    /// How long negotiating one type takes (comparisons, LCD), without API calls.
    pub negotiation_duration: Histogram,
}

impl NegotiatorMetrics {
    /// Registers the metrics in `registry`, named `<prefix>_...`.
    pub fn register(registry: &Registry, prefix: &str) -> prometheus::Result<Self> {
        let imports = IntGaugeVec::new(
            Opts::new(
                format!("{prefix}_imports"),
                "APIResourceImports of each member cluster.",
            ),
            &["cluster"],
        )?;
        let incompatible_imports = IntGaugeVec::new(
            Opts::new(
                format!("{prefix}_incompatible_imports"),
                "APIResourceImports of each member cluster whose Compatible condition is False.",
            ),
            &["cluster"],
        )?;
        let imports_written = IntCounterVec::new(
            Opts::new(
                format!("{prefix}_imports_written_total"),
                "APIResourceImports created or changed, by member cluster.",
            ),
            &["cluster"],
        )?;
        let import_errors = IntCounterVec::new(
            Opts::new(
                format!("{prefix}_import_errors_total"),
                "Failed reads of a member's schemas, by member cluster and error category.",
            ),
            &["cluster", "category"],
        )?;
        let negotiation_duration = Histogram::with_opts(
            HistogramOpts::new(
                format!("{prefix}_negotiation_duration_seconds"),
                "Time to negotiate one resource type (comparisons and LCD, no API calls).",
            )
            .buckets(vec![
                0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
            ]),
        )?;
        registry.register(Box::new(imports.clone()))?;
        registry.register(Box::new(incompatible_imports.clone()))?;
        registry.register(Box::new(imports_written.clone()))?;
        registry.register(Box::new(import_errors.clone()))?;
        registry.register(Box::new(negotiation_duration.clone()))?;
        Ok(Self {
            imports,
            incompatible_imports,
            imports_written,
            import_errors,
            negotiation_duration,
        })
    }
}
