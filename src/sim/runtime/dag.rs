//! A max-plus graph: every node is a moment, the latest of its predecessors' moments plus the
//! node's own duration. A runtime's whole iteration (host calls, stream kernels, transfers,
//! channels) is one such graph, so it is solved exactly in one topological pass; a cycle is a
//! deadlock of the modelled runtime.

/// A node of the graph.
pub type Node = u32;

#[derive(Debug, Default)]
pub struct Dag {
    weight: Vec<f64>,
    edges: Vec<(Node, Node)>,
}

impl Dag {
    /// A node `weight` ms after the latest of `preds` (after 0 when there are none).
    pub fn node(&mut self, preds: &[Option<Node>], weight: f64) -> Node {
        let id = self.weight.len() as Node;
        self.weight.push(weight);
        for p in preds.iter().flatten() {
            self.edges.push((*p, id));
        }
        id
    }

    /// `to` also waits for `from` (added after `to` was made, e.g. the other end of a transfer).
    pub fn wait(&mut self, to: Node, from: Node) {
        self.edges.push((from, to));
    }

    pub fn len(&self) -> usize {
        self.weight.len()
    }

    pub fn is_empty(&self) -> bool {
        self.weight.is_empty()
    }

    /// Every node's moment, or the number of nodes a cycle left unsolved.
    pub fn solve(&self) -> Result<Vec<f64>, usize> {
        let n = self.weight.len();
        let mut first = vec![0u32; n + 1];
        let mut indeg = vec![0u32; n];
        for &(a, b) in &self.edges {
            first[a as usize + 1] += 1;
            indeg[b as usize] += 1;
        }
        for i in 0..n {
            first[i + 1] += first[i];
        }
        let mut succ = vec![0 as Node; self.edges.len()];
        let mut fill = first.clone();
        for &(a, b) in &self.edges {
            succ[fill[a as usize] as usize] = b;
            fill[a as usize] += 1;
        }
        let mut start = vec![0.0f64; n];
        let mut at = vec![f64::NAN; n];
        let mut ready: Vec<usize> = (0..n).filter(|&i| indeg[i] == 0).collect();
        let mut solved = 0;
        while let Some(i) = ready.pop() {
            at[i] = start[i] + self.weight[i];
            solved += 1;
            for &j in &succ[first[i] as usize..first[i + 1] as usize] {
                let j = j as usize;
                start[j] = start[j].max(at[i]);
                indeg[j] -= 1;
                if indeg[j] == 0 {
                    ready.push(j);
                }
            }
        }
        if solved < n {
            return Err(n - solved);
        }
        Ok(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_its_latest_predecessor_plus_its_weight() {
        let mut g = Dag::default();
        let a = g.node(&[], 3.0);
        let b = g.node(&[], 5.0);
        let c = g.node(&[Some(a), Some(b), None], 2.0);
        let d = g.node(&[Some(a)], 1.0);
        g.wait(d, c);
        assert_eq!(g.solve().unwrap(), vec![3.0, 5.0, 7.0, 8.0]);
    }

    #[test]
    fn a_cycle_is_reported_not_solved() {
        let mut g = Dag::default();
        let a = g.node(&[], 1.0);
        let b = g.node(&[Some(a)], 1.0);
        g.wait(a, b);
        g.node(&[], 1.0);
        assert_eq!(g.solve(), Err(2));
    }
}
