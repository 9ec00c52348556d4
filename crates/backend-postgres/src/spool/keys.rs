//! The spool's shared keys and constants: the wake-up channel names, the supersede-group and
//! queue-flow lock keys every process of a store derives alike, and the compare-and-set retry bound with its
//! error. A leaf: it imports no sibling, so every step module may use it.

use cairn_core::spool::{QueueName, RunId, SupersedeGroup};
use cairn_core::{key64, Error};

use crate::config::SchemaName;

/// The key-derivation context of wake-up channel names (shared by every process of a store:
/// changing it makes two builds miss each other's enqueues).
const WAKE_CONTEXT: &str = "cairn 2026-11 postgres spool wake v1";

/// The key-derivation context of the supersede-group locks.
const GROUP_LOCK_CONTEXT: &str = "cairn 2026-11 postgres spool group lock v1";

/// The key-derivation context of the queue flow locks.
const FLOW_LOCK_CONTEXT: &str = "cairn 2026-11 postgres spool flow lock v1";

/// How often a read-decide-write transition is retried when the run changed between its read
/// and its compare-and-set write, before giving up with [`Error::Retryable`].
pub(crate) const CAS_ROUNDS: usize = 32;

/// The error of a transition whose run changed under all of its [`CAS_ROUNDS`].
pub(crate) fn changed_too_often(run: RunId) -> Error {
    Error::retryable(format!(
        "run {run} changed under {CAS_ROUNDS} attempts to update it; try again"
    ))
}

/// The `NOTIFY` channel of `queue` in the store namespace `schema`: a plain lowercase
/// identifier of 28 bytes (Postgres allows 63), whatever the queue name.
pub(crate) fn wake_channel(schema: &SchemaName, queue: &QueueName) -> String {
    let key = key64(
        WAKE_CONTEXT,
        &[schema.as_str().as_bytes(), queue.as_str().as_bytes()],
    );
    format!("cairn_spool_{:016x}", key as u64)
}

/// The advisory-lock key that serializes enqueues of one supersede group.
pub(crate) fn group_lock_key(
    schema: &SchemaName,
    queue: &QueueName,
    group: &SupersedeGroup,
) -> i64 {
    key64(
        GROUP_LOCK_CONTEXT,
        &[
            schema.as_str().as_bytes(),
            queue.as_str().as_bytes(),
            group.as_bytes(),
        ],
    )
}

/// The advisory-lock key that serializes the claims of one queue with a flow limit (every
/// process of a store derives it alike).
pub(crate) fn flow_lock_key(schema: &SchemaName, queue: &QueueName) -> i64 {
    key64(
        FLOW_LOCK_CONTEXT,
        &[schema.as_str().as_bytes(), queue.as_str().as_bytes()],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_channels_are_short_identifiers_per_schema_and_queue() {
        let a = SchemaName::parse("a").unwrap();
        let b = SchemaName::parse("b").unwrap();
        let q = QueueName::new("q".repeat(128)).unwrap();
        let ch = wake_channel(&a, &q);
        assert!(ch.len() <= 63 && ch.starts_with("cairn_spool_"));
        assert!(ch
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_'));
        assert_ne!(ch, wake_channel(&b, &q), "schemas never share a channel");
        assert_ne!(ch, wake_channel(&a, &QueueName::new("r").unwrap()));
        assert_eq!(
            ch,
            wake_channel(&a, &q),
            "every process derives the same name"
        );
    }

    #[test]
    fn wake_channel_and_group_lock_are_pinned() {
        // Every process and build of a store must derive the same names, or enqueues stop
        // waking consumers of another build.
        let public = SchemaName::parse("public").unwrap();
        let gate = QueueName::new("gate").unwrap();
        assert_eq!(wake_channel(&public, &gate), "cairn_spool_c26351f57aa5a75d");
        let group = SupersedeGroup::from_parts(["repo", "main"]).unwrap();
        assert_eq!(
            group_lock_key(&public, &gate, &group),
            5_378_766_527_718_916_394
        );
    }
}
