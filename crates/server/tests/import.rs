//! `cairn import --legacy DIR` facing a hostile or damaged directory: the backup never writes
//! through a planted symbolic link, a source file that is a link is never read through, a
//! tail over the record limit is refused as damage, and `--quarantine` imports every valid
//! record, keeps each corrupt one verbatim beside a report and records the import as partial,
//! on SQLite and Postgres.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cairn::testkit::legacy::{seal_record, MAX_LEGACY_LINE};

mod common;

fn cairn(db: &str, args: &[&str]) -> Command {
    let mut cmd = common::cairn(db);
    cmd.args(args);
    cmd
}

fn import(db: &str, dir: &Path, extra: &[&str]) -> Output {
    cairn(db, &["import", "--legacy"])
        .arg(dir)
        .args(extra)
        .output()
        .unwrap()
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

/// Exit 1 with one line on stderr, returned.
fn refused(out: Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}

/// Writes the documented example of docs/LEGACY_FORMAT.md into `dir`.
fn write_documented_legacy_dir(dir: &Path) {
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

fn backup_of(out: &str) -> PathBuf {
    PathBuf::from(
        out.lines()
            .find_map(|l| l.strip_prefix("backup "))
            .expect("the backup is named"),
    )
}

fn runs(db: &str) -> String {
    ok(cairn(db, &["runs", "--queue", "gate"]).output().unwrap())
}

#[cfg(unix)]
#[test]
fn a_link_planted_at_the_backup_path_is_refused_and_its_target_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let legacy = dir.path().join("made");
    write_documented_legacy_dir(&legacy);
    // Learn the predictable backup path (as an attacker can: it is the source's fingerprint),
    // then start over with a link planted there.
    let scratch = dir.path().join("scratch.db").display().to_string();
    let backup = backup_of(&ok(import(&scratch, &legacy, &[])));
    std::fs::remove_dir_all(&backup).unwrap();
    std::fs::create_dir(&backup).unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"precious\n").unwrap();
    std::os::unix::fs::symlink(&victim, backup.join("gate.spool")).unwrap();

    let db = dir.path().join("store.db").display().to_string();
    let err = refused(import(&db, &legacy, &[]));
    assert!(err.contains("symbolic link"), "{err}");
    assert!(err.contains("gate.spool"), "{err}");
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        b"precious\n",
        "the link's target is unchanged"
    );
    assert!(
        !Path::new(&db).exists() || runs(&db).is_empty(),
        "nothing was imported"
    );

    // The backup directory itself a link: refused too, nothing written where it points.
    std::fs::remove_dir_all(&backup).unwrap();
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &backup).unwrap();
    let err = refused(import(&db, &legacy, &[]));
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);

    // With the link gone the import runs, and a second run verifies the backup it finds.
    std::fs::remove_file(&backup).unwrap();
    let first = ok(import(&db, &legacy, &[]));
    assert!(first.contains("imported 2 run(s)"), "{first}");
    assert_eq!(
        std::fs::read(backup.join("gate.spool")).unwrap(),
        std::fs::read(legacy.join("gate.spool")).unwrap()
    );
    std::fs::write(backup.join("runs.wal"), b"tampered\n").unwrap();
    let err = refused(import(&db, &legacy, &[]));
    assert!(err.contains("differs"), "{err}");
    assert_eq!(
        std::fs::read(backup.join("runs.wal")).unwrap(),
        b"tampered\n"
    );
}

#[cfg(unix)]
#[test]
fn a_symlinked_source_file_is_refused_not_read_through() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db").display().to_string();
    let legacy = dir.path().join("made");
    write_documented_legacy_dir(&legacy);
    let secret = dir.path().join("secret");
    std::fs::write(&secret, b"not yours\n").unwrap();
    for name in ["checkpoint.tmp", "gate.spool"] {
        let real = legacy.join(name);
        let kept = std::fs::read(&real).ok();
        let _ = std::fs::remove_file(&real);
        std::os::unix::fs::symlink(&secret, &real).unwrap();
        let err = refused(import(&db, &legacy, &[]));
        assert!(
            err.contains(name) && err.contains("symbolic link"),
            "{name}: {err}"
        );
        std::fs::remove_file(&real).unwrap();
        if let Some(k) = kept {
            std::fs::write(&real, k).unwrap();
        }
    }
    // Nothing was copied: no backup holds the secret.
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().contains(".cairn-backup-") {
            for f in std::fs::read_dir(e.path()).unwrap() {
                assert_ne!(
                    std::fs::read(f.unwrap().path()).unwrap(),
                    b"not yours\n",
                    "a link's target was copied"
                );
            }
        }
    }
}

#[test]
fn a_tail_over_the_record_limit_is_refused_as_damage() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db").display().to_string();
    let legacy = dir.path().join("made");
    write_documented_legacy_dir(&legacy);
    let mut spool = std::fs::read(legacy.join("gate.spool")).unwrap();
    spool.extend(std::iter::repeat_n(b'x', MAX_LEGACY_LINE + 1024 * 1024));
    std::fs::write(legacy.join("gate.spool"), &spool).unwrap();
    let err = refused(import(&db, &legacy, &[]));
    assert!(err.contains("gate.spool line 2"), "{err}");
    assert!(err.contains("limit"), "not a torn record: {err}");
    let leftovers = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains(".cairn-backup-")
        })
        .count();
    assert_eq!(leftovers, 0, "no backup of a refused import");
}

/// The descriptions of the completion markers the store holds.
async fn markers(db: &str, pg: &str, schema: &str) -> Vec<String> {
    if db.starts_with("postgres") {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(pg).await.unwrap();
        let table: Option<String> = sqlx::query_scalar(&format!(
            "SELECT to_regclass('{schema}.spool_import')::text"
        ))
        .fetch_one(&mut conn)
        .await
        .unwrap();
        if table.is_none() {
            return Vec::new();
        }
        sqlx::query_scalar(&format!(
            "SELECT description FROM {schema}.spool_import ORDER BY imported_at"
        ))
        .fetch_all(&mut conn)
        .await
        .unwrap()
    } else {
        if !Path::new(db).exists() {
            return Vec::new();
        }
        let conn = rusqlite::Connection::open(db).unwrap();
        let mut stmt = conn
            .prepare("SELECT description FROM spool_import ORDER BY imported_at")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_imports_the_valid_records_and_records_a_partial_import_on_both_backends() {
    let (dir, urls, pg, schema) = common::sqlite_and_postgres("cairn_cli_import").await;
    for (n, db) in urls.iter().enumerate() {
        let legacy = dir.path().join(format!("made-{n}"));
        write_documented_legacy_dir(&legacy);
        // The documented submission damaged (one byte of its payload), then a good one.
        let spool = std::fs::read_to_string(legacy.join("gate.spool")).unwrap();
        let damaged = spool.replacen("\"payload\":\"{}\"", "\"payload\":\"{!\"", 1);
        assert_ne!(damaged, spool);
        let good = seal_record(
            r#"{"run_id":"0190a5c0-0000-7000-8000-000000000003","gate":"ci","ref":"refs/heads/other","input_sha":"77aa","payload":"{}","submitted_ms":1700000500000}"#,
        )
        .unwrap();
        std::fs::write(legacy.join("gate.spool"), format!("{damaged}{good}\n")).unwrap();

        // Without the flag: refused as today, nothing written, no backup.
        let err = refused(import(db, &legacy, &[]));
        assert!(err.contains("gate.spool line 1"), "{err}");
        assert!(err.contains("checksum"), "{err}");
        assert!(markers(db, &pg, &schema).await.is_empty());

        // With it: every valid record imported, the damaged one kept verbatim.
        let out = ok(import(db, &legacy, &["--quarantine"]));
        assert!(out.contains("quarantined gate.spool line 1 ("), "{out}");
        assert!(
            out.contains("partial import: 1 corrupt record(s) left out"),
            "{out}"
        );
        assert!(out.contains("imported 2 run(s)"), "{out}");
        let listed = runs(db);
        assert!(
            listed.contains("0190a5c0-0000-7000-8000-000000000001 gate queued attempts=1"),
            "{listed}"
        );
        assert!(
            listed.contains("0190a5c0-0000-7000-8000-000000000003 gate queued attempts=0"),
            "{listed}"
        );
        assert!(
            !listed.contains("0190a5c0-0000-7000-8000-000000000002"),
            "{listed}"
        );
        let backup = backup_of(&out);
        let kept = std::fs::read_to_string(backup.join("quarantine/gate.spool.line-1")).unwrap();
        assert_eq!(kept, damaged.trim_end_matches('\n'), "kept verbatim");
        let report = std::fs::read_to_string(backup.join("quarantine/report.txt")).unwrap();
        let entry = report
            .lines()
            .find(|l| l.starts_with("gate.spool line 1 "))
            .unwrap_or_else(|| panic!("{report}"));
        assert!(entry.contains("checksum"), "the reason: {entry}");
        assert!(entry.ends_with("-> gate.spool.line-1"), "{entry}");
        assert_eq!(
            std::fs::read(backup.join("gate.spool")).unwrap(),
            std::fs::read(legacy.join("gate.spool")).unwrap(),
            "the whole file is backed up as it was"
        );
        // The completion marker says the import was partial.
        let m = markers(db, &pg, &schema).await;
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(
            m[0].starts_with("partial import, 1 corrupt record(s) quarantined: legacy directory"),
            "{m:?}"
        );
        // Once: a second run changes nothing and still says it was partial.
        let again = ok(import(db, &legacy, &["--quarantine"]));
        assert!(again.contains("already imported"), "{again}");
        assert!(again.contains("source partial import"), "{again}");
        assert_eq!(runs(db), listed);
    }
    common::drop_schema(&pg, &schema).await;
}

/// An import into a store behind this binary is refused before anything is printed or copied:
/// exit 1 with the one-line refusal, nothing on stdout, no backup beside the source, the store
/// still at its stamp. On SQLite and Postgres.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_into_a_store_behind_this_binary_prints_and_copies_nothing() {
    let older = "0009_spool_flow";
    let (dir, urls, pg, schema) = common::sqlite_and_postgres("cairn_import_behind").await;
    for url in &urls {
        common::made_by_an_older_build(url, older).await;
    }
    let sources = dir.path().join("sources");
    let legacy = sources.join("legacy");
    write_documented_legacy_dir(&legacy);
    let (urls2, legacy2) = (urls.clone(), legacy.clone());
    let outs = tokio::task::spawn_blocking(move || {
        urls2
            .iter()
            .map(|url| {
                let out = import(url, &legacy2, &[]);
                let status = cairn(url, &["migrate", "status"]).output().unwrap();
                (out, status)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    common::drop_schema(&pg, &schema).await;
    for (engine, (out, status)) in ["sqlite", "postgres"].iter().zip(outs) {
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "",
            "{engine}: nothing printed"
        );
        let err = refused(out);
        assert!(
            err.contains(older) && err.contains("cairn migrate up"),
            "{engine}: {err}"
        );
        let status = ok(status);
        assert!(
            status.contains(&format!("stamp: {older}")),
            "{engine}: {status}"
        );
    }
    let beside: Vec<_> = std::fs::read_dir(&sources)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(beside, ["legacy"], "no backup was made beside the source");
}
