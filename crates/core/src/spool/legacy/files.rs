//! The legacy directory's files: their names, what an importer backs up, and how one is opened
//! (never through a symbolic link).

use std::path::{Path, PathBuf};

use super::error::LegacyError;
use super::format::{CHECKPOINT_FILE, CHECKPOINT_TMP_FILE, SPOOL_FILE, WAL_FILE};

/// The files an importer backs up before importing `dir`, present or not (pure: it names
/// paths and reads nothing).
pub fn backup_files(dir: &Path) -> Vec<PathBuf> {
    [CHECKPOINT_FILE, CHECKPOINT_TMP_FILE, WAL_FILE, SPOOL_FILE]
        .iter()
        .map(|f| dir.join(f))
        .collect()
}

/// Opens `dir`'s legacy file `name` for reading without following a symbolic link:
/// `None` when it is absent.
///
/// # Errors
/// [`LegacyError::UnsafePath`] when it is a symbolic link (dangling or not) or not a regular
/// file (a FIFO is not waited on); [`LegacyError::Io`].
pub fn open_file(dir: &Path, name: &str) -> Result<Option<std::fs::File>, LegacyError> {
    let path = dir.join(name);
    let link = |path: PathBuf| LegacyError::UnsafePath {
        path,
        reason: "it is a symbolic link",
    };
    #[cfg(unix)]
    let opened = {
        use rustix::fs::{Mode, OFlags};
        // The last component is never followed; a FIFO does not block the open.
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        match rustix::fs::open(&path, flags, Mode::empty()) {
            Err(rustix::io::Errno::LOOP) => return Err(link(path)),
            other => other.map(std::fs::File::from).map_err(std::io::Error::from),
        }
    };
    #[cfg(not(unix))]
    let opened = match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => return Err(link(path)),
        _ => std::fs::File::open(&path),
    };
    let file = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(LegacyError::Io { path, source }),
    };
    let meta = file.metadata().map_err(|source| LegacyError::Io {
        path: path.clone(),
        source,
    })?;
    if !meta.is_file() {
        return Err(LegacyError::UnsafePath {
            path,
            reason: "it is not a regular file",
        });
    }
    Ok(Some(file))
}
