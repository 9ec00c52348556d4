//! The lint on small fixture workspaces: one member crate `a` whose `src/` files each test
//! writes.

use std::path::{Path, PathBuf};

use super::*;

/// A workspace in a temporary directory with the member `a` and these files of `a/src`.
fn workspace(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("Cargo.toml", "[workspace]\nmembers = [\"a\"]\n");
    write("a/Cargo.toml", "[package]\nname = \"a\"\n");
    for (rel, text) in files {
        write(&format!("a/src/{rel}"), text);
    }
    dir
}

fn src(rel: &str) -> PathBuf {
    Path::new("a/src").join(rel)
}

/// The files of each cycle the lint finds in `files`.
fn cycles_of(files: &[(&str, &str)]) -> Vec<Vec<PathBuf>> {
    let dir = workspace(files);
    let report = check(dir.path()).unwrap();
    report.cycles.into_iter().map(|c| c.files).collect()
}

#[test]
fn two_files_that_import_each_other_are_a_cycle_with_their_sites() {
    let dir = workspace(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "use crate::b::B;\npub struct A(B);\n"),
        (
            "b.rs",
            "pub struct B;\n\nfn f() -> usize {\n    std::mem::size_of::<crate::a::A>()\n}\n",
        ),
    ]);
    let report = check(dir.path()).unwrap();
    assert!(!report.passed());
    let [cycle] = &report.cycles[..] else {
        panic!("one cycle: {report}");
    };
    assert_eq!(cycle.files, [src("a.rs"), src("b.rs")]);
    assert_eq!(cycle.crate_name, "a");
    let sites: Vec<String> = cycle
        .edges
        .iter()
        .map(|((from, _), sites)| format!("{}:{} {}", from.display(), sites[0].line, sites[0].what))
        .collect();
    assert_eq!(
        sites,
        ["a/src/a.rs:1 use crate::b::B", "a/src/b.rs:4 crate::a::A"]
    );
    let text = report.to_string();
    assert!(
        text.contains("a/src/a.rs -> a/src/b.rs: a/src/a.rs:1 `use crate::b::B`"),
        "{text}"
    );
    assert!(
        text.contains("xtask lint: FAILED (1 import cycle(s)"),
        "{text}"
    );
}

#[test]
fn a_re_export_through_a_mod_rs_is_followed_to_the_defining_file() {
    // Read without following the re-export, `user.rs -> m/mod.rs -> user.rs` would be a cycle.
    let files = [
        ("lib.rs", "mod m;\nmod user;\npub use m::Thing;\n"),
        (
            "m/mod.rs",
            "mod inner;\npub use inner::Thing;\npub fn f() { crate::user::helper() }\n",
        ),
        ("m/inner.rs", "pub struct Thing;\n"),
        (
            "user.rs",
            "use crate::m::Thing;\npub fn helper() { let _ = crate::Thing; }\nfn g(_: Thing) {}\n",
        ),
    ];
    assert_eq!(cycles_of(&files), Vec::<Vec<PathBuf>>::new());
    let dir = workspace(&files);
    let mut sources = Sources::new(dir.path());
    let tree = ModTree::load(&mut sources, &src("lib.rs")).unwrap();
    let edges: Vec<(PathBuf, PathBuf)> = graph::edges(&tree).into_keys().collect();
    assert_eq!(
        edges,
        [
            (src("lib.rs"), src("m/inner.rs")),
            (src("m/mod.rs"), src("m/inner.rs")),
            (src("m/mod.rs"), src("user.rs")),
            (src("user.rs"), src("m/inner.rs")),
        ]
    );
}

#[test]
fn a_child_climbing_back_to_its_parent_for_what_the_parent_uses_it_for_is_a_cycle() {
    let cycles = cycles_of(&[
        ("lib.rs", "mod spool;\n"),
        (
            "spool/mod.rs",
            "mod claim;\npub const ROUNDS: u32 = 3;\npub fn run() -> u32 { claim::claim() }\n",
        ),
        (
            "spool/claim.rs",
            "use super::ROUNDS;\npub fn claim() -> u32 { ROUNDS }\n",
        ),
    ]);
    assert_eq!(cycles, [[src("spool/claim.rs"), src("spool/mod.rs")]]);
}

#[test]
fn a_glob_import_of_the_parent_is_an_edge_to_it() {
    let cycles = cycles_of(&[
        (
            "lib.rs",
            "mod child;\npub struct P;\npub fn f() { child::g() }\n",
        ),
        ("child.rs", "use super::*;\npub fn g() {}\n"),
    ]);
    assert_eq!(cycles, [[src("child.rs"), src("lib.rs")]]);
}

#[test]
fn paths_inside_macro_calls_count() {
    let cycles = cycles_of(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "pub fn f() { println!(\"{}\", crate::b::N); }\n"),
        (
            "b.rs",
            "pub const N: u8 = 1;\npub fn g() { vec![crate::a::f()]; }\n",
        ),
    ]);
    assert_eq!(cycles, [[src("a.rs"), src("b.rs")]]);
}

#[test]
fn test_only_code_makes_no_edge() {
    let cycles = cycles_of(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "use crate::b::B;\npub struct A;\n"),
        (
            "b.rs",
            "#[cfg(test)]\nuse crate::a::A;\npub struct B;\n\
             #[cfg(test)]\nfn t() { let _ = crate::a::A; }\n\
             impl B {\n    #[cfg(test)]\n    fn t() { let _ = crate::a::A; }\n}\n\
             #[cfg(test)]\nmod unit {\n    use crate::a::A;\n}\n\
             #[cfg(all(test, unix))]\nmod more;\nmod tests;\n",
        ),
        ("b/more.rs", "use crate::a::A;\n"),
        ("b/tests.rs", "use crate::a::A;\n"),
    ]);
    assert_eq!(cycles, Vec::<Vec<PathBuf>>::new());
}

/// `n` lines of code.
fn lines(n: usize) -> String {
    "pub const X: u8 = 0;\n".to_owned() + &"// a line\n".repeat(n - 1)
}

fn over(report: &Report) -> Vec<(PathBuf, usize)> {
    report.size.over.clone()
}

#[test]
fn a_file_over_the_bound_fails_and_one_at_it_passes() {
    let dir = workspace(&[
        ("lib.rs", "mod big;\nmod fits;\n"),
        ("big.rs", &lines(701)),
        ("fits.rs", &lines(700)),
    ]);
    let report = check(dir.path()).unwrap();
    assert_eq!(over(&report), [(src("big.rs"), 701)]);
    assert!(!report.passed());
    assert!(report.to_string().contains("a/src/big.rs: 701 lines"));
}

#[test]
fn a_trailing_test_module_and_test_files_do_not_count() {
    let with_tests = format!(
        "{}#[cfg(test)]\nmod tests {{\n{}}}\n",
        lines(690),
        "    // a test line\n".repeat(400)
    );
    let dir = workspace(&[
        ("lib.rs", "mod a;\n#[cfg(test)]\nmod helpers;\n"),
        ("a.rs", &with_tests),
        ("a/tests.rs", &lines(900)),
        ("helpers.rs", &lines(900)),
    ]);
    let report = check(dir.path()).unwrap();
    assert_eq!(over(&report), []);
    assert!(report.passed(), "{report}");
    // Nor does a trailing declaration of a test file.
    let declared = format!("{}#[cfg(test)]\nmod tests;\n", lines(700));
    let dir = workspace(&[("lib.rs", "mod a;\n"), ("a.rs", &declared)]);
    assert_eq!(over(&check(dir.path()).unwrap()), []);
    // A test module that is not last does not come off.
    let middle = format!("#[cfg(test)]\nmod tests {{\n}}\n{}", lines(701));
    let dir = workspace(&[("lib.rs", "mod a;\n"), ("a.rs", &middle)]);
    assert_eq!(over(&check(dir.path()).unwrap()), [(src("a.rs"), 704)]);
}

fn allow(dir: &Path, entries: &[(&str, &str)]) {
    let mut text = String::from("# why each file is here\n");
    for (file, reason) in entries {
        text.push_str(&format!(
            "[[size]]\nfile = \"{file}\"\nreason = \"{reason}\"\n"
        ));
    }
    std::fs::create_dir_all(dir.join("xtask")).unwrap();
    std::fs::write(dir.join(ALLOW_FILE), text).unwrap();
}

#[test]
fn an_allowed_file_passes_and_a_stale_entry_fails() {
    let dir = workspace(&[
        ("lib.rs", "mod big;\nmod small;\n"),
        ("big.rs", &lines(800)),
        ("small.rs", &lines(10)),
    ]);
    allow(dir.path(), &[("a/src/big.rs", "one table")]);
    let report = check(dir.path()).unwrap();
    assert!(report.passed(), "{report}");
    assert_eq!(
        report.size.allowed,
        [(src("big.rs"), 800, "one table".to_owned())]
    );
    allow(
        dir.path(),
        &[
            ("a/src/big.rs", "one table"),
            ("a/src/small.rs", "was big"),
            ("a/src/gone.rs", "was big too"),
        ],
    );
    let report = check(dir.path()).unwrap();
    assert!(!report.passed());
    assert_eq!(
        report.size.stale,
        [
            (src("small.rs"), "10 lines, within the bound".to_owned()),
            (src("gone.rs"), "no such checked file".to_owned()),
        ]
    );
    let text = report.to_string();
    assert!(
        text.contains("a/src/gone.rs: no such checked file"),
        "{text}"
    );
    // An entry without its reason is refused.
    std::fs::write(
        dir.path().join(ALLOW_FILE),
        "[[size]]\nfile = \"a/src/big.rs\"\n",
    )
    .unwrap();
    assert!(check(dir.path()).unwrap_err().contains("no reason"));
}

#[test]
fn this_workspace_is_read_without_error() {
    // Every file of every crate parses, and the report renders; its verdict is the lint's own.
    let report = check(&workspace_root()).unwrap();
    assert!(report.to_string().contains("xtask lint: "));
}
