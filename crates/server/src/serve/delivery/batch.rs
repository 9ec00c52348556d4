//! One POST's body: the run and the events that fit in `delivery.max_batch_bytes`.

use std::collections::VecDeque;

use cairn::spool::{RunEvent, RunEventId};
use serde::Serialize;
use serde_json::value::RawValue;

use crate::serve::json::RunEventOut;

/// The body of one POST.
#[derive(Serialize)]
pub(super) struct Batch<'a> {
    pub(super) run_id: String,
    pub(super) queue: &'a str,
    pub(super) attempt: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) payload: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) payload_b64: Option<String>,
    /// Each a [`RunEventOut`], encoded by [`take_batch`].
    pub(super) events: Vec<Box<RawValue>>,
}

/// The events of one POST, taken from the front of those read.
#[derive(Debug, Default)]
pub(super) struct Slice {
    /// Their ids, to acknowledge once delivered.
    pub(super) ids: Vec<RunEventId>,
    /// The seq of the last; `None` for a batch with no events.
    pub(super) last: Option<u64>,
    /// Each one's JSON.
    pub(super) events: Vec<Box<RawValue>>,
}

/// Takes events from the front of `pending` for one POST, each encoded as JSON: as many as
/// keep the `events` array (`[…]`) within `budget` bytes, and always the first however large,
/// so that a run always progresses. The rest stay in `pending` for the next POST (the first of
/// them is encoded once more then).
pub(super) fn take_batch(
    pending: &mut VecDeque<RunEvent>,
    budget: usize,
) -> serde_json::Result<Slice> {
    let mut slice = Slice::default();
    // The brackets.
    let mut size = 2;
    while let Some(event) = pending.front() {
        let json = serde_json::value::to_raw_value(&RunEventOut::from(event))?;
        let comma = usize::from(!slice.events.is_empty());
        let grown = size + comma + json.get().len();
        if !slice.events.is_empty() && grown > budget {
            break;
        }
        size = grown;
        slice.events.push(json);
        let event = pending.pop_front().expect("the front event was just read");
        slice.last = Some(event.seq);
        slice.ids.push(event.event_id);
    }
    Ok(slice)
}
