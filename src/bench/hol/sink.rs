//! `morphbench sink`: receives the offloaded transfers `hol --peer` sends from another node.

use clap::{ArgMatches, Args};

use crate::bench::descriptor::{parsed, CommandSpec, GlobalArgs, Ran};
use crate::bench::flags::RdmaDeviceArgs;

pub const COMMAND: CommandSpec = CommandSpec::runs(
    "Receive offloaded transfers from `hol --peer` on another node",
    "Examples:\n  morphbench sink                                 # loopback, port 18600\n  morphbench sink --listen 0.0.0.0:18600 --transport rdma --device mlx5_0",
    SinkArgs::augment_args,
    run,
);

#[derive(Debug, Args)]
pub struct SinkArgs {
    /// Address to listen on (loopback unless told otherwise).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:18600")]
    pub listen: String,
    /// Serve one connection, then exit.
    #[arg(long)]
    pub once: bool,
    /// Largest payload accepted, in bytes (K/M/G units allowed).
    #[arg(long, value_parser = crate::units::parse_size, default_value = "256M")]
    pub max_payload: u64,
    /// Seconds a frame may take to arrive before the peer counts as gone (1 to 3600). It must
    /// exceed the largest delay the sender injects.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout_s: u64,
    /// What the sender uses: TCP, or RDMA WRITE through verbs (`hol --transport rdma`).
    #[arg(long, value_enum, default_value = "tcp")]
    pub transport: crate::transport::TransportKind,
    #[command(flatten)]
    pub rdma: RdmaDeviceArgs,
}

fn run(m: &ArgMatches, g: &GlobalArgs) -> anyhow::Result<Ran> {
    let a: SinkArgs = parsed(m)?;
    crate::transport::sink::run_cli(
        &a.listen,
        a.max_payload,
        std::time::Duration::from_secs(a.timeout_s),
        a.once,
        g.quiet,
        a.transport,
        &a.rdma.choice(),
    )?;
    Ok(Ran::done())
}
