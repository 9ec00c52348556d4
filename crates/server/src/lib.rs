//! `cairn`: the operator CLI for a cairn store.
//!
//! Every command opens the store named by `--database` (or `CAIRN_DATABASE`, or the default
//! SQLite file under the platform data directory), does one thing and prints plain lines.
//! On failure it prints exactly one line, `cairn: <message>`, on stderr and exits with status 1
//! (status 2 for command-line usage errors). `cairn serve`'s configuration problems are the
//! exception: each is one `cairn: config: …` line, all of them before anything is opened, and
//! the status is 2.
//!
//! The library target holds the whole command; the binary `cairn` (`src/main.rs`) only calls
//! [`main()`]. With the `fuzzing` feature (which only `crates/fuzz` enables) it also has the
//! hidden `fuzzing` module, which exposes the server's request-body decoding and configuration
//! checking to the fuzz targets; it is not an API.
//!
//! [`sync`] is the one API of the library: the sides of `cairn sync` — a `cairn serve` reached
//! over HTTP ([`sync::HttpEndpoint`]) or a store opened here ([`sync::endpoint_for`]).

#![forbid(unsafe_code)]

mod cli;
mod config;
mod doctor;
mod error;
pub(crate) mod graph;
mod logging;
mod open;
mod serve;
mod shown;
mod signals;
mod small_file;
pub mod sync;

#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::error::{one_line, CliError};

/// The exit status of a configuration that does not check out (as for usage errors).
const CONFIG_EXIT: u8 = 2;

/// The `cairn` command: parses the command line, runs the command and returns its exit status
/// (see the crate documentation). `src/main.rs` is this call and nothing else.
pub fn main() -> ExitCode {
    let mut cli = Cli::parse();
    match &mut cli.command {
        Command::Serve(args) => match serve::prepare(args) {
            Ok(database) => {
                if cli.database.is_none() {
                    cli.database = database;
                }
            }
            Err(problems) => {
                let mut err = std::io::stderr().lock();
                for p in &problems.0 {
                    let _ = writeln!(err, "cairn: config: {}", one_line(p));
                }
                return ExitCode::from(CONFIG_EXIT);
            }
        },
        // Doctor reads the same file (`CAIRN_CONFIG`) for the store and the retention cap; it
        // reports a bad file itself.
        Command::Doctor { .. } if cli.database.is_none() => {
            if let Ok(config) = config::Config::load(None, config::Overrides::default()) {
                cli.database = config.database;
            }
        }
        _ => {}
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return report(&CliError::Config(format!("cannot start the runtime: {e}"))),
    };
    match runtime.block_on(cli::run(cli)) {
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
