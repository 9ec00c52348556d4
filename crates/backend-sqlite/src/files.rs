//! Store-file safety (DESIGN §6): refuse symlinks, create private files, make creation durable,
//! and open connections with cairn's pragmas.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use cairn_core::{Error, Result};
use rusqlite::{Connection, OpenFlags};

use crate::config::SqliteOptions;
use crate::error;

/// The files SQLite uses next to the database in WAL mode.
const SIDECARS: [&str; 2] = ["-wal", "-shm"];

fn io_err(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.display().to_string(),
        source,
    }
}

fn unsafe_path(path: &Path, reason: &str) -> Error {
    Error::UnsafePath {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Refuses `path` when it, or its `-wal` / `-shm` file, is a symbolic link, or when `path`
/// exists and is not a regular file. Looks at the links themselves (`symlink_metadata`), so a
/// link is refused whether or not its target exists.
pub(crate) fn check_path(path: &Path) -> Result<()> {
    let main = std::iter::once(path.to_path_buf());
    for p in main.chain(SIDECARS.iter().map(|s| sidecar(path, s))) {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(unsafe_path(
                    &p,
                    "it is a symbolic link; point cairn at the real file",
                ))
            }
            Ok(m) if !m.is_file() => {
                return Err(unsafe_path(&p, "it exists and is not a regular file"))
            }
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&p, e)),
        }
    }
    Ok(())
}

/// Whether anything sits at `path` (a link counts: [`check_path`] refuses it separately).
pub(crate) fn exists(path: &Path) -> Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(path, e)),
    }
}

/// The error for a missing store that must not be created.
pub(crate) fn no_store(path: &Path) -> Error {
    Error::NotFound {
        what: format!("cairn store at {}", path.display()),
    }
}

/// Checks `path` ([`check_path`]), then creates its directory (0700) and the empty database
/// file (0600) when missing, fsyncing the directory so the new entry survives a crash. With
/// [`SqliteOptions::create_if_missing`] off, a missing file is [`Error::NotFound`] and
/// nothing is created.
pub(crate) fn prepare(path: &Path, opts: &SqliteOptions) -> Result<()> {
    check_path(path)?;
    if !opts.create_if_missing && !exists(path)? {
        return Err(no_store(path));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.exists() {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| io_err(&dir, e))?;
    }
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(file) => {
            file.sync_all().map_err(|e| io_err(path, e))?;
            File::open(&dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| io_err(&dir, e))?;
        }
        // Another opener created it first; the checks below still apply to what is there.
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_err(path, e)),
    }
    // The file may have been swapped for a link between the check and the open.
    check_path(path)?;
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| io_err(path, e))?;
    Ok(())
}

/// Opens a connection to an existing, checked store file with the busy timeout and foreign
/// keys on, still in whatever journal mode the file has; [`configure`] finishes the setup.
///
/// `SQLITE_OPEN_NOFOLLOW` makes SQLite itself refuse a link swapped in after [`prepare`].
pub(crate) fn connect_unconfigured(path: &Path, opts: &SqliteOptions) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_NOFOLLOW;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| open_error(path, e))?;
    conn.busy_timeout(opts.busy_timeout)
        .map_err(|e| open_error(path, e))?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(|e| open_error(path, e))?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(conn)
}

/// Opens a read-only connection to an existing, checked store file, in whatever journal mode
/// the file has: the look that must write nothing (not even the switch to WAL) reads through
/// it.
pub(crate) fn connect_read_only(path: &Path, opts: &SqliteOptions) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_NOFOLLOW;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| open_error(path, e))?;
    conn.busy_timeout(opts.busy_timeout)
        .map_err(|e| open_error(path, e))?;
    Ok(conn)
}

/// Switches a connection to WAL mode with `synchronous=FULL` (a returned success is durable).
/// Switching the mode rewrites the file header, so it runs only once the file is known to be
/// a cairn store.
pub(crate) fn configure(path: &Path, conn: &Connection) -> Result<()> {
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .map_err(|e| open_error(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::backend(
            "sqlite",
            format!("{}: cannot switch to WAL mode (got {mode})", path.display()),
        ));
    }
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(|e| open_error(path, e))?;
    Ok(())
}

/// [`connect_unconfigured`] then [`configure`]: a connection to an existing cairn store.
pub(crate) fn connect(path: &Path, opts: &SqliteOptions) -> Result<Connection> {
    let conn = connect_unconfigured(path, opts)?;
    configure(path, &conn)?;
    Ok(conn)
}

/// Maps an error met while opening, naming the file.
pub(crate) fn open_error(path: &Path, e: rusqlite::Error) -> Error {
    open_error_mapped(path, error::map(e))
}

/// Adds the file's name to an already mapped error met while opening.
pub(crate) fn open_error_mapped(path: &Path, e: Error) -> Error {
    match e {
        Error::Corrupt { detail, source } => Error::Corrupt {
            detail: format!("{}: {detail}", path.display()),
            source,
        },
        Error::Backend {
            backend,
            detail,
            source,
        } => Error::Backend {
            backend,
            detail: format!("{}: {detail}", path.display()),
            source,
        },
        other => other,
    }
}
