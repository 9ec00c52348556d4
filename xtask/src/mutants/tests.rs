//! The mutants command's unit tests: the lists, the outcomes, the verdicts, the command line.

use super::args::*;
use super::command::*;
use super::judge::*;
use super::outcomes::*;
use super::scopes::*;
use super::*;
use serde_json::Value;

const CONSUMER: &str = "crates/core/src/spool/consumer.rs";

/// An `outcomes.json` shaped as cargo-mutants 27 writes it.
fn outcomes_json(baseline: &str, end: bool, mutants: &[(&str, &str)]) -> String {
    let mut list = vec![serde_json::json!({
        "scenario": "Baseline", "summary": baseline, "log_path": "log/baseline.log",
        "diff_path": null, "phase_results": []
    })];
    for (name, summary) in mutants {
        list.push(serde_json::json!({
            "scenario": {"Mutant": {
                "name": name, "package": "cairn-core", "file": CONSUMER,
                "function": {"function_name": "f", "return_type": "",
                             "span": {"start": {"line": 1, "column": 1}, "end": {"line": 2, "column": 1}}},
                "span": {"start": {"line": 1, "column": 1}, "end": {"line": 1, "column": 2}},
                "replacement": "()", "genre": "FnValue"
            }},
            "summary": summary, "log_path": "log/x.log", "diff_path": "diff/x.diff",
            "phase_results": []
        }));
    }
    serde_json::json!({
        "outcomes": list, "total_mutants": mutants.len(), "cargo_mutants_version": "27.1.0",
        "start_time": "2026-12-01T18:20:06Z",
        "end_time": if end { Value::from("2026-12-01T18:40:06Z") } else { Value::Null }
    })
    .to_string()
}

fn name(line: u32, what: &str) -> String {
    format!("{CONSUMER}:{line}:9: {what}")
}

fn scope(floor: f64) -> Scope {
    Scope {
        name: "consumer".into(),
        about: "the loop".into(),
        packages: vec!["cairn-core".into()],
        files: vec![CONSUMER.into()],
        re: vec![],
        exclude_re: vec![],
        test_packages: vec![],
        test_args: vec!["--lib".into()],
        timeout: 60,
        build_timeout: None,
        skip_baseline: false,
        floor,
        postgres: false,
    }
}

fn args(list: bool, shard: Option<(u32, u32)>) -> MutantsArgs {
    MutantsArgs {
        scopes: vec![],
        shard,
        list,
        commit: None,
        out: PathBuf::from("target/mutants"),
        target_dir: None,
        jobs: 1,
        report_only: false,
        iterate: false,
    }
}

#[test]
fn an_iteration_merges_into_the_earlier_run_over_the_mutants_the_tree_has_now() {
    let (a, b, c, d) = (
        name(10, "replace f -> bool with true"),
        name(11, "replace f -> bool with false"),
        name(12, "replace && with || in f"),
        name(13, "replace f -> T with Default::default()"),
    );
    let gone = name(14, "replace += with -= in g");
    let moved = name(16, "replace && with || in f");
    let previous = parse_outcomes(&outcomes_json(
        "Success",
        true,
        &[
            (&a, "CaughtMutant"),
            (&b, "MissedMutant"),
            (&c, "MissedMutant"),
            (&d, "Unviable"),
            (&gone, "MissedMutant"),
        ],
    ))
    .unwrap();
    // The iteration re-tests the survivors still there (b) and a mutant whose line moved.
    let now = parse_outcomes(&outcomes_json(
        "Success",
        true,
        &[(&b, "CaughtMutant"), (&moved, "Timeout")],
    ))
    .unwrap();
    let current = vec![a.clone(), b.clone(), moved.clone(), d.clone()];
    let m = merge(&previous, &now, &current).unwrap();
    assert_eq!(
        m.mutants,
        vec![
            (a.clone(), Fate::Caught),
            (b.clone(), Fate::Caught),
            (moved.clone(), Fate::Timeout),
            (d.clone(), Fate::Unviable),
        ]
    );
    assert_eq!((m.baseline_ok, m.complete), (Some(true), true));
    // Written and read back as cargo-mutants' own outcomes are.
    assert_eq!(parse_outcomes(&outcomes_to_json(&m)).unwrap(), m);
    // An unfinished iteration is an unfinished scope.
    let cut = parse_outcomes(&outcomes_json("Success", false, &[(&b, "CaughtMutant")])).unwrap();
    let m = merge(&previous, &cut, &[a.clone(), b.clone()]).unwrap();
    assert!(!m.complete);
    assert_eq!(parse_outcomes(&outcomes_to_json(&m)).unwrap(), m);
    // A mutant neither run tested cannot be judged.
    let e = merge(&previous, &now, &[c, name(20, "replace x with y in h")]).unwrap_err();
    assert!(e.contains("replace x with y in h"), "{e}");
}

#[test]
fn iterate_passes_the_flag_and_the_output_it_reads() {
    let s = scope(95.0);
    let a = MutantsArgs {
        iterate: true,
        ..args(false, None)
    };
    let v = mutants_args(&s, &a, Path::new("/o/consumer"));
    let words: Vec<String> = v.iter().map(|w| w.to_string_lossy().into_owned()).collect();
    let at = words.iter().position(|w| w == "--iterate").unwrap();
    assert_eq!(words[at + 1..at + 3], ["--output", "/o/consumer"]);
}

#[test]
fn outcomes_are_read_and_tallied() {
    let a = name(10, "replace f -> bool with true");
    let b = name(11, "replace f -> bool with false");
    let c = name(12, "replace && with || in f");
    let d = name(13, "replace f -> T with Default::default()");
    let e = name(14, "replace += with -= in f");
    let json = outcomes_json(
        "Success",
        true,
        &[
            (&a, "CaughtMutant"),
            (&b, "MissedMutant"),
            (&c, "Timeout"),
            (&d, "Unviable"),
            (&e, "CaughtMutant"),
        ],
    );
    let o = parse_outcomes(&json).unwrap();
    assert_eq!(o.baseline_ok, Some(true));
    assert!(o.complete);
    assert_eq!(o.mutants[1], (b.clone(), Fate::Missed));
    let t = Tally::of(&o);
    assert_eq!(
        t,
        Tally {
            mutants: 5,
            caught: 2,
            missed: 1,
            timeout: 1,
            unviable: 1
        }
    );
    // Timeouts count as detected; unviable mutants are not in the denominator.
    assert_eq!(t.viable(), 4);
    assert!((t.score() - 75.0).abs() < 1e-9);
}

#[test]
fn a_run_without_viable_mutants_scores_full_and_an_unknown_summary_is_an_error() {
    let d = name(13, "replace f -> T with Default::default()");
    let o = parse_outcomes(&outcomes_json("Success", true, &[(&d, "Unviable")])).unwrap();
    assert_eq!(Tally::of(&o).score(), 100.0);
    let bad = outcomes_json("Success", true, &[(&d, "Exploded")]);
    assert!(parse_outcomes(&bad).unwrap_err().contains("Exploded"));
    assert!(parse_outcomes("{}").is_err());
}

#[test]
fn names_split_into_file_and_description() {
    assert_eq!(
        split_name(&name(512, "replace && with || in run_one")),
        Some((CONSUMER, "replace && with || in run_one"))
    );
    assert_eq!(
        split_name("a.rs: replace x with y"),
        Some(("a.rs", "replace x with y"))
    );
    assert_eq!(split_name("no separator"), None);
}

#[test]
fn equivalents_match_on_file_and_description_not_on_line() {
    let survivor = name(600, "replace < with <= in main_loop");
    let other = name(601, "replace > with >= in main_loop");
    let o = Outcomes {
        baseline_ok: Some(true),
        complete: true,
        mutants: vec![
            (survivor.clone(), Fate::Missed),
            (other.clone(), Fate::Missed),
            (name(5, "replace a with b in f"), Fate::Caught),
        ],
    };
    let eq = vec![
        Equivalent {
            // Listed when the line was 580: an edit above moved it.
            mutant: name(580, "replace < with <= in main_loop"),
            reason: "instants are never equal".into(),
        },
        Equivalent {
            // Same description in another file: not this survivor.
            mutant: "crates/core/src/other.rs:601:9: replace > with >= in main_loop".into(),
            reason: "elsewhere".into(),
        },
    ];
    let s = survivors(&o, &eq);
    assert_eq!(
        s,
        vec![
            Survivor {
                name: &survivor,
                equivalent: Some("instants are never equal")
            },
            Survivor {
                name: &other,
                equivalent: None
            },
        ]
    );
}

#[test]
fn one_entry_never_explains_two_mutants_with_the_same_description() {
    let first = name(195, "replace | with ^ in RunId::generate");
    let second = name(196, "replace | with ^ in RunId::generate");
    let o = Outcomes {
        baseline_ok: Some(true),
        complete: true,
        mutants: vec![
            (first.clone(), Fate::Missed),
            (second.clone(), Fate::Missed),
        ],
    };
    let entry = |line: u32| Equivalent {
        mutant: name(line, "replace | with ^ in RunId::generate"),
        reason: format!("line {line}"),
    };
    // Listed at its exact place: only that one is explained.
    let one = [entry(195)];
    let s = survivors(&o, &one);
    assert_eq!(s[0].equivalent, Some("line 195"));
    assert_eq!(s[1].equivalent, None);
    // Both listed, exactly: both explained, each by its own entry.
    let both = [entry(195), entry(196)];
    let s = survivors(&o, &both);
    assert_eq!(s[0].equivalent, Some("line 195"));
    assert_eq!(s[1].equivalent, Some("line 196"));
    // An entry whose line moved cannot tell which of the two it meant: neither.
    let moved = [entry(180)];
    let s = survivors(&o, &moved);
    assert!(s.iter().all(|s| s.equivalent.is_none()));
}

#[test]
fn the_verdict_follows_the_floor_then_the_equivalents() {
    let caught: Vec<(String, Fate)> = (0..19)
        .map(|i| (name(i, &format!("replace {i} in f")), Fate::Caught))
        .collect();
    let missed = name(100, "replace < with <= in main_loop");
    let mut mutants = caught.clone();
    mutants.push((missed.clone(), Fate::Missed));
    let o = Outcomes {
        baseline_ok: Some(true),
        complete: true,
        mutants,
    };
    // 19 of 20 = 95 %.
    let none: Vec<Equivalent> = vec![];
    assert_eq!(verdict(95.0, &o, &survivors(&o, &none)), Verdict::Pass);
    assert_eq!(
        verdict(96.0, &o, &survivors(&o, &none)),
        Verdict::Fail { unexplained: 1 }
    );
    let eq = vec![Equivalent {
        mutant: missed.clone(),
        reason: "r".into(),
    }];
    assert_eq!(
        verdict(96.0, &o, &survivors(&o, &eq)),
        Verdict::PassEquivalent
    );
    // A failed baseline or an unfinished run is never a pass, whatever the counts.
    let broken = Outcomes {
        baseline_ok: Some(false),
        ..o.clone()
    };
    assert_eq!(
        verdict(0.0, &broken, &survivors(&broken, &eq)),
        Verdict::BaselineFailed
    );
    let unfinished = Outcomes {
        complete: false,
        ..o.clone()
    };
    assert_eq!(
        verdict(0.0, &unfinished, &survivors(&unfinished, &eq)),
        Verdict::Incomplete
    );
    // A skipped baseline is judged on the mutants.
    let skipped = Outcomes {
        baseline_ok: None,
        ..o
    };
    assert_eq!(
        verdict(95.0, &skipped, &survivors(&skipped, &none)),
        Verdict::Pass
    );
}

#[test]
fn an_interrupted_run_reads_as_incomplete() {
    let a = name(10, "replace f -> bool with true");
    let o = parse_outcomes(&outcomes_json("Success", false, &[(&a, "CaughtMutant")])).unwrap();
    assert!(!o.complete);
    let o = parse_outcomes(&outcomes_json("Failure", true, &[])).unwrap();
    assert_eq!(o.baseline_ok, Some(false));
}

#[test]
fn the_rendered_row_names_every_survivor() {
    let missed = name(100, "replace < with <= in main_loop");
    let lost = name(101, "replace f -> bool with true");
    let o = Outcomes {
        baseline_ok: Some(true),
        complete: true,
        mutants: vec![(missed.clone(), Fate::Missed), (lost.clone(), Fate::Missed)],
    };
    let eq = vec![Equivalent {
        mutant: missed.clone(),
        reason: "why".into(),
    }];
    let (text, v) = render(&scope(95.0), &o, &eq);
    assert_eq!(v, Verdict::Fail { unexplained: 1 });
    assert!(
        text.starts_with("| consumer | 2 | 0 | 2 | 0 | 0 | 0.0 % | 95 % | FAIL (1 unexplained) |")
    );
    assert!(text.contains(&format!("survivor (equivalent): {missed} — why")));
    assert!(text.contains(&format!("survivor: {lost}")));
}

#[test]
fn cargo_mutants_gets_the_scope_in_copy_mode() {
    let mut s = scope(95.0);
    s.re = vec!["run_one".into()];
    s.test_packages = vec!["cairn-sqlite".into()];
    s.skip_baseline = true;
    s.build_timeout = Some(900);
    let a = mutants_args(&s, &args(false, Some((1, 4))), Path::new("/o/consumer"));
    let a: Vec<String> = a.iter().map(|s| s.to_string_lossy().into_owned()).collect();
    let line = a.join(" ");
    assert_eq!(
        line,
        format!(
            "--package cairn-core --file {CONSUMER} --re run_one --jobs 1 --timeout 60 \
             --build-timeout 900 --baseline skip --test-package cairn-sqlite --colors never \
             --output /o/consumer --shard 1/4 --cargo-arg=--lib"
        )
    );
    assert!(!a.iter().any(|x| x == "--in-place"));
    let listed = mutants_args(&s, &args(true, None), Path::new("/o"));
    let listed: Vec<String> = listed
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        listed.join(" "),
        format!("--package cairn-core --file {CONSUMER} --re run_one --list")
    );
}

#[test]
fn test_targets_go_to_every_cargo_invocation_and_filters_to_the_binaries() {
    let mut s = scope(95.0);
    s.test_args = ["--test", "spool", "--lib", "--", "--skip", "m2_"]
        .map(String::from)
        .to_vec();
    let a = mutants_args(&s, &args(false, None), Path::new("/o"));
    let a: Vec<String> = a.iter().map(|s| s.to_string_lossy().into_owned()).collect();
    let line = a.join(" ");
    assert!(
        line.ends_with(
            "--output /o --cargo-arg=--test --cargo-arg=spool --cargo-arg=--lib -- -- --skip m2_"
        ),
        "{line}"
    );
    s.test_args = ["--lib"].map(String::from).to_vec();
    let a = mutants_args(&s, &args(false, None), Path::new("/o"));
    assert!(!a.iter().any(|x| x == "--"), "{a:?}");
}

#[test]
fn shards_are_checked() {
    assert_eq!(parse_shard("0/4"), Ok((0, 4)));
    assert_eq!(parse_shard("3/4"), Ok((3, 4)));
    assert!(parse_shard("4/4").is_err());
    assert!(parse_shard("1/0").is_err());
    assert!(parse_shard("1").is_err());
    assert!(parse_shard("a/2").is_err());
}

#[test]
fn bad_scope_and_equivalent_entries_are_refused() {
    let ok = "[[scope]]\nname = \"a\"\nabout = \"x\"\npackages = [\"p\"]\nfiles = [\"f.rs\"]\ntimeout = 5\nfloor = 90\n";
    let s = parse_scopes(ok).unwrap();
    assert_eq!(s[0].floor, 90.0);
    assert!(!s[0].postgres);
    assert!(parse_scopes(&format!("{ok}{ok}"))
        .unwrap_err()
        .contains("twice"));
    assert!(parse_scopes(&ok.replace("floor = 90", "floor = 190")).is_err());
    assert!(parse_scopes(&ok.replace("floor = 90\n", "")).is_err());
    assert!(parse_scopes(&ok.replace("timeout = 5", "timeout = 0")).is_err());
    assert!(parse_scopes(&ok.replace("files = [\"f.rs\"]", "files = []")).is_err());
    assert!(parse_scopes(&format!("{ok}flor = 3\n"))
        .unwrap_err()
        .contains("flor"));
    assert!(parse_scopes("").is_err());

    let eq = "[[equivalent]]\nmutant = \"a.rs:1:2: replace x with y in f\"\nreason = \"r\"\n";
    assert_eq!(parse_equivalents(eq).unwrap().len(), 1);
    assert!(parse_equivalents(&eq.replace("reason = \"r\"", "reason = \" \"")).is_err());
    assert!(parse_equivalents(&eq.replace("a.rs:1:2: ", "")).is_err());
    assert!(parse_equivalents(&format!("{eq}{eq}"))
        .unwrap_err()
        .contains("twice"));
    // The same description at another line is another mutant.
    let two = format!("{eq}{}", eq.replace(":1:2:", ":7:2:"));
    assert_eq!(parse_equivalents(&two).unwrap().len(), 2);
}

/// Whether `glob` (as cargo-mutants reads `--file`: `*` within one path component) names at
/// least one file under `root`.
fn glob_matches(root: &Path, glob: &str) -> bool {
    fn walk(dir: &Path, parts: &[&str]) -> bool {
        let Some((first, rest)) = parts.split_first() else {
            return false;
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return false;
        };
        entries.flatten().any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let (pre, post) = first.split_once('*').unwrap_or((first, ""));
            let hit = if first.contains('*') {
                name.len() >= pre.len() + post.len()
                    && name.starts_with(pre)
                    && name.ends_with(post)
            } else {
                name == *first
            };
            hit && if rest.is_empty() {
                e.path().is_file()
            } else {
                walk(&e.path(), rest)
            }
        })
    }
    walk(root, &glob.split('/').collect::<Vec<_>>())
}

#[test]
fn the_checked_in_lists_parse_and_every_scope_names_existing_code() {
    let root = workspace_root();
    let scopes = parse_scopes(&std::fs::read_to_string(root.join(SCOPES_FILE)).unwrap()).unwrap();
    let equivalents =
        parse_equivalents(&std::fs::read_to_string(root.join(EQUIVALENTS_FILE)).unwrap()).unwrap();
    for s in &scopes {
        // A scope's globs may list a layout that does not exist yet (a module split into a
        // directory), but at least one must match, or the scope mutates nothing.
        assert!(
            s.files.iter().any(|f| glob_matches(&root, f)),
            "scope {}: none of {:?} matches a file",
            s.name,
            s.files
        );
        assert!(s.floor >= 90.0, "scope {}: floor {}", s.name, s.floor);
    }
    for name in [
        "consumer",
        "delivery",
        "auth",
        "group-commit",
        "legacy",
        "migrate-runner",
    ] {
        assert!(
            scopes.iter().any(|s| s.name == name),
            "scope {name} is missing"
        );
    }
    for e in &equivalents {
        let (file, _) = split_name(&e.mutant).unwrap();
        assert!(
            scopes
                .iter()
                .any(|s| s.files.iter().any(|g| glob_matches(&root, g) && {
                    let (pre, post) = g.split_once('*').unwrap_or((g, ""));
                    file == g || (file.starts_with(pre) && file.ends_with(post))
                })),
            "{}: its file is in no scope",
            e.mutant
        );
        assert!(root.join(file).is_file(), "{}: no such file", e.mutant);
    }
}
