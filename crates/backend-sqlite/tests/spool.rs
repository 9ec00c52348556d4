//! The spool on SQLite: the conformance spool suite (every S case and the model property test)
//! plus the cases that need real OS processes or SQLite fault injection.

cairn_conformance::spool_suite!(cairn_sqlite::spool_testkit::spool_harness());
