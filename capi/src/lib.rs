//! # mcd's barrier for C (and for MPI)
//!
//! `libmcd_barrier.so` / `libmcd_barrier.a` and the header
//! `include/mcd_barrier.h`. Two layers:
//!
//! - [`Job`]: the safe Rust side — an mcd endpoint opened through the
//!   bootstrap (rank, size, interfaces and job key from the environment or
//!   from [`Settings`]; the nodes from a node list or discovered), and a
//!   barrier over it with the algorithm asked for or the one `Auto` picks;
//!   [`Group`]: a barrier over some of the job's ranks on the same endpoint
//!   ([`barriers::SharedEndpoint`]), created without discovery.
//! - the `extern "C"` functions below: null checks, C strings, error codes,
//!   and a `catch_unwind` around every call, so that nothing unwinds into C.
//!   Every error is a negative return code ([`MCD_ERR_CONFIG`] ...); the
//!   text of the last error of the calling thread is [`mcd_last_error`].
//!
//! Environment read by `mcd_init_env` (and by `mcd_init` for what its
//! parameters leave out): `MCD_KEY_FILE` (the job's secret: a file of 16
//! random bytes, mode 0600, owned by the user; the same for every rank) or
//! `MCD_AUTH=off` (unauthenticated frames, which anyone on the segment can
//! forge; without either, `mcd_init` fails with [`MCD_ERR_CONFIG`] saying so),
//! `MCD_RANK`/`MCD_SIZE` (or Slurm's, Open MPI's or
//! PMI's), `MCD_IFACES`, `MCD_PORT`, `MCD_JOB` / `SLURM_JOB_ID`,
//! `MCD_NODES` / `MCD_NODE_FILE`, `MCD_ALGORITHM` (default `auto`),
//! `MCD_LOGP` (`o_s,o_r,g,L` in µs, for `auto`), `MCD_WAIT`,
//! `MCD_BOOTSTRAP_TIMEOUT`, `MCD_BARRIER_TIMEOUT` (seconds a peer may stay
//! silent, though probed, before it is taken for dead; default 10; a live
//! peer is waited for as long as it takes), `MCD_BARRIER_DEADLINE` (seconds
//! after which one barrier call gives up even on live peers; default none),
//! `MCD_JOIN_TIMEOUT` (seconds a group's or job's creation waits for every
//! member; default 30),
//! `MCD_HIERARCHY` (`auto`, the default: the hierarchical barrier when some
//! host runs more than one rank and the model
//! ([`barriers::model::auto_layout`]) predicts it faster, ranks on one host
//! being the nodes with one rail-0 MAC; `on`; `off`: always flat),
//! `MCD_HIERARCHY_RELEASE` and `MCD_HOST_WAIT` (how the hierarchical
//! barrier releases a host, and how the ranks other than its leader wait:
//! see [`barriers::HostRelease`] and [`barriers::HOST_WAIT_ENV`]),

//! `MCD_COLLECTIVE_ALGORITHM` (the collectives' algorithm: see
//! `Job::collectives`, private).
#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard};

mod exchange;
mod why;

use barriers::model::LogP;
use barriers::{
    Algorithm, Barrier, BarrierConfig, BarrierError, BarrierStats, Collective, Dtype, GroupTransport, HierarchicalBarrier, Op, PreparedBarrier,
    SharedEndpoint, Transport,
};
use mcd::bootstrap::JobSettings;
use mcd::{Endpoint, EndpointConfig, NodeList};

/// Success.
pub const MCD_OK: c_int = 0;
/// A null pointer or a string that is not UTF-8, or a call out of order.
pub const MCD_ERR_ARGUMENT: c_int = -1;
/// The parameters or the environment are incomplete or inconsistent.
pub const MCD_ERR_CONFIG: c_int = -2;
/// No permission for raw sockets: grant `CAP_NET_RAW`
/// (`setcap cap_net_raw+ep PROGRAM`), or run as root.
pub const MCD_ERR_PERMISSION: c_int = -3;
/// No such interface, or no default route to find one.
pub const MCD_ERR_INTERFACE: c_int = -4;
/// The ranks did not all find each other in time.
pub const MCD_ERR_BOOTSTRAP: c_int = -5;
/// A barrier failed: a peer is silent (dead), or the deadline passed.
pub const MCD_ERR_BARRIER: c_int = -6;
/// Another system call failed.
pub const MCD_ERR_SYSTEM: c_int = -7;
/// A bug in mcd (a panic caught at the boundary).
pub const MCD_ERR_INTERNAL: c_int = -8;
/// The ranks called different collectives at once (another operation,
/// type or count, or a broadcast from another root): the call can never
/// complete, and the group's later collectives fail too.
pub const MCD_ERR_MISMATCH: c_int = -9;

/// An error: its code and its text.
#[derive(Clone, Debug)]
pub struct CError {
    /// One of the `MCD_ERR_*` codes.
    pub code: c_int,
    /// What happened and what to do.
    pub message: String,
}

impl CError {
    /// The code of an mcd error.
    fn from_mcd_code(e: &mcd::Error) -> c_int {
        match e {
            mcd::Error::NoCapability { .. } => MCD_ERR_PERMISSION,
            mcd::Error::NoSuchInterface { .. } | mcd::Error::NoDefaultRoute { .. } => MCD_ERR_INTERFACE,
            mcd::Error::Bootstrap(_) => MCD_ERR_BOOTSTRAP,
            mcd::Error::Io { .. } | mcd::Error::SendRingFull { .. } | mcd::Error::FrameRejected { .. } => MCD_ERR_SYSTEM,
            _ => MCD_ERR_CONFIG,
        }
    }
}

impl From<mcd::Error> for CError {
    fn from(e: mcd::Error) -> CError {
        CError { code: CError::from_mcd_code(&e), message: e.to_string() }
    }
}

impl From<BarrierError> for CError {
    fn from(e: BarrierError) -> CError {
        let code = match &e {
            BarrierError::CollectiveMismatch { .. } => MCD_ERR_MISMATCH,
            BarrierError::Config(_) => MCD_ERR_CONFIG,
            BarrierError::Misuse(_) => MCD_ERR_ARGUMENT,
            BarrierError::System(_) => MCD_ERR_SYSTEM,
            BarrierError::Internal(_) => MCD_ERR_INTERNAL,
            BarrierError::Transport(t) => return transport_error(t),
            _ => MCD_ERR_BARRIER,
        };
        CError { code, message: e.to_string() }
    }
}

fn config_error(message: impl Into<String>) -> CError {
    CError { code: MCD_ERR_CONFIG, message: message.into() }
}

/// What [`Job::open`] is told explicitly; `None`: from the environment.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// Rank, size, interfaces, port, job.
    pub job: JobSettings,
    /// A node-list file instead of `MCD_NODES`/`MCD_NODE_FILE` or discovery.
    pub node_file: Option<std::path::PathBuf>,
    /// An algorithm name (`auto`, `dissemination`, `tree4`, ...).
    pub algorithm: Option<String>,
    /// What `auto` takes for the busiest host: processes of the job on it
    /// (else the launcher's local size, see [`mcd::wait::local_processes_from_env`]).
    /// Every rank must pass the same, or `auto` may pick differently on
    /// different hosts (then the join refuses): the MPI layer agrees on it.
    pub local_processes: Option<usize>,
    /// What `auto` takes for the smallest host's cores (else this host's).
    pub cores: Option<usize>,
}

/// Counters of a job's barrier and endpoint.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct mcd_stats {
    /// Barriers completed.
    pub barriers: u64,
    /// Messages the barriers sent (a multicast counts once).
    pub messages_sent: u64,
    /// Frames delivered by the endpoint.
    pub frames_received: u64,
    /// Messages sent twice at once (after a loss, or asked for early).
    pub resends: u64,
    /// Messages re-sent to answer a peer.
    pub answers: u64,
    /// Frames dropped: malformed, foreign, forged, replayed, or lost to a
    /// full receive ring (the three counters below included).
    pub frames_dropped: u64,
    /// Frames dropped because their tag did not verify under the job's
    /// secret: forged, or from a process with another secret.
    pub frames_bad_tag: u64,
    /// Authenticated frames dropped as replays (seen before, or too old).
    pub frames_replayed: u64,
    /// Frames dropped because they were signed where this job is not, or
    /// not signed where it is.
    pub frames_auth_mismatch: u64,
    /// NACKs not answered because the same peer had asked for the same
    /// message less than a quarter of the retry timeout after its last
    /// answer (the per-peer limit on answers: a burst of NACKs, replayed
    /// or from a buggy member, gets a bounded number of answers).
    pub answers_suppressed: u64,
}

/// The job's barrier over all of its ranks.
#[allow(clippy::large_enum_variant)] // one per job, never moved on a hot path
pub enum WorldBarrier {
    /// Every rank on the wire.
    Flat(Barrier<GroupTransport>),
    /// Each host's ranks meet in shared memory, its leader on the wire.
    Hierarchical(Box<HierarchicalBarrier<GroupTransport>>),
}

impl WorldBarrier {
    /// One whole barrier (completes an entered one).
    pub fn wait(&mut self) -> Result<(), BarrierError> {
        match self {
            WorldBarrier::Flat(b) => b.wait(),
            WorldBarrier::Hierarchical(b) => b.wait(),
        }
    }

    /// Enters the next barrier without waiting.
    pub fn enter(&mut self) -> Result<(), BarrierError> {
        match self {
            WorldBarrier::Flat(b) => b.enter(),
            WorldBarrier::Hierarchical(b) => b.enter(),
        }
    }

    /// Progress without blocking; true once the entered barrier is complete.
    pub fn test(&mut self) -> Result<bool, BarrierError> {
        match self {
            WorldBarrier::Flat(b) => b.test(),
            WorldBarrier::Hierarchical(b) => b.test(),
        }
    }

    /// The closing barrier.
    pub fn finish(&mut self) -> Result<(), BarrierError> {
        match self {
            WorldBarrier::Flat(b) => b.finish(),
            WorldBarrier::Hierarchical(b) => b.finish(),
        }
    }

    /// This rank.
    pub fn node(&self) -> usize {
        match self {
            WorldBarrier::Flat(b) => b.node(),
            WorldBarrier::Hierarchical(b) => b.node(),
        }
    }

    /// The counters (of the leaders' barrier, on a hierarchical leader).
    pub fn stats(&self) -> BarrierStats {
        match self {
            WorldBarrier::Flat(b) => b.stats(),
            WorldBarrier::Hierarchical(b) => b.stats(),
        }
    }
}

/// A job's collectives (see [`Job::collectives`]).
#[derive(Default)]
struct Collectives {
    /// Their barrier, made at the first collective call (which every rank makes).
    barrier: Option<Barrier<GroupTransport>>,
    /// A collective's input when it is also its output (reused).
    in_place: Vec<u8>,
}

/// An open job (`mcd_job` in C): an endpoint and its barrier, the endpoint
/// shared with the job's groups. Its methods take `&self`, so that one
/// thread may wait in the job's barrier while another creates or frees
/// groups (MPI_THREAD_MULTIPLE).
pub struct Job {
    barrier: Mutex<WorldBarrier>,
    /// The collectives' barrier and buffer (see [`Job::collectives`]).
    collectives: Mutex<Collectives>,
    shared: SharedEndpoint,
    algorithm: CString,
    /// The algorithm asked for (`auto` or a name), for groups.
    asked: String,
    rank: usize,
    size: usize,
    rails: usize,
    /// What `auto` is told of the hosts, for the job and its groups.
    host: HostShape,
    closing: Closing,
}

/// What `auto` is told of the hosts: processes on the busiest, cores of the
/// smallest.
#[derive(Clone, Copy, Debug)]
struct HostShape {
    local_processes: usize,
    cores: usize,
}

/// A barrier over a group of the job's ranks (an MPI communicator, say),
/// on the job's endpoint (`mcd_group` in C): prepared (its local resources
/// in place), then joined (met its members).
pub struct Group {
    state: GroupState,
    shared: SharedEndpoint,
    closing: Closing,
    algorithm: CString,
    rank: usize,
    size: usize,
    /// The group's collectives (see [`Group::collectives`]).
    collectives: Collectives,
    /// What the group's collectives barrier is made of: the members (job
    /// ranks, in group order), the group's key, and the job's settings.
    members: Vec<usize>,
    key: u64,
    asked: String,
    rails: usize,
    host: HostShape,
}

#[allow(clippy::large_enum_variant)] // one per group, never moved on a hot path
enum GroupState {
    Prepared(Box<PreparedBarrier<GroupTransport>>),
    Joined(Barrier<GroupTransport>),
    /// Between the two, or after a failed join.
    Gone,
}

/// Groups whose closing barrier has been entered ([`Group::close`]): each
/// one's progress agent carries its closing and its farewell on (answering
/// the members until every one is done), and the job drops them once done,
/// at its next group or barrier call without waiting for any, or in
/// [`Job::finish`], all at once. So members may free their groups in any
/// order, and a free never waits.
#[derive(Clone, Default)]
struct Closing(Arc<Mutex<ClosingGroups>>);

#[derive(Default)]
struct ClosingGroups {
    groups: Vec<Barrier<GroupTransport>>,
    /// The first error of a group dropped by `reap`, for `finish_all`.
    failed: Option<CError>,
}

impl Closing {
    fn lock(&self) -> MutexGuard<'_, ClosingGroups> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add(&self, barrier: Barrier<GroupTransport>) {
        self.lock().groups.push(barrier);
    }

    /// Drops the groups that are done, waiting for none. A group whose
    /// closing failed (a member went silent) is dropped too, and its error
    /// kept for [`finish_all`](Self::finish_all).
    fn reap(&self) {
        let mut closing = self.lock();
        let ClosingGroups { groups, failed } = &mut *closing;
        groups.retain_mut(|b| match b.try_finish() {
            Ok(done) => !done,
            Err(e) => {
                failed.get_or_insert(e.into());
                false
            }
        });
    }

    /// Finishes every closing group, all at once, and `world` beside them
    /// (so a dead member costs one failure timeout, not one per group);
    /// waits as long as that takes. The first error, if any.
    fn finish_all(&self, world: &Mutex<WorldBarrier>) -> Result<(), CError> {
        let (groups, failed) = {
            let mut closing = self.lock();
            (std::mem::take(&mut closing.groups), closing.failed.take())
        };
        let results: Vec<Result<(), BarrierError>> = std::thread::scope(|scope| {
            let running: Vec<_> = groups
                .into_iter()
                .map(|mut b| std::thread::Builder::new().name("mcd-close".into()).spawn_scoped(scope, move || b.finish()))
                .collect();
            let world = world.lock().unwrap_or_else(|e| e.into_inner()).finish();
            std::iter::once(world)
                .chain(running.into_iter().map(|r| match r {
                    Ok(thread) => thread.join().unwrap_or_else(|_| Err(BarrierError::Internal("a closing thread panicked".into()))),
                    Err(e) => Err(BarrierError::System(format!("cannot start a thread to finish a group: {e}"))),
                }))
                .collect()
        });
        match failed {
            Some(e) => Err(e),
            None => results.into_iter().find_map(Result::err).map_or(Ok(()), |e| Err(e.into())),
        }
    }
}

/// The LogP parameters for `auto`: `MCD_LOGP`, or the reference machine's.
fn logp_params() -> Result<LogP, CError> {
    match mcd::config::env_var("MCD_LOGP") {
        Some(list) => LogP::parse_list(&list).map_err(|e| config_error(format!("MCD_LOGP: {e}"))),
        None => Ok(LogP::REFERENCE),
    }
}

/// The barrier configuration for `size` nodes on `rails` rails: `name`, or
/// `auto`'s pick for `host` (processes on the busiest host's cores, the
/// smallest host's cores); timeouts from the environment.
fn barrier_config(name: &str, size: usize, rails: usize, host: HostShape) -> Result<BarrierConfig, CError> {
    let mut barrier_config = if name == "auto" {
        let params = logp_params()?;
        BarrierConfig::auto_on_host(size, rails, &params, true, host.local_processes, host.cores)
    } else {
        let algorithm: Algorithm = name.parse().map_err(|e: String| config_error(format!("algorithm: {e}")))?;
        BarrierConfig::new(algorithm).rails(rails)
    };
    if let Some(failure) = mcd::config::env_seconds("MCD_BARRIER_TIMEOUT")? {
        barrier_config = barrier_config.timeouts(barrier_config.retry_timeout, failure);
    }
    if let Some(deadline) = mcd::config::env_seconds("MCD_BARRIER_DEADLINE")? {
        barrier_config = barrier_config.deadline(Some(deadline));
    }
    if let Some(join) = mcd::config::env_seconds("MCD_JOIN_TIMEOUT")? {
        barrier_config.join_timeout = join;
    }
    Ok(barrier_config)
}

/// The configuration of a job's collectives barrier (see
/// [`Job::collectives`]): the job's timeouts, and its algorithm.
fn collective_config(asked: &str, size: usize, rails: usize, host: HostShape) -> Result<BarrierConfig, CError> {
    let call = Collective::Allreduce { op: Op::Sum, dtype: Dtype::F64 };
    let named = match mcd::config::env_var("MCD_COLLECTIVE_ALGORITHM") {
        Some(name) if name != "auto" => {
            let algorithm: Algorithm = name.parse().map_err(|e: String| config_error(format!("MCD_COLLECTIVE_ALGORITHM: {e}")))?;
            if !call.runs_on(algorithm) {
                return Err(config_error(format!(
                    "MCD_COLLECTIVE_ALGORITHM: {algorithm} does not reduce (it would count contributions more than once)"
                )));
            }
            Some(algorithm)
        }
        Some(_) => None,
        None => asked.parse::<Algorithm>().ok().filter(|&a| call.runs_on(a)),
    };
    let algorithm = match named {
        Some(algorithm) => algorithm,
        None => {
            let setup = barriers::model::Setup::logp(&logp_params()?);
            barriers::model::auto_collective_on_host(size, rails, &setup, true, 8, host.local_processes, host.cores).0
        }
    };
    // The job's timeouts, from the environment.
    barrier_config(&algorithm.to_string(), size, rails, host)
}

/// A transport's error as C sees it: mcd's keeps its own code (a missing
/// capability is `MCD_ERR_PERMISSION`, not a system error).
fn transport_error(e: &barriers::TransportError) -> CError {
    match e {
        barriers::TransportError::Mcd(m) => CError { code: CError::from_mcd_code(m), message: format!("barrier transport: {m}") },
        barriers::TransportError::Invalid(_) => CError { code: MCD_ERR_ARGUMENT, message: format!("barrier transport: {e}") },
        _ => CError { code: MCD_ERR_SYSTEM, message: format!("barrier transport: {e}") },
    }
}

/// The counters `b` of a barrier, and those of the shared endpoint.
fn stats_of(b: BarrierStats, shared: &SharedEndpoint) -> Result<mcd_stats, CError> {
    let e = shared.with_endpoint(|e| e.stats())?;
    Ok(mcd_stats {
        barriers: b.completed,
        messages_sent: b.sent,
        frames_received: e.received,
        resends: b.copies,
        answers: b.answers,
        frames_dropped: e.dropped.total() + e.ring_dropped,
        frames_bad_tag: e.dropped.bad_tag,
        frames_replayed: e.dropped.replayed,
        frames_auth_mismatch: e.dropped.auth_mismatch,
        answers_suppressed: b.answers_suppressed,
    })
}

impl Job {
    /// Opens the endpoint (bootstrap) and sets up the barrier.
    pub fn open(settings: &Settings) -> Result<Job, CError> {
        let nodes = match &settings.node_file {
            Some(path) => Some(NodeList::from_file(path)?),
            None => None,
        };
        let config = EndpointConfig::bootstrap_with(&settings.job, nodes)?;
        let size = config.nodes.len();
        let rails = config.interfaces.len();
        let endpoint = Endpoint::open(config)?;
        let var = mcd::config::env_var;
        let asked = settings.algorithm.clone().or_else(|| var("MCD_ALGORITHM")).unwrap_or_else(|| "auto".into());
        let host = HostShape {
            local_processes: settings.local_processes.unwrap_or_else(mcd::wait::local_processes_from_env),
            cores: settings.cores.unwrap_or_else(mcd::host::online_cpus),
        };
        let host_list = endpoint.nodes().hosts();
        let hosts = host_list.len();
        let per_host = host_list.iter().map(Vec::len).max().unwrap_or(1);
        let hierarchical = match var("MCD_HIERARCHY").as_deref() {
            // The model's choice when some host has several ranks.
            None | Some("auto") => {
                let shm = barriers::model::ShmCosts::REFERENCE;
                let (layout, _) = barriers::model::auto_layout(hosts, per_host, host.cores, rails, &logp_params()?, true, &shm);
                hosts < size && matches!(layout, barriers::model::Layout::Hierarchical(_))
            }
            Some("on") => true,
            Some("off") => false,
            Some(other) => return Err(config_error(format!("MCD_HIERARCHY={other}: auto, on or off"))),
        };
        let shared = SharedEndpoint::new(endpoint);
        let (barrier, algorithm) = if hierarchical {
            // On the wire, one leader per host; on the cores, every process
            // of the busiest host (the ranks that wait in shared memory too):
            // from the node list, the same on every rank.
            let leaders = HostShape { local_processes: per_host.max(settings.local_processes.unwrap_or(1)), ..host };
            let barrier_config = barrier_config(&asked, hosts, rails, leaders)?;
            let name = format!("hierarchical:{}", barrier_config.algorithm);
            (WorldBarrier::Hierarchical(Box::new(HierarchicalBarrier::on_endpoint(&shared, barrier_config)?)), name)
        } else {
            let barrier_config = barrier_config(&asked, size, rails, host)?;
            let everyone: Vec<usize> = (0..size).collect();
            let transport = shared.group(&everyone).map_err(|e| transport_error(&e))?;
            (WorldBarrier::Flat(Barrier::new(transport, barrier_config)?), barrier_config.algorithm.to_string())
        };
        let algorithm = CString::new(algorithm).expect("algorithm names have no NUL");
        let rank = barrier.node();
        Ok(Job {
            barrier: Mutex::new(barrier),
            collectives: Mutex::default(),
            shared,
            algorithm,
            asked,
            rank,
            size,
            rails,
            host,
            closing: Closing::default(),
        })
    }

    /// This process's node number (its rank).
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Nodes in the job.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The algorithm's name.
    pub fn algorithm(&self) -> &CStr {
        &self.algorithm
    }

    /// The job's barrier (held while in use: a second thread's barrier call
    /// waits for the first's).
    pub fn barrier(&self) -> MutexGuard<'_, WorldBarrier> {
        self.barrier.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The counters.
    pub fn stats(&self) -> Result<mcd_stats, CError> {
        stats_of(self.barrier().stats(), &self.shared)
    }

    /// The barrier that runs the job's collectives: one of its own over
    /// every rank (its own instance and counters, so the job barrier's count
    /// is of barriers only), made at the first collective call, which every
    /// rank makes. Its algorithm: `MCD_COLLECTIVE_ALGORITHM`, else the job's
    /// if it was named and reduces, else `auto`'s pick among the algorithms
    /// that reduce ([`barriers::model::auto_collective_on_host`]).
    fn collectives<'a>(&self, state: &'a mut Collectives) -> Result<&'a mut Barrier<GroupTransport>, CError> {
        if state.barrier.is_none() {
            let everyone: Vec<usize> = (0..self.size).collect();
            let transport = self.shared.group(&everyone).map_err(|e| transport_error(&e))?;
            let config = collective_config(&self.asked, self.size, self.rails, self.host)?;
            state.barrier = Some(Barrier::new(transport, config)?);
        }
        Ok(state.barrier.as_mut().expect("made above"))
    }

    /// Runs `call` on the job: `input` (NULL: in place, from `output`) and
    /// `output` (NULL where no result is wanted) of `bytes` bytes each.
    ///
    /// # Safety
    /// `input` is NULL or readable for `bytes` bytes; `output` is NULL or
    /// writable for `bytes` bytes; they may be the same.
    unsafe fn collective(&self, call: Collective, input: *const u8, output: *mut u8, bytes: usize) -> Result<(), CError> {
        let mut state = self.collectives.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: forwarded contract.
        unsafe { run_collective(&mut state, |state| self.collectives(state), call, input, output, bytes) }
    }

    /// A barrier over the job's ranks `ranks` (this one among them), numbered
    /// in that order, on the job's endpoint: no discovery. Collective over
    /// those ranks only; ranks that share several groups must create them in
    /// the same order. [`prepare`](Self::prepare) then [`Group::join`].
    pub fn group(&self, ranks: &[usize]) -> Result<Group, CError> {
        let mut group = self.prepare(ranks, None)?;
        group.join()?;
        Ok(group)
    }

    /// The local half of [`group`](Self::group): the group's resources
    /// (routing, wake-ups, the barrier's state), no communication, so a
    /// caller can learn that every member prepared before any waits in
    /// [`Group::join`]. `key`: a number the members agreed on for this group
    /// (unique among the live groups of these ranks), letting them create
    /// their groups in any order, from several threads; `None`: keyed by
    /// creation order, as `group`. Also finishes groups closed earlier whose
    /// closing barrier is complete.
    pub fn prepare(&self, ranks: &[usize], key: Option<u64>) -> Result<Group, CError> {
        if ranks.is_empty() {
            return Err(argument("a group needs at least one rank"));
        }
        self.closing.reap();
        let transport = match key {
            Some(key) => self.shared.group_with_key(ranks, key),
            None => self.shared.group(ranks),
        }
        .map_err(|e| argument(&e.to_string()))?;
        let rank = transport.node();
        let group_key = transport.key();
        let barrier_config = barrier_config(&self.asked, ranks.len(), self.rails, self.host)?;
        let algorithm = CString::new(barrier_config.algorithm.to_string()).expect("algorithm names have no NUL");
        let prepared = PreparedBarrier::new(transport, barrier_config)?;
        Ok(Group {
            state: GroupState::Prepared(Box::new(prepared)),
            shared: self.shared.clone(),
            closing: self.closing.clone(),
            algorithm,
            rank,
            size: ranks.len(),
            collectives: Collectives::default(),
            members: ranks.to_vec(),
            key: group_key,
            asked: self.asked.clone(),
            rails: self.rails,
            host: self.host,
        })
    }

    /// Ends the job (collective): finishes every closed group (see
    /// [`Group::close`]) and the job's own closing barrier and answers, all
    /// at once.
    pub fn finish(&self) -> Result<(), CError> {
        // The collectives' barrier closes beside the groups.
        if let Some(collectives) = self.collectives.lock().unwrap_or_else(|e| e.into_inner()).barrier.take() {
            self.closing.add(collectives);
        }
        self.closing.finish_all(&self.barrier)
    }

    /// Drops the closed groups that are done (see [`Group::close`]),
    /// waiting for none.
    pub fn reap_closed_groups(&self) {
        self.closing.reap();
    }
}

/// Runs `call` on the collectives barrier `barrier` gives for `state` (made
/// at the first call): `input` (NULL: in place, from `output`) and `output`
/// (NULL where no result is wanted) of `bytes` bytes each, staged through
/// `state`'s buffer so that they may overlap.
///
/// # Safety
/// `input` is NULL or readable for `bytes` bytes; `output` is NULL or
/// writable for `bytes` bytes; they may be the same.
unsafe fn run_collective(
    state: &mut Collectives,
    barrier: impl FnOnce(&mut Collectives) -> Result<&mut Barrier<GroupTransport>, CError>,
    call: Collective,
    input: *const u8,
    output: *mut u8,
    bytes: usize,
) -> Result<(), CError> {
    if input.is_null() && output.is_null() && bytes > 0 {
        return Err(argument(&format!("{call}: both buffers are NULL")));
    }
    let mut staged = std::mem::take(&mut state.in_place);
    staged.clear();
    let from = if input.is_null() { output as *const u8 } else { input };
    if bytes > 0 {
        // SAFETY: readable for `bytes` bytes per the contract; copied,
        // so input and output may overlap.
        staged.extend_from_slice(unsafe { std::slice::from_raw_parts(from, bytes) });
    }
    let out = if output.is_null() || bytes == 0 {
        None
    } else {
        // SAFETY: writable for `bytes` bytes per the contract, and not
        // aliased by `staged` (a copy).
        Some(unsafe { std::slice::from_raw_parts_mut(output, bytes) })
    };
    let result = barrier(state).and_then(|b| Ok(b.collective(call, &staged, out)?));
    state.in_place = staged;
    result
}

impl Group {
    /// This process's rank in the group.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Ranks in the group.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Meets the group's other members (collective over them) and starts
    /// its progress agent; a no-op once joined.
    pub fn join(&mut self) -> Result<(), CError> {
        match std::mem::replace(&mut self.state, GroupState::Gone) {
            GroupState::Prepared(prepared) => {
                self.state = GroupState::Joined(prepared.join()?);
                Ok(())
            }
            joined @ GroupState::Joined(_) => {
                self.state = joined;
                Ok(())
            }
            GroupState::Gone => Err(argument("the group's join failed before: free it")),
        }
    }

    /// The barrier, once joined.
    pub fn barrier(&mut self) -> Result<&mut Barrier<GroupTransport>, CError> {
        match &mut self.state {
            GroupState::Joined(barrier) => Ok(barrier),
            GroupState::Prepared(_) => Err(argument("the group is prepared but not joined: call mcd_group_join first")),
            GroupState::Gone => Err(argument("the group's join failed: free it")),
        }
    }

    /// The counters (the endpoint's are the job's).
    pub fn stats(&mut self) -> Result<mcd_stats, CError> {
        let shared = self.shared.clone();
        stats_of(self.barrier()?.stats(), &shared)
    }

    /// Ends this node's use of the group without waiting: enters its closing
    /// barrier and hands it to the job, which finishes it once it is complete
    /// (its agent answers the members meanwhile), at the latest in
    /// [`Job::finish`]. Collective over the group, but no member waits here
    /// for another, so members may close their groups in any order. A group
    /// never joined is just dropped.
    pub fn close(mut self) -> Result<(), CError> {
        let closing = self.closing.clone();
        // The collectives' barrier closes beside the group's; a barrier that
        // cannot close (one still in progress) is dropped, and the other
        // still closes.
        let mut barriers: Vec<Barrier<GroupTransport>> = self.collectives.barrier.take().into_iter().collect();
        if let GroupState::Joined(barrier) = self.state {
            barriers.push(barrier);
        }
        let mut result = Ok(());
        for mut barrier in barriers {
            match barrier.close() {
                Ok(()) => closing.add(barrier),
                Err(e) => result = result.and(Err(e.into())),
            }
        }
        closing.reap();
        result
    }

    /// The barrier that runs the group's collectives: one of its own over
    /// the members, as the job's ([`Job::collectives`]), made at the first
    /// collective call, which every member makes, on an instance keyed by
    /// the group's key (so members may meet it in any order across their
    /// groups).
    fn collectives<'a>(&self, state: &'a mut Collectives) -> Result<&'a mut Barrier<GroupTransport>, CError> {
        if state.barrier.is_none() {
            let transport = self.shared.group_with_key(&self.members, self.key ^ COLLECTIVES_KEY).map_err(|e| transport_error(&e))?;
            let config = collective_config(&self.asked, self.size, self.rails, self.host)?;
            state.barrier = Some(Barrier::new(transport, config)?);
        }
        Ok(state.barrier.as_mut().expect("made above"))
    }

    /// Runs `call` on the group, as [`Job::collective`] on the job.
    ///
    /// # Safety
    /// As [`Job::collective`].
    unsafe fn collective(&mut self, call: Collective, input: *const u8, output: *mut u8, bytes: usize) -> Result<(), CError> {
        if !matches!(self.state, GroupState::Joined(_)) {
            return Err(argument("the group is not joined: call mcd_group_join first"));
        }
        let mut state = std::mem::take(&mut self.collectives);
        // SAFETY: forwarded contract.
        let result = unsafe { run_collective(&mut state, |state| self.collectives(state), call, input, output, bytes) };
        self.collectives = state;
        result
    }
}

/// Mixed into a group's key for its collectives' instance.
const COLLECTIVES_KEY: u64 = 0x636f_6c6c_6563_7469;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn remember(message: &str) {
    let text = CString::new(message.replace('\0', " ")).expect("NULs replaced");
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// Runs `f`, turning its error or a panic into a code and remembering the text.
fn guarded(f: impl FnOnce() -> Result<(), CError>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => MCD_OK,
        Ok(Err(e)) => {
            remember(&e.message);
            e.code
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            remember(&format!("internal error in mcd (please report): {what}"));
            MCD_ERR_INTERNAL
        }
    }
}

fn argument(message: &str) -> CError {
    CError { code: MCD_ERR_ARGUMENT, message: message.into() }
}

/// A C string argument: `None` for NULL, an error if not UTF-8.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
unsafe fn c_str(p: *const c_char, what: &str) -> Result<Option<String>, CError> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller guarantees a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map(|s| Some(s.to_string())).map_err(|_| argument(&format!("{what} is not UTF-8")))
}

/// A job handle argument.
///
/// # Safety
/// `job` is NULL or a handle from `mcd_init*` not yet finalized.
unsafe fn handle<'a>(job: *mut Job) -> Result<&'a Job, CError> {
    // SAFETY: per the caller's guarantee, a live handle (used from several
    // threads only through `&Job`, which is Sync).
    unsafe { job.as_ref() }.ok_or_else(|| argument("the job handle is NULL"))
}

/// Explicit parameters of [`mcd_init`]; [`mcd_params_default`] leaves every
/// field "from the environment".
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mcd_params {
    /// Rank, or -1: from the environment (with `size`).
    pub rank: c_int,
    /// Job size, or -1: from the environment.
    pub size: c_int,
    /// Interfaces, one per rail (`"eth0,eth1"`), or NULL (then `MCD_IFACES`,
    /// else the default route's interface).
    pub interfaces: *const c_char,
    /// A node-list file, or NULL (then `MCD_NODES`/`MCD_NODE_FILE`, else discovery).
    pub node_file: *const c_char,
    /// Job name or number, or NULL (then `MCD_JOB`/`SLURM_JOB_ID`).
    pub job: *const c_char,
    /// Algorithm name, or NULL (then `MCD_ALGORITHM`, default `auto`).
    pub algorithm: *const c_char,
    /// Port 0..=255, or -1: from the environment (default 0).
    pub port: c_int,
    /// For `auto`: the job's processes on its busiest host, or -1: the
    /// launcher's local size (`MCD_LOCAL_PROCS`, ...). Pass the same on
    /// every rank (the MPI interposer agrees on the maximum), or hosts with
    /// different counts may pick different algorithms and fail to join.
    pub local_procs: c_int,
    /// For `auto`: the cores of the job's smallest host, or -1: this host's.
    pub cpus: c_int,
    /// Authentication: [`MCD_AUTH_ENV`] (from `MCD_KEY_FILE` / `MCD_AUTH`),
    /// [`MCD_AUTH_KEY`] (the `secret` below, the same on every rank) or
    /// [`MCD_AUTH_OFF`] (unauthenticated frames).
    pub auth: c_int,
    /// The job's secret when `auth` is [`MCD_AUTH_KEY`] (e.g. from
    /// [`mcd_secret_generate`] on one rank, sent to the others over a
    /// channel of the launcher's, never over the Ethernet segment in clear).
    pub secret: [u8; MCD_SECRET_LEN],
}

/// Bytes of a job secret.
pub const MCD_SECRET_LEN: usize = 16;
const _: () =
    assert!(MCD_SECRET_LEN == mcd::auth::SECRET_LEN && MCD_EXCHANGE_KEY_LEN == exchange::KEY_LEN && MCD_WRAPPED_SECRET_LEN == exchange::WRAPPED_LEN);
/// `mcd_params::auth`: from the environment (`MCD_KEY_FILE`, `MCD_AUTH`).
pub const MCD_AUTH_ENV: c_int = 0;
/// `mcd_params::auth`: sign and verify with `mcd_params::secret`.
pub const MCD_AUTH_KEY: c_int = 1;
/// `mcd_params::auth`: no authentication (anyone on the segment can forge frames).
pub const MCD_AUTH_OFF: c_int = 2;

/// Fills `out` with a fresh job secret ([`MCD_SECRET_LEN`] bytes) from
/// the operating system's random source.
///
/// # Safety
/// `out` is NULL or points to [`MCD_SECRET_LEN`] writable bytes.
#[no_mangle]
pub unsafe extern "C" fn mcd_secret_generate(out: *mut u8) -> c_int {
    guarded(|| {
        if out.is_null() {
            return Err(argument("mcd_secret_generate: `out` is NULL"));
        }
        let secret = mcd::JobSecret::generate()?;
        // SAFETY: `out` is non-null and has MCD_SECRET_LEN writable bytes per the contract.
        unsafe { std::ptr::copy_nonoverlapping(secret.as_bytes().as_ptr(), out, MCD_SECRET_LEN) };
        Ok(())
    })
}

/// Bytes of an X25519 key (private or public) of the secret exchange.
pub const MCD_EXCHANGE_KEY_LEN: usize = 32;
/// Bytes of a job secret wrapped for one rank by [`mcd_secret_wrap`].
pub const MCD_WRAPPED_SECRET_LEN: usize = 32;

/// The job secret's exchange over a channel anyone may read (as the MPI
/// interposer does over PMPI): each rank calls this for a fresh X25519 key
/// pair, sends `public_key` to rank 0 and keeps `private_key` to itself;
/// rank 0 makes the secret ([`mcd_secret_generate`]), wraps it for each
/// rank with [`mcd_secret_wrap`] and sends every rank its wrapped copy and
/// rank 0's public key; each rank unwraps with [`mcd_secret_unwrap`].
/// A passive listener learns nothing of the secret; one who can replace
/// the public keys on the channel can (a man in the middle). Clear the
/// private key (and the secret) once done.
///
/// # Safety
/// `private_key` and `public_key` are NULL or point to
/// [`MCD_EXCHANGE_KEY_LEN`] writable bytes each.
#[no_mangle]
pub unsafe extern "C" fn mcd_secret_exchange_keypair(private_key: *mut u8, public_key: *mut u8) -> c_int {
    guarded(|| {
        if private_key.is_null() || public_key.is_null() {
            return Err(argument("mcd_secret_exchange_keypair: a key pointer is NULL"));
        }
        let (mut private, public) = exchange::keypair().map_err(exchange_error)?;
        // SAFETY: both non-null, each with MCD_EXCHANGE_KEY_LEN writable bytes per the contract.
        unsafe {
            std::ptr::copy_nonoverlapping(private.as_ptr(), private_key, MCD_EXCHANGE_KEY_LEN);
            std::ptr::copy_nonoverlapping(public.as_ptr(), public_key, MCD_EXCHANGE_KEY_LEN);
        }
        zeroize::Zeroize::zeroize(&mut private);
        Ok(())
    })
}

/// Rank 0 wraps the job's `secret` ([`MCD_SECRET_LEN`] bytes) for the rank
/// whose public key is `rank_public_key`, with rank 0's own private key,
/// into `out` ([`MCD_WRAPPED_SECRET_LEN`] bytes: the secret under a
/// one-time pad and a tag, both derived from the X25519 shared secret).
/// Fails ([`MCD_ERR_CONFIG`]) on a public key of low order.
///
/// # Safety
/// Each pointer is NULL or points to as many bytes as said above
/// (`out` writable).
#[no_mangle]
pub unsafe extern "C" fn mcd_secret_wrap(root_private_key: *const u8, rank_public_key: *const u8, secret: *const u8, out: *mut u8) -> c_int {
    guarded(|| {
        if root_private_key.is_null() || rank_public_key.is_null() || secret.is_null() || out.is_null() {
            return Err(argument("mcd_secret_wrap: a pointer is NULL"));
        }
        // SAFETY: non-null, of the lengths stated in the contract.
        let (private, public, secret) = unsafe {
            (
                &*root_private_key.cast::<[u8; MCD_EXCHANGE_KEY_LEN]>(),
                &*rank_public_key.cast::<[u8; MCD_EXCHANGE_KEY_LEN]>(),
                &*secret.cast::<[u8; MCD_SECRET_LEN]>(),
            )
        };
        let wrapped = exchange::wrap(private, public, secret).map_err(exchange_error)?;
        // SAFETY: non-null with MCD_WRAPPED_SECRET_LEN writable bytes per the contract.
        unsafe { std::ptr::copy_nonoverlapping(wrapped.as_ptr(), out, MCD_WRAPPED_SECRET_LEN) };
        Ok(())
    })
}

/// A rank unwraps what rank 0 wrapped for it ([`mcd_secret_wrap`]), with
/// its own private key and rank 0's public key, into `secret_out`
/// ([`MCD_SECRET_LEN`] bytes). Fails ([`MCD_ERR_CONFIG`], `secret_out`
/// untouched) when the tag does not verify: wrapped for another key pair,
/// or changed on the way.
///
/// # Safety
/// Each pointer is NULL or points to as many bytes as said above
/// (`secret_out` writable).
#[no_mangle]
pub unsafe extern "C" fn mcd_secret_unwrap(
    rank_private_key: *const u8,
    root_public_key: *const u8,
    wrapped: *const u8,
    secret_out: *mut u8,
) -> c_int {
    guarded(|| {
        if rank_private_key.is_null() || root_public_key.is_null() || wrapped.is_null() || secret_out.is_null() {
            return Err(argument("mcd_secret_unwrap: a pointer is NULL"));
        }
        // SAFETY: non-null, of the lengths stated in the contract.
        let (private, public, wrapped) = unsafe {
            (
                &*rank_private_key.cast::<[u8; MCD_EXCHANGE_KEY_LEN]>(),
                &*root_public_key.cast::<[u8; MCD_EXCHANGE_KEY_LEN]>(),
                &*wrapped.cast::<[u8; MCD_WRAPPED_SECRET_LEN]>(),
            )
        };
        let mut secret = exchange::unwrap(private, public, wrapped).map_err(exchange_error)?;
        // SAFETY: non-null with MCD_SECRET_LEN writable bytes per the contract.
        unsafe { std::ptr::copy_nonoverlapping(secret.as_ptr(), secret_out, MCD_SECRET_LEN) };
        zeroize::Zeroize::zeroize(&mut secret);
        Ok(())
    })
}

fn exchange_error(e: exchange::ExchangeError) -> CError {
    let code = match e {
        exchange::ExchangeError::Random(_) => MCD_ERR_SYSTEM,
        _ => MCD_ERR_CONFIG,
    };
    CError { code, message: e.to_string() }
}

/// Fills `params` with "everything from the environment".
///
/// # Safety
/// `params` is NULL or points to writable memory for an `mcd_params`.
#[no_mangle]
pub unsafe extern "C" fn mcd_params_default(params: *mut mcd_params) {
    // SAFETY: checked for NULL; writable per the contract.
    if let Some(p) = unsafe { params.as_mut() } {
        *p = mcd_params {
            rank: -1,
            size: -1,
            interfaces: std::ptr::null(),
            node_file: std::ptr::null(),
            job: std::ptr::null(),
            algorithm: std::ptr::null(),
            port: -1,
            local_procs: -1,
            cpus: -1,
            auth: MCD_AUTH_ENV,
            secret: [0; MCD_SECRET_LEN],
        };
    }
}

/// Opens a job from the environment alone and stores its handle in `*out`
/// (NULL on failure).
///
/// # Safety
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcd_init_env(out: *mut *mut Job) -> c_int {
    // SAFETY: forwarded contract; NULL params means "all from the environment".
    unsafe { mcd_init(std::ptr::null(), out) }
}

/// Opens a job with explicit `params` (NULL: all from the environment) and
/// stores its handle in `*out` (NULL on failure).
///
/// # Safety
/// `params` is NULL or a valid `mcd_params` whose strings are NULL or
/// NUL-terminated; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcd_init(params: *const mcd_params, out: *mut *mut Job) -> c_int {
    guarded(|| {
        if out.is_null() {
            return Err(argument("mcd_init: `out` is NULL"));
        }
        // SAFETY: out is non-null and writable per the contract.
        unsafe { *out = std::ptr::null_mut() };
        let mut settings = Settings::default();
        // SAFETY: NULL or a valid mcd_params per the contract.
        if let Some(p) = unsafe { params.as_ref() } {
            match (p.rank, p.size) {
                (r, s) if r >= 0 && s > 0 => settings.job.rank_size = Some((r as usize, s as usize)),
                (-1, -1) => {}
                (r, s) => return Err(config_error(format!("rank {r} and size {s}: give both (size > 0) or neither (-1)"))),
            }
            let positive = |v: c_int| usize::try_from(v).ok().filter(|&v| v > 0);
            settings.local_processes = match p.local_procs {
                -1 => None,
                v => Some(positive(v).ok_or_else(|| config_error(format!("local_procs {v} is neither positive nor -1")))?),
            };
            settings.cores = match p.cpus {
                -1 => None,
                v => Some(positive(v).ok_or_else(|| config_error(format!("cpus {v} is neither positive nor -1")))?),
            };
            settings.job.auth = match p.auth {
                MCD_AUTH_ENV => None,
                MCD_AUTH_KEY => {
                    let secret = mcd::JobSecret::from_bytes(p.secret);
                    if secret.is_all_zeros() {
                        return Err(config_error(
                            "auth is MCD_AUTH_KEY but secret is all zeros (never filled in?): make one with mcd_secret_generate on one rank and give every rank the same",
                        ));
                    }
                    Some(mcd::Auth::Key(secret))
                }
                MCD_AUTH_OFF => Some(mcd::Auth::Off),
                other => {
                    return Err(config_error(format!(
                        "auth {other} is none of MCD_AUTH_ENV ({MCD_AUTH_ENV}), MCD_AUTH_KEY ({MCD_AUTH_KEY}), MCD_AUTH_OFF ({MCD_AUTH_OFF})"
                    )))
                }
            };
            if p.port >= 0 {
                settings.job.port = Some(u8::try_from(p.port).map_err(|_| config_error(format!("port {} is not 0..=255", p.port)))?);
            }
            // SAFETY: strings are NULL or NUL-terminated per the contract.
            unsafe {
                settings.job.interfaces = c_str(p.interfaces, "interfaces")?.map(|l| l.split(',').map(|s| s.trim().to_string()).collect());
                settings.job.job = c_str(p.job, "job")?;
                settings.node_file = c_str(p.node_file, "node_file")?.map(Into::into);
                settings.algorithm = c_str(p.algorithm, "algorithm")?;
            }
        }
        let job = Box::new(Job::open(&settings)?);
        // SAFETY: as above.
        unsafe { *out = Box::into_raw(job) };
        Ok(())
    })
}

/// One barrier across the job: returns once every rank has entered it.
///
/// A job handle may be used by several threads at once (one in a barrier,
/// others creating or freeing groups); the job's own barrier serves one
/// caller at a time.
///
/// # Safety
/// `job` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn mcd_barrier(job: *mut Job) -> c_int {
    guarded(|| {
        // SAFETY: forwarded contract.
        let job = unsafe { handle(job) }?;
        job.barrier().wait()?;
        job.reap_closed_groups();
        Ok(())
    })
}

/// Enters the next barrier without waiting (split phase); complete it with
/// [`mcd_barrier_test`] or [`mcd_barrier_wait`].
///
/// # Safety
/// As [`mcd_barrier`].
#[no_mangle]
pub unsafe extern "C" fn mcd_barrier_enter(job: *mut Job) -> c_int {
    // SAFETY: forwarded contract.
    guarded(|| Ok(unsafe { handle(job) }?.barrier().enter()?))
}

/// Makes progress on the entered barrier without blocking; `*done` becomes
/// 1 once it is complete (also when none was entered), else 0.
///
/// # Safety
/// As [`mcd_barrier`]; `done` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcd_barrier_test(job: *mut Job, done: *mut c_int) -> c_int {
    guarded(|| {
        if done.is_null() {
            return Err(argument("mcd_barrier_test: `done` is NULL"));
        }
        // SAFETY: forwarded contract.
        let complete = unsafe { handle(job) }?.barrier().test()?;
        // SAFETY: non-null and writable per the contract.
        unsafe { *done = c_int::from(complete) };
        Ok(())
    })
}

/// Completes the entered barrier (enters one first if none is).
///
/// # Safety
/// As [`mcd_barrier`].
#[no_mangle]
pub unsafe extern "C" fn mcd_barrier_wait(job: *mut Job) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { mcd_barrier(job) }
}

/// An element type of [`mcd_allreduce`] and [`mcd_reduce`]: one of the
/// `MCD_INT32` ... `MCD_DOUBLE` constants (another value is an argument error).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct mcd_dtype(pub c_int);

/// `int32_t`.
pub const MCD_INT32: mcd_dtype = mcd_dtype(1);
/// `int64_t`.
pub const MCD_INT64: mcd_dtype = mcd_dtype(2);
/// `uint32_t`.
pub const MCD_UINT32: mcd_dtype = mcd_dtype(3);
/// `uint64_t`.
pub const MCD_UINT64: mcd_dtype = mcd_dtype(4);
/// `float`.
pub const MCD_FLOAT: mcd_dtype = mcd_dtype(5);
/// `double`.
pub const MCD_DOUBLE: mcd_dtype = mcd_dtype(6);

/// A reduction of [`mcd_allreduce`] and [`mcd_reduce`]: one of the
/// `MCD_SUM` ... `MCD_BXOR` constants (the bitwise ones on integers only).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct mcd_op(pub c_int);

/// Sum (integers wrap around).
pub const MCD_SUM: mcd_op = mcd_op(1);
/// Minimum.
pub const MCD_MIN: mcd_op = mcd_op(2);
/// Maximum.
pub const MCD_MAX: mcd_op = mcd_op(3);
/// Product (integers wrap around).
pub const MCD_PROD: mcd_op = mcd_op(4);
/// Bitwise and.
pub const MCD_BAND: mcd_op = mcd_op(5);
/// Bitwise or.
pub const MCD_BOR: mcd_op = mcd_op(6);
/// Bitwise exclusive or.
pub const MCD_BXOR: mcd_op = mcd_op(7);

/// The reduction `op` on `dtype`, or an argument error.
fn reduction(dtype: mcd_dtype, op: mcd_op) -> Result<(Dtype, Op), CError> {
    let d = u8::try_from(dtype.0).ok().and_then(Dtype::from_code).ok_or_else(|| argument(&format!("{} is not an mcd_dtype", dtype.0)))?;
    let o = u8::try_from(op.0).ok().and_then(Op::from_code).ok_or_else(|| argument(&format!("{} is not an mcd_op", op.0)))?;
    if !o.applies_to(d) {
        return Err(argument(&format!("{o} applies to integers only, not {d}")));
    }
    Ok((d, o))
}

/// A root argument: a rank of the job.
fn root_of(job: &Job, root: c_int) -> Result<usize, CError> {
    root_in(job.size, root)
}

/// The byte length of `count` elements of `dtype`.
fn bytes_of(count: usize, dtype: Dtype) -> Result<usize, CError> {
    count.checked_mul(dtype.size()).ok_or_else(|| argument(&format!("{count} elements: too many")))
}

/// Allreduce across the job: `recvbuf` receives `count` elements of
/// `dtype` reduced with `op` over every rank's `sendbuf`, bitwise the same
/// on every rank and in every run (the algorithm fixes the combining order,
/// whatever the arrival order; MPI does not promise this). `sendbuf` NULL
/// (or equal to `recvbuf`): in place, the input is `recvbuf`. Every rank
/// calls it with the same count, type and operation. Any length: data
/// longer than one frame goes in segments of one frame each.
///
/// # Safety
/// `job` as [`mcd_barrier`]; `sendbuf` is NULL or readable and `recvbuf`
/// writable for `count` elements.
#[no_mangle]
pub unsafe extern "C" fn mcd_allreduce(
    job: *mut Job,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    dtype: mcd_dtype,
    op: mcd_op,
) -> c_int {
    guarded(|| {
        // SAFETY: forwarded contract.
        let job = unsafe { handle(job) }?;
        let (dtype, op) = reduction(dtype, op)?;
        if recvbuf.is_null() && count > 0 {
            return Err(argument("mcd_allreduce: `recvbuf` is NULL"));
        }
        let bytes = bytes_of(count, dtype)?;
        // SAFETY: forwarded contract on the buffers.
        unsafe { job.collective(Collective::Allreduce { op, dtype }, sendbuf.cast(), recvbuf.cast(), bytes) }
    })
}

/// Reduce to `root`: as [`mcd_allreduce`], but only `root`'s `recvbuf`
/// receives the result (other ranks' may be NULL, and is not written). At
/// the root, `sendbuf` NULL (or equal to `recvbuf`) is in place.
///
/// # Safety
/// As [`mcd_allreduce`]; at ranks other than `root`, `sendbuf` is readable
/// for `count` elements and `recvbuf` is ignored.
#[no_mangle]
pub unsafe extern "C" fn mcd_reduce(
    job: *mut Job,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    dtype: mcd_dtype,
    op: mcd_op,
    root: c_int,
) -> c_int {
    guarded(|| {
        // SAFETY: forwarded contract.
        let job = unsafe { handle(job) }?;
        let (dtype, op) = reduction(dtype, op)?;
        let root = root_of(job, root)?;
        let bytes = bytes_of(count, dtype)?;
        let at_root = job.rank() == root;
        if count > 0 && ((at_root && recvbuf.is_null()) || (!at_root && sendbuf.is_null())) {
            return Err(argument(&format!("mcd_reduce: {} is NULL", if at_root { "the root's `recvbuf`" } else { "`sendbuf`" })));
        }
        let output = if at_root { recvbuf.cast() } else { std::ptr::null_mut() };
        // SAFETY: forwarded contract on the buffers.
        unsafe { job.collective(Collective::Reduce { op, dtype, root }, sendbuf.cast(), output, bytes) }
    })
}

/// Broadcast: `root`'s `bytes` bytes at `buf` into every rank's `buf`.
/// Every rank calls it with the same length and root.
///
/// # Safety
/// `job` as [`mcd_barrier`]; `buf` is readable (at the root) or writable
/// (elsewhere) for `bytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcd_bcast(job: *mut Job, buf: *mut c_void, bytes: usize, root: c_int) -> c_int {
    guarded(|| {
        // SAFETY: forwarded contract.
        let job = unsafe { handle(job) }?;
        let root = root_of(job, root)?;
        if buf.is_null() && bytes > 0 {
            return Err(argument("mcd_bcast: `buf` is NULL"));
        }
        let at_root = job.rank() == root;
        let (input, output) = if at_root { (buf as *const u8, std::ptr::null_mut()) } else { (std::ptr::null(), buf.cast()) };
        // SAFETY: forwarded contract on the buffer.
        unsafe { job.collective(Collective::Bcast { root }, input, output, bytes) }
    })
}

/// A root argument: a rank of a group of `size` ranks.
fn root_in(size: usize, root: c_int) -> Result<usize, CError> {
    usize::try_from(root).ok().filter(|&r| r < size).ok_or_else(|| argument(&format!("root {root} is not a rank of the {size} rank(s)")))
}

/// As [`mcd_allreduce`], across the group's ranks: on a barrier instance
/// of the group's own (made at the group's first collective call, which
/// every member makes), bitwise the same on every member and in every run.
///
/// # Safety
/// `group` is NULL or a live handle, not used by another thread meanwhile;
/// the buffers as for [`mcd_allreduce`].
#[no_mangle]
pub unsafe extern "C" fn mcd_group_allreduce(
    group: *mut Group,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    dtype: mcd_dtype,
    op: mcd_op,
) -> c_int {
    guarded(|| {
        // SAFETY: forwarded contract.
        let group = unsafe { group_handle(group) }?;
        let (dtype, op) = reduction(dtype, op)?;
        if recvbuf.is_null() && count > 0 {
            return Err(argument("mcd_group_allreduce: `recvbuf` is NULL"));
        }
        let bytes = bytes_of(count, dtype)?;
        // SAFETY: forwarded contract on the buffers.
        unsafe { group.collective(Collective::Allreduce { op, dtype }, sendbuf.cast(), recvbuf.cast(), bytes) }
    })
}

/// As [`mcd_reduce`], across the group's ranks, to the group's rank `root`.
///
/// # Safety
/// As [`mcd_group_allreduce`]; the buffers as for [`mcd_reduce`].
#[no_mangle]
pub unsafe extern "C" fn mcd_group_reduce(
    group: *mut Group,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    dtype: mcd_dtype,
    op: mcd_op,
    root: c_int,
) -> c_int {
    guarded(|| {
        // SAFETY: forwarded contract.
        let group = unsafe { group_handle(group) }?;
        let (dtype, op) = reduction(dtype, op)?;
        let root = root_in(group.size, root)?;
        let bytes = bytes_of(count, dtype)?;
        let at_root = group.rank == root;
        if count > 0 && ((at_root && recvbuf.is_null()) || (!at_root && sendbuf.is_null())) {
            return Err(argument(&format!("mcd_group_reduce: {} is NULL", if at_root { "the root's `recvbuf`" } else { "`sendbuf`" })));
        }
        let output = if at_root { recvbuf.cast() } else { std::ptr::null_mut() };
        // SAFETY: forwarded contract on the buffers.
        unsafe { group.collective(Collective::Reduce { op, dtype, root }, sendbuf.cast(), output, bytes) }
    })
}

/// As [`mcd_bcast`], across the group's ranks, from the group's rank `root`.
///
/// # Safety
/// As [`mcd_group_allreduce`]; `buf` as for [`mcd_bcast`].
#[no_mangle]
pub unsafe extern "C" fn mcd_group_bcast(group: *mut Group, buf: *mut c_void, bytes: usize, root: c_int) -> c_int {
    guarded(|| {
        // SAFETY: forwarded contract.
        let group = unsafe { group_handle(group) }?;
        let root = root_in(group.size, root)?;
        if buf.is_null() && bytes > 0 {
            return Err(argument("mcd_group_bcast: `buf` is NULL"));
        }
        let at_root = group.rank == root;
        let (input, output) = if at_root { (buf as *const u8, std::ptr::null_mut()) } else { (std::ptr::null(), buf.cast()) };
        // SAFETY: forwarded contract on the buffer.
        unsafe { group.collective(Collective::Bcast { root }, input, output, bytes) }
    })
}

/// A collective of [`mcd_istart`] and [`mcd_group_istart`]: one of the
/// `MCD_CALL_BARRIER` ... `MCD_CALL_BCAST` constants.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct mcd_call(pub c_int);

/// A barrier (no data).
pub const MCD_CALL_BARRIER: mcd_call = mcd_call(1);
/// An allreduce (as [`mcd_allreduce`]).
pub const MCD_CALL_ALLREDUCE: mcd_call = mcd_call(2);
/// A reduce to a root (as [`mcd_reduce`]).
pub const MCD_CALL_REDUCE: mcd_call = mcd_call(3);
/// A broadcast from a root (as [`mcd_bcast`]; the count is in bytes).
pub const MCD_CALL_BCAST: mcd_call = mcd_call(4);

/// A nonblocking collective in progress (`mcd_request` in C), from
/// [`mcd_istart`] or [`mcd_group_istart`]; completed (and freed) by
/// [`mcd_request_test`] or [`mcd_request_wait`], or given up with
/// [`mcd_request_free`].
pub struct Request {
    request: barriers::Request<GroupTransport>,
    /// The bytes of its result at this rank (0: none here).
    result_bytes: usize,
}

/// The collective `call` among `size` ranks (this one `rank`) of `count`
/// elements of `dtype` (a broadcast: bytes): its description, the bytes of
/// its input, and of its result here.
fn nonblocking_call(
    call: mcd_call,
    count: usize,
    dtype: mcd_dtype,
    op: mcd_op,
    root: c_int,
    rank: usize,
    size: usize,
) -> Result<(Collective, usize, usize), CError> {
    match call {
        MCD_CALL_BARRIER => Ok((Collective::Barrier, 0, 0)),
        MCD_CALL_ALLREDUCE => {
            let (dtype, op) = reduction(dtype, op)?;
            let bytes = bytes_of(count, dtype)?;
            Ok((Collective::Allreduce { op, dtype }, bytes, bytes))
        }
        MCD_CALL_REDUCE => {
            let (dtype, op) = reduction(dtype, op)?;
            let root = root_in(size, root)?;
            let bytes = bytes_of(count, dtype)?;
            Ok((Collective::Reduce { op, dtype, root }, bytes, if rank == root { bytes } else { 0 }))
        }
        MCD_CALL_BCAST => {
            let root = root_in(size, root)?;
            Ok((Collective::Bcast { root }, count, if rank == root { 0 } else { count }))
        }
        other => Err(argument(&format!("{} is not an mcd_call", other.0))),
    }
}

/// Starts `call` on `barrier` (this rank `rank` of `size`) with `input`,
/// and writes its request to `out`.
///
/// # Safety
/// `input` is NULL or readable for the call's input bytes; `out` is
/// writable (checked non-null by the caller).
#[allow(clippy::too_many_arguments)]
unsafe fn start_nonblocking(
    barrier: &mut Barrier<GroupTransport>,
    rank: usize,
    size: usize,
    spec: (mcd_call, usize, mcd_dtype, mcd_op, c_int),
    input: *const c_void,
    out: *mut *mut Request,
) -> Result<(), CError> {
    let (call, count, dtype, op, root) = spec;
    let (collective, bytes, result_bytes) = nonblocking_call(call, count, dtype, op, root, rank, size)?;
    // A broadcast's input matters at its root only.
    let needs_input = bytes > 0 && !matches!(collective, Collective::Bcast { root } if root != rank);
    if needs_input && input.is_null() {
        return Err(argument(&format!("{collective}: the input is NULL")));
    }
    let zeros;
    let data: &[u8] = if needs_input {
        // SAFETY: readable for `bytes` bytes per the contract.
        unsafe { std::slice::from_raw_parts(input.cast::<u8>(), bytes) }
    } else {
        zeros = vec![0u8; bytes];
        &zeros
    };
    let request = barrier.start(collective, data)?;
    // SAFETY: writable per the contract.
    unsafe { *out = Box::into_raw(Box::new(Request { request, result_bytes })) };
    Ok(())
}

/// Starts a nonblocking collective across the job (on the barrier of the
/// job's collectives, as [`mcd_allreduce`] and the others) and returns at
/// once, never waiting for another rank: `call` with `count` elements of
/// `dtype` reduced with `op` (a broadcast: `count` bytes; a barrier: no
/// data), `root` for a reduce or a broadcast. `input` (this rank's
/// elements; a broadcast's root's bytes; NULL for a barrier or a
/// broadcast's other ranks) is copied at once. `*request` receives the
/// request: complete it with [`mcd_request_test`] or [`mcd_request_wait`],
/// which write the result where the call has one (every rank for an
/// allreduce, the root for a reduce, every rank but the root for a
/// broadcast). Collectives started on the job run one after the other in
/// the order they were started (every rank starts them in the same order,
/// as it calls blocking ones), a blocking collective after the ones
/// started before it; the library's background thread carries them while
/// the program computes.
///
/// # Safety
/// `job` as [`mcd_barrier`]; `input` as above; `request` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcd_istart(
    job: *mut Job,
    call: mcd_call,
    input: *const c_void,
    count: usize,
    dtype: mcd_dtype,
    op: mcd_op,
    root: c_int,
    request: *mut *mut Request,
) -> c_int {
    guarded(|| {
        // SAFETY: forwarded contract.
        let job = unsafe { handle(job) }?;
        if request.is_null() {
            return Err(argument("mcd_istart: `request` is NULL"));
        }
        let mut state = job.collectives.lock().unwrap_or_else(|e| e.into_inner());
        let barrier = job.collectives(&mut state)?;
        // SAFETY: forwarded contract on `input` and `request`.
        unsafe { start_nonblocking(barrier, job.rank, job.size, (call, count, dtype, op, root), input, request) }
    })
}

/// As [`mcd_istart`], across the group's ranks (on the barrier of the
/// group's collectives, as [`mcd_group_allreduce`]). The group must not be
/// freed before its requests are complete (a free runs them to their end
/// first).
///
/// # Safety
/// `group` as [`mcd_group_allreduce`]; the rest as [`mcd_istart`].
#[no_mangle]
pub unsafe extern "C" fn mcd_group_istart(
    group: *mut Group,
    call: mcd_call,
    input: *const c_void,
    count: usize,
    dtype: mcd_dtype,
    op: mcd_op,
    root: c_int,
    request: *mut *mut Request,
) -> c_int {
    guarded(|| {
        // SAFETY: forwarded contract.
        let group = unsafe { group_handle(group) }?;
        if request.is_null() {
            return Err(argument("mcd_group_istart: `request` is NULL"));
        }
        if !matches!(group.state, GroupState::Joined(_)) {
            return Err(argument("the group is not joined: call mcd_group_join first"));
        }
        let mut state = std::mem::take(&mut group.collectives);
        let (rank, size) = (group.rank, group.size);
        let result = group.collectives(&mut state).and_then(|barrier| {
            // SAFETY: forwarded contract on `input` and `request`.
            unsafe { start_nonblocking(barrier, rank, size, (call, count, dtype, op, root), input, request) }
        });
        group.collectives = state;
        result
    })
}

/// A request argument.
///
/// # Safety
/// `request` is NULL or a live request.
unsafe fn request_handle<'a>(request: *mut Request) -> Result<&'a mut Request, CError> {
    // SAFETY: per the caller's guarantee, a live request used by one thread.
    unsafe { request.as_mut() }.ok_or_else(|| argument("the request is NULL"))
}

/// The result buffer of `request`: `out` for its result bytes, if it has a
/// result here and `out` is given.
///
/// # Safety
/// `out` is NULL or writable for the request's result bytes.
unsafe fn result_buffer<'a>(request: &Request, out: *mut c_void) -> Option<&'a mut [u8]> {
    if request.result_bytes == 0 || out.is_null() {
        return None;
    }
    // SAFETY: writable for the result bytes per the contract.
    Some(unsafe { std::slice::from_raw_parts_mut(out.cast::<u8>(), request.result_bytes) })
}

/// Progress on `request` without blocking: `*done` becomes 1 once it is
/// complete (its result, where it has one here, written to `out`: as many
/// bytes as its input), and the request is freed; else 0. On an error
/// (the collective failed: a peer is dead, the ranks called different
/// collectives...) the request is freed too.
///
/// # Safety
/// `request` is NULL or a live request (not used by another thread
/// meanwhile); `out` is NULL or writable for the result; `done` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn mcd_request_test(request: *mut Request, out: *mut c_void, done: *mut c_int) -> c_int {
    guarded(|| {
        if done.is_null() {
            return Err(argument("mcd_request_test: `done` is NULL"));
        }
        // SAFETY: forwarded contract.
        let r = unsafe { request_handle(request) }?;
        // SAFETY: forwarded contract on `out`.
        let buffer = unsafe { result_buffer(r, out) };
        let outcome = r.request.test(buffer);
        let complete = matches!(outcome, Ok(true));
        if outcome.is_err() || complete {
            // SAFETY: from Box::into_raw in mcd_istart; not used again.
            drop(unsafe { Box::from_raw(request) });
        }
        // SAFETY: non-null and writable per the contract.
        unsafe { *done = c_int::from(complete) };
        outcome.map(|_| ()).map_err(CError::from)
    })
}

/// Completes `request` (waits for live peers as long as they take; fails
/// as the blocking collective would) and frees it; its result, where it
/// has one here, into `out`.
///
/// # Safety
/// As [`mcd_request_test`].
#[no_mangle]
pub unsafe extern "C" fn mcd_request_wait(request: *mut Request, out: *mut c_void) -> c_int {
    guarded(|| {
        // SAFETY: forwarded contract.
        let r = unsafe { request_handle(request) }?;
        // SAFETY: forwarded contract on `out`.
        let buffer = unsafe { result_buffer(r, out) };
        let outcome = r.request.wait(buffer);
        // SAFETY: from Box::into_raw in mcd_istart; not used again.
        drop(unsafe { Box::from_raw(request) });
        Ok(outcome?)
    })
}

/// Frees `request` without its result: the collective still runs (the
/// other ranks count on it), its result is dropped.
///
/// # Safety
/// `request` is NULL or a live request, not used again.
#[no_mangle]
pub unsafe extern "C" fn mcd_request_free(request: *mut Request) -> c_int {
    guarded(|| {
        if request.is_null() {
            return Err(argument("the request is NULL"));
        }
        // SAFETY: from Box::into_raw in mcd_istart; not used again.
        drop(unsafe { Box::from_raw(request) });
        Ok(())
    })
}

/// `f` of the job as a C int, or a negative error code.
///
/// # Safety
/// As [`mcd_barrier`].
unsafe fn query(job: *mut Job, f: impl FnOnce(&Job) -> usize) -> c_int {
    let mut value = 0;
    let rc = guarded(|| {
        // SAFETY: forwarded contract (the caller's, as for `mcd_barrier`).
        value = f(unsafe { handle(job) }?) as c_int;
        Ok(())
    });
    if rc == MCD_OK {
        value
    } else {
        rc
    }
}

/// This process's rank, or a negative error code.
///
/// # Safety
/// As [`mcd_barrier`].
#[no_mangle]
pub unsafe extern "C" fn mcd_rank(job: *mut Job) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { query(job, Job::rank) }
}

/// The job's size, or a negative error code.
///
/// # Safety
/// As [`mcd_barrier`].
#[no_mangle]
pub unsafe extern "C" fn mcd_size(job: *mut Job) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { query(job, Job::size) }
}

/// The barrier algorithm's name (e.g. `tree4`), valid until [`mcd_finalize`];
/// NULL for a NULL handle.
///
/// # Safety
/// As [`mcd_barrier`].
#[no_mangle]
pub unsafe extern "C" fn mcd_algorithm(job: *mut Job) -> *const c_char {
    // SAFETY: forwarded contract.
    match unsafe { job.as_ref() } {
        Some(j) => j.algorithm.as_ptr(),
        None => std::ptr::null(),
    }
}

/// Copies the job's counters into `*out`.
///
/// # Safety
/// As [`mcd_barrier`]; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcd_get_stats(job: *mut Job, out: *mut mcd_stats) -> c_int {
    guarded(|| {
        if out.is_null() {
            return Err(argument("mcd_get_stats: `out` is NULL"));
        }
        // SAFETY: forwarded contract.
        let stats = unsafe { handle(job) }?.stats()?;
        // SAFETY: non-null and writable per the contract.
        unsafe { *out = stats };
        Ok(())
    })
}

/// Ends the job and frees the handle (NULL is fine). Collective: first the
/// groups freed with [`mcd_group_free`] complete their closing (in any
/// order), then the job's own closing barrier, then answering peers until
/// each is known to be done, so
/// a rank whose last release was lost still completes; it returns as soon as
/// no peer can need this one (no blind linger). The handle is freed even
/// when that fails (a peer died).
///
/// # Safety
/// `job` is NULL or a live handle, never used again.
#[no_mangle]
pub unsafe extern "C" fn mcd_finalize(job: *mut Job) -> c_int {
    guarded(|| {
        if job.is_null() {
            return Ok(());
        }
        // SAFETY: a handle from Box::into_raw, given back exactly once.
        let job = unsafe { Box::from_raw(job) };
        job.finish()
    })
}

/// Frees the handle (NULL is fine) without the closing protocol of
/// [`mcd_finalize`]: for a rank that leaves alone (its peers will find it
/// silent), as when not every rank could start mcd.
///
/// # Safety
/// `job` is NULL or a live handle, never used again.
#[no_mangle]
pub unsafe extern "C" fn mcd_discard(job: *mut Job) -> c_int {
    guarded(|| {
        if !job.is_null() {
            // SAFETY: a handle from Box::into_raw, given back exactly once.
            drop(unsafe { Box::from_raw(job) });
        }
        Ok(())
    })
}

/// A group handle argument.
///
/// # Safety
/// `group` is NULL or a handle from `mcd_group_create` not yet freed.
unsafe fn group_handle<'a>(group: *mut Group) -> Result<&'a mut Group, CError> {
    // SAFETY: per the caller's guarantee, a live, exclusively used handle.
    unsafe { group.as_mut() }.ok_or_else(|| argument("the group handle is NULL"))
}

/// The rank list argument of the group constructors.
///
/// # Safety
/// `ranks` is NULL or points to `n` ints.
unsafe fn rank_list(ranks: *const c_int, n: c_int, what: &str) -> Result<Vec<usize>, CError> {
    if ranks.is_null() || n <= 0 {
        return Err(argument(&format!("{what}: `ranks` is NULL or `n` is not positive")));
    }
    // SAFETY: ranks points to n ints per the contract.
    let list = unsafe { std::slice::from_raw_parts(ranks, n as usize) };
    list.iter().map(|&r| usize::try_from(r).map_err(|_| argument(&format!("{what}: rank {r} is negative")))).collect()
}

/// Creates a barrier over the job's ranks `ranks[0..n]` (this rank among
/// them; group rank i is job rank `ranks[i]`) and stores its handle in
/// `*out` (NULL on failure). It shares the job's endpoint: no discovery.
/// Collective over the group's ranks only, with the same list on every one;
/// ranks in several groups create them in the same order (else use
/// [`mcd_group_prepare`] with an agreed key). Each group is its own barrier
/// instance: frames of one never count in another, even for groups with the
/// same ranks. The same as [`mcd_group_prepare`] with key 0, then
/// [`mcd_group_join`].
///
/// # Safety
/// `job` is NULL or a live handle; `ranks` is NULL or points to `n` ints;
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcd_group_create(job: *mut Job, ranks: *const c_int, n: c_int, out: *mut *mut Group) -> c_int {
    // SAFETY: forwarded contract.
    let rc = unsafe { mcd_group_prepare(job, ranks, n, 0, out) };
    if rc != MCD_OK {
        return rc;
    }
    // SAFETY: `*out` is the handle just made (out is writable, hence readable).
    let group = unsafe { *out };
    // SAFETY: a live handle, used by this thread only.
    let rc = unsafe { mcd_group_join(group) };
    if rc != MCD_OK {
        // SAFETY: as above; the handle is freed and `*out` cleared.
        unsafe {
            drop(Box::from_raw(group));
            *out = std::ptr::null_mut();
        }
    }
    rc
}

/// The local half of [`mcd_group_create`]: sets up a group over the job's
/// ranks `ranks[0..n]` without any communication and stores its handle in
/// `*out` (NULL on failure); [`mcd_group_join`] then meets the members. In
/// between, the caller can agree with the members (an MPI allreduce, say)
/// that every one of them prepared, so that no member waits in the join
/// for one that failed here (out of file descriptors or threads).
///
/// `key`: a number every member passes alike and no other group of these
/// ranks has used (the communicator's first rank makes one from its rank
/// and a count, and broadcasts it, say); then members may create their groups in any order,
/// from several threads at once. 0: keyed by creation order, as
/// [`mcd_group_create`].
///
/// # Safety
/// As [`mcd_group_create`].
#[no_mangle]
pub unsafe extern "C" fn mcd_group_prepare(job: *mut Job, ranks: *const c_int, n: c_int, key: u64, out: *mut *mut Group) -> c_int {
    guarded(|| {
        if out.is_null() {
            return Err(argument("mcd_group_prepare: `out` is NULL"));
        }
        // SAFETY: out is non-null and writable per the contract.
        unsafe { *out = std::ptr::null_mut() };
        // SAFETY: forwarded contract.
        let list = unsafe { rank_list(ranks, n, "mcd_group_prepare") }?;
        // SAFETY: forwarded contract.
        let job = unsafe { handle(job) }?;
        let group = Box::new(job.prepare(&list, (key != 0).then_some(key))?);
        // SAFETY: as above.
        unsafe { *out = Box::into_raw(group) };
        Ok(())
    })
}

/// Meets the members of a group from [`mcd_group_prepare`] (collective over
/// them; waits up to `MCD_JOIN_TIMEOUT` seconds, default 30). After it the
/// group serves barriers. On failure, free the handle.
///
/// # Safety
/// `group` is NULL or a live handle, not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mcd_group_join(group: *mut Group) -> c_int {
    // SAFETY: forwarded contract.
    guarded(|| unsafe { group_handle(group) }?.join())
}

/// One barrier across the group.
///
/// # Safety
/// `group` is NULL or a live handle, not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mcd_group_barrier(group: *mut Group) -> c_int {
    // SAFETY: forwarded contract.
    guarded(|| Ok(unsafe { group_handle(group) }?.barrier()?.wait()?))
}

/// Enters the group's next barrier without waiting (split phase).
///
/// # Safety
/// As [`mcd_group_barrier`].
#[no_mangle]
pub unsafe extern "C" fn mcd_group_enter(group: *mut Group) -> c_int {
    // SAFETY: forwarded contract.
    guarded(|| Ok(unsafe { group_handle(group) }?.barrier()?.enter()?))
}

/// As [`mcd_barrier_test`], for a group.
///
/// # Safety
/// As [`mcd_group_barrier`]; `done` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcd_group_test(group: *mut Group, done: *mut c_int) -> c_int {
    guarded(|| {
        if done.is_null() {
            return Err(argument("mcd_group_test: `done` is NULL"));
        }
        // SAFETY: forwarded contract.
        let complete = unsafe { group_handle(group) }?.barrier()?.test()?;
        // SAFETY: non-null and writable per the contract.
        unsafe { *done = c_int::from(complete) };
        Ok(())
    })
}

/// Completes the group's entered barrier (enters one first if none is).
///
/// # Safety
/// As [`mcd_group_barrier`].
#[no_mangle]
pub unsafe extern "C" fn mcd_group_wait(group: *mut Group) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { mcd_group_barrier(group) }
}

/// This process's rank in the group, or a negative error code.
///
/// # Safety
/// As [`mcd_group_barrier`].
#[no_mangle]
pub unsafe extern "C" fn mcd_group_rank(group: *mut Group) -> c_int {
    // SAFETY: forwarded contract.
    match unsafe { group_handle(group) } {
        Ok(g) => g.rank() as c_int,
        Err(e) => {
            remember(&e.message);
            e.code
        }
    }
}

/// The group's size, or a negative error code.
///
/// # Safety
/// As [`mcd_group_barrier`].
#[no_mangle]
pub unsafe extern "C" fn mcd_group_size(group: *mut Group) -> c_int {
    // SAFETY: forwarded contract.
    match unsafe { group_handle(group) } {
        Ok(g) => g.size() as c_int,
        Err(e) => {
            remember(&e.message);
            e.code
        }
    }
}

/// The group barrier's algorithm, valid until the group is freed; NULL for
/// a NULL handle.
///
/// # Safety
/// As [`mcd_group_barrier`].
#[no_mangle]
pub unsafe extern "C" fn mcd_group_algorithm(group: *mut Group) -> *const c_char {
    // SAFETY: forwarded contract.
    match unsafe { group.as_ref() } {
        Some(g) => g.algorithm.as_ptr(),
        None => std::ptr::null(),
    }
}

/// Why the job's barrier and collectives run the algorithms they do, as one
/// line of text: each algorithm, and who named it or by what rule `auto`
/// picked it, with the model's prediction beside the next best candidates
/// (e.g. `barrier tree4 (auto: the lowest predicted time for 8 nodes: tree4
/// 9.1 µs; then ...); collectives concurrent (auto: ...)`). Written to `buf`
/// (at most `len` bytes with the final NUL, cut short if need be, as
/// `snprintf`); returns the text's full length in bytes (without the NUL),
/// or a negative error code. It simulates every candidate: call it for a
/// report, not on a hot path.
///
/// # Safety
/// As [`mcd_barrier`]; `buf` is NULL (with `len` 0) or writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcd_why(job: *mut Job, buf: *mut c_char, len: usize) -> c_int {
    // SAFETY: forwarded contract.
    let Some(job) = (unsafe { job.as_ref() }) else { return MCD_ERR_ARGUMENT };
    let text = match logp_params() {
        Ok(params) => {
            let name = job.algorithm.to_string_lossy();
            let barrier = if name.starts_with("hierarchical:") {
                format!("barrier {name} (hierarchical: the model predicts it faster, or MCD_HIERARCHY=on)")
            } else {
                why::barrier(&job.asked, job.size, job.rails, job.host, &params)
            };
            format!("{barrier}; {}", why::collectives(&job.asked, job.size, job.rails, job.host, &params))
        }
        Err(e) => {
            remember(&e.message);
            return e.code;
        }
    };
    // SAFETY: forwarded contract.
    unsafe { write_text(&text, buf, len) }
}

/// [`mcd_why`] for a group.
///
/// # Safety
/// As [`mcd_group_barrier`]; `buf` is NULL (with `len` 0) or writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcd_group_why(group: *mut Group, buf: *mut c_char, len: usize) -> c_int {
    // SAFETY: forwarded contract.
    let Some(g) = (unsafe { group.as_ref() }) else { return MCD_ERR_ARGUMENT };
    let text = match logp_params() {
        Ok(params) => {
            format!("{}; {}", why::barrier(&g.asked, g.size, g.rails, g.host, &params), why::collectives(&g.asked, g.size, g.rails, g.host, &params))
        }
        Err(e) => {
            remember(&e.message);
            return e.code;
        }
    };
    // SAFETY: forwarded contract.
    unsafe { write_text(&text, buf, len) }
}

/// Writes `text` into `buf` as `snprintf` would; its full length.
///
/// # Safety
/// `buf` is NULL or writable for `len` bytes.
unsafe fn write_text(text: &str, buf: *mut c_char, len: usize) -> c_int {
    if !buf.is_null() && len > 0 {
        let n = text.len().min(len - 1);
        // SAFETY: `buf` is writable for `len` > `n` bytes (the caller's
        // contract), and `text` readable for `n`.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buf, n);
            *buf.add(n) = 0;
        }
    }
    c_int::try_from(text.len()).unwrap_or(c_int::MAX)
}

/// Copies the group's counters into `*out` (the frame counters are the
/// shared endpoint's).
///
/// # Safety
/// As [`mcd_group_barrier`]; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcd_group_get_stats(group: *mut Group, out: *mut mcd_stats) -> c_int {
    guarded(|| {
        if out.is_null() {
            return Err(argument("mcd_group_get_stats: `out` is NULL"));
        }
        // SAFETY: forwarded contract.
        let stats = unsafe { group_handle(group) }?.stats()?;
        // SAFETY: non-null and writable per the contract.
        unsafe { *out = stats };
        Ok(())
    })
}

/// Ends the group's barrier and frees the handle (NULL is fine), without
/// waiting: enters the group's closing barrier and hands it to the job,
/// whose calls finish it once every member has closed too (its progress
/// agent answers them meanwhile), and [`mcd_finalize`] at the latest.
/// Collective over the group, like MPI_Comm_free, but no member waits here
/// for another: members may free their groups in any order. The handle is
/// freed even on error.
///
/// # Safety
/// `group` is NULL or a live handle, never used again.
#[no_mangle]
pub unsafe extern "C" fn mcd_group_free(group: *mut Group) -> c_int {
    guarded(|| {
        if group.is_null() {
            return Ok(());
        }
        // SAFETY: a handle from Box::into_raw, given back exactly once.
        let group = unsafe { Box::from_raw(group) };
        group.close()
    })
}

/// Frees the group handle (NULL is fine) without the closing barrier.
///
/// # Safety
/// `group` is NULL or a live handle, never used again.
#[no_mangle]
pub unsafe extern "C" fn mcd_group_discard(group: *mut Group) -> c_int {
    guarded(|| {
        if !group.is_null() {
            // SAFETY: a handle from Box::into_raw, given back exactly once.
            drop(unsafe { Box::from_raw(group) });
        }
        Ok(())
    })
}

/// A fixed description of an error code.
#[no_mangle]
pub extern "C" fn mcd_strerror(code: c_int) -> *const c_char {
    let s: &'static CStr = match code {
        MCD_OK => c"success",
        MCD_ERR_ARGUMENT => c"invalid argument",
        MCD_ERR_CONFIG => c"invalid configuration",
        MCD_ERR_PERMISSION => c"no permission for raw sockets (grant CAP_NET_RAW or run as root)",
        MCD_ERR_INTERFACE => c"no such network interface",
        MCD_ERR_BOOTSTRAP => c"the ranks did not all find each other",
        MCD_ERR_BARRIER => c"a barrier failed: a peer stopped answering",
        MCD_ERR_SYSTEM => c"a system call failed",
        MCD_ERR_INTERNAL => c"internal error in mcd",
        MCD_ERR_MISMATCH => c"the ranks called different collectives",
        _ => c"unknown error code",
    };
    s.as_ptr()
}

/// The full text of the calling thread's last error (empty if none), valid
/// until the thread's next failing call.
#[no_mangle]
pub extern "C" fn mcd_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_c_constants_are_the_wire_codes_and_others_are_refused() {
        let dtypes = [MCD_INT32, MCD_INT64, MCD_UINT32, MCD_UINT64, MCD_FLOAT, MCD_DOUBLE];
        for (c, d) in dtypes.into_iter().zip(Dtype::ALL) {
            assert_eq!(reduction(c, MCD_SUM).unwrap(), (d, Op::Sum));
        }
        let ops = [MCD_SUM, MCD_MIN, MCD_MAX, MCD_PROD, MCD_BAND, MCD_BOR, MCD_BXOR];
        for (c, o) in ops.into_iter().zip(Op::ALL) {
            assert_eq!(reduction(MCD_UINT64, c).unwrap(), (Dtype::U64, o));
        }
        assert!(reduction(mcd_dtype(0), MCD_SUM).unwrap_err().message.contains("not an mcd_dtype"));
        assert!(reduction(MCD_INT32, mcd_op(99)).unwrap_err().message.contains("not an mcd_op"));
        assert!(reduction(MCD_DOUBLE, MCD_BAND).unwrap_err().message.contains("integers only"));
        // SAFETY: NULL handles are caught.
        let code = unsafe { mcd_allreduce(std::ptr::null_mut(), std::ptr::null(), std::ptr::null_mut(), 1, MCD_INT32, MCD_SUM) };
        assert_eq!(code, MCD_ERR_ARGUMENT);
    }

    #[test]
    fn a_secret_left_all_zeros_is_refused() {
        // Review of issue 27: `mcd_params_default` leaves `secret` zeroed; a
        // caller who sets MCD_AUTH_KEY and forgets to fill it would run
        // every job under the one key every attacker can guess.
        // SAFETY: a valid, defaulted mcd_params.
        unsafe {
            let mut params = std::mem::zeroed::<mcd_params>();
            mcd_params_default(&mut params);
            params.rank = 0;
            params.size = 2;
            params.auth = MCD_AUTH_KEY;
            let interfaces = CString::new("mcd-no-such0").unwrap();
            params.interfaces = interfaces.as_ptr();
            let mut job = std::ptr::null_mut();
            assert_eq!(mcd_init(&params, &mut job), MCD_ERR_CONFIG);
            assert!(job.is_null());
            let err = CStr::from_ptr(mcd_last_error()).to_str().unwrap().to_string();
            assert!(err.contains("all zeros") && err.contains("mcd_secret_generate"), "{err}");
        }
    }

    #[test]
    fn errors_are_codes_with_text_never_unwinding() {
        // SAFETY: NULL handles and pointers are what is being tested.
        unsafe {
            assert_eq!(mcd_barrier(std::ptr::null_mut()), MCD_ERR_ARGUMENT);
            assert!(CStr::from_ptr(mcd_last_error()).to_str().unwrap().contains("NULL"));
            assert_eq!(mcd_init(std::ptr::null(), std::ptr::null_mut()), MCD_ERR_ARGUMENT);
            let mut params = std::mem::zeroed::<mcd_params>();
            mcd_params_default(&mut params);
            params.rank = 3;
            params.size = -1;
            let mut job = std::ptr::null_mut();
            assert_eq!(mcd_init(&params, &mut job), MCD_ERR_CONFIG);
            assert!(job.is_null());
            assert!(CStr::from_ptr(mcd_last_error()).to_str().unwrap().contains("give both"));
            assert_eq!(mcd_finalize(std::ptr::null_mut()), MCD_OK);
        }
        // SAFETY: as above; `secret` has MCD_SECRET_LEN bytes.
        unsafe {
            let mut params = std::mem::zeroed::<mcd_params>();
            mcd_params_default(&mut params);
            assert_eq!((params.auth, params.secret), (MCD_AUTH_ENV, [0; MCD_SECRET_LEN]));
            params.rank = 0;
            params.size = 2;
            params.auth = 7;
            let mut job = std::ptr::null_mut();
            assert_eq!(mcd_init(&params, &mut job), MCD_ERR_CONFIG);
            assert!(CStr::from_ptr(mcd_last_error()).to_str().unwrap().contains("auth 7 is none of MCD_AUTH_ENV"));
            let (mut a, mut b) = ([0u8; MCD_SECRET_LEN], [0u8; MCD_SECRET_LEN]);
            assert_eq!((mcd_secret_generate(a.as_mut_ptr()), mcd_secret_generate(b.as_mut_ptr())), (MCD_OK, MCD_OK));
            assert_ne!(a, b, "fresh secrets differ");
            assert_eq!(mcd_secret_generate(std::ptr::null_mut()), MCD_ERR_ARGUMENT);
        }
        let panicked = guarded(|| panic!("boom"));
        assert_eq!(panicked, MCD_ERR_INTERNAL);
        // SAFETY: mcd_last_error returns a valid C string.
        assert!(unsafe { CStr::from_ptr(mcd_last_error()) }.to_str().unwrap().contains("boom"));
        for code in [MCD_OK, MCD_ERR_PERMISSION, -99] {
            // SAFETY: mcd_strerror returns static C strings.
            assert!(!unsafe { CStr::from_ptr(mcd_strerror(code)) }.to_bytes().is_empty());
        }
    }
}
