//! Flotilla's end-to-end tests: one binary, so that cargo runs them all in parallel against the
//! one environment `hack/test.sh` starts. Each module covers one area; each test works in its own
//! namespace.

/// The tests that run a negotiator, one at a time. A hub has one negotiator: WorkloadProfiles
/// and NegotiatedAPIResources are cluster-wide, so two negotiators (each seeing only its test's
/// members) would write their verdicts over each other's — a profile accepted by one test's
/// negotiator is judged again by another's.
pub(crate) static ONE_NEGOTIATOR: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

mod agent_chart;
mod api;
mod chart;
mod chart_install;
mod cli;
mod cluster_placements;
mod environment;
mod fleet;
mod kinds;
mod negotiator;
mod negotiator_corpus;
mod pod_security;
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
mod third_party_charts;
