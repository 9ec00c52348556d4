//! What every bench is set up with: the backend to measure, a tag unique to the run (its
//! scratch spaces and schemas), a SQLite path from a URL, the machine's CPU model, the
//! workspace's root, a store error as text.

use std::path::{Path, PathBuf};

use cairn::Error;
use clap::ValueEnum;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        }
    }
}

pub(super) fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_owned())
}

/// 16 hex digits unique to this process, call and moment, so concurrent runs never share
/// spaces or schemas.
pub(super) fn random_tag() -> String {
    let name = cairn::testkit::scratch_name("t");
    name["t_".len()..].to_owned()
}

pub(super) fn sqlite_path(url: &str) -> Result<std::path::PathBuf, String> {
    match url.split_once("://") {
        None => Ok(url.into()),
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("sqlite") && !rest.is_empty() => {
            Ok(rest.into())
        }
        Some(_) => Err("--backend sqlite takes a sqlite:// URL or a file path".into()),
    }
}

pub(super) fn store_err(e: Error) -> String {
    e.to_string()
}

/// The workspace this xtask belongs to.
pub(super) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_urls() {
        assert_eq!(sqlite_path("sqlite:///a/b.db").ok(), Some("/a/b.db".into()));
        assert_eq!(sqlite_path("b.db").ok(), Some("b.db".into()));
        assert!(sqlite_path("postgres://x").is_err());
    }
}
