//! The judging rules on data: the seeded rows are unchanged, and writes naming only the old
//! columns (what an older build sends) still succeed on every seeded table.

use std::collections::BTreeMap;

use cairn_migrate::additivity::Rule;
use rusqlite::{params_from_iter, Connection};

use super::snapshot::{read_rows, Cell, Seeded};
use super::sql;
use super::verdict::{one_line, Verdict};

pub(super) fn judge_rows(conn: &Connection, seeded: &BTreeMap<String, Seeded>, v: &mut Verdict) {
    for (table, s) in seeded {
        match read_rows(conn, table, &s.key, &s.cols) {
            Ok(rows) if rows == s.rows => {}
            Ok(rows) => v.add(
                Rule::Rows,
                Some(table),
                format!(
                    "seeded rows changed ({} before, {} after)",
                    s.rows.len(),
                    rows.len()
                ),
            ),
            Err(e) => v.add(
                Rule::Rows,
                Some(table),
                format!("seeded rows cannot be read: {}", one_line(e)),
            ),
        }
    }
}

/// Deletes one seeded row, inserts it back naming only the old columns, and updates it to
/// its own values, each required to touch exactly one row and leave no foreign key broken.
pub(super) fn judge_old_writes(
    conn: &Connection,
    seeded: &BTreeMap<String, Seeded>,
    v: &mut Verdict,
) {
    if let Err(e) = conn.execute_batch(sql::DEFER_FOREIGN_KEYS) {
        v.add(
            Rule::OldWrites,
            None,
            format!("cannot prepare the old-code writes: {}", one_line(e)),
        );
        return;
    }
    for (table, s) in seeded.iter().filter(|(_, s)| !s.rows.is_empty()) {
        // A row as it is now: rows the revision changed are reported on their own.
        let row = match read_rows(conn, table, &s.key, &s.cols) {
            Ok(rows) => match rows.into_iter().next() {
                Some(row) => row,
                None => continue,
            },
            Err(e) => {
                v.add(
                    Rule::OldWrites,
                    Some(table),
                    format!("rows cannot be read with the old columns: {}", one_line(e)),
                );
                continue;
            }
        };
        let (key, values) = row.split_at(s.key.len());
        if let Err(e) = conn.execute_batch(sql::SAVEPOINT) {
            v.add(
                Rule::OldWrites,
                Some(table),
                format!("cannot open a savepoint: {}", one_line(e)),
            );
            return;
        }
        let result = old_writes(conn, table, s, key, values);
        let _ = conn.execute_batch(sql::ROLLBACK_TO);
        let _ = conn.execute_batch(sql::RELEASE);
        if let Err(what) = result {
            v.add(Rule::OldWrites, Some(table), what);
        }
    }
}

pub(super) fn old_writes(
    conn: &Connection,
    table: &str,
    s: &Seeded,
    key: &[Cell],
    values: &[Cell],
) -> std::result::Result<(), String> {
    let one = |verb: &str, r: rusqlite::Result<usize>| match r {
        Ok(1) => Ok(()),
        Ok(n) => Err(format!(
            "{verb} naming only the old columns touched {n} rows, not 1"
        )),
        Err(e) => Err(format!(
            "{verb} naming only the old columns failed: {}",
            one_line(e)
        )),
    };
    one(
        "DELETE",
        conn.execute(&sql::delete_row(table, &s.key), params_from_iter(key)),
    )?;
    one(
        "INSERT",
        conn.execute(&sql::insert_row(table, &s.cols), params_from_iter(values)),
    )?;
    let new_key: Vec<Cell> = if s.key == ["rowid"] {
        vec![Cell::Int(conn.last_insert_rowid())]
    } else {
        s.key
            .iter()
            .map(|k| {
                s.cols
                    .iter()
                    .position(|c| c == k)
                    .and_then(|i| values.get(i))
                    .cloned()
                    .unwrap_or(Cell::Null)
            })
            .collect()
    };
    one(
        "UPDATE",
        conn.execute(
            &sql::update_row(table, &s.cols, &s.key),
            params_from_iter(values.iter().chain(&new_key)),
        ),
    )?;
    let broken = conn.prepare(sql::FOREIGN_KEY_CHECK).and_then(|mut st| {
        st.query_map([], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<String>>>()
    });
    match broken {
        Ok(rows) if rows.is_empty() => Ok(()),
        Ok(rows) => Err(format!(
            "writes naming only the old columns leave a broken foreign key in {}",
            rows[0]
        )),
        Err(e) => Err(format!("the foreign-key check failed: {}", one_line(e))),
    }
}
