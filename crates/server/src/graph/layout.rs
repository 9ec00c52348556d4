//! Lanes and rows of the drawing: which column each epoch and each edge takes (module docs of
//! [`super`]).

use std::collections::HashMap;

use cairn::EpochId;

use super::dag::Dag;

/// Where [`layout`] put the epochs and their edges.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct Layout {
    /// How many lanes the picture uses (at least 1).
    pub(crate) lanes: usize,
    /// The lane of each epoch, by row ([`Dag::nodes`] index).
    pub(crate) lane: Vec<usize>,
    /// Every edge, by child row; a child's edges to parents in the window first (oldest
    /// first), then its stubs (in the order of its parents).
    pub(crate) edges: Vec<Edge>,
}

/// One edge of a [`Layout`], from a child to one of its parents.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct Edge {
    /// The child's row.
    pub(crate) child: usize,
    /// The parent.
    pub(crate) parent: EpochId,
    /// The parent's row; `None` when it is not below its child in the window (a stub).
    pub(crate) parent_row: Option<usize>,
    /// The lane the edge runs down in between the rows of its ends (for a stub: the lane it
    /// ends in).
    pub(crate) lane: usize,
}

/// What a lane holds between two rows while the layout walks down.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    Free,
    /// An edge runs down here to this epoch.
    Wants(EpochId),
    /// A stub ends here below the row just placed: no new epoch goes right under it.
    Stub,
}

/// Assigns lanes, walking the rows from the top, in O(rows · lanes) (plus O(lanes) per edge).
///
/// An epoch takes the leftmost lane reserved for it by a child above (the other lanes reserved
/// for it end there), or, when none is, the first free lane. Its parents in the window, oldest
/// first: the first continues in its lane, each other one joins a lane already running to it
/// or reserves the first free lane. Each parent outside the window gets a stub: in the epoch's
/// own lane when no parent continues there, else in the free lane nearest to it.
pub(crate) fn layout(dag: &Dag) -> Layout {
    let row_of: HashMap<EpochId, usize> = dag
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.id, i))
        .collect();
    let mut slots: Vec<Slot> = Vec::new();
    let mut lanes = 1;
    let mut lane_of = Vec::with_capacity(dag.nodes.len());
    let mut edges = Vec::new();
    for (row, node) in dag.nodes.iter().enumerate() {
        let mut mine = None;
        for (i, slot) in slots.iter_mut().enumerate() {
            if *slot == Slot::Wants(node.id) {
                mine.get_or_insert(i);
                *slot = Slot::Free;
            }
        }
        let lane = match mine {
            Some(lane) => lane,
            None => free_lane(&mut slots, None),
        };
        for slot in &mut slots {
            if *slot == Slot::Stub {
                *slot = Slot::Free;
            }
        }
        lane_of.push(lane);

        let mut below: Vec<(usize, EpochId)> = Vec::new();
        let mut outside: Vec<EpochId> = Vec::new();
        for p in &node.parents {
            match row_of.get(p) {
                Some(&r) if r > row => below.push((r, *p)),
                _ => outside.push(*p),
            }
        }
        // Oldest (lowest row) first: the long edge stays straight, nearer parents branch off.
        below.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut first = true;
        for (r, p) in below {
            let edge_lane = if first {
                slots[lane] = Slot::Wants(p);
                lane
            } else if let Some(i) = slots.iter().position(|s| *s == Slot::Wants(p)) {
                i
            } else {
                let i = free_lane(&mut slots, None);
                slots[i] = Slot::Wants(p);
                i
            };
            first = false;
            edges.push(Edge {
                child: row,
                parent: p,
                parent_row: Some(r),
                lane: edge_lane,
            });
        }
        for p in outside {
            let stub_lane = if slots[lane] == Slot::Free {
                lane
            } else {
                free_lane(&mut slots, Some(lane))
            };
            slots[stub_lane] = Slot::Stub;
            edges.push(Edge {
                child: row,
                parent: p,
                parent_row: None,
                lane: stub_lane,
            });
        }
        lanes = lanes.max(slots.len());
        while slots.last() == Some(&Slot::Free) {
            slots.pop();
        }
    }
    Layout {
        lanes,
        lane: lane_of,
        edges,
    }
}

/// A free lane: the first one, or (`near`) the one nearest to that lane, the right one on a
/// tie; a new lane on the right when none is free.
pub(super) fn free_lane(slots: &mut Vec<Slot>, near: Option<usize>) -> usize {
    let free = slots
        .iter()
        .enumerate()
        .filter(|(_, s)| **s == Slot::Free)
        .map(|(i, _)| i);
    let found = match near {
        None => free.min(),
        Some(n) => free.min_by_key(|&i| (i.abs_diff(n), i < n)),
    };
    found.unwrap_or_else(|| {
        slots.push(Slot::Free);
        slots.len() - 1
    })
}
