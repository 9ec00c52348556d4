//! `cargo xtask bench spool`: cairn's spool against its peers (riverqueue, apalis), the same
//! rows on fresh stores, one system after the other in one invocation.
//!
//! Rows: (1) enqueue N distinct keys one at a time; (2) enqueue 1,000 existing keys again, and
//! what each system returns; (3) claim + complete with a no-op handler, 10 workers; (4) 8
//! concurrent producers ÷ 1; (5) cross-process wake latency (cairn only): an enqueue in this
//! process until a consumer waiting in another OS process holds the run; (6) bulk enqueue:
//! 10,000 distinct keys in batches of 1,000, one bulk call per batch ([`bulk`]); (7) an
//! enqueue inside the application's own transaction next to one application row, against
//! the same transaction with a bare insert of a row as wide as the queue's ([`in_tx`]); (8)
//! a drain of queued runs with batching allowed, (9) end-to-end latency across processes,
//! (10) CPU per job of row 8 ([`drain`]); (11) a drain under a per-partition limit
//! (`QueueLimits::per_partition`, runs spread round-robin over the partition keys) against the
//! same drain on a queue without limits, cairn only ([`partition`]). `--rows` picks the rows
//! to run.
//!
//! The peers live in `bench/peers/`, a cargo project outside the workspace (they link another
//! sqlx and libsqlite3-sys than cairn's rusqlite); `--peers` builds it in release and runs it,
//! and it prints JSON. Row 6's graphile-worker peer is a Node script in `bench/peers/graphile/`,
//! installed there with `npm ci` when `node` is on the PATH.

mod args;
mod bulk;
mod consumer;
mod costs;
mod drain;
mod fresh;
mod in_tx;
mod partition;
mod peers;
mod rates;
mod rows;
mod runs;
mod table;
mod timed;
mod wake;

use super::chart::{self, Bar};
use super::figures::{printable_command, thousands};
use super::setup::{workspace_root, Backend};
use peers::{build_peers, run_peers};
use rates::median;
use rows::{cairn_settings, measure_cairn};
use runs::{merge, Runs, System};
use table::{chart_rows, print_table};
use wake::wake_latency;

pub(crate) use args::{BackendChoice, LatencyConsumerArgs, SpoolArgs, WakeConsumerArgs};
pub(crate) use drain::latency_consumer;
pub(crate) use wake::wake_consumer;

/// Runs the benchmark and prints its report.
pub(crate) async fn run(args: SpoolArgs) -> Result<(), String> {
    let backends = args.backend.backends();
    let pg_url = if backends.contains(&Backend::Postgres) {
        Some(cairn::testkit::postgres::testkit::test_server_url().await?)
    } else {
        None
    };
    let peers_bin = if args.peers && [1, 2, 3, 4, 6, 8, 9, 10].iter().any(|&n| args.row(n)) {
        Some(build_peers())
    } else {
        None
    };
    let graphile = if args.peers
        && [3, 6, 8, 9, 10].iter().any(|&n| args.row(n))
        && backends.contains(&Backend::Postgres)
    {
        Some(bulk::prepare_graphile())
    } else {
        None
    };
    let mut charts = Vec::new();
    println!(
        "`{}` — {} run(s) per row, medians; release profile: {}",
        printable_command(std::env::args().skip(1)),
        args.runs,
        !cfg!(debug_assertions)
    );
    for backend in backends {
        // Every run measures the raw commit rate, cairn and the peers one after the other, so
        // drift on the shared machine (other builds' I/O) hits all of them alike.
        let mut fsync = Vec::new();
        let mut systems = vec![System {
            name: "cairn".into(),
            settings: cairn_settings(backend, &args),
            runs: Runs::default(),
            failed: None,
        }];
        let mut in_tx = in_tx::Runs::default();
        let mut partition = partition::Runs::default();
        for run in 0..args.runs {
            eprintln!("{}: run {} of {}…", backend.name(), run + 1, args.runs);
            fsync.push(
                super::appends::raw_commit_rate(backend, pg_url.as_deref(), 1_000)
                    .await?
                    .0,
            );
            measure_cairn(backend, pg_url.as_deref(), &args, &mut systems[0].runs).await?;
            if args.row(6) {
                bulk::measure_cairn(backend, pg_url.as_deref(), &args, &mut systems[0].runs)
                    .await?;
            }
            if args.drains() {
                drain::measure_cairn(backend, pg_url.as_deref(), &args, &mut systems[0].runs)
                    .await?;
            }
            if args.row(9) {
                drain::measure_cairn_latency(
                    backend,
                    pg_url.as_deref(),
                    &args,
                    &mut systems[0].runs,
                )
                .await?;
            }
            if let Some(bin) = &peers_bin {
                merge(
                    &mut systems,
                    run_peers(bin, backend, pg_url.as_deref(), &args),
                );
            }
            if let (Some(graphile), Backend::Postgres) = (&graphile, backend) {
                merge(
                    &mut systems,
                    vec![bulk::run_graphile(graphile, pg_url.as_deref(), &args)],
                );
            }
            if args.row(7) {
                in_tx::measure(backend, pg_url.as_deref(), &args, &mut in_tx).await?;
            }
            if args.row(11) {
                partition::measure(backend, pg_url.as_deref(), &args, &mut partition).await?;
            }
        }
        let wake = if args.row(5) {
            wake_latency(backend, pg_url.as_deref(), args.wake_samples).await
        } else {
            Err("not run (--rows)".into())
        };
        let fsync = median(&fsync).unwrap_or(0.0);
        if (1..=5).any(|n| args.row(n)) {
            print_table(backend, &args, &systems, &wake, fsync);
        } else {
            println!(
                "\nRaw durable single-row commit rate of {} in the same run (the fsync bound): {} commits/s",
                backend.name(),
                thousands(fsync.round() as u64)
            );
        }
        if args.row(6) {
            bulk::print_table(backend, &args, &systems);
        }
        if args.row(7) {
            in_tx::print_table(backend, &args, &in_tx);
        }
        if args.drains() {
            drain::print_drain(backend, &args, &systems);
        }
        if args.row(9) {
            drain::print_latency(backend, &args, &systems);
        }
        if args.drains() || args.row(9) {
            drain::print_settings(backend, &args, &systems);
        }
        if args.row(11) {
            partition::print_table(backend, &args, &partition);
        }
        charts.push((backend, systems, in_tx, partition));
    }
    if args.chart.is_none() && !args.all_rows() {
        println!("\nNo chart written: not every row ran (pass --chart FILE to write one anyway).");
        return Ok(());
    }
    let path = args
        .chart
        .clone()
        .unwrap_or_else(|| workspace_root().join("docs").join("bench-spool.svg"));
    let groups: Vec<(String, Vec<Bar>)> = charts
        .iter()
        .flat_map(|(backend, systems, in_tx, partition)| {
            let mut groups = chart_rows(*backend, systems);
            groups.extend(bulk::chart_rows(*backend, systems));
            groups.extend(in_tx::chart_rows(*backend, in_tx));
            groups.extend(drain::chart_rows(*backend, &args, systems));
            groups.extend(partition::chart_rows(*backend, &args, partition));
            groups
        })
        .filter(|(_, bars)| !bars.is_empty())
        .collect();
    std::fs::write(
        &path,
        chart::svg("cairn spool vs peers (ops/s, medians)", &groups),
    )
    .map_err(|e| format!("cannot write the chart {}: {e}", path.display()))?;
    println!("\nChart written to {}", path.display());
    Ok(())
}
