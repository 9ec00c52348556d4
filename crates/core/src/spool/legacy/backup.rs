//! Copying a legacy directory aside before it is imported, and keeping a quarantine's records.
//!
//! The backup directory's name is predictable (`<DIR>.cairn-backup-<16 hex>`), so anyone who
//! can write next to `DIR` could plant a symbolic link there, at the directory or at one of
//! its files. Nothing here follows one: the directory is opened without following a link and
//! every file in it is created create-exclusive relative to that opened directory, or, when
//! it exists from an earlier run, opened without following a link and compared byte for byte
//! with what would be written — never written into.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::error::LegacyError;
use super::files::{backup_files, open_file};
use super::types::{ImportPlan, QuarantinedRecord};

/// The folder inside a backup holding a quarantine's records and report.
pub const QUARANTINE_DIR: &str = "quarantine";
/// The quarantine's report: one line per record left out, naming its file, line, place,
/// reason and the copy of its bytes.
pub const QUARANTINE_REPORT: &str = "report.txt";

/// Where [`back_up`] put the copies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backup {
    /// The backup directory.
    pub dir: PathBuf,
    /// The quarantine's report, when records were left out.
    pub quarantine_report: Option<PathBuf>,
}

/// The backup directory of `dir` for `plan`: `<dir>.cairn-backup-<first 16 hex digits of the
/// fingerprint>`, beside `dir` (pure).
pub fn backup_dir(dir: &Path, plan: &ImportPlan) -> PathBuf {
    let fp: String = plan.source.fingerprint[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let name = dir
        .file_name()
        .map_or_else(|| "legacy".into(), |n| n.to_string_lossy().into_owned());
    let parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    parent.join(format!("{name}.cairn-backup-{fp}"))
}

/// The name of a quarantined record's copy in [`QUARANTINE_DIR`]: `runs.wal.line-7`.
pub fn quarantine_name(q: &QuarantinedRecord) -> String {
    format!("{}.line-{}", q.file, q.line)
}

/// Copies the files of [`backup_files`] present in `dir` into [`backup_dir`], each synced;
/// for a partial import, also each quarantined record's bytes, verbatim, and a report, in
/// [`QUARANTINE_DIR`]. A backup left by an earlier run of the same import is verified byte
/// for byte, never written into.
///
/// # Errors
/// [`LegacyError::UnsafeBackup`] when the backup directory or a file in it is a symbolic
/// link or not what it should be, or an existing copy differs from what it would hold;
/// [`LegacyError::UnsafePath`] for a source file that is a link; [`LegacyError::Io`].
pub fn back_up(dir: &Path, plan: &ImportPlan) -> Result<Backup, LegacyError> {
    let path = backup_dir(dir, plan);
    let backup = platform::Dir::create(&path)?;
    for file in backup_files(dir) {
        let Some(name) = file.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(source) = open_file(dir, name)? else {
            continue;
        };
        backup.put(name, source)?;
    }
    let quarantined = &plan.report.quarantined;
    let mut quarantine_report = None;
    if !quarantined.is_empty() {
        let q = backup.subdir(QUARANTINE_DIR)?;
        let mut report = format!(
            "# {} record(s) left out of {} by `cairn import --quarantine`; the import was \
             partial. One line each: file, line, length and offset, reason, and the copy of \
             its bytes in this folder.\n",
            quarantined.len(),
            plan.source.description,
        );
        for record in quarantined {
            // From the copy just made or verified: the bytes the backup keeps.
            let mut copy = backup.open(record.file)?;
            copy.seek(SeekFrom::Start(record.offset))
                .map_err(|e| backup.io(record.file, e))?;
            let name = quarantine_name(record);
            q.put(&name, copy.take(record.bytes))?;
            report.push_str(&format!("{record} -> {name}\n"));
        }
        q.put(QUARANTINE_REPORT, report.as_bytes())?;
        q.sync()?;
        quarantine_report = Some(path.join(QUARANTINE_DIR).join(QUARANTINE_REPORT));
    }
    backup.sync()?;
    Ok(Backup {
        dir: path,
        quarantine_report,
    })
}

/// Whether two streams hold the same bytes.
fn same_bytes(mut a: impl Read, mut b: impl Read) -> std::io::Result<bool> {
    let (mut x, mut y) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let n = read_full(&mut a, &mut x)?;
        let m = read_full(&mut b, &mut y)?;
        if n != m || x[..n] != y[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

/// Reads until `buf` is full or the stream ends.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The temporary name a copy of `name` is written under by process `pid` before it is renamed
/// into place: hidden, and never the name of a file the backup keeps.
fn partial_name(name: &str, pid: u32) -> String {
    format!(".{name}.cairn-partial-{pid}")
}

/// Whether `file` is a temporary of `name` ([`partial_name`]) left by any process.
fn is_partial_of(file: &str, name: &str) -> bool {
    file.strip_prefix('.')
        .and_then(|f| f.strip_prefix(name))
        .and_then(|f| f.strip_prefix(".cairn-partial-"))
        .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(unix)]
mod platform {
    //! Relative to an opened directory (`openat`), so that nothing is resolved twice.

    use std::fs::File;
    use std::io::{Read, Write};
    use std::os::fd::OwnedFd;
    use std::path::{Path, PathBuf};

    use rustix::fs::{
        fstat, mkdirat, openat, statat, unlinkat, AtFlags, FileType, Mode, OFlags, CWD,
    };
    use rustix::io::Errno;

    use super::{is_partial_of, partial_name, same_bytes, LegacyError};

    /// An opened backup directory.
    pub(super) struct Dir {
        fd: OwnedFd,
        path: PathBuf,
    }

    impl Dir {
        /// Creates `path` (0700) or takes the existing one; a link there is refused.
        pub(super) fn create(path: &Path) -> Result<Self, LegacyError> {
            Self::make(&CWD, path, path)
        }

        fn make(
            at: &impl std::os::fd::AsFd,
            name: &Path,
            path: &Path,
        ) -> Result<Self, LegacyError> {
            let io = |e: Errno| LegacyError::Io {
                path: path.to_path_buf(),
                source: e.into(),
            };
            match mkdirat(at, name, Mode::RWXU) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(io(e)),
            }
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let fd = match openat(at, name, flags, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    return Err(LegacyError::UnsafeBackup {
                        path: path.to_path_buf(),
                        reason: "it is a symbolic link or not a directory; the backup is never \
                                 written through one: remove it and import again"
                            .into(),
                    })
                }
                Err(e) => return Err(io(e)),
            };
            Ok(Self {
                fd,
                path: path.to_path_buf(),
            })
        }

        /// Creates or takes the directory `name` inside this one.
        pub(super) fn subdir(&self, name: &str) -> Result<Self, LegacyError> {
            Self::make(&self.fd, Path::new(name), &self.path.join(name))
        }

        pub(super) fn io(&self, name: &str, e: std::io::Error) -> LegacyError {
            LegacyError::Io {
                path: self.path.join(name),
                source: e,
            }
        }

        /// Opens the regular file `name` for reading, never through a link.
        pub(super) fn open(&self, name: &str) -> Result<File, LegacyError> {
            let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
            let fd = openat(&self.fd, name, flags, Mode::empty()).map_err(|e| match e {
                Errno::LOOP => self.unsafe_file(name, "it is a symbolic link"),
                e => self.io(name, e.into()),
            })?;
            let st = fstat(&fd).map_err(|e| self.io(name, e.into()))?;
            if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
                return Err(self.unsafe_file(name, "it is not a regular file"));
            }
            Ok(File::from(fd))
        }

        fn unsafe_file(&self, name: &str, what: &str) -> LegacyError {
            LegacyError::UnsafeBackup {
                path: self.path.join(name),
                reason: format!(
                    "{what}; the backup is never written through one: remove it and import \
                     again"
                ),
            }
        }

        /// Writes `content` as the new file `name` (0600, synced), or, when `name` exists,
        /// checks that it holds exactly `content`. The copy is written under a temporary name
        /// ([`partial_name`]) and renamed into place once synced, so `name` never holds a
        /// partial copy; a temporary left by an interrupted run (a full disk, a kill) is
        /// removed first.
        pub(super) fn put(&self, name: &str, mut content: impl Read) -> Result<(), LegacyError> {
            match statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(_) => return self.verify(name, content),
                Err(Errno::NOENT) => {}
                Err(e) => return Err(self.io(name, e.into())),
            }
            self.remove_partials(name)?;
            let tmp = partial_name(name, std::process::id());
            let flags =
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let fd = openat(&self.fd, &tmp, flags, Mode::RUSR | Mode::WUSR)
                .map_err(|e| self.io(&tmp, e.into()))?;
            let mut f = File::from(fd);
            let written = std::io::copy(&mut content, &mut f)
                .and_then(|_| f.flush())
                .and_then(|()| f.sync_all());
            drop(f);
            if let Err(e) = written {
                // Frees what the partial copy took (it may be the disk that is full).
                let _ = unlinkat(&self.fd, &tmp, AtFlags::empty());
                return Err(self.io(name, e));
            }
            match self.rename_new(&tmp, name) {
                Ok(()) => Ok(()),
                Err(e) => {
                    let _ = unlinkat(&self.fd, &tmp, AtFlags::empty());
                    match e {
                        // Another run of the same import put it there meanwhile; the next
                        // run compares it.
                        Errno::EXIST => Err(LegacyError::UnsafeBackup {
                            path: self.path.join(name),
                            reason: "it appeared while this run copied it (another import of \
                                     the same directory?); it was left as it is: import again"
                                .into(),
                        }),
                        e => Err(self.io(name, e.into())),
                    }
                }
            }
        }

        /// Renames `from` to `to`, which must not exist.
        fn rename_new(&self, from: &str, to: &str) -> Result<(), Errno> {
            #[cfg(any(target_os = "linux", target_os = "android"))]
            match rustix::fs::renameat_with(
                &self.fd,
                from,
                &self.fd,
                to,
                rustix::fs::RenameFlags::NOREPLACE,
            ) {
                // A file system without it: a link refuses an existing name as well.
                Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {}
                other => return other,
            }
            rustix::fs::linkat(&self.fd, from, &self.fd, to, AtFlags::empty())?;
            unlinkat(&self.fd, from, AtFlags::empty())
        }

        /// Removes the temporaries of `name` that interrupted runs left.
        fn remove_partials(&self, name: &str) -> Result<(), LegacyError> {
            let entries =
                rustix::fs::Dir::read_from(&self.fd).map_err(|e| self.io(name, e.into()))?;
            for entry in entries {
                let entry = entry.map_err(|e| self.io(name, e.into()))?;
                let Ok(file) = entry.file_name().to_str() else {
                    continue;
                };
                if is_partial_of(file, name) {
                    match unlinkat(&self.fd, file, AtFlags::empty()) {
                        Ok(()) | Err(Errno::NOENT) => {}
                        Err(e) => return Err(self.io(file, e.into())),
                    }
                }
            }
            Ok(())
        }

        /// Checks that the existing file `name` holds exactly `content`.
        fn verify(&self, name: &str, content: impl Read) -> Result<(), LegacyError> {
            let existing = self.open(name)?;
            if same_bytes(existing, content).map_err(|e| self.io(name, e))? {
                Ok(())
            } else {
                Err(LegacyError::UnsafeBackup {
                    path: self.path.join(name),
                    reason: "it exists and differs from the file it backs up; it was left as \
                             it is: move the backup directory aside and import again"
                        .into(),
                })
            }
        }

        /// Makes the directory's entries durable.
        pub(super) fn sync(&self) -> Result<(), LegacyError> {
            rustix::fs::fsync(&self.fd).map_err(|e| LegacyError::Io {
                path: self.path.clone(),
                source: e.into(),
            })
        }
    }
}

// Never compiled on the unix hosts the mutation scope runs on: its mutants are listed as
// equivalents in mutants/equivalent.toml (cargo-mutants cannot be told to skip a module by
// a cfg without a dependency on the `mutants` crate).
#[cfg(not(unix))]
mod platform {
    //! By path: a link is refused by looking before each open, and files are created
    //! create-exclusive.

    use std::fs::{File, OpenOptions};
    use std::io::{Read, Write};
    use std::path::{Path, PathBuf};

    use super::{is_partial_of, partial_name, same_bytes, LegacyError};

    pub(super) struct Dir {
        path: PathBuf,
    }

    fn refuse_link(path: &Path, dir: bool) -> Result<(), LegacyError> {
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() || m.is_dir() != dir => {
                Err(LegacyError::UnsafeBackup {
                    path: path.to_path_buf(),
                    reason: "it is a symbolic link or not what the backup holds there; the \
                             backup is never written through one: remove it and import again"
                        .into(),
                })
            }
            _ => Ok(()),
        }
    }

    impl Dir {
        pub(super) fn create(path: &Path) -> Result<Self, LegacyError> {
            refuse_link(path, true)?;
            match std::fs::create_dir(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(source) => {
                    return Err(LegacyError::Io {
                        path: path.to_path_buf(),
                        source,
                    })
                }
            }
            refuse_link(path, true)?;
            Ok(Self {
                path: path.to_path_buf(),
            })
        }

        pub(super) fn subdir(&self, name: &str) -> Result<Self, LegacyError> {
            Self::create(&self.path.join(name))
        }

        pub(super) fn io(&self, name: &str, e: std::io::Error) -> LegacyError {
            LegacyError::Io {
                path: self.path.join(name),
                source: e,
            }
        }

        pub(super) fn open(&self, name: &str) -> Result<File, LegacyError> {
            let path = self.path.join(name);
            refuse_link(&path, false)?;
            File::open(&path).map_err(|e| self.io(name, e))
        }

        pub(super) fn put(&self, name: &str, mut content: impl Read) -> Result<(), LegacyError> {
            let path = self.path.join(name);
            refuse_link(&path, false)?;
            if std::fs::symlink_metadata(&path).is_ok() {
                let existing = self.open(name)?;
                return if same_bytes(existing, content).map_err(|e| self.io(name, e))? {
                    Ok(())
                } else {
                    Err(LegacyError::UnsafeBackup {
                        path,
                        reason: "it exists and differs from the file it backs up; it was left \
                                 as it is: move the backup directory aside and import again"
                            .into(),
                    })
                };
            }
            for entry in std::fs::read_dir(&self.path).map_err(|e| self.io(name, e))? {
                let entry = entry.map_err(|e| self.io(name, e))?;
                if entry
                    .file_name()
                    .to_str()
                    .is_some_and(|f| is_partial_of(f, name))
                {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
            let tmp = self.path.join(partial_name(name, std::process::id()));
            let written = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)
                .and_then(|mut f| {
                    std::io::copy(&mut content, &mut f)?;
                    f.flush()?;
                    f.sync_all()
                });
            // A link refuses an existing name, as the rename on unix does.
            let placed = written.and_then(|()| std::fs::hard_link(&tmp, &path));
            let _ = std::fs::remove_file(&tmp);
            placed.map_err(|e| self.io(name, e))
        }

        pub(super) fn sync(&self) -> Result<(), LegacyError> {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Cursor, ErrorKind, Read};

    use super::same_bytes;

    /// Reads at most `step` bytes a call, after failing once with `fail` (if any).
    struct Awkward {
        inner: Cursor<Vec<u8>>,
        step: usize,
        fail: Option<ErrorKind>,
    }

    impl Awkward {
        fn new(bytes: &[u8], step: usize, fail: Option<ErrorKind>) -> Self {
            Self {
                inner: Cursor::new(bytes.to_vec()),
                step,
                fail,
            }
        }
    }

    impl Read for Awkward {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if let Some(kind) = self.fail.take() {
                return Err(kind.into());
            }
            let n = buf.len().min(self.step);
            self.inner.read(&mut buf[..n])
        }
    }

    /// Serves its bytes, but first runs a child process that lists the descriptors it
    /// inherited (their targets).
    #[cfg(target_os = "linux")]
    struct SpawnsAChild {
        bytes: Cursor<Vec<u8>>,
        inherited: Option<String>,
    }

    #[cfg(target_os = "linux")]
    impl Read for SpawnsAChild {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.inherited.is_none() {
                let out = std::process::Command::new("sh")
                    .arg("-c")
                    .arg("for f in /proc/$$/fd/*; do readlink \"$f\"; done")
                    .output()?;
                self.inherited = Some(String::from_utf8_lossy(&out.stdout).into_owned());
            }
            self.bytes.read(buf)
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_copy_being_written_is_not_inherited_by_a_child_process() {
        let root = crate::spool::legacy::tests::temp_dir("cloexec").join("backup");
        let dir = super::platform::Dir::create(&root).unwrap();
        let mut content = SpawnsAChild {
            bytes: Cursor::new(b"copied".to_vec()),
            inherited: None,
        };
        dir.put("copy", &mut content).unwrap();
        let inherited = content.inherited.unwrap();
        assert!(
            inherited
                .lines()
                .any(|l| l.starts_with("/dev/") || l.starts_with("pipe:")),
            "the listing works: {inherited}"
        );
        assert!(
            !inherited.contains(&*root.to_string_lossy()),
            "a child started during the copy holds the backup open: {inherited}"
        );
        assert_eq!(std::fs::read(root.join("copy")).unwrap(), b"copied");
        std::fs::remove_dir_all(root.parent().unwrap()).unwrap();
    }

    /// Serves `good` bytes, then fails as a full disk does.
    struct FullDisk(Cursor<Vec<u8>>);

    impl Read for FullDisk {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            match self.0.read(buf)? {
                0 => Err(ErrorKind::StorageFull.into()),
                n => Ok(n),
            }
        }
    }

    #[test]
    fn a_copy_that_fails_midway_leaves_nothing_and_the_next_one_completes() {
        let root = crate::spool::legacy::tests::temp_dir("fullcopy").join("backup");
        let dir = super::platform::Dir::create(&root).unwrap();
        let whole: Vec<u8> = (0..100_000u32).map(|i| (i % 241) as u8).collect();
        let e = dir
            .put(
                "gate.spool",
                FullDisk(Cursor::new(whole[..30_000].to_vec())),
            )
            .unwrap_err();
        assert!(
            matches!(&e, super::LegacyError::Io { source, .. } if source.kind() == ErrorKind::StorageFull),
            "{e}"
        );
        // Neither a truncated copy under its name nor a temporary is left behind.
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
        dir.put("gate.spool", Cursor::new(whole.clone())).unwrap();
        assert_eq!(std::fs::read(root.join("gate.spool")).unwrap(), whole);
        std::fs::remove_dir_all(root.parent().unwrap()).unwrap();
    }

    #[test]
    fn temporaries_are_told_from_the_files_a_backup_keeps() {
        let tmp = super::partial_name("gate.spool", 77);
        assert_eq!(tmp, ".gate.spool.cairn-partial-77");
        assert!(super::is_partial_of(&tmp, "gate.spool"));
        for other in [
            "gate.spool",
            ".gate.spool.cairn-partial-",
            ".gate.spool.cairn-partial-7x",
            ".runs.wal.cairn-partial-77",
            ".gate.spool.extra.cairn-partial-77",
        ] {
            assert!(!super::is_partial_of(other, "gate.spool"), "{other}");
        }
    }

    #[test]
    fn same_bytes_compares_whole_streams() {
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let same = |a: &[u8], b: &[u8]| same_bytes(Cursor::new(a), Cursor::new(b)).unwrap();
        assert!(same(&big, &big));
        assert!(same(b"", b""));
        // One byte different past the first 64 KiB chunk, the lengths equal.
        let mut late = big.clone();
        late[150_000] ^= 1;
        assert!(!same(&big, &late));
        // One byte different in the first chunk.
        let mut early = big.clone();
        early[10] ^= 1;
        assert!(!same(&big, &early));
        // A prefix, and a stream one byte longer.
        assert!(!same(&big, &big[..big.len() - 1]));
        assert!(!same(&big[..big.len() - 1], &big));
        assert!(!same(b"", b"x"));
    }

    #[test]
    fn same_bytes_reads_past_short_reads_and_interruptions() {
        let big: Vec<u8> = (0..100_000u32).map(|i| (i % 13) as u8).collect();
        // Short reads (a pipe, a network file system) are not a difference.
        let a = Awkward::new(&big, 7, None);
        assert!(same_bytes(a, Cursor::new(&big)).unwrap());
        // An interrupted read is retried.
        let a = Awkward::new(&big, 4096, Some(ErrorKind::Interrupted));
        assert!(same_bytes(a, Cursor::new(&big)).unwrap());
        // Any other error is the caller's: never taken for "the same" nor "different".
        let a = Awkward::new(&big, 4096, Some(ErrorKind::PermissionDenied));
        let e = same_bytes(a, Cursor::new(&big)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PermissionDenied);
    }
}
