//! Synthetic traces in the artifact's schema, for benchmarks at scale: a Megatron 1F1B step
//! (DP x PP, one model chunk per stage) with sends and receives, the DP collectives and the
//! optimizer, every op's times drawn around typical values, one slow worker. The times come
//! from the replay itself (the order is laid out first, then replayed with the drawn costs),
//! so the trace is consistent with the dependency model by construction.

use std::io::Write;

use anyhow::Result;
use rand::{Rng, SeedableRng};

use super::model;
use super::trace::{OpType, Record};
use crate::sim::replay::Costs;

#[derive(Debug, Clone)]
pub struct Shape {
    pub dp: u32,
    pub pp: u32,
    pub microbatches: u32,
    pub steps: u32,
    /// (dp rank, stage, factor): the worker whose computes take `factor` times longer.
    pub slow: Option<(u32, u32, f64)>,
    /// Gradient reduce-scatter overlapped with the backwards (Megatron's
    /// `--overlap-grad-reduce`: a separate all-reduce after them).
    pub overlap: bool,
    pub seed: u64,
}

/// One stage's ops in the order it issues them: (type, seq, microbatch).
fn program(s: u32, pp: u32, m: u32, dp: u32, overlap: bool) -> Vec<(OpType, u32, i32)> {
    let mut out = Vec::new();
    let mut n = std::collections::HashMap::new();
    let mut push = |t: OpType, mb: i32, out: &mut Vec<(OpType, u32, i32)>| {
        let k = n.entry(t).or_insert(0u32);
        out.push((t, *k, mb));
        *k += 1;
    };
    if dp > 1 {
        push(OpType::ParamsAllGather, -1, &mut out);
    }
    let forward = |i: u32, out: &mut Vec<_>, push: &mut dyn FnMut(OpType, i32, &mut Vec<_>)| {
        if s > 0 {
            push(OpType::ForwardRecv, -1, out);
        }
        push(OpType::ForwardCompute, i as i32, out);
        if s + 1 < pp {
            push(OpType::ForwardSend, -1, out);
        }
    };
    let backward = |i: u32, out: &mut Vec<_>, push: &mut dyn FnMut(OpType, i32, &mut Vec<_>)| {
        if s + 1 < pp {
            push(OpType::BackwardRecv, -1, out);
        }
        push(OpType::BackwardCompute, i as i32, out);
        if s > 0 {
            push(OpType::BackwardSend, -1, out);
        }
    };
    let warmup = (pp - s - 1).min(m);
    for i in 0..warmup {
        forward(i, &mut out, &mut push);
    }
    for i in 0..m - warmup {
        forward(warmup + i, &mut out, &mut push);
        backward(i, &mut out, &mut push);
    }
    for i in m - warmup..m {
        backward(i, &mut out, &mut push);
    }
    if dp > 1 && overlap {
        push(OpType::GradsReduceScatter, -1, &mut out);
    }
    push(OpType::Gc, -1, &mut out);
    push(OpType::LayernormGradsAllReduce, -1, &mut out);
    if s == 0 || s + 1 == pp {
        push(OpType::EmbeddingGradsAllReduce, -1, &mut out);
    }
    if dp > 1 && overlap {
        push(OpType::SeparateGradsAllReduce, -1, &mut out);
    } else if dp > 1 {
        push(OpType::GradsReduceScatter, -1, &mut out);
    }
    push(OpType::OptimizerClipMainGrad, -1, &mut out);
    push(OpType::Optimizer, -1, &mut out);
    out
}

/// A typical time per op type, seconds.
fn typical(t: OpType) -> f64 {
    match t {
        OpType::ForwardCompute => 10e-3,
        OpType::BackwardCompute => 20e-3,
        OpType::ParamsAllGather => 2e-3,
        OpType::GradsReduceScatter => 4e-3,
        OpType::SeparateGradsAllReduce => 1e-3,
        OpType::EmbeddingGradsAllReduce => 1e-3,
        OpType::LayernormGradsAllReduce => 0.5e-3,
        OpType::OptimizerClipMainGrad => 0.3e-3,
        OpType::Optimizer => 5e-3,
        OpType::Gc => 0.1e-3,
        _ => 0.2e-3,
    }
}

fn record(d: u32, s: u32, shape: &Shape, step: i64, op: (OpType, u32, i32)) -> Record {
    let (t, seq, mb) = op;
    let chunk = t.is_compute() || t.is_p2p() || t.is_dp_comm();
    Record {
        dp_rank: d,
        stage: s,
        rank: s * shape.dp + d,
        step,
        optype: t,
        start: 0.0,
        duration: 0.0,
        seq_id: seq,
        mc: if chunk { 0 } else { -1 },
        mb_id: mb,
        gmc: if t.is_compute() || t.is_p2p() {
            s as i32
        } else {
            -1
        },
    }
}

/// Writes the trace as CSV.
pub fn write(shape: &Shape, out: &mut dyn Write) -> Result<u64> {
    let (dp, pp) = (shape.dp, shape.pp);
    // Lay the order out on DP rank 0 of one step: ops 1 ms apart, then build the model.
    let programs: Vec<_> = (0..pp)
        .map(|s| program(s, pp, shape.microbatches, dp, shape.overlap))
        .collect();
    let mut layout = Vec::new();
    for (s, prog) in programs.iter().enumerate() {
        for (i, op) in prog.iter().enumerate() {
            let mut r = record(0, s as u32, shape, 0, *op);
            r.start = i as f64 * 1e-3;
            r.duration = 1e-4;
            layout.push(r);
        }
    }
    let model = model::build(&layout, dp > 1, shape.overlap && dp > 1)?;
    let (lanes, n) = ((shape.steps * dp) as usize, model.keys.len());
    let mut rng = rand::rngs::SmallRng::seed_from_u64(shape.seed);
    let mut cost = vec![0.0; n * lanes];
    let mut launch = vec![0.0; n * lanes];
    for (v, key) in model.keys.iter().enumerate() {
        for l in 0..lanes {
            let d = (l % dp as usize) as u32;
            let slow = match shape.slow {
                Some((sd, ss, f)) if sd == d && ss == key.stage && key.optype.is_compute() => f,
                _ => 1.0,
            };
            cost[v * lanes + l] = typical(key.optype) * slow * rng.gen_range(0.97..1.03);
            launch[v * lanes + l] = rng.gen_range(0.0..20e-6);
        }
    }
    let t = model.plan.replay(
        lanes,
        dp as usize,
        &Costs {
            cost: &cost,
            launch: &launch,
        },
    );
    writeln!(
        out,
        "dp_rank,stage,rank,step,optype,start_ts,duration,seq_id,mc,mb_id,gmc"
    )?;
    let mut rows = 0u64;
    for step in 0..shape.steps {
        let offset = step as f64 * 100.0;
        for d in 0..dp {
            for (s, prog) in programs.iter().enumerate() {
                for op in prog {
                    let key = model::OpKey {
                        optype: op.0,
                        seq: op.1,
                        stage: s as u32,
                    };
                    let at = model.index[&key] * lanes + (step * dp + d) as usize;
                    let r = record(d, s as u32, shape, step as i64, *op);
                    writeln!(
                        out,
                        "{},{},{},{},{},{:.9},{:.9},{},{},{},{}",
                        r.dp_rank,
                        r.stage,
                        r.rank,
                        r.step,
                        r.optype.name(),
                        offset + t.start[at],
                        t.end[at] - t.start[at],
                        r.seq_id,
                        r.mc,
                        r.mb_id,
                        r.gmc
                    )?;
                    rows += 1;
                }
            }
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_synthetic_trace_reads_back_and_finds_its_slow_worker() {
        for overlap in [false, true] {
            reads_back(overlap);
        }
    }

    fn reads_back(overlap: bool) {
        let shape = Shape {
            overlap,
            dp: 4,
            pp: 4,
            microbatches: 6,
            steps: 3,
            slow: Some((2, 1, 1.5)),
            seed: 7,
        };
        let mut text = Vec::new();
        write(&shape, &mut text).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        std::fs::write(&path, &text).unwrap();
        let records = super::super::load::read(&path, 64, None).unwrap();
        let sizes = super::super::meta::sizes(None, &Default::default(), &records).unwrap();
        let job = super::super::job::Job::new(&records, sizes, None).unwrap();
        let a = job
            .analyse(super::super::analysis::Splits {
                optype: true,
                dp_rank: true,
                stage: true,
                worker: true,
            })
            .unwrap();
        // Replaying the recorded trace with its own launch delays gives it back.
        let t = job.replay(&job.cost, &job.launch);
        for (i, s) in t.spans(job.dp).iter().enumerate() {
            assert!(
                (s - a.steps[i].base_s).abs() < 1e-6,
                "step {i}: {s} vs {}",
                a.steps[i].base_s
            );
        }
        assert!(a.blocking_slowdown > 1.05, "{}", a.blocking_slowdown);
        let worst = a
            .attribution
            .iter()
            .filter(|g| g.dimension == "worker")
            .max_by(|x, y| x.slowdown.total_cmp(&y.slowdown))
            .unwrap();
        assert_eq!(worst.key, "2:1");
        assert_eq!(a.m_w_workers, vec!["2:1".to_string()]);
        assert!(a.m_w.unwrap().rem > 0.5);
    }
}
