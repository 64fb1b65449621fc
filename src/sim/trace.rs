//! Straggler traces: one `iteration;link;delay_ms` line per delayed link and iteration
//! (`#` starts a comment). Links not named in an iteration have no extra delay.

use std::collections::BTreeMap;

/// Delays per iteration, in iteration order: (iteration, delay per link).
pub fn parse_link_trace(text: &str, links: usize) -> anyhow::Result<Vec<(u64, Vec<f64>)>> {
    let mut by_iter: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for (no, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = |what: &str| anyhow::anyhow!("line {}: '{line}': {what}", no + 1);
        let parts: Vec<&str> = line.split(';').map(str::trim).collect();
        if parts.len() != 3 {
            return Err(at("expected iteration;link;delay_ms"));
        }
        let iteration: u64 = parts[0]
            .parse()
            .map_err(|_| at("iteration is not a whole number"))?;
        let link: usize = parts[1]
            .parse()
            .map_err(|_| at("link is not a whole number"))?;
        let delay: f64 = parts[2]
            .parse()
            .map_err(|_| at("delay_ms is not a number"))?;
        if link >= links {
            return Err(at(&format!(
                "link {link} does not exist (links are 0..={})",
                links as i64 - 1
            )));
        }
        let max = crate::sim::model::MAX_MS;
        if !delay.is_finite() || !(0.0..=max).contains(&delay) {
            return Err(at(&format!(
                "delay_ms must be finite, >= 0 and at most {max} ms"
            )));
        }
        let slot = &mut by_iter.entry(iteration).or_insert_with(|| vec![0.0; links])[link];
        *slot += delay;
        if *slot > max {
            return Err(at(&format!(
                "the delays of this iteration and link sum past {max} ms"
            )));
        }
    }
    if by_iter.is_empty() {
        return Err(anyhow::anyhow!(
            "the trace has no iteration;link;delay_ms lines"
        ));
    }
    Ok(by_iter.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_groups_by_iteration() {
        let t = "# it;link;ms\n0;1;20\n0;2;5.5\n3;0;60\n";
        let got = parse_link_trace(t, 3).unwrap();
        assert_eq!(
            got,
            vec![(0, vec![0.0, 20.0, 5.5]), (3, vec![60.0, 0.0, 0.0])]
        );
    }

    #[test]
    fn rejects_malformed_lines_with_line_numbers() {
        assert!(parse_link_trace("0;1\n", 3)
            .unwrap_err()
            .to_string()
            .contains("line 1"));
        assert!(parse_link_trace("0;x;1\n", 3)
            .unwrap_err()
            .to_string()
            .contains("link"));
        assert!(parse_link_trace("\n0;5;1\n", 3)
            .unwrap_err()
            .to_string()
            .contains("line 2"));
        assert!(parse_link_trace("0;1;-4\n", 3)
            .unwrap_err()
            .to_string()
            .contains(">= 0"));
        assert!(parse_link_trace("0;1;nan\n", 3).is_err());
        assert!(parse_link_trace("# nothing\n", 3).is_err());
    }
}
