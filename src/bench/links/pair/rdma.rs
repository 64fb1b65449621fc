//! RDMA tests over the same pair: the TCP connection becomes the out-of-band channel of a
//! verbs link, and perftest's ib_write_lat and ib_write_bw run over it (`rdma`'s code).

use std::net::TcpStream;

use super::super::tail::Tail;
use super::plan::{Measured, PairPlan};
use super::wire::{summary, PairError};
use crate::stats::hist::LogHist;
use crate::transport::rdma::oob::{OobChannel, Params, Purpose};
use crate::transport::rdma::perf::{self, BandwidthResult, Role, Session, TEST_BW, TEST_LAT};
use crate::transport::rdma::{client_hello, server_hello, DeviceChoice, Link, RdmaError};
use crate::transport::TransportKind;

/// perftest's defaults: 128 writes in flight (ib_write_bw's TX depth, as `rdma --window`),
/// 220 B inline at most.
const WINDOW: u32 = 128;
const INLINE: u32 = 220;

pub(super) fn tests(
    s: &TcpStream,
    plan: &PairPlan,
    me: u32,
    peer: u32,
    driver: bool,
    choice: &DeviceChoice,
) -> Result<Vec<Measured>, PairError> {
    let e = |e: RdmaError| rdma_error(me, peer, e);
    let stream = s.try_clone().map_err(|e| e.to_string())?;
    let mut oob = OobChannel::from_stream(stream, plan.io()).map_err(e)?;
    let params = perf_params(plan);
    agree_params(&mut oob, &params, driver, me, peer)?;
    let mut link = Link::establish(oob, choice, perf::shape(&params)).map_err(e)?;
    let (driver_role, other) = if driver {
        (Role::Client, Role::Server)
    } else {
        (Role::Server, Role::Client)
    };
    let mut out = Vec::new();
    let me_peer = |role: Role| {
        if role == Role::Client {
            (me, peer)
        } else {
            (peer, me)
        }
    };
    // This end's port counters around each test it writes a row for: the driver's around
    // the ping-pong, each writer's around its own stream.
    let port = link.counters();
    for &bytes in &plan.sizes {
        let before = port.read();
        let mut sess = Session::new(&mut link, driver_role, plan.io());
        let lat = sess
            .latency(bytes, params.iters, params.warmup)
            .map_err(e)?;
        if driver {
            let mut row = pingpong_row(peer, me, bytes, &lat.samples_us)?;
            row.retransmits = port.moved_since(before).0;
            out.push(row);
        }
        // Each way: the driver writes first, then the server; the writer measures.
        for role in [driver_role, other] {
            let before = port.read();
            let mut sess = Session::new(&mut link, role, plan.io());
            if let Some(bw) = sess.bandwidth(bytes, params.iters, WINDOW).map_err(e)? {
                let (src, dst) = me_peer(role);
                let mut row = oneway_row(src, dst, bytes, &bw)?;
                row.retransmits = port.moved_since(before).0;
                out.push(row);
            }
        }
    }
    link.oob.barrier(u32::MAX, true).map_err(e)?;
    Ok(out)
}

/// The text of a failed verbs call on link r`me`-r`peer`; a retry-count failure means a lossy
/// path, so it says where to look.
fn rdma_error(me: u32, peer: u32, e: RdmaError) -> String {
    let text = e.to_string();
    if text.contains("retry counter exceeded") || text.contains("RETRY_EXC") {
        format!(
            "RDMA link r{me}-r{peer}: the queue pair exceeded its retry count (7 tries of \
             67 ms): the path is dropping packets; see the port's hw_counters and `links` \
             tails ({text})"
        )
    } else {
        format!("RDMA: {text}")
    }
}

/// The perftest parameters rank 0's plan gives both ends.
fn perf_params(plan: &PairPlan) -> Params {
    Params {
        tests: TEST_LAT | TEST_BW,
        iters: plan.iters,
        warmup: plan.iters.min(100),
        window: WINDOW,
        inline_size: INLINE,
        sizes: plan.sizes.clone(),
    }
}

/// The hello on the out-of-band channel: the driver proposes `params`, the other end checks
/// they match its own plan.
fn agree_params(
    oob: &mut OobChannel,
    params: &Params,
    driver: bool,
    me: u32,
    peer: u32,
) -> Result<(), PairError> {
    let e = |e: RdmaError| rdma_error(me, peer, e);
    if driver {
        client_hello(oob, Purpose::Bench, params).map_err(e)?;
    } else {
        let theirs = server_hello(oob, Purpose::Bench).map_err(e)?;
        if theirs != *params {
            return Err("the peer's RDMA parameters differ from rank 0's plan".into());
        }
    }
    Ok(())
}

/// The driver's ping-pong row for `bytes`: latency samples, from the peer to this end.
fn pingpong_row(src: u32, dst: u32, bytes: u64, samples_us: &[f64]) -> Result<Measured, PairError> {
    Ok(Measured {
        transport: TransportKind::Rdma,
        src,
        dst,
        bytes,
        direction: "pingpong".into(),
        summary: summary(samples_us)?,
        gbps: None,
        tail: Tail::of(samples_us, 0),
        retransmits: None,
        hist: LogHist::of(samples_us),
    })
}

/// The writer's one-way stream row for `bytes`, from `src` to `dst`.
fn oneway_row(src: u32, dst: u32, bytes: u64, bw: &BandwidthResult) -> Result<Measured, PairError> {
    Ok(Measured {
        transport: TransportKind::Rdma,
        src,
        dst,
        bytes,
        direction: "oneway".into(),
        summary: summary(&bw.per_write_us)?,
        gbps: Some(bw.avg_gbps),
        tail: Tail::default(),
        retransmits: None,
        hist: LogHist::of(&bw.per_write_us),
    })
}
