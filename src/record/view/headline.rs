//! A headline: one figure of a run a user would quote, with its size and part, pointing at the
//! CSV row it comes from. Each bench chooses its own from its rows; the report gathers them.

use serde::Serialize;

/// One headline.
#[derive(Debug, Clone, Serialize)]
pub struct Headline {
    pub bench: &'static str,
    /// What it is, with the size and part: "D2H bandwidth, GPU copy, 256 MiB".
    pub what: String,
    /// The figure in `unit`; `None` where it does not apply ("n/a").
    pub value: Option<f64>,
    pub unit: &'static str,
    /// The figure as a person reads it, with its comparison.
    pub text: String,
    /// The row it comes from: "d2h.csv row 12" (rows count from 1 after the header).
    pub source: String,
}

/// Where a headline comes from: the file and its row, counted from 1 after the header.
pub fn source(file: &str, index: usize) -> String {
    format!("{file} row {}", index + 1)
}

/// ", 1.234x WHAT (BASE)" when there is a positive base to compare with, else nothing.
pub fn ratio(value: f64, base: Option<f64>, what: &str) -> String {
    match base.filter(|b| *b > 0.0) {
        Some(b) => format!(", {:.3}x {what} ({b:.2})", value / b),
        None => String::new(),
    }
}
