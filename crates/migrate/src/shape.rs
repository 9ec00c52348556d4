//! The shape of what a store's schema holds, as an engine's catalog describes it: what a
//! baseline ([`crate::baseline`]) compares. A leaf: the backends' [`crate::MigrationBackend`]
//! returns it, and the baseline compares two.

use std::collections::BTreeMap;

use crate::bookkeeping::BOOKKEEPING_TABLES;

/// The shape of a store's tables, as an engine's catalog describes them: per table, its
/// columns in order and its constraints and indexes by name, each as one line of the engine's
/// own rendering (so two stores of one engine compare equal exactly when their catalogs
/// agree). Bookkeeping tables are left out.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct SchemaShape {
    /// Table name → its shape.
    pub tables: BTreeMap<String, TableShape>,
    /// What else the schema holds, by kind and name (`view v`, `type mood`, `sequence s`,
    /// `function f(integer)`), each with its definition.
    pub others: BTreeMap<String, String>,
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
        for (name, def) in &expected.others {
            match self.others.get(name) {
                None => out.push(format!("{name} is missing")),
                Some(found) if found != def => {
                    out.push(format!("{name} is {found}, the revision makes {def}"))
                }
                Some(_) => {}
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
