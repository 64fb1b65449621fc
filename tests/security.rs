//! The attack suite (issue 60; docs/security.md): a stranger process speaking the wire
//! protocol against real ranks on loopback. Each case fails if its attack works. The cases
//! that need root and a second user (a symlinked `--out` or lock, a hostname set in a UTS
//! namespace) are in `scripts/security-test`, which runs this file too.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use morphbench::bench::links::pair::PairPlan;
use morphbench::bench::links::Order;
use morphbench::cluster::auth::{self, Secret, Trust};
use morphbench::cluster::frame;
use morphbench::cluster::rendezvous::{self, Registration};
use morphbench::cluster::session::Down;
use morphbench::transport::TransportKind;

/// What the stranger says it is: a name that must appear in no output.
const EVIL: &str = "evilhost";

fn links_rank(home: &Path, rank: u32, port: u16, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_morphbench"))
        .args(["links", "--rank", &rank.to_string(), "--world", "2"])
        .args(["--rendezvous", &format!("127.0.0.1:{port}")])
        .args(["--out", home.join("results").to_str().unwrap()])
        .args(["--no-fingerprint", "-q", "--sizes", "8", "--iters", "20"])
        .args(["--budget-ms", "20"])
        .args(extra)
        .current_dir(home)
        .env("HOME", home)
        .env("MORPHBENCH_TOKEN", common::TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn trust(token: &str) -> Trust {
    Trust::Secret(Arc::new(Secret::from_token(token).unwrap()))
}

fn registration(rank: u32, version: &str) -> Registration {
    Registration {
        version: version.into(),
        hostname: EVIL.into(),
        rank,
        world: 2,
        address: "10.66.66.66".into(),
        port: 9,
        adapter: Some(EVIL.into()),
        rdma_devices: vec![],
    }
}

/// Connects to `port` until it answers (rank 0 may not listen yet).
fn reach(port: u16) -> TcpStream {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => return s,
            Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("rank 0 never listened on {port}: {e}"),
        }
    }
}

/// Every file of a run folder, and both streams, hold nothing of the stranger's.
fn assert_nothing_from_the_stranger(home: &Path, outs: &[Output]) {
    let run = common::only_run(&home.join("results"));
    let mut files = vec![];
    let mut dirs = vec![run];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                files.push(p);
            }
        }
    }
    for f in files {
        let text = String::from_utf8_lossy(&std::fs::read(&f).unwrap()).into_owned();
        assert!(!text.contains(EVIL), "{} names the stranger", f.display());
        assert!(
            !text.contains("10.66.66.66"),
            "{} has its address",
            f.display()
        );
    }
    for o in outs {
        assert!(!common::output(o).contains(EVIL), "{}", common::output(o));
    }
}

#[test]
fn a_forged_registration_is_refused_and_the_run_goes_on() {
    for how in ["no proof", "a wrong secret", "the old protocol"] {
        let home = tempfile::tempdir().unwrap();
        let port = common::free_port();
        let zero = links_rank(home.path(), 0, port, &[]);
        let s = reach(port);
        let deadline = Instant::now() + Duration::from_secs(5);
        match how {
            // Bytes of a registration where the proof should be.
            "the old protocol" => {
                let body = serde_json::to_vec(&serde_json::json!({
                    "Register": registration(1, env!("CARGO_PKG_VERSION"))
                }))
                .unwrap();
                let mut f = b"MBR1".to_vec();
                f.extend((body.len() as u32).to_be_bytes());
                f.extend(body);
                (&s).write_all(&f).unwrap();
            }
            "a wrong secret" => {
                let e = auth::prove(&s, &trust("not the job's own secret"), deadline);
                assert!(e.is_err(), "a wrong secret was believed");
            }
            _ => (&s).write_all(b"MBA1").unwrap(),
        }
        let one = links_rank(home.path(), 1, port, &[]);
        let (o0, o1) = (
            zero.wait_with_output().unwrap(),
            one.wait_with_output().unwrap(),
        );
        assert!(o0.status.success(), "{how}: {}", common::output(&o0));
        assert!(o1.status.success(), "{how}: {}", common::output(&o1));
        assert_nothing_from_the_stranger(home.path(), &[o0, o1]);
    }
}

#[test]
fn a_stolen_local_port_gains_nothing() {
    let home = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_morphbench"))
        .args(["--out", home.path().join("results").to_str().unwrap(), "-q"])
        .args(["links", "--local", "2", "--no-fingerprint", "--sizes", "8"])
        .args(["--iters", "20", "--budget-ms", "20"])
        .current_dir(home.path())
        .env_remove("MORPHBENCH_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // As the unprivileged user of the review: the ranks' rendezvous port, read from
    // /proc/*/cmdline, then a registration as rank 1 before the real one.
    let mut tries = 0;
    let port = loop {
        let found = std::fs::read_dir("/proc").unwrap().find_map(|e| {
            let cmd = std::fs::read(e.ok()?.path().join("cmdline")).ok()?;
            let args: Vec<String> = cmd
                .split(|&b| b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let at = args.iter().position(|a| a == "--rendezvous")?;
            (args.iter().any(|a| a == "--local") && args.iter().any(|a| a == "links"))
                .then(|| args.get(at + 1)?.rsplit(':').next()?.parse::<u16>().ok())
                .flatten()
        });
        match found {
            Some(p) => break Some(p),
            None if tries < 400 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            None => break None,
        }
    };
    if let Some(port) = port {
        if let Ok(s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = auth::prove(
                &s,
                &Trust::Insecure,
                Instant::now() + Duration::from_secs(2),
            );
        }
    }
    let o = run.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", common::output(&o));
    assert_nothing_from_the_stranger(home.path(), &[o]);
}

#[test]
fn a_proven_registration_that_is_refused_lets_the_run_go_on() {
    // A process with the secret but another version: refused by name, and the real rank 1
    // still completes the run.
    let home = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let zero = links_rank(home.path(), 0, port, &[]);
    let s = reach(port);
    let refused = rendezvous::register(
        s,
        registration(1, "0.0.0-other"),
        &trust(common::TOKEN),
        Duration::from_secs(10),
    );
    assert!(
        refused
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("0.0.0-other"),
        "{refused:?}"
    );
    // And one whose host name is a formula, markup and a terminal escape: refused by name.
    let mut evil = registration(1, env!("CARGO_PKG_VERSION"));
    evil.hostname = "=cmd|' /C calc'!A0<img src=x>\u{1b}[31m".into();
    let refused = rendezvous::register(
        reach(port),
        evil,
        &trust(common::TOKEN),
        Duration::from_secs(10),
    );
    let e = refused.unwrap_err().to_string();
    assert!(
        e.contains("not a valid host name") && !e.contains('\u{1b}'),
        "{e}"
    );
    let one = links_rank(home.path(), 1, port, &[]);
    let (o0, o1) = (
        zero.wait_with_output().unwrap(),
        one.wait_with_output().unwrap(),
    );
    assert!(o0.status.success(), "{}", common::output(&o0));
    assert!(o1.status.success(), "{}", common::output(&o1));
}

#[test]
fn six_idle_sockets_do_not_hold_up_the_rendezvous() {
    let home = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let zero = links_rank(home.path(), 0, port, &["--wait-s", "8"]);
    let idle: Vec<TcpStream> = (0..6).map(|_| reach(port)).collect();
    let one = links_rank(home.path(), 1, port, &["--wait-s", "8"]);
    let (o0, o1) = (
        zero.wait_with_output().unwrap(),
        one.wait_with_output().unwrap(),
    );
    drop(idle);
    assert!(o0.status.success(), "{}", common::output(&o0));
    assert!(o1.status.success(), "{}", common::output(&o1));
}

/// A proxy between rank 1 and rank 0 that flips one byte of the first message after the
/// handshake (the registration): the rewritten message fails its MAC.
#[test]
fn a_rewriting_proxy_is_caught_and_named() {
    let home = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    let via = proxy.local_addr().unwrap().port();
    let zero = links_rank(home.path(), 0, port, &["--wait-s", "4"]);
    let relay = std::thread::spawn(move || {
        let (client, _) = proxy.accept().unwrap();
        let server = reach(port);
        let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
        // rank 0 -> rank 1, untouched.
        let down = std::thread::spawn(move || {
            let (mut s_in, mut c_out) = (server, client);
            let _ = std::io::copy(&mut s_in, &mut c_out);
        });
        // rank 1 -> rank 0: the handshake (4 + 32 + 32 bytes) untouched, then one byte of
        // the registration's host name rewritten.
        let mut buf = [0u8; 4096];
        let mut seen = 0usize;
        while let Ok(n) = c_in.read(&mut buf) {
            if n == 0 {
                break;
            }
            for (i, b) in buf[..n].iter_mut().enumerate() {
                if seen + i == 68 + 8 + 30 {
                    *b ^= 0x01;
                }
            }
            seen += n;
            if s_out.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = down.join();
    });
    let one = links_rank(home.path(), 1, via, &["--wait-s", "4"]);
    let (o0, o1) = (
        zero.wait_with_output().unwrap(),
        one.wait_with_output().unwrap(),
    );
    assert!(
        !o0.status.success(),
        "a rewritten registration was believed"
    );
    let e0 = common::stderr(&o0);
    assert!(e0.contains("MAC does not verify"), "{e0}");
    assert!(!o1.status.success());
    drop(relay);
}

/// A fake rank 0: without the secret it is refused before it can order anything; with it
/// (a job member gone bad) its 1 TiB plan is refused before anything is allocated.
#[test]
fn a_fake_rank_0_is_refused_cleanly() {
    for knows_secret in [false, true] {
        let home = tempfile::tempdir().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let one = links_rank(home.path(), 1, port, &["--wait-s", "10"]);
        let token = if knows_secret {
            common::TOKEN
        } else {
            "a fake rank 0's own token"
        };
        let mut me = registration(0, env!("CARGO_PKG_VERSION"));
        me.hostname = "fake0".into();
        let served = rendezvous::serve(&listener, me, &trust(token), Duration::from_secs(10));
        if let Ok((_, channels)) = served {
            let plan = PairPlan {
                transports: vec![TransportKind::Tcp],
                sizes: vec![1 << 40],
                iters: 1000,
                budget_ms: 100,
                bidir: false,
                io_timeout_s: 30,
            };
            frame::send(&channels[0], &Down::Order(Order::Plan(plan))).unwrap();
            std::thread::sleep(Duration::from_millis(500));
        }
        let o = one.wait_with_output().unwrap();
        let code = o.status.code();
        assert!(
            matches!(code, Some(1) | Some(2)),
            "knows the secret: {knows_secret}: exit {code:?} (a signal is an abort): {}",
            common::output(&o)
        );
        let e = common::stderr(&o);
        let named = if knows_secret {
            e.contains("refuses") && e.contains("256 MiB")
        } else {
            e.contains("hold different secrets")
        };
        assert!(named, "knows the secret: {knows_secret}: {e}");
    }
}

#[test]
fn no_secret_is_refused_and_insecure_says_so() {
    let home = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let o = Command::new(env!("CARGO_BIN_EXE_morphbench"))
        .args(["links", "--rank", "0", "--world", "2"])
        .args(["--rendezvous", &format!("127.0.0.1:{port}")])
        .current_dir(home.path())
        .env_remove("MORPHBENCH_TOKEN")
        .output()
        .unwrap();
    assert!(
        matches!(o.status.code(), Some(1) | Some(2)),
        "{}",
        common::output(&o)
    );
    let e = common::stderr(&o);
    for named in ["--token-file", "MORPHBENCH_TOKEN", "--insecure", "--local"] {
        assert!(e.contains(named), "{named}: {e}");
    }
    let ranks: Vec<Child> = (0..2)
        .map(|r| {
            Command::new(env!("CARGO_BIN_EXE_morphbench"))
                .args([
                    "links",
                    "--rank",
                    &r.to_string(),
                    "--world",
                    "2",
                    "--insecure",
                ])
                .args(["--rendezvous", &format!("127.0.0.1:{port}")])
                .args(["--out", home.path().join("results").to_str().unwrap()])
                .args(["--no-fingerprint", "--sizes", "8", "--iters", "20"])
                .current_dir(home.path())
                .env_remove("MORPHBENCH_TOKEN")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<Output> = ranks
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for o in &outs {
        assert!(o.status.success(), "{}", common::output(o));
    }
    assert!(
        common::stderr(&outs[0]).contains("--insecure"),
        "{}",
        common::output(&outs[0])
    );
    let run = common::only_run(&home.path().join("results"));
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("meta.json")).unwrap()).unwrap();
    assert_eq!(meta["notes"]["auth"], "insecure", "{meta}");
}
