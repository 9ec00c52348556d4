//! The model claim's pick: settles the queue's due expired leases that must not run again,
//! then chooses the due runs to hand out in claim order under the queue's flow
//! (`memory/flow.rs`).

use std::cmp::Reverse;

use super::super::ids::{PartitionKey, QueueName, RunId};
use super::super::state::{Action, RunState};
use super::super::timestamp::Timestamp;
use super::super::transition::{expired_park_reason, expiry_action, transition};
use super::state::State;
use crate::error::Result;

impl State {
    /// The runs a claim of `queue` asking for `limit` hands out at `now`, in claim order,
    /// after settling the queue's due expired leases that are not reclaimed. A paused queue
    /// hands out and settles nothing.
    pub(super) fn pick(
        &mut self,
        queue: &QueueName,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<RunId>> {
        if self.flow.get(queue).paused {
            return Ok(Vec::new());
        }
        let mut candidates: Vec<(Reverse<i32>, Timestamp, u64, RunId)> = Vec::new();
        for r in self.runs.values_mut() {
            let due = r.queue == *queue
                && matches!(r.state, RunState::Queued | RunState::Claimed)
                && r.due_at.is_some_and(|d| d <= now);
            if !due {
                continue;
            }
            let action = match r.state {
                RunState::Claimed => expiry_action(r.attempts, r.max_attempts, r.cancel_requested),
                _ => Action::Claim,
            };
            match action {
                Action::Claim | Action::Reclaim => {
                    if let Some(due_at) = r.due_at {
                        candidates.push((Reverse(r.priority), due_at, r.serial, r.id));
                    }
                }
                settle => {
                    let to = transition(r.state, settle)?;
                    if settle == Action::Park {
                        r.reason = Some(expired_park_reason(r.attempts));
                    }
                    r.enter(to, now);
                }
            }
        }
        candidates.sort();
        let ordered: Vec<(RunId, Option<&PartitionKey>)> = candidates
            .iter()
            .map(|c| (c.3, self.runs.get(&c.3).and_then(|r| r.partition.as_ref())))
            .collect();
        let held = self
            .runs
            .values()
            .filter(|r| {
                r.queue == *queue
                    && r.state == RunState::Claimed
                    && r.due_at.is_some_and(|d| d > now)
            })
            .map(|r| r.partition.as_ref());
        Ok(self.flow.admit(queue, held, &ordered, now, limit))
    }
}
