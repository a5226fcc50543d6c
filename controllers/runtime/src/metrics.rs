//! Prometheus metrics: one registry per process, names prefixed `flotilla_<controller>_`.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

/// The metrics every controller has, registered in the process's one [`Registry`]. Controllers
/// register their own metrics in [`Metrics::registry`] with [`Metrics::prefix`].
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    prefix: String,
    /// Reconciliations by `controller` (the kind reconciled) and `result` (`success`, `error`).
    pub reconciles: IntCounterVec,
    /// Reconcile errors by `controller` and `category` ([`crate::ErrorCategory::category`]).
    pub reconcile_errors: IntCounterVec,
    /// Reconcile duration by `controller`.
    pub reconcile_duration: HistogramVec,
    /// 1 while this replica holds the leader Lease (or leader election is off), else 0.
    pub leader: IntGauge,
}

/// Builds a metric name: `flotilla_<controller>_<name>`.
fn name(prefix: &str, name: &str) -> String {
    format!("{prefix}_{name}")
}

impl Metrics {
    /// Creates the registry and the shared metrics for the controller `controller`
    /// (e.g. `syncer`: metrics are named `flotilla_syncer_...`).
    pub fn new(controller: &str) -> prometheus::Result<Self> {
        let prefix = format!("flotilla_{}", controller.replace('-', "_"));
        let registry = Registry::new();
        let reconciles = IntCounterVec::new(
            Opts::new(
                name(&prefix, "reconciles_total"),
                "Reconciliations by result.",
            ),
            &["controller", "result"],
        )?;
        let reconcile_errors = IntCounterVec::new(
            Opts::new(
                name(&prefix, "reconcile_errors_total"),
                "Reconcile errors by category.",
            ),
            &["controller", "category"],
        )?;
        let reconcile_duration = HistogramVec::new(
            HistogramOpts::new(
                name(&prefix, "reconcile_duration_seconds"),
                "Duration of reconciliations.",
            )
            .buckets(vec![
                0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
            &["controller"],
        )?;
        let leader = IntGauge::new(
            name(&prefix, "leader"),
            "1 while this replica is the active leader, else 0.",
        )?;
        let build_info = IntGaugeVec::new(
            Opts::new(name(&prefix, "build_info"), "Build information; always 1."),
            &["version"],
        )?;
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        registry.register(Box::new(reconciles.clone()))?;
        registry.register(Box::new(reconcile_errors.clone()))?;
        registry.register(Box::new(reconcile_duration.clone()))?;
        registry.register(Box::new(leader.clone()))?;
        registry.register(Box::new(build_info))?;
        registry.register(Box::new(crate::allocator::AllocatorCollector::new(
            &prefix,
        )?))?;
        Ok(Self {
            registry,
            prefix,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            leader,
        })
    }

    /// The process's registry, for controller-specific metrics.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The metric name prefix, e.g. `flotilla_syncer`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Records one reconciliation of `controller` that took `seconds`; `error_category` is
    /// `None` on success.
    pub fn observe_reconcile(&self, controller: &str, seconds: f64, error_category: Option<&str>) {
        self.reconcile_duration
            .with_label_values(&[controller])
            .observe(seconds);
        let result = if error_category.is_some() {
            "error"
        } else {
            "success"
        };
        self.reconciles
            .with_label_values(&[controller, result])
            .inc();
        if let Some(category) = error_category {
            self.reconcile_errors
                .with_label_values(&[controller, category])
                .inc();
        }
    }

    /// The Prometheus text exposition of every registered metric.
    pub fn encode(&self) -> String {
        let mut buf = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metrics; report it in the output if it does.
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut buf) {
            return format!("# error encoding metrics: {e}\n");
        }
        String::from_utf8_lossy(&buf).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_and_reconciles_counted() {
        let m = Metrics::new("syncer").expect("metrics");
        m.observe_reconcile("work", 0.02, None);
        m.observe_reconcile("work", 0.5, Some("Unreachable"));
        let text = m.encode();
        assert!(
            text.contains(
                r#"flotilla_syncer_reconciles_total{controller="work",result="success"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"flotilla_syncer_reconcile_errors_total{category="Unreachable",controller="work"} 1"#
            ),
            "{text}"
        );
        assert!(text.contains("flotilla_syncer_leader 0"), "{text}");
        assert!(text.contains("flotilla_syncer_build_info"), "{text}");
    }

    #[test]
    fn the_allocator_reports_the_live_heap_and_what_it_keeps_resident() {
        let m = Metrics::new("syncer").expect("metrics");
        // Kept opaque to the optimizer, which may otherwise drop an allocation nothing reads.
        let held = std::hint::black_box(vec![0u8; 8 << 20]);
        let text = m.encode();
        let value = |name: &str| -> i64 {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("{name} in {text}"))
        };
        let allocated = value("flotilla_syncer_allocator_allocated_bytes");
        let active = value("flotilla_syncer_allocator_active_bytes");
        let metadata = value("flotilla_syncer_allocator_metadata_bytes");
        let resident = value("flotilla_syncer_allocator_resident_bytes");
        assert!(allocated >= 8 << 20, "{allocated}");
        assert!(active >= allocated, "{active} < {allocated}");
        assert!(metadata > 0, "{metadata}");
        assert!(resident >= active, "{resident} < {active}");
        drop(held);
    }

    #[test]
    fn dashes_become_underscores() {
        let m = Metrics::new("api-importer").expect("metrics");
        assert_eq!(m.prefix(), "flotilla_api_importer");
    }
}
