//! The bytes rule: a byte field `x` travels as `x` (a JSON string holding the bytes as UTF-8
//! text) or as `x_b64` (standard base64 with padding), never both.

use base64::Engine as _;

/// Reads a byte field given as text (`text`) or base64 (`b64`): exactly one must be present.
pub(crate) fn bytes_in(
    what: &'static str,
    text: Option<String>,
    b64: Option<String>,
) -> cairn::Result<Vec<u8>> {
    match (text, b64) {
        (Some(t), None) => Ok(t.into_bytes()),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b.as_bytes())
            .map_err(|_| cairn::Error::invalid(what, "the `_b64` form is not valid base64")),
        (None, None) => Err(cairn::Error::invalid(
            what,
            "is missing: give it as text or as `_b64` base64",
        )),
        (Some(_), Some(_)) => Err(cairn::Error::invalid(
            what,
            "is given twice: give either the text form or the `_b64` form",
        )),
    }
}

/// An optional byte field: absent when neither form is given.
pub(crate) fn opt_bytes_in(
    what: &'static str,
    text: Option<String>,
    b64: Option<String>,
) -> cairn::Result<Option<Vec<u8>>> {
    if text.is_none() && b64.is_none() {
        return Ok(None);
    }
    bytes_in(what, text, b64).map(Some)
}

/// Splits bytes into the response's text form or base64 form.
pub(crate) fn bytes_out(bytes: &[u8]) -> (Option<String>, Option<String>) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (Some(s.to_owned()), None),
        Err(_) => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
        ),
    }
}

pub(super) fn utf8_parts(parts: Option<Vec<Vec<u8>>>) -> Option<Vec<String>> {
    parts?
        .into_iter()
        .map(|p| String::from_utf8(p).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_travel_as_text_or_base64_never_both() {
        assert_eq!(
            bytes_in("p", Some("hé".into()), None).unwrap(),
            "hé".as_bytes()
        );
        assert_eq!(
            bytes_in("p", None, Some("/wA=".into())).unwrap(),
            vec![0xff, 0x00]
        );
        assert!(bytes_in("p", None, None).is_err());
        assert!(bytes_in("p", Some("a".into()), Some("YQ==".into())).is_err());
        assert!(bytes_in("p", None, Some("not base64!".into())).is_err());
        assert_eq!(bytes_out(b"text"), (Some("text".into()), None));
        assert_eq!(bytes_out(&[0xff, 0x00]), (None, Some("/wA=".into())));
        assert_eq!(opt_bytes_in("k", None, None).unwrap(), None);
    }
}
