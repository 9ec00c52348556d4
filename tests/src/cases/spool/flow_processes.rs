//! The shared halves of the cross-process flow tests (Q2/Q3 and Q1 across OS processes), which
//! each engine's test drives with its own child processes (`flow_processes.rs` in each backend
//! crate): a child runs [`flow_consumers`] on its own spool over the store and prints the lines
//! it returns; the parent checks every child's lines with [`check_limit_reports`] or
//! [`check_pause_reports`]. Every time is the spool's clock (the system clock there).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_core::spool::{RunFilter, RunState};
use cairn_core::{ConsumerId, QueueName, RunId, Spool};

/// The lease the consumers claim with (nothing expires during a test).
const LEASE: Duration = Duration::from_secs(60);
/// How long a child's consumers may take to drain the queue.
const DRAIN_DEADLINE: Duration = Duration::from_secs(90);

/// Runs of `q` claimed at once now (state `claimed`, `due_at` ahead of now): in all, and the
/// most of any one partition key.
pub async fn held_now(spool: &dyn Spool, q: &QueueName) -> (usize, usize) {
    let now = spool.clock().now();
    let mut filter = RunFilter {
        queue: Some(q.clone()),
        state: Some(RunState::Claimed),
        after: None,
    };
    let (mut total, mut per) = (0, BTreeMap::new());
    loop {
        let page = spool.runs(&filter, 1000).await.expect("list claimed runs");
        for r in page.iter().filter(|r| r.due_at.is_some_and(|d| d > now)) {
            total += 1;
            if let Some(p) = &r.partition_key {
                *per.entry(p.clone()).or_insert(0) += 1;
            }
        }
        match page.last() {
            Some(last) if page.len() == 1000 => filter.after = Some(last.run_id),
            _ => return (total, per.values().copied().max().unwrap_or(0)),
        }
    }
}

/// Whether `q` has no live run left (none queued, none claimed).
async fn drained(spool: &dyn Spool, q: &QueueName) -> bool {
    for state in [RunState::Queued, RunState::Claimed] {
        let filter = RunFilter {
            queue: Some(q.clone()),
            state: Some(state),
            after: None,
        };
        if !spool.runs(&filter, 1).await.expect("list runs").is_empty() {
            return false;
        }
    }
    true
}

/// A child's consumers: `consumers` tasks on `spool` claim (two at a time) and ack `q`'s runs
/// until the queue is running (not paused) and holds no live run. Right after each claim that
/// handed out runs a consumer samples the store ([`held_now`]) and reads the queue's flow.
/// Returns the report lines: `acked <run>` per run, `sample <total> <max per partition>` per
/// sample, `paused-claim` for a claim that handed out runs while the flow it read afterwards
/// still said paused (a pause is lifted once and never again in these tests, so that claim ran
/// while paused), and `paused-attempts <n>` per consumer (its empty claims while paused).
pub async fn flow_consumers(spool: Arc<dyn Spool>, q: QueueName, consumers: usize) -> Vec<String> {
    let mut joins = Vec::new();
    for c in 0..consumers {
        let (spool, q) = (spool.clone(), q.clone());
        joins.push(tokio::spawn(async move {
            let me = ConsumerId::new(format!("flow-{}-{c}", std::process::id())).unwrap();
            let mut lines = Vec::new();
            let mut paused_attempts = 0u64;
            let start = Instant::now();
            loop {
                assert!(start.elapsed() < DRAIN_DEADLINE, "the queue did not drain");
                let got = spool.claim(&q, &me, LEASE, 2).await.expect("claim");
                let paused = spool.queue_flow(&q).await.expect("queue flow").paused;
                if got.is_empty() {
                    if paused {
                        paused_attempts += 1;
                    } else if drained(spool.as_ref(), &q).await {
                        break;
                    }
                    // Another consumer holds the queue's slots: poll again shortly.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    continue;
                }
                if paused {
                    lines.push("paused-claim".to_owned());
                }
                let (total, per) = held_now(spool.as_ref(), &q).await;
                lines.push(format!("sample {total} {per}"));
                for run in got {
                    spool.ack(run.run_id, run.token).await.expect("ack");
                    lines.push(format!("acked {}", run.run_id));
                }
            }
            lines.push(format!("paused-attempts {paused_attempts}"));
            lines
        }));
    }
    let mut lines = Vec::new();
    for j in joins {
        lines.extend(j.await.expect("a consumer panicked"));
    }
    lines
}

/// Whether the runs every child acked, each exactly once, are `enqueued`.
fn acked_once(reports: &[Vec<String>], enqueued: &BTreeSet<RunId>) -> bool {
    let mut acked = BTreeSet::new();
    for line in reports.iter().flatten() {
        if let Some(id) = line.strip_prefix("acked ") {
            assert!(acked.insert(id.to_owned()), "run {id} was handed out twice");
        }
    }
    acked == enqueued.iter().map(ToString::to_string).collect()
}

/// Checks the limits test's reports: no sample above `max_claimed` in all or `per_partition`
/// in one partition, every run of `enqueued` acked exactly once, and no claim while paused.
pub fn check_limit_reports(
    reports: &[Vec<String>],
    enqueued: &BTreeSet<RunId>,
    max_claimed: usize,
    per_partition: usize,
) {
    let (mut samples, mut peak, mut peak_per) = (0, 0, 0);
    for line in reports.iter().flatten() {
        if let Some(sample) = line.strip_prefix("sample ") {
            let mut n = sample.split(' ').map(|n| n.parse::<usize>().unwrap());
            let (total, per) = (n.next().unwrap(), n.next().unwrap());
            samples += 1;
            peak = peak.max(total);
            peak_per = peak_per.max(per);
        }
        assert_ne!(
            line, "paused-claim",
            "a claim of a running queue said paused"
        );
    }
    assert!(samples > 0, "no claim handed out anything");
    assert!(
        peak <= max_claimed,
        "{peak} runs were claimed at once (limit {max_claimed})"
    );
    assert!(
        peak_per <= per_partition,
        "{peak_per} runs of one partition were claimed at once (limit {per_partition})"
    );
    assert!(acked_once(reports, enqueued), "every run was drained once");
}

/// Checks the pause test's reports: every child's consumers tried to claim while the queue was
/// paused and none got a run then, and every run of `enqueued` was acked exactly once after
/// the resume.
pub fn check_pause_reports(reports: &[Vec<String>], enqueued: &BTreeSet<RunId>) {
    for (i, lines) in reports.iter().enumerate() {
        assert!(
            !lines.iter().any(|l| l == "paused-claim"),
            "child {i} got runs while the queue was paused"
        );
        let tried: u64 = lines
            .iter()
            .filter_map(|l| l.strip_prefix("paused-attempts "))
            .map(|n| n.parse::<u64>().unwrap())
            .sum();
        assert!(
            tried > 0,
            "child {i} never claimed while the queue was paused"
        );
    }
    assert!(
        acked_once(reports, enqueued),
        "every queued run was drained once"
    );
}
