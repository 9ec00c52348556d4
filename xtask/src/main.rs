//! `cargo xtask`: the project's chores, as a small workspace binary (commands run without a shell).
//!
//! - `cargo xtask test [ARGS…]` — installs the system packages the tests need (Chromium,
//!   PgBouncer; as root with apt-get, else it stops before building with the command to run),
//!   makes sure a Postgres server is reachable, then runs the whole test suite (`cargo test
//!   --workspace --all-targets --no-fail-fast`, the doc tests, the docs build), passing `ARGS`
//!   on; every step runs, and the failed ones are listed at the end.
//! - `cargo xtask lint` — no import cycle between the files of one crate, no non-test file over
//!   700 lines (exceptions listed with a reason in `xtask/lint-allow.toml`); `test` runs it
//!   first.
//! - `cargo xtask provision` — only the installing and the Postgres start of `test`.
//! - `cargo xtask migrate SUBCOMMAND --database URL` — runs `cairn migrate SUBCOMMAND …` (one
//!   implementation for both surfaces; `cargo xtask migrate --help` is the binary's own help,
//!   which lists every subcommand). The binary is built as `cargo build -p cairn-server` builds
//!   it, so a second call compiles nothing.
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
mod cargo;
mod crash;
mod lint;
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
    /// Run the whole test suite (in-memory, SQLite and Postgres): `cargo xtask lint` first,
    /// then provisioning its system packages and Postgres, the tests, the doc tests, the docs
    /// build; every step runs, and the failed ones are listed.
    Test {
        /// Passed on to `cargo test` (filters, `--no-fail-fast`, `-- --test-threads N`, …).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Check every crate of the workspace for import cycles between its files (an edge when a
    /// file names, outside test code, an item defined in another: `use`, `crate::`/`super::`/
    /// `self::` paths, re-exports followed to the defining file, glob imports) and for non-test
    /// files over 700 lines (a trailing `#[cfg(test)]` module not counted; exceptions, each
    /// with its reason, in xtask/lint-allow.toml, where a stale entry fails too). Exit 1 on
    /// any finding.
    Lint,
    /// Install what `cargo xtask test` needs (its system packages, a running local Postgres)
    /// without running the suite; the same steps `test` takes before it builds anything.
    Provision,
    /// Schema migrations of a store: every `cairn migrate` subcommand, the same code (it builds
    /// the `cairn` binary as `cargo build -p cairn-server` does, then runs it);
    /// `cargo xtask migrate --help` lists them. Exit 0 fine, 1 refused/incompatible, 2 usage.
    #[command(disable_help_flag = true)]
    Migrate {
        /// The `cairn migrate` arguments, e.g. `status --database URL`; `--help` prints the
        /// binary's own help.
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

/// The package whose `cairn` binary `migrate` runs.
const SERVER_PACKAGE: &str = "cairn-server";

/// Runs `cairn migrate ARGS…` from this checkout, so the operator surface has one
/// implementation; its exit status is passed on unchanged.
///
/// The binary is built with `cargo build -p cairn-server --bin cairn` — the features and
/// profile of a plain `cargo build -p cairn-server`, so the two share their artifacts — with
/// cargo's progress on stderr (a warm target prints no `Compiling` line), then run directly.
/// The nested cargo is a [`cargo::plain_cargo`]: the caller's environment without the
/// per-package variables cargo set for this binary, which are part of build-script
/// fingerprints (ring's build script asks for `CARGO_MANIFEST_DIR`), so inheriting them
/// rebuilt ring, rustls and reqwest on every call.
fn migrate(args: &[String]) -> Result<ExitCode, String> {
    let mut build = cargo::plain_cargo();
    build
        .args([
            "build",
            "--package",
            SERVER_PACKAGE,
            "--bin",
            "cairn",
            "--message-format=json-render-diagnostics",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit());
    let built = build
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !built.status.success() {
        return Ok(exit_code(built.status));
    }
    let binary = built_binary(&String::from_utf8_lossy(&built.stdout))
        .ok_or("cargo built no `cairn` binary (no compiler-artifact message names one)")?;
    // `--database` is global in the binary; it works before or after the subcommand.
    let status = std::process::Command::new(&binary)
        .arg("migrate")
        .args(args)
        .status()
        .map_err(|e| format!("cannot run {binary}: {e}"))?;
    Ok(exit_code(status))
}

/// The path of the `cairn` executable in cargo's JSON messages (`--message-format=json`).
fn built_binary(messages: &str) -> Option<String> {
    messages
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "cairn")
        .filter(|m| {
            m["target"]["kind"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k == "bin"))
        })
        .find_map(|m| m["executable"].as_str().map(str::to_owned))
}

/// A child's exit status as ours: its code, or 1 when it has none (killed by a signal).
fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    ExitCode::from(
        status
            .code()
            .and_then(|c| u8::try_from(c).ok())
            .unwrap_or(1),
    )
}

fn main() -> ExitCode {
    let result = match Xtask::parse().command {
        Task::Test { args } => test::run(&args),
        Task::Lint => lint::run(),
        Task::Provision => test::provision_only(),
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

#[cfg(test)]
mod migrate_tests {
    use super::*;

    #[test]
    fn the_binary_is_found_among_cargos_messages() {
        let messages = [
            r#"{"reason":"compiler-artifact","target":{"name":"cairn","kind":["lib"]},"executable":null}"#,
            r#"{"reason":"compiler-artifact","target":{"name":"cairn_server","kind":["lib"]},"executable":null}"#,
            "not json",
            r#"{"reason":"compiler-artifact","target":{"name":"cairn","kind":["bin"]},"executable":"/t/debug/cairn"}"#,
            r#"{"reason":"build-finished","success":true}"#,
        ]
        .join("\n");
        assert_eq!(built_binary(&messages).as_deref(), Some("/t/debug/cairn"));
        assert_eq!(built_binary(r#"{"reason":"build-finished"}"#), None);
    }
}
