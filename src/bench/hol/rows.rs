//! `hol.csv`: its row type, and the aggregation of one point's repetitions into a row.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::offload::{OffloadSample, Rep};
use super::plan::Mode;
use crate::record::csv::round;
use crate::record::CsvTable;
use crate::stats::Summary;

/// `hol.csv`: one row per mode, delay, transfer size and transfer period. The statistics block
/// summarises the makespan over repetitions.
pub struct HolTable;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HolParams {
    pub mode: Mode,
    /// The injected delay per transfer in ms, or `trace`.
    pub delay_ms: String,
    pub bytes: u64,
    pub every: u32,
    pub ops: u32,
    pub tokens: u32,
    pub hidden: u32,
    /// `tcp-loopback`, `tcp-peer`, `rdma-loopback`, `rdma-peer` (offload rows only).
    pub transport: String,
}

/// Figures of one point. Mode-specific ones are empty in the other modes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HolFigures {
    pub makespan_us: f64,
    pub busy_fraction: f64,
    pub stall_mean_us: f64,
    pub stall_p50_us: f64,
    pub stall_p99_us: f64,
    pub stall_max_us: f64,
    /// 1 - offload stall / inline stall at the same delay.
    pub stall_removed: Option<f64>,
    pub busy_vs_none: Option<f64>,
    pub overhead_vs_none: Option<f64>,
    pub standin_asked_us: Option<f64>,
    pub standin_achieved_us: Option<f64>,
    pub d2h_copy_us: Option<f64>,
    pub map_us: Option<f64>,
    pub copy_out_us: Option<f64>,
    pub delay_us: Option<f64>,
    pub send_us: Option<f64>,
    pub receive_us: Option<f64>,
    pub transfer_e2e_us: Option<f64>,
    pub transfer_e2e_p99_us: Option<f64>,
    pub transfers: u64,
    pub timer: String,
    pub verified: bool,
}

impl CsvTable for HolTable {
    const NAME: &'static str = super::plan::BENCH;
    const WITH_STATS: bool = true;
    type Params = HolParams;
    type Figures = HolFigures;
    const SIGNED: &'static [&'static str] = &["stall_removed", "overhead_vs_none"];
}

/// The repetitions of one point, as they come in.
#[derive(Default)]
pub struct Aggregate {
    makespans: Vec<f64>,
    busy: Vec<f64>,
    stalls: Vec<f64>,
    /// Stand-in times asked for and achieved (inline).
    asked: Vec<f64>,
    achieved: Vec<f64>,
    /// Staging copies on the queue and the host side of each transfer (offload).
    copies: Vec<f64>,
    parts: Vec<OffloadSample>,
    transfers: u64,
}

/// The median makespan and busy fraction of the `none` baseline.
#[derive(Debug, Clone, Copy)]
pub struct Baseline {
    pub makespan_us: f64,
    pub busy_fraction: f64,
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

impl Aggregate {
    /// Adds one repetition; `asked_us` is what each stand-in was asked to take (inline).
    pub fn add(&mut self, mode: Mode, rep: &Rep, asked_us: &[f64]) {
        let first = rep.ops[0].0;
        let last = rep.ops.last().map_or(first, |o| o.1);
        let makespan = last - first;
        self.makespans.push(makespan);
        self.busy
            .push(rep.ops.iter().map(|(s, e)| e - s).sum::<f64>() / makespan);
        self.stalls
            .extend(rep.ops.windows(2).map(|w| (w[1].0 - w[0].1).max(0.0)));
        let spans = rep.transfers.iter().map(|(s, e)| e - s);
        match mode {
            Mode::Inline => {
                self.asked.extend_from_slice(asked_us);
                self.achieved.extend(spans);
            }
            Mode::Offload => {
                self.copies.extend(spans);
                self.parts.extend_from_slice(&rep.offload);
            }
            Mode::None => {}
        }
        if mode != Mode::None {
            self.transfers += rep.transfers.len() as u64;
        }
    }

    pub fn makespan(&self) -> Result<Summary> {
        Summary::of(&self.makespans).context("no makespan")
    }

    pub fn stall(&self) -> Result<Summary> {
        Summary::of(&self.stalls).context("no stalls")
    }

    /// The median over repetitions: one disturbed repetition on a shared machine does not
    /// move the figure.
    pub fn busy_fraction(&self) -> Result<f64> {
        Ok(Summary::of(&self.busy).context("no busy fraction")?.p50)
    }

    /// The row's figures; `inline_stall` is the inline mode's mean stall at the same delay.
    pub fn figures(
        &self,
        mode: Mode,
        none: Option<Baseline>,
        inline_stall: Option<f64>,
    ) -> Result<HolFigures> {
        let ms = self.makespan()?;
        let st = self.stall()?;
        let busy_fraction = self.busy_fraction()?;
        let r2 = |x: f64| round(x, 2);
        let r4 = |x: f64| round(x, 4);
        let (is_in, is_off) = (mode == Mode::Inline, mode == Mode::Offload);
        let off = |f: fn(&OffloadSample) -> f64| is_off.then(|| r2(mean(self.parts.iter().map(f))));
        let e2e = Summary::of(
            &self
                .parts
                .iter()
                .map(|p| p.end_to_end_us)
                .collect::<Vec<_>>(),
        );
        let vs_none = none.filter(|_| mode != Mode::None);
        Ok(HolFigures {
            makespan_us: r2(ms.p50),
            busy_fraction: r4(busy_fraction),
            stall_mean_us: r2(st.mean),
            stall_p50_us: r2(st.p50),
            stall_p99_us: r2(st.p99),
            stall_max_us: r2(st.max),
            stall_removed: inline_stall
                .filter(|&s| is_off && s > 0.0)
                .map(|s| r4(1.0 - st.mean / s)),
            busy_vs_none: vs_none.map(|n| r4(busy_fraction / n.busy_fraction)),
            overhead_vs_none: vs_none.map(|n| r4(ms.p50 / n.makespan_us - 1.0)),
            standin_asked_us: is_in.then(|| r2(mean(self.asked.iter().copied()))),
            standin_achieved_us: is_in.then(|| r2(mean(self.achieved.iter().copied()))),
            d2h_copy_us: is_off.then(|| r2(mean(self.copies.iter().copied()))),
            map_us: off(|p| p.map.map_us),
            copy_out_us: off(|p| p.map.copy_us),
            delay_us: off(|p| p.delay_us),
            send_us: off(|p| p.send_us),
            receive_us: off(|p| p.receive_us),
            transfer_e2e_us: e2e.as_ref().map(|s| r2(s.mean)),
            transfer_e2e_p99_us: e2e.as_ref().map(|s| r2(s.p99)),
            transfers: self.transfers,
            timer: "gpu".into(),
            verified: true,
        })
    }
}
