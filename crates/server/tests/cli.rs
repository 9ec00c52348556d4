//! The `cairn` binary, run as a user runs it: against a temporary SQLite file (and once against
//! the Postgres test server), checking stdout, the one-line error contract and exit statuses.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cairn::{EpochStore, Event, SpaceId};

/// A `cairn` command with a clean environment: no `CAIRN_DATABASE` from the caller.
fn cairn() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
    cmd.env_remove("CAIRN_DATABASE");
    cmd
}

/// Runs `cairn --database <db> args…`. `db` is a path or a URL (any OS string).
fn run(db: &Path, args: &[&str]) -> Output {
    cairn()
        .arg("--database")
        .arg(db)
        .args(args)
        .output()
        .expect("the cairn binary runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).expect("stderr is UTF-8")
}

/// Asserts success and returns stdout.
fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "cairn failed with {:?}: {}",
        out.status,
        stderr(&out)
    );
    assert_eq!(
        stderr(&out),
        "",
        "a successful command prints nothing on stderr"
    );
    stdout(&out)
}

/// Asserts the error contract: exit status 1, nothing on stdout, exactly one line on stderr of
/// the form `cairn: <message>`. Returns the message.
fn fails(out: Output) -> String {
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "exit status; stderr: {err}");
    assert_eq!(
        stdout(&out),
        "",
        "a failed command prints nothing on stdout"
    );
    assert!(err.ends_with('\n'), "stderr ends with a newline: {err:?}");
    assert_eq!(
        err.lines().count(),
        1,
        "exactly one line on stderr: {err:?}"
    );
    let msg = err
        .strip_prefix("cairn: ")
        .unwrap_or_else(|| panic!("stderr starts with `cairn: `: {err:?}"));
    assert!(!msg.contains("panicked"), "{err}");
    msg.trim_end().to_owned()
}

/// Parses `<seq> <64 hex digits>`.
fn head_line(line: &str) -> (u64, String) {
    let (seq, id) = line
        .split_once(' ')
        .unwrap_or_else(|| panic!("`<seq> <id>`: {line:?}"));
    assert_eq!(id.len(), 64, "epoch id is 64 hex digits: {line:?}");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{line:?}");
    (seq.parse().expect("seq is a number"), id.to_owned())
}

fn append(db: &Path, space: &str, payload: &str) -> (u64, String) {
    let out = ok(run(
        db,
        &[
            "append",
            "--space",
            space,
            "--kind",
            "note",
            "--payload",
            payload,
        ],
    ));
    assert_eq!(out.lines().count(), 1, "{out}");
    head_line(out.trim_end())
}

fn heads(db: &Path, space: &str) -> Vec<(u64, String)> {
    ok(run(db, &["heads", "--space", space]))
        .lines()
        .map(head_line)
        .collect()
}

/// One feed page: the payloads (last column) and the `next` cursor.
fn feed(db: &Path, space: &str, cursor: Option<&str>, limit: usize) -> (Vec<String>, String) {
    let limit = limit.to_string();
    let mut args = vec!["feed", "--space", space, "--limit", &limit];
    if let Some(c) = cursor {
        args.extend(["--cursor", c]);
    }
    let out = ok(run(db, &args));
    let mut lines: Vec<&str> = out.lines().collect();
    let next = lines
        .pop()
        .and_then(|l| l.strip_prefix("next "))
        .unwrap_or_else(|| panic!("the last line is `next <cursor>`: {out}"))
        .to_owned();
    let payloads = lines
        .iter()
        .map(|l| {
            let cols: Vec<&str> = l.splitn(6, ' ').collect();
            assert_eq!(cols.len(), 6, "seq epoch position kind key payload: {l:?}");
            assert_eq!(cols[3], "note");
            assert_eq!(cols[4], "-", "no key");
            cols[5].to_owned()
        })
        .collect();
    (payloads, next)
}

fn temp_db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("store.db");
    (dir, db)
}

#[test]
fn append_then_heads_shows_the_new_epoch_as_the_only_head() {
    let (_dir, db) = temp_db();
    let first = append(&db, "docs", "hello");
    assert_eq!(first.0, 1, "the first epoch of a space has seq 1");
    assert_eq!(heads(&db, "docs"), vec![first.clone()]);

    let second = append(&db, "docs", "world");
    assert_eq!(second.0, 2);
    assert_ne!(second.1, first.1);
    assert_eq!(heads(&db, "docs"), vec![second]);
}

#[test]
fn append_with_a_key_and_sqlite_url_forms() {
    let (dir, db) = temp_db();
    let url = format!("sqlite://{}", db.display());
    let out = ok(cairn()
        .args([
            "--database",
            &url,
            "append",
            "--space",
            "kv",
            "--kind",
            "kv.put",
        ])
        .args(["--key", "colour", "--payload", "blue"])
        .output()
        .unwrap());
    let (seq, id) = head_line(out.trim_end());
    assert_eq!(seq, 1);
    // `sqlite://relative` resolves against the working directory.
    let out = ok(cairn()
        .current_dir(dir.path())
        .args(["--database", "sqlite://store.db", "feed", "--space", "kv"])
        .output()
        .unwrap());
    let first = out.lines().next().unwrap();
    assert_eq!(first, format!("1 {id} 0 kv.put colour blue"));
}

#[test]
fn feed_pages_follow_the_cursor_and_end_with_an_empty_page() {
    let (_dir, db) = temp_db();
    for p in ["one", "two words", "three"] {
        append(&db, "feed", p);
    }
    let mut cursor: Option<String> = None;
    let mut seen = Vec::new();
    loop {
        let (page, next) = feed(&db, "feed", cursor.as_deref(), 1);
        if page.is_empty() {
            assert_eq!(
                cursor.as_deref(),
                Some(next.as_str()),
                "an empty page hands back the cursor it was given"
            );
            break;
        }
        assert_eq!(
            page.len(),
            1,
            "limit 1 with one-event epochs gives one event"
        );
        seen.extend(page);
        cursor = Some(next);
        assert!(seen.len() <= 3, "the feed ends");
    }
    assert_eq!(seen, ["one", "two words", "three"]);

    let (all, _) = feed(&db, "feed", None, 100);
    assert_eq!(all, ["one", "two words", "three"]);
}

#[test]
fn malformed_or_foreign_cursor_fails_with_one_line() {
    let (_dir, db) = temp_db();
    append(&db, "a", "x");
    append(&db, "b", "y");
    for bad in ["garbage", "", "c1.zz.1", "c1.0011223344556677.-1"] {
        let msg = fails(run(&db, &["feed", "--space", "a", "--cursor", bad]));
        assert!(msg.contains("cursor"), "{msg}");
    }
    let (_, b_cursor) = feed(&db, "b", None, 10);
    let msg = fails(run(&db, &["feed", "--space", "a", "--cursor", &b_cursor]));
    assert!(msg.contains("another space"), "{msg}");
    let msg = fails(run(&db, &["feed", "--space", "a", "--limit", "0"]));
    assert!(msg.contains("limit"), "{msg}");
}

#[test]
fn empty_kind_or_space_is_refused_and_creates_no_store() {
    let (_dir, db) = temp_db();
    let msg = fails(run(
        &db,
        &["append", "--space", "s", "--kind", "", "--payload", "p"],
    ));
    assert!(msg.contains("kind"), "{msg}");
    let msg = fails(run(
        &db,
        &["append", "--space", "", "--kind", "k", "--payload", "p"],
    ));
    assert!(msg.contains("space"), "{msg}");
    let msg = fails(run(&db, &["heads", "--space", ""]));
    assert!(msg.contains("space"), "{msg}");
    assert!(!db.exists(), "bad input must not create the store");
}

#[test]
fn empty_payload_is_a_valid_event() {
    let (_dir, db) = temp_db();
    append(&db, "s", "");
    let (payloads, _) = feed(&db, "s", None, 10);
    assert_eq!(payloads, [""]);
}

#[test]
fn unknown_space_fails_with_one_line() {
    let (_dir, db) = temp_db();
    append(&db, "known", "x");
    let msg = fails(run(&db, &["heads", "--space", "unknown"]));
    assert!(msg.contains("not found"), "{msg}");
    let msg = fails(run(&db, &["feed", "--space", "unknown"]));
    assert!(msg.contains("not found"), "{msg}");
    let msg = fails(run(&db, &["repair", "--space", "unknown"]));
    assert!(msg.contains("not found"), "{msg}");
}

#[test]
fn reading_a_missing_store_fails_without_creating_it() {
    let (_dir, db) = temp_db();
    for args in [
        &["heads", "--space", "s"][..],
        &["feed", "--space", "s"],
        &["repair", "--space", "s"],
    ] {
        let msg = fails(run(&db, args));
        assert!(msg.starts_with("no cairn store at "), "{msg}");
        assert!(!db.exists(), "{args:?} created the store");
    }
}

#[cfg(unix)]
#[test]
fn symlinked_database_path_is_refused() {
    let (dir, db) = temp_db();
    let first = append(&db, "s", "x");
    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink(&db, &link).unwrap();

    let msg = fails(run(&link, &["heads", "--space", "s"]));
    assert!(msg.contains("symbolic link"), "{msg}");
    let msg = fails(run(
        &link,
        &["append", "--space", "s", "--kind", "k", "--payload", "p"],
    ));
    assert!(msg.contains("symbolic link"), "{msg}");
    assert_eq!(
        heads(&db, "s"),
        vec![first],
        "the refused append wrote nothing"
    );
}

#[test]
fn a_file_that_is_not_a_store_fails_with_one_line() {
    let (_dir, db) = temp_db();
    std::fs::write(&db, vec![0x42; 8192]).unwrap();
    fails(run(&db, &["heads", "--space", "s"]));
    fails(run(
        &db,
        &["append", "--space", "s", "--kind", "k", "--payload", "p"],
    ));
    assert_eq!(
        std::fs::read(&db).unwrap(),
        vec![0x42; 8192],
        "the foreign file is left alone"
    );
}

#[test]
fn repair_of_a_current_cache_writes_nothing() {
    let (_dir, db) = temp_db();
    append(&db, "s", "x");
    let head = append(&db, "s", "y");
    assert_eq!(ok(run(&db, &["repair", "--space", "s"])), "unchanged\n");
    assert_eq!(ok(run(&db, &["repair", "--space", "s"])), "unchanged\n");
    assert_eq!(heads(&db, "s"), vec![head]);
}

/// A writer that predates the head cache leaves it stale; `cairn repair` rewrites it once.
#[tokio::test]
async fn repair_rewrites_a_stale_cache_once() {
    let (_dir, db) = temp_db();
    append(&db, "s", "x");
    let legacy = {
        let store = cairn::testkit::sqlite::SqliteStore::open(&db)
            .await
            .unwrap();
        let space = SpaceId::new("s").unwrap();
        store
            .legacy_append(&space, None, vec![Event::new("note", "legacy")])
            .await
            .unwrap()
    };
    let db2 = db.clone();
    let (first, second, after) = tokio::task::spawn_blocking(move || {
        let first = ok(run(&db2, &["repair", "--space", "s"]));
        let second = ok(run(&db2, &["repair", "--space", "s"]));
        (first, second, heads(&db2, "s"))
    })
    .await
    .unwrap();
    let head = format!("{} {}", legacy.seq, legacy.id);
    assert_eq!(
        first,
        format!("rewritten: the cache held 1 row(s), it now holds the 1 head(s):\n{head}\n")
    );
    assert_eq!(second, "unchanged\n");
    assert_eq!(after, vec![head_line(&head)]);
}

#[test]
fn default_database_is_a_file_under_the_data_dir() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("data");
    let with_env = |args: &[&str]| {
        cairn()
            .env("HOME", home.path())
            .env("XDG_DATA_HOME", &data)
            .args(args)
            .output()
            .unwrap()
    };
    let out = ok(with_env(&[
        "append",
        "--space",
        "s",
        "--kind",
        "k",
        "--payload",
        "p",
    ]));
    let (seq, id) = head_line(out.trim_end());
    assert_eq!(seq, 1);
    #[cfg(target_os = "linux")]
    assert!(data.join("cairn").join("cairn.db").is_file());
    let out = ok(with_env(&["heads", "--space", "s"]));
    assert_eq!(out, format!("1 {id}\n"));
}

#[test]
fn cairn_database_env_names_the_store() {
    let (_dir, db) = temp_db();
    let out = ok(cairn()
        .env("CAIRN_DATABASE", &db)
        .args(["append", "--space", "s", "--kind", "k", "--payload", "p"])
        .output()
        .unwrap());
    let first = head_line(out.trim_end());
    assert!(db.is_file());
    assert_eq!(heads(&db, "s"), vec![first]);
}

#[test]
fn database_urls_are_never_printed() {
    for url in [
        "mysql://admin:hunter2@db.invalid/cairn",
        // A database that does not exist on the test server, or no server at all: either way
        // the connection fails and the password must not show.
        "postgres://postgres:hunter2@127.0.0.1:5432/cairn_no_such_database",
    ] {
        let out = cairn()
            .args(["--database", url, "heads", "--space", "s"])
            .output()
            .unwrap();
        let msg = fails(out);
        assert!(!msg.contains("hunter2"), "{msg}");
        assert!(!msg.contains("admin"), "{msg}");
    }
}

#[test]
fn usage_errors_exit_with_status_2() {
    let out = cairn().args(["append", "--space", "s"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = cairn().args(["frobnicate"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// The same binary on Postgres, chosen at run time from the URL (fresh schema of the test
/// server, found as DESIGN §7 says; fails when there is none).
#[tokio::test]
async fn postgres_url_selects_the_postgres_backend() {
    let h = cairn::testkit::postgres::testkit::harness().await;
    let base = cairn::testkit::postgres::testkit::test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"));
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}cairn_schema={}", h.schema());
    let url = Path::new(&url);
    let (first, second, got) = tokio::task::spawn_blocking({
        let url = url.to_path_buf();
        move || {
            let first = append(&url, "pg", "one");
            let second = append(&url, "pg", "two");
            let (payloads, _) = feed(&url, "pg", None, 10);
            assert_eq!(heads(&url, "pg"), vec![second.clone()]);
            (first, second, payloads)
        }
    })
    .await
    .unwrap();
    assert_eq!((first.0, second.0), (1, 2));
    assert_eq!(got, ["one", "two"]);
    let store = h.store().await.unwrap();
    let space = SpaceId::new("pg").unwrap();
    let heads = store.heads(&space).await.unwrap();
    assert_eq!(heads.len(), 1);
    assert_eq!(
        heads[0].id.to_string(),
        second.1,
        "the CLI wrote into the harness's schema"
    );
}

/// Postgres over TLS from the binary (issue 44 item 1): `?sslmode=require` and `verify-full`
/// with the server's CA reach a server with `ssl = on` (a throwaway cluster with a certificate
/// made at test time, started by the suite; fails when there is none), and `verify-full`
/// against a certificate for another host name fails with one line saying what to do.
#[tokio::test]
async fn postgres_over_tls_from_the_binary() {
    let c = cairn::testkit::postgres::testkit::TlsCluster::with_ssl()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"));
    let verify = format!("sslmode=verify-full&sslrootcert={}", c.ca_file().display());
    let require = PathBuf::from(c.url("postgres", "127.0.0.1", "sslmode=require"));
    let verify_full = PathBuf::from(c.url("postgres", "localhost", &verify));
    // The server's certificate names `localhost` only.
    let wrong_host = PathBuf::from(c.url("postgres", "127.0.0.1", &verify));
    tokio::task::spawn_blocking(move || {
        let first = append(&require, "tls", "one");
        assert_eq!(heads(&verify_full, "tls"), vec![first]);
        let msg = fails(run(&wrong_host, &["heads", "--space", "tls"]));
        assert!(
            msg.starts_with(
                "store unavailable: the server's certificate is not valid for host 127.0.0.1; \
                 connect by a name the certificate names"
            ),
            "{msg}"
        );
        assert!(msg.contains("certificate is only valid for"), "{msg}");
    })
    .await
    .unwrap();
}
