//! `mcd-vcluster`: bring a virtual cluster up or down, run commands on its nodes.

use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand};
use mcd_tools::mpi::MpiRun;
use mcd_vcluster::slurm::Slurm;
use mcd_vcluster::{Cluster, ClusterSpec, Loss, LossPoint, Topology, UpOutcome};

/// A virtual cluster on this machine: every node is a network namespace with
/// one veth interface per rail (eth0, eth1, ...), plugged into a Linux bridge per
/// rail acting as a switch or a repeater hub. Needs root.
#[derive(Parser)]
#[command(name = "mcd-vcluster", version)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Bring a cluster up (or repair it, if it is up with pieces missing).
    Up {
        /// Cluster name: 1 to 6 lowercase letters or digits.
        #[arg(default_value = "mcd")]
        name: String,
        /// Number of nodes.
        #[arg(short = 'n', long, default_value_t = 4)]
        nodes: usize,
        /// Number of rails (NICs per node, a bridge each).
        #[arg(long, default_value_t = 1)]
        rails: usize,
        /// switch (learning bridge) or hub (floods every frame to every port).
        #[arg(long, default_value = "switch")]
        topology: Topology,
        /// Drop this percentage of mcd frames at random (nftables).
        #[arg(long)]
        loss: Option<f64>,
        /// Where to drop: node (on arrival at the node) or port (at the switch port).
        #[arg(long, default_value = "node", requires = "loss")]
        loss_at: LossPoint,
        /// Drop only frames to these nodes (comma-separated; default: all).
        #[arg(long, value_delimiter = ',', requires = "loss")]
        loss_nodes: Vec<usize>,
        /// EtherType the loss applies to.
        #[arg(long, default_value = "0x88b5", value_parser = parse_ethertype, requires = "loss")]
        loss_ethertype: u16,
        /// Also start a real Slurm (Debian's slurm-wlm and munge): slurmctld
        /// in node 0's namespace (hostname ctl), a slurmd in every node's
        /// (hostnames node0, node1, ...). Submit with `mcd-vcluster srun NAME -- ...`.
        #[arg(long)]
        slurm: bool,
    },
    /// Take a cluster down, leaving nothing behind.
    Down {
        /// Cluster name.
        #[arg(default_value = "mcd")]
        name: String,
    },
    /// Show the clusters that are up, or one cluster's nodes.
    Status {
        /// Cluster name (all clusters when left out).
        name: Option<String>,
    },
    /// Print a cluster's node list (the MCD_NODE_FILE its nodes get).
    Nodes {
        /// Cluster name.
        #[arg(default_value = "mcd")]
        name: String,
    },
    /// Run a command on one node, with the node's environment (MCD_RANK, ...).
    Exec {
        /// Cluster name.
        name: String,
        /// Node number.
        node: usize,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Run a command on every node at once, each with MCD_NODE_FILE, MCD_RANK,
    /// MCD_SIZE, MCD_IFACES and MCD_LOCAL_PROCS set; print each node's output and
    /// exit code; exit non-zero if any node failed.
    Run {
        /// Cluster name.
        name: String,
        /// Kill processes still running after this many seconds.
        #[arg(long, default_value_t = 300)]
        timeout: u64,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Run a Slurm client (srun by default) against the cluster's Slurm (from
    /// `up --slurm`): from node 0's namespace, with SLURM_CONF set and no MCD_*
    /// variables passed on. E.g. `mcd-vcluster srun NAME -- -N 4
    /// --ntasks-per-node 2 mcd-barrier --across-hosts`.
    Srun {
        /// Cluster name.
        name: String,
        /// The client to run instead of srun (sinfo, squeue, scontrol, sbatch...).
        #[arg(long, default_value = "srun")]
        client: String,
        /// Its arguments.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Run an MPI program with Open MPI's `mpirun`, one rank in each node's
    /// namespace, MPI's own traffic on the cluster's links (TCP BTL, rail 0).
    /// Ranks get MCD_IFACES, MCD_LOCAL_PROCS and MCD_JOB; add more with --env.
    Mpirun {
        /// Cluster name.
        name: String,
        /// Ranks (default: one per node).
        #[arg(long)]
        np: Option<usize>,
        /// Open MPI's `mpi_yield_when_idle 1` (its best mode when ranks outnumber cores).
        #[arg(long)]
        yield_when_idle: bool,
        /// Preload this shared library into every rank (e.g. the mcd MPI_Barrier interposer).
        #[arg(long)]
        preload: Option<std::path::PathBuf>,
        /// Extra environment for the ranks, NAME=VALUE (repeatable).
        #[arg(long = "env", value_name = "NAME=VALUE")]
        env: Vec<String>,
        /// The program and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

fn parse_ethertype(s: &str) -> Result<u16, String> {
    let v = s.strip_prefix("0x").map(|h| u16::from_str_radix(h, 16)).unwrap_or_else(|| s.parse());
    v.map_err(|_| format!("`{s}` is not an EtherType (e.g. 0x88b5)"))
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("mcd-vcluster: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Cmd::Up { name, nodes, rails, topology, loss, loss_at, loss_nodes, loss_ethertype, slurm } => {
            let mut spec = ClusterSpec::new(&name, nodes).rails(rails).topology(topology);
            spec.loss = loss.map(|percent| Loss { percent, at: loss_at, ethertype: loss_ethertype, nodes: loss_nodes });
            let (cluster, outcome) = Cluster::up(spec)?;
            let what = match outcome {
                UpOutcome::Created => "created".to_string(),
                UpOutcome::AlreadyUp => "was already up; nothing to do".to_string(),
                UpOutcome::Repaired(n) => format!("was up with {n} piece(s) missing; repaired"),
            };
            println!("cluster `{name}` {what}");
            describe(&cluster);
            if slurm {
                let slurm = Slurm::start(&cluster)?;
                println!(
                    "Slurm is up: slurmctld on node 0 (ctl), slurmd on every node; SLURM_CONF={}\n  \
                     submit with `mcd-vcluster srun {name} -- -N {nodes} ...` (or `ip netns exec {} env SLURM_CONF=... srun ...`)",
                    slurm.conf().display(),
                    cluster.namespace(0)
                );
            }
        }
        Cmd::Srun { name, client, args } => {
            let cluster = Cluster::attach(&name)?;
            let slurm = Slurm::of(&cluster);
            anyhow::ensure!(slurm.is_configured(), "cluster `{name}` has no Slurm: `mcd-vcluster up {name} --slurm` first");
            let status = slurm.client(&client).args(&args).status()?;
            std::process::exit(status.code().unwrap_or(1));
        }
        Cmd::Down { name } => {
            Cluster::down_by_name(&name)?;
            println!("cluster `{name}` is down");
        }
        Cmd::Status { name: Some(name) } => describe(&Cluster::attach(&name)?),
        Cmd::Status { name: None } => {
            let names = Cluster::list();
            if names.is_empty() {
                println!("no virtual cluster is up");
            }
            for name in names {
                describe(&Cluster::attach(&name)?);
            }
        }
        Cmd::Nodes { name } => print!("{}", Cluster::attach(&name)?.node_list().to_text()),
        Cmd::Exec { name, node, command } => {
            let cluster = Cluster::attach(&name)?;
            anyhow::ensure!(node < cluster.nodes(), "cluster `{name}` has nodes 0..{}", cluster.nodes());
            let status = cluster.command(node, &command[0]).args(&command[1..]).status()?;
            std::process::exit(status.code().unwrap_or(1));
        }
        Cmd::Run { name, timeout, command } => {
            let cluster = Cluster::attach(&name)?;
            let outcomes = cluster.run(&command, Duration::from_secs(timeout))?;
            let mut failed = 0;
            for o in &outcomes {
                println!("── node {} ({}) ──", o.node, o.status());
                print!("{}", o.stdout);
                eprint!("{}", o.stderr);
                failed += usize::from(!o.success());
            }
            println!("{} of {} node(s) succeeded", outcomes.len() - failed, outcomes.len());
            if failed > 0 {
                std::process::exit(1);
            }
        }
        Cmd::Mpirun { name, np, yield_when_idle, preload, env, command } => {
            let cluster = Cluster::attach(&name)?;
            let mut run = MpiRun { ranks: np, yield_when_idle, ..MpiRun::default() };
            if let Some(lib) = preload {
                let lib = lib.canonicalize().map_err(|e| anyhow::anyhow!("--preload {}: {e}", lib.display()))?;
                run.env.push(("LD_PRELOAD".into(), lib.display().to_string()));
            }
            for kv in env {
                let (k, v) = kv.split_once('=').ok_or_else(|| anyhow::anyhow!("--env {kv}: expected NAME=VALUE"))?;
                run.env.push((k.into(), v.into()));
            }
            let status = run.command(&cluster, &command[0], &command[1..])?.status()?;
            std::process::exit(status.code().unwrap_or(1));
        }
    }
    Ok(())
}

fn describe(cluster: &Cluster) {
    let spec = cluster.spec();
    let loss = match &spec.loss {
        Some(l) => format!(", {}% loss at {:?}", l.percent, l.at).to_lowercase(),
        None => String::new(),
    };
    println!("{}: {} node(s), {} rail(s), {}{loss}", spec.name, spec.nodes, spec.rails, spec.topology);
    for node in 0..cluster.nodes() {
        let macs: Vec<String> = (0..cluster.rails()).map(|r| cluster.mac(node, r).to_string()).collect();
        println!("  node {node}: netns {}  mac {}  ip {}", cluster.namespace(node), macs.join(" "), cluster.ip(node, 0));
    }
}
