//! The conformance suite against the SQLite backend.

cairn_conformance::suite!(cairn_sqlite::testkit::harness(), migrations, additivity);
