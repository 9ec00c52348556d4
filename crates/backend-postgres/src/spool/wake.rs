//! [`PgWakeup`]: `LISTEN` on a queue's channel, reconnecting, with a fallback poll.

use std::time::Duration;

use async_trait::async_trait;
use cairn_core::spool::Wakeup;
use cairn_core::{Error, Result};
use sqlx::postgres::PgListener;
use sqlx::PgPool;

use crate::error::map_sqlx;

/// The fallback poll: a waiting subscriber returns at least this often even when no
/// notification came, so work written by something that does not `NOTIFY` (an older build, a
/// hand-written `INSERT`), or announced while the listening connection was being replaced, is
/// found within this bound. Waking is cheap: the consumer's next claim finds nothing. The
/// default of [`super::PgSpool::set_wake_poll`].
pub const WAKE_POLL: Duration = Duration::from_secs(1);

/// One subscription: a listening connection of its own.
pub(super) struct PgWakeup {
    listener: PgListener,
    channel: String,
    poll: Duration,
}

impl std::fmt::Debug for PgWakeup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgWakeup")
            .field("channel", &self.channel)
            .finish_non_exhaustive()
    }
}

/// Listens on `channel` with a connection from `pool`. Returns once the `LISTEN` is in effect,
/// so every `NOTIFY` committed after this returns reaches the subscription.
pub(super) async fn subscribe(pool: &PgPool, channel: String, poll: Duration) -> Result<PgWakeup> {
    let unavailable = |e: sqlx::Error| {
        let mapped = map_sqlx(e);
        match mapped {
            Error::Unavailable { .. } => mapped,
            other => Error::unavailable(format!("cannot listen for spool wake-ups: {other}"))
                .with_source(other),
        }
    };
    let mut listener = PgListener::connect_with(pool).await.map_err(unavailable)?;
    listener.listen(&channel).await.map_err(unavailable)?;
    Ok(PgWakeup {
        listener,
        channel,
        poll,
    })
}

#[async_trait]
impl Wakeup for PgWakeup {
    async fn wait(&mut self) -> Result<()> {
        // A notification that arrived since the previous wait is already buffered (in the
        // listener or the socket), so it is returned at once: wake-ups between waits are kept.
        match tokio::time::timeout(self.poll, self.listener.try_recv()).await {
            // A notification, or the fallback poll.
            Ok(Ok(Some(_))) | Err(_) => Ok(()),
            // The connection was lost and has been replaced (listening again): notifications
            // sent meanwhile are gone, so wake the caller to look for itself.
            Ok(Ok(None)) => Ok(()),
            Ok(Err(sqlx::Error::PoolClosed)) => Err(Error::unavailable(
                "the spool was closed; its subscriptions ended",
            )),
            // The server cannot be reached right now. The listener reconnects on the next
            // wait; until then the caller polls at the fallback interval.
            Ok(Err(_)) => {
                tokio::time::sleep(self.poll.min(WAKE_POLL)).await;
                Ok(())
            }
        }
    }
}
