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
    match text.contains('.') {
        true => text.trim_end_matches('0').trim_end_matches('.').to_string(),
        false => text,
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

/// `scontrol`, found before anything runs.
#[derive(Debug, Clone)]
pub struct Scontrol {
    path: PathBuf,
}

impl Scontrol {
    /// Finds `scontrol` on PATH, or says what to do.
    pub fn find() -> Result<Scontrol> {
        let path = std::env::var_os("PATH")
            .map(|p| {
                std::env::split_paths(&p)
                    .map(|d| d.join("scontrol"))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
            .into_iter()
            .find(|p| is_executable(p));
        match path {
            Some(path) => Ok(Scontrol { path }),
            None => bail!(
                "--slurm: scontrol is not on PATH, so the node cannot be drained or resumed; \
                 install Slurm's client (slurm-client) or set PATH, or leave out --slurm"
            ),
        }
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

    pub fn node_state(&self, node: &str) -> Result<NodeState> {
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
