//! `cargo xtask bench …`: the benchmarks, one module each — `heads` (head lookup and append
//! latency), `readers` (concurrent SQLite readers), `server` (`cairn serve` vs the library),
//! `spool` (cairn's spool against riverqueue and apalis), `appends` (epoch-log append
//! throughput) — and what they share: `setup`, `figures`, `cpu`, `chart`.

mod appends;
mod chart;
mod cpu;
mod figures;
mod heads;
mod readers;
mod server;
mod setup;
mod spool;
mod sync;

use clap::Subcommand;

/// Benchmarks.
#[derive(Subcommand)]
pub(crate) enum Bench {
    /// Head lookup (anti-join vs cache) and append latency (long history vs empty space).
    Heads(heads::HeadsArgs),
    /// Concurrent readers on SQLite: one read connection vs several.
    Readers(readers::ReadersArgs),
    /// `cairn serve` over loopback HTTP vs the library, same operations and concurrency.
    Server(server::ServerArgs),
    /// The spool against its peers (riverqueue, apalis): enqueue, duplicates, claim +
    /// complete, producer scaling, cross-process wake latency.
    Spool(spool::SpoolArgs),
    /// Epoch-log append throughput: 1 writer vs the raw commit rate, 8 appenders vs 1.
    Appends(appends::AppendsArgs),
    /// `cairn sync`: bytes moved for two copies a few epochs apart (negotiated and by cursor),
    /// and a first sync's epochs per second, for every pair of engines.
    Sync(sync::SyncArgs),
    /// Row 5's consumer process (started by `bench spool`).
    #[command(hide = true)]
    WakeConsumer(spool::WakeConsumerArgs),
    /// Row 9's consumer process (started by `bench spool`).
    #[command(hide = true)]
    LatencyConsumer(spool::LatencyConsumerArgs),
}

/// Runs a benchmark.
pub(crate) fn run(bench: Bench) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    match bench {
        Bench::Heads(args) => runtime.block_on(heads::run(args)),
        Bench::Readers(args) => runtime.block_on(readers::run(args)),
        Bench::Server(args) => runtime.block_on(server::run(args)),
        Bench::Spool(args) => runtime.block_on(spool::run(args)),
        Bench::Appends(args) => runtime.block_on(appends::run(args)),
        Bench::Sync(args) => runtime.block_on(sync::run(args)),
        Bench::WakeConsumer(args) => runtime.block_on(spool::wake_consumer(args)),
        Bench::LatencyConsumer(args) => runtime.block_on(spool::latency_consumer(args)),
    }
}
