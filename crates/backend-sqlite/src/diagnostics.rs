//! [`cairn_migrate::Diagnostics`] for a SQLite store: `PRAGMA quick_check` on a read-only
//! connection, and the additivity check's leftover scratch directories in this machine's
//! temporary directory.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use cairn_core::Result;
use cairn_migrate::{Diagnostics, Integrity};
use rusqlite::{Connection, OpenFlags};

use crate::additivity::scratch;

/// Read-only diagnostics of the SQLite store at a path, built from the path alone: it works on
/// a store that is damaged, missing or refused by the migration runner, and never creates,
/// migrates or writes one. Each integrity check opens a read-only connection of its own for
/// the duration of the check.
#[derive(Clone, Debug)]
pub struct SqliteDiagnostics {
    path: PathBuf,
    /// Where the SQLite additivity engine makes its scratch directories.
    scratch_base: PathBuf,
}

impl SqliteDiagnostics {
    /// Diagnostics of the store file at `path`. Nothing is opened until a check runs.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            scratch_base: std::env::temp_dir(),
        }
    }
}

#[async_trait]
impl Diagnostics for SqliteDiagnostics {
    fn engine(&self) -> &str {
        "sqlite"
    }

    /// The space available to this user on the file system holding the file (its directory's,
    /// while the file does not exist).
    async fn free_space(&self) -> Result<Option<u64>> {
        let at = if self.path.exists() {
            self.path.clone()
        } else {
            self.path
                .parent()
                .map_or_else(|| self.path.clone(), Path::to_path_buf)
        };
        let asked = tokio::task::spawn_blocking(move || {
            fs4::available_space(&at).map_err(|source| cairn_core::Error::Io {
                path: at.display().to_string(),
                source,
            })
        })
        .await;
        match asked {
            Ok(free) => free.map(Some),
            Err(_) => Err(cairn_core::Error::backend(
                "sqlite",
                "the free-space check did not finish",
            )),
        }
    }

    /// `PRAGMA quick_check` on a read-only connection. A file that is absent (or a dangling
    /// symlink) is [`Integrity::Missing`]; a file SQLite cannot open where the file or its
    /// directory cannot be written is [`Integrity::ReadOnly`], not damage.
    async fn integrity(&self) -> Integrity {
        if !self.path.exists() {
            return Integrity::Missing;
        }
        let path = self.path.clone();
        let checked = tokio::task::spawn_blocking(move || {
            let result = quick_check(&path);
            (result, path)
        })
        .await;
        match checked {
            Ok((Ok(rows), _)) if rows == ["ok"] => Integrity::Intact {
                detail: "quick_check: ok".into(),
            },
            Ok((Ok(rows), _)) => Integrity::Damaged {
                detail: format!("quick_check found {} problem(s)", rows.len()),
            },
            Ok((Err(e), path)) => match read_only(&path) {
                // Not damage: SQLite cannot open a WAL store, even to read, where it cannot
                // create the store's shared-memory file (`-shm`) beside it.
                Some(why) => Integrity::ReadOnly {
                    detail: format!(
                        "the store is read-only ({why}), so SQLite cannot open it, not even to \
                         read ({e})"
                    ),
                },
                None => Integrity::Damaged {
                    detail: format!("not a readable SQLite database ({e})"),
                },
            },
            Err(_) => Integrity::Unchecked {
                detail: "the check did not finish".into(),
            },
        }
    }

    /// The SQLite additivity engine's scratch directories in this machine's temporary
    /// directory (whatever this store's path) that no running check owns, by the engine's own
    /// rule. Never an error: a temporary directory that cannot be read holds none.
    async fn scratch_leftovers(&self) -> Result<Vec<String>> {
        let base = self.scratch_base.clone();
        Ok(
            tokio::task::spawn_blocking(move || scratch::leftovers(&base))
                .await
                .unwrap_or_default(),
        )
    }
}

/// The rows of `PRAGMA quick_check` (`["ok"]` when nothing is wrong), on a connection that
/// opens the file read-only.
fn quick_check(path: &Path) -> std::result::Result<Vec<String>, rusqlite::Error> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    let mut stmt = conn.prepare("PRAGMA quick_check")?;
    let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
    rows.collect()
}

/// Why the store file at `path` cannot be written, when that is so: a read-only file system,
/// or a file or directory this user may not write (permissions, an immutable flag). Checked
/// with `access(2)`, which opens nothing: closing a descriptor of the store file would drop the
/// SQLite locks this process holds on it (a running server's diagnostics).
fn read_only(path: &Path) -> Option<&'static str> {
    #[cfg(unix)]
    {
        use rustix::fs::{access, Access};
        use rustix::io::Errno;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let checks = [
            (path, "the file is not writable by this user"),
            (dir, "its directory is not writable by this user"),
        ];
        checks
            .into_iter()
            .find_map(|(p, unwritable)| match access(p, Access::WRITE_OK) {
                Err(Errno::ROFS) => Some("read-only file system"),
                Err(Errno::ACCESS | Errno::PERM) => Some(unwritable),
                _ => None,
            })
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Leftovers are looked for where the engine makes its scratch directories, by the
    /// engine's rule: a directory whose check is gone is listed, a running check's (its lock
    /// file locked) is not, and nothing is removed.
    #[tokio::test]
    async fn scratch_leftovers_are_the_scratch_directories_no_running_check_owns() {
        let base = tempfile::tempdir().unwrap();
        let diagnostics = SqliteDiagnostics {
            path: base.path().join("s.db"),
            scratch_base: base.path().to_owned(),
        };
        assert_eq!(
            diagnostics.scratch_leftovers().await.unwrap(),
            Vec::<String>::new()
        );
        let dead = cairn_core::scratch_name("cairn_additivity");
        std::fs::create_dir(base.path().join(&dead)).unwrap();
        let live = cairn_core::scratch_name("cairn_additivity");
        let lock = std::fs::File::create(base.path().join(format!("{live}.lock"))).unwrap();
        fs4::FileExt::try_lock(&lock).unwrap();
        std::fs::create_dir(base.path().join(&live)).unwrap();
        assert_eq!(
            diagnostics.scratch_leftovers().await.unwrap(),
            [dead.as_str()]
        );
        assert!(base.path().join(&dead).is_dir(), "listing removes nothing");
        drop(lock);
        let mut both = vec![dead, live];
        both.sort();
        assert_eq!(
            diagnostics.scratch_leftovers().await.unwrap(),
            both,
            "once its check is gone, the live one is a leftover too"
        );
    }
}
