//! Run identity: the [`DedupKey`] a submission is deduplicated by and the [`SupersedeGroup`]
//! that newer submissions replace older queued ones in, both built from parts.
//!
//! Parts are joined in netstring form — `<decimal length>:<bytes>,` per part — so the encoding
//! is prefix-free: two different part lists never encode to the same bytes (a `\0`-joined key
//! would let `["a\0b"]` and `["a", "b"]` collide), and a key stays readable when its parts are
//! text (`4:gate,11:refs/heads/x,3:abc,`).

use std::fmt;

use crate::error::{Error, Result};

/// Largest dedup key, in bytes (after encoding parts).
pub const MAX_DEDUP_KEY: usize = 1024;
/// Largest supersede group, in bytes (after encoding parts).
pub const MAX_SUPERSEDE_GROUP: usize = 1024;

/// Encodes `parts` as netstrings, refusing an empty list or a result over `max` bytes.
fn encode_parts<I, P>(what: &'static str, max: usize, parts: I) -> Result<Vec<u8>>
where
    I: IntoIterator<Item = P>,
    P: AsRef<[u8]>,
{
    let mut out = Vec::new();
    let mut count = 0usize;
    for part in parts {
        let part = part.as_ref();
        out.extend_from_slice(part.len().to_string().as_bytes());
        out.push(b':');
        out.extend_from_slice(part);
        out.push(b',');
        count += 1;
        if out.len() > max {
            return Err(Error::invalid(
                what,
                format!("its encoded parts exceed the limit of {max} bytes"),
            ));
        }
    }
    if count == 0 {
        return Err(Error::invalid(what, "needs at least one part"));
    }
    Ok(out)
}

/// Decodes a netstring list; `None` when `bytes` is not one (e.g. a key made by `from_bytes`).
fn decode_parts(bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut parts = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let colon = rest.iter().position(|b| *b == b':')?;
        let digits = &rest[..colon];
        // Canonical lengths only: no sign, no leading zero (except "0"), so decoding is the
        // exact inverse of encoding.
        if digits.is_empty()
            || !digits.iter().all(u8::is_ascii_digit)
            || (digits.len() > 1 && digits[0] == b'0')
        {
            return None;
        }
        let len: usize = std::str::from_utf8(digits).ok()?.parse().ok()?;
        // `len` comes from the input: compare it with what is left before adding to it, so a
        // length near `usize::MAX` cannot overflow.
        let after_colon = &rest[colon + 1..];
        if len >= after_colon.len() || after_colon[len] != b',' {
            return None;
        }
        parts.push(after_colon[..len].to_vec());
        rest = &after_colon[len + 1..];
    }
    (!parts.is_empty()).then_some(parts)
}

fn write_bytes(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    match std::str::from_utf8(bytes) {
        Ok(s) if !s.starts_with("0x") && s.chars().all(|c| !c.is_control()) => f.write_str(s),
        _ => write!(f, "0x{}", hex::encode(bytes)),
    }
}

macro_rules! part_key {
    ($(#[$doc:meta])* $name:ident, $what:literal, $max:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Vec<u8>);

        impl $name {
            /// Builds the value from parts, each length-prefixed (netstring form), so no two
            /// part lists give the same value.
            ///
            /// # Errors
            /// [`Error::InvalidInput`] for an empty part list or an encoding over
            #[doc = concat!("[`", stringify!($max), "`] bytes.")]
            pub fn from_parts<I, P>(parts: I) -> Result<Self>
            where
                I: IntoIterator<Item = P>,
                P: AsRef<[u8]>,
            {
                encode_parts($what, $max, parts).map(Self)
            }

            /// Wraps bytes as they are (a key chosen by the caller, or one read back from a
            /// store). Equal bytes are the same value, whichever constructor made them.
            ///
            /// # Errors
            /// [`Error::InvalidInput`] when `bytes` is empty or longer than
            #[doc = concat!("[`", stringify!($max), "`].")]
            pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Result<Self> {
                let bytes = bytes.into();
                if bytes.is_empty() {
                    return Err(Error::invalid($what, "must not be empty"));
                }
                if bytes.len() > $max {
                    return Err(Error::invalid(
                        $what,
                        format!("is {} bytes; the limit is {}", bytes.len(), $max),
                    ));
                }
                Ok(Self(bytes))
            }

            /// The stored bytes.
            pub fn as_bytes(&self) -> &[u8] {
                &self.0
            }

            /// The parts this value was built from, when its bytes are a part encoding.
            pub fn parts(&self) -> Option<Vec<Vec<u8>>> {
                decode_parts(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "("))?;
                write_bytes(f, &self.0)?;
                write!(f, ")")
            }
        }

        impl fmt::Display for $name {
            /// UTF-8 values print as text, others as `0x…` hex.
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write_bytes(f, &self.0)
            }
        }
    };
}

part_key!(
    /// The identity of a run within its queue: enqueueing the same `(queue, key)` again returns
    /// the existing run. At most [`MAX_DEDUP_KEY`] bytes, never empty.
    ///
    /// ```
    /// # use cairn::DedupKey;
    /// let key = DedupKey::from_parts(["gate", "refs/heads/main", "3f2a"]).unwrap();
    /// assert_eq!(key.as_bytes(), b"4:gate,15:refs/heads/main,4:3f2a,");
    /// ```
    DedupKey,
    "dedup key",
    MAX_DEDUP_KEY
);

part_key!(
    /// A supersede group (e.g. `["repo", "branch"]`): enqueueing a new run in a group turns the
    /// group's older *queued* runs in the same queue into `superseded`. At most
    /// [`MAX_SUPERSEDE_GROUP`] bytes, never empty.
    SupersedeGroup,
    "supersede group",
    MAX_SUPERSEDE_GROUP
);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn golden_encoding() {
        let k = DedupKey::from_parts(["gate", "", "a,b:c"]).unwrap();
        assert_eq!(k.as_bytes(), b"4:gate,0:,5:a,b:c,");
        assert_eq!(
            k.parts(),
            Some(vec![b"gate".to_vec(), Vec::new(), b"a,b:c".to_vec()])
        );
        assert_eq!(k.to_string(), "4:gate,0:,5:a,b:c,");
    }

    #[test]
    fn nul_joined_lookalikes_do_not_collide() {
        let a = DedupKey::from_parts(["a\0b"]).unwrap();
        let b = DedupKey::from_parts(["a", "b"]).unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn bounds_are_enforced() {
        assert!(matches!(
            DedupKey::from_parts(Vec::<&[u8]>::new()),
            Err(Error::InvalidInput { .. })
        ));
        assert!(matches!(
            DedupKey::from_bytes(Vec::new()),
            Err(Error::InvalidInput { .. })
        ));
        assert!(matches!(
            DedupKey::from_bytes(vec![1u8; MAX_DEDUP_KEY + 1]),
            Err(Error::InvalidInput { .. })
        ));
        assert!(DedupKey::from_bytes(vec![1u8; MAX_DEDUP_KEY]).is_ok());
        assert!(matches!(
            SupersedeGroup::from_parts([vec![0u8; MAX_SUPERSEDE_GROUP]]),
            Err(Error::InvalidInput { .. })
        ));
    }

    #[test]
    fn non_netstring_bytes_have_no_parts() {
        for bytes in [&b"gate"[..], b"1:ab,", b"01:a,", b"1:a", b"+1:a,", b"1:a,x"] {
            assert_eq!(
                DedupKey::from_bytes(bytes).unwrap().parts(),
                None,
                "{bytes:?}"
            );
        }
    }

    #[test]
    fn binary_keys_print_as_hex() {
        let k = DedupKey::from_bytes(vec![0u8, 0xff]).unwrap();
        assert_eq!(k.to_string(), "0x00ff");
    }

    fn part_lists() -> impl Strategy<Value = Vec<Vec<u8>>> {
        // Small alphabets containing the separator bytes make near-collisions likely.
        let byte = prop_oneof![
            Just(b':'),
            Just(b','),
            Just(b'0'),
            Just(b'1'),
            Just(0u8),
            any::<u8>()
        ];
        prop::collection::vec(prop::collection::vec(byte, 0..6), 1..5)
    }

    proptest! {
        #[test]
        fn distinct_part_lists_give_distinct_keys(a in part_lists(), b in part_lists()) {
            let ka = DedupKey::from_parts(&a).unwrap();
            let kb = DedupKey::from_parts(&b).unwrap();
            prop_assert_eq!(a == b, ka == kb);
        }

        #[test]
        fn parts_round_trip(a in part_lists()) {
            let k = DedupKey::from_parts(&a).unwrap();
            prop_assert_eq!(k.parts(), Some(a));
        }
    }
}
