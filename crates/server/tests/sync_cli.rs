//! `cairn sync`, run as an operator runs it: SQLite file to SQLite file, SQLite to Postgres and
//! back with `--both-ways`, forks made on each side while apart, a second run that moves
//! nothing, and bad arguments. The stores are checked with the library.

mod common;
mod sync_common;

use sync_common::{
    append, assert_consistent, assert_same, fails, head_ids, ok, open, runtime, space, sync, total,
    words,
};

/// A file store and a second one: the first sync takes the initial path and moves every epoch
/// in batches of `--batch`; a second run moves nothing (the cursor names the newest epoch); new
/// epochs then go by the cursor path; `--json` prints the same report as JSON.
#[test]
fn sqlite_file_to_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("edge.db").display().to_string();
    let dst = dir.path().join("copy.db").display().to_string();
    let rt = runtime();
    let s = space("notes");
    let source = rt.block_on(open(&src));
    rt.block_on(append(source.epochs().as_ref(), &s, "a", 25));

    let out = ok(sync(&[&src, &dst, "--space", "notes", "--batch", "10"]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let w = words(lines[0]);
    assert_eq!(w["space"], "notes");
    assert_eq!(w["from"], src);
    assert_eq!(w["to"], dst);
    assert_eq!(w["path"], "initial");
    assert_eq!(w["epochs"], "25");
    assert_eq!(w["batches"], "3");
    assert!(w["bytes"].parse::<u64>().unwrap() > 0);
    assert_eq!(total(&out, "epochs"), 25);

    let dest = rt.block_on(open(&dst));
    rt.block_on(assert_same(&source.diagnostics(), &dest.diagnostics(), &s));

    let again = ok(sync(&[&src, &dst, "--space", "notes"]));
    assert_eq!(words(again.lines().next().unwrap())["path"], "up-to-date");
    assert_eq!(total(&again, "epochs"), 0);

    rt.block_on(append(source.epochs().as_ref(), &s, "b", 3));
    let json = ok(sync(&[&src, &dst, "--space", "notes", "--json"]));
    let doc: serde_json::Value = serde_json::from_str(&json).expect("one JSON document");
    assert_eq!(doc["epochs"], 3, "{doc}");
    assert_eq!(doc["spaces"][0]["path"], "cursor", "{doc}");
    assert_eq!(doc["spaces"][0]["space"], "notes", "{doc}");
    rt.block_on(assert_same(&source.diagnostics(), &dest.diagnostics(), &s));

    // `--all-spaces` picks up a space the destination never saw.
    let other = space("other");
    rt.block_on(append(source.epochs().as_ref(), &other, "o", 4));
    let all = ok(sync(&[&src, &dst, "--all-spaces"]));
    assert_eq!(total(&all, "epochs"), 4, "{all}");
    rt.block_on(assert_same(
        &source.diagnostics(),
        &dest.diagnostics(),
        &other,
    ));
    rt.block_on(assert_same(&source.diagnostics(), &dest.diagnostics(), &s));
}

/// SQLite edge and Postgres central: a first sync, then forks made on each side while apart;
/// `--both-ways` leaves both with the same two heads, a second run moves nothing, and the next
/// append on either side merges the fork, which the next sync carries over.
#[test]
fn sqlite_and_postgres_forks_meet_both_ways() {
    common::on_postgres("sync_cli", |pg| {
        let dir = tempfile::tempdir().unwrap();
        let edge_url = dir.path().join("edge.db").display().to_string();
        let rt = runtime();
        let s = space("shared");
        let edge = rt.block_on(open(&edge_url));
        let central = rt.block_on(open(pg));
        let (e, c) = (edge.diagnostics(), central.diagnostics());
        rt.block_on(append(e.as_ref(), &s, "first", 5));

        let out = ok(sync(&[&edge_url, pg, "--space", "shared"]));
        assert_eq!(total(&out, "epochs"), 5, "{out}");
        rt.block_on(assert_same(&e, &c, &s));

        // Apart: each side appends on its own.
        rt.block_on(append(e.as_ref(), &s, "edge", 3));
        rt.block_on(append(c.as_ref(), &s, "central", 4));
        let out = ok(sync(&[&edge_url, pg, "--space", "shared", "--both-ways"]));
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        let (there, back) = (words(lines[0]), words(lines[1]));
        assert_eq!(
            (there["from"].as_str(), there["epochs"].as_str()),
            (edge_url.as_str(), "3")
        );
        assert_eq!(there["path"], "cursor");
        assert_eq!(back["epochs"], "4", "{out}");
        assert_eq!(back["to"], edge_url);
        assert_eq!(total(&out, "epochs"), 7);
        rt.block_on(assert_same(&e, &c, &s));
        assert_eq!(rt.block_on(head_ids(e.as_ref(), &s)).len(), 2, "a fork");

        let again = ok(sync(&[&edge_url, pg, "--space", "shared", "--both-ways"]));
        assert_eq!(total(&again, "epochs"), 0, "{again}");

        // The next append on the central side merges the fork; the edge takes it.
        let merged = rt
            .block_on(c.append(&s, vec![cairn::Event::new("note", "merge")]))
            .unwrap();
        assert_eq!(merged.parents.len(), 2);
        let out = ok(sync(&[pg, &edge_url, "--space", "shared"]));
        assert_eq!(total(&out, "epochs"), 1, "{out}");
        rt.block_on(assert_same(&e, &c, &s));
        assert_eq!(rt.block_on(head_ids(e.as_ref(), &s)), vec![merged.id]);

        // And again from the edge side: a fork, met both ways, merged by the edge.
        rt.block_on(append(e.as_ref(), &s, "edge2", 2));
        rt.block_on(append(c.as_ref(), &s, "central2", 2));
        ok(sync(&[pg, &edge_url, "--all-spaces", "--both-ways"]));
        rt.block_on(assert_same(&e, &c, &s));
        let merged = rt
            .block_on(e.append(&s, vec![cairn::Event::new("note", "merge2")]))
            .unwrap();
        assert_eq!(merged.parents.len(), 2);
        ok(sync(&[&edge_url, pg, "--space", "shared", "--both-ways"]));
        rt.block_on(assert_same(&e, &c, &s));
        assert_eq!(rt.block_on(head_ids(c.as_ref(), &s)), vec![merged.id]);
        rt.block_on(central.close()).unwrap();
    });
}

/// Usage errors exit 2 naming what is wrong; a store or sync error exits 1 with one line that
/// never holds a password.
#[test]
fn bad_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.db").display().to_string();
    let dst = dir.path().join("dst.db").display().to_string();
    let rt = runtime();
    let s = space("s");
    let source = rt.block_on(open(&src));
    rt.block_on(append(source.epochs().as_ref(), &s, "x", 2));

    for (args, needle) in [
        (vec![&src[..], &dst[..]], "--space"),
        (
            vec![&src[..], &dst[..], "--space", "s", "--all-spaces"],
            "cannot be used",
        ),
        (
            vec![&src[..], &dst[..], "--space", "s", "--batch", "0"],
            "--batch",
        ),
        (
            vec![&src[..], &dst[..], "--space", "s", "--batch", "1001"],
            "--batch",
        ),
        (vec![&src[..], "--space", "s"], "DEST"),
    ] {
        let out = sync(&args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    assert!(
        !std::path::Path::new(&dst).exists(),
        "bad usage creates no store"
    );

    let msg = fails(sync(&[&src, &dst, "--space", ""]));
    assert!(msg.contains("space"), "{msg}");
    let missing = dir.path().join("nothing.db").display().to_string();
    let msg = fails(sync(&[&missing, &dst, "--space", "s"]));
    assert!(msg.contains("no cairn store"), "{msg}");
    let msg = fails(sync(&[
        &src,
        "postgres://cairn:hunter2@127.0.0.1:1/nowhere?cairn_schema=x",
        "--space",
        "s",
    ]));
    assert!(!msg.contains("hunter2"), "{msg}");
    let msg = fails(sync(&[
        &src,
        &dst,
        "--space",
        "s",
        "--dest-token",
        "token-hunter2",
    ]));
    assert!(msg.contains("token") && !msg.contains("hunter2"), "{msg}");
    // A token in the environment is for a `cairn serve` side: a sync between files ignores it.
    let out = sync_common::cairn()
        .args(["sync", &src, &dst, "--space", "s"])
        .env("CAIRN_SOURCE_TOKEN", "exported-for-another-sync")
        .env("CAIRN_DEST_TOKEN", "exported-for-another-sync")
        .output()
        .expect("the cairn binary runs");
    ok(out);
    let msg = fails(sync(&[&src, "mysql://u:hunter2@h/db", "--space", "s"]));
    assert!(!msg.contains("hunter2") && msg.contains("scheme"), "{msg}");
    rt.block_on(source.close()).unwrap();
}

/// An epoch whose events were changed in the source's file no longer hashes to its id: the
/// destination refuses it, the command fails naming the epoch, and what came before it stays,
/// consistent.
#[test]
fn a_forged_epoch_is_refused_by_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.db").display().to_string();
    let dst = dir.path().join("dst.db").display().to_string();
    let rt = runtime();
    let s = space("s");
    let source = rt.block_on(open(&src));
    rt.block_on(append(source.epochs().as_ref(), &s, "x", 6));
    let forged = rt
        .block_on(source.epochs().heads(&s))
        .unwrap()
        .first()
        .unwrap()
        .id;
    rt.block_on(source.close()).unwrap();
    let conn = rusqlite::Connection::open(&src).unwrap();
    let changed = conn
        .execute(
            "UPDATE epoch_event SET payload = CAST('forged' AS BLOB) WHERE seq = 6",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);

    let msg = fails(sync(&[&src, &dst, "--space", "s", "--batch", "2"]));
    assert!(msg.contains(&forged.to_string()), "{msg}");
    assert!(msg.contains("refused"), "{msg}");
    let dest = rt.block_on(open(&dst));
    let d = dest.diagnostics();
    rt.block_on(assert_consistent(&d, &s));
    assert_eq!(
        rt.block_on(sync_common::count(&d, &s)),
        4,
        "the batches before it stay"
    );
}
