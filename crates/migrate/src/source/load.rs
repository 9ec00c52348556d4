//! Building an application's [`MigrationSet`] from its files: grouped by revision number, the
//! engines the set is for, each revision's statements per dialect, its down SQL and contract
//! mark.

use std::collections::BTreeMap;
use std::path::Path;

use cairn_core::schema::Dialect;

use super::contents::{
    accepted_locks, check_markers, description, has_contract_marker, has_no_transaction_marker,
    statements, CONTRACT_MARKER,
};
use super::file_name::{parse_name, source_err, Target};
use crate::error::MigrateError;
use crate::identity::CAIRN_SET;
use crate::revision::{MigrationSet, Revision};

/// The files of one revision number.
#[derive(Default)]
struct Group<'a> {
    stem: String,
    first_file: String,
    generic: Option<(String, &'a str)>,
    sqlite: Option<(String, &'a str)>,
    postgres: Option<(String, &'a str)>,
}

impl MigrationSet {
    /// Validates and builds an application's set: as [`MigrationSet::new`], and the name must
    /// not be `cairn` (reserved for cairn's own set, whose stamp it would overwrite).
    ///
    /// # Errors
    /// [`MigrateError::InvalidSet`] naming the first problem.
    pub fn application(
        name: impl Into<String>,
        revisions: Vec<Revision>,
    ) -> Result<Self, MigrateError> {
        let name = check_application_name(name.into())?;
        Self::new(name, revisions)
    }

    /// Loads an application's set from the SQL files in `dir` (see the module docs of
    /// [`crate::source`] for the names), read at run time; a relative `dir` is relative to the
    /// process's working directory (not the crate root, as with
    /// [`embed_migrations!`](crate::embed_migrations)). Files not ending in `.sql` (a README)
    /// are ignored; subdirectories are not read.
    ///
    /// # Errors
    /// [`MigrateError::Store`] with [`cairn_core::Error::Io`] when `dir` or a file cannot be
    /// read; otherwise as [`MigrationSet::from_files`].
    pub fn from_dir(name: impl Into<String>, dir: impl AsRef<Path>) -> Result<Self, MigrateError> {
        let dir = dir.as_ref();
        let io = |path: &Path, source| {
            MigrateError::Store(cairn_core::Error::Io {
                path: path.display().to_string(),
                source,
            })
        };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
            let entry = entry.map_err(|e| io(dir, e))?;
            let path = entry.path();
            let Some(file) = entry.file_name().to_str().map(str::to_owned) else {
                let shown = entry.file_name().to_string_lossy().into_owned();
                if shown.ends_with(".sql") {
                    return Err(source_err(&shown, "the file name is not UTF-8"));
                }
                continue;
            };
            // A symlinked file counts as the file it points to, as `embed_migrations!` reads it.
            if !file.ends_with(".sql")
                || !std::fs::metadata(&path)
                    .map_err(|e| io(&path, e))?
                    .is_file()
            {
                continue;
            }
            let bytes = std::fs::read(&path).map_err(|e| io(&path, e))?;
            files.push((file, bytes));
        }
        Self::from_files(name, files)
    }

    /// Builds an application's set from `(file name, contents)` pairs, in any order: the
    /// revision numbers order them (see the module docs of [`crate::source`]). Names not
    /// ending in `.sql` are ignored.
    ///
    /// # Errors
    /// [`MigrateError::InvalidSet`] for the name `cairn` or no migration file at all;
    /// [`MigrateError::Source`] naming the file for: a name that does not follow
    /// `NNNN_description[.down][.sqlite|.postgres].sql`, a `*.down.sql` file for the base
    /// revision or for a number without an up file, contents that are not UTF-8, a literal, comment or body never closed, a file without a statement, two files
    /// with one revision number (naming both), or a revision left without statements for one
    /// dialect in a set that has files specific to both (a set with none for one engine is
    /// single-engine instead: see the module docs of [`crate::source`]).
    pub fn from_files<N, C>(
        name: impl Into<String>,
        files: impl IntoIterator<Item = (N, C)>,
    ) -> Result<Self, MigrateError>
    where
        N: AsRef<str>,
        C: AsRef<[u8]>,
    {
        let name = check_application_name(name.into())?;
        let files: Vec<(N, C)> = files.into_iter().collect();
        let mut groups: BTreeMap<u64, Group<'_>> = BTreeMap::new();
        let mut downs: BTreeMap<u64, Group<'_>> = BTreeMap::new();
        for (file, contents) in &files {
            let file = file.as_ref();
            let Some(parsed) = parse_name(file)? else {
                continue;
            };
            let text = std::str::from_utf8(contents.as_ref())
                .map_err(|e| source_err(file, format!("is not UTF-8 ({e})")))?;
            // A byte-order mark some editors write is not SQL.
            let text = text.strip_prefix('\u{feff}').unwrap_or(text);
            check_markers(file, text)?;
            let group = if parsed.down {
                downs.entry(parsed.number).or_default()
            } else {
                groups.entry(parsed.number).or_default()
            };
            if group.stem.is_empty() {
                group.stem.clone_from(&parsed.stem);
                group.first_file = file.to_owned();
            } else if group.stem != parsed.stem {
                let (a, b) = ordered(&group.first_file, file);
                return Err(source_err(
                    b,
                    format!("has the same revision number as {a}; each number names one revision"),
                ));
            }
            let slot = match parsed.target {
                Target::Generic => &mut group.generic,
                Target::Only(Dialect::Sqlite) => &mut group.sqlite,
                Target::Only(Dialect::Postgres) => &mut group.postgres,
            };
            if let Some((other, _)) = slot {
                return Err(source_err(
                    file,
                    format!("is given twice (also as {other})"),
                ));
            }
            *slot = Some((file.to_owned(), text));
        }
        let single = single_engine(&files, &groups);
        let only = single.as_ref().map(|(dialect, _)| *dialect);
        let used = |dialect: Dialect| only.is_none_or(|o| o == dialect);
        let mut revisions: Vec<Revision> = Vec::with_capacity(groups.len());
        let mut contracts = Vec::new();
        let mut outside = Vec::new();
        let mut files_of = Vec::new();
        let mut accepts: Vec<(String, String)> = Vec::new();
        let mut down_sql = Vec::with_capacity(downs.len());
        for (number, down) in &downs {
            let Some(up) = groups.get(number) else {
                return Err(source_err(
                    &down.first_file,
                    "is down SQL for a revision number with no up file; add the revision or remove the file",
                ));
            };
            if up.stem != down.stem {
                let (a, b) = ordered(&up.first_file, &down.first_file);
                return Err(source_err(
                    b,
                    format!("has the same revision number as {a} but another name; name the down file after its revision"),
                ));
            }
            let sqlite = pick(down, Dialect::Sqlite, &down.sqlite, ".down", used)?;
            let postgres = pick(down, Dialect::Postgres, &down.postgres, ".down", used)?;
            down_sql.push((down.stem.clone(), sqlite, postgres));
        }
        for group in groups.into_values() {
            let up_sqlite = pick(&group, Dialect::Sqlite, &group.sqlite, "", used)?;
            let up_postgres = pick(&group, Dialect::Postgres, &group.postgres, "", used)?;
            if contract_marked(&group, only)? {
                contracts.push(group.stem.clone());
            }
            for (dialect, own) in [
                (Dialect::Sqlite, &group.sqlite),
                (Dialect::Postgres, &group.postgres),
            ] {
                if let Some((file, text)) = own.as_ref().or(group.generic.as_ref()) {
                    if used(dialect) {
                        files_of.push((group.stem.clone(), dialect, file.clone()));
                        if has_no_transaction_marker(text) {
                            outside.push((group.stem.clone(), dialect, file.clone()));
                        }
                    }
                }
            }
            // The lock check runs on Postgres: its file (or the generic one) accepts findings.
            if let Some((_, text)) = group.postgres.as_ref().or(group.generic.as_ref()) {
                accepts.extend(accepted_locks(text).map(|n| (group.stem.clone(), n.to_owned())));
            }
            let (_, described) = group
                .generic
                .as_ref()
                .or(group.sqlite.as_ref())
                .or(group.postgres.as_ref())
                .expect("a group holds at least one file");
            revisions.push(Revision {
                parent: revisions.last().map(|r| r.id.clone()),
                description: description(described, &group.stem),
                id: group.stem,
                up_sqlite,
                up_postgres,
            });
        }
        if revisions.is_empty() {
            return Err(MigrateError::InvalidSet {
                set: name,
                reason: "no migration file (NNNN_description.sql) was found".into(),
            });
        }
        let mut set = Self::new(name, revisions)?;
        if let Some((dialect, lacking)) = single {
            set = set.declare_only(dialect, Some(lacking))?;
        }
        for (revision, sqlite, postgres) in down_sql {
            set = set
                .with_down(&revision, sqlite, postgres)
                .map_err(|e| match e {
                    MigrateError::InvalidSet { reason, .. } => {
                        source_err(&format!("{revision}.down.sql"), reason)
                    }
                    other => other,
                })?;
        }
        for revision in contracts {
            set = set.with_contract(&revision).map_err(|e| match e {
                MigrateError::InvalidSet { reason, .. } => {
                    source_err(&format!("{revision}.sql"), reason)
                }
                other => other,
            })?;
        }
        for (revision, dialect, file) in outside {
            set = set
                .with_no_transaction(&revision, dialect)
                .map_err(|e| match e {
                    MigrateError::InvalidSet { reason, .. } => source_err(&file, reason),
                    other => other,
                })?;
        }
        // What cannot run in the upgrade transaction needs the mark (Postgres), or cannot run
        // at all (VACUUM on SQLite): refused here, not by the server halfway through `up`.
        for (revision, dialect, file) in files_of {
            let postgres = dialect == Dialect::Postgres;
            if postgres && set.is_no_transaction(&revision, dialect) {
                continue;
            }
            let at = set.position(&revision).unwrap_or_default();
            crate::outside::check_in_transaction(set.revisions()[at].up(dialect), postgres)
                .map_err(|why| source_err(&file, format!("revision {revision}: {why}")))?;
        }
        for (revision, name) in accepts {
            set = set.with_accepted_lock(&revision, &name)?;
        }
        Ok(set)
    }

    /// Builds an application's set from files embedded with
    /// [`embed_migrations!`](crate::embed_migrations), whose path is relative to the crate root
    /// (the directory of the crate's `Cargo.toml`) and read at compile time; the path of
    /// [`MigrationSet::from_dir`] is relative to the process's working directory and read at
    /// run time.
    ///
    /// ```
    /// # fn main() -> cairn::Result<()> {
    /// use cairn::MigrationSet;
    /// // In a service: MigrationSet::from_embedded("billing", cairn::embed_migrations!("migrations"))
    /// let files: &[(&str, &str)] = &[("0001_users.sql", "CREATE TABLE users (id BIGINT PRIMARY KEY);")];
    /// let set = MigrationSet::from_embedded("billing", files)?;
    /// assert_eq!(set.head().id, "0001_users");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`MigrationSet::from_files`].
    pub fn from_embedded(
        name: impl Into<String>,
        files: &[(&str, &str)],
    ) -> Result<Self, MigrateError> {
        Self::from_files(name, files.iter().copied())
    }
}

/// The one engine a set of files is for, when it is not for both, with the first revision
/// that has no SQL for the other: no file of the set is specific to the other engine
/// (`.postgres.sql`, `.down.postgres.sql`, and so on) and some revision has no SQL for it (only
/// files specific to the one engine). A set with files specific to both engines is for both: a
/// revision lacking one is an error, as before.
fn single_engine<N: AsRef<str>, C>(
    files: &[(N, C)],
    groups: &BTreeMap<u64, Group<'_>>,
) -> Option<(Dialect, String)> {
    let has_files_for = |dialect: Dialect| {
        files.iter().any(|(file, _)| {
            matches!(parse_name(file.as_ref()), Ok(Some(f)) if f.target == Target::Only(dialect))
        })
    };
    let first_lacking = |dialect: Dialect| {
        groups.values().find_map(|g| {
            let own = match dialect {
                Dialect::Sqlite => &g.sqlite,
                Dialect::Postgres => &g.postgres,
            };
            (own.is_none() && g.generic.is_none()).then(|| g.stem.clone())
        })
    };
    [
        (Dialect::Sqlite, Dialect::Postgres),
        (Dialect::Postgres, Dialect::Sqlite),
    ]
    .into_iter()
    .filter(|&(_, other)| !has_files_for(other))
    .find_map(|(only, other)| first_lacking(other).map(|stem| (only, stem)))
}

/// The statements of `group` for `dialect`: its own dialect file, else the generic one; none
/// for a dialect the set is not for (`used` says which are).
/// `kind` is `""` for up files and `".down"` for down files (named in the error).
fn pick(
    group: &Group<'_>,
    dialect: Dialect,
    own: &Option<(String, &str)>,
    kind: &str,
    used: impl Fn(Dialect) -> bool,
) -> Result<Vec<String>, MigrateError> {
    if !used(dialect) {
        return Ok(Vec::new());
    }
    match (own, &group.generic) {
        (Some((file, text)), _) | (None, Some((file, text))) => statements(file, text, dialect),
        (None, None) => {
            let present = group
                .sqlite
                .as_ref()
                .or(group.postgres.as_ref())
                .map_or(group.first_file.as_str(), |(f, _)| f.as_str());
            let missing = match dialect {
                Dialect::Sqlite => "sqlite",
                Dialect::Postgres => "postgres",
            };
            Err(source_err(
                present,
                format!(
                    "has no {missing} counterpart: add {stem}{kind}.{missing}.sql or a generic {stem}{kind}.sql",
                    stem = group.stem
                ),
            ))
        }
    }
}

/// Whether the up files of `group` that either dialect uses carry the contract marker; they
/// must agree. With `only`, the files the other dialect would use are not read.
fn contract_marked(group: &Group<'_>, only: Option<Dialect>) -> Result<bool, MigrateError> {
    let used = [
        (Dialect::Sqlite, &group.sqlite),
        (Dialect::Postgres, &group.postgres),
    ]
    .into_iter()
    .filter(|(dialect, _)| only.is_none_or(|o| o == *dialect))
    .filter_map(|(_, own)| own.as_ref().or(group.generic.as_ref()));
    let mut marked: Option<(&str, bool)> = None;
    for (file, text) in used {
        let this = has_contract_marker(text);
        match marked {
            None => marked = Some((file, this)),
            Some((other, was)) if was != this => {
                let (with, without) = if was {
                    (other, file.as_str())
                } else {
                    (file.as_str(), other)
                };
                return Err(source_err(
                    without,
                    format!("lacks the `{CONTRACT_MARKER}` first line that {with} carries; mark every up file of a contract revision, or none"),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(marked.is_some_and(|(_, m)| m))
}

fn ordered<'a>(a: &'a str, b: &'a str) -> (&'a str, &'a str) {
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

fn check_application_name(name: String) -> Result<String, MigrateError> {
    if name == CAIRN_SET {
        return Err(MigrateError::InvalidSet {
            set: name,
            reason: "the name `cairn` is reserved for cairn's own migration set; name the set after the application".into(),
        });
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(files: &[(&str, &str)]) -> Result<MigrationSet, MigrateError> {
        MigrationSet::from_files("app", files.iter().copied())
    }

    fn source_file(e: &MigrateError) -> &str {
        match e {
            MigrateError::Source { file, .. } => file,
            other => panic!("expected a Source error, got {other:?}"),
        }
    }

    #[test]
    fn files_become_a_chain_ordered_by_number() {
        let s = set(&[
            ("README.md", "not a migration"),
            ("10_orders.sql", "CREATE TABLE orders (id BIGINT);"),
            (
                "0002_users.sql",
                "\n-- users and their emails\n-- more\nCREATE TABLE users (id BIGINT);\nCREATE INDEX users_id ON users (id)",
            ),
            ("1_base.sql", "CREATE TABLE base (id BIGINT);"),
        ])
        .unwrap();
        let ids: Vec<&str> = s.revisions().iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["1_base", "0002_users", "10_orders"]);
        assert_eq!(s.revisions()[1].parent.as_deref(), Some("1_base"));
        assert_eq!(s.revisions()[1].description, "users and their emails");
        assert_eq!(s.revisions()[0].description, "1_base");
        assert_eq!(s.revisions()[1].up_sqlite.len(), 2);
        assert_eq!(s.revisions()[1].up_sqlite, s.revisions()[1].up_postgres);
        assert_eq!(s.name(), "app");
    }

    #[test]
    fn dialect_files_replace_the_generic_one() {
        let s = set(&[
            ("0001_a.sql", "CREATE TABLE a (id BIGINT);"),
            ("0001_a.postgres.sql", "CREATE TABLE a (id bigserial);"),
            ("0002_b.sqlite.sql", "CREATE TABLE b (id INTEGER);"),
            ("0002_b.postgres.sql", "CREATE TABLE b (id bigint);"),
        ])
        .unwrap();
        let a = &s.revisions()[0];
        assert_eq!(a.up_sqlite, ["CREATE TABLE a (id BIGINT)"]);
        assert_eq!(a.up_postgres, ["CREATE TABLE a (id bigserial)"]);
        assert_eq!(s.revisions()[1].id, "0002_b");
        assert_eq!(s.revisions()[1].up_sqlite, ["CREATE TABLE b (id INTEGER)"]);
    }

    /// A set with files specific to both engines is for both: a revision without SQL for one
    /// is refused, naming the file to add.
    #[test]
    fn a_revision_missing_a_dialect_is_refused_naming_the_file() {
        let e = set(&[
            ("0001_a.sqlite.sql", "CREATE TABLE a (id INTEGER);"),
            ("0001_a.postgres.sql", "CREATE TABLE a (id BIGINT);"),
            ("0002_b.sqlite.sql", "CREATE TABLE b (id INTEGER);"),
        ])
        .unwrap_err();
        assert_eq!(source_file(&e), "0002_b.sqlite.sql");
        assert!(e.to_string().contains("0002_b.postgres.sql"), "{e}");
        // One revision for each engine only: neither engine has every revision.
        let e = set(&[
            ("0001_a.sqlite.sql", "CREATE TABLE a (id INTEGER);"),
            ("0002_b.postgres.sql", "CREATE TABLE b (id BIGINT);"),
        ])
        .unwrap_err();
        assert!(matches!(e, MigrateError::Source { .. }), "{e}");
    }

    /// Issue 25: a set without a single `.postgres.sql` file whose per-engine revisions have a
    /// `.sqlite.sql` file is SQLite-only; nothing of it is kept for Postgres, and a Postgres
    /// store is refused naming the dialect and the revision.
    #[test]
    fn a_set_without_postgres_files_is_sqlite_only() {
        let files = [
            ("0001_a.sql", "CREATE TABLE a (id INTEGER PRIMARY KEY);"),
            ("0002_b.sqlite.sql", "CREATE TABLE b (id INTEGER) STRICT;"),
            ("0002_b.down.sqlite.sql", "DROP TABLE b;"),
        ];
        let s = set(&files).unwrap();
        assert_eq!(s.only(), Some(Dialect::Sqlite));
        assert!(s.supports(Dialect::Sqlite) && !s.supports(Dialect::Postgres));
        assert_eq!(s.head().up_sqlite, ["CREATE TABLE b (id INTEGER) STRICT"]);
        assert!(s.revisions().iter().all(|r| r.up_postgres.is_empty()));
        assert_eq!(s.down("0002_b", Dialect::Sqlite).unwrap(), ["DROP TABLE b"]);
        assert_eq!(s.down("0002_b", Dialect::Postgres), None);
        s.require(Dialect::Sqlite).unwrap();
        let e = s.require(Dialect::Postgres).unwrap_err();
        assert!(
            matches!(&e, MigrateError::UnsupportedDialect { dialect: Dialect::Postgres, supported: Dialect::Sqlite, revision: Some(r), .. } if r == "0002_b"),
            "{e:?}"
        );
        let line = e.to_string();
        for part in [
            "SQLite-only",
            "no Postgres SQL",
            "0002_b.postgres.sql",
            "a Postgres store",
        ] {
            assert!(line.contains(part), "{part:?} missing: {line}");
        }
        assert!(e.is_refusal());
        // Adding the Postgres files later makes it a set for both, and leaves every SQLite
        // store's lineage as it was (checksums are per dialect).
        let mut both = files.to_vec();
        both.push(("0002_b.postgres.sql", "CREATE TABLE b (id BIGINT);"));
        both.push(("0002_b.down.postgres.sql", "DROP TABLE b;"));
        let both = set(&both).unwrap();
        assert_eq!(both.only(), None);
        assert_eq!(both.lineage(Dialect::Sqlite), s.lineage(Dialect::Sqlite));
        // A set of generic files only is for both engines.
        assert_eq!(set(&files[..1]).unwrap().only(), None);
    }

    /// The mirror image: `.postgres.sql` files and no `.sqlite.sql` one make a Postgres-only
    /// set, refused on SQLite.
    #[test]
    fn a_set_without_sqlite_files_is_postgres_only() {
        let s = set(&[
            (
                "0001_a.postgres.sql",
                "CREATE TABLE a (id BIGINT GENERATED ALWAYS AS IDENTITY);",
            ),
            ("0002_b.sql", "CREATE TABLE b (id BIGINT);"),
        ])
        .unwrap();
        assert_eq!(s.only(), Some(Dialect::Postgres));
        assert!(s.revisions().iter().all(|r| r.up_sqlite.is_empty()));
        assert_eq!(s.head().up_postgres, ["CREATE TABLE b (id BIGINT)"]);
        let line = s.require(Dialect::Sqlite).unwrap_err().to_string();
        assert!(
            line.contains("Postgres-only") && line.contains("0001_a.sqlite.sql"),
            "{line}"
        );
    }

    /// In a single-engine set the contract marker is read from the files that engine uses only.
    #[test]
    fn a_single_engine_sets_contract_marker_is_its_engines() {
        let s = set(&[
            ("0001_a.sql", "CREATE TABLE a (id INTEGER, old TEXT);"),
            (
                "0002_b.sql",
                "-- cairn:contract\nALTER TABLE a DROP COLUMN old;",
            ),
            ("0003_c.sqlite.sql", "CREATE TABLE c (id INTEGER) STRICT;"),
        ])
        .unwrap();
        assert_eq!(s.only(), Some(Dialect::Sqlite));
        assert!(s.is_contract("0002_b") && !s.is_contract("0003_c"));
    }

    #[test]
    fn two_files_with_one_number_are_refused_naming_both() {
        let e = set(&[
            ("0001_a.sql", "CREATE TABLE a (id BIGINT);"),
            ("001_b.sql", "CREATE TABLE b (id BIGINT);"),
        ])
        .unwrap_err();
        let line = e.to_string();
        assert!(
            line.contains("0001_a.sql") && line.contains("001_b.sql"),
            "{line}"
        );
        assert!(matches!(e, MigrateError::Source { .. }));
    }

    #[test]
    fn down_files_become_the_revisions_down_sql() {
        let s = set(&[
            ("0001_a.sql", "CREATE TABLE a (id BIGINT);"),
            ("0002_b.sql", "CREATE TABLE b (id BIGINT);"),
            ("0002_b.down.sql", "DROP TABLE b;"),
            ("0002_b.down.postgres.sql", "DROP TABLE IF EXISTS b;"),
        ])
        .unwrap();
        assert_eq!(s.down("0002_b", Dialect::Sqlite).unwrap(), ["DROP TABLE b"]);
        assert_eq!(
            s.down("0002_b", Dialect::Postgres).unwrap(),
            ["DROP TABLE IF EXISTS b"]
        );
        assert_eq!(s.down("0001_a", Dialect::Sqlite), None);
        // The checksums are the up text's only: a down file added later strands no store.
        let without = set(&[
            ("0001_a.sql", "CREATE TABLE a (id BIGINT);"),
            ("0002_b.sql", "CREATE TABLE b (id BIGINT);"),
        ])
        .unwrap();
        assert_eq!(s.lineage(Dialect::Sqlite), without.lineage(Dialect::Sqlite));
    }

    #[test]
    fn down_files_bad_names_and_bad_contents_are_refused() {
        let base = set(&[
            ("0001_a.sql", "CREATE TABLE a (id BIGINT);"),
            ("0001_a.down.sql", "DROP TABLE a;"),
        ])
        .unwrap_err();
        assert_eq!(source_file(&base), "0001_a.down.sql");
        assert!(base.to_string().contains("base revision"), "{base}");
        let orphan = set(&[
            ("0001_a.sql", "CREATE TABLE a (id BIGINT);"),
            ("0002_b.down.sql", "DROP TABLE b;"),
        ])
        .unwrap_err();
        assert_eq!(source_file(&orphan), "0002_b.down.sql");
        let one_dialect = set(&[
            ("0001_a.sql", "CREATE TABLE a (id BIGINT);"),
            ("0002_b.sql", "CREATE TABLE b (id BIGINT);"),
            ("0002_b.down.sqlite.sql", "DROP TABLE b;"),
        ])
        .unwrap_err();
        assert!(
            one_dialect.to_string().contains("0002_b.down.postgres.sql"),
            "{one_dialect}"
        );
        for bad in [
            "users.sql",
            "0001.sql",
            "0001_.sql",
            "x0001_a.sql",
            "0001_a.b.sql",
        ] {
            let e = set(&[(bad, "SELECT 1;")]).unwrap_err();
            assert_eq!(source_file(&e), bad);
        }
        let e = set(&[("0001_a.sql", "-- nothing here\n")]).unwrap_err();
        assert!(e.to_string().contains("no SQL statement"), "{e}");
        let e = set(&[("0001_a.sql", "SELECT 'open;")]).unwrap_err();
        assert!(e.to_string().contains("line 1"), "{e}");
        let e =
            MigrationSet::from_files("app", [("0001_a.sql", &b"SELECT \xff;"[..])]).unwrap_err();
        assert!(e.to_string().contains("not UTF-8"), "{e}");
        let e = set(&[("0001_a.sql", "SELECT 1;"), ("0001_a.sql", "SELECT 2;")]).unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
    }

    #[test]
    fn a_no_transaction_marker_marks_its_files_dialect_and_holds_only_what_may_run_outside() {
        let s = set(&[
            ("0001_a.sql", "CREATE TABLE a (id BIGINT, name TEXT);"),
            (
                "0002_idx.postgres.sql",
                "-- cairn:no-transaction\n-- index a by name\nCREATE INDEX CONCURRENTLY a_name ON a (name);",
            ),
            (
                "0002_idx.sqlite.sql",
                "-- index a by name\nCREATE INDEX a_name ON a (name);",
            ),
            (
                "0003_both.postgres.sql",
                "-- cairn:contract\n-- cairn:no-transaction\n-- vacuum\nVACUUM;",
            ),
            (
                "0003_both.sqlite.sql",
                "-- cairn:no-transaction\n-- cairn:contract\n-- vacuum\nSELECT 1;",
            ),
        ])
        .unwrap();
        assert!(s.is_no_transaction("0002_idx", Dialect::Postgres));
        assert!(!s.is_no_transaction("0002_idx", Dialect::Sqlite));
        assert!(!s.is_no_transaction("0001_a", Dialect::Postgres));
        assert_eq!(s.revisions()[1].description, "index a by name");
        assert!(s.is_contract("0003_both"));
        assert!(s.is_no_transaction("0003_both", Dialect::Postgres));
        assert!(s.is_no_transaction("0003_both", Dialect::Sqlite));
        assert_eq!(s.head().description, "vacuum");
        // The marks survive `up_to`.
        assert!(s
            .up_to("0002_idx")
            .unwrap()
            .is_no_transaction("0002_idx", Dialect::Postgres));

        // Anything else in a marked revision is refused, naming the file and the statement.
        let e = set(&[
            ("0001_a.sql", "CREATE TABLE a (id BIGINT, name TEXT);"),
            (
                "0002_idx.sql",
                "-- cairn:no-transaction\nCREATE INDEX CONCURRENTLY a_name ON a (name);\nCREATE TABLE sneaky (id BIGINT);",
            ),
        ])
        .unwrap_err();
        assert_eq!(source_file(&e), "0002_idx.sql");
        assert!(e.to_string().contains("holds 2 statements"), "{e}");
        let e = set(&[
            ("0001_a.sql", "CREATE TABLE a (id BIGINT, name TEXT);"),
            (
                "0002_idx.sql",
                "-- cairn:no-transaction\nCREATE TABLE sneaky (id BIGINT);",
            ),
        ])
        .unwrap_err();
        let text = e.to_string();
        assert!(text.contains("CREATE TABLE sneaky"), "{text}");
        assert!(
            text.contains("CREATE [UNIQUE] INDEX CONCURRENTLY"),
            "{text}"
        );
        // What cannot run in a transaction needs the mark; VACUUM never runs on SQLite.
        let e = set(&[
            ("0001_a.sql", "CREATE TABLE a (id BIGINT, name TEXT);"),
            (
                "0002_idx.postgres.sql",
                "CREATE INDEX CONCURRENTLY a_name ON a (name);",
            ),
            ("0002_idx.sqlite.sql", "CREATE INDEX a_name ON a (name);"),
        ])
        .unwrap_err();
        assert_eq!(source_file(&e), "0002_idx.postgres.sql");
        assert!(e.to_string().contains("-- cairn:no-transaction"), "{e}");
        let e = set(&[("0001_a.sql", "-- cairn:no-transaction\nVACUUM;")]).unwrap_err();
        assert_eq!(source_file(&e), "0001_a.sql");
        assert!(e.to_string().contains(".postgres.sql"), "{e}");

        // A misspelt marker is refused, not taken for a comment.
        let e = set(&[("0001_a.sql", "-- cairn:no-transactions\nVACUUM;")]).unwrap_err();
        assert_eq!(source_file(&e), "0001_a.sql");
        assert!(e.to_string().contains("unknown marker"), "{e}");
        // A marker written almost right is refused, not taken for a comment.
        for near in [
            "--cairn:no-transaction\nVACUUM;",
            "-- CAIRN:NO-TRANSACTION\nVACUUM;",
            "/* cairn:no-transaction */\nVACUUM;",
            "-- index by name\n-- cairn:no-transaction\nVACUUM;",
            "\n-- cairn:no-transaction\nVACUUM;",
        ] {
            let e = set(&[("0001_a.postgres.sql", near)]).unwrap_err();
            assert!(
                e.to_string().contains("reads like a cairn marker"),
                "{near}: {e}"
            );
        }
        // A byte-order mark before the marker is no obstacle.
        let s = set(&[
            ("0001_a.sql", "CREATE TABLE a (id BIGINT, name TEXT);"),
            (
                "0002_i.postgres.sql",
                "\u{feff}-- cairn:no-transaction\nCREATE INDEX CONCURRENTLY i ON a (name);",
            ),
            ("0002_i.sqlite.sql", "\u{feff}CREATE INDEX i ON a (name);"),
        ])
        .unwrap();
        assert!(s.is_no_transaction("0002_i", Dialect::Postgres));
        assert_eq!(
            s.revisions()[1].up(Dialect::Sqlite)[0],
            "CREATE INDEX i ON a (name)"
        );
        // A comment that merely mentions cairn is no marker.
        set(&[(
            "0001_a.sql",
            "-- cairn: the first table\nCREATE TABLE a (id BIGINT);",
        )])
        .unwrap();
    }

    #[test]
    fn a_contract_marker_first_line_marks_the_revision() {
        let s = set(&[
            ("0001_a.sql", "CREATE TABLE a (id BIGINT, old TEXT);"),
            ("0002_b.sql", "ALTER TABLE a ADD COLUMN new TEXT;"),
            (
                "0003_drop_old.sql",
                "-- cairn:contract\n-- drop the old column\nALTER TABLE a DROP COLUMN old;",
            ),
        ])
        .unwrap();
        assert!(s.is_contract("0003_drop_old"));
        assert!(!s.is_contract("0002_b"));
        assert_eq!(s.head().description, "drop the old column");
        // A marker after another line is refused: taken for a comment, it would let a
        // contract revision through the fleet gate unmarked.
        let later = set(&[
            ("0001_a.sql", "CREATE TABLE a (id BIGINT);"),
            (
                "0002_b.sql",
                "-- hello\n-- cairn:contract\nCREATE TABLE b (id BIGINT);",
            ),
        ])
        .unwrap_err();
        assert_eq!(source_file(&later), "0002_b.sql");
        assert!(
            later.to_string().contains("reads like a cairn marker"),
            "{later}"
        );
        // Per-dialect files must agree; the base cannot be a contract.
        let e = set(&[
            ("0001_a.sql", "CREATE TABLE a (id BIGINT);"),
            ("0002_b.sqlite.sql", "-- cairn:contract\nDROP TABLE a;"),
            ("0002_b.postgres.sql", "DROP TABLE a;"),
        ])
        .unwrap_err();
        assert_eq!(source_file(&e), "0002_b.postgres.sql");
        let e = set(&[(
            "0001_a.sql",
            "-- cairn:contract\nCREATE TABLE a (id BIGINT);",
        )])
        .unwrap_err();
        assert!(e.to_string().contains("base revision"), "{e}");
        // The marker is a comment: not part of the checksum.
        let plain = set(&[
            ("0001_a.sql", "CREATE TABLE a (id BIGINT, old TEXT);"),
            ("0002_b.sql", "ALTER TABLE a ADD COLUMN new TEXT;"),
            ("0003_drop_old.sql", "ALTER TABLE a DROP COLUMN old;"),
        ])
        .unwrap();
        assert_eq!(s.lineage(Dialect::Sqlite), plain.lineage(Dialect::Sqlite));
    }

    #[test]
    fn the_cairn_name_and_empty_sets_are_refused() {
        let e = MigrationSet::from_files("cairn", [("0001_a.sql", "SELECT 1;")]).unwrap_err();
        assert!(matches!(e, MigrateError::InvalidSet { .. }), "{e}");
        assert!(e.to_string().contains("reserved"));
        let e = set(&[("README.md", "hello")]).unwrap_err();
        assert!(matches!(e, MigrateError::InvalidSet { .. }), "{e}");
        assert!(MigrationSet::application("cairn", crate::cairn_revisions()).is_err());
    }

    #[test]
    fn from_dir_reads_sql_files_and_ignores_the_rest() {
        let dir = std::env::temp_dir().join(cairn_core::scratch_name("cairn_migrate_src"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("0001_base.sql"), "CREATE TABLE t (id BIGINT);").unwrap();
        std::fs::write(dir.join("0002_more.sql"), "ALTER TABLE t ADD COLUMN n TEXT").unwrap();
        std::fs::write(dir.join("README.md"), "docs").unwrap();
        std::fs::create_dir(dir.join("old.sql")).unwrap();
        let loaded = MigrationSet::from_dir("app", &dir);
        let missing = MigrationSet::from_dir("app", dir.join("missing"));
        std::fs::remove_dir_all(&dir).unwrap();
        let s = loaded.unwrap();
        assert_eq!(s.head().id, "0002_more");
        assert_eq!(s.head().up_postgres, ["ALTER TABLE t ADD COLUMN n TEXT"]);
        assert!(matches!(
            missing,
            Err(MigrateError::Store(cairn_core::Error::Io { .. }))
        ));
    }
}
