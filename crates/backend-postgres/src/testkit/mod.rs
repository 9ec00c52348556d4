//! Test support (feature `testkit`): test-server provisioning (DESIGN §7), the conformance
//! harness with the legacy (cache-unaware) writer, and the head-lookup benchmark API.
//!
//! Nothing here is for services: it exists for this crate's tests, the conformance suite,
//! the server's tests and `cargo xtask bench`.

mod bench;
mod harness;
mod pgbouncer;
mod provision;
mod tls;

pub use bench::{HeadLookup, LookupClock};
pub use harness::{harness, PgHarness};
pub use pgbouncer::{
    pgbouncer_harness, pgbouncer_store_url, pgbouncer_url, pgbouncer_url_apart, PGBOUNCER_POOL_SIZE,
};
pub use provision::{start_docker_postgres, test_server_url, TEST_URL_ENV};
pub use tls::{TlsCluster, CERT_USER};
