//! Wake-up for the SQLite spool: in-process notifications plus a poll of `PRAGMA
//! data_version` on a dedicated read-only connection.
//!
//! `data_version` changes whenever *another* connection commits to the file — another spool
//! instance, another process, an offline hook writing straight to the store. The poll runs on
//! one thread per spool instance (never on the async executor), only while the instance has
//! subscribers, and wakes every subscriber of the instance when the value changes: a spurious
//! wake costs a subscriber one empty claim, which rolls back and commits nothing. Enqueues and
//! retries made through this instance wake its subscribers at once, without waiting for a poll.
//!
//! Invariant: a poller's baseline is read *before* a subscriber is registered, so a commit
//! after `subscribe` returns always changes the value the poller compares against.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::Thread;
use std::time::Duration;

use async_trait::async_trait;
use cairn_core::spool::{QueueName, Wakeup};
use cairn_core::{Error, Result};
use rusqlite::Connection;
use tokio::sync::watch;

use super::sql;
use crate::config::SqliteOptions;
use crate::db::blocking;
use crate::error::map;
use crate::files;

/// How often a spool with subscribers polls `PRAGMA data_version` by default.
pub const DEFAULT_WAKE_POLL: Duration = Duration::from_millis(5);

#[derive(Default)]
struct HubState {
    queues: HashMap<QueueName, watch::Sender<u64>>,
    /// The running poller's thread (`None` when none runs), unparked when the interval changes.
    poller: Option<Thread>,
}

/// One spool instance's subscribers and its poller.
pub(super) struct WakeHub {
    path: PathBuf,
    opts: SqliteOptions,
    /// The poll interval in milliseconds (at least 1), read by the poller every round.
    interval_ms: AtomicU64,
    state: Mutex<HubState>,
}

impl WakeHub {
    pub(super) fn new(path: &Path, opts: SqliteOptions, interval: Duration) -> Arc<Self> {
        Arc::new(Self {
            path: path.to_path_buf(),
            opts,
            interval_ms: AtomicU64::new(millis(interval)),
            state: Mutex::new(HubState::default()),
        })
    }

    /// Sets the poll interval (at least 1 ms), at once: a running poller's current wait is cut
    /// short, and it waits the new interval from then on.
    pub(super) fn set_interval(&self, interval: Duration) {
        self.interval_ms.store(millis(interval), Ordering::Relaxed);
        if let Some(poller) = &self.lock().poller {
            poller.unpark();
        }
    }

    /// Test support: whether a poller thread runs for this instance.
    #[cfg(feature = "testkit")]
    pub(super) fn testkit_poller_running(&self) -> bool {
        self.lock().poller.is_some()
    }

    fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms.load(Ordering::Relaxed))
    }

    fn lock(&self) -> MutexGuard<'_, HubState> {
        // The state is a map of channels and the poller's handle; no panic can leave it
        // half-updated.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes `queue`'s subscribers of this instance.
    pub(super) fn notify(&self, queue: &QueueName) {
        if let Some(tx) = self.lock().queues.get(queue) {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    fn notify_all(&self) {
        for tx in self.lock().queues.values() {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Registers a subscriber of `queue`, starting the poller when none runs.
    ///
    /// # Errors
    /// [`Error::Unavailable`] (with the cause as its source) when the poller's connection
    /// cannot be opened or its thread started.
    pub(super) async fn subscribe(self: &Arc<Self>, queue: &QueueName) -> Result<SqliteWakeup> {
        let hub = self.clone();
        let queue = queue.clone();
        blocking(move || hub.subscribe_blocking(queue))
            .await
            .map_err(|e| match e {
                e @ Error::Unavailable { .. } => e,
                e => Error::unavailable(
                    "cannot watch the store for new work; check that the store file is readable",
                )
                .with_source(e),
            })
    }

    fn open_probe(&self) -> Result<(Connection, i64)> {
        let conn = files::connect_read_only(&self.path, &self.opts)?;
        let version = data_version(&conn)?;
        Ok((conn, version))
    }

    fn subscribe_blocking(self: &Arc<Self>, queue: QueueName) -> Result<SqliteWakeup> {
        // Open the probe outside the lock in the common case; under it only when a poller
        // stopped between the look and the registration.
        let mut probe = if self.lock().poller.is_some() {
            None
        } else {
            Some(self.open_probe()?)
        };
        let mut st = self.lock();
        if st.poller.is_none() && probe.is_none() {
            probe = Some(self.open_probe()?);
        }
        let rx = st
            .queues
            .entry(queue)
            .or_insert_with(|| watch::channel(0).0)
            .subscribe();
        if st.poller.is_none() {
            if let Some((conn, baseline)) = probe {
                let weak = Arc::downgrade(self);
                let poller = std::thread::Builder::new()
                    .name("cairn-spool-wake".into())
                    .spawn(move || poll(&weak, conn, baseline))
                    .map_err(|e| {
                        Error::unavailable(format!("cannot start the spool's wake-up poller: {e}"))
                    })?;
                st.poller = Some(poller.thread().clone());
            }
        }
        Ok(SqliteWakeup { rx })
    }
}

/// `d` in whole milliseconds, at least 1 (saturating).
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn data_version(conn: &Connection) -> Result<i64> {
    conn.prepare_cached(sql::DATA_VERSION)
        .and_then(|mut s| s.query_row([], |r| r.get(0)))
        .map_err(map)
}

/// The poller: runs until its hub is dropped or has no subscriber left, waiting the hub's
/// interval of the moment before each round (cut short by [`WakeHub::set_interval`]; a
/// spurious early round costs one read of `data_version`).
fn poll(hub: &Weak<WakeHub>, mut conn: Connection, mut last: i64) {
    loop {
        let Some(interval) = hub.upgrade().map(|h| h.interval()) else {
            return;
        };
        std::thread::park_timeout(interval);
        let Some(hub) = hub.upgrade() else {
            return;
        };
        {
            let mut st = hub.lock();
            st.queues.retain(|_, tx| tx.receiver_count() > 0);
            if st.queues.is_empty() {
                st.poller = None;
                return;
            }
        }
        match data_version(&conn) {
            Ok(v) if v == last => {}
            Ok(v) => {
                last = v;
                hub.notify_all();
            }
            Err(_) => {
                // A failed poll may have missed a commit: wake everyone (their next claim
                // reports any lasting problem) and poll through a new connection.
                hub.notify_all();
                if let Ok((fresh, v)) = hub.open_probe() {
                    conn = fresh;
                    last = v;
                }
            }
        }
    }
}

/// The SQLite spool's [`Wakeup`].
#[derive(Debug)]
pub(super) struct SqliteWakeup {
    rx: watch::Receiver<u64>,
}

#[async_trait]
impl Wakeup for SqliteWakeup {
    async fn wait(&mut self) -> Result<()> {
        self.rx
            .changed()
            .await
            .map_err(|_| Error::unavailable("the spool was closed; open it again to wait for work"))
    }
}
