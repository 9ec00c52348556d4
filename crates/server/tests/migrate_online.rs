//! Issue 48 items 3 and 4 through the binary, on both engines: `cairn migrate up --dry-run`
//! prints the exact statements `up` would run, in order, and changes nothing; `cairn migrate
//! baseline --at REV` adopts a database whose tables were made without cairn (refusing, with the
//! differences, one that does not match); `up --tries` reports the tries an upgrade took.

mod common;

use std::path::Path;
use std::process::Output;

use sqlx::Connection;

const SET: &str = "shop";

use common::{ok, text};

fn migrate(url: &str, dir: &Path, args: &[&str]) -> Output {
    common::cairn(url)
        .args(["migrate", "--set", SET, "--source"])
        .arg(dir)
        .args(args)
        .output()
        .unwrap()
}

/// A SQLite file and a Postgres schema, each an empty location; the second value drops the
/// schema.
async fn locations(dir: &Path) -> (Vec<String>, String, String) {
    let pg = cairn::testkit::postgres::testkit::test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"));
    let schema = cairn::testkit::scratch_name("cairn_online_cli");
    let sep = if pg.contains('?') { '&' } else { '?' };
    (
        vec![
            dir.join("shop.db").display().to_string(),
            format!("{pg}{sep}cairn_schema={schema}"),
        ],
        pg,
        schema,
    )
}

/// A database of its own on the test server, as a baseline's scratch server (never the
/// store's own database); dropped by [`drop_database`].
async fn scratch_database(pg: &str) -> (String, String) {
    let name = cairn::testkit::scratch_name("cairn_scratch_db");
    let mut conn = sqlx::PgConnection::connect(pg).await.unwrap();
    sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .unwrap();
    let opts: sqlx::postgres::PgConnectOptions = pg.parse().unwrap();
    let url = format!(
        "postgres://{}@{}:{}/{name}",
        opts.get_username(),
        opts.get_host(),
        opts.get_port()
    );
    (url, name)
}

async fn drop_database(pg: &str, name: &str) {
    let mut conn = sqlx::PgConnection::connect(pg).await.unwrap();
    sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut conn)
        .await
        .unwrap();
}

async fn drop_schema(pg: &str, schema: &str) {
    let mut conn = sqlx::PgConnection::connect(pg).await.unwrap();
    sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .execute(&mut conn)
        .await
        .unwrap();
}

fn write_set(dir: &Path, files: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    for (name, sql) in files {
        std::fs::write(dir.join(name), sql).unwrap();
    }
}

const ITEMS: &str =
    "-- the items\nCREATE TABLE items (id BIGINT NOT NULL PRIMARY KEY, name TEXT NOT NULL);";
const TAGS: &str = "-- the tags\nCREATE TABLE tags (id BIGINT NOT NULL PRIMARY KEY, label TEXT);\nCREATE INDEX tags_label ON tags (label);";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_dry_run_prints_the_statements_in_order_and_changes_nothing_on_both_engines() {
    let tmp = tempfile::tempdir().unwrap();
    let (urls, pg, schema) = locations(tmp.path()).await;
    let src = tmp.path().join("set");
    write_set(&src, &[("0001_items.sql", ITEMS)]);
    for url in &urls {
        ok(migrate(url, &src, &["up"]));
    }
    write_set(
        &src,
        &[
            ("0002_tags.sql", TAGS),
            (
                "0003_by_name.postgres.sql",
                "-- cairn:no-transaction\n-- items by name\nCREATE INDEX CONCURRENTLY items_name ON items (name);",
            ),
            (
                "0003_by_name.sqlite.sql",
                "-- items by name\nCREATE INDEX items_name ON items (name);",
            ),
        ],
    );
    for (engine, url) in ["sqlite", "postgres"].iter().zip(&urls) {
        let printed = ok(migrate(url, &src, &["up", "--dry-run"]));
        let lines: Vec<&str> = printed.lines().collect();
        assert_eq!(
            lines[0],
            format!("dry run: up would upgrade 0001_items -> 0003_by_name on {engine}, running in order:"),
            "{printed}"
        );
        assert_eq!(
            lines[1],
            "-- revision 0002_tags (in the upgrade transaction)"
        );
        assert_eq!(
            lines[2],
            "CREATE TABLE tags (id BIGINT NOT NULL PRIMARY KEY, label TEXT);"
        );
        assert_eq!(lines[3], "CREATE INDEX tags_label ON tags (label);");
        if *engine == "postgres" {
            assert_eq!(
                lines[4],
                "-- revision 0003_by_name (no-transaction: after a commit, each statement alone, outside any transaction)"
            );
            assert_eq!(
                lines[5],
                "CREATE INDEX CONCURRENTLY items_name ON items (name);"
            );
        } else {
            assert_eq!(
                lines[4],
                "-- revision 0003_by_name (in the upgrade transaction)"
            );
            assert_eq!(lines[5], "CREATE INDEX items_name ON items (name);");
        }
        assert_eq!(
            lines[6],
            "-- then: stamp 0003_by_name and record the lineage; nothing was changed"
        );
        assert_eq!(lines.len(), 7, "{printed}");
        // Nothing changed: both revisions are still pending.
        let status = ok(migrate(url, &src, &["status"]));
        assert!(
            status.contains("pending: 0002_tags 0003_by_name"),
            "{status}"
        );
        let up = ok(migrate(url, &src, &["up"]));
        assert!(up.contains("applied 0002_tags 0003_by_name"), "{up}");
        let again = ok(migrate(url, &src, &["up", "--dry-run"]));
        assert_eq!(again.trim(), "dry run: at head 0003_by_name; nothing to do");
    }
    // A store that is not there is refused, and not created, on both engines.
    let missing = tmp.path().join("missing.db").display().to_string();
    let out = migrate(&missing, &src, &["up", "--dry-run"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(!tmp.path().join("missing.db").exists());
    let nowhere = urls[1].replace(&schema, &format!("{schema}_none"));
    let out = migrate(&nowhere, &src, &["up", "--dry-run"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("no cairn store"),
        "{}",
        text(&out.stderr)
    );
    // Behind a transaction-mode pooler `up` refuses a no-transaction revision, and so does
    // the dry run.
    let direct = urls[1].replace(&schema, &format!("{schema}_pool"));
    let pooled = format!("{direct}&cairn_pooler=transaction");
    let src_pool = tmp.path().join("set_pool");
    write_set(&src_pool, &[("0001_items.sql", ITEMS)]);
    ok(migrate(&direct, &src_pool, &["up"]));
    write_set(
        &src_pool,
        &[(
            "0002_by_name.sql",
            "-- cairn:no-transaction\nCREATE INDEX CONCURRENTLY items_name ON items (name);",
        )],
    );
    let out = migrate(&pooled, &src_pool, &["up", "--dry-run"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("direct connection"),
        "{}",
        text(&out.stderr)
    );
    drop_schema(&pg, &format!("{schema}_pool")).await;
    drop_schema(&pg, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baseline_adopts_tables_made_without_cairn_and_refuses_others_on_both_engines() {
    let tmp = tempfile::tempdir().unwrap();
    let (urls, pg, schema) = locations(tmp.path()).await;
    let src = tmp.path().join("set");
    write_set(
        &src,
        &[
            ("0001_items.sql", ITEMS),
            ("0002_tags.sql", TAGS),
            (
                "0003_more.sql",
                "CREATE TABLE more (id BIGINT NOT NULL PRIMARY KEY);",
            ),
        ],
    );
    // The tables of 0001 and 0002, made by another tool, each in a cairn store.
    let by_hand = [
        "CREATE TABLE items (id BIGINT NOT NULL PRIMARY KEY, name TEXT NOT NULL)",
        "CREATE TABLE tags (id BIGINT NOT NULL PRIMARY KEY, label TEXT)",
        "CREATE INDEX tags_label ON tags (label)",
    ];
    for url in &urls {
        ok(common::cairn(url).args(["migrate", "up"]).output().unwrap());
    }
    let db = rusqlite::Connection::open(&urls[0]).unwrap();
    for sql in by_hand {
        db.execute_batch(sql).unwrap();
    }
    drop(db);
    let mut conn = sqlx::PgConnection::connect(&pg).await.unwrap();
    for sql in by_hand {
        sqlx::raw_sql(&format!("SET search_path TO {schema}; {sql}"))
            .execute(&mut conn)
            .await
            .unwrap();
    }

    let (scratch, scratch_db) = scratch_database(&pg).await;
    // A Postgres baseline needs a scratch server, never the store's own database.
    let out = migrate(&urls[1], &src, &["baseline", "--at", "0002_tags"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("scratch server"));
    let own = urls[1].split("?cairn_schema").next().unwrap().to_owned();
    let out = migrate(
        &urls[1],
        &src,
        &["baseline", "--at", "0002_tags", "--postgres-url", &own],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("must not be the store's own database"));
    // Another spelling of the same database is refused too (compared as what it reaches).
    let sep = if own.contains('?') { '&' } else { '?' };
    let spelled = format!("{own}{sep}application_name=another_spelling");
    let out = migrate(
        &urls[1],
        &src,
        &["baseline", "--at", "0002_tags", "--postgres-url", &spelled],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("it is, under another URL"),
        "{}",
        text(&out.stderr)
    );
    let baseline = |url: &str, at: &str| {
        let mut args = vec!["baseline", "--at", at];
        if !url.ends_with(".db") {
            args.extend(["--postgres-url", scratch.as_str()]);
        }
        migrate(url, &src, &args)
    };
    for url in &urls {
        // At 0003 the store lacks `more`: refused, naming it, nothing stamped.
        let out = baseline(url, "0003_more");
        assert_eq!(out.status.code(), Some(1));
        let err = text(&out.stderr);
        assert!(err.contains("table more is missing"), "{err}");
        let status = ok(migrate(url, &src, &["status"]));
        assert!(status.contains("stamp: (none)"), "{status}");

        let done = ok(baseline(url, "0002_tags"));
        assert!(done.starts_with("baselined at 0002_tags"), "{done}");
        let status = ok(migrate(url, &src, &["status"]));
        assert!(status.contains("stamp: 0002_tags"), "{status}");
        assert!(status.contains("pending: 0003_more"), "{status}");
        let out = baseline(url, "0002_tags");
        assert_eq!(out.status.code(), Some(1));
        assert!(text(&out.stderr).contains("already stamped at 0002_tags"));
        let up = ok(migrate(url, &src, &["up"]));
        assert!(
            up.contains("upgraded 0002_tags -> 0003_more: applied 0003_more"),
            "{up}"
        );
    }
    // The set's SQL never runs on the store's server: a revision naming another schema of the
    // store's database changes nothing there (it runs, and fails, on the scratch database).
    let other = cairn::testkit::scratch_name("cairn_online_other");
    let mut conn = sqlx::PgConnection::connect(&pg).await.unwrap();
    sqlx::raw_sql(&format!(
        "CREATE SCHEMA {other}; CREATE TABLE {other}.t (id INT); INSERT INTO {other}.t VALUES (1)"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    let reach = tmp.path().join("reach");
    write_set(
        &reach,
        &[
            ("0001_dd.sql", "CREATE TABLE dd (id INT NOT NULL);"),
            ("0002_reach.sql", &format!("DELETE FROM {other}.t;")),
        ],
    );
    let out = common::cairn(&urls[1])
        .args(["migrate", "--set", "reach", "--source"])
        .arg(&reach)
        .args(["baseline", "--at", "0002_reach", "--postgres-url", &scratch])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {other}.t"))
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(rows, 1, "the baseline reached the store's server");
    sqlx::raw_sql(&format!("DROP SCHEMA {other} CASCADE"))
        .execute(&mut conn)
        .await
        .unwrap();
    // Every throwaway schema of the scratch database was removed.
    let mut conn = sqlx::PgConnection::connect(&scratch).await.unwrap();
    let left: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_catalog.pg_namespace WHERE nspname LIKE 'cairn_baseline%'",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(left, 0);
    let _ = conn.close().await;
    drop_database(&pg, &scratch_db).await;
    drop_schema(&pg, &schema).await;
}
