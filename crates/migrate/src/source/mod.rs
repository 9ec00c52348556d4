//! Loading an application's migration set from SQL files (a directory, or files embedded at
//! compile time with [`embed_migrations!`](crate::embed_migrations)).
//!
//! File names follow sqlx: `NNNN_description.sql`, one revision per number, applied in numeric
//! order. `NNNN_description.sqlite.sql` / `NNNN_description.postgres.sql` replace the generic
//! file for one dialect. The revision id is the name without the dialect suffix and `.sql`
//! (`0001_users`); each revision's parent is the one before it; its description is the text of
//! the file's first `--` comment line when the file starts with one, else the id.
//!
//! A set for one engine only needs no files for the other: a set none of whose files is a
//! `.postgres.sql` one, with a revision that has only a `.sqlite.sql` file, is **SQLite-only**
//! (and the other way round: **Postgres-only**). Nothing of it runs on the other engine: the
//! runner refuses such a store with [`MigrateError::UnsupportedDialect`] naming the missing
//! dialect and revision, before it reads or writes anything, and so do `cairn migrate` and
//! `migrate check --backend postgres`. A set with files specific to both engines is for both,
//! and each of its revisions needs SQL for each (a missing file is an error naming it). A set
//! of generic files only can be declared single-engine with [`MigrationSet::only_on`].
//!
//! `NNNN_description.down.sql` (or `.down.sqlite.sql` / `.down.postgres.sql`) is the revision's
//! compensating down SQL: it is stored in the store when the revision is applied, so that
//! `cairn migrate down --to REV` run by any build — one that never had the file included — can
//! undo it ([`crate::Runner::down`]). The base revision carries none. Down SQL is not part of
//! the revision's checksum.
//!
//! An up file whose first line is `-- cairn:contract` marks its revision a **contract**
//! revision ([`MigrationSet::with_contract`]): it drops or rewrites what an expand revision made
//! obsolete, and the runner applies it only when no live build in the store's fleet registry
//! lacks it. With per-dialect files, every up file of the revision carries the line or none
//! does. The marker is a comment, so it is not part of the checksum.
//!
//! An up file with a leading line `-- cairn:no-transaction` (before or after the contract
//! marker) marks its revision **no-transaction** in the file's dialect
//! ([`MigrationSet::with_no_transaction`]): on Postgres it runs outside the upgrade transaction,
//! one statement at a time, and may hold only the statements that need that (`CREATE INDEX
//! CONCURRENTLY` and a few more, [`crate::outside`]); on SQLite it runs as any other. A leading
//! `-- cairn:` line cairn does not know is refused rather than taken for a comment.
//!
//! Leading lines `-- cairn:accept-lock NAME` (one name each) in a revision's Postgres or
//! generic up file accept the lock-check finding NAME for that revision
//! ([`MigrationSet::with_accepted_lock`], [`crate::additivity::LockRule::name`]); an unknown
//! name is refused.
//!
//! The file names are parsed in `file_name.rs`, a file's text read in `contents.rs`, and the
//! set assembled from its files in `load.rs`; this file only re-exports.
//!
//! [`MigrateError::UnsupportedDialect`]: crate::MigrateError::UnsupportedDialect
//! [`MigrationSet::only_on`]: crate::MigrationSet::only_on
//! [`MigrationSet::with_contract`]: crate::MigrationSet::with_contract
//! [`MigrationSet::with_no_transaction`]: crate::MigrationSet::with_no_transaction
//! [`MigrationSet::with_accepted_lock`]: crate::MigrationSet::with_accepted_lock

mod contents;
mod file_name;
mod load;

pub use contents::{ACCEPT_LOCK_MARKER, CONTRACT_MARKER, NO_TRANSACTION_MARKER};
