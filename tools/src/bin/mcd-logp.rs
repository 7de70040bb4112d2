//! `mcd-logp`: measure the LogP parameters of mcd (and UDP) between two nodes.

use std::net::UdpSocket;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use mcd::{Endpoint, EndpointConfig, WaitPolicy};
use mcd_tools::logp::{self, Effort};
use mcd_tools::cli::{self, Role, TwoNodeArgs};
use mcd_tools::vcluster::{Cluster, ClusterSpec};

/// Measures the LogP parameters (o_s, o_r, g, L) of mcd, and of UDP sockets
/// over the same link, for each wait policy: o_s as the time of an isolated
/// send call; g from bursts of back-to-back sends; o_r by timing a receive
/// whose message has surely arrived; L = RTT/2 − o_s − o_r. Rounds repeat
/// until every median moves less than 3%. Prints medians with [p10, p90].
///
/// With no --role it builds a two-node virtual cluster (root needed), measures
/// there, and takes it down. On real NICs run `--role echo` on one node and
/// `--role client` on the other, each with MCD_NODE_FILE and MCD_IFACES set.
#[derive(Parser)]
#[command(name = "mcd-logp", version)]
struct Cli {
    #[command(flatten)]
    nodes: TwoNodeArgs,
    /// Wait policies to measure under (comma-separated: busy, yield, block).
    #[arg(long, value_delimiter = ',', default_value = "busy,yield,block")]
    wait: Vec<WaitPolicy>,
    /// Samples per round.
    #[arg(long, default_value_t = 2000, value_parser = cli::at_least_one)]
    samples: usize,
    /// Skip UDP.
    #[arg(long)]
    no_udp: bool,
    /// Write the measurements as JSON here (the barrier benchmark reads it).
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("mcd-logp: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    let effort = Effort { samples: cli.samples.max(10), ..Effort::default() };
    let progress = |what: &str| eprintln!("  measuring {what}");
    let measurements = match cli.nodes.role {
        None => {
            eprintln!("bringing up a 2-node virtual cluster `lp`");
            let cluster = Cluster::up_guarded(ClusterSpec::new("lp", 2))?;
            logp::measure_on_cluster(&cluster, &cli.wait, effort, !cli.no_udp, progress)?
        }
        Some(role) => {
            let mut ep = Endpoint::open(EndpointConfig::from_env()?)?;
            match role {
                Role::Echo => {
                    let sock = cli.nodes.udp_bind.map(UdpSocket::bind).transpose().context("binding --udp-bind")?;
                    eprintln!("echo: node {} waiting", ep.node_id());
                    return logp::echo(&mut ep, sock.as_ref());
                }
                Role::Client => {
                    let sock = UdpSocket::bind("0.0.0.0:0")?;
                    let udp = if cli.no_udp { None } else { cli.nodes.udp_peer.map(|p| (&sock, p)) };
                    logp::client(&mut ep, cli.nodes.peer, udp, &cli.wait, effort, progress)?
                }
            }
        }
    };
    print!("{}", logp::table(&measurements));
    println!("medians, [p10, p90] of the last round; L = RTT/2 − o_s − o_r");
    if let Some(path) = &cli.json {
        std::fs::write(path, serde_json::to_string_pretty(&measurements)?).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
