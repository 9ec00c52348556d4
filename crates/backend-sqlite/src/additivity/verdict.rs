//! The violations one check collects ([`Verdict`]) and how a SQLite error reads inside one
//! ([`one_line`]): shared by the capture, the judging rules and the down check.

use cairn_migrate::additivity::{Rule, Violation};

use crate::error::map;

/// The violations found so far, each once.
pub(super) struct Verdict(pub(super) Vec<Violation>);

impl Verdict {
    pub(super) fn add(&mut self, rule: Rule, table: Option<&str>, detail: impl Into<String>) {
        let v = Violation {
            rule,
            table: table.map(str::to_owned),
            detail: detail.into(),
        };
        if !self.0.contains(&v) {
            self.0.push(v);
        }
    }
}

/// A SQLite error as one line (SQLite's messages name objects, never row values).
pub(super) fn one_line(e: rusqlite::Error) -> String {
    map(e).to_string().replace('\n', " ")
}
