//! What a rank is: its inventory, taken at each rank, and the fields of it that nodes of one
//! adapter must agree on.

use serde::{Deserialize, Serialize};

use crate::gpu::Gpu;
use crate::host::HostInfo;

/// What a rank is: its host, its adapter and what else a node of its kind must agree on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Inventory {
    pub rank: u32,
    pub local_rank: u32,
    pub host: HostInfo,
    /// /etc/machine-id (the hostname where there is none): ranks sharing it share a machine.
    pub machine_id: String,
    pub adapter: Option<String>,
    pub adapter_index: Option<usize>,
    pub driver: Option<String>,
    pub backend: Option<String>,
    pub device_type: Option<String>,
    /// The adapter's PCI bus id, where the backend gives one.
    #[serde(default)]
    pub pci_bus_id: Option<String>,
    /// Adapters this rank could see.
    pub adapters: usize,
    pub rdma_devices: Vec<String>,
    /// Why there is no adapter, when there is none.
    pub gpu_error: Option<String>,
}

impl Inventory {
    /// Whether the adapter is a CPU driver (its "GPU" work is the host's).
    pub fn cpu_adapter(&self) -> bool {
        self.device_type.as_deref() == Some("Cpu")
    }
}

pub fn inventory(rank: u32, local_rank: u32, gpu: Result<&Gpu, &anyhow::Error>) -> Inventory {
    let host = HostInfo::probe();
    let pci_bus_id = gpu
        .ok()
        .map(|g| g.report.pci_bus_id.clone())
        .filter(|p| !p.is_empty());
    let (adapter, index, driver, backend, device_type, gpu_error) = match gpu {
        Ok(g) => (
            Some(g.report.name.clone()),
            Some(g.report.index),
            Some(
                format!("{} {}", g.report.driver, g.report.driver_info)
                    .trim()
                    .to_string(),
            ),
            Some(g.report.backend.clone()),
            Some(g.report.device_type.clone()),
            None,
        ),
        Err(e) => (None, None, None, None, None, Some(e.to_string())),
    };
    Inventory {
        rank,
        local_rank,
        machine_id: crate::host::machine_id(),
        host,
        adapter,
        adapter_index: index,
        driver,
        backend,
        device_type,
        pci_bus_id,
        adapters: crate::gpu::enumerate(crate::gpu::BackendChoice::Auto).len(),
        rdma_devices: crate::transport::rdma::verbs::list_devices()
            .map(|l| l.into_iter().map(|d| d.name).collect())
            .unwrap_or_default(),
        gpu_error,
    }
}

/// The fields of the inventory that nodes of one adapter must agree on.
pub(super) fn fields(i: &Inventory) -> Vec<(&'static str, String, Option<f64>)> {
    let gib = i
        .host
        .memory_bytes
        .map(|b| (b as f64 / (1u64 << 30) as f64).round());
    vec![
        ("driver", i.driver.clone().unwrap_or_default(), None),
        ("adapters", i.adapters.to_string(), Some(i.adapters as f64)),
        (
            "rdma_devices",
            i.rdma_devices.join(" "),
            Some(i.rdma_devices.len() as f64),
        ),
        ("cpu_model", i.host.cpu_model.clone(), None),
        (
            "logical_cores",
            i.host.logical_cores.to_string(),
            Some(i.host.logical_cores as f64),
        ),
        (
            "memory_gib",
            gib.map_or(String::new(), |g| g.to_string()),
            gib,
        ),
    ]
}
