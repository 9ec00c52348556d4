//! The conformance suite against the in-memory reference backend (the worked example of a
//! harness).

cairn_conformance::suite!(async { cairn_conformance::MemoryHarness::new() });
cairn_conformance::spool_suite!(async { cairn_conformance::MemoryHarness::new() });

mod sync_memory_memory {
    cairn_conformance::sync_suite!(cairn_conformance::sync::memory_pair());
}
