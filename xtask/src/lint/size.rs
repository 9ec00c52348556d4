//! The size bound: a non-test file holds at most [`MAX_LINES`] lines, not counting a trailing
//! `#[cfg(test)] mod … { … }` block; the files allowed over it are listed, each with a reason,
//! in the allow-list file, and an entry that no longer needs to be there is itself a failure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use syn::spanned::Spanned;
use syn::Item;

use super::attrs::test_only;

/// The most lines a non-test file may hold.
pub(crate) const MAX_LINES: usize = 700;

/// The lines of `text` (whose syntax is `syntax`) that count: all of them, or those before the
/// first of the `#[cfg(test)]` modules (inline, or a `mod tests;` line) that end the file.
pub(crate) fn counted_lines(text: &str, syntax: &syn::File) -> usize {
    let trailing_tests = syntax
        .items
        .iter()
        .rev()
        .take_while(|item| matches!(item, Item::Mod(m) if test_only(&m.attrs)))
        .last();
    match trailing_tests {
        Some(item) => item.span().start().line.saturating_sub(1),
        None => text.lines().count(),
    }
}

/// One allow-list entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Allowed {
    /// The file, relative to the workspace root.
    pub(crate) file: PathBuf,
    /// Why it must stay over the bound.
    pub(crate) reason: String,
}

/// Reads the allow-list: `[[size]]` tables with `file` and `reason` (a missing file or key is
/// an empty list).
pub(crate) fn read_allow_list(path: &Path) -> Result<Vec<Allowed>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let value: toml::Value =
        toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let Some(entries) = value.get("size") else {
        return Ok(Vec::new());
    };
    let entries = entries
        .as_array()
        .ok_or_else(|| format!("{}: `size` is not an array of tables", path.display()))?;
    entries
        .iter()
        .map(|entry| {
            let field = |name: &str| {
                entry
                    .get(name)
                    .and_then(toml::Value::as_str)
                    .filter(|s| !s.trim().is_empty())
                    .map(str::to_owned)
                    .ok_or_else(|| format!("{}: a [[size]] entry has no {name}", path.display()))
            };
            Ok(Allowed {
                file: PathBuf::from(field("file")?),
                reason: field("reason")?,
            })
        })
        .collect()
}

/// The size check's verdict.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct SizeVerdict {
    /// Files over the bound and not allowed, with their counted lines.
    pub(crate) over: Vec<(PathBuf, usize)>,
    /// Files over the bound that the allow-list allows, with their lines and the reason.
    pub(crate) allowed: Vec<(PathBuf, usize, String)>,
    /// Allow-list entries whose file is gone or no longer over the bound, with which.
    pub(crate) stale: Vec<(PathBuf, String)>,
}

/// Judges the counted lines of every checked file against the bound and the allow-list.
pub(crate) fn judge(counts: &BTreeMap<PathBuf, usize>, allow: &[Allowed]) -> SizeVerdict {
    let mut verdict = SizeVerdict::default();
    for (file, &lines) in counts {
        if lines <= MAX_LINES {
            continue;
        }
        match allow.iter().find(|a| &a.file == file) {
            Some(a) => verdict
                .allowed
                .push((file.clone(), lines, a.reason.clone())),
            None => verdict.over.push((file.clone(), lines)),
        }
    }
    for a in allow {
        match counts.get(&a.file) {
            None => verdict
                .stale
                .push((a.file.clone(), "no such checked file".into())),
            Some(&lines) if lines <= MAX_LINES => verdict
                .stale
                .push((a.file.clone(), format!("{lines} lines, within the bound"))),
            Some(_) => {}
        }
    }
    verdict
}

/// Whether the size rule looks at `file` (relative to the workspace root): not a `tests.rs`,
/// nothing under a `tests` or `benches` directory (integration tests, and the conformance
/// suite's crate `tests/`, whose every file is test cases).
pub(crate) fn is_checked(file: &Path) -> bool {
    file.file_name().is_some_and(|n| n != "tests.rs")
        && !file
            .components()
            .any(|c| c.as_os_str() == "tests" || c.as_os_str() == "benches")
}
