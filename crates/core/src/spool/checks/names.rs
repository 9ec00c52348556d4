//! The checks of the names an operator reads in the CLI and the dashboard: a schedule's name
//! and a run's partition key. Besides [`check_text`]'s rules (not empty, no control
//! character, bounded), they refuse the Unicode bidirectional controls, which reorder how the
//! text around them is displayed, so one name could show as another (`report\u{202E}txt.exe`);
//! a schedule name also refuses leading and trailing whitespace, which hides in a listing.
//!
//! Values an earlier build stored were only checked by [`check_text`]: backends read them back
//! with the lenient `from_stored` constructors, so such a value still reads (and can still be
//! shown and removed), while anything new goes through `new`.

use super::super::ids::{PartitionKey, ScheduleName, MAX_PARTITION_KEY, MAX_SCHEDULE_NAME};
use super::text::check_text;
use crate::error::{Error, Result};

/// Whether `c` is a Unicode bidirectional control: U+061C (Arabic letter mark), U+200E and
/// U+200F (left-to-right and right-to-left marks), U+202A–U+202E (embeddings, overrides and
/// their pop) and U+2066–U+2069 (isolates and their pop).
pub fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
    )
}

/// Refuses a bidirectional control in `s`, naming the first one's code point.
fn check_no_bidi(what: &'static str, s: &str) -> Result<()> {
    match s.chars().find(|c| is_bidi_control(*c)) {
        Some(c) => Err(Error::invalid(
            what,
            format!(
                "must not contain a bidirectional control character (found U+{:04X}): it \
                 changes how the text around it is displayed",
                u32::from(c)
            ),
        )),
        None => Ok(()),
    }
}

impl ScheduleName {
    /// Validates and wraps a schedule name.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when it is empty, longer than [`MAX_SCHEDULE_NAME`] bytes,
    /// holds a control character or a bidirectional control ([`is_bidi_control`]), or starts
    /// or ends with whitespace.
    pub fn new(s: impl Into<String>) -> Result<Self> {
        let s = s.into();
        check_text("schedule name", MAX_SCHEDULE_NAME, &s)?;
        check_no_bidi("schedule name", &s)?;
        if s.starts_with(char::is_whitespace) || s.ends_with(char::is_whitespace) {
            return Err(Error::invalid(
                "schedule name",
                "must not start or end with whitespace",
            ));
        }
        Ok(Self(s))
    }

    /// Wraps a name read back from a store, with the checks every build made when it was
    /// stored (not empty, no control character, bounded), not [`ScheduleName::new`]'s later
    /// ones: a name an earlier build stored still reads, and can be shown and removed. For
    /// backends reading their rows (and a name given to find or remove a stored schedule);
    /// never for a name to store.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when it is empty, longer than [`MAX_SCHEDULE_NAME`] bytes or
    /// holds a control character.
    #[doc(hidden)]
    pub fn from_stored(s: impl Into<String>) -> Result<Self> {
        let s = s.into();
        check_text("schedule name", MAX_SCHEDULE_NAME, &s)?;
        Ok(Self(s))
    }
}

impl PartitionKey {
    /// Validates and wraps a partition key.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when it is empty, longer than [`MAX_PARTITION_KEY`] bytes, or
    /// holds a control character or a bidirectional control ([`is_bidi_control`]).
    pub fn new(s: impl Into<String>) -> Result<Self> {
        let s = s.into();
        check_text("partition key", MAX_PARTITION_KEY, &s)?;
        check_no_bidi("partition key", &s)?;
        Ok(Self(s))
    }

    /// Wraps a key read back from a store, with the checks every build made when it was
    /// stored (not empty, no control character, bounded), not [`PartitionKey::new`]'s later
    /// ones: a key an earlier build stored still reads. For backends reading their rows; never
    /// for a key to store.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when it is empty, longer than [`MAX_PARTITION_KEY`] bytes or
    /// holds a control character.
    #[doc(hidden)]
    pub fn from_stored(s: impl Into<String>) -> Result<Self> {
        let s = s.into();
        check_text("partition key", MAX_PARTITION_KEY, &s)?;
        Ok(Self(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(r: Result<impl std::fmt::Debug>) -> String {
        match r {
            Err(e @ Error::InvalidInput { .. }) => e.to_string(),
            other => panic!("expected InvalidInput, got {other:?}"),
        }
    }

    const BIDI: [char; 12] = [
        '\u{061C}', '\u{200E}', '\u{200F}', '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}',
        '\u{202E}', '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}',
    ];

    #[test]
    fn every_bidi_control_is_refused_in_schedule_names_and_partition_keys() {
        for c in BIDI {
            assert!(is_bidi_control(c), "{c:?}");
            let text = format!("report{c}txt");
            let e = refused(ScheduleName::new(text.clone()));
            assert!(e.contains("schedule name"), "{e}");
            assert!(
                e.contains(&format!("U+{:04X}", u32::from(c))) && e.contains("bidirectional"),
                "{e}"
            );
            let e = refused(PartitionKey::new(text.clone()));
            assert!(
                e.contains("partition key") && e.contains("bidirectional"),
                "{e}"
            );
            // At either end too.
            refused(ScheduleName::new(format!("{c}x")));
            refused(PartitionKey::new(format!("x{c}")));
        }
        // Neighbours of the ranges are not controls: other format characters and letters.
        for c in [
            '\u{061B}', '\u{200D}', '\u{2029}', '\u{202F}', '\u{2065}', '\u{206A}',
        ] {
            assert!(!is_bidi_control(c), "{c:?}");
        }
        // Right-to-left text itself is fine.
        assert!(ScheduleName::new("تقرير-يومي").is_ok());
        assert!(PartitionKey::new("שלום").is_ok());
    }

    #[test]
    fn schedule_names_refuse_leading_and_trailing_whitespace() {
        for bad in [
            " nightly",
            "nightly ",
            "\u{00A0}nightly",
            "nightly\u{3000}",
            " ",
        ] {
            let e = refused(ScheduleName::new(bad));
            assert!(
                e.contains("schedule name") && e.contains("whitespace"),
                "{bad:?}: {e}"
            );
        }
        assert_eq!(
            ScheduleName::new("nightly report").unwrap().as_str(),
            "nightly report",
            "inner whitespace is fine"
        );
        // A partition key keeps its spaces: only display-reordering characters are refused.
        assert!(PartitionKey::new(" tenant ").is_ok());
    }

    #[test]
    fn the_earlier_rules_still_hold() {
        for bad in ["", "a\nb", "a\u{7f}b"] {
            refused(ScheduleName::new(bad));
            refused(PartitionKey::new(bad));
            refused(ScheduleName::from_stored(bad));
            refused(PartitionKey::from_stored(bad));
        }
        refused(ScheduleName::new("s".repeat(MAX_SCHEDULE_NAME + 1)));
        refused(PartitionKey::new("p".repeat(MAX_PARTITION_KEY + 1)));
        assert!(ScheduleName::new("s".repeat(MAX_SCHEDULE_NAME)).is_ok());
        assert!(PartitionKey::new("p".repeat(MAX_PARTITION_KEY)).is_ok());
    }

    #[test]
    fn values_an_earlier_build_stored_still_read() {
        for stored in ["a\u{202E}b", " padded ", "\u{2066}x\u{2069}"] {
            assert_eq!(ScheduleName::from_stored(stored).unwrap().as_str(), stored);
            assert_eq!(PartitionKey::from_stored(stored).unwrap().as_str(), stored);
        }
    }
}
