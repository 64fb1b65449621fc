//! TCP retransmissions made to happen and seen counted: `links --local 2` in a network
//! namespace of its own whose loopback drops 5% of TCP packets (nftables `numgen random`)
//! counts retransmissions in links.csv, far more than the same run on a healthy loopback (a
//! loopback retransmits now and then by itself, 0 to 2 in a run here: receive-queue drops on
//! a busy machine, not loss, so a healthy run is held to a third of the lossy count, not 0).
//! Needs root, `unshare` and `nft`: ignored by default, run by scripts/cluster-test.

mod common;

use std::process::Command;

use common::{col, read_csv};

/// Runs links in a fresh network namespace, its loopback dropping `drop_pct`% of
/// TCP packets; returns (rows, the sum of their retransmits).
fn links_in_namespace(drop_pct: u32) -> (usize, u64) {
    let out = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_morphbench");
    let script = format!(
        "set -e\nip link set lo up\n\
         nft -f - <<'NFT'\ntable inet lossy {{\n  chain out {{\n    type filter hook output priority 0;\n    \
         meta l4proto tcp numgen random mod 100 < {drop_pct} drop\n  }}\n}}\nNFT\n\
         MORPHBENCH_TOKEN=0123456789abcdef0123 {bin} -q --out {} links --local 2 --sizes 8,64K --iters 200\n",
        out.path().display()
    );
    let o = Command::new("unshare")
        .args(["-n", "bash", "-c", &script])
        .output()
        .expect("unshare runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let run = common::only_run(out.path());
    let (h, rows) = read_csv(&run.join("links.csv"));
    let total = rows
        .iter()
        .map(|r| r[col(&h, "retransmits")].parse::<u64>().unwrap_or(0))
        .sum();
    (rows.len(), total)
}

#[test]
#[ignore = "needs root, unshare and nft: scripts/cluster-test runs it"]
fn dropped_packets_are_counted_as_retransmissions_far_above_a_healthy_path() {
    let (rows, lossy) = links_in_namespace(5);
    assert!(rows > 0);
    assert!(
        lossy >= 5,
        "5% of packets dropped, yet {lossy} retransmissions counted"
    );
    let (_, healthy) = links_in_namespace(0);
    assert!(
        healthy * 3 <= lossy,
        "a healthy loopback retransmitted {healthy} times, the lossy one {lossy}"
    );
}
