//! A fabric's shape from a Slurm `topology.conf` (the tree plugin's format): switches, the nodes
//! under each leaf and the switches under each upper switch. `links --topology FILE` judges a
//! link against links of its own hop class, so a healthy link across the spine is not called
//! slow for being longer than one within a leaf.
//!
//! ```text
//! SwitchName=leaf0 Nodes=gpu[01-16]
//! SwitchName=leaf1 Nodes=gpu[17-32]
//! SwitchName=spine Switches=leaf[0-1]
//! ```

use std::collections::BTreeMap;

use super::hostlist;

/// The most switches a file may name (a bound on what is read).
const MAX_SWITCHES: usize = 65536;
/// The largest topology file read.
const MAX_FILE_BYTES: u64 = 16 << 20;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("topology: {0}")]
pub struct TopologyError(pub String);

macro_rules! topo_err {
    ($($t:tt)*) => { TopologyError(format!($($t)*)) };
}

/// The class of a link between two hosts: the same host (`intra-node`, judged apart already),
/// the same leaf switch (`same-leaf`), or through N switches (`3-switches`: leaf, spine,
/// leaf). A host the file does not list is `unlisted`.
pub type HopClass = String;

#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    /// Each switch's parent, if it has one.
    parent: BTreeMap<String, String>,
    /// Each node's leaf switch.
    leaf: BTreeMap<String, String>,
}

impl Topology {
    /// Reads and checks a file (size bounded).
    pub fn load(path: &std::path::Path) -> Result<Topology, TopologyError> {
        let len = std::fs::metadata(path)
            .map_err(|e| topo_err!("{}: {e}", path.display()))?
            .len();
        if len > MAX_FILE_BYTES {
            return Err(topo_err!(
                "{}: {len} bytes, more than a topology file's {MAX_FILE_BYTES}",
                path.display()
            ));
        }
        let text =
            crate::record::read_input(path).map_err(|e| topo_err!("{}: {e}", path.display()))?;
        Topology::parse(&text).map_err(|e| topo_err!("{}: {}", path.display(), e.0))
    }

    /// Parses `SwitchName=NAME Nodes=HOSTLIST` and `SwitchName=NAME Switches=HOSTLIST` lines
    /// (keys in any case; `#` comments; other keys such as LinkSpeed are ignored). A switch
    /// with both, a node under two leaves, a switch under two parents, an unknown child
    /// switch or a loop is refused, naming the line.
    pub fn parse(text: &str) -> Result<Topology, TopologyError> {
        let mut parent = BTreeMap::new();
        let mut leaf = BTreeMap::new();
        let mut switches: BTreeMap<String, usize> = BTreeMap::new();
        let mut children: Vec<(usize, String, Vec<String>)> = Vec::new();
        for (n, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let at = |e: String| topo_err!("line {}: {e}", n + 1);
            let (mut name, mut nodes, mut subs) = (None, None, None);
            for kv in line.split_whitespace() {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| at(format!("'{kv}' is not KEY=VALUE")))?;
                match k.to_ascii_lowercase().as_str() {
                    "switchname" => name = Some(v.to_string()),
                    "nodes" => nodes = Some(v.to_string()),
                    "switches" => subs = Some(v.to_string()),
                    _ => {}
                }
            }
            let name = name.ok_or_else(|| at("no SwitchName=".into()))?;
            if switches.insert(name.clone(), n + 1).is_some() {
                return Err(at(format!("switch {name} is named twice")));
            }
            if switches.len() > MAX_SWITCHES {
                return Err(at(format!("more than {MAX_SWITCHES} switches")));
            }
            let expand = |list: &str| hostlist::expand(list).map_err(|e| at(e.0));
            match (nodes, subs) {
                (Some(_), Some(_)) => {
                    return Err(at(format!(
                        "switch {name} has both Nodes= and Switches=: a switch is a leaf \
                         (nodes) or above leaves (switches)"
                    )))
                }
                (Some(list), None) => {
                    for host in expand(&list)? {
                        if let Some(other) = leaf.insert(host.clone(), name.clone()) {
                            return Err(at(format!("node {host} is under {other} and {name}")));
                        }
                    }
                }
                (None, Some(list)) => children.push((n + 1, name, expand(&list)?)),
                (None, None) => {
                    return Err(at(format!(
                        "switch {name} has neither Nodes= nor Switches="
                    )))
                }
            }
        }
        for (line, name, subs) in children {
            for s in subs {
                if !switches.contains_key(&s) {
                    return Err(topo_err!(
                        "line {line}: switch {name} names {s}, not defined"
                    ));
                }
                if let Some(other) = parent.insert(s.clone(), name.clone()) {
                    return Err(topo_err!(
                        "line {line}: switch {s} is under {other} and {name}"
                    ));
                }
            }
        }
        if leaf.is_empty() {
            return Err(topo_err!(
                "no switch lists Nodes=: nothing to place the hosts by"
            ));
        }
        let t = Topology { parent, leaf };
        for s in switches.keys() {
            if t.path_up(s).is_none() {
                return Err(topo_err!("switch {s} is its own ancestor (a loop)"));
            }
        }
        Ok(t)
    }

    /// The switches from `s` up to its root, `s` first; None on a loop.
    fn path_up<'a>(&'a self, s: &'a str) -> Option<Vec<&'a str>> {
        let mut path = vec![s];
        let mut at = s;
        while let Some(p) = self.parent.get(at) {
            if path.contains(&p.as_str()) {
                return None;
            }
            path.push(p);
            at = p;
        }
        Some(path)
    }

    /// Whether the file places `host`.
    pub fn knows(&self, host: &str) -> bool {
        self.leaf.contains_key(host)
    }

    /// The hop class of a link between two hosts.
    pub fn hop_class(&self, a: &str, b: &str) -> HopClass {
        if a == b {
            return "intra-node".into();
        }
        let (Some(la), Some(lb)) = (self.leaf.get(a), self.leaf.get(b)) else {
            return "unlisted".into();
        };
        if la == lb {
            return "same-leaf".into();
        }
        let (pa, pb) = (
            self.path_up(la).unwrap_or_default(),
            self.path_up(lb).unwrap_or_default(),
        );
        // Switches on the path: up from a's leaf to the lowest common switch, down to b's.
        match pa.iter().position(|s| pb.contains(s)) {
            Some(i) => {
                let j = pb.iter().position(|s| *s == pa[i]).unwrap_or(0);
                format!("{}-switches", i + j + 1)
            }
            // Trees with no common switch: their roots are joined by something unnamed.
            None => "disjoint-trees".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_LEVELS: &str = "\
# a spine over two leaves, and a second spine level
SwitchName=leaf0 Nodes=gpu[01-04] LinkSpeed=100
switchname=leaf1 nodes=gpu[05-08]
SwitchName=leaf2 Nodes=gpu[09-12]
SwitchName=spine0 Switches=leaf[0-1]
SwitchName=spine1 Switches=leaf2
SwitchName=core Switches=spine[0-1]
";

    #[test]
    fn links_are_classed_by_the_switches_between_them() {
        let t = Topology::parse(TWO_LEVELS).unwrap();
        assert_eq!(t.hop_class("gpu01", "gpu04"), "same-leaf");
        assert_eq!(t.hop_class("gpu01", "gpu05"), "3-switches");
        assert_eq!(t.hop_class("gpu08", "gpu12"), "5-switches");
        assert_eq!(t.hop_class("gpu12", "gpu08"), "5-switches");
        assert_eq!(t.hop_class("gpu01", "gpu01"), "intra-node");
        assert_eq!(t.hop_class("gpu01", "login"), "unlisted");
        assert!(t.knows("gpu07") && !t.knows("gpu13"));
        let flat = Topology::parse("SwitchName=s0 Nodes=a,b\nSwitchName=s1 Nodes=c").unwrap();
        assert_eq!(flat.hop_class("a", "c"), "disjoint-trees");
    }

    #[test]
    fn a_file_that_cannot_be_a_tree_is_refused_naming_the_line() {
        for (text, why) in [
            (
                "SwitchName=s0 Nodes=a\nSwitchName=s0 Nodes=b",
                "line 2: switch s0 is named twice",
            ),
            (
                "SwitchName=s0 Nodes=a[1-2]\nSwitchName=s1 Nodes=a2",
                "node a2 is under s0 and s1",
            ),
            (
                "SwitchName=s0 Nodes=a Switches=s1",
                "both Nodes= and Switches=",
            ),
            (
                "SwitchName=s0 Nodes=a\nSwitchName=s1 Switches=s9",
                "names s9, not defined",
            ),
            (
                "SwitchName=s0 Nodes=a\nSwitchName=s1 Switches=s2\nSwitchName=s2 Switches=s1",
                "loop",
            ),
            ("SwitchName=s0", "neither Nodes= nor Switches="),
            ("Nodes=a", "line 1: no SwitchName="),
            ("SwitchName=s0 Nodes=a[3-1]", "counts down"),
            ("SwitchName=s0 Nodes", "is not KEY=VALUE"),
            ("# nothing\n", "no switch lists Nodes="),
        ] {
            let e = Topology::parse(text).unwrap_err().to_string();
            assert!(e.contains(why), "{text:?}: {e}");
        }
    }
}
