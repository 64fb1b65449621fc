//! Pictures of a simulated iteration: an ASCII timeline per stage, and Chrome trace / Perfetto
//! JSON with one track per stage.

use super::engine::Run;
use super::model::OpKind;

/// One row per stage, `width` cells across the iteration. A cell shows the op running at its
/// midpoint: F, B or W in upper case for even microbatches and lower case for odd ones (so
/// neighbours are told apart), `>` for a send holding the queue, `.` for idle. The row ends
/// with the stage's peak activations (microbatches, or model chunks' under interleaving).
pub fn ascii_timeline(run: &Run, stages: usize, width: usize) -> String {
    let width = width.max(10);
    let end = run
        .ops
        .iter()
        .map(|e| e.queue_end)
        .fold(run.iteration_ms, f64::max);
    let cell = end / width as f64;
    let mut rows = vec![vec!['.'; width]; stages];
    for e in &run.ops {
        let letter = match e.op.kind {
            OpKind::F => 'F',
            OpKind::B => 'B',
            OpKind::W => 'W',
        };
        let letter = if e.op.mb % 2 == 1 {
            letter.to_ascii_lowercase()
        } else {
            letter
        };
        let row = &mut rows[e.op.stage];
        for (c, slot) in row.iter_mut().enumerate() {
            let mid = (c as f64 + 0.5) * cell;
            if mid >= e.start && mid < e.end {
                *slot = letter;
            } else if mid >= e.end && mid < e.queue_end {
                *slot = '>';
            }
        }
    }
    // Each row ends with the stage's peak activations (and their bytes, with a model shape).
    let mut out = String::new();
    for (s, row) in rows.iter().enumerate() {
        let peak = run.peak_in_flight.get(s).copied().unwrap_or(0);
        let bytes = run.peak_activation_bytes.get(s).copied().unwrap_or(0.0);
        let memory = if bytes > 0.0 {
            format!(" {peak} act, {:.2} GiB", bytes / (1u64 << 30) as f64)
        } else {
            format!(" {peak} act")
        };
        out.push_str(&format!(
            "stage {s:>2} |{}|{memory}\n",
            row.iter().collect::<String>()
        ));
    }
    out.push_str(&format!(
        "          0{:>w$}\n",
        format!("{end:.1} ms"),
        w = width + 1
    ));
    out
}

/// Chrome trace event format ("X" complete events, µs), readable by Perfetto and
/// chrome://tracing. One process per schedule, one thread (track) per stage.
pub fn trace_events(runs: &[(String, &Run)]) -> serde_json::Value {
    let mut events = Vec::new();
    for (pid, (name, run)) in runs.iter().enumerate() {
        events.push(serde_json::json!({
            "name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}
        }));
        let stages = run.busy_ms.len();
        for s in 0..stages {
            events.push(serde_json::json!({
                "name": "thread_name", "ph": "M", "pid": pid, "tid": s,
                "args": {"name": format!("stage {s}")}
            }));
        }
        for e in &run.ops {
            events.push(serde_json::json!({
                "name": format!("{}{}", e.op.kind, e.op.mb),
                "cat": e.op.kind.to_string(),
                "ph": "X",
                "ts": e.start * 1e3,
                "dur": (e.end - e.start) * 1e3,
                "pid": pid,
                "tid": e.op.stage,
                "args": {"microbatch": e.op.mb},
            }));
            if e.queue_end > e.end {
                events.push(serde_json::json!({
                    "name": format!("send {}{}", e.op.kind, e.op.mb),
                    "cat": "send",
                    "ph": "X",
                    "ts": e.end * 1e3,
                    "dur": (e.queue_end - e.end) * 1e3,
                    "pid": pid,
                    "tid": e.op.stage,
                }));
            }
        }
    }
    serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ms" })
}
