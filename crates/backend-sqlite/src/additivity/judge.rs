//! The judging rules on statements and schema: what kind of statement touched an existing
//! table, whether each existing table's definition only gained plain columns, and whether
//! indexes and triggers on existing tables are unchanged or harmless.

use std::collections::{BTreeMap, BTreeSet};

use cairn_migrate::additivity::Rule;
use cairn_migrate::BOOKKEEPING_TABLES;
use rusqlite::{params, Connection};

use super::snapshot::{columns, Object, Schema, Seeded};
use super::sql;
use super::tokens::{classify, tokenize, trigger_body, Kind, Tok, Token};
use super::verdict::{one_line, Verdict};

pub(super) fn judge_statements(traced: &[String], before: &Schema, v: &mut Verdict) {
    let existing_table = |name: &str| {
        name.starts_with("sqlite_")
            || BOOKKEEPING_TABLES.contains(&name)
            || before.get(name).is_some_and(|o| o.kind == "table")
    };
    // Trigger texts created during the revision, so a trigger that fires can be judged by
    // what its body does.
    let mut created_triggers: BTreeMap<String, String> = BTreeMap::new();
    let mut queue: Vec<(Vec<Token>, String)> = Vec::new();
    for text in traced {
        // trace_v2 reports the start of a trigger program as `-- TRIGGER name`.
        let marker = text
            .trim()
            .strip_prefix("-- TRIGGER ")
            .filter(|n| !n.contains('\n'));
        if let Some(name) = marker {
            queue.push((Vec::new(), name.trim().to_ascii_lowercase()));
            continue;
        }
        let toks = tokenize(text);
        if let Kind::CreateTrigger { name, .. } = classify(&toks) {
            created_triggers.insert(name, text.clone());
        }
        queue.push((toks, String::new()));
    }
    for (toks, fired) in queue {
        if !fired.is_empty() {
            // A trigger that existed before fires only on a write to an existing table, which
            // is refused on its own; a new one is judged by its body.
            if let Some(text) = created_triggers.get(&fired) {
                for stmt in trigger_body(text) {
                    judge_kind(&classify(&stmt), before, &existing_table, Some(&fired), v);
                }
            }
            continue;
        }
        judge_kind(&classify(&toks), before, &existing_table, None, v);
    }
}

pub(super) fn judge_kind(
    kind: &Kind,
    before: &Schema,
    existing_table: &dyn Fn(&str) -> bool,
    via_trigger: Option<&str>,
    v: &mut Verdict,
) {
    let via = via_trigger.map_or(String::new(), |t| format!(" (in trigger {t})"));
    match kind {
        Kind::CreateTable {
            name,
            if_not_exists,
        } => {
            if existing_table(name) && !if_not_exists {
                v.add(
                    Rule::StatementKind,
                    Some(name),
                    format!("CREATE TABLE recreates an existing table{via}"),
                );
            }
        }
        Kind::CreateIndex | Kind::CreateOther | Kind::AlterAdd | Kind::Select | Kind::Empty => {}
        Kind::CreateTrigger { table, .. } => {
            if existing_table(table) {
                v.add(
                    Rule::Trigger,
                    Some(table),
                    format!("CREATE TRIGGER on an existing table{via}"),
                );
            }
        }
        Kind::AlterRenameTable { table, to } => {
            if existing_table(table) {
                v.add(
                    Rule::StatementKind,
                    Some(table),
                    format!("ALTER TABLE … RENAME TO renames an existing table{via}"),
                );
            }
            if existing_table(to) {
                v.add(
                    Rule::StatementKind,
                    Some(to),
                    format!("ALTER TABLE … RENAME TO takes an existing table's name{via}"),
                );
            }
        }
        Kind::AlterOther { table, what } => {
            if existing_table(table) {
                v.add(
                    Rule::StatementKind,
                    Some(table),
                    format!("ALTER TABLE … {what} on an existing table{via}"),
                );
            }
        }
        Kind::Drop { what, name } => {
            if let Some(o) = before.get(name) {
                v.add(
                    Rule::StatementKind,
                    Some(&o.table),
                    format!("DROP {what} {name} drops an existing object{via}"),
                );
            } else if existing_table(name) {
                v.add(
                    Rule::StatementKind,
                    Some(name),
                    format!("DROP {what} on an internal table{via}"),
                );
            }
        }
        Kind::Dml { verb, table } => {
            if existing_table(table) {
                v.add(
                    Rule::StatementKind,
                    Some(table),
                    format!("{verb} on an existing table{via}"),
                );
            }
        }
        Kind::Vacuum => v.add(
            Rule::StatementKind,
            None,
            format!("VACUUM rewrites every table{via}"),
        ),
        Kind::Other { word } => v.add(
            Rule::Unrecognised,
            None,
            format!("{word} statement not recognised by the check; for review{via}"),
        ),
    }
}

/// Whether a column default is a literal that cannot fail (SQLite stores the default as
/// written). `CURRENT_*` and parenthesised expressions are not.
pub(super) fn literal_default(text: &str) -> bool {
    let t = text.trim();
    let upper = t.to_ascii_uppercase();
    if ["NULL", "TRUE", "FALSE"].contains(&upper.as_str()) {
        return true;
    }
    let toks = tokenize(t);
    match toks.as_slice() {
        [Token {
            tok: Tok::Str(_), ..
        }] => true,
        [Token {
            tok: Tok::Word(x), ..
        }, Token {
            tok: Tok::Str(h), ..
        }] if x.eq_ignore_ascii_case("x") => {
            h.len() % 2 == 0 && h.chars().all(|c| c.is_ascii_hexdigit())
        }
        _ => {
            let digits = t.trim_start_matches(['+', '-']).trim_start();
            digits.parse::<f64>().is_ok_and(f64::is_finite)
                || digits
                    .strip_prefix("0x")
                    .or_else(|| digits.strip_prefix("0X"))
                    .is_some_and(|h| !h.is_empty() && i64::from_str_radix(h, 16).is_ok())
        }
    }
}

/// The column definitions ADD COLUMN inserted: `new` is `old` with `, <definitions>` inserted
/// at one place, which ADD COLUMN chooses after the last column definition (before any table
/// constraint, or the closing parenthesis). `None` when `new` is not of that shape.
pub(super) fn inserted_definitions(old: &str, new: &str) -> Option<Vec<Vec<Token>>> {
    let grown = new.len().checked_sub(old.len()).filter(|g| *g > 0)?;
    let prefix = old
        .bytes()
        .zip(new.bytes())
        .take_while(|(a, b)| a == b)
        .count();
    let suffix = old
        .bytes()
        .rev()
        .zip(new.bytes().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let lowest = old.len().saturating_sub(suffix);
    (lowest..=prefix.min(old.len())).find_map(|p| {
        if !old.is_char_boundary(p) || !new.is_char_boundary(p) || !new.is_char_boundary(p + grown)
        {
            return None;
        }
        let rest = old[p..].trim_start();
        if !(rest.starts_with(',') || rest.starts_with(')')) || new[p + grown..] != old[p..] {
            return None;
        }
        let toks = tokenize(&new[p..p + grown]);
        if toks.first()?.tok != Tok::Punct(',') {
            return None;
        }
        Some(
            toks[1..]
                .split(|t| t.depth == 0 && t.tok == Tok::Punct(','))
                .map(<[Token]>::to_vec)
                .collect(),
        )
    })
}

pub(super) fn judge_schema(
    conn: &Connection,
    before: &Schema,
    after: &Schema,
    seeded: &BTreeMap<String, Seeded>,
    v: &mut Verdict,
) {
    for (name, old) in before {
        let new = after.get(name);
        match old.kind.as_str() {
            "table" => judge_table(conn, name, old, new, seeded.get(name), v),
            "index" => {
                if new != Some(old) {
                    let what = if new.is_some() {
                        "was changed or replaced"
                    } else {
                        "was dropped"
                    };
                    v.add(
                        Rule::Index,
                        Some(&old.table),
                        format!("existing index {name} {what}"),
                    );
                }
            }
            "trigger" => {
                if new != Some(old) {
                    let what = if new.is_some() {
                        "was changed or replaced"
                    } else {
                        "was dropped"
                    };
                    v.add(
                        Rule::Trigger,
                        Some(&old.table),
                        format!("existing trigger {name} {what}"),
                    );
                }
            }
            _ => {
                if new.map(|n| (&n.kind, &n.sql)) != Some((&old.kind, &old.sql)) {
                    v.add(
                        Rule::Definition,
                        Some(&old.table),
                        format!("existing {} {name} was changed or dropped", old.kind),
                    );
                }
            }
        }
    }
    let existing = |t: &str| before.get(t).is_some_and(|o| o.kind == "table");
    for (name, obj) in after.iter().filter(|(n, _)| !before.contains_key(*n)) {
        if !existing(&obj.table) {
            continue;
        }
        match obj.kind.as_str() {
            "index" => judge_new_index(conn, name, obj, v),
            "trigger" => v.add(
                Rule::Trigger,
                Some(&obj.table),
                format!("new trigger {name} on an existing table"),
            ),
            _ => {}
        }
    }
}

pub(super) fn judge_table(
    conn: &Connection,
    name: &str,
    old: &Object,
    new: Option<&Object>,
    seeded: Option<&Seeded>,
    v: &mut Verdict,
) {
    let Some(new) = new.filter(|n| n.kind == "table") else {
        v.add(Rule::Definition, Some(name), "the table is gone");
        return;
    };
    if new.rootpage != old.rootpage {
        v.add(
            Rule::Definition,
            Some(name),
            "the table was rebuilt (its storage moved)",
        );
    }
    let (Some(old_sql), Some(new_sql)) = (&old.sql, &new.sql) else {
        return;
    };
    if old_sql == new_sql {
        return;
    }
    let Some(defs) = inserted_definitions(old_sql, new_sql) else {
        v.add(
            Rule::Definition,
            Some(name),
            "the definition is not the old one plus added columns (rebuilt or altered)",
        );
        return;
    };
    for def in &defs {
        let col = def.first().and_then(Token::name).unwrap_or_default();
        // The first token names the column; an unquoted constraint keyword there means a table
        // constraint was inserted, not a column.
        let first_is_name = def.first().is_some_and(|t| matches!(t.tok, Tok::Ident(_)));
        for t in def
            .iter()
            .skip(usize::from(first_is_name))
            .filter(|t| t.depth == 0)
        {
            if t.is_word("GENERATED") || t.is_word("AS") {
                v.add(
                    Rule::NewColumn,
                    Some(name),
                    format!("new column {col} is generated"),
                );
            }
            for kw in [
                "CHECK",
                "UNIQUE",
                "REFERENCES",
                "PRIMARY",
                "CONSTRAINT",
                "FOREIGN",
            ] {
                if t.is_word(kw) {
                    v.add(
                        Rule::NewColumn,
                        Some(name),
                        format!("new column {col} has {kw}"),
                    );
                }
            }
        }
    }
    let Some(seeded) = seeded else { return };
    let now = match columns(conn, name) {
        Ok(c) => c,
        Err(e) => {
            v.add(
                Rule::Definition,
                Some(name),
                format!("its columns cannot be read: {}", one_line(e)),
            );
            return;
        }
    };
    let old_names: BTreeSet<&str> = seeded.columns.iter().map(|c| c.name.as_str()).collect();
    for c in now.iter().filter(|c| !old_names.contains(c.name.as_str())) {
        if c.hidden == 2 || c.hidden == 3 {
            v.add(
                Rule::NewColumn,
                Some(name),
                format!("new column {} is generated", c.name),
            );
        }
        if c.pk {
            v.add(
                Rule::NewColumn,
                Some(name),
                format!("new column {} is in the primary key", c.name),
            );
        }
        match &c.default {
            None if c.notnull => {
                v.add(
                    Rule::NewColumn,
                    Some(name),
                    format!("new column {} is NOT NULL without a default", c.name),
                );
            }
            Some(d) if !literal_default(d) => {
                v.add(
                    Rule::NewColumn,
                    Some(name),
                    format!("new column {} has a non-literal default", c.name),
                );
            }
            _ => {}
        }
    }
}

pub(super) fn judge_new_index(conn: &Connection, name: &str, obj: &Object, v: &mut Verdict) {
    let table = obj.table.as_str();
    if obj.sql.is_none() {
        v.add(
            Rule::Index,
            Some(table),
            format!("new constraint index {name}"),
        );
        return;
    }
    let flags: rusqlite::Result<(bool, bool)> =
        conn.query_row(sql::INDEX_FLAGS, params![table, name], |r| {
            Ok((r.get::<_, i64>(0)? != 0, r.get::<_, i64>(1)? != 0))
        });
    match flags {
        Ok((unique, partial)) => {
            if unique {
                v.add(
                    Rule::Index,
                    Some(table),
                    format!("new index {name} is unique"),
                );
            }
            if partial {
                v.add(
                    Rule::Index,
                    Some(table),
                    format!("new index {name} is partial"),
                );
            }
        }
        Err(e) => v.add(
            Rule::Index,
            Some(table),
            format!("new index {name} cannot be inspected: {}", one_line(e)),
        ),
    }
    let cids: rusqlite::Result<Vec<i64>> = conn
        .prepare(sql::INDEX_KEY_COLUMNS)
        .and_then(|mut s| s.query_map(params![name], |r| r.get(0))?.collect());
    if cids.map_or(true, |c| c.contains(&-2)) {
        v.add(
            Rule::Index,
            Some(table),
            format!("new index {name} is on an expression"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    #[test]
    fn inserted_definitions_follow_add_column() {
        let old = "CREATE TABLE t (a INT, b TEXT, PRIMARY KEY (a))";
        let new = "CREATE TABLE t (a INT, b TEXT, c TEXT DEFAULT 'x,y', d INT CHECK (d > 0), PRIMARY KEY (a))";
        let defs = inserted_definitions(old, new).expect("an insertion");
        assert_eq!(defs.len(), 2);
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(old).unwrap();
        conn.execute_batch(
            "ALTER TABLE t ADD COLUMN c TEXT DEFAULT 'x,y'; ALTER TABLE t ADD d INT CHECK (d > 0)",
        )
        .unwrap();
        let stored: String = conn
            .query_row("SELECT sql FROM sqlite_schema", [], |r| r.get(0))
            .unwrap();
        assert_eq!(stored, new);
        assert!(inserted_definitions(
            old,
            "CREATE TABLE t (a INT, b TEXT COLLATE NOCASE, PRIMARY KEY (a))"
        )
        .is_none());
    }

    #[test]
    fn only_literal_defaults_pass() {
        for ok in ["0", "-1.5", "- 5", "'x'", "NULL", "true", "X'00ff'", "0x1F"] {
            assert!(literal_default(ok), "{ok}");
        }
        for bad in [
            "(length('x') * 2)",
            "1+1",
            "CURRENT_TIMESTAMP",
            "random()",
            "'a' || 'b'",
        ] {
            assert!(!literal_default(bad), "{bad}");
        }
    }
}
