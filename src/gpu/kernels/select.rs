//! Choosing the fastest verified variant of a kernel on this adapter, by measuring a short
//! probe, and remembering the choice per adapter so later runs skip the probe.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use anyhow::Context;

use super::{find_variant, variant_names, GpuKernel, KernelError, Variant};
use crate::gpu::timing::time_compute_passes;
use crate::gpu::Gpu;
use crate::stats::Summary;

/// How a trial's note starts when the variant was not run: the adapter or the probe's shape
/// does not suit it (as opposed to a variant that ran and failed).
pub const SKIPPED: &str = "skipped: ";

/// One candidate's result in the probe.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Trial {
    pub variant: String,
    /// Median time of the probe in µs; `None` if it failed to build or verify.
    pub median_us: Option<f64>,
    pub note: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Selection {
    /// Verified variants, fastest first (the winner first): sizes a variant cannot run fall
    /// back to the next.
    #[serde(default)]
    pub ranking: Vec<String>,
    pub kernel: String,
    pub winner: String,
    pub probe: String,
    pub trials: Vec<Trial>,
    pub cached: bool,
}

fn cache_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("morphbench").join("variants.json"))
}

/// The choice depends on the adapter, its driver, this build (version and git revision), the
/// probe size and the candidates themselves (a changed shader or a new variant probes again).
fn cache_key(gpu: &Gpu, kernel: &str, probe: &str, candidates: &[Variant]) -> String {
    let r = &gpu.report;
    format!(
        "{kernel}|{probe}|{}|{}|{}|{}|{}|{}|{:016x}",
        r.name,
        r.backend,
        r.driver,
        r.driver_info,
        env!("CARGO_PKG_VERSION"),
        option_env!("MORPHBENCH_GIT_REVISION").unwrap_or("unknown"),
        fingerprint(candidates)
    )
}

/// FNV-1a over the candidates' names, entry points and WGSL: stable across builds.
fn fingerprint(candidates: &[Variant]) -> u64 {
    let bytes = candidates
        .iter()
        .flat_map(|v| [v.name, v.entry, v.wgsl])
        .flat_map(|s| s.bytes().chain([0]));
    bytes.fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

fn load_cache() -> BTreeMap<String, Selection> {
    cache_path()
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

fn store_cache(key: String, sel: &Selection) {
    let Some(path) = cache_path() else { return };
    let mut all = load_cache();
    all.insert(key, sel.clone());
    let ok = path
        .parent()
        .map(std::fs::create_dir_all)
        .transpose()
        .ok()
        .and_then(|_| serde_json::to_vec_pretty(&all).ok())
        .map(|bytes| std::fs::write(&path, bytes).is_ok())
        .unwrap_or(false);
    if !ok {
        tracing::warn!("could not write the variant cache at {}", path.display());
    }
}

/// Measures every candidate the adapter supports on `probe` (built by `make`), each verified
/// first, and returns the fastest by median GPU time (host time without timestamps).
/// A cached choice for this adapter, driver and tool version is reused unless `fresh`.
/// Returns the winner and the selection (whose `ranking` lists the verified variants).
pub fn select<'g, K: GpuKernel + 'g>(
    gpu: &'g Gpu,
    kernel: &str,
    candidates: &'static [Variant],
    probe: &str,
    fresh: bool,
    mut make: impl FnMut(&'static Variant) -> Result<K, KernelError>,
) -> Result<(&'static Variant, Selection), KernelError> {
    let key = cache_key(gpu, kernel, probe, candidates);
    if !fresh {
        if let Some(mut sel) = load_cache().remove(&key) {
            if let Some(v) = candidates.iter().find(|v| v.name == sel.winner) {
                sel.cached = true;
                return Ok((v, sel));
            }
        }
    }
    let mut trials = Vec::new();
    let mut best: Option<(&'static Variant, f64)> = None;
    for v in candidates {
        if let Some(why) = v.unsupported(gpu) {
            trials.push(Trial {
                variant: v.name.into(),
                median_us: None,
                note: format!("{SKIPPED}{why}"),
            });
            continue;
        }
        let measured = make(v).and_then(|k| {
            k.verify()?;
            let t = time_compute_passes(gpu, 1, 5, k.upload(), |pass| k.encode(pass))?;
            let samples = t.gpu_us.unwrap_or(t.host_us);
            Ok(Summary::of(&samples)
                .map(|s| s.p50)
                .unwrap_or(f64::INFINITY))
        });
        match measured {
            Ok(median) => {
                tracing::info!(kernel, variant = v.name, median_us = median, "probe");
                trials.push(Trial {
                    variant: v.name.into(),
                    median_us: Some(median),
                    note: "verified".into(),
                });
                if best.is_none_or(|(_, b)| median < b) {
                    best = Some((v, median));
                }
            }
            Err(e) => {
                // A variant that cannot take the probe's shape (its table says so) is expected;
                // one that fails to verify or to run is not.
                let note = if matches!(e, KernelError::Invalid(_)) {
                    tracing::info!(kernel, variant = v.name, "not probed: {e}");
                    format!("{SKIPPED}{e}")
                } else {
                    tracing::warn!(kernel, variant = v.name, "probe failed: {e}");
                    e.to_string()
                };
                trials.push(Trial {
                    variant: v.name.into(),
                    median_us: None,
                    note,
                });
            }
        }
    }
    let (winner, _) = best.ok_or_else(|| {
        KernelError::Invalid(format!(
            "no {kernel} variant verified on this adapter: {}",
            trials
                .iter()
                .map(|t| format!("{}: {}", t.variant, t.note))
                .collect::<Vec<_>>()
                .join("; ")
        ))
    })?;
    let mut ranked: Vec<&Trial> = trials.iter().filter(|t| t.median_us.is_some()).collect();
    ranked.sort_by(|a, b| a.median_us.unwrap().total_cmp(&b.median_us.unwrap()));
    let sel = Selection {
        ranking: ranked.iter().map(|t| t.variant.clone()).collect(),
        kernel: kernel.into(),
        winner: winner.name.into(),
        probe: probe.into(),
        trials,
        cached: false,
    };
    store_cache(key, &sel);
    Ok((winner, sel))
}

impl Selection {
    /// The ranked variants as statics from `list` (the winner first).
    pub fn ranked(&self, list: &'static [Variant]) -> Vec<&'static Variant> {
        let mut out: Vec<&'static Variant> = self
            .ranking
            .iter()
            .filter_map(|name| list.iter().find(|v| v.name == name))
            .collect();
        if out.is_empty() {
            out.extend(list.iter().find(|v| v.name == self.winner));
        }
        out
    }
}

fn forced(list: &'static [Variant], kernel: &str, name: &str) -> anyhow::Result<&'static Variant> {
    find_variant(list, name).with_context(|| {
        format!(
            "unknown {kernel} variant '{name}': choose one of {} or auto",
            variant_names(list)
        )
    })
}

/// The variants to use, best first: a forced one alone, or the measured ranking.
pub fn choose<'g, K: GpuKernel + 'g>(
    gpu: &'g Gpu,
    kernel: &str,
    list: &'static [Variant],
    wanted: Option<&str>,
    probe: String,
    reselect: bool,
    make: impl FnMut(&'static Variant) -> Result<K, KernelError>,
) -> anyhow::Result<(Vec<&'static Variant>, Option<Selection>)> {
    match wanted {
        Some(name) if name != "auto" => Ok((vec![forced(list, kernel, name)?], None)),
        _ => {
            let (_, sel) = select(gpu, kernel, list, &probe, reselect, make)?;
            Ok((sel.ranked(list), Some(sel)))
        }
    }
}

/// Builds the kernel with the first ranked variant that can run this size (a variant may not
/// support every shape, e.g. vec4 rows need a multiple of 4).
pub fn first_fitting<K>(
    ranked: &[&'static Variant],
    mut make: impl FnMut(&'static Variant) -> Result<K, KernelError>,
) -> Result<(K, &'static Variant), KernelError> {
    let mut last = None;
    for &v in ranked {
        match make(v) {
            Ok(k) => return Ok((k, v)),
            Err(e @ KernelError::Invalid(_)) if ranked.len() > 1 => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| KernelError::Invalid("no variant to run".into())))
}
