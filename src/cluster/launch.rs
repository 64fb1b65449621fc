//! Who am I in a multi-rank run? Rank and world size from the launcher, the way nccl-tests and
//! torchrun read them: explicit `--rank R --world N`, Slurm (`SLURM_PROCID`, `SLURM_NTASKS`,
//! `SLURM_LOCALID`, `SLURM_STEP_NODELIST`), Open MPI (`OMPI_COMM_WORLD_RANK`, `_SIZE`,
//! `_LOCAL_RANK`), PMI (`PMI_RANK`, `PMI_SIZE`), torchrun (`RANK`, `WORLD_SIZE`,
//! `LOCAL_RANK`, `LOCAL_WORLD_SIZE`) or, when none of these is set, a Kubernetes Indexed Job
//! (`JOB_COMPLETION_INDEX`, with `WORLD_SIZE` from the manifest: the pod's index is its rank
//! only when nothing inside the pod launched ranks); and where rank 0 waits for the others
//! (`--rendezvous HOST:PORT`, else `MORPHBENCH_RENDEZVOUS`, else `MASTER_ADDR`/`MASTER_PORT`,
//! else the first host of the Slurm step's node list). The multi-rank commands (`links`,
//! `pipeline`) are built on this (issue 14).

use std::fmt;

use super::error::{launch_err, LaunchError};

/// The most ranks one run may have: far beyond a test bed, small enough that every per-rank
/// table stays small.
pub const MAX_WORLD: u32 = 4096;
/// The most ranks `--local` starts on one machine.
pub const MAX_LOCAL: u32 = 256;
/// The rendezvous port when none is given.
pub const DEFAULT_PORT: u16 = 18700;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    Explicit,
    Slurm,
    OpenMpi,
    Pmi,
    Torchrun,
    Kubernetes,
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Launcher::Explicit => "--rank/--world",
            Launcher::Slurm => "Slurm",
            Launcher::OpenMpi => "Open MPI",
            Launcher::Pmi => "PMI",
            Launcher::Torchrun => "torchrun",
            Launcher::Kubernetes => "Kubernetes Indexed Job",
        })
    }
}

/// This process's place in the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub launcher: Launcher,
    pub rank: u32,
    pub world: u32,
    /// The rank among those on this host, when the launcher says.
    pub local_rank: Option<u32>,
    /// How many ranks share this host, when the launcher says (torchrun's LOCAL_WORLD_SIZE,
    /// Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE).
    pub local_world: Option<u32>,
    /// The hosts of the run, when the launcher says (Slurm's node list, expanded).
    pub nodes: Vec<String>,
}

/// The variables one launcher sets.
struct Vars {
    launcher: Launcher,
    rank: &'static str,
    world: &'static str,
    local_rank: Option<&'static str>,
    local_world: Option<&'static str>,
}

/// The launchers that start ranks, in order of precedence (an earlier one that agrees wins).
const LAUNCHERS: &[Vars] = &[
    Vars {
        launcher: Launcher::Slurm,
        rank: "SLURM_PROCID",
        world: "SLURM_NTASKS",
        local_rank: Some("SLURM_LOCALID"),
        local_world: None,
    },
    Vars {
        launcher: Launcher::OpenMpi,
        rank: "OMPI_COMM_WORLD_RANK",
        world: "OMPI_COMM_WORLD_SIZE",
        local_rank: Some("OMPI_COMM_WORLD_LOCAL_RANK"),
        local_world: Some("OMPI_COMM_WORLD_LOCAL_SIZE"),
    },
    Vars {
        launcher: Launcher::Pmi,
        rank: "PMI_RANK",
        world: "PMI_SIZE",
        local_rank: None,
        local_world: None,
    },
    Vars {
        launcher: Launcher::Torchrun,
        rank: "RANK",
        world: "WORLD_SIZE",
        local_rank: Some("LOCAL_RANK"),
        local_world: Some("LOCAL_WORLD_SIZE"),
    },
];

/// A Kubernetes Indexed Job's pod: read only when no launcher above is set, since a launcher
/// inside the pod (torchrun with 8 ranks a pod) numbers ranks its own way.
const INDEXED_JOB: Vars = Vars {
    launcher: Launcher::Kubernetes,
    rank: "JOB_COMPLETION_INDEX",
    world: "WORLD_SIZE",
    local_rank: None,
    local_world: None,
};

/// One launcher's reading.
#[derive(Debug, Clone, Copy)]
struct Found {
    launcher: Launcher,
    rank: u32,
    world: u32,
    local_rank: Option<u32>,
    local_world: Option<u32>,
}

fn read_vars(env: &dyn Fn(&str) -> Option<String>, v: &Vars) -> Result<Option<Found>, LaunchError> {
    let (Some(rank), Some(world)) = (number(env, v.rank)?, number(env, v.world)?) else {
        return Ok(None);
    };
    let optional = |var: Option<&str>| var.map_or(Ok(None), |var| number(env, var));
    Ok(Some(Found {
        launcher: v.launcher,
        rank,
        world,
        local_rank: optional(v.local_rank)?,
        local_world: optional(v.local_world)?,
    }))
}

fn number(env: &dyn Fn(&str) -> Option<String>, var: &str) -> Result<Option<u32>, LaunchError> {
    match env(var) {
        None => Ok(None),
        Some(v) => v.trim().parse::<u32>().map(Some).map_err(|_| {
            launch_err!("{var}={v:?} is not a rank or size: the launcher's environment is garbled")
        }),
    }
}

/// Reads this process's rank and world size. `explicit` (`--rank`, `--world`) wins; otherwise
/// the first launcher whose variables are set. Launchers nest (mpirun inside an sbatch job sets
/// both), so a second launcher that disagrees is an error naming both.
pub fn detect(
    explicit: Option<(u32, u32)>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Launch, LaunchError> {
    let nodes = match env("SLURM_STEP_NODELIST").or_else(|| env("SLURM_JOB_NODELIST")) {
        Some(list) => {
            super::hostlist::expand(&list).map_err(|e| launch_err!("SLURM_STEP_NODELIST: {e}"))?
        }
        None => Vec::new(),
    };
    let mut found: Vec<Found> = Vec::new();
    for v in LAUNCHERS {
        found.extend(read_vars(env, v)?);
    }
    if found.is_empty() {
        found.extend(read_vars(env, &INDEXED_JOB)?);
    }
    let explicit = explicit.map(|(rank, world)| Found {
        launcher: Launcher::Explicit,
        rank,
        world,
        local_rank: None,
        local_world: None,
    });
    let Found {
        launcher,
        rank,
        world,
        local_rank,
        local_world,
    } = match explicit {
        Some(f) => f,
        None => match found.as_slice() {
            [] => {
                return Err(
                    "no rank: run under srun, mpirun or torchrun (or in a Kubernetes Indexed \
                     Job with WORLD_SIZE set), or give --rank R --world N (and --rendezvous \
                     HOST:PORT)"
                        .into(),
                )
            }
            [first, rest @ ..] => {
                let agrees = |o: &&Found| (o.rank, o.world) == (first.rank, first.world);
                if let Some(other) = rest.iter().find(|o| !agrees(o)) {
                    return Err(launch_err!(
                        "{} says rank {} of {} but {} says rank {} of {}: run under one \
                         launcher, or give --rank and --world",
                        first.launcher,
                        first.rank,
                        first.world,
                        other.launcher,
                        other.rank,
                        other.world
                    ));
                }
                *first
            }
        },
    };
    if world == 0 || world > MAX_WORLD {
        return Err(launch_err!(
            "a world of {world} ranks ({launcher}): give 1 to {MAX_WORLD}"
        ));
    }
    if rank >= world {
        return Err(launch_err!(
            "rank {rank} is not below the world size {world} ({launcher}): ranks count from 0"
        ));
    }
    Ok(Launch {
        launcher,
        rank,
        world,
        local_rank,
        local_world,
        nodes,
    })
}

/// Where rank 0 listens: `--rendezvous`, else `MORPHBENCH_RENDEZVOUS`, else `MASTER_ADDR` (and
/// `MASTER_PORT`), else the first host of the node list; the port defaults to
/// [`DEFAULT_PORT`]. Returns (host, port, where it came from).
pub fn rendezvous(
    flag: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
    nodes: &[String],
) -> Result<(String, u16, &'static str), LaunchError> {
    let split = |s: &str, from: &'static str| -> Result<(String, u16, &'static str), LaunchError> {
        let s = s.trim();
        // [v6]:port, host:port, or a bare host.
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (h, tail) = rest
                .split_once(']')
                .ok_or_else(|| launch_err!("{from} {s:?}: an unclosed '['"))?;
            (h.to_string(), tail.strip_prefix(':'))
        } else if s.matches(':').count() == 1 {
            let (h, p) = s.split_once(':').expect("one colon");
            (h.to_string(), Some(p))
        } else {
            (s.to_string(), None)
        };
        if host.is_empty() {
            return Err(launch_err!("{from} {s:?}: no host"));
        }
        let port = match port {
            Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| {
                launch_err!("{from} {s:?}: the port must be a number from 1 to 65535")
            })?,
            None => DEFAULT_PORT,
        };
        Ok((host, port, from))
    };
    if let Some(f) = flag {
        return split(f, "--rendezvous");
    }
    if let Some(v) = env("MORPHBENCH_RENDEZVOUS") {
        return split(&v, "MORPHBENCH_RENDEZVOUS");
    }
    if let Some(addr) = env("MASTER_ADDR") {
        let port = match env("MASTER_PORT") {
            Some(p) => p
                .trim()
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| {
                    launch_err!("MASTER_PORT={p:?}: the port must be a number from 1 to 65535")
                })?,
            None => DEFAULT_PORT,
        };
        // Under torchrun the agent's own store listens on MASTER_PORT: rank 0 takes the next.
        if env("TORCHELASTIC_USE_AGENT_STORE").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            let next = port.checked_add(1).ok_or_else(|| {
                launch_err!(
                    "MASTER_PORT={port}: torchrun's store has it, and there is no port after it"
                )
            })?;
            return Ok((
                addr.trim().to_string(),
                next,
                "MASTER_ADDR (MASTER_PORT + 1 under torchrun)",
            ));
        }
        return Ok((addr.trim().to_string(), port, "MASTER_ADDR"));
    }
    match nodes.first() {
        Some(h) => Ok((h.clone(), DEFAULT_PORT, "the Slurm node list")),
        None => Err(
            "no rendezvous address: give --rendezvous HOST:PORT (or set \
                     MORPHBENCH_RENDEZVOUS, or MASTER_ADDR and MASTER_PORT)"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::err_text;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| map.get(k).cloned()
    }

    #[test]
    fn launchers_are_read_in_order_and_must_agree() {
        let slurm = env(&[
            ("SLURM_PROCID", "2"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_STEP_NODELIST", "gpu[01-04]"),
        ]);
        let l = detect(None, &slurm).unwrap();
        assert_eq!(
            (l.launcher, l.rank, l.world, l.local_rank),
            (Launcher::Slurm, 2, 4, Some(0))
        );
        assert_eq!(l.nodes.len(), 4);
        let ompi = env(&[("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "2")]);
        assert_eq!(detect(None, &ompi).unwrap().launcher, Launcher::OpenMpi);
        // Explicit flags win over the environment.
        assert_eq!(
            detect(Some((0, 2)), &slurm).unwrap().launcher,
            Launcher::Explicit
        );
        // Nested launchers that disagree, garbled values, and impossible ranks are errors.
        let both = env(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("PMI_RANK", "3"),
            ("PMI_SIZE", "4"),
        ]);
        let e = err_text(detect(None, &both));
        assert!(e.contains("Slurm") && e.contains("PMI"), "{e}");
        let e = err_text(detect(None, &env(&[("PMI_RANK", "x"), ("PMI_SIZE", "2")])));
        assert!(e.contains("PMI_RANK"), "{e}");
        let none = env(&[]);
        assert!(err_text(detect(Some((2, 2)), &none)).contains("rank 2"));
        assert!(err_text(detect(Some((0, 0)), &none)).contains("world"));
        assert!(err_text(detect(None, &none)).contains("--rank"));
    }

    #[test]
    fn torchrun_and_indexed_jobs_are_launchers() {
        let torch = env(&[
            ("RANK", "5"),
            ("WORLD_SIZE", "16"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "4"),
            ("MASTER_ADDR", "n1"),
            ("MASTER_PORT", "29500"),
        ]);
        let l = detect(None, &torch).unwrap();
        assert_eq!(
            (l.launcher, l.rank, l.world, l.local_rank, l.local_world),
            (Launcher::Torchrun, 5, 16, Some(1), Some(4))
        );
        let pod = env(&[("JOB_COMPLETION_INDEX", "3"), ("WORLD_SIZE", "8")]);
        let l = detect(None, &pod).unwrap();
        assert_eq!((l.launcher, l.rank, l.world), (Launcher::Kubernetes, 3, 8));
        // torchrun inside an Indexed Job's pod numbers the ranks: the pod's index is not one.
        let nested = env(&[
            ("JOB_COMPLETION_INDEX", "1"),
            ("RANK", "9"),
            ("WORLD_SIZE", "16"),
            ("LOCAL_RANK", "1"),
        ]);
        let l = detect(None, &nested).unwrap();
        assert_eq!((l.launcher, l.rank), (Launcher::Torchrun, 9));
        // A pod index without a world size is no launcher; a garbled one is named.
        assert!(detect(None, &env(&[("JOB_COMPLETION_INDEX", "1")])).is_err());
        let garbled = env(&[("JOB_COMPLETION_INDEX", "x"), ("WORLD_SIZE", "2")]);
        let e = err_text(detect(None, &garbled));
        assert!(e.contains("JOB_COMPLETION_INDEX"), "{e}");
        // Slurm and torchrun that disagree are named, both.
        let both = env(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
        ]);
        let e = err_text(detect(None, &both));
        assert!(e.contains("Slurm") && e.contains("torchrun"), "{e}");
        // Under torchrun's agent store, rank 0 listens on the port after MASTER_PORT.
        let agent = env(&[
            ("MASTER_ADDR", "n1"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
        ]);
        assert_eq!(rendezvous(None, &agent, &[]).unwrap().1, 29501);
    }

    #[test]
    fn the_rendezvous_address_comes_from_flag_env_or_node_list() {
        let none = env(&[]);
        assert_eq!(
            rendezvous(Some("10.0.0.1:9000"), &none, &[]).unwrap(),
            ("10.0.0.1".into(), 9000, "--rendezvous")
        );
        assert_eq!(rendezvous(Some("[::1]:9"), &none, &[]).unwrap().0, "::1");
        assert_eq!(
            rendezvous(Some("node7"), &none, &[]).unwrap().1,
            DEFAULT_PORT
        );
        let torch = env(&[("MASTER_ADDR", "n1"), ("MASTER_PORT", "29500")]);
        assert_eq!(
            rendezvous(None, &torch, &[]).unwrap(),
            ("n1".into(), 29500, "MASTER_ADDR")
        );
        let nodes = vec!["gpu01".to_string(), "gpu02".to_string()];
        assert_eq!(rendezvous(None, &none, &nodes).unwrap().0, "gpu01");
        let err = |flag: Option<&str>| err_text(rendezvous(flag, &none, &[]));
        assert!(err(None).contains("--rendezvous"));
        assert!(err(Some("h:0")).contains("port"));
        assert!(err(Some("h:99999")).contains("port"));
    }
}
