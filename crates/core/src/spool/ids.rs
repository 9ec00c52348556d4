//! The names and ids of the spool: queues, consumers, facts, run events, runs and leases.
//!
//! A leaf module (it imports only [`Timestamp`]'s): the error type names run ids and fact
//! names, so this module must not import it. Their checked constructors (`new`, `parse`,
//! `from_slice`), which refuse bad input with [`crate::Error::InvalidInput`], are with the
//! spool's other input checks in `checks.rs`.

use std::fmt;

use super::timestamp::Timestamp;

/// Largest queue name, in bytes.
pub const MAX_QUEUE_LEN: usize = 128;
/// Largest consumer id, in bytes.
pub const MAX_CONSUMER_LEN: usize = 256;
/// Largest fact name, in bytes.
pub const MAX_FACT_NAME: usize = 128;
/// Largest run event id, in bytes.
pub const MAX_RUN_EVENT_ID: usize = 256;
/// Largest partition key, in bytes.
pub const MAX_PARTITION_KEY: usize = 256;
/// Largest schedule name, in bytes.
pub const MAX_SCHEDULE_NAME: usize = 128;

macro_rules! text_name {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
        pub struct $name(pub(super) String);

        impl $name {
            /// The name.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

text_name!(
    /// A named stream of work (`telemetry`, `gate`): printable text of at most
    /// [`MAX_QUEUE_LEN`] bytes.
    QueueName
);
text_name!(
    /// Who holds a lease (`host/pid/worker`), recorded on the run for operators: printable text
    /// of at most [`MAX_CONSUMER_LEN`] bytes.
    ConsumerId
);
text_name!(
    /// A run's partition within its queue (one tenant, one repository), given at enqueue: a
    /// queue's per-partition limit ([`QueueLimits::per_partition`](super::QueueLimits)) caps
    /// how many runs sharing it are claimed at once. Printable text of at most
    /// [`MAX_PARTITION_KEY`] bytes, without bidirectional controls
    /// ([`is_bidi_control`](super::is_bidi_control)).
    PartitionKey
);
text_name!(
    /// The name of a stored schedule ([`Schedule`](super::Schedule)): printable text of at
    /// most [`MAX_SCHEDULE_NAME`] bytes, without bidirectional controls
    /// ([`is_bidi_control`](super::is_bidi_control)) and without leading or trailing
    /// whitespace.
    ScheduleName
);
text_name!(
    /// The name of a run fact (`stage.build`, `review`, `merged`): printable text of at most
    /// [`MAX_FACT_NAME`] bytes.
    FactName
);

/// The caller-chosen id of a run event; re-appending an id the run still holds is a no-op.
/// Non-empty bytes, at most [`MAX_RUN_EVENT_ID`]. Ids starting with `cairn:`
/// ([`OPERATOR_EVENT_PREFIX`](super::OPERATOR_EVENT_PREFIX)) are the spool's own: a
/// producer's [`Spool::append_event`](super::Spool::append_event) refuses them.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct RunEventId(pub(super) Vec<u8>);

impl RunEventId {
    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

macro_rules! id128 {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub [u8; 16]);

        impl $name {
            /// The raw 16 bytes (what backends store).
            pub fn as_bytes(&self) -> &[u8; 16] {
                &self.0
            }
        }

        impl fmt::Display for $name {
            /// The hyphenated UUID form.
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let h = hex::encode(self.0);
                write!(f, "{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self)
            }
        }
    };
}

id128!(
    /// A run's id: 128 bits in the UUIDv7 layout (48-bit Unix milliseconds from the spool's
    /// clock, then random bits), so ids are unique across stores, roughly time-ordered for index
    /// locality, and any imported UUID can be kept as is.
    ///
    /// Backends create ids with [`RunId::generate`] *before* writing, so an enqueue is one
    /// upsert that returns the stored id: the run was created iff that id is the generated one.
    RunId
);
id128!(
    /// The proof of holding a run's lease, random per claim. Every claim issues a new token;
    /// the previous holder's token is then stale.
    LeaseToken
);

impl RunId {
    /// A new id for a run enqueued at `now`.
    pub fn generate(now: Timestamp) -> Self {
        let mut b: [u8; 16] = rand::random::<u128>().to_be_bytes();
        let ms = now.as_unix_millis().clamp(0, (1 << 48) - 1) as u64;
        b[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
        b[6] = (b[6] & 0x0f) | 0x70;
        b[8] = (b[8] & 0x3f) | 0x80;
        Self(b)
    }
}

impl LeaseToken {
    /// A new random token.
    pub fn generate() -> Self {
        Self(rand::random::<u128>().to_be_bytes())
    }
}

/// A W3C trace context `traceparent` (`00-<trace id>-<parent id>-<flags>`: 32 and 16 lowercase
/// hex digits, neither all zeros, and 2 hex digits of flags), stored with a run so that the
/// consumer that handles it continues the enqueuer's trace. Built by
/// [`TraceParent::parse`](TraceParent::parse).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct TraceParent(pub(super) String);

impl TraceParent {
    /// The header's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The trace id: 32 lowercase hex digits.
    pub fn trace_id(&self) -> &str {
        &self.0[3..35]
    }

    /// The id of the enqueuer's span: 16 lowercase hex digits.
    pub fn parent_id(&self) -> &str {
        &self.0[36..52]
    }

    /// Whether the enqueuer's trace is sampled (flag bit 0).
    pub fn sampled(&self) -> bool {
        u8::from_str_radix(&self.0[53..55], 16).is_ok_and(|f| f & 1 == 1)
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
