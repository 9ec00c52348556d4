//! Recognising a statement that would end the runner's upgrade transaction.
//!
//! The runner applies every pending revision and the new stamp and lineage in one transaction.
//! A `COMMIT` inside a revision would make half an upgrade durable (SQLite), or let the rest of
//! it run in autocommit and turn the runner's own `COMMIT` into a warning (Postgres). The runner
//! refuses such a statement before running anything, and each backend's
//! [`LockedMigration::execute`](crate::LockedMigration::execute) checks after every statement
//! that its transaction is still the open one.

/// The transaction-control statement `statement` is, if any: `BEGIN`, `START TRANSACTION`,
/// `COMMIT`, `END`, `ROLLBACK` (but not `ROLLBACK TO` a savepoint, which leaves the transaction
/// open), `ABORT` or `PREPARE TRANSACTION` (Postgres), judged by its first words after leading
/// whitespace and comments. `SAVEPOINT` and `RELEASE` stay inside the transaction and are not
/// reported; neither is `BEGIN` inside a trigger or function body, which is not a statement's
/// first word.
pub fn transaction_control(statement: &str) -> Option<&'static str> {
    let words = crate::outside::leading_words(statement, 3);
    let word = |i: usize| words.get(i).map(String::as_str);
    let rollback_to = |from: usize| {
        matches!(word(from), Some("TO"))
            || (matches!(word(from), Some("WORK" | "TRANSACTION")) && word(from + 1) == Some("TO"))
    };
    match word(0)? {
        "BEGIN" => Some("BEGIN"),
        "START" if word(1) == Some("TRANSACTION") => Some("START TRANSACTION"),
        "COMMIT" => Some("COMMIT"),
        "END" => Some("END"),
        "ROLLBACK" if !rollback_to(1) => Some("ROLLBACK"),
        "ABORT" => Some("ABORT"),
        "PREPARE" if word(1) == Some("TRANSACTION") => Some("PREPARE TRANSACTION"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transaction_control_is_recognised_by_its_first_words() {
        for (sql, want) in [
            ("COMMIT", "COMMIT"),
            ("commit transaction", "COMMIT"),
            ("  -- done\n/* really */ END", "END"),
            ("end transaction", "END"),
            ("ROLLBACK", "ROLLBACK"),
            ("ROLLBACK AND CHAIN", "ROLLBACK"),
            ("COMMIT AND CHAIN", "COMMIT"),
            ("BEGIN", "BEGIN"),
            ("begin immediate", "BEGIN"),
            ("START TRANSACTION", "START TRANSACTION"),
            ("ABORT", "ABORT"),
            ("PREPARE TRANSACTION 'x'", "PREPARE TRANSACTION"),
            ("ROLLBACK PREPARED 'x'", "ROLLBACK"),
        ] {
            assert_eq!(transaction_control(sql), Some(want), "{sql}");
        }
    }

    #[test]
    fn other_statements_are_not_transaction_control() {
        for sql in [
            "CREATE TABLE t (id BIGINT)",
            "CREATE TRIGGER t AFTER INSERT ON x BEGIN SELECT 1; END",
            "DO $$ BEGIN PERFORM 1; END $$",
            "SAVEPOINT a",
            "RELEASE SAVEPOINT a",
            "ROLLBACK TO a",
            "ROLLBACK TO SAVEPOINT a",
            "ROLLBACK TRANSACTION TO SAVEPOINT a",
            "PREPARE q AS SELECT 1",
            "START_TIME_TABLE",
            "-- COMMIT\nCREATE TABLE c (id BIGINT)",
            "ENDPOINTS",
            "",
        ] {
            assert_eq!(transaction_control(sql), None, "{sql}");
        }
    }
}
