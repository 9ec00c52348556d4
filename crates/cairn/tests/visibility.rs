//! A plain dependency sees the public surface and nothing else: backend-only spool decisions,
//! the legacy replay, the migration lock and raw bookkeeping writes, `cairn::backend` (the
//! backend author's side, which carries the lock), `cairn::testkit`, the backend crates' test
//! hooks (`PgSpool`'s forced ids, injected failures, claim-path switches) and the server's
//! `fuzzing` module cannot be named.
//!
//! Inside the workspace this cannot be checked by compiling against `cairn` directly: Cargo
//! unifies features across the packages a build selects, and several (this crate's own
//! dev-dependency, xtask) turn `testkit` on. So the test writes a small crate outside the
//! workspace that depends on `cairn` (default features plus `postgres`, no `testkit`), on the
//! backend crates as a service using one directly would (no `testkit`) and on `cairn-server`
//! (no `fuzzing`) by path, and runs `cargo check --offline` on it with the
//! workspace's lockfile, in a target directory of its own under `CARGO_TARGET_TMPDIR` (kept
//! between runs, so only the first run compiles the dependencies). A positive probe that uses
//! the public surface must compile — so a failure of the negative probes is not a broken
//! harness — and each negative probe must fail with the error that names its item.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The workspace root (this crate is `crates/cairn`).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The probe crate: a manifest with plain dependencies and the workspace's lockfile.
fn probe_crate() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = workspace();
    let manifest = format!(
        r#"[package]
name = "cairn-visibility-probe"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
cairn = {{ path = {cairn:?}, features = ["postgres"] }}
cairn-sqlite = {{ path = {sqlite:?} }}
cairn-postgres = {{ path = {postgres:?} }}
cairn-server = {{ path = {server:?} }}
tokio = "1"

[workspace]
"#,
        cairn = root.join("crates/cairn").display().to_string(),
        sqlite = root.join("crates/backend-sqlite").display().to_string(),
        postgres = root.join("crates/backend-postgres").display().to_string(),
        server = root.join("crates/server").display().to_string(),
    );
    std::fs::write(dir.path().join("Cargo.toml"), manifest).unwrap();
    std::fs::copy(root.join("Cargo.lock"), dir.path().join("Cargo.lock")).unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    dir
}

/// `cargo check` of the probe crate with `source` as its `src/lib.rs`.
fn check(dir: &Path, source: &str) -> Output {
    std::fs::write(dir.join("src/lib.rs"), source).unwrap();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("visibility-probe");
    let mut cmd = Command::new(cargo);
    cmd.current_dir(dir)
        .args(["check", "--offline", "--lib", "--message-format", "short"])
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .env_remove("RUSTC_WORKSPACE_WRAPPER");
    // The variables cargo sets for this test's own package would reach the probe's build
    // scripts (some ask for `CARGO_MANIFEST_DIR`) and make every run rebuild them.
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo_for_this_test) {
            cmd.env_remove(name);
        }
    }
    cmd.output().unwrap()
}

/// Whether `name` is one of the variables cargo sets for the package of the test it runs.
fn set_by_cargo_for_this_test(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
        )
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// What a service uses compiles from a plain dependency.
const PUBLIC: &str = r#"
use std::time::Duration;
use cairn::legacy::{BackedUp, LegacyImport, LegacyOptions};
use cairn::migrate::{Classification, Migrations, MigrationSet, OpenReport};
use cairn::spool::{
    check_lease, ConsumerBuilder, Job, Outcome, RetentionPolicy, RunFilter, RunState, Spool,
    SpoolConfig,
};

pub async fn service(store: cairn::Store, set: MigrationSet) -> cairn::Result<()> {
    let _ = (RunFilter::default(), RetentionPolicy::default(), SpoolConfig::default());
    let _ = (check_lease(Duration::from_secs(30)), RunState::Queued);
    let queue = cairn::QueueName::new("q")?;
    let _ = SpoolConfig::default().backoff.delay_for(&queue, &cairn::DedupKey::from_parts(["k"])?, 1);
    let _ = cairn::migrate::revision_from_sql("0002_x", "0001_base", "SELECT 1", "x");
    let _ = cairn::backfill::BackfillConfig::default();
    let spool: std::sync::Arc<dyn Spool> = store.spool();
    let worker = ConsumerBuilder::new(spool, queue, cairn::ConsumerId::new("w")?)
        .spawn(|_job: Job| async { Outcome::Done })
        .await?;
    worker.shutdown().await;
    let url = cairn::DatabaseUrl::parse("sqlite:///tmp/x.db")?;
    let m = Migrations::at(&url, false)?;
    let state = m.state(set.name()).await.map_err(cairn::Error::from)?;
    let _: Classification = m.classify(&set, &state);
    let _: OpenReport = m.upgrade(&set, false).await.map_err(cairn::Error::from)?;
    let import = LegacyImport::read(std::path::Path::new("/nonexistent"), &LegacyOptions::default())?;
    let backed: BackedUp = import.back_up()?;
    let _ = backed.import_into(store.spool().as_ref()).await?;
    Ok(())
}

pub fn server() -> std::process::ExitCode {
    cairn_server::main()
}
"#;

/// Paths a plain dependency must not resolve, each with the name its error carries.
const HIDDEN_PATHS: &[(&str, &str)] = &[
    // Backend-only decisions and checks of the spool.
    ("use cairn::spool::transition;", "transition"),
    ("use cairn::spool::nack_action;", "nack_action"),
    ("use cairn::spool::expiry_action;", "expiry_action"),
    ("use cairn::spool::release_action;", "release_action"),
    ("use cairn::spool::check_token;", "check_token"),
    ("use cairn::spool::check_append;", "check_append"),
    ("use cairn::spool::check_import;", "check_import"),
    ("use cairn::spool::plan_run_batch;", "plan_run_batch"),
    ("use cairn::spool::plan_event_batch;", "plan_event_batch"),
    ("use cairn::spool::RetentionPass;", "RetentionPass"),
    ("use cairn::spool::backoff_ceiling;", "backoff_ceiling"),
    ("use cairn::spool::jitter_seed;", "jitter_seed"),
    // Test machinery and the runner's helpers.
    ("use cairn::backfill::SimulatedPacer;", "SimulatedPacer"),
    ("use cairn::backfill::pause_after;", "pause_after"),
    ("use cairn::migrate::split_statements;", "split_statements"),
    // The legacy replay (the operator API is `cairn::legacy`).
    ("use cairn::spool::legacy;", "legacy"),
    ("use cairn::legacy::plan;", "plan"),
    ("use cairn::legacy::seal_record;", "seal_record"),
    // The migration lock and raw bookkeeping writes.
    ("use cairn::migrate::MigrationBackend;", "MigrationBackend"),
    ("use cairn::migrate::LockedMigration;", "LockedMigration"),
    ("use cairn::migrate::Runner;", "Runner"),
    ("use cairn::migrate::migrator;", "migrator"),
    (
        "use cairn::migrate::migration_backend;",
        "migration_backend",
    ),
    // The backend author's side (feature `backend`: it carries the migration lock), test
    // support with the backends' test hooks, and the server's fuzzing entry points.
    ("use cairn::backend;", "backend"),
    ("use cairn::testkit;", "testkit"),
    ("use cairn_sqlite::testkit;", "testkit"),
    ("use cairn_postgres::testkit;", "testkit"),
    ("use cairn_postgres::spool::testkit;", "testkit"),
    ("use cairn_server::fuzzing;", "fuzzing"),
];

/// Methods and fields a plain dependency must not reach on public types.
const HIDDEN_MEMBERS: &str = r#"
pub async fn lock(m: cairn::migrate::Migrations) {
    let _ = m.lock(std::time::Duration::from_secs(1)).await;
}
pub async fn write(m: cairn::migrate::Migrations) {
    let _ = m.write_state("cairn", "0001", None).await;
}
pub fn field(m: cairn::migrate::Migrations) {
    let _ = m.backend;
}
pub fn hooks(s: cairn_postgres::PgSpool) {
    s.testkit_force_next_run_ids(Vec::new());
    s.testkit_fail_next_batch();
    s.testkit_one_statement_claims(true);
}
"#;

#[test]
fn a_plain_dependency_cannot_name_internals() {
    let dir = probe_crate();

    let public = check(dir.path(), PUBLIC);
    assert!(
        public.status.success(),
        "the public surface must compile from a plain dependency:\n{}",
        stderr(&public)
    );

    let source: String = HIDDEN_PATHS
        .iter()
        .map(|(line, _)| format!("{line}\n"))
        .collect();
    let paths = check(dir.path(), &source);
    assert!(!paths.status.success(), "internals resolved:\n{source}");
    let err = stderr(&paths);
    for (line, name) in HIDDEN_PATHS {
        // One error per line, naming the path or the item: `error[E0432]: unresolved import
        // `cairn::spool::transition``, or E0603 for an item that exists but is private.
        let path = line.trim_start_matches("use ").trim_end_matches(';');
        let named = err.lines().any(|l| {
            l.contains("error[E0")
                && (l.contains(&format!("`{path}`")) || l.contains(&format!("`{name}`")))
        });
        assert!(named, "{line} is not refused by name:\n{err}");
    }
    let refused = err.lines().filter(|l| l.contains("error[E0")).count();
    assert!(refused >= HIDDEN_PATHS.len(), "{err}");

    let members = check(dir.path(), HIDDEN_MEMBERS);
    assert!(!members.status.success());
    let err = stderr(&members);
    for (code, name) in [
        ("E0599", "lock"),
        ("E0599", "write_state"),
        ("E0616", "backend"),
        ("E0599", "testkit_force_next_run_ids"),
        ("E0599", "testkit_fail_next_batch"),
        ("E0599", "testkit_one_statement_claims"),
    ] {
        assert!(
            err.lines()
                .any(|l| l.contains(&format!("error[{code}]")) && l.contains(&format!("`{name}`"))),
            "{name} is reachable (expected {code}):\n{err}"
        );
    }
}
