//! `cargo xtask lint`: two rules about the files of every crate of the workspace.
//!
//! - **No import cycle between the files of one crate.** The nodes are the `.rs` files of a
//!   crate (one per target: a library and each binary); there is an edge A → B when code in A,
//!   outside `#[cfg(test)]` code and `tests` modules, names an item defined in B — through a
//!   `use` or a path of two or more segments (`crate::`, `super::`, `self::`, or a module in
//!   scope), with re-exports followed to the defining file — or glob-imports a module of B.
//!   A `pub use` is an edge from the re-exporting file to the defining one; a `mod x;` is none.
//! - **No non-test file over [`size::MAX_LINES`] lines**, not counting a trailing
//!   `#[cfg(test)]` module; `tests.rs` files, files only tests declare, and `tests/`/`benches/`
//!   directories are not checked. The exceptions are listed with a reason each in
//!   [`ALLOW_FILE`]; an entry that is no longer needed fails too, so the list cannot rot.

mod attrs;
mod cycles;
mod graph;
mod modtree;
mod resolve;
mod size;
mod source;
mod workspace;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use graph::Site;
use modtree::ModTree;
use size::SizeVerdict;
use source::Sources;

/// The allow-list of files over the size bound, relative to the workspace root.
pub(crate) const ALLOW_FILE: &str = "xtask/lint-allow.toml";

/// `cargo xtask lint`: prints the report; exit 1 when a rule is broken.
pub(crate) fn run() -> Result<ExitCode, String> {
    let report = check(&workspace_root())?;
    print!("{report}");
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The workspace this xtask belongs to.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_owned()
}

/// One strongly connected set of files of a crate.
#[derive(Debug)]
pub(crate) struct Cycle {
    /// The package and the target's root file.
    crate_name: String,
    root_file: PathBuf,
    /// The files of the set, sorted.
    files: Vec<PathBuf>,
    /// One shortest cycle through the first file.
    shortest: Vec<PathBuf>,
    /// Every edge between files of the set, with its sites.
    edges: Vec<((PathBuf, PathBuf), Vec<Site>)>,
}

/// What the lint found.
#[derive(Debug)]
pub(crate) struct Report {
    /// The import cycles.
    pub(crate) cycles: Vec<Cycle>,
    /// The size check's verdict.
    pub(crate) size: SizeVerdict,
    /// How many crates (library and binary targets) the cycle check read.
    pub(crate) crates: usize,
    /// How many files those crates' module trees hold.
    pub(crate) files: usize,
    /// How many files the size check counted.
    pub(crate) sized: usize,
}

impl Report {
    /// Whether both rules hold.
    pub(crate) fn passed(&self) -> bool {
        self.cycles.is_empty() && self.size.over.is_empty() && self.size.stale.is_empty()
    }

    /// One line saying what failed, for `cargo xtask test`'s list.
    pub(crate) fn summary(&self) -> String {
        format!(
            "{} import cycle(s), {} file(s) over {} lines, {} stale allow-list entr(y/ies)",
            self.cycles.len(),
            self.size.over.len(),
            size::MAX_LINES,
            self.size.stale.len()
        )
    }
}

/// Runs both checks over the workspace at `root` (the allow-list read from [`ALLOW_FILE`]).
pub(crate) fn check(root: &Path) -> Result<Report, String> {
    let allow = size::read_allow_list(&root.join(ALLOW_FILE))?;
    let mut sources = Sources::new(root);
    let mut cycles = Vec::new();
    let mut counts = BTreeMap::new();
    let (mut crates, mut files) = (0, BTreeSet::new());
    for package in workspace::packages(root)? {
        let mut test_files = BTreeSet::new();
        for root_file in &package.roots {
            let tree = ModTree::load(&mut sources, root_file)?;
            crates += 1;
            files.extend(tree.modules.iter().map(|m| m.file.clone()));
            cycles.extend(crate_cycles(&package.name, root_file, &tree));
            test_files.extend(tree.test_files);
        }
        for file in workspace::rust_files(root, &package.dir.join("src")) {
            if size::is_checked(&file) && !test_files.contains(&file) {
                let parsed = sources.get(&file)?;
                counts.insert(file, size::counted_lines(&parsed.text, &parsed.syntax));
            }
        }
    }
    Ok(Report {
        cycles,
        size: size::judge(&counts, &allow),
        crates,
        files: files.len(),
        sized: counts.len(),
    })
}

/// The cycles of one crate's file graph.
fn crate_cycles(crate_name: &str, root_file: &Path, tree: &ModTree) -> Vec<Cycle> {
    let edges = graph::edges(tree);
    let pairs: Vec<(PathBuf, PathBuf)> = edges.keys().cloned().collect();
    cycles::tangles(&pairs)
        .into_iter()
        .map(|files| {
            let shortest = cycles::shortest_cycle(&pairs, &files, &files[0]);
            let inside = |f: &PathBuf| files.binary_search(f).is_ok();
            let edges = edges
                .iter()
                .filter(|((from, to), _)| inside(from) && inside(to))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            Cycle {
                crate_name: crate_name.to_owned(),
                root_file: root_file.to_owned(),
                files,
                shortest,
                edges,
            }
        })
        .collect()
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let found = match self.cycles.len() {
            0 => "none".to_owned(),
            n => n.to_string(),
        };
        writeln!(
            f,
            "import cycles between the files of a crate ({} crates, {} files read): {found}",
            self.crates, self.files
        )?;
        for cycle in &self.cycles {
            writeln!(f)?;
            writeln!(
                f,
                "{} ({}): {} files import each other in a circle:",
                cycle.crate_name,
                cycle.root_file.display(),
                cycle.files.len()
            )?;
            for file in &cycle.files {
                writeln!(f, "  {}", file.display())?;
            }
            let mut ring = String::new();
            for file in cycle.shortest.iter().chain(cycle.shortest.first()) {
                if !ring.is_empty() {
                    ring.push_str(" -> ");
                }
                let _ = write!(ring, "{}", file.display());
            }
            writeln!(f, "  a shortest cycle: {ring}")?;
            writeln!(f, "  its imports (each edge with a site that makes it):")?;
            for ((from, to), sites) in &cycle.edges {
                let site = &sites[0];
                let more = match sites.len() {
                    1 => String::new(),
                    n => format!(" (+{} more)", n - 1),
                };
                writeln!(
                    f,
                    "    {} -> {}: {}:{} `{}`{more}",
                    from.display(),
                    to.display(),
                    from.display(),
                    site.line,
                    site.what
                )?;
            }
        }
        writeln!(f)?;
        let over = &self.size.over;
        writeln!(
            f,
            "non-test files over {} lines ({} files counted; not allowed in {ALLOW_FILE}): {}",
            size::MAX_LINES,
            self.sized,
            if over.is_empty() {
                "none".to_owned()
            } else {
                over.len().to_string()
            }
        )?;
        for (file, lines) in over {
            writeln!(f, "  {}: {lines} lines", file.display())?;
        }
        if !self.size.allowed.is_empty() {
            writeln!(f, "allowed over the bound by {ALLOW_FILE}:")?;
            for (file, lines, reason) in &self.size.allowed {
                writeln!(f, "  {}: {lines} lines ({reason})", file.display())?;
            }
        }
        if !self.size.stale.is_empty() {
            writeln!(f, "stale entries of {ALLOW_FILE} (remove them):")?;
            for (file, why) in &self.size.stale {
                writeln!(f, "  {}: {why}", file.display())?;
            }
        }
        writeln!(f)?;
        if self.passed() {
            writeln!(f, "xtask lint: passed")
        } else {
            writeln!(f, "xtask lint: FAILED ({})", self.summary())
        }
    }
}
