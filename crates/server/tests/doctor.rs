//! `cairn doctor`, run as an operator runs it: the real binary against SQLite files (healthy,
//! stale caches, damaged) and a fresh Postgres schema.

mod common;

use std::process::{Command, Output};

use cairn::{Event, SpaceId};
use serde_json::Value;

/// A temporary directory private to this test process, given to every command as `TMPDIR`:
/// doctor looks there for the additivity check's leftovers, and other processes' leftovers in
/// the machine's temporary directory are not this test's business.
fn private_tmp() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

fn cairn(db: &str) -> Command {
    cairn_in(db, private_tmp())
}

fn cairn_in(db: &str, tmp: &std::path::Path) -> Command {
    let mut cmd = common::cairn(db);
    cmd.env("TMPDIR", tmp);
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
    assert!(
        stdout.contains("pending=0 scheduled=0 claimed=0 parked=0"),
        "{stdout}"
    );
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

/// A fresh database of its own on the test server (fails when there is none): the scratch
/// check looks at every schema of the database, and other tests' additivity checks leave
/// theirs in the shared one. Returns its URL and a guard that drops it.
async fn fresh_database() -> (String, DropDatabase) {
    use sqlx::Connection;
    let pg = cairn::testkit::postgres::testkit::test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"));
    let name = cairn::testkit::scratch_name("cairn_doctor");
    let mut conn = sqlx::PgConnection::connect(&pg).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .unwrap();
    let (base, query) = pg
        .split_once('?')
        .map_or((pg.as_str(), None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut url = format!("{}/{name}", &base[..path_start]);
    if let Some(q) = query {
        url.push('?');
        url.push_str(q);
    }
    (url, DropDatabase { admin: pg, name })
}

/// Drops the database when the test ends, however it ends.
struct DropDatabase {
    admin: String,
    name: String,
}

impl Drop for DropDatabase {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                use sqlx::Connection;
                let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut conn)
                    .await
                    .unwrap();
            });
        })
        .join()
        .unwrap();
    }
}

/// Postgres: the tables check and the rest on a fresh database of the test server (fails when
/// there is none).
#[tokio::test]
async fn a_healthy_postgres_store_passes_every_check() {
    let (url, _guard) = fresh_database().await;
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
    assert_eq!(check(&report, "scratch")["ok"], true);
}

/// A parked run is a warning naming the commands that show and retry it (the store stays
/// healthy; `crates/server/tests/parked.rs` has the threshold); run-event bytes over the cap
/// configured in the environment (`CAIRN_SPOOL__RETENTION_MAX_BYTES`) are a problem.
/// `pending` counts the queued runs due now, `scheduled` those due later, as `/metrics` does.
#[tokio::test]
async fn runs_due_later_are_scheduled_not_pending() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let db = path.to_str().unwrap().to_owned();
    {
        use cairn::spool::EnqueueOptions;
        let store = cairn::Store::open(&db).await.unwrap();
        let spool = store.spool();
        let queue = cairn::QueueName::new("gate").unwrap();
        let later = cairn::Timestamp::from_system_time(
            std::time::SystemTime::now() + std::time::Duration::from_secs(24 * 3600),
        )
        .unwrap();
        for (key, not_before) in [
            ("now", None),
            ("later-1", Some(later)),
            ("later-2", Some(later)),
        ] {
            let options = EnqueueOptions {
                not_before,
                ..EnqueueOptions::default()
            };
            spool
                .enqueue(
                    &queue,
                    &cairn::DedupKey::from_parts([key]).unwrap(),
                    Vec::new(),
                    options,
                )
                .await
                .unwrap();
        }
        store.close().await.unwrap();
    }
    let out = tokio::task::spawn_blocking(move || run(&db, &["doctor"]))
        .await
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("pending=1 scheduled=2 claimed=0 parked=0 oldest_queued_age="),
        "{stdout}"
    );
}

#[tokio::test]
async fn parked_runs_are_a_warning_and_retention_over_the_configured_cap_a_problem() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let db = path.to_str().unwrap().to_owned();
    {
        use cairn::spool::{EnqueueOptions, NackKind};
        let store = cairn::Store::open(&db).await.unwrap();
        let spool = store.spool();
        let queue = cairn::QueueName::new("gate").unwrap();
        let key = cairn::DedupKey::from_parts(["k"]).unwrap();
        let run = spool
            .enqueue(&queue, &key, b"p".to_vec(), EnqueueOptions::default())
            .await
            .unwrap();
        spool
            .append_event(
                run.run_id,
                &cairn::RunEventId::new("e1").unwrap(),
                vec![b'x'; 100],
            )
            .await
            .unwrap();
        let consumer = cairn::ConsumerId::new("w").unwrap();
        let claimed = spool
            .claim(&queue, &consumer, std::time::Duration::from_secs(60), 1)
            .await
            .unwrap();
        spool
            .nack(run.run_id, claimed[0].token, NackKind::Permanent, "broken")
            .await
            .unwrap();
        store.close().await.unwrap();
    }
    let (default_cap, small_cap) = tokio::task::spawn_blocking(move || {
        let json = |cap: Option<&str>| {
            let mut cmd = cairn(&db);
            if let Some(cap) = cap {
                cmd.env("CAIRN_SPOOL__RETENTION_MAX_BYTES", cap);
            }
            let out = cmd.args(["doctor", "--json"]).output().unwrap();
            let want = if cap.is_some() { 1 } else { 0 };
            assert_eq!(out.status.code(), Some(want), "{}", text(&out.stderr));
            serde_json::from_slice::<Value>(&out.stdout).unwrap()
        };
        (json(None), json(Some("50")))
    })
    .await
    .unwrap();
    let spool = check(&default_cap, "spool");
    assert_eq!(spool["ok"], true, "{default_cap}");
    assert_eq!(spool["level"], "warning", "{default_cap}");
    assert_eq!(default_cap["healthy"], true, "{default_cap}");
    assert!(spool["detail"].as_str().unwrap().contains("parked=1"));
    let repair = spool["repair"].as_str().unwrap();
    assert!(
        repair.starts_with("cairn runs --state parked; cairn run show ID")
            && repair.contains("cairn run retry ID"),
        "{repair}"
    );
    assert_eq!(
        check(&default_cap, "retention")["ok"],
        true,
        "{default_cap}"
    );
    let retention = check(&small_cap, "retention");
    assert_eq!(retention["ok"], false, "{small_cap}");
    let detail = retention["detail"].as_str().unwrap();
    assert!(
        detail.contains("event bytes 100 of the configured 50-byte cap"),
        "{detail}"
    );
}

/// A scratch directory of the additivity check that no running check owns (no lock file, or
/// an unlocked one) is a leftover whose repair is `cairn migrate check --backend sqlite`; a
/// running check's (locked) directory is not; after the repair, healthy.
#[test]
fn leftover_sqlite_scratch_directories_are_reported_and_migrate_check_removes_them() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let db = db.to_str().unwrap();
    append(db, "a");
    let leftover = cairn::testkit::scratch_name("cairn_additivity");
    std::fs::create_dir(tmp.path().join(&leftover)).unwrap();
    std::fs::write(tmp.path().join(&leftover).join("check.db"), b"synthetic").unwrap();
    let live = cairn::testkit::scratch_name("cairn_additivity");
    std::fs::create_dir(tmp.path().join(&live)).unwrap();
    let lock = std::fs::File::create(tmp.path().join(format!("{live}.lock"))).unwrap();
    fs4::FileExt::try_lock(&lock).unwrap();
    let doctor = || {
        let out = cairn_in(db, tmp.path())
            .args(["doctor", "--json"])
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.code(), report)
    };
    let (code, report) = doctor();
    assert_eq!(code, Some(1), "{report}");
    let scratch = check(&report, "scratch");
    assert_eq!(scratch["ok"], false);
    let detail = scratch["detail"].as_str().unwrap();
    assert!(detail.contains(&leftover), "{detail}");
    assert!(
        !detail.contains(&live),
        "a running check's directory: {detail}"
    );
    assert_eq!(scratch["repair"], "cairn migrate check --backend sqlite");
    let repaired = cairn_in(db, tmp.path())
        .args(["migrate", "check", "--backend", "sqlite"])
        .output()
        .unwrap();
    assert!(repaired.status.success(), "{}", text(&repaired.stderr));
    assert!(
        !tmp.path().join(&leftover).exists(),
        "the repair removed it"
    );
    assert!(tmp.path().join(&live).exists(), "a running check's is kept");
    let (code, report) = doctor();
    assert_eq!(code, Some(0), "{report}");
    drop(lock);
}

/// A scratch schema that no running check's session holds is a leftover: in a Postgres
/// store's own database (repair: a check pointed at it from another store, since a check
/// refuses its own store's database), and on the scratch server `CAIRN_CHECK_POSTGRES_URL`
/// names, whatever the store (repair: `cairn migrate check --backend postgres`). After the
/// repair, healthy.
#[tokio::test]
async fn leftover_postgres_scratch_schemas_are_reported_and_migrate_check_drops_them() {
    let (url, _guard) = fresh_database().await;
    let leftover = cairn::testkit::scratch_name("cairn_add");
    {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        sqlx::query(&format!("CREATE SCHEMA {leftover}"))
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query(&format!("CREATE TABLE {leftover}.t (x int)"))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.db");
    let other = other.to_str().unwrap().to_owned();
    let (before, via_env, repaired, after) = tokio::task::spawn_blocking(move || {
        append(&url, "a");
        append(&other, "a");
        let before = doctor_json(&url);
        let out = cairn(&other)
            .env("CAIRN_CHECK_POSTGRES_URL", &url)
            .args(["doctor", "--json"])
            .output()
            .unwrap();
        let via_env: Value = serde_json::from_slice(&out.stdout).unwrap();
        let repaired = run(
            &other,
            &[
                "migrate",
                "check",
                "--backend",
                "postgres",
                "--postgres-url",
                &url,
            ],
        );
        (before, via_env, repaired, doctor_json(&url))
    })
    .await
    .unwrap();
    assert_eq!(before.0, Some(1), "{}", before.1);
    let scratch = check(&before.1, "scratch");
    assert_eq!(scratch["ok"], false);
    assert!(scratch["detail"].as_str().unwrap().contains(&leftover));
    assert_eq!(
        scratch["repair"],
        "cairn migrate check --backend postgres --postgres-url URL (URL: this database; \
         without --database)"
    );
    let scratch = check(&via_env, "scratch");
    assert_eq!(scratch["ok"], false, "{via_env}");
    assert!(scratch["detail"].as_str().unwrap().contains(&leftover));
    assert_eq!(scratch["repair"], "cairn migrate check --backend postgres");
    assert!(repaired.status.success(), "{}", text(&repaired.stderr));
    assert_eq!(after.0, Some(0), "{}", after.1);
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

/// A store behind only by a contract revision (what a rolling deploy leaves while older builds
/// are live) is a warning that points at the fleet, not a problem: `/v1/doctor` must not turn
/// every new node unhealthy for the length of a deploy.
#[test]
fn a_pending_contract_revision_is_a_warning_not_a_problem() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let db = db.to_str().unwrap();
    let v1 = dir.path().join("v1");
    let v2 = dir.path().join("v2");
    for d in [&v1, &v2] {
        std::fs::create_dir(d).unwrap();
        std::fs::write(
            d.join("0001_t.sql"),
            "CREATE TABLE app_t (x integer, y integer);\n",
        )
        .unwrap();
    }
    std::fs::write(
        v2.join("0002_drop_y.sql"),
        "-- cairn:contract\nALTER TABLE app_t DROP COLUMN y;\n",
    )
    .unwrap();
    append(db, "a");
    let (v1, v2) = (v1.to_str().unwrap(), v2.to_str().unwrap());
    let up = run(db, &["migrate", "--set", "app", "--source", v1, "up"]);
    assert!(up.status.success(), "{}", text(&up.stderr));
    let out = run(db, &["doctor", "--json", "--set", "app", "--source", v2]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let app = check(&report, "migrations:app");
    assert_eq!(app["ok"], true, "{app}");
    assert_eq!(app["level"], "warning", "{app}");
    assert!(
        app["detail"]
            .as_str()
            .unwrap()
            .contains("contract revision(s) pending: 0002_drop_y"),
        "{app}"
    );
    assert_eq!(app["repair"], "cairn migrate fleet --set app --source DIR");
}

/// Issue 21 item 14: a store on a read-only file system is reported as read-only — not as
/// damage to restore from a backup. The file system is made read-only for the doctor alone
/// (tests run as root, where file modes do not stop writes): `unshare -m` gives the command a
/// mount namespace of its own, where the store's directory is bind-mounted read-only over
/// itself; the test fails, never skips, when that cannot be done.
#[test]
fn a_store_on_a_read_only_file_system_is_reported_as_read_only_not_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("ro");
    std::fs::create_dir(&store_dir).unwrap();
    let path = store_dir.join("s.db");
    let db = path.to_str().unwrap();
    append(db, "a");
    let before = std::fs::read(&path).unwrap();
    let d = store_dir.to_str().unwrap();
    // `$0`: the directory; the rest: the command to run in the read-only view.
    let script = r#"mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@""#;
    let doctor = common::cairn(db);
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "sh", "-c", script, d])
        .arg(doctor.get_program())
        .args(doctor.get_args())
        .args(["doctor", "--json"])
        .env("TMPDIR", private_tmp());
    for (var, _) in std::env::vars_os() {
        if var.to_string_lossy().starts_with("CAIRN_") {
            cmd.env_remove(var);
        }
    }
    let out = cmd.output().expect("unshare runs");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor ran in a read-only mount namespace ({e}): {}",
            text(&out.stderr)
        )
    });
    assert_eq!(out.status.code(), Some(1), "{report}");
    let integrity = check(&report, "integrity");
    assert_eq!(integrity["ok"], false, "{integrity}");
    let detail = integrity["detail"].as_str().unwrap();
    assert!(
        detail.contains("the store is read-only (read-only file system)"),
        "{detail}"
    );
    assert!(!detail.contains("backup"), "{detail}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "doctor writes nothing"
    );
    // Outside that namespace the store is writable and healthy.
    let (code, report) = doctor_json(db);
    assert_eq!(code, Some(0), "{report}");
}

/// Issue 22: the binary reaches stores only through the facade — doctor asks the backends'
/// diagnostics — so no driver crate is among its dependencies or named in its source (its
/// tests may use them to set stores up).
#[test]
fn the_binary_names_no_driver_crate() {
    const DRIVERS: [&str; 4] = ["rusqlite", "sqlx", "fs4", "rustix"];
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest: toml::Table = std::fs::read_to_string(root.join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let mut sections = vec![manifest.get("dependencies")];
    if let Some(targets) = manifest.get("target").and_then(|t| t.as_table()) {
        sections.extend(targets.values().map(|t| t.get("dependencies")));
    }
    for deps in sections.into_iter().flatten() {
        for driver in DRIVERS {
            assert!(
                deps.get(driver).is_none(),
                "{driver} is a dependency of the binary"
            );
        }
    }
    let mut dirs = vec![root.join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for driver in DRIVERS {
                assert!(
                    !text.contains(&format!("{driver}::")),
                    "{} names {driver}",
                    path.display()
                );
            }
        }
    }
}

/// After a backfill pass, doctor's head-cache sample counts the spaces `cairn backfill`
/// visited: the pass's reserved marker space is cairn's own record, not a space (issue 25), on
/// both engines.
#[test]
fn doctor_counts_the_spaces_backfill_visits() {
    let case = |db: &str| {
        append(db, "a");
        append(db, "b");
        let pass = run(db, &["backfill", "--backfill-spaces-per-second", "1000"]);
        assert!(pass.status.success(), "{}", text(&pass.stderr));
        let line = text(&pass.stdout);
        let visited: usize = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("visited="))
            .unwrap_or_else(|| panic!("backfill prints visited=N: {line}"))
            .parse()
            .unwrap();
        assert_eq!(visited, 2, "{line}");
        let (code, report) = doctor_json(db);
        assert_eq!(code, Some(0), "{report}");
        assert_eq!(
            check(&report, "head_caches")["detail"],
            format!("{visited} space(s) sampled, every cache current"),
            "doctor counts what backfill visited"
        );
    };
    let dir = tempfile::tempdir().unwrap();
    case(dir.path().join("s.db").to_str().unwrap());
    common::on_postgres("doctor_backfill", case);
}
