//! Tests written to kill mutants cargo-mutants found alive in `spool/transition.rs` (see
//! docs/RELIABILITY.md): the reason a run parked on its last retryable nack records.

use cairn_core::spool::{exhausted_park_reason, expired_park_reason, MAX_REASON_LEN};

#[test]
fn the_exhausted_reason_names_the_attempts_and_the_last_error() {
    assert_eq!(
        exhausted_park_reason(3, "connection refused"),
        "attempts exhausted after 3; last error: connection refused"
    );
    assert_eq!(
        expired_park_reason(2),
        "the lease of attempt 2 expired and no attempts are left"
    );
}

#[test]
fn the_exhausted_reason_is_clipped_to_the_reason_limit_at_a_char_boundary() {
    let long = "é".repeat(MAX_REASON_LEN);
    let reason = exhausted_park_reason(7, &long);
    assert!(reason.len() <= MAX_REASON_LEN);
    assert!(reason.len() > MAX_REASON_LEN - 2, "clipped, not dropped");
    assert!(reason.starts_with("attempts exhausted after 7; last error: é"));
}
