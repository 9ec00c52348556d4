//! Enqueue and completion rates for the overview: the server's own counters (the ones
//! `/metrics` exports) sampled every [`INTERVAL`], the last [`SAMPLES`] kept in memory.
//! They count what went through this server (its API and its delivery worker), not what
//! library users do on the store directly; the overview says so.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use maud::{html, Markup};

use super::text::age;
use crate::serve::metrics::Metrics;

/// Time between two samples.
pub(crate) const INTERVAL: Duration = Duration::from_secs(10);
/// Samples kept: 15 minutes.
pub(crate) const SAMPLES: usize = 90;

/// The counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sample {
    /// Runs created by enqueues.
    pub(crate) enqueued: u64,
    /// Runs finished by their holder: acks, failed and permanent nacks, delivered runs.
    pub(crate) completed: u64,
}

/// The kept samples, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Rates {
    samples: Mutex<VecDeque<Sample>>,
}

impl Sample {
    /// The counters now.
    pub(crate) fn read(m: &Metrics) -> Self {
        let nack = |kind: &str| m.nacks.with_label_values(&[kind]).get();
        Self {
            enqueued: m.enqueues.with_label_values(&["created"]).get(),
            completed: m.acks.get()
                + nack("failed")
                + nack("permanent")
                + m.delivery.with_label_values(&["ack"]).get(),
        }
    }
}

impl Rates {
    /// Records a sample, dropping the oldest past [`SAMPLES`].
    pub(crate) fn push(&self, s: Sample) {
        let mut q = self
            .samples
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if q.len() == SAMPLES + 1 {
            q.pop_front();
        }
        q.push_back(s);
    }

    /// Per interval, how many runs were enqueued and completed (oldest first).
    pub(crate) fn deltas(&self) -> Vec<(u64, u64)> {
        let q = self
            .samples
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        q.iter()
            .zip(q.iter().skip(1))
            .map(|(a, b)| {
                (
                    b.enqueued.saturating_sub(a.enqueued),
                    b.completed.saturating_sub(a.completed),
                )
            })
            .collect()
    }

    /// Samples every [`INTERVAL`] until `stopping` turns true.
    pub(crate) fn spawn(
        self: &Arc<Self>,
        metrics: Arc<Metrics>,
        mut stopping: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        let rates = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => rates.push(Sample::read(&metrics)),
                    _ = stopping.wait_for(|s| *s) => return,
                }
            }
        })
    }

    /// The overview's chart: per interval, a bar for enqueued and one for completed runs, and
    /// the per-second rates over the last minute and over the whole window.
    pub(crate) fn chart(&self) -> Markup {
        let d = self.deltas();
        let per_sec = |n: u64, intervals: usize| {
            if intervals == 0 {
                0.0
            } else {
                n as f64 / (intervals as f64 * INTERVAL.as_secs_f64())
            }
        };
        let last = &d[d.len().saturating_sub(6)..];
        let sum = |s: &[(u64, u64)]| s.iter().fold((0, 0), |(e, c), (de, dc)| (e + de, c + dc));
        let (le, lc) = sum(last);
        let (we, wc) = sum(&d);
        let top = d
            .iter()
            .map(|(e, c)| (*e).max(*c))
            .max()
            .unwrap_or(0)
            .max(1);
        let (w, h, bar) = (SAMPLES as u64 * 8, 80u64, 3u64);
        let height = |n: u64| (n * (h - 4)).div_ceil(top);
        let offset = SAMPLES.saturating_sub(d.len()) as u64;
        html! {
            div.chart {
                svg.rates width=(w) height=(h) viewBox={"0 0 " (w) " " (h)} role="img"
                    aria-label="enqueued and completed runs per 10 seconds, last 15 minutes" {
                    line x1="0" y1=(h - 1) x2=(w) y2=(h - 1) stroke="#c8ccd2" stroke-width="1" {}
                    @for (i, (e, c)) in d.iter().enumerate() {
                        @let x = (offset + i as u64) * 8;
                        rect.enq x=(x) y=(h - 1 - height(*e)) width=(bar) height=(height(*e)) fill="#3f6fd8" {
                            title { (e) " enqueued" }
                        }
                        rect.done x=(x + bar) y=(h - 1 - height(*c)) width=(bar) height=(height(*c)) fill="#2e9d62" {
                            title { (c) " completed" }
                        }
                    }
                }
                p.legend {
                    span.key.enq {} "enqueued " strong { (format!("{:.1}/s", per_sec(le, last.len()))) }
                    " (last minute), " (format!("{:.1}/s", per_sec(we, d.len()))) " (over " (age(INTERVAL * d.len() as u32)) ") · "
                    span.key.done {} "completed " strong { (format!("{:.1}/s", per_sec(lc, last.len()))) }
                    " (last minute), " (format!("{:.1}/s", per_sec(wc, d.len()))) " · tallest bar " (top) " runs per 10 s"
                }
                p.note { "Counted by this server (its API and delivery worker), sampled every 10 seconds since it started." }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_are_per_interval_and_the_window_is_bounded() {
        let r = Rates::default();
        assert!(r.deltas().is_empty());
        for i in 0..(SAMPLES as u64 + 10) {
            r.push(Sample {
                enqueued: i * 3,
                completed: i * 2,
            });
        }
        let d = r.deltas();
        assert_eq!(d.len(), SAMPLES);
        assert!(d.iter().all(|x| *x == (3, 2)));
        let chart = r.chart().into_string();
        assert!(chart.contains("0.3/s"), "{chart}");
        assert!(chart.contains("0.2/s"), "{chart}");
        // A counter that went backwards (a restart) counts as zero, not a wrap.
        r.push(Sample::default());
        assert_eq!(r.deltas().last(), Some(&(0, 0)));
    }
}
