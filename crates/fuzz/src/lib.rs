//! # cairn-fuzz
//!
//! Fuzz targets for every parser and decoder in cairn that takes outside input, and an
//! in-process fuzz driver that runs them on the stable toolchain.
//!
//! A target ([`targets::Target`]) is a plain `fn(&[u8]) -> u64`: it feeds the bytes to one
//! public API and asserts the API's properties (no panic, and round trips such as
//! parse → print → parse where they exist). It returns a *signature* of the behaviour it saw (which
//! error, which branch), which the driver uses to keep inputs that reached something new.
//!
//! The driver ([`engine`]) runs a target over its committed corpus (`corpus/<target>/`), then
//! over random and mutated inputs (bit flips, interesting bytes and numbers, dictionary tokens,
//! splices, truncations), catches panics, saves the input of each under `artifacts/<target>/`
//! and reports executions and executions per second. The `cairn-fuzz` binary is its command
//! line; `tests/smoke.rs` runs every target briefly in CI.

#![forbid(unsafe_code)]

pub mod engine;
mod hash;
mod rng;
pub mod targets;

pub use engine::{run_once, Crash, Options, Report};
pub use targets::{Target, TARGETS};

/// The crate's directory, where `corpus/` and `artifacts/` live.
pub fn crate_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}
