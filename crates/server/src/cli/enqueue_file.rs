//! `cairn enqueue --queue Q --from-file FILE`: every item of a JSON-lines file in one atomic
//! `Spool::enqueue_many` (or one `POST /v1/queues/{queue}/runs/batch` with `--url`).
//!
//! Each non-blank line is one item in the shape of the HTTP enqueue body, read by the server's
//! own item parser (`EnqueueRequest::from_json` and `into_enqueue`) from the line's text, so a
//! line the CLI takes is an item the server takes (a field written twice refused alike). The whole file is read and checked before any store or server
//! is reached: a line that does not read ends the command with `line N: reason` and nothing
//! written. Reading is bounded: at most [`MAX_LINE`] bytes a line, [`MAX_ENQUEUE_BATCH`]
//! items and [`MAX_ENQUEUE_BATCH_BYTES`] of payloads, each checked as the file is read, so a
//! hostile file costs at most one line beyond what a valid batch holds.

use std::io::{BufRead, Read, Write};
use std::path::Path;

use cairn::spool::{self, EnqueueItem, MAX_ENQUEUE_BATCH, MAX_ENQUEUE_BATCH_BYTES};
use cairn::{DatabaseUrl, Error, QueueName};
use serde_json::value::RawValue;

use crate::error::CliError;
use crate::open::{open, IfMissing};
use crate::serve::json::EnqueueRequest;

/// Longest line of the file, in bytes: a run payload of 1 MiB whose every byte JSON escapes
/// as `\uXXXX` takes 6 MiB, its key and options a few KiB more.
pub(crate) const MAX_LINE: usize = 8 * 1024 * 1024;

/// The file's items, read and checked.
struct Batch {
    /// The items, in file order.
    items: Vec<EnqueueItem>,
    /// The line each item came from (from 1).
    lines: Vec<usize>,
    /// The items as read, for the server (kept only with `--url`).
    values: Vec<Box<RawValue>>,
}

fn at_line(line: usize, reason: impl std::fmt::Display) -> CliError {
    CliError::Input(format!("line {line}: {reason}; nothing was written"))
}

/// Reads every item of `reader`; `keep_values` keeps the JSON of each for the server.
fn read_items(mut reader: impl BufRead, keep_values: bool) -> Result<Batch, CliError> {
    let mut batch = Batch {
        items: Vec::new(),
        lines: Vec::new(),
        values: Vec::new(),
    };
    let mut payload_bytes = 0usize;
    let mut buf = Vec::new();
    let mut line = 0;
    loop {
        buf.clear();
        let n = (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| {
                CliError::Input(format!("cannot read the file: {e}; nothing was written"))
            })?;
        if n == 0 {
            break;
        }
        line += 1;
        if buf.len() > MAX_LINE && !buf.ends_with(b"\n") {
            return Err(at_line(line, format!("is longer than {MAX_LINE} bytes")));
        }
        let text = buf.trim_ascii();
        if text.is_empty() {
            continue;
        }
        if batch.items.len() == MAX_ENQUEUE_BATCH {
            return Err(at_line(
                line,
                format!(
                    "the file holds more than {MAX_ENQUEUE_BATCH} items, the most one atomic \
                     enqueue takes: split it into several files"
                ),
            ));
        }
        let value: Box<RawValue> = serde_json::from_slice(text)
            .map_err(|e| at_line(line, format!("not a JSON value: {e}")))?;
        let item = EnqueueRequest::from_json(value.get())
            .and_then(EnqueueRequest::into_enqueue)
            .map_err(|e| at_line(line, e.report()))?;
        payload_bytes = payload_bytes.saturating_add(item.payload.len());
        if payload_bytes > MAX_ENQUEUE_BATCH_BYTES {
            return Err(at_line(
                line,
                format!(
                    "the payloads so far exceed {MAX_ENQUEUE_BATCH_BYTES} bytes, the most one \
                     atomic enqueue takes: split the file"
                ),
            ));
        }
        if keep_values {
            batch.values.push(value);
        }
        batch.items.push(item);
        batch.lines.push(line);
    }
    // Each line was checked as it was read; the batch check is the spool's own, run again.
    if let Err(e) = spool::check_enqueue_batch(&batch.items) {
        return Err(match e {
            Error::InvalidBatchItem { index, error } => at_line(batch.lines[index], error.report()),
            e => CliError::Input(format!("{}; nothing was written", e.report())),
        });
    }
    Ok(batch)
}

/// Reads `file` (`-`: stdin).
fn read_file(file: &Path, keep_values: bool) -> Result<Batch, CliError> {
    if file == Path::new("-") {
        return read_items(std::io::stdin().lock(), keep_values);
    }
    let f = std::fs::File::open(file).map_err(|source| Error::Io {
        path: file.display().to_string(),
        source,
    })?;
    read_items(std::io::BufReader::new(f), keep_values)
}

/// Runs `cairn enqueue --queue Q --from-file FILE [--url URL]`: prints `<run id> created` or
/// `<run id> existing` per item, in file order, then `items=N created=N existing=N`.
pub(crate) async fn run(
    target: &DatabaseUrl,
    named: bool,
    queue: &QueueName,
    file: &Path,
    url: Option<String>,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let Batch { items, values, .. } = read_file(file, url.is_some())?;
    let mut results = None;
    if !items.is_empty() {
        if let Some(url) = &url {
            results = super::remote::enqueue_batch(url, queue.as_str(), &values).await?;
        }
    }
    let results = match results {
        Some(r) => r,
        None if items.is_empty() => Vec::new(),
        None => {
            let store = if url.is_some() {
                // Nobody answered at --url: as for one run, only a named store that exists.
                super::remote::fallback_store(target, named).await?
            } else {
                open(target, IfMissing::Create).await?
            };
            store
                .spool()
                .enqueue_many(queue, items)
                .await?
                .into_iter()
                .map(|e| (e.run_id.to_string(), e.created))
                .collect()
        }
    };
    let created = results.iter().filter(|(_, c)| *c).count();
    for (id, c) in &results {
        writeln!(out, "{id} {}", if *c { "created" } else { "existing" })?;
    }
    writeln!(
        out,
        "items={} created={created} existing={}",
        results.len(),
        results.len() - created
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Batch, CliError> {
        read_items(text.as_bytes(), true)
    }

    fn refusal(text: &str) -> String {
        match read(text) {
            Err(CliError::Input(msg)) => msg,
            Err(e) => panic!("not an input error: {e}"),
            Ok(b) => panic!("read {} items", b.items.len()),
        }
    }

    #[test]
    fn lines_are_items_and_blank_lines_are_skipped() {
        let b = read(
            "{\"key\":\"a\",\"payload\":\"1\"}\n\n  \n{\"key_parts\":[\"b\",\"c\"],\"payload_b64\":\"/wA=\",\"priority\":3}\r\n{\"key\":\"a\",\"payload\":\"x\"}",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(b.lines, [1, 4, 5]);
        assert_eq!(b.items[1].payload, [0xff, 0x00]);
        assert_eq!(b.items[1].options.priority, 3);
        assert_eq!(b.items[0].key, b.items[2].key);
        assert_eq!(b.values.len(), 3);
        assert_eq!(
            read("\n\n").unwrap_or_else(|e| panic!("{e}")).items.len(),
            0
        );
    }

    #[test]
    fn a_bad_line_is_named_by_its_number() {
        let good = "{\"key\":\"a\",\"payload\":\"1\"}\n\n";
        for (bad, says) in [
            ("not json", "not a JSON value"),
            ("{\"key\":\"a\"}", "run payload"),
            ("{\"key\":\"a\",\"payload\":5}", "invalid type"),
            (
                "{\"key\":\"a\",\"payload\":\"p\",\"max_attempts\":0}",
                "attempts",
            ),
            ("{\"key_parts\":[],\"payload\":\"p\"}", "dedup key"),
            (
                "{\"key\":\"a\",\"key\":\"b\",\"payload\":\"p\"}",
                "duplicate field `key`",
            ),
            (
                "{\"key\":\"a\",\"payload\":\"p\",\"nope\":1}",
                "unknown field `nope`",
            ),
        ] {
            let msg = refusal(&format!("{good}{bad}\n{good}"));
            assert!(msg.starts_with("line 3: "), "{bad}: {msg}");
            assert!(msg.contains(says), "{bad}: {msg}");
            assert!(msg.ends_with("nothing was written"), "{msg}");
        }
        let big = format!("{{\"key\":\"a\",\"payload\":\"{}\"}}", "x".repeat(MAX_LINE));
        assert!(
            refusal(&big).contains("longer than"),
            "a line past the limit"
        );
    }

    #[test]
    fn a_file_past_the_batch_limits_is_refused_as_it_is_read() {
        let line = |i: usize| format!("{{\"key\":\"k{i}\",\"payload\":\"\"}}\n");
        let most: String = (0..MAX_ENQUEUE_BATCH).map(line).collect();
        assert_eq!(
            read(&most).unwrap_or_else(|e| panic!("{e}")).items.len(),
            MAX_ENQUEUE_BATCH
        );
        let msg = refusal(&format!("{most}\n{}", line(0)));
        assert!(
            msg.starts_with(&format!("line {}: ", MAX_ENQUEUE_BATCH + 2)),
            "{msg}"
        );
        assert!(msg.contains("more than 10000 items"), "{msg}");
        let mib = "x".repeat(spool::MAX_RUN_PAYLOAD);
        let heavy: String = (0..=MAX_ENQUEUE_BATCH_BYTES / spool::MAX_RUN_PAYLOAD)
            .map(|i| format!("{{\"key\":\"k{i}\",\"payload\":\"{mib}\"}}\n"))
            .collect();
        let msg = match read_items(heavy.as_bytes(), false) {
            Err(CliError::Input(msg)) => msg,
            _ => panic!("64 MiB of payloads and one more are refused"),
        };
        assert!(msg.starts_with("line 65: "), "{msg}");
        assert!(msg.contains("payloads so far exceed"), "{msg}");
    }
}
