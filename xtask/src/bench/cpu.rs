//! CPU accounting for the benches: while one configuration is measured, how busy the whole
//! machine was and how much CPU this process spent per operation. It is the evidence for what
//! bounds a row — when the machine's cores are all busy, the row is CPU-bound, not fsync-bound;
//! when they are mostly idle and the disk is waiting (iowait), it is the other way round.
//!
//! Linux only (`/proc`); elsewhere the figures are `None` and the tables say "n/a".

use std::time::{Duration, Instant};

/// `/proc` reports CPU time in `USER_HZ` ticks, which is 100 on every Linux architecture the
/// kernel's ABI fixes it for (x86, arm, riscv).
const USER_HZ: f64 = 100.0;

/// A started measurement.
pub(crate) struct CpuMeter {
    machine: Option<MachineTicks>,
    process: Option<f64>,
    io: Option<ProcessIo>,
    started: Instant,
}

/// This process's write calls and the bytes they wrote (files and sockets), from
/// `/proc/self/io`.
#[derive(Clone, Copy)]
struct ProcessIo {
    wchar: u64,
    syscw: u64,
}

/// What one measured configuration used.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CpuUse {
    /// Cores the whole machine kept busy on average (user, system, interrupts), out of
    /// [`CpuUse::cores`].
    pub(crate) busy_cores: Option<f64>,
    /// Cores the machine spent waiting for I/O with nothing else to run (iowait).
    pub(crate) iowait_cores: Option<f64>,
    /// Online cores.
    pub(crate) cores: usize,
    /// This process's CPU time (every thread, user + system) per operation.
    pub(crate) process_per_op: Option<Duration>,
    /// Wall time per operation.
    pub(crate) wall_per_op: Duration,
    /// Bytes this process wrote per operation (`write`/`pwrite` to files and sockets).
    pub(crate) write_bytes_per_op: Option<f64>,
    /// Write calls this process made per operation.
    pub(crate) write_calls_per_op: Option<f64>,
}

#[derive(Clone, Copy)]
struct MachineTicks {
    busy: u64,
    iowait: u64,
}

impl CpuMeter {
    /// Starts measuring now.
    pub(crate) fn start() -> Self {
        Self {
            machine: machine_ticks(),
            process: process_seconds(),
            io: process_io(),
            started: Instant::now(),
        }
    }

    /// Stops measuring; `ops` operations were done since [`CpuMeter::start`].
    pub(crate) fn stop(self, ops: u64) -> CpuUse {
        let wall = self.started.elapsed();
        let secs = wall.as_secs_f64().max(1e-9);
        let ops_f = ops.max(1) as f64;
        let (busy_cores, iowait_cores) = match (self.machine, machine_ticks()) {
            (Some(a), Some(b)) => (
                Some(b.busy.saturating_sub(a.busy) as f64 / USER_HZ / secs),
                Some(b.iowait.saturating_sub(a.iowait) as f64 / USER_HZ / secs),
            ),
            _ => (None, None),
        };
        let process_per_op = match (self.process, process_seconds()) {
            (Some(a), Some(b)) => Some(Duration::from_secs_f64((b - a).max(0.0) / ops_f)),
            _ => None,
        };
        let (write_bytes_per_op, write_calls_per_op) = match (self.io, process_io()) {
            (Some(a), Some(b)) => (
                Some(b.wchar.saturating_sub(a.wchar) as f64 / ops_f),
                Some(b.syscw.saturating_sub(a.syscw) as f64 / ops_f),
            ),
            _ => (None, None),
        };
        CpuUse {
            busy_cores,
            iowait_cores,
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            process_per_op,
            wall_per_op: Duration::from_secs_f64(secs / ops_f),
            write_bytes_per_op,
            write_calls_per_op,
        }
    }
}

impl CpuUse {
    /// The median (by busy cores) of several runs' figures, field by field.
    pub(crate) fn median(runs: &[CpuUse]) -> Option<CpuUse> {
        if runs.is_empty() {
            return None;
        }
        let med = |mut xs: Vec<f64>| -> Option<f64> {
            if xs.is_empty() {
                return None;
            }
            xs.sort_by(f64::total_cmp);
            let mid = xs.len() / 2;
            Some(if xs.len() % 2 == 1 {
                xs[mid]
            } else {
                (xs[mid - 1] + xs[mid]) / 2.0
            })
        };
        Some(CpuUse {
            busy_cores: med(runs.iter().filter_map(|r| r.busy_cores).collect()),
            iowait_cores: med(runs.iter().filter_map(|r| r.iowait_cores).collect()),
            cores: runs[0].cores,
            process_per_op: med(runs
                .iter()
                .filter_map(|r| r.process_per_op.map(|d| d.as_secs_f64()))
                .collect())
            .map(Duration::from_secs_f64),
            wall_per_op: Duration::from_secs_f64(
                med(runs.iter().map(|r| r.wall_per_op.as_secs_f64()).collect()).unwrap_or(0.0),
            ),
            write_bytes_per_op: med(runs.iter().filter_map(|r| r.write_bytes_per_op).collect()),
            write_calls_per_op: med(runs.iter().filter_map(|r| r.write_calls_per_op).collect()),
        })
    }

    /// `busy 1.93 of 2 cores (iowait 0.01) · cairn 412 µs CPU/op · 298 µs wall/op`.
    pub(crate) fn describe(&self, who: &str) -> String {
        let busy = match (self.busy_cores, self.iowait_cores) {
            (Some(b), Some(w)) => format!("busy {b:.2} of {} cores (iowait {w:.2})", self.cores),
            _ => "machine CPU n/a".into(),
        };
        let process = self.process_per_op.map_or_else(
            || format!("{who} CPU/op n/a"),
            |d| format!("{who} {:.0} µs CPU/op", d.as_secs_f64() * 1e6),
        );
        format!(
            "{busy} · {process} · {:.0} µs wall/op",
            self.wall_per_op.as_secs_f64() * 1e6
        )
    }

    /// `12.3 KiB in 3.1 write calls/op` — what an in-process engine (SQLite) wrote per
    /// operation: its WAL frames (one `pwrite` per page) and checkpoints.
    pub(crate) fn describe_writes(&self) -> String {
        match (self.write_bytes_per_op, self.write_calls_per_op) {
            (Some(b), Some(c)) => format!("{:.1} KiB in {c:.1} write calls/op", b / 1024.0),
            _ => "writes/op n/a".into(),
        }
    }
}

/// The machine's busy and iowait ticks since boot, from the first line of `/proc/stat`
/// (`cpu user nice system idle iowait irq softirq steal guest guest_nice`; guest time is
/// already inside user).
fn machine_ticks() -> Option<MachineTicks> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?;
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = fields.map_while(|f| f.parse().ok()).collect();
    if v.len() < 8 {
        return None;
    }
    let (user, nice, system, iowait, irq, softirq, steal) =
        (v[0], v[1], v[2], v[4], v[5], v[6], v[7]);
    Some(MachineTicks {
        busy: user + nice + system + irq + softirq + steal,
        iowait,
    })
}

/// This process's write calls and bytes so far (`wchar`, `syscw` of `/proc/self/io`).
fn process_io() -> Option<ProcessIo> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    let field = |name: &str| -> Option<u64> {
        io.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
    };
    Some(ProcessIo {
        wchar: field("wchar:")?,
        syscw: field("syscw:")?,
    })
}

/// This process's CPU time so far (all threads, user + system), from `/proc/self/stat`.
fn process_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: split after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, so utime (14) and stime (15) are at 11 and 12 here.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_loop_shows_as_process_cpu_and_machine_busy() {
        let meter = CpuMeter::start();
        let start = process_seconds().expect("/proc/self/stat on Linux");
        // Spin until this process has used 300 ms of CPU (however loaded the machine is),
        // with a wall-clock deadline so a broken reading fails instead of spinning forever.
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut x = 0u64;
        while process_seconds().expect("/proc/self/stat") - start < 0.3 {
            for _ in 0..100_000 {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            }
            assert!(
                Instant::now() < deadline,
                "300 ms of CPU never showed in /proc/self/stat"
            );
        }
        std::hint::black_box(x);
        let used = meter.stop(3);
        // At least 100 ms of CPU per op (10 ms ticks); other tests' threads may add some.
        let per_op = used.process_per_op.expect("/proc/self/stat on Linux");
        assert!(per_op >= Duration::from_millis(90), "{per_op:?}");
        let busy = used.busy_cores.expect("/proc/stat on Linux");
        assert!(busy > 0.0, "{busy}");
        assert!(used.describe("x").contains("µs CPU/op"));
    }

    #[test]
    fn file_writes_show_as_bytes_and_calls_per_op() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("w");
        let meter = CpuMeter::start();
        for _ in 0..4 {
            std::fs::write(&path, vec![7u8; 8192]).expect("a write");
        }
        let used = meter.stop(4);
        let bytes = used.write_bytes_per_op.expect("/proc/self/io on Linux");
        let calls = used.write_calls_per_op.expect("/proc/self/io on Linux");
        // Other threads of the test binary may write too (its output), so at least.
        assert!(bytes >= 8192.0, "{bytes}");
        assert!(calls >= 1.0, "{calls}");
        assert!(used.describe_writes().contains("KiB"));
    }
}
