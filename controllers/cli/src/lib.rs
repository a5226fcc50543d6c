//! `kubectl flotilla`: the command line of a Flotilla fleet.
//!
//! The logic lives here, as a library, so the quick start, the benchmarks and the end-to-end
//! tests register members through the very code users run.

pub mod join;
pub mod kubeconfig;
pub mod reader;
