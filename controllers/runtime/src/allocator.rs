//! The controllers' memory allocator, jemalloc, and what it tells about the process's memory.
//!
//! Every controller binary declares it as its global allocator:
//!
//! ```ignore
//! #[global_allocator]
//! static GLOBAL: flotilla_runtime::allocator::Jemalloc = flotilla_runtime::allocator::Jemalloc;
//! ```
//!
//! It is built (`.cargo/config.toml`) to give freed memory back to the system within about a
//! second, from a thread of its own, with small per-thread caches and one-page slabs, and [`Metrics`](crate::Metrics) reports, at each scrape,
//! `<prefix>_allocator_allocated_bytes` (the live heap: what the controller holds) and
//! `<prefix>_allocator_active_bytes` (the pages that hold live allocations: the live heap and the
//! free space in partly used pages), `<prefix>_allocator_metadata_bytes` (its own bookkeeping)
//! and `<prefix>_allocator_resident_bytes` (what the allocator keeps in memory for it: the live
//! heap, the allocator's own metadata, and freed pages not yet given back). The process's RSS
//! beyond that is memory not allocated through it: the binary's code and data, thread stacks.

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntGauge, Opts};
pub use tikv_jemallocator::Jemalloc;

/// The allocator's gauges, read when the registry is gathered.
pub struct AllocatorCollector {
    allocated: IntGauge,
    active: IntGauge,
    metadata: IntGauge,
    resident: IntGauge,
}

impl AllocatorCollector {
    /// Gauges named `<prefix>_allocator_allocated_bytes`, `…_active_bytes`, `…_metadata_bytes`
    /// and `…_resident_bytes`.
    pub fn new(prefix: &str) -> prometheus::Result<Self> {
        let gauge = |name: &str, help: &str| {
            IntGauge::with_opts(Opts::new(format!("{prefix}_allocator_{name}_bytes"), help))
        };
        Ok(Self {
            allocated: gauge(
                "allocated",
                "Bytes the controller holds allocated (its live heap), as jemalloc counts them.",
            )?,
            active: gauge(
                "active",
                "Bytes of the pages that hold live allocations: the live heap and the free space in partly used pages (fragmentation).",
            )?,
            metadata: gauge("metadata", "Bytes jemalloc uses for its own bookkeeping.")?,
            resident: gauge(
                "resident",
                "Bytes of memory jemalloc keeps resident: the live heap, its metadata and freed pages not yet returned.",
            )?,
        })
    }

    fn gauges(&self) -> [&IntGauge; 4] {
        [
            &self.allocated,
            &self.active,
            &self.metadata,
            &self.resident,
        ]
    }

    fn refresh(&self) {
        use tikv_jemalloc_ctl::{epoch, stats};
        // The statistics are a snapshot taken at each epoch.
        if epoch::advance().is_err() {
            return;
        }
        let readings = [
            stats::allocated::read(),
            stats::active::read(),
            stats::metadata::read(),
            stats::resident::read(),
        ];
        for (gauge, reading) in self.gauges().into_iter().zip(readings) {
            if let Ok(v) = reading {
                gauge.set(i64::try_from(v).unwrap_or(i64::MAX));
            }
        }
    }
}

impl Collector for AllocatorCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.gauges().into_iter().flat_map(|g| g.desc()).collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.refresh();
        self.gauges()
            .into_iter()
            .flat_map(|g| g.collect())
            .collect()
    }
}
