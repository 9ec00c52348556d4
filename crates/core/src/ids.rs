//! The content addresses of the epoch log: [`EventId`] and [`EpochId`], 32 bytes each.
//!
//! A leaf module: the error type names [`EpochId`] ([`crate::Error::HashMismatch`]), so this
//! module imports nothing of the crate. The ids are computed and read back from bytes or hex in
//! `encoding.rs`.

use std::fmt;

macro_rules! hash_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub [u8; 32]);

        impl $name {
            /// The raw 32 bytes.
            pub fn as_bytes(&self) -> &[u8; 32] {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&hex::encode(self.0))
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), &hex::encode(self.0)[..12])
            }
        }
    };
}

hash_id!(
    /// Content address of an event: BLAKE3 over its canonical encoding (see [`crate::event_id`]).
    EventId
);
hash_id!(
    /// Content address of an epoch: BLAKE3 over (space, sorted parents, event ids); see
    /// [`crate::epoch_id`].
    EpochId
);
