//! The operator CLI: the command line ([`args`]), the dispatch of each command ([`commands`])
//! and the commands that are more than a few lines: `migrate`, `import`, `backfill`,
//! `enqueue --file`, `sync` and the `--url` client of a running server. `cairn serve` is the HTTP
//! service in [`crate::serve`]; `cairn doctor` and `cairn graph` are [`crate::doctor`] and
//! [`crate::graph`], which the dashboard shares.

mod args;
mod backfill;
mod commands;
mod enqueue_file;
mod flow;
mod import;
mod migrate;
mod migrate_check;
mod migrate_online;
mod migrate_report;
mod remote;
mod sync;

pub(crate) use self::args::{Cli, Command, SetArgs};
pub(crate) use self::commands::run;
