//! Store-file safety (DESIGN §6): refuse symlinks, create private files, make creation durable,
//! and open connections with cairn's pragmas. [`admit`] is the one place that runs the checks a
//! file passes before anything is written to it, in order (the store's open and the migrator's
//! lock both go through it); [`Identity`] records the files a store opened, so a write can
//! refuse when they were replaced.

use std::fs::OpenOptions;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use cairn_core::{Error, Result};
use rusqlite::{Connection, OpenFlags};

use crate::config::SqliteOptions;
use crate::error::{self, map};
use crate::sql;

/// What differs between platforms: file modes and directory fsync exist on Unix only.
#[cfg(unix)]
mod platform {
    use std::fs::{DirBuilder, File, OpenOptions};
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    use std::path::Path;

    /// Creates one directory, readable by its owner only (0700).
    pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
        DirBuilder::new().mode(0o700).create(dir)
    }

    /// Options that create a new file readable by its owner only (0600), failing when it
    /// exists.
    pub(crate) fn new_private_file() -> OpenOptions {
        let mut o = OpenOptions::new();
        o.write(true).create_new(true).mode(0o600);
        o
    }

    /// Makes the entries of `dir` durable (a new file or directory in it survives a crash).
    pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

/// Elsewhere (Windows): files and directories take the access rules (ACL) their parent
/// directory passes on, there is no mode to set; and a directory cannot be opened as a file
/// to fsync it, while NTFS journals directory entries itself.
#[cfg(not(unix))]
mod platform {
    use std::fs::{DirBuilder, OpenOptions};
    use std::path::Path;

    pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
        DirBuilder::new().create(dir)
    }

    pub(crate) fn new_private_file() -> OpenOptions {
        let mut o = OpenOptions::new();
        o.write(true).create_new(true);
        o
    }

    pub(crate) fn sync_dir(_dir: &Path) -> std::io::Result<()> {
        Ok(())
    }
}

pub(crate) use platform::{create_private_dir, new_private_file};

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

/// The checks a store file passes before anything is written to it, in order: the path
/// ([`check_path`]); the file, created with its directories when missing ([`prepare`]; with
/// [`SqliteOptions::create_if_missing`] off a missing file is [`Error::NotFound`]); a SQLite
/// database that is empty, cairn's, or shared by opt-in ([`check_not_foreign`]). Returns the
/// connection it looked through, still in the file's own journal mode
/// ([`connect_unconfigured`]; [`configure`] switches it to WAL).
pub(crate) fn admit(path: &Path, opts: &SqliteOptions) -> Result<Connection> {
    prepare(path, opts)?;
    let conn = connect_unconfigured(path, opts)?;
    check_not_foreign(&conn, opts).map_err(|e| open_error_mapped(path, e))?;
    Ok(conn)
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

/// The directory an entry at `path` lives in.
fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Fsyncs `dir` (see `platform::sync_dir`); tests see every directory synced.
fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(test)]
    tests::SYNCED.with(|s| s.borrow_mut().push(dir.to_path_buf()));
    platform::sync_dir(dir).map_err(|e| io_err(dir, e))
}

/// Creates `dir` and each missing ancestor, top down, each 0700, and fsyncs the directory
/// holding each one it created, so that no new entry on the way to the store file can be lost
/// in a crash after the open succeeded.
fn create_dirs(dir: &Path) -> Result<()> {
    let mut missing = Vec::new();
    let mut at = dir;
    loop {
        match std::fs::symlink_metadata(at) {
            Ok(_) => break,
            Err(e) if e.kind() == ErrorKind::NotFound => missing.push(at),
            Err(e) => return Err(io_err(at, e)),
        }
        match at.parent() {
            Some(p) if !p.as_os_str().is_empty() => at = p,
            _ => break,
        }
    }
    for d in missing.into_iter().rev() {
        match create_private_dir(d) {
            Ok(()) => sync_dir(&parent_of(d))?,
            // Another opener created it first, and syncs it.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err(d, e)),
        }
    }
    Ok(())
}

/// Checks `path` ([`check_path`]), then creates its directory and any missing ancestor (0700)
/// and the empty database file (0600) when missing, fsyncing the directory holding each new
/// entry so it survives a crash. With
/// [`SqliteOptions::create_if_missing`] off, a missing file is [`Error::NotFound`] and
/// nothing is created.
pub(crate) fn prepare(path: &Path, opts: &SqliteOptions) -> Result<()> {
    check_path(path)?;
    if !opts.create_if_missing && !exists(path)? {
        return Err(no_store(path));
    }
    let dir = parent_of(path);
    create_dirs(&dir)?;
    match platform::new_private_file().open(path) {
        Ok(file) => {
            file.sync_all().map_err(|e| io_err(path, e))?;
            sync_dir(&dir)?;
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

/// A read connection: configured like the writer, and `query_only`, so that no read path can
/// write even by mistake.
pub(crate) fn connect_reader(path: &Path, opts: &SqliteOptions) -> Result<Connection> {
    let conn = connect(path, opts)?;
    conn.pragma_update(None, "query_only", "ON")
        .map_err(|e| open_error(path, e))?;
    Ok(conn)
}

/// The writer's connection: [`connect`], then every statement the epoch log uses compiled
/// against the file's tables ([`check_schema`]), so a file whose tables have another shape is
/// refused at open rather than on first use.
pub(crate) fn connect_writer(path: &Path, opts: &SqliteOptions) -> Result<Connection> {
    let conn = connect(path, opts)?;
    check_schema(&conn).map_err(|e| open_error_mapped(path, e))?;
    Ok(conn)
}

/// Refuses a database that belongs to something else before anything is written to it: one
/// that holds tables but no migration stamp must be a cairn store from before the runner (all
/// of the epoch log's statements compile against it), or it is not ours, and cairn writes into
/// it only with [`SqliteOptions::share_file_with_application`].
pub(crate) fn check_not_foreign(conn: &Connection, opts: &SqliteOptions) -> Result<()> {
    if opts.share_file_with_application {
        return Ok(());
    }
    let tables: Vec<String> = conn
        .prepare(sql::USER_TABLES)
        .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
        .map_err(map)?;
    if tables.is_empty() || tables.iter().any(|t| t == "cairn_migration_stamp") {
        return Ok(());
    }
    match schema_mismatch(conn) {
        None => Ok(()),
        Some(Error::Backend { source, .. }) => Err(Error::Corrupt {
            detail: "it holds another application's tables and no cairn migration stamp; point \
                     cairn at a file of its own, or opt in with \
                     SqliteOptions::share_file_with_application to keep cairn's tables beside \
                     the application's"
                .into(),
            source,
        }),
        Some(other) => Err(other),
    }
}

/// Compiles every statement the store uses, so a file whose tables exist with another shape
/// (a foreign database) is refused at open rather than on first use.
pub(crate) fn check_schema(conn: &Connection) -> Result<()> {
    match schema_mismatch(conn) {
        None => Ok(()),
        Some(Error::Backend { detail, source, .. }) => Err(Error::Corrupt {
            detail: format!("its tables do not match cairn's epoch log ({detail})"),
            source,
        }),
        Some(other) => Err(other),
    }
}

/// The error of the first statement the store uses that does not compile against the file's
/// tables, if any.
fn schema_mismatch(conn: &Connection) -> Option<Error> {
    [
        sql::PROBE,
        sql::ANTI_JOIN_HEADS,
        sql::EPOCH_SEQ,
        sql::INSERT_EPOCH,
        sql::INSERT_PARENT,
        sql::INSERT_EVENT,
        sql::UPDATE_SOLE_HEAD,
        sql::INSERT_HEAD,
        sql::DELETE_HEAD,
        sql::EPOCH_PARENTS,
        sql::EPOCH_EVENTS,
        sql::EVENTS_AFTER,
        sql::SPACES_AFTER,
    ]
    .into_iter()
    .find_map(|q| conn.prepare_cached(q).err().map(map))
}

/// Where a file lives: its device and inode (Unix). A rename over the path, or a removal and
/// re-creation, gives the path another identity; writing on through the connections opened to
/// the old one would mix this process's writes into another file.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct FileId {
    dev: u64,
    ino: u64,
}

impl std::fmt::Display for FileId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "device {} inode {}", self.dev, self.ino)
    }
}

/// The identity of what sits at `path` (not following a link), `None` when nothing does. On
/// platforms without inodes every file has the same identity: a file in use cannot be renamed
/// over there.
fn file_id(path: &Path) -> Result<Option<FileId>> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(id_of(&m))),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(path, e)),
    }
}

#[cfg(unix)]
fn id_of(m: &std::fs::Metadata) -> FileId {
    use std::os::unix::fs::MetadataExt;
    FileId {
        dev: m.dev(),
        ino: m.ino(),
    }
}

#[cfg(not(unix))]
fn id_of(_m: &std::fs::Metadata) -> FileId {
    FileId { dev: 0, ino: 0 }
}

/// The identities of the store file and its `-wal` file as this instance opened them, checked
/// before every write transaction (one group commit is one check) and by readiness: one
/// `lstat` of each path.
#[derive(Debug)]
pub(crate) struct Identity {
    path: PathBuf,
    wal_path: PathBuf,
    main: FileId,
    /// `None` when no `-wal` file existed once the connections were open (SQLite creates it
    /// with the first read in WAL mode, so only a file system without one leaves it out).
    wal: Option<FileId>,
}

/// What [`Identity::check`] found changed.
pub(crate) enum Changed {
    /// The store file at the path is not the one opened (or is gone).
    Main(String),
    /// The store file is the same but its `-wal` file is gone or another file.
    Wal(String),
}

impl Identity {
    /// Records what sits at `path` and at its `-wal` now (call it once the connections are
    /// open, so both are the files the connections use).
    ///
    /// # Errors
    /// [`Error::StoreReplaced`] when nothing is at `path`; [`Error::Io`] when it cannot be
    /// looked at.
    pub(crate) fn record(path: &Path) -> Result<Self> {
        let main = file_id(path)?.ok_or_else(|| Error::StoreReplaced {
            path: path.display().to_string(),
            detail: "the file was removed while the store was being opened".into(),
        })?;
        let wal_path = sidecar(path, "-wal");
        let wal = file_id(&wal_path)?;
        Ok(Self {
            path: path.to_path_buf(),
            wal_path,
            main,
            wal,
        })
    }

    /// What changed at the paths since [`Identity::record`], if anything.
    ///
    /// # Errors
    /// [`Error::Io`] when a path cannot be looked at (permissions): the check could not be
    /// made, so nothing is written either.
    pub(crate) fn changed(&self) -> Result<Option<Changed>> {
        match file_id(&self.path)? {
            None => {
                return Ok(Some(Changed::Main(format!(
                    "no file is at the path any more; this process opened {}",
                    self.main
                ))))
            }
            Some(now) if now != self.main => {
                return Ok(Some(Changed::Main(format!(
                    "another file ({now}) is at the path; this process opened {}",
                    self.main
                ))))
            }
            Some(_) => {}
        }
        let Some(wal) = self.wal else {
            return Ok(None);
        };
        Ok(match file_id(&self.wal_path)? {
            None => Some(Changed::Wal(format!(
                "its -wal file was removed ({wal} when opened)"
            ))),
            Some(now) if now != wal => Some(Changed::Wal(format!(
                "its -wal file is another file ({now}; {wal} when opened)"
            ))),
            Some(_) => None,
        })
    }

    /// The error for a change [`Identity::changed`] found.
    pub(crate) fn error(&self, changed: &Changed) -> Error {
        let (Changed::Main(detail) | Changed::Wal(detail)) = changed;
        Error::StoreReplaced {
            path: self.path.display().to_string(),
            detail: detail.clone(),
        }
    }

    /// [`Identity::changed`] as a result: `Ok` when both files are the ones opened.
    ///
    /// # Errors
    /// [`Error::StoreReplaced`] or [`Error::Io`], as [`Identity::changed`] finds.
    pub(crate) fn check(&self) -> Result<()> {
        match self.changed()? {
            None => Ok(()),
            Some(c) => Err(self.error(&c)),
        }
    }
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

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::path::PathBuf;

    use super::*;

    thread_local! {
        /// Directories fsynced on this thread.
        pub(super) static SYNCED: RefCell<Vec<PathBuf>> = const { RefCell::new(Vec::new()) };
    }

    #[test]
    fn every_directory_created_is_made_durable_in_its_parent() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let db = root.join("a").join("b").join("store.db");
        SYNCED.with(|s| s.borrow_mut().clear());
        prepare(&db, &SqliteOptions::default()).unwrap();
        let synced = SYNCED.with(|s| std::mem::take(&mut *s.borrow_mut()));
        // `a` is an entry of the root, `b` of `a`, the file of `b`.
        for dir in [root.clone(), root.join("a"), root.join("a").join("b")] {
            assert!(
                synced.contains(&dir),
                "{} not synced: {synced:?}",
                dir.display()
            );
        }

        // Nothing new, nothing synced.
        prepare(&db, &SqliteOptions::default()).unwrap();
        assert!(SYNCED.with(|s| s.borrow().is_empty()));
    }
}
