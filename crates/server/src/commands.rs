//! The commands: validate input, open the store, do one thing, print plain lines.

use std::io::Write;

use cairn::{Error, Event, FeedCursor, FeedEvent, Head, RepairOutcome, SpaceId};

use crate::cli::{Cli, Command};
use crate::error::CliError;
use crate::open::{open, target, IfMissing};

/// Runs one command. Input is validated before the store is opened, so bad input never creates
/// or touches a store.
pub(crate) async fn run(cli: Cli) -> Result<(), CliError> {
    let target = target(cli.database.as_deref())?;
    let mut out = std::io::stdout().lock();
    match cli.command {
        Command::Append {
            space,
            kind,
            payload,
            key,
        } => {
            let space = SpaceId::new(space)?;
            let event = Event {
                kind,
                key: key.map(String::into_bytes),
                payload: payload.into_bytes(),
            };
            let events = vec![event];
            Event::validate_batch(&events)?;
            let store = open(&target, IfMissing::Create).await?;
            let appended = store.epochs().append(&space, events).await?;
            writeln!(out, "{} {}", appended.seq, appended.id)?;
        }
        Command::Heads { space } => {
            let space = SpaceId::new(space)?;
            let store = open(&target, IfMissing::Refuse).await?;
            print_heads(&mut out, &store.epochs().heads(&space).await?)?;
        }
        Command::Feed {
            space,
            cursor,
            limit,
        } => {
            let space = SpaceId::new(space)?;
            if limit == 0 {
                return Err(Error::invalid("feed limit", "must be at least 1").into());
            }
            let cursor = cursor.as_deref().map(FeedCursor::parse).transpose()?;
            if let Some(c) = &cursor {
                c.resume_after(&space)?;
            }
            let store = open(&target, IfMissing::Refuse).await?;
            let page = store
                .epochs()
                .events_since(&space, cursor.as_ref(), limit)
                .await?;
            for event in &page.events {
                print_event(&mut out, event)?;
            }
            writeln!(out, "next {}", page.next)?;
        }
        Command::Repair { space } => {
            let space = SpaceId::new(space)?;
            let store = open(&target, IfMissing::Refuse).await?;
            match store.epochs().repair_heads(&space).await? {
                RepairOutcome::Unchanged => writeln!(out, "unchanged")?,
                RepairOutcome::Rewritten { before, after } => {
                    writeln!(
                        out,
                        "rewritten: the cache held {} row(s), it now holds the {} head(s):",
                        before.len(),
                        after.len()
                    )?;
                    print_heads(&mut out, &after)?;
                }
            }
        }
        Command::Migrate { set, action } => {
            crate::migrate::run(&target, set, action, &mut out).await?;
        }
    }
    out.flush()?;
    Ok(())
}

fn print_heads(out: &mut impl Write, heads: &[Head]) -> std::io::Result<()> {
    heads
        .iter()
        .try_for_each(|h| writeln!(out, "{} {}", h.seq, h.id))
}

/// `<seq> <epoch id> <position in epoch> <kind> <key or -> <payload>`.
fn print_event(out: &mut impl Write, e: &FeedEvent) -> std::io::Result<()> {
    let key = e
        .event
        .key
        .as_deref()
        .map_or_else(|| "-".to_owned(), |k| shown(k, Column::Word));
    writeln!(
        out,
        "{} {} {} {} {} {}",
        e.seq,
        e.epoch,
        e.epoch_seq,
        shown(e.event.kind.as_bytes(), Column::Word),
        key,
        shown(&e.event.payload, Column::Rest)
    )
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Column {
    /// A column followed by others: it must not contain whitespace.
    Word,
    /// The last column: spaces are fine.
    Rest,
}

/// Bytes as text when that is unambiguous on one line, else as `0x` + hex.
fn shown(bytes: &[u8], column: Column) -> String {
    let text = std::str::from_utf8(bytes).ok().filter(|s| {
        let word_ok = column == Column::Rest || !(s.is_empty() || *s == "-");
        word_ok
            && !s.starts_with("0x")
            && !s.chars().any(|c| {
                c.is_control() || (column == Column::Word && c.is_whitespace()) || c == '\u{2028}'
            })
    });
    match text {
        Some(s) => s.to_owned(),
        None => format!("0x{}", hex::encode(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_show_as_text_only_when_unambiguous() {
        assert_eq!(shown(b"hello world", Column::Rest), "hello world");
        assert_eq!(shown(b"", Column::Rest), "");
        assert_eq!(shown(b"kv.put", Column::Word), "kv.put");
        assert_eq!(shown(b"a b", Column::Word), "0x612062");
        assert_eq!(shown(b"-", Column::Word), "0x2d");
        assert_eq!(shown(b"", Column::Word), "0x");
        assert_eq!(shown(b"0x12", Column::Rest), "0x30783132");
        assert_eq!(
            shown(b"line\nbreak", Column::Rest),
            "0x6c696e650a627265616b"
        );
        assert_eq!(shown(&[0xff, 0x00], Column::Rest), "0xff00");
    }
}
