//! Flotilla's end-to-end tests: one binary, so that cargo runs them all in parallel against the
//! one environment `hack/test.sh` starts. Each module covers one area; each test works in its own
//! namespace.

mod api;
mod chart;
mod cluster_placements;
mod environment;
mod fleet;
mod negotiator;
mod profiles;
mod quota;
mod registration;
mod registration_pull;
mod runtime;
mod secrets;
mod splitter;
mod splitter_api;
mod syncer;
mod syncer_faults;
mod syncer_pull;
mod syncer_shard;
mod syncer_watch;
