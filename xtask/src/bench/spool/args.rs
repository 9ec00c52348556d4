//! The command lines of `bench spool` and of its two consumer processes.

use std::path::PathBuf;

use cairn::spool::MAX_FLOW_LIMIT;

use super::super::setup::Backend;

/// Options of `bench spool`.
#[derive(clap::Args)]
pub(crate) struct SpoolArgs {
    /// Backend to measure, or `all` for both.
    #[arg(long, value_enum)]
    pub(super) backend: BackendChoice,
    /// Also build and run the peers (riverqueue, apalis) from `bench/peers/`.
    #[arg(long)]
    pub(super) peers: bool,
    /// Runs of every row (medians are reported).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) runs: u64,
    /// Distinct keys enqueued one at a time (row 1) and by the producers together (row 4).
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(8..))]
    pub(super) enqueue: u64,
    /// Existing keys enqueued again (row 2).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) duplicates: u64,
    /// Runs claimed and completed (row 3).
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) claims: u64,
    /// Concurrent workers of row 3.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub(super) workers: u64,
    /// cairn's consumer prefetch in row 3 (claimed runs waiting for a free slot; graphile-worker
    /// runs its local queue of concurrency + 1 there).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=900))]
    pub(super) prefetch: u64,
    /// Concurrent producers of row 4.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(2..=64))]
    pub(super) producers: u64,
    /// Wake-latency samples (row 5).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) wake_samples: u64,
    /// Distinct keys of the bulk enqueue (row 6).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) bulk: u64,
    /// Items per bulk call (row 6).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub(super) bulk_batch: u64,
    /// Transactions per variant of row 7 (one client, one after the other).
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) transactions: u64,
    /// Runs queued before row 8's drain.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) drain: u64,
    /// The concurrencies of row 8's drain, each a drain of its own.
    #[arg(long, value_delimiter = ',', default_values_t = [10u64, 24], value_parser = clap::value_parser!(u64).range(1..=100))]
    pub(super) drain_concurrency: Vec<u64>,
    /// cairn's consumer prefetch in row 8 (graphile-worker's documented local queue: 500).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(0..=900))]
    pub(super) drain_prefetch: u64,
    /// Row 9's steady enqueue rate (runs per second).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub(super) latency_rate: u64,
    /// Row 9's samples (after 20 warm-up runs).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) latency_samples: u64,
    /// Runs queued before each of row 11's two drains (the limited queue's and the baseline's).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) partition_runs: u64,
    /// Row 11's partition keys, given to the runs round-robin.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(super) partitions: u64,
    /// Row 11's limit: runs of one partition claimed at once (`QueueLimits::per_partition`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_FLOW_LIMIT)))]
    pub(super) partition_limit: u32,
    /// The rows to run, e.g. `--rows 6,7` (default: all, 1–11).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=11))]
    pub(super) rows: Vec<u32>,
    /// Where to write the SVG chart (default: `docs/bench-spool.svg` in the checkout, written
    /// only when every row ran).
    #[arg(long, value_name = "FILE")]
    pub(super) chart: Option<PathBuf>,
}

impl SpoolArgs {
    /// Whether row `n` runs.
    pub(crate) fn row(&self, n: u32) -> bool {
        self.rows.is_empty() || self.rows.contains(&n)
    }

    pub(super) fn all_rows(&self) -> bool {
        (1..=11).all(|n| self.row(n))
    }

    /// Whether row 8's drain runs (row 10 is its CPU figures).
    pub(super) fn drains(&self) -> bool {
        self.row(8) || self.row(10)
    }
}

/// `--backend` of the throughput benches: one backend or both.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum BackendChoice {
    Sqlite,
    Postgres,
    All,
}

impl BackendChoice {
    pub(crate) fn backends(self) -> Vec<Backend> {
        match self {
            Self::Sqlite => vec![Backend::Sqlite],
            Self::Postgres => vec![Backend::Postgres],
            Self::All => vec![Backend::Sqlite, Backend::Postgres],
        }
    }
}

/// Options of the hidden `bench latency-consumer` (row 9's other process).
#[derive(clap::Args)]
pub(crate) struct LatencyConsumerArgs {
    #[arg(long, value_enum)]
    pub(super) backend: Backend,
    /// SQLite: the store file. Postgres: the server URL.
    #[arg(long)]
    pub(super) target: String,
    /// Postgres: the store's schema.
    #[arg(long, default_value = "public")]
    pub(super) schema: String,
    /// The queue to consume.
    #[arg(long)]
    pub(super) queue: String,
}

/// Options of the hidden `bench wake-consumer` (row 5's other process).
#[derive(clap::Args)]
pub(crate) struct WakeConsumerArgs {
    #[arg(long, value_enum)]
    pub(super) backend: Backend,
    /// SQLite: the store file. Postgres: the server URL.
    #[arg(long)]
    pub(super) target: String,
    /// Postgres: the store's schema.
    #[arg(long, default_value = "public")]
    pub(super) schema: String,
    /// The queue to consume.
    #[arg(long)]
    pub(super) queue: String,
}
