//! Bootstrap: who am I in this job, and where are the others?
//!
//! A process launched by Slurm, `mpirun` or by hand learns its rank and the
//! job's size, its interfaces, its port and the job key from the environment
//! ([`JobEnv::from_env`]). Without a node list, the ranks then find each other
//! on the wire ([`discover`]): each multicasts a *hello* (rank, size, port, one
//! MAC per rail, a fresh nonce and the digest of the nonces it heard) on the
//! job's bootstrap group until it has heard every rank and every rank has
//! said it heard everyone (about the same nonces: see *Run binding*); a
//! rank that is done stays
//! behind on a background thread, answering ranks that are not, until every
//! rank has said it is done (or [`DiscoveryConfig::linger`] is over). That
//! thread sleeps on its socket, which takes hellos only: the job's barrier
//! frames, sent from the first moments after, never reach it, and once it
//! ends no socket of the bootstrap taps the interface any more. Nodes are
//! then numbered by rank.
//!
//! **Rounds.** A job may bootstrap several times (`mcd_init` ..
//! `mcd_finalize` cycles: collective, so every rank makes as many). Each
//! hello carries its round, the count of this process's bootstraps of the
//! job (in the frame's sequence field), and a rank takes only hellos of its
//! own round: the "done" of a rank still lingering from the previous round
//! never passes for this round's.
//!
//! **Run binding.** A key file may serve many runs, and each bootstrap's
//! hello socket starts with empty replay windows, so hellos recorded in an
//! earlier run verify and are new to it (once each: the socket keeps a
//! window per rank and session of its sender's counter). Every rank
//! therefore draws a fresh 64-bit nonce for each bootstrap, and every hello
//! carries its sender's nonce and the digest of all the nonces it has
//! heard. A rank counts another's "heard all" and "done" only when that
//! hello's digest is its own: the digest covers this rank's own fresh
//! nonce, so no hello of an earlier run, replayed, can end discovery.
//! Which of two nonces heard for one rank is the live one is never decided
//! by clocks or counters: a nonce is *proven* once a hello carrying it also
//! carries the digest this rank would have with that nonce in its rank's
//! place (its sender heard this rank's fresh nonce, so it is live now). A
//! proven nonce replaces any other and is never replaced by an unproven
//! one; until one is proven, the nonce heard last stands for its rank (the
//! live rank resends, so it is heard again). A second nonce proven for one
//! rank is two live processes with one rank: an error. Claims ("heard all",
//! "done") are kept with the digest they were about, so a replay that
//! makes this rank's view wrong for a moment costs no claim. A hello saying
//! the job has another size is ignored and named at the timeout.
//!
//! Hellos are ordinary MCD frames (kind [`kind::HELLO`]) sent to group
//! [`BOOTSTRAP_GROUP`] of the job, so two jobs with different keys on one LAN
//! never hear each other, and loss is handled by resending.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::auth::{Auth, Counter, FrameKey, SenderWindows};
use crate::config::{env_seconds, env_var, interface_names, job_key_from_str, lookup_interface, parse_ethertype};
use crate::config::{EndpointConfig, DEFAULT_JOB_KEY, MAX_RAILS};
use crate::filter::{self, pkttype, FilterSpec};
use crate::kind;
use crate::node::{NodeAddr, NodeList, Port};
use crate::stats::BootstrapDrops;
use crate::sys::{self, PacketSocket};
use crate::wire::{Frame, FrameRepr, GroupId, MacAddr, DEFAULT_ETHERTYPE};
use crate::{Error, Result};

/// The multicast group hellos go to.
pub const BOOTSTRAP_GROUP: GroupId = GroupId(255);

/// Environment variables read for the rank, in order (with their size partner).
pub const RANK_VARS: [(&str, &str); 4] =
    [("MCD_RANK", "MCD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE")];
/// Environment variables read for the rank on this host (the port), in order.
pub const LOCAL_RANK_VARS: [&str; 4] = ["MCD_PORT", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"];
/// Environment variables read for the job key, in order.
pub const JOB_VARS: [&str; 2] = ["MCD_JOB", "SLURM_JOB_ID"];

/// What a process knows about its job from the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEnv {
    /// This process's rank, 0-based.
    pub rank: usize,
    /// Ranks in the job.
    pub size: usize,
    /// Interfaces, one per rail.
    pub interfaces: Vec<String>,
    /// The port this rank holds (its rank on the host).
    pub port: Port,
    /// The job key (from `MCD_JOB` / `SLURM_JOB_ID`, else the default key).
    pub job_key: u32,
    /// Where the values came from, for messages (`"MCD_RANK"`, `"SLURM_PROCID"`...).
    pub rank_source: &'static str,
}

/// Values given explicitly (by a caller of the C ABI, say); `None` means
/// "from the environment".
#[derive(Clone, Debug, Default)]
pub struct JobSettings {
    /// Rank and size.
    pub rank_size: Option<(usize, usize)>,
    /// Interfaces, one per rail.
    pub interfaces: Option<Vec<String>>,
    /// The port.
    pub port: Option<Port>,
    /// The job name or number (hashed into the key as `MCD_JOB` is).
    pub job: Option<String>,
    /// Authentication (`None`: from `MCD_KEY_FILE` / `MCD_AUTH`, [`Auth::from_env`]).
    pub auth: Option<Auth>,
}

impl JobEnv {
    /// Reads the environment: rank and size from [`RANK_VARS`] (first pair
    /// set wins), port from [`LOCAL_RANK_VARS`] (default 0), job key from
    /// [`JOB_VARS`], interfaces from `MCD_IFACES` or the default route's.
    pub fn from_env() -> Result<JobEnv> {
        JobEnv::resolve(&JobSettings::default())
    }

    /// As [`from_env`](Self::from_env), but values in `settings` win.
    pub fn resolve(settings: &JobSettings) -> Result<JobEnv> {
        let (rank, size, rank_source) = match settings.rank_size {
            Some((rank, size)) => (rank, size, "the caller"),
            None => rank_from_env()?,
        };
        let port = match settings.port {
            Some(port) => port,
            None => match LOCAL_RANK_VARS.iter().find_map(|v| env_var(v).map(|x| (v, x))) {
                Some((name, v)) => {
                    v.parse::<Port>().map_err(|_| Error::Config(format!("{name}={v}: ports are 0..=255 (at most 256 ranks per host)")))?
                }
                None => 0,
            },
        };
        let job = settings.job.clone().or_else(|| JOB_VARS.iter().find_map(|v| env_var(v)));
        let job_key = job.map(|j| job_key_from_str(&j)).unwrap_or(DEFAULT_JOB_KEY);
        let interfaces = match (&settings.interfaces, env_var("MCD_IFACES")) {
            (Some(list), _) => list.clone(),
            (None, Some(list)) => list.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
            (None, None) => vec![default_route_interface()?],
        };
        JobEnv { rank, size, interfaces, port, job_key, rank_source }.validated()
    }

    fn validated(self) -> Result<JobEnv> {
        if self.size == 0 || self.rank >= self.size {
            return Err(Error::Config(format!("rank {} is not below the job size {} ({})", self.rank, self.size, self.rank_source)));
        }
        if self.size > u16::MAX as usize + 1 {
            return Err(Error::Config(format!("{} ranks: mcd numbers at most 65,536 nodes", self.size)));
        }
        if self.interfaces.is_empty() || self.interfaces.len() > MAX_RAILS {
            return Err(Error::Config(format!("MCD_IFACES names {} interfaces; give 1 to {MAX_RAILS}", self.interfaces.len())));
        }
        Ok(self)
    }
}

fn rank_from_env() -> Result<(usize, usize, &'static str)> {
    let (rank_var, size_var) = RANK_VARS.iter().copied().find(|(r, _)| env_var(r).is_some()).ok_or_else(|| {
        Error::Config(format!(
            "no rank in the environment: set MCD_RANK and MCD_SIZE, or launch with srun, mpirun or a PMI launcher (looked at {})",
            RANK_VARS.iter().map(|p| p.0).collect::<Vec<_>>().join(", ")
        ))
    })?;
    let number = |name: &str| -> Result<usize> {
        let v = env_var(name).ok_or_else(|| Error::Config(format!("{rank_var} is set but {name} is not")))?;
        v.parse().map_err(|_| Error::Config(format!("{name}={v} is not a number")))
    };
    Ok((number(rank_var)?, number(size_var)?, rank_var))
}

/// The interface of the IPv4 default route (`/proc/net/route`).
pub fn default_route_interface() -> Result<String> {
    let table = std::fs::read_to_string("/proc/net/route").map_err(|e| Error::Io { what: "reading /proc/net/route".into(), source: e })?;
    parse_default_route(&table).ok_or_else(|| Error::NoDefaultRoute { available: interface_names() })
}

fn parse_default_route(table: &str) -> Option<String> {
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.len() > 7 && f[1] == "00000000" && f[7] == "00000000").then(|| f[0].to_string())
    })
}

impl EndpointConfig {
    /// A configuration for a process of a launched job: rank, size, port,
    /// interfaces and job key from the environment ([`JobEnv`]);
    /// the nodes from `MCD_NODES` / `MCD_NODE_FILE` if set, else found on the
    /// wire ([`discover`], numbered by rank). Also reads
    /// `MCD_ETHERTYPE`, `MCD_WAIT` and `MCD_BOOTSTRAP_TIMEOUT`, and the
    /// authentication, `MCD_KEY_FILE` or `MCD_AUTH=off` (without either,
    /// [`Error::NoSecret`]): hellos are signed like every frame.
    pub fn bootstrap() -> Result<EndpointConfig> {
        EndpointConfig::bootstrap_with(&JobSettings::default(), None)
    }

    /// As [`bootstrap`](Self::bootstrap), with explicit values winning over
    /// the environment's, and `nodes` (if given) instead of discovery.
    pub fn bootstrap_with(settings: &JobSettings, nodes: Option<NodeList>) -> Result<EndpointConfig> {
        let job = JobEnv::resolve(settings)?;
        let auth = match &settings.auth {
            Some(auth) => auth.clone(),
            None => Auth::from_env()?,
        }
        .required()?;
        let discovery = DiscoveryConfig::from_env()?;
        let mut bootstrap_drops = None;
        let nodes = match nodes {
            Some(list) => list,
            None => match NodeList::from_env()? {
                Some(list) => list,
                None => {
                    let (nodes, drops) = discover_counted(&job, &discovery, &auth)?;
                    bootstrap_drops = Some(drops);
                    nodes
                }
            },
        };
        let mut config = EndpointConfig::new(job.interfaces, job.port, nodes).with_auth(auth);
        config.bootstrap_drops = bootstrap_drops;
        config.job_key = job.job_key;
        config.apply_env()?;
        Ok(config)
    }
}

/// How discovery behaves.
#[derive(Clone, Copy, Debug)]
pub struct DiscoveryConfig {
    /// Give up (naming the ranks never heard) after this long.
    pub timeout: Duration,
    /// Time between hellos.
    pub resend: Duration,
    /// How long a finished rank keeps answering the others in the
    /// background at most (it stops as soon as every rank said it is done).
    pub linger: Duration,
    /// The job's EtherType.
    pub ethertype: u16,
}

impl Default for DiscoveryConfig {
    fn default() -> DiscoveryConfig {
        DiscoveryConfig {
            timeout: Duration::from_secs(30),
            resend: Duration::from_millis(10),
            linger: Duration::from_secs(3),
            ethertype: DEFAULT_ETHERTYPE,
        }
    }
}

impl DiscoveryConfig {
    /// The defaults, with `MCD_BOOTSTRAP_TIMEOUT` (seconds) and `MCD_ETHERTYPE` applied.
    pub fn from_env() -> Result<DiscoveryConfig> {
        let mut config = DiscoveryConfig::default();
        if let Some(timeout) = env_seconds("MCD_BOOTSTRAP_TIMEOUT")? {
            config.timeout = timeout;
        }
        if let Some(t) = env_var("MCD_ETHERTYPE") {
            config.ethertype = parse_ethertype(&t)?;
        }
        Ok(config)
    }
}

/// A hello as carried in a frame's payload.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Hello {
    rank: usize,
    size: usize,
    port: Port,
    macs: Vec<MacAddr>,
    /// The sender's nonce: 64 random bits it drew for this bootstrap.
    nonce: u64,
    /// The digest of every rank's nonce as the sender knows them
    /// ([`digest_of`]; 0 until it has heard every rank): what its
    /// `heard_all` and `done` are about.
    digest: u64,
    /// The sender has heard every rank.
    heard_all: bool,
    /// The sender is done (heard all, and all said they heard all).
    done: bool,
}

const HEARD_ALL: u8 = 1;
const DONE: u8 = 2;
/// Bytes of a hello's payload before its MACs.
const HELLO_HEAD: usize = 24;

impl Hello {
    /// The hello's payload: flags (1 byte), rails (1), 2 zero bytes, the
    /// job size (4), the nonce (8), the digest (8), all big-endian, then
    /// each rail's MAC (6 each).
    fn emit(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(HELLO_HEAD + 6 * self.macs.len());
        p.push((u8::from(self.heard_all) * HEARD_ALL) | (u8::from(self.done) * DONE));
        p.push(self.macs.len() as u8);
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(&(self.size as u32).to_be_bytes());
        p.extend_from_slice(&self.nonce.to_be_bytes());
        p.extend_from_slice(&self.digest.to_be_bytes());
        for m in &self.macs {
            p.extend_from_slice(&m.0);
        }
        p
    }

    /// The hello in a frame with headers `repr` and `payload`; `None` unless
    /// it is a hello of exactly its length whose first MAC is the sender's.
    fn parse(repr: &FrameRepr, payload: &[u8]) -> Option<Hello> {
        if repr.kind != kind::HELLO || payload.len() < HELLO_HEAD {
            return None;
        }
        let rails = payload[1] as usize;
        if rails == 0 || rails > MAX_RAILS || payload.len() != HELLO_HEAD + 6 * rails {
            return None;
        }
        let macs = (0..rails).map(|r| MacAddr(payload[HELLO_HEAD + 6 * r..][..6].try_into().expect("6 bytes"))).collect::<Vec<_>>();
        if macs[0] != repr.src_mac {
            return None;
        }
        let u64_at = |at: usize| u64::from_be_bytes(payload[at..at + 8].try_into().expect("8 bytes"));
        Some(Hello {
            rank: repr.src_node as usize,
            size: u32::from_be_bytes(payload[4..8].try_into().expect("4 bytes")) as usize,
            port: repr.src_port,
            macs,
            nonce: u64_at(8),
            digest: u64_at(16),
            heard_all: payload[0] & HEARD_ALL != 0,
            done: payload[0] & DONE != 0,
        })
    }
}

/// A fresh bootstrap nonce: 64 bits from the OS's random source (never 0).
fn new_nonce() -> Result<u64> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| Error::Config(format!("the OS random source failed: {e}")))?;
    Ok(u64::from_ne_bytes(bytes) | 1)
}

/// The digest of every rank's nonce, in rank order (never 0): equal at two
/// ranks when they know the same bootstrap of every rank. Hellos are
/// authenticated, so this need only tell sets apart, not resist forgery.
fn digest_of(nonces: impl Iterator<Item = u64>) -> u64 {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    nonces.fold(0x6D63_645F_6865_6C6F, |h, n| mix(h ^ mix(n))) | 1
}

/// This process's bootstraps so far, per job key (see the module's
/// *Rounds*).
static ROUNDS: std::sync::Mutex<BTreeMap<u32, u32>> = std::sync::Mutex::new(BTreeMap::new());

/// The round of a new bootstrap of the job with key `job_key` in this
/// process: 1 for the first, then 2, ...
fn next_round(job_key: u32) -> u32 {
    let mut rounds = ROUNDS.lock().unwrap_or_else(|e| e.into_inner());
    let round = rounds.entry(job_key).or_insert(0);
    *round = round.wrapping_add(1);
    *round
}

/// The bootstrap socket on rail 0, for one round of the job's bootstrap.
struct HelloSocket {
    socket: PacketSocket,
    mac: MacAddr,
    ethertype: u16,
    job_key: u32,
    /// The round this socket's hellos belong to (their `seq`).
    round: u32,
    frame: Vec<u8>,
    buf: Vec<u8>,
    /// Signs and verifies hellos (`None`: authentication off).
    key: Option<FrameKey>,
    /// The hellos' counter.
    counter: Counter,
    /// Per rank, the counters of its hellos seen, per session.
    windows: Vec<SenderWindows>,
    /// Frames dropped, for the message of a bootstrap that times out, and
    /// for the endpoint's [`crate::Stats`] after one that succeeds (shared
    /// with the lingering thread, which goes on counting: review rev28,
    /// finding 1).
    dropped: Arc<BootstrapDrops>,
}

impl BootstrapDrops {
    /// What a timed-out bootstrap should say about these drops ("" if none).
    fn explain(&self) -> String {
        let [bad_version, auth_mismatch, bad_tag, replayed] =
            [&self.bad_version, &self.auth_mismatch, &self.bad_tag, &self.replayed].map(|c| c.load(Relaxed));
        let mut parts = Vec::new();
        if bad_version > 0 {
            parts.push(format!(
                "{} hello(s) of another mcd wire version (this build speaks {}; run the same mcd everywhere)",
                bad_version,
                crate::wire::VERSION
            ));
        }
        if auth_mismatch > 0 {
            parts.push(format!("{} hello(s) signed where this rank is not or the other way round (MCD_AUTH=off on some ranks only?)", auth_mismatch));
        }
        if bad_tag > 0 {
            parts.push(format!(
                "{} hello(s) whose tag failed: sent with another secret (every rank must read the same MCD_KEY_FILE) or forged",
                bad_tag
            ));
        }
        if replayed > 0 {
            parts.push(format!(
                "{} hello(s) as replays (seen before, or older than their sender's newer hellos: recorded and sent again, or \
                 two processes with one rank)",
                replayed
            ));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("; dropped {}", parts.join(", "))
        }
    }
}

impl HelloSocket {
    fn open(interface: &str, job: &JobEnv, ethertype: u16, round: u32, auth: &Auth) -> Result<HelloSocket> {
        let (port, job_key) = (job.port, job.job_key);
        let info = lookup_interface(interface)?;
        let on = |what: &str| format!("{what} on {interface} (bootstrap)");
        let socket = PacketSocket::open().map_err(|e| Error::os("opening an AF_PACKET socket", e))?;
        let groups = [BOOTSTRAP_GROUP.0];
        // Ranks sharing this NIC are heard only as this host's outgoing frames.
        // Hellos only: the barrier frames to this port would otherwise be
        // copied here too, while the socket lingers after discovery.
        let program =
            filter::build(&FilterSpec { ethertype, job_key, mac: info.mac, port, groups: &groups, accept_outgoing: true, kind: Some(kind::HELLO) });
        socket.attach_filter(&program).map_err(|e| Error::os(on("attaching the BPF filter"), e))?;
        socket
            .add_membership(info.index, MacAddr::mcd_group(job_key, BOOTSTRAP_GROUP).0)
            .map_err(|e| Error::os(on("joining the bootstrap group"), e))?;
        socket.bind(info.index, sys::ALL_PROTOCOLS).map_err(|e| Error::os(on("binding"), e))?;
        Ok(HelloSocket {
            socket,
            mac: info.mac,
            ethertype,
            job_key,
            round,
            frame: Vec::new(),
            buf: vec![0u8; 2048],
            // Hellos go to the bootstrap group only: its key on rail 0.
            key: auth.secret().map(|secret| FrameKey::for_destination(secret, 0, MacAddr::mcd_group(job_key, BOOTSTRAP_GROUP))),
            counter: Counter::new()?,
            windows: vec![SenderWindows::default(); job.size],
            dropped: Arc::default(),
        })
    }

    fn send(&mut self, hello: &Hello) -> Result<()> {
        let payload = hello.emit();
        let repr = FrameRepr {
            dst_mac: MacAddr::mcd_group(self.job_key, BOOTSTRAP_GROUP),
            src_mac: self.mac,
            ethertype: self.ethertype,
            kind: kind::HELLO,
            dst_port: 0,
            src_port: hello.port,
            src_node: hello.rank as u16,
            payload_len: payload.len(),
            job_key: self.job_key,
            seq: self.round,
            authenticated: self.key.is_some(),
        };
        self.frame.resize(repr.frame_len(), 0);
        let mut frame = Frame::new_unchecked(&mut self.frame[..]);
        repr.emit(&mut frame);
        frame.payload_mut().copy_from_slice(&payload);
        if let Some(key) = &self.key {
            key.sign(&mut self.frame, self.counter.take());
        }
        self.socket.send(&self.frame).map_err(|e| Error::os("sending a bootstrap hello", e)).map(drop)
    }

    /// Sleeps until a frame waits or `timeout` has passed.
    fn wait(&self, timeout: Duration) -> Result<()> {
        sys::poll_readable(&[self.socket.raw_fd()], Some(timeout)).map_err(|e| Error::os("waiting for bootstrap hellos", e)).map(drop)
    }

    /// The next hello from another rank, if one waits.
    fn try_recv(&mut self, me: usize) -> Result<Option<Hello>> {
        loop {
            let Some((len, kind)) = self.socket.try_recv(&mut self.buf).map_err(|e| Error::os("receiving bootstrap hellos", e))? else {
                return Ok(None);
            };
            if kind == pkttype::OTHERHOST as u8 {
                continue;
            }
            let Ok(view) = Frame::new_checked(&self.buf[..len]) else { continue };
            let repr = match FrameRepr::parse(&view, self.ethertype) {
                Ok(repr) => repr,
                Err(crate::wire::WireError::BadVersion(_)) => {
                    self.dropped.bad_version.fetch_add(1, Relaxed);
                    continue;
                }
                Err(_) => continue,
            };
            // Authentication first, as in the endpoint: nothing else of an
            // unverified frame is looked at.
            if repr.authenticated != self.key.is_some() {
                self.dropped.auth_mismatch.fetch_add(1, Relaxed);
                continue;
            }
            let counter = match &self.key {
                Some(key) => match key.verify(&view) {
                    Some(counter) => Some(counter),
                    None => {
                        self.dropped.bad_tag.fetch_add(1, Relaxed);
                        continue;
                    }
                },
                None => None,
            };
            if repr.job_key != self.job_key || repr.src_node as usize == me || repr.seq != self.round {
                continue;
            }
            if let Some(c) = counter {
                let Some(window) = self.windows.get_mut(repr.src_node as usize) else { continue };
                if !window.check(c) {
                    self.dropped.replayed.fetch_add(1, Relaxed);
                    continue;
                }
                window.record(c);
            }
            if let Some(hello) = Hello::parse(&repr, view.payload()) {
                return Ok(Some(hello));
            }
        }
    }
}

/// What this rank knows of another rank: its address, and which of its
/// bootstraps (nonce) that address came with.
#[derive(Clone, Debug)]
struct Peer {
    addr: NodeAddr,
    nonce: u64,
    /// A hello with this nonce carried the digest this rank has with it:
    /// its sender heard this rank's fresh nonce (see the module's *Run binding*).
    proven: bool,
}

/// The state of one rank's discovery (see the module's *Run binding*).
struct Discovery {
    me: Hello,
    heard: BTreeMap<usize, Peer>,
    /// Per rank, a proven nonce another proven one replaced: if it proves
    /// itself again, two live processes claim that rank.
    superseded: BTreeMap<usize, u64>,
    /// Per rank, the digest its last "heard all" was about (0: none); this
    /// rank's own is its digest once it heard everyone.
    heard_all: Vec<u64>,
    /// Per rank, the digest its "done" was about (0: none).
    finished: Vec<u64>,
    /// Hellos dropped here, for a timeout's message.
    stale: StaleHellos,
}

/// Hellos [`Discovery`] dropped, for the message of a bootstrap that times out.
#[derive(Clone, Copy, Debug, Default)]
struct StaleHellos {
    /// Of an older bootstrap of a rank than the one known.
    older: u64,
    /// Claiming "heard all" about another set of bootstraps than this rank's.
    other_digest: u64,
    /// Saying the job has another size, and the last such (rank, size).
    other_size: u64,
    last_other_size: Option<(usize, usize)>,
}

impl StaleHellos {
    fn explain(&self) -> String {
        let mut parts = Vec::new();
        if self.older > 0 {
            parts.push(format!("{} hello(s) of an earlier bootstrap of their rank (replayed, or a rank restarted)", self.older));
        }
        if self.other_digest > 0 {
            parts.push(format!(
                "{} hello(s) claiming to have heard another set of ranks' bootstraps (an earlier run's, replayed; or ranks \
                 restarted)",
                self.other_digest
            ));
        }
        if let Some((rank, size)) = self.last_other_size {
            parts.push(format!(
                "{} hello(s) saying the job has another size (rank {rank}: {size} ranks): same job key for two jobs? (set MCD_JOB)",
                self.other_size
            ));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("; ignored {}", parts.join(", "))
        }
    }
}

impl Discovery {
    fn new(me: Hello) -> Discovery {
        let mut heard = BTreeMap::new();
        heard.insert(me.rank, Peer { addr: NodeAddr { macs: me.macs.clone(), port: me.port }, nonce: me.nonce, proven: true });
        let (heard_all, finished) = (vec![0; me.size], vec![0; me.size]);
        let mut d = Discovery { me, heard, superseded: BTreeMap::new(), heard_all, finished, stale: StaleHellos::default() };
        d.update_digest();
        d
    }

    /// This rank's digest and "heard all", from the ranks heard.
    fn update_digest(&mut self) {
        let all = self.heard.len() == self.me.size;
        self.me.digest = if all { digest_of(self.heard.values().map(|p| p.nonce)) } else { 0 };
        self.me.heard_all = all;
        self.heard_all[self.me.rank] = self.me.digest;
        if self.me.done {
            self.finished[self.me.rank] = self.me.digest;
        }
    }

    /// The digest this rank would have with `nonce` in `rank`'s place (0
    /// unless every other rank is heard).
    fn digest_with(&self, rank: usize, nonce: u64) -> u64 {
        let mut nonces = Vec::with_capacity(self.me.size);
        for r in 0..self.me.size {
            match self.heard.get(&r) {
                _ if r == rank => nonces.push(nonce),
                Some(p) => nonces.push(p.nonce),
                None => return 0,
            }
        }
        digest_of(nonces.into_iter())
    }

    /// Takes a hello.
    fn take(&mut self, hello: Hello) -> Result<()> {
        if hello.size != self.me.size || hello.rank >= self.me.size {
            // Refused at the timeout, not now: it may be a replay of another run's.
            self.stale.other_size += 1;
            self.stale.last_other_size = Some((hello.rank, hello.size));
            return Ok(());
        }
        if hello.rank == self.me.rank {
            // This rank's own number with another nonce: not this process.
            self.stale.older += 1;
            return Ok(());
        }
        let addr = NodeAddr { macs: hello.macs.clone(), port: hello.port };
        match self.heard.get_mut(&hello.rank) {
            Some(known) if known.nonce == hello.nonce => {
                if known.addr.macs[0] != addr.macs[0] || known.addr.port != addr.port {
                    return Err(Error::Config(format!(
                        "rank {} is claimed by {} port {} and by {} port {}: two processes with one rank, or two jobs with one key",
                        hello.rank, known.addr.macs[0], known.addr.port, addr.macs[0], addr.port
                    )));
                }
                known.proven |= hello.digest != 0 && hello.digest == self.me.digest;
            }
            Some(known) => {
                let (known_nonce, known_proven) = (known.nonce, known.proven);
                let proves = hello.digest != 0 && hello.digest == self.digest_with(hello.rank, hello.nonce);
                if proves && self.superseded.get(&hello.rank) == Some(&hello.nonce) {
                    return Err(Error::Config(format!(
                        "rank {} is claimed by two processes at once ({} port {} and {} port {}): two processes with one rank, or two jobs with one key",
                        hello.rank, self.heard[&hello.rank].addr.macs[0], self.heard[&hello.rank].addr.port, addr.macs[0], addr.port
                    )));
                }
                if known_proven && !proves {
                    // The live bootstrap of that rank is known: this is an
                    // earlier one (replayed, or the rank restarted and this
                    // is its earlier life's).
                    self.stale.older += 1;
                    return Ok(());
                }
                if known_proven {
                    self.superseded.insert(hello.rank, known_nonce);
                }
                // Another bootstrap of that rank: the proven one, or (none
                // proven yet) the one heard last. What its rank claimed
                // was about the other; claims stay, with their digests.
                self.heard.insert(hello.rank, Peer { addr, nonce: hello.nonce, proven: proves });
            }
            None => {
                let proves = hello.digest != 0 && hello.digest == self.digest_with(hello.rank, hello.nonce);
                self.heard.insert(hello.rank, Peer { addr, nonce: hello.nonce, proven: proves });
            }
        }
        self.update_digest();
        if hello.heard_all {
            self.heard_all[hello.rank] = hello.digest;
        }
        if hello.done {
            self.finished[hello.rank] = hello.digest;
        }
        if (hello.heard_all || hello.done) && self.me.digest != 0 && hello.digest != self.me.digest {
            self.stale.other_digest += 1;
        }
        Ok(())
    }

    /// Every rank heard every rank, about the same bootstraps as this one.
    fn done(&self) -> bool {
        self.me.digest != 0 && self.heard_all.iter().all(|&d| d == self.me.digest)
    }

    /// Every rank is done: none needs this one's hellos any more.
    fn everyone_finished(&self) -> bool {
        self.me.digest != 0 && self.finished.iter().all(|&d| d == self.me.digest)
    }

    fn never_heard(&self) -> Vec<usize> {
        (0..self.me.size).filter(|r| !self.heard.contains_key(r)).collect()
    }

    fn not_finished(&self) -> Vec<usize> {
        (0..self.me.size).filter(|&r| (self.me.digest == 0 || self.heard_all[r] != self.me.digest) && self.heard.contains_key(&r)).collect()
    }

    /// The node list, numbered by rank (every rank heard).
    fn nodes(&self) -> Result<NodeList> {
        NodeList::new(self.heard.values().map(|p| p.addr.clone()).collect())
    }
}

fn ranks_text(ranks: &[usize]) -> String {
    const SHOWN: usize = 32;
    let mut s = ranks.iter().take(SHOWN).map(|r| r.to_string()).collect::<Vec<_>>().join(", ");
    if ranks.len() > SHOWN {
        s.push_str(&format!(" and {} more", ranks.len() - SHOWN));
    }
    s
}

/// Finds the job's other ranks on rail 0 and returns the node list, numbered
/// by rank. Fails after `config.timeout` naming the ranks never heard.
///
/// Hellos are signed and verified under `auth` (which must not be
/// [`Auth::Unset`]); a rank with another secret is never heard, and the
/// timeout's error counts the hellos dropped for their tag or version.
pub fn discover(job: &JobEnv, config: &DiscoveryConfig, auth: &Auth) -> Result<NodeList> {
    discover_counted(job, config, auth).map(|(nodes, _)| nodes)
}

/// As [`discover`], with the hellos it drops (counted on by the thread
/// that lingers after it, answering late ranks).
pub fn discover_counted(job: &JobEnv, config: &DiscoveryConfig, auth: &Auth) -> Result<(NodeList, Arc<BootstrapDrops>)> {
    let auth = auth.clone().required()?;
    // First, so that a bootstrap that fails still counts as one everywhere.
    let round = next_round(job.job_key);
    let macs = job.interfaces.iter().map(|name| Ok(lookup_interface(name)?.mac)).collect::<Result<Vec<_>>>()?;
    let nonce = new_nonce()?;
    let me = Hello { rank: job.rank, size: job.size, port: job.port, macs, nonce, digest: 0, heard_all: job.size == 1, done: false };
    let mut state = Discovery::new(me);
    if job.size == 1 {
        return Ok((state.nodes()?, Arc::default()));
    }
    let mut socket = HelloSocket::open(&job.interfaces[0], job, config.ethertype, round, &auth)?;
    let start = Instant::now();
    let mut next_send = start;
    // Resends are spread a little so that ranks started together do not collide.
    let jitter = Duration::from_micros((job.rank as u64 * 7919) % 1000);
    loop {
        let now = Instant::now();
        if now >= next_send {
            socket.send(&state.me)?;
            next_send = now + config.resend + jitter;
        }
        while let Some(hello) = socket.try_recv(job.rank)? {
            state.take(hello)?;
        }
        if state.done() {
            break;
        }
        if now.duration_since(start) > config.timeout {
            let never = state.never_heard();
            let waiting = state.not_finished();
            let mut msg = format!("rank {} of {} (job key {:#010x}, on {}): ", job.rank, job.size, job.job_key, job.interfaces[0]);
            if !never.is_empty() {
                msg.push_str(&format!("never heard from rank(s) {}", ranks_text(&never)));
            } else {
                msg.push_str(&format!("heard every rank, but rank(s) {} never said they had heard everyone", ranks_text(&waiting)));
            }
            msg.push_str(&format!(
                " within {:.1} s (bootstrap round {round} of this job in this process); are they running with the same MCD_JOB/SLURM_JOB_ID on this Ethernet segment, and have they bootstrapped as many times? (MCD_BOOTSTRAP_TIMEOUT sets the limit){}{}",
                config.timeout.as_secs_f64(),
                socket.dropped.explain(),
                state.stale.explain()
            ));
            return Err(Error::Bootstrap(msg));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    state.me.done = true;
    state.finished[state.me.rank] = state.me.digest;
    socket.send(&state.me)?;
    let nodes = state.nodes()?;
    let drops = socket.dropped.clone();
    if state.everyone_finished() {
        return Ok((nodes, drops));
    }
    // Stay behind, answering ranks that are not done yet, without holding the
    // caller up: asleep on the socket (which takes this round's hellos only),
    // until every rank has said it is done or the linger is over.
    let linger = config.linger;
    let resend = config.resend;
    std::thread::Builder::new()
        .name("mcd-bootstrap-linger".into())
        .spawn(move || {
            let until = Instant::now() + linger;
            let mut last_answer = Instant::now() - resend;
            while !state.everyone_finished() {
                let now = Instant::now();
                if now >= until || socket.wait(until - now).is_err() {
                    return;
                }
                loop {
                    match socket.try_recv(state.me.rank) {
                        Ok(Some(h)) => {
                            let late = !h.done;
                            if state.take(h).is_err() {
                                return;
                            }
                            if late && last_answer.elapsed() >= resend / 4 {
                                let _ = socket.send(&state.me);
                                last_answer = Instant::now();
                            }
                        }
                        Ok(None) => break,
                        Err(_) => return,
                    }
                }
            }
        })
        .map_err(|e| Error::Io { what: "starting the bootstrap linger thread".into(), source: e })?;
    Ok((nodes, drops))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rank `rank`'s hello of the bootstrap with nonce `nonce`, knowing nothing yet.
    fn hello(rank: usize, size: usize, nonce: u64) -> Hello {
        Hello { rank, size, port: 0, macs: vec![MacAddr([2, 0, 0, 0, 0, rank as u8])], nonce, digest: 0, heard_all: false, done: false }
    }

    /// The same, having heard the bootstraps `nonces` (every rank's), done or not.
    fn claim(rank: usize, nonces: &[u64], done: bool) -> Hello {
        let mut h = hello(rank, nonces.len(), nonces[rank]);
        h.digest = digest_of(nonces.iter().copied());
        h.heard_all = true;
        h.done = done;
        h
    }

    #[test]
    fn hellos_round_trip_through_frames() {
        let h = Hello {
            rank: 3,
            size: 8,
            port: 2,
            macs: vec![MacAddr([2, 1, 2, 3, 4, 5]), MacAddr([2, 1, 2, 3, 4, 6])],
            nonce: 0x0102_0304_0506_0708,
            digest: 0x1112_1314_1516_1718,
            heard_all: true,
            done: false,
        };
        let payload = h.emit();
        let repr = FrameRepr {
            dst_mac: MacAddr::mcd_group(7, BOOTSTRAP_GROUP),
            src_mac: h.macs[0],
            ethertype: DEFAULT_ETHERTYPE,
            kind: kind::HELLO,
            dst_port: 0,
            src_port: 2,
            src_node: 3,
            payload_len: payload.len(),
            job_key: 7,
            seq: 0,
            authenticated: false,
        };
        assert_eq!(Hello::parse(&repr, &payload), Some(h.clone()));
        // Truncated, or a first MAC that is not the sender's: dropped.
        assert_eq!(Hello::parse(&repr, &payload[..10]), None);
        assert_eq!(Hello::parse(&repr, &payload[..30]), None);
        assert_eq!(Hello::parse(&repr, &[payload.as_slice(), &[0]].concat()), None, "a byte too many");
        assert_eq!(payload.len(), 24 + 6 * 2);
        assert_eq!(&payload[4..8], &8u32.to_be_bytes(), "the size, big-endian");
        assert_eq!(&payload[8..16], &h.nonce.to_be_bytes(), "the nonce");
        assert_eq!(&payload[16..24], &h.digest.to_be_bytes(), "the digest");
        let liar = FrameRepr { src_mac: MacAddr([2, 9, 9, 9, 9, 9]), ..repr };
        assert_eq!(Hello::parse(&liar, &payload), None);
    }

    #[test]
    fn done_needs_every_rank_heard_and_every_rank_having_heard_all() {
        let n = [10, 11, 12];
        let mut d = Discovery::new(hello(0, 3, n[0]));
        d.take(hello(1, 3, n[1])).unwrap();
        assert!(!d.done());
        assert_eq!(d.never_heard(), vec![2]);
        d.take(claim(2, &n, false)).unwrap();
        assert!(d.me.heard_all, "heard everyone now");
        assert_eq!(d.me.digest, digest_of(n.iter().copied()));
        assert!(!d.done(), "rank 1 has not said it heard all");
        assert_eq!(d.not_finished(), vec![1]);
        d.take(claim(1, &n, false)).unwrap();
        assert!(d.done());
        assert!(!d.everyone_finished());
        d.me.done = true;
        d.finished[0] = d.me.digest;
        d.take(claim(1, &n, true)).unwrap();
        d.take(claim(2, &n, true)).unwrap();
        assert!(d.everyone_finished());
        let list = d.nodes().unwrap();
        assert_eq!(list.get(2).unwrap().macs[0], MacAddr([2, 0, 0, 0, 0, 2]));
    }

    #[test]
    fn hellos_of_an_earlier_run_never_end_discovery() {
        // Finding 2 of the review of issue 27: rank 1's hellos recorded in
        // run 1 (nonces 1 and 2), replayed into run 2 (rank 0's nonce 3)
        // before rank 1 of run 2 speaks.
        let old = [1, 2];
        let mut d = Discovery::new(hello(0, 2, 3));
        d.take(hello(1, 2, old[1])).unwrap();
        d.take(claim(1, &old, false)).unwrap();
        d.take(claim(1, &old, true)).unwrap();
        assert!(d.me.heard_all, "rank 0 heard a rank 1 (the replayed one)");
        assert!(!d.done() && !d.everyone_finished(), "but its claims were about run 1's rank 0: not counted");
        assert!(!d.heard[&1].proven);
        assert_eq!(d.stale.other_digest, 2);
        // Rank 1 of run 2: heard last, it stands for rank 1 (nothing proven yet).
        let new = [3, 4];
        d.take(hello(1, 2, new[1])).unwrap();
        assert_eq!(d.heard[&1].nonce, 4);
        assert!(!d.done());
        // Its claim carries rank 0's fresh nonce: proven, and counted.
        d.take(claim(1, &new, true)).unwrap();
        assert!(d.heard[&1].proven);
        assert!(d.done() && d.finished[1] == d.me.digest);
        // A replay arriving after the live rank proved itself is ignored and counted.
        d.take(claim(1, &old, true)).unwrap();
        d.take(hello(1, 2, old[1])).unwrap();
        assert_eq!((d.heard[&1].nonce, d.stale.older), (4, 2), "an earlier bootstrap of rank 1: ignored, counted");
        assert!(d.done());
        assert!(d.stale.explain().contains("2 hello(s) of an earlier bootstrap"), "{}", d.stale.explain());
    }

    #[test]
    fn rev27_a_replayed_hello_from_a_host_with_a_clock_ahead_never_displaces_the_live_rank() {
        // Review of issue 27 (rev27), finding 2. The README said: "a
        // replayed hello can at worst stand for its rank until that rank's
        // own first hello arrives". Not when rank 1 of the earlier run (same
        // key file) ran on a host whose clock was ahead: hello counters were
        // each host's nanoseconds, and "the newer bootstrap" was the one
        // with the larger counter, so the replay displaced the live rank for
        // good (and its window dropped the live hellos as too old). Now a
        // counter is a session (random per hello socket) and a number in
        // it, sessions are never compared, and the live bootstrap is told
        // by proof (its claim covers rank 0's fresh nonce). The replay's
        // session is numerically far above the live one's here.
        let (old, new) = ([1, 2], [3, 4]);
        let replayed_counter = (0xFFFF_0000u64 << crate::auth::SESSION_SHIFT) | 4_000_000;
        let live_counter = 0x0000_1234u64 << crate::auth::SESSION_SHIFT;
        // The hello socket's windows (as in `HelloSocket::try_recv`): the
        // replay first, then the live rank's hellos.
        let mut windows = SenderWindows::default();
        let mut d = Discovery::new(hello(0, 2, 3));
        let mut deliver = |d: &mut Discovery, h: Hello, c: u64| {
            if windows.check(c) {
                windows.record(c);
                d.take(h).unwrap();
            }
        };
        deliver(&mut d, claim(1, &old, true), replayed_counter);
        for i in 0..10 {
            deliver(&mut d, hello(1, 2, new[1]), live_counter + 2 * i + 1);
            deliver(&mut d, claim(1, &new, true), live_counter + 2 * i + 2);
            // The replay again, and again: one window per session takes it once.
            deliver(&mut d, claim(1, &old, true), replayed_counter);
        }
        assert_eq!(d.heard[&1].nonce, new[1], "rank 1 is the live one, not the replay ({})", d.stale.explain());
        assert!(d.done(), "the live rank 1 said it heard everyone");
    }

    #[test]
    fn a_replay_between_the_live_hellos_costs_no_claim() {
        // Before rank 1's live bootstrap is proven, a replay stands for it
        // for a moment (heard last); claims are kept with their digests, so
        // what ranks 1 and 2 said about the live bootstraps counts again as
        // soon as the live rank 1 is heard again.
        let (old, live) = ([9, 8, 7], [5, 6, 7]);
        let mut d = Discovery::new(hello(0, 3, live[0]));
        d.take(hello(1, 3, live[1])).unwrap();
        d.take(claim(2, &live, false)).unwrap();
        assert!(d.heard[&2].proven);
        d.take(hello(1, 3, old[1])).unwrap(); // replayed: heard last
        assert_eq!(d.heard[&1].nonce, old[1]);
        assert!(!d.done());
        d.take(claim(1, &live, false)).unwrap();
        assert!(d.heard[&1].proven && d.done(), "rank 2's claim still counts");
        d.take(claim(1, &old, true)).unwrap(); // replayed again: ignored now
        assert!(d.done() && d.heard[&1].nonce == live[1]);
    }

    #[test]
    fn a_rank_that_bootstraps_again_replaces_its_earlier_bootstrap_once_proven() {
        let first = [5, 6, 7];
        let mut d = Discovery::new(hello(0, 3, first[0]));
        d.take(claim(1, &first, false)).unwrap();
        assert_eq!(d.heard_all[1], digest_of(first.iter().copied()), "kept, with its digest");
        assert!(!d.done(), "a claim about rank 2 while rank 0 has not heard it: not counted yet");
        d.take(claim(2, &first, false)).unwrap();
        assert!(d.done(), "rank 1's claim counts once rank 0 heard rank 2");
        // Rank 2 bootstraps again: its first hello proves nothing (it has
        // not heard anyone yet), so the proven earlier one stays...
        let second = [5, 6, 8];
        d.take(hello(2, 3, 8)).unwrap();
        assert_eq!((d.heard[&2].nonce, d.stale.older), (7, 1));
        // ...until a hello of it covers rank 0's nonce with its own.
        d.take(claim(2, &second, false)).unwrap();
        assert_eq!(d.heard[&2].nonce, 8);
        assert!(!d.done(), "rank 1's claim was about the earlier rank 2");
        d.take(claim(1, &second, false)).unwrap();
        assert!(d.done());
        // The earlier process proving itself again: two processes with one rank.
        let err = d.take(claim(2, &first, false)).unwrap_err().to_string();
        assert!(err.contains("claimed by two processes at once"), "{err}");
    }

    #[test]
    fn every_bootstrap_of_a_job_is_a_round_of_its_own() {
        // Keys no other test uses: the counter is the process's.
        let (a, b) = (0x5eed_0001, 0x5eed_0002);
        assert_eq!((next_round(a), next_round(a), next_round(b), next_round(a)), (1, 2, 1, 3));
    }

    #[test]
    fn conflicting_claims_are_errors_and_other_sizes_wait_for_the_timeout() {
        let mut d = Discovery::new(hello(0, 3, 1));
        d.take(hello(1, 3, 2)).unwrap();
        let mut imposter = hello(1, 3, 2);
        imposter.macs[0] = MacAddr([2, 7, 7, 7, 7, 7]);
        assert!(d.take(imposter).unwrap_err().to_string().contains("rank 1 is claimed by"));
        // Two live processes with one rank: both prove themselves in turn.
        d.take(hello(2, 3, 3)).unwrap();
        d.take(claim(1, &[1, 2, 3], false)).unwrap();
        d.take(claim(1, &[1, 9, 3], false)).unwrap();
        assert_eq!(d.heard[&1].nonce, 9);
        assert!(d.take(claim(1, &[1, 2, 3], false)).unwrap_err().to_string().contains("claimed by two processes at once"));
        let mut d = Discovery::new(hello(0, 3, 1));
        d.take(hello(1, 3, 2)).unwrap();
        // Another size: maybe a replay of another job's; named at the timeout.
        d.take(hello(2, 4, 3)).unwrap();
        d.take(hello(7, 8, 3)).unwrap();
        assert_eq!(d.never_heard(), vec![2]);
        assert!(d.stale.explain().contains("2 hello(s) saying the job has another size (rank 7: 8 ranks)"), "{}", d.stale.explain());
    }

    #[test]
    fn default_route_comes_from_the_route_table() {
        let table = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                     eth1\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
                     eth0\t00000000\t0100A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n";
        assert_eq!(parse_default_route(table).as_deref(), Some("eth0"));
        assert_eq!(parse_default_route("Iface\tDestination\n"), None);
    }
}
