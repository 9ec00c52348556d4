//! # cairn-macros
//!
//! Procedural macros for cairn. Use them through `cairn-migrate`, which re-exports
//! [`embed_migrations!`]; this crate has no dependencies beyond the compiler's `proc_macro`.
//! The supported surface is the facade crate `cairn` (`cairn::embed_migrations!`).

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use proc_macro::{TokenStream, TokenTree};

/// Embeds a directory of SQL migration files in the binary:
/// `embed_migrations!("migrations")` expands to a `&'static [(&'static str, &'static str)]` of
/// `(file name, contents)`, one entry per `*.sql` file of the directory, sorted by name, for
/// `MigrationSet::from_embedded`.
///
/// ```
/// # fn main() -> cairn::Result<()> {
/// // `migrations` beside the crate's Cargo.toml; this test's crate root is crates/macros.
/// let files = cairn::embed_migrations!("../../tests/fixtures/app_v2");
/// let app = cairn::MigrationSet::from_embedded("inventory", files)?;
/// assert_eq!(app.head().id, "0003_item_events");
/// # Ok(())
/// # }
/// ```
///
/// The path is relative to the invoking crate's root, its `CARGO_MANIFEST_DIR` (an absolute
/// path is used as is), and read at compile time, wherever the binary later runs; a relative
/// path given to `MigrationSet::from_dir` is relative to the process's working directory
/// instead, and read at run time. Each file is included with `include_str!` by absolute path, so editing a file
/// rebuilds the crate. Adding or removing a file is not seen by the compiler on its own: give
/// the crate a `build.rs` with `println!("cargo:rerun-if-changed=migrations");` (as with
/// `sqlx::migrate!`). Subdirectories and files not ending in `.sql` are left out.
///
/// A missing or unreadable directory, a file name that is not UTF-8, or an argument that is not
/// one string literal is a compile error.
#[proc_macro]
pub fn embed_migrations(input: TokenStream) -> TokenStream {
    let expanded = literal_path(input).and_then(|relative| {
        let manifest = std::env::var_os("CARGO_MANIFEST_DIR").ok_or_else(|| {
            "embed_migrations!: CARGO_MANIFEST_DIR is not set; build with cargo".to_owned()
        })?;
        expand(&resolve(Path::new(&manifest), &relative))
    });
    let code = expanded.unwrap_or_else(|msg| format!("::core::compile_error!({msg:?})"));
    code.parse().unwrap_or_else(|_| {
        "::core::compile_error!(\"embed_migrations!: internal error\")"
            .parse()
            .unwrap()
    })
}

/// The directory the macro reads: `relative` joined to the manifest directory.
fn resolve(manifest: &Path, relative: &str) -> PathBuf {
    manifest.join(relative)
}

/// The text of the single string literal the macro was given.
fn literal_path(input: TokenStream) -> Result<String, String> {
    let usage = "embed_migrations! takes one string literal: embed_migrations!(\"migrations\")";
    let mut tokens = input.into_iter();
    let lit = match (tokens.next(), tokens.next()) {
        (Some(TokenTree::Literal(lit)), None) => lit.to_string(),
        // A literal passed through another macro arrives wrapped in an invisible group.
        (Some(TokenTree::Group(g)), None) => return literal_path(g.stream()),
        _ => return Err(usage.to_owned()),
    };
    unquote(&lit).ok_or_else(|| usage.to_owned())
}

/// The value of a string literal's source text (`"…"` with simple escapes, or `r"…"`,
/// `r#"…"#`); `None` for anything else.
fn unquote(lit: &str) -> Option<String> {
    if let Some(raw) = lit.strip_prefix('r') {
        let hashes = raw.bytes().take_while(|&b| b == b'#').count();
        let body = raw[hashes..].strip_prefix('"')?;
        return body
            .strip_suffix(&format!("\"{}", "#".repeat(hashes)))
            .map(str::to_owned);
    }
    let body = lit.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            '\\' => out.push('\\'),
            '"' => out.push('"'),
            '\'' => out.push('\''),
            'n' => out.push('\n'),
            't' => out.push('\t'),
            _ => return None,
        }
    }
    Some(out)
}

/// The expansion for the directory `dir`, as source text.
fn expand(dir: &Path) -> Result<String, String> {
    let shown = dir.display();
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("embed_migrations!: cannot read the directory {shown}: {e}"))?;
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    for entry in entries {
        let entry = entry
            .map_err(|e| format!("embed_migrations!: cannot read the directory {shown}: {e}"))?;
        let path = entry.path();
        if !path.is_file() {
            continue;
        }
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            return Err(format!(
                "embed_migrations!: the file name {:?} in {shown} is not UTF-8",
                entry.file_name()
            ));
        };
        if name.ends_with(".sql") {
            let absolute = std::fs::canonicalize(&path).map_err(|e| {
                format!("embed_migrations!: cannot resolve {}: {e}", path.display())
            })?;
            let absolute = absolute.to_str().map(str::to_owned).ok_or_else(|| {
                format!(
                    "embed_migrations!: the path {} is not UTF-8",
                    path.display()
                )
            })?;
            files.push((name, PathBuf::from(absolute)));
        }
    }
    files.sort();
    let mut code = String::from("{ const CAIRN_EMBEDDED_MIGRATIONS: &[(&str, &str)] = &[");
    for (name, path) in &files {
        let path = path.to_str().unwrap_or_default();
        code.push_str(&format!("({name:?}, ::core::include_str!({path:?})),"));
    }
    code.push_str("]; CAIRN_EMBEDDED_MIGRATIONS }");
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_literals_are_unquoted() {
        assert_eq!(unquote("\"migrations\"").as_deref(), Some("migrations"));
        assert_eq!(unquote("\"a\\\\b\\\"c\"").as_deref(), Some("a\\b\"c"));
        assert_eq!(unquote("r\"raw\\path\"").as_deref(), Some("raw\\path"));
        assert_eq!(unquote("r#\"x\"#").as_deref(), Some("x"));
        assert_eq!(unquote("42"), None);
        assert_eq!(unquote("\"\\u{41}\""), None);
    }

    #[test]
    fn expansion_lists_sql_files_sorted_by_absolute_path() {
        let dir = std::env::temp_dir().join(format!(
            "cairn_macros_test_{}_{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("0002_b.sql"), "SELECT 2;").unwrap();
        std::fs::write(dir.join("0001_a.sql"), "SELECT 1;").unwrap();
        std::fs::write(dir.join("README.md"), "docs").unwrap();
        std::fs::create_dir(dir.join("nested.sql")).unwrap();
        let code = expand(&dir);
        let missing = expand(&dir.join("missing"));
        let canonical = std::fs::canonicalize(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let code = code.unwrap();
        let a = code.find("\"0001_a.sql\"").expect("0001 listed");
        let b = code.find("\"0002_b.sql\"").expect("0002 listed");
        assert!(a < b, "sorted by name: {code}");
        assert!(
            !code.contains("README") && !code.contains("nested"),
            "{code}"
        );
        let abs = format!("{:?}", canonical.join("0001_a.sql").to_str().unwrap());
        assert!(
            code.contains(&format!("::core::include_str!({abs})")),
            "{code}"
        );
        assert!(missing.unwrap_err().contains("cannot read the directory"));
    }

    #[test]
    fn relative_paths_start_at_the_manifest_directory() {
        assert_eq!(
            resolve(Path::new("/crate"), "migrations"),
            Path::new("/crate/migrations")
        );
        assert_eq!(resolve(Path::new("/crate"), "/abs/m"), Path::new("/abs/m"));
    }
}
