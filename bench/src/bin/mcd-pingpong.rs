//! `mcd-pingpong`: one-way latency and bandwidth of mcd against UDP, by message size.

use std::net::UdpSocket;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result};
use clap::Parser;
use mcd::{Endpoint, EndpointConfig, WaitPolicy};
use mcd_bench::cli::{self, Role, TwoNodeArgs};
use mcd_bench::pingpong::{self, Client, PingPongConfig};
use mcd_vcluster::{Cluster, ClusterSpec, Topology};

/// Ping-pong between two nodes: RTT/2 latency percentiles (hdrhistogram) and
/// ping-pong bandwidth against message size, for mcd and, in the same run and
/// between the same nodes, for UDP sockets. Transports alternate within each
/// round so that both see the same machine noise.
///
/// With no --role, it builds a two-node virtual cluster (needs root), runs both
/// sides there (client pinned to CPU 0, echo to CPU 1) and takes it down.
/// On real NICs, start `--role echo` on one node and `--role client` on the
/// other, each with MCD_NODE_FILE (or MCD_NODES) and MCD_IFACES set.
#[derive(Parser)]
#[command(name = "mcd-pingpong", version)]
struct Cli {
    #[command(flatten)]
    nodes: TwoNodeArgs,
    /// Payload sizes in bytes (comma-separated; at most the MTU minus 16).
    #[arg(long, value_delimiter = ',', default_value = "8,64,256,512,1024,1472")]
    sizes: Vec<usize>,
    /// Timed round trips per size, transport and round.
    #[arg(long, default_value_t = 20_000, value_parser = cli::at_least_one)]
    iterations: usize,
    /// Untimed round trips before each measurement.
    #[arg(long, default_value_t = 1_000)]
    warmup: usize,
    /// Rounds over all sizes and transports (results are merged).
    #[arg(long, default_value_t = 3, value_parser = cli::at_least_one)]
    rounds: usize,
    /// How both sides wait: busy, yield, block or adaptive.
    #[arg(long, default_value = "busy")]
    wait: WaitPolicy,
    /// Skip the UDP comparison.
    #[arg(long)]
    no_udp: bool,
    /// Virtual cluster: switch or hub.
    #[arg(long, default_value = "switch")]
    topology: Topology,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the results as CSV here.
    #[arg(long)]
    csv: Option<PathBuf>,
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("mcd-pingpong: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    let config = PingPongConfig {
        sizes: cli.sizes.clone(),
        iterations: cli.iterations,
        warmup: cli.warmup,
        rounds: cli.rounds,
        wait: cli.wait,
        udp: !cli.no_udp,
    };
    let progress = |what: &str| eprintln!("  {what}");
    let results = match cli.nodes.role {
        None => {
            eprintln!("bringing up a 2-node virtual cluster `pp` ({})", cli.topology);
            let cluster = Cluster::up_guarded(ClusterSpec::new(&mcd_vcluster::prefixed_name("pp"), 2).topology(cli.topology))?;
            eprintln!(
                "measuring {} size(s) x {} round(s) x {} round trips, wait policy {}",
                config.sizes.len(),
                config.rounds,
                config.iterations,
                config.wait
            );
            pingpong::run_on_cluster(&cluster, &config, progress)?
        }
        Some(role) => {
            let mut ep_config = EndpointConfig::from_env()?;
            ep_config.wait = cli.wait;
            let mut ep = Endpoint::open(ep_config)?;
            match role {
                Role::Echo => {
                    let sock = cli.nodes.udp_bind.map(UdpSocket::bind).transpose().context("binding --udp-bind")?;
                    eprintln!("echo: node {} waiting", ep.node_id());
                    pingpong::echo(&mut ep, sock.as_ref(), cli.wait, &AtomicBool::new(false))?;
                    return Ok(());
                }
                Role::Client => {
                    let udp = match cli.nodes.udp_peer {
                        Some(peer) => Some((UdpSocket::bind("0.0.0.0:0")?, peer)),
                        None => None,
                    };
                    Client::new(&mut ep, cli.nodes.peer, udp).run(&config, progress)?
                }
            }
        }
    };
    print!("{}", pingpong::table(&results));
    println!("one-way latency = RTT/2 of each round trip; MB/s = size / mean one-way time");
    if let Some(path) = &cli.json {
        std::fs::write(path, serde_json::to_string_pretty(&results)?).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &cli.csv {
        std::fs::write(path, pingpong::csv(&results)).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
