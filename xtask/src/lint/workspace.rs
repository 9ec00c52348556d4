//! The workspace's crates as the lint sees them: each member package, the root file of each of
//! its targets (a library and every binary are separate crates), and the files of its `src/`.

use std::path::{Path, PathBuf};

/// One member package.
#[derive(Debug)]
pub(crate) struct Package {
    /// `package.name` of its manifest.
    pub(crate) name: String,
    /// Its directory, relative to the workspace root.
    pub(crate) dir: PathBuf,
    /// The root file of each of its library and binary targets, relative to the workspace root.
    pub(crate) roots: Vec<PathBuf>,
}

/// The members listed in `root/Cargo.toml` (`[workspace] members`; a trailing `/*` stands for
/// every directory under it that holds a `Cargo.toml`), in the order listed.
pub(crate) fn packages(root: &Path) -> Result<Vec<Package>, String> {
    let manifest = read_toml(&root.join("Cargo.toml"))?;
    let members = manifest
        .get("workspace")
        .and_then(|w| w.get("members"))
        .and_then(toml::Value::as_array)
        .ok_or("Cargo.toml: no [workspace] members")?;
    let mut dirs = Vec::new();
    for member in members {
        let member = member
            .as_str()
            .ok_or("Cargo.toml: a member is not a string")?;
        match member.strip_suffix("/*") {
            Some(parent) => {
                let mut found: Vec<PathBuf> = std::fs::read_dir(root.join(parent))
                    .map_err(|e| format!("cannot list {parent}: {e}"))?
                    .filter_map(Result::ok)
                    .filter(|e| e.path().join("Cargo.toml").is_file())
                    .map(|e| Path::new(parent).join(e.file_name()))
                    .collect();
                found.sort();
                dirs.extend(found);
            }
            None => dirs.push(PathBuf::from(member)),
        }
    }
    dirs.into_iter().map(|dir| package(root, dir)).collect()
}

/// The package in `dir` (relative to `root`) and its targets' root files: `[lib] path` or
/// `src/lib.rs`; each `[[bin]] path`, `src/main.rs`, `src/bin/*.rs`, `src/bin/*/main.rs`.
fn package(root: &Path, dir: PathBuf) -> Result<Package, String> {
    let manifest = read_toml(&root.join(&dir).join("Cargo.toml"))?;
    let name = manifest
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(toml::Value::as_str)
        .ok_or_else(|| format!("{}/Cargo.toml: no package.name", dir.display()))?
        .to_owned();
    let mut roots: Vec<PathBuf> = Vec::new();
    let declared = |table: &toml::Value| {
        table
            .get("path")
            .and_then(toml::Value::as_str)
            .map(|p| dir.join(p))
    };
    let lib = manifest.get("lib").and_then(declared);
    roots.extend(lib.or_else(|| Some(dir.join("src/lib.rs"))));
    if let Some(bins) = manifest.get("bin").and_then(toml::Value::as_array) {
        roots.extend(bins.iter().filter_map(declared));
    }
    roots.push(dir.join("src/main.rs"));
    if let Ok(entries) = std::fs::read_dir(root.join(&dir).join("src/bin")) {
        let mut bins: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter_map(|p| {
                let rel = p.strip_prefix(root).ok()?.to_owned();
                if p.is_dir() {
                    Some(rel.join("main.rs"))
                } else {
                    (p.extension()? == "rs").then_some(rel)
                }
            })
            .collect();
        bins.sort();
        roots.extend(bins);
    }
    let mut unique: Vec<PathBuf> = Vec::new();
    for r in roots {
        if root.join(&r).is_file() && !unique.contains(&r) {
            unique.push(r);
        }
    }
    Ok(Package {
        name,
        dir,
        roots: unique,
    })
}

fn read_toml(path: &Path) -> Result<toml::Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Every `.rs` file under `dir` (relative to `root`), relative to `root`, sorted.
pub(crate) fn rust_files(root: &Path, dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut pending = vec![root.join(dir)];
    while let Some(d) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                if let Ok(rel) = path.strip_prefix(root) {
                    out.push(rel.to_owned());
                }
            }
        }
    }
    out.sort();
    out
}
