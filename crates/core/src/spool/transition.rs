//! The run state machine as one pure function every backend calls, so no backend can invent a
//! transition the others refuse.
//!
//! These are the backend contract's decision functions ([`transition`], [`nack_action`],
//! [`release_action`], [`expiry_action`], [`check_token`] and the park reasons): exported for
//! the backend crates and the model, not for services, which reach the spool through the
//! facade `cairn` (it does not re-export them).
//!
//! ```text
//! queued ──claim──▶ claimed ──ack──▶ succeeded
//!   │  ▲              │ ├─fail──▶ failed
//!   │  └─retry/release┘ ├─park──▶ parked     (permanent nack, attempts exhausted, last lease expired)
//!   │                   ├─confirm cancel──▶ canceled   (nack or expiry after a cancel request)
//!   ├─cancel──▶ canceled  (claimed: cancel only sets the request flag)
//!   └─supersede──▶ superseded
//!
//! parked ──requeue──▶ queued     (an operator's retry: `Spool::retry_parked`)
//!   └─────discard──▶ canceled   (an operator's discard: `Spool::discard`)
//! ```

use super::checks::clip_reason;
use super::ids::{LeaseToken, RunId};
use super::state::{Action, RunState};
use super::types::NackKind;
use crate::error::{Error, Result};

/// The state `action` takes a run in state `from` to.
///
/// # Errors
/// [`Error::InvalidTransition`] when the state does not allow the action.
pub fn transition(from: RunState, action: Action) -> Result<RunState> {
    use Action as A;
    use RunState as S;
    let to = match (from, action) {
        (S::Queued, A::Claim) => S::Claimed,
        (S::Queued, A::Cancel) => S::Canceled,
        (S::Queued, A::Supersede) => S::Superseded,
        (S::Claimed, A::Reclaim | A::Heartbeat | A::Cancel) => S::Claimed,
        (S::Claimed, A::Ack) => S::Succeeded,
        (S::Claimed, A::Retry | A::Release) => S::Queued,
        (S::Claimed, A::Park) => S::Parked,
        (S::Claimed, A::Fail) => S::Failed,
        (S::Claimed, A::ConfirmCancel) => S::Canceled,
        // Ack is idempotent: the holder may repeat it after a lost reply.
        (S::Succeeded, A::Ack) => S::Succeeded,
        // Only an operator moves a parked run, and only these two ways.
        (S::Parked, A::Requeue) => S::Queued,
        (S::Parked, A::Discard) => S::Canceled,
        _ => return Err(Error::InvalidTransition { from, action }),
    };
    Ok(to)
}

/// What a nack of a claimed run does: a requested cancel wins over everything (the holder
/// stopped because it was asked to); a retryable nack retries while `attempts <
/// max_attempts`, else parks.
pub fn nack_action(
    kind: NackKind,
    attempts: u32,
    max_attempts: u32,
    cancel_requested: bool,
) -> Action {
    if cancel_requested {
        return Action::ConfirmCancel;
    }
    match kind {
        NackKind::Retryable if attempts < max_attempts => Action::Retry,
        NackKind::Retryable | NackKind::Permanent => Action::Park,
        NackKind::Failed => Action::Fail,
    }
}

/// What a release of a claimed run does: a requested cancel wins (the run ends `canceled`),
/// else the run goes back to the queue without spending an attempt.
pub fn release_action(cancel_requested: bool) -> Action {
    if cancel_requested {
        Action::ConfirmCancel
    } else {
        Action::Release
    }
}

/// What a claim does with a claimed run whose lease expired and whose backoff passed: cancel it
/// if a cancel was requested, park it when its last attempt is used up, else take it again.
pub fn expiry_action(attempts: u32, max_attempts: u32, cancel_requested: bool) -> Action {
    if cancel_requested {
        Action::ConfirmCancel
    } else if attempts >= max_attempts {
        Action::Park
    } else {
        Action::Reclaim
    }
}

/// The reason recorded when a claim parks a run whose last lease expired.
pub fn expired_park_reason(attempts: u32) -> String {
    format!("the lease of attempt {attempts} expired and no attempts are left")
}

/// The reason recorded when a retryable nack on the last attempt parks a run.
pub fn exhausted_park_reason(attempts: u32, reason: &str) -> String {
    clip_reason(&format!(
        "attempts exhausted after {attempts}; last error: {reason}"
    ))
}

/// The lease check every heartbeat, ack and nack makes first: the presented token must be the
/// one the run's latest claim issued.
///
/// # Errors
/// [`Error::LeaseLost`] when the run was never claimed or a later claim issued another token.
pub fn check_token(run: RunId, latest: Option<LeaseToken>, presented: LeaseToken) -> Result<()> {
    if latest == Some(presented) {
        Ok(())
    } else {
        Err(Error::LeaseLost { run })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RunState as S;

    /// The whole table, written out once more by hand: every (state, action) pair not listed
    /// here must be refused.
    const ALLOWED: &[(RunState, Action, RunState)] = &[
        (S::Queued, Action::Claim, S::Claimed),
        (S::Queued, Action::Cancel, S::Canceled),
        (S::Queued, Action::Supersede, S::Superseded),
        (S::Claimed, Action::Reclaim, S::Claimed),
        (S::Claimed, Action::Heartbeat, S::Claimed),
        (S::Claimed, Action::Cancel, S::Claimed),
        (S::Claimed, Action::Ack, S::Succeeded),
        (S::Claimed, Action::Retry, S::Queued),
        (S::Claimed, Action::Release, S::Queued),
        (S::Claimed, Action::Park, S::Parked),
        (S::Claimed, Action::Fail, S::Failed),
        (S::Claimed, Action::ConfirmCancel, S::Canceled),
        (S::Succeeded, Action::Ack, S::Succeeded),
        (S::Parked, Action::Requeue, S::Queued),
        (S::Parked, Action::Discard, S::Canceled),
    ];

    #[test]
    fn every_pair_matches_the_table() {
        for from in RunState::ALL {
            for action in Action::ALL {
                let want = ALLOWED
                    .iter()
                    .find(|(f, a, _)| *f == from && *a == action)
                    .map(|(_, _, to)| *to);
                match (transition(from, action), want) {
                    (Ok(got), Some(to)) => assert_eq!(got, to, "{from} --{action}-->"),
                    (Err(Error::InvalidTransition { from: f, action: a }), None) => {
                        assert_eq!((f, a), (from, action));
                    }
                    (got, want) => panic!("{from} --{action}--> gave {got:?}, want {want:?}"),
                }
            }
        }
    }

    #[test]
    fn terminal_states_only_allow_a_repeated_ack_or_an_operators_unpark() {
        for from in RunState::ALL.into_iter().filter(|s| s.is_terminal()) {
            for action in Action::ALL {
                let ok = transition(from, action).is_ok();
                let unpark =
                    from == S::Parked && matches!(action, Action::Requeue | Action::Discard);
                assert_eq!(
                    ok,
                    (from == S::Succeeded && action == Action::Ack) || unpark
                );
            }
        }
    }

    #[test]
    fn nack_decisions() {
        use NackKind as K;
        assert_eq!(nack_action(K::Retryable, 1, 3, false), Action::Retry);
        assert_eq!(nack_action(K::Retryable, 3, 3, false), Action::Park);
        assert_eq!(nack_action(K::Retryable, 4, 3, false), Action::Park);
        assert_eq!(nack_action(K::Permanent, 1, 3, false), Action::Park);
        assert_eq!(nack_action(K::Failed, 1, 3, false), Action::Fail);
        for kind in [K::Retryable, K::Permanent, K::Failed] {
            assert_eq!(nack_action(kind, 1, 3, true), Action::ConfirmCancel);
        }
        // Every decision is a valid transition from Claimed.
        for kind in [K::Retryable, K::Permanent, K::Failed] {
            for attempts in 0..4 {
                for cancel in [false, true] {
                    let a = nack_action(kind, attempts, 3, cancel);
                    assert!(transition(S::Claimed, a).is_ok());
                }
            }
        }
    }

    #[test]
    fn expiry_decisions() {
        assert_eq!(expiry_action(1, 3, false), Action::Reclaim);
        assert_eq!(expiry_action(3, 3, false), Action::Park);
        assert_eq!(expiry_action(1, 3, true), Action::ConfirmCancel);
        for attempts in 0..5 {
            for cancel in [false, true] {
                let a = expiry_action(attempts, 3, cancel);
                assert!(transition(S::Claimed, a).is_ok());
            }
        }
    }

    #[test]
    fn tokens() {
        let run = RunId([1; 16]);
        let t = LeaseToken([2; 16]);
        assert!(check_token(run, Some(t), t).is_ok());
        assert!(matches!(
            check_token(run, Some(LeaseToken([3; 16])), t),
            Err(Error::LeaseLost { .. })
        ));
        assert!(matches!(
            check_token(run, None, t),
            Err(Error::LeaseLost { .. })
        ));
    }
}
