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

/// Postgres's longest identifier, in bytes: a longer one is cut to it.
const MAX_IDENTIFIER: usize = 63;

/// Whether `sql` is a `REINDEX (…)` whose option list holds `CONCURRENTLY` (or whose
/// words do after one): cairn asks for the plain `REINDEX INDEX|TABLE CONCURRENTLY name` form,
/// which it can recognise and repair.
fn reindex_with_options_concurrently(sql: &str) -> bool {
    let t = tokens(sql, 1);
    t.first()
        .is_some_and(|w| w.upper == "REINDEX" && sql[w.span.1..].trim_start().starts_with('('))
        && sql
            .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .any(|w| w.eq_ignore_ascii_case("CONCURRENTLY"))
}

/// Whether a no-transaction revision's Postgres statements follow the rules: exactly one
/// statement (an interrupted run then leaves at most that statement's work behind, which the
/// next upgrade can find and repair), one [`allowed_outside_transaction`], not `VACUUM FULL`
/// (it locks the table out for the whole rewrite), and a concurrent build that names its index
/// within Postgres's 63 bytes (so an interrupted build's invalid index can be found by name).
/// The reason when not, in one line naming the statement.
pub fn check_outside_revision(statements: &[String]) -> Result<(), String> {
    let [sql] = statements else {
        return Err(format!(
            "it holds {} statements, and a no-transaction revision holds exactly one (an \
             interrupted run must leave at most one statement's work behind); give each its \
             own revision",
            statements.len()
        ));
    };
    let named = || format!("`{}`", crate::text::escape_control(&first_line(sql)));
    if reindex_with_options_concurrently(sql) {
        return Err(format!(
            "its statement {} reindexes concurrently through an option list; write it as \
             REINDEX INDEX|TABLE CONCURRENTLY name",
            named()
        ));
    }
    if !allowed_outside_transaction(sql) {
        return Err(format!(
            "its statement {} may not run outside a transaction on postgres: only \
             {ALLOWED_OUTSIDE} may; move it to a revision of its own without the mark",
            named()
        ));
    }
    if is_vacuum_full(sql) {
        return Err(format!(
            "its statement {} is VACUUM FULL, which locks the table out for the whole rewrite: \
             not an online change",
            named()
        ));
    }
    let t = tokens(sql, 3);
    if t.first().is_some_and(|w| w.upper == "CREATE") {
        match concurrent_index_name(sql) {
            None => {
                return Err(format!(
                    "its statement {} leaves the index's name to Postgres; name it, so that an \
                     interrupted build's invalid index can be found and built again",
                    named()
                ))
            }
            Some((_, name)) if name.len() > MAX_IDENTIFIER => {
                return Err(format!(
                    "its statement {} names an index of {} bytes, which Postgres cuts to \
                     {MAX_IDENTIFIER}; use a shorter name",
                    named(),
                    name.len()
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The statements of a revision *not* marked no-transaction that cannot run in its upgrade
/// transaction, in `dialect`: on Postgres a concurrent index build, drop or reindex, and
/// `VACUUM`; on SQLite `VACUUM`. The reason for the first one, if any.
pub fn check_in_transaction(statements: &[String], postgres: bool) -> Result<(), String> {
    for sql in statements {
        let t = tokens(sql, 1);
        let vacuum = t.first().is_some_and(|w| w.upper == "VACUUM");
        if postgres && reindex_with_options_concurrently(sql) {
            return Err(format!(
                "its statement `{}` reindexes concurrently, which cannot run inside a \
                 transaction; write it as REINDEX INDEX|TABLE CONCURRENTLY name in a revision \
                 of its own marked `-- cairn:no-transaction`",
                crate::text::escape_control(&first_line(sql))
            ));
        }
        if postgres
            && allowed_outside_transaction(sql)
            && in_transaction_form(sql).as_deref() != Some(sql.as_str())
        {
            return Err(format!(
                "its statement `{}` cannot run inside a transaction on postgres; mark the \
                 revision with a leading line `-- cairn:no-transaction` in its postgres file \
                 (and give it that statement alone)",
                crate::text::escape_control(&first_line(sql))
            ));
        }
        if !postgres && vacuum {
            return Err(format!(
                "its statement `{}` cannot run in SQLite's upgrade transaction (the mark does \
                 not change that on SQLite); put it in the revision's .postgres.sql file only",
                crate::text::escape_control(&first_line(sql))
            ));
        }
    }
    Ok(())
}

/// Whether `sql` is a `VACUUM` with `FULL` among its options.
fn is_vacuum_full(sql: &str) -> bool {
    let t = tokens(sql, 1);
    t.first().is_some_and(|w| w.upper == "VACUUM")
        && sql
            .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .any(|w| w.eq_ignore_ascii_case("FULL"))
}

/// What a `REINDEX INDEX|TABLE CONCURRENTLY [schema.]name` statement rebuilds: `(is a table,
/// schema, name)`; `None` for any other statement. An interrupted one leaves invalid indexes
/// named after the rebuilt ones with `_ccnew` (the new copy) or `_ccold` (the old one, once
/// swapped) appended.
pub fn concurrent_reindex_target(sql: &str) -> Option<(bool, Option<String>, String)> {
    let t = tokens(sql, 6);
    let word = |i: usize| t.get(i).map(|w| w.upper.as_str());
    if word(0) != Some("REINDEX") || word(2) != Some("CONCURRENTLY") {
        return None;
    }
    let table = match word(1)? {
        "INDEX" => false,
        "TABLE" => true,
        _ => return None,
    };
    let first = t.get(3)?;
    if t.get(4).is_some_and(|w| w.upper == ".") {
        return Some((table, Some(first.ident.clone()), t.get(5)?.ident.clone()));
    }
    Some((table, None, first.ident.clone()))
}

/// A statement's first line, cut at 120 characters, for an error message.
pub(crate) fn first_line(sql: &str) -> String {
    let line = sql.trim().lines().next().unwrap_or_default();
    let mut out: String = line.chars().take(120).collect();
    if out.len() < line.len() || sql.trim().lines().nth(1).is_some() {
        out.push('…');
    }
    out
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
    // An unqualified index goes into its table's schema: `ON [ONLY] [schema.]table`.
    let mut on = at + 1;
    if t.get(on).is_some_and(|w| w.upper == "ON" && !w.quoted) {
        on += 1;
        if t.get(on).is_some_and(|w| w.upper == "ONLY" && !w.quoted) {
            on += 1;
        }
        if let (Some(schema), Some(dot)) = (t.get(on), t.get(on + 1)) {
            if dot.upper == "." {
                return Some((Some(schema.ident.clone()), first.ident.clone()));
            }
        }
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

/// Up to `n` leading tokens of `sql` (words uppercased, a quoted identifier with its quotes, so
/// that it never matches a keyword), skipping whitespace and `--` / `/* */` comments; the
/// transaction-control check ([`crate::transaction_control`]) reads its first words with it.
pub(crate) fn leading_words(sql: &str, n: usize) -> Vec<String> {
    tokens(sql, n).into_iter().map(|t| t.upper).collect()
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
    fn a_no_transaction_revision_holds_one_named_online_statement() {
        let one = |sql: &str| check_outside_revision(&[sql.to_owned()]);
        assert!(one("CREATE INDEX CONCURRENTLY i ON t (c)").is_ok());
        assert!(one("VACUUM (ANALYZE) t").is_ok());
        assert!(one("ALTER TYPE m ADD VALUE 'x'").is_ok());
        let two = check_outside_revision(&[
            "CREATE INDEX CONCURRENTLY a ON t (c)".into(),
            "CREATE INDEX CONCURRENTLY b ON t (d)".into(),
        ]);
        assert!(two.unwrap_err().contains("holds 2 statements"));
        assert!(one("CREATE INDEX CONCURRENTLY ON t (c)")
            .unwrap_err()
            .contains("leaves the index's name to Postgres"));
        let long = format!("CREATE INDEX CONCURRENTLY {} ON t (c)", "i".repeat(64));
        assert!(one(&long).unwrap_err().contains("64 bytes"));
        assert!(one("VACUUM (FULL, ANALYZE) t")
            .unwrap_err()
            .contains("VACUUM FULL"));
        assert!(one("vacuum full t").unwrap_err().contains("VACUUM FULL"));
        assert!(one("CREATE TABLE t (id BIGINT)")
            .unwrap_err()
            .contains("may not run outside a transaction"));
    }

    #[test]
    fn what_cannot_run_in_the_upgrade_transaction_needs_the_mark() {
        let pg = |sql: &str| check_in_transaction(&[sql.to_owned()], true);
        let lite = |sql: &str| check_in_transaction(&[sql.to_owned()], false);
        assert!(pg("CREATE INDEX i ON t (c)").is_ok());
        assert!(pg("ALTER TYPE m ADD VALUE 'x'").is_ok());
        for sql in [
            "CREATE INDEX CONCURRENTLY i ON t (c)",
            "DROP INDEX CONCURRENTLY i",
            "REINDEX TABLE CONCURRENTLY t",
            "VACUUM",
        ] {
            assert!(
                pg(sql).unwrap_err().contains("-- cairn:no-transaction"),
                "{sql}"
            );
        }
        assert!(lite("VACUUM").unwrap_err().contains(".postgres.sql"));
        for sql in [
            "REINDEX (VERBOSE) TABLE CONCURRENTLY t",
            "REINDEX (CONCURRENTLY) TABLE t",
        ] {
            assert!(
                pg(sql)
                    .unwrap_err()
                    .contains("REINDEX INDEX|TABLE CONCURRENTLY name"),
                "{sql}"
            );
            assert!(
                check_outside_revision(&[sql.to_owned()])
                    .unwrap_err()
                    .contains("through an option list"),
                "{sql}"
            );
        }
        assert!(pg("REINDEX (VERBOSE) TABLE t").is_ok());
        assert!(pg("-- é\nREINDEX (VERBOSE) TABLE CONCURRENTLY t").is_err());
        assert!(lite("CREATE INDEX i ON t (c)").is_ok());
    }

    #[test]
    fn a_concurrent_reindex_names_what_it_rebuilds() {
        assert_eq!(
            concurrent_reindex_target("REINDEX INDEX CONCURRENTLY Big_V"),
            Some((false, None, "big_v".into()))
        );
        assert_eq!(
            concurrent_reindex_target("reindex table concurrently app.big"),
            Some((true, Some("app".into()), "big".into()))
        );
        assert_eq!(concurrent_reindex_target("REINDEX INDEX big_v"), None);
        assert_eq!(
            concurrent_reindex_target("REINDEX SCHEMA CONCURRENTLY app"),
            None
        );
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
            concurrent_index_name("CREATE INDEX CONCURRENTLY oix ON ONLY other.t (c)"),
            Some((Some("other".into()), "oix".into()))
        );
        assert_eq!(
            concurrent_index_name("CREATE INDEX CONCURRENTLY ON t (c)"),
            None
        );
        assert_eq!(concurrent_index_name("CREATE INDEX i ON t (c)"), None);
        assert_eq!(concurrent_index_name("DROP INDEX CONCURRENTLY i"), None);
    }
}
