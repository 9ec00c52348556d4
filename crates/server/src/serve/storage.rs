//! What the server remembers of writes refused because the store's storage is full, so that
//! `/readyz`, `/v1/doctor` and the dashboard say so instead of staying green.
//!
//! A write refused with [`cairn::Error::StorageFull`] (SQLite's `SQLITE_FULL`, Postgres's
//! SQLSTATE 53100) is answered 503 `storage_full` and noted here by [`super::layers::watch_storage`]. The store is
//! then reported full — `/readyz` answers 503 `storage_full`, doctor's `storage` check is a
//! problem — until either:
//!
//! - a request stores something new (an answer 201: an epoch appended or imported, a run
//!   enqueued, a run event appended), which shows there is room again; or
//! - [`HOLD`] passes without another refusal. Nothing reads free space on a Postgres server's
//!   disk, and a node taken out of rotation by its failing `/readyz` gets no writes that could
//!   show the space is back; so past the hold `/readyz` answers 200 again and doctor keeps a
//!   warning that names the last refusal, until a write shows which it is.
//!
//! A request answered otherwise (a read, a 200 for a run already enqueued, a claim) changes
//! nothing: it does not show that a new row fits.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How long after the last refusal the store is reported full without a write to show it.
pub(crate) const HOLD: Duration = Duration::from_secs(60);

/// The marker `ApiError` puts on a `storage_full` answer: the store's detail.
#[derive(Clone, Debug)]
pub(crate) struct FullAnswer(pub(crate) String);

/// The refusals seen since the last write that stored something.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    inner: Mutex<Option<Refused>>,
}

#[derive(Debug, Clone)]
struct Refused {
    last: Instant,
    count: u64,
    detail: String,
}

/// What doctor and `/readyz` are told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusals {
    /// How many writes were refused since the last one that stored something.
    pub(crate) count: u64,
    /// How long ago the last refusal was.
    pub(crate) last_ago: Duration,
    /// The last refusal's message (it names the engine's code, e.g. `SQLITE_FULL`).
    pub(crate) detail: String,
    /// Whether the last refusal is within [`HOLD`]: the store counts as full.
    pub(crate) current: bool,
}

impl Watch {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Refused>> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A write was refused for a full store.
    pub(crate) fn refused(&self, detail: &str) {
        self.refused_at(Instant::now(), detail);
    }

    fn refused_at(&self, now: Instant, detail: &str) {
        let mut inner = self.lock();
        let count = inner.as_ref().map_or(0, |r| r.count) + 1;
        *inner = Some(Refused {
            last: now,
            count,
            detail: detail.to_owned(),
        });
    }

    /// A write stored something: there is room again.
    pub(crate) fn stored(&self) {
        *self.lock() = None;
    }

    /// The refusals since the last write that stored something, if any.
    pub(crate) fn refusals(&self) -> Option<Refusals> {
        self.refusals_at(Instant::now())
    }

    fn refusals_at(&self, now: Instant) -> Option<Refusals> {
        self.lock().as_ref().map(|r| {
            let last_ago = now.saturating_duration_since(r.last);
            Refusals {
                count: r.count,
                last_ago,
                detail: r.detail.clone(),
                current: last_ago < HOLD,
            }
        })
    }
}

impl Refusals {
    /// One line for an operator.
    pub(crate) fn describe(&self) -> String {
        format!(
            "{} write(s) refused, the last {}s ago, and no write has stored anything since: {}",
            self.count,
            self.last_ago.as_secs(),
            self.detail
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_counts_until_a_write_stores_or_the_hold_passes() {
        let w = Watch::default();
        let t0 = Instant::now();
        assert_eq!(w.refusals_at(t0), None);
        w.refused_at(t0, "SQLITE_FULL (code 13)");
        w.refused_at(t0 + Duration::from_secs(1), "SQLITE_FULL (code 13)");
        let r = w.refusals_at(t0 + Duration::from_secs(2)).unwrap();
        assert_eq!(
            (r.count, r.last_ago, r.current),
            (2, Duration::from_secs(1), true)
        );
        assert!(r.describe().contains("SQLITE_FULL"), "{}", r.describe());
        let late = w.refusals_at(t0 + Duration::from_secs(1) + HOLD).unwrap();
        assert!(!late.current, "past the hold it is history, not the state");
        w.stored();
        assert_eq!(w.refusals_at(t0 + Duration::from_secs(3)), None);
    }
}
