//! The window of a space's epochs a picture shows ([`Dag`]), read from the store ([`load`]),
//! and how an epoch is named in both pictures.

use std::collections::BTreeSet;

use cairn::{EpochDiagnostics, EpochId, Result, Seq, SpaceId};

/// Most epochs one picture holds: the store's limit for one `recent_epochs` call.
pub(crate) const MAX_LAST: usize = cairn::MAX_RECENT_EPOCHS;

/// A window of a space's epochs, newest first, ready to draw.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct Dag {
    /// The space, as it prints (`SpaceId`'s `Display`: text, or `0x…` hex).
    pub(crate) space: String,
    /// The window's epochs, highest seq first.
    pub(crate) nodes: Vec<Node>,
    /// The space's heads among [`Dag::nodes`]; empty unless the window is the newest page.
    pub(crate) heads: BTreeSet<EpochId>,
    /// The `before` of the next page back (the oldest seq in the window); `None` when the
    /// window reaches the space's first epoch (or is empty).
    pub(crate) older: Option<Seq>,
}

/// One epoch of a [`Dag`].
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct Node {
    /// Its content address.
    pub(crate) id: EpochId,
    /// Its position in the space.
    pub(crate) seq: Seq,
    /// Its parents, sorted by id bytes (some may lie outside the window).
    pub(crate) parents: Vec<EpochId>,
    /// How many events it holds.
    pub(crate) events: u64,
}

impl Dag {
    /// A window of `space`'s epochs. `nodes` are sorted here, highest seq first; `heads` keeps
    /// only the ids of `nodes`; [`Dag::older`] is the oldest seq when it is above the first.
    pub(crate) fn new(
        space: String,
        mut nodes: Vec<Node>,
        heads: impl IntoIterator<Item = EpochId>,
    ) -> Self {
        nodes.sort_by(|a, b| b.seq.cmp(&a.seq).then(a.id.cmp(&b.id)));
        let shown: BTreeSet<EpochId> = nodes.iter().map(|n| n.id).collect();
        let heads = heads.into_iter().filter(|h| shown.contains(h)).collect();
        let older = nodes.last().map(|n| n.seq).filter(|s| *s > Seq::FIRST);
        Self {
            space,
            nodes,
            heads,
            older,
        }
    }
}

/// Reads the window of `space`'s epochs with `seq < before` (the newest when `None`), at most
/// `last` of them, newest first.
///
/// Heads are marked only on the newest page (`before` is `None`, or above every seq of the
/// space): only there is an epoch without a drawn child a head. They are read just after the
/// window, so an append in between can leave the picture without a marked head.
///
/// # Errors
/// [`cairn::Error::NotFound`] when the space has no epoch; [`cairn::Error::InvalidInput`] when
/// `last` is 0 or above [`MAX_LAST`]; backend errors.
pub(crate) async fn load(
    diag: &dyn EpochDiagnostics,
    space: &SpaceId,
    before: Option<Seq>,
    last: usize,
) -> Result<Dag> {
    let window = diag.recent_epochs(space, before, last).await?;
    let newest = match before {
        None => true,
        Some(before) => before >= diag.next_seq(space).await?,
    };
    let heads = if newest {
        diag.heads(space).await?
    } else {
        Vec::new()
    };
    let nodes = window
        .into_iter()
        .map(|e| Node {
            id: e.id,
            seq: e.seq,
            parents: e.parents,
            events: e.events,
        })
        .collect();
    Ok(Dag::new(
        space.to_string(),
        nodes,
        heads.into_iter().map(|h| h.id),
    ))
}

/// The 12-hex-digit label of an epoch.
pub(super) fn short(id: &EpochId) -> String {
    let mut hex = id.to_string();
    hex.truncate(12);
    hex
}

/// `1 event`, `3 events`.
pub(super) fn events_label(n: u64) -> String {
    if n == 1 {
        "1 event".to_owned()
    } else {
        format!("{n} events")
    }
}
