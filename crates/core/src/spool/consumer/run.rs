//! One run's life in a consumer: its task starts the handler with a [`Slot`], heartbeats the
//! lease while the handler runs, gives the slot back, then acks or nacks from the handler's
//! [`Outcome`] (retrying transient failures).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::Instrument;

use super::super::ids::{LeaseToken, RunId};
use super::super::limits::MAX_LEASE;
use super::super::state::RunState;
use super::super::timestamp::Timestamp;
use super::super::types::NackKind;
use super::ctx::{idle_wait, lease_gone, transient, AbortOnDrop, Ctx, Held};
use super::handler::{raise, Handler, Job, Outcome, StopReason, StopSignal};
use super::telemetry;
use crate::error::Result;

/// How many times a consumer tries an ack or nack that failed with a retryable error.
pub(super) const SETTLE_TRIES: u32 = 4;
pub(super) fn start_run(
    ctx: &Arc<Ctx>,
    handler: &Arc<dyn Handler>,
    tasks: &mut JoinSet<()>,
    held: Held,
) {
    let (stop_tx, stop_rx) = watch::channel(None);
    {
        let mut sh = ctx.shared();
        sh.held.remove(&held.claimed.run_id);
        sh.running.insert(held.claimed.run_id, stop_tx);
    }
    let span = tracing::info_span!(
        target: "cairn::spool",
        "cairn.spool.run",
        queue = %ctx.queue,
        run_id = %held.claimed.run_id,
        attempt = held.claimed.attempt,
        consumer = %ctx.consumer,
        outcome = tracing::field::Empty,
    );
    // The enqueuer's trace, when the run carries one: the run span is its child (feature
    // `otel`; without it the span starts a trace of its own in whatever the service installed).
    #[cfg(feature = "otel")]
    if let Some(parent) = &held.claimed.traceparent {
        super::super::otel::continue_trace(&span, parent);
    }
    let job = Job {
        context: ctx.context.clone(),
        queue: ctx.queue.clone(),
        claimed: held.claimed,
        spool: ctx.spool.clone(),
        stop: StopSignal { rx: stop_rx },
    };
    let slot = Slot::take(ctx.clone());
    tasks.spawn(run_one(ctx.clone(), handler.clone(), job, held.at, slot).instrument(span));
}

/// A handler's slot: counted in [`Ctx::handling`] from the run's start until the handler
/// returns (or the run's task is dropped); giving it back pokes the loop.
struct Slot(Arc<Ctx>);

impl Slot {
    fn take(ctx: Arc<Ctx>) -> Self {
        ctx.handling.fetch_add(1, Ordering::AcqRel);
        Self(ctx)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.handling.fetch_sub(1, Ordering::AcqRel);
        self.0.notify.notify_one();
    }
}

/// Runs one handler with heartbeats (the first a third of the lease after the claim, before
/// the handler starts if the run waited that long in the prefetch), gives its slot back, then
/// settles the run.
async fn run_one(
    ctx: Arc<Ctx>,
    handler: Arc<dyn Handler>,
    job: Job,
    claimed_at: Timestamp,
    slot: Slot,
) {
    let run = job.claimed.run_id;
    let token = job.claimed.token;
    let spool = ctx.spool.clone();
    let clock = spool.clock();
    let every = ctx.lease / 3;
    let mut next_beat = claimed_at.saturating_add(every);
    let mut lost = false;
    if clock.now() >= next_beat {
        lost = beat(&ctx, run, token).await;
        next_beat = clock.now().saturating_add(every);
    }
    let started = std::time::Instant::now();
    let outcome = if lost {
        None
    } else {
        // The handler runs on its own task so that a panic is caught; dropping this run's
        // task (shutdown deadline) aborts it. It runs inside the run's span.
        let mut work = AbortOnDrop(tokio::spawn(
            async move { handler.handle(job).await }.in_current_span(),
        ));
        Some(loop {
            if !lost && clock.now() >= next_beat {
                lost = beat(&ctx, run, token).await;
                next_beat = clock.now().saturating_add(every);
            }
            let wait = idle_wait(clock.now(), Some(next_beat), ctx.poll_interval);
            match tokio::time::timeout(wait, &mut work.0).await {
                Ok(Ok(outcome)) => break outcome,
                Ok(Err(join)) => {
                    ctx.shared().stats.panics += 1;
                    break Outcome::Retry(if join.is_panic() {
                        "the handler panicked".to_owned()
                    } else {
                        "the handler was aborted".to_owned()
                    });
                }
                Err(_elapsed) => {}
            }
        })
    };
    let took = outcome.is_some().then(|| started.elapsed());
    // The slot takes its next run while this one's ack or nack is on its way.
    drop(slot);
    let settled = match outcome {
        Some(outcome) if !lost => settle(&ctx, run, token, outcome).await,
        _ => {
            ctx.shared().stats.lease_lost += 1;
            "lease_lost"
        }
    };
    telemetry::handled(&ctx.queue, settled, took);
    ctx.shared().running.remove(&run);
    ctx.notify.notify_one();
}

/// One heartbeat of a running (or about to start) run; `true` when its lease is gone.
async fn beat(ctx: &Ctx, run: RunId, token: LeaseToken) -> bool {
    match ctx.spool.heartbeat(run, token, ctx.lease).await {
        Ok(hb) => {
            ctx.shared().stats.heartbeats += 1;
            if hb.cancel_requested {
                signal(ctx, run, StopReason::CancelRequested);
            }
            false
        }
        Err(e) if lease_gone(&e) => {
            signal(ctx, run, StopReason::LeaseLost);
            true
        }
        // Tried again at the next beat; a lease outlives two missed beats.
        Err(e) => {
            ctx.error(&e);
            false
        }
    }
}

fn signal(ctx: &Ctx, run: RunId, reason: StopReason) {
    if let Some(tx) = ctx.shared().running.get(&run) {
        raise(tx, reason);
    }
}

/// Acks or nacks from the outcome, retrying transient failures a few times while the lease
/// lasts; a run that cannot be settled is left to its lease expiry (and redelivered). Returns
/// what happened, as [`telemetry::OUTCOMES`] names it.
async fn settle(ctx: &Ctx, run: RunId, token: LeaseToken, outcome: Outcome) -> &'static str {
    let mut pause = Duration::from_millis(20);
    for attempt in 1..=SETTLE_TRIES {
        // `None`: released, which is not a settlement (`ConsumerStats::released`).
        let result = match &outcome {
            Outcome::Done => ctx
                .spool
                .ack(run, token)
                .await
                .map(|()| Some(RunState::Succeeded)),
            Outcome::Retry(why) => nack(ctx, run, token, NackKind::Retryable, why).await,
            Outcome::RetryAfter(delay, why) => ctx
                .spool
                .retry_after(run, token, why, (*delay).min(MAX_LEASE))
                .await
                .map(|n| Some(n.state)),
            Outcome::Fail(why) => nack(ctx, run, token, NackKind::Permanent, why).await,
            Outcome::Nack(kind, why) => nack(ctx, run, token, *kind, why).await,
            Outcome::Release(delay) => ctx.spool.release(run, token, *delay).await.map(|_| None),
        };
        match result {
            Ok(Some(state)) => {
                *ctx.shared().stats.settled.entry(state).or_default() += 1;
                return state.as_str();
            }
            Ok(None) => {
                ctx.shared().stats.released += 1;
                return "released";
            }
            Err(e) if lease_gone(&e) => {
                ctx.shared().stats.lease_lost += 1;
                return "lease_lost";
            }
            Err(e) => {
                ctx.error(&e);
                if !transient(&e) || attempt == SETTLE_TRIES {
                    return "unsettled";
                }
                tokio::time::sleep(pause.min(ctx.poll_interval)).await;
                pause *= 2;
            }
        }
    }
    "unsettled"
}

async fn nack(
    ctx: &Ctx,
    run: RunId,
    token: LeaseToken,
    kind: NackKind,
    why: &str,
) -> Result<Option<RunState>> {
    ctx.spool
        .nack(run, token, kind, why)
        .await
        .map(|n| Some(n.state))
}
