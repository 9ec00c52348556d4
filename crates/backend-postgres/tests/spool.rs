//! The spool on PostgreSQL: every S case and the model property test of the conformance suite,
//! the cross-process cases (S1, S3, S15 with child processes), and write failures (S12) and
//! listener reconnection against a real server.
cairn_conformance::spool_suite!(cairn_postgres::spool::testkit::spool_harness());

#[path = "spool/ack_batch.rs"]
mod ack_batch;
#[path = "spool/batch.rs"]
mod batch;
#[path = "spool/claims.rs"]
mod claims;
#[path = "spool/duplicates.rs"]
mod duplicates;
#[path = "spool/failures.rs"]
mod failures;
#[path = "spool/import.rs"]
mod import;
#[path = "spool/processes.rs"]
mod processes;
#[path = "spool/queries.rs"]
mod queries;
#[path = "spool/retention.rs"]
mod retention;
#[path = "spool/wakes.rs"]
mod wakes;
