//! safe_fs's tests: the rules, links refused, owners refused, exclusive files, the lock.
use super::*;

/// A uid that is not this process's (root's tests chown to it).
const OTHER: u32 = 65534;

/// A fresh folder in the temporary folder (`/tmp`: root's, sticky) that, to a root
/// process (`euid` 0), belongs to another user: this user's when the tests do not run as
/// root, else chowned to [`OTHER`].
fn others_folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    if crate::host::euid() == 0 {
        std::os::unix::fs::chown(dir.path(), Some(OTHER), Some(OTHER)).unwrap();
    }
    dir
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn the_rules_refuse_only_root_and_only_what_others_may_change() {
    use Role::*;
    // Root's own folders, on the way or written into.
    assert_eq!(refusal(0, 0, 0o40755, 0, Target), None);
    assert_eq!(refusal(0, 0, 0o40775, 0, Target), None, "root's group");
    // /tmp: fine on the way, never written into.
    assert_eq!(refusal(0, 0, 0o41777, 0, Ancestor), None);
    let t = refusal(0, 0, 0o41777, 0, Target).unwrap();
    assert!(t.contains("writable by every user (mode 1777)"), "{t}");
    // World-writable without the sticky bit: nowhere.
    let w = refusal(0, 0, 0o40777, 0, Ancestor).unwrap();
    assert!(w.contains("without the sticky bit"), "{w}");
    // Another user's, or writable by another group.
    let o = refusal(1000, 1000, 0o40755, 0, Ancestor).unwrap();
    assert!(o.contains("owned by uid 1000 (mode 0755), not root"), "{o}");
    assert!(
        refusal(1000, 0, 0o41777, 0, Ancestor).is_some(),
        "sticky, not root's"
    );
    let g = refusal(0, 100, 0o40775, 0, Target).unwrap();
    assert!(g.contains("writable by group 100"), "{g}");
    // Not root: nothing is refused.
    assert_eq!(refusal(1000, 1000, 0o40777, 1000, Target), None);
    assert_eq!(refusal(1, 1, 0o40777, 1000, Target), None);
}

#[test]
fn a_symlinked_output_folder_is_refused_for_every_user() {
    let home = tempfile::tempdir().unwrap();
    let real = home.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = home.path().join("out");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    // This process (root or not) and another user, whoever runs the tests.
    for euid in [crate::host::euid(), 12345] {
        for e in [
            make_dir_as(&link, euid, &OUT).unwrap_err(),
            open_dir_as(&link, euid, &OUT).unwrap_err(),
        ] {
            let e = format!("{e:#}");
            assert!(
                e.starts_with(&format!("--out {}: a symbolic link", link.display())),
                "{e}"
            );
            assert!(e.contains("refused"), "{e}");
        }
    }
    // A dangling link too: nothing is made where it points.
    let dangling = home.path().join("dangling");
    std::os::unix::fs::symlink(home.path().join("nowhere"), &dangling).unwrap();
    let e = format!(
        "{:#}",
        make_dir_as(&dangling, crate::host::euid(), &OUT).unwrap_err()
    );
    assert!(e.contains("a symbolic link"), "{e}");
    assert!(!home.path().join("nowhere").exists());
    // The folder itself is fine, made or opened; missing folders on the way are made 0755.
    let deep = real.join("a/b");
    make_dir_as(&deep, crate::host::euid(), &OUT).unwrap();
    open_dir_as(&deep, crate::host::euid(), &OUT).unwrap();
    let mode = std::fs::metadata(real.join("a")).unwrap().mode() & 0o777;
    assert_eq!(mode & 0o022, 0, "{mode:o}");
    let e = format!(
        "{:#}",
        open_dir_as(&real.join("c"), crate::host::euid(), &OUT).unwrap_err()
    );
    assert!(e.contains("no such folder"), "{e}");
}

#[test]
fn root_refuses_a_folder_of_another_user_and_on_the_way() {
    let home = tempfile::tempdir().unwrap();
    let dir = others_folder();
    let theirs = dir.path().to_path_buf();
    // Written into.
    let e = format!("{:#}", make_dir_as(&theirs, 0, &OUT).unwrap_err());
    assert!(
        e.starts_with(&format!("--out {}: owned by uid", theirs.display())),
        "{e}"
    );
    assert!(
        e.contains("not root") && e.contains("/var/lib/morphbench"),
        "{e}"
    );
    // On the way: nothing is made under it.
    let below = theirs.join("runs");
    let e = format!("{:#}", make_dir_as(&below, 0, &OUT).unwrap_err());
    assert!(
        e.contains(&format!(
            "{} (a folder on its way) is owned by uid",
            theirs.display()
        )),
        "{e}"
    );
    assert!(!below.exists());
    // Through a link on the way that leads into it, too.
    let via = home.path().join("via");
    std::os::unix::fs::symlink(&theirs, &via).unwrap();
    assert!(make_dir_as(&via.join("runs"), 0, &OUT).is_err());
    assert!(!below.exists());
    // The user who owns it may (as it may without morphbench).
    let owner = std::fs::metadata(&theirs).unwrap().uid();
    make_dir_as(&theirs, owner, &OUT).unwrap();
}

#[test]
fn root_refuses_a_world_writable_folder_without_the_sticky_bit() {
    let home = tempfile::tempdir().unwrap();
    let open = home.path().join("open");
    std::fs::create_dir(&open).unwrap();
    let owner = std::fs::metadata(&open).unwrap().uid();
    chmod(&open, 0o777);
    // Its owner checks as root would (the owner check aside): as the folder written into.
    let e = format!(
        "{:#}",
        make_dir_as(&open.join("runs"), 0, &OUT).unwrap_err()
    );
    if owner == 0 {
        assert!(
            e.contains("writable by every user (mode 0777) without the sticky bit"),
            "{e}"
        );
        // Sticky: fine on the way, not as the folder written into.
        chmod(&open, 0o1777);
        make_dir_as(&open.join("runs"), 0, &OUT).unwrap();
        let e = format!("{:#}", open_dir_as(&open, 0, &OUT).unwrap_err());
        assert!(e.contains("writable by every user (mode 1777)"), "{e}");
    } else {
        assert!(e.contains("owned by uid"), "{e}");
    }
    assert_eq!(
        refusal(0, 0, 0o40777, 0, Role::Ancestor).as_deref(),
        Some("writable by every user (mode 0777) without the sticky bit")
    );
}

#[test]
fn a_temporary_file_is_created_exclusively_and_renamed_into_place() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path();
    // A link or a file already at a name is never opened.
    let target = dir.join("target");
    std::fs::write(&target, "root's").unwrap();
    let link = dir.join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    assert!(create_new(&link).is_err());
    assert!(create_new(&target).is_err());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "root's");
    // Two temporary names are never the same.
    assert_ne!(temp_name(dir, "a.prom"), temp_name(dir, "a.prom"));
    let tmp = temp_name(dir, "a.prom");
    let name = tmp.file_name().unwrap().to_str().unwrap();
    assert!(
        name.starts_with(".a.prom.") && name.ends_with(".tmp"),
        "{name}"
    );
    // A link at the final name is replaced, not followed.
    std::os::unix::fs::symlink(&target, dir.join("m.prom")).unwrap();
    let path = replace_file(dir, "m.prom", b"metrics").unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "metrics");
    assert!(!std::fs::symlink_metadata(&path)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "root's");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["link", "m.prom", "target"]);
}

#[test]
fn the_lock_is_never_opened_through_a_link_and_names_its_holder() {
    let home = tempfile::tempdir().unwrap();
    let euid = crate::host::euid();
    let target = home.path().join("root-only");
    std::fs::write(&target, "").unwrap();
    let link = home.path().join("health.lock");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let e = format!("{:#}", open_lock_as(&link, euid).unwrap_err());
    assert!(
        e.contains(&format!(
            "the health lock {}: a symbolic link",
            link.display()
        )),
        "{e}"
    );
    std::fs::remove_file(&link).unwrap();
    // A lock others may open is made private.
    std::fs::write(&link, "").unwrap();
    chmod(&link, 0o644);
    let held = open_lock_as(&link, euid).unwrap();
    assert_eq!(std::fs::metadata(&link).unwrap().mode() & 0o777, 0o600);
    held.try_lock().unwrap();
    let waiting = open_lock_as(&link, euid).unwrap();
    assert!(matches!(
        waiting.try_lock(),
        Err(std::fs::TryLockError::WouldBlock)
    ));
    let holder = lock_holder(&waiting).expect("the holder");
    assert!(
        holder.starts_with(&format!("pid {} (", std::process::id())),
        "{holder}"
    );
    drop(held);
    waiting.try_lock().unwrap();
    // Not a regular file, or (to root) another user's: refused.
    let folder = home.path().join("folder.lock");
    std::fs::create_dir(&folder).unwrap();
    let e = format!("{:#}", open_lock_as(&folder, euid).unwrap_err());
    assert!(
        e.contains("cannot open it") || e.contains("not a regular file"),
        "{e}"
    );
    if euid == 0 {
        // Root's folder, another user's lock in it.
        let theirs = home.path().join("x.lock");
        std::fs::write(&theirs, "").unwrap();
        std::os::unix::fs::chown(&theirs, Some(OTHER), None).unwrap();
        let e = format!("{:#}", open_lock_as(&theirs, 0).unwrap_err());
        assert!(e.contains("owned by uid 65534"), "{e}");
    }
}

#[test]
fn a_program_root_runs_is_roots_in_folders_only_root_writes() {
    let dir = others_folder();
    let theirs = dir.path();
    let prog = theirs.join("scontrol");
    std::fs::write(&prog, "#!/bin/sh\n").unwrap();
    let e = trusted_program(&prog, 0).unwrap_err();
    assert!(e.to_string().contains("owned by uid"), "{e}");
    let owner = std::fs::metadata(theirs).unwrap().uid();
    assert!(trusted_program(&prog, owner.max(1)).is_ok());
    // /bin/sh: root's, and resolved through /bin's link where there is one.
    let sh = trusted_program(Path::new("/bin/sh"), 0).unwrap();
    assert!(sh.is_absolute() && !sh.is_symlink(), "{}", sh.display());
}
