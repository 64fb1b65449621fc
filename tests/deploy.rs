//! The deployment files carry the operator's contract: each manifest under deploy/k8s parses,
//! runs `morphbench health` with flags the program takes (parsed by its own command line),
//! writes its textfile where the shared hostPath is mounted, and node-problem-detector's plugin
//! names the condition `MorphbenchUnhealthy` (permanent) and a temporary event with the
//! plugin's exit-code contract; the Prometheus rules read the metric names morphbench writes.
//! There is no cluster here: the fields are checked, not run (promtool runs the rules in
//! scripts/ops-test).

use std::path::Path;

use clap::Parser;
use morphbench::bench::health::args::HealthArgs;
use serde_json::Value;

fn docs(file: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|d| {
            let v: serde_norway::Value = serde::Deserialize::deserialize(d).unwrap();
            serde_json::to_value(v).unwrap()
        })
        .collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

/// The morphbench command lines in a shell script: each line that starts `morphbench `, with
/// its continuation lines, split into words.
fn morphbench_lines(script: &str) -> Vec<Vec<String>> {
    let joined = script.replace("\\\n", " ");
    joined
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("morphbench "))
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

fn parses(args: &[String]) -> morphbench::commands::Cli {
    morphbench::commands::Cli::try_parse_from(args)
        .unwrap_or_else(|e| panic!("{args:?} does not parse: {e}"))
}

/// The health command's flags, if `cli` is health.
fn health(cli: &morphbench::commands::Cli) -> Option<HealthArgs> {
    use clap::FromArgMatches;
    let c = &cli.command;
    (c.name == "health").then(|| HealthArgs::from_arg_matches(&c.matches).unwrap())
}

#[test]
fn the_health_daemonset_runs_health_into_the_shared_textfile_folder() {
    let docs = docs("deploy/k8s/morphbench-health.yaml");
    let ds = of_kind(&docs, "DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let script = c["args"][0].as_str().unwrap();
    let lines = morphbench_lines(script);
    assert_eq!(lines.len(), 1, "{script}");
    let cli = parses(&lines[0]);
    let Some(h) = health(&cli) else {
        panic!("not health: {:?}", lines[0]);
    };
    let textfile = h.textfile.as_ref().expect("--textfile");
    assert!(h.baseline.is_some() && !h.npd);
    // The textfile folder is a hostPath volume (node_exporter's DaemonSet reads the same path).
    let mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| Path::new(m["mountPath"].as_str().unwrap()) == textfile)
        .expect("the --textfile folder is a mounted volume");
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    assert!(volume["hostPath"]["path"].is_string(), "{volume}");
    // NVIDIA's runtime gives Vulkan only with the graphics capability.
    let env = c["env"].as_array().unwrap();
    let caps = env
        .iter()
        .find(|e| e["name"] == "NVIDIA_DRIVER_CAPABILITIES")
        .unwrap();
    assert!(caps["value"].as_str().unwrap().contains("graphics"));
    // It installs what the NPD plugin runs.
    assert!(script.contains("/host-opt-morphbench/run"), "{script}");
    // The least it needs: root for root's hostPaths, but no capability, no privilege, no
    // escalation, a read-only root filesystem.
    let sc = &c["securityContext"];
    assert_eq!(sc["privileged"], false, "{sc}");
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{sc}");
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{sc}");
    assert_eq!(
        sc["capabilities"]["drop"],
        serde_json::json!(["ALL"]),
        "{sc}"
    );
    assert!(
        sc["capabilities"]["add"].is_null(),
        "no capability is added: {sc}"
    );
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault", "{sc}");
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert!(
        pod["hostPID"].is_null() && pod["hostNetwork"].is_null(),
        "{pod}"
    );
    // With the root filesystem read-only, its runs go to a volume under root's own folder
    // (never /tmp), made 0755 before it runs, and the node's lock is mounted where health
    // takes it.
    let mounts: Vec<&str> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    let out = cli.global.out.to_str().unwrap();
    assert_eq!(out, "/var/lib/morphbench");
    assert!(mounts.contains(&out), "{mounts:?}");
    assert!(
        script.contains("chmod 0755 /var/lib/morphbench"),
        "{script}"
    );
    let lock = morphbench::bench::health::TURN_LOCK;
    assert!(mounts.contains(&lock), "{mounts:?}");
}

#[test]
fn the_npd_plugin_sets_morphbench_unhealthy_and_an_event_from_health_npd() {
    let docs = docs("deploy/k8s/node-problem-detector.yaml");
    let cm = of_kind(&docs, "ConfigMap");
    let plugin: Value =
        serde_json::from_str(cm["data"]["morphbench-plugin.json"].as_str().unwrap()).unwrap();
    assert_eq!(plugin["plugin"], "custom");
    assert_eq!(plugin["pluginConfig"]["max_output_length"], 80);
    assert_eq!(plugin["conditions"][0]["type"], "MorphbenchUnhealthy");
    let rules = plugin["rules"].as_array().unwrap();
    let kinds: Vec<&str> = rules.iter().map(|r| r["type"].as_str().unwrap()).collect();
    assert!(
        kinds.contains(&"temporary") && kinds.contains(&"permanent"),
        "{kinds:?}"
    );
    for r in rules {
        if r["type"] == "permanent" {
            assert_eq!(r["condition"], "MorphbenchUnhealthy");
        }
        assert_eq!(r["path"], "/opt/morphbench/run");
        let timeout = r["timeout"].as_str().unwrap().trim_end_matches('s');
        assert!(
            timeout.parse::<u32>().unwrap() < 60,
            "slurmd's and NPD's budget: {r}"
        );
        let mut args = vec!["morphbench".to_string()];
        args.extend(
            r["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_string()),
        );
        let cli = parses(&args);
        let Some(h) = health(&cli) else {
            panic!("not health: {args:?}");
        };
        assert!(h.npd && h.baseline.is_some(), "{args:?}");
        // Root's runs go to root's folder, never /tmp.
        assert_eq!(cli.global.out, Path::new("/var/lib/morphbench"), "{args:?}");
    }
    // NPD reads the plugin where the ConfigMap is mounted, and runs the node's /opt/morphbench.
    let ds = of_kind(&docs, "DaemonSet");
    let c = &ds["spec"]["template"]["spec"]["containers"][0];
    let command: Vec<&str> = c["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(command.contains(&"--config.custom-plugin-monitor=/config/morphbench-plugin.json"));
    let mounts: Vec<&str> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    assert!(
        mounts.contains(&"/config") && mounts.contains(&"/opt/morphbench"),
        "{mounts:?}"
    );
}

#[test]
fn the_alert_rules_read_the_metrics_morphbench_writes() {
    let rules = &docs("deploy/prometheus/morphbench.rules.yml")[0];
    let alerts: Vec<(&str, &str)> = rules["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["alert"].as_str().unwrap(), r["expr"].as_str().unwrap()))
        .collect();
    let names: Vec<&str> = alerts.iter().map(|a| a.0).collect();
    assert_eq!(
        names,
        [
            "MorphbenchFigureFailed",
            "MorphbenchNotChecked",
            "MorphbenchFigureBelowBaseline"
        ]
    );
    use morphbench::record::metrics::{GpuLabels, MetricFigure, Textfile};
    let file = Textfile {
        command: "health".into(),
        hostname: "n".into(),
        finished: std::time::SystemTime::now(),
        took: std::time::Duration::from_secs(1),
        figures: vec![MetricFigure {
            test: "gemm".into(),
            figure: "gflops".into(),
            case: None,
            value: Some(1.0),
            expected: Some(2.0),
            verdict: Some(morphbench::verdict::Verdict::Warn),
            gpu: GpuLabels {
                hostname: "n".into(),
                gpu: Some(0),
                ..GpuLabels::default()
            },
        }],
    };
    let text = file.encode().unwrap();
    for (alert, expr) in alerts {
        for word in expr.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if word.starts_with("morphbench_") && !word.ends_with('_') {
                assert!(
                    text.contains(&format!("\n{word}{{")),
                    "{alert}: {word} is never written"
                );
            }
        }
    }
    // The label names the rules join on are written.
    for label in ["Hostname=", "gpu=", "test=", "figure=", "command="] {
        assert!(text.contains(label), "{label}");
    }
    // The staleness rule matches the file each command writes.
    let name = file.file_name();
    assert!(
        name.starts_with("morphbench_") && name.ends_with(".prom"),
        "{name}"
    );
    assert!(alerts_text(rules).contains(r#"file=~"(.*/)?morphbench_[a-z]+\\.prom""#));
}

fn alerts_text(rules: &Value) -> String {
    rules["groups"][0]["rules"][1]["expr"]
        .as_str()
        .unwrap()
        .to_string()
}
