//! What the harness knows of a bench: its name, its subcommand, how a suite config plans it, and
//! the tables it writes; and what the command line knows of any command ([`CommandSpec`]). A
//! single-node bench's two ways in go through its [`Settings`], one type that declares its
//! flags, its suite keys and its defaults once: flags → settings → plan, and TOML → settings →
//! plan. `commands` builds each subcommand from its [`CommandSpec`] and dispatches through it,
//! `config` plans suite tables through [`Descriptor::from_toml`], the report lists
//! [`Descriptor::tables`]; none of them names a bench.

use clap::{ArgMatches, FromArgMatches};
use serde::de::DeserializeOwned;
use serde::Serialize;

use std::path::PathBuf;

pub use crate::bench::flags::LaunchArgs;
use crate::record::TableSpec;
use crate::suite::Bench;
pub use crate::suite::GlobalArgs;

/// One bench, as registered in [`crate::bench::REGISTRY`].
pub struct Descriptor {
    /// Its name: its suite-config table, its subcommand, its CSV's `bench` column.
    pub name: &'static str,
    /// Plans it from its suite-config table; `None`: a suite cannot name it.
    pub from_toml: Option<FromToml>,
    /// Its subcommand.
    pub command: CommandSpec,
    /// The CSVs it writes, in the order the report lists them.
    pub tables: fn() -> Vec<TableSpec>,
}

/// Plans a bench from its suite-config table (its keys overlay the plan's `Default`).
pub type FromToml = fn(toml::Value) -> anyhow::Result<Box<dyn Bench>>;

/// A subcommand: its help, its flags (clap's derive on its args type), what it does, and what
/// follows it. Every command is one (`commands::registry` lists them), so the command line, the
/// dispatch and the after-run steps name no command.
#[derive(Debug)]
pub struct CommandSpec {
    /// The line `morphbench --help` shows.
    pub about: &'static str,
    /// `morphbench NAME --help`'s closing examples.
    pub examples: &'static str,
    /// Adds the command's flags to its subcommand.
    pub args: fn(clap::Command) -> clap::Command,
    pub action: Action,
    /// The exit code an error ends it with: 2 where a verdict is the exit code (0 or 1, as
    /// diff and grep do), else 1.
    pub error_code: fn(&ArgMatches) -> u8,
    /// A multi-rank command: `--local N` (its [`LaunchArgs`]) starts N ranks of it here.
    pub local: Option<Local>,
}

/// What a command does once parsed.
#[derive(Debug, Clone, Copy)]
pub enum Action {
    /// A bench planned from its flags, run by the suite into a run folder of its own.
    Plan(PlanFn),
    /// A command that runs itself: multi-rank, analysis, reader.
    Run(RunFn),
}

/// How a command plans its bench, from its matches (and the global flags: `--quiet`); `None`:
/// it did its work while planning, and nothing is left to run (`rdma --server`).
pub type PlanFn = fn(&ArgMatches, &GlobalArgs) -> anyhow::Result<Option<FromFlags>>;

/// What a command that runs itself does, from its matches.
pub type RunFn = fn(&ArgMatches, &GlobalArgs) -> anyhow::Result<Ran>;

/// How `--local N` starts a multi-rank command's ranks on this machine.
#[derive(Debug, Clone, Copy)]
pub struct Local {
    /// The most ranks it may start.
    pub max: u32,
    /// A gate: rank 0's exit code is the verdict, and every rank gets all the cores
    /// ([`crate::cluster::local::run_local_gate`]).
    pub gate: bool,
    /// Refuses bad input before any rank starts (`None`: nothing to check early).
    pub check: Option<fn(&ArgMatches, u32) -> anyhow::Result<()>>,
}

/// What a command did, for the steps after it.
#[derive(Debug)]
pub struct Ran {
    /// The run folder it wrote (a multi-rank command: rank 0's alone).
    pub dir: Option<PathBuf>,
    /// Its exit code.
    pub code: u8,
    pub after: After,
    /// With `--json`, printed instead of the run folder's summary.json.
    pub json: Option<serde_json::Value>,
}

impl Ran {
    /// Done: exit 0, nothing after.
    pub fn done() -> Ran {
        Ran::code(0)
    }

    pub fn code(code: u8) -> Ran {
        Ran {
            dir: None,
            code,
            after: After::Nothing,
            json: None,
        }
    }

    /// Wrote `dir` (if any), with `after` to follow.
    pub fn wrote(dir: Option<PathBuf>, after: After) -> Ran {
        Ran {
            dir,
            code: 0,
            after,
            json: None,
        }
    }
}

/// The steps after a command that wrote a run folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    Nothing,
    /// Its summary (`--json`) alone.
    Summary,
    /// A single-node run: its noisy rows named, then (`--json`) its summary.
    Noisy,
    /// A multi-rank run: its figures and report (unless quiet; a drawing that fails is a
    /// warning), then (`--json`) its summary.
    Report,
}

impl CommandSpec {
    /// A command that plans a bench from its flags (and the global ones) by `plan`: exits 1 on
    /// an error, no `--local`.
    pub const fn plans(
        about: &'static str,
        examples: &'static str,
        args: fn(clap::Command) -> clap::Command,
        plan: PlanFn,
    ) -> CommandSpec {
        CommandSpec {
            about,
            examples,
            args,
            action: Action::Plan(plan),
            error_code: |_| 1,
            local: None,
        }
    }

    /// A command that runs itself: exits 1 on an error, no `--local`.
    pub const fn runs(
        about: &'static str,
        examples: &'static str,
        args: fn(clap::Command) -> clap::Command,
        run: RunFn,
    ) -> CommandSpec {
        CommandSpec {
            about,
            examples,
            args,
            action: Action::Run(run),
            error_code: |_| 1,
            local: None,
        }
    }

    /// Its verdict is its exit code: an error exits 2.
    pub const fn verdict(self) -> CommandSpec {
        self.error_code(|_| 2)
    }

    pub const fn error_code(mut self, code: fn(&ArgMatches) -> u8) -> CommandSpec {
        self.error_code = code;
        self
    }

    /// Multi-rank: `--local N` starts up to `max` ranks of it here.
    pub const fn local(mut self, local: Local) -> CommandSpec {
        self.local = Some(local);
        self
    }

    /// The subcommand named `name`.
    pub fn command(&self, name: &'static str) -> clap::Command {
        // After the args: clap's derive sets `about` from the args type's doc comment.
        (self.args)(clap::Command::new(name))
            .about(self.about)
            .long_about(None)
            .after_help(self.examples)
    }
}

/// The args type `A` of a command that runs itself, parsed from its matches.
pub fn parsed<A: FromArgMatches>(matches: &ArgMatches) -> anyhow::Result<A> {
    A::from_arg_matches(matches).map_err(|e| anyhow::anyhow!("{e}"))
}

/// A bench planned from its flags.
pub struct FromFlags {
    pub bench: Box<dyn Bench>,
    /// Its name in the run where it is not the command's (`sim --validate`: validate).
    pub name: Option<&'static str>,
    /// The plan as meta.json records it.
    pub config: serde_json::Value,
    /// Keep every sample (`--raw`).
    pub raw: bool,
}

impl FromFlags {
    /// `bench` under the command's name, `config` its plan as meta.json records it, without
    /// raw samples.
    pub fn new(bench: impl Bench + 'static, config: serde_json::Value) -> FromFlags {
        FromFlags {
            bench: Box::new(bench),
            name: None,
            config,
            raw: false,
        }
    }
}

/// A single-node bench's settings, declared once: one type carries its flags (clap's derive),
/// its suite-file keys (serde, `#[serde(default)]`) and its defaults (its `Default`, which the
/// flags' defaults read too). Both ways in end in [`Settings::plan`], the one place the plan
/// is built and checked.
pub trait Settings: clap::Args + FromArgMatches + DeserializeOwned + Default {
    type Plan: Bench + Serialize + 'static;
    fn plan(&self) -> anyhow::Result<Self::Plan>;
    /// Whether the run keeps every sample (`--raw`: a flag, never a suite key).
    fn raw(&self) -> bool {
        false
    }
}

/// The subcommand of a bench whose settings are `S`.
pub const fn command<S: Settings>(about: &'static str, examples: &'static str) -> CommandSpec {
    CommandSpec::plans(about, examples, S::augment_args, plan_settings::<S>)
}

fn plan_settings<S: Settings>(
    matches: &ArgMatches,
    _: &GlobalArgs,
) -> anyhow::Result<Option<FromFlags>> {
    let settings = S::from_arg_matches(matches)?;
    let plan = settings.plan()?;
    let config = serde_json::to_value(&plan)?;
    Ok(Some(FromFlags {
        raw: settings.raw(),
        ..FromFlags::new(plan, config)
    }))
}

/// Plans a bench from its suite-config table through its settings `S`.
pub fn from_toml<S: Settings>(v: toml::Value) -> anyhow::Result<Box<dyn Bench>> {
    Ok(Box::new(super::shared::table::<S>(v)?.plan()?))
}
