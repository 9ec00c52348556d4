//! The file graph of one crate: an edge from file A to file B when code in A names an item
//! defined in B, or glob-imports a module of B; each edge with the sites that make it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::modtree::ModTree;
use super::resolve::{Resolver, Target};

/// One place that makes an edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Site {
    /// The line in the edge's source file.
    pub(crate) line: usize,
    /// The path named there (`use a::b::C`, `a::b::f`).
    pub(crate) what: String,
}

/// The edges of a crate's file graph, each with its sites in source order.
pub(crate) type Edges = BTreeMap<(PathBuf, PathBuf), Vec<Site>>;

/// The file graph of `tree`; edges inside one file are left out.
pub(crate) fn edges(tree: &ModTree) -> Edges {
    let resolver = Resolver::new(tree);
    let mut edges = Edges::new();
    for (m, module) in tree.modules.iter().enumerate() {
        let mut add = |target: Option<Target>, glob: bool, line: usize, what: String| {
            let to = match target {
                Some(Target::Item(d)) => d,
                Some(Target::Module(g)) if glob => g,
                _ => return,
            };
            let to = &tree.modules[to].file;
            if *to != module.file {
                edges
                    .entry((module.file.clone(), to.clone()))
                    .or_default()
                    .push(Site { line, what });
            }
        };
        for import in &module.imports {
            let mut what = format!("use {}", import.path.join("::"));
            if import.glob {
                what.push_str("::*");
            }
            add(
                resolver.resolve(m, &import.path),
                import.glob,
                import.line,
                what,
            );
        }
        for named in &module.paths {
            add(
                resolver.resolve(m, &named.segments),
                false,
                named.line,
                named.segments.join("::"),
            );
        }
    }
    for sites in edges.values_mut() {
        sites.sort_by_key(|s| s.line);
    }
    edges
}
