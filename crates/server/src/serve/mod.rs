//! `cairn serve`: the store over HTTP (axum on tokio).
//!
//! Startup order: the configuration is read and checked, then the store is opened through the
//! migration runner (a refused store ends the command with one line), then the address is
//! bound and `listening on ADDR` is printed as the first stdout line. On SIGINT or SIGTERM the
//! listener stops accepting, in-flight requests get `--drain-timeout` to finish, and the store
//! is closed.
//!
//! Auth choice: with no token configured the server refuses to start, unless
//! `--insecure-no-auth` is given *and* the listen address is a loopback address, so an
//! unauthenticated server is never reachable from another machine by accident (and it answers
//! loopback `Host` names only, against DNS rebinding). `/metrics` and
//! `/v1/doctor` need a token like the API (a read-only token suffices); only `/healthz` and
//! `/readyz` are open.
//!
//! Configuration (`crate::config`) is read and checked as a whole before the store is opened;
//! the binary reports every problem on its own line and exits 2.
//!
//! Connections are served by [`connections::serve`] with a header-read timeout, a keep-alive
//! timeout and a connection cap (`[limits]`); a background retention pass keeps the spool
//! within `[spool]`'s retention policy ([`retention`]), beside the head-cache backfill and the
//! delivery worker. All three stop on shutdown before the store is closed.

mod args;
mod auth;
mod backfill;
mod batch;
mod body;
mod connections;
mod delivery;
mod doctor;
mod epochs;
mod error;
mod extract;
mod flow;
mod health;
mod integer;
pub(crate) mod json;
mod layers;
mod metrics;
mod openapi;
mod page;
mod responses;
mod retention;
mod routes;
mod run;
mod runs;
mod scrape;
mod settings;
mod state;
pub(crate) mod storage;
mod sync;
mod sync_metrics;
mod ui;
mod wake;

pub(crate) use self::args::{prepare, ServeArgs};
#[cfg(feature = "fuzzing")]
pub(crate) use self::error::ApiError;
#[cfg(feature = "fuzzing")]
pub(crate) use self::extract::decode_body;
pub(crate) use self::run::run;
#[cfg(feature = "fuzzing")]
pub(crate) use self::settings::{check, Settings};
