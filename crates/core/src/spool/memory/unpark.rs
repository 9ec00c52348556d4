//! The model's operator actions: [`Spool::retry_parked`](super::super::Spool::retry_parked)
//! and [`Spool::discard`](super::super::Spool::discard) of a parked run.

use super::super::ids::RunId;
use super::super::operator::{check_operator, operator_event};
use super::super::state::{Action, RunState};
use super::super::transition::transition;
use super::super::types::Unparked;
use super::state::StoredEvent;
use super::MemorySpool;
use crate::error::{Error, Result};

impl MemorySpool {
    /// [`Spool::retry_parked`] (`Requeue`) and [`Spool::discard`] (`Discard`): the transition,
    /// the run's new fields and the operator event, under one lock.
    pub(super) fn unpark(&self, run: RunId, action: Action, by: &str) -> Result<Unparked> {
        check_operator(by)?;
        let now = self.now();
        let mut st = self.lock();
        let serial = st.next_event_serial;
        let r = st.run_mut(run)?;
        let to = transition(r.state, action)?;
        let seq = r.last_event_seq + 1;
        let (event_id, payload) =
            operator_event(action, seq, by, now, r.reason.as_deref(), r.attempts)?;
        if r.event_ids.contains_key(&event_id) {
            return Err(Error::conflict(format!(
                "run {run} holds a producer's event under the id this action records with \
                 (ids beginning `cairn:` are the spool's); nothing was changed"
            )));
        }
        if to == RunState::Queued {
            r.state = to;
            r.updated_at = now;
            r.attempts = 0;
            r.due_at = Some(now);
            r.finished_at = None;
            r.lease = None;
            r.cancel_requested = false;
        } else {
            r.enter(to, now);
        }
        let parked_reason = r.reason.clone();
        let queue = r.queue.clone();
        let bytes = payload.len() as u64;
        r.last_event_seq = seq;
        r.event_ids.insert(event_id.clone(), seq);
        r.events.insert(
            seq,
            StoredEvent {
                id: event_id,
                payload,
                created_at: now,
                serial,
            },
        );
        st.next_event_serial += 1;
        st.by_age.insert((now, serial), (run, seq));
        st.event_bytes += bytes;
        if to == RunState::Queued {
            st.notify(&queue);
        }
        Ok(Unparked {
            state: to,
            parked_reason,
            event_seq: seq,
            at: now,
        })
    }
}
