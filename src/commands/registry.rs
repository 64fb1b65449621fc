//! Every subcommand, from its [`CommandSpec`]: the benches' from their descriptors in
//! [`crate::bench::REGISTRY`], the others (which measure nothing) from [`OTHERS`]. The command
//! line and the dispatch are built from this list alone, so a new command is its file and its
//! name in one of the two lists.

use clap::error::ErrorKind;
use clap::{ArgMatches, FromArgMatches, Subcommand};

use crate::bench::descriptor::CommandSpec;
use crate::bench::REGISTRY;

/// The commands that are not benches, in the order `--help` lists them after the benches.
const OTHERS: &[(&str, &CommandSpec)] = &[
    ("run", &super::suite_run::COMMAND),
    ("plot", &super::readers::PLOT),
    ("runs", &super::readers::RUNS),
    ("check", &super::check::COMMAND),
    ("baseline", &crate::bench::fleet::baseline::COMMAND),
    ("sink", &crate::bench::hol::sink::COMMAND),
];

/// Every command, in the order `--help` lists them: info, the benches, the others.
pub fn commands() -> impl Iterator<Item = (&'static str, &'static CommandSpec)> {
    let benches = REGISTRY.iter().map(|d| (d.name, &d.command));
    std::iter::once(("info", &super::readers::INFO))
        .chain(benches)
        .chain(OTHERS.iter().copied())
}

/// A command as parsed: its spec and its own matches.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub name: &'static str,
    pub spec: &'static CommandSpec,
    pub matches: ArgMatches,
}

impl FromArgMatches for Parsed {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let Some((name, sub)) = matches.subcommand() else {
            return Err(clap::Error::new(ErrorKind::MissingSubcommand));
        };
        let Some((name, spec)) = commands().find(|(n, _)| *n == name) else {
            return Err(clap::Error::raw(
                ErrorKind::InvalidSubcommand,
                format!("'{name}' is not a command\n"),
            ));
        };
        Ok(Parsed {
            name,
            spec,
            matches: sub.clone(),
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Parsed::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Subcommand for Parsed {
    fn augment_subcommands(cmd: clap::Command) -> clap::Command {
        commands().fold(cmd, |cmd, (name, spec)| cmd.subcommand(spec.command(name)))
    }

    fn augment_subcommands_for_update(cmd: clap::Command) -> clap::Command {
        Parsed::augment_subcommands(cmd)
    }

    fn has_subcommand(name: &str) -> bool {
        commands().any(|(n, _)| n == name)
    }
}
