//! `cairn migrate check`'s lock check through the binary: a plain index build is a finding
//! (exit 1, in the JSON document and in the lines), an `-- cairn:accept-lock` line accepts it
//! (exit 0, still listed), a concurrent build in a no-transaction revision is measured and is
//! no finding, and an accept line naming no finding refuses the set.

mod common;

use std::path::Path;
use std::process::Output;

use serde_json::Value;

const BASE: &str = "CREATE TABLE parents (id BIGINT PRIMARY KEY);
INSERT INTO parents SELECT g FROM generate_series(1, 20) g;
CREATE TABLE items (id BIGINT PRIMARY KEY, parent_id BIGINT, name TEXT);
INSERT INTO items SELECT g, 1 + g % 20, 'item ' || g FROM generate_series(1, 200) g;";

async fn pg() -> String {
    cairn::testkit::postgres::testkit::test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"))
}

/// `cairn migrate --set app --source DIR check --backend postgres` on a set of `BASE` and
/// `0002_x.postgres.sql` holding `second`, with `extra` arguments.
fn check(dir: &Path, pg: &str, second: &str, extra: &[&str]) -> Output {
    let source = dir.join("set");
    std::fs::create_dir_all(&source).unwrap();
    std::fs::write(source.join("0001_base.postgres.sql"), BASE).unwrap();
    std::fs::write(source.join("0002_x.postgres.sql"), second).unwrap();
    common::cairn(&dir.join("unused.db").display().to_string())
        .args(["migrate", "--set", "app", "--source"])
        .arg(&source)
        .args(["check", "--backend", "postgres", "--postgres-url", pg])
        .args(extra)
        .output()
        .expect("the cairn binary runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The JSON document of `out`, and the lock report of its one checked revision.
fn lock_doc(out: &Output) -> (Value, Value) {
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} / {}", text(&out.stdout), text(&out.stderr)));
    let engines = doc["engines"].as_array().expect("engines");
    assert_eq!(engines.len(), 1, "{doc}");
    assert_eq!(engines[0]["engine"], "postgres", "{doc}");
    assert_eq!(engines[0]["lock_check"], true, "{doc}");
    let rev = &engines[0]["revisions"][0];
    assert_eq!(rev["revision"], "0002_x", "{doc}");
    let locks = rev["locks"].clone();
    (doc, locks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_index_build_fails_the_check_and_an_accept_line_lets_it_pass() {
    let pg = pg().await;
    let dir = tempfile::tempdir().unwrap();
    let plain = "CREATE INDEX items_name ON items (name);";

    let out = check(dir.path(), &pg, plain, &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("1 lock finding"),
        "{}",
        text(&out.stderr)
    );
    let (doc, locks) = lock_doc(&out);
    assert_eq!(
        (doc["ok"].clone(), doc["lock_findings"].clone()),
        (Value::Bool(false), 1.into())
    );
    assert_eq!(doc["violations"], 0, "an index is additive: {doc}");
    let findings = locks["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{doc}");
    let f = &findings[0];
    assert_eq!(
        (
            &f["name"],
            &f["table"],
            &f["mode"],
            &f["statement"],
            &f["accepted"]
        ),
        (
            &Value::from("index-build"),
            &Value::from("items"),
            &Value::from("SHARE"),
            &Value::from(1),
            &Value::from(false)
        ),
        "{doc}"
    );
    assert!(
        f["advice"].as_str().unwrap().contains("CONCURRENTLY"),
        "{doc}"
    );
    let table = &locks["tables"][0];
    assert_eq!(table["table"], "items", "{doc}");
    assert!(table["writes_blocked_ms"].as_u64().unwrap() >= 90, "{doc}");
    assert!(table["reads_blocked_ms"].is_null(), "{doc}");

    // The same in lines.
    let out = check(dir.path(), &pg, plain, &[]);
    assert_eq!(out.status.code(), Some(1));
    let lines = text(&out.stdout);
    assert!(lines.contains("postgres 0002_x: ok"), "{lines}");
    assert!(
        lines.contains("postgres 0002_x: locks items: SHARE, writes blocked"),
        "{lines}"
    );
    assert!(
        lines.contains("postgres 0002_x: lock finding index-build on items: statement 1 `CREATE INDEX items_name ON items (name)` built an index under SHARE"),
        "{lines}"
    );

    // Accepted: listed, marked, exit 0.
    let accepted = format!("-- cairn:accept-lock index-build\n{plain}");
    let out = check(dir.path(), &pg, &accepted, &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (doc, locks) = lock_doc(&out);
    assert_eq!(
        (doc["ok"].clone(), doc["lock_findings"].clone()),
        (Value::Bool(true), 0.into())
    );
    assert_eq!(locks["findings"][0]["accepted"], true, "{doc}");
    let out = check(dir.path(), &pg, &accepted, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(
            "lock finding accepted (-- cairn:accept-lock index-build): index-build on items"
        ),
        "{}",
        text(&out.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_build_in_a_no_transaction_revision_is_measured_and_passes() {
    let pg = pg().await;
    let dir = tempfile::tempdir().unwrap();
    let out = check(
        dir.path(),
        &pg,
        "-- cairn:no-transaction\nCREATE INDEX CONCURRENTLY items_name ON items (name);",
        &["--json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (doc, locks) = lock_doc(&out);
    assert_eq!(locks["outside_transaction"], true, "{doc}");
    assert_eq!(locks["findings"].as_array().unwrap().len(), 0, "{doc}");
    let table = &locks["tables"][0];
    assert_eq!(table["table"], "items", "{doc}");
    assert_eq!(table["mode"], "SHARE UPDATE EXCLUSIVE", "{doc}");
    assert!(
        table["writes_blocked_ms"].is_null() && table["reads_blocked_ms"].is_null(),
        "{doc}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accept_line_naming_no_finding_refuses_the_set() {
    let pg = pg().await;
    let dir = tempfile::tempdir().unwrap();
    let out = check(
        dir.path(),
        &pg,
        "-- cairn:accept-lock index\nCREATE INDEX items_name ON items (name);",
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("0002_x.postgres.sql") && err.contains("index-build"),
        "{err}"
    );
}
