//! Flag values the benches' args share (clap's value parsers and flattened groups), each
//! checked by the same bound its config key has.

use clap::Args;

/// A count flag, checked by the bound its config key has.
fn parse_count(
    s: &str,
    flag: &str,
    check: fn(&str, u32) -> anyhow::Result<()>,
) -> anyhow::Result<u32> {
    let n: u32 = s
        .parse()
        .map_err(|_| anyhow::anyhow!("'{s}' is not a whole number"))?;
    check(flag, n)?;
    Ok(n)
}

/// `--warmup`: at most 100000.
pub fn parse_warmup(s: &str) -> anyhow::Result<u32> {
    parse_count(s, "--warmup", super::shared::check_warmup)
}

/// `--iters`: 1 to 100000.
pub fn parse_iters(s: &str) -> anyhow::Result<u32> {
    parse_count(s, "--iters", super::shared::check_iters)
}

/// Byte sizes from a comma list such as `4,64K,16MiB`.
#[derive(Debug, Clone, PartialEq)]
pub struct SizeList(pub Vec<u64>);

/// Sizes with units (`parse_size`: K, M, G; KiB...), empty items skipped.
pub fn parse_size_list(s: &str) -> anyhow::Result<SizeList> {
    s.split(',')
        .filter(|x| !x.trim().is_empty())
        .map(crate::units::parse_size)
        .collect::<Result<_, _>>()
        .map(SizeList)
}

/// A size as a suite file gives it: a text with units ("256M", "64KiB") or a plain count.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum SizeText {
    Text(String),
    Count(u64),
}

impl SizeText {
    fn bytes(self) -> anyhow::Result<u64> {
        match self {
            SizeText::Text(t) => crate::units::parse_size(&t),
            SizeText::Count(n) => Ok(n),
        }
    }
}

/// Reads a suite key that holds a size (`#[serde(deserialize_with = "de_size")]`).
pub fn de_size<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    use serde::Deserialize;
    SizeText::deserialize(d)?
        .bytes()
        .map_err(serde::de::Error::custom)
}

impl<'de> serde::Deserialize<'de> for SizeList {
    /// A suite key that holds a list of sizes: `["4", "64K", 1048576]`.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SizeList, D::Error> {
        Vec::<SizeText>::deserialize(d)?
            .into_iter()
            .map(SizeText::bytes)
            .collect::<Result<_, _>>()
            .map(SizeList)
            .map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for SizeList {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

/// Message sizes (`parse_byte_count`: a byte count, from 1).
pub fn parse_message_sizes(s: &str) -> anyhow::Result<SizeList> {
    s.split(',')
        .map(crate::units::parse_byte_count)
        .collect::<Result<Vec<_>, _>>()
        .map(SizeList)
}

/// Milliseconds, one value or one per stage (a suite key: a list of numbers).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(transparent)]
pub struct MsList(pub Vec<f64>);

pub fn parse_ms_list(s: &str) -> anyhow::Result<MsList> {
    s.split(',')
        .map(|x| {
            x.trim()
                .parse::<f64>()
                .map_err(|_| anyhow::anyhow!("'{x}' is not a number of milliseconds"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(MsList)
}

/// Which RDMA device, port and GID to use.
#[derive(Debug, Clone, Args)]
pub struct RdmaDeviceArgs {
    /// RDMA device name from `morphbench info` [default: the first].
    #[arg(long, value_name = "NAME")]
    pub device: Option<String>,
    /// Port of the device (from 1).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..))]
    pub ib_port: u8,
    /// GID index (RoCE needs one whose address is routable between the nodes).
    #[arg(long, default_value_t = 0)]
    pub gid_index: u8,
}

impl RdmaDeviceArgs {
    pub fn choice(&self) -> crate::transport::rdma::DeviceChoice {
        crate::transport::rdma::DeviceChoice {
            device: self.device.clone(),
            port: self.ib_port,
            gid_index: self.gid_index,
        }
    }
}

/// How a multi-rank command finds its place when no launcher says (`links`, `pipeline`).
#[derive(Debug, Clone, Args)]
pub struct LaunchArgs {
    /// This process's rank, when no launcher says (with --world and --rendezvous).
    #[arg(long, requires = "world")]
    pub rank: Option<u32>,
    /// The number of ranks, when no launcher says.
    #[arg(long, requires = "rank")]
    pub world: Option<u32>,
    /// Where rank 0 listens, HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    pub rendezvous: Option<String>,
    /// Seconds the ranks wait for each other to arrive.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub wait_s: u64,
    /// Start N ranks of this program on this machine, each with its own device (a CPU driver
    /// gets its share of the cores via LP_NUM_THREADS).
    #[arg(long, value_name = "N")]
    pub local: Option<u32>,
    /// The job's secret, which every rank proves it holds (the same file on every rank; else
    /// MORPHBENCH_TOKEN; --local makes its own). See docs/security.md.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<std::path::PathBuf>,
    /// Run without the job's secret: anyone who reaches rank 0's port can join (said in
    /// meta.json and on the console).
    #[arg(long)]
    pub insecure: bool,
}

impl LaunchArgs {
    /// `--local N` on the command line as given: a process started with `--rank` is one of the
    /// ranks such a launcher started, not a launcher itself.
    pub fn spawn_local(&self) -> Option<u32> {
        self.local.filter(|_| self.rank.is_none())
    }

    pub fn session(
        &self,
        g: &crate::suite::GlobalArgs,
        rdma_devices: Vec<String>,
    ) -> crate::cluster::SessionOptions {
        crate::cluster::SessionOptions {
            world: crate::cluster::world::WorldOptions {
                explicit: self.rank.zip(self.world),
                rendezvous: self.rendezvous.clone(),
                timeout: std::time::Duration::from_secs(self.wait_s),
                adapter: None,
                rdma_devices,
                trust: crate::cluster::auth::TrustSource {
                    token_file: self.token_file.clone(),
                    insecure: self.insecure,
                },
            },
            out: g.out.clone(),
            // With --json, standard output carries the summary alone.
            quiet: g.quiet || g.json,
        }
    }
}

/// One scenario per delay: link `link` gets each of `delays_ms` in turn (on top of `slow`).
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SweepLink {
    pub link: usize,
    pub delays_ms: Vec<f64>,
}

/// `--sweep` and `pipeline --slow`: `LINK:MS[,MS...]`.
pub fn parse_sweep(s: &str) -> anyhow::Result<SweepLink> {
    let (link, list) = s
        .split_once(':')
        .ok_or_else(|| anyhow::anyhow!("'{s}': expected LINK:MS[,MS...], e.g. 0:0,10,20"))?;
    let link: usize = link
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("'{s}': link '{link}' is not a whole number"))?;
    let most = crate::sim::model::MAX_STAGES - 2;
    if link > most {
        return Err(anyhow::anyhow!(
            "'{s}': link {link} is past the last link there can be ({most})"
        ));
    }
    Ok(SweepLink {
        link,
        delays_ms: parse_ms_list(list)?.0,
    })
}
