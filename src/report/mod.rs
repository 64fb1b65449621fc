//! The reading layer's output: the one registry of result tables and what each reader does
//! with them (plots, headlines, the report document, summary.json).

pub mod catalog;
pub mod document;
pub mod draw;
pub mod metrics;
pub mod plot;
pub mod ratios;
pub mod summary;
pub mod tables;
