//! Record framing: lines, the torn tail, and the per-record BLAKE3 checksum.
//!
//! A record is one line: a JSON object whose last member is `"sum"`, the lowercase hex BLAKE3
//! of the record as it would read without that member. Sealing appends the member to the
//! body's bytes; opening strips it and recomputes. Both work on bytes as written, so no JSON
//! canonicalization is involved and a reader never depends on how a serializer renders.

use super::RecordProblem;

/// Longest record line, in bytes without its newline (8 MiB: a 1 MiB payload escaped by
/// JSON, with room to spare).
pub const MAX_LEGACY_LINE: usize = 8 * 1024 * 1024;

/// What separates the body from the checksum: `,"sum":"`.
const SUM_OPEN: &[u8] = b",\"sum\":\"";
/// What closes the record: `"}`.
const SUM_CLOSE: &[u8] = b"\"}";
/// Hex digits of a BLAKE3 hash.
const SUM_HEX: usize = 64;

/// Seals a record: `body` is a JSON object without a `sum` member (`{"op":"run",…}`); the
/// result is the line to write, without its newline.
///
/// # Errors
/// [`RecordProblem::Malformed`] when `body` does not look like a non-empty JSON object.
pub fn seal_record(body: &str) -> Result<String, RecordProblem> {
    let b = body.as_bytes();
    if b.len() < 3 || b[0] != b'{' || b[b.len() - 1] != b'}' {
        return Err(RecordProblem::Malformed(
            "a record body is a non-empty JSON object".into(),
        ));
    }
    let sum = blake3::hash(b).to_hex();
    Ok(format!("{},\"sum\":\"{sum}\"}}", &body[..body.len() - 1]))
}

/// Opens a sealed line: checks its size, encoding and checksum, and returns the body (the
/// record without its `sum` member).
pub(super) fn open_record(line: &[u8]) -> Result<String, RecordProblem> {
    if line.len() > MAX_LEGACY_LINE {
        return Err(RecordProblem::TooLong { len: line.len() });
    }
    let tail = SUM_OPEN.len() + SUM_HEX + SUM_CLOSE.len();
    if line.len() < tail + 2 || line[0] != b'{' || !line.ends_with(SUM_CLOSE) {
        return Err(RecordProblem::NoChecksum);
    }
    let split = line.len() - tail;
    let (head, rest) = line.split_at(split);
    if !rest.starts_with(SUM_OPEN) {
        return Err(RecordProblem::NoChecksum);
    }
    let hex = &rest[SUM_OPEN.len()..SUM_OPEN.len() + SUM_HEX];
    if !hex.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(RecordProblem::NoChecksum);
    }
    let mut body = Vec::with_capacity(head.len() + 1);
    body.extend_from_slice(head);
    body.push(b'}');
    if blake3::hash(&body).to_hex().as_bytes() != hex {
        return Err(RecordProblem::Checksum);
    }
    String::from_utf8(body).map_err(|_| RecordProblem::NotUtf8)
}

/// One complete (newline-terminated) line of a file.
#[derive(Clone, Copy, Debug)]
pub(super) struct Line<'a> {
    /// 1-based line number.
    pub number: u64,
    /// Byte offset of its first byte.
    pub offset: u64,
    /// Its bytes, without the newline.
    pub bytes: &'a [u8],
}

/// A file cut into complete lines, plus what follows the last newline.
#[derive(Debug)]
pub(super) struct Lines<'a> {
    pub lines: Vec<Line<'a>>,
    /// The bytes after the last newline, when there are any: a record whose write did not
    /// finish (a torn tail), with its line number and offset.
    pub tail: Option<Line<'a>>,
    /// The bytes up to and including the last newline: what an import reads.
    pub accepted: &'a [u8],
}

/// Cuts `data` at newlines. A record counts only once its newline is written, so bytes after
/// the last newline are never a record.
pub(super) fn lines(data: &[u8]) -> Lines<'_> {
    let mut lines = Vec::new();
    let mut start = 0usize;
    let mut number = 1u64;
    for (i, b) in data.iter().enumerate() {
        if *b == b'\n' {
            lines.push(Line {
                number,
                offset: start as u64,
                bytes: &data[start..i],
            });
            number += 1;
            start = i + 1;
        }
    }
    let tail = (start < data.len()).then(|| Line {
        number,
        offset: start as u64,
        bytes: &data[start..],
    });
    Lines {
        lines,
        tail,
        accepted: &data[..start],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_and_open_round_trip() {
        let body = r#"{"op":"drain","gen":0,"seq":1,"through":0}"#;
        let line = seal_record(body).unwrap();
        assert!(line.starts_with(r#"{"op":"drain","gen":0,"seq":1,"through":0,"sum":""#));
        assert_eq!(open_record(line.as_bytes()).unwrap(), body);
        // Golden: the checksum is BLAKE3 over the body's bytes, pinned.
        assert_eq!(
            &line[line.len() - 66..line.len() - 2],
            blake3::hash(body.as_bytes()).to_hex().as_str()
        );
    }

    #[test]
    fn damage_is_detected() {
        let line = seal_record(r#"{"a":1}"#).unwrap().into_bytes();
        for i in 0..line.len() {
            let mut bad = line.clone();
            bad[i] ^= 0x01;
            assert!(open_record(&bad).is_err(), "a flip at byte {i} is caught");
        }
        assert_eq!(open_record(b"{\"a\":1}"), Err(RecordProblem::NoChecksum));
        let upper = String::from_utf8(line.clone()).unwrap().to_uppercase();
        assert!(open_record(upper.as_bytes()).is_err());
        assert!(seal_record("[]").is_err());
        let huge = vec![b'x'; MAX_LEGACY_LINE + 1];
        assert_eq!(
            open_record(&huge),
            Err(RecordProblem::TooLong {
                len: MAX_LEGACY_LINE + 1
            })
        );
    }

    #[test]
    fn lines_keep_the_unterminated_tail_apart() {
        let l = lines(b"a\nbb\nc");
        assert_eq!(l.lines.len(), 2);
        assert_eq!((l.lines[1].number, l.lines[1].offset), (2, 2));
        let tail = l.tail.unwrap();
        assert_eq!((tail.number, tail.offset, tail.bytes), (3, 5, &b"c"[..]));
        assert_eq!(l.accepted, b"a\nbb\n");
        let whole = lines(b"a\n");
        assert!(whole.tail.is_none());
        assert!(lines(b"").lines.is_empty());
    }
}
