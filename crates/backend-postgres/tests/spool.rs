//! The spool on PostgreSQL: every S case and the model property test of the conformance suite.
cairn_conformance::spool_suite!(cairn_postgres::spool::testkit::spool_harness());
