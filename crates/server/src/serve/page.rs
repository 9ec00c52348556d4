//! Pages of reads under a byte budget: the feed (`GET /v1/spaces/{space}/events`) and a run's
//! events (`GET /v1/runs/{id}/events`).
//!
//! A request's `limit` counts events, and an event can be large: an epoch holds up to 10,000
//! events and a run event up to 1 MiB, and JSON can write a stored byte as six (`\u0001`). So
//! a page is also bounded in bytes (`limits.max_page_bytes`), twice: the store reads no more
//! than that many stored bytes ([`cairn::EpochStore::events_since_within`],
//! [`cairn::spool::Spool::events_within`]), and the JSON is built item by item under the same
//! budget. In both the first item always goes in (a reader must be able to get past it), and an
//! item that would take the page past the budget ends it early, with the cursor (or the last
//! seq) pointing just before that item. A request thus holds at most about twice the budget,
//! plus its first item.

use axum::http::StatusCode;
use serde::Serialize;
use serde_json::value::RawValue;

use super::error::ApiError;

/// A JSON array built under a byte budget.
pub(crate) struct JsonArray {
    buf: Vec<u8>,
    budget: usize,
    items: usize,
}

impl JsonArray {
    /// An empty array that takes items until it holds `budget` bytes.
    pub(crate) fn new(budget: usize) -> Self {
        Self {
            buf: vec![b'['],
            budget,
            items: 0,
        }
    }

    /// Adds `unit` (one or more serialized items, comma-separated, without brackets) unless the
    /// array already holds an item and `unit` would take it past the budget; whether it did.
    pub(crate) fn offer(&mut self, unit: &[u8]) -> bool {
        let comma = usize::from(self.items > 0);
        if self.items > 0 && self.buf.len() + comma + unit.len() + 1 > self.budget {
            return false;
        }
        if comma == 1 {
            self.buf.push(b',');
        }
        self.buf.extend_from_slice(unit);
        self.items += 1;
        true
    }

    /// The array, closed.
    pub(crate) fn close(mut self) -> Result<Box<RawValue>, ApiError> {
        self.buf.push(b']');
        let text = String::from_utf8(self.buf).map_err(|e| internal(&e))?;
        RawValue::from_string(text).map_err(|e| internal(&e))
    }
}

/// `items` serialized one after another, comma-separated, without brackets.
pub(crate) fn unit<T: Serialize>(items: impl IntoIterator<Item = T>) -> Result<Vec<u8>, ApiError> {
    let mut out = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, &item).map_err(|e| internal(&e))?;
    }
    Ok(out)
}

fn internal(e: &dyn std::fmt::Display) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        format!("building a page: {e}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_item_goes_in_however_large_and_the_next_only_within_the_budget() {
        let mut a = JsonArray::new(10);
        assert!(a.offer(b"\"0123456789abc\""), "the first item always fits");
        assert!(!a.offer(b"1"), "the array is already past its budget");
        assert_eq!(a.close().unwrap().get(), r#"["0123456789abc"]"#);

        // `[1,22,333]` is exactly 10 bytes: the third item fits, a fourth does not.
        let mut a = JsonArray::new(10);
        assert!(a.offer(b"1"));
        assert!(a.offer(b"22"));
        assert!(a.offer(b"333"), "`[1,22,333]` is 10 bytes");
        assert!(!a.offer(b"4"), "`[1,22,333,4]` would be 12");
        let text = a.close().unwrap();
        assert_eq!(text.get(), "[1,22,333]");
        assert_eq!(text.get().len(), 10);
    }

    #[test]
    fn a_unit_is_its_items_comma_separated() {
        assert_eq!(unit([1, 2, 3]).unwrap(), b"1,2,3");
        assert_eq!(unit(["a"]).unwrap(), b"\"a\"");
        assert_eq!(unit(Vec::<u8>::new()).unwrap(), b"");
    }
}
