//! Rows 8–10 of `bench spool` (issue #24's rows 6–8): how fast a queue is emptied when every
//! system may batch, how long a run waits from its enqueue in one process to its handler in
//! another, and what the whole machine spends per job.
//!
//! - Row 8, **drain with batching allowed**: `--drain` (20,000) runs queued before the clock,
//!   then one consumer per system with concurrency C for each C of `--drain-concurrency`
//!   (10, 24), a no-op handler, timed until every run is recorded as done in the store. Each
//!   system runs with its batch fetch and batched completion on: cairn's `Consumer` with a
//!   prefetch of `--drain-prefetch` (500, graphile-worker's documented local queue size)
//!   claims up to concurrency + prefetch runs in one statement, a slot takes its next run
//!   while the previous ack is on its way, and the acks go through the backend's batching
//!   (SQLite: the writer's group commit; Postgres: the ack lane, one `UPDATE … FROM
//!   unnest(…)` of up to 256 acks); the peers' settings are printed beside the table.
//! - Row 9, **end-to-end latency**: a consumer in another OS process (this binary, `bench
//!   latency-consumer`), a producer here enqueueing one run at a time on a fixed schedule of
//!   `--latency-rate` (200) runs per second; each payload carries its send time (wall clock,
//!   µs), the consumer's handler subtracts it from its own clock at handler start.
//!   `--latency-samples` (1,000) after 20 warm-up runs.
//! - Row 10, **CPU per job**: the whole machine's busy CPU-seconds (user, system, interrupts;
//!   the database server, the peers' runtimes and this process included; iowait excluded) per
//!   1,000 jobs of row 8, from `/proc/stat` over exactly the drain's window. For cairn the
//!   share of its own process (`/proc/self/stat`) is printed beside it: the rest is the
//!   database server (Postgres) and the rest of the machine. On Postgres, the WAL the server
//!   wrote per job, and the row versions and index entries cairn's drain wrote per job
//!   ([`costs`]).

use std::time::Duration;

use cairn::spool::{ConsumerBuilder, EnqueueItem, Job, Outcome};
use cairn::{ConsumerId, EnqueueOptions, QueueName};

use super::super::chart::Bar;
use super::super::figures::thousands;
use super::super::setup::{store_err, Backend};
use super::args::{LatencyConsumerArgs, SpoolArgs};
use super::consumer::{now_micros, open_spool, ConsumerChild};
use super::fresh::{key, queue, Fresh};
use super::rates::{fmt_rate, median};
use super::runs::{DrainRun, LatencyRun, Runs, System};
use super::timed::{self, DrainSettings};

use super::costs;

/// Rows 8 (drain) and 3's target: cairn at least this many times the best peer.
const TARGET_RATE: f64 = 1.5;
/// Row 10's target: cairn's busy CPU per job at most this share of graphile-worker's.
const TARGET_CPU: f64 = 0.5;
/// Row 9's target on SQLite (on Postgres: graphile-worker's p99).
const TARGET_SQLITE_P99_MS: f64 = 20.0;
/// Warm-up runs of row 9 that are not counted.
const WARM_UP: u64 = 20;
/// Concurrency of row 9's consumers (every system's).
const LATENCY_CONCURRENCY: usize = 10;

/// The server's WAL position (Postgres), for the WAL written over a measurement.
async fn wal_lsn(fresh: &Fresh) -> Option<String> {
    let admin = fresh.admin.as_ref()?;
    sqlx::query_scalar::<_, String>("SELECT pg_catalog.pg_current_wal_lsn()::text")
        .fetch_one(admin)
        .await
        .ok()
}

/// Bytes of WAL since `from` (Postgres).
async fn wal_since(fresh: &Fresh, from: Option<String>) -> Option<f64> {
    let (admin, from) = (fresh.admin.as_ref()?, from?);
    sqlx::query_scalar::<_, f64>(
        "SELECT pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), $1::pg_lsn)::float8",
    )
    .bind(from)
    .fetch_one(admin)
    .await
    .ok()
}

/// The drains of one JSON run object (`"drain": [{concurrency, jobs, rate, busy_cpu_s}]`).
pub(super) fn parse_drains(run: &serde_json::Value) -> Vec<DrainRun> {
    run["drain"]
        .as_array()
        .map(|ds| {
            ds.iter()
                .filter_map(|d| {
                    Some(DrainRun {
                        concurrency: d["concurrency"].as_u64()?,
                        jobs: d["jobs"].as_u64()?,
                        rate: d["rate"].as_f64()?,
                        busy_cpu_s: d["busy_cpu_s"].as_f64(),
                        own_cpu_s: None,
                        wal_bytes: d["wal_bytes"].as_f64(),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The latency of one JSON run object (`"latency": {samples, p50_ms, p99_ms, max_ms, mean_ms}`).
pub(super) fn parse_latency(run: &serde_json::Value) -> Option<LatencyRun> {
    let l = &run["latency"];
    Some(LatencyRun {
        samples: l["samples"].as_u64()?,
        p50_ms: l["p50_ms"].as_f64()?,
        p99_ms: l["p99_ms"].as_f64()?,
        max_ms: l["max_ms"].as_f64()?,
        mean_ms: l["mean_ms"].as_f64().unwrap_or(f64::NAN),
    })
}

/// One run of cairn's row 8, every concurrency, each on a fresh store.
pub(super) async fn measure_cairn(
    backend: Backend,
    pg_url: Option<&str>,
    args: &SpoolArgs,
    runs: &mut Runs,
) -> Result<(), String> {
    for &c in &args.drain_concurrency {
        let q = queue();
        // Postgres: the drain's writes are counted too (`costs`), so the runs are enqueued
        // through a spool of their own, closed before the drain.
        let (fresh, counted) = match (backend, pg_url) {
            (Backend::Postgres, Some(url)) => {
                let (fresh, counted) = costs::Counted::open(url).await?;
                (fresh, Some(counted))
            }
            _ => (Fresh::open(backend, pg_url).await?, None),
        };
        eprintln!(
            "cairn {}: drain {} runs, concurrency {c}…",
            backend.name(),
            args.drain
        );
        let items: Vec<EnqueueItem> = (0..args.drain)
            .map(|i| EnqueueItem::new(key(i), b"{}".to_vec()))
            .collect();
        let enqueuer: &dyn cairn::Spool = match &counted {
            Some(counted) => &counted.enqueuer,
            None => fresh.spool.as_ref(),
        };
        timed::fill(enqueuer, &q, &items).await?;
        let before = match &counted {
            Some(counted) => counted
                .before()
                .await
                .map_err(|e| eprintln!("cairn postgres: the drain's writes are not counted: {e}"))
                .ok(),
            None => None,
        };
        let lsn = wal_lsn(&fresh).await;
        let settings = DrainSettings {
            concurrency: c,
            prefetch: args.drain_prefetch,
        };
        let drained =
            timed::drain(fresh.spool.clone(), &q, "bench-drain", settings, args.drain).await?;
        let run = drained.run(wal_since(&fresh, lsn).await);
        drained.stop().await?;
        if let (Some(counted), Some(before)) = (&counted, &before) {
            match counted.after(before, c, args.drain).await {
                Ok(run) => costs::record(run),
                Err(e) => eprintln!("cairn postgres: the drain's writes are not counted: {e}"),
            }
        }
        runs.drain.push(run);
        fresh.close().await?;
    }
    Ok(())
}

/// One run of cairn's row 9: a consumer in another process, a producer here at a steady rate.
pub(super) async fn measure_cairn_latency(
    backend: Backend,
    pg_url: Option<&str>,
    args: &SpoolArgs,
    runs: &mut Runs,
) -> Result<(), String> {
    eprintln!(
        "cairn {}: end-to-end latency, {} runs/s, {} samples…",
        backend.name(),
        args.latency_rate,
        args.latency_samples
    );
    let fresh = Fresh::open(backend, pg_url).await?;
    let mut child =
        ConsumerChild::spawn("latency-consumer", "the latency consumer", backend, &fresh)?;
    let result: Result<LatencyRun, String> = async {
        child.ready().await?;
        let q = queue();
        let total = args.latency_samples + WARM_UP;
        let every = Duration::from_secs_f64(1.0 / args.latency_rate as f64);
        let start = tokio::time::Instant::now();
        for i in 0..total {
            // A fixed schedule: a slow enqueue does not shift the ones after it.
            tokio::time::sleep_until(start + every.mul_f64(i as f64)).await;
            let sent = now_micros();
            fresh
                .spool
                .enqueue(
                    &q,
                    &key(i),
                    format!("{i} {sent}").into_bytes(),
                    EnqueueOptions::default(),
                )
                .await
                .map_err(store_err)?;
        }
        let mut lat = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
        while (lat.len() as u64) < total {
            let line = child.next().await?;
            let (i, micros) = line
                .strip_prefix("lat ")
                .and_then(|l| l.split_once(' '))
                .ok_or_else(|| format!("unexpected line from the latency consumer: {line}"))?;
            let i: u64 = i.parse().map_err(|e| format!("bad sequence {i}: {e}"))?;
            let micros: u64 = micros
                .parse()
                .map_err(|e| format!("bad latency {micros}: {e}"))?;
            lat.push((i, micros));
        }
        Ok(summarize(
            lat.into_iter()
                .filter(|(i, _)| *i >= WARM_UP)
                .map(|(_, m)| m as f64 / 1e3)
                .collect(),
        ))
    }
    .await;
    drop(child);
    fresh.close().await?;
    runs.latency.push(result?);
    Ok(())
}

/// p50, p99 (the value at rank ⌈n·q⌉ of the sorted samples), max and mean of `ms`.
fn summarize(mut ms: Vec<f64>) -> LatencyRun {
    ms.sort_by(f64::total_cmp);
    let n = ms.len();
    let pick = |q: f64| {
        if n == 0 {
            f64::NAN
        } else {
            ms[((n as f64 * q).ceil() as usize).clamp(1, n) - 1]
        }
    };
    LatencyRun {
        samples: n as u64,
        p50_ms: pick(0.50),
        p99_ms: pick(0.99),
        max_ms: ms.last().copied().unwrap_or(f64::NAN),
        mean_ms: if n == 0 {
            f64::NAN
        } else {
            ms.iter().sum::<f64>() / n as f64
        },
    }
}

/// The other process of row 9: a `Consumer` (concurrency 10, the defaults otherwise) whose
/// handler prints `lat <key no> <µs since the payload's send time>` as its first step (the
/// payload is `<key no> <send time, unix µs>`).
pub(crate) async fn latency_consumer(args: LatencyConsumerArgs) -> Result<(), String> {
    let spool = open_spool(args.backend, &args.target, &args.schema).await?;
    let q = QueueName::new(args.queue).map_err(store_err)?;
    let me =
        ConsumerId::new(format!("latency-consumer-{}", std::process::id())).map_err(store_err)?;
    let consumer = ConsumerBuilder::new(spool, q, me)
        .concurrency(LATENCY_CONCURRENCY)
        .spawn(|job: Job| async move {
            let at = now_micros();
            // The payload is `<key no> <send time, unix µs>`.
            let payload = String::from_utf8_lossy(job.payload()).into_owned();
            let (no, sent) = payload.split_once(' ').unwrap_or(("?", ""));
            let sent: u64 = sent.parse().unwrap_or(at);
            println!("lat {no} {}", at.saturating_sub(sent));
            Outcome::Done
        })
        .await
        .map_err(store_err)?;
    println!("ready");
    // Runs until the bench kills it.
    std::future::pending::<()>().await;
    drop(consumer);
    Ok(())
}

/// The peers of rows 3, 8 and 9 on `backend`, in the tables' order.
pub(super) fn peers_of(backend: Backend) -> &'static [&'static str] {
    match backend {
        Backend::Sqlite => &["riverqueue", "apalis"],
        Backend::Postgres => &["riverqueue", "apalis", "graphile_worker", "graphile-worker"],
    }
}

/// How a system is named in the tables: the two graphile-workers apart.
pub(super) fn display(name: &str) -> String {
    match name {
        "graphile-worker" => "graphile-worker (Node)".into(),
        "graphile_worker" => "graphile_worker (Rust)".into(),
        other => other.into(),
    }
}

/// The median WAL bytes per job of a system's drains at `c`.
fn wal_per_job(runs: &Runs, c: u64) -> Option<f64> {
    median(
        &runs
            .drain
            .iter()
            .filter(|d| d.concurrency == c)
            .filter_map(|d| d.wal_bytes.map(|w| w / d.jobs.max(1) as f64))
            .collect::<Vec<_>>(),
    )
}

/// The median rate, busy CPU-seconds and own CPU-seconds of a system's drains at `c`.
fn drain_at(runs: &Runs, c: u64) -> (Option<f64>, Option<f64>, Option<f64>, u64) {
    let at: Vec<&DrainRun> = runs.drain.iter().filter(|d| d.concurrency == c).collect();
    let jobs = at.first().map_or(0, |d| d.jobs);
    let per_1000 = |x: Option<f64>, d: &DrainRun| x.map(|x| x / d.jobs.max(1) as f64 * 1_000.0);
    (
        median(&at.iter().map(|d| d.rate).collect::<Vec<_>>()),
        median(
            &at.iter()
                .filter_map(|d| per_1000(d.busy_cpu_s, d))
                .collect::<Vec<_>>(),
        ),
        median(
            &at.iter()
                .filter_map(|d| per_1000(d.own_cpu_s, d))
                .collect::<Vec<_>>(),
        ),
        jobs,
    )
}

fn present(backend: Backend, systems: &[System]) -> Vec<&System> {
    peers_of(backend)
        .iter()
        .filter_map(|n| systems.iter().find(|s| s.name == *n))
        .collect()
}

/// Prints rows 8 and 10.
pub(super) fn print_drain(backend: Backend, args: &SpoolArgs, systems: &[System]) {
    let cairn = &systems[0];
    let peers = present(backend, systems);
    println!(
        "\n### {} — 8. drain with batching allowed, {} queued runs (jobs/s, median of {} runs)\n",
        backend.name(),
        thousands(args.drain),
        args.runs
    );
    let mut header = "| row | cairn |".to_owned();
    let mut rule = "|---|---:|".to_owned();
    for p in &peers {
        header.push_str(&format!(" {} |", display(&p.name)));
        rule.push_str("---:|");
    }
    header.push_str(&format!(" cairn ÷ best peer | target ≥{TARGET_RATE}× |"));
    rule.push_str("---:|---|");
    println!("{header}\n{rule}");
    for &c in &args.drain_concurrency {
        let (mine, ..) = drain_at(&cairn.runs, c);
        let mut line = format!("| 8. drain, concurrency {c} | {} |", fmt_rate(mine));
        let mut best: Option<(f64, String)> = None;
        for p in &peers {
            let (m, ..) = drain_at(&p.runs, c);
            line.push_str(&format!(" {} |", fmt_rate(m)));
            if let Some(m) = m {
                if best.as_ref().is_none_or(|(b, _)| m > *b) {
                    best = Some((m, display(&p.name)));
                }
            }
        }
        let (ratio, verdict) = verdict_ge(mine, best, TARGET_RATE);
        println!("{line} {ratio} | {verdict} |");
    }
    if !args.row(10) {
        return;
    }
    println!(
        "\n### {} — 10. CPU per job: the whole machine's busy CPU-seconds per 1,000 jobs of row 8 (median of {} runs)\n",
        backend.name(),
        args.runs
    );
    let mut header = "| row | cairn (its own process) |".to_owned();
    let mut rule = "|---|---:|".to_owned();
    for p in &peers {
        header.push_str(&format!(" {} |", display(&p.name)));
        rule.push_str("---:|");
    }
    let reference = (backend == Backend::Postgres).then_some("graphile-worker");
    header.push_str(" cairn ÷ graphile-worker (Node) | target ≤0.5× |");
    rule.push_str("---:|---|");
    println!("{header}\n{rule}");
    for &c in &args.drain_concurrency {
        let (_, busy, own, _) = drain_at(&cairn.runs, c);
        let cell = |x: Option<f64>| x.map_or_else(|| "n/a".to_owned(), |x| format!("{x:.3} s"));
        let mut line = format!(
            "| 10. CPU per 1,000 jobs, concurrency {c} | {} ({}) |",
            cell(busy),
            cell(own)
        );
        let mut graphile = None;
        for p in &peers {
            let (_, b, _, _) = drain_at(&p.runs, c);
            line.push_str(&format!(" {} |", cell(b)));
            if Some(p.name.as_str()) == reference {
                graphile = b;
            }
        }
        let (ratio, verdict) = match (busy, graphile) {
            (Some(mine), Some(g)) if g > 0.0 => (
                format!("{:.2}×", mine / g),
                if mine / g <= TARGET_CPU {
                    "met"
                } else {
                    "not met"
                }
                .to_owned(),
            ),
            _ => ("n/a".into(), "n/a".into()),
        };
        println!("{line} {ratio} | {verdict} |");
    }
    if backend != Backend::Postgres {
        return;
    }
    println!(
        "\nWAL the server wrote per job over the drain (bytes, median; `n/a`: the system does not report it):\n"
    );
    let mut header = "| row | cairn |".to_owned();
    let mut rule = "|---|---:|".to_owned();
    for p in &peers {
        header.push_str(&format!(" {} |", display(&p.name)));
        rule.push_str("---:|");
    }
    println!("{header}\n{rule}");
    let cell = |x: Option<f64>| x.map_or_else(|| "n/a".to_owned(), |x| thousands(x.round() as u64));
    for &c in &args.drain_concurrency {
        let mut line = format!(
            "| 10. WAL per job, concurrency {c} | {} |",
            cell(wal_per_job(&cairn.runs, c))
        );
        for p in &peers {
            line.push_str(&format!(" {} |", cell(wal_per_job(&p.runs, c))));
        }
        println!("{line}");
    }
    println!(
        "\nRow versions and index entries cairn's drain wrote per job (the server's \
         `pg_stat_user_tables` of the store's schema, from the queued state to the drained one, \
         read after the sessions that wrote ended; the peers' are not counted; mean of {} runs). \
         Index entries = (inserts + non-HOT updates) × the table's indexes: `≤` marks an upper \
         bound, where a partial index takes entries only for the rows inside its predicate:\n",
        args.runs
    );
    print!(
        "{}",
        costs::table(&costs::recorded(), &args.drain_concurrency)
    );
}

/// `(ratio cell, verdict)` for "mine ≥ target × best".
fn verdict_ge(mine: Option<f64>, best: Option<(f64, String)>, target: f64) -> (String, String) {
    match (mine, best) {
        (Some(c), Some((b, name))) if b > 0.0 => (
            format!("{:.2}× ({name})", c / b),
            if c / b >= target { "met" } else { "not met" }.to_owned(),
        ),
        _ => ("n/a".into(), "n/a".into()),
    }
}

/// Prints row 9.
pub(super) fn print_latency(backend: Backend, args: &SpoolArgs, systems: &[System]) {
    let mut all = vec![&systems[0]];
    all.extend(present(backend, systems));
    println!(
        "\n### {} — 9. end-to-end latency: enqueue in one process → handler start in another, {} runs/s, {} samples (ms, median of {} runs)\n",
        backend.name(),
        args.latency_rate,
        thousands(args.latency_samples),
        args.runs
    );
    println!(
        "| system | p50 | p99 | max | mean | samples per run |\n|---|---:|---:|---:|---:|---:|"
    );
    let med = |s: &System, f: fn(&LatencyRun) -> f64| {
        median(&s.runs.latency.iter().map(f).collect::<Vec<_>>())
    };
    let ms = |x: Option<f64>| x.map_or_else(|| "n/a".to_owned(), |x| format!("{x:.2}"));
    for s in &all {
        if s.runs.latency.is_empty() {
            let why = s.failed.clone().unwrap_or_else(|| "not measured".into());
            println!("| {} | {why} | | | | |", display(&s.name));
            continue;
        }
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            display(&s.name),
            ms(med(s, |l| l.p50_ms)),
            ms(med(s, |l| l.p99_ms)),
            ms(med(s, |l| l.max_ms)),
            ms(med(s, |l| l.mean_ms)),
            s.runs.latency.iter().map(|l| l.samples).min().unwrap_or(0),
        );
    }
    let mine = med(&systems[0], |l| l.p99_ms);
    let verdict = match backend {
        Backend::Sqlite => match mine {
            Some(p) => format!(
                "cairn p99 {p:.2} ms ≤ {TARGET_SQLITE_P99_MS} ms: {}",
                if p <= TARGET_SQLITE_P99_MS {
                    "met"
                } else {
                    "not met"
                }
            ),
            None => "n/a".into(),
        },
        Backend::Postgres => {
            let g = systems
                .iter()
                .find(|s| s.name == "graphile-worker")
                .and_then(|s| med(s, |l| l.p99_ms));
            match (mine, g) {
                (Some(p), Some(g)) => format!(
                    "cairn p99 {p:.2} ms ≤ graphile-worker (Node) p99 {g:.2} ms: {}",
                    if p <= g { "met" } else { "not met" }
                ),
                _ => "n/a (graphile-worker not measured)".into(),
            }
        }
    };
    println!("\nTarget: {verdict}");
}

/// Prints the settings of rows 8 and 9.
pub(super) fn print_settings(backend: Backend, args: &SpoolArgs, systems: &[System]) {
    println!("\nRows 8–10 settings:");
    println!(
        "- cairn: row 8: Consumer concurrency C, prefetch {} (a claim takes up to C + {} runs \
         in one statement), claim coalescing 2 ms (the default), a slot takes its next run \
         while the previous ack is on its way, acks batched by the backend ({}); row 9: a \
         Consumer of concurrency {LATENCY_CONCURRENCY} in another process (`bench \
         latency-consumer`), the defaults otherwise (no prefetch), woken by {}",
        args.drain_prefetch,
        args.drain_prefetch,
        match backend {
            Backend::Sqlite => "the writer's group commit",
            Backend::Postgres => "the ack lane, one UPDATE … FROM unnest(…) per batch",
        },
        match backend {
            Backend::Sqlite => "PRAGMA data_version polling (5 ms)",
            Backend::Postgres => "LISTEN/NOTIFY",
        }
    );
    for p in present(backend, systems) {
        match &p.failed {
            None => println!("- {}: {}", display(&p.name), p.settings),
            Some(why) => println!("- {}: NOT MEASURED — {why}", display(&p.name)),
        }
    }
}

/// Row 8's bars (one group per concurrency).
pub(super) fn chart_rows(
    backend: Backend,
    args: &SpoolArgs,
    systems: &[System],
) -> Vec<(String, Vec<Bar>)> {
    args.drain_concurrency
        .iter()
        .map(|&c| {
            let mut all = vec![&systems[0]];
            all.extend(present(backend, systems));
            let bars = all
                .iter()
                .filter_map(|s| {
                    drain_at(&s.runs, c).0.map(|v| Bar {
                        label: display(&s.name),
                        value: v,
                    })
                })
                .collect();
            (
                format!(
                    "{}: 8. drain {} runs, concurrency {c}",
                    backend.name(),
                    thousands(args.drain)
                ),
                bars,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_ranks_of_the_sorted_samples() {
        let l = summarize((1..=200).rev().map(f64::from).collect());
        assert_eq!(l.samples, 200);
        assert_eq!(l.p50_ms, 100.0);
        assert_eq!(l.p99_ms, 198.0);
        assert_eq!(l.max_ms, 200.0);
        assert!((l.mean_ms - 100.5).abs() < 1e-9);
        let one = summarize(vec![3.0]);
        assert_eq!((one.p50_ms, one.p99_ms, one.max_ms), (3.0, 3.0, 3.0));
        assert!(summarize(Vec::new()).p99_ms.is_nan());
    }

    #[test]
    fn peer_documents_parse_into_drains_and_latency() {
        let run = serde_json::json!({
            "drain": [
                {"concurrency": 10, "jobs": 20000, "rate": 5000.0, "secs": 4.0, "busy_cpu_s": 7.5, "wal_bytes": 1.0e7},
                {"concurrency": 24, "jobs": 20000, "rate": 6000.0, "secs": 3.3},
                {"concurrency": "x"}
            ],
            "latency": {"rate": 200, "samples": 1000, "p50_ms": 2.0, "p99_ms": 5.5, "max_ms": 9.0, "mean_ms": 2.4}
        });
        let d = parse_drains(&run);
        assert_eq!(d.len(), 2);
        assert_eq!(
            (d[0].concurrency, d[0].jobs, d[0].rate),
            (10, 20_000, 5_000.0)
        );
        assert_eq!(d[0].busy_cpu_s, Some(7.5));
        assert_eq!(d[1].busy_cpu_s, None);
        assert_eq!((d[0].wal_bytes, d[1].wal_bytes), (Some(1.0e7), None));
        let l = parse_latency(&run).expect("a latency");
        assert_eq!((l.samples, l.p50_ms, l.p99_ms), (1_000, 2.0, 5.5));
        assert!(parse_latency(&serde_json::json!({})).is_none());
        let runs = Runs {
            drain: d,
            ..Runs::default()
        };
        let (rate, busy, own, jobs) = drain_at(&runs, 10);
        assert_eq!((rate, jobs, own), (Some(5_000.0), 20_000, None));
        assert!((busy.expect("busy") - 0.375).abs() < 1e-12);
        assert_eq!(wal_per_job(&runs, 10), Some(500.0));
        assert_eq!(wal_per_job(&runs, 24), None);
    }
}
