//! `cairn`: the operator CLI for a cairn store.
//!
//! Every command opens the store named by `--database` (or `CAIRN_DATABASE`, or the default
//! SQLite file under the platform data directory), does one thing and prints plain lines.
//! On failure it prints exactly one line, `cairn: <message>`, on stderr and exits with status 1
//! (status 2 for command-line usage errors).

#![forbid(unsafe_code)]

mod backfill;
mod cli;
mod commands;
mod doctor;
mod error;
mod import;
mod migrate;
mod open;
mod remote;
mod serve;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use crate::cli::Cli;
use crate::error::{one_line, CliError};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return report(&CliError::Config(format!("cannot start the runtime: {e}"))),
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that went away (`cairn feed … | head`) is not an error worth a line.
        Err(CliError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => report(&e),
    }
}

fn report(err: &CliError) -> ExitCode {
    // If stderr itself is gone there is nobody left to tell; the exit status still says it.
    let _ = writeln!(
        std::io::stderr().lock(),
        "cairn: {}",
        one_line(&err.to_string())
    );
    ExitCode::FAILURE
}
