//! A synthetic what-if trace at scale (the benchmark's input, `scripts/whatif-bench`): a
//! Megatron 1F1B step, DP x PP workers, one slow worker, as CSV in the artifact's schema.
//!
//! Usage: whatif_trace OUT.csv DP PP [STEPS] [MICROBATCHES]   (WHATIF_OVERLAP=1: the gradient
//! reduce-scatter overlapped with the backwards)

use std::io::BufWriter;

use anyhow::Context;
use morphbench::bench::whatif::synth::{write, Shape};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: whatif_trace OUT.csv DP PP [STEPS=20] [MICROBATCHES=8]";
    let num = |i: usize, default: Option<u32>| -> anyhow::Result<u32> {
        match (args.get(i), default) {
            (Some(a), _) => a.parse().with_context(|| format!("{a:?}: {usage}")),
            (None, Some(d)) => Ok(d),
            (None, None) => anyhow::bail!("{usage}"),
        }
    };
    let out = args.first().context(usage)?;
    let (dp, pp) = (num(1, None)?, num(2, None)?);
    anyhow::ensure!(
        (1..=4096).contains(&dp) && (2..=256).contains(&pp),
        "DP 1 to 4096, PP 2 to 256"
    );
    let shape = Shape {
        dp,
        pp,
        steps: num(3, Some(20))?,
        microbatches: num(4, Some(8))?,
        // One worker in the middle computes 30% slower.
        slow: Some((dp / 2, pp / 2, 1.3)),
        seed: 1,
        overlap: std::env::var_os("WHATIF_OVERLAP").is_some(),
    };
    let file = std::fs::File::create(out).with_context(|| format!("cannot write {out}"))?;
    let rows = write(&shape, &mut BufWriter::new(file))?;
    eprintln!(
        "{out}: {rows} ops, DP {dp} x PP {pp}, {} steps",
        shape.steps
    );
    Ok(())
}
