//! The short CI version of `cargo xtask crash`: a few kill -9 crashes per backend through the
//! same code as the deep runs (docs/RELIABILITY.md), and the planted-bug self-test that proves
//! the verifier can fail.

use std::process::{Command, Output};

fn crash(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .arg("crash")
        .args(args)
        .output()
        .expect("the xtask binary runs")
}

fn assert_clean(out: &Output, backend: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the {backend} crash loop found violations or failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(" 0 violations"),
        "no summary line:\n{stdout}"
    );
}

/// Five SIGKILLs of a child writing to a SQLite store; every acknowledged write survives each.
#[test]
fn sqlite_survives_five_kill_9_crashes() {
    let out = crash(&[
        "--backend",
        "sqlite",
        "--crashes",
        "5",
        "--seed",
        "14",
        "--max-delay-ms",
        "800",
    ]);
    assert_clean(&out, "SQLite");
}

/// Five SIGKILLs of a child writing to a scratch Postgres database (fails without a server).
#[test]
fn postgres_survives_five_kill_9_crashes() {
    let out = crash(&[
        "--backend",
        "postgres",
        "--crashes",
        "5",
        "--seed",
        "14",
        "--max-delay-ms",
        "800",
    ]);
    assert_clean(&out, "Postgres");
}

/// A child that records appends it never made (a false success) is caught: the run reports
/// the missing acknowledged epochs and exits 1.
#[test]
fn a_planted_false_ack_is_reported() {
    let out = crash(&[
        "--backend",
        "sqlite",
        "--crashes",
        "2",
        "--seed",
        "14",
        "--max-delay-ms",
        "800",
        "--plant-lost-append",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("is missing"),
        "the lost append is not named:\n{stdout}"
    );
}
