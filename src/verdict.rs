//! The vocabulary every judge and writer shares: a figure, a node or a run passes, warns,
//! fails, or was skipped. Typed everywhere inside; its text (`PASS`, `WARN`, `FAIL`, `SKIP`)
//! only at the edges: CSV and JSON (serde), Prometheus (its code), the drain reason.

use std::fmt;
use std::str::FromStr;

/// Worst first: `Ord` sorts failures to the top, and the worse of two is the smaller.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    Fail,
    Warn,
    #[default]
    Pass,
    /// Not judged: the figure was not measured here (no such hardware, not asked).
    Skip,
}

impl Verdict {
    /// The text form, as every output writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Fail => "FAIL",
            Verdict::Warn => "WARN",
            Verdict::Pass => "PASS",
            Verdict::Skip => "SKIP",
        }
    }

    /// The worse of two (FAIL over WARN over PASS over SKIP).
    pub fn worse(self, other: Verdict) -> Verdict {
        self.min(other)
    }

    /// Its number in Prometheus' verdict series: 0 PASS, 1 WARN, 2 FAIL; SKIP has none.
    pub fn code(self) -> Option<u8> {
        match self {
            Verdict::Pass => Some(0),
            Verdict::Warn => Some(1),
            Verdict::Fail => Some(2),
            Verdict::Skip => None,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`, so a width in a table's format lines it up as the text would be.
        f.pad(self.as_str())
    }
}

impl FromStr for Verdict {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Verdict> {
        [Verdict::Fail, Verdict::Warn, Verdict::Pass, Verdict::Skip]
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| anyhow::anyhow!("'{s}' is not a verdict: PASS, WARN, FAIL or SKIP"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_order_and_codes() {
        for v in [Verdict::Fail, Verdict::Warn, Verdict::Pass, Verdict::Skip] {
            assert_eq!(v.as_str().parse::<Verdict>().unwrap(), v);
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_str());
        }
        assert_eq!(Verdict::Pass.worse(Verdict::Warn), Verdict::Warn);
        assert_eq!(Verdict::Skip.worse(Verdict::Pass), Verdict::Pass);
        assert_eq!(Verdict::Fail.worse(Verdict::Skip), Verdict::Fail);
        assert_eq!(Verdict::Skip.code(), None);
        assert!("pass".parse::<Verdict>().is_err());
        assert_eq!(format!("[{:<6}]", Verdict::Warn), "[WARN  ]");
    }
}
