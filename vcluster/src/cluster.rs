//! The virtual cluster: N nodes on one machine, each a network namespace with
//! one veth interface per rail (`eth0`, `eth1`), all plugged into a Linux bridge
//! per rail that acts as a switch (learning) or a repeater hub (floods every
//! frame). Loss can be injected per node (nftables, netdev ingress) or per
//! switch port (nftables, bridge forward), since this kernel has no netem.
//!
//! Every name a cluster creates starts with `mcd` and its cluster name, so
//! clusters with different names coexist (tests build their own in parallel)
//! and `down` removes exactly what `up` made. A [`ClusterGuard`] tears its
//! cluster down when dropped, even when a test panics.

use std::collections::BTreeSet;
use std::io::Read;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use mcd::{MacAddr, NodeAddr, NodeList};
use serde::{Deserialize, Serialize};

use crate::commands::{self, in_ns, sh, sh_input};

/// Where cluster state (shape, node list) is kept.
pub const STATE_DIR: &str = "/run/mcd-vcluster";
/// The most nodes a cluster can have.
pub const MAX_NODES: usize = 250;
/// The most rails a cluster can have.
pub const MAX_RAILS: usize = 4;

/// How the nodes of a rail are connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Topology {
    /// A learning bridge: unicast goes to one port once the bridge has learnt it.
    #[default]
    Switch,
    /// A repeater hub: every frame reaches every port (bridge ageing time 0).
    Hub,
}

impl std::str::FromStr for Topology {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "switch" => Ok(Topology::Switch),
            "hub" => Ok(Topology::Hub),
            _ => Err(format!("unknown topology `{s}` (switch or hub)")),
        }
    }
}

impl std::fmt::Display for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Topology::Switch => "switch",
            Topology::Hub => "hub",
        })
    }
}

/// Where injected loss happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LossPoint {
    /// On the node's interfaces, as frames arrive (netdev ingress). Packet
    /// sockets bound to every protocol (`ETH_P_ALL`, as the bootstrap's
    /// hello socket is) get their copy before that hook, so this loss never
    /// reaches them: test the bootstrap under loss with [`LossPoint::Port`].
    Node,
    /// On the switch port towards the node, as the bridge forwards (bridge forward).
    Port,
}

impl std::str::FromStr for LossPoint {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "node" => Ok(LossPoint::Node),
            "port" => Ok(LossPoint::Port),
            _ => Err(format!("unknown loss point `{s}` (node or port)")),
        }
    }
}

/// Injected random loss.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Loss {
    /// Percentage of frames dropped, 0 to 100 (resolution 0.01%).
    pub percent: f64,
    /// Where frames are dropped.
    pub at: LossPoint,
    /// Only frames of this EtherType are dropped (default mcd's), so the
    /// cluster's IP traffic is not.
    pub ethertype: u16,
    /// The nodes whose incoming frames are dropped (empty: all).
    pub nodes: Vec<usize>,
}

/// The shape of a cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterSpec {
    /// Cluster name: 1 to 6 lowercase letters or digits.
    pub name: String,
    /// Number of nodes.
    pub nodes: usize,
    /// Number of rails (a bridge and an interface per node each).
    pub rails: usize,
    /// Switch or hub.
    pub topology: Topology,
    /// Injected loss, if any.
    pub loss: Option<Loss>,
}

impl ClusterSpec {
    /// A switched, single-rail, loss-free cluster.
    pub fn new(name: &str, nodes: usize) -> ClusterSpec {
        ClusterSpec { name: name.into(), nodes, rails: 1, topology: Topology::Switch, loss: None }
    }

    /// With `rails` rails.
    pub fn rails(mut self, rails: usize) -> ClusterSpec {
        self.rails = rails;
        self
    }

    /// With this topology.
    pub fn topology(mut self, topology: Topology) -> ClusterSpec {
        self.topology = topology;
        self
    }

    /// With `percent` random loss of mcd frames at `at`, on every node.
    pub fn loss(mut self, percent: f64, at: LossPoint) -> ClusterSpec {
        self.loss = Some(Loss { percent, at, ethertype: mcd::wire::DEFAULT_ETHERTYPE, nodes: Vec::new() });
        self
    }

    fn validate(&self) -> Result<()> {
        ensure!(
            !self.name.is_empty() && self.name.len() <= 6 && self.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()),
            "cluster name `{}` must be 1 to 6 lowercase letters or digits (it becomes part of interface names)",
            self.name
        );
        ensure!((1..=MAX_NODES).contains(&self.nodes), "a cluster has 1 to {MAX_NODES} nodes, not {}", self.nodes);
        ensure!((1..=MAX_RAILS).contains(&self.rails), "a cluster has 1 to {MAX_RAILS} rails, not {}", self.rails);
        if let Some(loss) = &self.loss {
            ensure!((0.0..=100.0).contains(&loss.percent), "loss must be 0 to 100 percent, not {}", loss.percent);
            if let Some(bad) = loss.nodes.iter().find(|&&n| n >= self.nodes) {
                bail!("loss names node {bad} but the cluster has nodes 0..{}", self.nodes);
            }
        }
        Ok(())
    }
}

/// What [`Cluster::up`] found and did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpOutcome {
    /// Built from nothing.
    Created,
    /// It existed with every piece in place.
    AlreadyUp,
    /// It existed with pieces missing, now put back (how many).
    Repaired(usize),
}

/// What one node's process did under [`Cluster::run`].
#[derive(Clone, Debug)]
pub struct NodeOutcome {
    /// The node.
    pub node: usize,
    /// Exit code (`None`: killed by a signal or by the timeout).
    pub code: Option<i32>,
    /// Whether the timeout killed it.
    pub timed_out: bool,
    /// Everything it printed on standard output.
    pub stdout: String,
    /// Everything it printed on standard error.
    pub stderr: String,
}

impl NodeOutcome {
    /// Exited with code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// How it ended, in words: `exit 3`, `killed by the timeout`, `killed by a signal`.
    pub fn status(&self) -> String {
        match (self.code, self.timed_out) {
            (_, true) => "killed by the timeout".into(),
            (Some(c), _) => format!("exit {c}"),
            (None, _) => "killed by a signal".into(),
        }
    }
}

/// The most outsiders ([`Cluster::plug_outsider`]) a cluster can have.
pub const MAX_OUTSIDERS: usize = 4;

/// A station on a cluster's switches that is not a node of it (see
/// [`Cluster::plug_outsider`]).
#[derive(Clone, Debug)]
pub struct Outsider {
    /// Its network namespace.
    pub namespace: String,
    /// Its MAC address on each rail.
    pub macs: Vec<MacAddr>,
}

impl Outsider {
    /// Moves the calling thread into the outsider's namespace until the guard drops.
    pub fn enter(&self) -> Result<mcd::host::NetnsGuard> {
        mcd::host::enter_netns(&self.namespace).with_context(|| format!("entering {}", self.namespace))
    }
}

/// A virtual cluster that is up. Dropping it leaves the cluster up; use
/// [`Cluster::down`] or a [`ClusterGuard`].
#[derive(Clone, Debug)]
pub struct Cluster {
    spec: ClusterSpec,
}

/// Checks that the commands the cluster needs are installed, saying which
/// Debian package brings each missing one.
pub fn check_tools(need_nft: bool) -> Result<()> {
    let mut missing = Vec::new();
    let mut tools = vec![("ip", "iproute2"), ("bridge", "iproute2"), ("sysctl", "procps")];
    if need_nft {
        tools.push(("nft", "nftables"));
    }
    for (tool, package) in tools {
        if which(tool).is_none() {
            missing.push(format!("`{tool}` (Debian package {package})"));
        }
    }
    ensure!(missing.is_empty(), "the virtual cluster needs {}: install with `apt-get install iproute2 nftables procps`", missing.join(", "));
    Ok(())
}

pub(crate) fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from)).map(|d| d.join(tool)).find(|p| p.is_file())
}

/// Fails unless running as root (the cluster needs CAP_NET_ADMIN and CAP_SYS_ADMIN).
pub fn require_root() -> Result<()> {
    ensure!(
        mcd::host::effective_uid_is_root(),
        "the virtual cluster needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN, CAP_NET_RAW): run it as root (sudo, or a root shell)"
    );
    Ok(())
}

impl Cluster {
    /// Brings the cluster up, or repairs it if it exists with pieces missing.
    /// Fails if a cluster of that name exists with another shape.
    pub fn up(spec: ClusterSpec) -> Result<(Cluster, UpOutcome)> {
        spec.validate()?;
        require_root()?;
        check_tools(spec.loss.is_some())?;
        let existing = Cluster::attach(&spec.name).ok();
        if let Some(old) = &existing {
            let same_shape = old.spec.nodes == spec.nodes && old.spec.rails == spec.rails;
            ensure!(
                same_shape,
                "cluster `{}` is up with {} node(s) and {} rail(s); take it down first (`mcd-vcluster down {}`)",
                spec.name,
                old.spec.nodes,
                old.spec.rails,
                spec.name
            );
        }
        let cluster = Cluster { spec };
        std::fs::create_dir_all(STATE_DIR)?;
        let repaired = cluster.build()?;
        cluster.apply_loss()?;
        std::fs::write(cluster.state_path(), serde_json::to_string_pretty(&cluster.spec)?)?;
        std::fs::write(cluster.node_file(), cluster.node_list().to_text())?;
        if !cluster.key_file().exists() {
            cluster.scratch_dir()?;
            mcd::JobSecret::write_new(&cluster.key_file())?;
        }
        let outcome = match (existing, repaired) {
            (None, _) => UpOutcome::Created,
            (Some(_), 0) => UpOutcome::AlreadyUp,
            (Some(_), n) => UpOutcome::Repaired(n),
        };
        Ok((cluster, outcome))
    }

    /// Brings a cluster up (as [`Cluster::up`]) behind a guard that takes it
    /// down when dropped. Any leftover cluster of that name is taken down first.
    pub fn up_guarded(spec: ClusterSpec) -> Result<ClusterGuard> {
        Cluster::down_by_name(&spec.name)?;
        let (cluster, _) = Cluster::up(spec)?;
        Ok(ClusterGuard(cluster))
    }

    /// The cluster called `name`, as recorded by `up`.
    pub fn attach(name: &str) -> Result<Cluster> {
        let path = Path::new(STATE_DIR).join(format!("{name}.json"));
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("no virtual cluster `{name}` is up (no {}); `mcd-vcluster up {name}` first", path.display()))?;
        Ok(Cluster { spec: serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))? })
    }

    /// Names of the clusters that are up.
    pub fn list() -> Vec<String> {
        let Ok(dir) = std::fs::read_dir(STATE_DIR) else { return Vec::new() };
        let mut names: Vec<String> =
            dir.filter_map(|e| e.ok()).filter_map(|e| e.file_name().to_str()?.strip_suffix(".json").map(str::to_string)).collect();
        names.sort();
        names
    }

    /// The cluster's shape.
    pub fn spec(&self) -> &ClusterSpec {
        &self.spec
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.spec.nodes
    }

    /// Number of rails.
    pub fn rails(&self) -> usize {
        self.spec.rails
    }

    /// The network namespace of node `node`.
    pub fn namespace(&self, node: usize) -> String {
        format!("mcd-{}-{node}", self.spec.name)
    }

    /// The interface of rail `rail` inside every node.
    pub fn interface(rail: usize) -> String {
        format!("eth{rail}")
    }

    /// The interfaces of all rails, rail 0 first.
    pub fn interfaces(&self) -> Vec<String> {
        (0..self.spec.rails).map(Cluster::interface).collect()
    }

    /// The name of the bridge of rail `rail` (its switch or hub), in the root
    /// namespace: where the machine itself reaches the nodes on that rail.
    pub fn bridge(&self, rail: usize) -> String {
        format!("mcd{}b{rail}", self.spec.name)
    }

    fn peer(&self, node: usize, rail: usize) -> String {
        format!("mcd{}{rail}n{node}", self.spec.name)
    }

    fn nft_table(&self) -> String {
        format!("mcd_{}", self.spec.name)
    }

    fn state_path(&self) -> PathBuf {
        Path::new(STATE_DIR).join(format!("{}.json", self.spec.name))
    }

    /// The node-list file `up` writes (one line per node, port 0).
    pub fn node_file(&self) -> PathBuf {
        Path::new(STATE_DIR).join(format!("{}.nodes", self.spec.name))
    }

    /// A directory for files that tools built on the cluster keep for it (an
    /// MPI launcher's host file, say): created here, removed with the cluster.
    pub fn scratch_dir(&self) -> Result<PathBuf> {
        let dir = Self::scratch_dir_of(&self.spec.name);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(dir)
    }

    fn scratch_dir_of(name: &str) -> PathBuf {
        Path::new(STATE_DIR).join(format!("{name}.d"))
    }

    /// The cluster's key file (mode 0600, in its scratch directory, written
    /// by `up`): the job secret of every process started on the cluster
    /// ([`Cluster::node_env`] names it in `MCD_KEY_FILE`) and of the
    /// endpoints of [`Cluster::endpoint_config`]. [`Cluster::run`] gives
    /// each job a fresh one of its own instead.
    pub fn key_file(&self) -> PathBuf {
        Self::scratch_dir_of(&self.spec.name).join("job.key")
    }

    /// The secret in [`Cluster::key_file`].
    pub fn secret(&self) -> Result<mcd::JobSecret> {
        mcd::JobSecret::load(&self.key_file())
            .with_context(|| format!("the key file of cluster `{}` (`mcd-vcluster up {}` writes a missing one)", self.spec.name, self.spec.name))
    }

    /// Writes a fresh key file for one job in the scratch directory and
    /// returns its path (the caller removes it when the job is over).
    pub fn new_job_key_file(&self) -> Result<PathBuf> {
        static JOBS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = JOBS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = self.scratch_dir()?.join(format!("job-{}-{n}.key", std::process::id()));
        let _ = std::fs::remove_file(&path);
        mcd::JobSecret::write_new(&path)?;
        Ok(path)
    }

    /// The MAC address of node `node` on rail `rail`: `02:HH:HH:rail:node`, with
    /// HH:HH from the cluster name, so that clusters never share addresses.
    pub fn mac(&self, node: usize, rail: usize) -> MacAddr {
        let h = self.spec.name.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ b as u32).wrapping_mul(0x0100_0193));
        MacAddr([0x02, (h >> 8) as u8, h as u8, rail as u8, (node >> 8) as u8, node as u8])
    }

    /// The IPv4 address of node `node` on rail `rail` (10.(77+rail).x.y/16), for
    /// IP traffic such as the UDP comparison.
    pub fn ip(&self, node: usize, rail: usize) -> Ipv4Addr {
        let host = node + 1;
        Ipv4Addr::new(10, 77 + rail as u8, (host >> 8) as u8, host as u8)
    }

    /// The node list: one node per namespace, port 0, one MAC per rail.
    pub fn node_list(&self) -> NodeList {
        NodeList::new((0..self.spec.nodes).map(|n| NodeAddr { macs: (0..self.spec.rails).map(|r| self.mac(n, r)).collect(), port: 0 }).collect())
            .expect("a validated spec has 1 to MAX_NODES nodes, each with distinct MACs on 1 or more rails")
    }

    fn build(&self) -> Result<usize> {
        let mut repaired = 0;
        let (namespaces, links) = existing_pieces()?;
        for rail in 0..self.spec.rails {
            let br = self.bridge(rail);
            if !links.contains(&br) {
                repaired += 1;
                sh("ip", &["link", "add", &br, "type", "bridge", "stp_state", "0"])?;
            }
            // STP must be off before forward_delay can be 0 (one command fails).
            sh("ip", &["link", "set", &br, "type", "bridge", "forward_delay", "0", "mcast_snooping", "0"])?;
            let ageing = if self.spec.topology == Topology::Hub { "0" } else { "30000" };
            sh("ip", &["link", "set", &br, "type", "bridge", "ageing_time", ageing])?;
            sh("sysctl", &["-qw", &format!("net.ipv6.conf.{br}.disable_ipv6=1")])?;
            sh("ip", &["link", "set", &br, "up"])?;
        }
        for node in 0..self.spec.nodes {
            repaired += self.plug(node, &namespaces, &links)?;
        }
        // Repairs counted from a fresh build are not repairs.
        Ok(repaired)
    }

    /// Plugs station `node` (a node, or an outsider numbered after them)
    /// into every rail's bridge: its namespace, veths, MAC and address,
    /// made or put back. Returns how many pieces were missing.
    fn plug(&self, node: usize, namespaces: &BTreeSet<String>, links: &BTreeSet<String>) -> Result<usize> {
        let mut repaired = 0;
        let ns = self.namespace(node);
        if !namespaces.contains(&ns) {
            repaired += 1;
            sh("ip", &["netns", "add", &ns])?;
        }
        in_ns(&ns, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"])?;
        in_ns(&ns, &["ip", "link", "set", "lo", "up"])?;
        for rail in 0..self.spec.rails {
            let peer = self.peer(node, rail);
            let eth = Cluster::interface(rail);
            if !links.contains(&peer) || !namespaces.contains(&ns) {
                repaired += 1;
                let _ = sh("ip", &["link", "del", &peer]);
                sh("ip", &["link", "add", &peer, "type", "veth", "peer", "name", &eth, "netns", &ns])?;
            }
            sh("sysctl", &["-qw", &format!("net.ipv6.conf.{peer}.disable_ipv6=1")])?;
            sh("ip", &["link", "set", &peer, "master", &self.bridge(rail)])?;
            in_ns(&ns, &["ip", "link", "set", &eth, "address", &self.mac(node, rail).to_string()])?;
            let ip = format!("{}/16", self.ip(node, rail));
            in_ns(&ns, &["ip", "addr", "replace", &ip, "dev", &eth])?;
            in_ns(&ns, &["ip", "link", "set", &eth, "up"])?;
            sh("ip", &["link", "set", &peer, "up"])?;
        }
        // A default route on rail 0, as a real node has: programs that take
        // their interface from it (mcd without MCD_IFACES) find eth0.
        in_ns(&ns, &["ip", "route", "replace", "default", "dev", &Cluster::interface(0)])?;
        Ok(repaired)
    }

    /// Plugs an outsider into every rail's switch: a namespace of its own
    /// (see [`Outsider`]), built like a node's and numbered after them
    /// (`index` 0 is station `nodes`), so it shares their addressing
    /// scheme and is taken down with the cluster, but it is in no node
    /// list. Tests use one to watch the segment and to send what a foreign
    /// station would (an observer, a traffic source, an attacker).
    pub fn plug_outsider(&self, index: usize) -> Result<Outsider> {
        ensure!(index < MAX_OUTSIDERS, "a cluster has at most {MAX_OUTSIDERS} outsiders, not {}", index + 1);
        let station = self.spec.nodes + index;
        let (namespaces, links) = existing_pieces()?;
        self.plug(station, &namespaces, &links)?;
        Ok(Outsider { namespace: self.namespace(station), macs: (0..self.spec.rails).map(|r| self.mac(station, r)).collect() })
    }

    fn lossy_nodes(&self, loss: &Loss) -> Vec<usize> {
        if loss.nodes.is_empty() {
            (0..self.spec.nodes).collect()
        } else {
            loss.nodes.clone()
        }
    }

    fn apply_loss(&self) -> Result<()> {
        self.clear_loss()?;
        let Some(loss) = self.spec.loss.clone() else { return Ok(()) };
        let threshold = (loss.percent * 100.0).round() as u32; // out of 10000
        let rule =
            |iface_match: String| format!("{iface_match} ether type {:#06x} numgen random mod 10000 < {threshold} counter drop", loss.ethertype);
        match loss.at {
            LossPoint::Node => {
                for node in self.lossy_nodes(&loss) {
                    let mut script = String::from("table netdev mcdloss {\n");
                    for rail in 0..self.spec.rails {
                        let eth = Cluster::interface(rail);
                        script.push_str(&format!(
                            "  chain in{rail} {{ type filter hook ingress device \"{eth}\" priority 0; {}; }}\n",
                            rule(String::new())
                        ));
                    }
                    script.push_str("}\n");
                    let ns = self.namespace(node);
                    sh_input("ip", &["netns", "exec", &ns, "nft", "-f", "-"], &script)?;
                }
            }
            LossPoint::Port => {
                let mut script = format!("table bridge {} {{\n  chain portloss {{ type filter hook forward priority 0;\n", self.nft_table());
                for node in self.lossy_nodes(&loss) {
                    for rail in 0..self.spec.rails {
                        script.push_str(&format!("    {};\n", rule(format!("oifname \"{}\"", self.peer(node, rail)))));
                    }
                }
                script.push_str("  }\n}\n");
                sh_input("nft", &["-f", "-"], &script)?;
            }
        }
        Ok(())
    }

    fn clear_loss(&self) -> Result<()> {
        if which("nft").is_none() {
            return Ok(());
        }
        let _ = sh("nft", &["delete", "table", "bridge", &self.nft_table()]);
        for node in 0..self.spec.nodes {
            let _ = in_ns(&self.namespace(node), &["nft", "delete", "table", "netdev", "mcdloss"]);
        }
        Ok(())
    }

    /// Changes the injected loss of a running cluster.
    pub fn set_loss(&mut self, loss: Option<Loss>) -> Result<()> {
        self.spec.loss = loss;
        self.spec.validate()?;
        if self.spec.loss.is_some() {
            check_tools(true)?;
        }
        self.apply_loss()?;
        std::fs::write(self.state_path(), serde_json::to_string_pretty(&self.spec)?)?;
        Ok(())
    }

    /// Frames dropped so far by the injected loss (nftables counters).
    pub fn loss_drops(&self) -> Result<u64> {
        let Some(loss) = &self.spec.loss else { return Ok(0) };
        let listings = match loss.at {
            LossPoint::Node => self
                .lossy_nodes(loss)
                .into_iter()
                .map(|n| in_ns(&self.namespace(n), &["nft", "-j", "list", "table", "netdev", "mcdloss"]))
                .collect::<Result<Vec<_>>>()?,
            LossPoint::Port => vec![sh("nft", &["-j", "list", "table", "bridge", &self.nft_table()])?],
        };
        listings.iter().map(|l| commands::nft_counter_packets(l)).sum()
    }

    /// Takes the cluster down: its Slurm daemons if any, links, bridges,
    /// namespaces, nftables tables and state files. Leaves nothing behind.
    pub fn down(self) -> Result<()> {
        Cluster::down_by_name(&self.spec.name)
    }

    /// Takes down whatever exists of cluster `name` (fine if nothing does).
    pub fn down_by_name(name: &str) -> Result<()> {
        require_root()?;
        check_tools(false)?;
        let ns_prefix = format!("mcd-{name}-");
        // Slurm's daemons first, while their namespaces still exist; then
        // whatever else still runs in them (an MPI launcher's daemons, left
        // when the launcher died, hold its outputs and wait without end).
        crate::slurm_state::cleanup(name);
        commands::end_processes(&commands::pids_in_namespaces(name), Duration::from_secs(2));
        if which("nft").is_some() {
            let _ = sh("nft", &["delete", "table", "bridge", &format!("mcd_{name}")]);
        }
        // Root-side veths first: `ip netns del` is asynchronous, and deleting a
        // veth end removes its peer inside the namespace at once.
        for dev in commands::links()?.iter().filter(|d| is_cluster_link(name, d)) {
            let _ = sh("ip", &["link", "del", dev]);
        }
        for ns in commands::namespaces()? {
            if ns.strip_prefix(&ns_prefix).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
                sh("ip", &["netns", "del", &ns])?;
            }
        }
        for ext in ["json", "nodes"] {
            let _ = std::fs::remove_file(Path::new(STATE_DIR).join(format!("{name}.{ext}")));
        }
        let _ = std::fs::remove_dir_all(Self::scratch_dir_of(name));
        Ok(())
    }

    /// Names of leftover pieces of cluster `name` (namespaces and links): empty
    /// after [`Cluster::down`].
    pub fn leftovers(name: &str) -> Result<Vec<String>> {
        let mut found = Vec::new();
        found.extend(commands::namespaces()?.into_iter().filter(|ns| ns.starts_with(&format!("mcd-{name}-"))));
        found.extend(commands::links()?.into_iter().filter(|d| is_cluster_link(name, d)));
        if Self::scratch_dir_of(name).exists() {
            found.push(Self::scratch_dir_of(name).display().to_string());
        }
        if Path::new(STATE_DIR).join(format!("{name}.json")).exists() {
            found.push(format!("{STATE_DIR}/{name}.json"));
        }
        found.extend(crate::slurm_state::leftovers(name));
        Ok(found)
    }

    /// The environment a process on node `node` gets: the node list, its rank,
    /// the cluster size, its interfaces, how many processes share the host,
    /// and the cluster's key file ([`Cluster::key_file`]).
    pub fn node_env(&self, node: usize) -> Vec<(String, String)> {
        vec![
            (mcd::auth::KEY_FILE_VAR.into(), self.key_file().display().to_string()),
            ("MCD_NODE_FILE".into(), self.node_file().display().to_string()),
            ("MCD_RANK".into(), node.to_string()),
            ("MCD_SIZE".into(), self.spec.nodes.to_string()),
            ("MCD_IFACES".into(), self.interfaces().join(",")),
            ("MCD_LOCAL_PROCS".into(), self.spec.nodes.to_string()),
            ("MCD_CLUSTER".into(), self.spec.name.clone()),
        ]
    }

    /// A command that runs `program` inside node `node` with [`Cluster::node_env`].
    pub fn command(&self, node: usize, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.namespace(node), program]);
        cmd.envs(self.node_env(node));
        cmd
    }

    /// Runs `argv` on every node at once and collects each node's exit code and
    /// output; processes still running after `timeout` are killed. The job
    /// gets a fresh secret: a key file of its own ([`Cluster::new_job_key_file`])
    /// in `MCD_KEY_FILE`, removed when the job is over.
    pub fn run(&self, argv: &[String], timeout: Duration) -> Result<Vec<NodeOutcome>> {
        ensure!(!argv.is_empty(), "no command to run");
        let key_file = self.new_job_key_file()?;
        let mut children = Vec::new();
        for node in 0..self.spec.nodes {
            let mut cmd = self.command(node, &argv[0]);
            cmd.args(&argv[1..]).env(mcd::auth::KEY_FILE_VAR, &key_file);
            match Collected::spawn(cmd) {
                Ok(child) => children.push(child),
                Err(e) => {
                    let _ = std::fs::remove_file(&key_file);
                    return Err(e).with_context(|| format!("starting `{}` on node {node}", argv[0]));
                }
            }
        }
        let deadline = Instant::now() + timeout;
        let outcomes = children.into_iter().enumerate().map(|(node, child)| child.finish(node, deadline)).collect();
        let _ = std::fs::remove_file(&key_file);
        Ok(outcomes)
    }

    /// Moves the calling thread into node `node`'s namespace until the guard
    /// drops; endpoints opened meanwhile belong to that node.
    pub fn enter(&self, node: usize) -> Result<mcd::host::NetnsGuard> {
        mcd::host::enter_netns(&self.namespace(node)).with_context(|| format!("entering {}", self.namespace(node)))
    }

    /// An endpoint configuration for a node of this cluster: port 0, all rails,
    /// every node counted as a process on this host, and the cluster's secret
    /// ([`Cluster::key_file`]; if it cannot be read, authentication is left
    /// unset, so opening the endpoint says there is no secret).
    pub fn endpoint_config(&self) -> mcd::EndpointConfig {
        let mut config = mcd::EndpointConfig::new(self.interfaces(), 0, self.node_list());
        config.local_processes = self.spec.nodes;
        config.auth = self.secret().map(mcd::Auth::Key).unwrap_or(mcd::Auth::Unset);
        config
    }
}

/// The network namespaces and links that exist.
fn existing_pieces() -> Result<(BTreeSet<String>, BTreeSet<String>)> {
    Ok((commands::namespaces()?.into_iter().collect(), commands::links()?.into_iter().collect()))
}

/// Whether `dev` is a link of cluster `name`: `mcd{name}b{rail}` (bridge) or
/// `mcd{name}{rail}n{node}` (switch side of a veth), and not of a cluster whose
/// name merely starts with `name`.
fn is_cluster_link(name: &str, dev: &str) -> bool {
    let Some(rest) = dev.strip_prefix("mcd").and_then(|d| d.strip_prefix(name)) else { return false };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match rest.strip_prefix('b') {
        Some(rail) => digits(rail),
        None => rest.split_once('n').is_some_and(|(rail, node)| digits(rail) && digits(node)),
    }
}

/// A child process whose output is collected in the background.
pub struct Collected {
    child: std::process::Child,
    /// The child's standard output and error.
    outputs: [SharedOutput; 2],
}

/// An output read so far, and whether it reached its end.
type SharedOutput = std::sync::Arc<std::sync::Mutex<(Vec<u8>, bool)>>;

/// How long, after the child ended, its outputs may stay open: a process it
/// left running (an MPI launcher's daemons, when the launcher died) keeps
/// them open without end.
const OUTPUT_GRACE: Duration = Duration::from_secs(10);

impl Collected {
    /// Starts `cmd` with no input and both outputs piped.
    pub fn spawn(mut cmd: Command) -> std::io::Result<Collected> {
        let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
        let outputs = [read_all_in_thread(child.stdout.take().expect("piped")), read_all_in_thread(child.stderr.take().expect("piped"))];
        Ok(Collected { child, outputs })
    }

    /// Waits until the child exits or `deadline` passes (then kills it);
    /// `node` labels the outcome. Its outputs are read until they end, or
    /// for at most 10 s after the child ended (then the outcome
    /// says, on its standard error, that a process it left held them).
    pub fn finish(self, node: usize, deadline: Instant) -> NodeOutcome {
        self.finish_after(node, deadline, None)
    }

    /// As [`finish`](Self::finish), and with `done` = (`marker`, `grace`):
    /// once the child's standard output holds `marker` (a program's last
    /// line), it has `grace` more to end before it is killed, and the
    /// outcome (timed out) says so on its standard error.
    pub fn finish_after(mut self, node: usize, mut deadline: Instant, done: Option<(&str, Duration)>) -> NodeOutcome {
        let mut timed_out = false;
        let mut marked: Option<Instant> = None;
        let mut looked = Instant::now();
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => {
                    if let (Some((marker, grace)), None) = (done, marked) {
                        if looked.elapsed() >= Duration::from_millis(100) {
                            looked = Instant::now();
                            let seen = self.outputs[0].lock().is_ok_and(|o| String::from_utf8_lossy(&o.0).contains(marker));
                            if seen {
                                marked = Some(looked);
                                deadline = deadline.min(looked + grace);
                            }
                        }
                    }
                    std::thread::sleep(Duration::from_millis(5))
                }
                Ok(None) => {
                    timed_out = true;
                    let _ = self.child.kill();
                    break self.child.wait().ok();
                }
                Err(_) => break None,
            }
        };
        let ended = Instant::now();
        let all_read = |outputs: &[SharedOutput; 2]| outputs.iter().all(|o| o.lock().map_or(true, |o| o.1));
        while !all_read(&self.outputs) && ended.elapsed() < OUTPUT_GRACE {
            std::thread::sleep(Duration::from_millis(5));
        }
        let take = |o: &SharedOutput| o.lock().map(|o| String::from_utf8_lossy(&o.0).into_owned()).unwrap_or_default();
        let mut stderr = take(&self.outputs[1]);
        if let (true, Some(_), Some((_, grace))) = (timed_out, marked, done) {
            stderr
                .push_str(&format!("\n(mcd-vcluster: killed {:.1} s after the program printed its last line, still running)\n", grace.as_secs_f64()));
        }
        if !all_read(&self.outputs) {
            stderr.push_str(&format!(
                "\n(mcd-vcluster: the outputs were still open {} s after the process ended: a process it started still holds them; what they gave until then is above)\n",
                OUTPUT_GRACE.as_secs()
            ));
        }
        NodeOutcome { node, code: if timed_out { None } else { status.and_then(|s| s.code()) }, timed_out, stdout: take(&self.outputs[0]), stderr }
    }
}

/// Reads `reader` to its end in a thread of its own, into the returned
/// buffer (its flag set at the end).
fn read_all_in_thread<R: Read + Send + 'static>(mut reader: R) -> SharedOutput {
    let shared = std::sync::Arc::new(std::sync::Mutex::new((Vec::new(), false)));
    let filling = shared.clone();
    std::thread::spawn(move || {
        let mut chunk = vec![0u8; 1 << 16];
        loop {
            let n = match reader.read(&mut chunk) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                read => read.unwrap_or(0),
            };
            let Ok(mut buf) = filling.lock() else { return };
            if n == 0 {
                buf.1 = true;
                return;
            }
            buf.0.extend_from_slice(&chunk[..n]);
        }
    });
    shared
}

/// A cluster that is taken down when the guard drops (also on panic).
#[derive(Debug)]
pub struct ClusterGuard(Cluster);

impl std::ops::Deref for ClusterGuard {
    type Target = Cluster;
    fn deref(&self) -> &Cluster {
        &self.0
    }
}

impl std::ops::DerefMut for ClusterGuard {
    fn deref_mut(&mut self) -> &mut Cluster {
        &mut self.0
    }
}

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        if let Err(e) = Cluster::down_by_name(&self.0.spec.name) {
            eprintln!("warning: taking down virtual cluster `{}`: {e:#}", self.0.spec.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_held_open_by_a_process_left_behind_ends_the_read_after_the_grace() {
        // The shell prints and exits at once; the sleep it leaves keeps both
        // outputs open for a minute.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo before; sleep 60 & exit 3"]);
        let started = Instant::now();
        let out = Collected::spawn(cmd).unwrap().finish(7, Instant::now() + Duration::from_secs(30));
        let took = started.elapsed();
        assert!(took >= OUTPUT_GRACE && took < OUTPUT_GRACE + Duration::from_secs(20), "{took:?}");
        assert_eq!((out.node, out.code, out.timed_out), (7, Some(3), false));
        assert_eq!(out.stdout, "before\n");
        assert!(out.stderr.contains("still holds them"), "{}", out.stderr);
    }

    #[test]
    fn a_run_that_hangs_after_its_last_line_is_ended_after_the_grace_and_one_that_ends_is_not() {
        // Hangs after its last line (as MPICH's MPI_Finalize over UCX's TCP).
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo row; echo last line; exec sleep 60"]);
        let started = Instant::now();
        let out =
            Collected::spawn(cmd).unwrap().finish_after(0, Instant::now() + Duration::from_secs(50), Some(("last line", Duration::from_millis(300))));
        assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
        assert!(out.timed_out);
        assert_eq!(out.stdout, "row\nlast line\n");
        assert!(out.stderr.contains("after the program printed its last line"), "{}", out.stderr);
        // Ends by itself after its last line: not killed.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo last line; sleep 0.5; exit 4"]);
        let out =
            Collected::spawn(cmd).unwrap().finish_after(0, Instant::now() + Duration::from_secs(50), Some(("last line", Duration::from_secs(20))));
        assert_eq!((out.code, out.timed_out, out.stderr.as_str()), (Some(4), false, ""));
        // Never prints it: the deadline as before.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo row; exec sleep 60"]);
        let started = Instant::now();
        let out =
            Collected::spawn(cmd).unwrap().finish_after(0, Instant::now() + Duration::from_secs(1), Some(("last line", Duration::from_millis(10))));
        assert!(out.timed_out && started.elapsed() >= Duration::from_secs(1));
        assert!(!out.stderr.contains("last line"), "{}", out.stderr);
    }

    #[test]
    fn outputs_that_end_with_the_process_are_read_whole() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo out; echo err >&2"]);
        let out = Collected::spawn(cmd).unwrap().finish(0, Instant::now() + Duration::from_secs(30));
        assert_eq!((out.code, out.stdout.as_str(), out.stderr.as_str()), (Some(0), "out\n", "err\n"));
    }

    #[test]
    fn names_fit_interface_limits_and_macs_differ_per_cluster() {
        let a = Cluster { spec: ClusterSpec::new("abcdef", 250).rails(4) };
        assert!(a.peer(249, 3).len() <= 15, "{}", a.peer(249, 3));
        assert!(a.bridge(3).len() <= 15);
        let b = Cluster { spec: ClusterSpec::new("abcdeg", 2) };
        assert_ne!(a.mac(0, 0), b.mac(0, 0));
        assert_ne!(a.mac(1, 0), a.mac(1, 1));
        assert!(!a.mac(0, 0).is_multicast());
        assert_eq!(a.node_list().len(), 250);
        assert_eq!(a.ip(0, 1), Ipv4Addr::new(10, 78, 0, 1));
    }

    #[test]
    fn bad_specs_are_refused_with_reasons() {
        for (spec, needle) in [
            (ClusterSpec::new("Bad", 2), "lowercase"),
            (ClusterSpec::new("toolong", 2), "1 to 6"),
            (ClusterSpec::new("ok", 0), "1 to 250"),
            (ClusterSpec::new("ok", 2).rails(9), "rails"),
            (ClusterSpec::new("ok", 2).loss(120.0, LossPoint::Node), "0 to 100"),
        ] {
            let err = spec.validate().unwrap_err().to_string();
            assert!(err.contains(needle), "{err}");
        }
    }

    #[test]
    fn cluster_links_are_told_apart_from_similar_names() {
        assert!(is_cluster_link("ab", "mcdabb0"));
        assert!(is_cluster_link("ab", "mcdab1n12"));
        assert!(!is_cluster_link("ab", "mcdabcb0"));
        assert!(!is_cluster_link("ab", "mcdabc0n1"));
        assert!(!is_cluster_link("ab", "eth0"));
    }
}
