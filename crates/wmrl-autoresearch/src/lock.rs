//! What a live wmrl process owns, marked by `flock(2)` locks: a reward
//! service's state file ([`FileLock`]) and a work root for the sandbox's
//! working directories ([`WorkRoot`]). A second process is refused instead
//! of silently sharing, and what a dead process left behind (kill -9 leaves
//! its sandbox directories) is recognised by its free lock and removed by
//! the next process to start. The kernel drops a flock lock when its owner
//! dies, however it dies, so no pid is trusted.
//!
//! This module must never remove anything whose lock a live process holds.

#![allow(unsafe_code)] // flock(2) and geteuid(2) through libc

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::{Error, Result, io_err};

/// Try the exclusive lock on `f`: `Ok(false)` when another open file
/// description holds it (another process, or another open of this one).
fn try_flock(f: &File) -> std::io::Result<bool> {
    // SAFETY: flock on a descriptor this File owns; no memory is shared.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// An exclusive lock on a file, held until dropped (or the process dies).
/// The file holds the holder's pid, for messages only.
#[derive(Debug)]
pub struct FileLock {
    _file: File,
    path: PathBuf,
}

impl FileLock {
    /// Take the lock on `path` (created if missing; never removed, so that
    /// two processes always lock the same file), or `Ok(None)` when a live
    /// holder has it.
    pub fn try_take(path: &Path) -> Result<Option<Self>> {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io_err(path))?;
        if !try_flock(&file).map_err(io_err(path))? {
            return Ok(None);
        }
        let pid = std::process::id().to_string();
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(pid.as_bytes()))
            .map_err(io_err(path))?;
        Ok(Some(Self {
            _file: file,
            path: path.to_path_buf(),
        }))
    }

    /// What the lock file says about its holder ("pid N"), for a message
    /// to whoever was refused.
    pub fn holder(path: &Path) -> String {
        let mut s = String::new();
        let read = File::open(path).and_then(|mut f| f.read_to_string(&mut s));
        match read {
            Ok(_) if !s.trim().is_empty() => format!("pid {}", s.trim()),
            _ => "pid unknown".into(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A directory for one process's sandbox working directories
/// ([`crate::SandboxConfig::work_root`]): `<base>/<label>-<pid>-<n>/`, with
/// its lock `<base>/<label>-<pid>-<n>.lock` held while the process lives.
/// Removed with its contents when dropped; after a kill, by the next claim
/// under the same base.
#[derive(Debug)]
pub struct WorkRoot {
    dir: PathBuf,
    lock_path: PathBuf,
    _lock: File,
}

static NEXT_CLAIM: AtomicU32 = AtomicU32::new(0);

impl WorkRoot {
    /// The default base: `wmrl-work-<euid>` in the system temp dir (where
    /// the sandbox's per-run uids can reach a working directory; a base
    /// under a private home would not be traversable by them).
    pub fn default_base() -> PathBuf {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let uid = unsafe { libc::geteuid() };
        std::env::temp_dir().join(format!("wmrl-work-{uid}"))
    }

    /// Remove every work root under `base` whose owner is dead, then claim
    /// a new one labelled `label`. Returns it and how many leftovers were
    /// removed.
    pub fn claim(base: &Path, label: &str) -> Result<(Self, usize)> {
        ensure_base(base)?;
        let removed = sweep(base)?;
        for _ in 0..3 {
            let n = NEXT_CLAIM.fetch_add(1, Ordering::Relaxed);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let name = format!("{label}-{}-{n}-{nanos:x}", std::process::id());
            // Locked under a name the sweep ignores, then renamed: a sweep
            // never sees an unlocked lock of a live owner.
            let tmp = base.join(format!(".{name}.lock.tmp"));
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&tmp)
                .map_err(io_err(&tmp))?;
            if !try_flock(&file).map_err(io_err(&tmp))? {
                continue;
            }
            let lock_path = base.join(format!("{name}.lock"));
            match std::fs::rename(&tmp, &lock_path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(&lock_path)(e)),
            }
            let dir = base.join(&name);
            std::fs::DirBuilder::new()
                .mode(0o755)
                .create(&dir)
                .map_err(io_err(&dir))?;
            return Ok((
                Self {
                    dir,
                    lock_path,
                    _lock: file,
                },
                removed,
            ));
        }
        Err(Error::Sandbox(format!(
            "could not claim a work root under {}",
            base.display()
        )))
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for WorkRoot {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!("removing work root {}: {e}", self.dir.display());
            // The lock stays, so the next claim retries the removal.
            return;
        }
        let _ = std::fs::remove_file(&self.lock_path);
    }
}

/// Create `base` (mode 0755: the sandbox's per-run uids traverse it) and
/// check that it is a real directory of this user that nobody else may
/// write: another user's directory there could swap a run's files.
fn ensure_base(base: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(base)
        .map_err(io_err(base))?;
    let m = std::fs::symlink_metadata(base).map_err(io_err(base))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if !m.is_dir() || m.uid() != uid || m.mode() & 0o022 != 0 {
        return Err(Error::Sandbox(format!(
            "{} is not a directory of this user (uid {uid}) that only it may write; remove it or choose another work root",
            base.display()
        )));
    }
    Ok(())
}

/// Remove the work roots under `base` whose lock is free (their owner is
/// dead); returns how many directories went.
fn sweep(base: &Path) -> Result<usize> {
    let mut removed = 0;
    for entry in std::fs::read_dir(base).map_err(io_err(base))? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".lock")) else {
            continue;
        };
        if stem.starts_with('.') {
            continue;
        }
        let lock_path = entry.path();
        // Read-only suffices for flock, and a lock file we cannot open is
        // another user's business.
        let Ok(file) = File::open(&lock_path) else {
            continue;
        };
        if !try_flock(&file).unwrap_or(false) {
            continue;
        }
        let dir = base.join(stem);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!("removing a dead owner's work root {}: {e}", dir.display());
                continue;
            }
        }
        let _ = std::fs::remove_file(&lock_path);
        tracing::info!("removed {} (its owner is gone)", dir.display());
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_lock_refuses_a_second_holder_until_dropped() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.json.lock");
        let a = FileLock::try_take(&p).unwrap().expect("free");
        // Another open file description conflicts, as another process would.
        assert!(FileLock::try_take(&p).unwrap().is_none());
        assert_eq!(FileLock::holder(&p), format!("pid {}", std::process::id()));
        drop(a);
        assert!(FileLock::try_take(&p).unwrap().is_some());
    }

    #[test]
    fn a_claim_removes_dead_owners_leftovers_only() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().join("work");
        // A live owner: its lock is held.
        let (live, n) = WorkRoot::claim(&base, "live").unwrap();
        assert_eq!(n, 0);
        let live_run = live.path().join("wmrl-sbx-live");
        std::fs::create_dir_all(&live_run).unwrap();
        // A dead owner (killed with -9): its lock file and a run's working
        // directory, no holder.
        let dead = base.join("serve-rewards-4242-0-0");
        std::fs::create_dir_all(dead.join("wmrl-sbx-abc/public")).unwrap();
        std::fs::write(dead.join("wmrl-sbx-abc/submission.csv"), "id\n").unwrap();
        std::fs::write(base.join("serve-rewards-4242-0-0.lock"), "4242").unwrap();
        // Something else in the base is not touched.
        std::fs::create_dir_all(base.join("unrelated")).unwrap();

        let (mine, n) = WorkRoot::claim(&base, "serve-rewards").unwrap();
        assert_eq!(n, 1, "one dead owner's directory removed");
        assert!(!dead.exists() && !base.join("serve-rewards-4242-0-0.lock").exists());
        assert!(live_run.is_dir(), "a live owner's runs stay");
        assert!(base.join("unrelated").is_dir());
        assert!(mine.path().is_dir() && mine.path() != live.path());

        // Dropped, a work root removes itself and its lock.
        let p = mine.path().to_path_buf();
        std::fs::create_dir_all(p.join("wmrl-sbx-x")).unwrap();
        drop(mine);
        assert!(!p.exists());
        let locks: Vec<_> = std::fs::read_dir(&base)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".lock"))
            .collect();
        assert_eq!(locks.len(), 1, "only the live owner's lock is left");
    }

    #[test]
    fn a_base_others_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let base = d.path().join("work");
        std::fs::create_dir(&base).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = WorkRoot::claim(&base, "x").unwrap_err().to_string();
        assert!(err.contains("only it may write"), "{err}");
    }
}
