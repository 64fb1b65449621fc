//! The devices, their ports and GIDs, and an opened device (the context every other
//! resource is created from).

use std::ffi::CStr;
use std::mem::zeroed;
use std::sync::Arc;

use rdma_sys::*;
use serde::Serialize;

use super::error::{check, last_os_error, Result, VerbsError};

/// The libibverbs device list, freed on drop.
struct DeviceList {
    list: *mut *mut ibv_device,
    len: usize,
}

impl DeviceList {
    fn get() -> Result<DeviceList> {
        let mut n = 0;
        // SAFETY: n is a valid out-pointer; a NULL result is handled below.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            let e = std::io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(38) => VerbsError::NoVerbs(e), // ENOSYS
                _ => VerbsError::Call {
                    call: "ibv_get_device_list",
                    source: e,
                },
            });
        }
        Ok(DeviceList {
            list,
            len: n.max(0) as usize,
        })
    }

    fn devices(&self) -> impl Iterator<Item = (String, *mut ibv_device)> + '_ {
        (0..self.len).map(move |i| {
            // SAFETY: i < len entries returned by ibv_get_device_list, each a valid device
            // whose name is a NUL-terminated string owned by the list.
            unsafe {
                let d = *self.list.add(i);
                let name = CStr::from_ptr(ibv_get_device_name(d))
                    .to_string_lossy()
                    .into_owned();
                (name, d)
            }
        })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: list came from ibv_get_device_list and is freed once.
        unsafe { ibv_free_device_list(self.list) };
    }
}

/// What `morphbench info` shows of one device.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceInfo {
    pub name: String,
    pub node_guid: String,
    pub max_qp_wr: i32,
    pub ports: Vec<PortInfo>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PortInfo {
    pub port: u8,
    pub state: &'static str,
    pub link_layer: &'static str,
    pub active_mtu: u32,
    pub lid: u16,
    /// The non-zero GIDs among the first few indices (reading all of them can be slow).
    pub gids: Vec<GidInfo>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GidInfo {
    pub index: u32,
    pub gid: String,
}

/// How many GID indices `info` looks at per port.
const GIDS_LISTED: i32 = 8;

/// Every RDMA device with its ports and GIDs.
pub fn list_devices() -> Result<Vec<DeviceInfo>> {
    let list = DeviceList::get()?;
    let names: Vec<String> = list.devices().map(|(n, _)| n).collect();
    drop(list);
    names
        .iter()
        .map(|n| Device::open(Some(n))?.info())
        .collect()
}

pub fn port_state_name(s: u32) -> &'static str {
    match s {
        ibv_port_state::IBV_PORT_DOWN => "DOWN",
        ibv_port_state::IBV_PORT_INIT => "INIT",
        ibv_port_state::IBV_PORT_ARMED => "ARMED",
        ibv_port_state::IBV_PORT_ACTIVE => "ACTIVE",
        ibv_port_state::IBV_PORT_ACTIVE_DEFER => "ACTIVE_DEFER",
        _ => "NOP",
    }
}

fn link_layer_name(l: u8) -> &'static str {
    // IBV_LINK_LAYER_* are C macros that rdma-sys does not bind.
    match l {
        1 => "InfiniBand",
        2 => "Ethernet",
        _ => "unspecified",
    }
}

/// Path MTU in bytes from the verbs enum (256 << (mtu - 1)).
pub fn mtu_bytes(mtu: u32) -> u32 {
    if (1..=5).contains(&mtu) {
        256 << (mtu - 1)
    } else {
        0
    }
}

pub fn format_gid(raw: &[u8; 16]) -> String {
    raw.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

/// The attributes of one port that connection setup needs.
#[derive(Debug, Clone, Copy)]
pub struct PortAttr {
    pub state: u32,
    pub lid: u16,
    pub active_mtu: u32,
    pub link_layer: u8,
    pub gid_table_len: i32,
}

/// An opened RDMA device (verbs context).
pub struct Device {
    pub(super) ctx: *mut ibv_context,
    name: String,
}

// SAFETY: libibverbs contexts and the objects created from them are thread-safe.
unsafe impl Send for Device {}
unsafe impl Sync for Device {}

impl Device {
    /// Opens the named device, or the first one when `name` is None.
    pub fn open(name: Option<&str>) -> Result<Arc<Device>> {
        let list = DeviceList::get()?;
        let all: Vec<(String, *mut ibv_device)> = list.devices().collect();
        if all.is_empty() {
            return Err(VerbsError::NoDevices);
        }
        let (found, dev) = match name {
            None => all[0].clone(),
            Some(want) => all
                .iter()
                .find(|(n, _)| n == want)
                .cloned()
                .ok_or_else(|| VerbsError::UnknownDevice {
                    wanted: want.to_string(),
                    have: all
                        .iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                })?,
        };
        // SAFETY: dev is a live entry of the list, which outlives this call.
        let ctx = unsafe { ibv_open_device(dev) };
        if ctx.is_null() {
            return Err(last_os_error("ibv_open_device"));
        }
        Ok(Arc::new(Device { ctx, name: found }))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn port(&self, port: u8) -> Result<PortAttr> {
        // SAFETY: ctx is open; attr is a zeroed out-struct of the size the call expects.
        let attr = unsafe {
            let mut attr: ibv_port_attr = zeroed();
            let rc = ___ibv_query_port(self.ctx, port, &mut attr);
            if rc != 0 {
                return Err(VerbsError::Invalid(format!(
                    "port {port} of {} cannot be queried ({}). Pick an existing port with \
                     --ib-port (ports start at 1)",
                    self.name,
                    std::io::Error::from_raw_os_error(rc.abs())
                )));
            }
            attr
        };
        Ok(PortAttr {
            state: attr.state,
            lid: attr.lid,
            active_mtu: attr.active_mtu,
            link_layer: attr.link_layer,
            gid_table_len: attr.gid_tbl_len,
        })
    }

    pub fn gid(&self, port: u8, index: i32) -> Result<[u8; 16]> {
        let table = self.port(port)?.gid_table_len;
        if index < 0 || index >= table {
            return Err(VerbsError::Invalid(format!(
                "GID index {index} is outside port {port}'s table of {table} entries on {}; \
                 pick one with --gid-index (see `morphbench info`)",
                self.name
            )));
        }
        // SAFETY: ctx is open and the index is inside the table.
        let gid = unsafe {
            let mut gid: ibv_gid = zeroed();
            check(
                "ibv_query_gid",
                ibv_query_gid(self.ctx, port, index, &mut gid),
            )?;
            gid.raw
        };
        if gid == [0; 16] {
            return Err(VerbsError::Invalid(format!(
                "GID index {index} on port {port} of {} is empty; pick a populated one with \
                 --gid-index (see `morphbench info`)",
                self.name
            )));
        }
        Ok(gid)
    }

    fn info(&self) -> Result<DeviceInfo> {
        // SAFETY: ctx is open; attr is a zeroed out-struct.
        let attr = unsafe {
            let mut attr: ibv_device_attr = zeroed();
            check("ibv_query_device", ibv_query_device(self.ctx, &mut attr))?;
            attr
        };
        let guid = u64::from_be(attr.node_guid);
        let mut ports = Vec::new();
        for p in 1..=attr.phys_port_cnt {
            let a = self.port(p)?;
            let mut gids = Vec::new();
            for i in 0..a.gid_table_len.min(GIDS_LISTED) {
                if let Ok(g) = self.gid(p, i) {
                    gids.push(GidInfo {
                        index: i as u32,
                        gid: format_gid(&g),
                    });
                }
            }
            ports.push(PortInfo {
                port: p,
                state: port_state_name(a.state),
                link_layer: link_layer_name(a.link_layer),
                active_mtu: mtu_bytes(a.active_mtu),
                lid: a.lid,
                gids,
            });
        }
        Ok(DeviceInfo {
            name: self.name.clone(),
            node_guid: format!(
                "{:04x}:{:04x}:{:04x}:{:04x}",
                guid >> 48,
                (guid >> 32) & 0xffff,
                (guid >> 16) & 0xffff,
                guid & 0xffff
            ),
            max_qp_wr: attr.max_qp_wr,
            ports,
        })
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: every child holds an Arc of this device, so none is alive any more.
        unsafe { ibv_close_device(self.ctx) };
    }
}
