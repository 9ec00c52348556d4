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

use std::ffi::OsString;
use std::fmt::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use serde_json::Value;

/// The scope list, relative to the workspace root.
const SCOPES_FILE: &str = "mutants/scopes.toml";
/// The equivalent mutants, relative to the workspace root.
const EQUIVALENTS_FILE: &str = "mutants/equivalent.toml";
/// The merged outcomes of `--iterate` runs, beside a scope's `mutants.out`, in the shape of
/// cargo-mutants' `outcomes.json`.
const MERGED_FILE: &str = "xtask-outcomes.json";
/// How to get cargo-mutants (the version the figures in docs/RELIABILITY.md were measured with).
const INSTALL_HINT: &str = "cargo install cargo-mutants --locked --version 27.1.0";

/// `cargo xtask mutants` arguments.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct MutantsArgs {
    /// Run only this scope (repeatable); default: every scope in mutants/scopes.toml.
    #[arg(long = "scope", value_name = "NAME")]
    scopes: Vec<String>,
    /// Run one shard of each scope's mutants, `K/N` with K from 0 (cargo-mutants `--shard`);
    /// the floor is then judged on that shard.
    #[arg(long, value_name = "K/N", value_parser = parse_shard)]
    shard: Option<(u32, u32)>,
    /// List each scope's mutants (cargo-mutants `--list`) and the command that would test
    /// them, without building or testing anything.
    #[arg(long)]
    list: bool,
    /// Mutate a clean export of this commit (`git archive REV`) instead of the working tree,
    /// so that uncommitted edits (yours or anyone's) are not part of the run.
    #[arg(long, value_name = "REV")]
    commit: Option<String>,
    /// Where each scope's `mutants.out` goes: `DIR/<scope>/mutants.out`.
    #[arg(long, value_name = "DIR", default_value = "target/mutants")]
    out: PathBuf,
    /// One target directory for the scopes of this run (`CARGO_TARGET_DIR`), so dependencies
    /// build once. Never give the same one to two runs at the same time: the copies would
    /// link each other's mutated crates. Default: each copy builds in its own.
    #[arg(long, value_name = "DIR")]
    target_dir: Option<PathBuf>,
    /// Parallel cargo-mutants jobs (`-j`); each job builds a copy of the tree.
    #[arg(long, default_value_t = 1)]
    jobs: u32,
    /// Do not run cargo-mutants: judge the `outcomes.json` a previous run left under `--out`
    /// (e.g. after adding an entry to mutants/equivalent.toml).
    #[arg(long, conflicts_with = "list")]
    report_only: bool,
    /// Re-test only the mutants the last run under `--out` did not catch (cargo-mutants
    /// `--iterate`: caught and unviable ones are skipped), then judge each scope on the merged
    /// outcomes — this run's fate for the mutants it tested, the earlier run's for the others,
    /// over the mutants the tree has now. For confirming the tests written for survivors.
    #[arg(long, conflicts_with_all = ["list", "report_only", "shard"])]
    iterate: bool,
}

fn parse_shard(s: &str) -> Result<(u32, u32), String> {
    let (k, n) = s.split_once('/').ok_or("expected K/N, e.g. 0/4")?;
    let k: u32 = k.parse().map_err(|_| format!("bad shard index {k:?}"))?;
    let n: u32 = n.parse().map_err(|_| format!("bad shard count {n:?}"))?;
    if n == 0 || k >= n {
        return Err(format!("shard {k}/{n}: need 0 <= K < N"));
    }
    Ok((k, n))
}

/// One entry of `mutants/scopes.toml`.
#[derive(Clone, Debug, PartialEq)]
struct Scope {
    name: String,
    /// What the scope decides, for the table.
    about: String,
    /// Packages whose code is mutated (`--package`).
    packages: Vec<String>,
    /// File globs to mutate (`--file`; a glob with a slash matches the whole path).
    files: Vec<String>,
    /// Only mutants whose name matches one of these (`--re`), e.g. function names.
    re: Vec<String>,
    /// Mutants left out (`--exclude-re`), e.g. unviable `Default::default()` replacements.
    exclude_re: Vec<String>,
    /// Packages whose tests run against each mutant (`--test-package`); default: the mutated
    /// package's.
    test_packages: Vec<String>,
    /// Arguments after `--`, passed to `cargo test` (`--lib`, `--test NAME`, `-- FILTER`).
    test_args: Vec<String>,
    /// Per-mutant test timeout, seconds (`--timeout`).
    timeout: u64,
    /// Build timeout, seconds (`--build-timeout`), when the default would be too short.
    build_timeout: Option<u64>,
    /// Skip the unmutated baseline (`--baseline=skip`): needed when the tests are another
    /// package's targets, which the baseline would look for in the mutated package.
    skip_baseline: bool,
    /// The lowest acceptable score, percent of viable mutants detected.
    floor: f64,
    /// Whether the tests need the Postgres server.
    postgres: bool,
}

/// A mutant that survives by construction, with why (`mutants/equivalent.toml`).
#[derive(Clone, Debug, PartialEq)]
struct Equivalent {
    /// As cargo-mutants prints it, `file:line:col: description`; matched on file and
    /// description (line and column move with every edit above them).
    mutant: String,
    reason: String,
}

/// How one mutant came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Caught,
    Missed,
    Timeout,
    Unviable,
}

/// A scope's outcomes, read from cargo-mutants' `outcomes.json`.
#[derive(Clone, Debug, Default, PartialEq)]
struct Outcomes {
    /// Whether the unmutated baseline passed (`None` when it was skipped).
    baseline_ok: Option<bool>,
    /// Whether cargo-mutants finished (an interrupted run has no end time).
    complete: bool,
    mutants: Vec<(String, Fate)>,
}

/// The counts of one scope.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Tally {
    mutants: usize,
    caught: usize,
    missed: usize,
    timeout: usize,
    unviable: usize,
}

impl Tally {
    fn of(outcomes: &Outcomes) -> Self {
        let mut t = Tally {
            mutants: outcomes.mutants.len(),
            ..Tally::default()
        };
        for (_, fate) in &outcomes.mutants {
            match fate {
                Fate::Caught => t.caught += 1,
                Fate::Missed => t.missed += 1,
                Fate::Timeout => t.timeout += 1,
                Fate::Unviable => t.unviable += 1,
            }
        }
        t
    }

    fn viable(&self) -> usize {
        self.mutants - self.unviable
    }

    /// Percent of viable mutants detected (caught or timed out); 100 with none viable.
    fn score(&self) -> f64 {
        match self.viable() {
            0 => 100.0,
            v => 100.0 * (self.caught + self.timeout) as f64 / v as f64,
        }
    }
}

/// A scope's judgement.
#[derive(Clone, Debug, PartialEq)]
enum Verdict {
    /// At or above the floor.
    Pass,
    /// Under the floor, but every survivor is a listed equivalent.
    PassEquivalent,
    /// Under the floor with survivors nobody explained.
    Fail { unexplained: usize },
    /// The unmutated tree failed its tests: the run means nothing.
    BaselineFailed,
    /// cargo-mutants did not finish (interrupted, or still running under `--report-only`).
    Incomplete,
}

/// A survivor and, when it is listed, why it cannot be killed.
#[derive(Clone, Debug, PartialEq)]
struct Survivor<'a> {
    name: &'a str,
    equivalent: Option<&'a str>,
}

/// Splits `file:line:col: description` into `(file, description)`; a name without a line and
/// column is `file: description`.
fn split_name(name: &str) -> Option<(&str, &str)> {
    let (location, description) = name.split_once(": ")?;
    let mut parts = location.rsplitn(3, ':');
    let (col, line, file) = (parts.next(), parts.next(), parts.next());
    let file = match (col, line, file) {
        (Some(c), Some(l), Some(f))
            if c.chars().all(|ch| ch.is_ascii_digit())
                && l.chars().all(|ch| ch.is_ascii_digit()) =>
        {
            f
        }
        _ => location,
    };
    Some((file, description.trim()))
}

/// The survivors of `outcomes`, each with its equivalence reason when listed.
///
/// An entry names its survivor exactly (file, line, column and description). When the line
/// moved, an entry still matches on file and description, but only if neither the survivors
/// nor the entries hold that description twice in the file: one entry never explains two
/// mutants.
fn survivors<'a>(outcomes: &'a Outcomes, equivalents: &'a [Equivalent]) -> Vec<Survivor<'a>> {
    let missed: Vec<&'a str> = outcomes
        .mutants
        .iter()
        .filter(|(_, fate)| *fate == Fate::Missed)
        .map(|(name, _)| name.as_str())
        .collect();
    missed
        .iter()
        .map(|&name| {
            let key = split_name(name);
            let same_key = |n: &str| key.is_some() && split_name(n) == key;
            let exact = equivalents.iter().find(|e| e.mutant == name);
            let moved = || {
                let mut entries = equivalents.iter().filter(|e| same_key(&e.mutant));
                let entry = entries.next()?;
                let alone =
                    entries.next().is_none() && missed.iter().filter(|n| same_key(n)).count() == 1;
                alone.then_some(entry)
            };
            Survivor {
                name,
                equivalent: exact.or_else(moved).map(|e| e.reason.as_str()),
            }
        })
        .collect()
}

fn verdict(floor: f64, outcomes: &Outcomes, survivors: &[Survivor<'_>]) -> Verdict {
    if outcomes.baseline_ok == Some(false) {
        return Verdict::BaselineFailed;
    }
    if !outcomes.complete {
        return Verdict::Incomplete;
    }
    if Tally::of(outcomes).score() >= floor {
        return Verdict::Pass;
    }
    match survivors.iter().filter(|s| s.equivalent.is_none()).count() {
        0 => Verdict::PassEquivalent,
        unexplained => Verdict::Fail { unexplained },
    }
}

/// Reads cargo-mutants' `outcomes.json`.
fn parse_outcomes(json: &str) -> Result<Outcomes, String> {
    let v: Value = serde_json::from_str(json).map_err(|e| format!("outcomes.json: {e}"))?;
    let list = v
        .get("outcomes")
        .and_then(Value::as_array)
        .ok_or("outcomes.json: no `outcomes` array")?;
    let mut out = Outcomes {
        complete: v.get("end_time").is_some_and(|t| !t.is_null()),
        ..Outcomes::default()
    };
    for o in list {
        let summary = o
            .get("summary")
            .and_then(Value::as_str)
            .ok_or("outcomes.json: an outcome without `summary`")?;
        let scenario = o
            .get("scenario")
            .ok_or("outcomes.json: an outcome without `scenario`")?;
        if scenario.as_str() == Some("Baseline") {
            out.baseline_ok = Some(summary == "Success");
            continue;
        }
        let name = scenario
            .get("Mutant")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .ok_or("outcomes.json: a scenario that is neither the baseline nor a named mutant")?;
        let fate = match summary {
            "CaughtMutant" => Fate::Caught,
            "MissedMutant" => Fate::Missed,
            "Timeout" => Fate::Timeout,
            "Unviable" => Fate::Unviable,
            other => {
                return Err(format!(
                    "outcomes.json: {name}: unexpected summary {other:?}"
                ))
            }
        };
        out.mutants.push((name.to_owned(), fate));
    }
    Ok(out)
}

/// The outcomes of an `--iterate` run merged into the earlier ones: over the mutants the tree
/// has now (`current`, as `--list` names them), this run's fate where it tested the mutant,
/// else the earlier run's. A mutant neither run tested is an error (the earlier run was not
/// of this scope or this tree); a mutant the tree no longer has is dropped.
fn merge(previous: &Outcomes, now: &Outcomes, current: &[String]) -> Result<Outcomes, String> {
    let fate_in = |o: &Outcomes, name: &str| {
        o.mutants
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, f)| *f)
    };
    let mutants = current
        .iter()
        .map(|name| {
            fate_in(now, name)
                .or_else(|| fate_in(previous, name))
                .map(|f| (name.clone(), f))
                .ok_or_else(|| {
                    format!(
                        "{name}: tested by neither this run nor the one before; run the scope \
                         without --iterate"
                    )
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Outcomes {
        baseline_ok: now.baseline_ok.or(previous.baseline_ok),
        complete: previous.complete && now.complete,
        mutants,
    })
}

/// `outcomes` in the shape of cargo-mutants' `outcomes.json` (what [`parse_outcomes`] reads).
fn outcomes_to_json(outcomes: &Outcomes) -> String {
    let mut list = Vec::new();
    if let Some(ok) = outcomes.baseline_ok {
        list.push(serde_json::json!({
            "scenario": "Baseline",
            "summary": if ok { "Success" } else { "Failure" },
        }));
    }
    for (name, fate) in &outcomes.mutants {
        let summary = match fate {
            Fate::Caught => "CaughtMutant",
            Fate::Missed => "MissedMutant",
            Fate::Timeout => "Timeout",
            Fate::Unviable => "Unviable",
        };
        list.push(serde_json::json!({
            "scenario": {"Mutant": {"name": name}},
            "summary": summary,
        }));
    }
    let end = if outcomes.complete {
        Value::String("merged by cargo xtask mutants --iterate".into())
    } else {
        Value::Null
    };
    serde_json::to_string_pretty(&serde_json::json!({"end_time": end, "outcomes": list}))
        .expect("JSON values serialize")
}

/// The mutants of `scope` as `cargo mutants --list` names them, in `source`.
fn list_mutants(scope: &Scope, args: &MutantsArgs, source: &Path) -> Result<Vec<String>, String> {
    let listing = MutantsArgs {
        list: true,
        iterate: false,
        ..args.clone()
    };
    let out = Command::new(cargo())
        .arg("mutants")
        .args(mutants_args(scope, &listing, Path::new("unused")))
        .current_dir(source)
        .output()
        .map_err(|e| format!("cannot run cargo mutants --list: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo mutants --list for {}: {}: {}",
            scope.name,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect())
}

/// The outcomes a scope's last run left under `out_dir`: merged ones when the last run was
/// an `--iterate`, else cargo-mutants' own.
fn read_outcomes(out_dir: &Path) -> Result<Outcomes, String> {
    let merged = out_dir.join(MERGED_FILE);
    let file = if merged.is_file() {
        merged
    } else {
        out_dir.join("mutants.out").join("outcomes.json")
    };
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    parse_outcomes(&text)
}

fn strings(t: &toml::Table, key: &str, what: &str) -> Result<Vec<String>, String> {
    match t.get(key) {
        None => Ok(Vec::new()),
        Some(toml::Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("{what}: `{key}` must hold strings"))
            })
            .collect(),
        Some(_) => Err(format!("{what}: `{key}` must be an array of strings")),
    }
}

fn string(t: &toml::Table, key: &str, what: &str) -> Result<String, String> {
    t.get(key)
        .and_then(toml::Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .map(str::to_owned)
        .ok_or_else(|| format!("{what}: `{key}` (a non-empty string) is required"))
}

fn entries<'a>(
    doc: &'a toml::Table,
    key: &str,
    file: &str,
) -> Result<Vec<&'a toml::Table>, String> {
    match doc.get(key) {
        None => Ok(Vec::new()),
        Some(toml::Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_table()
                    .ok_or_else(|| format!("{file}: every `[[{key}]]` must be a table"))
            })
            .collect(),
        Some(_) => Err(format!("{file}: `{key}` must be `[[{key}]]` tables")),
    }
}

const SCOPE_KEYS: &[&str] = &[
    "name",
    "about",
    "packages",
    "files",
    "re",
    "exclude_re",
    "test_packages",
    "test_args",
    "timeout",
    "build_timeout",
    "skip_baseline",
    "floor",
    "postgres",
];

fn parse_scopes(text: &str) -> Result<Vec<Scope>, String> {
    let doc: toml::Table = toml::from_str(text).map_err(|e| format!("{SCOPES_FILE}: {e}"))?;
    let mut scopes: Vec<Scope> = Vec::new();
    for t in entries(&doc, "scope", SCOPES_FILE)? {
        let name = string(t, "name", SCOPES_FILE)?;
        let what = format!("{SCOPES_FILE}: scope {name}");
        if let Some(k) = t.keys().find(|k| !SCOPE_KEYS.contains(&k.as_str())) {
            return Err(format!("{what}: unknown key `{k}`"));
        }
        let int = |key: &str| -> Result<Option<u64>, String> {
            t.get(key)
                .map(|v| {
                    v.as_integer()
                        .and_then(|i| u64::try_from(i).ok())
                        .filter(|&i| i > 0)
                        .ok_or_else(|| format!("{what}: `{key}` must be a positive integer"))
                })
                .transpose()
        };
        let boolean = |key: &str| -> Result<bool, String> {
            t.get(key).map_or(Ok(false), |v| {
                v.as_bool()
                    .ok_or_else(|| format!("{what}: `{key}` must be true or false"))
            })
        };
        let floor = match t.get("floor") {
            Some(toml::Value::Float(f)) => *f,
            Some(toml::Value::Integer(i)) => *i as f64,
            _ => return Err(format!("{what}: `floor` (percent) is required")),
        };
        if !(0.0..=100.0).contains(&floor) {
            return Err(format!("{what}: `floor` must be within 0–100"));
        }
        let scope = Scope {
            about: string(t, "about", &what)?,
            packages: strings(t, "packages", &what)?,
            files: strings(t, "files", &what)?,
            re: strings(t, "re", &what)?,
            exclude_re: strings(t, "exclude_re", &what)?,
            test_packages: strings(t, "test_packages", &what)?,
            test_args: strings(t, "test_args", &what)?,
            timeout: int("timeout")?.ok_or_else(|| format!("{what}: `timeout` is required"))?,
            build_timeout: int("build_timeout")?,
            skip_baseline: boolean("skip_baseline")?,
            floor,
            postgres: boolean("postgres")?,
            name,
        };
        if scope.packages.is_empty() || scope.files.is_empty() {
            return Err(format!("{what}: `packages` and `files` must not be empty"));
        }
        if scopes.iter().any(|s| s.name == scope.name) {
            return Err(format!("{what}: the name is used twice"));
        }
        scopes.push(scope);
    }
    if scopes.is_empty() {
        return Err(format!("{SCOPES_FILE}: no `[[scope]]`"));
    }
    Ok(scopes)
}

fn parse_equivalents(text: &str) -> Result<Vec<Equivalent>, String> {
    let doc: toml::Table = toml::from_str(text).map_err(|e| format!("{EQUIVALENTS_FILE}: {e}"))?;
    let mut out: Vec<Equivalent> = Vec::new();
    for t in entries(&doc, "equivalent", EQUIVALENTS_FILE)? {
        let mutant = string(t, "mutant", EQUIVALENTS_FILE)?;
        let what = format!("{EQUIVALENTS_FILE}: {mutant}");
        if split_name(&mutant).is_none() {
            return Err(format!(
                "{what}: write the mutant as cargo-mutants prints it, `file:line:col: description`"
            ));
        }
        if let Some(k) = t
            .keys()
            .find(|k| !["mutant", "reason"].contains(&k.as_str()))
        {
            return Err(format!("{what}: unknown key `{k}`"));
        }
        let reason = string(t, "reason", &what)?;
        if out.iter().any(|e| e.mutant == mutant) {
            return Err(format!("{what}: listed twice"));
        }
        out.push(Equivalent { mutant, reason });
    }
    Ok(out)
}

/// The cargo-mutants arguments for `scope` (after `cargo mutants`).
fn mutants_args(scope: &Scope, args: &MutantsArgs, out_dir: &Path) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |flag: &str, value: &str| {
        a.push(flag.into());
        a.push(value.into());
    };
    for p in &scope.packages {
        push("--package", p);
    }
    for f in &scope.files {
        push("--file", f);
    }
    for r in &scope.re {
        push("--re", r);
    }
    for r in &scope.exclude_re {
        push("--exclude-re", r);
    }
    if args.list {
        a.push("--list".into());
    } else {
        push("--jobs", &args.jobs.to_string());
        push("--timeout", &scope.timeout.to_string());
        if let Some(b) = scope.build_timeout {
            push("--build-timeout", &b.to_string());
        }
        if scope.skip_baseline {
            push("--baseline", "skip");
        }
        for p in &scope.test_packages {
            push("--test-package", p);
        }
        push("--colors", "never");
        if args.iterate {
            a.push("--iterate".into());
        }
        a.push("--output".into());
        a.push(out_dir.into());
    }
    if let Some((k, n)) = args.shard {
        a.push("--shard".into());
        a.push(format!("{k}/{n}").into());
    }
    if !scope.test_args.is_empty() && !args.list {
        a.push("--".into());
        a.extend(scope.test_args.iter().map(OsString::from));
    }
    a
}

fn shell_words(args: &[OsString]) -> String {
    let mut s = String::from("cargo mutants");
    for a in args {
        let a = a.to_string_lossy();
        if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"\\|*?()$<>".contains(c)) {
            let _ = write!(s, " '{}'", a.replace('\'', r"'\''"));
        } else {
            let _ = write!(s, " {a}");
        }
    }
    s
}

fn workspace_root() -> PathBuf {
    // xtask lives one level under the workspace root.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

fn cargo() -> OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"))
}

/// The cargo-mutants version line, or how to install it.
fn cargo_mutants_version() -> Result<String, String> {
    let missing = || {
        format!(
            "cargo-mutants is not installed (`cargo mutants --version` failed); install it with\n    \
             {INSTALL_HINT}\nand run this again. Nothing was installed."
        )
    };
    let out = Command::new(cargo())
        .args(["mutants", "--version"])
        .output()
        .map_err(|_| missing())?;
    if !out.status.success() {
        return Err(missing());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A clean export of `rev` in a temporary directory, and the commit it names.
fn export(root: &Path, rev: &str) -> Result<(tempfile::TempDir, String), String> {
    let git = |args: &[&str]| -> Result<Vec<u8>, String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .output()
            .map_err(|e| format!("cannot run git: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "git {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(out.stdout)
    };
    let commit = String::from_utf8_lossy(&git(&[
        "rev-parse",
        "--verify",
        &format!("{rev}^{{commit}}"),
    ])?)
    .trim()
    .to_owned();
    let dir = tempfile::Builder::new()
        .prefix("cairn-mutants-")
        .tempdir()
        .map_err(|e| format!("cannot make a temp dir: {e}"))?;
    let tar = dir.path().join("src.tar");
    git(&[
        "archive",
        "--format=tar",
        "-o",
        &tar.to_string_lossy(),
        &commit,
    ])?;
    let status = Command::new("tar")
        .arg("-xf")
        .arg(&tar)
        .arg("-C")
        .arg(dir.path())
        .status()
        .map_err(|e| format!("cannot run tar: {e}"))?;
    if !status.success() {
        return Err(format!("tar -xf {}: {status}", tar.display()));
    }
    std::fs::remove_file(&tar).map_err(|e| format!("{}: {e}", tar.display()))?;
    Ok((dir, commit))
}

fn postgres_reachable() -> bool {
    std::env::var_os("CAIRN_TEST_POSTGRES_URL").is_some()
        || TcpStream::connect_timeout(
            &SocketAddr::from(([127, 0, 0, 1], 5432)),
            Duration::from_secs(1),
        )
        .is_ok()
}

/// One scope's table row and survivors, as printed.
fn render(scope: &Scope, outcomes: &Outcomes, equivalents: &[Equivalent]) -> (String, Verdict) {
    let t = Tally::of(outcomes);
    let surv = survivors(outcomes, equivalents);
    let v = verdict(scope.floor, outcomes, &surv);
    let word = match &v {
        Verdict::Pass => "pass".to_owned(),
        Verdict::PassEquivalent => "pass (every survivor equivalent)".to_owned(),
        Verdict::Fail { unexplained } => format!("FAIL ({unexplained} unexplained)"),
        Verdict::BaselineFailed => "FAIL (baseline tests failed)".to_owned(),
        Verdict::Incomplete => "FAIL (cargo-mutants did not finish)".to_owned(),
    };
    let mut s = format!(
        "| {} | {} | {} | {} | {} | {} | {:.1} % | {} % | {} |\n",
        scope.name,
        t.mutants,
        t.caught,
        t.missed,
        t.timeout,
        t.unviable,
        t.score(),
        scope.floor,
        word
    );
    for sv in &surv {
        match sv.equivalent {
            Some(reason) => {
                let _ = writeln!(s, "    survivor (equivalent): {} — {reason}", sv.name);
            }
            None => {
                let _ = writeln!(s, "    survivor: {}", sv.name);
            }
        }
    }
    (s, v)
}

const TABLE_HEAD: &str = "| scope | mutants | caught | missed | timeout | unviable | score | floor | verdict |\n|---|---|---|---|---|---|---|---|---|\n";

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
            let mut cmd = Command::new(cargo());
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let cut =
            parse_outcomes(&outcomes_json("Success", false, &[(&b, "CaughtMutant")])).unwrap();
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
        assert!(text
            .starts_with("| consumer | 2 | 0 | 2 | 0 | 0 | 0.0 % | 95 % | FAIL (1 unexplained) |"));
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
                 --output /o/consumer --shard 1/4 -- --lib"
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
        let scopes =
            parse_scopes(&std::fs::read_to_string(root.join(SCOPES_FILE)).unwrap()).unwrap();
        let equivalents =
            parse_equivalents(&std::fs::read_to_string(root.join(EQUIVALENTS_FILE)).unwrap())
                .unwrap();
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
}
