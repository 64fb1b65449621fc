//! The GPU device layer: choosing an adapter, opening a device, describing it, and the
//! small buffer and pipeline helpers every bench shares. Knows nothing of CSV or benches.

pub mod buffers;
pub mod kernels;
pub mod standin;
pub mod timing;
pub mod transfer;

use std::sync::{Arc, Mutex};

use serde::Serialize;
use thiserror::Error;

/// `--backend`: which wgpu backends to look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    Auto,
    Vulkan,
    Gl,
    Metal,
    Dx12,
}

impl BackendChoice {
    pub fn backends(self) -> wgpu::Backends {
        match self {
            BackendChoice::Auto => wgpu::Backends::all(),
            BackendChoice::Vulkan => wgpu::Backends::VULKAN,
            BackendChoice::Gl => wgpu::Backends::GL,
            BackendChoice::Metal => wgpu::Backends::METAL,
            BackendChoice::Dx12 => wgpu::Backends::DX12,
        }
    }
}

#[derive(Debug, Error)]
pub enum GpuError {
    #[error(
        "no GPU adapter found for backend '{backend:?}'. Install a Vulkan driver: on Debian/Ubuntu \
         `sudo apt-get install mesa-vulkan-drivers libvulkan1` (Mesa's lavapipe runs Vulkan on the \
         CPU), or run `scripts/setup`; then check with `morphbench info`"
    )]
    NoAdapter { backend: BackendChoice },
    #[error(
        "no adapter matches --adapter '{wanted}'; available: {available}. Pass an index or a \
         part of a name from `morphbench info`"
    )]
    NoSuchAdapter { wanted: String, available: String },
    #[error(
        "--adapter {index} is out of range: there are {count} adapters ({available}). Pass an \
         index from `morphbench info`"
    )]
    AdapterIndex {
        index: usize,
        count: usize,
        available: String,
    },
    #[error(
        "--adapter '{wanted}' matches {count} adapters ({available}): pass an index or more of \
         the name"
    )]
    AmbiguousAdapter {
        wanted: String,
        count: usize,
        available: String,
    },
    #[error("could not open a device on adapter '{adapter}': {source}")]
    RequestDevice {
        adapter: String,
        source: wgpu::RequestDeviceError,
    },
    #[error(
        "{what} needs {needed} bytes but this adapter's {limit} is {value} bytes: choose a smaller size"
    )]
    TooLarge {
        what: String,
        needed: u64,
        limit: &'static str,
        value: u64,
    },
    #[error("the GPU reported an error: {0}")]
    Device(String),
    #[error("the GPU did not finish within {0:?} (device hung or far too slow)")]
    Timeout(std::time::Duration),
}

/// Everything `morphbench info` prints about one adapter.
#[derive(Debug, Clone, Serialize)]
pub struct AdapterReport {
    pub index: usize,
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
    /// The PCI bus id, where the backend gives one (`0000:1b:00.0`); empty elsewhere.
    pub pci_bus_id: String,
    pub vendor_id: String,
    pub device_id: String,
    pub timestamp_query: bool,
    pub timestamp_query_inside_passes: bool,
    pub timestamp_query_inside_encoders: bool,
    pub subgroups: bool,
    pub subgroup_min_size: u32,
    pub subgroup_max_size: u32,
    pub shader_int64: bool,
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
    pub max_compute_workgroup_storage_size: u32,
    pub max_compute_invocations_per_workgroup: u32,
    pub max_compute_workgroups_per_dimension: u32,
}

impl AdapterReport {
    fn of(index: usize, adapter: &wgpu::Adapter) -> AdapterReport {
        let info = adapter.get_info();
        let f = adapter.features();
        let l = adapter.limits();
        AdapterReport {
            index,
            name: info.name,
            backend: format!("{:?}", info.backend).to_lowercase(),
            device_type: format!("{:?}", info.device_type),
            driver: info.driver,
            driver_info: info.driver_info,
            pci_bus_id: info.device_pci_bus_id.clone(),
            vendor_id: format!("0x{:04x}", info.vendor),
            device_id: format!("0x{:04x}", info.device),
            timestamp_query: f.contains(wgpu::Features::TIMESTAMP_QUERY),
            timestamp_query_inside_passes: f
                .contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES),
            timestamp_query_inside_encoders: f
                .contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS),
            subgroups: f.contains(wgpu::Features::SUBGROUP),
            subgroup_min_size: info.subgroup_min_size,
            subgroup_max_size: info.subgroup_max_size,
            shader_int64: f.contains(wgpu::Features::SHADER_INT64),
            max_buffer_size: l.max_buffer_size,
            max_storage_buffer_binding_size: l.max_storage_buffer_binding_size,
            max_compute_workgroup_storage_size: l.max_compute_workgroup_storage_size,
            max_compute_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
            max_compute_workgroups_per_dimension: l.max_compute_workgroups_per_dimension,
        }
    }
}

/// The optional features kernels use, named for messages.
pub fn feature_names(features: wgpu::Features) -> String {
    let names = [
        (wgpu::Features::SUBGROUP, "subgroup operations"),
        (wgpu::Features::SHADER_INT64, "64-bit integers in shaders"),
    ];
    let mut out: Vec<String> = names
        .iter()
        .filter(|(f, _)| features.contains(*f))
        .map(|(_, name)| name.to_string())
        .collect();
    let rest = features
        - names
            .iter()
            .fold(wgpu::Features::empty(), |acc, (f, _)| acc | *f);
    if !rest.is_empty() {
        out.push(format!("{rest:?}"));
    }
    out.join(" and ")
}

fn instance(backend: BackendChoice) -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = backend.backends();
    wgpu::Instance::new(desc)
}

/// All adapters of the chosen backends, best first (discrete, integrated, virtual, CPU; Vulkan
/// before other backends), so index 0 is what `--adapter` defaults to.
pub fn enumerate(backend: BackendChoice) -> Vec<wgpu::Adapter> {
    let mut adapters = pollster::block_on(instance(backend).enumerate_adapters(backend.backends()));
    let rank = |a: &wgpu::Adapter| {
        let info = a.get_info();
        let ty = match info.device_type {
            wgpu::DeviceType::DiscreteGpu => 0,
            wgpu::DeviceType::IntegratedGpu => 1,
            wgpu::DeviceType::VirtualGpu => 2,
            wgpu::DeviceType::Cpu => 3,
            wgpu::DeviceType::Other => 4,
        };
        let be = match info.backend {
            wgpu::Backend::Vulkan | wgpu::Backend::Metal | wgpu::Backend::Dx12 => 0,
            _ => 1,
        };
        (ty, be)
    };
    adapters.sort_by_key(rank);
    adapters
}

pub fn adapter_reports(backend: BackendChoice) -> Vec<AdapterReport> {
    enumerate(backend)
        .iter()
        .enumerate()
        .map(|(i, a)| AdapterReport::of(i, a))
        .collect()
}

/// An open device with its one queue. Errors the device raises asynchronously are collected
/// and turned into `Result`s by [`Gpu::check`], never panics.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub report: AdapterReport,
    pub limits: wgpu::Limits,
    pub features: wgpu::Features,
    errors: Arc<Mutex<Vec<String>>>,
}

/// How long one wait on the GPU may take before we call it hung.
pub const WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// The adapter `wanted` names among `names` (each "name (backend)", in `info`'s order): an
/// index, or a case-insensitive part of one name. An index out of range, a part that matches
/// no name, and a part that matches several names are errors that list the adapters.
pub fn pick_adapter(wanted: &str, names: &[String]) -> Result<usize, GpuError> {
    let available = || {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| format!("{i}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let w = wanted.trim();
    if let Ok(i) = w.parse::<usize>() {
        return if i < names.len() {
            Ok(i)
        } else {
            Err(GpuError::AdapterIndex {
                index: i,
                count: names.len(),
                available: available(),
            })
        };
    }
    let lower = w.to_lowercase();
    let hits: Vec<usize> = (0..names.len())
        .filter(|&i| names[i].to_lowercase().contains(&lower))
        .collect();
    match hits.as_slice() {
        [one] => Ok(*one),
        [] => Err(GpuError::NoSuchAdapter {
            wanted: w.to_string(),
            available: available(),
        }),
        _ => Err(GpuError::AmbiguousAdapter {
            wanted: w.to_string(),
            count: hits.len(),
            available: available(),
        }),
    }
}

/// The adapter of the `local_rank`-th rank on a host, among adapters in [`enumerate`]'s order
/// given by their kind (device type, backend): the local rank modulo the adapters of the best
/// one's kind, so the ranks of an 8-GPU node take one GPU each and a CPU driver or a second
/// backend's view of the same GPU is never one of them.
pub fn adapter_for_local_rank<K: PartialEq>(kinds: &[K], local_rank: u32) -> Option<usize> {
    let best = kinds.first()?;
    let fit: Vec<usize> = (0..kinds.len()).filter(|&i| kinds[i] == *best).collect();
    Some(fit[local_rank as usize % fit.len()])
}

/// This host's GPUs as [`Gpu::open_local`] gives them to ranks: the adapters of the best
/// one's kind (name, device type), one rank each; empty without an adapter.
pub fn local_adapters(backend: BackendChoice) -> Vec<(String, String)> {
    let kinds: Vec<(String, wgpu::Backend, String)> = enumerate(backend)
        .iter()
        .map(|a| {
            let info = a.get_info();
            (format!("{:?}", info.device_type), info.backend, info.name)
        })
        .collect();
    let Some((ty, be, _)) = kinds.first().cloned() else {
        return Vec::new();
    };
    kinds
        .into_iter()
        .filter(|(t, b, _)| *t == ty && *b == be)
        .map(|(t, _, name)| (name, t))
        .collect()
}

impl Gpu {
    /// Opens the adapter for the `local_rank`-th rank on this host: `wanted` when given (an
    /// index or part of a name), else [`adapter_for_local_rank`].
    pub fn open_local(
        backend: BackendChoice,
        wanted: Option<&str>,
        local_rank: u32,
    ) -> Result<Gpu, GpuError> {
        if wanted.is_some() {
            return Gpu::open(backend, wanted);
        }
        let kinds: Vec<(String, wgpu::Backend)> = enumerate(backend)
            .iter()
            .map(|a| {
                let info = a.get_info();
                (format!("{:?}", info.device_type), info.backend)
            })
            .collect();
        match adapter_for_local_rank(&kinds, local_rank) {
            Some(i) => Gpu::open(backend, Some(&i.to_string())),
            None => Gpu::open(backend, None),
        }
    }

    /// Opens the adapter named by `wanted` (an index or a name substring; best one if `None`).
    pub fn open(backend: BackendChoice, wanted: Option<&str>) -> Result<Gpu, GpuError> {
        let adapters = enumerate(backend);
        if adapters.is_empty() {
            return Err(GpuError::NoAdapter { backend });
        }
        let names: Vec<String> = adapters
            .iter()
            .map(|a| {
                let info = a.get_info();
                format!("{} ({:?})", info.name, info.backend)
            })
            .collect();
        let index = match wanted {
            None => 0,
            Some(w) => pick_adapter(w, &names)?,
        };
        let adapter = &adapters[index];
        let report = AdapterReport::of(index, adapter);
        let wanted_features = wgpu::Features::TIMESTAMP_QUERY
            | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES
            | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS
            | wgpu::Features::SUBGROUP
            // Lets layernorm move eight floats per lane per access (see layernorm_u64.wgsl).
            | wgpu::Features::SHADER_INT64;
        let features = adapter.features() & wanted_features;
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("morphbench"),
            required_features: features,
            required_limits: limits.clone(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|source| GpuError::RequestDevice {
            adapter: report.name.clone(),
            source,
        })?;
        let errors = Arc::new(Mutex::new(Vec::new()));
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            tracing::error!("wgpu: {e}");
            sink.lock().unwrap().push(e.to_string());
        }));
        tracing::info!(adapter = %report.name, backend = %report.backend, "opened device");
        Ok(Gpu {
            device,
            queue,
            report,
            limits,
            features,
            errors,
        })
    }

    pub fn has_timestamps(&self) -> bool {
        self.features.contains(
            wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES,
        )
    }

    pub fn has_encoder_timestamps(&self) -> bool {
        self.features.contains(
            wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS,
        )
    }

    /// Turns any error the device raised since the last check into a `Result`.
    pub fn check(&self) -> Result<(), GpuError> {
        let mut errs = self.errors.lock().unwrap();
        if errs.is_empty() {
            Ok(())
        } else {
            let msg = errs.join("; ");
            errs.clear();
            Err(GpuError::Device(msg))
        }
    }

    /// Refuses a storage binding larger than the device allows, naming the limit.
    pub fn check_binding(&self, what: &str, bytes: u64) -> Result<(), GpuError> {
        let binding = self.limits.max_storage_buffer_binding_size;
        if bytes > binding {
            return Err(GpuError::TooLarge {
                what: what.into(),
                needed: bytes,
                limit: "max_storage_buffer_binding_size",
                value: binding,
            });
        }
        self.check_buffer(what, bytes)
    }

    pub fn check_buffer(&self, what: &str, bytes: u64) -> Result<(), GpuError> {
        if bytes > self.limits.max_buffer_size {
            return Err(GpuError::TooLarge {
                what: what.into(),
                needed: bytes,
                limit: "max_buffer_size",
                value: self.limits.max_buffer_size,
            });
        }
        Ok(())
    }

    /// Blocks until `index` has finished on the GPU.
    pub fn wait(&self, index: wgpu::SubmissionIndex) -> Result<(), GpuError> {
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(index),
                timeout: Some(WAIT_LIMIT),
            })
            .map_err(|e| match e {
                wgpu::PollError::Timeout => GpuError::Timeout(WAIT_LIMIT),
                other => GpuError::Device(other.to_string()),
            })?;
        self.check()
    }

    /// Records `record`'s commands on a fresh encoder, submits them and waits for them to
    /// finish; returns what `record` returned.
    pub fn submit_wait<R>(
        &self,
        record: impl FnOnce(&mut wgpu::CommandEncoder) -> R,
    ) -> Result<R, GpuError> {
        let mut enc = self.device.create_command_encoder(&Default::default());
        let recorded = record(&mut enc);
        let idx = self.queue.submit([enc.finish()]);
        self.wait(idx)?;
        Ok(recorded)
    }

    /// A compute pipeline from WGSL. Our kernels guard every index themselves and are
    /// verified against a CPU reference before they are timed, so they are compiled without
    /// wgpu's injected bounds checks when `trusted` (these checks cost up to 2x on lavapipe).
    #[allow(unsafe_code)]
    pub fn compute_pipeline(
        &self,
        label: &str,
        wgsl: &str,
        entry: &str,
        trusted: bool,
        constants: &[(&str, f64)],
    ) -> Result<wgpu::ComputePipeline, GpuError> {
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some(label),
            source: wgpu::ShaderSource::Wgsl(wgsl.into()),
        };
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = if trusted {
            // SAFETY: the shaders loaded here clamp or guard every buffer index (see
            // shaders/*.wgsl), and every pipeline is verified on fresh inputs before use.
            unsafe {
                self.device
                    .create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked())
            }
        } else {
            self.device.create_shader_module(desc)
        };
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(label),
                layout: None,
                module: &module,
                entry_point: Some(entry),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants,
                    ..Default::default()
                },
                cache: None,
            });
        if let Some(err) = pollster::block_on(scope.pop()) {
            return Err(GpuError::Device(format!("{label}: {err}")));
        }
        Ok(pipeline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_local_rank_takes_its_own_adapter_of_the_best_kind() {
        // Eight GPUs under Vulkan, the same eight under GL, and a CPU driver.
        let mut kinds = vec![("gpu", "vk"); 8];
        kinds.extend(vec![("gpu", "gl"); 8]);
        kinds.push(("cpu", "vk"));
        let picked: Vec<usize> = (0..8)
            .map(|r| adapter_for_local_rank(&kinds, r).unwrap())
            .collect();
        assert_eq!(picked, (0..8).collect::<Vec<_>>());
        // More ranks than GPUs share them in turn; one adapter serves every rank.
        assert_eq!(adapter_for_local_rank(&kinds, 9), Some(1));
        assert_eq!(adapter_for_local_rank(&[("cpu", "vk")], 3), Some(0));
        assert_eq!(adapter_for_local_rank::<u8>(&[], 0), None);
    }

    #[test]
    fn adapters_are_picked_by_index_or_by_one_name() {
        let names = [
            "llvmpipe (Vulkan)".to_string(),
            "llvmpipe (Gl)".to_string(),
            "NVIDIA H200 (Vulkan)".to_string(),
        ];
        assert_eq!(pick_adapter("1", &names).unwrap(), 1);
        assert_eq!(pick_adapter("h200", &names).unwrap(), 2);
        // A digit is an index, never a part of a name ("H200" holds a 2).
        for (name, wants) in [
            ("5", &["out of range", "3 adapters"][..]),
            ("llvm", &["matches 2 adapters"][..]),
            ("radeon", &["no adapter matches", "0: llvmpipe"][..]),
        ] {
            let e = crate::testing::err_text(pick_adapter(name, &names));
            assert!(wants.iter().all(|w| e.contains(w)), "{e}");
        }
    }
}
