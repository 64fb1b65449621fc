//! Each rank's clock against rank 0's: ranks on other machines have other clocks, so times
//! measured on them are moved onto rank 0's before they are compared.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::error::ClusterError;
use super::session::Crew;

/// Pings per rank for its offset.
pub const PINGS: usize = 8;

/// Each rank's clock offset from rank 0's and the round trip it was measured over (µs; rank
/// 0's are 0): from the ping with the lowest round trip, offset = the rank's clock - the
/// midpoint of the round trip, as NTP's simplest estimate. Its error is at most half that
/// round trip.
pub struct Offsets {
    pub offset_us: Vec<f64>,
    pub rtt_us: Vec<f64>,
}

pub fn offsets<O, R>(crew: &mut Crew<O, R>) -> Result<Offsets, ClusterError>
where
    O: Serialize,
    R: DeserializeOwned + Send + 'static,
{
    let mut out = Offsets {
        offset_us: vec![0.0],
        rtt_us: vec![0.0],
    };
    for r in crew.others() {
        let mut best = (f64::INFINITY, 0.0);
        for _ in 0..PINGS {
            let (t0, tr, t1) = crew.ping(r, Duration::from_secs(10))?;
            if t1 - t0 < best.0 {
                best = (t1 - t0, midpoint_offset(t0, tr, t1));
            }
        }
        out.rtt_us.push(best.0);
        out.offset_us.push(best.1);
    }
    Ok(out)
}

/// The remote clock `tr`, read between local `t0` and `t1`, less the local midpoint.
pub fn midpoint_offset(t0: f64, tr: f64, t1: f64) -> f64 {
    tr - (t0 + t1) / 2.0
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_offset_is_taken_at_the_midpoint() {
        // A remote clock 5 ms ahead, read halfway through a 2 ms round trip.
        assert_eq!(super::midpoint_offset(1_000.0, 7_000.0, 3_000.0), 5_000.0);
    }
}
