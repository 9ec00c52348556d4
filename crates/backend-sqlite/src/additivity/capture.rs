//! Statement capture: runs a revision's statements with SQLite's trace callback on, so every
//! statement SQLite executes (trigger programs included) is recorded for the rules.

use std::cell::RefCell;

use cairn_migrate::additivity::Rule;
use rusqlite::trace::{TraceEvent, TraceEventCodes};
use rusqlite::Connection;

use super::verdict::{one_line, Verdict};

thread_local! {
    /// Statements the trace callback saw on this thread (the check runs on one blocking
    /// thread from `BEGIN IMMEDIATE` to `ROLLBACK`).
    static TRACED: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

fn record(event: TraceEvent<'_>) {
    if let TraceEvent::Stmt(_, text) = event {
        TRACED.with(|t| t.borrow_mut().push(text.to_owned()));
    }
}

/// Runs `statements` one at a time inside the open transaction on `conn` and returns every
/// statement SQLite traced meanwhile. Stops at the first that fails or that ends the
/// transaction, recording that in `verdict`.
pub(super) fn run_traced(
    conn: &Connection,
    statements: &[String],
    verdict: &mut Verdict,
) -> Vec<String> {
    TRACED.with(|t| t.borrow_mut().clear());
    conn.trace_v2(TraceEventCodes::SQLITE_TRACE_STMT, Some(record));
    for (i, statement) in statements.iter().enumerate() {
        if let Err(e) = conn.execute_batch(statement) {
            verdict.add(
                Rule::Failed,
                None,
                format!(
                    "statement {} failed inside the transaction: {}",
                    i + 1,
                    one_line(e)
                ),
            );
            break;
        }
        if conn.is_autocommit() {
            verdict.add(
                Rule::Failed,
                None,
                format!("statement {} ended the migration transaction", i + 1),
            );
            break;
        }
    }
    conn.trace_v2(TraceEventCodes::empty(), None);
    TRACED.with(|t| std::mem::take(&mut *t.borrow_mut()))
}
