//! [`Runner::plan`]: what an upgrade would run (`cairn migrate up --dry-run`), from a look
//! without the lock; nothing is written.

use super::config::Runner;
use super::store::MigrationBackend;
use crate::classify::{classify, Classification};
use crate::error::MigrateError;

/// One pending revision as an upgrade would run it.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct PlannedRevision {
    /// The revision id.
    pub id: String,
    /// Its description.
    pub description: String,
    /// Its statements in the store's dialect, in the order they run.
    pub statements: Vec<String>,
    /// Whether it runs outside the upgrade transaction, one statement at a time (a
    /// no-transaction revision on a backend that runs it so).
    pub outside_transaction: bool,
    /// Whether it is a contract revision (applied only once no live build lacks it).
    pub contract: bool,
}

/// What [`Runner::plan`] found. Exhaustive on purpose: a new kind of plan must be given words
/// by every tool that prints one.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Plan {
    /// At this build's head with its lineage: an upgrade would do nothing.
    AtHead,
    /// At head without this build's lineage: an upgrade would record it and run nothing.
    RecordLineage,
    /// Ahead of this build (its lineage holds this head): an upgrade would do nothing.
    Ahead {
        /// The store's stamp.
        stamp: String,
    },
    /// An upgrade would run `revisions` in order, from `from`, then stamp the head and record
    /// the lineage.
    Upgrade {
        /// The current stamp (`None`: no revision of the set yet).
        from: Option<String>,
        /// The revisions, oldest first.
        revisions: Vec<PlannedRevision>,
    },
}

impl Runner {
    /// What [`Runner::open`] would do to the store now, read without the lock and without
    /// writing: the revisions and the exact statements it would run in the store's dialect.
    /// Another build may migrate between this look and an upgrade; the upgrade looks again.
    ///
    /// # Errors
    /// [`MigrateError::Refused`] and [`MigrateError::UnsupportedDialect`], as an upgrade
    /// would refuse; [`MigrateError::ContractAhead`] for a store ahead with a contract
    /// revision this build does not know; store errors.
    pub async fn plan(&self, backend: &dyn MigrationBackend) -> Result<Plan, MigrateError> {
        self.set.require(backend.dialect())?;
        let dialect = backend.dialect();
        let state = backend.read_state(self.set.name()).await?;
        Ok(match classify(&self.set, dialect, &state) {
            Classification::AtHead {
                repair_lineage: false,
            } => Plan::AtHead,
            Classification::AtHead {
                repair_lineage: true,
            } => Plan::RecordLineage,
            Classification::Ahead { stamp } => {
                self.check_contracts_known(backend).await?;
                Plan::Ahead { stamp }
            }
            Classification::Refused(refusal) => {
                return Err(MigrateError::Refused {
                    set: self.set.name().into(),
                    refusal,
                })
            }
            Classification::Upgrade { from, pending } => {
                // Refused as the upgrade would refuse it, before anything runs.
                if let Some(id) = pending
                    .iter()
                    .find(|id| self.set.is_no_transaction(id, dialect))
                {
                    if let Some(source) = backend.outside_refusal() {
                        return Err(MigrateError::Store(cairn_core::Error::invalid(
                            "upgrade",
                            format!(
                                "up would refuse revision {id} before running anything: {source}"
                            ),
                        )));
                    }
                }
                Plan::Upgrade {
                    from,
                    revisions: pending
                        .iter()
                        .filter_map(|id| self.set.position(id))
                        .map(|at| {
                            let rev = &self.set.revisions()[at];
                            PlannedRevision {
                                id: rev.id.clone(),
                                description: rev.description.clone(),
                                statements: rev.up(dialect).to_vec(),
                                outside_transaction: dialect
                                    == cairn_core::schema::Dialect::Postgres
                                    && self.set.is_no_transaction(&rev.id, dialect),
                                contract: self.set.is_contract(&rev.id),
                            }
                        })
                        .collect(),
                }
            }
        })
    }
}
