//! The paced head-cache backfill: one pass over every space, repairing stale caches gently,
//! and the completion marker a finished pass leaves (see `cairn backfill` and `cairn serve`'s
//! `[backfill]`).
//!
//! [`run_pass`] visits every space at most `spaces_per_second` a second and never takes more
//! than half of the store's time; [`probe`] is the read-only look at one space's cache it
//! starts with (what `cairn doctor` reports). The pass's test pacing is not part of this
//! surface:
//!
//! ```compile_fail
//! use cairn::backfill::SimulatedPacer;
//! ```

pub use cairn_core::backfill::{
    error_code, marker_present, marker_space, probe, run_pass, BackfillConfig, BackfillObserver,
    BackfillOutcome, BackfillProgress, Pacer, Quiet, TokioPacer, MARKER_KIND, MARKER_SPACE,
};
