//! Configuration: what an endpoint is opened with ([`EndpointConfig`]), and
//! the helpers that read it from the environment and look interfaces up.
//!
//! This module sits below both [`Endpoint`](crate::Endpoint) and
//! [`bootstrap`](crate::bootstrap), which import from it and not from each
//! other.

use std::time::Duration;

use crate::auth::Auth;
use crate::node::{NodeList, Port};
use crate::sys;
use crate::wait::{self, WaitPolicy};
use crate::wire::{MacAddr, DEFAULT_ETHERTYPE};
use crate::{Error, Result};

pub use crate::port::{DEFAULT_PORT_DIR, ENV_PORT_DIR};

/// The job key used when none is configured.
pub const DEFAULT_JOB_KEY: u32 = 0x4d43_4400; // "MCD\0"
/// The most rails one endpoint drives.
pub const MAX_RAILS: usize = 8;
/// How long a waiting endpoint stays silent before it announces its MAC
/// ([`EndpointConfig::announce_every`]).
pub const DEFAULT_ANNOUNCE_EVERY: Duration = Duration::from_millis(100);

/// How to open an [`Endpoint`](crate::Endpoint). [`EndpointConfig::new`] fills in the defaults.
#[derive(Clone, Debug)]
pub struct EndpointConfig {
    /// One interface per rail, rail 0 first.
    pub interfaces: Vec<String>,
    /// The port this endpoint holds; with the rail-0 MAC it names this node in `nodes`.
    pub port: Port,
    /// The job's nodes.
    pub nodes: NodeList,
    /// EtherType of the job's frames.
    pub ethertype: u16,
    /// Key that keeps two jobs on one LAN apart.
    pub job_key: u32,
    /// How receives wait.
    pub wait: WaitPolicy,
    /// How many of the job's processes share this host (for
    /// [`WaitPolicy::Adaptive`]); a hint, the endpoint counts too.
    pub local_processes: usize,
    /// Where the host's endpoints lock their ports: one lock file per
    /// (network namespace, interface, port), held while the endpoint lives.
    pub port_dir: std::path::PathBuf,
    /// Receive-ring slots per rail.
    pub rx_slots: usize,
    /// Send-ring slots per rail.
    pub tx_slots: usize,
    /// Socket receive buffer in bytes (raised past `rmem_max` when allowed).
    pub receive_buffer: usize,
    /// Demultiplex in the kernel with a BPF filter (on by default; turning it
    /// off makes user space see, count and drop every frame of the EtherType).
    pub kernel_filter: bool,
    /// Authentication: the job's secret, or explicitly off. [`Auth::Unset`]
    /// (the default of [`EndpointConfig::new`]) makes
    /// [`Endpoint::open`](crate::Endpoint::open) fail with
    /// [`Error::NoSecret`].
    pub auth: Auth,
    /// While a receive waits with nothing sent for this long, the endpoint
    /// announces its MAC to the switch (a frame to itself) so that a port
    /// stolen by a forged source MAC comes back; `None`: never.
    pub announce_every: Option<Duration>,
    /// The hellos dropped by the bootstrap that made `nodes` (set by
    /// [`EndpointConfig::bootstrap`]; `None`: none): the endpoint's
    /// [`Stats::dropped`](crate::Stats::dropped) includes them.
    pub bootstrap_drops: Option<std::sync::Arc<crate::stats::BootstrapDrops>>,
}

impl EndpointConfig {
    /// A configuration with defaults: EtherType 0x88B5, the default job key,
    /// adaptive waiting, one process on the host as far as it knows, 1024
    /// receive and 256 send slots per rail, port locks in
    /// [`DEFAULT_PORT_DIR`]. It reads no
    /// environment ([`from_env`](Self::from_env) does).
    pub fn new<S: Into<String>>(interfaces: impl IntoIterator<Item = S>, port: Port, nodes: NodeList) -> EndpointConfig {
        EndpointConfig {
            interfaces: interfaces.into_iter().map(Into::into).collect(),
            port,
            nodes,
            ethertype: DEFAULT_ETHERTYPE,
            job_key: DEFAULT_JOB_KEY,
            wait: WaitPolicy::Adaptive,
            local_processes: 1,
            port_dir: crate::port::DEFAULT_PORT_DIR.into(),
            rx_slots: 1024,
            tx_slots: 256,
            receive_buffer: 4 << 20,
            kernel_filter: true,
            auth: Auth::Unset,
            announce_every: Some(DEFAULT_ANNOUNCE_EVERY),
            bootstrap_drops: None,
        }
    }

    /// This configuration with authentication `auth`.
    pub fn with_auth(mut self, auth: Auth) -> EndpointConfig {
        self.auth = auth;
        self
    }

    /// A configuration from the environment: `MCD_IFACES` (comma-separated,
    /// default `eth0`), `MCD_PORT` (default 0), `MCD_NODES` / `MCD_NODE_FILE`,
    /// `MCD_JOB`, `MCD_ETHERTYPE`, `MCD_WAIT`, `MCD_RX_SLOTS`, `MCD_PORT_DIR`, the processes on
    /// the host ([`wait::local_processes_from_env`]), and the authentication:
    /// `MCD_KEY_FILE` or `MCD_AUTH=off` ([`Auth::from_env`]); with neither,
    /// [`Error::NoSecret`].
    pub fn from_env() -> Result<EndpointConfig> {
        let auth = Auth::from_env()?.required()?;
        let nodes = NodeList::from_env()?.ok_or(Error::NoNodeList)?;
        let interfaces: Vec<String> = env_var("MCD_IFACES").unwrap_or_else(|| "eth0".into()).split(',').map(|s| s.trim().to_string()).collect();
        let port = match env_var("MCD_PORT") {
            Some(p) => p.trim().parse().map_err(|_| Error::Config(format!("MCD_PORT={p} is not a port 0..=255")))?,
            None => 0,
        };
        let mut config = EndpointConfig::new(interfaces, port, nodes).with_auth(auth);
        if let Some(job) = env_var("MCD_JOB") {
            config.job_key = job_key_from_str(&job);
        }
        config.apply_env()?;
        Ok(config)
    }

    /// `MCD_ETHERTYPE`, `MCD_WAIT`, `MCD_RX_SLOTS` and `MCD_PORT_DIR`, if
    /// set, and the processes on the host.
    pub(crate) fn apply_env(&mut self) -> Result<()> {
        self.local_processes = wait::local_processes_from_env();
        if let Some(dir) = std::env::var_os(crate::port::ENV_PORT_DIR).filter(|d| !d.is_empty()) {
            self.port_dir = dir.into();
        }
        if let Some(t) = env_var("MCD_ETHERTYPE") {
            self.ethertype = parse_ethertype(&t)?;
        }
        if let Some(w) = env_var("MCD_WAIT") {
            self.wait = w.parse().map_err(|e| Error::Config(format!("MCD_WAIT: {e}")))?;
        }
        if let Some(n) = env_var("MCD_RX_SLOTS") {
            self.rx_slots = parse_rx_slots(&n)?;
        }
        Ok(())
    }
}

/// The most receive-ring slots `MCD_RX_SLOTS` may ask for: 65,536 slots of
/// 2 KiB (a 1500-byte MTU) are 128 MiB per rail.
pub(crate) const MAX_RX_SLOTS: usize = 65_536;

/// Parses `MCD_RX_SLOTS`: receive-ring slots per rail, 16 to [`MAX_RX_SLOTS`].
pub(crate) fn parse_rx_slots(n: &str) -> Result<usize> {
    parse_number(n)
        .and_then(|v| usize::try_from(v).ok())
        .filter(|v| (16..=MAX_RX_SLOTS).contains(v))
        .ok_or_else(|| Error::Config(format!("MCD_RX_SLOTS={n} is not a number of receive-ring slots from 16 to {MAX_RX_SLOTS}")))
}

/// Parses an EtherType (decimal or `0x` hex, at least 0x0600).
pub(crate) fn parse_ethertype(t: &str) -> Result<u16> {
    parse_number(t)
        .and_then(|v| u16::try_from(v).ok())
        .filter(|&v| v >= 0x0600)
        .ok_or_else(|| Error::Config(format!("MCD_ETHERTYPE={t} is not an EtherType (0x0600..=0xffff)")))
}

/// A network interface, as an endpoint needs to know it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Interface {
    /// Kernel interface index.
    pub index: u32,
    /// Hardware address.
    pub mac: MacAddr,
    /// MTU in bytes.
    pub mtu: usize,
}

/// The interface `name` of the calling thread's network namespace, or an
/// error that lists the interfaces there.
pub(crate) fn lookup_interface(name: &str) -> Result<Interface> {
    let info = sys::interface_info(name)
        .map_err(|source| Error::Io { what: format!("querying interface {name}"), source })?
        .ok_or_else(|| Error::NoSuchInterface { name: name.into(), available: interface_names() })?;
    Ok(Interface { index: info.index, mac: MacAddr(info.mac), mtu: info.mtu })
}

/// The interfaces of the calling thread's network namespace, comma-separated (for messages).
pub(crate) fn interface_names() -> String {
    sys::interface_names().join(", ")
}

fn parse_number(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// The job key for a job name or number: a number (decimal or `0x` hex) that
/// fits 32 bits is the key itself; anything else is hashed (FNV-1a).
pub fn job_key_from_str(job: &str) -> u32 {
    if let Some(n) = parse_number(job).and_then(|n| u32::try_from(n).ok()) {
        return n;
    }
    job.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ b as u32).wrapping_mul(0x0100_0193))
}

/// The environment variable `name`, trimmed; `None` when unset or blank.
pub fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

/// The environment variable `name` as a positive number of seconds, if set.
pub fn env_seconds(name: &str) -> Result<Option<Duration>> {
    let Some(t) = env_var(name) else { return Ok(None) };
    let secs: f64 =
        t.parse().ok().filter(|s: &f64| *s > 0.0 && s.is_finite()).ok_or_else(|| Error::Config(format!("{name}={t} is not a number of seconds")))?;
    Ok(Some(Duration::from_secs_f64(secs)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_keys_from_numbers_and_names() {
        assert_eq!(job_key_from_str("42"), 42);
        assert_eq!(job_key_from_str("0x10"), 16);
        assert_ne!(job_key_from_str("slurm-job-a"), job_key_from_str("slurm-job-b"));
        // Names hash with FNV-1a, so every process of a job derives the same key.
        assert_eq!(job_key_from_str("name"), 0x8d39_bde6);
        // A number too large for the key is a name, and hashed.
        assert_eq!(job_key_from_str("0x100000000"), 0x4c0c_4d0c);
    }

    #[test]
    fn receive_ring_slots_are_numbers_from_16_to_the_most() {
        assert_eq!(parse_rx_slots("8192").unwrap(), 8192);
        assert_eq!(parse_rx_slots(" 16 ").unwrap(), 16);
        for bad in ["15", "65537", "lots", "-1"] {
            assert!(matches!(parse_rx_slots(bad), Err(Error::Config(m)) if m.contains("MCD_RX_SLOTS")), "{bad}");
        }
    }

    #[test]
    fn ethertypes_are_numbers_from_0x0600() {
        assert_eq!(parse_ethertype("0x88B5").unwrap(), 0x88b5);
        assert_eq!(parse_ethertype(" 1536 ").unwrap(), 0x0600);
        for bad in ["0x05ff", "0x10000", "ip"] {
            assert!(matches!(parse_ethertype(bad), Err(Error::Config(_))), "{bad}");
        }
    }
}
