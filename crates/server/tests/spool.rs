//! `cairn enqueue`, `cairn runs` and `cairn run show`, run as an operator's hook runs them:
//! many OS processes enqueueing the same key at once get one run id, on SQLite and Postgres.

use std::process::{Command, Output};

mod common;

fn cairn(db: &str, args: &[&str]) -> Command {
    let mut cmd = common::cairn(db);
    cmd.args(args);
    cmd
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s1_concurrent_enqueue_processes_get_one_run_id_per_key_on_both_backends() {
    let (_dir, urls, pg, schema) = common::sqlite_and_postgres("cairn_cli_spool").await;
    for db in &urls {
        // Create the store first, so the processes race on the key, not on creating the store.
        ok(cairn(
            db,
            &[
                "enqueue",
                "--queue",
                "setup",
                "--key",
                "setup",
                "--payload",
                "-",
            ],
        )
        .output()
        .unwrap());
        let children: Vec<_> = (0..8)
            .map(|i| {
                let key = if i % 2 == 0 { "even" } else { "odd" };
                cairn(
                    db,
                    &[
                        "enqueue",
                        "--queue",
                        "gate",
                        "--key",
                        "gate",
                        "--key-part",
                        key,
                        "--payload",
                        "p",
                    ],
                )
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn cairn enqueue")
            })
            .collect();
        let lines: Vec<String> = children
            .into_iter()
            .map(|c| ok(c.wait_with_output().unwrap()).trim().to_owned())
            .collect();
        for (i, key_lines) in [0, 1]
            .iter()
            .map(|parity| {
                lines
                    .iter()
                    .enumerate()
                    .filter(move |(i, _)| i % 2 == *parity)
                    .map(|(_, l)| l.clone())
                    .collect::<Vec<_>>()
            })
            .enumerate()
        {
            let ids: std::collections::BTreeSet<&str> = key_lines
                .iter()
                .map(|l| l.split(' ').next().unwrap())
                .collect();
            assert_eq!(
                ids.len(),
                1,
                "key {i}: one run id for one key: {key_lines:?}"
            );
            let created = key_lines.iter().filter(|l| l.ends_with(" created")).count();
            assert_eq!(
                created, 1,
                "key {i}: exactly one process created it: {key_lines:?}"
            );
        }
        let runs = ok(cairn(db, &["runs", "--queue", "gate"]).output().unwrap());
        assert_eq!(runs.lines().count(), 2, "{runs}");
        assert!(
            runs.lines().all(|l| l.contains(" gate queued attempts=0")),
            "{runs}"
        );
    }
    common::drop_schema(&pg, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_show_prints_state_and_bad_input_gets_one_line() {
    let (dir, urls, pg, schema) = common::sqlite_and_postgres("cairn_cli_spool").await;
    for db in &urls {
        let line = ok(cairn(
            db,
            &[
                "enqueue",
                "--queue",
                "q",
                "--key",
                "k",
                "--payload",
                "hello",
                "--priority",
                "-3",
            ],
        )
        .output()
        .unwrap());
        let id = line.split(' ').next().unwrap().to_owned();
        let show = ok(cairn(db, &["run", "show", &id]).output().unwrap());
        assert!(show.starts_with(&format!("run {id}\n")), "{show}");
        assert!(show.contains("\nstate queued\n"), "{show}");
        assert!(show.contains("\npriority -3\n"), "{show}");
        assert!(show.contains("\npayload_bytes 5\n"), "{show}");
        assert!(show.ends_with("events 0\n"), "{show}");

        for args in [
            vec!["run", "show", "not-a-run-id"],
            vec!["runs", "--state", "bogus"],
            vec!["enqueue", "--queue", "", "--key", "k", "--payload", "p"],
        ] {
            let out = cairn(db, &args).output().unwrap();
            assert_eq!(out.status.code(), Some(1), "{args:?}");
            let err = String::from_utf8(out.stderr).unwrap();
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.starts_with("cairn: "), "{err}");
        }
        // An unknown (well-formed) run id is its own error.
        let out = cairn(db, &["run", "show", "01a22b8e-34b5-72f6-aaf8-4f06b0f965c8"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
    }
    // Reading runs of a store that does not exist creates nothing.
    let missing = dir.path().join("missing.db");
    let out = cairn(&missing.display().to_string(), &["runs"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(!missing.exists());
    common::drop_schema(&pg, &schema).await;
}

/// Writes the documented example of docs/LEGACY_FORMAT.md into `dir` (checkpoint, runs.wal,
/// gate.spool, in the order the document shows them).
fn write_documented_legacy_dir(dir: &std::path::Path) {
    let doc = include_str!("../../../docs/LEGACY_FORMAT.md");
    let example = &doc[doc
        .find("## A complete example")
        .expect("the example section")..];
    let blocks: Vec<&str> = example.split("```").skip(1).step_by(2).collect();
    assert_eq!(blocks.len(), 3, "checkpoint, runs.wal and gate.spool");
    std::fs::create_dir_all(dir).unwrap();
    for (name, block) in ["checkpoint", "runs.wal", "gate.spool"].iter().zip(blocks) {
        std::fs::write(dir.join(name), block.trim_start_matches('\n')).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s13_import_legacy_once_with_a_backup_and_corruption_changing_nothing() {
    let (dir, urls, pg, schema) = common::sqlite_and_postgres("cairn_cli_spool").await;
    for (n, db) in urls.iter().enumerate() {
        // A corrupt record mid-file is refused before anything is written or copied.
        let bad = dir.path().join(format!("bad-{n}"));
        write_documented_legacy_dir(&bad);
        let wal = std::fs::read_to_string(bad.join("runs.wal")).unwrap();
        std::fs::write(
            bad.join("runs.wal"),
            wal.replacen("\"seq\":1", "\"seq\":7", 1),
        )
        .unwrap();
        let out = cairn(db, &["import", "--legacy"])
            .arg(&bad)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("runs.wal"), "names the file: {err}");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("bad-{n}.cairn-backup"))
            })
            .collect();
        assert!(leftovers.is_empty(), "no backup for a refused import");

        let legacy = dir.path().join(format!("legacy-{n}"));
        write_documented_legacy_dir(&legacy);
        let first = ok(cairn(db, &["import", "--legacy"])
            .arg(&legacy)
            .output()
            .unwrap());
        assert!(first.contains("runs to import 2"), "{first}");
        assert!(first.contains("imported 2 run(s)"), "{first}");
        let backup = first
            .lines()
            .find_map(|l| l.strip_prefix("backup "))
            .expect("the backup is named");
        for f in ["checkpoint", "runs.wal", "gate.spool"] {
            assert_eq!(
                std::fs::read(std::path::Path::new(backup).join(f)).unwrap(),
                std::fs::read(legacy.join(f)).unwrap(),
                "{f} is backed up byte for byte"
            );
        }
        let runs = ok(cairn(db, &["runs", "--queue", "gate"]).output().unwrap());
        assert!(
            runs.contains("0190a5c0-0000-7000-8000-000000000001 gate queued attempts=1"),
            "ids and attempts are preserved: {runs}"
        );
        assert!(
            runs.contains("0190a5c0-0000-7000-8000-000000000002 gate queued attempts=0"),
            "{runs}"
        );

        let second = ok(cairn(db, &["import", "--legacy"])
            .arg(&legacy)
            .output()
            .unwrap());
        assert!(second.contains("already imported"), "{second}");
        let again = ok(cairn(db, &["runs", "--queue", "gate"]).output().unwrap());
        assert_eq!(again, runs, "a second import changes nothing");
    }
    common::drop_schema(&pg, &schema).await;
}
