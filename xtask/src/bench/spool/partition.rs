//! Row 11 of `bench spool` (cairn only): **a drain under a per-partition limit**, against the
//! same drain on a queue without limits.
//!
//! Each run drains twice, each time on a fresh store: `--partition-runs` (20,000) runs, run
//! *i* with the partition key *i* mod `--partitions` (1,000), enqueued in bulk before the clock
//! as row 8 enqueues its runs; then cairn's `Consumer` with row 8's settings at concurrency
//! [`CONCURRENCY`] (prefetch `--drain-prefetch`, a no-op handler), timed until every run is
//! recorded as done. The limited drain's queue gets `QueueLimits { per_partition:
//! Some(--partition-limit), .. }` (1) before its runs are enqueued, so a claim takes at most
//! that many runs of one partition at once (on Postgres a limited queue's claim is a
//! transaction under the queue's advisory lock instead of the one-statement claim); the
//! baseline's queue has no limits. The two drains alternate which goes first, run by run, so
//! drift on the machine hits both alike. After each drain the store's `stats()` must show
//! every run of the queue succeeded, and nothing else, or the bench fails.
//!
//! Reported: both rates, the whole machine's CPU per 1,000 jobs (and cairn's own process's),
//! and limited ÷ unlimited (the median of each run's ratio).

use cairn::spool::{EnqueueItem, PartitionKey, QueueLimits, SpoolStats};
use cairn::{EnqueueOptions, QueueName, RunState};

use super::super::chart::Bar;
use super::super::figures::thousands;
use super::super::setup::{store_err, Backend};
use super::args::SpoolArgs;
use super::fresh::{key, queue, Fresh};
use super::rates::{fmt_rate, median};
use super::runs::DrainRun;
use super::timed::{self, DrainSettings};

/// Concurrency of row 11's consumer: row 8's first drain's (its default `--drain-concurrency`
/// starts with 10).
pub(super) const CONCURRENCY: u64 = 10;

/// Row 11's drains, one of each per run, in the order of the runs.
#[derive(Default, Clone)]
pub(super) struct Runs {
    /// The limited queue's drains.
    limited: Vec<DrainRun>,
    /// The baseline's: the same runs and partition keys on a queue without limits.
    unlimited: Vec<DrainRun>,
}

/// The partition key of the `i`-th run: round-robin over `partitions` keys (`p0`, `p1`, …).
fn partition_of(i: u64, partitions: u64) -> Result<PartitionKey, String> {
    PartitionKey::new(format!("p{}", i % partitions.max(1))).map_err(store_err)
}

/// Partition keys the runs actually carry: `partitions`, or fewer when there are fewer runs.
fn keys_used(runs: u64, partitions: u64) -> u64 {
    partitions.min(runs)
}

/// The runs of one drain: distinct dedup keys, partition keys round-robin, payload `{}`.
fn items(runs: u64, partitions: u64) -> Result<Vec<EnqueueItem>, String> {
    (0..runs)
        .map(|i| {
            Ok(EnqueueItem::new(key(i), b"{}".to_vec())
                .with_options(EnqueueOptions::default().partition(partition_of(i, partitions)?)))
        })
        .collect()
}

/// Checks that `queue` holds exactly `expected` runs, all succeeded.
fn check_succeeded(
    stats: &SpoolStats,
    queue: &QueueName,
    expected: u64,
    what: &str,
) -> Result<(), String> {
    let counts = stats.queues.get(queue).map(|q| &q.runs);
    let succeeded = counts
        .and_then(|c| c.get(&RunState::Succeeded))
        .copied()
        .unwrap_or(0);
    let others: Vec<String> = counts
        .into_iter()
        .flatten()
        .filter(|(state, n)| **state != RunState::Succeeded && **n > 0)
        .map(|(state, n)| format!("{n} {state}"))
        .collect();
    if succeeded == expected && others.is_empty() {
        return Ok(());
    }
    Err(format!(
        "row 11 ({what}): after the drain, {succeeded} of the {expected} runs of queue `{queue}` \
         succeeded in the store's stats{}",
        if others.is_empty() {
            String::new()
        } else {
            format!("; also {}", others.join(", "))
        }
    ))
}

/// How a drain is named in the log and in errors.
fn variant(limit: Option<u32>) -> String {
    limit.map_or_else(|| "no limit".into(), |n| format!("per_partition = {n}"))
}

/// One run of row 11: the limited drain and the baseline, each on a fresh store.
pub(super) async fn measure(
    backend: Backend,
    pg_url: Option<&str>,
    args: &SpoolArgs,
    runs: &mut Runs,
) -> Result<(), String> {
    let items = items(args.partition_runs, args.partitions)?;
    let limited_first = runs.limited.len().is_multiple_of(2);
    for limited in [limited_first, !limited_first] {
        let limit = limited.then_some(args.partition_limit);
        let fresh = Fresh::open(backend, pg_url).await?;
        let drained = drain_on(backend, &fresh, args, &items, limit).await;
        let closed = fresh.close().await;
        let run = drained?;
        closed?;
        if limited {
            runs.limited.push(run);
        } else {
            runs.unlimited.push(run);
        }
    }
    Ok(())
}

/// One drain of row 11 on `fresh`: the queue's limits, its runs, the timed drain, the check.
async fn drain_on(
    backend: Backend,
    fresh: &Fresh,
    args: &SpoolArgs,
    items: &[EnqueueItem],
    limit: Option<u32>,
) -> Result<DrainRun, String> {
    let q = queue();
    let what = variant(limit);
    eprintln!(
        "cairn {}: drain {} runs over {} partitions, {what}…",
        backend.name(),
        args.partition_runs,
        keys_used(args.partition_runs, args.partitions)
    );
    let flow = if limit.is_some() {
        let limits = QueueLimits {
            per_partition: limit,
            ..QueueLimits::default()
        };
        fresh
            .spool
            .set_queue_limits(&q, &limits)
            .await
            .map_err(store_err)?
    } else {
        fresh.spool.queue_flow(&q).await.map_err(store_err)?
    };
    if flow.paused || flow.limits.per_partition != limit || flow.limits.max_claimed.is_some() {
        return Err(format!(
            "row 11 ({what}): the queue's stored flow is {flow:?}, not the one asked for"
        ));
    }
    timed::fill(fresh.spool.as_ref(), &q, items).await?;
    let settings = DrainSettings {
        concurrency: CONCURRENCY,
        prefetch: args.drain_prefetch,
    };
    let drained = timed::drain(
        fresh.spool.clone(),
        &q,
        "bench-partition",
        settings,
        args.partition_runs,
    )
    .await?;
    let run = drained.run(None);
    drained.stop().await?;
    let stats = fresh.spool.stats().await.map_err(store_err)?;
    check_succeeded(&stats, &q, args.partition_runs, &what)?;
    Ok(run)
}

/// The busy CPU-seconds per 1,000 jobs of a drain (the whole machine's, or `own`: cairn's
/// process's).
fn cpu_per_1000(d: &DrainRun, own: bool) -> Option<f64> {
    let s = if own { d.own_cpu_s } else { d.busy_cpu_s }?;
    Some(s / d.jobs.max(1) as f64 * 1_000.0)
}

/// The median of `f` over `drains`.
fn median_of(drains: &[DrainRun], f: impl Fn(&DrainRun) -> Option<f64>) -> Option<f64> {
    median(&drains.iter().filter_map(f).collect::<Vec<_>>())
}

/// The median of each run's limited ÷ unlimited `f`.
fn paired_ratio(runs: &Runs, f: impl Fn(&DrainRun) -> Option<f64>) -> Option<f64> {
    let ratios: Vec<f64> = runs
        .limited
        .iter()
        .zip(&runs.unlimited)
        .filter_map(|(l, u)| match (f(l), f(u)) {
            (Some(l), Some(u)) if u > 0.0 => Some(l / u),
            _ => None,
        })
        .collect();
    median(&ratios)
}

fn fmt_ratio(x: Option<f64>) -> String {
    x.map_or_else(|| "n/a".into(), |x| format!("{x:.2}×"))
}

fn fmt_cpu(x: Option<f64>) -> String {
    x.map_or_else(|| "n/a".into(), |x| format!("{x:.3} s"))
}

/// Row 11's report: the table and its settings.
fn report(backend: Backend, args: &SpoolArgs, runs: &Runs) -> String {
    let limit = variant(Some(args.partition_limit));
    let mut out = format!(
        "\n### {} — 11. drain under a per-partition limit: {} queued runs round-robin over {} \
         partition keys, {limit}, against the same runs on a queue without limits (median of \
         {} runs)\n\n",
        backend.name(),
        thousands(args.partition_runs),
        thousands(keys_used(args.partition_runs, args.partitions)),
        args.runs
    );
    out.push_str(&format!(
        "| row | {limit} | no limit (same keys) | limited ÷ unlimited |\n|---|---:|---:|---:|\n"
    ));
    let rate = |d: &DrainRun| Some(d.rate);
    out.push_str(&format!(
        "| 11. drain, concurrency {CONCURRENCY} (jobs/s) | {} | {} | {} |\n",
        fmt_rate(median_of(&runs.limited, rate)),
        fmt_rate(median_of(&runs.unlimited, rate)),
        fmt_ratio(paired_ratio(runs, rate))
    ));
    let cpu = |d: &[DrainRun]| {
        format!(
            "{} ({})",
            fmt_cpu(median_of(d, |d| cpu_per_1000(d, false))),
            fmt_cpu(median_of(d, |d| cpu_per_1000(d, true)))
        )
    };
    out.push_str(&format!(
        "| 11. CPU per 1,000 jobs: the whole machine (cairn's own process) | {} | {} | {} |\n",
        cpu(&runs.limited),
        cpu(&runs.unlimited),
        fmt_ratio(paired_ratio(runs, |d| cpu_per_1000(d, false)))
    ));
    out.push_str(&format!(
        "\nRow 11 settings: each drain on a fresh store; run i enqueued with partition key \
         `p<i mod {partitions}>` by `enqueue_many` (1,000 per call) before the clock; cairn's \
         `Consumer` as in row 8's concurrency-{CONCURRENCY} drain: concurrency {CONCURRENCY}, \
         prefetch {prefetch} (a claim asks for up to {most} runs), claim coalescing 2 ms (the \
         default), a no-op handler; the limited queue's `QueueLimits {{ per_partition: \
         Some({n}), .. }}` set before its runs are enqueued ({engine}); the baseline's queue \
         has no limits. The two drains alternate which goes first, run by run; the ratios are \
         the medians of each run's ratio. Every drain checked in `stats()`: all {jobs} runs \
         succeeded.\n",
        partitions = args.partitions,
        prefetch = args.drain_prefetch,
        most = CONCURRENCY + args.drain_prefetch,
        n = args.partition_limit,
        engine = match backend {
            Backend::Sqlite =>
                "a limited claim counts the partitions' claimed runs under the \
                                one writer",
            Backend::Postgres =>
                "a limited claim is a transaction under the queue's advisory \
                                  lock, where the baseline's is one statement",
        },
        jobs = thousands(args.partition_runs),
    ));
    out
}

/// Prints row 11.
pub(super) fn print_table(backend: Backend, args: &SpoolArgs, runs: &Runs) {
    print!("{}", report(backend, args, runs));
}

/// Row 11's bars: the limited drain and the baseline.
pub(super) fn chart_rows(
    backend: Backend,
    args: &SpoolArgs,
    runs: &Runs,
) -> Vec<(String, Vec<Bar>)> {
    let limit = variant(Some(args.partition_limit));
    let bars = [
        (format!("cairn, {limit}"), &runs.limited),
        ("cairn, no limit".into(), &runs.unlimited),
    ]
    .into_iter()
    .filter_map(|(label, drains)| {
        median_of(drains, |d| Some(d.rate)).map(|value| Bar { label, value })
    })
    .collect();
    vec![(
        format!(
            "{}: 11. drain {} runs over {} partitions, concurrency {CONCURRENCY}",
            backend.name(),
            thousands(args.partition_runs),
            thousands(keys_used(args.partition_runs, args.partitions))
        ),
        bars,
    )]
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use cairn::spool::QueueStats;
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        spool: SpoolArgs,
    }

    fn args(extra: &[&str]) -> Result<SpoolArgs, clap::Error> {
        let mut argv = vec!["bench", "--backend", "all"];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).map(|c| c.spool)
    }

    fn drain(rate: f64, busy: Option<f64>) -> DrainRun {
        DrainRun {
            concurrency: CONCURRENCY,
            jobs: 2_000,
            rate,
            busy_cpu_s: busy,
            own_cpu_s: busy.map(|b| b / 2.0),
            wal_bytes: None,
        }
    }

    #[test]
    fn runs_take_partition_keys_round_robin() {
        let items = items(7, 3).unwrap();
        let keys: Vec<&str> = items
            .iter()
            .map(|i| i.options.partition_key.as_ref().unwrap().as_str())
            .collect();
        assert_eq!(keys, ["p0", "p1", "p2", "p0", "p1", "p2", "p0"]);
        assert_eq!(items[4].key, key(4));
        assert_eq!(items[4].payload, b"{}");
        assert_eq!(keys_used(7, 3), 3);
        assert_eq!(keys_used(2, 3), 2);
        assert_eq!(partition_of(5, 1).unwrap().as_str(), "p0");
    }

    #[test]
    fn the_check_wants_every_run_succeeded_and_nothing_else() {
        let q = queue();
        let stats = |runs: &[(RunState, u64)]| SpoolStats {
            queues: BTreeMap::from([(
                q.clone(),
                QueueStats {
                    runs: runs.iter().copied().collect(),
                    ..QueueStats::default()
                },
            )]),
            ..SpoolStats::default()
        };
        check_succeeded(&stats(&[(RunState::Succeeded, 5)]), &q, 5, "x").unwrap();
        let short = check_succeeded(&stats(&[(RunState::Succeeded, 4)]), &q, 5, "x");
        assert!(short.unwrap_err().contains("4 of the 5 runs"));
        let other = check_succeeded(
            &stats(&[(RunState::Succeeded, 5), (RunState::Queued, 1)]),
            &q,
            5,
            "per_partition = 1",
        )
        .unwrap_err();
        assert!(
            other.contains("per_partition = 1") && other.contains("also 1 queued"),
            "{other}"
        );
        let missing = check_succeeded(&SpoolStats::default(), &q, 5, "x").unwrap_err();
        assert!(missing.contains("0 of the 5 runs"), "{missing}");
    }

    #[test]
    fn the_flags_default_to_the_row_and_row_11_is_a_row() {
        let a = args(&[]).unwrap();
        assert_eq!(
            (a.partition_runs, a.partitions, a.partition_limit),
            (20_000, 1_000, 1)
        );
        assert!(a.row(11) && a.all_rows());
        let only = args(&["--rows", "11"]).unwrap();
        assert!(only.row(11) && !only.row(8) && !only.all_rows());
        assert!(args(&["--rows", "12"]).is_err());
        assert!(args(&["--partition-limit", "0"]).is_err());
        assert!(args(&["--partitions", "0"]).is_err());
    }

    #[test]
    fn the_report_shows_both_rates_and_the_paired_ratio() {
        let a = args(&[
            "--partition-runs",
            "2000",
            "--partitions",
            "200",
            "--runs",
            "2",
        ])
        .unwrap();
        let runs = Runs {
            limited: vec![drain(1_000.0, Some(0.4)), drain(3_000.0, Some(0.2))],
            unlimited: vec![drain(4_000.0, Some(0.2)), drain(4_000.0, None)],
        };
        // Per-run ratios 0.25 and 0.75: their median 0.5 (the medians' ratio would be the same
        // here; with the CPU, only the first run has both figures).
        assert_eq!(paired_ratio(&runs, |d| Some(d.rate)), Some(0.5));
        let out = report(Backend::Postgres, &a, &runs);
        assert!(out.contains(
            "### postgres — 11. drain under a per-partition limit: 2,000 queued runs round-robin \
             over 200 partition keys, per_partition = 1,"
        ));
        assert!(
            out.contains("| 11. drain, concurrency 10 (jobs/s) | 2,000 | 4,000 | 0.50× |"),
            "{out}"
        );
        assert!(
            out.contains(
                "| 11. CPU per 1,000 jobs: the whole machine (cairn's own process) | 0.150 s \
                 (0.075 s) | 0.100 s (0.050 s) | 2.00× |"
            ),
            "{out}"
        );
        assert!(out.contains("advisory lock"));
        let empty = report(Backend::Sqlite, &a, &Runs::default());
        assert!(empty.contains("| n/a | n/a | n/a |"), "{empty}");
        let chart = chart_rows(Backend::Sqlite, &a, &runs);
        assert_eq!(chart.len(), 1);
        let labels: Vec<&str> = chart[0].1.iter().map(|b| b.label.as_str()).collect();
        assert_eq!(labels, ["cairn, per_partition = 1", "cairn, no limit"]);
        assert_eq!(chart[0].1[0].value, 2_000.0);
    }
}
