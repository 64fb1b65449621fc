//! `morphbench peak`: every ceiling is measured and verified, kernels report shares of the same
//! run's ceilings, the roofline is drawn, and a kernels.csv from before the share columns
//! still reads.

mod common;

use common::{col, morphbench, only_run, read_csv, stderr};

#[test]
fn peak_measures_every_ceiling_and_kernels_report_shares_of_them() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let config = h.join("suite.toml");
    std::fs::write(
        &config,
        "[peak]\niters = 3\nwarmup = 1\nbytes = \"16M\"\ndispatches = 100\n\
         [kernels]\ngemm = [\"128x128x128\"]\nlayernorm = [\"256x512\"]\niters = 3\nwarmup = 1\n",
    )
    .unwrap();
    let o = morphbench(&["run", "--config", config.to_str().unwrap(), "-q"], h);
    assert!(o.status.success(), "{}", stderr(&o));
    let run = only_run(&h.join("results"));

    let (hd, rows) = read_csv(&run.join("peak.csv"));
    let header = hd.join(",");
    assert!(
        header.contains("metric,variant,bytes_or_flops,n,mean_us")
            && header.contains("gflops,gbps"),
        "{header}"
    );
    let get = |metric: &str, variant: &str| {
        rows.iter()
            .find(|r| &r[col(&hd, "metric")] == metric && &r[col(&hd, "variant")] == variant)
            .unwrap_or_else(|| panic!("no {metric} {variant} row"))
    };
    for v in ["scalar", "vec4", "mad_scalar", "mad_vec4"] {
        let g: f64 = get("fma", v)[col(&hd, "gflops")].parse().unwrap();
        assert!(g > 0.0);
        // The ceiling is the best iteration, never below the median's rate.
        let best: f64 = get("fma", v)[col(&hd, "best_gflops")].parse().unwrap();
        assert!(best >= g, "{v}: best {best} < median {g}");
    }
    for v in ["read", "write", "copy", "buffer_copy"] {
        let g: f64 = get("bandwidth", v)[col(&hd, "gbps")].parse().unwrap();
        assert!(g > 0.0);
        let best: f64 = get("bandwidth", v)[col(&hd, "best_gbps")].parse().unwrap();
        assert!(best >= g, "{v}: best {best} < median {g}");
    }
    for (m, v) in [("dispatch", "latency"), ("dispatch", "back_to_back")] {
        let p50: f64 = get(m, v)[col(&hd, "p50_us")].parse().unwrap();
        assert!(p50 > 0.0);
    }
    assert!(rows.iter().all(|r| &r[col(&hd, "verified")] == "true"));

    // Kernels are shares of the same run's ceilings.
    let (kh, krows) = read_csv(&run.join("kernels.csv"));
    let gemm = krows
        .iter()
        .find(|r| &r[col(&kh, "kernel")] == "gemm")
        .unwrap();
    let ln = krows
        .iter()
        .find(|r| &r[col(&kh, "kernel")] == "layernorm")
        .unwrap();
    let fma_peak = ["scalar", "vec4", "mad_scalar", "mad_vec4"]
        .iter()
        .map(|v| {
            get("fma", v)[col(&hd, "best_gflops")]
                .parse::<f64>()
                .unwrap()
        })
        .fold(0.0, f64::max);
    let gflops: f64 = gemm[col(&kh, "gflops")].parse().unwrap();
    let pct: f64 = gemm[col(&kh, "pct_peak")].parse().unwrap();
    assert!(
        (pct - 100.0 * gflops / fma_peak).abs() < 0.2,
        "{pct} vs {gflops}/{fma_peak}"
    );
    assert!(ln[col(&kh, "pct_bw")].parse::<f64>().unwrap() > 0.0);
    assert!(gemm[col(&kh, "pct_bw")].is_empty() && ln[col(&kh, "pct_peak")].is_empty());
    assert!(krows
        .iter()
        .filter(|r| &r[col(&kh, "kernel")] == "cpu_sgemm")
        .all(|r| r[col(&kh, "pct_peak")].is_empty()));

    // The roofline is drawn and the report names it.
    assert!(run.join("plots/roofline.svg").exists());

    // A kernels.csv written before the share columns still reads (check reads every table).
    let (kh2, krows2) = read_csv(&run.join("kernels.csv"));
    let keep: Vec<usize> = (0..kh2.len())
        .filter(|&i| kh2[i] != "pct_peak" && kh2[i] != "pct_bw")
        .collect();
    let mut w = csv::Writer::from_path(run.join("kernels.csv")).unwrap();
    w.write_record(keep.iter().map(|&i| kh2[i].as_str()))
        .unwrap();
    for r in &krows2 {
        w.write_record(keep.iter().map(|&i| &r[i])).unwrap();
    }
    w.flush().unwrap();
    let o = morphbench(
        &[
            "check",
            run.to_str().unwrap(),
            "--baseline",
            run.to_str().unwrap(),
            "-q",
        ],
        h,
    );
    // Read whole (a table that does not read is an error naming it): check gets as far as
    // refusing a run compared with itself.
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("are the same run"), "{}", stderr(&o));
}

#[test]
fn peak_refuses_bad_sizes_before_running() {
    let home = tempfile::tempdir().unwrap();
    for (args, needle) in [
        (vec!["peak", "--bytes", "100"], "peak.bytes"),
        (vec!["peak", "--dispatches", "0"], "peak.dispatches"),
        (vec!["peak", "--iters", "0"], "iters"),
    ] {
        let o = morphbench(&args, home.path());
        assert!(!o.status.success(), "{args:?}");
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
    assert!(!home.path().join("results").exists());
}
