//! `cairn doctor`, run as an operator runs it: the real binary against SQLite files (healthy,
//! stale caches, damaged) and a fresh Postgres schema.

use std::process::{Command, Output};

use cairn::{Event, SpaceId};
use serde_json::Value;

fn cairn(db: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
    cmd.env_remove("CAIRN_DATABASE").args(["--database", db]);
    cmd
}

fn run(db: &str, args: &[&str]) -> Output {
    cairn(db)
        .args(args)
        .output()
        .expect("the cairn binary runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).expect("UTF-8")
}

/// Runs `cairn doctor --json`; returns the exit code and the report.
fn doctor_json(db: &str) -> (Option<i32>, Value) {
    let out = run(db, &["doctor", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json prints JSON ({e}): {}", text(&out.stdout)));
    (out.status.code(), report)
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {name} check in {report}"))
}

fn append(db: &str, space: &str) {
    let out = run(
        db,
        &["append", "--space", space, "--kind", "k", "--payload", "p"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// A healthy store: exit 0, every check ok, the counts printed.
#[test]
fn a_healthy_store_passes_every_check() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let db = db.to_str().unwrap();
    append(db, "a");
    let out = run(db, &["doctor"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("ok integrity: quick_check: ok"), "{stdout}");
    assert!(stdout.contains("ok migrations:cairn:"), "{stdout}");
    assert!(stdout.contains("pending=0 claimed=0 parked=0"), "{stdout}");
    assert!(
        stdout.contains("ok head_caches: 1 space(s) sampled"),
        "{stdout}"
    );
    assert_eq!(text(&out.stderr), "");
    let (code, report) = doctor_json(db);
    assert_eq!(code, Some(0));
    assert_eq!(report["healthy"], true);
    assert!(report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["ok"] == true));
}

/// A stale head cache is a problem whose repair is `cairn backfill`; after it, healthy.
#[tokio::test]
async fn a_stale_cache_is_reported_with_cairn_backfill_as_its_repair() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let db = path.to_str().unwrap().to_owned();
    append(&db, "a");
    {
        let store = cairn::testkit::sqlite::SqliteStore::open(&path)
            .await
            .unwrap();
        store
            .legacy_append(
                &SpaceId::new("a").unwrap(),
                None,
                vec![Event::new("k", "legacy")],
            )
            .await
            .unwrap();
    }
    let (before, after) = tokio::task::spawn_blocking(move || {
        let before = doctor_json(&db);
        let repaired = run(&db, &["backfill", "--backfill-spaces-per-second", "1000"]);
        assert!(repaired.status.success(), "{}", text(&repaired.stderr));
        (before, doctor_json(&db))
    })
    .await
    .unwrap();
    assert_eq!(before.0, Some(1), "a problem exits 1");
    assert_eq!(before.1["healthy"], false);
    let caches = check(&before.1, "head_caches");
    assert_eq!(caches["ok"], false);
    assert_eq!(caches["repair"], "cairn backfill");
    assert_eq!(after.0, Some(0));
    assert_eq!(check(&after.1, "head_caches")["ok"], true);
}

/// The error that tells users to run `cairn doctor` is true: doctor names the damage, and the
/// command's own line stays one line.
#[test]
fn a_damaged_file_is_reported_by_doctor_as_the_open_error_says() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.db");
    std::fs::write(&path, vec![0x5a; 8192]).unwrap();
    let db = path.to_str().unwrap();
    let heads = run(db, &["heads", "--space", "a"]);
    assert_eq!(heads.status.code(), Some(1));
    assert!(text(&heads.stderr).contains("run `cairn doctor`"));
    let out = run(db, &["doctor"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("PROBLEM integrity: not a readable SQLite database"),
        "{stdout}"
    );
    assert_eq!(text(&out.stderr).lines().count(), 1);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        vec![0x5a; 8192],
        "doctor writes nothing"
    );
}

/// Postgres: the tables check and the rest on a fresh schema of the test server (fails when
/// there is none).
#[tokio::test]
async fn a_healthy_postgres_store_passes_every_check() {
    let h = cairn::testkit::postgres::testkit::harness().await;
    let base = cairn::testkit::postgres::testkit::test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"));
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}cairn_schema={}", h.schema());
    let _store = h.store().await.unwrap();
    let (code, report) = tokio::task::spawn_blocking(move || {
        append(&url, "a");
        doctor_json(&url)
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(
        check(&report, "integrity")["detail"],
        "every cairn table is present"
    );
    assert_eq!(check(&report, "migrations:cairn")["ok"], true);
    assert_eq!(check(&report, "head_caches")["ok"], true);
}

/// An application set named with `--set/--source` is reported too: never applied, it is behind
/// with `cairn migrate up --set …` as its repair; after that repair the store is healthy.
#[test]
fn an_application_set_behind_is_reported_with_its_migrate_up_command() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let db = db.to_str().unwrap();
    let src = dir.path().join("app");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("0001_t.sql"), "CREATE TABLE app_t (x integer);\n").unwrap();
    let src = src.to_str().unwrap();
    append(db, "a");
    let args = ["doctor", "--json", "--set", "app", "--source", src];
    let out = run(db, &args);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let app = check(&report, "migrations:app");
    assert_eq!(app["ok"], false);
    assert_eq!(app["repair"], "cairn migrate up --set app --source DIR");
    let up = run(db, &["migrate", "--set", "app", "--source", src, "up"]);
    assert!(up.status.success(), "{}", text(&up.stderr));
    let out = run(db, &args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
}
