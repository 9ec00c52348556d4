//! Cycles of a directed graph: its strongly connected sets of two or more nodes, and one
//! shortest cycle through each (generic over the node type; no knowledge of files).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The strongly connected sets of two or more nodes of the graph `edges` (pairs `from -> to`),
/// each sorted, in the order of their smallest node.
pub(crate) fn tangles<N: Ord + Clone>(edges: &[(N, N)]) -> Vec<Vec<N>> {
    let mut next: BTreeMap<&N, Vec<&N>> = BTreeMap::new();
    for (from, to) in edges {
        next.entry(from).or_default().push(to);
        next.entry(to).or_default();
    }
    let mut state = Tarjan {
        next: &next,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for &node in next.keys() {
        if !state.index.contains_key(node) {
            state.visit(node);
        }
    }
    let mut sets: Vec<Vec<N>> = state
        .found
        .into_iter()
        .filter(|set| set.len() > 1)
        .map(|set| {
            let mut set: Vec<N> = set.into_iter().cloned().collect();
            set.sort();
            set
        })
        .collect();
    sets.sort();
    sets
}

struct Tarjan<'g, N> {
    next: &'g BTreeMap<&'g N, Vec<&'g N>>,
    index: BTreeMap<&'g N, usize>,
    low: BTreeMap<&'g N, usize>,
    stack: Vec<&'g N>,
    on_stack: BTreeSet<&'g N>,
    found: Vec<Vec<&'g N>>,
}

impl<'g, N: Ord> Tarjan<'g, N> {
    fn visit(&mut self, node: &'g N) {
        let i = self.index.len();
        self.index.insert(node, i);
        self.low.insert(node, i);
        self.stack.push(node);
        self.on_stack.insert(node);
        for &to in &self.next[node] {
            if !self.index.contains_key(to) {
                self.visit(to);
                let low = self.low[node].min(self.low[to]);
                self.low.insert(node, low);
            } else if self.on_stack.contains(to) {
                let low = self.low[node].min(self.index[to]);
                self.low.insert(node, low);
            }
        }
        if self.low[node] == self.index[node] {
            let mut set = Vec::new();
            while let Some(top) = self.stack.pop() {
                self.on_stack.remove(top);
                set.push(top);
                if top == node {
                    break;
                }
            }
            self.found.push(set);
        }
    }
}

/// A shortest cycle through `start` using only `edges` between nodes of `set`, as the nodes
/// in order (the first is `start`; the edge back to it is implied). Empty when there is none.
pub(crate) fn shortest_cycle<N: Ord + Clone>(edges: &[(N, N)], set: &[N], start: &N) -> Vec<N> {
    let inside = |n: &N| set.binary_search(n).is_ok();
    let mut came_from: BTreeMap<&N, &N> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for (from, to) in edges {
            if from != node || !inside(to) {
                continue;
            }
            if to == start {
                let mut path = vec![node.clone()];
                let mut at = node;
                while at != start {
                    at = came_from[at];
                    path.push(at.clone());
                }
                path.reverse();
                return path;
            }
            if !came_from.contains_key(to) {
                came_from.insert(to, node);
                queue.push_back(to);
            }
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(pairs: &[(u8, u8)]) -> Vec<(u8, u8)> {
        pairs.to_vec()
    }

    #[test]
    fn only_sets_of_two_or_more_are_tangles() {
        let g = graph(&[
            (1, 2),
            (2, 3),
            (3, 1),
            (3, 4),
            (4, 5),
            (5, 4),
            (6, 6),
            (7, 1),
        ]);
        assert_eq!(tangles(&g), vec![vec![1, 2, 3], vec![4, 5]]);
        assert!(tangles(&graph(&[(1, 2), (2, 3)])).is_empty());
    }

    #[test]
    fn the_shortest_cycle_through_a_node_is_found() {
        let g = graph(&[(1, 2), (2, 3), (3, 4), (4, 1), (2, 1)]);
        let set = &tangles(&g)[0];
        assert_eq!(shortest_cycle(&g, set, &1), vec![1, 2]);
        assert_eq!(shortest_cycle(&g, set, &3), vec![3, 4, 1, 2]);
    }
}
