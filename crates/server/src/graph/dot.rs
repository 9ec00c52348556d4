//! The DAG as Graphviz DOT.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use cairn::EpochId;

use super::dag::{events_label, short, Dag};

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
