//! `cairn-fuzz`: runs cairn's fuzz targets in process on the stable toolchain.
//!
//! ```text
//! cargo run -p cairn-fuzz --profile fuzz -- [--target NAME|all] [--seconds S | --execs N]
//!     [--seed X] [--grow-corpus] [--max-len BYTES] [--list]
//! ```
//!
//! Each target runs over `crates/fuzz/corpus/<target>/`, then over random and mutated inputs
//! until its budget (per target) is spent. A panic's input is written to
//! `crates/fuzz/artifacts/<target>/`; the exit status is 1 when any target panicked.

use std::process::ExitCode;
use std::time::Duration;

use cairn_fuzz::engine::{fuzz, Options};
use cairn_fuzz::targets::{by_name, TARGETS};
use cairn_fuzz::{crate_dir, Target};

const USAGE: &str = "usage: cairn-fuzz [--target NAME|all] [--seconds S | --execs N] [--seed X] [--grow-corpus] [--max-len BYTES] [--list]";

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("cairn-fuzz: {message}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Vec<String>) -> Result<ExitCode, String> {
    let mut options = Options {
        execs: None,
        time: None,
        corpus_dir: Some(crate_dir().join("corpus")),
        artifacts_dir: Some(crate_dir().join("artifacts")),
        ..Options::default()
    };
    let mut selected: Vec<&'static Target> = TARGETS.iter().collect();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--target" => {
                let name = value("--target")?;
                selected = if name == "all" {
                    TARGETS.iter().collect()
                } else {
                    name.split(',')
                        .map(|n| by_name(n).ok_or(format!("no target named {n}; try --list")))
                        .collect::<Result<_, _>>()?
                };
            }
            "--seconds" => {
                let s: f64 = value("--seconds")?
                    .parse()
                    .map_err(|_| "--seconds takes a number")?;
                options.time = Some(Duration::from_secs_f64(s));
            }
            "--execs" => {
                options.execs = Some(
                    value("--execs")?
                        .parse()
                        .map_err(|_| "--execs takes a whole number")?,
                );
            }
            "--seed" => {
                options.seed = value("--seed")?
                    .parse()
                    .map_err(|_| "--seed takes a whole number")?;
            }
            "--max-len" => {
                options.max_len = value("--max-len")?
                    .parse()
                    .map_err(|_| "--max-len takes a whole number")?;
            }
            "--grow-corpus" => options.grow_corpus = true,
            "--list" => {
                for t in TARGETS {
                    println!("{:<16} {}", t.name, t.about);
                }
                return Ok(ExitCode::SUCCESS);
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(ExitCode::SUCCESS);
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if options.execs.is_none() && options.time.is_none() {
        options.time = Some(Duration::from_secs(10));
    }
    println!(
        "{:<16} {:>12} {:>9} {:>11} {:>7} {:>6} {:>6}",
        "target", "execs", "seconds", "exec/s", "panics", "sigs", "corpus"
    );
    let mut failed = false;
    for target in selected {
        let report = fuzz(target, &options).map_err(|e| format!("{}: {e}", target.name))?;
        println!(
            "{:<16} {:>12} {:>9.1} {:>11.0} {:>7} {:>6} {:>6}",
            report.target,
            report.execs,
            report.elapsed.as_secs_f64(),
            report.execs_per_sec(),
            report.panics,
            report.signatures,
            report.corpus,
        );
        for crash in &report.crashes {
            failed = true;
            let saved = crash.saved.as_ref().map_or(String::new(), |p| {
                format!(" (input saved to {})", p.display())
            });
            println!("  PANIC {}{saved}", crash.message);
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
