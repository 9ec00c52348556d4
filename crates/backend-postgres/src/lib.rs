//! # cairn-postgres
//!
//! The epoch log on PostgreSQL (sqlx): the backend cairn scales out with — several processes
//! or service nodes against one database.
//!
//! **The supported surface is the facade crate `cairn`** (`cairn::Store::open(url)`); this
//! crate is one of its parts. Use it directly to write or wrap a backend (see
//! `cairn_migrate::backend`, the backend contract) or to reach what only this engine offers;
//! its API follows the facade's releases and may change with them.
//!
//! - The store namespace is a Postgres schema ([`PgOptions::schema`]); [`PgStore::open_with`]
//!   opens it through cairn-migrate's lineage-aware runner ([`PgMigrator`]), which creates the
//!   schema and tables when missing and upgrades, uses or refuses an existing store.
//!   [`PgOptions`] is a builder: [`PgOptions::new`] takes a URL, [`PgOptions::from_pool`] the
//!   connect options of a pool a service already has; [`PgStore::opened`] says what the open
//!   did and [`PgStore::close`] shuts the pool down.
//! - Writers of a space are serialized by `pg_advisory_xact_lock` on a 64-bit key derived from
//!   (schema, space), so spaces and stores in different schemas never wait on each other.
//! - A single-event append with a current head cache costs exactly 5 statements — BEGIN, lock,
//!   read (max seq + cache rows), write (epoch, edges, events and cache in one statement),
//!   COMMIT — whatever the history's length.
//!
//! With the `testkit` feature, [`testkit`] provides the conformance harness, test-server
//! provisioning and the head-lookup benchmark API.

#![forbid(unsafe_code)]

mod additivity;
mod backend;
mod config;
mod db;
mod diagnostics;
mod engine;
mod error;
mod migrate;
mod pooler;
pub mod spool;
mod sql;
mod store;
#[cfg(feature = "testkit")]
pub mod testkit;
mod tls;
mod tx;

pub use additivity::PgAdditivity;
pub use backend::PgBackend;
pub use config::{connect_options_from_url, PgOptions};
pub use diagnostics::PgDiagnostics;
pub use engine::PgEngine;
pub use migrate::PgMigrator;
pub use pooler::{Pooler, POOLER_PARAM};
pub use spool::PgSpool;
pub use store::PgStore;
pub use tx::{classify_app_error, PgTransaction};
