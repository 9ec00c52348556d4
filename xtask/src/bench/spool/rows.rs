//! Cairn's rows 1–4 (enqueue one at a time, duplicate enqueue, claim + complete, producers),
//! each on a fresh store, and the settings they ran with.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::spool::{ConsumerBuilder, Job, Outcome};
use cairn::{ConsumerId, EnqueueOptions, QueueName, RunState, Spool};

use super::super::cpu::CpuMeter;
use super::super::setup::{store_err, Backend};
use super::args::SpoolArgs;
use super::fresh::{key, queue, Fresh};
use super::rates::rate;
use super::runs::Runs;

pub(super) fn cairn_settings(backend: Backend, args: &SpoolArgs) -> String {
    let engine = match backend {
        Backend::Sqlite => "cairn (SQLite WAL, synchronous=FULL, group commit)",
        Backend::Postgres => {
            "cairn (Postgres synchronous_commit=on, 10 pooled connections, batched enqueues \
             and acks)"
        }
    };
    format!(
        "{engine}; row 3: Consumer concurrency {w}, prefetch {p} (a claim takes up to {b} runs: \
         the free slots and room in the prefetch), claim coalescing 2 ms (the default), a slot \
         takes its next run while the previous ack is on its way",
        w = args.workers,
        p = args.prefetch,
        b = args.workers + args.prefetch
    )
}

/// One run of cairn's rows 1–4, each on a fresh store, added to `runs`.
pub(super) async fn measure_cairn(
    backend: Backend,
    pg_url: Option<&str>,
    args: &SpoolArgs,
    runs: &mut Runs,
) -> Result<(), String> {
    let q = queue();
    if args.row(1) || args.row(2) {
        // Rows 1 and 2 on one store.
        let fresh = Fresh::open(backend, pg_url).await?;
        let t = Instant::now();
        let cpu = CpuMeter::start();
        let mut ids = Vec::new();
        for i in 0..args.enqueue {
            let e = fresh
                .spool
                .enqueue(&q, &key(i), b"{}".to_vec(), EnqueueOptions::default())
                .await
                .map_err(store_err)?;
            ids.push(e.run_id);
        }
        runs.enqueue.push(rate(args.enqueue, t.elapsed()));
        runs.cpu[0].push(cpu.stop(args.enqueue));
        runs.producers_1.push(*runs.enqueue.last().unwrap_or(&0.0));
        let t = Instant::now();
        let cpu = CpuMeter::start();
        let mut same = 0;
        for i in 0..args.duplicates {
            let e = fresh
                .spool
                .enqueue(&q, &key(i), b"{}".to_vec(), EnqueueOptions::default())
                .await
                .map_err(store_err)?;
            if !e.created && ids.get(i as usize) == Some(&e.run_id) {
                same += 1;
            }
        }
        runs.duplicate.push(rate(args.duplicates, t.elapsed()));
        runs.cpu[1].push(cpu.stop(args.duplicates));
        runs.duplicate_returns = if same == args.duplicates {
            "the existing id (`created: false`)".into()
        } else {
            format!("the existing id for {same} of {} keys", args.duplicates)
        };
        fresh.close().await?;
    }
    if args.row(4) {
        // Row 4: producers.
        let fresh = Fresh::open(backend, pg_url).await?;
        let per = args.enqueue / args.producers;
        let t = Instant::now();
        let cpu = CpuMeter::start();
        let mut tasks = Vec::new();
        for p in 0..args.producers {
            let spool = fresh.spool.clone();
            let q = q.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..per {
                    spool
                        .enqueue(
                            &q,
                            &key(p * per + i),
                            b"{}".to_vec(),
                            EnqueueOptions::default(),
                        )
                        .await?;
                }
                Ok::<_, cairn::Error>(())
            }));
        }
        for task in tasks {
            task.await.map_err(|e| e.to_string())?.map_err(store_err)?;
        }
        runs.producers_n
            .push(rate(per * args.producers, t.elapsed()));
        runs.cpu[3].push(cpu.stop(per * args.producers));
        fresh.close().await?;
    }
    if args.row(3) {
        // Row 3: claim + complete.
        let fresh = Fresh::open(backend, pg_url).await?;
        seed(&fresh.spool, &q, args.claims).await?;
        let handled = Arc::new(AtomicU64::new(0));
        let t = Instant::now();
        let cpu = CpuMeter::start();
        let counter = handled.clone();
        let consumer = ConsumerBuilder::new(
            fresh.spool.clone(),
            q.clone(),
            ConsumerId::new("bench-consumer").map_err(store_err)?,
        )
        .concurrency(args.workers as usize)
        .prefetch(usize::try_from(args.prefetch).map_err(|e| e.to_string())?)
        .spawn(move |_job: Job| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::Relaxed);
                Outcome::Done
            }
        })
        .await
        .map_err(store_err)?;
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let settled = consumer
                .stats()
                .settled
                .get(&RunState::Succeeded)
                .copied()
                .unwrap_or(0);
            if settled >= args.claims {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "claim + complete did not finish in 600 s ({settled} of {} settled)",
                    args.claims
                ));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        runs.claim_complete.push(rate(args.claims, t.elapsed()));
        runs.cpu[2].push(cpu.stop(args.claims));
        let report = consumer.shutdown().await;
        if !report.is_clean() || report.stats.errors > 0 {
            return Err(format!(
                "the bench consumer did not finish cleanly: {report:?}"
            ));
        }
        fresh.close().await?;
    }
    Ok(())
}

/// Enqueues `n` runs with 8 concurrent producers (not measured).
pub(super) async fn seed(spool: &Arc<dyn Spool>, q: &QueueName, n: u64) -> Result<(), String> {
    let mut tasks = Vec::new();
    for p in 0..8 {
        let spool = spool.clone();
        let q = q.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = p;
            while i < n {
                spool
                    .enqueue(&q, &key(i), b"{}".to_vec(), EnqueueOptions::default())
                    .await?;
                i += 8;
            }
            Ok::<_, cairn::Error>(())
        }));
    }
    for task in tasks {
        task.await.map_err(|e| e.to_string())?.map_err(store_err)?;
    }
    Ok(())
}
