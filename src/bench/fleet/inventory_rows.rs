//! The inventory's rows of fleet.csv: each field that nodes of one adapter must agree on
//! (driver, adapter count, RDMA devices, CPU model, cores, memory), a WARN for the node a
//! strict majority of its kind outvotes, and a FAIL for a rank with no adapter.

use std::collections::BTreeMap;

use super::inventory::fields;
use super::rank::{judged, row, RankOutcome, Row, FAIL, PASS, WARN};

pub(super) fn rows(ranks: &[RankOutcome]) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut by_adapter: BTreeMap<String, Vec<&RankOutcome>> = BTreeMap::new();
    for o in ranks.iter().filter(|o| o.inventory.is_some()) {
        by_adapter.entry(o.adapter()).or_default().push(o);
    }
    // Each field's most common text per adapter, counted once (a count per rank would be
    // quadratic: 4,096 ranks took 20 s), ties broken as before.
    let commons: BTreeMap<&String, Vec<(String, usize, usize)>> = by_adapter
        .iter()
        .map(|(adapter, peers)| {
            let mut counts: Vec<BTreeMap<String, usize>> = Vec::new();
            for q in peers {
                let f = fields(q.inventory.as_ref().expect("filtered"));
                counts.resize_with(f.len(), BTreeMap::new);
                for (k, (_, text, _)) in f.into_iter().enumerate() {
                    *counts[k].entry(text).or_default() += 1;
                }
            }
            let common = counts
                .into_iter()
                .map(|c| {
                    c.iter()
                        .max_by_key(|(_, n)| **n)
                        .map(|(t, n)| (t.clone(), *n, peers.len()))
                        .unwrap_or_default()
                })
                .collect();
            (adapter, common)
        })
        .collect();
    for o in ranks {
        let Some(inv) = &o.inventory else { continue };
        if let Some(e) = &inv.gpu_error {
            let why = format!("no GPU adapter: {e}");
            rows.push(judged(o, "inventory", "adapter", FAIL, why));
            continue;
        }
        let common = &commons[&o.adapter()];
        for (k, (field, text, number)) in fields(inv).into_iter().enumerate() {
            let (p, mut f) = row(o, "inventory", field);
            f.value = number;
            let (common, n, peers) = &common[k];
            // An odd node is one outvoted by a strict majority of its kind.
            if &text != common && 2 * n > *peers {
                f.verdict = WARN;
                f.reason = format!(
                    "{field} is {text:?} where {n} of {peers} nodes with this adapter have \
                     {common:?}"
                );
            } else {
                f.verdict = PASS;
                f.reason = text;
            }
            rows.push((p, f));
        }
    }
    rows
}
