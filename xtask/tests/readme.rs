//! The README's "In a service" examples compile from an outside crate with exactly the
//! dependencies the README lists (issue 25): a crate outside the workspace whose
//! `[dependencies]` are the README's `toml` block (cairn's `version` swapped for a path to this
//! checkout) and whose binaries are the README's `rust` blocks, built with
//! `cargo build --offline`. A dependency the examples need but the README leaves out (tokio's
//! `signal`, say) fails the build.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The section of the README a service developer copies from.
const SECTION: &str = "## In a service";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// The text of the README's section `heading`, up to the next `## ` heading.
fn section<'a>(readme: &'a str, heading: &str) -> &'a str {
    let start = readme
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("README.md has a section {heading:?}"));
    let body = &readme[start + 1..];
    let end = body[heading.len()..]
        .find("\n## ")
        .map_or(body.len(), |i| i + heading.len());
    &body[..end]
}

/// The fenced blocks of `text` whose info string's first word is `lang` (`rust,no_run` is
/// `rust`).
fn blocks(text: &str, lang: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut current: Option<(bool, String)> = None;
    for line in text.lines() {
        match current.take() {
            None => {
                if let Some(info) = line.trim_start().strip_prefix("```") {
                    let first = info.split([',', ' ']).next().unwrap_or("");
                    current = Some((first == lang, String::new()));
                }
            }
            Some((wanted, body)) if line.trim_start().starts_with("```") => {
                if wanted {
                    found.push(body);
                }
            }
            Some((wanted, mut body)) => {
                body.push_str(line);
                body.push('\n');
                current = Some((wanted, body));
            }
        }
    }
    found
}

/// The README's dependency lines with cairn's registry version replaced by this checkout.
fn dependencies(toml: &str, cairn: &Path) -> String {
    let mut lines = toml.lines();
    assert_eq!(
        lines.next().map(str::trim),
        Some("[dependencies]"),
        "the README's toml block is a [dependencies] table:\n{toml}"
    );
    let mut out = String::from("[dependencies]\n");
    let mut saw_cairn = false;
    for line in lines {
        let line = match line.trim_start().strip_prefix("cairn = ") {
            Some(rest) => {
                saw_cairn = true;
                assert!(
                    rest.contains("version = \"0.1\""),
                    "cairn's README line names a version: {line}"
                );
                let path = format!("path = {:?}", cairn.display().to_string());
                format!("cairn = {}", rest.replacen("version = \"0.1\"", &path, 1))
            }
            None => line.to_owned(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    assert!(saw_cairn, "the README's dependencies name cairn:\n{toml}");
    out
}

/// The variant of an example that takes its commented-out alternative: a line
/// `// let NAME = …` replaces the example's `let NAME = …` line (the README shows
/// `from_embedded` beside `from_dir` that way). `None` when the example has no such line.
fn alternative(example: &str) -> Option<String> {
    let lines: Vec<&str> = example.lines().collect();
    let (alt_at, alt) = lines.iter().enumerate().find_map(|(i, l)| {
        let code = l.trim_start().strip_prefix("// let ")?;
        Some((i, code))
    })?;
    let binding = alt.split([' ', ':']).next()?;
    let first = format!("let {binding} ");
    let first_at = lines
        .iter()
        .position(|l| l.trim_start().starts_with(&first))?;
    let mut out: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    let indent = &lines[first_at][..lines[first_at].len() - lines[first_at].trim_start().len()];
    out[first_at] = format!("{indent}let {alt}");
    out.remove(alt_at);
    Some(out.join("\n") + "\n")
}

#[test]
fn the_readme_examples_build_with_exactly_the_readme_dependencies() {
    let root = workspace();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let text = section(&readme, SECTION);
    let tomls = blocks(text, "toml");
    assert_eq!(tomls.len(), 1, "one [dependencies] block in {SECTION:?}");
    let examples = blocks(text, "rust");
    assert!(!examples.is_empty(), "rust examples in {SECTION:?}");

    let dir = tempfile::tempdir().unwrap();
    let krate = dir.path();
    let mut manifest = String::from(
        "[package]\nname = \"readme-examples\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
         publish = false\n\n",
    );
    manifest.push_str(&dependencies(&tomls[0], &root.join("crates/cairn")));
    // Not a member of any workspace above the temporary directory.
    manifest.push_str("\n[workspace]\n");
    // The workspace's build profiles (not dependencies): with them, the shared target's
    // artifacts of every dependency built with the same features are reused.
    manifest.push_str(&profiles(
        &std::fs::read_to_string(root.join("Cargo.toml")).unwrap(),
    ));
    std::fs::write(krate.join("Cargo.toml"), manifest).unwrap();
    // The workspace's lock file: the same versions as the workspace, nothing to download.
    std::fs::copy(root.join("Cargo.lock"), krate.join("Cargo.lock")).unwrap();
    // What `embed_migrations!("migrations")` reads, relative to the crate root.
    std::fs::create_dir(krate.join("migrations")).unwrap();
    std::fs::write(
        krate.join("migrations/0001_users.sql"),
        "CREATE TABLE users (id BIGINT PRIMARY KEY);\n",
    )
    .unwrap();
    let bins = krate.join("src/bin");
    std::fs::create_dir_all(&bins).unwrap();
    let mut names = Vec::new();
    for (i, example) in examples.iter().enumerate() {
        let name = format!("readme_example_{}", i + 1);
        std::fs::write(bins.join(format!("{name}.rs")), example).unwrap();
        names.push(name.clone());
        if let Some(alt) = alternative(example) {
            let name = format!("{name}_alternative");
            std::fs::write(bins.join(format!("{name}.rs")), alt).unwrap();
            names.push(name);
        }
    }
    assert!(
        names.iter().any(|n| n.ends_with("_alternative")),
        "the README shows embed_migrations! as an alternative line: {names:?}"
    );

    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .current_dir(krate)
        .args(["build", "--offline", "--bins"])
        .env("CARGO_TARGET_DIR", target_dir(&root));
    // As typed in a shell: none of the variables cargo set for this test's package (a build
    // script that reads one would rerun, and rebuild what depends on it, in the shared target).
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_for_a_package) {
            build.env_remove(name);
        }
    }
    let out = build.output().expect("cargo runs");
    assert!(
        out.status.success(),
        "the README's examples ({names:?}) do not build with the README's dependencies:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether cargo sets `name` for the package of the process it runs (a test): a shell's own
/// `cargo build` has none of these.
fn set_for_a_package(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || [
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_CRATE_NAME",
            "CARGO_BIN_NAME",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_TARGET_TMPDIR",
        ]
        .contains(&name)
}

/// Where the outside crate builds: the workspace's own target directory, as cargo's cache is
/// keyed by package, features and profile. A cold build there compiles only the crates whose
/// features differ from the workspace's (about a dozen, cairn's among them); a warm one
/// compiles only the examples (about 15 s).
fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

/// The `[profile.*]` tables of a manifest, verbatim.
fn profiles(manifest: &str) -> String {
    let mut out = String::new();
    let mut in_profile = false;
    for line in manifest.lines() {
        if line.starts_with('[') {
            in_profile = line.starts_with("[profile.");
        }
        if in_profile {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(
        out.contains("[profile.dev"),
        "the workspace sets its dev profile"
    );
    out
}

/// The README's outbox example (`place_order`) is, to the character, the one the facade's
/// doc test runs on SQLite and on Postgres (`crates/cairn/src/tx.rs`): the README builds, the
/// doc test runs the same code.
#[test]
fn the_readme_outbox_is_the_code_the_doc_test_runs() {
    let root = workspace();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let example = blocks(section(&readme, SECTION), "rust")
        .into_iter()
        .find(|b| b.contains("async fn place_order"))
        .expect("the README's outbox example (place_order)");
    // From the first line to the end of `place_order` (its closing brace alone on a line).
    let mut code = String::new();
    let mut inside = false;
    for line in example.lines() {
        code.push_str(line);
        code.push('\n');
        inside |= line.starts_with("async fn place_order");
        if inside && line == "}" {
            break;
        }
    }
    assert!(
        inside,
        "place_order ends with a closing brace alone on a line"
    );
    let tx = std::fs::read_to_string(root.join("crates/cairn/src/tx.rs")).unwrap();
    let doc: String = tx
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .fold(String::new(), |mut s, l| {
            s.push_str(l);
            s.push('\n');
            s
        });
    assert!(
        doc.contains(&code),
        "crates/cairn/src/tx.rs's doc test does not run the README's place_order:\n{code}"
    );
}
