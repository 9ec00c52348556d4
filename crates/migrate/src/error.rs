//! Errors of the migration runner.

use cairn_core::schema::Dialect;

use crate::dialect::dialect_name;
use crate::refusal::Refusal;

/// What opening a store through the runner can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MigrateError {
    /// This build must not use the store; nothing was changed.
    #[error("migration set {set}: {refusal}")]
    Refused {
        /// The migration set.
        set: String,
        /// Why.
        refusal: Refusal,
    },
    /// The migration set itself is malformed (a bug in the build).
    #[error("migration set {set} is invalid: {reason}")]
    InvalidSet {
        /// The set.
        set: String,
        /// The first problem found.
        reason: String,
    },
    /// A migration file of an application's set cannot be used (its name, its encoding, its
    /// SQL, or its place in the set); nothing was applied.
    #[error("migration file {file}: {reason}")]
    Source {
        /// The file's name.
        file: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// The set is for one engine only ([`crate::MigrationSet::only_on`]) and the store is of
    /// the other; nothing was read or changed.
    #[error("{}", unsupported_text(.set, *.dialect, *.supported, .revision.as_deref()))]
    UnsupportedDialect {
        /// The set.
        set: String,
        /// The store's engine, which the set has no SQL for.
        dialect: Dialect,
        /// The one engine the set is for.
        supported: Dialect,
        /// The first revision without SQL for `dialect` (none when the set was declared
        /// single-engine while every revision had SQL for both).
        revision: Option<String>,
    },
    /// Another process held the migration lock past the timeout; nothing was changed.
    #[error("timed out after {waited_ms} ms waiting for the migration lock; another process is migrating, retry")]
    LockTimeout {
        /// How long the runner waited.
        waited_ms: u64,
    },
    /// The stored stamp or lineage is unreadable.
    #[error("migration bookkeeping is corrupt: {detail}; run `cairn doctor`")]
    Corrupt {
        /// What was found.
        detail: String,
    },
    /// A statement of revision `revision` failed; the upgrade was rolled back. The store error
    /// is the [`source`](std::error::Error::source) ([`MigrateError::report`] prints both).
    #[error("revision {revision} failed and the upgrade was rolled back")]
    RevisionFailed {
        /// The revision.
        revision: String,
        /// The store error.
        #[source]
        source: cairn_core::Error,
    },
    /// A statement of revision `revision` failed after the upgrade had committed part of its
    /// work: a no-transaction revision ([`crate::MigrationSet::with_no_transaction`]) commits
    /// what ran before it, and itself runs outside any transaction. The store stays at `stamp`
    /// (`None`: no revision of the set) with its lineage; what ran after that commit was
    /// rolled back, except a no-transaction revision's own statements that completed.
    #[error("revision {revision} failed; the store stays at {} (no-transaction revisions commit what ran before them), so fix the cause and run the upgrade again: an interrupted `CREATE INDEX CONCURRENTLY` left behind is dropped and built again", .stamp.as_deref().unwrap_or("no revision"))]
    RevisionFailedPartly {
        /// The revision.
        revision: String,
        /// The stamp the store stays at.
        stamp: Option<String>,
        /// The store error.
        #[source]
        source: cairn_core::Error,
    },
    /// A baseline found the store's schema other than what the set's revision makes; nothing
    /// was written.
    #[error("migration set {set}: the store's schema is not what revision {revision} makes, so it cannot be baselined there ({}); nothing was changed", .differences.join("; "))]
    BaselineMismatch {
        /// The set.
        set: String,
        /// The revision asked for.
        revision: String,
        /// Each difference, one line.
        differences: Vec<String>,
    },
    /// A baseline was asked of a store that already has a stamp of the set; nothing was
    /// written.
    #[error("migration set {set}: the store is already stamped at {} — a baseline adopts a store the set never ran on; use `cairn migrate status` and `up`", crate::text::escape_control(.stamp))]
    BaselineRefused {
        /// The set.
        set: String,
        /// The store's stamp.
        stamp: String,
    },
    /// `down` would have to undo revision `revision`, which has no stored down SQL (it was
    /// applied without a `*.down.sql` file, or by a build that predates stored down SQL);
    /// nothing was changed.
    #[error("migration set {set}: cannot roll back past revision {revision}: it has no stored down SQL; choose a later target revision (`to` in `Migrations::down`, `--to` in `cairn migrate down`); nothing was changed")]
    NoDownSql {
        /// The set.
        set: String,
        /// The revision without down SQL (the newest such one on the way down).
        revision: String,
    },
    /// `down --to` names a revision the store cannot be rolled back to; nothing was changed.
    #[error("migration set {set}: cannot roll back: {reason} (nothing was changed)")]
    DownRefused {
        /// The set.
        set: String,
        /// Why, and what to do.
        reason: String,
    },
    /// A stored down statement of revision `revision` failed; the down was rolled back. The
    /// store error is the [`source`](std::error::Error::source) ([`MigrateError::report`]
    /// prints both).
    #[error("the down SQL of revision {revision} failed and the down was rolled back (nothing was changed)")]
    DownFailed {
        /// The revision being undone.
        revision: String,
        /// The store error.
        #[source]
        source: cairn_core::Error,
    },
    /// A contract revision was not applied: live builds in the store's fleet registry lack it
    /// and would break; nothing was changed.
    #[error("migration set {set}: contract revision {revision} not applied: live builds lack it and would break: {}; stop or upgrade them, wait for their entries to expire, or force it: `StoreBuilder::force_contract(true)` (`OpenOptions::force_contract`) in a service, `cairn migrate up --force` from the command line (nothing was changed)", .blockers.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    ContractRefused {
        /// The set.
        set: String,
        /// The contract revision.
        revision: String,
        /// The live builds that lack it.
        blockers: Vec<cairn_core::Blocker>,
    },
    /// A build older than a contract revision applied to the store: it would break on the
    /// store's schema; nothing was changed.
    #[error("migration set {set}: the store has contract revision {rev} applied, which this build does not know; it dropped or rewrote what this build uses, so run a build that knows {rev} (or roll the store back with `cairn migrate down`)", rev = cairn_core::escape_control(.revision))]
    ContractAhead {
        /// The set.
        set: String,
        /// The contract revision this build lacks.
        revision: String,
    },
    /// The store is stamped at an older revision of the set than this build's head, and the
    /// open was told not to upgrade ([`crate::Runner::upgrade`],
    /// [`crate::OpenOptions::upgrade`]); nothing was changed.
    #[error("migration set {set}: the store is at revision {}, behind this build's head {head}, and this open does not upgrade it; upgrade it first (`cairn migrate up`, or open it from a build that upgrades) and run this again (nothing was changed)", crate::text::escape_control(.stamp))]
    Behind {
        /// The set.
        set: String,
        /// The store's stamp.
        stamp: String,
        /// This build's head.
        head: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] cairn_core::Error),
}

impl MigrateError {
    /// This error on one line with its causes, for an operator or a log (see
    /// [`cairn_core::Report`]).
    pub fn report(&self) -> cairn_core::Report<'_> {
        cairn_core::Report::new(self)
    }

    /// Whether this is a refusal (exit code 1 in the operator tools).
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Self::Refused { .. }
                | Self::Behind { .. }
                | Self::ContractRefused { .. }
                | Self::ContractAhead { .. }
                | Self::UnsupportedDialect { .. }
        )
    }
}

impl From<MigrateError> for cairn_core::Error {
    /// Maps a runner error onto the store error a backend's open returns.
    fn from(e: MigrateError) -> Self {
        match e {
            MigrateError::Store(inner) => inner,
            MigrateError::RevisionFailed { revision, source } => cairn_core::Error::Migration {
                revision,
                source: Box::new(source),
            },
            MigrateError::RevisionFailedPartly {
                revision,
                stamp,
                source,
            } => cairn_core::Error::MigrationPartly {
                revision,
                stamp,
                source: Box::new(source),
            },
            MigrateError::ContractRefused { ref blockers, .. } => cairn_core::Error::Incompatible {
                detail: e.to_string(),
                blockers: blockers.clone(),
            },
            MigrateError::Refused { .. }
            | MigrateError::Behind { .. }
            | MigrateError::ContractAhead { .. }
            | MigrateError::BaselineMismatch { .. }
            | MigrateError::BaselineRefused { .. }
            | MigrateError::UnsupportedDialect { .. } => cairn_core::Error::Incompatible {
                detail: e.to_string(),
                blockers: Vec::new(),
            },
            MigrateError::LockTimeout { .. } => cairn_core::Error::retryable(e.to_string()),
            MigrateError::Corrupt { detail } => cairn_core::Error::corrupt(detail),
            MigrateError::InvalidSet { .. } => {
                cairn_core::Error::invalid("migration set", e.to_string())
            }
            MigrateError::Source { .. } => {
                cairn_core::Error::invalid("migration file", e.to_string())
            }
            MigrateError::NoDownSql { .. } | MigrateError::DownRefused { .. } => {
                cairn_core::Error::invalid("migration down", e.to_string())
            }
            MigrateError::DownFailed { revision, source } => cairn_core::Error::MigrationDown {
                revision,
                source: Box::new(source),
            },
        }
    }
}

/// The line of [`MigrateError::UnsupportedDialect`].
fn unsupported_text(
    set: &str,
    dialect: Dialect,
    supported: Dialect,
    revision: Option<&str>,
) -> String {
    let (missing, only) = (dialect_name(dialect), dialect_name(supported));
    let suffix = match dialect {
        Dialect::Sqlite => "sqlite",
        Dialect::Postgres => "postgres",
    };
    let why = match revision {
        Some(rev) => format!(
            "it has no {missing} SQL (revision {rev} has no {rev}.{suffix}.sql or generic {rev}.sql file)"
        ),
        None => format!("it is declared {only}-only"),
    };
    format!(
        "migration set {set} is {only}-only: {why}, so it cannot migrate a {missing} store (nothing was changed); add the {missing} files or use a {only} store"
    )
}

#[cfg(test)]
mod tests {
    use super::MigrateError;
    use cairn_core::Blocker;
    use std::error::Error as _;

    fn blocker() -> Blocker {
        Blocker {
            build: "svc-v1".into(),
            host: "node-3".into(),
            pid: 4242,
            instance: "i-1".into(),
            knows: "0002_add".into(),
        }
    }

    #[test]
    fn library_errors_name_the_library_option_and_a_refused_contract_keeps_its_blockers() {
        let e = MigrateError::ContractRefused {
            set: "inventory".into(),
            revision: "0003_drop".into(),
            blockers: vec![blocker()],
        };
        let text = e.to_string();
        // A library caller reads the option it can set, an operator the flag.
        assert!(text.contains("StoreBuilder::force_contract"), "{text}");
        assert!(text.contains("cairn migrate up --force"), "{text}");
        let store: cairn_core::Error = e.into();
        match &store {
            cairn_core::Error::Incompatible { blockers, detail } => {
                assert_eq!(blockers, &vec![blocker()]);
                assert!(
                    detail.contains("build svc-v1 on node-3 pid 4242"),
                    "{detail}"
                );
            }
            other => panic!("{other:?}"),
        }
        let no_down = MigrateError::NoDownSql {
            set: "inventory".into(),
            revision: "0002_add".into(),
        }
        .to_string();
        assert!(no_down.contains("`to` in `Migrations::down`"), "{no_down}");
        assert!(
            no_down.contains("`--to` in `cairn migrate down`"),
            "{no_down}"
        );
        let other: cairn_core::Error = MigrateError::ContractAhead {
            set: "inventory".into(),
            revision: "0004_x".into(),
        }
        .into();
        assert!(
            matches!(&other, cairn_core::Error::Incompatible { blockers, .. } if blockers.is_empty()),
            "{other:?}"
        );
    }

    #[test]
    fn a_cause_is_the_source_and_not_also_in_the_message() {
        let cause = cairn_core::Error::invalid("sql", "no such table: dn_missing");
        let cause_text = cause.to_string();
        for e in [
            MigrateError::RevisionFailed {
                revision: "0002_add".into(),
                source: cairn_core::Error::invalid("sql", "no such table: dn_missing"),
            },
            MigrateError::DownFailed {
                revision: "0002_add".into(),
                source: cairn_core::Error::invalid("sql", "no such table: dn_missing"),
            },
        ] {
            let text = e.to_string();
            assert!(!text.contains("dn_missing"), "{text}");
            assert_eq!(
                e.source().map(ToString::to_string),
                Some(cause_text.clone())
            );
            assert_eq!(e.report().to_string(), format!("{text}: {cause_text}"));
        }
        // Through the conversion to a store error, the cause stays the source.
        let store: cairn_core::Error = MigrateError::RevisionFailed {
            revision: "0002_add".into(),
            source: cairn_core::Error::invalid("sql", "no such table: dn_missing"),
        }
        .into();
        assert!(!store.to_string().contains("dn_missing"), "{store}");
        assert!(
            store.report().to_string().ends_with(&cause_text),
            "{}",
            store.report()
        );
    }

    #[test]
    fn a_failed_down_stays_a_down_as_a_store_error() {
        let e: cairn_core::Error = MigrateError::DownFailed {
            revision: "0003_extra".into(),
            source: cairn_core::Error::invalid("sql", "no such table"),
        }
        .into();
        assert!(
            matches!(&e, cairn_core::Error::MigrationDown { revision, .. } if revision == "0003_extra"),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(text.contains("the down was rolled back"), "{text}");
        assert!(!text.contains("upgrade"), "{text}");
    }
}
