//! The commands: validate input, open the store, do one thing, print plain lines.

use std::io::Write;

use cairn::spool::{self, PartitionKey, RunFilter};
use cairn::{
    DedupKey, EnqueueOptions, Error, Event, FeedCursor, FeedEvent, Head, QueueName, RepairOutcome,
    RunId, RunInfo, RunState, Seq, SpaceId, SupersedeGroup,
};

use super::args::{Cli, Command, GraphFormat, RunAction, RunsAction};
use crate::error::CliError;
use crate::open::{open, target, IfMissing};

/// Runs one command. Input is validated before the store is opened, so bad input never creates
/// or touches a store.
pub(crate) async fn run(cli: Cli) -> Result<(), CliError> {
    let target = target(cli.database.as_deref())?;
    // Whether `--database` or `CAIRN_DATABASE` named the store (not the platform default).
    let named = cli.database.is_some();
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
        Command::Graph {
            space,
            format,
            last,
            before,
        } => {
            let space = SpaceId::new(space)?;
            if !(1..=crate::graph::MAX_LAST).contains(&last) {
                return Err(Error::invalid(
                    "graph --last",
                    format!(
                        "is {last}; it must be between 1 and {}",
                        crate::graph::MAX_LAST
                    ),
                )
                .into());
            }
            if before == Some(0) {
                return Err(Error::invalid("graph --before", "must be at least 1").into());
            }
            let store = open(&target, IfMissing::Refuse).await?;
            let dag =
                crate::graph::load(store.diagnostics().as_ref(), &space, before.map(Seq), last)
                    .await?;
            let text = match format {
                GraphFormat::Svg => crate::graph::svg(&dag),
                GraphFormat::Dot => crate::graph::dot(&dag),
            };
            out.write_all(text.as_bytes())?;
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
        Command::Enqueue {
            queue,
            from_file: Some(file),
            url,
            ..
        } => {
            let queue = QueueName::new(queue)?;
            super::enqueue_file::run(&target, named, &queue, &file, url, &mut out).await?;
        }
        Command::Enqueue {
            queue,
            key,
            key_parts,
            payload,
            supersede,
            priority,
            max_attempts,
            partition,
            url,
            from_file: None,
        } => {
            let queue = QueueName::new(queue)?;
            // clap requires both without --from-file.
            let (Some(key), Some(payload)) = (key, payload) else {
                return Err(
                    Error::invalid("enqueue", "give --key and --payload, or --from-file").into(),
                );
            };
            let (key_text, key_parts_text, supersede_text) =
                (key.clone(), key_parts.clone(), supersede.clone());
            let key = DedupKey::from_parts(std::iter::once(key).chain(key_parts))?;
            let options = EnqueueOptions {
                supersede_group: supersede
                    .map(|g| SupersedeGroup::from_parts([g]))
                    .transpose()?,
                max_attempts,
                priority,
                partition_key: partition.clone().map(PartitionKey::new).transpose()?,
                ..EnqueueOptions::default()
            };
            spool::check_payload("run payload", spool::MAX_RUN_PAYLOAD, payload.as_bytes())?;
            let url_given = url.is_some();
            if let Some(url) = url {
                let body = super::remote::EnqueueBody {
                    key_parts: std::iter::once(key_text).chain(key_parts_text).collect(),
                    payload: payload.clone(),
                    supersede_group: supersede_text.map(|g| vec![g]),
                    priority,
                    max_attempts,
                    partition_key: partition,
                };
                if let Some((id, created)) =
                    super::remote::enqueue(&url, queue.as_str(), &body).await?
                {
                    let how = if created { "created" } else { "existing" };
                    writeln!(out, "{id} {how}")?;
                    out.flush()?;
                    return Ok(());
                }
            }
            let payload = payload.into_bytes();
            let store = if url_given {
                // Nobody answered at --url: the run goes to a store only when one was named
                // and is there, never to a new store nobody reads.
                super::remote::fallback_store(&target, named).await?
            } else {
                open(&target, IfMissing::Create).await?
            };
            let enqueued = store
                .spool()
                .enqueue(&queue, &key, payload, options)
                .await?;
            let how = if enqueued.created {
                "created"
            } else {
                "existing"
            };
            writeln!(out, "{} {how}", enqueued.run_id)?;
        }
        Command::Runs {
            action:
                Some(RunsAction::Retry {
                    queue,
                    state,
                    reason_like,
                    by,
                }),
            ..
        } => {
            let queue = QueueName::new(queue)?;
            // clap allows `parked` only; parsed again so a new state cannot slip through.
            if RunState::parse(&state)? != RunState::Parked {
                return Err(Error::invalid("state", "only parked runs can be retried").into());
            }
            let by = operator(by)?;
            let store = open(&target, IfMissing::Refuse).await?;
            let done = spool::retry_parked_runs(
                store.spool().as_ref(),
                &queue,
                reason_like.as_deref(),
                &by,
            )
            .await?;
            writeln!(
                out,
                "retried={} unmatched={} skipped={} failed={}",
                done.retried, done.unmatched, done.skipped, done.failed
            )?;
            for run in &done.failed_runs {
                writeln!(out, "failed run {run}")?;
            }
        }
        Command::Runs {
            action: None,
            queue,
            state,
            limit,
        } => {
            let filter = RunFilter {
                queue: queue.map(QueueName::new).transpose()?,
                state: state.as_deref().map(RunState::parse).transpose()?,
                ..RunFilter::default()
            };
            if limit == 0 {
                return Err(Error::invalid("run limit", "must be at least 1").into());
            }
            let store = open(&target, IfMissing::Refuse).await?;
            let runs = store.spool().runs(&filter, limit).await?;
            for run in &runs {
                writeln!(
                    out,
                    "{} {} {} attempts={}",
                    run.run_id,
                    crate::shown::word(run.queue.as_str()),
                    run.state,
                    run.attempts
                )?;
            }
            // A paused queue's runs wait for `cairn queue resume`: say so beside the list (on
            // stderr, so the list itself stays one line per run). Best effort: a store whose
            // upgrade has not reached flow control yet has no paused queue.
            for (queue, flow) in store.spool().queue_flows().await.unwrap_or_default() {
                let shown = filter
                    .queue
                    .as_ref()
                    .map_or_else(|| runs.iter().any(|r| r.queue == queue), |q| *q == queue);
                if flow.paused && shown {
                    let queue = crate::shown::word(queue.as_str());
                    eprintln!(
                        "note: queue {queue} is paused; `cairn queue resume {queue}` resumes it"
                    );
                }
            }
        }
        Command::Run {
            action: RunAction::Show { id },
        } => {
            let id = RunId::parse(&id)?;
            let store = open(&target, IfMissing::Refuse).await?;
            let spool = store.spool();
            let run = spool
                .run(id)
                .await?
                .ok_or_else(|| Error::UnknownRun { run: id })?;
            print_run(&mut out, &run)?;
            let mut after = 0;
            loop {
                let page = spool.events(id, after, 100).await?;
                let Some(last) = page.last() else { break };
                after = last.seq;
                for e in &page {
                    writeln!(
                        out,
                        "event {} {} {}",
                        e.seq,
                        shown(e.event_id.as_bytes(), Column::Word),
                        shown(&e.payload, Column::Rest)
                    )?;
                }
            }
        }
        Command::Run {
            action: RunAction::Close { id },
        } => {
            let id = RunId::parse(&id)?;
            let store = open(&target, IfMissing::Refuse).await?;
            match store.spool().close_run(id).await? {
                cairn::spool::CloseOutcome::Closed => writeln!(out, "closed {id}")?,
                cairn::spool::CloseOutcome::AlreadyClosed => {
                    writeln!(out, "already closed {id}")?;
                }
            }
        }
        Command::Run {
            action: RunAction::Retry { id, by },
        } => {
            let id = RunId::parse(&id)?;
            let by = operator(by)?;
            let store = open(&target, IfMissing::Refuse).await?;
            let done = store.spool().retry_parked(id, &by).await?;
            writeln!(out, "retried {id} event {}", done.event_seq)?;
        }
        Command::Run {
            action: RunAction::Discard { id, by },
        } => {
            let id = RunId::parse(&id)?;
            let by = operator(by)?;
            let store = open(&target, IfMissing::Refuse).await?;
            let done = store.spool().discard(id, &by).await?;
            writeln!(out, "discarded {id} event {}", done.event_seq)?;
        }
        Command::Queue { action } => super::flow::queue(&target, action, &mut out).await?,
        Command::Schedule { action } => super::flow::schedule(&target, action, &mut out).await?,
        Command::Import {
            legacy,
            queue,
            quarantine,
        } => {
            super::import::run(&target, &legacy, queue, quarantine, &mut out).await?;
        }
        Command::Backfill(args) => {
            super::backfill::run_foreground(&target, &args, &mut out).await?;
        }
        Command::Doctor { json, set } => {
            let app = crate::doctor::app_set(set)?;
            crate::doctor::run(&target, app, json, &mut out).await?;
        }
        Command::Sync(args) => super::sync::run(*args, &mut out).await?,
        Command::Serve(args) => {
            drop(out);
            return crate::serve::run(&target, args).await;
        }
        Command::Migrate { set, action } => {
            super::migrate::run(&target, set, action, &mut out).await?;
        }
    }
    out.flush()?;
    Ok(())
}

/// Who asks for an operator's action: `--by`, else `cli:$USER` (`cli` without a usable
/// `USER`), checked before the store is opened.
fn operator(by: Option<String>) -> Result<String, CliError> {
    let by = by.unwrap_or_else(|| match std::env::var("USER") {
        Ok(user) if spool::check_operator(&format!("cli:{user}")).is_ok() => format!("cli:{user}"),
        _ => "cli".to_owned(),
    });
    spool::check_operator(&by)?;
    Ok(by)
}

/// `key value` lines: what `cairn run show` prints before the run's events.
fn print_run(out: &mut impl Write, run: &RunInfo) -> std::io::Result<()> {
    writeln!(out, "run {}", run.run_id)?;
    writeln!(out, "queue {}", run.queue)?;
    writeln!(out, "state {}", run.state)?;
    writeln!(out, "attempts {}/{}", run.attempts, run.max_attempts)?;
    writeln!(out, "priority {}", run.priority)?;
    writeln!(out, "payload_bytes {}", run.payload_bytes)?;
    writeln!(out, "enqueued_at {}", run.enqueued_at)?;
    if let Some(due) = run.due_at {
        writeln!(out, "due_at {due}")?;
    }
    if let Some(lease) = &run.lease {
        writeln!(out, "lease {} until {}", lease.consumer, lease.expires_at)?;
    }
    if run.cancel_requested {
        writeln!(out, "cancel_requested")?;
    }
    if let Some(reason) = &run.reason {
        writeln!(out, "reason {}", shown(reason.as_bytes(), Column::Rest))?;
    }
    for (name, value) in &run.facts {
        writeln!(out, "fact {name} {}", shown(value, Column::Rest))?;
    }
    writeln!(out, "stream {}", run.stream.as_str())?;
    writeln!(out, "events {}", run.events)
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
