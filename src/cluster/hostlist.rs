//! Slurm hostlist expressions (`gpu[01-04,07]`): expanded from the launchers' node lists and
//! topology files, and written compactly for drain lists.

use super::error::{launch_err, LaunchError};

/// The most hosts a node list may expand to.
pub const MAX_HOSTS: usize = 65536;

/// Expands a Slurm hostlist expression such as `gpu[01-04,07],login1` into host names, keeping
/// zero padding (`gpu01`..`gpu04`, `gpu07`). Several bracket groups in one name multiply out
/// (`r[1-2]n[1-2]`: r1n1, r1n2, r2n1, r2n2).
pub fn expand(list: &str) -> Result<Vec<String>, LaunchError> {
    let mut out = Vec::new();
    for name in split_top_level(list)? {
        let name = name.trim();
        if name.is_empty() {
            continue;
        }
        let mut partial = vec![String::new()];
        let mut rest = name;
        while !rest.is_empty() {
            match rest.find('[') {
                None => {
                    partial.iter_mut().for_each(|p| p.push_str(rest));
                    rest = "";
                }
                Some(open) => {
                    let close = rest[open..]
                        .find(']')
                        .map(|c| open + c)
                        .ok_or_else(|| launch_err!("{name:?}: an unclosed '['"))?;
                    let prefix = &rest[..open];
                    let items = expand_ranges(&rest[open + 1..close])
                        .map_err(|e| launch_err!("{name:?}: {e}"))?;
                    if partial.len() * items.len() > MAX_HOSTS {
                        return Err(launch_err!("{name:?}: more than {MAX_HOSTS} hosts"));
                    }
                    partial = partial
                        .iter()
                        .flat_map(|p| items.iter().map(move |i| format!("{p}{prefix}{i}")))
                        .collect();
                    rest = &rest[close + 1..];
                }
            }
        }
        out.extend(partial);
        if out.len() > MAX_HOSTS {
            return Err(launch_err!("more than {MAX_HOSTS} hosts"));
        }
    }
    if out.is_empty() {
        return Err("an empty node list".into());
    }
    Ok(out)
}

/// Splits at commas outside brackets.
fn split_top_level(list: &str) -> Result<Vec<&str>, LaunchError> {
    let (mut depth, mut start, mut parts) = (0i32, 0, Vec::new());
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(launch_err!("{list:?}: unbalanced or nested brackets"));
        }
    }
    if depth != 0 {
        return Err(launch_err!("{list:?}: an unclosed '['"));
    }
    parts.push(&list[start..]);
    Ok(parts)
}

/// `01-04,07` into `01 02 03 04 07`, keeping the width of a zero-padded lower bound.
fn expand_ranges(spec: &str) -> Result<Vec<String>, LaunchError> {
    let mut out = Vec::new();
    for part in spec.split(',') {
        let part = part.trim();
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let bad = || launch_err!("'{part}' is not a number or a range such as 01-04");
        if lo.is_empty() || !lo.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        if hi.is_empty() || !hi.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let (a, b): (u64, u64) = (
            lo.parse().map_err(|_| bad())?,
            hi.parse().map_err(|_| bad())?,
        );
        if b < a {
            return Err(launch_err!(
                "'{part}' counts down: write the lower bound first"
            ));
        }
        if b - a >= MAX_HOSTS as u64 || out.len() + (b - a) as usize >= MAX_HOSTS {
            return Err(launch_err!("'{part}': more than {MAX_HOSTS} hosts"));
        }
        let width = if lo.starts_with('0') { lo.len() } else { 0 };
        out.extend((a..=b).map(|n| format!("{n:0width$}")));
    }
    Ok(out)
}

/// The shortest usual hostlist of `hosts`: names that differ only in a trailing number of one
/// width are folded into ranges (`node01,node02,node03,node07` is `node[01-03,07]`), in the
/// order the names first appear; duplicates are dropped. The inverse of [`expand`].
pub fn compress(hosts: &[String]) -> String {
    // (prefix, width) -> numbers, keeping first appearance order of the groups.
    let mut groups: Vec<((String, usize), Vec<u64>)> = Vec::new();
    let mut plain: Vec<(usize, String)> = Vec::new();
    let mut order = 0usize;
    let mut slots: Vec<(usize, bool, usize)> = Vec::new(); // (order, is_group, index)
    for h in hosts {
        let digits = h.bytes().rev().take_while(u8::is_ascii_digit).count();
        let (prefix, num) = h.split_at(h.len() - digits);
        let parsed = (digits > 0 && digits <= 18)
            .then(|| num.parse::<u64>().ok())
            .flatten();
        match parsed {
            Some(n) if !prefix.contains(['[', ']', ',']) => {
                let width = if num.starts_with('0') && digits > 1 {
                    digits
                } else {
                    0
                };
                let key = (prefix.to_string(), width);
                match groups.iter_mut().position(|(k, _)| *k == key) {
                    Some(i) => {
                        if !groups[i].1.contains(&n) {
                            groups[i].1.push(n)
                        }
                    }
                    None => {
                        slots.push((order, true, groups.len()));
                        groups.push((key, vec![n]));
                        order += 1;
                    }
                }
            }
            _ => {
                if !plain.iter().any(|(_, p)| p == h) {
                    slots.push((order, false, plain.len()));
                    plain.push((order, h.clone()));
                    order += 1;
                }
            }
        }
    }
    let mut out = Vec::new();
    for (_, is_group, i) in slots {
        if !is_group {
            out.push(plain[i].1.clone());
            continue;
        }
        let ((prefix, width), nums) = &mut groups[i];
        nums.sort_unstable();
        let w = *width;
        if nums.len() == 1 {
            out.push(format!("{prefix}{:0w$}", nums[0]));
            continue;
        }
        let mut ranges = Vec::new();
        let mut k = 0;
        while k < nums.len() {
            let mut j = k;
            while j + 1 < nums.len() && nums[j + 1] == nums[j] + 1 {
                j += 1;
            }
            ranges.push(if j > k {
                format!("{:0w$}-{:0w$}", nums[k], nums[j])
            } else {
                format!("{:0w$}", nums[k])
            });
            k = j + 1;
        }
        out.push(format!("{prefix}[{}]", ranges.join(",")));
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostlists_expand_with_their_padding() {
        let h = |s: &str| expand(s).unwrap();
        assert_eq!(
            h("gpu[01-04,07]"),
            ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]
        );
        assert_eq!(h("n[8-10]"), ["n8", "n9", "n10"]);
        assert_eq!(h("a,b[1-2],c"), ["a", "b1", "b2", "c"]);
        assert_eq!(
            h("r[1-2]n[1-2]-ib"),
            ["r1n1-ib", "r1n2-ib", "r2n1-ib", "r2n2-ib"]
        );
        assert_eq!(h("vm"), ["vm"]);
        for (bad, why) in [
            ("gpu[01-04", "unclosed"),
            ("gpu[04-01]", "counts down"),
            ("gpu[a-b]", "not a number"),
            ("gpu[[1]]", "nested"),
            ("n[0-99999999]", "more than"),
            ("", "empty"),
        ] {
            let e = expand(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn hostlists_compress_to_what_expands_back() {
        let c = |v: &[&str]| compress(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            c(&["node01", "node02", "node03", "node07"]),
            "node[01-03,07]"
        );
        assert_eq!(c(&["n9", "n10", "n8", "login"]), "n[8-10],login");
        assert_eq!(c(&["gpu1"]), "gpu1");
        assert_eq!(c(&["a", "a", "b"]), "a,b");
        assert_eq!(c(&[]), "");
        // Widths are kept apart: n1 and n01 are different hosts.
        assert_eq!(c(&["n1", "n01", "n2", "n02"]), "n[1-2],n[01-02]");
        for list in [
            "gpu[01-04,07],login1",
            "r1n[1-3],r2n1",
            "x[0-2]",
            "mbth[0-15]",
        ] {
            let hosts = expand(list).unwrap();
            assert_eq!(expand(&compress(&hosts)).unwrap(), hosts, "{list}");
        }
    }
}
