//! Record framing: lines, the torn tail, and the per-record BLAKE3 checksum.
//!
//! A record is one line: a JSON object whose last member is `"sum"`, the lowercase hex BLAKE3
//! of the record as it would read without that member. Sealing appends the member to the
//! body's bytes; opening strips it and recomputes. Both work on bytes as written, so no JSON
//! canonicalization is involved and a reader never depends on how a serializer renders.

use super::error::RecordProblem;
use super::format::MAX_LEGACY_LINE;

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

/// One line as read from a file: a record (with its newline) or the file's tail (without).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct RawLine {
    /// 1-based line number.
    pub number: u64,
    /// Byte offset of its first byte.
    pub offset: u64,
    /// Its length without the newline. For a line longer than [`MAX_LEGACY_LINE`] read with
    /// `skip_long` false, how much of it was read before the reader stopped.
    pub len: u64,
    /// Whether its newline was read; a line without one is what follows the last newline.
    pub terminated: bool,
    /// Its bytes without the newline, or `None` when it is longer than [`MAX_LEGACY_LINE`]
    /// (they were not kept: memory stays bounded by the limit).
    pub bytes: Option<Vec<u8>>,
}

impl RawLine {
    /// Opens the line as a record (its size, encoding and checksum).
    pub(super) fn open(&self) -> Result<String, RecordProblem> {
        match &self.bytes {
            Some(b) => open_record(b),
            None => Err(RecordProblem::TooLong {
                len: usize::try_from(self.len).unwrap_or(usize::MAX),
            }),
        }
    }
}

/// What a reader accepted of a file: the bytes up to and including its last newline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Accepted {
    /// How many bytes.
    pub len: u64,
    /// Their BLAKE3 hash.
    pub hash: blake3::Hash,
}

/// Cuts a stream into lines, holding at most one line of at most [`MAX_LEGACY_LINE`] bytes
/// in memory. A record counts only once its newline is written, so bytes after the last
/// newline are never a record: they come back as a line with `terminated` false.
pub(super) struct LineReader<R> {
    inner: R,
    number: u64,
    offset: u64,
    /// Every byte consumed so far.
    running: blake3::Hasher,
    /// The bytes up to the last newline.
    accepted: blake3::Hasher,
    accepted_len: u64,
}

impl<R: std::io::BufRead> LineReader<R> {
    pub(super) fn new(inner: R) -> Self {
        Self {
            inner,
            number: 1,
            offset: 0,
            running: blake3::Hasher::new(),
            accepted: blake3::Hasher::new(),
            accepted_len: 0,
        }
    }

    /// Reads the next line, `None` at the end of the stream.
    ///
    /// A line longer than [`MAX_LEGACY_LINE`] comes back with `bytes: None`. With
    /// `skip_long` false it comes back as soon as the limit is passed and the reader stops
    /// there (the caller refuses the file; the rest of the line is never read); with
    /// `skip_long` true the rest of it is read and discarded up to its newline, so the lines
    /// after it can be read.
    pub(super) fn next_line(&mut self, skip_long: bool) -> std::io::Result<Option<RawLine>> {
        let mut buf: Option<Vec<u8>> = Some(Vec::new());
        let mut len: u64 = 0;
        loop {
            let avail = match self.inner.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if avail.is_empty() {
                if len == 0 {
                    return Ok(None);
                }
                return Ok(Some(self.line(len, false, buf)));
            }
            let newline = avail.iter().position(|b| *b == b'\n');
            let take = newline.unwrap_or(avail.len());
            let chunk = &avail[..take];
            len += take as u64;
            self.running.update(chunk);
            if len > MAX_LEGACY_LINE as u64 {
                buf = None;
                if !skip_long {
                    self.inner.consume(take);
                    return Ok(Some(self.line(len, false, None)));
                }
            } else if let Some(b) = buf.as_mut() {
                // Grow by doubling, but never past the limit: a line's buffer holds at most
                // MAX_LEGACY_LINE bytes.
                let need = b.len() + chunk.len();
                if need > b.capacity() {
                    let cap = need.max(b.capacity() * 2).min(MAX_LEGACY_LINE);
                    b.reserve_exact(cap - b.len());
                }
                b.extend_from_slice(chunk);
            }
            match newline {
                Some(_) => {
                    self.running.update(b"\n");
                    self.inner.consume(take + 1);
                    self.accepted = self.running.clone();
                    let line = self.line(len, true, buf);
                    self.accepted_len = self.offset;
                    return Ok(Some(line));
                }
                None => self.inner.consume(take),
            }
        }
    }

    fn line(&mut self, len: u64, terminated: bool, bytes: Option<Vec<u8>>) -> RawLine {
        let line = RawLine {
            number: self.number,
            offset: self.offset,
            len,
            terminated,
            bytes,
        };
        self.number += 1;
        self.offset = self.offset.saturating_add(len + u64::from(terminated));
        line
    }

    /// What was accepted: the bytes up to the last newline read.
    pub(super) fn accepted(&self) -> Accepted {
        Accepted {
            len: self.accepted_len,
            hash: self.accepted.finalize(),
        }
    }
}

/// Reads every line of `data` (a test and fuzzing aid).
#[cfg(test)]
pub(super) fn lines(data: &[u8]) -> (Vec<RawLine>, Accepted) {
    let mut r = LineReader::new(data);
    let mut out = Vec::new();
    while let Some(l) = r.next_line(true).unwrap() {
        out.push(l);
    }
    (out, r.accepted())
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
        let (l, acc) = lines(b"a\nbb\nc");
        assert_eq!(l.len(), 3);
        assert_eq!((l[1].number, l[1].offset, l[1].terminated), (2, 2, true));
        let tail = &l[2];
        assert_eq!(
            (
                tail.number,
                tail.offset,
                tail.terminated,
                tail.bytes.as_deref()
            ),
            (3, 5, false, Some(&b"c"[..]))
        );
        assert_eq!(acc.len, 5);
        assert_eq!(acc.hash, blake3::hash(b"a\nbb\n"));
        let (whole, acc) = lines(b"a\n");
        assert!(whole.iter().all(|l| l.terminated));
        assert_eq!(acc.len, 2);
        assert!(lines(b"").0.is_empty());
    }

    #[test]
    fn a_line_over_the_limit_is_never_held_in_memory() {
        let mut data = vec![b'x'; MAX_LEGACY_LINE + 10];
        data.push(b'\n');
        data.extend_from_slice(b"ok\n");
        // Skipping: the long line comes back without its bytes, the next one intact.
        let (l, acc) = lines(&data);
        assert_eq!(l.len(), 2);
        assert_eq!(
            (l[0].len, l[0].bytes.is_none()),
            (MAX_LEGACY_LINE as u64 + 10, true)
        );
        assert_eq!(
            l[0].open(),
            Err(RecordProblem::TooLong {
                len: MAX_LEGACY_LINE + 10
            })
        );
        assert_eq!(
            (l[1].offset, l[1].bytes.as_deref()),
            (MAX_LEGACY_LINE as u64 + 11, Some(&b"ok"[..]))
        );
        assert_eq!(acc.len, data.len() as u64);
        // Not skipping: the reader stops just past the limit.
        let mut r = LineReader::new(std::io::BufReader::with_capacity(4096, &data[..]));
        let first = r.next_line(false).unwrap().unwrap();
        assert!(first.bytes.is_none());
        assert!(first.len > MAX_LEGACY_LINE as u64 && first.len <= MAX_LEGACY_LINE as u64 + 4096);
    }
}
