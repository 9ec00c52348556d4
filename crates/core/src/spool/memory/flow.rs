//! The model's queue flow control: each queue's stored [`QueueFlow`], the claim times of its
//! rate window, and the claim's admission step — which of a claim's due candidates it may hand
//! out under the queue's limits, decided by the core's [`claim_allowance`] and
//! [`pick_within_partitions`] as every backend decides it.

use std::collections::{BTreeMap, HashMap};

use super::super::flow::{
    claim_allowance, pick_within_partitions, rate_window_start, QueueFlow, QueueLimits,
};
use super::super::ids::{PartitionKey, QueueName, RunId};
use super::super::timestamp::Timestamp;

/// Every queue's flow and rate window.
#[derive(Debug, Default)]
pub(super) struct FlowState {
    /// The queues with a stored flow (paused or limited); a queue back to its defaults has
    /// none.
    flows: BTreeMap<QueueName, QueueFlow>,
    /// Per rate-limited queue, the claims that handed out runs: `(at, runs)`, oldest first.
    ticks: HashMap<QueueName, Vec<(Timestamp, u64)>>,
}

impl FlowState {
    /// `queue`'s flow (running and unlimited when none is stored).
    pub(super) fn get(&self, queue: &QueueName) -> QueueFlow {
        self.flows.get(queue).copied().unwrap_or_default()
    }

    /// Every queue with a stored flow, by name.
    pub(super) fn all(&self) -> Vec<(QueueName, QueueFlow)> {
        self.flows.iter().map(|(q, f)| (q.clone(), *f)).collect()
    }

    /// Stores `queue`'s pause state; returns the stored flow.
    pub(super) fn set_paused(
        &mut self,
        queue: &QueueName,
        paused: bool,
        now: Timestamp,
    ) -> QueueFlow {
        let flow = self.flows.entry(queue.clone()).or_default();
        flow.paused = paused;
        flow.updated_at = Some(now);
        self.settle(queue)
    }

    /// Stores `queue`'s limits (checked by the caller); returns the stored flow.
    pub(super) fn set_limits(
        &mut self,
        queue: &QueueName,
        limits: QueueLimits,
        now: Timestamp,
    ) -> QueueFlow {
        let flow = self.flows.entry(queue.clone()).or_default();
        flow.limits = limits;
        flow.updated_at = Some(now);
        self.settle(queue)
    }

    /// After a change of `queue`'s flow: forgets its rate window when it has no rate limit,
    /// and its flow when that is back to the defaults (running, unlimited); returns the flow
    /// as stored ([`QueueFlow::default`] when none is).
    fn settle(&mut self, queue: &QueueName) -> QueueFlow {
        let flow = self.get(queue);
        if flow.limits.rate.is_none() {
            self.ticks.remove(queue);
        }
        if flow.is_default() {
            self.flows.remove(queue);
            return QueueFlow::default();
        }
        flow
    }

    /// Which of `candidates` (due runs of `queue` in claim order, with their partitions) a
    /// claim asking for `limit` runs takes at `now` under the queue's limits; `held` are the
    /// partitions of the queue's runs claimed at once (state `claimed`, `due_at` ahead of now).
    /// Drops the rate window's claims older than the window.
    pub(super) fn admit<'a>(
        &mut self,
        queue: &QueueName,
        held: impl Iterator<Item = Option<&'a PartitionKey>>,
        candidates: &[(RunId, Option<&PartitionKey>)],
        now: Timestamp,
        limit: usize,
    ) -> Vec<RunId> {
        let flow = self.get(queue);
        if !flow.limited() {
            return candidates.iter().take(limit).map(|c| c.0).collect();
        }
        let mut in_flight = 0;
        let mut busy: BTreeMap<PartitionKey, u64> = BTreeMap::new();
        for partition in held {
            in_flight += 1;
            if let Some(p) = partition {
                *busy.entry(p.clone()).or_insert(0) += 1;
            }
        }
        let mut in_window = 0;
        if let Some(rate) = flow.limits.rate {
            let start = rate_window_start(now, &rate);
            let ticks = self.ticks.entry(queue.clone()).or_default();
            ticks.retain(|(at, _)| *at > start);
            in_window = ticks.iter().map(|(_, n)| n).sum();
        }
        let allowance = claim_allowance(&flow, in_flight, in_window, limit);
        pick_within_partitions(
            candidates.iter().map(|c| c.1),
            &busy,
            flow.limits.per_partition,
            allowance,
        )
        .into_iter()
        .filter_map(|i| candidates.get(i).map(|c| c.0))
        .collect()
    }

    /// Records that a claim of `queue` at `now` handed out `runs` runs (rate-limited queues
    /// only).
    pub(super) fn claimed(&mut self, queue: &QueueName, now: Timestamp, runs: usize) {
        if runs == 0 || self.get(queue).limits.rate.is_none() {
            return;
        }
        self.ticks
            .entry(queue.clone())
            .or_default()
            .push((now, runs as u64));
    }
}
