//! What a `hol` run does: the stream's shape, the transfers and delays, the modes, and the
//! checks that refuse a plan before anything runs.

use crate::transport::rdma::DeviceChoice;
use crate::transport::TransportKind;

/// The bench's name, as in its config table and its CSV.
pub const BENCH: &str = "hol";

/// The most repetitions per point.
pub const MAX_REPS: u32 = 1000;
/// The most compute ops per stream (ops and transfers share 2048 timestamp slots).
pub const MAX_OPS: u32 = 1024;
/// The link rates a stand-in may charge, GB/s (1 MB/s to 100 TB/s).
pub const MIN_LINK_GBPS: f64 = 1e-3;
pub const MAX_LINK_GBPS: f64 = 1e5;
/// The longest run accepted, in seconds of injected delay and stand-in time.
pub const MAX_RUN_S: f64 = 3600.0;

/// The longest straggler delay accepted (one minute).
pub const MAX_DELAY_MS: f64 = 60_000.0;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    None,
    Inline,
    Offload,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::None => "none",
            Mode::Inline => "inline",
            Mode::Offload => "offload",
        })
    }
}

/// Straggler delays: a list to sweep (every transfer gets the same), or a trace giving the
/// delay of each transfer index in the stream (`iteration;delay_ms` lines).
#[derive(Debug, Clone, serde::Serialize)]
pub enum Delays {
    Sweep(Vec<f64>),
    Trace(Vec<(u64, f64)>),
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct HolPlan {
    pub tokens: u32,
    pub hidden: u32,
    pub ops: u32,
    pub every: Vec<u32>,
    /// Bytes per transfer; `None` sends the whole activation.
    pub bytes: Vec<Option<u64>>,
    pub delays: Delays,
    pub modes: Vec<Mode>,
    pub reps: u32,
    pub link_gbps: f64,
    /// A remote `morphbench sink`; `None` runs one in-process on loopback.
    pub peer: Option<String>,
    pub transport: TransportKind,
    /// The RDMA device, port and GID when `transport` is RDMA.
    pub rdma: DeviceChoice,
    pub gemm_variant: Option<String>,
    pub layernorm_variant: Option<String>,
}

/// Parses `iteration;delay_ms` lines (`#` comments).
pub fn parse_delay_trace(text: &str) -> anyhow::Result<Vec<(u64, f64)>> {
    let mut out = Vec::new();
    for (no, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = |what: &str| anyhow::anyhow!("line {}: '{line}': {what}", no + 1);
        let (it, ms) = line
            .split_once(';')
            .ok_or_else(|| at("expected iteration;delay_ms"))?;
        let it: u64 = it
            .trim()
            .parse()
            .map_err(|_| at("iteration is not a whole number"))?;
        let ms: f64 = ms
            .trim()
            .parse()
            .map_err(|_| at("delay_ms is not a number"))?;
        check_delay(ms).map_err(|e| at(&e.to_string()))?;
        out.push((it, ms));
    }
    if out.is_empty() {
        return Err(anyhow::anyhow!("the trace has no iteration;delay_ms lines"));
    }
    Ok(out)
}

pub fn check_delay(ms: f64) -> anyhow::Result<()> {
    if !ms.is_finite() || !(0.0..=MAX_DELAY_MS).contains(&ms) {
        return Err(anyhow::anyhow!(
            "delay {ms} ms is out of range: give 0 to {MAX_DELAY_MS} ms"
        ));
    }
    Ok(())
}

impl HolPlan {
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.tokens == 0 || self.hidden == 0 || !self.hidden.is_multiple_of(4) {
            return Err(anyhow::anyhow!(
                "tokens {} x hidden {}: both must be >= 1 and hidden a multiple of 4",
                self.tokens,
                self.hidden
            ));
        }
        if self.ops < 2 {
            return Err(anyhow::anyhow!("ops must be at least 2"));
        }
        if self.every.iter().any(|&e| e == 0 || e > self.ops) {
            return Err(anyhow::anyhow!(
                "every must be between 1 and ops ({})",
                self.ops
            ));
        }
        if self.reps == 0 || self.reps > MAX_REPS {
            return Err(anyhow::anyhow!("reps {}: give 1 to {MAX_REPS}", self.reps));
        }
        if !(self.link_gbps.is_finite()
            && (MIN_LINK_GBPS..=MAX_LINK_GBPS).contains(&self.link_gbps))
        {
            return Err(anyhow::anyhow!(
                "link-gbps {}: give {MIN_LINK_GBPS} to {MAX_LINK_GBPS} GB/s",
                self.link_gbps
            ));
        }
        if self.ops > MAX_OPS {
            return Err(anyhow::anyhow!("ops {}: give 2 to {MAX_OPS}", self.ops));
        }
        let act = self.activation_bytes();
        for b in self.bytes.iter().flatten() {
            if *b == 0 || b % 4 != 0 || *b > act {
                return Err(anyhow::anyhow!(
                    "bytes {b}: a transfer sends part of the activation, so give a multiple of 4 \
                     from 4 to {act} (tokens x hidden x 4)"
                ));
            }
        }
        match &self.delays {
            Delays::Sweep(d) if d.is_empty() => return Err(anyhow::anyhow!("no delay to run")),
            Delays::Sweep(d) => d.iter().try_for_each(|&ms| check_delay(ms))?,
            Delays::Trace(t) => t.iter().try_for_each(|&(_, ms)| check_delay(ms))?,
        }
        if self.modes.is_empty() {
            return Err(anyhow::anyhow!("no mode to run"));
        }
        // A stand-in holds the queue for the wire time plus the delay: bound both together.
        let act = self.activation_bytes();
        let largest = self
            .bytes
            .iter()
            .map(|b| b.unwrap_or(act))
            .max()
            .unwrap_or(act);
        let wire_ms = largest as f64 / (self.link_gbps * 1e6);
        if self.modes.contains(&Mode::Inline) && wire_ms + self.max_delay_ms() > MAX_DELAY_MS {
            return Err(anyhow::anyhow!(
                "a stand-in transfer would hold the queue {:.0} ms ({largest} B at {} GB/s plus \
                 {} ms delay), over the {MAX_DELAY_MS} ms cap: raise link-gbps or lower the delay",
                wire_ms + self.max_delay_ms(),
                self.link_gbps,
                self.max_delay_ms()
            ));
        }
        let secs = self.estimated_seconds();
        if secs > MAX_RUN_S {
            return Err(anyhow::anyhow!(
                "this hol run would take about {secs:.0} s of injected delay and stand-in time, \
                 over the cap of {MAX_RUN_S} s: fewer reps, delays, sizes or transfers"
            ));
        }
        Ok(())
    }

    /// The largest delay any transfer gets, in ms.
    pub fn max_delay_ms(&self) -> f64 {
        match &self.delays {
            Delays::Sweep(d) => d.iter().copied().fold(0.0, f64::max),
            Delays::Trace(t) => t.iter().map(|&(_, d)| d).fold(0.0, f64::max),
        }
    }

    /// A lower bound of the run's time: every injected delay and stand-in, which the run
    /// spends in full (offload's sender sleeps each delay in turn).
    pub fn estimated_seconds(&self) -> f64 {
        let act = self.activation_bytes();
        let mut ms = 0.0;
        for &every in &self.every {
            for bytes in self.bytes.iter().map(|b| b.unwrap_or(act)) {
                let wire_ms = bytes as f64 / (self.link_gbps * 1e6);
                for (_, delays) in self.delay_cases(every) {
                    let delay: f64 = delays.iter().sum();
                    for mode in &self.modes {
                        ms += match mode {
                            Mode::None => 0.0,
                            Mode::Inline => delay + wire_ms * delays.len() as f64,
                            Mode::Offload => delay,
                        } * self.reps as f64;
                    }
                }
            }
        }
        ms / 1e3
    }

    pub fn activation_bytes(&self) -> u64 {
        self.tokens as u64 * self.hidden as u64 * 4
    }

    pub fn transfers(&self, every: u32) -> u32 {
        self.ops / every
    }

    /// `tcp-loopback`, `tcp-peer`, `rdma-loopback` or `rdma-peer`: the `transport` column.
    pub fn transport_label(&self) -> String {
        let kind = serde_json::to_value(self.transport)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        let place = if self.peer.is_some() {
            "peer"
        } else {
            "loopback"
        };
        format!("{kind}-{place}")
    }

    /// The delay cases of the sweep at this transfer period: a label and each transfer's
    /// delay in ms.
    pub fn delay_cases(&self, every: u32) -> Vec<(String, Vec<f64>)> {
        let transfers = self.transfers(every) as usize;
        match &self.delays {
            Delays::Sweep(list) => list
                .iter()
                .map(|&d| (format!("{d}"), vec![d; transfers]))
                .collect(),
            Delays::Trace(trace) => {
                let mut v = vec![0.0; transfers];
                for &(i, d) in trace {
                    if let Some(slot) = v.get_mut(i as usize) {
                        *slot = d;
                    }
                }
                vec![("trace".into(), v)]
            }
        }
    }

    pub fn points(&self) -> u64 {
        let delays = match &self.delays {
            Delays::Sweep(d) => d.len(),
            Delays::Trace(_) => 1,
        };
        (self.every.len() * self.bytes.len() * delays * self.modes.len()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_traces_parse_and_bad_delays_are_named() {
        assert_eq!(
            parse_delay_trace("# it;ms\n0;20\n3; 5.5\n").unwrap(),
            vec![(0, 20.0), (3, 5.5)]
        );
        let err = |text: &str| crate::testing::err_text(parse_delay_trace(text));
        assert!(err("0,20\n").contains("line 1"));
        assert!(err("0;-1\n").contains("out of range"));
        assert!(err("0;1e9\n").contains("out of range"));
        assert!(err("x;1\n").contains("iteration"));
        assert!(parse_delay_trace("").is_err());
    }
}
