//! The workspace's Rust files, each read and parsed once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// One file: its text and its syntax tree.
pub(crate) struct Parsed {
    /// The file's text.
    pub(crate) text: String,
    /// Its syntax tree (line numbers through `proc-macro2`'s `span-locations`).
    pub(crate) syntax: syn::File,
}

/// The files read so far, by their path relative to the workspace root.
pub(crate) struct Sources {
    root: PathBuf,
    files: BTreeMap<PathBuf, Rc<Parsed>>,
}

impl Sources {
    /// No file read yet; paths are taken relative to `root`.
    pub(crate) fn new(root: &Path) -> Self {
        Sources {
            root: root.to_owned(),
            files: BTreeMap::new(),
        }
    }

    /// Whether `rel` exists as a file.
    pub(crate) fn exists(&self, rel: &Path) -> bool {
        self.root.join(rel).is_file()
    }

    /// The file at `rel` (relative to the root), read and parsed on first use.
    pub(crate) fn get(&mut self, rel: &Path) -> Result<Rc<Parsed>, String> {
        if let Some(parsed) = self.files.get(rel) {
            return Ok(Rc::clone(parsed));
        }
        let text = std::fs::read_to_string(self.root.join(rel))
            .map_err(|e| format!("cannot read {}: {e}", rel.display()))?;
        let syntax = syn::parse_file(&text).map_err(|e| {
            let at = e.span().start();
            format!(
                "cannot parse {}:{}:{}: {e}",
                rel.display(),
                at.line,
                at.column + 1
            )
        })?;
        let parsed = Rc::new(Parsed { text, syntax });
        self.files.insert(rel.to_owned(), Rc::clone(&parsed));
        Ok(parsed)
    }
}
