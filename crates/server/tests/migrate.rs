//! `cairn migrate …` on stores created by an older chain, a newer chain and a diverged chain:
//! status prints upgrade / ahead / refused, the refusal is one line with exit status 1, and
//! `up`, `history` and `repair` do what they say.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use cairn::testkit::sqlite::{SqliteOptions, SqliteStore};
use cairn_migrate::{cairn_revisions, MigrationSet, Revision, Runner, RunnerHooks, CAIRN_SET};

fn run(db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .env_remove("CAIRN_DATABASE")
        .arg("--database")
        .arg(db)
        .arg("migrate")
        .args(args)
        .output()
        .expect("the cairn binary runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).expect("UTF-8")
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn head() -> String {
    cairn_revisions().last().unwrap().id.clone()
}

fn extra(id: &str, parent: &str) -> Revision {
    let sql = vec![format!(
        "CREATE TABLE {id} (id BIGINT NOT NULL PRIMARY KEY)"
    )];
    Revision {
        id: id.into(),
        parent: Some(parent.into()),
        up_sqlite: sql.clone(),
        up_postgres: sql,
        description: id.into(),
    }
}

async fn create(path: &Path, revs: Vec<Revision>, hooks: RunnerHooks) {
    let runner = Runner::new(MigrationSet::new(CAIRN_SET, revs).unwrap()).with_hooks(hooks);
    SqliteStore::open_migrated(path, SqliteOptions::default(), &runner)
        .await
        .expect("create the store");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_of_an_older_store_is_upgrade_and_up_applies_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("old.db");
    // The oldest possible history: the store's tables exist but no runner ever stamped it
    // (a store made before the runner existed).
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        for ddl in cairn_core::schema::epoch_log_ddl(cairn_core::schema::Dialect::Sqlite) {
            conn.execute_batch(&ddl).unwrap();
        }
    }
    let status = ok(run(&db, &["status"]));
    assert!(status.contains("state: upgrade"), "{status}");
    assert!(status.contains("stamp: (none)"), "{status}");
    let all: Vec<String> = cairn_revisions().into_iter().map(|r| r.id).collect();
    assert!(
        status.contains(&format!("pending: {}", all.join(" "))),
        "{status}"
    );
    let up = ok(run(&db, &["up"]));
    assert!(up.contains("upgraded"), "{up}");
    let status = ok(run(&db, &["status"]));
    assert!(status.contains("state: at head"), "{status}");
    let history = ok(run(&db, &["history"]));
    assert_eq!(history.lines().count(), all.len(), "{history}");
    for (line, id) in history.lines().zip(&all) {
        assert!(
            line.starts_with(id.as_str()) && line.contains(" applied "),
            "{history}"
        );
    }
    assert_eq!(
        ok(run(&db, &["up"])).trim(),
        format!("at head {}; nothing to do", head())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_of_a_newer_store_is_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("new.db");
    let mut revs = cairn_revisions();
    revs.push(extra("t_newer", &head()));
    create(&db, revs, RunnerHooks::default()).await;
    let status = ok(run(&db, &["status"]));
    assert!(status.contains("state: ahead"), "{status}");
    assert!(status.contains("stamp: t_newer"), "{status}");
    assert!(ok(run(&db, &["repair"])).contains("ahead"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_of_a_diverged_store_is_refused_in_one_line_with_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("diverged.db");
    let mut revs = cairn_revisions();
    revs.push(extra("t_theirs", &head()));
    // Upgraded by a runner that records no lineage: this build cannot tell it descends.
    create(
        &db,
        revs,
        RunnerHooks {
            skip_lineage: true,
            ..RunnerHooks::default()
        },
    )
    .await;
    let before = std::fs::read(&db).unwrap();
    for action in ["status", "up", "repair"] {
        let out = run(&db, &[action]);
        assert_eq!(out.status.code(), Some(1), "{action}");
        assert_eq!(text(&out.stdout), "", "{action}");
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{action}: {err}");
        assert!(
            err.starts_with("cairn: ") && err.contains("t_theirs") && err.contains(&head()),
            "{err}"
        );
    }
    assert_eq!(
        std::fs::read(&db).unwrap(),
        before,
        "a refused store is not changed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_records_a_missing_lineage_only_when_due() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("repair.db");
    create(
        &db,
        cairn_revisions(),
        RunnerHooks {
            skip_lineage: true,
            ..RunnerHooks::default()
        },
    )
    .await;
    // A store at this build's head without a lineage gets it recorded, once.
    let status = ok(run(&db, &["status"]));
    assert!(status.contains("lineage repair due"), "{status}");
    let out = ok(run(&db, &["repair"]));
    assert!(
        out.contains(&format!("lineage recorded at {}", head())),
        "{out}"
    );
    let out = ok(run(&db, &["repair"]));
    assert!(out.contains("nothing to repair"), "{out}");

    // A store at the base revision is exempt: every history contains it.
    let base_db = dir.path().join("base.db");
    create(
        &base_db,
        cairn_revisions()[..1].to_vec(),
        RunnerHooks {
            skip_lineage: true,
            ..RunnerHooks::default()
        },
    )
    .await;
    let out = run(&base_db, &["repair"]);
    let stdout = text(&out.stdout);
    assert!(
        !stdout.contains("lineage recorded"),
        "a base store is behind this build, not repaired: {stdout}"
    );
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&dir.path().join("x.db"), &["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn status_of_a_missing_store_is_refused_without_creating_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("missing.db");
    let out = run(&db, &["status"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!db.exists());
}

/// A one-shot command does not upgrade a store behind this build: `heads` (a read) and
/// `append` (a write) on a store an older build made both fail with exit 1 and one line naming
/// the stamp and `cairn migrate up`, and the store stays at its stamp; after `cairn migrate up`
/// both work. On both engines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shot_commands_refuse_a_store_behind_this_build_and_change_nothing() {
    let older = "0009_spool_flow";
    let (_dir, urls, pg, schema) = common::sqlite_and_postgres("cairn_behind").await;
    for url in &urls {
        common::made_by_an_older_build(url, older).await;
    }
    let urls2 = urls.clone();
    let outs = tokio::task::spawn_blocking(move || {
        urls2
            .iter()
            .map(|url| {
                let cmd = |args: &[&str]| common::cairn(url).args(args).output().unwrap();
                let heads = cmd(&["heads", "--space", "s"]);
                let append = cmd(&["append", "--space", "s", "--kind", "k", "--payload", "p"]);
                // A sync's store sides are opened the same way, source and destination.
                let other = format!("{}.other.db", urls2[0]);
                ok(common::cairn(&other)
                    .args(["append", "--space", "o", "--kind", "k", "--payload", "p"])
                    .output()
                    .unwrap());
                let sync_from = common::cairn(url)
                    .args(["sync", url, &other, "--all-spaces"])
                    .output()
                    .unwrap();
                let sync_to = common::cairn(url)
                    .args(["sync", &other, url, "--all-spaces"])
                    .output()
                    .unwrap();
                let status = cmd(&["migrate", "status"]);
                let up = cmd(&["migrate", "up"]);
                let append_after =
                    cmd(&["append", "--space", "s", "--kind", "k", "--payload", "p"]);
                let heads_after = cmd(&["heads", "--space", "s"]);
                // A sync between stores at head leaves no entry in either's fleet registry.
                let synced = common::cairn(url)
                    .args(["sync", url, &other, "--all-spaces", "--both-ways"])
                    .output()
                    .unwrap();
                let fleets = [
                    cmd(&["migrate", "fleet"]),
                    common::cairn(&other)
                        .args(["migrate", "fleet"])
                        .output()
                        .unwrap(),
                ];
                (
                    heads,
                    append,
                    sync_from,
                    sync_to,
                    status,
                    up,
                    append_after,
                    heads_after,
                    synced,
                    fleets,
                )
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    common::drop_schema(&pg, &schema).await;
    for (
        engine,
        (heads, append, sync_from, sync_to, status, up, append_after, heads_after, synced, fleets),
    ) in ["sqlite", "postgres"].iter().zip(outs)
    {
        for (what, out) in [
            ("heads", &heads),
            ("append", &append),
            ("sync from", &sync_from),
            ("sync to", &sync_to),
        ] {
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{engine} {what}: {err}");
            assert_eq!(err.lines().count(), 1, "{engine} {what}: {err}");
            assert!(
                err.contains(older) && err.contains("behind") && err.contains("cairn migrate up"),
                "{engine} {what}: {err}"
            );
            assert_eq!(text(&out.stdout), "", "{engine} {what}");
        }
        let status = ok(status);
        assert!(
            status.contains(&format!("stamp: {older}")) && status.contains("state: upgrade"),
            "{engine}: the refusals changed nothing: {status}"
        );
        assert!(ok(up).contains("upgraded"), "{engine}");
        let appended = ok(append_after);
        assert!(appended.starts_with("1 "), "{engine}: {appended}");
        assert_eq!(ok(heads_after).lines().count(), 1, "{engine}");
        ok(synced);
        for fleet in fleets {
            assert_eq!(ok(fleet).trim(), "no live builds", "{engine}");
        }
    }
}

/// A read-only command, or a sync from it, on a SQLite file that holds no stamp of cairn's
/// set — an empty SQLite database, or a store made before the migration runner existed —
/// refuses it as no store and writes nothing (each used to create or upgrade cairn's tables
/// in it), and so does a sync from an empty Postgres schema; `cairn migrate up` adopts the old
/// store, after which commands use it.
#[test]
fn a_read_on_a_sqlite_file_without_a_stamp_refuses_it_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.db");
    rusqlite::Connection::open(&empty)
        .unwrap()
        .execute_batch("PRAGMA user_version = 7")
        .unwrap();
    let unstamped = dir.path().join("unstamped.db");
    {
        let conn = rusqlite::Connection::open(&unstamped).unwrap();
        for ddl in cairn_core::schema::epoch_log_ddl(cairn_core::schema::Dialect::Sqlite) {
            conn.execute_batch(&ddl).unwrap();
        }
    }
    let tables = |db: &Path| -> Vec<String> {
        let conn = rusqlite::Connection::open(db).unwrap();
        let mut stmt = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .unwrap();
        let names = stmt
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<Vec<String>, _>>()
            .unwrap();
        names
    };
    let dest = dir.path().join("dest.db");
    for db in [&empty, &unstamped] {
        let before = tables(db);
        let path = db.to_str().unwrap();
        let heads = common::cairn(path)
            .args(["heads", "--space", "s"])
            .output()
            .unwrap();
        // As a sync's source, which must be a store.
        let sync = common::cairn(path)
            .args(["sync", path, dest.to_str().unwrap(), "--all-spaces"])
            .output()
            .unwrap();
        for out in [heads, sync] {
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{}: {err}", db.display());
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                err.contains("not found") || err.contains("no cairn store"),
                "{err}"
            );
            assert_eq!(tables(db), before, "{}: nothing was created", db.display());
        }
    }
    // The same for an empty Postgres schema as a sync's source.
    common::on_postgres("cairn_unstamped", |url| {
        let schema = url.rsplit("cairn_schema=").next().unwrap().to_owned();
        let pg = url
            .split_once("cairn_schema=")
            .unwrap()
            .0
            .trim_end_matches(['?', '&']);
        let count = |sql: &str| -> i64 {
            tokio::runtime::Runtime::new().unwrap().block_on(async {
                use sqlx::Connection;
                let mut conn = sqlx::PgConnection::connect(pg).await.unwrap();
                sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
                sqlx::query_scalar(
                    "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1",
                )
                .bind(&schema)
                .fetch_one(&mut conn)
                .await
                .unwrap()
            })
        };
        assert_eq!(count(&format!("CREATE SCHEMA {schema}")), 0);
        let out = common::cairn(url)
            .args(["sync", url, dest.to_str().unwrap(), "--all-spaces"])
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("not found"), "{err}");
        assert_eq!(count("SELECT 1"), 0, "no table was created in the schema");
    });
    assert!(!dest.exists(), "a refused sync creates no destination");
    assert!(ok(run(&unstamped, &["up"])).contains("upgraded"));
    let appended = common::cairn(unstamped.to_str().unwrap())
        .args(["append", "--space", "s", "--kind", "k", "--payload", "p"])
        .output()
        .unwrap();
    assert!(appended.status.success(), "{}", text(&appended.stderr));
    ok(common::cairn(unstamped.to_str().unwrap())
        .args(["heads", "--space", "s"])
        .output()
        .unwrap());
}

/// Issue 25: "no store here" has one verdict on both engines. `status` on a missing SQLite
/// file and on a missing Postgres schema fails alike — exit 1, one line saying there is no
/// cairn store — and creates neither the file nor the schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_of_a_missing_store_is_the_same_verdict_on_both_engines() {
    let (dir, urls, pg, schema) = common::sqlite_and_postgres("cairn_nostore").await;
    let outs = tokio::task::spawn_blocking(move || {
        urls.iter()
            .map(|url| run(Path::new(url), &["status"]))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    for (engine, out) in ["sqlite", "postgres"].iter().zip(&outs) {
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{engine}: {err}");
        assert!(err.starts_with("cairn: no cairn store "), "{engine}: {err}");
        assert_eq!(err.lines().count(), 1, "{engine}: {err}");
        assert_eq!(text(&out.stdout), "", "{engine}: no status is printed");
    }
    assert!(!dir.path().join("spool.db").exists(), "no file was created");
    let created: bool = {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&pg).await.unwrap();
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
            .bind(&schema)
            .fetch_one(&mut conn)
            .await
            .unwrap()
    };
    common::drop_schema(&pg, &schema).await;
    assert!(!created, "no schema was created");
}

fn check(args: &[&str], pg: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .env_remove("CAIRN_DATABASE")
        .arg("--database")
        .arg(dir.path().join("unused.db"))
        .args(["migrate", "check", "--postgres-url", pg])
        .args(args)
        .output()
        .expect("the cairn binary runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_passes_cairns_own_revisions_on_both_backends() {
    let pg = cairn::testkit::postgres::testkit::test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"));
    let out = ok(check(&["--backend", "all"], &pg));
    let revisions = cairn_revisions();
    assert!(
        revisions.len() > 1,
        "cairn's set has revisions after its base"
    );
    for backend in ["sqlite", "postgres"] {
        assert!(
            out.contains(&format!(
                "{backend} {}: base revision, exempt",
                revisions[0].id
            )),
            "{out}"
        );
        // Every later revision reached the engine and passed, except the contract revision
        // on Postgres, whose findings are listed as what it contracts (and do not fail the
        // check: the fleet registry gates it).
        let set = cairn::migrate::cairn_set();
        for rev in &revisions[1..] {
            if backend == "postgres" && set.is_contract(&rev.id) {
                assert!(
                    out.contains(&format!(
                        "{backend} {}: contract (applied once no live build lacks it): ",
                        rev.id
                    )),
                    "{out}"
                );
                continue;
            }
            assert!(out.contains(&format!("{backend} {}: ok", rev.id)), "{out}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fails_with_reasons_on_a_bad_fixture_revision() {
    let pg = cairn::testkit::postgres::testkit::test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"));
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/0002_drops_a_column.sql"
    );
    let out = check(&["--backend", "all", "--with-revision", fixture], &pg);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for backend in ["sqlite", "postgres"] {
        assert!(
            stdout.lines().any(|l| l.starts_with(&format!(
                "{backend} 0002_drops_a_column: statement-kind on epoch_event"
            ))),
            "{backend}: {stdout}"
        );
    }
    assert_eq!(text(&out.stderr).lines().count(), 1);
}

/// The application-set fixtures the facade's tests use too.
fn notes(version: &str) -> String {
    format!(
        "{}/../cairn/tests/fixtures/{version}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// `cairn --database <url> migrate --set notes --source <fixture> args…`.
fn run_set(url: &str, version: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .env_remove("CAIRN_DATABASE")
        .args(["--database", url, "migrate", "--set", "notes", "--source"])
        .arg(notes(version))
        .args(args)
        .output()
        .expect("the cairn binary runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_set_goes_up_runs_ahead_and_a_diverged_one_is_refused_on_both_backends() {
    let dir = tempfile::tempdir().unwrap();
    let pg = cairn::testkit::postgres::testkit::test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"));
    let schema = cairn::testkit::scratch_name("cairn_cli");
    let sep = if pg.contains('?') { '&' } else { '?' };
    let urls = [
        dir.path().join("app.db").display().to_string(),
        format!("{pg}{sep}cairn_schema={schema}"),
    ];
    for url in &urls {
        let up = ok(run_set(url, "notes_v1", &["up"]));
        assert!(
            up.contains("upgraded (empty) -> 0001_notes: applied 0001_notes"),
            "{up}"
        );
        let status = ok(run_set(url, "notes_v1", &["status"]));
        assert!(status.contains("set: notes"), "{status}");
        assert!(status.contains("state: at head"), "{status}");

        let status = ok(run_set(url, "notes_v2", &["status"]));
        assert!(status.contains("state: upgrade"), "{status}");
        assert!(status.contains("pending: 0002_note_tags"), "{status}");
        let up = ok(run_set(url, "notes_v2", &["up"]));
        assert!(up.contains("upgraded 0001_notes -> 0002_note_tags"), "{up}");
        let history = ok(run_set(url, "notes_v2", &["history"]));
        assert_eq!(
            history.lines().filter(|l| l.contains(" applied ")).count(),
            2,
            "{history}"
        );

        // The older build finds the store ahead; a diverged one is refused in one line.
        let status = ok(run_set(url, "notes_v1", &["status"]));
        assert!(status.contains("state: ahead"), "{status}");
        let out = run_set(url, "notes_diverged", &["status"]);
        assert_eq!(out.status.code(), Some(1));
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("0002_note_tags") && err.contains("0002_note_authors"),
            "{err}"
        );
        let out = run_set(url, "notes_diverged", &["up"]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));

        // cairn's own set is a separate history in the same store.
        let own = ok(run(std::path::Path::new(url), &["status"]));
        assert!(own.contains("set: cairn"), "{own}");
    }
    let mut conn = {
        use sqlx::Connection;
        sqlx::PgConnection::connect(&pg).await.unwrap()
    };
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&mut conn)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_additivity_check_runs_on_an_application_set_on_both_engines() {
    let pg = cairn::testkit::postgres::testkit::test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"));
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("unused.db").display().to_string();
    let out = ok(run_set(
        &db,
        "notes_v2",
        &["check", "--backend", "all", "--postgres-url", &pg],
    ));
    for backend in ["sqlite", "postgres"] {
        assert!(
            out.contains(&format!("{backend} 0001_notes: base revision, exempt")),
            "{out}"
        );
        assert!(
            out.contains(&format!("{backend} 0002_note_tags: ok")),
            "{out}"
        );
    }

    let out = run_set(
        &db,
        "notes_breaking",
        &["check", "--backend", "all", "--postgres-url", &pg],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for backend in ["sqlite", "postgres"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("{backend} 0002_drop_body: "))
                    && l.contains("notes")),
            "{backend}: {stdout}"
        );
    }
}

#[test]
fn set_and_source_go_together_and_cairn_is_not_an_application_set() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.db");
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .env_remove("CAIRN_DATABASE")
        .arg("--database")
        .arg(&db)
        .args(["migrate", "--set", "notes", "status"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "--set needs --source");
    let out = run_set(&db.display().to_string(), "notes_v1", &["status"]);
    assert_eq!(out.status.code(), Some(1), "no store yet");
    assert!(!db.exists());
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .env_remove("CAIRN_DATABASE")
        .arg("--database")
        .arg(&db)
        .args(["migrate", "--set", "cairn", "--source"])
        .arg(notes("notes_v1"))
        .arg("up")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("cairn's own set"));
    assert!(!db.exists());
}

/// The journal mode a read-only look at `db` finds.
fn journal_mode(db: &Path) -> String {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap()
}

/// No file SQLite may leave next to `db` exists.
fn no_sidecars(db: &Path) -> bool {
    ["-wal", "-shm", "-journal"].iter().all(|s| {
        let mut p = db.as_os_str().to_owned();
        p.push(s);
        !Path::new(&p).exists()
    })
}

/// Issue 9 item 1: an application's SQLite database in rollback-journal mode. Every
/// `cairn migrate` command — for cairn's set and for an application's — refuses it as
/// `SqliteStore::open` does (one line, exit 1, naming the opt-in), and leaves its bytes and its
/// journal mode exactly as they were.
#[test]
fn migrate_commands_refuse_an_applications_database_and_leave_it_alone() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode = DELETE;
             CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER NOT NULL);
             INSERT INTO orders VALUES (1, 5);",
        )
        .unwrap();
    }
    assert_eq!(journal_mode(&db), "delete");
    let before = std::fs::read(&db).unwrap();
    let db_url = db.display().to_string();
    let runs: Vec<(String, Output)> = ["status", "history", "up", "repair"]
        .into_iter()
        .flat_map(|action| {
            [
                (format!("cairn {action}"), run(&db, &[action])),
                (
                    format!("notes {action}"),
                    run_set(&db_url, "notes_v1", &[action]),
                ),
            ]
        })
        .collect();
    for (what, out) in runs {
        assert_eq!(out.status.code(), Some(1), "{what}: {}", text(&out.stdout));
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{what}: {err}");
        assert!(
            err.contains("another application's tables")
                && err.contains("share_file_with_application"),
            "{what}: {err}"
        );
        // Compared whole, not printed: a page of bytes says less than the journal mode below.
        assert!(
            std::fs::read(&db).unwrap() == before,
            "{what}: the file's bytes changed"
        );
        assert_eq!(journal_mode(&db), "delete", "{what}: the journal mode");
        assert!(no_sidecars(&db), "{what}: no -wal, -shm or -journal left");
    }
}

/// Issue 9 item 1: `cairn migrate status` on a database with no tables yet, in rollback-journal
/// mode, reports a new store and writes nothing (not even the switch to WAL).
#[test]
fn status_of_an_empty_rollback_journal_database_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("empty.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch("PRAGMA journal_mode = DELETE; PRAGMA user_version = 7;")
            .unwrap();
    }
    let before = std::fs::read(&db).unwrap();
    for action in ["status", "history"] {
        let out = ok(run(&db, &[action]));
        if action == "status" {
            assert!(out.contains("state: upgrade"), "{out}");
        }
        assert_eq!(journal_mode(&db), "delete", "{action}");
        assert!(
            std::fs::read(&db).unwrap() == before,
            "{action}: the file's bytes changed"
        );
        assert!(no_sidecars(&db), "{action}");
    }
}

/// Issue 9 item 6: a store whose stamp row was deleted, or whose lineage table was dropped, by
/// hand is refused by `status` and `up` naming `cairn migrate repair`, and that command
/// restores it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_bookkeeping_is_refused_naming_repair_which_restores_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("lost.db");
    ok(run(&db, &["up"]));
    let at_head = ok(run(&db, &["status"]));
    assert!(at_head.contains("state: at head"), "{at_head}");
    for (damage, repaired) in [
        (
            "DELETE FROM cairn_migration_stamp WHERE set_name = 'cairn'",
            format!("stamp restored at {} from the lineage", head()),
        ),
        (
            "DROP TABLE cairn_migration_lineage",
            format!("lineage table recreated\nlineage recorded at {}", head()),
        ),
    ] {
        rusqlite::Connection::open(&db)
            .unwrap()
            .execute_batch(damage)
            .unwrap();
        let damaged = std::fs::read(&db).unwrap();
        for action in ["status", "up"] {
            let out = run(&db, &[action]);
            assert_eq!(out.status.code(), Some(1), "{damage}: {action}");
            let err = text(&out.stderr);
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                err.contains("inconsistent") && err.contains("run `cairn migrate repair`"),
                "{damage}: {action}: {err}"
            );
        }
        assert_eq!(
            std::fs::read(&db).unwrap(),
            damaged,
            "{damage}: refused, unchanged"
        );
        assert_eq!(ok(run(&db, &["repair"])).trim(), repaired, "{damage}");
        assert_eq!(ok(run(&db, &["status"])), at_head, "{damage}: repaired");
        assert!(ok(run(&db, &["repair"])).contains("nothing to repair"));
    }
}

/// The M9 gap, through the binary: a store at this build's head whose lineage is another
/// history's is due for repair, and `cairn migrate repair` records this build's lineage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_replaces_a_foreign_lineage_at_head() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("foreign.db");
    create(&db, cairn_revisions(), RunnerHooks::default()).await;
    let at_head = ok(run(&db, &["status"]));
    // Another history: cairn's base, then a revision this build does not know.
    let mut theirs = cairn_revisions()[..1].to_vec();
    theirs.push(extra("t_theirs", &theirs[0].id));
    let foreign = MigrationSet::new(CAIRN_SET, theirs)
        .unwrap()
        .lineage(cairn_core::schema::Dialect::Sqlite);
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute("DELETE FROM cairn_migration_lineage", [])
            .unwrap();
        for (i, e) in foreign.iter().enumerate() {
            conn.execute(
                "INSERT INTO cairn_migration_lineage (set_name, position, revision, checksum) \
                 VALUES ('cairn', ?1, ?2, ?3)",
                rusqlite::params![i as i64, e.revision, e.checksum.to_hex()],
            )
            .unwrap();
        }
    }
    let status = ok(run(&db, &["status"]));
    assert!(status.contains("lineage repair due"), "{status}");
    assert!(status.contains("t_theirs"), "{status}");
    assert_eq!(
        ok(run(&db, &["repair"])).trim(),
        format!("lineage recorded at {}", head())
    );
    assert_eq!(ok(run(&db, &["status"])), at_head);
}

#[test]
fn the_postgres_check_needs_an_explicit_scratch_server_never_the_stores_database() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .env_remove("CAIRN_DATABASE")
        .env_remove("CAIRN_CHECK_POSTGRES_URL")
        .arg("--database")
        .arg(dir.path().join("x.db"))
        .args(["migrate", "check", "--backend", "postgres"])
        .output()
        .unwrap();
    // A missing flag is a usage error (issue 25): exit 2, naming the flag and the variable.
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("--postgres-url") && err.contains("CAIRN_CHECK_POSTGRES_URL"),
        "{err}"
    );

    let store = "postgres://app:hunter2@127.0.0.1:1/app?cairn_schema=app";
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .env_remove("CAIRN_DATABASE")
        .env_remove("CAIRN_CHECK_POSTGRES_URL")
        .args([
            "--database",
            store,
            "migrate",
            "check",
            "--backend",
            "postgres",
        ])
        .args(["--postgres-url", "postgres://app:hunter2@127.0.0.1:1/app"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("must not be the store's own database"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
}

/// `cairn --database <url> migrate --set dnotes --source <dir> args…`.
fn run_source(url: &str, dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .env_remove("CAIRN_DATABASE")
        .args(["--database", url, "migrate", "--set", "dnotes", "--source"])
        .arg(dir)
        .args(args)
        .output()
        .expect("the cairn binary runs")
}

/// Writes the files of one build's set into a new directory under `root`.
fn build_dir(root: &std::path::Path, name: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for (file, sql) in files {
        std::fs::write(dir.join(file), sql).unwrap();
    }
    dir
}

/// Issue 13: `cairn migrate down --to REV` run by the older build — whose source has no down
/// file — rolls the store back with the down SQL stored at apply time, after which that build
/// is at head; past a revision applied without down SQL it is refused in one line naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_run_by_the_older_build_uses_the_stored_sql_on_both_backends() {
    let dir = tempfile::tempdir().unwrap();
    let base = (
        "0001_notes.sql",
        "CREATE TABLE dn_notes (id BIGINT NOT NULL PRIMARY KEY, body TEXT NOT NULL);",
    );
    let tags = (
        "0002_note_tags.sql",
        "ALTER TABLE dn_notes ADD COLUMN tag TEXT;",
    );
    let tags_down = (
        "0002_note_tags.down.sql",
        "ALTER TABLE dn_notes DROP COLUMN tag;",
    );
    let plain = ("0003_plain.sql", "CREATE TABLE dn_plain (id BIGINT);");
    let v1 = build_dir(dir.path(), "v1", &[base]);
    let v2 = build_dir(dir.path(), "v2", &[base, tags, tags_down]);
    let v3 = build_dir(dir.path(), "v3", &[base, tags, tags_down, plain]);
    let pg = cairn::testkit::postgres::testkit::test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"));
    let schema = cairn::testkit::scratch_name("cairn_cli_down");
    let sep = if pg.contains('?') { '&' } else { '?' };
    let urls = [
        dir.path().join("down.db").display().to_string(),
        format!("{pg}{sep}cairn_schema={schema}"),
    ];
    for url in &urls {
        ok(run_source(url, &v1, &["up"]));
        ok(run_source(url, &v2, &["up"]));
        let down = ok(run_source(url, &v1, &["down", "--to", "0001_notes"]));
        assert!(
            down.contains("rolled back 0002_note_tags -> 0001_notes: undid 0002_note_tags"),
            "{down}"
        );
        let status = ok(run_source(url, &v1, &["status"]));
        assert!(status.contains("state: at head"), "{status}");
        let again = ok(run_source(url, &v1, &["down", "--to", "0001_notes"]));
        assert!(again.contains("nothing to do"), "{again}");

        ok(run_source(url, &v3, &["up"]));
        let out = run_source(url, &v1, &["down", "--to", "0001_notes"]);
        assert_ne!(out.status.code(), Some(0));
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("0003_plain") && err.contains("no stored down SQL"),
            "{err}"
        );
        let status = ok(run_source(url, &v3, &["status"]));
        assert!(status.contains("state: at head"), "{status}");
    }
    let mut conn = {
        use sqlx::Connection;
        sqlx::PgConnection::connect(&pg).await.unwrap()
    };
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&mut conn)
        .await
        .unwrap();
}

/// Issue 13: `cairn migrate fleet` lists the live builds (a service's open store) with the
/// newest revision each knows; `cairn migrate up` refuses a contract revision in one line
/// naming the live build that lacks it (exit 1, nothing applied), and `up --force` applies it,
/// saying so on stdout and stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_lists_live_builds_and_up_force_applies_a_refused_contract_on_both_backends() {
    let dir = tempfile::tempdir().unwrap();
    let base = (
        "0001_notes.sql",
        "CREATE TABLE dn_notes (id BIGINT NOT NULL PRIMARY KEY, body TEXT NOT NULL);",
    );
    let expand = (
        "0002_title.sql",
        "ALTER TABLE dn_notes ADD COLUMN title TEXT;",
    );
    let contract = (
        "0003_drop_body.sql",
        "-- cairn:contract\n-- body moved to title\nALTER TABLE dn_notes DROP COLUMN body;",
    );
    let v1 = build_dir(dir.path(), "v1", &[base]);
    let v3 = build_dir(dir.path(), "v3", &[base, expand, contract]);
    let pg = cairn::testkit::postgres::testkit::test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"));
    let schema = cairn::testkit::scratch_name("cairn_cli_fleet");
    let sep = if pg.contains('?') { '&' } else { '?' };
    let urls = [
        dir.path().join("fleet.db").display().to_string(),
        format!("{pg}{sep}cairn_schema={schema}"),
    ];
    for url in &urls {
        let empty = ok(run_source(url, &v1, &["up"]));
        assert!(empty.contains("upgraded"), "{empty}");
        assert_eq!(
            ok(run_source(url, &v1, &["fleet"])).trim(),
            "no live builds"
        );
        let service = cairn::Store::builder(url.as_str())
            .migrations(MigrationSet::from_dir("dnotes", &v1).unwrap())
            .build_id("svc-v1")
            .fleet_host("node-7")
            .open()
            .await
            .unwrap();
        let listed = ok(run_source(url, &v1, &["fleet"]));
        assert_eq!(listed.lines().count(), 1, "{listed}");
        assert!(
            listed.starts_with("svc-v1 host=node-7 pid=")
                && listed.contains("dnotes@0001_notes")
                && listed.contains("cairn@0011_spool_room"),
            "{listed}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&ok(run_source(url, &v1, &["fleet", "--json"]))).unwrap();
        assert_eq!(json["builds"][0]["build"], "svc-v1");
        assert_eq!(json["builds"][0]["heads"]["dnotes"], "0001_notes");
        assert_eq!(json["builds"][0]["pid"], std::process::id());

        let out = run_source(url, &v3, &["up"]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        for part in [
            "0003_drop_body",
            "svc-v1",
            "node-7",
            "knows 0001_notes",
            "--force",
        ] {
            assert!(err.contains(part), "names {part}: {err}");
        }
        let status = ok(run_source(url, &v3, &["status"]));
        assert!(
            status.contains("stamp: 0001_notes"),
            "nothing applied: {status}"
        );

        let out = run_source(url, &v3, &["up", "--force"]);
        let forced = ok(out.clone());
        assert!(
            forced.contains("forced contract revision 0003_drop_body past: build svc-v1 on node-7"),
            "{forced}"
        );
        assert!(text(&out.stderr).contains("forced contract revision 0003_drop_body"));
        assert!(
            forced.contains("upgraded 0001_notes -> 0003_drop_body"),
            "{forced}"
        );
        service.close().await.unwrap();
        assert_eq!(
            ok(run_source(url, &v1, &["fleet"])).trim(),
            "no live builds"
        );
    }
    let mut conn = {
        use sqlx::Connection;
        sqlx::PgConnection::connect(&pg).await.unwrap()
    };
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&mut conn)
        .await
        .unwrap();
}

/// The test server's URL with a fresh `cairn_schema`, and the schema's name.
async fn scratch_schema_url(prefix: &str) -> (String, String, String) {
    let pg = cairn::testkit::postgres::testkit::test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"));
    let schema = cairn::testkit::scratch_name(prefix);
    let sep = if pg.contains('?') { '&' } else { '?' };
    (format!("{pg}{sep}cairn_schema={schema}"), pg, schema)
}

async fn drop_schema(pg: &str, schema: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(pg).await.unwrap();
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&mut conn)
        .await
        .unwrap();
}

/// The notes set of the contract tests: 0001 base, 0002 expand, 0003 contract.
fn contract_builds(root: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let base = (
        "0001_notes.sql",
        "CREATE TABLE dn_notes (id BIGINT NOT NULL PRIMARY KEY, body TEXT NOT NULL);",
    );
    let expand = (
        "0002_title.sql",
        "ALTER TABLE dn_notes ADD COLUMN title TEXT;",
    );
    let contract = (
        "0003_drop_body.sql",
        "-- cairn:contract\nALTER TABLE dn_notes DROP COLUMN body;",
    );
    (
        build_dir(root, "v1", &[base]),
        build_dir(root, "v3", &[base, expand, contract]),
    )
}

/// Issue 21 item 14: a store carrying an applied contract revision this build lacks gets the
/// verdict `migrate up` gives — refused, naming the revision — from `migrate status` (exit 1,
/// the same line) and from `doctor` (a problem, not "ahead"), on both backends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_doctor_refuse_a_store_with_a_contract_this_build_lacks_as_up_does() {
    let dir = tempfile::tempdir().unwrap();
    let (v1, v3) = contract_builds(dir.path());
    let (pg_url, pg, schema) = scratch_schema_url("cairn_cli_contract_ahead").await;
    for url in [dir.path().join("ahead.db").display().to_string(), pg_url] {
        // A cairn store (cairn's set records applied contract revisions), then the notes set.
        ok(Command::new(env!("CARGO_BIN_EXE_cairn"))
            .env_remove("CAIRN_DATABASE")
            .args(["--database", &url, "migrate", "up"])
            .output()
            .unwrap());
        ok(run_source(&url, &v1, &["up"]));
        ok(run_source(&url, &v3, &["up"]));

        let up = run_source(&url, &v1, &["up"]);
        assert_eq!(up.status.code(), Some(1), "{}", text(&up.stderr));
        let refusal = text(&up.stderr);
        assert_eq!(refusal.lines().count(), 1, "{refusal}");
        assert!(
            refusal.contains("contract revision 0003_drop_body"),
            "{refusal}"
        );

        let status = run_source(&url, &v1, &["status"]);
        assert_eq!(status.status.code(), Some(1), "{}", text(&status.stdout));
        assert_eq!(text(&status.stderr), refusal, "status says what up says");

        let doctor = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .env_remove("CAIRN_DATABASE")
            .env_remove("CAIRN_CONFIG")
            .args(["--database", &url, "doctor", "--json", "--set", "dnotes"])
            .arg("--source")
            .arg(&v1)
            .output()
            .unwrap();
        assert_eq!(doctor.status.code(), Some(1));
        let report: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
        let check = report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "migrations:dnotes")
            .unwrap_or_else(|| panic!("{report}"))
            .clone();
        assert_eq!(check["ok"], false, "{check}");
        let detail = check["detail"].as_str().unwrap();
        let why = refusal
            .trim_end()
            .split_once("migration set dnotes: ")
            .map(|(_, why)| why)
            .unwrap_or_else(|| panic!("{refusal}"));
        assert!(
            detail.contains("refused") && detail.contains(why),
            "{detail}"
        );
        assert!(!detail.contains("ahead"), "{detail}");
    }
    drop_schema(&pg, &schema).await;
}

/// Issue 21 item 15: a `down` whose stored down SQL fails says the down was rolled back (not
/// "the upgrade"), in one line, and changes nothing, on both backends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_down_says_the_down_was_rolled_back_on_both_backends() {
    let dir = tempfile::tempdir().unwrap();
    let base = (
        "0001_notes.sql",
        "CREATE TABLE dn_notes (id BIGINT NOT NULL PRIMARY KEY);",
    );
    let extra = ("0002_extra.sql", "CREATE TABLE dn_extra (id BIGINT);");
    let broken_down = ("0002_extra.down.sql", "DROP TABLE dn_no_such_table;");
    let v2 = build_dir(dir.path(), "v2", &[base, extra, broken_down]);
    let (pg_url, pg, schema) = scratch_schema_url("cairn_cli_down_fails").await;
    for url in [dir.path().join("downfail.db").display().to_string(), pg_url] {
        ok(run_source(&url, &v2, &["up"]));
        let out = run_source(&url, &v2, &["down", "--to", "0001_notes"]);
        assert_eq!(out.status.code(), Some(1));
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("0002_extra") && err.contains("the down was rolled back"),
            "{err}"
        );
        assert!(!err.contains("upgrade"), "{err}");
        let status = ok(run_source(&url, &v2, &["status"]));
        assert!(status.contains("stamp: 0002_extra"), "{status}");
    }
    drop_schema(&pg, &schema).await;
}

/// Issue 21 item 15: build ids and hosts come from the store, where any writer can put any
/// text; `migrate fleet` and a contract refusal print them with control characters escaped,
/// so an escape sequence plus a newline cannot forge output lines, on both backends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_entries_and_contract_refusals_escape_control_characters_on_both_backends() {
    const BUILD: &str = "svc\u{1b}[1A\u{1b}[2K\rno live builds\nsvc-v9";
    const HOST: &str = "node\u{7}\r\n7";
    let forged = |s: &str| s.contains(['\u{1b}', '\r', '\u{7}']);
    let dir = tempfile::tempdir().unwrap();
    let (v1, v3) = contract_builds(dir.path());
    let (pg_url, pg, schema) = scratch_schema_url("cairn_cli_fleet_escape").await;
    for url in [dir.path().join("escape.db").display().to_string(), pg_url] {
        ok(run_source(&url, &v1, &["up"]));
        let service = cairn::Store::builder(url.as_str())
            .migrations(MigrationSet::from_dir("dnotes", &v1).unwrap())
            .build_id(BUILD)
            .fleet_host(HOST)
            .open()
            .await
            .unwrap();

        let listed = ok(run_source(&url, &v1, &["fleet"]));
        assert_eq!(listed.lines().count(), 1, "{listed:?}");
        assert!(!forged(&listed), "{listed:?}");
        assert!(
            listed.starts_with(
                "svc\\u{1b}[1A\\u{1b}[2K\\rno live builds\\nsvc-v9 host=node\\u{7}\\r\\n7 pid="
            ),
            "{listed:?}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&ok(run_source(&url, &v1, &["fleet", "--json"]))).unwrap();
        assert_eq!(
            json["builds"][0]["build"], BUILD,
            "JSON keeps the text exact"
        );

        let out = run_source(&url, &v3, &["up"]);
        assert_eq!(out.status.code(), Some(1));
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err:?}");
        assert!(!forged(&err), "{err:?}");
        assert!(
            err.contains(
                "build svc\\u{1b}[1A\\u{1b}[2K\\rno live builds\\nsvc-v9 on node\\u{7}\\r\\n7"
            ),
            "{err:?}"
        );

        let out = run_source(&url, &v3, &["up", "--force"]);
        let forced = ok(out.clone());
        assert!(!forced.contains(['\u{1b}', '\r', '\u{7}']), "{forced:?}");
        assert!(
            forced
                .lines()
                .all(|l| l.starts_with("forced contract revision") || l.starts_with("upgraded")),
            "{forced:?}"
        );
        let logged = text(&out.stderr);
        assert_eq!(logged.lines().count(), 1, "{logged:?}");
        assert!(!forged(&logged), "{logged:?}");
        service.close().await.unwrap();
    }
    drop_schema(&pg, &schema).await;
}

/// A fixture set of `crates/migrate/tests/fixtures` (single-engine sets).
fn single_engine_fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../migrate/tests/fixtures")
        .join(name)
}

/// `cairn --database <url> migrate --set solo --source <fixture> args…`.
fn run_solo(url: &str, fixture: &str, args: &[&str]) -> Output {
    common::cairn(url)
        .args(["migrate", "--set", "solo", "--source"])
        .arg(single_engine_fixture(fixture))
        .args(args)
        .output()
        .expect("the cairn binary runs")
}

/// Issue 25: a SQLite-only set (no `.postgres.sql` file) goes up and is checked on SQLite
/// without a Postgres server; on a Postgres store `status`, `up` and `check --backend
/// postgres` refuse it in one line naming the missing dialect (exit 1), while a Postgres-only
/// set goes up there.
#[test]
fn a_single_engine_set_runs_on_its_engine_and_is_refused_on_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("solo.db").display().to_string();
    let up = ok(run_solo(&db, "sqlite_only", &["up"]));
    assert!(up.contains("0002_note_tags"), "{up}");
    let status = ok(run_solo(&db, "sqlite_only", &["status"]));
    assert!(status.contains("state: at head"), "{status}");
    for backend in ["all", "sqlite"] {
        let out = run_solo(&db, "sqlite_only", &["check", "--backend", backend]);
        let stdout = ok(out);
        assert!(stdout.contains("sqlite 0002_note_tags: ok"), "{stdout}");
        assert!(
            stdout.contains("postgres: not checked: set solo is sqlite-only"),
            "{stdout}"
        );
    }
    let refused = run_solo(&db, "sqlite_only", &["check", "--backend", "postgres"]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused.stderr));
    let err = text(&refused.stderr);
    assert!(
        err.contains("SQLite-only") && err.contains("no Postgres SQL"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    common::on_postgres("cairn_solo", |pg| {
        for args in [&["status"][..], &["up"]] {
            let out = run_solo(pg, "sqlite_only", args);
            assert_eq!(
                out.status.code(),
                Some(1),
                "{args:?}: {}",
                text(&out.stderr)
            );
            let err = text(&out.stderr);
            assert!(
                err.contains("SQLite-only")
                    && err.contains("no Postgres SQL")
                    && err.contains("0002_note_tags.postgres.sql"),
                "{args:?}: {err}"
            );
        }
        let up = ok(run_solo(pg, "postgres_only", &["up"]));
        assert!(up.contains("0002_note_tags"), "{up}");
        let status = ok(run_solo(pg, "postgres_only", &["status"]));
        assert!(status.contains("state: at head"), "{status}");
    });
}

/// Issue 25: `cairn --help` describes all three capabilities in its first line: the epoch log,
/// the spool and the migrations.
#[test]
fn the_binarys_description_names_the_epoch_log_the_spool_and_migrations() {
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("--help")
        .output()
        .expect("the cairn binary runs");
    let help = ok(out);
    let first = help.lines().next().unwrap_or_default();
    for part in ["epoch log", "spool", "lineage-aware schema migrations"] {
        assert!(first.contains(part), "{part:?} missing: {first}");
    }
}
