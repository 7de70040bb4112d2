//! `mcd-logp`: measure the LogP parameters of mcd (and UDP) between two nodes.

use std::net::UdpSocket;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use mcd::{Endpoint, EndpointConfig, WaitPolicy};
use mcd_bench::cli::{self, Role, TwoNodeArgs};
use mcd_bench::logp::{self, Effort};
use mcd_vcluster::{Cluster, ClusterSpec};

/// Measures the LogP parameters (o_s, o_r, g, L) of mcd, and of UDP sockets
/// over the same link, for each wait policy: o_s as the time of an isolated
/// send call; g from bursts of back-to-back sends; o_r by timing a receive
/// whose message has surely arrived; L = RTT/2 − o_s − o_r. Rounds repeat
/// until every median moves less than 3%. Prints medians with [p10, p90].
///
/// With no --role it builds a two-node virtual cluster (root needed), measures
/// there, and takes it down. There it can also measure what the cost model
/// takes beyond LogP (see --receive-gap-nodes and --flood-ports): LogGP's G
/// (g against payload size), the receive gap (n−1 senders bursting to one
/// receiver), the wake-up (RTT/2 blocking minus busy-polling), and the
/// sender's cost per port of a bridge that floods (a repeater hub's unicast,
/// every multicast). On real NICs run `--role echo` on one node and
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
    /// On the virtual cluster, also measure the model's further parameters:
    /// G (g against payload size, 2 nodes) and the receive gap (this many
    /// nodes, all but one bursting to the last at once); 0 skips both. The
    /// wake-up cost is RTT/2 blocking minus busy, when both are measured.
    #[arg(long, default_value_t = 3)]
    receive_gap_nodes: usize,
    /// On the virtual cluster, also measure what flooding costs the sender:
    /// for each of these node counts (comma-separated, 2 to 64), a hub and a
    /// switch cluster, node 0 timing isolated unicast and multicast sends
    /// while every other node holds an endpoint; prints the send call per
    /// port count and what each further copy costs (the slopes), which the
    /// model's `Setup::flood_us` (dropped copies) and `Setup::fanout_us`
    /// (delivered ones) take. Empty (the default) skips it.
    #[arg(long, value_delimiter = ',', value_parser = cli::node_count)]
    flood_ports: Vec<usize>,
    /// Stem of the virtual clusters' names (1 to 4 lowercase letters or
    /// digits): STEM for LogP, STEMrg for the receive gap, STEMf0.. for the
    /// flooding cost.
    #[arg(long, default_value = "lp", value_parser = cli::cluster_stem)]
    cluster: String,
    /// Write the further parameters (G, receive gap, wake-up, flooding) as JSON here.
    #[arg(long)]
    extra_json: Option<PathBuf>,
    /// Measure only the shared-memory costs of the hierarchical barrier
    /// (a cache-line transfer, a futex wake-up, the leader's scan per rank)
    /// between two threads, and print them (no cluster, no root needed).
    #[arg(long)]
    shm: bool,
    /// On the virtual cluster, also measure LogP as a barrier's hops see it
    /// (o_s the send call of a ping, right after a receive, to a peer
    /// spinning for it), under each --wait policy, `--hops` rounds of
    /// --samples each, back to back and then 30 µs apart (the paper's
    /// loop): prints each round (`mcd-bench validate --measure`
    /// takes its parameters this way, one round before each row).
    #[arg(long, default_value_t = 0)]
    hops: usize,
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("mcd-logp: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    if cli.shm {
        let shm = logp::measure_shm(cli.samples.max(10) * 10)?;
        println!("shared memory: transfer {:.3} µs, futex wake-up {:.2} µs, scan {:.4} µs per rank", shm.transfer, shm.wake, shm.scan);
        if let Some(path) = &cli.json {
            std::fs::write(path, serde_json::to_string_pretty(&shm)?).with_context(|| format!("writing {}", path.display()))?;
        }
        return Ok(());
    }
    let effort = Effort { samples: cli.samples.max(10), ..Effort::default() };
    let progress = |what: &str| eprintln!("  measuring {what}");
    let mut extra = logp::Extra::default();
    let measurements = match cli.nodes.role {
        None => {
            eprintln!("bringing up a 2-node virtual cluster `{}`", cli.cluster);
            let cluster = Cluster::up_guarded(ClusterSpec::new(&cli.cluster, 2))?;
            let ms = logp::measure_on_cluster(&cluster, &cli.wait, effort, !cli.no_udp, progress)?;
            if cli.hops > 0 {
                let mut hops = Vec::new();
                for _ in 0..cli.hops {
                    for &wait in &cli.wait {
                        for pause in [0, 30] {
                            hops.push(logp::measure_hops_on_cluster(&cluster, wait, effort.samples, std::time::Duration::from_micros(pause))?);
                        }
                    }
                }
                println!("in a barrier's hops (o_s: the send call of a ping), per round back to back, then 30 µs apart:");
                print!("{}", logp::table(&hops));
            }
            if cli.receive_gap_nodes >= 2 {
                eprintln!("  measuring g against payload size");
                extra.g_by_size = logp::size_sweep_on_cluster(&cluster, 20, effort.burst)?;
                extra.big_g = logp::slope(&extra.g_by_size);
                drop(cluster);
                let n = cli.receive_gap_nodes;
                let name = format!("{}rg", cli.cluster);
                eprintln!("  measuring the receive gap: {} senders bursting to one receiver ({n}-node cluster `{name}`)", n - 1);
                let cluster = Cluster::up_guarded(ClusterSpec::new(&name, n))?;
                let (senders, g_r, delivered) = logp::receive_gap_on_cluster(&cluster, 2000)?;
                (extra.receive_gap_senders, extra.g_r, extra.receive_gap_delivered) = (senders, Some(g_r), delivered);
            }
            extra.flood = logp::send_costs(&cli.cluster, &cli.flood_ports, cli.samples.clamp(10, 2000))?;
            extra.copy_cost = logp::CopyCost::fit(&extra.flood);
            ms
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
    extra.wake = logp::wake_up(&measurements);
    if let Some(w) = extra.wake {
        println!("wake-up (mcd RTT/2 blocking − busy): {w:.2} µs");
    }
    if let Some(big_g) = extra.big_g {
        let sizes: Vec<String> = extra.g_by_size.iter().map(|(s, g)| format!("{s} B {g:.2}")).collect();
        println!(
            "g by payload (µs): {}; G = {:.5} µs/byte ({:.0} MB/s)",
            sizes.join(", "),
            big_g,
            if big_g > 0.0 { 1.0 / big_g } else { f64::INFINITY }
        );
    }
    if let Some(g_r) = extra.g_r {
        println!(
            "receive gap: {} sender(s) bursting to one receiver, {g_r:.2} µs per message ({:.0}% delivered)",
            extra.receive_gap_senders,
            extra.receive_gap_delivered * 100.0
        );
    }
    if !extra.flood.is_empty() {
        println!("send call on a bridge of n ports (µs, median [p10, p90]):");
        println!("{:>6} {:>7} {:>22} {:>22}", "ports", "bridge", "unicast", "multicast");
        for c in &extra.flood {
            let cell = |s: &logp::Stat| format!("{:.2} [{:.2},{:.2}]", s.median, s.p10, s.p90);
            println!("{:>6} {:>7} {:>22} {:>22}", c.ports, c.topology.to_string(), cell(&c.unicast), cell(&c.multicast));
        }
        if let Some(c) = extra.copy_cost {
            println!(
                "each further copy costs the sender: {:.3} µs dropped by the receiving kernel (a hub's unicast), \
                 {:.3} µs delivered (a multicast)",
                c.dropped, c.delivered
            );
        }
    }
    if let Some(path) = &cli.extra_json {
        std::fs::write(path, serde_json::to_string_pretty(&extra)?).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &cli.json {
        std::fs::write(path, serde_json::to_string_pretty(&measurements)?).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
