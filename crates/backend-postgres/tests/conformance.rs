//! The conformance suite, including the multi-node cases, on PostgreSQL.
cairn_conformance::suite!(
    cairn_postgres::testkit::harness(),
    migrations,
    additivity,
    multi_node
);
