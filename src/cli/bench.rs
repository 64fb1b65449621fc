//! The subcommands of the registered benches, built from their descriptors: `cli` names no
//! bench, and a new one brings its own flags, help and plan.

use clap::error::ErrorKind;
use clap::{ArgMatches, FromArgMatches, Subcommand};

use crate::bench::descriptor::{CommandSpec, FromFlags};
use crate::bench::REGISTRY;

/// A registered bench's subcommand, as parsed; [`BenchCommand::plan`] plans it.
#[derive(Debug, Clone)]
pub struct BenchCommand {
    pub name: &'static str,
    spec: &'static CommandSpec,
    matches: ArgMatches,
}

/// The registered benches that have a subcommand of their own.
fn commands() -> impl Iterator<Item = (&'static str, &'static CommandSpec)> {
    REGISTRY
        .iter()
        .filter_map(|d| Some((d.name, d.command.as_ref()?)))
}

impl BenchCommand {
    /// The bench, planned from its flags through its config.
    pub fn planned(&self) -> Result<FromFlags, String> {
        (self.spec.plan)(&self.matches)
    }
}

impl FromArgMatches for BenchCommand {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let Some((name, sub)) = matches.subcommand() else {
            return Err(clap::Error::new(ErrorKind::MissingSubcommand));
        };
        let Some((name, spec)) = commands().find(|(n, _)| *n == name) else {
            return Err(clap::Error::raw(
                ErrorKind::InvalidSubcommand,
                format!("'{name}' is not a bench\n"),
            ));
        };
        Ok(BenchCommand {
            name,
            spec,
            matches: sub.clone(),
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = BenchCommand::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Subcommand for BenchCommand {
    fn augment_subcommands(cmd: clap::Command) -> clap::Command {
        commands().fold(cmd, |cmd, (name, spec)| cmd.subcommand(spec.command(name)))
    }

    fn augment_subcommands_for_update(cmd: clap::Command) -> clap::Command {
        BenchCommand::augment_subcommands(cmd)
    }

    fn has_subcommand(name: &str) -> bool {
        commands().any(|(n, _)| n == name)
    }
}
