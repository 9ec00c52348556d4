//! `cairn doctor [--json]`: a read-only health report of a store, with the command that repairs
//! each problem found.
//!
//! Read-only: the migration state is read without the lock, and the store is opened (for the
//! spool counts and the head-cache sample) only when cairn's set is at this build's head or
//! ahead, where opening writes nothing. A store that is behind is reported as such, not
//! upgraded.

mod check;
mod command;
mod migrations;
mod report;
mod spool;
mod store;
#[cfg(test)]
mod tests;

pub(crate) use self::check::{Level, Limits};
pub(crate) use self::command::{app_set, run};
pub(crate) use self::report::{report, Report, Serving};
