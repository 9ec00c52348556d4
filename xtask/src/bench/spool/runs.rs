//! What a run measures: each system's per-run figures (cairn's and the peers'), and one more
//! run of the peers merged in.

use super::super::cpu::CpuUse;

/// One drain of row 8 at one concurrency.
#[derive(Clone, Debug)]
pub(super) struct DrainRun {
    pub(super) concurrency: u64,
    pub(super) jobs: u64,
    /// Jobs per second.
    pub(super) rate: f64,
    /// The whole machine's busy CPU-seconds over the drain.
    pub(super) busy_cpu_s: Option<f64>,
    /// The measuring process's own CPU-seconds over the drain (cairn only).
    pub(super) own_cpu_s: Option<f64>,
    /// Postgres: the WAL the server wrote over the drain, in bytes (`pg_current_wal_lsn`).
    pub(super) wal_bytes: Option<f64>,
}

/// One run of row 9.
#[derive(Clone, Debug)]
pub(super) struct LatencyRun {
    pub(super) samples: u64,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
    pub(super) max_ms: f64,
    pub(super) mean_ms: f64,
}

/// One system's per-run measurements on one backend (operations per second).
#[derive(Default, Clone)]
pub(super) struct Runs {
    pub(super) enqueue: Vec<f64>,
    pub(super) duplicate: Vec<f64>,
    pub(super) duplicate_returns: String,
    pub(super) claim_complete: Vec<f64>,
    pub(super) producers_1: Vec<f64>,
    pub(super) producers_n: Vec<f64>,
    /// Row 6: jobs per second of the bulk enqueue.
    pub(super) bulk: Vec<f64>,
    /// Row 8 (and its CPU, row 10): every drain, at every concurrency.
    pub(super) drain: Vec<DrainRun>,
    /// Row 9: end-to-end latency.
    pub(super) latency: Vec<LatencyRun>,
    /// CPU use while each row ran (cairn only: the peers run in another process), in the order
    /// of [`rows`](super::rows) (1, 2, 3, 4 with N producers), then row 6.
    pub(super) cpu: [Vec<CpuUse>; 5],
}

impl Runs {
    pub(super) fn is_empty(&self) -> bool {
        self.enqueue.is_empty()
            && self.duplicate.is_empty()
            && self.claim_complete.is_empty()
            && self.producers_n.is_empty()
            && self.bulk.is_empty()
            && self.drain.is_empty()
            && self.latency.is_empty()
    }
}

/// A system as the table shows it.
pub(super) struct System {
    pub(super) name: String,
    pub(super) settings: String,
    pub(super) runs: Runs,
    /// Why the system could not be measured, when it could not.
    pub(super) failed: Option<String>,
}

/// Adds one run of the peers to `systems` (matched by name).
pub(super) fn merge(systems: &mut Vec<System>, new: Vec<System>) {
    for n in new {
        match systems.iter_mut().find(|s| s.name == n.name) {
            None => systems.push(n),
            Some(s) => {
                s.runs.enqueue.extend(n.runs.enqueue);
                s.runs.duplicate.extend(n.runs.duplicate);
                s.runs.claim_complete.extend(n.runs.claim_complete);
                s.runs.producers_1.extend(n.runs.producers_1);
                s.runs.producers_n.extend(n.runs.producers_n);
                s.runs.bulk.extend(n.runs.bulk);
                s.runs.drain.extend(n.runs.drain);
                s.runs.latency.extend(n.runs.latency);
                if s.runs.duplicate_returns.is_empty() {
                    s.runs.duplicate_returns = n.runs.duplicate_returns;
                }
                if s.settings.is_empty() {
                    s.settings = n.settings;
                }
                if s.failed.is_none() && s.runs.is_empty() {
                    s.failed = n.failed;
                } else if n.failed.is_none() {
                    s.failed = None;
                }
            }
        }
    }
}
