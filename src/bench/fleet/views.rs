//! What readers take from `fleet.csv`: its headlines. Its charts are [`super::charts`].

use super::table::FleetTable;
use crate::record::view::headline::{source, Headline};
use crate::record::view::loaded::Loaded;

/// The fleet gate: how many nodes passed, then each node that did not, with its first reason.
pub fn headlines(run: &Loaded, out: &mut Vec<Headline>) {
    let Some(t) = run.table::<FleetTable>() else {
        return;
    };
    use crate::verdict::Verdict;
    use std::collections::BTreeMap;
    // rank -> (host, verdict, the first row of that verdict)
    let mut nodes: BTreeMap<u32, (String, Verdict, usize)> = BTreeMap::new();
    for (i, r) in t.iter().enumerate() {
        let e = nodes
            .entry(r.params.rank)
            .or_insert((r.params.host.clone(), Verdict::Skip, i));
        let v = e.1.worse(r.figures.verdict);
        if v != e.1 {
            (e.1, e.2) = (v, i);
        }
    }
    let passed = nodes.values().filter(|n| n.1 == Verdict::Pass).count();
    out.push(Headline {
        bench: "fleet",
        what: "nodes that passed the gate".into(),
        value: Some(passed as f64),
        unit: "nodes",
        text: format!("{passed} of {} ranks PASS", nodes.len()),
        source: "fleet.csv".into(),
    });
    for (rank, (host, verdict, i)) in nodes.into_iter().filter(|n| n.1 .1 != Verdict::Pass) {
        let r = &t[i];
        out.push(Headline {
            bench: "fleet",
            what: format!("{verdict} node r{rank} {host}"),
            value: r.figures.value,
            unit: "",
            text: format!(
                "{} {}: {}",
                r.params.test, r.params.figure, r.figures.reason
            ),
            source: source("fleet.csv", i),
        });
    }
}
