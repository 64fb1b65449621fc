//! PCIe link state and error counters, read from sysfs as DCGM and Meta's GCM read them: a
//! device's `current_link_speed`/`current_link_width` against its `max_link_speed`/
//! `max_link_width` (a link that trained down to x8 or Gen4 moves half the data), and its
//! AER counters (`aer_dev_correctable`, `aer_dev_nonfatal`, `aer_dev_fatal`), of the device
//! and of its upstream port. A link slows down when idle (ASPM), so its state is read while a
//! copy runs. Where the files are missing (no PCI device, a VM, a CPU driver) the state is
//! "not exposed", never healthy.

use std::path::{Path, PathBuf};

/// One side of a PCIe link (a device, or the upstream port above it).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LinkState {
    /// The PCI address (`0000:01:00.0`).
    pub bus_id: String,
    /// GT/s per lane (None: "Unknown" or unread).
    pub speed_gts: Option<f64>,
    pub width: Option<u32>,
    pub max_speed_gts: Option<f64>,
    pub max_width: Option<u32>,
    pub aer: Aer,
}

/// AER error totals (each None where its file is missing).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Aer {
    pub correctable: Option<u64>,
    pub nonfatal: Option<u64>,
    pub fatal: Option<u64>,
}

/// A device's link and, where sysfs shows one, its upstream port's.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Pcie {
    pub device: LinkState,
    pub upstream: Option<LinkState>,
}

/// Where sysfs is ([`crate::host::sysfs_root`]).
pub fn sysfs_root() -> PathBuf {
    crate::host::sysfs_root()
}

fn read_trim(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// "16.0 GT/s PCIe" (or "16 GT/s", "2.5 GT/s") as 16.0; "Unknown" as None.
pub fn parse_speed(text: &str) -> Option<f64> {
    text.split_whitespace()
        .next()?
        .parse::<f64>()
        .ok()
        .filter(|v| *v > 0.0)
}

/// "16" (or "x16") as 16; 0 (a link that is down) and anything else as None.
pub fn parse_width(text: &str) -> Option<u32> {
    text.trim()
        .trim_start_matches('x')
        .parse::<u32>()
        .ok()
        .filter(|w| *w > 0)
}

/// The `TOTAL_ERR_*` line of an AER counter file (the kernel's format since 5.x), or, for an
/// older one-number file, the number.
pub fn parse_aer(text: &str) -> Option<u64> {
    let total = text
        .lines()
        .find(|l| l.starts_with("TOTAL_ERR"))
        .and_then(|l| l.split_whitespace().last());
    match total {
        Some(t) => t.parse().ok(),
        None => text.trim().parse().ok(),
    }
}

/// Reads the link of the PCI device at `dir` (a `/sys/bus/pci/devices/ADDR` folder).
fn read_state(dir: &Path) -> Option<LinkState> {
    let speed = read_trim(&dir.join("current_link_speed"));
    let max_speed = read_trim(&dir.join("max_link_speed"));
    let width = read_trim(&dir.join("current_link_width"));
    let max_width = read_trim(&dir.join("max_link_width"));
    if [&speed, &max_speed, &width, &max_width]
        .iter()
        .all(|f| f.is_none())
    {
        return None;
    }
    let aer = |name: &str| read_trim(&dir.join(name)).and_then(|t| parse_aer(&t));
    let bus_id = std::fs::canonicalize(dir)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| {
            dir.file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into())
        });
    Some(LinkState {
        bus_id,
        speed_gts: speed.as_deref().and_then(parse_speed),
        width: width.as_deref().and_then(parse_width),
        max_speed_gts: max_speed.as_deref().and_then(parse_speed),
        max_width: max_width.as_deref().and_then(parse_width),
        aer: Aer {
            correctable: aer("aer_dev_correctable"),
            nonfatal: aer("aer_dev_nonfatal"),
            fatal: aer("aer_dev_fatal"),
        },
    })
}

/// Whether `name` looks like a PCI address (`0000:00:01.0`).
fn is_pci_address(name: &str) -> bool {
    let b = name.as_bytes();
    name.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.'
}

/// The link of PCI device `bus_id` under `root`, with its upstream port's (the parent folder
/// of the device's real sysfs path, when that is a PCI device). Err says why it is not exposed.
pub fn read(root: &Path, bus_id: &str) -> anyhow::Result<Pcie> {
    let bus_id = bus_id.trim().to_lowercase();
    if !is_pci_address(&bus_id) {
        return Err(anyhow::anyhow!("not exposed (no PCI address: {bus_id:?})"));
    }
    let dir = root.join("bus/pci/devices").join(&bus_id);
    let device = read_state(&dir).ok_or_else(|| {
        anyhow::anyhow!(
            "not exposed ({} has no link files)",
            dir.join("current_link_width").display()
        )
    })?;
    let upstream = std::fs::canonicalize(&dir)
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| is_pci_address(&n.to_string_lossy()))
        })
        .and_then(|p| read_state(&p));
    Ok(Pcie { device, upstream })
}

/// The PCI address of RDMA device `dev` (its `device` link), when sysfs shows it.
pub fn rdma_bus_id(root: &Path, dev: &str) -> Option<String> {
    let p = std::fs::canonicalize(root.join("class/infiniband").join(dev).join("device")).ok()?;
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| is_pci_address(n))
}

/// A link's verdict: `Fail` with the two widths and speeds when it runs below its capability
/// (read under load), `Warn` for AER errors over the run (correctable; nonfatal and fatal fail),
/// `NotExposed` with why.
#[derive(Debug, Clone, PartialEq)]
pub enum Judged {
    Pass(String),
    Warn(String),
    Fail(String),
    NotExposed(String),
}

fn gts(v: Option<f64>) -> String {
    v.map_or("unknown".into(), |v| {
        let t = format!("{v:.1}");
        format!("{} GT/s", t.trim_end_matches(".0"))
    })
}

fn x(v: Option<u32>) -> String {
    v.map_or("x?".into(), |w| format!("x{w}"))
}

/// The AER increase from `before` to `after` per kind; a counter that went back (reset, or a
/// device that was replaced) is not judged.
fn aer_delta(before: &Aer, after: &Aer) -> (Option<u64>, Option<u64>, Option<u64>) {
    let d = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) if b >= a => Some(b - a),
        _ => None,
    };
    (
        d(before.correctable, after.correctable),
        d(before.nonfatal, after.nonfatal),
        d(before.fatal, after.fatal),
    )
}

/// The most a link can train to: the lesser of its two ends' maxima (a Gen5 card in a Gen4
/// slot runs Gen4 at best). An end whose maximum is unread leaves the other's.
fn attainable(a: &LinkState, b: Option<&LinkState>) -> (Option<f64>, Option<u32>) {
    let least_f = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    };
    let least_u = |x: Option<u32>, y: Option<u32>| match (x, y) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    };
    (
        least_f(a.max_speed_gts, b.and_then(|b| b.max_speed_gts)),
        least_u(a.max_width, b.and_then(|b| b.max_width)),
    )
}

/// Judges one side of a link: its state under load against what the link can attain (the
/// lesser of its and its partner's maxima), its AER counters before and after.
pub fn judge_state(
    under_load: &LinkState,
    partner: Option<&LinkState>,
    before: &Aer,
    after: &Aer,
) -> Judged {
    let s = under_load;
    let state = format!(
        "{} {} {}, capable of {} {}",
        s.bus_id,
        x(s.width),
        gts(s.speed_gts),
        x(s.max_width),
        gts(s.max_speed_gts)
    );
    let (top_speed, top_width) = attainable(s, partner);
    let narrower = matches!((s.width, top_width), (Some(w), Some(m)) if w < m);
    let slower = matches!((s.speed_gts, top_speed), (Some(v), Some(m)) if v + 1e-9 < m);
    if narrower || slower {
        let limit = if (top_speed, top_width) != (s.max_speed_gts, s.max_width) {
            format!(" (the link attains {} {})", x(top_width), gts(top_speed))
        } else {
            String::new()
        };
        return Judged::Fail(format!("PCIe {state}{limit} under load"));
    }
    // Below its own maximum but at its partner's: the slot (or the card) limits the link.
    let own_narrower = matches!((s.width, s.max_width), (Some(w), Some(m)) if w < m);
    let own_slower = matches!((s.speed_gts, s.max_speed_gts), (Some(v), Some(m)) if v + 1e-9 < m);
    let limited = if own_narrower || own_slower {
        format!(
            "; slot-limited: its other end ({}) attains {} {}",
            partner.map_or("?", |p| p.bus_id.as_str()),
            x(top_width),
            gts(top_speed)
        )
    } else {
        String::new()
    };
    let (cor, nonfatal, fatal) = aer_delta(before, after);
    if nonfatal.unwrap_or(0) + fatal.unwrap_or(0) > 0 {
        return Judged::Fail(format!(
            "PCIe {}: {} nonfatal and {} fatal AER errors during the run",
            s.bus_id,
            nonfatal.unwrap_or(0),
            fatal.unwrap_or(0)
        ));
    }
    if cor.unwrap_or(0) > 0 {
        return Judged::Warn(format!(
            "PCIe {}: {} correctable AER errors during the run",
            s.bus_id,
            cor.unwrap_or(0)
        ));
    }
    if s.width.is_none() || s.speed_gts.is_none() {
        return Judged::NotExposed(format!("PCIe {state}: the link state reads unknown"));
    }
    Judged::Pass(format!("PCIe {state}{limited}"))
}

/// Judges a device's link and its upstream port's, each against what the link between them
/// can attain: the worst of the two.
pub fn judge(under_load: &Pcie, before: &Pcie, after: &Pcie) -> Judged {
    let mut out = vec![judge_state(
        &under_load.device,
        under_load.upstream.as_ref(),
        &before.device.aer,
        &after.device.aer,
    )];
    if let (Some(u), Some(b), Some(a)) = (&under_load.upstream, &before.upstream, &after.upstream) {
        out.push(judge_state(u, Some(&under_load.device), &b.aer, &a.aer));
    }
    let rank = |j: &Judged| match j {
        Judged::Fail(_) => 3,
        Judged::Warn(_) => 2,
        Judged::NotExposed(_) => 1,
        Judged::Pass(_) => 0,
    };
    // The worst; between equals the device's (the last maximum of the reversed list).
    out.into_iter()
        .rev()
        .max_by_key(rank)
        .expect("the device is always judged")
}

/// One line for `info`: the link, its capability and its AER totals, or why not exposed.
pub fn describe(p: &crate::reported::Reported<Pcie>) -> String {
    let one = |s: &LinkState| {
        let n = |v: Option<u64>| v.map_or("?".into(), |v| v.to_string());
        format!(
            "{} {} {} (max {} {}), AER correctable {} nonfatal {} fatal {}",
            s.bus_id,
            x(s.width),
            gts(s.speed_gts),
            x(s.max_width),
            gts(s.max_speed_gts),
            n(s.aer.correctable),
            n(s.aer.nonfatal),
            n(s.aer.fatal)
        )
    };
    match p.as_result() {
        Err(why) => why.to_string(),
        Ok(p) => match &p.upstream {
            Some(u) => format!("{}; upstream port {}", one(&p.device), one(u)),
            None => one(&p.device),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake sysfs: a root port 0000:00:01.0 with the device 0000:01:00.0 below it, linked
    /// from bus/pci/devices as the kernel links them.
    fn tree(dev: &[(&str, &str)], port: &[(&str, &str)]) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let real_port = t.path().join("devices/pci0000:00/0000:00:01.0");
        let real_dev = real_port.join("0000:01:00.0");
        std::fs::create_dir_all(&real_dev).unwrap();
        for (name, text) in dev {
            std::fs::write(real_dev.join(name), text).unwrap();
        }
        for (name, text) in port {
            std::fs::write(real_port.join(name), text).unwrap();
        }
        let links = t.path().join("bus/pci/devices");
        std::fs::create_dir_all(&links).unwrap();
        std::os::unix::fs::symlink(&real_dev, links.join("0000:01:00.0")).unwrap();
        std::os::unix::fs::symlink(&real_port, links.join("0000:00:01.0")).unwrap();
        t
    }

    const AER_COR: &str = "RxErr 0\nBadTLP 2\nBadDLLP 1\nRollover 0\nTimeout 0\n\
                           NonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 3\n";

    fn healthy() -> Vec<(&'static str, &'static str)> {
        vec![
            ("current_link_speed", "32.0 GT/s PCIe\n"),
            ("max_link_speed", "32.0 GT/s PCIe\n"),
            ("current_link_width", "16\n"),
            ("max_link_width", "16\n"),
            ("aer_dev_correctable", AER_COR),
            ("aer_dev_nonfatal", "Undefined 0\nTOTAL_ERR_NONFATAL 0\n"),
            ("aer_dev_fatal", "TOTAL_ERR_FATAL 0\n"),
        ]
    }

    #[test]
    fn the_files_are_parsed_as_the_kernel_writes_them() {
        assert_eq!(parse_speed("16.0 GT/s PCIe"), Some(16.0));
        assert_eq!(parse_speed("2.5 GT/s"), Some(2.5));
        assert_eq!(parse_speed("Unknown"), None);
        assert_eq!(parse_width("16"), Some(16));
        assert_eq!(parse_width("x8"), Some(8));
        assert_eq!(parse_width("0"), None);
        assert_eq!(parse_aer(AER_COR), Some(3));
        assert_eq!(parse_aer("7\n"), Some(7));
        assert_eq!(parse_aer("garbage"), None);
    }

    #[test]
    fn a_healthy_link_passes_and_its_upstream_port_is_found() {
        let t = tree(&healthy(), &healthy());
        let p = read(t.path(), "0000:01:00.0").unwrap();
        assert_eq!(p.device.bus_id, "0000:01:00.0");
        assert_eq!(p.device.width, Some(16));
        assert_eq!(p.device.aer.correctable, Some(3));
        assert_eq!(p.upstream.as_ref().unwrap().bus_id, "0000:00:01.0");
        match judge(&p, &p, &p) {
            Judged::Pass(s) => assert!(s.contains("x16 32 GT/s, capable of x16 32 GT/s"), "{s}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_link_trained_down_fails_with_both_widths_and_speeds() {
        let mut dev = healthy();
        dev[0] = ("current_link_speed", "16.0 GT/s PCIe\n");
        dev[2] = ("current_link_width", "8\n");
        let t = tree(&dev, &healthy());
        let p = read(t.path(), "0000:01:00.0").unwrap();
        match judge(&p, &p, &p) {
            Judged::Fail(s) => assert!(
                s.contains("0000:01:00.0 x8 16 GT/s, capable of x16 32 GT/s under load"),
                "{s}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn errors_during_the_run_warn_or_fail_and_a_reset_is_not_judged() {
        let t = tree(&healthy(), &healthy());
        let before = read(t.path(), "0000:01:00.0").unwrap();
        let mut after = before.clone();
        after.device.aer.correctable = Some(9);
        assert!(
            matches!(judge(&before, &before, &after), Judged::Warn(s) if s.contains("6 correctable"))
        );
        // The upstream port's errors count too.
        let mut up = before.clone();
        up.upstream.as_mut().unwrap().aer.fatal = Some(1);
        assert!(
            matches!(judge(&before, &before, &up), Judged::Fail(s) if s.contains("0000:00:01.0"))
        );
        // A counter that went back (a reset) is not an error.
        let mut reset = before.clone();
        reset.device.aer.correctable = Some(0);
        assert!(matches!(judge(&before, &before, &reset), Judged::Pass(_)));
    }

    #[test]
    fn unknown_or_missing_files_are_not_exposed_never_healthy() {
        let mut dev = healthy();
        dev[0] = ("current_link_speed", "Unknown\n");
        let t = tree(&dev, &[]);
        let p = read(t.path(), "0000:01:00.0").unwrap();
        assert!(
            p.upstream.is_none(),
            "a port with no link files is no upstream"
        );
        assert!(matches!(judge(&p, &p, &p), Judged::NotExposed(_)));
        // A device with no link files at all, and no such device.
        let t = tree(&[("vendor", "0x10de\n")], &[]);
        let err = |bus_id: &str| crate::testing::err_text(read(t.path(), bus_id));
        assert!(err("0000:01:00.0").starts_with("not exposed"));
        assert!(err("0000:02:00.0").starts_with("not exposed"));
        assert!(err("llvmpipe").contains("no PCI address"));
    }

    #[test]
    fn a_card_in_a_slower_slot_is_slot_limited_not_failed() {
        // A Gen5 x16 card in a Gen4 x16 slot, running Gen4 x16: as fast as the link can go.
        let mut dev = healthy();
        dev[0] = ("current_link_speed", "16.0 GT/s PCIe\n");
        let mut port = healthy();
        port[0] = ("current_link_speed", "16.0 GT/s PCIe\n");
        port[1] = ("max_link_speed", "16.0 GT/s PCIe\n");
        let t = tree(&dev, &port);
        let p = read(t.path(), "0000:01:00.0").unwrap();
        match judge(&p, &p, &p) {
            Judged::Pass(s) => assert!(
                s.contains("slot-limited") && s.contains("0000:00:01.0") && s.contains("16 GT/s"),
                "{s}"
            ),
            other => panic!("{other:?}"),
        }
        // The same card in an x8 slot, at x8: slot-limited too.
        let mut port8 = port.clone();
        port8[2] = ("current_link_width", "8\n");
        port8[3] = ("max_link_width", "8\n");
        let mut dev8 = dev.clone();
        dev8[2] = ("current_link_width", "8\n");
        let t = tree(&dev8, &port8);
        let p = read(t.path(), "0000:01:00.0").unwrap();
        assert!(matches!(judge(&p, &p, &p), Judged::Pass(s) if s.contains("slot-limited")));
    }

    #[test]
    fn a_link_trained_below_both_ends_still_fails() {
        // Gen5 card, Gen4 slot, running Gen3: below what the link attains.
        let mut dev = healthy();
        dev[0] = ("current_link_speed", "8.0 GT/s PCIe\n");
        let mut port = healthy();
        port[0] = ("current_link_speed", "8.0 GT/s PCIe\n");
        port[1] = ("max_link_speed", "16.0 GT/s PCIe\n");
        let t = tree(&dev, &port);
        let p = read(t.path(), "0000:01:00.0").unwrap();
        match judge(&p, &p, &p) {
            Judged::Fail(s) => assert!(
                s.contains("x16 8 GT/s") && s.contains("attains x16 16 GT/s"),
                "{s}"
            ),
            other => panic!("{other:?}"),
        }
        // Width: an x16 card in an x16 slot trained to x4 fails.
        let mut dev4 = healthy();
        dev4[2] = ("current_link_width", "4\n");
        let t = tree(&dev4, &healthy());
        let p = read(t.path(), "0000:01:00.0").unwrap();
        assert!(matches!(judge(&p, &p, &p), Judged::Fail(s) if s.contains("x4")));
    }
}
