//! Suite configurations (TOML). Unknown keys are refused so a typo never silently falls back
//! to a default. `bench-configs/quick.toml` is compiled in as the default suite.

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use serde::{Deserialize, Serialize};

use crate::bench::kernels::KernelsPlan;
use crate::bench::sim::SimConfig;
use crate::cli::sizes::{parse_gemm, parse_layernorm};

pub const QUICK_TOML: &str = include_str!("../bench-configs/quick.toml");

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteConfig {
    /// A line saying what the suite is for.
    #[serde(default)]
    pub description: String,
    pub kernels: Option<KernelsConfig>,
    pub d2h: Option<D2hConfig>,
    pub hol: Option<HolConfig>,
    pub sim: Option<SimConfig>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HolConfig {
    pub tokens: Option<u32>,
    pub hidden: Option<u32>,
    pub ops: Option<u32>,
    pub every: Option<Vec<u32>>,
    /// Sizes such as "64K"; default: the whole activation.
    pub bytes: Option<Vec<String>>,
    pub delays_ms: Option<Vec<f64>>,
    pub modes: Option<Vec<crate::bench::hol::Mode>>,
    pub reps: Option<u32>,
    pub link_gbps: Option<f64>,
    pub peer: Option<String>,
    /// "tcp" (default) or "rdma" (the first RDMA device, port 1, GID index 0).
    pub transport: Option<crate::transport::TransportKind>,
}

impl HolConfig {
    pub fn plan(&self) -> Result<crate::bench::hol::HolPlan, String> {
        use crate::bench::hol::{Delays, HolPlan};
        let bytes = match &self.bytes {
            Some(list) => list
                .iter()
                .map(|s| crate::units::parse_size(s).map(Some))
                .collect::<Result<_, _>>()
                .map_err(|e| format!("hol.bytes: {e}"))?,
            None => HolPlan::default().bytes,
        };
        // The TOML overlays the plan's defaults, key by key.
        let d = HolPlan::default();
        let plan = HolPlan {
            tokens: self.tokens.unwrap_or(d.tokens),
            hidden: self.hidden.unwrap_or(d.hidden),
            ops: self.ops.unwrap_or(d.ops),
            every: self.every.clone().unwrap_or(d.every),
            bytes,
            delays: self.delays_ms.clone().map_or(d.delays, Delays::Sweep),
            modes: self.modes.clone().unwrap_or(d.modes),
            reps: self.reps.unwrap_or(d.reps),
            link_gbps: self.link_gbps.unwrap_or(d.link_gbps),
            peer: self.peer.clone().or(d.peer),
            transport: self.transport.unwrap_or(d.transport),
            ..d
        };
        plan.validate().map_err(|e| format!("hol: {e}"))?;
        Ok(plan)
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct D2hConfig {
    /// Sizes such as "4", "64K", "16MiB"; default 4 B to 256 MiB, powers of two.
    pub sizes: Option<Vec<String>>,
    pub iters: Option<u32>,
    pub warmup: Option<u32>,
}

impl D2hConfig {
    pub fn plan(&self) -> Result<crate::bench::d2h::D2hPlan, String> {
        use crate::bench::d2h::default_sizes;
        use crate::units::parse_size;
        let sizes = match &self.sizes {
            Some(list) => list
                .iter()
                .map(|s| parse_size(s).map_err(|e| format!("d2h.sizes: {e}")))
                .collect::<Result<_, _>>()?,
            None => default_sizes(),
        };
        let d = crate::bench::d2h::D2hPlan::default();
        let plan = crate::bench::d2h::D2hPlan {
            sizes,
            iters: self.iters.unwrap_or(d.iters),
            warmup: self.warmup.unwrap_or(d.warmup),
        };
        check_iters("d2h.iters", plan.iters)?;
        Ok(plan)
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KernelsConfig {
    /// GEMM sizes as "MxNxK".
    #[serde(default)]
    pub gemm: Vec<String>,
    /// Layernorm sizes as "ROWSxHIDDEN".
    #[serde(default)]
    pub layernorm: Vec<String>,
    pub iters: Option<u32>,
    pub warmup: Option<u32>,
    /// "auto" (measured selection) or a variant name.
    pub gemm_variant: Option<String>,
    pub layernorm_variant: Option<String>,
    pub cpu_baseline: Option<bool>,
}

impl KernelsConfig {
    pub fn plan(&self) -> Result<KernelsPlan, String> {
        let gemm = self
            .gemm
            .iter()
            .map(|s| parse_gemm(s).map_err(|e| format!("kernels.gemm: {e}")))
            .collect::<Result<_, _>>()?;
        let layernorm = self
            .layernorm
            .iter()
            .map(|s| parse_layernorm(s).map_err(|e| format!("kernels.layernorm: {e}")))
            .collect::<Result<_, _>>()?;
        let d = KernelsPlan::default();
        let plan = KernelsPlan {
            gemm,
            layernorm,
            iters: self.iters.unwrap_or(d.iters),
            warmup: self.warmup.unwrap_or(d.warmup),
            gemm_variant: self.gemm_variant.clone().or(d.gemm_variant),
            layernorm_variant: self.layernorm_variant.clone().or(d.layernorm_variant),
            cpu_baseline: self.cpu_baseline.unwrap_or(d.cpu_baseline),
            reselect: d.reselect,
        };
        check_iters("kernels.iters", plan.iters)?;
        Ok(plan)
    }
}

pub fn check_iters(key: &str, iters: u32) -> Result<(), String> {
    if iters == 0 || iters > 100_000 {
        return Err(format!(
            "{key} = {iters}: expected a count from 1 to 100000"
        ));
    }
    Ok(())
}

impl SuiteConfig {
    /// Parses and checks a config; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<SuiteConfig> {
        let cfg: SuiteConfig =
            toml::from_str(text).map_err(|e| anyhow!("invalid config {origin}: {e}"))?;
        if let Some(k) = &cfg.kernels {
            k.plan()
                .map_err(|e| anyhow!("invalid config {origin}: {e}"))?;
        }
        if let Some(d) = &cfg.d2h {
            d.plan()
                .map_err(|e| anyhow!("invalid config {origin}: {e}"))?;
        }
        if let Some(h) = &cfg.hol {
            h.plan()
                .map_err(|e| anyhow!("invalid config {origin}: {e}"))?;
        }
        if let Some(sim) = &cfg.sim {
            crate::bench::sim::SimPlan::from_config(sim)
                .map_err(|e| anyhow!("invalid config {origin}: [sim] {e}"))?;
        }
        if cfg.kernels.is_none() && cfg.d2h.is_none() && cfg.hol.is_none() && cfg.sim.is_none() {
            return Err(anyhow!(
                "invalid config {origin}: it names no bench; add a [kernels], [d2h], [hol] or [sim] table"
            ));
        }
        Ok(cfg)
    }

    pub fn load(path: &Path) -> Result<SuiteConfig> {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "cannot read config {}: check the path, or omit --config to run the built-in quick suite",
                path.display()
            )
        })?;
        SuiteConfig::parse(&text, &path.display().to_string())
    }

    pub fn embedded() -> SuiteConfig {
        SuiteConfig::parse(QUICK_TOML, "bench-configs/quick.toml (built in)")
            .expect("the built-in config is valid")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_and_full_configs_parse() {
        SuiteConfig::embedded();
        SuiteConfig::parse(include_str!("../bench-configs/full.toml"), "full.toml").unwrap();
    }

    #[test]
    fn unknown_key_is_named() {
        let err = SuiteConfig::parse("[kernels]\ngemm = []\nitres = 3\n", "x.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("x.toml") && err.contains("itres"), "{err}");
    }

    #[test]
    fn bad_values_are_named() {
        let err = SuiteConfig::parse("[kernels]\ngemm = [\"0x1x1\"]\n", "x.toml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("kernels.gemm") && err.contains(">= 1"),
            "{err}"
        );
        let err = SuiteConfig::parse("[kernels]\niters = \"many\"\n", "x.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("iters"), "{err}");
        let err = SuiteConfig::parse("[kernels]\niters = 0\n", "x.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("kernels.iters"), "{err}");
        assert!(SuiteConfig::parse("", "x.toml").is_err());
    }
}
