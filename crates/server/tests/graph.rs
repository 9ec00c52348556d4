//! `cairn graph`, run as a user runs it against a temporary SQLite store: the SVG and DOT of a
//! linear chain, a fork (an imported epoch beside a local append), its merge, and an imported
//! epoch whose parent lies outside the window (paged back with `--before`), each compared byte
//! for byte with its golden file under `tests/fixtures/graph/`. Epoch ids are content hashes
//! of fixed events, so the output is the same on every run.
//!
//! After an intended change of the picture, regenerate the goldens with
//! `CAIRN_UPDATE_GOLDENS=1 cargo test -p cairn-server --test graph` and review their diff.

use std::path::{Path, PathBuf};
use std::process::Output;

use cairn::{Appended, EpochId, Event, ForeignEpoch, SpaceId, Store};

mod common;

/// Where the goldens live.
fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/graph")
}

const REGENERATE: &str = "CAIRN_UPDATE_GOLDENS=1 cargo test -p cairn-server --test graph";

/// Compares `actual` with the golden file `name`, or (with `CAIRN_UPDATE_GOLDENS=1`) writes it.
fn golden(name: &str, actual: &str) {
    let path = fixtures().join(name);
    if std::env::var_os("CAIRN_UPDATE_GOLDENS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(fixtures()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read the golden {}: {e}; write it with `{REGENERATE}`",
            path.display()
        )
    });
    if expected == actual.as_bytes() {
        return;
    }
    let expected = String::from_utf8_lossy(&expected);
    let (line, want, got) = expected
        .lines()
        .map(Some)
        .chain(std::iter::repeat(None))
        .zip(actual.lines().map(Some).chain(std::iter::repeat(None)))
        .enumerate()
        .take_while(|(_, pair)| *pair != (None, None))
        .find(|(_, (want, got))| want != got)
        .map_or((0, None, None), |(i, (want, got))| (i + 1, want, got));
    panic!(
        "`cairn graph` output differs from the golden {} at line {line}:\n  golden: {}\n  actual: \
         {}\nIf the change is intended, regenerate the goldens with `{REGENERATE}` and review \
         their diff.",
        path.display(),
        want.unwrap_or("(end of file)"),
        got.unwrap_or("(end of output)"),
    );
}

/// A fresh SQLite store path in a temporary directory (kept alive by the caller).
fn temp_db() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db").display().to_string();
    (dir, db)
}

async fn append(store: &Store, space: &SpaceId, payload: &str) -> Appended {
    store
        .epochs()
        .append(space, vec![Event::new("note", payload)])
        .await
        .unwrap()
}

/// Imports an epoch made elsewhere, on `parent`, holding one event.
async fn import(store: &Store, space: &SpaceId, parent: EpochId, payload: &str) -> EpochId {
    let events = vec![Event::new("note", payload)];
    let ids: Vec<_> = events.iter().map(Event::id).collect();
    let foreign = ForeignEpoch {
        space: space.clone(),
        id: cairn::epoch_id(space, &[parent], &ids),
        parents: vec![parent],
        events,
    };
    let id = foreign.id;
    store.epochs().import(foreign).await.unwrap();
    id
}

/// `one ← two ← three (local)` and `two ← three (replica)`, imported: two heads.
async fn fork(store: &Store, space: &SpaceId) -> (Appended, EpochId) {
    append(store, space, "one").await;
    let two = append(store, space, "two").await;
    let local = append(store, space, "three (local)").await;
    let foreign = import(store, space, two.id, "three (replica)").await;
    (local, foreign)
}

/// Opens (creating) the store at `db` for a test's setup; the caller closes it before the
/// binary runs.
async fn store(db: &str) -> Store {
    Store::open(db).await.unwrap()
}

/// Runs `cairn --database DB graph ARGS…`.
fn graph(db: &str, args: &[&str]) -> Output {
    common::cairn(db).arg("graph").args(args).output().unwrap()
}

/// Asserts success with nothing on stderr; returns stdout.
fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "cairn graph failed with {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// Asserts the error contract (exit 1, nothing on stdout, one `cairn: …` line on stderr);
/// returns the message.
fn fails(out: Output) -> String {
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(out.stdout.is_empty(), "nothing on stdout");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    err.strip_prefix("cairn: ")
        .unwrap_or_else(|| panic!("{err:?}"))
        .trim_end()
        .to_owned()
}

/// The ids of the `<g class="epoch head" …>` groups of an SVG.
fn svg_heads(svg: &str) -> Vec<String> {
    svg.lines()
        .filter_map(|l| l.strip_prefix("<g class=\"epoch head\" id=\"epoch-"))
        .map(|l| l[..64].to_owned())
        .collect()
}

#[tokio::test]
async fn a_linear_chain_is_one_column() {
    let (_dir, db) = temp_db();
    let s = store(&db).await;
    let space = SpaceId::new("linear").unwrap();
    for payload in ["one", "two", "three"] {
        append(&s, &space, payload).await;
    }
    let head = append(&s, &space, "four").await;
    s.close().await.unwrap();

    let svg = ok(graph(&db, &["--space", "linear"]));
    golden("linear.svg", &svg);
    assert_eq!(svg_heads(&svg), [head.id.to_string()]);
    assert!(!svg.contains("data-lane=\"1\""), "one lane");
    assert_eq!(
        ok(graph(&db, &["--space", "linear", "--format", "svg"])),
        svg,
        "svg is the default"
    );
    golden(
        "linear.dot",
        &ok(graph(&db, &["--space", "linear", "--format", "dot"])),
    );
}

#[tokio::test]
async fn a_fork_shows_two_lanes_and_two_heads() {
    let (_dir, db) = temp_db();
    let s = store(&db).await;
    let space = SpaceId::new("replicated").unwrap();
    let (local, foreign) = fork(&s, &space).await;
    s.close().await.unwrap();

    let svg = ok(graph(&db, &["--space", "replicated"]));
    golden("fork.svg", &svg);
    let mut heads = svg_heads(&svg);
    heads.sort();
    let mut want = vec![local.id.to_string(), foreign.to_string()];
    want.sort();
    assert_eq!(heads, want);
    assert!(svg.contains("data-lane=\"1\""), "two lanes");
    golden(
        "fork.dot",
        &ok(graph(&db, &["--space", "replicated", "--format", "dot"])),
    );
}

#[tokio::test]
async fn the_next_append_merges_the_fork() {
    let (_dir, db) = temp_db();
    let s = store(&db).await;
    let space = SpaceId::new("replicated").unwrap();
    let (local, foreign) = fork(&s, &space).await;
    let merge = append(&s, &space, "four (merge)").await;
    s.close().await.unwrap();

    let svg = ok(graph(&db, &["--space", "replicated"]));
    golden("merge.svg", &svg);
    assert_eq!(svg_heads(&svg), [merge.id.to_string()]);
    for parent in [local.id, foreign] {
        assert!(svg.contains(&format!(
            "<path class=\"edge\" data-child=\"{}\" data-parent=\"{parent}\"",
            merge.id
        )));
    }
    golden(
        "merge.dot",
        &ok(graph(&db, &["--space", "replicated", "--format", "dot"])),
    );
}

/// `e1 ← e2 ← e3 ← e4` and `e1 ← replica` (imported, seq 5), drawn three at a time.
#[tokio::test]
async fn an_imported_epoch_on_an_old_parent_is_a_stub_and_pages_back() {
    let (_dir, db) = temp_db();
    let s = store(&db).await;
    let space = SpaceId::new("imported").unwrap();
    let first = append(&s, &space, "e1").await;
    for payload in ["e2", "e3", "e4"] {
        append(&s, &space, payload).await;
    }
    let replica = import(&s, &space, first.id, "replica").await;
    s.close().await.unwrap();

    let newest = ok(graph(&db, &["--space", "imported", "--last", "3"]));
    golden("imported-last3.svg", &newest);
    assert!(newest.contains("data-epochs=\"3\" data-older=\"3\""));
    assert!(newest.contains(&format!(
        "<path class=\"edge stub\" data-child=\"{replica}\" data-parent=\"{}\"",
        first.id
    )));
    assert_eq!(svg_heads(&newest).len(), 2, "both heads are in the window");
    golden(
        "imported-last3.dot",
        &ok(graph(
            &db,
            &["--space", "imported", "--last", "3", "--format", "dot"],
        )),
    );

    let older = ok(graph(
        &db,
        &["--space", "imported", "--last", "3", "--before", "3"],
    ));
    golden("imported-before3.svg", &older);
    assert!(older.contains("data-epochs=\"2\" width="), "no older page");
    assert!(
        svg_heads(&older).is_empty(),
        "heads only on the newest page"
    );
    assert!(!older.contains("stub"));
    golden(
        "imported-before3.dot",
        &ok(graph(
            &db,
            &[
                "--space", "imported", "--last", "3", "--before", "3", "--format", "dot",
            ],
        )),
    );

    // A `--before` above every seq is the newest page too.
    let above = ok(graph(
        &db,
        &["--space", "imported", "--last", "3", "--before", "99"],
    ));
    assert_eq!(above, newest);
}

#[tokio::test]
async fn the_default_window_is_the_newest_50() {
    let (_dir, db) = temp_db();
    let s = store(&db).await;
    let space = SpaceId::new("long").unwrap();
    for i in 1..=52 {
        append(&s, &space, &format!("e{i}")).await;
    }
    s.close().await.unwrap();
    let svg = ok(graph(&db, &["--space", "long"]));
    assert!(svg.contains("data-epochs=\"50\" data-older=\"3\""));
    let all = ok(graph(&db, &["--space", "long", "--last", "1000"]));
    assert!(all.contains("data-epochs=\"52\" width="));
    let first = ok(graph(&db, &["--space", "long", "--before", "2"]));
    assert!(first.contains("data-epochs=\"1\" width="));
    let none = ok(graph(&db, &["--space", "long", "--before", "1"]));
    assert!(none.contains("data-epochs=\"0\" width="));
    assert!(none.contains("no epochs in this window"));
}

#[tokio::test]
async fn a_hostile_space_name_is_escaped() {
    let (_dir, db) = temp_db();
    let name = "<script>alert(\"x\")</script> & 'q' \\";
    let s = store(&db).await;
    let space = SpaceId::new(name).unwrap();
    append(&s, &space, "one").await;
    s.close().await.unwrap();
    let svg = ok(graph(&db, &["--space", name]));
    assert!(!svg.contains("<script"), "{svg}");
    assert!(svg.contains(
        "data-space=\"&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;q&#39; \\\""
    ));
    let dot = ok(graph(&db, &["--space", name, "--format", "dot"]));
    assert!(
        dot.contains("label=\"space <script>alert(\\\"x\\\")</script> &amp; 'q' \\\\\""),
        "{dot}"
    );
}

#[tokio::test]
async fn an_unknown_space_is_refused_as_cairn_heads_refuses_it() {
    let (_dir, db) = temp_db();
    let s = store(&db).await;
    append(&s, &SpaceId::new("known").unwrap(), "one").await;
    s.close().await.unwrap();
    let msg = fails(graph(&db, &["--space", "unknown"]));
    let heads = fails(
        common::cairn(&db)
            .args(["heads", "--space", "unknown"])
            .output()
            .unwrap(),
    );
    assert_eq!(msg, heads);
    assert!(msg.contains("unknown"), "{msg}");
}

#[test]
fn a_missing_store_is_refused_and_not_created() {
    let (dir, db) = temp_db();
    let msg = fails(graph(&db, &["--space", "s"]));
    assert!(msg.starts_with("no cairn store at "), "{msg}");
    assert!(!Path::new(&db).exists());
    drop(dir);
}

#[test]
fn bad_arguments_are_refused_before_the_store_is_opened() {
    let (_dir, db) = temp_db();
    for (args, what) in [
        (&["--space", "s", "--last", "0"][..], "--last"),
        (&["--space", "s", "--last", "1001"], "--last"),
        (&["--space", "s", "--before", "0"], "--before"),
        (&["--space", ""], "space id"),
    ] {
        let msg = fails(graph(&db, args));
        assert!(msg.contains(what), "{args:?}: {msg}");
        assert!(!msg.contains("no cairn store"), "{args:?}: {msg}");
    }
    let usage = graph(&db, &["--space", "s", "--format", "png"]);
    assert_eq!(usage.status.code(), Some(2));
    assert!(!Path::new(&db).exists());
}

#[test]
fn help_documents_the_command() {
    let out = common::cairn("unused.db")
        .args(["graph", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success());
    for word in [
        "--space",
        "--format",
        "svg",
        "dot",
        "--last",
        "--before",
        "[default: 50]",
    ] {
        assert!(help.contains(word), "{word} in {help}");
    }
}
