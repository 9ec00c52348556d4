//! The checks every text name of the spool shares (a leaf: `checks.rs` and `names.rs` both
//! use it).

use crate::error::{Error, Result};

/// Refuses `s` as `what` when it is empty, longer than `max` bytes or holds a control
/// character.
pub(super) fn check_text(what: &'static str, max: usize, s: &str) -> Result<()> {
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
