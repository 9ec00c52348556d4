//! Wake-ups: one listening connection per spool ([`Hub`]) that `LISTEN`s on the channel of
//! every queue someone subscribed to and hands each notification to that queue's subscribers
//! ([`PgWakeup`]), with a fallback poll.
//!
//! The connection belongs to a task of its own, started by the first subscription. A
//! subscription asks the task to `LISTEN` on its queue's channel (the first one of a queue) and
//! returns once the `LISTEN` is in effect; dropping the last subscription of a queue
//! `UNLISTEN`s. When the connection is lost the task wakes every subscriber (notifications sent
//! meanwhile are gone, so each looks for itself) and connects again, listening on every channel
//! anew; until then the subscribers wake at their fallback poll.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use cairn_core::spool::Wakeup;
use cairn_core::{Error, Result};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::{mpsc, oneshot, Notify};

use crate::error::map;

/// The fallback poll: a waiting subscriber returns at least this often even when no
/// notification came, so work written by something that does not `NOTIFY` (an older build, a
/// hand-written `INSERT`), or announced while the listening connection was being replaced, is
/// found within this bound. Waking is cheap: the consumer's next claim finds nothing. The
/// default of [`super::PgSpool::set_wake_poll`].
pub const WAKE_POLL: Duration = Duration::from_secs(1);

/// The first pause before connecting again after the listening connection was lost (doubled
/// up to [`WAKE_POLL`] while the server stays unreachable).
const FIRST_RETRY: Duration = Duration::from_millis(20);

/// What a subscription asks of the listening task.
enum Command {
    /// Add subscriber `id` to `channel` (listening on it first if it is new); answer once the
    /// `LISTEN` is in effect.
    Subscribe {
        channel: String,
        id: u64,
        wake: Arc<Notify>,
        done: oneshot::Sender<Result<()>>,
    },
    /// Remove subscriber `id` from `channel` (unlistening when it was the last).
    Unsubscribe { channel: String, id: u64 },
    /// End the task and close the connection.
    Close,
}

/// The spool's wake-up hub: the listening task's mailbox, started on first use.
pub(super) struct Hub {
    /// Where the listening connection connects (the store pool's connect options).
    connect: PgConnectOptions,
    /// How long connecting may take (the store's acquire timeout).
    acquire_timeout: Duration,
    commands: Mutex<Option<mpsc::UnboundedSender<Command>>>,
    closed: Arc<AtomicBool>,
    next_id: AtomicU64,
    /// Behind a transaction-mode pooler, which cannot keep a `LISTEN`: subscriptions only poll.
    poll_only: bool,
}

impl Hub {
    /// A hub whose listening connection connects with `connect` within `acquire_timeout`;
    /// nothing connects until the first subscription.
    pub(super) fn new(connect: PgConnectOptions, acquire_timeout: Duration) -> Self {
        Self {
            connect,
            acquire_timeout,
            commands: Mutex::new(None),
            closed: Arc::new(AtomicBool::new(false)),
            next_id: AtomicU64::new(0),
            poll_only: false,
        }
    }

    /// A hub that never connects: every subscription returns at its fallback poll (a store
    /// behind a transaction-mode pooler, where a pooled connection cannot keep a `LISTEN`).
    pub(super) fn polling(connect: PgConnectOptions, acquire_timeout: Duration) -> Self {
        Self {
            poll_only: true,
            ..Self::new(connect, acquire_timeout)
        }
    }

    /// Subscribes to `channel`. Returns once the `LISTEN` is in effect, so every `NOTIFY`
    /// committed after this returns reaches the subscription.
    pub(super) async fn subscribe(&self, channel: String, poll: Duration) -> Result<PgWakeup> {
        if self.poll_only {
            if self.closed.load(Ordering::SeqCst) {
                return Err(closed());
            }
            // Nobody listens on the other end: the subscription waits out its poll.
            let (commands, _) = mpsc::unbounded_channel();
            return Ok(PgWakeup {
                commands,
                channel,
                id: self.next_id.fetch_add(1, Ordering::Relaxed),
                wake: Arc::new(Notify::new()),
                closed: self.closed.clone(),
                poll,
            });
        }
        let commands = self.commands()?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let wake = Arc::new(Notify::new());
        let (done, answer) = oneshot::channel();
        commands
            .send(Command::Subscribe {
                channel: channel.clone(),
                id,
                wake: wake.clone(),
                done,
            })
            .map_err(|_| closed())?;
        answer.await.map_err(|_| closed())??;
        Ok(PgWakeup {
            commands,
            channel,
            id,
            wake,
            closed: self.closed.clone(),
            poll,
        })
    }

    /// Ends every subscription (a waiting subscriber returns [`Error::Unavailable`]) and closes
    /// the listening connection in the background.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if let Some(commands) = lock(&self.commands).take() {
            let _ = commands.send(Command::Close);
        }
    }

    /// The running task's mailbox, starting the task on first use.
    fn commands(&self) -> Result<mpsc::UnboundedSender<Command>> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(closed());
        }
        let mut commands = lock(&self.commands);
        if let Some(tx) = commands.as_ref().filter(|tx| !tx.is_closed()) {
            return Ok(tx.clone());
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let task = Listening {
            connect: self.connect.clone(),
            acquire_timeout: self.acquire_timeout,
            listener: None,
            channels: HashMap::new(),
        };
        tokio::spawn(task.run(rx));
        *commands = Some(tx.clone());
        Ok(tx)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn closed() -> Error {
    Error::unavailable("the spool was closed; its subscriptions ended")
}

/// A driver error while listening, as [`Error::Unavailable`].
fn unavailable(e: sqlx::Error) -> Error {
    match map(e) {
        mapped @ Error::Unavailable { .. } => mapped,
        other => Error::unavailable("cannot listen for spool wake-ups").with_source(other),
    }
}

/// What the listening task waits for next.
enum Next {
    Command(Option<Command>),
    Received(std::result::Result<Option<sqlx::postgres::PgNotification>, sqlx::Error>),
}

/// The listening task's state.
struct Listening {
    connect: PgConnectOptions,
    acquire_timeout: Duration,
    /// The connection, while it is up.
    listener: Option<PgListener>,
    /// Every channel listened on and its subscribers.
    channels: HashMap<String, HashMap<u64, Arc<Notify>>>,
}

impl Listening {
    async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        let mut retry = FIRST_RETRY;
        loop {
            if self.listener.is_none() && self.channels.is_empty() {
                // Nobody to listen for: connect when the next subscription asks.
                let command = commands.recv().await;
                if !self.serve(command).await {
                    break;
                }
                continue;
            }
            if self.listener.is_none() {
                // Down: connect again (listening on every channel), or wait and serve the
                // mailbox meanwhile.
                match self.connect().await {
                    Ok(()) => {
                        retry = FIRST_RETRY;
                        self.wake_all();
                    }
                    Err(_) => {
                        tokio::select! {
                            command = commands.recv() => {
                                if !self.serve(command).await {
                                    break;
                                }
                            }
                            () = tokio::time::sleep(retry) => {
                                retry = (retry * 2).min(WAKE_POLL);
                            }
                        }
                    }
                }
                continue;
            }
            let Some(listener) = self.listener.as_mut() else {
                continue;
            };
            // `try_recv` is cancel-safe while its connection is up (it reads whole messages
            // only), and the connection is never re-established inside it (no eager reconnect),
            // so leaving it for a command loses nothing.
            let next = tokio::select! {
                biased;
                command = commands.recv() => Next::Command(command),
                received = listener.try_recv() => Next::Received(received),
            };
            match next {
                Next::Command(command) => {
                    if !self.serve(command).await {
                        break;
                    }
                }
                Next::Received(Ok(Some(notification))) => {
                    if let Some(subscribers) = self.channels.get(notification.channel()) {
                        for wake in subscribers.values() {
                            wake.notify_one();
                        }
                    }
                }
                // Lost (or failing): notifications may be gone; connect again.
                Next::Received(Ok(None) | Err(_)) => {
                    self.listener = None;
                    self.wake_all();
                }
            }
        }
        self.listener = None;
        self.wake_all();
    }

    /// Connects and listens on every channel.
    async fn connect(&mut self) -> Result<()> {
        // A pool of one for the listener alone (it reconnects through a pool); a new one per
        // connection, so a dead connection never waits to be given back.
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .idle_timeout(None)
            .max_lifetime(None)
            .acquire_timeout(self.acquire_timeout)
            .connect_lazy_with(self.connect.clone());
        let mut listener = PgListener::connect_with(&pool).await.map_err(unavailable)?;
        listener.eager_reconnect(false);
        listener.ignore_pool_close_event(true);
        listener
            .listen_all(self.channels.keys().map(String::as_str))
            .await
            .map_err(unavailable)?;
        self.listener = Some(listener);
        Ok(())
    }

    /// Serves one command; `false` when the task is to end.
    async fn serve(&mut self, command: Option<Command>) -> bool {
        match command {
            None | Some(Command::Close) => false,
            Some(Command::Subscribe {
                channel,
                id,
                wake,
                done,
            }) => {
                let listened = self.channels.contains_key(&channel);
                let outcome = if listened {
                    Ok(())
                } else {
                    self.listen(&channel).await
                };
                if outcome.is_ok() {
                    self.channels.entry(channel).or_default().insert(id, wake);
                }
                let _ = done.send(outcome);
                true
            }
            Some(Command::Unsubscribe { channel, id }) => {
                let last = self.channels.get_mut(&channel).is_some_and(|subscribers| {
                    subscribers.remove(&id);
                    subscribers.is_empty()
                });
                if last {
                    self.channels.remove(&channel);
                    if let Some(listener) = self.listener.as_mut() {
                        if listener.unlisten(&channel).await.is_err() {
                            self.listener = None;
                            self.wake_all();
                        }
                    }
                }
                true
            }
        }
    }

    /// Listens on a new channel, connecting first when the connection is down.
    async fn listen(&mut self, channel: &str) -> Result<()> {
        if self.listener.is_none() {
            self.connect().await?;
            self.wake_all();
        }
        let Some(listener) = self.listener.as_mut() else {
            return Err(Error::unavailable("cannot listen for spool wake-ups"));
        };
        match listener.listen(channel).await {
            Ok(()) => Ok(()),
            Err(e) => {
                self.listener = None;
                self.wake_all();
                Err(unavailable(e))
            }
        }
    }

    /// Wakes every subscriber (each looks for work itself, or sees the close).
    fn wake_all(&self) {
        for subscribers in self.channels.values() {
            for wake in subscribers.values() {
                wake.notify_one();
            }
        }
    }
}

/// One subscription: a queue's channel on the spool's listening connection.
pub(super) struct PgWakeup {
    commands: mpsc::UnboundedSender<Command>,
    channel: String,
    id: u64,
    /// Notified for every notification on the channel; a notification that arrives between
    /// waits is kept (one permit) and returned by the next wait at once.
    wake: Arc<Notify>,
    closed: Arc<AtomicBool>,
    poll: Duration,
}

impl std::fmt::Debug for PgWakeup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgWakeup")
            .field("channel", &self.channel)
            .finish_non_exhaustive()
    }
}

impl Drop for PgWakeup {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Unsubscribe {
            channel: std::mem::take(&mut self.channel),
            id: self.id,
        });
    }
}

#[async_trait]
impl Wakeup for PgWakeup {
    async fn wait(&mut self) -> Result<()> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(closed());
        }
        // A notification, a lost connection (the task wakes everyone), or the fallback poll.
        let _ = tokio::time::timeout(self.poll, self.wake.notified()).await;
        if self.closed.load(Ordering::SeqCst) {
            return Err(closed());
        }
        Ok(())
    }
}
