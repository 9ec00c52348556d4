//! `cargo xtask mutants`: cargo-mutants over the checked-in scopes, one verdict per scope.
//!
//! The scopes (`mutants/scopes.toml`) name the files (or functions, through `re`) to mutate
//! and the tests that must catch them; `mutants/equivalent.toml` lists the surviving mutants
//! that no test can observe, each with its reason. For every scope this runs cargo-mutants in
//! its default copy mode (never `--in-place`: other work may share the checkout), reads its
//! `outcomes.json`, prints the tally and the survivors, and fails when the scope's score is
//! under its floor unless every survivor is a listed equivalent. Nothing is installed: when
//! cargo-mutants is missing the command says how to install it and exits non-zero.
//!
//! The score is the share of viable mutants detected: `(caught + timeout) / (mutants -
//! unviable)`. A timeout counts as detected (the mutant made a test hang, which the suite
//! reports as a failure).

mod args;
mod command;
mod judge;
mod outcomes;
mod scopes;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub(crate) use args::MutantsArgs;
use command::{
    cargo_mutants_version, export, list_mutants, mutants_args, postgres_reachable, shell_words,
};
use judge::{render, Verdict, TABLE_HEAD};
use outcomes::{merge, outcomes_to_json, parse_outcomes, read_outcomes, MERGED_FILE};
use scopes::{parse_equivalents, parse_scopes, Scope, EQUIVALENTS_FILE, SCOPES_FILE};

fn workspace_root() -> PathBuf {
    // xtask lives one level under the workspace root.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// Runs (or lists, or re-judges) the selected scopes.
pub(crate) fn run(args: &MutantsArgs) -> Result<ExitCode, String> {
    let root = workspace_root();
    let read = |f: &str| std::fs::read_to_string(root.join(f)).map_err(|e| format!("{f}: {e}"));
    let scopes = parse_scopes(&read(SCOPES_FILE)?)?;
    let equivalents = parse_equivalents(&read(EQUIVALENTS_FILE)?)?;
    let selected: Vec<&Scope> = if args.scopes.is_empty() {
        scopes.iter().collect()
    } else {
        args.scopes
            .iter()
            .map(|n| {
                scopes.iter().find(|s| &s.name == n).ok_or_else(|| {
                    let names: Vec<&str> = scopes.iter().map(|s| s.name.as_str()).collect();
                    format!("no scope {n:?}; the scopes are: {}", names.join(", "))
                })
            })
            .collect::<Result<_, _>>()?
    };
    let out_root = if args.out.is_absolute() {
        args.out.clone()
    } else {
        root.join(&args.out)
    };

    let mut source = root.clone();
    let mut _export = None;
    if !args.report_only {
        let version = cargo_mutants_version()?;
        eprintln!("xtask: {version}");
        if let Some(rev) = &args.commit {
            let (dir, commit) = export(&root, rev)?;
            eprintln!("xtask: mutating a clean export of {commit}");
            source = dir.path().to_path_buf();
            _export = Some(dir);
        }
    }

    let mut table = String::from(TABLE_HEAD);
    let mut failed = false;
    for scope in selected {
        let out_dir = out_root.join(&scope.name);
        let cm_args = mutants_args(scope, args, &out_dir);
        if !args.report_only {
            eprintln!(
                "\nxtask: scope {} — {}\nxtask: {}",
                scope.name,
                scope.about,
                shell_words(&cm_args)
            );
            if scope.postgres && !args.list && !postgres_reachable() {
                eprintln!(
                    "xtask: scope {} needs Postgres: nothing answers on 127.0.0.1:5432 and \
                     CAIRN_TEST_POSTGRES_URL is unset (the baseline will fail)",
                    scope.name
                );
            }
            if !args.list {
                // cargo-mutants creates `mutants.out` but not the directories above it.
                std::fs::create_dir_all(&out_dir)
                    .map_err(|e| format!("{}: {e}", out_dir.display()))?;
            }
            // What an --iterate run merges into: the last run's outcomes. A run without
            // --iterate starts afresh, so merged outcomes of earlier iterations go.
            let previous = if args.iterate {
                let p = read_outcomes(&out_dir).map_err(|e| {
                    format!(
                        "scope {}: --iterate needs an earlier run under --out: {e}",
                        scope.name
                    )
                })?;
                if !p.complete {
                    return Err(format!(
                        "scope {}: the earlier run under --out did not finish; run the scope \
                         without --iterate",
                        scope.name
                    ));
                }
                Some(p)
            } else {
                match std::fs::remove_file(out_dir.join(MERGED_FILE)) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(format!("{}: {e}", out_dir.join(MERGED_FILE).display()))
                    }
                    _ => None,
                }
            };
            let mut cmd = crate::cargo::plain_cargo();
            cmd.arg("mutants").args(&cm_args).current_dir(&source);
            if let Some(t) = &args.target_dir {
                cmd.env("CARGO_TARGET_DIR", root.join(t));
            }
            let status = cmd
                .status()
                .map_err(|e| format!("cannot run cargo mutants: {e}"))?;
            if args.list {
                if !status.success() {
                    return Err(format!("cargo mutants --list for {}: {status}", scope.name));
                }
                continue;
            }
            // cargo-mutants exits 2 with missed mutants and 3 with timeouts; the verdict below
            // is ours. Other codes (usage, baseline failure) leave outcomes we still read when
            // they exist.
            eprintln!("xtask: cargo mutants exited with {status}");
            if let Some(previous) = previous {
                let file = out_dir.join("mutants.out").join("outcomes.json");
                let now = std::fs::read_to_string(&file)
                    .map_err(|e| format!("{}: {e}", file.display()))
                    .and_then(|t| parse_outcomes(&t))
                    .map_err(|e| format!("scope {}: {e}", scope.name))?;
                let current = list_mutants(scope, args, &source)?;
                let merged = merge(&previous, &now, &current)
                    .map_err(|e| format!("scope {}: {e}", scope.name))?;
                eprintln!(
                    "xtask: {} of {} mutants re-tested; the others keep the earlier run's fate",
                    now.mutants.len(),
                    merged.mutants.len()
                );
                let path = out_dir.join(MERGED_FILE);
                std::fs::write(&path, outcomes_to_json(&merged))
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
        let outcomes = read_outcomes(&out_dir).map_err(|e| format!("scope {}: {e}", scope.name))?;
        let (rows, v) = render(scope, &outcomes, &equivalents);
        failed |= !matches!(v, Verdict::Pass | Verdict::PassEquivalent);
        table.push_str(&rows);
    }
    if args.list {
        return Ok(ExitCode::SUCCESS);
    }
    println!("\n{table}");
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
