//! Row 9, end-to-end latency: the producer side (this process), which spawns this binary again
//! as the worker process, and the worker process' reporting.
//!
//! Protocol on the worker's stdout: one `ready` line once its worker has started, then one line
//! `job I LATENCY_US` per handler start (LATENCY_US = the handler's wall clock at its start minus
//! the payload's send time, both µs since the Unix epoch). Closing its stdin (the producer
//! exiting) makes the worker process exit.

use std::io::Write as _;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

use crate::{Args, Engine, Res, DEADLINE};

/// Jobs sent (and their latencies discarded) before the samples.
pub(crate) const WARMUP: usize = 20;

/// Row 9's figures, in milliseconds.
#[derive(Debug, Serialize)]
pub(crate) struct Latency {
    /// Jobs per second the producer was scheduled to send.
    rate: f64,
    samples: usize,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    mean_ms: f64,
}

/// Wall clock in µs since the Unix epoch.
pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Worker side: called first thing in a handler with the job's index and send time.
pub(crate) fn report(i: u64, sent_us: u64) {
    let now = now_us();
    let latency = now as i64 - sent_us as i64;
    let mut out = std::io::stdout().lock();
    // A failed write means the producer is gone; the stdin watch ends this process.
    let _ = writeln!(out, "job {i} {latency}");
}

/// Worker side: the worker has started.
pub(crate) fn ready() {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "ready");
}

/// The worker process (`--latency-worker SYSTEM --target …`): runs the system's worker until it
/// is killed or its stdin closes.
pub(crate) async fn worker_process(a: &Args) -> Res<()> {
    let system = a.latency_worker.as_deref().ok_or("no --latency-worker")?;
    let target = a
        .target
        .as_deref()
        .ok_or("--latency-worker needs --target")?;
    tokio::spawn(async {
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 64];
        loop {
            match stdin.read(&mut buf).await {
                Ok(0) | Err(_) => std::process::exit(0),
                Ok(_) => {}
            }
        }
    });
    match (system, a.backend) {
        ("riverqueue", _) => crate::river::latency_worker(a, target).await,
        ("apalis", _) => crate::apalis_peer::latency_worker(a, target).await,
        ("graphile_worker", Engine::Postgres) => crate::graphile::latency_worker(a, target).await,
        (other, backend) => {
            Err(format!("no latency worker for {other} on {}", backend.name()).into())
        }
    }
}

/// Producer side: spawns the worker process for `system` on `target`, then sends the jobs
/// with `send(i)` (which takes the wall clock just before its insert call) and gathers the
/// latencies. The worker process is killed and waited for on every path.
pub(crate) async fn measure(
    a: &Args,
    system: &str,
    target: &str,
    send: impl AsyncFnMut(u64) -> Res<()>,
) -> Res<Latency> {
    let exe = std::env::current_exe()?;
    let mut child = tokio::process::Command::new(exe)
        .args([
            "--latency-worker",
            system,
            "--backend",
            a.backend.name(),
            "--target",
            target,
            "--workers",
            &a.workers.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let result = drive(a, &mut child, send).await;
    let _ = child.start_kill();
    let _ = child.wait().await;
    result
}

/// What the worker process said.
enum Line {
    Ready,
    Job(u64, i64),
}

async fn next_line(
    lines: &mut Lines<BufReader<ChildStdout>>,
    child: &mut Child,
    deadline: Instant,
) -> Res<Line> {
    let line = tokio::time::timeout_at(deadline.into(), lines.next_line())
        .await
        .map_err(|_| "the latency worker did not answer before the deadline")??;
    let Some(line) = line else {
        let status = child.wait().await?;
        return Err(format!("the latency worker exited ({status})").into());
    };
    if line == "ready" {
        return Ok(Line::Ready);
    }
    let mut parts = line.split(' ');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("job"), Some(i), Some(latency), None) => Ok(Line::Job(
            i.parse()
                .map_err(|e| format!("latency worker line {line:?}: {e}"))?,
            latency
                .parse()
                .map_err(|e| format!("latency worker line {line:?}: {e}"))?,
        )),
        _ => Err(format!("unexpected line from the latency worker: {line:?}").into()),
    }
}

/// The latencies reported so far, by job index.
struct Gathered {
    latencies: Vec<Option<i64>>,
    received: usize,
    probe: u64,
}

impl Gathered {
    fn record(&mut self, line: Line) -> Res<()> {
        match line {
            Line::Job(i, latency) if (i as usize) < self.latencies.len() => {
                // A job run twice keeps its first report.
                let slot = &mut self.latencies[i as usize];
                if slot.is_none() {
                    *slot = Some(latency);
                    self.received += 1;
                }
                Ok(())
            }
            Line::Job(i, _) if i == self.probe => Ok(()),
            Line::Job(i, _) => Err(format!("the latency worker reported unknown job {i}").into()),
            Line::Ready => Err("a second ready line".into()),
        }
    }
}

async fn drive(
    a: &Args,
    child: &mut Child,
    mut send: impl AsyncFnMut(u64) -> Res<()>,
) -> Res<Latency> {
    let deadline = Instant::now() + DEADLINE;
    let stdout = child
        .stdout
        .take()
        .ok_or("the latency worker has no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let total = WARMUP + a.latency_samples;
    let probe = total as u64;

    // Ready, then one probe job through the whole path before the schedule starts.
    if let Line::Job(i, _) = next_line(&mut lines, child, deadline).await? {
        return Err(format!("job {i} reported before ready").into());
    }
    send(probe).await?;
    match next_line(&mut lines, child, deadline).await? {
        Line::Job(i, _) if i == probe => {}
        Line::Job(i, _) => return Err(format!("job {i} reported before the probe").into()),
        Line::Ready => return Err("a second ready line".into()),
    }

    let mut got = Gathered {
        latencies: vec![None; total],
        received: 0,
        probe,
    };
    let t0 = tokio::time::Instant::now();
    for i in 0..total {
        let at = Duration::try_from_secs_f64(i as f64 / a.latency_rate)
            .ok()
            .and_then(|offset| t0.checked_add(offset))
            .ok_or("the latency schedule does not fit in a clock (--latency-rate too small)")?;
        // Read what the worker says while waiting for job i's time; when behind, send at once.
        loop {
            tokio::select! {
                biased;
                () = tokio::time::sleep_until(at) => break,
                line = next_line(&mut lines, child, deadline) => got.record(line?)?,
            }
        }
        send(i as u64).await?;
    }
    while got.received < total {
        got.record(next_line(&mut lines, child, deadline).await?)?;
    }

    let mut samples: Vec<i64> = got.latencies[WARMUP..].iter().flatten().copied().collect();
    samples.sort_unstable();
    let n = samples.len();
    if n == 0 {
        return Err("no latency samples".into());
    }
    let ms = |us: i64| us as f64 / 1000.0;
    let at_rank = |q: f64| {
        let rank = ((n as f64 * q).ceil() as usize).clamp(1, n);
        ms(samples[rank - 1])
    };
    Ok(Latency {
        rate: a.latency_rate,
        samples: n,
        p50_ms: at_rank(0.50),
        p99_ms: at_rank(0.99),
        max_ms: ms(samples[n - 1]),
        mean_ms: samples.iter().map(|&s| s as f64).sum::<f64>() / n as f64 / 1000.0,
    })
}
