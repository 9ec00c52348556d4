//! Row 7 of `bench spool`: an enqueue inside the application's own transaction. One client
//! runs `--transactions` transactions per variant, one after the other; each inserts one
//! application row (`bench_order`) and then either enqueues one run through cairn (a) or
//! inserts one row of a table with the queue row's columns and types (`bench_bare_run`, like
//! `spool_run`, primary key only) with a bare `INSERT` (b), then commits. Every key and every
//! order id is new.
//!
//! The variants run interleaved in rounds of [`ROUND`] transactions, the order rotating every
//! round, so drift on the machine hits all of them alike; each variant's rate is its
//! transactions over the sum of its rounds' time. Variants:
//!
//! - SQLite (one store file; the application's tables come from an application migration set
//!   opened with the store): (a) `SqliteBackend::transaction` — the closure form, one hop to
//!   the writer thread; (a, handle) the facade's `Store::begin` handle over the same backend
//!   (`Transaction::sqlite` for the order row, then `enqueue`, `commit`: a hop each); (b) the
//!   application's own `rusqlite` connection to the same file (`BEGIN IMMEDIATE`, both
//!   inserts, `COMMIT`; one `spawn_blocking` per transaction); (b, in cairn's transaction) the
//!   bare insert inside `SqliteBackend::transaction`, which prices the enqueue alone.
//! - Postgres (the store in one schema, the application's tables in another): (a1) the
//!   `PgTransaction` of cairn's pool (`Store::begin`; the order row through
//!   `Transaction::postgres`); (a2) `Store::enqueue_in` on a transaction of the application's
//!   own `sqlx` pool (two more round trips: the `search_path` in and out); (b) the
//!   application's pool, bare insert; (b, in cairn's transaction) the bare insert in a
//!   `PgTransaction`. The application's pool has 4 connections (one client, but a released
//!   connection goes back to the pool in a task of its own, so with one the next `begin` waits
//!   for it) and does not ping them on acquire (cairn's own pool does not ping a connection
//!   used in the last 500 ms either). The target is checked against the faster (b).
//!
//! Durability is the engines' default for cairn: SQLite WAL with `synchronous=FULL` on every
//! connection, Postgres `synchronous_commit=on`.

mod postgres;
mod sqlite;
mod subject;

use std::time::{Duration, Instant};

use super::super::chart::Bar;
use super::super::cpu::{CpuMeter, CpuUse};
use super::super::setup::Backend;
use super::args::SpoolArgs;
use super::rates::{fmt_rate, median};
use postgres::PgSubject;
use sqlite::LiteSubject;
use subject::{baselines, variants, Phases, Subject, LITE_B_IN, PG_B_IN, PHASES};

/// Transactions per variant per round.
const ROUND: u64 = 20;

/// Transactions per variant before the clock starts (connections, statement caches).
const WARMUP: u64 = 20;

/// The target: (a) at least this fraction of (b)'s rate.
const TARGET: f64 = 0.9;

/// Each variant's rates and phase means, one per run.
#[derive(Default, Clone)]
pub(super) struct Runs {
    /// (variant label, transactions per second of each run), in the order measured.
    variants: Vec<(&'static str, Vec<f64>)>,
    /// (variant label, the mean of each phase in each run).
    phases: Vec<(&'static str, Vec<Phases>)>,
    /// (variant label, its CPU use in each run: the median over its rounds).
    cpu: Vec<(&'static str, Vec<CpuUse>)>,
}

impl Runs {
    fn push(&mut self, label: &'static str, rate: f64, phases: Phases, cpu: CpuUse) {
        match self.cpu.iter_mut().find(|(l, _)| *l == label) {
            Some((_, c)) => c.push(cpu),
            None => self.cpu.push((label, vec![cpu])),
        }
        match self.variants.iter_mut().find(|(l, _)| *l == label) {
            Some((_, rates)) => rates.push(rate),
            None => self.variants.push((label, vec![rate])),
        }
        match self.phases.iter_mut().find(|(l, _)| *l == label) {
            Some((_, p)) => p.push(phases),
            None => self.phases.push((label, vec![phases])),
        }
    }

    /// The median over the runs of each phase's mean.
    fn phases_of(&self, label: &str) -> Option<Phases> {
        let runs = &self.phases.iter().find(|(l, _)| *l == label)?.1;
        let mut out = [Duration::ZERO; 4];
        for (i, slot) in out.iter_mut().enumerate() {
            let xs: Vec<f64> = runs.iter().map(|p| p[i].as_secs_f64()).collect();
            *slot = Duration::from_secs_f64(median(&xs)?);
        }
        Some(out)
    }

    fn median_of(&self, label: &str) -> Option<f64> {
        self.variants
            .iter()
            .find(|(l, _)| *l == label)
            .and_then(|(_, r)| median(r))
    }
}

/// One run of row 7 on `backend`, added to `runs`.
pub(super) async fn measure(
    backend: Backend,
    pg_url: Option<&str>,
    args: &SpoolArgs,
    runs: &mut Runs,
) -> Result<(), String> {
    eprintln!(
        "cairn {}: enqueue in the application's transaction, {} per variant…",
        backend.name(),
        args.transactions
    );
    let rates = match backend {
        Backend::Sqlite => {
            let subject = LiteSubject::open().await?;
            let r = interleave(&subject, args.transactions).await;
            subject.close().await;
            r?
        }
        Backend::Postgres => {
            let subject = PgSubject::open(pg_url.ok_or("no Postgres server")?).await?;
            let r = interleave(&subject, args.transactions).await;
            subject.close().await?;
            r?
        }
    };
    for (label, rate, phases, cpu) in rates {
        runs.push(label, rate, phases, cpu);
    }
    Ok(())
}

/// Runs every variant `n` times, interleaved in rounds; returns each one's rate and the mean
/// of each of its phases.
async fn interleave(
    subject: &impl Subject,
    n: u64,
) -> Result<Vec<(&'static str, f64, Phases, CpuUse)>, String> {
    let labels = subject.labels();
    let mut next = vec![0u64; labels.len()];
    for (v, next) in next.iter_mut().enumerate() {
        for _ in 0..WARMUP {
            subject.one(v, *next).await?;
            *next += 1;
        }
    }
    let mut spent = vec![Duration::ZERO; labels.len()];
    let mut phase_sums = vec![[Duration::ZERO; 4]; labels.len()];
    let mut cpus: Vec<Vec<CpuUse>> = vec![Vec::new(); labels.len()];
    let mut done = vec![0u64; labels.len()];
    let mut round = 0;
    while done.iter().any(|&d| d < n) {
        for k in 0..labels.len() {
            let v = (k + round) % labels.len();
            let take = ROUND.min(n - done[v]);
            let cpu = CpuMeter::start();
            let t = Instant::now();
            for _ in 0..take {
                let p = subject.one(v, next[v]).await?;
                for (sum, d) in phase_sums[v].iter_mut().zip(p) {
                    *sum += d;
                }
                next[v] += 1;
            }
            let took = t.elapsed();
            cpus[v].push(cpu.stop(take));
            spent[v] += took;
            done[v] += take;
        }
        round += 1;
    }
    let count = u32::try_from(n).unwrap_or(u32::MAX);
    Ok(labels
        .iter()
        .zip(spent)
        .zip(phase_sums)
        .zip(cpus)
        .map(|(((l, t), p), c)| {
            (
                *l,
                super::rates::rate(n, t),
                p.map(|d| d / count),
                mean_cpu(&c),
            )
        })
        .collect())
}

/// The mean of the rounds' figures, field by field: a round is about one 10 ms tick of
/// `/proc`'s CPU clock long, so each round's CPU figure is a whole number of ticks and only
/// their mean converges on the CPU spent.
fn mean_cpu(rounds: &[CpuUse]) -> CpuUse {
    let mean = |xs: Vec<f64>| -> Option<f64> {
        (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
    };
    CpuUse {
        busy_cores: mean(rounds.iter().filter_map(|r| r.busy_cores).collect()),
        iowait_cores: mean(rounds.iter().filter_map(|r| r.iowait_cores).collect()),
        cores: rounds.first().map_or(0, |r| r.cores),
        process_per_op: mean(
            rounds
                .iter()
                .filter_map(|r| r.process_per_op.map(|d| d.as_secs_f64()))
                .collect(),
        )
        .map(Duration::from_secs_f64),
        wall_per_op: Duration::from_secs_f64(
            mean(rounds.iter().map(|r| r.wall_per_op.as_secs_f64()).collect()).unwrap_or(0.0),
        ),
        write_bytes_per_op: mean(rounds.iter().filter_map(|r| r.write_bytes_per_op).collect()),
        write_calls_per_op: mean(rounds.iter().filter_map(|r| r.write_calls_per_op).collect()),
    }
}

pub(super) fn print_table(backend: Backend, args: &SpoolArgs, runs: &Runs) {
    let [own, inside] = baselines(backend).map(|b| runs.median_of(b));
    // The target is checked against the faster of the two (b) figures.
    let strict = match (own, inside) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    println!(
        "\n### {} — 7. enqueue inside the application's transaction (1 client, {} transactions \
         per variant, interleaved in rounds of {ROUND}; transactions/s, median of {} runs)\n",
        backend.name(),
        super::super::figures::thousands(args.transactions),
        args.runs
    );
    println!(
        "| variant: BEGIN; order row; …; COMMIT | transactions/s | ÷ (b) own connection | ÷ (b) \
         in cairn's transaction | target ≥{TARGET}× the faster (b) |"
    );
    println!("|---|---:|---:|---:|---|");
    for (label, targeted) in variants(backend) {
        let m = runs.median_of(label);
        let cell = |base: Option<f64>, this: &str| match (m, base) {
            (Some(m), Some(b)) if label != this => format!("{:.2}×", m / b),
            _ => "—".to_owned(),
        };
        let [own_label, inside_label] = baselines(backend);
        let verdict = match (targeted, m, strict) {
            (true, Some(m), Some(b)) if m / b >= TARGET => format!("met ({:.2}×)", m / b),
            (true, Some(m), Some(b)) => format!("not met ({:.2}×)", m / b),
            (true, _, _) => "n/a".to_owned(),
            (false, _, _) => "—".to_owned(),
        };
        println!(
            "| {label} | {} | {} | {} | {verdict} |",
            fmt_rate(m),
            cell(own, own_label),
            cell(inside, inside_label)
        );
    }
    println!(
        "\nWhere the time goes (client clock, mean µs per transaction, median of the runs; \
         begin = taking the connection or the writer and BEGIN, commit = COMMIT and the way \
         back):\n"
    );
    println!("| variant | {} | total |", PHASES.join(" | "));
    println!("|---|---:|---:|---:|---:|---:|");
    for (label, _) in variants(backend) {
        if let Some(p) = runs.phases_of(label) {
            let us = |d: Duration| format!("{:.0}", d.as_secs_f64() * 1e6);
            let total: Duration = p.iter().sum();
            println!(
                "| {} | {} | {} |",
                short_label(label),
                p.map(us).join(" | "),
                us(total)
            );
        }
    }
    println!(
        "\nCPU while each variant ran (the mean over its rounds — `/proc` counts CPU in 10 ms \
         ticks, a round lasts about that long — then the median of the runs):"
    );
    for (label, _) in variants(backend) {
        let Some((_, cpu)) = runs.cpu.iter().find(|(l, _)| *l == label) else {
            continue;
        };
        if let Some(c) = CpuUse::median(cpu) {
            let writes = match backend {
                Backend::Sqlite => format!(" · {}", c.describe_writes()),
                Backend::Postgres => String::new(),
            };
            println!("- {}: {}{writes}", short_label(label), c.describe("bench"));
        }
    }
    let note = match backend {
        Backend::Sqlite => {
            "\nRow 7 settings: one store file, WAL, synchronous=FULL on every connection (cairn's \
             and the application's); the application's tables from an application migration \
             set (`bench_app`); `bench_bare_run` has spool_run's columns and types, primary key \
             only."
        }
        Backend::Postgres => {
            "\nRow 7 settings: synchronous_commit=on; the store in its own schema (cairn's pool, \
             10 connections), the application's tables in another, reached by the application's \
             own sqlx pool (4 connections, no ping on acquire); `bench_bare_run` is `LIKE \
             spool_run INCLUDING DEFAULTS INCLUDING IDENTITY` plus its primary key only."
        }
    };
    println!("{note}");
}

/// `(a1)` of `(a1) PgTransaction …`.
fn short_label(label: &str) -> String {
    match label {
        LITE_B_IN | PG_B_IN => "(b) in cairn's tx".to_owned(),
        _ => label.split(')').next().unwrap_or(label).to_owned() + ")",
    }
}

pub(super) fn chart_rows(backend: Backend, runs: &Runs) -> Vec<(String, Vec<Bar>)> {
    let bars = variants(backend)
        .iter()
        .filter_map(|(label, _)| {
            runs.median_of(label).map(|v| Bar {
                label: short_label(label),
                value: v,
            })
        })
        .collect();
    vec![(
        format!(
            "{}: 7. enqueue in the application's transaction (tx/s)",
            backend.name()
        ),
        bars,
    )]
}
