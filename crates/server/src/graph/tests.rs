use std::collections::BTreeSet;

use cairn::{EpochId, Seq};

use super::dag::*;
use super::dot::*;
use super::layout::*;
use super::svg::*;

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
