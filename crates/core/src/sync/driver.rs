//! The one-way sync of a space ([`pull`]): find what the sending side has that the receiving
//! side lacks — by the receiver's cursor when it holds, else by negotiation — and send it
//! parents first, in bounded batches, each imported in one transaction together with the
//! cursor it earns.
//!
//! # Why a batch's cursor is true
//! A cursor `(seq, id)` for sender `P` claims: every epoch `P` holds with a seq at or below
//! `seq` is in the receiver. Batches go in ascending sender seq, and everything the driver
//! skipped below a batch's last epoch is either below the previous cursor, or an epoch the
//! receiver answered it had, or (negotiation) an ancestor of one it had — and a store holds an
//! epoch only with all its ancestors. So each batch's cursor, committed with the batch, is
//! true, and an interrupted sync resumes after its last committed batch.

use std::collections::HashSet;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::ids::EpochId;
use crate::sync::endpoint::SyncEndpoint;
use crate::sync::report::{SpaceReport, SyncPath};
use crate::sync::types::{epoch_bytes, StoreId, SyncCursor, MAX_IMPORT_BATCH};
use crate::types::{
    EpochSummary, ForeignEpoch, Head, ImportOutcome, Seq, SpaceId, MAX_RECENT_EPOCHS,
};

/// How a sync sizes its work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncOptions {
    /// Most epochs per imported batch (1..=[`MAX_IMPORT_BATCH`]; default 500).
    pub batch_epochs: usize,
    /// A batch is sent once its epochs' stored bytes reach this (default 4 MiB); an epoch
    /// larger than it goes alone.
    pub batch_bytes: u64,
    /// Most epochs asked of the sender in one read (default 64).
    pub fetch_epochs: usize,
}

impl Default for SyncOptions {
    fn default() -> Self {
        Self {
            batch_epochs: 500,
            batch_bytes: 4 << 20,
            fetch_epochs: 64,
        }
    }
}

impl SyncOptions {
    /// Checks the sizes.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a size of 0 or a batch over [`MAX_IMPORT_BATCH`].
    pub fn check(&self) -> Result<()> {
        if !(1..=MAX_IMPORT_BATCH).contains(&self.batch_epochs) {
            return Err(Error::invalid(
                "sync batch size",
                format!("must be between 1 and {MAX_IMPORT_BATCH} epochs"),
            ));
        }
        if self.batch_bytes == 0 || self.fetch_epochs == 0 {
            return Err(Error::invalid(
                "sync sizes",
                "batch bytes and fetch size must be at least 1",
            ));
        }
        Ok(())
    }
}

/// Microseconds since the Unix epoch, on this process's clock.
pub(crate) fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Sends `from`'s epochs of `space` that `to` lacks, so that afterwards `to` holds every epoch
/// `from` held when the sync read its heads.
///
/// # Errors
/// The sides' errors as they come; [`Error::EpochRefused`] when `to` refused an epoch of
/// `from` (nothing of that batch imported; the batches before it stay, with their cursor).
pub async fn pull(
    from: &dyn SyncEndpoint,
    to: &dyn SyncEndpoint,
    space: &SpaceId,
    opts: &SyncOptions,
) -> Result<SpaceReport> {
    opts.check()?;
    let mut r = SpaceReport::new(space, from.label(), to.label());
    let heads = from.heads(space).await?;
    let Some(top) = heads.iter().max_by_key(|h| h.seq).copied() else {
        return Ok(r);
    };
    let peer = from.store_id().await?;
    let newest = SyncCursor {
        peer: peer.clone(),
        seq: top.seq,
        id: top.id,
    };
    let mut run = Run {
        from,
        to,
        space,
        opts,
        r: &mut r,
    };
    let kept = to
        .peers(space)
        .await?
        .into_iter()
        .find(|p| p.cursor.peer == peer)
        .map(|p| p.cursor);
    let head_ids: Vec<EpochId> = heads.iter().map(|h| h.id).collect();
    if let Some(c) = kept {
        // The cursor is a shortcut, never the proof: after it, the receiver must hold every
        // head the sender had — and so, a store holding an epoch with its ancestors, all of
        // the sender's epochs. A sender restored from a backup or cloned (its id kept, its
        // history below the cursor changed) fails that check, or names a parent the receiver
        // lacks, and the sync negotiates.
        let by_cursor = if c == newest {
            run.r.path = SyncPath::UpToDate;
            Some(Ok(()))
        } else if c.seq < top.seq && run.digest_holds(&c).await? {
            run.r.path = SyncPath::Cursor;
            Some(run.forward(c.seq, top, &peer, false).await)
        } else {
            None
        };
        match by_cursor {
            Some(Ok(())) if run.lacking(&head_ids).await?.is_empty() => return Ok(r),
            Some(Err(Error::EpochRefused { error, .. })) if names_unknown_parent(&error) => {}
            Some(Err(e)) => return Err(e),
            Some(Ok(())) | None => {}
        }
        run.r.cursor_reset = true;
    }
    if to.heads(space).await?.is_empty() {
        run.r.path = SyncPath::Initial;
        run.forward(Seq(0), top, &peer, true).await?;
        return Ok(r);
    }
    run.r.path = SyncPath::Negotiated;
    let needed = run.walk(&heads).await?;
    run.transfer(&needed, &newest).await?;
    Ok(r)
}

/// Whether a batch was refused for a parent the receiver lacks (below the cursor, a cursor
/// that no longer holds).
fn names_unknown_parent(error: &Error) -> bool {
    matches!(error, Error::InvalidBatchItem { error, .. } if matches!(**error, Error::UnknownParent { .. }))
}

/// One pull's state.
struct Run<'a> {
    from: &'a dyn SyncEndpoint,
    to: &'a dyn SyncEndpoint,
    space: &'a SpaceId,
    opts: &'a SyncOptions,
    r: &'a mut SpaceReport,
}

impl Run<'_> {
    /// Whether `from` still holds the cursor's epoch at the cursor's seq.
    async fn digest_holds(&mut self, c: &SyncCursor) -> Result<bool> {
        let at = self
            .from
            .summaries(self.space, Some(Seq(c.seq.0 + 1)), 1)
            .await?;
        self.r.summaries += at.len() as u64;
        Ok(at.first().is_some_and(|s| s.seq == c.seq && s.id == c.id))
    }

    /// Which of `ids` the receiver lacks, asked in bounded calls.
    async fn lacking(&mut self, ids: &[EpochId]) -> Result<HashSet<EpochId>> {
        let mut out = HashSet::new();
        for chunk in ids.chunks(MAX_RECENT_EPOCHS) {
            self.r.ids_checked += chunk.len() as u64;
            out.extend(self.to.missing(self.space, chunk).await?);
        }
        Ok(out)
    }

    /// The cursor path: the sender's epochs after seq `after` up to `top`, oldest first, in
    /// windows; each window's epochs the receiver lacks are sent with the window's cursor.
    /// `assume_missing`: the receiver had nothing of the space, so it is not asked.
    async fn forward(
        &mut self,
        after: Seq,
        top: Head,
        peer: &StoreId,
        assume_missing: bool,
    ) -> Result<()> {
        let mut after = after.0;
        let window = self.opts.batch_epochs.min(MAX_RECENT_EPOCHS) as u64;
        while after < top.seq.0 {
            let end = top.seq.0.min(after + window);
            let span = usize::try_from(end - after).unwrap_or(MAX_RECENT_EPOCHS);
            let page = self
                .from
                .summaries(self.space, Some(Seq(end + 1)), span)
                .await?;
            self.r.summaries += page.len() as u64;
            let mut page: Vec<EpochSummary> =
                page.into_iter().filter(|s| s.seq.0 > after).collect();
            page.reverse();
            after = end;
            let Some(last) = page.last() else { continue };
            let cursor = SyncCursor {
                peer: peer.clone(),
                seq: last.seq,
                id: last.id,
            };
            let needed: Vec<EpochSummary> = if assume_missing {
                page
            } else {
                let ids: Vec<EpochId> = page.iter().map(|s| s.id).collect();
                let lacking = self.lacking(&ids).await?;
                page.into_iter()
                    .filter(|s| lacking.contains(&s.id))
                    .collect()
            };
            self.transfer(&needed, &cursor).await?;
        }
        Ok(())
    }

    /// Negotiation: the sender's history newest first, from its heads down to what the
    /// receiver has (each page's ids checked in one `need` call); returns what the receiver
    /// lacks, oldest first.
    async fn walk(&mut self, heads: &[Head]) -> Result<Vec<EpochSummary>> {
        let head_ids: Vec<EpochId> = heads.iter().map(|h| h.id).collect();
        let mut wanted: HashSet<EpochId> = self.lacking(&head_ids).await?;
        let mut needed = Vec::new();
        let mut before: Option<Seq> = None;
        let mut page_len = 16;
        while !wanted.is_empty() {
            let page = self.from.summaries(self.space, before, page_len).await?;
            self.r.summaries += page.len() as u64;
            let Some(last) = page.last() else {
                return Err(Error::Corrupt {
                    detail: format!(
                        "{}'s history of the space ends before the parents of epochs it holds",
                        self.from.label()
                    ),
                    source: None,
                });
            };
            before = Some(last.seq);
            // Nothing of the page is wanted: everything wanted lies deeper (a wanted epoch's
            // parents are older), so the page needs no `need` call.
            let lacking = if page.iter().any(|s| wanted.contains(&s.id)) {
                let ids: Vec<EpochId> = page.iter().map(|s| s.id).collect();
                self.lacking(&ids).await?
            } else {
                HashSet::new()
            };
            for s in page {
                if wanted.remove(&s.id) && lacking.contains(&s.id) {
                    wanted.extend(s.parents.iter().copied());
                    needed.push(s);
                }
            }
            page_len = (page_len * 4).min(MAX_RECENT_EPOCHS);
        }
        needed.reverse();
        Ok(needed)
    }

    /// Fetches `needed` (oldest first) from the sender and imports it into the receiver in
    /// batches; every batch carries the cursor of its last epoch, the last batch `last`
    /// (sent alone, with no epoch, when nothing is needed).
    async fn transfer(&mut self, needed: &[EpochSummary], last: &SyncCursor) -> Result<()> {
        let mut batch: Vec<ForeignEpoch> = Vec::new();
        let mut bytes = 0u64;
        let mut next = 0;
        while next < needed.len() {
            let take = (needed.len() - next).min(self.opts.fetch_epochs);
            let ids: Vec<EpochId> = needed[next..next + take].iter().map(|s| s.id).collect();
            let got = self.from.epochs(self.space, &ids).await?;
            if got.is_empty()
                || got.len() > ids.len()
                || got.iter().zip(&ids).any(|(e, id)| e.id != *id)
            {
                return Err(Error::Corrupt {
                    detail: format!(
                        "{} answered epochs other than those asked",
                        self.from.label()
                    ),
                    source: None,
                });
            }
            for e in got {
                let f = e.to_foreign();
                bytes += epoch_bytes(&f);
                batch.push(f);
                next += 1;
                let done = next == needed.len();
                if done || batch.len() >= self.opts.batch_epochs || bytes >= self.opts.batch_bytes {
                    let cursor = if done {
                        last.clone()
                    } else {
                        let s = &needed[next - 1];
                        SyncCursor {
                            peer: last.peer.clone(),
                            seq: s.seq,
                            id: s.id,
                        }
                    };
                    self.import(std::mem::take(&mut batch), &cursor).await?;
                    bytes = 0;
                }
            }
        }
        if needed.is_empty() {
            self.import(Vec::new(), last).await?;
        }
        Ok(())
    }

    async fn import(&mut self, batch: Vec<ForeignEpoch>, cursor: &SyncCursor) -> Result<()> {
        let sizes: Vec<(EpochId, u64)> = batch.iter().map(|e| (e.id, epoch_bytes(e))).collect();
        let outcomes = match self
            .to
            .import_batch(self.space, batch, Some(cursor), now_us())
            .await
        {
            Ok(o) => o,
            Err(Error::InvalidBatchItem { index, error }) if index < sizes.len() => {
                return Err(Error::EpochRefused {
                    epoch: sizes[index].0,
                    from: self.from.label(),
                    error,
                })
            }
            Err(e) => return Err(e),
        };
        if !sizes.is_empty() {
            self.r.batches += 1;
        }
        for (o, (_, b)) in outcomes.iter().zip(&sizes) {
            match o {
                ImportOutcome::Imported(_) => {
                    self.r.epochs += 1;
                    self.r.bytes += b;
                }
                ImportOutcome::AlreadyPresent(_) => self.r.present += 1,
            }
        }
        Ok(())
    }
}
