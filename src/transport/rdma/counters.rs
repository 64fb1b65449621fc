//! An RDMA port's retransmission and sequence-error counters, read from sysfs
//! (`class/infiniband/DEV/ports/P/hw_counters/`) as perftest's `-W` and Meta's GCM read them:
//! a lossy path shows as go-back-N retransmissions and out-of-sequence packets even where its
//! latency looks fine. The counters are the port's, shared by every queue pair on it: a delta
//! around a test is that test's only when nothing else uses the port (`links --concurrent 1`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The counters that count retransmissions or their causes, by driver: mlx5's
/// (`out_of_sequence`, `packet_seq_err`, `local_ack_timeout_err`, `duplicate_request`,
/// `implied_nak_seq_err`, `rnr_nak_retry_err`) and rxe's (`rcvd_seq_err`, `completer_retry_err`,
/// `retry_exceeded_err`, `duplicate_request`, `out_of_seq_request`, `retry_rnr_exceeded_err`,
/// `rcvd_rnr_err`). Whichever a port has are read; the others are absent, not zero.
pub const RETRANSMIT_COUNTERS: &[&str] = &[
    "out_of_sequence",
    "packet_seq_err",
    "local_ack_timeout_err",
    "duplicate_request",
    "implied_nak_seq_err",
    "rnr_nak_retry_err",
    "rcvd_seq_err",
    "completer_retry_err",
    "retry_exceeded_err",
    "out_of_seq_request",
    "retry_rnr_exceeded_err",
    "rcvd_rnr_err",
];

/// One reading: each retransmission counter the port has, by name.
pub type Reading = BTreeMap<String, u64>;

/// Reads `root/class/infiniband/DEV/ports/PORT/hw_counters/` (None where the folder is
/// missing: a device without hardware counters, or no such device).
pub fn read(root: &Path, device: &str, port: u8) -> Option<Reading> {
    let dir = root
        .join("class/infiniband")
        .join(device)
        .join("ports")
        .join(port.to_string())
        .join("hw_counters");
    if !dir.is_dir() {
        return None;
    }
    Some(
        RETRANSMIT_COUNTERS
            .iter()
            .filter_map(|name| {
                let text = std::fs::read_to_string(dir.join(name)).ok()?;
                Some((name.to_string(), text.trim().parse().ok()?))
            })
            .collect(),
    )
}

/// One port's counters, read around each test as perftest's `-W` reads them: a lossy path
/// shows as retransmissions even where the median looks healthy.
#[derive(Debug, Clone)]
pub struct Port {
    /// The sysfs root (`/sys`, or a test's fake tree).
    pub root: PathBuf,
    pub device: String,
    pub port: u8,
}

impl Port {
    pub fn read(&self) -> Option<Reading> {
        read(&self.root, &self.device, self.port)
    }

    /// The increase since `before` (None where the port has no counters), and each that moved.
    pub fn moved_since(&self, before: Option<Reading>) -> (Option<u64>, Vec<(String, u64)>) {
        match before.zip(self.read()) {
            Some((b, a)) => {
                let (total, moved) = delta(&b, &a);
                (Some(total), moved)
            }
            None => (None, Vec::new()),
        }
    }
}

/// The counters' increase from `before` to `after`, summed (a counter that went back, reset,
/// is left out), with each counter that moved.
pub fn delta(before: &Reading, after: &Reading) -> (u64, Vec<(String, u64)>) {
    let moved: Vec<(String, u64)> = after
        .iter()
        .filter_map(|(k, &a)| {
            let b = *before.get(k)?;
            (a > b).then(|| (k.clone(), a - b))
        })
        .collect();
    (moved.iter().map(|m| m.1).sum(), moved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_rxe_ports_counters_are_read_and_their_deltas_summed() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("class/infiniband/rxe0/ports/1/hw_counters");
        std::fs::create_dir_all(&dir).unwrap();
        for (name, v) in [
            ("rcvd_seq_err", "3\n"),
            ("completer_retry_err", "1\n"),
            ("sent_pkts", "900\n"),
            ("duplicate_request", "0\n"),
        ] {
            std::fs::write(dir.join(name), v).unwrap();
        }
        let before = read(t.path(), "rxe0", 1).unwrap();
        // Only retransmission counters are read; the rest of the folder is not.
        assert_eq!(before.len(), 3, "{before:?}");
        std::fs::write(dir.join("rcvd_seq_err"), "10\n").unwrap();
        std::fs::write(dir.join("duplicate_request"), "2\n").unwrap();
        std::fs::write(dir.join("completer_retry_err"), "0\n").unwrap(); // reset
        let after = read(t.path(), "rxe0", 1).unwrap();
        let (total, moved) = delta(&before, &after);
        assert_eq!(total, 9);
        assert_eq!(
            moved,
            [
                ("duplicate_request".to_string(), 2),
                ("rcvd_seq_err".to_string(), 7)
            ]
        );
        assert!(read(t.path(), "mlx5_0", 1).is_none());
    }
}
