//! `morphbench info`: the adapters and the host, as text or JSON.

use anyhow::Result;
use serde::Serialize;

use crate::gpu::{adapter_reports, AdapterReport, BackendChoice};
use crate::host::HostInfo;

#[derive(Serialize)]
struct Info {
    host: HostInfo,
    adapters: Vec<AdapterReport>,
}

pub fn run(backend: BackendChoice, json: bool) -> Result<()> {
    let info = Info {
        host: HostInfo::probe(),
        adapters: adapter_reports(backend),
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
    for a in &info.adapters {
        println!();
        println!("adapter {}: {}", a.index, a.name);
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
            "  subgroups: {} (size {}..{})",
            a.subgroups, a.subgroup_min_size, a.subgroup_max_size
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
    Ok(())
}
