//! The per-process limits a world's size drives, settled before the rendezvous. Rank 0 keeps
//! a connection to every rank for the whole run and hears each on a thread of its own during
//! a gather, so a 1,024-rank world needs more than the 1,024 open files a compute node's jobs
//! commonly start with (systemd's default soft limit). Every rank raises its soft limits to
//! the hard ones (as any process may); a rank whose hard limit is still below its need
//! refuses before the rendezvous, with the numbers and the fix, rather than fail after it
//! with nothing measured ("Too many open files" while writing meta.json).

use super::error::ClusterError;

/// Open files any rank needs besides its connections to other ranks: its run folder (CSV
/// sinks, meta.json, plots), its data listener and pair connections, its GPU driver's device
/// files, stdio, /proc and /sys reads.
pub const FILES_MARGIN: u64 = 256;
/// Threads any rank needs besides one a rank at rank 0: its own pair's, heartbeats, the GPU
/// driver's workers (lavapipe starts one a core).
pub const THREADS_MARGIN: u64 = 256;

/// What one rank needs of the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    pub open_files: u64,
    /// Threads of this user (RLIMIT_NPROC counts threads, per user, not per process).
    pub threads: u64,
}

impl Needs {
    /// Rank 0: one connection and, in a gather, one reader thread per other rank, plus the
    /// margins. Any other rank: the margins (one connection to rank 0, a pair at a time).
    pub fn of(rank: u32, world: u32) -> Needs {
        let others = match rank {
            0 => u64::from(world.saturating_sub(1)),
            _ => 1,
        };
        Needs {
            open_files: others + FILES_MARGIN,
            threads: others + THREADS_MARGIN,
        }
    }
}

/// One limit: (soft, hard), `None` for unlimited.
pub type Limit = (Option<u64>, Option<u64>);

/// The two limits, as read (or as raised).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub open_files: Limit,
    pub threads: Limit,
}

/// Raises this process's soft limits on open files and threads to their hard limits, then
/// checks them against what rank `rank` of `world` needs. Returns the limits now in force.
pub fn settle(rank: u32, world: u32) -> Result<Limits, ClusterError> {
    let limits = Limits {
        open_files: raise(libc::RLIMIT_NOFILE),
        threads: raise(libc::RLIMIT_NPROC),
    };
    match refusal(rank, world, &limits, is_superuser()) {
        Some(why) => Err(ClusterError::Limits(why)),
        None => Ok(limits),
    }
}

/// Why rank `rank` of `world` cannot start under `limits`, if it cannot. The thread limit is
/// not enforced for the superuser.
pub fn refusal(rank: u32, world: u32, limits: &Limits, superuser: bool) -> Option<String> {
    let needs = Needs::of(rank, world);
    let role = match rank {
        0 => format!(
            "rank 0 of a {world}-rank world keeps a connection to each of the other {} ranks \
             and",
            world.saturating_sub(1)
        ),
        _ => format!("rank {rank}"),
    };
    let short = |limit: Limit, need: u64| limit.0.is_some_and(|soft| soft < need);
    if short(limits.open_files, needs.open_files) {
        return Some(format!(
            "{role} needs {} open files ({} for its run and its links), but this \
             process may open at most {} (hard limit {}): raise the limit where the ranks are \
             launched (`ulimit -n {}` in the job script, `LimitNOFILE=` in the service's unit; \
             under Slurm, `PropagateResourceLimits=NOFILE` in slurm.conf or `LimitNOFILE=` \
             in slurmd's unit)",
            needs.open_files,
            FILES_MARGIN,
            say(limits.open_files.0),
            say(limits.open_files.1),
            needs.open_files.next_power_of_two().max(4096),
        ));
    }
    if !superuser && short(limits.threads, needs.threads) {
        return Some(format!(
            "{role} needs {} threads ({} for its own work; the limit counts every \
             thread of this user), but this user may run at most {} (hard limit {}): raise it \
             where the ranks are launched (`ulimit -u {}`, `TasksMax=`/`LimitNPROC=` in the \
             unit; under Slurm, `PropagateResourceLimits=NPROC`)",
            needs.threads,
            THREADS_MARGIN,
            say(limits.threads.0),
            say(limits.threads.1),
            needs.threads.next_power_of_two().max(4096),
        ));
    }
    None
}

fn say(limit: Option<u64>) -> String {
    limit.map_or("unlimited".into(), |l| l.to_string())
}

fn from_rlim(v: libc::rlim_t) -> Option<u64> {
    (v != libc::RLIM_INFINITY).then_some(v)
}

/// Raises `resource`'s soft limit to its hard limit (best effort: a failure leaves the soft
/// limit as it was, and the check says what is short). Returns (soft, hard) after.
#[allow(unsafe_code)]
fn raise(resource: libc::__rlimit_resource_t) -> Limit {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the rlimit struct passed, which
    // lives on this stack frame for both calls.
    unsafe {
        if libc::getrlimit(resource, &mut l) != 0 {
            return (None, None);
        }
        if l.rlim_cur != l.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: l.rlim_max,
                rlim_max: l.rlim_max,
            };
            if libc::setrlimit(resource, &raised) == 0 {
                l = raised;
            }
        }
    }
    (from_rlim(l.rlim_cur), from_rlim(l.rlim_max))
}

#[allow(unsafe_code)]
fn is_superuser() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(files: (u64, u64), threads: (u64, u64)) -> Limits {
        Limits {
            open_files: (Some(files.0), Some(files.1)),
            threads: (Some(threads.0), Some(threads.1)),
        }
    }

    #[test]
    fn rank_0_needs_a_file_and_a_thread_per_rank_and_the_others_a_margin() {
        assert_eq!(
            Needs::of(0, 4096),
            Needs {
                open_files: 4095 + FILES_MARGIN,
                threads: 4095 + THREADS_MARGIN
            }
        );
        assert_eq!(Needs::of(17, 4096), Needs::of(1, 2));
        assert_eq!(Needs::of(0, 1).open_files, FILES_MARGIN);
    }

    #[test]
    fn a_short_limit_is_refused_with_the_numbers_and_the_fix() {
        // 1,024 ranks under the systemd default (1,024 raised to a hard limit of 1,024).
        let why = refusal(0, 1024, &limits((1024, 1024), (1 << 20, 1 << 20)), false).unwrap();
        assert!(why.contains("1279 open files"), "{why}");
        assert!(why.contains("at most 1024 (hard limit 1024)"), "{why}");
        assert!(why.contains("ulimit -n 4096"), "{why}");
        assert!(why.contains("PropagateResourceLimits"), "{why}");
        // The followers need only the margin.
        assert_eq!(
            refusal(5, 1024, &limits((1024, 1024), (1 << 20, 1 << 20)), false),
            None
        );
        // Threads: refused for a user, not for the superuser.
        let tight = limits((1 << 20, 1 << 20), (2000, 2000));
        let why = refusal(0, 4096, &tight, false).unwrap();
        assert!(
            why.contains("4351 threads") && why.contains("ulimit -u"),
            "{why}"
        );
        assert_eq!(refusal(0, 4096, &tight, true), None);
        // Unlimited is enough.
        let unlimited = Limits {
            open_files: (None, None),
            threads: (None, None),
        };
        assert_eq!(refusal(0, 4096, &unlimited, false), None);
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let l = settle(1, 2).unwrap();
        assert_eq!(l.open_files.0, l.open_files.1);
    }
}
