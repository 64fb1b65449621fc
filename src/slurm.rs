//! Slurm's side of a verdict: drain a node that failed, with a reason other tools can match
//! (`[morphbench] <test> <figure>: <measured> vs <expected>`, at most 128 characters), and
//! resume one only when morphbench drained it, as NHC does: an operator's drain, whatever its
//! reason, is never undone. Every change goes through `scontrol`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// Every reason morphbench sets starts with this; it resumes only nodes drained with it.
pub const REASON_PREFIX: &str = "[morphbench]";

/// The longest reason morphbench sets.
pub const REASON_MAX: usize = 128;

/// The drain reason of a failed figure: `[morphbench] gemm gflops: 812.4 vs 1650 GFLOP/s`.
/// Quotes become apostrophes (the reason travels in one shell word) and it is cut at
/// [`REASON_MAX`] characters.
pub fn reason(
    test: &str,
    figure: &str,
    measured: Option<f64>,
    expected: Option<f64>,
    unit: &str,
) -> String {
    let num = |v: Option<f64>| v.map_or("none".to_string(), short);
    let text = format!(
        "{REASON_PREFIX} {test} {figure}: {} vs {} {unit}",
        num(measured),
        num(expected)
    );
    clip(text.trim_end().replace('"', "'"), REASON_MAX)
}

/// `v` with 4 significant digits, no trailing zeros: 812.4, 1650, 0.01234.
pub fn short(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let decimals = (3 - v.abs().log10().floor() as i32).max(0) as usize;
    let text = format!("{v:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// `text` cut to at most `max` characters (an ellipsis marks the cut).
pub fn clip(text: String, max: usize) -> String {
    if text.chars().count() <= max {
        return text;
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// This node's name as Slurm knows it: slurmd gives its health check and prolog
/// `SLURMD_NODENAME`; elsewhere the short hostname.
pub fn this_node() -> String {
    std::env::var("SLURMD_NODENAME")
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| {
            crate::host::HostInfo::probe()
                .hostname
                .split('.')
                .next()
                .unwrap_or_default()
                .to_string()
        })
}

/// A node's state as `scontrol show node` tells it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeState {
    /// `IDLE+DRAIN`, `MIXED`, `DOWN+DRAIN+NOT_RESPONDING`...
    pub state: String,
    /// The reason without the `[user@time]` Slurm appends.
    pub reason: Option<String>,
}

impl NodeState {
    pub fn drained(&self) -> bool {
        self.state.split('+').any(|s| s.starts_with("DRAIN"))
    }

    /// Drained by morphbench (its reason starts with [`REASON_PREFIX`]).
    pub fn drained_by_us(&self) -> bool {
        self.drained()
            && self
                .reason
                .as_deref()
                .is_some_and(|r| r.starts_with(REASON_PREFIX))
    }

    /// Reads `scontrol show node NAME`'s output.
    pub fn parse(text: &str) -> Option<NodeState> {
        let mut state = None;
        let mut reason = None;
        for line in text.lines().map(str::trim) {
            if let Some(r) = line.strip_prefix("Reason=") {
                // "Reason=why it was drained [root@2026-12-04T10:00:00]"
                let r = match r.rfind(" [") {
                    Some(at) if r.ends_with(']') => &r[..at],
                    _ => r,
                };
                reason = Some(r.to_string()).filter(|r| r != "(null)" && !r.is_empty());
                continue;
            }
            for word in line.split_whitespace() {
                if let Some(s) = word.strip_prefix("State=") {
                    state = Some(s.to_string());
                }
            }
        }
        Some(NodeState {
            state: state?,
            reason,
        })
    }
}

/// What the health check did to its node.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Drained {
        reason: String,
    },
    Resumed,
    /// Left alone, with why.
    Unchanged {
        why: String,
    },
}

/// The folder of Slurm's programs, where Slurm is installed elsewhere than /usr/bin or
/// /usr/local/bin (`MORPHBENCH_SLURM_BIN=/opt/slurm/bin`).
pub const SLURM_BIN_ENV: &str = "MORPHBENCH_SLURM_BIN";

/// Where `scontrol` is looked for when [`SLURM_BIN_ENV`] is not set, in order.
pub const SLURM_BIN_DIRS: [&str; 2] = ["/usr/bin", "/usr/local/bin"];

/// The folders `scontrol` is looked for in: [`SLURM_BIN_ENV`]'s alone when it is set, else
/// [`SLURM_BIN_DIRS`]. Never PATH: a root health check must not run whatever a folder early
/// on PATH holds.
pub fn slurm_bin_dirs() -> Vec<PathBuf> {
    match std::env::var_os(SLURM_BIN_ENV).filter(|d| !d.is_empty()) {
        Some(dir) => vec![PathBuf::from(dir)],
        None => SLURM_BIN_DIRS.iter().map(PathBuf::from).collect(),
    }
}

/// `scontrol`, found before anything runs.
#[derive(Debug, Clone)]
pub struct Scontrol {
    path: PathBuf,
}

impl Scontrol {
    /// Finds `scontrol` by its absolute path in [`slurm_bin_dirs`], or says what to do.
    pub fn find() -> Result<Scontrol> {
        Scontrol::find_in(&slurm_bin_dirs(), crate::host::euid())
    }

    /// Finds `scontrol` in the first of `dirs` that holds it, as a process of effective uid
    /// `euid`: as root, it and every folder on its way must be root's and writable by root
    /// alone, and the path it resolves to is what runs.
    pub fn find_in(dirs: &[PathBuf], euid: u32) -> Result<Scontrol> {
        let Some(found) = dirs
            .iter()
            .map(|d| d.join("scontrol"))
            .find(|p| p.is_absolute() && is_executable(p))
        else {
            let list: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
            bail!(
                "--slurm: scontrol is not in {} (PATH is not searched), so the node cannot be \
                 drained or resumed; install Slurm's client (slurm-client), or name the folder \
                 that holds it with {SLURM_BIN_ENV}=DIR (an absolute path), or leave out --slurm",
                list.join(" or ")
            );
        };
        match crate::safe_fs::trusted_program(&found, euid) {
            Ok(path) => Ok(Scontrol { path }),
            Err(why) => bail!(
                "--slurm: {} is not run as root: {why}; root runs only a root-owned scontrol in \
                 folders only root can write: name Slurm's own folder with {SLURM_BIN_ENV}=DIR, \
                 or leave out --slurm",
                found.display()
            ),
        }
    }

    /// The program that runs.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn run(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(&self.path)
            .args(args)
            .output()
            .with_context(|| format!("cannot run {}", self.path.display()))?;
        if !out.status.success() {
            bail!(
                "scontrol {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Every scontrol call on a node goes through here: a name that is not a valid host name
    /// (a peer's hostlist `gpu[001-512]`, a formula, an option) never reaches scontrol.
    pub fn node_state(&self, node: &str) -> Result<NodeState> {
        if !crate::sanitize::valid_hostname(node) {
            bail!(
                "{:?} is not a valid host name (RFC 1123): scontrol is not run on it",
                crate::sanitize::console(node, 80)
            );
        }
        let text = self.run(&["show", "node", node])?;
        NodeState::parse(&text)
            .with_context(|| format!("scontrol show node {node} gave no State: {text}"))
    }

    /// Drains `node` with `reason`, unless an operator already drained it for another reason
    /// (theirs stays).
    pub fn drain(&self, node: &str, reason: &str) -> Result<Action> {
        let now = self.node_state(node)?;
        if now.drained() && !now.drained_by_us() {
            return Ok(Action::Unchanged {
                why: format!(
                    "already drained by someone else: {}",
                    now.reason.unwrap_or_default()
                ),
            });
        }
        let reason_arg = format!("Reason={reason}");
        self.run(&[
            "update",
            &format!("NodeName={node}"),
            "State=DRAIN",
            &reason_arg,
        ])?;
        Ok(Action::Drained {
            reason: reason.to_string(),
        })
    }

    /// Resumes `node` only if morphbench drained it.
    pub fn resume_if_ours(&self, node: &str) -> Result<Action> {
        let now = self.node_state(node)?;
        if !now.drained() {
            return Ok(Action::Unchanged {
                why: "not drained".into(),
            });
        }
        if !now.drained_by_us() {
            return Ok(Action::Unchanged {
                why: format!(
                    "drained by someone else, left drained: {}",
                    now.reason.unwrap_or_default()
                ),
            });
        }
        self.run(&["update", &format!("NodeName={node}"), "State=RESUME"])?;
        Ok(Action::Resumed)
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The `scontrol` line that drains `nodes` (a hostlist) for `reason`, as printed for an
/// operator to run.
pub fn drain_line(nodes: &str, reason: &str) -> String {
    format!("scontrol update NodeName={nodes} State=DRAIN Reason=\"{reason}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_has_the_prefix_the_figures_and_fits_128_characters() {
        let r = reason("gemm", "gflops", Some(812.44), Some(1650.0), "GFLOP/s");
        assert_eq!(r, "[morphbench] gemm gflops: 812.4 vs 1650 GFLOP/s");
        let long = reason(&"x".repeat(200), "gbps", Some(1.0), None, "GB/s");
        assert_eq!(long.chars().count(), REASON_MAX);
        assert!(long.starts_with(REASON_PREFIX));
        assert!(!reason("a\"b", "c", None, None, "").contains('"'));
    }

    #[test]
    fn a_node_name_that_is_not_a_host_name_never_reaches_scontrol() {
        let home = tempfile::tempdir().unwrap();
        let ran = home.path().join("ran");
        let fake = home.path().join("scontrol");
        std::fs::write(&fake, format!("#!/bin/sh\ntouch {}\n", ran.display())).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let s = Scontrol::find_in(&[home.path().to_path_buf()], crate::host::euid()).unwrap();
        for bad in ["gpu[001-512]", "=cmd|x", "-h", "a b"] {
            let e = format!("{:#}", s.drain(bad, "r").unwrap_err());
            assert!(e.contains("not a valid host name"), "{e}");
            assert!(s.resume_if_ours(bad).is_err());
        }
        assert!(
            !ran.exists(),
            "scontrol ran on a name that is not a host name"
        );
    }

    #[test]
    fn scontrol_is_found_by_absolute_path_never_on_path() {
        let home = tempfile::tempdir().unwrap();
        let bin = home.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let fake = bin.join("scontrol");
        std::fs::write(&fake, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let euid = crate::host::euid();
        // The first folder that holds it, by the path it resolves to.
        let empty = home.path().join("empty");
        let s = Scontrol::find_in(&[empty.clone(), bin.clone()], euid).unwrap();
        assert_eq!(s.path(), std::fs::canonicalize(&fake).unwrap());
        // Not there: the folders looked in, and what to do.
        let e = Scontrol::find_in(std::slice::from_ref(&empty), euid).unwrap_err();
        let e = format!("{e:#}");
        assert!(
            e.contains(&format!("scontrol is not in {}", empty.display())),
            "{e}"
        );
        assert!(
            e.contains("PATH is not searched") && e.contains(SLURM_BIN_ENV),
            "{e}"
        );
        // A relative folder (PATH's `.`) is never looked in.
        assert!(Scontrol::find_in(&[PathBuf::from("bin")], euid).is_err());
        // Root runs no scontrol another user may change: in a world-writable folder (as
        // root), or (not root) this user's, which to root is another user's.
        if euid == 0 {
            std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        let e = format!("{:#}", Scontrol::find_in(&[bin], 0).unwrap_err());
        assert!(e.contains("is not run as root"), "{e}");
        // Without the variable: /usr/bin, then /usr/local/bin.
        if std::env::var_os(SLURM_BIN_ENV).is_none() {
            let dirs = slurm_bin_dirs();
            assert_eq!(
                dirs,
                [PathBuf::from("/usr/bin"), PathBuf::from("/usr/local/bin")]
            );
        }
    }

    #[test]
    fn reads_the_state_and_the_reason_without_its_stamp() {
        let text = "NodeName=n1 Arch=x86_64 CoresPerSocket=2\n   \
                    State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0\n   \
                    Reason=[morphbench] gemm gflops: 1 vs 2 GFLOP/s [root@2026-12-04T10:00:00]\n";
        let s = NodeState::parse(text).unwrap();
        assert_eq!(s.state, "IDLE+DRAIN");
        assert_eq!(
            s.reason.as_deref(),
            Some("[morphbench] gemm gflops: 1 vs 2 GFLOP/s")
        );
        assert!(s.drained_by_us());
        let theirs = NodeState::parse("State=MIXED+DRAIN\nReason=bad fan [ops@now]").unwrap();
        assert!(theirs.drained() && !theirs.drained_by_us());
        let up = NodeState::parse("State=IDLE ThreadsPerCore=1").unwrap();
        assert!(!up.drained() && up.reason.is_none());
        assert!(NodeState::parse("no such node").is_none());
    }
}
