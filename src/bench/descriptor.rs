//! What the harness knows of a bench: its name, how a suite config and its own subcommand plan
//! it, and the tables it writes. Both ways in go through the bench's config, its one builder:
//! flags → config → plan, and TOML → config → plan. `cli` builds each subcommand from
//! [`CommandSpec`], `config` plans suite tables through [`Descriptor::from_toml`], the report
//! lists [`Descriptor::tables`]; none of them names a bench.

use clap::{ArgMatches, FromArgMatches};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::record::TableSpec;
use crate::suite::Bench;

/// One bench, as registered in [`crate::bench::REGISTRY`].
pub struct Descriptor {
    /// Its name: its suite-config table, its subcommand, its CSV's `bench` column.
    pub name: &'static str,
    /// Plans it from its suite-config table; `None`: a suite cannot name it.
    pub from_toml: Option<FromToml>,
    /// Its own subcommand; `None`: the command line reaches it another way (the multi-rank
    /// commands, whose launch flags are shared).
    pub command: Option<CommandSpec>,
    /// The CSVs it writes, in the order the report lists them.
    pub tables: fn() -> Vec<TableSpec>,
}

/// Plans a bench from its suite-config table (its keys overlay the plan's `Default`).
pub type FromToml = fn(toml::Value) -> Result<Box<dyn Bench>, String>;

/// A bench's subcommand: its help and its flags (clap's derive on the bench's args type).
#[derive(Debug)]
pub struct CommandSpec {
    /// The line `morphbench --help` shows.
    pub about: &'static str,
    /// `morphbench NAME --help`'s closing examples.
    pub examples: &'static str,
    /// Adds the bench's flags to its subcommand.
    pub args: fn(clap::Command) -> clap::Command,
    /// Plans the bench from the subcommand's matches.
    pub plan: fn(&ArgMatches) -> Result<FromFlags, String>,
}

impl CommandSpec {
    /// The subcommand named `name`.
    pub fn command(&self, name: &'static str) -> clap::Command {
        // After the args: clap's derive sets `about` from the args type's doc comment.
        (self.args)(clap::Command::new(name))
            .about(self.about)
            .long_about(None)
            .after_help(self.examples)
    }
}

/// A bench planned from its flags.
pub struct FromFlags {
    pub bench: Box<dyn Bench>,
    /// The plan as meta.json records it.
    pub config: serde_json::Value,
    /// Keep every sample (`--raw`).
    pub raw: bool,
}

/// A bench's config: the TOML table's shape, and the one place its plan is built and checked.
pub trait BenchConfig {
    type Plan: Bench + Serialize + 'static;
    fn plan(&self) -> Result<Self::Plan, String>;
}

/// A bench's flags: clap's derive, turned into its config (never into a plan directly).
pub trait BenchArgs: clap::Args + FromArgMatches {
    type Config: BenchConfig;
    fn config(&self) -> Result<Self::Config, String>;
    /// Whether the run keeps every sample.
    fn raw(&self) -> bool {
        false
    }
}

/// The subcommand of a bench whose flags are `A`.
pub const fn command<A: BenchArgs>(about: &'static str, examples: &'static str) -> CommandSpec {
    CommandSpec {
        about,
        examples,
        args: A::augment_args,
        plan: plan_from_flags::<A>,
    }
}

fn plan_from_flags<A: BenchArgs>(matches: &ArgMatches) -> Result<FromFlags, String> {
    let args = A::from_arg_matches(matches).map_err(|e| e.to_string())?;
    let plan = args.config()?.plan()?;
    Ok(FromFlags {
        config: serde_json::to_value(&plan).map_err(|e| e.to_string())?,
        raw: args.raw(),
        bench: Box::new(plan),
    })
}

/// Plans a bench from its suite-config table through its config `C`.
pub fn from_toml<C: BenchConfig + DeserializeOwned>(
    v: toml::Value,
) -> Result<Box<dyn Bench>, String> {
    Ok(Box::new(super::shared::table::<C>(v)?.plan()?))
}
