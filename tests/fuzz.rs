//! Fuzz-style properties over everything that parses outside input: CSV readers, suite configs
//! and scenarios, trace files, size lists, and the wire and out-of-band decoders. Each gets
//! arbitrary bytes (and, where a format has structure, valid input with numbers or bytes
//! replaced) and must return an error or a valid result: no panic, no hang, no huge allocation.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use morphbench::bench::hol::{parse_delay_trace, HolTable};
use morphbench::bench::kernels::KernelsTable;
use morphbench::bench::sim::{SimConfig, SimPlan, SimTable, TimelineTable};
use morphbench::config::SuiteConfig;
use morphbench::record::csv::{header, MAX_CELL};
use morphbench::record::{read_table, CsvTable};
use morphbench::sim::trace::parse_link_trace;
use morphbench::transport::rdma::oob::{OobChannel, Params, Purpose};
use morphbench::transport::wire::{read_hello, Header, HEADER_BYTES};

/// Every case must finish well within this.
const CASE_LIMIT: Duration = Duration::from_secs(5);

fn cfg() -> ProptestConfig {
    ProptestConfig {
        cases: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Text that is mostly printable, with CSV and TOML punctuation, and sometimes anything.
fn texty() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9_,;:.=\\[\\]\"# \\n+-]{0,300}",
        any::<Vec<u8>>().prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
}

/// A number as a cell: ordinary, huge, tiny, negative, non-finite, or not a number.
fn cell() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<f64>().prop_map(|x| x.to_string()),
        any::<i64>().prop_map(|x| x.to_string()),
        any::<u64>().prop_map(|x| x.to_string()),
        Just("inf".to_string()),
        Just("NaN".to_string()),
        Just("-0".to_string()),
        Just("1e308".to_string()),
        Just(String::new()),
        "[a-z]{1,4}",
    ]
}

/// Reads `text` as table `T` from a file; if it reads, every number in it is in range.
fn read_as<T: CsvTable>(text: &[u8]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.csv");
    std::fs::write(&path, text).unwrap();
    let t0 = Instant::now();
    let result = read_table::<T>(&path);
    prop_assert!(t0.elapsed() < CASE_LIMIT);
    if let Ok(rows) = result {
        for r in rows {
            if let Some(s) = &r.stats {
                prop_assert!(s.p50_us.is_finite() && s.p50_us.abs() <= MAX_CELL);
            }
        }
    }
    Ok(())
}

/// A valid header and one row whose cells are replaced by `cells` (cycled).
fn table_text<T: CsvTable>(cells: &[String]) -> String {
    let h = header::<T>();
    let row: Vec<String> = (0..h.len())
        .map(|i| match h[i].as_str() {
            "schema_version" => "1".to_string(),
            _ => cells[i % cells.len()].clone(),
        })
        .collect();
    format!("{}\n{}\n", h.join(","), row.join(","))
}

/// A connected loopback pair: what `write` sends arrives on the returned channel's side.
fn oob_fed_with(bytes: Vec<u8>) -> OobChannel {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let writer = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        let _ = s.write_all(&bytes);
        // Close: a short record ends in an error, not a wait.
    });
    let (stream, _) = listener.accept().unwrap();
    writer.join().unwrap();
    OobChannel::from_stream(stream, Duration::from_millis(300)).unwrap()
}

/// The bytes `send` puts on the wire.
fn oob_bytes(send: impl FnOnce(&mut OobChannel) + Send + 'static) -> Vec<u8> {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let sender = std::thread::spawn(move || {
        let s = TcpStream::connect(addr).unwrap();
        let mut ch = OobChannel::from_stream(s, Duration::from_secs(2)).unwrap();
        send(&mut ch);
    });
    let (mut stream, _) = listener.accept().unwrap();
    sender.join().unwrap();
    let mut out = Vec::new();
    stream.read_to_end(&mut out).unwrap();
    out
}

fn valid_params() -> Vec<u8> {
    oob_bytes(|ch| {
        ch.send_params(&Params {
            tests: 3,
            iters: 100,
            warmup: 10,
            window: 16,
            inline_size: 64,
            sizes: vec![2, 64, 4096],
        })
        .unwrap()
    })
}

/// `base` with some bytes replaced, cut short, or extended.
fn mutated(base: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let n = base.len();
    (
        prop::collection::vec((0..n, any::<u8>()), 0..6),
        0..=n + 8,
        any::<Vec<u8>>(),
    )
        .prop_map(move |(flips, cut, tail)| {
            let mut b = base.clone();
            for (i, v) in flips {
                b[i] = v;
            }
            b.extend(tail);
            b.truncate(cut.max(1));
            b
        })
}

proptest! {
    #![proptest_config(cfg())]

    #[test]
    fn csv_readers_take_any_bytes(bytes in any::<Vec<u8>>()) {
        read_as::<KernelsTable>(&bytes)?;
        read_as::<HolTable>(&bytes)?;
        read_as::<TimelineTable>(&bytes)?;
    }

    #[test]
    fn csv_readers_take_any_numeric_cells(cells in prop::collection::vec(cell(), 1..40)) {
        read_as::<KernelsTable>(table_text::<KernelsTable>(&cells).as_bytes())?;
        read_as::<HolTable>(table_text::<HolTable>(&cells).as_bytes())?;
        read_as::<SimTable>(table_text::<SimTable>(&cells).as_bytes())?;
        read_as::<TimelineTable>(table_text::<TimelineTable>(&cells).as_bytes())?;
    }

    #[test]
    fn suite_configs_take_any_text(text in texty()) {
        let t0 = Instant::now();
        let _ = SuiteConfig::parse(&text, "fuzz.toml");
        prop_assert!(t0.elapsed() < CASE_LIMIT);
    }

    #[test]
    fn suite_configs_take_any_numbers(
        reps in cell(), link in cell(), iters in cell(), stages in cell(), tf in cell(),
    ) {
        let text = format!(
            "[kernels]\ngemm = [\"8x8x8\"]\niters = {iters}\n[hol]\nreps = {reps}\nlink_gbps = {link}\n\
             [sim]\nstages = {stages}\ntf = {tf}\n"
        );
        let t0 = Instant::now();
        if let Ok(cfg) = SuiteConfig::parse(&text, "fuzz.toml") {
            // Accepted means planned within every cap.
            prop_assert!(cfg.benches().is_ok());
        }
        prop_assert!(t0.elapsed() < CASE_LIMIT);
    }

    #[test]
    fn scenarios_take_any_numbers(
        stages in any::<u32>(), n in any::<u32>(), tf in any::<f64>(), link in any::<f64>(),
        slow in any::<f64>(), sweep in any::<f64>(),
    ) {
        let text = format!(
            "stages = {stages}\nmicrobatches = {n}\ntf = {tf:?}\nlink_ms = {link:?}\n\
             slow = [{{ link = 0, delay_ms = {slow:?} }}]\nsweep = [{{ link = 0, delays_ms = [{sweep:?}] }}]\n"
        );
        let t0 = Instant::now();
        if let Ok(cfg) = toml::from_str::<SimConfig>(&text) {
            if let Ok(plan) = SimPlan::build(&cfg, None) {
                prop_assert!(plan.estimated_ops() <= morphbench::bench::sim::MAX_SIM_OPS);
            }
        }
        prop_assert!(t0.elapsed() < CASE_LIMIT);
    }

    #[test]
    fn traces_take_any_text(text in texty(), links in 0usize..8) {
        let t0 = Instant::now();
        if let Ok(t) = parse_link_trace(&text, links) {
            prop_assert!(t.iter().all(|(_, d)| d.len() == links && d.iter().all(|x| x.is_finite() && *x >= 0.0)));
        }
        if let Ok(t) = parse_delay_trace(&text) {
            prop_assert!(t.iter().all(|(_, d)| d.is_finite() && *d >= 0.0));
        }
        let _ = morphbench::gpu::kernels::sizes::parse_list(&text, morphbench::gpu::kernels::sizes::parse_gemm);
        let _ = morphbench::units::parse_size(&text);
        prop_assert!(t0.elapsed() < CASE_LIMIT);
    }

    #[test]
    fn wire_decoders_take_any_bytes(bytes in prop::collection::vec(any::<u8>(), HEADER_BYTES..HEADER_BYTES + 40), max in any::<u64>()) {
        let mut b = [0u8; HEADER_BYTES];
        b.copy_from_slice(&bytes[..HEADER_BYTES]);
        if let Ok(h) = Header::decode(&b, max) {
            prop_assert!(h.len <= max);
        }
        let _ = read_hello(&mut &bytes[..]);
    }

    #[test]
    fn oob_decoders_take_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let t0 = Instant::now();
        let _ = oob_fed_with(bytes.clone()).expect_hello(Purpose::Transport);
        let _ = oob_fed_with(bytes).recv_params();
        prop_assert!(t0.elapsed() < CASE_LIMIT);
    }

    #[test]
    fn oob_params_survive_any_mutation(bytes in mutated(valid_params())) {
        let t0 = Instant::now();
        if let Ok(p) = oob_fed_with(bytes).recv_params() {
            prop_assert!(p.validate().is_ok());
        }
        prop_assert!(t0.elapsed() < CASE_LIMIT);
    }
}
