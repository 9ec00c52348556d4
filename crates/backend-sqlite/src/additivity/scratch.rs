//! The throwaway stores' directories: a check claims its directory with an advisory lock on a
//! sibling lock file for as long as it runs, a drop guard removes both when the check ends or
//! is abandoned (a panic, a cancelled future), and every check first removes the directories
//! of earlier checks whose lock nobody holds any more (a killed process: the kill released the
//! lock).
//!
//! Protocol, in the temporary directory: `cairn_additivity_<16 hex>.lock` is created and
//! locked *before* the directory `cairn_additivity_<16 hex>` is created, and removed only after
//! it; so a directory without its lock file is a leftover, and a sweeper holds the lock while it
//! removes a directory. A creator that finds its lock file gone once it holds the lock (a sweep
//! took it for a leftover in between) starts again under a new name.

use std::fs::File;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use cairn_core::{scratch_name, Error, Result};

use crate::files;

/// The prefix of every scratch directory name (`cairn_additivity_` + 16 hex digits).
const PREFIX: &str = "cairn_additivity";

/// The suffix of a scratch directory's lock file, next to it.
const LOCK_SUFFIX: &str = ".lock";

/// Whether `name` is exactly a scratch directory's name.
fn is_scratch_name(name: &str) -> bool {
    name.strip_prefix(PREFIX)
        .and_then(|rest| rest.strip_prefix('_'))
        .is_some_and(|hex| {
            hex.len() == 16
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
}

fn lock_path(dir: &Path) -> PathBuf {
    let mut name = dir.as_os_str().to_owned();
    name.push(LOCK_SUFFIX);
    PathBuf::from(name)
}

/// Takes the lock of an open lock file without waiting: `Ok(false)` when another holder has it.
fn try_lock(file: &File) -> std::io::Result<bool> {
    match fs4::FileExt::try_lock(file) {
        Ok(()) => Ok(true),
        Err(fs4::TryLockError::WouldBlock) => Ok(false),
        Err(fs4::TryLockError::Error(e)) => Err(e),
    }
}

/// A private directory for one check's throwaway store, claimed by a lock for as long as the
/// value lives; dropping it removes the directory and its lock file.
pub(super) struct Scratch {
    dir: PathBuf,
    lock: PathBuf,
    /// Holds the claim; closing it releases the lock.
    _held: File,
}

impl Scratch {
    /// Removes unclaimed leftovers of earlier checks from the temporary directory, then claims
    /// a new scratch directory there.
    ///
    /// # Errors
    /// [`Error::Io`] when the directory or its lock file cannot be created or locked.
    pub(super) fn new() -> Result<Self> {
        Self::new_in(&std::env::temp_dir())
    }

    /// As [`Scratch::new`], in `base`.
    pub(super) fn new_in(base: &Path) -> Result<Self> {
        let io = |path: &Path, source| Error::Io {
            path: path.display().to_string(),
            source,
        };
        loop {
            let dir = base.join(scratch_name(PREFIX));
            let lock = lock_path(&dir);
            let held = match files::new_private_file().open(&lock) {
                Ok(f) => f,
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io(base, e)),
            };
            if !try_lock(&held).map_err(|e| io(&lock, e))? || !lock.exists() {
                // A sweep took the new lock file for a leftover: start again.
                continue;
            }
            sweep(base);
            match files::create_private_dir(&dir) {
                Ok(()) => {
                    return Ok(Self {
                        dir,
                        lock,
                        _held: held,
                    })
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    let _ = std::fs::remove_file(&lock);
                }
                Err(e) => {
                    let _ = std::fs::remove_file(&lock);
                    return Err(io(base, e));
                }
            }
        }
    }

    /// The directory.
    pub(super) fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // A leftover holds only synthetic data, and the next check removes it; failing to
        // remove it must not turn a verdict into an error. The lock file goes last, while the
        // lock is still held.
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(&self.lock);
    }
}

/// Removes from `base` every scratch directory and lock file of a check that no longer runs
/// (see [`walk_dead`]). Only entries of this user ([`ours`]) are touched. Best effort: an entry
/// that cannot be read or removed is left for a later check.
fn sweep(base: &Path) {
    walk_dead(base, ours, |dir, lock| {
        let _ = std::fs::remove_dir_all(dir);
        if let Some(lock) = lock {
            let _ = std::fs::remove_file(lock);
        }
    });
}

/// The scratch directories in `base` that no running check owns, by name, sorted: what
/// [`sweep`] would remove — this user's only ([`ours`]): another user's leftovers in a shared
/// temporary directory are theirs to remove, and this user's check cannot — listed without
/// removing or creating anything. `cairn doctor` reports them (through the SQLite backend's
/// diagnostics). A lock file left without its directory is not listed: it holds no store.
pub(crate) fn leftovers(base: &Path) -> Vec<String> {
    let mut found = Vec::new();
    walk_dead(base, ours, |dir, _| {
        let is_dir = std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir());
        if let (true, Some(name)) = (is_dir, dir.file_name().and_then(|n| n.to_str())) {
            found.push(name.to_owned());
        }
    });
    found.sort();
    found
}

/// The rule of what a dead check left, in one place: calls `dead(dir, lock)` for every scratch
/// entry of `base` that no running check owns — a lock file whose lock can be taken (`lock` is
/// `Some`, and its lock is held during the call, so that no check can claim it meanwhile), and a
/// directory without a lock file (`lock` is `None`). Only entries that `keep` accepts and that
/// are what their name says (a real directory, a plain file; never a symlink) are considered;
/// an entry that cannot be read is skipped.
fn walk_dead(
    base: &Path,
    keep: impl Fn(&std::fs::Metadata) -> bool,
    mut dead: impl FnMut(&Path, Option<&Path>),
) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let (stem, is_lock) = match name.strip_suffix(LOCK_SUFFIX) {
            Some(stem) => (stem, true),
            None => (name, false),
        };
        if !is_scratch_name(stem) {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        let right_kind = if is_lock {
            meta.is_file()
        } else {
            meta.is_dir()
        };
        if !right_kind || !keep(&meta) {
            continue;
        }
        let dir = base.join(stem);
        let lock = lock_path(&dir);
        if is_lock {
            let Ok(file) = File::open(&lock) else {
                continue;
            };
            if try_lock(&file).unwrap_or(false) {
                dead(&dir, Some(&lock));
            }
            // Closing the file releases the lock.
        } else if std::fs::symlink_metadata(&lock).is_err_and(|e| e.kind() == ErrorKind::NotFound) {
            dead(&dir, None);
        }
    }
}

/// Whether the entry belongs to this process's effective user (who owns what its checks
/// create): the only entries [`sweep`] removes and [`leftovers`] lists.
#[cfg(unix)]
fn ours(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    meta.uid() == rustix::process::geteuid().as_raw()
}

/// Elsewhere the temporary directory is the user's own.
#[cfg(not(unix))]
fn ours(_meta: &std::fs::Metadata) -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory as a killed check leaves it: the directory with a store in it and
    /// its lock file, unlocked.
    fn leftover(base: &Path) -> (PathBuf, PathBuf) {
        let dir = base.join(scratch_name(PREFIX));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("check.db"), b"synthetic").unwrap();
        let lock = lock_path(&dir);
        std::fs::write(&lock, b"").unwrap();
        (dir, lock)
    }

    #[test]
    fn names_are_matched_exactly() {
        assert!(is_scratch_name(&scratch_name(PREFIX)));
        assert!(!is_scratch_name("cairn_additivity_0123456789abcdeg"));
        assert!(!is_scratch_name("cairn_additivity_0123456789abcdef0"));
        assert!(!is_scratch_name("cairn_additivity_0123456789ABCDEF"));
        assert!(!is_scratch_name("cairn_additivityx0123456789abcdef"));
        assert!(!is_scratch_name("my_cairn_additivity_0123456789abcdef"));
    }

    #[test]
    fn a_killed_checks_leftovers_go_and_everything_else_stays() {
        let base = tempfile::tempdir().unwrap();
        let (dead_dir, dead_lock) = leftover(base.path());
        // Killed after the directory's lock file was removed, or by a build without locks.
        let (lockless, lock) = leftover(base.path());
        std::fs::remove_file(lock).unwrap();
        // Killed before its directory was created.
        let (_, orphan_lock) = leftover(base.path());
        let unrelated = base.path().join("cairn_additivity_notes");
        std::fs::create_dir(&unrelated).unwrap();

        let scratch = Scratch::new_in(base.path()).unwrap();
        for gone in [&dead_dir, &dead_lock, &lockless, &orphan_lock] {
            assert!(!gone.exists(), "{} is still there", gone.display());
        }
        assert!(
            unrelated.exists(),
            "a directory that is no scratch directory went"
        );
        assert!(scratch.path().is_dir());
        assert!(lock_path(scratch.path()).is_file());
        let path = scratch.path().to_owned();
        drop(scratch);
        assert!(
            !path.exists() && !lock_path(&path).exists(),
            "drop removes both"
        );
    }

    #[test]
    fn a_live_checks_directory_survives_another_checks_sweep() {
        let base = tempfile::tempdir().unwrap();
        let live = Scratch::new_in(base.path()).unwrap();
        std::fs::write(live.path().join("check.db"), b"in use").unwrap();
        let other = Scratch::new_in(base.path()).unwrap();
        assert!(live.path().join("check.db").exists());
        assert!(lock_path(live.path()).exists());
        drop(other);
        assert!(live.path().join("check.db").exists());
    }

    #[test]
    fn leftovers_lists_what_a_sweep_removes_and_removes_nothing() {
        let base = tempfile::tempdir().unwrap();
        // First: a new check sweeps what is already there.
        let live = Scratch::new_in(base.path()).unwrap();
        let (dead_dir, dead_lock) = leftover(base.path());
        let (lockless, lock) = leftover(base.path());
        std::fs::remove_file(lock).unwrap();
        let (orphan_dir, orphan_lock) = leftover(base.path());
        std::fs::remove_dir_all(orphan_dir).unwrap();
        std::fs::create_dir(base.path().join("cairn_additivity_notes")).unwrap();

        let name = |p: &Path| p.file_name().unwrap().to_str().unwrap().to_owned();
        let mut expected = vec![name(&dead_dir), name(&lockless)];
        expected.sort();
        assert_eq!(leftovers(base.path()), expected);
        for kept in [&dead_dir, &dead_lock, &lockless, &orphan_lock] {
            assert!(kept.exists(), "listing removed {}", kept.display());
        }
        assert!(live.path().is_dir());
        drop(live);
        assert_eq!(
            leftovers(&base.path().join("no_such_directory")),
            Vec::<String>::new()
        );
    }

    /// Another user's leftovers in a shared temporary directory are neither listed nor swept:
    /// this user's check could not remove them. As root, a leftover handed to another uid shows
    /// it end to end; otherwise the rule itself is checked on `/` (root's, not this user's).
    #[cfg(unix)]
    #[test]
    fn another_users_leftovers_are_neither_listed_nor_swept() {
        use std::os::unix::fs::MetadataExt;
        let base = tempfile::tempdir().unwrap();
        let (mine, _) = leftover(base.path());
        let (theirs, their_lock) = leftover(base.path());
        let other = 4242;
        match std::os::unix::fs::chown(&theirs, Some(other), None) {
            Ok(()) => {
                std::os::unix::fs::chown(&their_lock, Some(other), None).unwrap();
                let name = |p: &Path| p.file_name().unwrap().to_str().unwrap().to_owned();
                assert_eq!(leftovers(base.path()), vec![name(&mine)]);
                let _scratch = Scratch::new_in(base.path()).unwrap();
                assert!(!mine.exists(), "this user's leftover is swept");
                assert!(theirs.join("check.db").exists(), "theirs is left alone");
                assert!(their_lock.exists());
            }
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
                let root = std::fs::metadata("/").unwrap();
                assert_ne!(root.uid(), rustix::process::geteuid().as_raw());
                assert!(!ours(&root));
                assert!(ours(&std::fs::metadata(&mine).unwrap()));
            }
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_with_a_scratch_name_is_not_followed() {
        let base = tempfile::tempdir().unwrap();
        let victim = tempfile::tempdir().unwrap();
        std::fs::write(victim.path().join("keep"), b"x").unwrap();
        let link = base.path().join(scratch_name(PREFIX));
        std::os::unix::fs::symlink(victim.path(), &link).unwrap();
        let _scratch = Scratch::new_in(base.path()).unwrap();
        assert!(victim.path().join("keep").exists());
        assert!(
            std::fs::symlink_metadata(&link).is_ok(),
            "not ours to judge"
        );
    }
}
