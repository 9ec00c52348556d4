//! Name resolution over one crate's module tree: a path, read in a module, to the module or the
//! defining module of the item it names, through `use` imports and `pub use` re-exports (glob
//! ones included). Paths that leave the crate (`std::…`, another crate) resolve to nothing.

use super::modtree::ModTree;

/// What a path names inside the crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// A module.
    Module(usize),
    /// An item defined in this module (a path naming an item's associated item or variant
    /// ends at the item).
    Item(usize),
}

/// Resolves paths in `tree`.
pub(crate) struct Resolver<'a> {
    tree: &'a ModTree,
}

impl<'a> Resolver<'a> {
    /// A resolver over `tree`.
    pub(crate) fn new(tree: &'a ModTree) -> Self {
        Resolver { tree }
    }

    /// What `segments`, read in module `from`, name (`None`: outside the crate, or unknown).
    pub(crate) fn resolve(&self, from: usize, segments: &[String]) -> Option<Target> {
        self.path(from, segments, &mut Vec::new())
    }

    /// `stack` holds the (module, name) lookups under way, so import loops end.
    fn path(
        &self,
        from: usize,
        segments: &[String],
        stack: &mut Vec<(usize, String)>,
    ) -> Option<Target> {
        let (first, rest) = segments.split_first()?;
        let mut at = match first.as_str() {
            "crate" => 0,
            "self" => from,
            "super" => self.tree.modules[from].parent?,
            name => match self.lookup(from, name, stack)? {
                Target::Module(m) => m,
                item => return Some(item),
            },
        };
        for segment in rest {
            at = match segment.as_str() {
                "self" => at,
                "super" => self.tree.modules[at].parent?,
                name => match self.lookup(at, name, stack)? {
                    Target::Module(m) => m,
                    item => return Some(item),
                },
            };
        }
        Some(Target::Module(at))
    }

    /// What `name` means in module `m`: a child module, an item it defines, a name it imports,
    /// or a name one of its glob imports brings.
    fn lookup(&self, m: usize, name: &str, stack: &mut Vec<(usize, String)>) -> Option<Target> {
        let module = &self.tree.modules[m];
        if let Some(&child) = module.children.get(name) {
            return Some(Target::Module(child));
        }
        if module.items.contains(name) {
            return Some(Target::Item(m));
        }
        if stack.iter().any(|(sm, sn)| *sm == m && sn == name) {
            return None;
        }
        stack.push((m, name.to_owned()));
        let found = module
            .imports
            .iter()
            .filter(|i| !i.glob && i.binding.as_deref() == Some(name))
            .find_map(|i| self.path(m, &i.path, stack))
            .or_else(|| {
                module.imports.iter().filter(|i| i.glob).find_map(|i| {
                    match self.path(m, &i.path, stack)? {
                        Target::Module(g) => self.lookup(g, name, stack),
                        Target::Item(_) => None,
                    }
                })
            });
        stack.pop();
        found
    }
}
