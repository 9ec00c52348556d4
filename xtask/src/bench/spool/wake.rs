//! Row 5: cross-process wake latency — an enqueue here until a consumer waiting in another OS
//! process holds the run — and that other process.

use std::time::Duration;

use cairn::{ConsumerId, EnqueueOptions, QueueName};

use super::super::setup::{store_err, Backend};
use super::args::WakeConsumerArgs;
use super::consumer::{now_micros, open_spool, ConsumerChild};
use super::fresh::{key, queue, Fresh};

/// Row 5's result: p50 and p99, or why it was not measured.
pub(super) type Wake = Result<(Duration, Duration, usize), String>;

/// Row 5: enqueue here, a consumer in another OS process (this binary, `bench
/// wake-consumer`) waits on `subscribe()` and reports the wall-clock time it held the run.
pub(super) async fn wake_latency(backend: Backend, pg_url: Option<&str>, samples: u64) -> Wake {
    eprintln!("cairn {}: wake latency, {samples} samples…", backend.name());
    let fresh = Fresh::open(backend, pg_url).await?;
    let mut child = ConsumerChild::spawn("wake-consumer", "the wake consumer", backend, &fresh)?;
    let result = async {
        child.ready().await?;
        let q = queue();
        let mut lat = Vec::new();
        for i in 0..samples {
            let start = now_micros();
            fresh
                .spool
                .enqueue(
                    &q,
                    &key(i),
                    i.to_string().into_bytes(),
                    EnqueueOptions::default(),
                )
                .await
                .map_err(store_err)?;
            let line = child.next().await?;
            let (got, at) = line
                .strip_prefix("claimed ")
                .and_then(|l| l.split_once(' '))
                .ok_or_else(|| format!("unexpected line from the wake consumer: {line}"))?;
            if got != i.to_string() {
                return Err(format!("the wake consumer claimed {got}, expected {i}"));
            }
            let at: u64 = at.parse().map_err(|e| format!("bad time {at}: {e}"))?;
            lat.push(Duration::from_micros(at.saturating_sub(start)));
        }
        lat.sort();
        let pick = |q: f64| lat[((lat.len() as f64 * q).ceil() as usize).clamp(1, lat.len()) - 1];
        Ok((pick(0.50), pick(0.99), lat.len()))
    }
    .await;
    drop(child);
    fresh.close().await?;
    result
}

/// The other process of row 5: waits on `subscribe()`, claims, prints
/// `claimed <payload> <unix µs>` the moment it holds a run, acks, and waits again.
pub(crate) async fn wake_consumer(args: WakeConsumerArgs) -> Result<(), String> {
    let spool = open_spool(args.backend, &args.target, &args.schema).await?;
    let q = QueueName::new(args.queue).map_err(store_err)?;
    let me = ConsumerId::new(format!("wake-consumer-{}", std::process::id())).map_err(store_err)?;
    let mut wake = spool.subscribe(&q).await.map_err(store_err)?;
    println!("ready");
    loop {
        loop {
            let claimed = spool
                .claim(&q, &me, Duration::from_secs(30), 1)
                .await
                .map_err(store_err)?;
            let Some(run) = claimed.into_iter().next() else {
                break;
            };
            let at = now_micros();
            println!("claimed {} {at}", String::from_utf8_lossy(&run.payload));
            spool.ack(run.run_id, run.token).await.map_err(store_err)?;
        }
        wake.wait().await.map_err(store_err)?;
    }
}
