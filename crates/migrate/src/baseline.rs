//! Baseline: adopting a database whose schema already is what a set's revision makes
//! (`cairn migrate baseline --set NAME --source DIR --at REV`), without running its SQL.
//!
//! The set up to the revision is applied to a throwaway store of the same engine
//! ([`MigrationBackend::scratch`]); its [`SchemaShape`] — the tables the set made with their
//! columns, constraints and indexes, read from the engine's catalog — is compared with the
//! store's own, table by table. Only when they agree is the store stamped at the revision with
//! its lineage (and the set's stored down SQL), under the migration lock, in one transaction;
//! otherwise the differences are listed and nothing is written. Tables the set does not make
//! (another set's, the application's own) are not compared.

use std::collections::BTreeMap;

use crate::bookkeeping::BOOKKEEPING_TABLES;
use crate::classify::StoredState;
use crate::error::MigrateError;
use crate::runner::{MigrationBackend, Runner};

/// The shape of a store's tables, as an engine's catalog describes them: per table, its
/// columns in order and its constraints and indexes by name, each as one line of the engine's
/// own rendering (so two stores of one engine compare equal exactly when their catalogs
/// agree). Bookkeeping tables are left out.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct SchemaShape {
    /// Table name → its shape.
    pub tables: BTreeMap<String, TableShape>,
}

/// One table of a [`SchemaShape`].
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct TableShape {
    /// Each column as `name type [NOT NULL] [DEFAULT …]`, in order.
    pub columns: Vec<String>,
    /// Constraints and indexes by name, each with its definition.
    pub objects: BTreeMap<String, String>,
}

impl SchemaShape {
    /// What `self` (the store) lacks or has otherwise than `expected`, for the tables of
    /// `expected`, one line each; empty when they agree.
    pub fn differences(&self, expected: &SchemaShape) -> Vec<String> {
        let mut out = Vec::new();
        for (table, want) in &expected.tables {
            let Some(have) = self.tables.get(table) else {
                out.push(format!("table {table} is missing"));
                continue;
            };
            if have.columns != want.columns {
                out.push(format!(
                    "table {table} has columns ({}), the revision makes ({})",
                    have.columns.join(", "),
                    want.columns.join(", ")
                ));
            }
            for (name, def) in &want.objects {
                match have.objects.get(name) {
                    None => out.push(format!("table {table} lacks {name}: {def}")),
                    Some(found) if found != def => out.push(format!(
                        "table {table}: {name} is {found}, the revision makes {def}"
                    )),
                    Some(_) => {}
                }
            }
            for (name, def) in &have.objects {
                if !want.objects.contains_key(name) {
                    out.push(format!(
                        "table {table} has {name} the revision does not make: {def}"
                    ));
                }
            }
        }
        out.into_iter()
            .map(|l| crate::text::escape_control(&l).into_owned())
            .collect()
    }

    /// Leaves out the runner's bookkeeping tables.
    pub fn without_bookkeeping(mut self) -> Self {
        self.tables
            .retain(|t, _| !BOOKKEEPING_TABLES.contains(&t.as_str()));
        self
    }
}

/// What [`Runner::baseline`] did.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct Baselined {
    /// The revision the store is stamped at now.
    pub at: String,
    /// The tables compared.
    pub tables: Vec<String>,
}

impl Runner {
    /// Adopts the store at revision `at` of this runner's set without running any SQL of it:
    /// builds the set up to `at` on a throwaway store of the same engine, compares the shapes of
    /// the tables it made with the store's, and — when they agree and the store holds no stamp
    /// of the set — records the stamp, the lineage up to `at` and the set's down SQL under the
    /// migration lock, in one transaction.
    ///
    /// # Errors
    /// [`MigrateError::BaselineMismatch`] listing the differences, and
    /// [`MigrateError::BaselineRefused`] for a store that already has a stamp of the set
    /// (nothing written either way); [`MigrateError::InvalidSet`] for an unknown `at`;
    /// [`MigrateError::LockTimeout`]; store errors.
    pub async fn baseline(
        &self,
        backend: &dyn MigrationBackend,
        at: &str,
    ) -> Result<Baselined, MigrateError> {
        self.set.require(backend.dialect())?;
        let upto = self.set.up_to(at)?;
        let name = self.set.name();
        let refuse_stamped = |state: &StoredState| match &state.stamp {
            Some(stamp) => Err(MigrateError::BaselineRefused {
                set: name.into(),
                stamp: stamp.clone(),
            }),
            None => Ok(()),
        };
        refuse_stamped(&backend.read_state(name).await?)?;
        let scratch = backend.scratch().await?;
        let expected = async {
            Runner::new(upto.clone())
                .with_lock_timeout(self.lock_timeout)
                .open(scratch.as_ref())
                .await?;
            scratch.shape().await
        }
        .await;
        let discarded = scratch.discard().await;
        let expected = expected?.without_bookkeeping();
        discarded?;
        let differences = backend.shape().await?.differences(&expected);
        if !differences.is_empty() {
            return Err(MigrateError::BaselineMismatch {
                set: name.into(),
                revision: at.into(),
                differences,
            });
        }
        let dialect = backend.dialect();
        let mut tx = backend.lock(self.lock_timeout).await?;
        let written = async {
            refuse_stamped(&tx.read_state(name).await?)?;
            for rev in upto.revisions() {
                let down = self.set.down(&rev.id, dialect).unwrap_or_default();
                tx.store_down(name, &rev.id, down).await?;
            }
            tx.write_state(name, at, Some(&upto.lineage(dialect))).await
        }
        .await;
        match written {
            Ok(()) => tx.commit().await?,
            Err(e) => {
                let _ = tx.rollback().await;
                return Err(e);
            }
        }
        Ok(Baselined {
            at: at.into(),
            tables: expected.tables.into_keys().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(columns: &[&str], objects: &[(&str, &str)]) -> TableShape {
        TableShape {
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            objects: objects
                .iter()
                .map(|(n, d)| ((*n).to_owned(), (*d).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn differences_name_what_is_missing_changed_or_extra_and_ignore_other_tables() {
        let mut want = SchemaShape::default();
        want.tables.insert(
            "items".into(),
            table(
                &["id bigint NOT NULL", "name text"],
                &[("items_pkey", "PRIMARY KEY (id)")],
            ),
        );
        want.tables
            .insert("tags".into(), table(&["id bigint"], &[]));
        let mut have = want.clone();
        have.tables
            .insert("unrelated".into(), table(&["x int"], &[]));
        assert!(have.differences(&want).is_empty());

        have.tables.remove("tags");
        let items = have.tables.get_mut("items").unwrap();
        items.columns[1] = "name character varying(10)".into();
        items
            .objects
            .insert("items_pkey".into(), "PRIMARY KEY (name)".into());
        items
            .objects
            .insert("items_name".into(), "CREATE INDEX …".into());
        let found = have.differences(&want);
        assert_eq!(found.len(), 4, "{found:?}");
        assert!(found.iter().any(|l| l == "table tags is missing"));
        assert!(found
            .iter()
            .any(|l| l.contains("name character varying(10)")));
        assert!(found
            .iter()
            .any(|l| l.contains("items_pkey is PRIMARY KEY (name)")));
        assert!(found
            .iter()
            .any(|l| l.contains("has items_name the revision does not make")));
    }

    #[test]
    fn bookkeeping_tables_are_left_out() {
        let mut s = SchemaShape::default();
        s.tables
            .insert(BOOKKEEPING_TABLES[0].into(), TableShape::default());
        s.tables.insert("items".into(), TableShape::default());
        assert_eq!(
            s.without_bookkeeping()
                .tables
                .into_keys()
                .collect::<Vec<_>>(),
            vec!["items".to_string()]
        );
    }
}
