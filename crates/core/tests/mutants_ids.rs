//! Tests written to kill mutants cargo-mutants found alive in `spool/ids.rs` (see
//! docs/RELIABILITY.md): name limits are inclusive, and every run id has the UUIDv7 layout with
//! its time field saturated, whatever its random bits and its timestamp.

use cairn_core::spool::{
    ConsumerId, FactName, QueueName, Timestamp, MAX_CONSUMER_LEN, MAX_FACT_NAME, MAX_QUEUE_LEN,
};
use cairn_core::RunId;

/// A name of exactly the limit is accepted; one byte more is not.
#[test]
fn a_name_of_exactly_the_limit_is_accepted() {
    assert!(QueueName::new("q".repeat(MAX_QUEUE_LEN)).is_ok());
    assert!(QueueName::new("q".repeat(MAX_QUEUE_LEN + 1)).is_err());
    assert!(ConsumerId::new("c".repeat(MAX_CONSUMER_LEN)).is_ok());
    assert!(FactName::new("f".repeat(MAX_FACT_NAME)).is_ok());
}

/// The time field of a run id: the first 48 bits.
fn millis(id: RunId) -> u64 {
    let b = id.as_bytes();
    u64::from_be_bytes([0, 0, b[0], b[1], b[2], b[3], b[4], b[5]])
}

/// Version 7 and the RFC 4122 variant hold for every id, not only for lucky random bits: 256
/// ids leave a mask that lets a random bit through a chance of 2^-256.
#[test]
fn every_run_id_has_the_version_and_variant_bits() {
    let now = Timestamp::from_unix_micros(1_800_000_000_000_000);
    for _ in 0..256 {
        let id = RunId::generate(now);
        let b = id.as_bytes();
        assert_eq!(b[6] >> 4, 7, "UUID version 7: {id}");
        assert_eq!(b[8] >> 6, 0b10, "RFC 4122 variant: {id}");
    }
}

/// A timestamp beyond the 48-bit millisecond range saturates to the largest time field; one
/// before the epoch to zero.
#[test]
fn the_time_field_saturates_at_both_ends() {
    let max = (1u64 << 48) - 1;
    assert_eq!(
        millis(RunId::generate(Timestamp::from_unix_micros(i64::MAX))),
        max
    );
    let last = i64::try_from(max).unwrap() * 1000;
    assert_eq!(
        millis(RunId::generate(Timestamp::from_unix_micros(last))),
        max
    );
    assert_eq!(
        millis(RunId::generate(Timestamp::from_unix_micros(-5_000_000))),
        0
    );
}
