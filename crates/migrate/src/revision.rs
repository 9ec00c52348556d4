//! Revisions, migration sets and their checksums.

use std::collections::{BTreeMap, BTreeSet};

use cairn_core::schema::Dialect;

use crate::checksum::{Checksum, ChecksumForm, LineageEntry};
use crate::dialect::{dialect_index, other_dialect};
use crate::error::MigrateError;
use crate::identity::{CAIRN_SET, COMBINED_CHECKSUM_REVISIONS};

/// One revision of a migration set: an id, its parent and the DDL that moves a store from the
/// parent to it, per backend.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Revision {
    /// Unique id within the set (e.g. `20261129_01_epoch_log`).
    pub id: String,
    /// The revision this one follows; `None` only for the set's base revision.
    pub parent: Option<String>,
    /// Statements for SQLite, run in order inside the upgrade transaction.
    pub up_sqlite: Vec<String>,
    /// Statements for PostgreSQL, run in order inside the upgrade transaction.
    pub up_postgres: Vec<String>,
    /// What the revision does, for `migrate history`.
    pub description: String,
}

impl Revision {
    /// The statements for `dialect`.
    pub fn up(&self, dialect: Dialect) -> &[String] {
        match dialect {
            Dialect::Sqlite => &self.up_sqlite,
            Dialect::Postgres => &self.up_postgres,
        }
    }

    /// The **combined** checksum (format v1): BLAKE3 over the revision's id, parent and both
    /// dialects' statements (length-prefixed). Two revisions with one id and different content
    /// have different checksums, so a store migrated by one is never mistaken for the other.
    ///
    /// Only the revisions released with this form keep it (cairn's `0001_epoch_log` and
    /// `0002_spool`, see [`ChecksumForm`]): stores carry it in their lineage and older builds
    /// compare it. Its text is fixed and shipped with the build, so it cannot drift.
    pub fn combined_checksum(&self) -> Checksum {
        let mut h = blake3::Hasher::new_derive_key("cairn 2026-11 migration revision v1");
        let mut put = |b: &[u8]| {
            h.update(&(b.len() as u64).to_le_bytes());
            h.update(b);
        };
        put(self.id.as_bytes());
        put(self.parent.as_deref().unwrap_or("").as_bytes());
        put(&[u8::from(self.parent.is_some())]);
        for list in [&self.up_sqlite, &self.up_postgres] {
            put(&(list.len() as u64).to_le_bytes());
            for s in list {
                put(s.as_bytes());
            }
        }
        Checksum(*h.finalize().as_bytes())
    }

    /// The **per-dialect** checksum (format v2): BLAKE3 over the revision's id, parent, the
    /// dialect's name and that dialect's statements only (length-prefixed). A change in one
    /// dialect's text leaves the other dialect's checksum, and so its stores, alone.
    pub fn dialect_checksum(&self, dialect: Dialect) -> Checksum {
        let mut h =
            blake3::Hasher::new_derive_key("cairn 2026-11 migration revision per dialect v2");
        let mut put = |b: &[u8]| {
            h.update(&(b.len() as u64).to_le_bytes());
            h.update(b);
        };
        put(self.id.as_bytes());
        put(self.parent.as_deref().unwrap_or("").as_bytes());
        put(&[u8::from(self.parent.is_some())]);
        put(match dialect {
            Dialect::Sqlite => b"sqlite",
            Dialect::Postgres => b"postgres",
        });
        let list = self.up(dialect);
        put(&(list.len() as u64).to_le_bytes());
        for s in list {
            put(s.as_bytes());
        }
        Checksum(*h.finalize().as_bytes())
    }
}

/// A named, ordered chain of revisions: what one build knows, base → head.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct MigrationSet {
    name: String,
    revisions: Vec<Revision>,
    /// Compensating down SQL per revision id (`[sqlite, postgres]`), stored in the store when
    /// the revision is applied. It is not part of any checksum: adding or fixing a down file
    /// strands no store and no older build.
    down: BTreeMap<String, [Vec<String>; 2]>,
    /// Revisions marked *contract* ([`MigrationSet::with_contract`]). Not part of any checksum
    /// either: the marker gates when a revision may be applied, not what it is.
    contract: BTreeSet<String>,
    /// Revisions marked *no-transaction* per dialect (`[sqlite, postgres]`,
    /// [`MigrationSet::with_no_transaction`]). Not part of any checksum: the statements are.
    no_transaction: BTreeMap<String, [bool; 2]>,
    /// Lock-check findings accepted per revision, by rule name
    /// ([`MigrationSet::with_accepted_lock`]). Not part of any checksum.
    accepted_locks: BTreeMap<String, BTreeSet<String>>,
    /// The one engine the set is for ([`MigrationSet::only_on`]); `None`: both.
    only: Option<Dialect>,
    /// With `only`: the first revision that had no SQL for the other engine, named when a store
    /// of that engine is refused.
    lacking: Option<String>,
}

impl MigrationSet {
    /// Validates and builds a set: non-empty name, at least one revision, the first without a
    /// parent, each later one naming its predecessor, ids unique.
    ///
    /// # Errors
    /// [`MigrateError::InvalidSet`] naming the first problem.
    pub fn new(name: impl Into<String>, revisions: Vec<Revision>) -> Result<Self, MigrateError> {
        let name = name.into();
        let invalid = |reason: String| MigrateError::InvalidSet {
            set: name.clone(),
            reason,
        };
        if name.is_empty() || name.len() > 128 {
            return Err(invalid("the set name must be 1..=128 bytes".into()));
        }
        let Some(first) = revisions.first() else {
            return Err(invalid("a set needs at least one revision".into()));
        };
        if first.parent.is_some() {
            return Err(invalid(format!(
                "base revision {} must not have a parent",
                first.id
            )));
        }
        for pair in revisions.windows(2) {
            if pair[1].parent.as_deref() != Some(pair[0].id.as_str()) {
                return Err(invalid(format!(
                    "revision {} must name {} as its parent",
                    pair[1].id, pair[0].id
                )));
            }
        }
        let mut ids: Vec<&str> = revisions.iter().map(|r| r.id.as_str()).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) || ids.iter().any(|i| i.is_empty()) {
            return Err(invalid("revision ids must be non-empty and unique".into()));
        }
        Ok(Self {
            name,
            revisions,
            down: BTreeMap::new(),
            contract: BTreeSet::new(),
            no_transaction: BTreeMap::new(),
            accepted_locks: BTreeMap::new(),
            only: None,
            lacking: None,
        })
    }

    /// Declares the set for `dialect` only: a SQLite-only or a Postgres-only set. The runner
    /// refuses a store of the other engine with [`MigrateError::UnsupportedDialect`] before it
    /// reads or writes anything, and the other engine's statements (up and down) are dropped:
    /// none is ever run. Checksums are per dialect, so the declaration leaves the lineage a
    /// store of `dialect` records unchanged.
    ///
    /// [`MigrationSet::from_files`] (and so `from_dir` and `from_embedded`) declares it itself
    /// for a set with no file at all for one engine and a revision without SQL for it (say,
    /// every per-engine revision has a `.sqlite.sql` file and none a `.postgres.sql`).
    ///
    /// # Errors
    /// [`MigrateError::InvalidSet`] for cairn's own set, which runs on both engines.
    pub fn only_on(self, dialect: Dialect) -> Result<Self, MigrateError> {
        let lacking = self
            .revisions
            .iter()
            .find(|r| r.up(other_dialect(dialect)).is_empty())
            .map(|r| r.id.clone());
        self.declare_only(dialect, lacking)
    }

    /// [`MigrationSet::only_on`] with the first revision that has no SQL for the other engine
    /// given (`from_files` knows it from the files).
    pub(crate) fn declare_only(
        mut self,
        dialect: Dialect,
        lacking: Option<String>,
    ) -> Result<Self, MigrateError> {
        if self.name == CAIRN_SET {
            return Err(MigrateError::InvalidSet {
                set: self.name,
                reason: "cairn's own set runs on both engines".into(),
            });
        }
        let other = other_dialect(dialect);
        self.only = Some(dialect);
        self.lacking = lacking;
        for revision in &mut self.revisions {
            match other {
                Dialect::Sqlite => revision.up_sqlite.clear(),
                Dialect::Postgres => revision.up_postgres.clear(),
            }
        }
        for down in self.down.values_mut() {
            down[dialect_index(other)].clear();
        }
        Ok(self)
    }

    /// The one engine the set is declared for ([`MigrationSet::only_on`]); `None` when it
    /// runs on both.
    pub fn only(&self) -> Option<Dialect> {
        self.only
    }

    /// Whether the set can migrate a store of `dialect`.
    pub fn supports(&self, dialect: Dialect) -> bool {
        self.only.is_none_or(|only| only == dialect)
    }

    /// Refuses a store of an engine the set is not for.
    ///
    /// # Errors
    /// [`MigrateError::UnsupportedDialect`] naming the missing dialect, and the first
    /// revision without SQL for it (none when the set was declared single-engine while every
    /// revision had SQL for both).
    pub fn require(&self, dialect: Dialect) -> Result<(), MigrateError> {
        match self.only {
            Some(only) if only != dialect => Err(MigrateError::UnsupportedDialect {
                set: self.name.clone(),
                dialect,
                supported: only,
                revision: self.lacking.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// The set's name (its stamp and lineage are stored under it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The chain, base first.
    pub fn revisions(&self) -> &[Revision] {
        &self.revisions
    }

    /// The base revision.
    pub fn base(&self) -> &Revision {
        &self.revisions[0]
    }

    /// The head revision.
    pub fn head(&self) -> &Revision {
        &self.revisions[self.revisions.len() - 1]
    }

    /// Attaches compensating down SQL to revision `revision`: the statements that undo it on
    /// each dialect, run newest first by [`crate::Runner::down`] from the copy stored in the
    /// store when the revision was applied (so a build that never had them can run them).
    ///
    /// # Errors
    /// [`MigrateError::InvalidSet`] for cairn's own set (its revisions carry no down SQL), a
    /// revision not in the set, the base revision (a store is never rolled back past it), or
    /// a dialect without statements.
    pub fn with_down(
        mut self,
        revision: &str,
        sqlite: Vec<String>,
        postgres: Vec<String>,
    ) -> Result<Self, MigrateError> {
        let invalid = |reason: String| MigrateError::InvalidSet {
            set: self.name.clone(),
            reason,
        };
        if self.name == CAIRN_SET {
            return Err(invalid("cairn's own revisions carry no down SQL".into()));
        }
        match self.position(revision) {
            None => {
                return Err(invalid(format!(
                    "down SQL for {revision}, which is not a revision of the set"
                )))
            }
            Some(0) => {
                return Err(invalid(format!(
                    "down SQL for the base revision {revision}: a store is never rolled back past its base; remove it"
                )))
            }
            Some(_) => {}
        }
        let mut down = [sqlite, postgres];
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            let statements = &mut down[dialect_index(dialect)];
            if !self.supports(dialect) {
                statements.clear();
            } else if statements.is_empty() {
                return Err(invalid(match self.only {
                    None => format!("down SQL for {revision} needs statements for both dialects"),
                    Some(_) => format!("down SQL for {revision} has no statement"),
                }));
            }
        }
        self.down.insert(revision.to_owned(), down);
        Ok(self)
    }

    /// The down SQL this build carries for `revision` on `dialect`, if any (none on an engine
    /// the set is not for).
    pub fn down(&self, revision: &str, dialect: Dialect) -> Option<&[String]> {
        self.down
            .get(revision)
            .map(|down| down[dialect_index(dialect)].as_slice())
            .filter(|_| self.supports(dialect))
    }

    /// Marks revision `revision` as a **contract** revision: one that drops or rewrites what
    /// an expand revision made obsolete, so builds that predate it break once it is applied.
    /// The runner applies it only when no live build in the store's fleet registry other than
    /// the caller lacks it (see [`crate::fleet`]), unless forced
    /// ([`crate::Runner::force_contract`]). In SQL files the marker is a first line
    /// `-- cairn:contract` in the revision's up file(s). The mark is not part of the checksum.
    ///
    /// # Errors
    /// [`MigrateError::InvalidSet`] for a revision not in the set or the base revision (a
    /// store's first revision never breaks a build that has the set).
    pub fn with_contract(mut self, revision: &str) -> Result<Self, MigrateError> {
        match self.position(revision) {
            None => Err(MigrateError::InvalidSet {
                set: self.name.clone(),
                reason: format!("contract mark on {revision}, which is not a revision of the set"),
            }),
            Some(0) => Err(MigrateError::InvalidSet {
                set: self.name.clone(),
                reason: format!(
                    "contract mark on the base revision {revision}: only a later revision can contract what an earlier one expanded"
                ),
            }),
            Some(_) => {
                self.contract.insert(revision.to_owned());
                Ok(self)
            }
        }
    }

    /// The set up to and including revision `revision` (its down SQL and contract marks kept):
    /// what a build applies when it stops before a later revision.
    ///
    /// # Errors
    /// [`MigrateError::InvalidSet`] for a revision not in the set.
    pub fn up_to(&self, revision: &str) -> Result<Self, MigrateError> {
        let Some(at) = self.position(revision) else {
            return Err(MigrateError::InvalidSet {
                set: self.name.clone(),
                reason: format!("{revision} is not a revision of the set"),
            });
        };
        let revisions = self.revisions[..=at].to_vec();
        let keep = |id: &String| revisions.iter().any(|r| &r.id == id);
        Ok(Self {
            name: self.name.clone(),
            down: self
                .down
                .iter()
                .filter(|(id, _)| keep(id))
                .map(|(id, d)| (id.clone(), d.clone()))
                .collect(),
            contract: self
                .contract
                .iter()
                .filter(|id| keep(id))
                .cloned()
                .collect(),
            no_transaction: self
                .no_transaction
                .iter()
                .filter(|(id, _)| keep(id))
                .map(|(id, d)| (id.clone(), *d))
                .collect(),
            accepted_locks: self
                .accepted_locks
                .iter()
                .filter(|(id, _)| keep(id))
                .map(|(id, names)| (id.clone(), names.clone()))
                .collect(),
            only: self.only,
            lacking: self
                .lacking
                .clone()
                .filter(|id| revisions.iter().any(|r| &r.id == id)),
            revisions,
        })
    }

    /// Whether revision `revision` is marked contract.
    pub fn is_contract(&self, revision: &str) -> bool {
        self.contract.contains(revision)
    }

    /// Marks revision `revision` as **no-transaction** in `dialect`: on Postgres the runner
    /// commits what the upgrade applied before it (with the stamp at its parent), runs its
    /// statements one at a time in autocommit under the migration lock, and records its stamp
    /// and lineage only once every one succeeded. Only the statements Postgres refuses (or
    /// cannot use) inside a transaction may be in it ([`crate::outside`]). On SQLite the mark is
    /// accepted and the revision runs in the upgrade transaction as any other. In SQL files
    /// the marker is a leading line `-- cairn:no-transaction` in the revision's file for that
    /// dialect (or its generic file). The mark is not part of the checksum.
    ///
    /// # Errors
    /// [`MigrateError::InvalidSet`] for a revision not in the set, or a Postgres statement of
    /// it that may not run outside a transaction (named, with what may).
    pub fn with_no_transaction(
        mut self,
        revision: &str,
        dialect: Dialect,
    ) -> Result<Self, MigrateError> {
        let invalid = |reason: String| MigrateError::InvalidSet {
            set: self.name.clone(),
            reason,
        };
        let Some(at) = self.position(revision) else {
            return Err(invalid(format!(
                "no-transaction mark on {revision}, which is not a revision of the set"
            )));
        };
        if dialect == Dialect::Postgres {
            crate::outside::check_outside_revision(self.revisions[at].up(dialect)).map_err(
                |why| {
                    invalid(format!(
                        "revision {revision} is marked no-transaction: {why}"
                    ))
                },
            )?;
        }
        self.no_transaction.entry(revision.to_owned()).or_default()[dialect_index(dialect)] = true;
        Ok(self)
    }

    /// Whether revision `revision` is marked no-transaction in `dialect`.
    pub fn is_no_transaction(&self, revision: &str, dialect: Dialect) -> bool {
        self.no_transaction
            .get(revision)
            .is_some_and(|d| d[dialect_index(dialect)])
    }

    /// Accepts lock-check finding `rule` (a [`crate::additivity::LockRule`] name) for revision
    /// `revision`: `cairn migrate check` still lists it, marked accepted, and does not fail on
    /// it. In SQL files: a leading line `-- cairn:accept-lock NAME` in the revision's up file.
    ///
    /// # Errors
    /// [`MigrateError::InvalidSet`] for a revision not in the set or an unknown rule name.
    pub fn with_accepted_lock(mut self, revision: &str, rule: &str) -> Result<Self, MigrateError> {
        let reason = if self.position(revision).is_none() {
            format!("accept-lock mark on {revision}, which is not a revision of the set")
        } else if crate::additivity::LockRule::from_name(rule).is_none() {
            format!(
                "accept-lock mark on {revision} names `{}`, which is no lock-check finding",
                crate::text::escape_control(rule)
            )
        } else {
            let names = self.accepted_locks.entry(revision.to_owned()).or_default();
            names.insert(rule.to_owned());
            return Ok(self);
        };
        Err(MigrateError::InvalidSet {
            set: self.name.clone(),
            reason,
        })
    }

    /// The lock-check findings revision `revision` accepts, by rule name.
    pub fn accepted_locks(&self, revision: &str) -> BTreeSet<String> {
        self.accepted_locks
            .get(revision)
            .cloned()
            .unwrap_or_default()
    }

    /// Position of `id` in the chain.
    pub fn position(&self, id: &str) -> Option<usize> {
        self.revisions.iter().position(|r| r.id == id)
    }

    /// The form of the checksum of the revision at `index` (see [`ChecksumForm`]): combined
    /// for the revisions of cairn's own set released with it, per dialect for every other.
    ///
    /// # Panics
    /// When `index` is out of the chain.
    pub fn checksum_form(&self, index: usize) -> ChecksumForm {
        let id = self.revisions[index].id.as_str();
        if self.name == CAIRN_SET && COMBINED_CHECKSUM_REVISIONS.contains(&id) {
            ChecksumForm::Combined
        } else {
            ChecksumForm::PerDialect
        }
    }

    /// The checksum a store of `dialect` records for the revision at `index`.
    ///
    /// # Panics
    /// When `index` is out of the chain.
    pub fn checksum(&self, index: usize, dialect: Dialect) -> Checksum {
        let rev = &self.revisions[index];
        match self.checksum_form(index) {
            ChecksumForm::Combined => rev.combined_checksum(),
            ChecksumForm::PerDialect => rev.dialect_checksum(dialect),
        }
    }

    /// This build's lineage as a store of `dialect` records it: every revision of the chain
    /// with its checksum.
    pub fn lineage(&self, dialect: Dialect) -> Vec<LineageEntry> {
        (0..self.revisions.len())
            .map(|i| LineageEntry {
                revision: self.revisions[i].id.clone(),
                checksum: self.checksum(i, dialect),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Revision {
        Revision {
            id: "0001_items".into(),
            parent: None,
            up_sqlite: vec!["CREATE TABLE items (id INTEGER PRIMARY KEY)".into()],
            up_postgres: vec!["CREATE TABLE items (id bigint PRIMARY KEY)".into()],
            description: "items".into(),
        }
    }

    /// The per-dialect formula is pinned like the combined one (cairn's set pins that): every
    /// application revision's lineage entry is computed with it.
    #[test]
    fn the_per_dialect_checksum_is_pinned() {
        let r = sample();
        assert_eq!(
            [Dialect::Sqlite, Dialect::Postgres].map(|d| r.dialect_checksum(d).to_hex()),
            [
                "b9f0c788a6e707f48cc32c80748aab24af608feb7c6a847b1031fb8b4457c529",
                "b32e7f2aed6f09ad1d2d0321ced74bcc66fd55997e8e206db625ca3a40230a51",
            ]
        );
    }

    /// Issue 9 item 2: each dialect's checksum covers that dialect's text only; the combined
    /// one covers both.
    #[test]
    fn each_dialects_checksum_is_independent() {
        let r = sample();
        let mut pg = r.clone();
        pg.up_postgres[0].push_str(" -- now with a comment");
        assert_eq!(
            r.dialect_checksum(Dialect::Sqlite),
            pg.dialect_checksum(Dialect::Sqlite)
        );
        assert_ne!(
            r.dialect_checksum(Dialect::Postgres),
            pg.dialect_checksum(Dialect::Postgres)
        );
        assert_ne!(r.combined_checksum(), pg.combined_checksum());
        let mut renamed = r.clone();
        renamed.id = "0001_things".into();
        assert_ne!(
            r.dialect_checksum(Dialect::Sqlite),
            renamed.dialect_checksum(Dialect::Sqlite)
        );
        // The same text under the other dialect's name is another checksum.
        let mut same = r.clone();
        same.up_postgres = same.up_sqlite.clone();
        assert_ne!(
            same.dialect_checksum(Dialect::Sqlite),
            same.dialect_checksum(Dialect::Postgres)
        );
    }

    /// `up_to` keeps the chain, down SQL and contract marks up to the revision, and nothing
    /// after it.
    #[test]
    fn up_to_keeps_what_comes_before() {
        let mut b = sample();
        b.id = "0002_b".into();
        b.parent = Some("0001_items".into());
        let mut c = b.clone();
        c.id = "0003_c".into();
        c.parent = Some("0002_b".into());
        let set = MigrationSet::new("app", vec![sample(), b, c])
            .unwrap()
            .with_down("0002_b", vec!["x".into()], vec!["x".into()])
            .unwrap()
            .with_down("0003_c", vec!["y".into()], vec!["y".into()])
            .unwrap()
            .with_contract("0003_c")
            .unwrap();
        let before = set.up_to("0002_b").unwrap();
        assert_eq!(before.head().id, "0002_b");
        assert_eq!(before.down("0002_b", Dialect::Sqlite).unwrap(), ["x"]);
        assert_eq!(before.down("0003_c", Dialect::Sqlite), None);
        assert!(!before.is_contract("0003_c"));
        assert!(set.is_contract("0003_c"));
        assert_eq!(
            before.lineage(Dialect::Sqlite),
            set.lineage(Dialect::Sqlite)[..2]
        );
        assert!(set.up_to("nope").is_err());
        assert!(set.clone().with_contract("0001_items").is_err());
    }

    /// `only_on` drops the other engine's SQL, keeps the declared engine's lineage, survives
    /// `up_to`, asks down SQL for the declared engine only, and is refused for cairn's set.
    #[test]
    fn a_set_declared_for_one_engine() {
        let mut b = sample();
        b.id = "0002_b".into();
        b.parent = Some("0001_items".into());
        let both = MigrationSet::new("app", vec![sample(), b]).unwrap();
        let only = both.clone().only_on(Dialect::Postgres).unwrap();
        assert_eq!(only.only(), Some(Dialect::Postgres));
        assert_eq!(
            only.lineage(Dialect::Postgres),
            both.lineage(Dialect::Postgres)
        );
        assert!(only.revisions().iter().all(|r| r.up_sqlite.is_empty()));
        // Declared while every revision had SQL for both: no revision to name.
        let e = only.require(Dialect::Sqlite).unwrap_err();
        assert!(
            matches!(&e, MigrateError::UnsupportedDialect { revision: None, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("declared Postgres-only"), "{e}");
        assert_eq!(
            only.up_to("0001_items").unwrap().only(),
            Some(Dialect::Postgres)
        );
        let downed = only
            .clone()
            .with_down("0002_b", Vec::new(), vec!["DROP TABLE b".into()])
            .unwrap();
        assert_eq!(
            downed.down("0002_b", Dialect::Postgres).unwrap(),
            ["DROP TABLE b"]
        );
        assert_eq!(downed.down("0002_b", Dialect::Sqlite), None);
        assert!(only
            .with_down("0002_b", vec!["x".into()], Vec::new())
            .is_err());
        assert!(both
            .with_down("0002_b", Vec::new(), vec!["x".into()])
            .is_err());
        let cairn = MigrationSet::new(CAIRN_SET, vec![sample()]).unwrap();
        assert!(cairn.only_on(Dialect::Sqlite).is_err());
    }

    /// Application sets are per dialect from their first revision on.
    #[test]
    fn application_sets_are_checksummed_per_dialect() {
        let set = MigrationSet::new("inventory", vec![sample()]).unwrap();
        assert_eq!(set.checksum_form(0), ChecksumForm::PerDialect);
        assert_eq!(
            set.lineage(Dialect::Postgres)[0].checksum,
            sample().dialect_checksum(Dialect::Postgres)
        );
    }
}
