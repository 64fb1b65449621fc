//! `morphbench info`: the adapters and the host, as text or JSON.

use anyhow::Result;
use serde::Serialize;

use crate::gpu::{adapter_reports, AdapterReport, BackendChoice};
use crate::host::HostInfo;
use crate::transport::rdma::verbs::{list_devices, DeviceInfo, VerbsError};

#[derive(Serialize)]
struct Info {
    host: HostInfo,
    adapters: Vec<AdapterReport>,
    /// Each adapter's PCIe link (read idle), or why it is not exposed, by adapter index.
    pcie: Vec<crate::reported::Reported<crate::pcie::Pcie>>,
    rdma: RdmaReport,
}

/// The RDMA devices, or why there are none (the rest of `info` carries on either way).
#[derive(Serialize)]
struct RdmaReport {
    devices: Vec<DeviceInfo>,
    unavailable: Option<String>,
}

impl RdmaReport {
    fn probe() -> RdmaReport {
        let (devices, unavailable) = match list_devices() {
            Ok(d) if d.is_empty() => (d, Some(VerbsError::NoDevices.to_string())),
            Ok(d) => (d, None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        RdmaReport {
            devices,
            unavailable,
        }
    }
}

pub fn run(backend: BackendChoice, json: bool) -> Result<()> {
    let adapters = adapter_reports(backend);
    let root = crate::pcie::sysfs_root();
    let pcie = adapters
        .iter()
        .map(|a| crate::pcie::read(&root, &a.pci_bus_id).into())
        .collect();
    let info = Info {
        host: HostInfo::probe(),
        adapters,
        pcie,
        rdma: RdmaReport::probe(),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&info)?);
        return Ok(());
    }
    let h = &info.host;
    println!("host      {}", h.hostname);
    println!(
        "cpu       {} ({} logical cores)",
        h.cpu_model, h.logical_cores
    );
    if let Some(m) = h.memory_bytes {
        println!("memory    {:.1} GiB", m as f64 / (1u64 << 30) as f64);
    }
    println!("os        {} (kernel {})", h.os, h.kernel);
    if info.adapters.is_empty() {
        println!(
            "adapters  none found. Install a Vulkan driver (Debian/Ubuntu: apt-get install \
             mesa-vulkan-drivers libvulkan1, or run scripts/setup)"
        );
    }
    for (a, pcie) in info.adapters.iter().zip(&info.pcie) {
        println!();
        println!("adapter {}: {}", a.index, a.name);
        // Idle: a link may train down when idle; fleet and health read it under a D2H copy.
        println!("  PCIe (idle): {}", crate::pcie::describe(pcie));
        println!(
            "  backend {}, type {}, vendor {} device {}",
            a.backend, a.device_type, a.vendor_id, a.device_id
        );
        println!("  driver {} ({})", a.driver, a.driver_info);
        println!(
            "  timestamps: queries {}, inside passes {}, inside encoders {}",
            a.timestamp_query, a.timestamp_query_inside_passes, a.timestamp_query_inside_encoders
        );
        println!(
            "  subgroups: {} (size {}..{}), 64-bit integers in shaders: {}",
            a.subgroups, a.subgroup_min_size, a.subgroup_max_size, a.shader_int64
        );
        println!(
            "  limits: max_buffer_size {} B, max_storage_buffer_binding_size {} B, workgroup storage {} B, \
             invocations/workgroup {}, workgroups/dimension {}",
            a.max_buffer_size,
            a.max_storage_buffer_binding_size,
            a.max_compute_workgroup_storage_size,
            a.max_compute_invocations_per_workgroup,
            a.max_compute_workgroups_per_dimension
        );
    }
    println!();
    if let Some(why) = &info.rdma.unavailable {
        println!("rdma      none: {why}");
    }
    for d in &info.rdma.devices {
        println!(
            "rdma {}: node GUID {}, max_qp_wr {}",
            d.name, d.node_guid, d.max_qp_wr
        );
        let root = crate::pcie::sysfs_root();
        let pcie = crate::pcie::rdma_bus_id(&root, &d.name)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "not exposed (no PCI device under class/infiniband/{})",
                    d.name
                )
            })
            .and_then(|bus| crate::pcie::read(&root, &bus))
            .into();
        println!("  PCIe (idle): {}", crate::pcie::describe(&pcie));
        for p in &d.ports {
            println!(
                "  port {}: {}, {}, active MTU {} B, LID {}",
                p.port, p.state, p.link_layer, p.active_mtu, p.lid
            );
            for g in &p.gids {
                println!("    gid[{}] {}", g.index, g.gid);
            }
        }
    }
    Ok(())
}
