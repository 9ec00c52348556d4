//! Revisions that run outside the upgrade transaction (`-- cairn:no-transaction`): which
//! statements may run there, and the index a concurrent build names.
//!
//! Postgres refuses some statements inside a transaction block: `CREATE INDEX CONCURRENTLY`
//! (the only way to index a live table without blocking its writes for the whole build),
//! `DROP INDEX CONCURRENTLY`, `REINDEX … CONCURRENTLY`, `VACUUM`; `ALTER TYPE … ADD VALUE` runs
//! in one but its value cannot be used until it commits. A revision marked no-transaction
//! ([`crate::MigrationSet::with_no_transaction`]) runs on Postgres one statement at a time in
//! autocommit, under the migration lock, and may hold only those statements: anything else
//! would lose the all-or-nothing a transaction gives a revision, so it is refused when the set
//! is built, before anything runs. On SQLite the marker is accepted and the revision runs in
//! the upgrade transaction as any other.

/// What may run outside the upgrade transaction, as `migrate` names it in a refusal.
pub const ALLOWED_OUTSIDE: &str = "CREATE [UNIQUE] INDEX CONCURRENTLY, DROP INDEX CONCURRENTLY, \
     REINDEX … CONCURRENTLY, ALTER TYPE … ADD VALUE, VACUUM";

/// Whether Postgres statement `sql` may run in a no-transaction revision (see the module doc);
/// judged by its leading words after whitespace and comments.
pub fn allowed_outside_transaction(sql: &str) -> bool {
    let t = tokens(sql, 8);
    let word = |i: usize| t.get(i).map(|w| w.upper.as_str());
    match word(0) {
        Some("CREATE") => {
            let at = 1 + usize::from(word(1) == Some("UNIQUE"));
            word(at) == Some("INDEX") && word(at + 1) == Some("CONCURRENTLY")
        }
        Some("DROP") => word(1) == Some("INDEX") && word(2) == Some("CONCURRENTLY"),
        Some("REINDEX") => {
            matches!(
                word(1),
                Some("INDEX" | "TABLE" | "SCHEMA" | "DATABASE" | "SYSTEM")
            ) && word(2) == Some("CONCURRENTLY")
        }
        Some("ALTER") => {
            word(1) == Some("TYPE")
                && (3..t.len()).any(|i| word(i) == Some("ADD") && word(i + 1) == Some("VALUE"))
        }
        Some("VACUUM") => true,
        _ => false,
    }
}

/// The index a `CREATE [UNIQUE] INDEX CONCURRENTLY [IF NOT EXISTS] name ON …` statement
/// builds, as `(schema, name)` with unquoted identifiers folded to lower case as Postgres
/// folds them; `None` for any other statement, or one that leaves the name to Postgres.
pub fn concurrent_index_name(sql: &str) -> Option<(Option<String>, String)> {
    let t = tokens(sql, 12);
    let word = |i: usize| t.get(i).map(|w| w.upper.as_str());
    if word(0) != Some("CREATE") {
        return None;
    }
    let mut at = 1 + usize::from(word(1) == Some("UNIQUE"));
    if word(at) != Some("INDEX") || word(at + 1) != Some("CONCURRENTLY") {
        return None;
    }
    at += 2;
    if word(at) == Some("IF") && word(at + 1) == Some("NOT") && word(at + 2) == Some("EXISTS") {
        at += 3;
    }
    let first = t.get(at)?;
    if first.upper == "ON" && !first.quoted {
        return None;
    }
    if t.get(at + 1).is_some_and(|w| w.upper == ".") {
        let name = t.get(at + 2)?;
        return Some((Some(first.ident.clone()), name.ident.clone()));
    }
    Some((None, first.ident.clone()))
}

/// What the executed additivity check runs, inside its checked transaction, for statement
/// `sql` of a no-transaction revision: the same statement without `CONCURRENTLY` (it builds,
/// drops or rebuilds the same index, holding the lock the concurrent form avoids, which is not
/// what the additivity check judges), `VACUUM` not at all (`None`: it changes no schema), and
/// anything else as it is.
pub fn in_transaction_form(sql: &str) -> Option<String> {
    let t = tokens(sql, 6);
    match t.first().map(|w| w.upper.as_str()) {
        Some("VACUUM") => None,
        Some("CREATE" | "DROP" | "REINDEX") => {
            Some(match t.iter().find(|w| w.upper == "CONCURRENTLY") {
                Some(w) => format!("{}{}", &sql[..w.span.0], &sql[w.span.1..]),
                None => sql.to_owned(),
            })
        }
        _ => Some(sql.to_owned()),
    }
}

struct Token {
    /// Where it starts and ends in the statement (bytes).
    span: (usize, usize),
    /// The token as Postgres resolves it as an identifier.
    ident: String,
    /// Upper case, for keyword matches (a quoted identifier never matches one: see `quoted`).
    upper: String,
    quoted: bool,
}

/// Up to `n` leading tokens of `sql`: words, quoted identifiers and `.`, skipping whitespace
/// and `--` / `/* */` comments; stops at anything else.
fn tokens(sql: &str, n: usize) -> Vec<Token> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() && out.len() < n {
        match b[i] {
            c if c.is_ascii_whitespace() => i += 1,
            b'-' if b.get(i + 1) == Some(&b'-') => {
                i = sql[i..].find('\n').map_or(b.len(), |k| i + k);
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i = sql[i + 2..].find("*/").map_or(b.len(), |k| i + 2 + k + 2);
            }
            b'.' => {
                out.push(Token {
                    span: (i, i + 1),
                    ident: ".".into(),
                    upper: ".".into(),
                    quoted: false,
                });
                i += 1;
            }
            b'"' => {
                let mut ident = String::new();
                let mut j = i + 1;
                loop {
                    match sql[j..].find('"') {
                        None => return out,
                        Some(k) => {
                            ident.push_str(&sql[j..j + k]);
                            j += k + 1;
                            if b.get(j) == Some(&b'"') {
                                ident.push('"');
                                j += 1;
                            } else {
                                break;
                            }
                        }
                    }
                }
                out.push(Token {
                    span: (i, j),
                    upper: format!("\"{ident}\""),
                    ident,
                    quoted: true,
                });
                i = j;
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'$')
                {
                    i += 1;
                }
                let w = &sql[start..i];
                out.push(Token {
                    span: (start, i),
                    ident: w.to_ascii_lowercase(),
                    upper: w.to_ascii_uppercase(),
                    quoted: false,
                });
            }
            _ => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statements_postgres_runs_only_outside_a_transaction_are_allowed() {
        for sql in [
            "CREATE INDEX CONCURRENTLY items_name ON items (name)",
            "create unique index concurrently if not exists i ON t (c)",
            "-- build it online\nCREATE INDEX CONCURRENTLY ON items (name)",
            "DROP INDEX CONCURRENTLY IF EXISTS items_name",
            "REINDEX INDEX CONCURRENTLY items_name",
            "REINDEX TABLE CONCURRENTLY items",
            "ALTER TYPE mood ADD VALUE 'meh'",
            "ALTER TYPE public.mood ADD VALUE IF NOT EXISTS 'meh' AFTER 'ok'",
            "VACUUM (ANALYZE) items",
            "vacuum",
        ] {
            assert!(allowed_outside_transaction(sql), "{sql}");
        }
    }

    #[test]
    fn everything_else_is_refused_outside_a_transaction() {
        for sql in [
            "CREATE INDEX items_name ON items (name)",
            "CREATE TABLE concurrently (id BIGINT)",
            "DROP INDEX items_name",
            "DROP TABLE items",
            "REINDEX INDEX items_name",
            "ALTER TYPE mood RENAME VALUE 'a' TO 'b'",
            "ALTER TABLE items ADD COLUMN value TEXT",
            "INSERT INTO items VALUES (1)",
            "-- CREATE INDEX CONCURRENTLY\nDELETE FROM items",
            "\"CREATE\" INDEX CONCURRENTLY i ON t (c)",
            "COMMIT",
            "",
        ] {
            assert!(!allowed_outside_transaction(sql), "{sql}");
        }
    }

    #[test]
    fn the_checked_form_drops_concurrently_and_vacuum() {
        assert_eq!(
            in_transaction_form("CREATE UNIQUE INDEX CONCURRENTLY i ON t (c)").as_deref(),
            Some("CREATE UNIQUE INDEX  i ON t (c)")
        );
        assert_eq!(
            in_transaction_form("drop index concurrently if exists i").as_deref(),
            Some("drop index  if exists i")
        );
        assert_eq!(
            in_transaction_form("REINDEX TABLE CONCURRENTLY t").as_deref(),
            Some("REINDEX TABLE  t")
        );
        assert_eq!(
            in_transaction_form("ALTER TYPE m ADD VALUE 'x'").as_deref(),
            Some("ALTER TYPE m ADD VALUE 'x'")
        );
        assert_eq!(in_transaction_form("VACUUM t"), None);
    }

    #[test]
    fn a_concurrent_builds_index_name_is_read_as_postgres_resolves_it() {
        let plain = |n: &str| Some((None, n.to_owned()));
        assert_eq!(
            concurrent_index_name("CREATE INDEX CONCURRENTLY Items_Name ON items (name)"),
            plain("items_name")
        );
        assert_eq!(
            concurrent_index_name(
                "create unique index concurrently if not exists \"Odd \"\"x\"\"\" on t (c)"
            ),
            plain("Odd \"x\"")
        );
        assert_eq!(
            concurrent_index_name("CREATE INDEX CONCURRENTLY app.items_name ON app.items (name)"),
            Some((Some("app".into()), "items_name".into()))
        );
        assert_eq!(
            concurrent_index_name("CREATE INDEX CONCURRENTLY \"on\" ON t (c)"),
            plain("on")
        );
        assert_eq!(
            concurrent_index_name("CREATE INDEX CONCURRENTLY ON t (c)"),
            None
        );
        assert_eq!(concurrent_index_name("CREATE INDEX i ON t (c)"), None);
        assert_eq!(concurrent_index_name("DROP INDEX CONCURRENTLY i"), None);
    }
}
