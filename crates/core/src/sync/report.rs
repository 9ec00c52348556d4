//! What a sync did, per space and direction ([`SpaceReport`]) and in all ([`SyncReport`]).

use crate::types::SpaceId;

/// How a one-way sync of a space found what to send.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SyncPath {
    /// The sending side has no epoch in the space: nothing to do.
    Empty,
    /// The receiving side's cursor named the sender's newest epoch: nothing was read.
    UpToDate,
    /// The cursor held (the sender still has the epoch it names at its seq): only the
    /// sender's epochs after it were listed.
    Cursor,
    /// No cursor, or one that failed its check: the sender's heads, then its history newest
    /// first down to what the receiver has, with the receiver's `need` answer per page.
    Negotiated,
    /// The receiving side had nothing of the space: the sender's history streamed oldest
    /// first.
    Initial,
}

/// One space, one direction.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SpaceReport {
    /// The space.
    pub space: SpaceId,
    /// The sending side's label.
    pub from: String,
    /// The receiving side's label.
    pub to: String,
    /// How what to send was found.
    pub path: SyncPath,
    /// Whether the receiver's cursor failed its digest check (the sender was restored or
    /// replaced) and was set anew.
    pub cursor_reset: bool,
    /// Epochs the receiver imported.
    pub epochs: u64,
    /// Epochs sent that the receiver had meanwhile (another sync raced this one).
    pub present: u64,
    /// Stored bytes of the imported epochs' events.
    pub bytes: u64,
    /// Batches imported (each one transaction).
    pub batches: u64,
    /// Epoch summaries (id, seq, parents) read from the sender.
    pub summaries: u64,
    /// Ids the receiver was asked about (`need` checks, heads included).
    pub ids_checked: u64,
}

impl SpaceReport {
    pub(crate) fn new(space: &SpaceId, from: String, to: String) -> Self {
        Self {
            space: space.clone(),
            from,
            to,
            path: SyncPath::Empty,
            cursor_reset: false,
            epochs: 0,
            present: 0,
            bytes: 0,
            batches: 0,
            summaries: 0,
            ids_checked: 0,
        }
    }
}

/// A whole sync: every space in every direction it ran.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct SyncReport {
    /// Per space and direction, in the order they ran.
    pub spaces: Vec<SpaceReport>,
}

impl SyncReport {
    /// Epochs imported on either side.
    pub fn epochs(&self) -> u64 {
        self.spaces.iter().map(|s| s.epochs).sum()
    }

    /// Stored bytes imported on either side.
    pub fn bytes(&self) -> u64 {
        self.spaces.iter().map(|s| s.bytes).sum()
    }
}
