//! Zero Bubble's ZB-V, planned as its authors plan it: the greedy list scheduler of
//! `PipelineGraph.try_v_schedule` / `get_v_schedule` (sail-sg/zero-bubble-pipeline-parallelism,
//! `megatron/core/pipeline_parallel/v_schedule.py`, commit 5234a811), ported step for step.
//! Rank i holds model chunks i and 2p - 1 - i (the V); the planner times every op as the
//! engine's replay does (an op ends at the later of its rank's last op plus its cost and its
//! input's end plus the link plus its cost), keeps each rank's activations within a limit (2p
//! chunk-activations by default), fills waits with deferred W's, and re-plans while the worst
//! rank's bubble shrinks. Its orders are then replayed by the engine like any hand schedule.
//!
//! Inside the planner "chunk" is the direction, as in the authors' code: F chunk 0 runs down
//! the ranks, F chunk 1 back up; a B or W of direction 0 is the backward of model chunk 1
//! (it starts on rank 0, where the loss is), direction 1 of model chunk 0.

use std::collections::VecDeque;

use super::model::{Op, OpKind};

/// Times that differ by less than this are equal: the authors plan in whole microseconds, so
/// their comparisons tie exactly where sums of milliseconds in f64 differ by rounding.
const TIE: f64 = 1e-9;

/// Per-chunk op costs (ms), the link latency, and memory in units of one chunk-activation.
#[derive(Debug, Clone, Copy)]
pub struct VCosts {
    pub f: f64,
    pub b: f64,
    pub w: f64,
    pub c: f64,
    /// The share of a forward's activation only the W pass frees (M_W / M_B).
    pub w_share: f64,
    /// Chunk-activations a rank may hold (the authors' default: 2p).
    pub max_mem: f64,
}

/// Per rank, the placed ops as (cat: 0 F, 1 B, 2 W; direction; microbatch).
type Lists = Vec<Vec<(usize, usize, usize)>>;

struct Planner {
    p: usize,
    n: usize,
    k: VCosts,
    fill_f: bool,
    fill_b: bool,
    /// Ops placed per rank, by cat·2 + direction (F0 F1 B0 B1 W0 W1).
    count: Vec<[usize; 6]>,
    end: Vec<Option<f64>>,
    cur: Vec<f64>,
    mem: Vec<f64>,
    bubble: Vec<f64>,
    approved: Vec<f64>,
    pending_w: Vec<VecDeque<usize>>,
    schedule: Lists,
}

impl Planner {
    fn new(p: usize, n: usize, k: VCosts, fill: (bool, bool), approved: Vec<f64>) -> Planner {
        Planner {
            p,
            n,
            k,
            fill_f: fill.0,
            fill_b: fill.1,
            count: vec![[0; 6]; p],
            end: vec![None; 6 * p * n],
            cur: vec![0.0; p],
            mem: vec![0.0; p],
            bubble: vec![0.0; p],
            approved,
            pending_w: vec![VecDeque::new(); p],
            schedule: vec![Vec::new(); p],
        }
    }

    fn id(&self, cat: usize, dir: usize, stage: usize, mb: usize) -> usize {
        ((cat * 2 + dir) * self.p + stage) * self.n + mb
    }

    fn cost(&self, cat: usize) -> f64 {
        [self.k.f, self.k.b, self.k.w][cat]
    }

    fn mem_of(&self, cat: usize) -> f64 {
        [1.0, -(1.0 - self.k.w_share), -self.k.w_share][cat]
    }

    fn max_bubble(&self, stage: Option<usize>) -> f64 {
        let worst = self.bubble.iter().copied().fold(0.0, f64::max);
        let max_approved = self.approved.iter().copied().fold(f64::MIN, f64::max);
        match stage {
            Some(s) => worst.max(max_approved - self.approved[s]),
            None => worst,
        }
    }

    fn put(&mut self, cat: usize, dir: usize, stage: usize) -> anyhow::Result<()> {
        let no_bubble = self.cur[stage] + self.cost(cat);
        let mut t = no_bubble;
        let cnt = self.count[stage][cat * 2 + dir];
        if cnt >= self.n {
            return Err(anyhow::anyhow!(
                "rank {stage} has no {} left to place",
                "FfBbWw".as_bytes()[cat * 2 + dir] as char
            ));
        }
        if self.mem[stage] + self.mem_of(cat) > self.k.max_mem + TIE {
            return Err(anyhow::anyhow!(
                "rank {stage} would go over its memory limit"
            ));
        }
        if cat < 2 {
            let upstream = match dir {
                1 if stage + 1 < self.p => Some(stage + 1),
                0 if stage > 0 => Some(stage - 1),
                _ => None,
            };
            if let Some(up) = upstream {
                let Some(ready) = self.end[self.id(cat, dir, up, cnt)] else {
                    return Err(anyhow::anyhow!("rank {stage}'s op before its input"));
                };
                t = t.max(ready + self.k.c + self.cost(cat));
            }
        }
        if self.count[stage][0] > 0 {
            self.bubble[stage] += t - no_bubble;
        }
        let id = self.id(cat, dir, stage, cnt);
        self.end[id] = Some(t);
        self.cur[stage] = t;
        self.mem[stage] += self.mem_of(cat);
        self.schedule[stage].push((cat, dir, cnt));
        if cat == 1 {
            self.pending_w[stage].push_back(dir);
        }
        self.count[stage][cat * 2 + dir] += 1;
        Ok(())
    }

    fn put_w(&mut self, stage: usize) -> anyhow::Result<()> {
        let dir = self.pending_w[stage]
            .pop_front()
            .ok_or_else(|| anyhow::anyhow!("rank {stage} must free memory and has no W to run"))?;
        self.put(2, dir, stage)
    }

    /// The end of `id`'s op, if it has one (the authors' `end_time[fa] >= 0`).
    fn ended(&self, id: Option<usize>) -> Option<f64> {
        id.and_then(|i| self.end[i])
    }

    /// Before an op whose input comes from `fa`: W's that fit entirely in the wait, then one
    /// more if the wait is more bubble than this rank may add (`extra`: the fill flag).
    fn fill_wait(&mut self, i: usize, fa: Option<usize>, extra: bool) -> anyhow::Result<()> {
        while let Some(ready) = self.ended(fa) {
            if self.pending_w[i].is_empty() || ready + self.k.c + TIE < self.cur[i] + self.k.w {
                break;
            }
            self.put_w(i)?;
        }
        if let Some(ready) = self.ended(fa) {
            let room = self.max_bubble(Some(i)) - self.bubble[i];
            if !self.pending_w[i].is_empty() && ready + self.k.c - self.cur[i] > room + TIE && extra
            {
                self.put_w(i)?;
            }
        }
        Ok(())
    }

    fn warm_up(&mut self) -> anyhow::Result<()> {
        let (p, n) = (self.p, self.n);
        for i in 0..p {
            self.put(0, 0, i)?;
        }
        for i in (0..p).rev() {
            if i == p - 1 {
                self.put(0, 1, i)?;
                continue;
            }
            let due = self.end[self.id(0, 1, i + 1, 0)].unwrap_or(0.0) + self.k.c;
            while self.mem[i] + (2 + 2 * i) as f64 <= self.k.max_mem + TIE
                && self.cur[i] + self.k.f <= due + TIE
                && self.count[i][0] < n - i
            {
                for j in 0..=i {
                    self.put(0, 0, j)?;
                }
            }
            self.put(0, 1, i)?;
        }
        let mut dir = 0;
        let mut guard = 0;
        for i in 1..p {
            loop {
                let (c, prev) = (self.count[i], self.count[i - 1]);
                let behind = c[0] + c[1] < prev[0] + prev[1];
                if !(behind || (c[1] <= prev[1] && prev[1] < n)) {
                    break;
                }
                guard += 1;
                if guard > 4 * p * n + 16 {
                    return Err(anyhow::anyhow!("the forward balance does not settle"));
                }
                for j in (i..p).rev() {
                    if self.count[j][dir] < n {
                        self.put(0, dir, j)?;
                    }
                }
                dir = 1 - dir;
            }
        }
        Ok(())
    }

    fn steady_round(&mut self) -> anyhow::Result<()> {
        let (p, n) = (self.p, self.n);
        for i in 0..p {
            while self.mem[i] + self.mem_of(1) > self.k.max_mem + TIE {
                self.put_w(i)?;
            }
        }
        let (mut b0, mut b1) = (Vec::new(), Vec::new());
        for i in 0..p {
            let c = self.count[i];
            let last = i == p - 1;
            if c[3] >= c[2] {
                b0.push(i);
            } else if last || self.end[self.id(1, 1, i + 1, c[3])].is_some() || c[2] >= n {
                b1.push(i);
            } else {
                b0.push(i);
            }
        }
        let order: Vec<(usize, usize)> = b1
            .iter()
            .rev()
            .map(|&i| (i, 1))
            .chain(b0.iter().map(|&i| (i, 0)))
            .collect();
        for (i, dir) in order {
            let fa = match dir {
                1 if i + 1 < p => Some(self.id(1, 1, i + 1, self.count[i][3])),
                0 if i > 0 => Some(self.id(1, 0, i - 1, self.count[i][2])),
                _ => None,
            };
            self.fill_wait(i, fa, dir == 1 || self.fill_b)?;
            self.put(1, dir, i)?;
        }
        for i in 0..p {
            let c = self.count[i];
            if c[1] >= n {
                continue;
            }
            let item = if c[1] >= c[0] {
                Some(0)
            } else if i == p - 1 || self.end[self.id(0, 1, i + 1, c[1])].is_some() {
                Some(1)
            } else if c[0] < n && (i == 0 || self.end[self.id(0, 0, i - 1, c[0])].is_some()) {
                Some(0)
            } else {
                None
            };
            let Some(item) = item else { continue };
            while self.mem[i] + 1.0 > self.k.max_mem + TIE {
                self.put_w(i)?;
            }
            let fa = match item {
                0 if i > 0 => Some(self.id(0, 0, i - 1, self.count[i][0])),
                1 if i + 1 < p => Some(self.id(0, 1, i + 1, self.count[i][1])),
                _ => None,
            };
            self.fill_wait(i, fa, self.fill_f)?;
            self.put(0, item, i)?;
        }
        Ok(())
    }

    fn run(mut self) -> anyhow::Result<(Lists, Vec<f64>, f64)> {
        self.warm_up()?;
        for _ in 0..2 * self.n {
            self.steady_round()?;
        }
        for i in 0..self.p {
            while !self.pending_w[i].is_empty() {
                self.put_w(i)?;
            }
        }
        let worst = self.max_bubble(None);
        Ok((self.schedule, self.bubble, worst))
    }
}

/// One pass with each fill setting, re-planned on its own bubbles while the worst one shrinks
/// (the authors' recursion).
fn try_v_schedule(
    p: usize,
    n: usize,
    k: VCosts,
    fill: (bool, bool),
) -> anyhow::Result<(Lists, f64)> {
    let (mut schedule, mut bubbles, mut worst) =
        Planner::new(p, n, k, fill, vec![-1.0; p]).run()?;
    loop {
        let (s, b, w) = Planner::new(p, n, k, fill, bubbles.clone()).run()?;
        if w < worst - TIE {
            (schedule, bubbles, worst) = (s, b, w);
        } else {
            return Ok((schedule, worst));
        }
    }
}

/// ZB-V's per-rank orders for `p` ranks and `n` microbatches: the best of the four fill
/// settings (fewest worst-rank bubble; the first on a tie).
pub fn zb_v(p: usize, n: usize, k: VCosts) -> anyhow::Result<Vec<Vec<Op>>> {
    let mut best: Option<(Lists, f64)> = None;
    for fill_b in [true, false] {
        for fill_f in [true, false] {
            let (s, w) = try_v_schedule(p, n, k, (fill_f, fill_b))?;
            if best.as_ref().is_none_or(|(_, b)| w < *b - TIE) {
                best = Some((s, w));
            }
        }
    }
    let (schedule, _) = best.expect("four settings tried");
    Ok(schedule
        .into_iter()
        .enumerate()
        .map(|(rank, list)| {
            list.into_iter()
                .map(|(cat, dir, mb)| {
                    let (kind, chunk) = match cat {
                        0 => (OpKind::F, dir),
                        1 => (OpKind::B, 1 - dir),
                        _ => (OpKind::W, 1 - dir),
                    };
                    Op {
                        kind,
                        stage: rank,
                        mb,
                        chunk,
                    }
                })
                .collect()
        })
        .collect())
}
