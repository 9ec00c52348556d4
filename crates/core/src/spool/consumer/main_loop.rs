//! The consumer's loop: claims while it has room (coalescing claims while runs are finishing),
//! starts prefetched runs in free slots, waits for a wake-up, a finished run or the next due
//! time, and at shutdown gives prefetched runs back and lets handlers finish until the
//! deadline.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::super::contract::Wakeup;
use super::ctx::{idle_wait, lease_gone, AbortOnDrop, Ctx, Held};
use super::handler::{raise, Handler, StopReason};
use super::run::start_run;

/// Forwards the spool's wake-ups to the loop; re-subscribes after an error.
pub(super) async fn listen(ctx: Arc<Ctx>, mut wakeup: Box<dyn Wakeup>) {
    loop {
        match wakeup.wait().await {
            Ok(()) => ctx.notify.notify_one(),
            Err(e) => {
                ctx.error(&e);
                ctx.notify.notify_one();
                tokio::time::sleep(ctx.poll_interval).await;
                match ctx.spool.subscribe(&ctx.queue).await {
                    Ok(w) => wakeup = w,
                    Err(e) => ctx.error(&e),
                }
            }
        }
    }
}

pub(super) async fn main_loop(
    ctx: Arc<Ctx>,
    handler: Arc<dyn Handler>,
    stop: watch::Receiver<Option<Instant>>,
    _listener: AbortOnDrop<()>,
) {
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut held: VecDeque<Held> = VecDeque::new();
    // When the consumer first had room to claim for, but too little (claim coalescing).
    let mut partly_free_since: Option<tokio::time::Instant> = None;
    loop {
        if stop.borrow().is_some() {
            break;
        }
        while tasks.try_join_next().is_some() {}
        let free = fill(&ctx, &handler, &mut tasks, &mut held);
        // Runs whose handler returned and whose ack or nack is still on its way.
        let settling = tasks.len().saturating_sub(ctx.handling());
        let room = (free + ctx.prefetch).saturating_sub(held.len());
        let mut wait = ctx.poll_interval;
        if room > 0 && settling < ctx.concurrency + ctx.prefetch {
            if room < ctx.batch.div_ceil(2) && !ctx.claim_coalesce.is_zero() {
                // Runs are still going: give them the window to free more slots, so one claim
                // takes several runs (a returning handler or a wake-up pokes `notify`).
                let since = *partly_free_since.get_or_insert_with(tokio::time::Instant::now);
                let until = since + ctx.claim_coalesce;
                if tokio::time::Instant::now() < until {
                    wait_for_change(&ctx, &mut tasks, until).await;
                    continue;
                }
            }
            partly_free_since = None;
            let want = room.min(ctx.batch);
            ctx.shared().stats.claims += 1;
            match ctx
                .spool
                .claim(&ctx.queue, &ctx.consumer, ctx.lease, want)
                .await
            {
                Ok(runs) => {
                    let got = runs.len();
                    super::telemetry::claimed(&ctx.queue, got);
                    let at = ctx.spool.clock().now();
                    {
                        let mut sh = ctx.shared();
                        sh.stats.claimed += got as u64;
                        sh.held.extend(runs.iter().map(|c| c.run_id));
                    }
                    held.extend(runs.into_iter().map(|claimed| Held { claimed, at }));
                    fill(&ctx, &handler, &mut tasks, &mut held);
                    if got == want {
                        // The queue may hold more due runs: claim again without waiting.
                        continue;
                    }
                    // Nothing more is due now: wait for the earliest due time (or a wake-up).
                    match ctx.spool.next_due(&ctx.queue).await {
                        Ok(due) => {
                            wait = idle_wait(ctx.spool.clock().now(), due, ctx.poll_interval);
                        }
                        Err(e) => ctx.error(&e),
                    }
                }
                Err(e) => ctx.error(&e),
            }
        }
        wait_for_change(&ctx, &mut tasks, tokio::time::Instant::now() + wait).await;
    }

    // Shutdown: no more claims. Give the prefetched runs back, tell every handler, then give
    // them until the deadline.
    let deadline = (*stop.borrow()).unwrap_or_else(Instant::now);
    let _ = tokio::time::timeout_at(deadline, release_held(&ctx, &mut held)).await;
    for tx in ctx.shared().running.values() {
        raise(tx, StopReason::Shutdown);
    }
    let drained = tokio::time::timeout_at(deadline, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        // Abort the rest; their entries stay in `running`, which is what the report lists.
        tasks.shutdown().await;
    }
}

/// Starts prefetched runs in the free slots, oldest claim first; returns the slots still free.
fn fill(
    ctx: &Arc<Ctx>,
    handler: &Arc<dyn Handler>,
    tasks: &mut JoinSet<()>,
    held: &mut VecDeque<Held>,
) -> usize {
    let mut free = ctx.concurrency.saturating_sub(ctx.handling());
    while free > 0 {
        let Some(next) = held.pop_front() else { break };
        start_run(ctx, handler, tasks, next);
        free -= 1;
    }
    free
}

/// Releases every prefetched run that never started (its attempt is given back); a run that
/// cannot be released stays in `held` (the report lists it) and its lease runs out.
async fn release_held(ctx: &Ctx, held: &mut VecDeque<Held>) {
    while let Some(h) = held.front() {
        let run = h.claimed.run_id;
        match ctx
            .spool
            .release(run, h.claimed.token, Duration::ZERO)
            .await
        {
            Ok(_) => ctx.shared().stats.released += 1,
            Err(e) if lease_gone(&e) => ctx.shared().stats.lease_lost += 1,
            Err(e) => {
                ctx.error(&e);
                held.pop_front();
                continue;
            }
        }
        ctx.shared().held.remove(&run);
        held.pop_front();
    }
}

/// Waits until `deadline`, a poke of `notify` (a wake-up, a stop) or, while runs are going, the
/// end of one of them. A run's task pokes `notify` as its last step, so the loop can wake while
/// that task still counts as running (on another worker thread it has not returned yet), take
/// the permit, count one slot too few and wait again; waiting on the task set as well means a
/// run's end is never missed (it cost up to the coalescing window or the poll interval).
async fn wait_for_change(ctx: &Ctx, tasks: &mut JoinSet<()>, deadline: tokio::time::Instant) {
    if tasks.is_empty() {
        let _ = tokio::time::timeout_at(deadline, ctx.notify.notified()).await;
        return;
    }
    tokio::select! {
        () = tokio::time::sleep_until(deadline) => {}
        () = ctx.notify.notified() => {}
        _ = tasks.join_next() => {}
    }
}
