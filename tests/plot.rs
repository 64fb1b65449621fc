//! `morphbench plot` on runs the test makes: every CSV kind drawn, valid PNG and SVG files,
//! comparisons, and clear errors for malformed CSVs.

mod common;

use std::path::{Path, PathBuf};

use common::*;

const SMALL: &str = r#"
[kernels]
gemm = ["33x17x9", "64x64x64"]
layernorm = ["5x77", "64x256"]
iters = 2
warmup = 1

[d2h]
sizes = ["4", "4K", "64K"]
iters = 2
warmup = 1

[hol]
tokens = 32
hidden = 32
ops = 6
every = [2]
delays_ms = [0, 5]
reps = 1

[sim]
stages = 3
microbatches = 4
sweep = [{ link = 0, delays_ms = [0, 10] }]
"#;

/// A copy, under `home`, of one small run measured once for all the tests of this file (the
/// drawing is what they test, not the measuring: each measured run cost 10-15 s).
fn small_run(home: &Path) -> PathBuf {
    static MEASURED: std::sync::OnceLock<(tempfile::TempDir, PathBuf)> = std::sync::OnceLock::new();
    let (_keep, run) = MEASURED.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let run = measure_small_run(dir.path());
        (dir, run)
    });
    let copy = home.join("out").join(run.file_name().unwrap());
    copy_dir(run, &copy);
    copy
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

fn measure_small_run(home: &Path) -> PathBuf {
    let cfg = home.join("small.toml");
    std::fs::write(&cfg, SMALL).unwrap();
    let out = home.join("out");
    let o = morphbench(
        &[
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--no-plots",
            "-q",
            "--out",
            out.to_str().unwrap(),
        ],
        home,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    only_run(&out)
}

/// A drawn chart, not an empty canvas. An SVG's size follows its tick labels (a GEMM chart of
/// two sizes is 4.9 to 5.6 KB by how many decades its axis spans), so it is judged by what it
/// holds: a title and axis labels, and marks beyond the background.
fn check_image(path: &Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|_| panic!("{} missing", path.display()));
    match path.extension().unwrap().to_str().unwrap() {
        "png" => {
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", path.display());
            assert!(
                bytes.len() > 5_000,
                "{} is only {} bytes",
                path.display(),
                bytes.len()
            );
        }
        _ => {
            let text = String::from_utf8(bytes).unwrap();
            assert!(
                text.contains("<svg") && text.trim_end().ends_with("</svg>"),
                "{}",
                path.display()
            );
            let texts = text.matches("<text").count();
            let marks: usize = [
                "<circle",
                "<line",
                "<polyline",
                "<polygon",
                "<rect",
                "<path",
            ]
            .iter()
            .map(|m| text.matches(m).count())
            .sum();
            assert!(
                texts >= 3 && marks >= 10,
                "{} holds {texts} texts and {marks} marks: a title, axis labels and marks expected",
                path.display()
            );
        }
    }
}

#[test]
fn every_csv_kind_is_drawn_and_reported() {
    let home = tempfile::tempdir().unwrap();
    let run = small_run(home.path());
    let o = morphbench(&["plot", run.to_str().unwrap()], home.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("skipped rdma.csv"), "{}", stdout(&o));
    let plots = run.join("plots");
    for name in [
        "kernels_gemm",
        "kernels_layernorm",
        "d2h_latency",
        "d2h_bandwidth",
        "hol_stall",
        "hol_makespan",
        "hol_busy",
        "hol_offload_split",
        "sim_iteration",
        "sim_bubble",
        "sim_memory",
    ] {
        check_image(&plots.join(format!("{name}.png")));
        check_image(&plots.join(format!("{name}.svg")));
    }
    let gantts = std::fs::read_dir(&plots)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("sim_gantt_")
        })
        .count();
    assert!(
        gantts >= 2 * 5,
        "a Gantt chart (png + svg) per schedule, found {gantts}"
    );
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    // Headlines by rule: the largest sizes, both D2H parts named, n/a where nothing can be
    // removed, each linked to its row.
    for needle in [
        "GEMM at the largest size, 64x64x64",
        "Layernorm at the largest size, 64x256",
        "D2H bandwidth, GPU copy, 64 KiB",
        "D2H bandwidth, mapped, end to end, 64 KiB",
        "D2H latency, mapped, end to end, 4 B",
        "HoL stall removed by offload, 0 ms delay | n/a",
        "HoL stall removed by offload, 5 ms delay",
        "Adaptive schedule",
        "[kernels.csv row ",
    ] {
        assert!(md.contains(needle), "report.md lacks {needle}:\n{md}");
    }
    assert!(!md.contains("NaN") && !md.contains("inf "), "{md}");
    // summary.json: the same headlines, with units, for automation.
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["schema_version"], 3);
    assert_eq!(summary["status"], "complete");
    let heads = summary["headlines"].as_array().unwrap();
    assert!(heads
        .iter()
        .any(|h| h["unit"] == "GFLOP/s" && h["value"].as_f64().unwrap() > 0.0));
    assert!(summary["benches"]["d2h"]["rows"].as_u64().unwrap() > 0);
    // Every bench listed counts its own table's rows (peak and pipeline once read 0).
    for (bench, b) in summary["benches"].as_object().unwrap() {
        assert!(b["rows"].as_u64().unwrap() > 0, "{bench}: {b}");
    }
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(html.contains("<svg"), "report.html embeds the SVGs");
}

#[test]
fn compare_draws_one_series_per_run() {
    let home = tempfile::tempdir().unwrap();
    let a = small_run(&home.path().join("a").tap_mkdir());
    let b = small_run(&home.path().join("b").tap_mkdir());
    let o = morphbench(
        &[
            "plot",
            a.to_str().unwrap(),
            "--format",
            "svg",
            "--compare",
            b.to_str().unwrap(),
        ],
        home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let svg = std::fs::read_to_string(a.join("plots/kernels_gemm.svg")).unwrap();
    // Each run labels its series "host / adapter — what".
    assert!(
        svg.matches("GPU GEMM").count() >= 2,
        "two GPU series expected"
    );
    assert!(
        !a.join("plots/kernels_gemm.png").exists(),
        "--format svg writes no PNG"
    );
}

trait TapMkdir {
    fn tap_mkdir(self) -> Self;
}
impl TapMkdir for PathBuf {
    fn tap_mkdir(self) -> Self {
        std::fs::create_dir_all(&self).unwrap();
        self
    }
}

fn plot_fails_with(run: &Path, home: &Path, needles: &[&str]) {
    let o = morphbench(&["plot", run.to_str().unwrap()], home);
    assert!(!o.status.success());
    let err = stderr(&o);
    for n in needles {
        assert!(err.contains(n), "expected '{n}' in: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn malformed_csvs_name_the_file_and_column() {
    let home = tempfile::tempdir().unwrap();
    let run = small_run(home.path());
    let kernels = run.join("kernels.csv");
    let good = std::fs::read_to_string(&kernels).unwrap();
    // Wrong schema version.
    std::fs::write(&kernels, good.replacen("\n1,", "\n99,", 1)).unwrap();
    plot_fails_with(&run, home.path(), &["kernels.csv", "schema_version 99"]);
    // A missing column.
    std::fs::write(&kernels, good.replacen("gflops", "gflopz", 1)).unwrap();
    plot_fails_with(&run, home.path(), &["kernels.csv", "'gflops'"]);
    // A value that is not a number.
    let header_end = good.find('\n').unwrap();
    let (head, body) = good.split_at(header_end);
    let idx = head.split(',').position(|c| c == "gflops").unwrap();
    let broken: Vec<String> = body
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let mut f: Vec<&str> = l.split(',').collect();
            f[idx] = "fast";
            f.join(",")
        })
        .collect();
    std::fs::write(&kernels, format!("{head}\n{}\n", broken.join("\n"))).unwrap();
    plot_fails_with(&run, home.path(), &["kernels.csv", "'gflops'", "'fast'"]);
    std::fs::write(&kernels, &good).unwrap();
    // An empty file.
    std::fs::write(run.join("d2h.csv"), "").unwrap();
    plot_fails_with(&run, home.path(), &["d2h.csv", "empty"]);
    plot_fails_with(&home.path().join("nope"), home.path(), &["nope"]);
}

/// A sim-only run (no GPU needed), then its timeline edited as an attacker would: each edit is
/// refused at once, naming the file, the row and the column, instead of hanging or
/// allocating without bound.
#[test]
fn plot_refuses_cells_that_once_hung_or_exhausted_it() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("out");
    let o = morphbench(
        &[
            "sim",
            "--stages",
            "3",
            "--microbatches",
            "4",
            "--timeline",
            "none",
            "--out",
            out.to_str().unwrap(),
        ],
        home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let run = only_run(&out);
    let timeline = run.join("sim_timeline.csv");
    let good = std::fs::read_to_string(&timeline).unwrap();
    let (headers, rows) = read_csv(&timeline);
    let first = rows[0].iter().collect::<Vec<_>>().join(",");
    for (column, value, why) in [
        ("end_ms", "inf", "not a finite number"),
        ("stage", "1e308", "stage"),
        ("stage", "18446744073709551615", "out of range"),
        ("stage", "100000000", "stages are 0 to 1023"),
        ("stage", "-1", "negative"),
        ("stage", "2.5", "stage"),
    ] {
        let i = col(&headers, column);
        let mut cells: Vec<String> = rows[0].iter().map(String::from).collect();
        cells[i] = value.to_string();
        std::fs::write(&timeline, good.replacen(&first, &cells.join(","), 1)).unwrap();
        let t0 = std::time::Instant::now();
        let o = morphbench(
            &["plot", run.to_str().unwrap(), "--format", "svg"],
            home.path(),
        );
        let err = stderr(&o);
        assert!(!o.status.success(), "{column}={value} was accepted");
        assert!(
            err.contains("sim_timeline.csv: row 1")
                && err.contains(&format!("'{column}'"))
                && err.contains(why),
            "{column}={value}: {err}"
        );
        assert!(t0.elapsed().as_secs() < 30);
    }
}

/// The text elements of an SVG plotters wrote (each text on a line of its own): its box
/// in pixels, estimated from its anchor, size and length, and its words.
fn svg_texts(path: &Path) -> Vec<((f64, f64, f64, f64), String)> {
    let svg = std::fs::read_to_string(path).unwrap();
    let attr = |tag: &str, name: &str| -> Option<String> {
        let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
        Some(tag[at..].split('"').next()?.to_string())
    };
    let mut out = Vec::new();
    let mut lines = svg.lines();
    while let Some(line) = lines.next() {
        let Some(tag) = line.trim().strip_prefix("<text") else {
            continue;
        };
        let words = lines.next().unwrap_or("").trim().to_string();
        let num = |n: &str| {
            attr(tag, n)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let (x, y, size) = (num("x"), num("y"), num("font-size"));
        // DejaVu Sans: about 0.55 em a character on average.
        let w = words.chars().count() as f64 * size * 0.55;
        let x0 = match attr(tag, "text-anchor").as_deref() {
            Some("middle") => x - w / 2.0,
            Some("end") => x - w,
            _ => x,
        };
        let y0 = match attr(tag, "dy").as_deref() {
            Some("0.76em") => y,
            Some("0.5ex") => y - size / 2.0,
            _ => y - size,
        };
        out.push(((x0, y0, x0 + w, y0 + size), words));
    }
    out
}

/// No two names (the axes' and the points' labels, all in one font size) overlap.
fn assert_names_apart(path: &Path) {
    let texts = svg_texts(path);
    let name_size = texts
        .iter()
        .filter(|t| t.1.starts_with('r') && t.1.contains(' '))
        .map(|t| t.0 .3 - t.0 .1)
        .next()
        .expect("names drawn");
    let names: Vec<_> = texts
        .iter()
        .filter(|t| ((t.0 .3 - t.0 .1) - name_size).abs() < 0.01)
        .collect();
    for (i, a) in names.iter().enumerate() {
        for b in &names[i + 1..] {
            let (p, q) = (a.0, b.0);
            let apart =
                p.2 <= q.0 + 0.5 || q.2 <= p.0 + 0.5 || p.3 <= q.1 + 0.5 || q.3 <= p.1 + 0.5;
            assert!(
                apart,
                "{}: '{}' {p:?} overlaps '{}' {q:?}",
                path.display(),
                a.1,
                b.1
            );
        }
    }
}

fn names_in(path: &Path) -> Vec<String> {
    svg_texts(path).into_iter().map(|t| t.1).collect()
}

/// A fleet gate's run folder of `ranks` ranks (4 to a host), figures at their expected level
/// give or take 3%, but for `bad` (rank, test, ratio, verdict), and `silent` answering nothing.
fn write_fleet(dir: &Path, ranks: u32, bad: &[(u32, &str, f64, &str)], silent: u32) {
    std::fs::create_dir_all(dir).unwrap();
    let mut csv = String::from(
        "schema_version,run_id,bench,case,rank,host,local_rank,adapter,driver,test,figure,\
         value,expected,tolerance,unit,verdict,reason,retest_value,others_cores,steal_pct,busy\n",
    );
    let figures = [
        ("gemm", "gflops", "GFLOP/s", 5e4),
        ("d2h", "gbps", "GB/s", 25.0),
        ("bandwidth", "gbps", "GB/s", 3e3),
    ];
    for r in 0..ranks {
        let head = format!("1,t,fleet,c{r},{r},node{:03},{},gpu,drv", r / 4, r % 4);
        if r == silent {
            csv += &format!("{head},gate,answer,,,,,FAIL,rank {r} stopped answering,,,,false\n");
            continue;
        }
        for (i, (test, figure, unit, e)) in figures.iter().enumerate() {
            let jitter = 1.0 + 0.03 * (((r * 7 + i as u32 * 13) % 11) as f64 / 5.0 - 1.0);
            let (ratio, verdict) = bad
                .iter()
                .find(|b| b.0 == r && b.1 == *test)
                .map_or((jitter, "PASS"), |b| (b.2, b.3));
            csv += &format!(
                "{head},{test},{figure},{},{e},0.1,{unit},{verdict},made up,,,,false\n",
                e * ratio
            );
        }
    }
    std::fs::write(dir.join("fleet.csv"), csv).unwrap();
}

/// A links run folder of `ranks` ranks on their own hosts, three rounds of pairs (i, i+k),
/// every link of `slow` 12 times slower than its healthy level and flagged.
fn write_links(dir: &Path, ranks: u32, slow: u32) {
    std::fs::create_dir_all(dir).unwrap();
    let mut csv = String::from(
        "schema_version,run_id,bench,case,src_rank,dst_rank,src_host,dst_host,transport,bytes,\
         direction,n,mean_us,stddev_us,min_us,p50_us,p90_us,p99_us,p999_us,max_us,cv,ci95_lo_us,\
         ci95_hi_us,gbps,slowdown,flagged,intra_node,verified,round,confirmed,hop_class,\
         others_cores,steal_pct,busy\n",
    );
    let mut seen = std::collections::BTreeSet::new();
    for k in [1, 2, 5] {
        for a in 0..ranks {
            let b = (a + k) % ranks;
            if !seen.insert((a.min(b), a.max(b))) {
                continue;
            }
            let s = if a == slow || b == slow {
                12.0
            } else {
                1.0 + 0.01 * (a % 7) as f64
            };
            let t = 10.0 * s;
            let flagged = s > 2.0;
            csv += &format!(
                "1,t,links,c,{a},{b},host{a:03},host{b:03},tcp,8,pingpong,100,{t},1,{t},{t},{t},{t},{t},{t},\
                 0.1,{t},{t},,{s},{flagged},false,true,{k},{flagged},,0,0,false\n"
            );
        }
    }
    std::fs::write(dir.join("links.csv"), csv).unwrap();
}

#[test]
fn a_fleet_of_200_shows_its_worst_32_failed_first_and_sums_up_the_rest() {
    let home = tempfile::tempdir().unwrap();
    let run = home.path().join("fleet200");
    let bad = [
        (17, "gemm", 0.41, "FAIL"),
        (88, "d2h", 0.52, "FAIL"),
        (140, "bandwidth", 0.3, "FAIL"),
        (63, "gemm", 0.86, "WARN"),
    ];
    write_fleet(&run, 200, &bad, 150);
    let o = morphbench(&["plot", run.to_str().unwrap()], home.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let plots = run.join("plots");
    let overview = plots.join("fleet_overview.svg");
    assert_names_apart(&overview);
    let names = names_in(&overview);
    // The failed nodes first (the silent one among them, saying why), then the warned one.
    let rows: Vec<&String> = names
        .iter()
        .filter(|n| n.starts_with('r') && n.contains(" node"))
        .collect();
    assert_eq!(rows.len(), 32, "{rows:?}");
    let first: Vec<&str> = rows[..5].iter().map(|s| s.as_str()).collect();
    for n in ["r17 node004", "r88 node022", "r140 node035", "r150 node037"] {
        assert!(first[..4].contains(&n), "{first:?}");
    }
    assert_eq!(first[4], "r63 node015");
    assert!(
        names
            .iter()
            .any(|n| n.contains("rank 150 stopped answering")),
        "{names:?}"
    );
    assert!(names.iter().any(|n| n == "168 others (worst)"), "{names:?}");
    assert!(
        names.iter().any(|n| n.starts_with("The other 168 nodes")),
        "{names:?}"
    );
    assert!(
        names.iter().any(|n| n == "0.41x"),
        "the failed cell says its ratio"
    );
    // Per figure: points sorted slowest first, the failed and warned named beside them.
    let gemm = plots.join("fleet_gemm_gflops.svg");
    assert_names_apart(&gemm);
    let names = names_in(&gemm);
    assert!(
        names.contains(&"r17 node004".to_string()) && names.contains(&"r63 node015".to_string()),
        "{names:?}"
    );
    assert!(
        names.iter().any(|n| n == "199 nodes, slowest first"),
        "{names:?}"
    );
    // The overview is the report's first figure.
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    let figures = &md[md.find("## Figures").unwrap()..];
    assert!(
        figures
            .lines()
            .find(|l| l.starts_with("- "))
            .unwrap()
            .contains("fleet_overview"),
        "{figures}"
    );
}

#[test]
fn links_are_coloured_by_their_healthy_level_and_the_slow_node_is_named_at_8_64_and_128_ranks() {
    let home = tempfile::tempdir().unwrap();
    for (ranks, slow) in [(8u32, 3u32), (64, 40), (128, 5)] {
        let run = home.path().join(format!("links{ranks}"));
        write_links(&run, ranks, slow);
        let o = morphbench(&["plot", run.to_str().unwrap()], home.path());
        assert!(o.status.success(), "{}", stderr(&o));
        let slow_name = format!("r{slow} host{slow:03}");
        let svg = if ranks <= 64 {
            run.join("plots/links_latency_tcp_8.svg")
        } else {
            run.join("plots/links_nodes_tcp.svg")
        };
        assert_names_apart(&svg);
        let names = names_in(&svg);
        assert!(
            names.contains(&slow_name),
            "{ranks} ranks: {slow_name} not named: {names:?}"
        );
        assert!(
            names
                .iter()
                .any(|n| n.starts_with("Slow node") || ranks > 64),
            "{names:?}"
        );
        if ranks <= 64 {
            // A slow link reads 0.08x, a healthy one about 1x, whatever their absolute speed.
            assert!(names.iter().any(|n| n == "0.08x") || ranks > 8, "{names:?}");
            // Thinned at 64: fewer row names than rows, the slow node's among them.
            let rows = names
                .iter()
                .filter(|n| n.starts_with('r') && n.contains(" host"))
                .count();
            assert!(rows >= 8 && rows <= ranks as usize, "{rows}");
        } else {
            assert!(!run.join("plots/links_latency_tcp_8.svg").exists());
        }
    }
}

/// A peer's hostname, an adapter's name and an error that carry markup reach report.md and
/// report.html as text: no tag, table column or link of theirs survives.
#[test]
fn markup_from_a_run_is_text_in_the_report() {
    let home = tempfile::tempdir().unwrap();
    let run = home.path().join("evil");
    write_links(&run, 8, 3);
    let img = "<img src=x onerror=alert(1)>";
    let csv = std::fs::read_to_string(run.join("links.csv")).unwrap();
    std::fs::write(run.join("links.csv"), csv.replace("host003", img)).unwrap();
    let meta = serde_json::json!({
        "run_id": "t",
        "status": "failed",
        "error": "<script>alert(2)</script>\n| a | b |",
        "host": { "hostname": img },
        "adapter": { "name": "gpu | `x` *y* [z](javascript:alert(3))" },
    });
    std::fs::write(run.join("meta.json"), meta.to_string()).unwrap();
    let o = morphbench(&["plot", run.to_str().unwrap()], home.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    for (name, text) in [("report.md", &md), ("report.html", &html)] {
        for raw in ["<img", "<script"] {
            assert!(!text.contains(raw), "{name} holds raw {raw}:\n{text}");
        }
    }
    assert!(!md.contains("[z](javascript"), "{md}");
    // Shown, escaped: the host in the header and the error on one line.
    assert!(md.contains("&lt;img src=x onerror=alert(1)&gt;"), "{md}");
    assert!(
        md.contains("&lt;script&gt;alert(2)&lt;/script&gt; \\| a \\| b \\|"),
        "{md}"
    );
    assert!(
        md.contains("gpu \\| \\`x\\` \\*y\\* \\[z\\](javascript:alert(3))"),
        "{md}"
    );
    assert!(
        html.contains("&lt;img src=x onerror=alert(1)&gt;"),
        "{html}"
    );
}
