//! The DAG as a standalone SVG: no script, no external font or stylesheet, colours as
//! presentation attributes only.

use std::fmt::Write as _;

use super::dag::{events_label, short, Dag};
use super::layout::layout;

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

/// At most `max` characters of `text`, ending in `…` when cut.
pub(super) fn clipped(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max - 1).collect();
    out.push('…');
    out
}

// Geometry of the SVG, in pixels.
/// Margin around the picture.
pub(super) const PAD: usize = 16;
/// Height of the space's title line.
pub(super) const HEADER: usize = 26;
/// Height of one row.
pub(super) const ROW: usize = 34;
/// Width of one lane.
pub(super) const LANE: usize = 20;
/// Length of a stub edge below its epoch (it ends above the next row's epoch).
pub(super) const STUB: usize = 20;
/// Width of the "head" badge column.
pub(super) const BADGE: usize = 40;
/// Advance of one character of the 12 px monospace font, rounded up.
pub(super) const CHAR: usize = 8;
/// Longest space name the title prints in full.
pub(super) const TITLE_CHARS: usize = 64;
/// Edge and epoch colours, by lane.
pub(super) const PALETTE: [&str; 6] = [
    "#0969da", "#8250df", "#bf3989", "#bc4c00", "#1a7f37", "#6e7781",
];
/// Colour of stubs, the older mark and secondary text.
pub(super) const MUTED: &str = "#6e7781";
/// Colour of the head marks.
pub(super) const HEAD: &str = "#1a7f37";
/// The font stack: the system's monospace fonts, nothing fetched.
pub(super) const FONT: &str = "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace";

pub(super) fn lane_colour(lane: usize) -> &'static str {
    PALETTE[lane % PALETTE.len()]
}

/// The picture's x of a lane's centre.
pub(super) fn lane_x(lane: usize) -> usize {
    PAD + LANE / 2 + lane * LANE
}

/// The picture's y of a row's centre.
pub(super) fn row_y(row: usize) -> usize {
    PAD + HEADER + ROW / 2 + row * ROW
}

/// A path segment from the current point `(x1, y1)` to `(x2, y2)`: a line when straight down,
/// else a curve leaving and arriving vertically.
pub(super) fn segment(d: &mut String, (x1, y1): (usize, usize), (x2, y2): (usize, usize)) {
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
