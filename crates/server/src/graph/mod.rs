//! A picture of a window of a space's epoch DAG: `cairn graph` prints it, the dashboard embeds
//! it.
//!
//! [`load`] reads a window of the space's epochs, newest first ([`cairn::EpochDiagnostics`]'s
//! `recent_epochs`), into a [`Dag`]. [`svg`] draws it as a standalone SVG made on the server
//! (no script, no external font or stylesheet, colours as presentation attributes only, so it
//! can be inlined in a page under a `style-src 'self'` policy); [`dot`] writes it as Graphviz
//! DOT.
//!
//! The drawing has one row per epoch, newest at the top, and an edge from each epoch to each of
//! its parents. Lanes (columns) are assigned greedily from the top ([`layout`]): an epoch takes
//! the leftmost lane an already drawn child reserved for it (or the first free lane), its
//! oldest parent continues in its lane and each other parent gets a lane of its own, so a
//! linear chain is one straight column, a fork is two lanes and a merge joins them. A parent
//! outside the window (older than its oldest epoch) is a short dashed stub ending in a small
//! "older" mark.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

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
enum Slot {
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
fn free_lane(slots: &mut Vec<Slot>, near: Option<usize>) -> usize {
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

/// `text` escaped for XML character data and attribute values (quoted with `"` or `'`).
/// Characters XML 1.0 cannot hold at all (most C0 controls, U+FFFE, U+FFFF) become U+FFFD;
/// tab, newline and carriage return become character references, which attribute values keep.
pub(crate) fn escape_xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' => out.push_str("&#9;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\u{0}'..='\u{1f}' | '\u{fffe}' | '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// `text` as the inside of a DOT double-quoted string whose escapes Graphviz interprets in a
/// label: `\` and `"` are backslash-escaped, `&` is written as the entity Graphviz turns back
/// into `&`, a newline is the `\n` line break, and other control characters become U+FFFD.
pub(crate) fn escape_dot(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '&' => out.push_str("&amp;"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// The 12-hex-digit label of an epoch.
fn short(id: &EpochId) -> String {
    let mut hex = id.to_string();
    hex.truncate(12);
    hex
}

/// `1 event`, `3 events`.
fn events_label(n: u64) -> String {
    if n == 1 {
        "1 event".to_owned()
    } else {
        format!("{n} events")
    }
}

/// At most `max` characters of `text`, ending in `…` when cut.
fn clipped(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max - 1).collect();
    out.push('…');
    out
}

// Geometry of the SVG, in pixels.
/// Margin around the picture.
const PAD: usize = 16;
/// Height of the space's title line.
const HEADER: usize = 26;
/// Height of one row.
const ROW: usize = 34;
/// Width of one lane.
const LANE: usize = 20;
/// Length of a stub edge below its epoch (it ends above the next row's epoch).
const STUB: usize = 20;
/// Width of the "head" badge column.
const BADGE: usize = 40;
/// Advance of one character of the 12 px monospace font, rounded up.
const CHAR: usize = 8;
/// Longest space name the title prints in full.
const TITLE_CHARS: usize = 64;
/// Edge and epoch colours, by lane.
const PALETTE: [&str; 6] = [
    "#0969da", "#8250df", "#bf3989", "#bc4c00", "#1a7f37", "#6e7781",
];
/// Colour of stubs, the older mark and secondary text.
const MUTED: &str = "#6e7781";
/// Colour of the head marks.
const HEAD: &str = "#1a7f37";
/// The font stack: the system's monospace fonts, nothing fetched.
const FONT: &str = "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace";

fn lane_colour(lane: usize) -> &'static str {
    PALETTE[lane % PALETTE.len()]
}

/// The picture's x of a lane's centre.
fn lane_x(lane: usize) -> usize {
    PAD + LANE / 2 + lane * LANE
}

/// The picture's y of a row's centre.
fn row_y(row: usize) -> usize {
    PAD + HEADER + ROW / 2 + row * ROW
}

/// A path segment from the current point `(x1, y1)` to `(x2, y2)`: a line when straight down,
/// else a curve leaving and arriving vertically.
fn segment(d: &mut String, (x1, y1): (usize, usize), (x2, y2): (usize, usize)) {
    if x1 == x2 {
        let _ = write!(d, " L{x2} {y2}");
    } else {
        let mid = y1 + (y2 - y1) / 2;
        let _ = write!(d, " C{x1} {mid} {x2} {mid} {x2} {y2}");
    }
}

/// The DAG as a standalone SVG document (also fit to be inlined in HTML).
///
/// Structure (what the dashboard and its browser test rely on):
/// - the root `<svg class="cairn-dag" data-space="…" data-epochs="N">`, with `data-older="SEQ"`
///   when older epochs exist, and a `<title>`;
/// - per epoch, `<g class="epoch" id="epoch-{hex}" data-seq data-lane data-events
///   data-parents="{hex} {hex}">` (class `epoch head` for a head) holding a `<title>` that is
///   the full id, its circle (`class="node"`), its label (`class="label"`: short id, seq,
///   event count) and, for a head, a badge (`class="head-label"`, text `head`);
/// - per edge, `<path class="edge" data-child="{hex}" data-parent="{hex}"/>`, child to parent;
///   `class="edge stub"` for a parent outside the window, followed by its mark
///   (`<path class="older" data-parent="{hex}">` with a `<title>`).
///
/// Every text and attribute value taken from the data is escaped ([`escape_xml`]).
pub(crate) fn svg(dag: &Dag) -> String {
    let layout = layout(dag);
    let rows = dag.nodes.len();
    let has_heads = !dag.heads.is_empty();
    let badge_x = lane_x(layout.lanes - 1) + LANE;
    let label_x = badge_x + if has_heads { BADGE } else { 0 };
    let labels: Vec<String> = dag
        .nodes
        .iter()
        .map(|n| {
            format!(
                "{} · seq {} · {}",
                short(&n.id),
                n.seq,
                events_label(n.events)
            )
        })
        .collect();
    let title = format!("space {}", clipped(&dag.space, TITLE_CHARS));
    let footer = match (dag.older, rows) {
        (Some(older), _) => Some(format!(
            "older epochs (seq < {older}) are not shown; dashed edges lead to them"
        )),
        (None, 0) => Some("no epochs in this window".to_owned()),
        (None, _) => None,
    };
    let text_chars = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let width = (label_x + text_chars * CHAR)
        .max(PAD + title.chars().count() * CHAR)
        .max(PAD + footer.as_ref().map_or(0, |f| f.chars().count() * CHAR))
        + PAD;
    let mut height = PAD + HEADER + rows * ROW;
    if layout.edges.iter().any(|e| e.parent_row.is_none()) {
        height += STUB / 2;
    }
    let footer_y = height + 12;
    if footer.is_some() {
        height += 22;
    }
    height += PAD;

    let mut s = String::new();
    let space = escape_xml(&dag.space);
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"cairn-dag\" data-space=\"{space}\" \
         data-epochs=\"{rows}\""
    );
    if let Some(older) = dag.older {
        let _ = write!(s, " data-older=\"{older}\"");
    }
    let _ = writeln!(
        s,
        " width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" \
         font-family=\"{FONT}\" font-size=\"12\">"
    );
    let _ = writeln!(s, "<title>epochs of space {space}</title>");
    let _ = writeln!(
        s,
        "<rect class=\"background\" width=\"{width}\" height=\"{height}\" fill=\"#ffffff\"/>"
    );
    let _ = writeln!(
        s,
        "<text class=\"space\" x=\"{PAD}\" y=\"{}\" font-size=\"13\" font-weight=\"bold\" \
         fill=\"#1f2328\">{}</text>",
        PAD + 13,
        escape_xml(&title)
    );

    for e in &layout.edges {
        let child = &dag.nodes[e.child];
        let from = (lane_x(layout.lane[e.child]), row_y(e.child));
        let mut d = format!("M{} {}", from.0, from.1);
        let (class, colour, dash, end) = match e.parent_row {
            Some(pr) => {
                let to = (lane_x(layout.lane[pr]), row_y(pr));
                let run = lane_x(e.lane);
                if pr == e.child + 1 || (from.0 == run && run == to.0) {
                    segment(&mut d, from, to);
                } else {
                    let top = (run, row_y(e.child + 1));
                    let bottom = (run, row_y(pr - 1));
                    segment(&mut d, from, top);
                    if bottom != top {
                        segment(&mut d, top, bottom);
                    }
                    segment(&mut d, bottom, to);
                }
                ("edge", lane_colour(e.lane), "", None)
            }
            None => {
                let to = (lane_x(e.lane), from.1 + STUB);
                segment(&mut d, from, to);
                ("edge stub", MUTED, " stroke-dasharray=\"3 3\"", Some(to))
            }
        };
        let _ = writeln!(
            s,
            "<path class=\"{class}\" data-child=\"{}\" data-parent=\"{}\" d=\"{d}\" fill=\"none\" \
             stroke=\"{colour}\" stroke-width=\"2\"{dash}/>",
            child.id, e.parent
        );
        if let Some((x, y)) = end {
            let _ = writeln!(
                s,
                "<path class=\"older\" data-parent=\"{}\" d=\"M{} {} L{x} {} L{} {}\" fill=\"none\" \
                 stroke=\"{MUTED}\" stroke-width=\"2\"><title>parent {} is older than this \
                 window</title></path>",
                e.parent,
                x - 4,
                y - 3,
                y + 1,
                x + 4,
                y - 3,
                e.parent
            );
        }
    }

    for (row, (node, label)) in dag.nodes.iter().zip(&labels).enumerate() {
        let head = dag.heads.contains(&node.id);
        let lane = layout.lane[row];
        let (x, y) = (lane_x(lane), row_y(row));
        let parents: Vec<String> = node.parents.iter().map(ToString::to_string).collect();
        let _ = writeln!(
            s,
            "<g class=\"{}\" id=\"epoch-{}\" data-seq=\"{}\" data-lane=\"{lane}\" \
             data-events=\"{}\" data-parents=\"{}\">",
            if head { "epoch head" } else { "epoch" },
            node.id,
            node.seq,
            node.events,
            parents.join(" ")
        );
        let _ = writeln!(s, "<title>{}</title>", node.id);
        if head {
            let _ = writeln!(
                s,
                "<circle class=\"node\" cx=\"{x}\" cy=\"{y}\" r=\"6\" fill=\"#ffffff\" \
                 stroke=\"{HEAD}\" stroke-width=\"3\"/>"
            );
            let _ = writeln!(
                s,
                "<rect class=\"head-label\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"16\" rx=\"3\" \
                 fill=\"{HEAD}\"/><text class=\"head-label\" x=\"{}\" y=\"{}\" font-size=\"10\" \
                 font-weight=\"bold\" fill=\"#ffffff\" text-anchor=\"middle\">head</text>",
                badge_x,
                y - 8,
                BADGE - 8,
                badge_x + (BADGE - 8) / 2,
                y + 4
            );
        } else {
            let _ = writeln!(
                s,
                "<circle class=\"node\" cx=\"{x}\" cy=\"{y}\" r=\"5\" fill=\"{}\" \
                 stroke=\"#ffffff\" stroke-width=\"2\"/>",
                lane_colour(lane)
            );
        }
        let _ = writeln!(
            s,
            "<text class=\"label\" x=\"{label_x}\" y=\"{}\" fill=\"#1f2328\">{}</text>",
            y + 4,
            escape_xml(label)
        );
        s.push_str("</g>\n");
    }
    if let Some(footer) = footer {
        let _ = writeln!(
            s,
            "<text class=\"more\" x=\"{PAD}\" y=\"{footer_y}\" font-size=\"11\" \
             fill=\"{MUTED}\">{}</text>",
            escape_xml(&footer)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// The DAG as Graphviz DOT: a `digraph` with one node per epoch (`e{hex}`, labelled with the
/// short id, seq and event count; heads drawn as bold double octagons), an edge from each
/// epoch to each parent, and a parent outside the window as a dashed edge to a plain `older`
/// node (`o{hex}`). Newest at the top (rank direction top to bottom). Every string is escaped
/// ([`escape_dot`]).
pub(crate) fn dot(dag: &Dag) -> String {
    let mut s = String::new();
    s.push_str("digraph cairn {\n");
    let mut title = format!("space {}", dag.space);
    if let Some(older) = dag.older {
        let _ = write!(title, "\nolder epochs (seq < {older}) not shown");
    }
    let _ = writeln!(
        s,
        "  graph [label=\"{}\", labelloc=t, rankdir=TB, fontname=\"monospace\"];",
        escape_dot(&title)
    );
    s.push_str("  node [shape=box, style=rounded, fontname=\"monospace\", fontsize=10];\n");
    s.push_str("  edge [color=\"#57606a\"];\n");
    let shown: BTreeSet<EpochId> = dag.nodes.iter().map(|n| n.id).collect();
    let mut stubs = BTreeSet::new();
    for n in &dag.nodes {
        let head = dag.heads.contains(&n.id);
        let label = format!(
            "{}\nseq {} · {}{}",
            short(&n.id),
            n.seq,
            events_label(n.events),
            if head { "\nhead" } else { "" }
        );
        let shape = if head {
            ", shape=doubleoctagon, style=bold, color=\"#1a7f37\""
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "  \"e{}\" [label=\"{}\", tooltip=\"{}\"{shape}];",
            n.id,
            escape_dot(&label),
            n.id
        );
        for p in &n.parents {
            if !shown.contains(p) {
                stubs.insert(*p);
            }
        }
    }
    for p in &stubs {
        let _ = writeln!(
            s,
            "  \"o{p}\" [label=\"older\\n{}\", tooltip=\"{p}\", shape=plaintext, \
             fontcolor=\"#6e7781\"];",
            short(p)
        );
    }
    for n in &dag.nodes {
        for p in &n.parents {
            if shown.contains(p) {
                let _ = writeln!(s, "  \"e{}\" -> \"e{p}\";", n.id);
            } else {
                let _ = writeln!(s, "  \"e{}\" -> \"o{p}\" [style=dashed];", n.id);
            }
        }
    }
    s.push_str("}\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> EpochId {
        EpochId([n; 32])
    }

    fn node(n: u8, seq: u64, parents: &[u8]) -> Node {
        Node {
            id: id(n),
            seq: Seq(seq),
            parents: parents.iter().map(|&p| id(p)).collect(),
            events: 1,
        }
    }

    /// A chain 1 ← 2 ← 3.
    fn chain() -> Dag {
        Dag::new(
            "s".into(),
            vec![node(1, 1, &[]), node(2, 2, &[1]), node(3, 3, &[2])],
            [id(3)],
        )
    }

    /// 1 ← 2 ← 3 (local) and 2 ← 4 (imported): heads 3 and 4.
    fn fork() -> Vec<Node> {
        vec![
            node(4, 4, &[2]),
            node(3, 3, &[2]),
            node(2, 2, &[1]),
            node(1, 1, &[]),
        ]
    }

    fn edge_lanes(l: &Layout) -> Vec<(usize, Option<usize>, usize)> {
        l.edges
            .iter()
            .map(|e| (e.child, e.parent_row, e.lane))
            .collect()
    }

    #[test]
    fn a_chain_is_one_straight_lane() {
        let dag = chain();
        assert_eq!(dag.older, None);
        let l = layout(&dag);
        assert_eq!(l.lanes, 1);
        assert_eq!(l.lane, [0, 0, 0]);
        assert_eq!(edge_lanes(&l), [(0, Some(1), 0), (1, Some(2), 0)]);
    }

    #[test]
    fn a_fork_takes_two_lanes_that_meet_at_the_shared_parent() {
        let dag = Dag::new("s".into(), fork(), [id(3), id(4)]);
        let l = layout(&dag);
        assert_eq!(l.lanes, 2);
        // 4 at the top in lane 0, 3 beside it in lane 1, both edges ending at 2 in lane 0.
        assert_eq!(l.lane, [0, 1, 0, 0]);
        assert_eq!(
            edge_lanes(&l),
            [(0, Some(2), 0), (1, Some(2), 1), (2, Some(3), 0)]
        );
        assert_eq!(dag.heads, BTreeSet::from([id(3), id(4)]));
    }

    #[test]
    fn a_merge_keeps_its_oldest_parent_straight_and_joins_the_other_lane() {
        let mut nodes = fork();
        nodes.push(node(5, 5, &[3, 4]));
        let dag = Dag::new("s".into(), nodes, [id(5)]);
        assert_eq!(dag.nodes[0].id, id(5), "newest first");
        let l = layout(&dag);
        assert_eq!(l.lanes, 2);
        // 5 ← 3 (the older parent) straight in lane 0; 4 in lane 1, joining at 2.
        assert_eq!(l.lane, [0, 1, 0, 0, 0]);
        assert_eq!(
            edge_lanes(&l),
            [
                (0, Some(2), 0),
                (0, Some(1), 1),
                (1, Some(3), 1),
                (2, Some(3), 0),
                (3, Some(4), 0)
            ]
        );
        assert_eq!(dag.heads, BTreeSet::from([id(5)]));
    }

    #[test]
    fn a_lane_is_reused_once_its_edge_has_ended() {
        // Two forks one after the other: 1 ← {2, 3} ← 4 ← {5, 6} ← 7.
        let dag = Dag::new(
            "s".into(),
            vec![
                node(1, 1, &[]),
                node(2, 2, &[1]),
                node(3, 3, &[1]),
                node(4, 4, &[2, 3]),
                node(5, 5, &[4]),
                node(6, 6, &[4]),
                node(7, 7, &[5, 6]),
            ],
            [id(7)],
        );
        let l = layout(&dag);
        assert_eq!(l.lanes, 2);
        assert_eq!(l.lane, [0, 1, 0, 0, 1, 0, 0]);
    }

    #[test]
    fn a_parent_outside_the_window_is_a_stub() {
        // The window holds 5, 4, 3 of 1 ← 2 ← 3 ← 4 and 1 ← 5: 5's and 3's parents are older.
        let dag = Dag::new(
            "s".into(),
            vec![node(5, 5, &[1]), node(4, 4, &[3]), node(3, 3, &[2])],
            [id(4), id(5)],
        );
        assert_eq!(dag.older, Some(Seq(3)));
        let l = layout(&dag);
        // 4 is not drawn right under 5's stub.
        assert_eq!(l.lane, [0, 1, 1]);
        assert_eq!(l.lanes, 2);
        assert_eq!(
            edge_lanes(&l),
            [(0, None, 0), (1, Some(2), 1), (2, None, 1)]
        );
        let svg = svg(&dag);
        let stubs: Vec<&str> = svg
            .lines()
            .filter(|l| l.starts_with("<path class=\"edge stub\""))
            .collect();
        assert_eq!(stubs.len(), 2, "{svg}");
        assert!(stubs[0].contains(&format!(
            "data-child=\"{}\" data-parent=\"{}\"",
            id(5),
            id(1)
        )));
        assert_eq!(svg.matches("<path class=\"older\"").count(), 2);
        assert!(svg.contains("data-older=\"3\""));
        let dot = dot(&dag);
        assert!(dot.contains(&format!("\"e{}\" -> \"o{}\" [style=dashed];", id(5), id(1))));
    }

    #[test]
    fn a_stub_beside_a_continuing_lane_takes_the_nearest_free_lane() {
        // 3's parents: 2 in the window, 1 outside it.
        let dag = Dag::new(
            "s".into(),
            vec![node(3, 3, &[1, 2]), node(2, 2, &[9])],
            [id(3)],
        );
        let l = layout(&dag);
        assert_eq!(l.lane, [0, 0], "no epoch right under a stub");
        assert_eq!(l.lanes, 2);
        assert_eq!(
            edge_lanes(&l),
            [(0, Some(1), 0), (0, None, 1), (1, None, 0)]
        );
    }

    #[test]
    fn no_new_epoch_sits_right_under_a_stub() {
        // 3 (a head) has an older parent; 2 is a head of its own, drawn next.
        let dag = Dag::new(
            "s".into(),
            vec![node(3, 3, &[9]), node(2, 2, &[8])],
            [id(3), id(2)],
        );
        let l = layout(&dag);
        assert_eq!(l.lane, [0, 1]);
        assert_eq!(edge_lanes(&l), [(0, None, 0), (1, None, 1)]);
    }

    /// A history as a store makes it: each step appends (parents: every head) or imports an
    /// epoch on an earlier epoch (which forks unless that epoch is the only head), drawn from
    /// a fixed pseudo-random sequence.
    fn history(steps: u64, seed: u64) -> Vec<Node> {
        let mut state = seed;
        let mut next = move |n: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % n
        };
        let mut nodes: Vec<Node> = Vec::new();
        let mut heads: Vec<EpochId> = Vec::new();
        for seq in 1..=steps {
            let mut hash = [0u8; 32];
            hash[..8].copy_from_slice(&seq.to_be_bytes());
            let id = EpochId(hash);
            let parents = if nodes.is_empty() || next(3) != 0 {
                std::mem::take(&mut heads)
            } else {
                let p = nodes[next(nodes.len() as u64) as usize].id;
                heads.retain(|h| *h != p);
                vec![p]
            };
            heads.push(id);
            nodes.push(Node {
                id,
                seq: Seq(seq),
                parents,
                events: 1,
            });
        }
        nodes
    }

    #[test]
    fn no_epoch_is_drawn_where_an_edge_runs() {
        for seed in 0..50 {
            let all = history(120, seed);
            // The whole history, and a window of its newest 40.
            for nodes in [all.clone(), all[80..].to_vec()] {
                let dag = Dag::new("s".into(), nodes, []);
                let l = layout(&dag);
                assert_eq!(l.lane.len(), dag.nodes.len());
                assert!(l.lane.iter().all(|&lane| lane < l.lanes));
                for e in &l.edges {
                    let end = e.parent_row.unwrap_or(e.child + 2).min(dag.nodes.len());
                    for row in e.child + 1..end {
                        assert_ne!(
                            l.lane[row], e.lane,
                            "seed {seed}: {e:?} runs through row {row}"
                        );
                    }
                    if let Some(pr) = e.parent_row {
                        assert!(pr > e.child);
                        assert_eq!(dag.nodes[pr].id, e.parent);
                    }
                }
                let edges: usize = dag.nodes.iter().map(|n| n.parents.len()).sum();
                assert_eq!(l.edges.len(), edges, "one edge per parent");
            }
        }
    }

    #[test]
    fn paging_names_the_next_page_back_until_the_first_epoch() {
        let page = |seqs: &[u64]| {
            Dag::new(
                "s".into(),
                seqs.iter().map(|&s| node(s as u8, s, &[])).collect(),
                [],
            )
            .older
        };
        assert_eq!(page(&[10, 9, 8]), Some(Seq(8)));
        assert_eq!(page(&[8, 9, 10]), Some(Seq(8)), "in any order");
        assert_eq!(page(&[2, 1]), None);
        assert_eq!(page(&[1]), None);
        assert_eq!(page(&[]), None);
    }

    #[test]
    fn heads_outside_the_window_are_dropped() {
        let dag = Dag::new("s".into(), vec![node(2, 2, &[1])], [id(2), id(7)]);
        assert_eq!(dag.heads, BTreeSet::from([id(2)]));
    }

    #[test]
    fn escape_xml_escapes_markup_quotes_and_controls() {
        assert_eq!(escape_xml("plain é ·"), "plain é ·");
        assert_eq!(
            escape_xml("<script>alert(\"x\" & 'y')</script>"),
            "&lt;script&gt;alert(&quot;x&quot; &amp; &#39;y&#39;)&lt;/script&gt;"
        );
        assert_eq!(escape_xml("&amp;"), "&amp;amp;");
        assert_eq!(escape_xml("a\tb\nc\rd"), "a&#9;b&#10;c&#13;d");
        assert_eq!(
            escape_xml("\u{0}\u{1b}\u{ffff}"),
            "\u{fffd}\u{fffd}\u{fffd}"
        );
    }

    #[test]
    fn escape_dot_escapes_quotes_backslashes_and_entities() {
        assert_eq!(escape_dot("plain"), "plain");
        assert_eq!(escape_dot("a\"b\\c"), "a\\\"b\\\\c");
        assert_eq!(escape_dot("x\\\"] ; y"), "x\\\\\\\"] ; y");
        assert_eq!(escape_dot("&lt;"), "&amp;lt;");
        assert_eq!(escape_dot("two\nlines\u{7}"), "two\\nlines\u{fffd}");
    }

    #[test]
    fn a_hostile_space_name_is_escaped_everywhere() {
        let hostile = "<script>alert('x')</script>\"&amp;".to_owned();
        let mut dag = chain();
        dag.space = hostile.clone();
        let svg = svg(&dag);
        assert!(!svg.contains("<script"), "{svg}");
        assert!(!svg.contains("'x'"), "{svg}");
        let escaped = escape_xml(&hostile);
        assert!(svg.contains(&format!("data-space=\"{escaped}\"")), "{svg}");
        assert!(svg.contains(&format!(">space {escaped}</text>")), "{svg}");
        // Every quote in the document opens or closes an attribute value: none leaks out.
        for line in svg.lines().filter(|l| l.starts_with('<')) {
            assert_eq!(line.matches('"').count() % 2, 0, "{line}");
        }
        let dot = dot(&dag);
        assert!(
            dot.contains("label=\"space <script>alert('x')</script>\\\"&amp;amp;\", labelloc=t"),
            "{dot}"
        );
    }

    #[test]
    fn the_svg_marks_heads_and_names_every_epoch_and_edge() {
        let mut nodes = fork();
        nodes.push(node(5, 5, &[3, 4]));
        let dag = Dag::new("s".into(), nodes, [id(5)]);
        let svg = svg(&dag);
        assert!(svg.starts_with(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"cairn-dag\" data-space=\"s\" \
             data-epochs=\"5\" width=\""
        ));
        assert!(svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<g class=\"epoch head\"").count(), 1);
        assert_eq!(svg.matches("<g class=\"epoch\"").count(), 4);
        assert_eq!(svg.matches("<path class=\"edge\"").count(), 5);
        assert!(svg.contains(&format!(
            "<g class=\"epoch head\" id=\"epoch-{}\" data-seq=\"5\" data-lane=\"0\" \
             data-events=\"1\" data-parents=\"{} {}\">\n<title>{}</title>",
            id(5),
            id(3),
            id(4),
            id(5)
        )));
        assert!(svg.contains(">head</text>"));
        assert!(!svg.contains("style"), "no style element or attribute");
        assert!(!svg.contains("data-older"));
        let dot = dot(&dag);
        assert!(dot.starts_with("digraph cairn {\n"));
        assert_eq!(dot.matches("shape=doubleoctagon").count(), 1);
        assert_eq!(dot.matches(" -> ").count(), 5);
    }

    #[test]
    fn an_empty_window_still_draws() {
        let dag = Dag::new("s".into(), Vec::new(), []);
        let svg = svg(&dag);
        assert!(svg.contains("data-epochs=\"0\""));
        assert!(svg.contains("no epochs in this window"));
        assert_eq!(dot(&dag).matches(" -> ").count(), 0);
    }
}
