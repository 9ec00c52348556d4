//! `cargo xtask`: the project's chores, as a small workspace binary (commands run without a shell).
//!
//! - `cargo xtask test [ARGS…]` — makes sure a Postgres server is reachable, then runs the whole
//!   test suite (`cargo test --workspace --all-targets`, then the doc tests), passing `ARGS` on.
//! - `cargo xtask migrate status|up|history|repair|check --database URL` — runs
//!   `cairn migrate …` (one implementation for both surfaces).
//! - `cargo xtask bench heads --backend sqlite|postgres [--epochs N] [--runs R]` — the head-cache
//!   benchmark; prints a markdown report for `docs/BENCHMARKS.md`.
//! - `cargo xtask bench readers --backend sqlite` — concurrent reads through one read connection
//!   vs the default pool, side by side.
//! - `cargo xtask crash --backend sqlite|postgres --crashes N [--seed S]` — kill -9 crash loops
//!   with a full verification after every crash (docs/RELIABILITY.md).
//! - `cargo xtask mutants [--scope NAME] [--shard K/N] [--list]` — cargo-mutants over the
//!   scopes in `mutants/scopes.toml`, judged against their floors (docs/RELIABILITY.md).
//!
//! Stores are opened through the `cairn` facade (its `testkit` feature for the bench hooks); no
//! backend crate is named here.

#![forbid(unsafe_code)]

mod bench;
mod crash;
mod mutants;
mod test;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// cairn's development tasks.
#[derive(Parser)]
#[command(name = "cargo xtask", bin_name = "cargo xtask")]
struct Xtask {
    #[command(subcommand)]
    command: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Run the whole test suite (in-memory, SQLite and Postgres), provisioning Postgres first.
    Test {
        /// Passed on to `cargo test` (filters, `--no-fail-fast`, `-- --test-threads N`, …).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Schema migrations of a store: `status`, `up`, `history`, `repair`, `check` — the same code
    /// as `cairn migrate …` (it runs it). Exit 0 fine, 1 refused/incompatible, 2 usage.
    Migrate {
        /// The `cairn migrate` arguments, e.g. `status --database URL`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        bench: bench::Bench,
    },
    /// Kill -9 crash loops: a child runs a random mix of writes and is killed at random; every
    /// acknowledged write must survive. Exit 1 on any violation.
    Crash(crash::CrashArgs),
    /// Mutation testing: cargo-mutants over the scopes in mutants/scopes.toml; exit 1 when a
    /// scope is under its floor with a survivor not listed in mutants/equivalent.toml.
    Mutants(mutants::MutantsArgs),
    /// The crash loop's child (started by `crash`, not by hand).
    #[command(hide = true)]
    CrashChild(crash::ChildArgs),
}

/// Runs `cairn migrate ARGS…` from this checkout, so the operator surface has one
/// implementation; its exit status is passed on unchanged.
fn migrate(args: &[String]) -> Result<ExitCode, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // `--database` is global in the binary; move it after `migrate` works either way.
    let status = std::process::Command::new(cargo)
        .args([
            "run",
            "--quiet",
            "--package",
            "cairn-server",
            "--bin",
            "cairn",
            "--",
            "migrate",
        ])
        .args(args)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    Ok(ExitCode::from(
        status
            .code()
            .and_then(|c| u8::try_from(c).ok())
            .unwrap_or(1),
    ))
}

fn main() -> ExitCode {
    let result = match Xtask::parse().command {
        Task::Test { args } => test::run(&args),
        Task::Migrate { args } => migrate(&args),
        Task::Bench { bench } => bench::run(bench).map(|()| ExitCode::SUCCESS),
        Task::Crash(args) => crash::run(&args),
        Task::CrashChild(args) => crash::child(&args),
        Task::Mutants(args) => mutants::run(&args),
    };
    match result {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("xtask: {msg}");
            ExitCode::FAILURE
        }
    }
}
