//! `morphbench rdma --server` / `--connect HOST`: perftest-style RDMA WRITE latency and
//! bandwidth between two processes. The client proposes the test and writes `rdma.csv`; the
//! server accepts one client, runs its half, and prints what it saw.

use std::cell::RefCell;
use std::net::TcpListener;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;

use super::flags::{parse_iters, parse_message_sizes, parse_warmup, RdmaDeviceArgs, SizeList};
use crate::bench::descriptor::FromFlags;
use crate::record::csv::sig4;
use crate::record::{Line, RunDir};
use crate::stats::Summary;
use crate::suite::{Bench, Notes};
use crate::transport::rdma::counters;
use crate::transport::rdma::oob::{OobChannel, Params, Purpose, MAX_MESSAGE};
use crate::transport::rdma::perf::{
    self, BandwidthResult, LatencyResult, Role, Session, TEST_BW, TEST_LAT,
};
use crate::transport::rdma::verbs::mtu_bytes;
use crate::transport::rdma::{client_hello, server_hello, DeviceChoice, Link};

mod table;
mod views;

pub use table::BENCH;

/// The `rdma` bench, for the registry (its two sides are two runs of its command).
pub const DESCRIPTOR: crate::bench::descriptor::Descriptor = crate::bench::descriptor::Descriptor {
    name: BENCH,
    from_toml: None,
    command: crate::bench::descriptor::CommandSpec::plans(
        "RDMA WRITE latency and bandwidth between two nodes, perftest-style; writes rdma.csv",
        "Examples:\n  morphbench rdma --server --listen 0.0.0.0:18515 --device mlx5_0      # on node A\n  morphbench rdma --connect nodeA --device mlx5_0 --test lat             # on node B",
        <RdmaArgs as clap::Args>::augment_args,
        |m, g| planned(&crate::bench::descriptor::parsed::<RdmaArgs>(m)?.plan(), g.quiet || g.json),
    ),
    tables: || {
        vec![crate::record::TableSpec::compared::<RdmaTable>()
            .single_node()
            .headlines(views::headlines)
            .charts(crate::record::Charts::Compared(views::rdma_charts))]
    },
};
/// perftest's default port.
pub const DEFAULT_PORT: u16 = 18515;

pub use table::{RdmaFigures, RdmaParams, RdmaTable};

#[derive(Debug, Clone, Serialize)]
pub struct RdmaPlan {
    /// Server: the address to listen on. Client: None.
    pub listen: Option<String>,
    /// Client: the server's address.
    pub connect: Option<String>,
    #[serde(skip)]
    pub choice: DeviceChoice,
    pub sizes: Vec<u64>,
    pub iters: u32,
    pub warmup: u32,
    pub window: u32,
    pub inline_size: u32,
    /// TEST_LAT | TEST_BW bits.
    pub tests: u32,
    pub timeout_s: u64,
}

/// The sizes of `-a` in perftest, cut at 1 MiB: 2 B, 4 B, ..., 1 MiB.
pub fn default_sizes() -> Vec<u64> {
    (1..=20).map(|p| 1u64 << p).collect()
}

/// Adds perftest's port when `addr` has none (`HOST`, `IP` or a bare IPv6 address).
pub fn with_default_port(addr: &str) -> String {
    if addr.parse::<std::net::SocketAddr>().is_ok() {
        return addr.to_string();
    }
    if let Ok(ip) = addr.parse::<std::net::IpAddr>() {
        return std::net::SocketAddr::new(ip, DEFAULT_PORT).to_string();
    }
    match addr.rsplit_once(':') {
        Some((_, port)) if port.parse::<u16>().is_ok() => addr.to_string(),
        _ => format!("{addr}:{DEFAULT_PORT}"),
    }
}

impl RdmaPlan {
    fn params(&self) -> Params {
        Params {
            tests: self.tests,
            iters: self.iters,
            warmup: self.warmup,
            window: self.window,
            inline_size: self.inline_size,
            sizes: self.sizes.clone(),
        }
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        if let Some(s) = self.sizes.iter().find(|&&s| s == 0 || s > MAX_MESSAGE) {
            return Err(anyhow::anyhow!(
                "--sizes: {s} B is outside 1 B ..= 1 GiB; give sizes such as 2,64,4K,1M"
            ));
        }
        if self.listen.is_none() && self.connect.is_none() {
            return Err(anyhow::anyhow!(
                "give --server (and --listen ADDR) or --connect HOST"
            ));
        }
        self.params()
            .validate()
            .map_err(|e| anyhow::anyhow!("{e}; check --sizes, --iters, --warmup and --window"))
    }
}

fn timeout(plan: &RdmaPlan) -> Duration {
    Duration::from_secs(plan.timeout_s)
}

/// `rdma --server` serves one client, then is done; `rdma --connect` is the client, connected
/// here and returned as the bench the suite runs into its run folder.
fn planned(plan: &RdmaPlan, quiet: bool) -> Result<Option<FromFlags>> {
    plan.validate()?;
    plan.choice.check()?;
    match &plan.listen {
        Some(listen) => serve(plan, listen, quiet).map(|_| None),
        None => client(plan, quiet).map(Some),
    }
}

fn serve(plan: &RdmaPlan, listen: &str, quiet: bool) -> Result<()> {
    let listener = TcpListener::bind(listen)
        .with_context(|| format!("cannot listen on {listen}; choose another --listen HOST:PORT"))?;
    if !quiet {
        println!("rdma server listening on {}", listener.local_addr()?);
    }
    let (mut oob, peer) = OobChannel::accept(&listener, None, timeout(plan))?;
    let params = server_hello(&mut oob, Purpose::Bench)?;
    if !quiet {
        println!(
            "{peer}: {} sizes up to {} B, {} iterations",
            params.sizes.len(),
            params.largest(),
            params.iters
        );
    }
    let mut link = Link::establish(oob, &plan.choice, perf::shape(&params))?;
    let counters = link.counters();
    let mut session = Session::new(&mut link, Role::Server, timeout(plan));
    for_each_test(&params, |test, size| {
        let before = counters.read();
        match test {
            TEST_LAT => {
                session.latency(size, params.iters, params.warmup)?;
            }
            _ => {
                session.bandwidth(size, params.iters, params.window)?;
            }
        }
        if !quiet {
            let moved = counters.moved_since(before).1;
            println!(
                "{} {size} B: done, payload verified{}",
                test_name(test),
                words(&moved)
                    .map(|w| format!("; port counters: {w}"))
                    .unwrap_or_default()
            );
        }
        Ok(())
    })?;
    link.oob.barrier(u32::MAX, true)?;
    Ok(())
}

fn test_name(test: u32) -> &'static str {
    if test == TEST_LAT {
        "lat"
    } else {
        "bw"
    }
}

/// Latency over every size, then bandwidth over every size, as asked.
fn for_each_test(p: &Params, mut f: impl FnMut(u32, u64) -> Result<()>) -> Result<()> {
    for test in [TEST_LAT, TEST_BW] {
        if p.tests & test != 0 {
            for &size in &p.sizes {
                f(test, size)?;
            }
        }
    }
    Ok(())
}

fn client(plan: &RdmaPlan, quiet: bool) -> Result<FromFlags> {
    let addr = with_default_port(plan.connect.as_deref().unwrap_or_default());
    let params = plan.params();
    // Connect before the run folder exists: an absent server leaves nothing behind.
    let mut oob = OobChannel::connect(&addr, Duration::from_secs(5), timeout(plan))?;
    client_hello(&mut oob, Purpose::Bench, &params)?;
    let link = Link::establish(oob, &plan.choice, perf::shape(&params))?;
    let bench = RdmaClient {
        plan: plan.clone(),
        params,
        link: RefCell::new(link),
        quiet,
    };
    Ok(FromFlags::new(bench, serde_json::to_value(plan)?))
}

/// The client's side of a connected pair, as a bench of the suite.
struct RdmaClient {
    plan: RdmaPlan,
    params: Params,
    link: RefCell<Link>,
    quiet: bool,
}

impl Bench for RdmaClient {
    fn points(&self) -> u64 {
        // No bar: the perftest-style table is the progress.
        0
    }
    fn run(&self, cx: &crate::suite::Context) -> Result<Notes> {
        let dir = cx.dir;
        let mut link = self.link.borrow_mut();
        let mut notes = Notes::new();
        notes.insert(
            "rdma_device".into(),
            serde_json::json!({
                "device": link.device_name,
                "ib_port": self.plan.choice.port,
                "gid_index": self.plan.choice.gid_index,
                "max_inline": link.qp.max_inline(),
                "path_mtu": mtu_bytes(link.remote.mtu),
            }),
        );
        if let Some(cs) = clocksource(self.quiet) {
            notes.insert("clocksource".into(), serde_json::json!(cs));
        }
        measure(&self.plan, &self.params, &mut link, dir, self.quiet)?;
        Ok(notes)
    }
}

/// The kernel's clocksource. Every sample reads the OS clock; off the TSC each read is a
/// syscall that lands inside the latency (perftest reads the TSC directly), so it is said.
fn clocksource(quiet: bool) -> Option<String> {
    let cs =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .ok()?;
    let cs = cs.trim().to_string();
    if cs != "tsc" && !quiet {
        eprintln!(
            "note: the kernel's clocksource is {cs}, not tsc: every clock read is a \
             syscall, and small-message latencies include it"
        );
    }
    Some(cs)
}

fn measure(
    plan: &RdmaPlan,
    params: &Params,
    link: &mut Link,
    dir: &RunDir,
    quiet: bool,
) -> Result<()> {
    let mut table = dir.table::<RdmaTable>()?;
    let device = link.device_name.clone();
    let mtu = mtu_bytes(link.remote.mtu);
    let row = |test: &str, bytes: u64, inline: bool, s: &Summary, figures: RdmaFigures| {
        let params = RdmaParams {
            test: test.to_string(),
            bytes,
            iters: params.iters,
            window: if test == "bw" { params.window } else { 1 },
            inline,
            device: device.clone(),
            ib_port: plan.choice.port,
            gid_index: plan.choice.gid_index,
            mtu,
        };
        Line::<RdmaTable>::new(&dir.id, format!("{test}_{bytes}"), params, Some(s), figures)
    };
    let mut printed = 0;
    let counters = link.counters();
    let mut session = Session::new(link, Role::Client, timeout(plan));
    // The counters at the start of the test under way: a test that fails says which moved.
    let mut started = None;
    let result = for_each_test(params, |test, size| {
        let before = counters.read();
        started = Some((test, size, before.clone()));
        if test == TEST_LAT {
            let r: LatencyResult = session.latency(size, params.iters, params.warmup)?;
            let s = Summary::of(&r.samples_us).expect("iterations >= 1");
            if !quiet {
                print_latency(&mut printed, size, params.iters, &s);
            }
            let figures = RdmaFigures {
                verified: true,
                timer: "host".into(),
                ..figures(&counters, before, quiet)
            };
            table.write(&row("lat", size, r.inline, &s, figures))?;
        } else {
            let r: BandwidthResult = session
                .bandwidth(size, params.iters, params.window)?
                .expect("the client measures");
            let s = Summary::of(&r.per_write_us).expect("one completion at least");
            if !quiet {
                print_bandwidth(&mut printed, size, &r);
            }
            let figures = RdmaFigures {
                gbps: Some(sig4(r.avg_gbps)),
                peak_gbps: Some(sig4(r.peak_gbps)),
                msg_rate_mpps: Some(sig4(r.msg_rate_mpps)),
                verified: true,
                timer: "host".into(),
                ..figures(&counters, before, quiet)
            };
            table.write(&row("bw", size, false, &s, figures))?;
        }
        Ok(())
    });
    if let (Err(e), Some((test, size, before))) = (&result, started) {
        return Err(test_failure(&counters, test, size, before, e));
    }
    session.link.oob.barrier(u32::MAX, true)?;
    Ok(())
}

/// Prints one ib_write_lat-style line; `printed` says which test's header is on screen, so
/// the header comes again only when the test changes.
fn print_latency(printed: &mut u32, size: u64, iters: u32, s: &Summary) {
    if *printed != TEST_LAT {
        println!(
            "{:>9} {:>11} {:>12} {:>12} {:>16} {:>12} {:>14} {:>10} {:>12}",
            "#bytes",
            "#iterations",
            "t_min[usec]",
            "t_max[usec]",
            "t_typical[usec]",
            "t_avg[usec]",
            "t_stdev[usec]",
            "99%[usec]",
            "99.9%[usec]"
        );
        *printed = TEST_LAT;
    }
    println!(
        "{:>9} {:>11} {:>12.2} {:>12.2} {:>16.2} {:>12.2} {:>14.2} {:>10.2} {:>12.2}",
        size, iters, s.min, s.max, s.p50, s.mean, s.stddev, s.p99, s.p999
    );
}

/// Prints one ib_write_bw-style line; `printed` says which test's header is on screen.
fn print_bandwidth(printed: &mut u32, size: u64, r: &BandwidthResult) {
    if *printed != TEST_BW {
        println!(
            "{:>9} {:>11} {:>16} {:>19} {:>14}",
            "#bytes", "#iterations", "BW peak[MB/sec]", "BW average[MB/sec]", "MsgRate[Mpps]"
        );
        *printed = TEST_BW;
    }
    // perftest's MB is 2^20 bytes.
    let mb = |gbps: f64| gbps * 1e9 / (1u64 << 20) as f64;
    println!(
        "{:>9} {:>11} {:>16.2} {:>19.2} {:>14.6}",
        size,
        r.iters,
        mb(r.peak_gbps),
        mb(r.avg_gbps),
        r.msg_rate_mpps
    );
}

/// The error for a test that failed, naming the port counters that moved during it: drops on
/// the path are the usual cause.
fn test_failure(
    counters: &counters::Port,
    test: u32,
    size: u64,
    before: Option<counters::Reading>,
    e: &anyhow::Error,
) -> anyhow::Error {
    let moved = counters.moved_since(before).1;
    let counters_said = match words(&moved) {
        Some(w) => format!(
            "; {}:{} port counters moved during the test ({w}): the path is dropping \
             packets",
            counters.device, counters.port
        ),
        None => String::new(),
    };
    anyhow::anyhow!("{} {size} B: {e:#}{counters_said}", test_name(test))
}

/// The counter figures of one test, said on the console when any moved.
fn figures(
    counters: &counters::Port,
    before: Option<counters::Reading>,
    quiet: bool,
) -> RdmaFigures {
    let (retransmits, moved) = counters.moved_since(before);
    let said = words(&moved);
    if let (Some(w), false) = (&said, quiet) {
        println!(
            "{:>9} {}:{} port counters: {w}",
            "", counters.device, counters.port
        );
    }
    RdmaFigures {
        retransmits,
        counters_moved: said.unwrap_or_default(),
        ..Default::default()
    }
}

/// "completer_retry_err +8; duplicate_request +4" (None when nothing moved; no commas, so
/// the CSV field needs no quotes).
fn words(moved: &[(String, u64)]) -> Option<String> {
    let parts: Vec<String> = moved.iter().map(|(k, v)| format!("{k} +{v}")).collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RdmaTest {
    Lat,
    Bw,
    Both,
}

/// `morphbench rdma`'s flags.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("side").required(true).args(["server", "connect"])))]
pub struct RdmaArgs {
    /// Wait for one client, run its tests, exit.
    #[arg(long)]
    pub server: bool,
    /// Server: address to listen on (loopback unless told otherwise).
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:18515",
        requires = "server"
    )]
    pub listen: String,
    /// Client: the server's HOST[:PORT] (port 18515 by default, as perftest).
    #[arg(long, value_name = "HOST[:PORT]")]
    pub connect: Option<String>,
    #[command(flatten)]
    pub device: RdmaDeviceArgs,
    /// Message sizes, comma separated, K/M/G units allowed [default: 2 B to 1 MiB, powers of two].
    #[arg(long, value_name = "SIZE[,SIZE...]", value_parser = parse_message_sizes)]
    pub sizes: Option<SizeList>,
    /// Timed iterations per size (ib_write_lat/ib_write_bw -n).
    #[arg(long, default_value_t = 1000, value_parser = parse_iters)]
    pub iters: u32,
    /// Untimed latency rounds before the timed ones (at most 100000).
    #[arg(long, default_value_t = 10, value_parser = parse_warmup)]
    pub warmup: u32,
    /// Outstanding writes in the bandwidth test (ib_write_bw --tx-depth).
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub window: u32,
    /// Which tests to run.
    #[arg(long, value_enum, default_value = "both")]
    pub test: RdmaTest,
    /// Latency messages up to this size go inline (perftest's -I); the device may grant less,
    /// and 0 turns inline off.
    #[arg(long, default_value_t = 220, value_parser = clap::value_parser!(u32).range(0..=1024))]
    pub inline_size: u32,
    /// Seconds any wait for the peer may last before it counts as gone.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout_s: u64,
}

impl RdmaArgs {
    /// The plan these flags give (rdma has no suite table: its two sides are two commands).
    pub fn plan(&self) -> RdmaPlan {
        use crate::transport::rdma::perf::{TEST_BW, TEST_LAT};
        RdmaPlan {
            listen: self.server.then(|| self.listen.clone()),
            connect: self.connect.clone(),
            choice: self.device.choice(),
            sizes: self
                .sizes
                .as_ref()
                .map(|s| s.0.clone())
                .unwrap_or_else(default_sizes),
            iters: self.iters,
            warmup: self.warmup,
            window: self.window,
            inline_size: self.inline_size,
            tests: match self.test {
                RdmaTest::Lat => TEST_LAT,
                RdmaTest::Bw => TEST_BW,
                RdmaTest::Both => TEST_LAT | TEST_BW,
            },
            timeout_s: self.timeout_s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_port_is_added_only_when_missing() {
        assert_eq!(with_default_port("10.0.0.2"), "10.0.0.2:18515");
        assert_eq!(with_default_port("10.0.0.2:7000"), "10.0.0.2:7000");
        assert_eq!(with_default_port("node17"), "node17:18515");
        assert_eq!(with_default_port("node17:7000"), "node17:7000");
        assert_eq!(with_default_port("::1"), "[::1]:18515");
        assert_eq!(with_default_port("[::1]:7000"), "[::1]:7000");
    }
}
