//! Each rank's PCIe link as fleet.csv rows (test `pcie`, figures `width`, `speed_gts`,
//! `aer_correctable`), read by the rank while its D2H test copied and around its batches, and
//! judged by [`crate::pcie::judge`]: a link below what it can attain under load (the lesser of its
//! two ends' maxima, so a card in a slower slot is slot-limited, not failed) FAILs with both
//! widths and speeds in the reason, AER errors over the run WARN (correctable) or FAIL, and a
//! rank whose sysfs has no such files gets one SKIP row saying "not exposed", never a PASS.

use super::checks::TestKind;
use super::rank::{judged, RankOutcome, Row, FAIL, PASS, SKIP, WARN};
use crate::pcie::{judge, Judged};
use crate::reported::Reported;

/// The rows of every rank that ran its D2H test (none for a gate without one).
pub fn rows(ranks: &[RankOutcome]) -> Vec<Row> {
    let mut out = Vec::new();
    for o in ranks.iter().filter(|o| o.failure.is_none()) {
        let read = o
            .batches
            .iter()
            .flat_map(|b| b.results.iter())
            .find(|m| m.test == TestKind::D2h)
            .and_then(|m| m.pcie.clone());
        let Some(read) = read else { continue };
        let under = match read {
            Reported::Ok(p) => p,
            Reported::Err(why) => {
                out.push(judged(o, "pcie", "link", SKIP, why));
                continue;
            }
        };
        let around: Vec<_> = o
            .batches
            .iter()
            .filter_map(|b| b.pcie_around.as_ref())
            .collect();
        let before = around.first().map_or(&under, |a| &a.0);
        let after = around.last().map_or(&under, |a| &a.1);
        let (verdict, reason) = match judge(&under, before, after) {
            Judged::Pass(r) => (PASS, r),
            Judged::Warn(r) => (WARN, r),
            Judged::Fail(r) => (FAIL, r),
            Judged::NotExposed(r) => (SKIP, format!("not exposed: {r}")),
        };
        let d = &under.device;
        let correctable = match (before.device.aer.correctable, after.device.aer.correctable) {
            (Some(b), Some(a)) if a >= b => Some((a - b) as f64),
            _ => None,
        };
        let figures = [
            (
                "width",
                d.width.map(f64::from),
                d.max_width.map(f64::from),
                "lanes",
            ),
            ("speed_gts", d.speed_gts, d.max_speed_gts, "GT/s"),
            ("aer_correctable", correctable, Some(0.0), "errors"),
        ];
        for (figure, value, expected, unit) in figures {
            let (p, mut f) = judged(o, "pcie", figure, verdict, reason.clone());
            (f.value, f.expected, f.unit) = (value, expected, unit.into());
            out.push((p, f));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::fleet::checks::{Batch, Measured};
    use crate::pcie::{LinkState, Pcie};

    fn d2h(pcie: Reported<Pcie>) -> Measured {
        Measured {
            value: Some(20.0),
            p50_us: Some(10.0),
            p99_us: Some(11.0),
            n: 20,
            pcie: Some(pcie),
            ..Measured::of(TestKind::D2h)
        }
    }

    fn rank(pcie: Reported<Pcie>) -> RankOutcome {
        let mut o = RankOutcome::new(0, "n0");
        o.batches.push(Batch {
            results: vec![d2h(pcie)],
            cores: 8,
            ..Default::default()
        });
        o
    }

    fn link(width: u32, gts: f64) -> Pcie {
        Pcie {
            device: LinkState {
                bus_id: "0000:01:00.0".into(),
                speed_gts: Some(gts),
                width: Some(width),
                max_speed_gts: Some(32.0),
                max_width: Some(16),
                aer: Default::default(),
            },
            upstream: None,
        }
    }

    #[test]
    fn a_down_trained_link_fails_a_healthy_one_passes_and_none_is_not_exposed() {
        let v = rows(&[rank(Reported::Ok(link(8, 16.0)))]);
        assert_eq!(v.len(), 3);
        assert!(v.iter().all(|(_, f)| f.verdict == FAIL), "{v:?}");
        assert!(
            v[0].1.reason.contains("x8 16 GT/s, capable of x16 32 GT/s"),
            "{v:?}"
        );
        assert_eq!((v[0].1.value, v[0].1.expected), (Some(8.0), Some(16.0)));
        let v = rows(&[rank(Reported::Ok(link(16, 32.0)))]);
        assert!(v.iter().all(|(_, f)| f.verdict == PASS), "{v:?}");
        let v = rows(&[rank(Reported::failed("not exposed (no PCI address: \"\")"))]);
        assert_eq!(v.len(), 1);
        assert_eq!((v[0].1.verdict, v[0].0.figure.as_str()), (SKIP, "link"));
        assert!(v[0].1.reason.starts_with("not exposed"));
        // A gate without a D2H test has no PCIe rows.
        assert!(rows(&[RankOutcome::new(1, "n1")]).is_empty());
    }
}
