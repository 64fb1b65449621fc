//! What each stage's host does, in order: the programs of the real runtimes.

use super::super::model::OpKind;
use super::super::zb::Step;

/// One transfer a call posts: this stage's send of its F (downstream) or B (upstream) output,
/// or its receive of an F (from upstream) or B (from downstream) input.
/// Per stage, the (kind, microbatch) of each op in the order it runs.
pub type Orders = Vec<Vec<(OpKind, usize)>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Xfer {
    Send(OpKind, usize),
    Recv(OpKind, usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Instr {
    Compute(OpKind, usize),
    /// One communication call (a batch or a combined send/receive): its transfers go out
    /// together as one kernel on the stage's communication stream.
    Post(Vec<Xfer>),
}

/// Megatron's non-interleaved 1F1B (`forward_backward_pipelining_without_interleaving`):
/// min(S - i - 1, N) warm-up forwards, each `recv_forward`, F, `send_forward`; then in turn F,
/// `send_forward_recv_backward`, B (fused with W), `send_backward_recv_forward` (the last one
/// `send_backward`); then the cool-down `recv_backward`, B, `send_backward`. First and last
/// stages skip the halves that have no peer.
pub fn megatron_1f1b(stages: usize, n: usize) -> Vec<Vec<Instr>> {
    (0..stages)
        .map(|s| {
            let (first, last) = (s == 0, s + 1 == stages);
            let mut p = Vec::new();
            let call = |p: &mut Vec<Instr>, x: Vec<Option<Xfer>>| {
                let x: Vec<Xfer> = x.into_iter().flatten().collect();
                if !x.is_empty() {
                    p.push(Instr::Post(x));
                }
            };
            let send_f = |m| (!last).then_some(Xfer::Send(OpKind::F, m));
            let recv_f = |m| (!first).then_some(Xfer::Recv(OpKind::F, m));
            let send_b = |m| (!first).then_some(Xfer::Send(OpKind::B, m));
            let recv_b = |m| (!last).then_some(Xfer::Recv(OpKind::B, m));
            let warm = (stages - s - 1).min(n);
            let rest = n - warm;
            for i in 0..warm {
                call(&mut p, vec![recv_f(i)]);
                p.push(Instr::Compute(OpKind::F, i));
                call(&mut p, vec![send_f(i)]);
            }
            if rest > 0 {
                call(&mut p, vec![recv_f(warm)]);
            }
            for j in 0..rest {
                p.push(Instr::Compute(OpKind::F, warm + j));
                call(&mut p, vec![send_f(warm + j), recv_b(j)]);
                p.push(Instr::Compute(OpKind::B, j));
                if j + 1 == rest {
                    call(&mut p, vec![send_b(j)]);
                } else {
                    call(&mut p, vec![send_b(j), recv_f(warm + j + 1)]);
                }
            }
            for i in 0..warm {
                call(&mut p, vec![recv_b(rest + i)]);
                p.push(Instr::Compute(OpKind::B, rest + i));
                call(&mut p, vec![send_b(rest + i)]);
            }
            p
        })
        .collect()
}

/// A runtime list with explicit sends and receives (ZB's): each run of consecutive
/// communication steps is one batch, posted together.
pub fn from_steps(lists: &[Vec<Step>]) -> Vec<Vec<Instr>> {
    lists
        .iter()
        .map(|l| {
            let mut p: Vec<Instr> = Vec::new();
            for step in l {
                let x = match *step {
                    Step::Compute(k, m) => {
                        p.push(Instr::Compute(k, m));
                        continue;
                    }
                    Step::Send(k, m) => Xfer::Send(k, m),
                    Step::Recv(k, m) => Xfer::Recv(k, m),
                };
                match p.last_mut() {
                    Some(Instr::Post(batch)) => batch.push(x),
                    _ => p.push(Instr::Post(vec![x])),
                }
            }
            p
        })
        .collect()
}

/// A fixed op order whose transfers are implicit (the offload path's: each output is handed to
/// the host as its op ends, each input awaited as its op starts).
pub fn from_orders(orders: &[Vec<(OpKind, usize)>], stages: usize) -> Vec<Vec<Instr>> {
    orders
        .iter()
        .enumerate()
        .map(|(s, o)| {
            let mut p = Vec::new();
            for &(k, m) in o {
                let input = match k {
                    OpKind::F if s > 0 => Some(Xfer::Recv(OpKind::F, m)),
                    OpKind::B if s + 1 < stages => Some(Xfer::Recv(OpKind::B, m)),
                    _ => None,
                };
                p.extend(input.map(|x| Instr::Post(vec![x])));
                p.push(Instr::Compute(k, m));
                let output = match k {
                    OpKind::F if s + 1 < stages => Some(Xfer::Send(OpKind::F, m)),
                    OpKind::B if s > 0 => Some(Xfer::Send(OpKind::B, m)),
                    _ => None,
                };
                p.extend(output.map(|x| Instr::Post(vec![x])));
            }
            p
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn megatron_1f1b_posts_combined_calls_in_steady_state() {
        let p = megatron_1f1b(2, 3);
        use Instr::*;
        use OpKind::*;
        // Stage 0: one warm-up forward, then F, send F + receive B, B, ...
        assert_eq!(p[0][0], Compute(F, 0));
        assert_eq!(p[0][1], Post(vec![Xfer::Send(F, 0)]));
        assert_eq!(p[0][2], Compute(F, 1));
        assert_eq!(p[0][3], Post(vec![Xfer::Send(F, 1), Xfer::Recv(B, 0)]));
        // Stage 1 (last): receive F, F, B, send B + receive the next F.
        assert_eq!(p[1][0], Post(vec![Xfer::Recv(F, 0)]));
        assert_eq!(p[1][3], Post(vec![Xfer::Send(B, 0), Xfer::Recv(F, 1)]));
        let computes = |s: usize| p[s].iter().filter(|i| matches!(i, Compute(..))).count();
        assert_eq!((computes(0), computes(1)), (6, 6));
    }
}
