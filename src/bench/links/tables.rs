//! links.csv and nodes.csv.

use serde::{Deserialize, Serialize};

use crate::export::csv::{CsvTable, Line};

/// `links.csv`: one row per link, transport, size and kind of test.
pub struct LinksTable;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkParams {
    pub src_rank: u32,
    pub dst_rank: u32,
    pub src_host: String,
    pub dst_host: String,
    /// "tcp" or "rdma".
    pub transport: String,
    pub bytes: u64,
    /// "pingpong" (latency: round trip / 2), "oneway" (src streams to dst) or "bidir" (both
    /// stream at once; gbps is the sum).
    pub direction: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkFigures {
    /// GB/s (10^9 bytes) over the whole test, for streams.
    pub gbps: Option<f64>,
    /// p50 over the baseline of the links of this transport, size, direction and locality
    /// (empty while the run is under way, and in a run that failed).
    pub slowdown: Option<f64>,
    pub flagged: Option<bool>,
    /// Both ranks on one host.
    pub intra_node: bool,
    /// Every message arrived whole and in order (sequence-stamped; perftest's pattern check
    /// for RDMA).
    pub verified: bool,
}

impl CsvTable for LinksTable {
    const NAME: &'static str = "links";
    const WITH_STATS: bool = true;
    type Params = LinkParams;
    type Figures = LinkFigures;
}

/// `nodes.csv`: each rank's fingerprint, one row per metric.
pub struct NodesTable;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeParams {
    pub rank: u32,
    pub host: String,
    pub adapter: String,
    /// "gemm" (a verified GEMM, `size`), "d2h" (device to host copy and map, `size` bytes).
    pub metric: String,
    pub size: String,
    pub cpu_model: String,
    pub logical_cores: usize,
    pub memory_gib: Option<f64>,
    pub kernel: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeFigures {
    pub gflops: Option<f64>,
    pub gbps: Option<f64>,
    pub slowdown: Option<f64>,
    pub flagged: Option<bool>,
    pub verified: bool,
}

impl CsvTable for NodesTable {
    const NAME: &'static str = "nodes";
    const WITH_STATS: bool = true;
    type Params = NodeParams;
    type Figures = NodeFigures;
}

/// The case name of a link row: `r0-r3_tcp_65536_oneway`.
pub fn link_case(p: &LinkParams) -> String {
    format!(
        "r{}-r{}_{}_{}_{}",
        p.src_rank, p.dst_rank, p.transport, p.bytes, p.direction
    )
}

/// Each flagged link (lower rank, higher rank) once, with the index of its worst row (the
/// largest slowdown), for the console and the headlines.
pub fn worst_flagged(rows: &[Line<LinksTable>]) -> std::collections::BTreeMap<(u32, u32), usize> {
    let mut worst: std::collections::BTreeMap<(u32, u32), usize> = Default::default();
    for (i, l) in rows
        .iter()
        .enumerate()
        .filter(|(_, l)| l.figures.flagged == Some(true))
    {
        let (a, b) = (l.params.src_rank, l.params.dst_rank);
        let e = worst.entry((a.min(b), a.max(b))).or_insert(i);
        if l.figures.slowdown > rows[*e].figures.slowdown {
            *e = i;
        }
    }
    worst
}

/// Fills `slowdown` and `flagged` of every row, judging each group (transport, size,
/// direction, locality) apart. Returns the number flagged.
pub fn judge_links(rows: &mut [Line<LinksTable>]) -> usize {
    let key = |l: &Line<LinksTable>| {
        (
            l.params.transport.clone(),
            l.params.bytes,
            l.params.direction.clone(),
            l.figures.intra_node,
        )
    };
    judge_groups(
        rows,
        key,
        |l| (l.stats().p50_us, l.stats().p99_us),
        |l, v| {
            l.figures.slowdown = Some(crate::export::csv::round(v.slowdown, 3));
            l.figures.flagged = Some(v.flagged);
        },
    )
}

/// The same for nodes, grouped by metric and size.
pub fn judge_nodes(rows: &mut [Line<NodesTable>]) -> usize {
    judge_groups(
        rows,
        |l| (l.params.metric.clone(), l.params.size.clone()),
        |l| (l.stats().p50_us, l.stats().p99_us),
        |l, v| {
            l.figures.slowdown = Some(crate::export::csv::round(v.slowdown, 3));
            l.figures.flagged = Some(v.flagged);
        },
    )
}

fn judge_groups<R, K: PartialEq>(
    rows: &mut [R],
    key: impl Fn(&R) -> K,
    time: impl Fn(&R) -> (f64, f64),
    mut set: impl FnMut(&mut R, super::flag::Verdict),
) -> usize {
    let mut done = vec![false; rows.len()];
    let mut flagged = 0;
    for i in 0..rows.len() {
        if done[i] {
            continue;
        }
        let k = key(&rows[i]);
        let members: Vec<usize> = (i..rows.len())
            .filter(|&j| !done[j] && key(&rows[j]) == k)
            .collect();
        let (times, fastest): (Vec<f64>, Vec<f64>) =
            members.iter().map(|&j| time(&rows[j])).unzip();
        for (&j, v) in members.iter().zip(super::flag::judge(&times, &fastest)) {
            flagged += v.flagged as usize;
            set(&mut rows[j], v);
            done[j] = true;
        }
    }
    flagged
}
