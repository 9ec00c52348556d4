//! A whole sync between two sides ([`Sync`]): which spaces, which directions, once or
//! following the sender.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::sync::driver::{pull, SyncOptions};
use crate::sync::endpoint::SyncEndpoint;
use crate::sync::report::SyncReport;
use crate::types::{Seq, SpaceId};

/// Which spaces a sync covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spaces {
    /// These spaces.
    Listed(Vec<SpaceId>),
    /// Every non-reserved space of the sending side (of both sides, both ways), listed again
    /// each round of a follow.
    All,
}

/// A sync from one side to another (and back, with [`Sync::both_ways`]).
///
/// ```
/// # async fn demo() -> cairn_core::Result<()> {
/// use std::sync::Arc;
/// use cairn_core::sync::{LocalEndpoint, Sync};
/// use cairn_core::{EpochStore, Event, MemoryStore, SpaceId};
///
/// let (edge, central) = (MemoryStore::new(), MemoryStore::new());
/// let space = SpaceId::new("notes")?;
/// edge.append(&space, vec![Event::new("note", "hello")]).await?;
/// let report = Sync::new(
///     Arc::new(LocalEndpoint::new(Arc::new(edge), "edge")),
///     Arc::new(LocalEndpoint::new(Arc::new(central.clone()), "central")),
/// )
/// .space(space.clone())
/// .run()
/// .await?;
/// assert_eq!(report.epochs(), 1);
/// assert_eq!(central.heads(&space).await?.len(), 1);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Sync {
    from: Arc<dyn SyncEndpoint>,
    to: Arc<dyn SyncEndpoint>,
    spaces: Spaces,
    both_ways: bool,
    options: SyncOptions,
}

/// Spaces listed per page.
const LIST_PAGE: usize = 500;

impl Sync {
    /// A sync of no space yet from `from` to `to`.
    pub fn new(from: Arc<dyn SyncEndpoint>, to: Arc<dyn SyncEndpoint>) -> Self {
        Self {
            from,
            to,
            spaces: Spaces::Listed(Vec::new()),
            both_ways: false,
            options: SyncOptions::default(),
        }
    }

    /// Adds a space (replacing [`Sync::all_spaces`]).
    #[must_use]
    pub fn space(mut self, space: SpaceId) -> Self {
        match &mut self.spaces {
            Spaces::Listed(l) => {
                if !l.contains(&space) {
                    l.push(space);
                }
            }
            Spaces::All => self.spaces = Spaces::Listed(vec![space]),
        }
        self
    }

    /// Every non-reserved space.
    #[must_use]
    pub fn all_spaces(mut self) -> Self {
        self.spaces = Spaces::All;
        self
    }

    /// Also from `to` back to `from`, after each forward pass.
    #[must_use]
    pub fn both_ways(mut self, yes: bool) -> Self {
        self.both_ways = yes;
        self
    }

    /// Batch sizes.
    #[must_use]
    pub fn options(mut self, options: SyncOptions) -> Self {
        self.options = options;
        self
    }

    /// The spaces of this round.
    async fn spaces(&self) -> Result<Vec<SpaceId>> {
        let mut out = match &self.spaces {
            Spaces::Listed(l) => return Ok(l.clone()),
            Spaces::All => all_of(&*self.from).await?,
        };
        if self.both_ways {
            out.extend(all_of(&*self.to).await?);
            out.sort();
            out.dedup();
        }
        Ok(out)
    }

    /// One pass: every space, forward and (both ways) back.
    ///
    /// # Errors
    /// The first error of a side or of the sync ([`crate::Error::EpochRefused`]); what was
    /// imported before it stays, with its cursors.
    pub async fn run(&self) -> Result<SyncReport> {
        self.options.check()?;
        let mut report = SyncReport::default();
        for space in self.spaces().await? {
            report
                .spaces
                .push(pull(&*self.from, &*self.to, &space, &self.options).await?);
            if self.both_ways {
                report
                    .spaces
                    .push(pull(&*self.to, &*self.from, &space, &self.options).await?);
            }
        }
        Ok(report)
    }

    /// Runs passes until `stop` resolves, each pass after the sender (either side, both ways)
    /// may have changed: for listed spaces it waits on the sides' [`SyncEndpoint::wait_change`]
    /// (at most `idle` per wait), for all spaces it runs a pass every `idle`. Each pass's
    /// report goes to `on_pass`. A side's error ends the follow with it.
    ///
    /// # Errors
    /// As [`Sync::run`].
    pub async fn follow<F>(
        &self,
        idle: Duration,
        stop: impl std::future::Future<Output = ()>,
        mut on_pass: F,
    ) -> Result<()>
    where
        F: FnMut(&SyncReport),
    {
        tokio::pin!(stop);
        loop {
            let report = self.run().await?;
            on_pass(&report);
            tokio::select! {
                () = &mut stop => return Ok(()),
                waited = self.wait(idle) => waited?,
            }
        }
    }

    /// Waits for a change on any sending side of the listed spaces, at most `idle`.
    async fn wait(&self, idle: Duration) -> Result<()> {
        let Spaces::Listed(spaces) = &self.spaces else {
            tokio::time::sleep(idle).await;
            return Ok(());
        };
        let mut sides: Vec<Arc<dyn SyncEndpoint>> = vec![self.from.clone()];
        if self.both_ways {
            sides.push(self.to.clone());
        }
        let mut waits = Vec::new();
        for side in sides {
            for space in spaces {
                let seen: Option<Seq> = side.heads(space).await?.iter().map(|h| h.seq).max();
                let (side, space) = (side.clone(), space.clone());
                waits.push(Box::pin(async move {
                    side.wait_change(&space, seen, idle).await
                }));
            }
        }
        if waits.is_empty() {
            tokio::time::sleep(idle).await;
            return Ok(());
        }
        futures_select_first(waits).await
    }
}

/// Every non-reserved space of a side.
async fn all_of(side: &dyn SyncEndpoint) -> Result<Vec<SpaceId>> {
    let mut out: Vec<SpaceId> = Vec::new();
    loop {
        let page = side.list_spaces(out.last(), LIST_PAGE).await?;
        let done = page.len() < LIST_PAGE;
        out.extend(page);
        if done {
            return Ok(out);
        }
    }
}

/// The first of `waits` to finish.
async fn futures_select_first<F>(waits: Vec<std::pin::Pin<Box<F>>>) -> Result<()>
where
    F: std::future::Future<Output = Result<()>> + ?Sized,
{
    let mut waits = waits;
    std::future::poll_fn(move |cx| {
        for w in &mut waits {
            if let std::task::Poll::Ready(r) = w.as_mut().poll(cx) {
                return std::task::Poll::Ready(r);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::Sync;
    use crate::sync::LocalEndpoint;
    use crate::{EpochStore, Event, MemoryStore, SpaceId};

    /// A follow keeps the receiver converging: each append on the sender reaches it (waited
    /// for with a deadline), and the follow ends when told to.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn follow_carries_each_append_until_stopped() {
        let (a, b) = (MemoryStore::new(), MemoryStore::new());
        let space = SpaceId::new("follow").unwrap();
        a.append(&space, vec![Event::new("t", "0")]).await.unwrap();
        let sync = Sync::new(
            Arc::new(LocalEndpoint::new(Arc::new(a.clone()), "a")),
            Arc::new(LocalEndpoint::new(Arc::new(b.clone()), "b")),
        )
        .space(space.clone());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            sync.follow(
                Duration::from_secs(5),
                async {
                    let _ = stop_rx.await;
                },
                |_| {},
            )
            .await
        });
        for i in 1..=3 {
            let e = a
                .append(&space, vec![Event::new("t", format!("{i}"))])
                .await
                .unwrap();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while b.heads(&space).await.ok().map(|h| h[0].id) != Some(e.id) {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "append {i} never arrived"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        stop_tx.send(()).unwrap();
        task.await.unwrap().unwrap();
    }
}
