//! The controllers' memory allocator, jemalloc, and what it tells about the process's memory.
//!
//! Every controller binary declares it as its global allocator:
//!
//! ```ignore
//! #[global_allocator]
//! static GLOBAL: flotilla_runtime::allocator::Jemalloc = flotilla_runtime::allocator::Jemalloc;
//! ```
//!
//! It is built to give freed memory back to the system within about a second, from a thread of
//! its own (`.cargo/config.toml`), and [`Metrics`](crate::Metrics) reports, at each scrape,
//! `<prefix>_allocator_allocated_bytes` (the live heap: what the controller holds) and
//! `<prefix>_allocator_resident_bytes` (what the allocator keeps in memory for it: the live heap,
//! the allocator's own metadata, and freed pages not yet given back). The process's RSS beyond
//! that is memory not allocated through it: the binary's code and data, thread stacks.

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntGauge, Opts};
pub use tikv_jemallocator::Jemalloc;

/// The allocator's gauges, read when the registry is gathered.
pub struct AllocatorCollector {
    allocated: IntGauge,
    resident: IntGauge,
}

impl AllocatorCollector {
    /// Gauges named `<prefix>_allocator_allocated_bytes` and `<prefix>_allocator_resident_bytes`.
    pub fn new(prefix: &str) -> prometheus::Result<Self> {
        Ok(Self {
            allocated: IntGauge::with_opts(Opts::new(
                format!("{prefix}_allocator_allocated_bytes"),
                "Bytes the controller holds allocated (its live heap), as jemalloc counts them.",
            ))?,
            resident: IntGauge::with_opts(Opts::new(
                format!("{prefix}_allocator_resident_bytes"),
                "Bytes of memory jemalloc keeps resident: the live heap, its metadata and freed pages not yet returned.",
            ))?,
        })
    }

    fn refresh(&self) {
        use tikv_jemalloc_ctl::{epoch, stats};
        // The statistics are a snapshot taken at each epoch.
        if epoch::advance().is_err() {
            return;
        }
        let as_gauge = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        if let Ok(v) = stats::allocated::read() {
            self.allocated.set(as_gauge(v));
        }
        if let Ok(v) = stats::resident::read() {
            self.resident.set(as_gauge(v));
        }
    }
}

impl Collector for AllocatorCollector {
    fn desc(&self) -> Vec<&Desc> {
        let mut descs = self.allocated.desc();
        descs.extend(self.resident.desc());
        descs
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.refresh();
        let mut families = self.allocated.collect();
        families.extend(self.resident.collect());
        families
    }
}
