//! Suite configurations (TOML): an optional `description` and one table per bench, named as
//! in [`crate::bench::REGISTRY`]. Each table overlays its bench's plan defaults; unknown tables
//! and keys are refused so a typo never silently falls back to a default.
//! `bench-configs/quick.toml` is compiled in as the default suite.

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use serde::Serialize;

use crate::bench::REGISTRY;
use crate::suite::Planned;

pub const QUICK_TOML: &str = include_str!("../bench-configs/quick.toml");

/// A parsed and checked suite: its tables, kept as written (for meta.json).
#[derive(Debug, Clone, Serialize)]
pub struct SuiteConfig {
    /// A line saying what the suite is for.
    pub description: String,
    #[serde(flatten)]
    pub tables: toml::Table,
}

impl SuiteConfig {
    /// Parses and checks a config; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<SuiteConfig> {
        let invalid = |e: String| anyhow!("invalid config {origin}: {e}");
        let mut tables: toml::Table = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let description = match tables.remove("description") {
            None => String::new(),
            Some(toml::Value::String(s)) => s,
            Some(_) => return Err(invalid("description must be a string".into())),
        };
        let known: Vec<&str> = suite_benches().map(|(name, _)| name).collect();
        let listed = known
            .iter()
            .map(|k| format!("[{k}]"))
            .collect::<Vec<_>>()
            .join(", ");
        if let Some(unknown) = tables.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(invalid(format!(
                "unknown table [{unknown}]: a suite holds description and the tables {listed}"
            )));
        }
        if tables.is_empty() {
            return Err(invalid(format!(
                "it names no bench; add one of the tables {listed}"
            )));
        }
        let cfg = SuiteConfig {
            description,
            tables,
        };
        cfg.benches().map_err(|e| invalid(e.to_string()))?;
        Ok(cfg)
    }

    /// The benches the config names, planned, in the registry's order (the order a run does
    /// them, whatever the file's order).
    pub fn benches(&self) -> Result<Vec<Planned>> {
        let mut out = Vec::new();
        for (name, from_toml) in suite_benches() {
            if let Some(table) = self.tables.get(name) {
                let bench = from_toml(table.clone()).map_err(|e| anyhow!("[{name}] {e}"))?;
                out.push(Planned { name, bench });
            }
        }
        Ok(out)
    }

    pub fn load(path: &Path) -> Result<SuiteConfig> {
        let text = crate::record::read_input(path).with_context(|| {
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

/// The benches a suite can name, with their planners, in the registry's order.
fn suite_benches() -> impl Iterator<Item = (&'static str, crate::bench::descriptor::FromToml)> {
    REGISTRY.iter().filter_map(|d| Some((d.name, d.from_toml?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(cfg: &SuiteConfig) -> Vec<&'static str> {
        cfg.benches().unwrap().iter().map(|p| p.name).collect()
    }

    fn kernels_plan(cfg: &SuiteConfig) -> crate::bench::kernels::KernelsPlan {
        let table = cfg.tables["kernels"].clone();
        crate::bench::descriptor::Settings::plan(
            &crate::bench::shared::table::<crate::bench::kernels::KernelsSettings>(table).unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn the_embedded_config_plans_what_it_says() {
        let cfg = SuiteConfig::embedded();
        assert_eq!(cfg.description, "quick: a first look at a node");
        assert_eq!(names(&cfg), ["peak", "kernels", "d2h", "hol", "sim"]);
        let k = kernels_plan(&cfg);
        let gemm: Vec<String> = k.gemm.iter().map(|g| g.to_string()).collect();
        assert_eq!(
            gemm,
            ["256x256x256", "512x512x512", "1024x1024x1024", "17x33x65"]
        );
        assert_eq!((k.iters, k.warmup, k.cpu_baseline), (20, 3, true));
        assert_eq!(k.layernorm.len(), 2);
        let full =
            SuiteConfig::parse(include_str!("../bench-configs/full.toml"), "full.toml").unwrap();
        assert!(names(&full).contains(&"kernels"));
    }

    #[test]
    fn a_key_left_out_takes_the_plan_default_and_the_file_order_does_not_matter() {
        let cfg = SuiteConfig::parse(
            "[sim]\nstages = 2\n[kernels]\ngemm = [\"8x8x8\"]\n",
            "x.toml",
        )
        .unwrap();
        assert_eq!(names(&cfg), ["kernels", "sim"]);
        let k = kernels_plan(&cfg);
        let d = crate::bench::kernels::KernelsSettings::default();
        assert_eq!((k.iters, k.warmup), (d.iters, d.warmup));
        assert_eq!(k.gemm[0].to_string(), "8x8x8");
    }

    /// The message of `text`'s parse error, read from `x.toml`.
    fn parse_err(text: &str) -> String {
        crate::testing::err_text(SuiteConfig::parse(text, "x.toml"))
    }

    #[test]
    fn unknown_key_is_named() {
        let err = parse_err("[kernels]\ngemm = []\nitres = 3\n");
        assert!(err.contains("x.toml") && err.contains("itres"), "{err}");
    }

    #[test]
    fn bad_values_are_named() {
        let err = parse_err("[kernels]\ngemm = [\"0x1x1\"]\n");
        assert!(
            err.contains("kernels.gemm") && err.contains(">= 1"),
            "{err}"
        );
        let err = parse_err("[kernels]\niters = \"many\"\n");
        assert!(err.contains("iters"), "{err}");
        let err = parse_err("[kernels]\niters = 0\n");
        assert!(err.contains("kernels.iters"), "{err}");
        assert!(SuiteConfig::parse("", "x.toml").is_err());
        let err = parse_err("[kernel]\ngemm = []\n");
        assert!(err.contains("[kernel]") && err.contains("kernels"), "{err}");
    }
}
