//! Folders and files that a root process writes, made and opened without following a link, and
//! refused where another user could change what they hold.
//!
//! Any user: the folder written into (`--out`, `--check-out`, `--textfile`, the health lock's)
//! is opened with `O_NOFOLLOW | O_DIRECTORY`, so a symbolic link in its place is refused, never
//! followed; every folder made is made 0755, whatever the umask; a temporary file is created
//! exclusively (`O_CREAT | O_EXCL | O_NOFOLLOW`) under a random name and renamed into place.
//!
//! As root (effective uid 0), every folder on the way is checked too, from `/` down, both as the
//! path is written and as the links in it resolve: each must be root's, and none may be
//! writable by another user (world-writable, or group-writable by a group other than root's).
//! A world-writable folder with the sticky bit (`/tmp`) may be on the way, since no other user
//! can rename or remove what root made in it, but the folder written into may not be
//! world-writable at all. Files are then written by name in folders only root can change. A
//! process of another user is not checked: what it can write, its owner could already.

use std::fs::{File, Metadata, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context, Result};

/// What a folder is for, as a refusal names it: the flag (or thing) that gave it, and the fix.
#[derive(Debug, Clone, Copy)]
pub struct Purpose {
    pub name: &'static str,
    pub fix: &'static str,
}

/// The folder of run folders.
pub const OUT: Purpose = Purpose {
    name: "--out",
    fix: "use a root-owned folder such as /var/lib/morphbench (mode 0755), or run as the user \
          who owns it",
};

/// `check --check-out`.
pub const CHECK_OUT: Purpose = Purpose {
    name: "--check-out",
    fix: "give a root-owned folder such as /var/lib/morphbench/check (mode 0755)",
};

/// node_exporter's textfile folder.
pub const TEXTFILE: Purpose = Purpose {
    name: "--textfile",
    fix: "give node_exporter's textfile folder owned by root and writable by root only (mode \
          0755, such as /var/lib/node_exporter/textfile_collector)",
};

/// A run folder that `check` writes its check.csv into.
pub const RUN_FOLDER: Purpose = Purpose {
    name: "the run folder",
    fix: "write the check elsewhere with --check-out DIR (a root-owned folder such as \
          /var/lib/morphbench/check), or run check as the folder's owner",
};

/// The folder of health's node-wide lock.
pub const LOCK: Purpose = Purpose {
    name: "the health lock",
    fix: "root keeps it at /run/morphbench-health.lock, a regular file of root's in a folder \
          only root can write; remove what is in its place",
};

/// Where a folder stands to the path written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A folder on the way to the one written into (its parent, and theirs).
    Ancestor,
    /// The folder written into (or a program run as root).
    Target,
}

const STICKY: u32 = 0o1000;

/// Why a folder of `owner`, `group` and `mode` is not safe for a process of effective uid
/// `euid` to write through as `role`, in words; `None` when it is. Only root is refused
/// anything: a folder (or a program) another user owns, or may write (world-writable, or
/// group-writable by a group other than root's), could have a link or a file of theirs put in
/// root's way. A sticky world-writable folder such as `/tmp` is allowed on the way (its other
/// users cannot rename or remove what root made in it), never as the folder written into.
pub fn refusal(owner: u32, group: u32, mode: u32, euid: u32, role: Role) -> Option<String> {
    if euid != 0 {
        return None;
    }
    let bits = mode & 0o7777;
    let sticky_ok = role == Role::Ancestor && mode & STICKY != 0;
    if owner != 0 {
        return Some(format!("owned by uid {owner} (mode {bits:04o}), not root"));
    }
    if mode & 0o002 != 0 && !sticky_ok {
        return Some(format!(
            "writable by every user (mode {bits:04o}){}",
            match role {
                Role::Ancestor => " without the sticky bit",
                Role::Target => "",
            }
        ));
    }
    if mode & 0o020 != 0 && group != 0 && !sticky_ok {
        return Some(format!("writable by group {group} (mode {bits:04o})"));
    }
    None
}

fn refuse(purpose: &Purpose, path: &Path, at: &Path, why: &str) -> anyhow::Error {
    let which = if at == path {
        String::new()
    } else {
        format!("{} (a folder on its way) is ", at.display())
    };
    anyhow::anyhow!(
        "{} {}: {which}{why}; refused, as root writes only where no other user can put a file \
         or a link in its way: {}",
        purpose.name,
        path.display(),
        purpose.fix
    )
}

/// Opens the folder at `at` for its metadata only (`O_PATH`: no read permission is needed),
/// following a link only when `follow`.
fn open_dir_fd(at: &Path, follow: bool) -> std::io::Result<(File, Metadata)> {
    let mut flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    let file = OpenOptions::new().read(true).custom_flags(flags).open(at)?;
    let meta = file.metadata()?;
    Ok((file, meta))
}

/// Checks the folder at `at` (on the way to `path`) as `role`; `follow`: through a link.
fn check_at(
    purpose: &Purpose,
    path: &Path,
    at: &Path,
    euid: u32,
    role: Role,
    follow: bool,
) -> Result<File> {
    let (file, meta) = match open_dir_fd(at, follow) {
        Ok(opened) => opened,
        Err(e) => {
            let link = std::fs::symlink_metadata(at).is_ok_and(|m| m.file_type().is_symlink());
            if link && !follow {
                let to = std::fs::read_link(at)
                    .map(|t| format!(" to {}", t.display()))
                    .unwrap_or_default();
                let what = if at == path {
                    String::new()
                } else {
                    format!("{} is ", at.display())
                };
                bail!(
                    "{} {}: {what}a symbolic link{to}, refused: a link is never followed where \
                     morphbench writes; give the folder itself",
                    purpose.name,
                    path.display()
                );
            }
            let why = match (e.kind(), e.raw_os_error()) {
                (std::io::ErrorKind::NotFound, _) => "no such folder".to_string(),
                (_, Some(libc::ENOTDIR)) => "not a folder".to_string(),
                _ => e.to_string(),
            };
            if at == path {
                bail!("{} {}: {why}", purpose.name, path.display())
            } else {
                bail!(
                    "{} {}: {}: {why}",
                    purpose.name,
                    path.display(),
                    at.display()
                )
            }
        }
    };
    match refusal(meta.uid(), meta.gid(), meta.mode(), euid, role) {
        Some(why) => Err(refuse(purpose, path, at, &why)),
        None => Ok(file),
    }
}

/// Makes the folder `at` (0755 whatever the umask); one already there is fine.
fn make_one(purpose: &Purpose, path: &Path, at: &Path) -> Result<()> {
    match std::fs::DirBuilder::new().mode(0o755).create(at) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).with_context(|| {
            format!(
                "{} {}: cannot create {}: choose a writable one with {} DIR",
                purpose.name,
                path.display(),
                at.display(),
                purpose.name
            )
        }),
    }
}

/// The folders from `/` to `dir`, `/` first.
fn prefixes(dir: &Path) -> Vec<PathBuf> {
    let mut at = PathBuf::new();
    let mut out = Vec::new();
    for c in dir.components() {
        match c {
            Component::RootDir => at.push("/"),
            Component::Normal(n) => at.push(n),
            Component::ParentDir => at.push(".."),
            Component::CurDir | Component::Prefix(_) => continue,
        }
        out.push(at.clone());
    }
    out
}

/// Checks every folder on the way to the existing folder `dir` as the ancestors of `path`: as
/// written (each name resolved, links followed) and as resolved (each real folder from `/`,
/// no link followed).
fn check_ancestors(purpose: &Purpose, path: &Path, dir: &Path, euid: u32) -> Result<()> {
    for at in prefixes(dir) {
        check_at(purpose, path, &at, euid, Role::Ancestor, true)?;
    }
    let real = std::fs::canonicalize(dir).with_context(|| {
        format!(
            "{} {}: cannot resolve {}",
            purpose.name,
            path.display(),
            dir.display()
        )
    })?;
    for at in prefixes(&real) {
        check_at(purpose, path, &at, euid, Role::Ancestor, false)?;
    }
    Ok(())
}

/// Makes the folder `path` (with every missing folder on its way, each 0755) and opens it, as
/// a process of effective uid `euid` (see the module's rules): a link in its place is refused,
/// and, as root, a folder on its way or itself that another user owns or may write.
pub fn make_dir_as(path: &Path, euid: u32, purpose: &Purpose) -> Result<()> {
    walk(path, euid, purpose, Walk::Make)
}

/// [`make_dir_as`] as this process.
pub fn make_dir(path: &Path, purpose: &Purpose) -> Result<()> {
    make_dir_as(path, crate::host::euid(), purpose)
}

/// Opens the existing folder `path` as [`make_dir_as`] would, making nothing.
pub fn open_dir_as(path: &Path, euid: u32, purpose: &Purpose) -> Result<()> {
    walk(path, euid, purpose, Walk::Open)
}

/// Checks what [`make_dir_as`] would refuse without making anything: the folders on the way
/// to `path` that are there, and `path` if it is there (a flag checked before anything runs).
pub fn check_dir_as(path: &Path, euid: u32, purpose: &Purpose) -> Result<()> {
    walk(path, euid, purpose, Walk::Check)
}

/// [`check_dir_as`] as this process.
pub fn check_dir(path: &Path, purpose: &Purpose) -> Result<()> {
    check_dir_as(path, crate::host::euid(), purpose)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Walk {
    /// Make what is missing.
    Make,
    /// Everything must be there.
    Open,
    /// Check what is there.
    Check,
}

/// [`open_dir_as`] as this process.
pub fn open_dir(path: &Path, purpose: &Purpose) -> Result<()> {
    open_dir_as(path, crate::host::euid(), purpose)
}

fn walk(path: &Path, euid: u32, purpose: &Purpose, how: Walk) -> Result<()> {
    let abs = std::path::absolute(path).with_context(|| {
        format!(
            "{} {}: cannot make it absolute",
            purpose.name,
            path.display()
        )
    })?;
    let (parent, name) = match (abs.parent(), abs.file_name()) {
        (Some(p), Some(n)) => (p.to_path_buf(), n.to_os_string()),
        // `/`, or a path that ends in `..` (a folder that is there: resolved).
        _ => {
            let real = std::fs::canonicalize(&abs)
                .with_context(|| format!("{} {}: no such folder", purpose.name, path.display()))?;
            match (real.parent(), real.file_name()) {
                (Some(p), Some(n)) => (p.to_path_buf(), n.to_os_string()),
                _ => {
                    check_at(purpose, path, &real, euid, Role::Target, false)?;
                    return Ok(());
                }
            }
        }
    };
    // The deepest folder on the way that is there; the names below it are made.
    let mut there = parent.clone();
    let mut missing = Vec::new();
    while std::fs::metadata(&there).is_err() {
        if how == Walk::Open {
            bail!("{} {}: no such folder", purpose.name, path.display());
        }
        match (there.parent(), there.file_name()) {
            (Some(up), Some(n)) => {
                missing.push(n.to_os_string());
                there = up.to_path_buf();
            }
            _ => bail!(
                "{} {}: cannot make it (give a path without `..`)",
                purpose.name,
                path.display()
            ),
        }
    }
    check_ancestors(purpose, path, &there, euid)?;
    if how == Walk::Check && !missing.is_empty() {
        return Ok(());
    }
    let mut at = there;
    for n in missing.iter().rev() {
        at.push(n);
        make_one(purpose, path, &at)?;
        check_at(purpose, path, &at, euid, Role::Ancestor, false)?;
    }
    at.push(&name);
    match how {
        Walk::Make => make_one(purpose, path, &at)?,
        Walk::Check if std::fs::symlink_metadata(&at).is_err() => return Ok(()),
        _ => {}
    }
    check_at(purpose, path, &at, euid, Role::Target, false)?;
    Ok(())
}

/// Creates `path` exclusively (`O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0644): a file or a link
/// already there is an error, never opened.
pub fn create_new(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// A name in `dir` for a temporary file no other process can guess: `.<name>.<random>.tmp`
/// (node_exporter reads `*.prom` only, so it never reads one).
pub fn temp_name(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!(".{name}.{:016x}.tmp", rand::random::<u64>()))
}

/// Replaces `dir/name` with `bytes` atomically: a temporary file of a random name created
/// exclusively in `dir` ([`create_new`]), written, then renamed into place (a rename replaces
/// the name, a link there included, and never follows it). Returns the path written.
pub fn replace_file(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf> {
    let path = dir.join(name);
    let tmp = temp_name(dir, name);
    let written = create_new(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", tmp.display()));
    }
    std::fs::rename(&tmp, &path).with_context(|| {
        let _ = std::fs::remove_file(&tmp);
        format!(
            "cannot move {} into place at {}",
            tmp.display(),
            path.display()
        )
    })?;
    Ok(path)
}

/// Opens (or creates, mode 0600) the lock file `path` as a process of effective uid `euid`,
/// never through a link (`O_NOFOLLOW | O_CLOEXEC`): its folder is checked as the folder
/// written into, it must be a regular file, and as root one of root's; a lock of this user's
/// that others may open is made 0600, so no one else can take it from here on.
pub fn open_lock_as(path: &Path, euid: u32) -> Result<File> {
    let named = |why: String| anyhow::anyhow!("the health lock {}: {why}", path.display());
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    open_dir_as(dir, euid, &LOCK)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path);
    let file = match file {
        Ok(f) => f,
        Err(e) => {
            let link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
            return Err(named(if link {
                "a symbolic link, refused (a lock is never opened through a link); \
                 remove it"
                    .into()
            } else {
                format!("cannot open it: {e}")
            }));
        }
    };
    let meta = file.metadata().map_err(|e| named(e.to_string()))?;
    if !meta.is_file() {
        return Err(named("not a regular file; remove it".into()));
    }
    if let Some(why) = refusal(meta.uid(), 0, 0, euid, Role::Target) {
        return Err(named(format!("{why}; refused: {}", LOCK.fix)));
    }
    if meta.uid() == euid && meta.mode() & 0o077 != 0 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| named(format!("cannot make it 0600: {e}")))?;
    }
    Ok(file)
}

/// [`open_lock_as`] as this process.
pub fn open_lock(path: &Path) -> Result<File> {
    open_lock_as(path, crate::host::euid())
}

/// Who holds a lock (`flock`) on `file`, as /proc/locks tells it: `pid 1234 (morphbench, uid
/// 0)`; `None` when no one does or it cannot be told.
pub fn lock_holder(file: &File) -> Option<String> {
    let meta = file.metadata().ok()?;
    let dev = meta.dev();
    // Linux's dev_t: the major in bits 8-19 and 32-63, the minor in bits 0-7 and 20-31.
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let want = (major, minor, meta.ino());
    let text = std::fs::read_to_string("/proc/locks").ok()?;
    for line in text.lines() {
        // `1: FLOCK  ADVISORY  WRITE 1234 08:02:131078 0 EOF`; a waiter's line has `->`.
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.get(1) == Some(&"->") {
            continue;
        }
        let Some(at) = words.iter().position(|w| w.matches(':').count() == 2) else {
            continue;
        };
        let mut parts = words[at].split(':');
        let (Some(maj), Some(min), Some(ino)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let found = (
            u64::from_str_radix(maj, 16).ok(),
            u64::from_str_radix(min, 16).ok(),
            ino.parse::<u64>().ok(),
        );
        if found != (Some(want.0), Some(want.1), Some(want.2)) {
            continue;
        }
        let pid: u32 = words.get(at.checked_sub(1)?)?.parse().ok()?;
        if pid == 0 {
            return Some("a process of another PID namespace (a container?)".into());
        }
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        let comm = std::fs::read_to_string(proc_dir.join("comm"))
            .map(|c| c.trim().to_string())
            .unwrap_or_else(|_| "?".into());
        let uid = std::fs::metadata(&proc_dir)
            .map(|m| m.uid().to_string())
            .unwrap_or_else(|_| "?".into());
        return Some(format!("pid {pid} ({comm}, uid {uid})"));
    }
    None
}

/// Checks, before root runs it, that the program at `path` and every folder on its way are
/// root's and writable by root only; returns the path it resolves to, which is what is run
/// (so no link on the way is resolved again). Not checked for other users.
pub fn trusted_program(path: &Path, euid: u32) -> anyhow::Result<PathBuf> {
    let real =
        std::fs::canonicalize(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let dir = real.parent().unwrap_or(Path::new("/"));
    for at in prefixes(dir) {
        let meta =
            std::fs::symlink_metadata(&at).map_err(|e| anyhow::anyhow!("{}: {e}", at.display()))?;
        if let Some(why) = refusal(meta.uid(), meta.gid(), meta.mode(), euid, Role::Ancestor) {
            return Err(anyhow::anyhow!(
                "{} (on the way to {}) is {why}",
                at.display(),
                real.display()
            ));
        }
    }
    let meta = std::fs::metadata(&real).map_err(|e| anyhow::anyhow!("{}: {e}", real.display()))?;
    if let Some(why) = refusal(meta.uid(), meta.gid(), meta.mode(), euid, Role::Target) {
        return Err(anyhow::anyhow!("{} is {why}", real.display()));
    }
    Ok(real)
}

#[cfg(test)]
mod tests;
