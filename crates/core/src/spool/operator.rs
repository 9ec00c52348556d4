//! The operator's way out of `parked`: the event every backend records for a retry or a
//! discard ([`operator_event`]), the check of who asked ([`check_operator`]), and the bulk
//! retry of a queue's parked runs over any spool ([`retry_parked_runs`]).

use serde::Serialize;

use super::contract::Spool;
use super::ids::{QueueName, RunEventId, RunId};
use super::state::{Action, RunState};
use super::timestamp::Timestamp;
use super::types::RunFilter;
use crate::error::{Error, Result};

/// The prefix of the ids of the events the spool itself writes ([`operator_event`]): reserved.
/// [`Spool::append_event`] refuses a producer's event id that starts with it
/// ([`check_producer_event_id`]), so no producer can forge an operator's event or take the id
/// an operator's action would record with. (Events imported with [`Spool::import_runs`] keep
/// their ids as stored.)
pub const OPERATOR_EVENT_PREFIX: &str = "cairn:";

/// Refuses a producer's event id in the spool's reserved space: one that starts with
/// [`OPERATOR_EVENT_PREFIX`]. Every backend's [`Spool::append_event`] calls it before it
/// reads or writes anything.
///
/// # Errors
/// [`Error::Reserved`] for such an id.
pub fn check_producer_event_id(event_id: &RunEventId) -> Result<()> {
    if event_id
        .as_bytes()
        .starts_with(OPERATOR_EVENT_PREFIX.as_bytes())
    {
        return Err(Error::Reserved {
            what: "run event id",
            name: String::from_utf8_lossy(event_id.as_bytes()).into_owned(),
        });
    }
    Ok(())
}

/// Longest "who asked" text an operator's action records, in bytes.
pub const MAX_OPERATOR_LEN: usize = 256;

/// Checks the "who asked" of [`Spool::retry_parked`] and [`Spool::discard`]: 1 to
/// [`MAX_OPERATOR_LEN`] bytes without control characters.
///
/// # Errors
/// [`Error::InvalidInput`] otherwise.
pub fn check_operator(by: &str) -> Result<()> {
    if by.is_empty() || by.len() > MAX_OPERATOR_LEN || by.chars().any(char::is_control) {
        return Err(Error::invalid(
            "operator",
            format!("must be 1 to {MAX_OPERATOR_LEN} bytes of printable text (who asked)"),
        ));
    }
    Ok(())
}

/// The payload of an operator event, as JSON.
#[derive(Serialize)]
struct OperatorEvent<'a> {
    /// `retry` or `discard`.
    cairn: &'a str,
    by: &'a str,
    at_us: i64,
    parked_reason: Option<&'a str>,
    attempts: u32,
}

/// The run event that records an operator's action on a parked run, as every backend writes
/// it: id `cairn:retry:<seq>` or `cairn:discard:<seq>` (`seq`: the event's own seq, so the id
/// is new in the run), payload a JSON object
/// `{"cairn":"retry"|"discard","by":…,"at_us":…,"parked_reason":…|null,"attempts":…}` where
/// `at_us` is the action's time (microseconds since the Unix epoch; the event's own time too)
/// and `attempts` the run's attempt count when it was parked.
///
/// # Errors
/// [`Error::InvalidInput`] for an action other than [`Action::Requeue`] and
/// [`Action::Discard`], or a `by` that [`check_operator`] refuses.
pub fn operator_event(
    action: Action,
    seq: u64,
    by: &str,
    at: Timestamp,
    parked_reason: Option<&str>,
    attempts: u32,
) -> Result<(RunEventId, Vec<u8>)> {
    check_operator(by)?;
    let name = match action {
        Action::Requeue => "retry",
        Action::Discard => "discard",
        other => {
            return Err(Error::invalid(
                "operator action",
                format!("{other} is not an operator's action on a parked run"),
            ))
        }
    };
    let id = RunEventId::new(format!("{OPERATOR_EVENT_PREFIX}{name}:{seq}"))?;
    let payload = serde_json::to_vec(&OperatorEvent {
        cairn: name,
        by,
        at_us: at.as_unix_micros(),
        parked_reason,
        attempts,
    })
    .map_err(|e| Error::invalid("operator event", e.to_string()))?;
    Ok((id, payload))
}

/// Runs [`retry_parked_runs`] reads per page.
pub const BULK_RETRY_PAGE: usize = 100;

/// At most this many run ids [`BulkRetry::failed_runs`] lists.
pub const MAX_FAILED_RUNS_LISTED: usize = BULK_RETRY_PAGE;

/// What [`retry_parked_runs`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BulkRetry {
    /// Parked runs retried (each with its own event).
    pub retried: u64,
    /// Parked runs left parked because their reason does not match.
    pub unmatched: u64,
    /// Runs listed as parked that were no longer parked (or no longer there) when retried:
    /// another operator or retention got there first.
    pub skipped: u64,
    /// Parked runs whose retry was refused for a reason of their own ([`Error::Conflict`]: the
    /// run holds an event under the id the retry would record with, as an event imported from
    /// an older store may): left parked, the pass went on.
    pub failed: u64,
    /// The first [`MAX_FAILED_RUNS_LISTED`] of the [`BulkRetry::failed`] runs, in run id order.
    pub failed_runs: Vec<RunId>,
}

/// Retries every parked run of `queue` whose reason contains `reason_like` (every parked run
/// without it), each through [`Spool::retry_parked`], so each gets its own event and wakes the
/// queue's subscribers.
///
/// Reads the queue's parked runs in pages of [`BULK_RETRY_PAGE`] in run id order, so memory
/// stays bounded whatever the count. A run whose retry is refused for a reason of its own is
/// counted ([`BulkRetry::skipped`], [`BulkRetry::failed`]) and the pass goes on. Each retry is
/// atomic on its own, not the whole pass: on an error, the runs retried before it stay retried
/// (running it again retries the rest).
///
/// # Errors
/// [`Error::InvalidInput`] for a `by` that [`check_operator`] refuses; the first error of a
/// listing, or of a retry that is not the run's own (the store busy or unavailable).
pub async fn retry_parked_runs(
    spool: &dyn Spool,
    queue: &QueueName,
    reason_like: Option<&str>,
    by: &str,
) -> Result<BulkRetry> {
    check_operator(by)?;
    let mut done = BulkRetry::default();
    let mut filter = RunFilter {
        queue: Some(queue.clone()),
        state: Some(RunState::Parked),
        after: None,
    };
    loop {
        let page = spool.runs(&filter, BULK_RETRY_PAGE).await?;
        for run in &page {
            let matches = reason_like.is_none_or(|like| {
                run.reason
                    .as_deref()
                    .is_some_and(|reason| reason.contains(like))
            });
            if !matches {
                done.unmatched += 1;
                continue;
            }
            match spool.retry_parked(run.run_id, by).await {
                Ok(_) => done.retried += 1,
                Err(Error::InvalidTransition { .. } | Error::UnknownRun { .. }) => {
                    done.skipped += 1;
                }
                Err(Error::Conflict { .. }) => {
                    done.failed += 1;
                    if done.failed_runs.len() < MAX_FAILED_RUNS_LISTED {
                        done.failed_runs.push(run.run_id);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        match page.last() {
            Some(last) if page.len() == BULK_RETRY_PAGE => filter.after = Some(last.run_id),
            _ => return Ok(done),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_names_the_action_and_who_asked() {
        let at = Timestamp::from_unix_micros(1_700_000_000_000_000);
        let (id, payload) =
            operator_event(Action::Requeue, 4, "cli:alice", at, Some("a \"403\""), 3).unwrap();
        assert_eq!(id.as_bytes(), b"cairn:retry:4");
        let v: serde_json::Value = serde_json::from_slice(&payload).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"cairn": "retry", "by": "cli:alice", "at_us": 1_700_000_000_000_000_i64,
                               "parked_reason": "a \"403\"", "attempts": 3})
        );
        let (id, payload) = operator_event(Action::Discard, 1, "http", at, None, 0).unwrap();
        assert_eq!(id.as_bytes(), b"cairn:discard:1");
        let v: serde_json::Value = serde_json::from_slice(&payload).unwrap();
        assert_eq!(v["parked_reason"], serde_json::Value::Null);
        assert!(operator_event(Action::Cancel, 1, "http", at, None, 0).is_err());
    }

    #[test]
    fn who_asked_is_short_printable_text() {
        assert!(check_operator("cli:alice").is_ok());
        assert!(check_operator("").is_err());
        assert!(check_operator("a\nb").is_err());
        assert!(check_operator(&"x".repeat(MAX_OPERATOR_LEN + 1)).is_err());
    }

    #[test]
    fn producers_cannot_use_the_spools_event_ids() {
        for id in ["cairn:retry:2", "cairn:discard:1", "cairn:"] {
            let e = check_producer_event_id(&RunEventId::new(id).unwrap()).unwrap_err();
            assert!(
                matches!(&e, Error::Reserved { what: "run event id", name } if name == id),
                "{id}: {e:?}"
            );
        }
        for id in ["p1", "cairn", "Cairn:retry:2", "x-cairn:retry:2"] {
            assert!(
                check_producer_event_id(&RunEventId::new(id).unwrap()).is_ok(),
                "{id}"
            );
        }
        // The spool's own ids are still built: the check is the producers' only.
        let at = Timestamp::from_unix_micros(0);
        let (id, _) = operator_event(Action::Requeue, 2, "cli", at, None, 0).unwrap();
        assert!(check_producer_event_id(&id).is_err());
    }
}
