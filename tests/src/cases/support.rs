//! Helpers every epoch-log case shares: opening a store, building events and foreign epochs,
//! naming error variants, and the snapshot and head assertions that prove what a call wrote.

use std::sync::Arc;

use cairn_core::{
    epoch_id, EpochDiagnostics, EpochId, EpochStore, Error, Event, EventId, FeedEvent,
    ForeignEpoch, Head, Seq, SpaceId,
};

use crate::Harness;

/// Opens a store, panicking with the backend's message when it cannot.
pub(crate) async fn open<H: Harness>(h: &H) -> Arc<dyn EpochDiagnostics> {
    h.open()
        .await
        .unwrap_or_else(|e| panic!("{}: cannot open store: {e}", h.backend()))
}

/// Makes a two-way fork with the legacy writer: two epochs whose only parent is `parent`.
/// Returns the fork's heads sorted by id bytes.
pub(crate) async fn legacy_fork<H: Harness>(
    h: &H,
    space: &SpaceId,
    parent: EpochId,
    tag: &str,
) -> Vec<Head> {
    let mut fork = Vec::new();
    for side in ["f1", "f2"] {
        let epoch = h
            .legacy_append(space, Some(vec![parent]), ev(format!("{tag}-{side}")))
            .await
            .unwrap_or_else(|e| panic!("{tag}: legacy fork: {e}"));
        fork.push(epoch.head());
    }
    fork.sort();
    fork
}

/// A one-event batch whose payload is `tag`.
pub(crate) fn ev(tag: impl AsRef<str>) -> Vec<Event> {
    vec![Event::new("test.event", tag.as_ref().as_bytes().to_vec())]
}

/// A batch of `n` distinct events derived from `tag`; every other event carries a key, so keyed
/// and unkeyed events both round-trip.
pub(crate) fn evs(tag: impl AsRef<str>, n: usize) -> Vec<Event> {
    let tag = tag.as_ref();
    (0..n)
        .map(|i| {
            let payload = format!("{tag}/{i}").into_bytes();
            if i % 2 == 1 {
                Event::with_key("test.keyed", format!("key-{i}").into_bytes(), payload)
            } else {
                Event::new("test.event", payload)
            }
        })
        .collect()
}

/// The ids of `heads`, in the order given.
pub(crate) fn ids(heads: &[Head]) -> Vec<EpochId> {
    heads.iter().map(|h| h.id).collect()
}

/// The event ids of a batch, in order.
pub(crate) fn event_ids(events: &[Event]) -> Vec<EventId> {
    events.iter().map(Event::id).collect()
}

/// A well-formed foreign epoch of `space` with these parents (sorted and de-duplicated here) and
/// events, its id computed by `cairn_core::epoch_id`.
pub(crate) fn foreign(space: &SpaceId, parents: &[EpochId], events: Vec<Event>) -> ForeignEpoch {
    let mut parents = parents.to_vec();
    parents.sort();
    parents.dedup();
    ForeignEpoch {
        space: space.clone(),
        id: epoch_id(space, &parents, &event_ids(&events)),
        parents,
        events,
    }
}

/// The name of an error's variant, so outcomes can be compared by meaning.
pub(crate) fn variant(e: &Error) -> &'static str {
    match e {
        Error::InvalidInput { .. } => "InvalidInput",
        Error::NotFound { .. } => "NotFound",
        Error::BadCursor { .. } => "BadCursor",
        Error::HashMismatch { .. } => "HashMismatch",
        Error::UnknownParent { .. } => "UnknownParent",
        Error::Conflict { .. } => "Conflict",
        Error::Retryable { .. } => "Retryable",
        Error::Unavailable { .. } => "Unavailable",
        Error::Corrupt { .. } => "Corrupt",
        Error::UnsafePath { .. } => "UnsafePath",
        Error::Io { .. } => "Io",
        Error::Backend { .. } => "Backend",
        _ => "other",
    }
}

/// Everything observable about one space's epoch log, to prove an operation wrote nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// `heads()`, or `None` when the space is not found.
    pub(crate) heads: Option<Vec<Head>>,
    pub(crate) cached: Vec<Head>,
    pub(crate) computed: Vec<Head>,
    pub(crate) next_seq: Seq,
    /// The whole feed, or `None` when the space is not found.
    pub(crate) feed: Option<Vec<FeedEvent>>,
}

/// Takes a [`Snapshot`] of `space`; any error other than `NotFound` fails the case.
pub(crate) async fn snapshot(store: &dyn EpochDiagnostics, space: &SpaceId) -> Snapshot {
    let heads = match EpochStore::heads(store, space).await {
        Ok(h) => Some(h),
        Err(Error::NotFound { .. }) => None,
        Err(e) => panic!("heads({space}): unexpected error {e}"),
    };
    let feed = match store.events_since(space, None, 1_000_000).await {
        Ok(p) => Some(p.events),
        Err(Error::NotFound { .. }) => None,
        Err(e) => panic!("events_since({space}): unexpected error {e}"),
    };
    Snapshot {
        heads,
        cached: store.cached_heads(space).await.unwrap(),
        computed: store.computed_heads(space).await.unwrap(),
        next_seq: store.next_seq(space).await.unwrap(),
        feed,
    }
}

/// Every space id the store lists, paging with `limit`.
pub(crate) async fn all_spaces(store: &dyn EpochDiagnostics, limit: usize) -> Vec<SpaceId> {
    let mut out: Vec<SpaceId> = Vec::new();
    loop {
        let page = store.list_spaces(out.last(), limit).await.unwrap();
        assert!(
            page.len() <= limit,
            "list_spaces returned {} ids for limit {limit}",
            page.len()
        );
        if page.is_empty() {
            return out;
        }
        let mut prev = out.last().cloned();
        for id in &page {
            assert!(
                prev.as_ref().is_none_or(|p| p.as_bytes() < id.as_bytes()),
                "list_spaces: {id} is not strictly after the previous id"
            );
            prev = Some(id.clone());
        }
        out.extend(page);
    }
}

/// Asserts `heads()` equals the anti-join right now (the contract of every read).
pub(crate) async fn assert_heads_match_anti_join(
    store: &dyn EpochDiagnostics,
    space: &SpaceId,
    ctx: &str,
) {
    let heads = EpochStore::heads(store, space).await.unwrap();
    let computed = store.computed_heads(space).await.unwrap();
    assert_eq!(heads, computed, "{ctx}: heads() must equal the anti-join");
}

/// Asserts the invariant every append leaves behind (E4): the heads, the cache rows and the
/// anti-join all equal exactly `expected`.
pub(crate) async fn assert_single_head(
    store: &dyn EpochDiagnostics,
    space: &SpaceId,
    expected: Head,
) {
    let heads = EpochStore::heads(store, space).await.unwrap();
    assert_eq!(heads, vec![expected], "E4: heads after append");
    assert_eq!(
        store.cached_heads(space).await.unwrap(),
        vec![expected],
        "E4: cache rows after append"
    );
    assert_eq!(
        store.computed_heads(space).await.unwrap(),
        vec![expected],
        "E4: anti-join after append"
    );
}
