//! Revision checksums: the value a store's lineage records per revision, and its two forms.

use crate::error::MigrateError;

/// How a revision's checksum — the value its lineage entry holds — is computed.
///
/// Why two forms: a lineage entry is one 64-hex-digit checksum per revision, and older builds
/// compare the entries of the revisions they know with their own. cairn's first releases
/// hashed both dialects together ([`Revision::combined_checksum`]); every store and every
/// older build holds those values for `0001_epoch_log` and `0002_spool`, so those two keep the
/// combined form for good (a different value would make the previous build refuse a store this
/// build migrated, instead of finding it *ahead*), and their text is fixed files shipped with
/// the build, pinned by a golden test. Every other revision — cairn's from `0003` on and every
/// revision of an application's set — uses [`ChecksumForm::PerDialect`], so that a change in
/// one dialect's text never refuses the other dialect's stores. An older build never computes
/// a checksum for a revision it does not know, so adding the new form strands no one.
///
/// [`Revision::combined_checksum`]: crate::Revision::combined_checksum
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum ChecksumForm {
    /// [`Revision::combined_checksum`]: both dialects' text in one value (format v1).
    ///
    /// [`Revision::combined_checksum`]: crate::Revision::combined_checksum
    Combined,
    /// [`Revision::dialect_checksum`]: the store's dialect's text only (format v2).
    ///
    /// [`Revision::dialect_checksum`]: crate::Revision::dialect_checksum
    PerDialect,
}

/// Checksum of a revision's content.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Checksum(pub [u8; 32]);

impl Checksum {
    /// Lowercase hex.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses the lowercase hex form.
    ///
    /// # Errors
    /// [`MigrateError::Corrupt`] when `s` is not 64 hex digits.
    pub fn from_hex(s: &str) -> Result<Self, MigrateError> {
        let bad = || MigrateError::Corrupt {
            detail: format!("bad checksum {s:?} in the lineage"),
        };
        // Every byte a hex digit: `u8::from_str_radix` alone would take a leading `+`.
        if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        for (i, pair) in s.as_bytes().chunks(2).enumerate() {
            out[i] = (hex_value(pair[0]) << 4) | hex_value(pair[1]);
        }
        Ok(Self(out))
    }
}

/// The value of one ASCII hex digit (the caller has checked it is one).
fn hex_value(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        _ => digit - b'A' + 10,
    }
}

impl std::fmt::Debug for Checksum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Checksum({})", &self.to_hex()[..12])
    }
}

/// One entry of a stored lineage.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct LineageEntry {
    /// Revision id.
    pub revision: String,
    /// Checksum of that revision's content in the build that recorded the lineage.
    pub checksum: Checksum,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the fuzzer: `u8::from_str_radix` takes a leading `+`, so `"+f"` read as `0f`.
    #[test]
    fn a_checksum_is_sixty_four_hex_digits_and_nothing_else() {
        let sum = Checksum::from_hex(&"ab".repeat(32)).unwrap();
        assert_eq!(sum.to_hex(), "ab".repeat(32));
        assert_eq!(Checksum::from_hex(&"AB".repeat(32)).unwrap(), sum);
        for bad in [
            format!("+f{}", "0".repeat(62)),
            format!("-0{}", "0".repeat(62)),
            format!("g0{}", "0".repeat(62)),
            "0".repeat(63),
            format!("{}é", "0".repeat(62)),
        ] {
            assert!(
                matches!(Checksum::from_hex(&bad), Err(MigrateError::Corrupt { .. })),
                "{bad:?} accepted"
            );
        }
    }
}
