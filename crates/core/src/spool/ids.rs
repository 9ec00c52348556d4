//! The names and ids of the spool: queues, consumers, facts, run events, runs and leases.

use std::fmt;

use super::clock::Timestamp;
use crate::error::{Error, Result};

/// Largest queue name, in bytes.
pub const MAX_QUEUE_LEN: usize = 128;
/// Largest consumer id, in bytes.
pub const MAX_CONSUMER_LEN: usize = 256;
/// Largest fact name, in bytes.
pub const MAX_FACT_NAME: usize = 128;
/// Largest run event id, in bytes.
pub const MAX_RUN_EVENT_ID: usize = 256;

fn check_text(what: &'static str, max: usize, s: &str) -> Result<()> {
    if s.is_empty() {
        return Err(Error::invalid(what, "must not be empty"));
    }
    if s.len() > max {
        return Err(Error::invalid(
            what,
            format!("is {} bytes; the limit is {max}", s.len()),
        ));
    }
    if s.chars().any(char::is_control) {
        return Err(Error::invalid(what, "must not contain control characters"));
    }
    Ok(())
}

macro_rules! text_name {
    ($(#[$doc:meta])* $name:ident, $what:literal, $max:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
        pub struct $name(String);

        impl $name {
            /// Validates and wraps the name.
            ///
            /// # Errors
            /// [`Error::InvalidInput`] when it is empty, holds a control character or is longer
            #[doc = concat!("than [`", stringify!($max), "`] bytes.")]
            pub fn new(s: impl Into<String>) -> Result<Self> {
                let s = s.into();
                check_text($what, $max, &s)?;
                Ok(Self(s))
            }

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
    QueueName,
    "queue name",
    MAX_QUEUE_LEN
);
text_name!(
    /// Who holds a lease (`host/pid/worker`), recorded on the run for operators: printable text
    /// of at most [`MAX_CONSUMER_LEN`] bytes.
    ConsumerId,
    "consumer id",
    MAX_CONSUMER_LEN
);
text_name!(
    /// The name of a run fact (`stage.build`, `review`, `merged`): printable text of at most
    /// [`MAX_FACT_NAME`] bytes.
    FactName,
    "fact name",
    MAX_FACT_NAME
);

/// The caller-chosen id of a run event; re-appending an id the run still holds is a no-op.
/// Non-empty bytes, at most [`MAX_RUN_EVENT_ID`]. Ids starting with `cairn:`
/// ([`OPERATOR_EVENT_PREFIX`](super::OPERATOR_EVENT_PREFIX)) are the spool's own: a
/// producer's [`Spool::append_event`](super::Spool::append_event) refuses them.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct RunEventId(Vec<u8>);

impl RunEventId {
    /// Validates and wraps an event id.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when it is empty or longer than [`MAX_RUN_EVENT_ID`].
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self> {
        let bytes = bytes.into();
        if bytes.is_empty() {
            return Err(Error::invalid("run event id", "must not be empty"));
        }
        if bytes.len() > MAX_RUN_EVENT_ID {
            return Err(Error::invalid(
                "run event id",
                format!("is {} bytes; the limit is {MAX_RUN_EVENT_ID}", bytes.len()),
            ));
        }
        Ok(Self(bytes))
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

macro_rules! id128 {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub [u8; 16]);

        impl $name {
            /// The raw 16 bytes (what backends store).
            pub fn as_bytes(&self) -> &[u8; 16] {
                &self.0
            }

            /// Reads the value from exactly 16 bytes.
            ///
            /// # Errors
            /// [`Error::InvalidInput`] when `bytes` is not 16 bytes long.
            pub fn from_slice(bytes: &[u8]) -> Result<Self> {
                let arr: [u8; 16] = bytes.try_into().map_err(|_| {
                    Error::invalid($what, format!("must be 16 bytes, got {}", bytes.len()))
                })?;
                Ok(Self(arr))
            }

            /// Parses 32 hex digits, with or without the UUID hyphens (`8-4-4-4-12`).
            ///
            /// # Errors
            /// [`Error::InvalidInput`] for anything else.
            pub fn parse(s: &str) -> Result<Self> {
                let hyphens: Vec<usize> = s.match_indices('-').map(|(i, _)| i).collect();
                if !hyphens.is_empty() && hyphens != [8, 13, 18, 23] {
                    return Err(Error::invalid($what, "hyphens must be in UUID positions"));
                }
                let plain: String = s.chars().filter(|c| *c != '-').collect();
                let bytes = hex::decode(&plain)
                    .map_err(|_| Error::invalid($what, "must be 32 hex digits"))?;
                Self::from_slice(&bytes)
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
    RunId,
    "run id"
);
id128!(
    /// The proof of holding a run's lease, random per claim. Every claim issues a new token;
    /// the previous holder's token is then stale.
    LeaseToken,
    "lease token"
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_id_layout_and_round_trip() {
        let now = Timestamp::from_unix_micros(1_800_000_000_123_456);
        let id = RunId::generate(now);
        let ms = u64::from_be_bytes([0, 0, id.0[0], id.0[1], id.0[2], id.0[3], id.0[4], id.0[5]]);
        assert_eq!(ms, 1_800_000_000_123);
        assert_eq!(id.0[6] >> 4, 7, "UUID version 7");
        assert_eq!(id.0[8] >> 6, 0b10, "RFC 4122 variant");
        let s = id.to_string();
        assert_eq!(s.len(), 36);
        assert_eq!(RunId::parse(&s).unwrap(), id);
        assert_eq!(RunId::parse(&s.replace('-', "")).unwrap(), id);
        assert_ne!(RunId::generate(now), id);
        assert!(RunId::parse("0123").is_err());
        assert!(RunId::parse("0123456-78-9abc-def0-123456789abcdef").is_err());
    }

    #[test]
    fn names_are_validated() {
        assert!(QueueName::new("gate").is_ok());
        for bad in ["", "a\nb", &"q".repeat(MAX_QUEUE_LEN + 1)] {
            assert!(matches!(
                QueueName::new(bad),
                Err(Error::InvalidInput { .. })
            ));
        }
        assert!(RunEventId::new(Vec::new()).is_err());
        assert!(RunEventId::new(vec![0u8; MAX_RUN_EVENT_ID + 1]).is_err());
        assert!(FactName::new("merged").is_ok());
    }
}
