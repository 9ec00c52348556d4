//! Where a run is in its life ([`RunState`]), what moves it ([`Action`]), and whether its
//! producer may still append ([`EventStream`]).
//!
//! A leaf module: the error type names these ([`crate::Error::InvalidTransition`],
//! [`crate::Error::RunClosed`]), so this module imports nothing of the crate. The decisions
//! over them are in `transition.rs`; [`RunState::parse`] is with the other input checks in
//! `checks.rs`.

use std::fmt;

/// Where a run is in its life. `Queued` and `Claimed` are live; the rest are terminal.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum RunState {
    /// Waiting to be claimed (possibly not before a retry time).
    Queued,
    /// Held by a consumer under a lease (possibly expired and not yet claimed again).
    Claimed,
    /// Acked by its lease holder.
    Succeeded,
    /// Finished by its lease holder with a failure outcome (`NackKind::Failed`): the work ran
    /// and its result is "failed"; nothing will retry it.
    Failed,
    /// Canceled: while queued, by its holder after a cancel request, or discarded by an
    /// operator while parked ([`Spool::discard`](super::Spool::discard)).
    Canceled,
    /// Replaced, while queued, by a newer run of its supersede group.
    Superseded,
    /// Given up on (permanent nack, attempts exhausted, or the last lease expired); carries the
    /// reason. Needs an operator's attention: [`Spool::retry_parked`] sends it back to its
    /// queue, [`Spool::discard`] ends it canceled.
    ///
    /// [`Spool::retry_parked`]: super::Spool::retry_parked
    /// [`Spool::discard`]: super::Spool::discard
    Parked,
}

impl RunState {
    /// Every state, in lifecycle order.
    pub const ALL: [RunState; 7] = [
        RunState::Queued,
        RunState::Claimed,
        RunState::Succeeded,
        RunState::Failed,
        RunState::Canceled,
        RunState::Superseded,
        RunState::Parked,
    ];

    /// Whether the run is finished (everything but `Queued` and `Claimed`): no consumer or
    /// producer moves it any more, and it takes no events. The one way out of a terminal
    /// state is an operator's: a `Parked` run may be retried or discarded
    /// ([`Spool::retry_parked`](super::Spool::retry_parked),
    /// [`Spool::discard`](super::Spool::discard)).
    pub fn is_terminal(self) -> bool {
        !matches!(self, RunState::Queued | RunState::Claimed)
    }

    /// The lowercase name backends store and the CLI prints.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Queued => "queued",
            RunState::Claimed => "claimed",
            RunState::Succeeded => "succeeded",
            RunState::Failed => "failed",
            RunState::Canceled => "canceled",
            RunState::Superseded => "superseded",
            RunState::Parked => "parked",
        }
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Something that happens to a run.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Action {
    /// A claim takes a queued run.
    Claim,
    /// A claim takes a claimed run whose lease expired (and whose backoff passed).
    Reclaim,
    /// The holder extends the lease.
    Heartbeat,
    /// The holder reports success (repeating it on a succeeded run is allowed).
    Ack,
    /// A retryable nack with attempts left: back to the queue.
    Retry,
    /// Give up: permanent nack, attempts exhausted, or the last lease expired.
    Park,
    /// The holder reports a failure outcome.
    Fail,
    /// A cancel: ends a queued run; on a claimed run it only requests cancellation.
    Cancel,
    /// A claimed run whose cancel was requested ends canceled (its holder nacked it, or its
    /// lease expired).
    ConfirmCancel,
    /// A newer run of the supersede group replaces a queued run.
    Supersede,
    /// The holder gives a claimed run back without spending an attempt
    /// ([`Spool::release`](super::Spool::release)): back to the queue.
    Release,
    /// An operator sends a parked run back to its queue with a fresh attempt budget
    /// ([`Spool::retry_parked`](super::Spool::retry_parked)).
    Requeue,
    /// An operator gives up on a parked run for good: it ends canceled
    /// ([`Spool::discard`](super::Spool::discard)).
    Discard,
}

impl Action {
    /// Every action.
    pub const ALL: [Action; 13] = [
        Action::Claim,
        Action::Reclaim,
        Action::Heartbeat,
        Action::Ack,
        Action::Retry,
        Action::Park,
        Action::Fail,
        Action::Cancel,
        Action::ConfirmCancel,
        Action::Supersede,
        Action::Release,
        Action::Requeue,
        Action::Discard,
    ];

    /// The action's name in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Claim => "claim",
            Action::Reclaim => "reclaim",
            Action::Heartbeat => "heartbeat",
            Action::Ack => "ack",
            Action::Retry => "retry",
            Action::Park => "park",
            Action::Fail => "fail",
            Action::Cancel => "cancel",
            Action::ConfirmCancel => "confirm the cancel of",
            Action::Supersede => "supersede",
            Action::Release => "release",
            Action::Requeue => "requeue",
            Action::Discard => "discard",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a run's producer may still append events: the producer-side end of a run
/// ([`Spool::close_run`](super::Spool::close_run)).
///
/// The rule every backend keeps ([`check_append`](super::check_append)): an event is accepted only while the run is
/// live (`queued` or `claimed`) and not [`EventStream::Closed`], checked in the same
/// transaction (under the same row lock) as the insert and as [`Spool::close_run`]. So once a
/// reader has seen a run closed, its set of events is final: a consumer that then reads no
/// unacknowledged event has delivered every event ever accepted for it, and may finish it.
///
/// [`Spool::close_run`]: super::Spool::close_run
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum EventStream {
    /// Enqueued by a build that knows about closing: its producer appends events until it
    /// closes the run.
    Open,
    /// Closed by its producer, by an operator (`cairn run close`), or by a consumer that
    /// closed an [`EventStream::Unmarked`] run: no more events are accepted.
    Closed,
    /// Written by a build older than revision `0006_spool_run_close`, before that revision,
    /// or imported: no producer will close it. Events are accepted while it is live; a
    /// consumer that needs a final set of events (the delivery worker) closes it itself when
    /// it takes it, so later appends are refused instead of left undelivered.
    Unmarked,
}

impl EventStream {
    /// The lowercase name the CLI prints and the HTTP API returns.
    pub fn as_str(self) -> &'static str {
        match self {
            EventStream::Open => "open",
            EventStream::Closed => "closed",
            EventStream::Unmarked => "unmarked",
        }
    }

    /// Whether appends are refused.
    pub fn is_closed(self) -> bool {
        self == EventStream::Closed
    }

    /// The stored form: `NULL` (unmarked), `false` (open), `true` (closed).
    pub fn to_stored(self) -> Option<bool> {
        match self {
            EventStream::Open => Some(false),
            EventStream::Closed => Some(true),
            EventStream::Unmarked => None,
        }
    }

    /// Reads [`EventStream::to_stored`]'s form.
    pub fn from_stored(closed: Option<bool>) -> Self {
        match closed {
            Some(false) => EventStream::Open,
            Some(true) => EventStream::Closed,
            None => EventStream::Unmarked,
        }
    }
}

/// Why [`Error::RunClosed`](crate::Error::RunClosed) refused an append, in words.
pub fn closed_reason(state: RunState, closed: bool) -> String {
    match (closed, state.is_terminal()) {
        (true, true) => format!("it was closed and is {state}"),
        (true, false) => "its producer closed it".to_owned(),
        (false, _) => format!("it is {state}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_streams_round_trip_through_their_stored_form() {
        for (stream, stored, name) in [
            (EventStream::Open, Some(false), "open"),
            (EventStream::Closed, Some(true), "closed"),
            (EventStream::Unmarked, None, "unmarked"),
        ] {
            assert_eq!(stream.to_stored(), stored);
            assert_eq!(EventStream::from_stored(stored), stream);
            assert_eq!(stream.as_str(), name);
            assert_eq!(stream.is_closed(), stream == EventStream::Closed);
        }
    }
}
