//! One crate's module tree, read from its root file through its `mod` declarations: for each
//! module, the names it defines, its `use` imports and the multi-segment paths its code names,
//! all outside `#[cfg(test)]` code and `tests` modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::{self, Visit};
use syn::{Attribute, Item, UseTree};

use super::attrs::test_only;
use super::source::Sources;

/// A module: a file, or an inline `mod x { .. }` within one.
#[derive(Debug, Default)]
pub(crate) struct Module {
    /// Its parent (`None` for the crate root).
    pub(crate) parent: Option<usize>,
    /// The file its code is in, relative to the workspace root.
    pub(crate) file: PathBuf,
    /// Its child modules by name.
    pub(crate) children: BTreeMap<String, usize>,
    /// The names of the items it defines (types, functions, constants, traits, macros, …).
    pub(crate) items: BTreeSet<String>,
    /// Its `use` imports, one per leaf of each use tree.
    pub(crate) imports: Vec<Import>,
    /// The paths of two or more segments its code names (in types, expressions, patterns,
    /// attributes, and the tokens of macro calls).
    pub(crate) paths: Vec<Named>,
}

/// One leaf of a `use` tree.
#[derive(Debug, Clone)]
pub(crate) struct Import {
    /// The path imported (for a glob, the module's path).
    pub(crate) path: Vec<String>,
    /// The name it binds (`None` for a glob and for `as _`).
    pub(crate) binding: Option<String>,
    /// Whether it is `path::*`.
    pub(crate) glob: bool,
    /// The line it is on.
    pub(crate) line: usize,
}

/// A path named in code.
#[derive(Debug, Clone)]
pub(crate) struct Named {
    /// Its segments (identifiers only: generic arguments are paths of their own).
    pub(crate) segments: Vec<String>,
    /// The line it is on.
    pub(crate) line: usize,
}

/// A crate's modules (index 0 is the root) and the files only its tests use.
#[derive(Debug, Default)]
pub(crate) struct ModTree {
    /// Every module reached from the root file.
    pub(crate) modules: Vec<Module>,
    /// Files declared only under `#[cfg(test)]` or as a `tests` module.
    pub(crate) test_files: BTreeSet<PathBuf>,
}

impl ModTree {
    /// Reads the crate whose root file is `root_file` (relative to the workspace root).
    pub(crate) fn load(sources: &mut Sources, root_file: &Path) -> Result<ModTree, String> {
        let parsed = sources.get(root_file)?;
        let dir = root_file.parent().unwrap_or(Path::new("")).to_owned();
        let mut tree = ModTree::default();
        let at = Place {
            file: root_file.to_owned(),
            child_dir: dir.clone(),
            path_base: dir,
        };
        tree.add(sources, None, at, &parsed.syntax.items)?;
        Ok(tree)
    }

    /// Adds the module whose items are `items`, and its children; returns its index.
    fn add(
        &mut self,
        sources: &mut Sources,
        parent: Option<usize>,
        at: Place,
        items: &[Item],
    ) -> Result<usize, String> {
        let id = self.modules.len();
        self.modules.push(Module {
            parent,
            file: at.file.clone(),
            ..Module::default()
        });
        let mut code = Collector::default();
        for item in items {
            if let Item::Mod(m) = item {
                let name = m.ident.to_string();
                let file = match &m.content {
                    Some(_) => None,
                    None => module_file(sources, &at, &name, &m.attrs),
                };
                if test_only(&m.attrs) || name == "tests" {
                    self.test_files.extend(file);
                    continue;
                }
                let child = match (&m.content, file) {
                    (Some((_, inner)), _) => {
                        let inline = Place {
                            file: at.file.clone(),
                            child_dir: at.child_dir.join(&name),
                            path_base: at.child_dir.join(&name),
                        };
                        self.add(sources, Some(id), inline, inner)?
                    }
                    (None, Some(file)) => {
                        let parsed = sources.get(&file)?;
                        let own_dir = file.parent().unwrap_or(Path::new("")).to_owned();
                        let child_dir = if has_path_attr(&m.attrs) {
                            own_dir.clone()
                        } else {
                            at.child_dir.join(&name)
                        };
                        let place = Place {
                            file,
                            child_dir,
                            path_base: own_dir,
                        };
                        self.add(sources, Some(id), place, &parsed.syntax.items)?
                    }
                    // A file the build makes, or a declaration the compiler would refuse.
                    (None, None) => continue,
                };
                self.modules[id].children.insert(name, child);
                continue;
            }
            if test_only(item_attrs(item)) {
                continue;
            }
            match item {
                Item::Use(u) => {
                    if u.leading_colon.is_none() {
                        flatten(&u.tree, &mut Vec::new(), &mut code.imports);
                    }
                }
                other => {
                    if let Some(name) = defined_name(other) {
                        self.modules[id].items.insert(name);
                    }
                    code.visit_item(other);
                }
            }
        }
        let module = &mut self.modules[id];
        module.imports = code.imports;
        module.paths = code.paths;
        Ok(id)
    }
}

/// Where a module's code is and where its `mod x;` children are looked for.
struct Place {
    file: PathBuf,
    /// `x.rs` / `x/mod.rs` of a child `x` are looked for here.
    child_dir: PathBuf,
    /// A child's `#[path = ".."]` is relative to this.
    path_base: PathBuf,
}

/// The file of `mod name;` declared at `at`, if it exists.
fn module_file(sources: &Sources, at: &Place, name: &str, attrs: &[Attribute]) -> Option<PathBuf> {
    if let Some(path) = path_attr(attrs) {
        let file = at.path_base.join(path);
        return sources.exists(&file).then_some(file);
    }
    [
        at.child_dir.join(format!("{name}.rs")),
        at.child_dir.join(name).join("mod.rs"),
    ]
    .into_iter()
    .find(|f| sources.exists(f))
}

fn path_attr(attrs: &[Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

fn has_path_attr(attrs: &[Attribute]) -> bool {
    path_attr(attrs).is_some()
}

/// The attributes of an item.
pub(crate) fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// The name an item defines in its module's namespace, if any.
fn defined_name(item: &Item) -> Option<String> {
    let ident = match item {
        Item::Const(i) => &i.ident,
        Item::Enum(i) => &i.ident,
        Item::Fn(i) => &i.sig.ident,
        Item::Macro(i) => i.ident.as_ref()?,
        Item::Static(i) => &i.ident,
        Item::Struct(i) => &i.ident,
        Item::Trait(i) => &i.ident,
        Item::TraitAlias(i) => &i.ident,
        Item::Type(i) => &i.ident,
        Item::Union(i) => &i.ident,
        _ => return None,
    };
    Some(ident.to_string())
}

/// The leaves of a use tree under `prefix`, as imports.
fn flatten(tree: &UseTree, prefix: &mut Vec<String>, out: &mut Vec<Import>) {
    let leaf = |prefix: &[String], ident: &syn::Ident, binding: Option<String>| {
        let mut path = prefix.to_vec();
        if ident != "self" {
            path.push(ident.to_string());
        }
        Import {
            binding: binding.or_else(|| path.last().cloned()),
            path,
            glob: false,
            line: ident.span().start().line,
        }
    };
    match tree {
        UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten(&p.tree, prefix, out);
            prefix.pop();
        }
        UseTree::Name(n) => out.push(leaf(prefix, &n.ident, None)),
        UseTree::Rename(r) => {
            let mut import = leaf(prefix, &r.ident, Some(r.rename.to_string()));
            if r.rename == "_" {
                import.binding = None;
            }
            out.push(import);
        }
        UseTree::Glob(g) => out.push(Import {
            path: prefix.clone(),
            binding: None,
            glob: true,
            line: g.star_token.span.start().line,
        }),
        UseTree::Group(g) => {
            for t in &g.items {
                flatten(t, prefix, out);
            }
        }
    }
}

/// Collects the imports and the paths of one module's code, skipping test-only parts.
#[derive(Default)]
struct Collector {
    imports: Vec<Import>,
    paths: Vec<Named>,
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_item(&mut self, i: &'ast Item) {
        if !test_only(item_attrs(i)) {
            visit::visit_item(self, i);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        // A `use` inside a function: an import of the module for this purpose.
        if u.leading_colon.is_none() {
            flatten(&u.tree, &mut Vec::new(), &mut self.imports);
        }
    }

    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {
        // A module inside a function body is too rare to resolve; its paths are not counted.
    }

    fn visit_impl_item(&mut self, i: &'ast syn::ImplItem) {
        let attrs: &[Attribute] = match i {
            syn::ImplItem::Const(c) => &c.attrs,
            syn::ImplItem::Fn(f) => &f.attrs,
            syn::ImplItem::Type(t) => &t.attrs,
            syn::ImplItem::Macro(m) => &m.attrs,
            _ => &[],
        };
        if !test_only(attrs) {
            visit::visit_impl_item(self, i);
        }
    }

    fn visit_trait_item(&mut self, i: &'ast syn::TraitItem) {
        let attrs: &[Attribute] = match i {
            syn::TraitItem::Const(c) => &c.attrs,
            syn::TraitItem::Fn(f) => &f.attrs,
            syn::TraitItem::Type(t) => &t.attrs,
            syn::TraitItem::Macro(m) => &m.attrs,
            _ => &[],
        };
        if !test_only(attrs) {
            visit::visit_trait_item(self, i);
        }
    }

    fn visit_field(&mut self, f: &'ast syn::Field) {
        if !test_only(&f.attrs) {
            visit::visit_field(self, f);
        }
    }

    fn visit_variant(&mut self, v: &'ast syn::Variant) {
        if !test_only(&v.attrs) {
            visit::visit_variant(self, v);
        }
    }

    fn visit_arm(&mut self, a: &'ast syn::Arm) {
        if !test_only(&a.attrs) {
            visit::visit_arm(self, a);
        }
    }

    fn visit_local(&mut self, l: &'ast syn::Local) {
        if !test_only(&l.attrs) {
            visit::visit_local(self, l);
        }
    }

    fn visit_stmt_macro(&mut self, m: &'ast syn::StmtMacro) {
        if !test_only(&m.attrs) {
            visit::visit_stmt_macro(self, m);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() && p.segments.len() >= 2 {
            self.paths.push(Named {
                segments: p.segments.iter().map(|s| s.ident.to_string()).collect(),
                line: p.segments[0].ident.span().start().line,
            });
        }
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        scan_tokens(m.tokens.clone(), &mut self.paths);
        visit::visit_macro(self, m);
    }
}

/// The `a::b::c` chains in a macro call's tokens (not after a leading `::`), in every group.
fn scan_tokens(stream: TokenStream, out: &mut Vec<Named>) {
    let tokens: Vec<TokenTree> = stream.into_iter().collect();
    let colons = |i: usize| {
        matches!(
            (tokens.get(i), tokens.get(i + 1)),
            (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
                if a.as_char() == ':' && b.as_char() == ':'
        )
    };
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            TokenTree::Group(g) => {
                scan_tokens(g.stream(), out);
                i += 1;
            }
            TokenTree::Ident(first) => {
                let leading = i >= 2 && colons(i - 2);
                let mut segments = vec![first.to_string()];
                let mut j = i + 1;
                while colons(j) {
                    let Some(TokenTree::Ident(next)) = tokens.get(j + 2) else {
                        break;
                    };
                    segments.push(next.to_string());
                    j += 3;
                }
                if !leading && segments.len() >= 2 {
                    out.push(Named {
                        segments,
                        line: first.span().start().line,
                    });
                }
                i = j;
            }
            _ => i += 1,
        }
    }
}
