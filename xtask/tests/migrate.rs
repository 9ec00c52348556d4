//! `cargo xtask migrate`: the operator path runs the `cairn` binary without rebuilding it on a
//! warm target, and its help lists every `cairn migrate` subcommand (issue 25).
//!
//! These run the xtask binary as `cargo xtask` does, from inside `cargo test`: cargo sets the
//! same per-package variables (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`, …) for a test as for
//! `cargo run`, so a nested build that inherited them would rebuild here too.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn xtask_migrate(args: &[&str]) -> (Output, Duration) {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .arg("migrate")
        .args(args)
        .output()
        .expect("the xtask binary runs");
    (out, started.elapsed())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The lines of cargo's progress output that say it compiled something.
fn compiling_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.trim_start().starts_with("Compiling "))
        .collect()
}

/// Whether cargo sets `name` for the package of the process it runs (`cargo run`, a test): a
/// shell's own `cargo build` has none of these.
fn set_for_a_package(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || [
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_CRATE_NAME",
            "CARGO_BIN_NAME",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_TARGET_TMPDIR",
        ]
        .contains(&name)
}

/// `cargo build -p cairn-server --bin cairn` as typed in a shell (without the variables cargo
/// set for this test): what the outer `cargo xtask` build or a developer's own build sees.
fn plain_build() -> Output {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--package", "cairn-server", "--bin", "cairn"]);
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_for_a_package) {
            cmd.env_remove(name);
        }
    }
    cmd.output().expect("cargo runs")
}

/// A second `cargo xtask migrate status` against a fresh SQLite store runs no compiler: the
/// first call may build the binary (a cold target), a plain `cargo build -p cairn-server` in
/// between finds it fresh (the two share their artifacts), and so does the second call. A
/// nested build that inherited the per-package variables would rebuild ring's build script and
/// what depends on it each time the two alternate.
#[test]
fn a_second_call_on_a_warm_target_compiles_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    let (first, _) = xtask_migrate(&["up", "--database", &url]);
    assert!(
        first.status.success(),
        "the first call (up, creating the store) failed:\n{}\n{}",
        text(&first.stdout),
        text(&first.stderr)
    );
    let plain = plain_build();
    let plain_err = text(&plain.stderr);
    assert!(plain.status.success(), "{plain_err}");
    assert_eq!(
        compiling_lines(&plain_err),
        Vec::<&str>::new(),
        "a plain `cargo build -p cairn-server` rebuilt what `cargo xtask migrate` built:\n{plain_err}"
    );
    let (second, took) = xtask_migrate(&["status", "--database", &url]);
    let (stdout, stderr) = (text(&second.stdout), text(&second.stderr));
    assert!(
        second.status.success(),
        "status failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("at head"), "{stdout}");
    // cargo's own progress is shown (not --quiet), so a rebuild would show here.
    assert!(
        stderr.contains("Finished"),
        "cargo's progress is not shown:\n{stderr}"
    );
    assert_eq!(
        compiling_lines(&stderr),
        Vec::<&str>::new(),
        "the second call compiled (took {took:?}):\n{stderr}"
    );
    eprintln!("second `cargo xtask migrate status`: {took:?}");
}

/// `cargo xtask migrate --help` is the binary's own `cairn migrate --help`: every subcommand,
/// `baseline`, `down` and `fleet` included.
#[test]
fn help_lists_every_migrate_subcommand() {
    let (out, _) = xtask_migrate(&["--help"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let listed: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        listed,
        ["status", "up", "baseline", "fleet", "history", "repair", "down", "check", "help"],
        "{stdout}"
    );
}
