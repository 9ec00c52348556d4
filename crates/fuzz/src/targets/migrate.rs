//! Targets for migration sources: SQL text split into statements, migration file sets (names
//! and contents) read by `MigrationSet::from_files`, and lineage checksums read back as hex.

use arbitrary::Unstructured;
use cairn_core::schema::Dialect;
use cairn_migrate::{split_statements, Checksum, MigrateError, MigrationSet};

use super::signature::{mix, sig};
use super::target::Target;

const SQL_DICT: &[&[u8]] = &[
    b";",
    b"--",
    b"/*",
    b"*/",
    b"'",
    b"''",
    b"E'",
    b"\\'",
    b"\"",
    b"`",
    b"[",
    b"]",
    b"(",
    b")",
    b"$$",
    b"$tag$",
    b"$1",
    b"BEGIN",
    b"BEGIN ATOMIC",
    b"END",
    b"CASE",
    b"CREATE TRIGGER t AFTER INSERT ON x BEGIN",
    b"CREATE FUNCTION f() RETURNS int LANGUAGE sql",
    b"CREATE TABLE t (id BIGINT PRIMARY KEY)",
    b"\n",
    b"\xc3\xa9",
];

pub(super) const SQL_SPLIT: Target = Target {
    name: "sql_split",
    about: "split_statements on both dialects: statements are non-empty, trimmed and taken from the text; errors name a line of the text",
    run: sql_split,
    dictionary: SQL_DICT,
    max_len: 4096,
};

fn sql_split(data: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(data);
    let lines = text.bytes().filter(|b| *b == b'\n').count() + 1;
    let mut s = 0;
    for (tag, dialect) in [(40, Dialect::Sqlite), (41, Dialect::Postgres)] {
        let result = split_statements(&text, dialect);
        match &result {
            Ok(statements) => {
                for st in statements {
                    assert!(
                        !st.trim_matches(|c: char| c.is_ascii_whitespace())
                            .is_empty(),
                        "an empty statement"
                    );
                    assert_eq!(
                        st.trim_end_matches(|c: char| c.is_ascii_whitespace()),
                        st,
                        "a statement keeps trailing whitespace"
                    );
                    assert!(text.contains(st.as_str()), "a statement not from the text");
                }
            }
            Err(e) => assert!(e.line >= 1 && e.line <= lines, "line {} of {lines}", e.line),
        }
        s = mix(
            s,
            mix(
                sig(tag, &result),
                result.as_ref().map_or(0, |v| v.len().min(4) as u64),
            ),
        );
    }
    s
}

const FILE_DICT: &[&[u8]] = &[
    b".sql",
    b".sqlite.sql",
    b".postgres.sql",
    b".down.sql",
    b".up.sql",
    b"0001_",
    b"0002_",
    b"_",
    b"/",
    b"-- cairn:contract\n",
    b"-- a description\n",
];

pub(super) const MIGRATION_FILES: Target = Target {
    name: "migration_files",
    about: "MigrationSet::from_files on arbitrary names and contents: order-independent, and an accepted set is a well-formed chain with statements for each dialect it supports",
    run: migration_files,
    dictionary: FILE_DICT,
    max_len: 4096,
};

/// Name pieces, so a byte picks a plausible file name more often than not.
const NUMBERS: &[&str] = &[
    "0001",
    "0002",
    "1",
    "01",
    "0003",
    "18446744073709551616",
    "",
];
const STEMS: &[&str] = &["_users", "_email", "_x", "", "users", "_a.b", "_"];
const DOWNS: &[&str] = &["", "", ".down", ".up"];
const TARGETS: &[&str] = &["", "", ".sqlite", ".postgres"];
const BODIES: &[&str] = &[
    "CREATE TABLE users (id BIGINT PRIMARY KEY);",
    "-- users\nCREATE TABLE users (id BIGINT PRIMARY KEY);\nCREATE INDEX i ON users (id);",
    "ALTER TABLE users ADD COLUMN email TEXT;",
    "DROP TABLE users;",
    "-- cairn:contract\nALTER TABLE users DROP COLUMN email;",
    "-- only a comment",
    "'never closed",
];

fn file(u: &mut Unstructured<'_>) -> arbitrary::Result<(String, Vec<u8>)> {
    let name = if u.ratio(1, 5)? {
        u.arbitrary::<String>()?
    } else {
        format!(
            "{}{}{}{}{}",
            u.choose(NUMBERS)?,
            u.choose(STEMS)?,
            u.choose(DOWNS)?,
            u.choose(TARGETS)?,
            if u.ratio(9, 10)? { ".sql" } else { ".md" }
        )
    };
    let body = if u.ratio(1, 3)? {
        u.arbitrary::<Vec<u8>>()?
    } else {
        u.choose(BODIES)?.as_bytes().to_vec()
    };
    Ok((name, body))
}

fn migration_files(data: &[u8]) -> u64 {
    let mut u = Unstructured::new(data);
    let Ok((set_name, files)) = (|| -> arbitrary::Result<_> {
        let set_name = if u.ratio(1, 8)? {
            u.arbitrary::<String>()?
        } else {
            "app".to_owned()
        };
        let n = u.int_in_range(0..=5usize)?;
        let files = (0..n)
            .map(|_| file(&mut u))
            .collect::<arbitrary::Result<Vec<_>>>()?;
        Ok((set_name, files))
    })() else {
        return 0;
    };
    let result = MigrationSet::from_files(set_name.clone(), files.iter().cloned());
    let mut reversed = files.clone();
    reversed.reverse();
    let again = MigrationSet::from_files(set_name.clone(), reversed);
    assert_eq!(
        result.is_ok(),
        again.is_ok(),
        "the files' order changes acceptance"
    );
    match &result {
        Ok(set) => {
            assert_eq!(Some(set), again.as_ref().ok(), "the files' order matters");
            check_set(set);
        }
        Err(MigrateError::Source { .. } | MigrateError::InvalidSet { .. }) => {}
        Err(other) => panic!("from_files returned an unexpected error: {other:?}"),
    }
    sig(50, &result)
}

fn check_set(set: &MigrationSet) {
    let revisions = set.revisions();
    assert!(!revisions.is_empty());
    assert_eq!(set.base(), &revisions[0]);
    assert_eq!(set.head(), revisions.last().unwrap());
    assert!(revisions[0].parent.is_none());
    for (i, r) in revisions.iter().enumerate() {
        assert_eq!(set.position(&r.id), Some(i));
        if i > 0 {
            assert_eq!(r.parent.as_deref(), Some(revisions[i - 1].id.as_str()));
        }
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            // A single-engine set (no files for one engine) keeps nothing for the other.
            if !set.supports(dialect) {
                assert!(
                    r.up(dialect).is_empty(),
                    "statements for an engine the set is not for"
                );
                continue;
            }
            assert!(!r.up(dialect).is_empty(), "a revision without statements");
            let sum = set.checksum(i, dialect);
            assert_eq!(Checksum::from_hex(&sum.to_hex()).unwrap(), sum);
        }
    }
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        let lineage = set.lineage(dialect);
        assert_eq!(lineage.len(), revisions.len());
        for (entry, r) in lineage.iter().zip(revisions) {
            assert_eq!(entry.revision, r.id);
        }
    }
}

pub(super) const CHECKSUM_HEX: Target = Target {
    name: "checksum_hex",
    about: "Checksum::from_hex on lineage text: 64 characters or refused, to_hex -> from_hex is the identity",
    run: checksum_hex,
    dictionary: &[b"+", b"-", b"0", b"f", b"F", b"\xc3\xa9"],
    max_len: 128,
};

fn checksum_hex(data: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(data);
    let parsed = Checksum::from_hex(&text);
    if let Ok(sum) = &parsed {
        assert_eq!(text.len(), 64);
        let hex = sum.to_hex();
        assert_eq!(hex.len(), 64);
        // Accepted text is exactly the checksum, in either case ("+f00…" once read as 0f00…).
        assert_eq!(
            hex,
            text.to_ascii_lowercase(),
            "accepted text that is not hex"
        );
        assert_eq!(&Checksum::from_hex(&hex).unwrap(), sum);
    } else {
        assert!(matches!(parsed, Err(MigrateError::Corrupt { .. })));
    }
    if data.len() >= 32 {
        let sum = Checksum(data[..32].try_into().unwrap());
        assert_eq!(Checksum::from_hex(&sum.to_hex()).unwrap(), sum);
    }
    sig(60, &parsed)
}
