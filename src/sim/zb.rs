//! The schedule Zero Bubble's Megatron runtime actually runs (the artifact's "ZB" system): its
//! greedy heuristic placement of F, B and W, planned once with every op costing the same
//! (1000 units, 1 for a hop: it is never re-planned from profiles in short runs), activation
//! memory as F = +1, B = 0, W = -1 against a limit of 2 x stages (`ZERO_BUBBLE_MEM_LIMIT`).
//! Of its eight flag settings the shortest plan wins. Then the receives and sends are placed
//! in each stage's list the way its runtime posts them: at the producer's finish, a receive
//! moved ahead of the compute it overlaps (so it is posted one op early).

use super::model::OpKind;

/// One entry of a stage's runtime list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Compute(OpKind, usize),
    /// Send of this stage's F (downstream) or B (upstream) output for a microbatch.
    Send(OpKind, usize),
    /// Receive of the input of this stage's F (from upstream) or B (from downstream).
    Recv(OpKind, usize),
}

const UNIT: i64 = 1000;
const HOP: i64 = 1;

struct Placer {
    stages: usize,
    n: usize,
    max_mem: i64,
    /// Ops placed per stage and kind (F, B, W).
    count: Vec<[usize; 3]>,
    mem: Vec<i64>,
    /// When each stage's last placed op ends.
    end: Vec<i64>,
    /// When each op ends, by (kind, stage, microbatch).
    t: Vec<i64>,
    bubble: Vec<i64>,
}

fn kind_index(k: OpKind) -> usize {
    k.index()
}

impl Placer {
    fn id(&self, k: OpKind, stage: usize, mb: usize) -> usize {
        (kind_index(k) * self.stages + stage) * self.n + mb
    }

    fn at(&self, k: OpKind, stage: usize, mb: usize) -> i64 {
        self.t[self.id(k, stage, mb)]
    }

    fn max_bubble(&self) -> i64 {
        self.bubble.iter().copied().max().unwrap_or(0)
    }

    fn put(&mut self, j: usize, k: OpKind) -> anyhow::Result<()> {
        let mb = self.count[j][kind_index(k)];
        let mem = [1, 0, -1][kind_index(k)];
        if self.mem[j] + mem > self.max_mem {
            return Err(anyhow::anyhow!(
                "stage {j} over its memory limit placing {k}{mb}"
            ));
        }
        let no_bubble = self.end[j] + UNIT;
        let mut end = no_bubble;
        if k == OpKind::F && j > 0 {
            end = end.max(self.at(OpKind::F, j - 1, mb) + HOP + UNIT);
        }
        if k == OpKind::B && j + 1 < self.stages {
            end = end.max(self.at(OpKind::B, j + 1, mb) + HOP + UNIT);
        }
        if self.count[j][0] > 0 {
            self.bubble[j] += end - no_bubble;
        }
        self.end[j] = end;
        let id = self.id(k, j, mb);
        self.t[id] = end;
        self.mem[j] += mem;
        self.count[j][kind_index(k)] += 1;
        Ok(())
    }

    fn f(&self, j: usize) -> usize {
        self.count[j][0]
    }
    fn b(&self, j: usize) -> usize {
        self.count[j][1]
    }
    fn w(&self, j: usize) -> usize {
        self.count[j][2]
    }

    /// Weight gradients while memory is full.
    fn free_memory(&mut self, j: usize, need: i64) -> anyhow::Result<()> {
        while self.mem[j] + need > self.max_mem {
            if self.w(j) >= self.b(j) {
                return Err(anyhow::anyhow!("stage {j} cannot fit its memory limit"));
            }
            self.put(j, OpKind::W)?;
        }
        Ok(())
    }

    /// Weight gradients that fit before the input due at `due`, and one more if the wait is
    /// a bubble the greedy rule lets it fill.
    fn fill_wait(&mut self, j: usize, due: i64, greedy: bool) -> anyhow::Result<()> {
        while self.w(j) < self.b(j) && self.end[j] + UNIT <= due {
            self.put(j, OpKind::W)?;
        }
        if self.w(j) < self.b(j) && self.end[j] < due {
            let small = due - self.end[j] <= self.max_bubble() - self.bubble[j];
            if !small || greedy {
                self.put(j, OpKind::W)?;
            }
        }
        Ok(())
    }

    /// The first microbatch: F on every stage, extra warm-up forwards from the last stage
    /// back while memory allows and the first B has not come back, then B0 down the stages.
    fn first_round(&mut self, allow_bubble: bool) -> anyhow::Result<()> {
        let s = self.stages;
        for j in 0..s {
            self.put(j, OpKind::F)?;
        }
        let mut extra = vec![0usize; s];
        let mut last_t = 0;
        for j in (0..s).rev() {
            if j == s - 1 {
                last_t = self.at(OpKind::F, j, 0) + UNIT;
                continue;
            }
            let (mut mem, mut cost) = (self.mem[j], self.end[j]);
            while self.f(j) + extra[j] < self.n && mem < self.max_mem {
                let stop = if allow_bubble {
                    cost + UNIT > last_t + HOP
                } else {
                    cost >= last_t + HOP
                };
                if stop {
                    break;
                }
                mem += 1;
                cost += UNIT;
                extra[j] += 1;
            }
            last_t = cost.max(last_t + HOP) + UNIT;
        }
        for j in 1..s {
            while extra[j] > 0 && extra[j] >= extra[j - 1] && self.f(j) + extra[j] < self.n {
                extra[j] -= 1;
            }
        }
        for (j, &e) in extra.iter().enumerate() {
            for _ in 0..e {
                self.put(j, OpKind::F)?;
            }
        }
        for j in (0..s).rev() {
            self.put(j, OpKind::B)?;
        }
        Ok(())
    }

    /// Whether stage j takes a forward this round.
    fn wants_forward(&self, j: usize, prioritize_b: bool) -> bool {
        if self.f(j) >= self.n {
            return false;
        }
        if j + 1 < self.stages && self.f(j) >= self.f(j + 1) + 2 && prioritize_b {
            let next_plus_fw = self.end[j + 1] + 2 * UNIT + HOP;
            if self.end[j] >= next_plus_fw {
                return false;
            }
            let (mut w_cost, mut w_cnt, mut mem) = (0, 0, self.mem[j] + 1);
            while mem > self.max_mem && self.w(j) + w_cnt < self.b(j) {
                w_cost += UNIT;
                mem -= 1;
                w_cnt += 1;
            }
            if self.end[j] + UNIT + w_cost <= next_plus_fw {
                return true;
            }
            if next_plus_fw - self.end[j] <= self.max_bubble() - self.bubble[j] {
                return false;
            }
        }
        true
    }

    fn round(&mut self, i: usize, prioritize_b: bool, greedy: bool) -> anyhow::Result<()> {
        let s = self.stages;
        let mut forward: Vec<bool> = (0..s)
            .map(|j| self.wants_forward(j, prioritize_b))
            .collect();
        for j in (0..s.saturating_sub(1)).rev() {
            forward[j] = forward[j] && forward[j + 1];
        }
        for (j, &go) in forward.iter().enumerate() {
            if !go {
                continue;
            }
            self.free_memory(j, 1)?;
            if j > 0 {
                let due = self.at(OpKind::F, j - 1, self.f(j)) + HOP;
                self.fill_wait(j, due, greedy)?;
            }
            self.put(j, OpKind::F)?;
        }
        for j in (0..s).rev() {
            debug_assert_eq!(self.b(j), i);
            self.free_memory(j, 0)?;
            if j + 1 < s {
                let due = self.at(OpKind::B, j + 1, i) + HOP;
                self.fill_wait(j, due, greedy)?;
            }
            if j == 0 && self.f(j) == self.n {
                while self.w(j) < self.b(j) {
                    self.put(j, OpKind::W)?;
                }
            }
            self.put(j, OpKind::B)?;
        }
        Ok(())
    }
}

/// One plan of the heuristic: each op's end time and the makespan.
fn place(
    stages: usize,
    n: usize,
    mem_limit: usize,
    flags: (bool, bool, bool),
) -> anyhow::Result<(Vec<i64>, i64)> {
    let (allow_bubble, prioritize_b, greedy) = flags;
    let mut p = Placer {
        stages,
        n,
        max_mem: mem_limit as i64,
        count: vec![[0; 3]; stages],
        mem: vec![0; stages],
        end: vec![0; stages],
        t: vec![0; 3 * stages * n],
        bubble: vec![0; stages],
    };
    p.first_round(allow_bubble)?;
    for i in 1..n {
        p.round(i, prioritize_b, greedy)?;
    }
    for j in 0..stages {
        while p.w(j) < n {
            p.put(j, OpKind::W)?;
        }
    }
    let span = (0..stages)
        .map(|j| p.at(OpKind::W, j, n - 1) - p.at(OpKind::F, j, 0) + UNIT)
        .max()
        .unwrap_or(0);
    Ok((p.t, span))
}

/// ZB's per-stage runtime lists (compute, sends and receives) for `stages` x `n` under
/// `mem_limit` activations.
pub fn zb_runtime_lists(
    stages: usize,
    n: usize,
    mem_limit: usize,
) -> anyhow::Result<Vec<Vec<Step>>> {
    let mut best: Option<(i64, Vec<i64>)> = None;
    let mut last_err = String::new();
    for a in [true, false] {
        for p in [true, false] {
            for g in [true, false] {
                match place(stages, n, mem_limit, (a, p, g)) {
                    Ok((t, span)) if best.as_ref().is_none_or(|b| span < b.0) => {
                        best = Some((span, t))
                    }
                    Ok(_) => {}
                    Err(e) => last_err = format!("{e:#}"),
                }
            }
        }
    }
    let (_, t) = best.ok_or_else(|| anyhow::anyhow!("no ZB plan fits: {last_err}"))?;
    Ok(with_communication(stages, n, &t))
}

/// Runtime lists for any plan made at unit op times: `end` gives each op's end (in op times),
/// by (kind, stage, microbatch) as [`OpKind::index`] x stages x n + stage x n + microbatch.
pub fn runtime_lists_from_ends(stages: usize, n: usize, end: &[f64]) -> Vec<Vec<Step>> {
    let t: Vec<i64> = end
        .iter()
        .map(|&e| (e * UNIT as f64).round() as i64)
        .collect();
    with_communication(stages, n, &t)
}

/// Places sends and receives among each stage's ops by the producer's finish time.
fn with_communication(stages: usize, n: usize, t: &[i64]) -> Vec<Vec<Step>> {
    let id = |k: OpKind, s: usize, mb: usize| (kind_index(k) * stages + s) * n + mb;
    // (start, tie-break, step): comm before compute at one instant, comm in creation order.
    let mut lists: Vec<Vec<(i64, i64, i64, Step)>> = vec![Vec::new(); stages];
    let mut comm_id = 0i64;
    for s in 0..stages {
        for k in [OpKind::F, OpKind::B, OpKind::W] {
            for mb in 0..n {
                let end = t[id(k, s, mb)];
                lists[s].push((end - UNIT, i64::MAX, end, Step::Compute(k, mb)));
            }
        }
    }
    for s in 0..stages {
        for k in [OpKind::F, OpKind::B] {
            for mb in 0..n {
                let end = t[id(k, s, mb)];
                let to = match k {
                    OpKind::F if s + 1 < stages => s + 1,
                    OpKind::B if s > 0 => s - 1,
                    _ => continue,
                };
                lists[s].push((end, comm_id, end, Step::Send(k, mb)));
                lists[to].push((end, comm_id, end, Step::Recv(k, mb)));
                comm_id += 1;
            }
        }
    }
    lists
        .into_iter()
        .map(|mut l| {
            l.sort_by_key(|&(start, tie, _, _)| (start, tie));
            for i in 1..l.len() {
                let prev_compute = matches!(l[i - 1].3, Step::Compute(..));
                if prev_compute && matches!(l[i].3, Step::Recv(..)) && l[i].0 <= l[i - 1].2 {
                    l.swap(i - 1, i);
                }
            }
            l.into_iter().map(|(_, _, _, step)| step).collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compact(list: &[Step]) -> String {
        list.iter()
            .filter_map(|s| match s {
                Step::Compute(k, _) => Some(k.to_string().to_lowercase()),
                _ => None,
            })
            .collect()
    }

    fn words(list: &[Step]) -> String {
        let w: Vec<String> = list
            .iter()
            .map(|s| match s {
                Step::Compute(k, m) => format!("{k}{m}"),
                Step::Send(OpKind::F, m) => format!("sf{m}"),
                Step::Send(_, m) => format!("sb{m}"),
                Step::Recv(OpKind::F, m) => format!("rf{m}"),
                Step::Recv(_, m) => format!("rb{m}"),
            })
            .collect();
        w.join(" ")
    }

    /// The orders ZB's planner gives 4 stages and 12 microbatches at its memory limit of 8
    /// (its warm-up 7, 5, 3, 1 forwards: 2 (S - 1 - i) + 1).
    #[test]
    fn four_stages_twelve_microbatches_match_zero_bubbles_plan() {
        let lists = zb_runtime_lists(4, 12, 8).unwrap();
        let want = [
            "fffffffbfbwfbbwfbbwfbbwfwwwwbwbwbwbw",
            "fffffbfbfbfbwfbbwfbbwfbwfbwwbwwbwwww",
            "fffbfbfbfbfbfbwfbbwfbwfbwfbwwbwwwwww",
            "fbfbfbfbfbfbfbfbwfbwfbwfbwfbwwwwwwww",
        ];
        for (s, w) in want.iter().enumerate() {
            assert_eq!(&compact(&lists[s]), w, "stage {s}");
        }
        assert!(words(&lists[0]).starts_with("F0 sf0 F1 sf1"));
        assert!(words(&lists[1]).starts_with("rf0 rf1 F0 sf0 rf2 F1"));
        assert!(words(&lists[3]).starts_with("rf0 rf1 F0 rf2 B0 sb0 F1 B1"));
    }

    #[test]
    fn every_op_and_transfer_appears_once() {
        for (s, n) in [(2, 2), (3, 7), (8, 24), (5, 5)] {
            let lists = zb_runtime_lists(s, n, 2 * s).unwrap();
            for (j, l) in lists.iter().enumerate() {
                let comm = l.iter().filter(|x| !matches!(x, Step::Compute(..))).count();
                let want = 2 * n * (if j == 0 || j + 1 == s { 1 } else { 2 });
                assert_eq!(l.len() - comm, 3 * n, "stage {j}");
                assert_eq!(comm, want, "stage {j} of {s}x{n}");
            }
        }
    }
}
