//! The errors of a multi-rank run, as types: callers match a dead rank, a silent one or a
//! version mismatch by variant, never by message text.

/// What a peer did wrong on the wire (one message read).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WireError {
    #[error("timed out")]
    TimedOut,
    #[error("closed the connection")]
    Closed,
    #[error("sent something that is not a morphbench message")]
    NotOurs,
    #[error("announced a {0}-byte message, over the {1}-byte cap")]
    TooLarge(u32, u32),
    #[error("sent a message whose MAC does not verify (altered on the way, or not from a rank of this job)")]
    Forged,
    #[error("sent a malformed message: {0}")]
    Malformed(String),
    #[error("{0}")]
    Io(String),
}

impl WireError {
    /// An I/O error as what the peer did: a timeout, a closed connection, or the error itself.
    pub fn from_io(e: &std::io::Error) -> WireError {
        use std::io::ErrorKind::*;
        match e.kind() {
            WouldBlock | TimedOut => WireError::TimedOut,
            UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe => WireError::Closed,
            _ => WireError::Io(e.to_string()),
        }
    }
}

/// Who this process is, from the launcher's environment or the flags: what is wrong with them.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct LaunchError(pub String);

impl From<&str> for LaunchError {
    fn from(s: &str) -> Self {
        LaunchError(s.to_string())
    }
}

/// `launch_err!("...", args)`: a [`LaunchError`] with a formatted message.
macro_rules! launch_err {
    ($($t:tt)*) => { $crate::cluster::error::LaunchError(format!($($t)*)) };
}
pub(crate) use launch_err;

/// A rank as named in messages: its number and host ("rank 3 (gpu04)").
#[derive(Debug, Clone, PartialEq)]
pub struct Who {
    pub rank: u32,
    pub name: String,
}

impl std::fmt::Display for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

/// Why a multi-rank run could not go on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// The ranks did not come together (missing, duplicated, disagreeing).
    #[error("{0}")]
    Rendezvous(String),
    /// This process's limits (open files, threads) are below what its rank needs.
    #[error("{0}")]
    Limits(String),
    #[error("{who} runs morphbench {theirs}, rank 0 runs {ours}: install one version everywhere")]
    Version {
        who: String,
        theirs: String,
        ours: String,
    },
    /// Its control connection closed or could not be written: the process is gone.
    #[error("{who} died mid-run ({how})")]
    Died { who: Who, how: String },
    /// Rank 0's reading of a failed gather: these ranks died (a peer's report of it, if any,
    /// follows: a death is often first reported by the rank at the other end of a link).
    #[error("{} died mid-run{}", names(.whos), .news.as_ref().map_or(String::new(), |n| format!("; {n}")))]
    Dead {
        whos: Vec<Who>,
        news: Option<String>,
    },
    /// No answer by the deadline from a rank that was waited for.
    #[error("{who} did not answer in time")]
    NoAnswer { who: Who },
    /// No word from it by the deadline: it may hang (stopped, or stuck).
    #[error("{who} stopped answering (no word from it in time); it may hang")]
    Silent { who: Who },
    /// It sent something that is not a message of the run.
    #[error("{who} {fault}")]
    Garbled { who: Who, fault: WireError },
    /// It said why it cannot go on.
    #[error("{who} reported: {message}")]
    Reported { who: Who, message: String },
    /// Rank 0 told this rank to stop.
    #[error("rank 0 ended the run: {0}")]
    Aborted(String),
    /// A message that does not fit the run's order.
    #[error("{0}")]
    Protocol(String),
    /// A local socket or listener failed.
    #[error("{0}")]
    Io(String),
}

impl ClusterError {
    /// The ranks that died, if this is a death.
    pub fn dead_ranks(&self) -> Vec<u32> {
        match self {
            ClusterError::Died { who, .. } => vec![who.rank],
            ClusterError::Dead { whos, .. } => whos.iter().map(|w| w.rank).collect(),
            _ => Vec::new(),
        }
    }

    /// The ranks this error is about: the dead, or the one that went silent, sent garbage or
    /// reported a failure (none for the others).
    pub fn culprits(&self) -> Vec<u32> {
        match self {
            ClusterError::NoAnswer { who }
            | ClusterError::Silent { who }
            | ClusterError::Garbled { who, .. }
            | ClusterError::Reported { who, .. } => vec![who.rank],
            _ => self.dead_ranks(),
        }
    }

    /// A read from `who` that failed, as the error it means.
    pub fn from_wire(who: Who, fault: WireError, closed_how: &str) -> ClusterError {
        match fault {
            WireError::Closed => ClusterError::Died {
                who,
                how: closed_how.to_string(),
            },
            WireError::TimedOut => ClusterError::Silent { who },
            fault => ClusterError::Garbled { who, fault },
        }
    }
}

fn names(whos: &[Who]) -> String {
    whos.iter()
        .map(|w| w.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
