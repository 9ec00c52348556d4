//! The processes: the cargo-mutants command line of a scope (and how it is printed), its
//! version check, its `--list`, the clean export of a commit, whether Postgres answers.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::args::MutantsArgs;
use super::scopes::Scope;

/// How to get cargo-mutants (the version the figures in docs/RELIABILITY.md were measured with).
pub(super) const INSTALL_HINT: &str = "cargo install cargo-mutants --locked --version 27.1.0";

/// The cargo-mutants version line, or how to install it.
pub(super) fn cargo_mutants_version() -> Result<String, String> {
    let missing = || {
        format!(
            "cargo-mutants is not installed (`cargo mutants --version` failed); install it with\n    \
             {INSTALL_HINT}\nand run this again. Nothing was installed."
        )
    };
    let out = crate::cargo::plain_cargo()
        .args(["mutants", "--version"])
        .output()
        .map_err(|_| missing())?;
    if !out.status.success() {
        return Err(missing());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The cargo-mutants arguments for `scope` (after `cargo mutants`).
pub(super) fn mutants_args(scope: &Scope, args: &MutantsArgs, out_dir: &Path) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |flag: &str, value: &str| {
        a.push(flag.into());
        a.push(value.into());
    };
    for p in &scope.packages {
        push("--package", p);
    }
    for f in &scope.files {
        push("--file", f);
    }
    for r in &scope.re {
        push("--re", r);
    }
    for r in &scope.exclude_re {
        push("--exclude-re", r);
    }
    if args.list {
        a.push("--list".into());
    } else {
        push("--jobs", &args.jobs.to_string());
        push("--timeout", &scope.timeout.to_string());
        if let Some(b) = scope.build_timeout {
            push("--build-timeout", &b.to_string());
        }
        if scope.skip_baseline {
            push("--baseline", "skip");
        }
        for p in &scope.test_packages {
            push("--test-package", p);
        }
        push("--colors", "never");
        if args.iterate {
            a.push("--iterate".into());
        }
        a.push("--output".into());
        a.push(out_dir.into());
    }
    if let Some((k, n)) = args.shard {
        a.push("--shard".into());
        a.push(format!("{k}/{n}").into());
    }
    if !args.list {
        // The test targets (`--lib`, `--test NAME`, …: the arguments before a `--`) go to
        // every cargo invocation, so that each mutant's build compiles only the targets it
        // tests; the trailing arguments reach `cargo test` alone, and only its test phase.
        // cargo-mutants builds with `cargo test --no-run` and no trailing arguments: passed
        // only there, the targets would leave every test target of the package to be rebuilt
        // against each mutant (24 of them for `cairn-postgres`).
        let (targets, to_binaries) = split_test_args(&scope.test_args);
        for t in targets {
            a.push(format!("--cargo-arg={t}").into());
        }
        if !to_binaries.is_empty() {
            a.push("--".into());
            a.push("--".into());
            a.extend(to_binaries.iter().map(OsString::from));
        }
    }
    a
}

/// A scope's `test_args` split at their first `--`: the `cargo test` arguments (the targets)
/// and the arguments for the test binaries (filters such as `--skip NAME`).
pub(super) fn split_test_args(test_args: &[String]) -> (&[String], &[String]) {
    match test_args.iter().position(|a| a == "--") {
        Some(at) => (&test_args[..at], &test_args[at + 1..]),
        None => (test_args, &[]),
    }
}

pub(super) fn shell_words(args: &[OsString]) -> String {
    let mut s = String::from("cargo mutants");
    for a in args {
        let a = a.to_string_lossy();
        if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"\\|*?()$<>".contains(c)) {
            let _ = write!(s, " '{}'", a.replace('\'', r"'\''"));
        } else {
            let _ = write!(s, " {a}");
        }
    }
    s
}

/// The mutants of `scope` as `cargo mutants --list` names them, in `source`.
pub(super) fn list_mutants(
    scope: &Scope,
    args: &MutantsArgs,
    source: &Path,
) -> Result<Vec<String>, String> {
    let listing = MutantsArgs {
        list: true,
        iterate: false,
        ..args.clone()
    };
    let out = crate::cargo::plain_cargo()
        .arg("mutants")
        .args(mutants_args(scope, &listing, Path::new("unused")))
        .current_dir(source)
        .output()
        .map_err(|e| format!("cannot run cargo mutants --list: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo mutants --list for {}: {}: {}",
            scope.name,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect())
}

/// A clean export of `rev` in a temporary directory, and the commit it names.
pub(super) fn export(root: &Path, rev: &str) -> Result<(tempfile::TempDir, String), String> {
    let git = |args: &[&str]| -> Result<Vec<u8>, String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .output()
            .map_err(|e| format!("cannot run git: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "git {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(out.stdout)
    };
    let commit = String::from_utf8_lossy(&git(&[
        "rev-parse",
        "--verify",
        &format!("{rev}^{{commit}}"),
    ])?)
    .trim()
    .to_owned();
    let dir = tempfile::Builder::new()
        .prefix("cairn-mutants-")
        .tempdir()
        .map_err(|e| format!("cannot make a temp dir: {e}"))?;
    let tar = dir.path().join("src.tar");
    git(&[
        "archive",
        "--format=tar",
        "-o",
        &tar.to_string_lossy(),
        &commit,
    ])?;
    let status = Command::new("tar")
        .arg("-xf")
        .arg(&tar)
        .arg("-C")
        .arg(dir.path())
        .status()
        .map_err(|e| format!("cannot run tar: {e}"))?;
    if !status.success() {
        return Err(format!("tar -xf {}: {status}", tar.display()));
    }
    std::fs::remove_file(&tar).map_err(|e| format!("{}: {e}", tar.display()))?;
    Ok((dir, commit))
}

pub(super) fn postgres_reachable() -> bool {
    std::env::var_os("CAIRN_TEST_POSTGRES_URL").is_some()
        || TcpStream::connect_timeout(
            &SocketAddr::from(([127, 0, 0, 1], 5432)),
            Duration::from_secs(1),
        )
        .is_ok()
}
