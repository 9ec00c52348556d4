//! The checked-in lists: the scopes of `mutants/scopes.toml` and the equivalent mutants of
//! `mutants/equivalent.toml`, read and checked; a mutant's name as cargo-mutants prints it.

/// The scope list, relative to the workspace root.
pub(super) const SCOPES_FILE: &str = "mutants/scopes.toml";

/// The equivalent mutants, relative to the workspace root.
pub(super) const EQUIVALENTS_FILE: &str = "mutants/equivalent.toml";

/// One entry of `mutants/scopes.toml`.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Scope {
    pub(super) name: String,
    /// What the scope decides, for the table.
    pub(super) about: String,
    /// Packages whose code is mutated (`--package`).
    pub(super) packages: Vec<String>,
    /// File globs to mutate (`--file`; a glob with a slash matches the whole path).
    pub(super) files: Vec<String>,
    /// Only mutants whose name matches one of these (`--re`), e.g. function names.
    pub(super) re: Vec<String>,
    /// Mutants left out (`--exclude-re`), e.g. unviable `Default::default()` replacements.
    pub(super) exclude_re: Vec<String>,
    /// Packages whose tests run against each mutant (`--test-package`); default: the mutated
    /// package's.
    pub(super) test_packages: Vec<String>,
    /// Arguments after `--`, passed to `cargo test` (`--lib`, `--test NAME`, `-- FILTER`).
    pub(super) test_args: Vec<String>,
    /// Per-mutant test timeout, seconds (`--timeout`).
    pub(super) timeout: u64,
    /// Build timeout, seconds (`--build-timeout`), when the default would be too short.
    pub(super) build_timeout: Option<u64>,
    /// Skip the unmutated baseline (`--baseline=skip`): needed when the tests are another
    /// package's targets, which the baseline would look for in the mutated package.
    pub(super) skip_baseline: bool,
    /// The lowest acceptable score, percent of viable mutants detected.
    pub(super) floor: f64,
    /// Whether the tests need the Postgres server.
    pub(super) postgres: bool,
}

/// A mutant that survives by construction, with why (`mutants/equivalent.toml`).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Equivalent {
    /// As cargo-mutants prints it, `file:line:col: description`; matched on file and
    /// description (line and column move with every edit above them).
    pub(super) mutant: String,
    pub(super) reason: String,
}

/// Splits `file:line:col: description` into `(file, description)`; a name without a line and
/// column is `file: description`.
pub(super) fn split_name(name: &str) -> Option<(&str, &str)> {
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

pub(super) fn strings(t: &toml::Table, key: &str, what: &str) -> Result<Vec<String>, String> {
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

pub(super) fn string(t: &toml::Table, key: &str, what: &str) -> Result<String, String> {
    t.get(key)
        .and_then(toml::Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .map(str::to_owned)
        .ok_or_else(|| format!("{what}: `{key}` (a non-empty string) is required"))
}

pub(super) fn entries<'a>(
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

pub(super) const SCOPE_KEYS: &[&str] = &[
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

pub(super) fn parse_scopes(text: &str) -> Result<Vec<Scope>, String> {
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

pub(super) fn parse_equivalents(text: &str) -> Result<Vec<Equivalent>, String> {
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
