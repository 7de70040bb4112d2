//! A job ([`Job`]): the endpoint opened through the bootstrap, its barrier
//! over every rank, and the groups it closes.

use std::ffi::{CStr, CString};
use std::sync::{Arc, Mutex, MutexGuard};

use barriers::policy::HostShape;
use barriers::{Barrier, BarrierError, BarrierStats, Collective, GroupTransport, HierarchicalBarrier, JobPolicy, SharedEndpoint};
use mcd::bootstrap::JobSettings;
use mcd::{Endpoint, EndpointConfig, NodeList};

use crate::collective::Collectives;
use crate::stats::{mcd_stats, stats_of, with_collectives};
use crate::{CError, Communicator};
// The C functions and types the docs name.
#[cfg(doc)]
use crate::*;

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

/// An open job (`mcd_job` in C): an endpoint and its barrier, the endpoint
/// shared with the job's groups. Its methods take `&self`, so that one
/// thread may wait in the job's barrier while another creates or frees
/// groups (MPI_THREAD_MULTIPLE).
pub struct Job {
    barrier: Mutex<WorldBarrier>,
    /// The collectives' barrier and buffer (see [`Job::make_collectives`]).
    collectives: Mutex<Collectives>,
    pub(crate) shared: SharedEndpoint,
    algorithm: CString,
    /// How its barriers, and its groups', are made (read once, in [`Job::open`]).
    pub(crate) policy: JobPolicy,
    rank: usize,
    size: usize,
    /// Whether its frames are signed and verified (what mcd runs, however
    /// the settings said it: review rev29, finding 4).
    authenticated: bool,
    pub(crate) rails: usize,
    /// What `auto` is told of the hosts, for the job and its groups.
    pub(crate) host: HostShape,
    pub(crate) closing: Closing,
}

/// Groups whose closing barrier has been entered ([`Group::close`]): each
/// one's progress agent carries its closing and its farewell on (answering
/// the members until every one is done), and the job drops them once done,
/// at its next group or barrier call without waiting for any, or in
/// [`Job::finish`], all at once. So members may free their groups in any
/// order, and a free never waits.
#[derive(Clone, Default)]
pub(crate) struct Closing(Arc<Mutex<ClosingGroups>>);

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

    pub(crate) fn add(&self, barrier: Barrier<GroupTransport>) {
        self.lock().groups.push(barrier);
    }

    /// Drops the groups that are done, waiting for none. A group whose
    /// closing failed (a member went silent) is dropped too, and its error
    /// kept for [`finish_all`](Self::finish_all).
    pub(crate) fn reap(&self) {
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

impl Job {
    /// Opens the endpoint (bootstrap) and sets up the barrier.
    pub fn open(settings: &Settings) -> Result<Job, CError> {
        let nodes = match &settings.node_file {
            Some(path) => Some(NodeList::from_file(path)?),
            None => None,
        };
        // The policy first: a bad variable fails before the bootstrap.
        let mut policy = JobPolicy::from_env()?;
        if let Some(name) = &settings.algorithm {
            policy = policy.with_algorithm_named(name)?;
        }
        let config = EndpointConfig::bootstrap_with(&settings.job, nodes)?;
        let size = config.nodes.len();
        let rails = config.interfaces.len();
        let endpoint = Endpoint::open(config)?;
        let authenticated = endpoint.authenticated();
        let host = HostShape {
            local_processes: settings.local_processes.unwrap_or_else(mcd::wait::local_processes_from_env),
            cores: settings.cores.unwrap_or_else(mcd::host::online_cpus),
        };
        let host_list = endpoint.nodes().hosts();
        let hosts = host_list.len();
        let per_host = host_list.iter().map(Vec::len).max().unwrap_or(1);
        let hierarchical = policy.hierarchical(size, hosts, per_host, host.cores, rails);
        let shared = SharedEndpoint::new(endpoint);
        let (barrier, algorithm) = if hierarchical {
            // On the wire, one leader per host; on the cores, every process
            // of the busiest host (the ranks that wait in shared memory too):
            // from the node list, the same on every rank.
            let leaders = HostShape { local_processes: per_host.max(settings.local_processes.unwrap_or(1)), ..host };
            let barrier_config = policy.barrier_config(hosts, rails, leaders);
            let name = format!("hierarchical:{}", barrier_config.algorithm);
            (WorldBarrier::Hierarchical(Box::new(HierarchicalBarrier::on_endpoint(&shared, barrier_config, policy.host)?)), name)
        } else {
            let barrier_config = policy.barrier_config(size, rails, host);
            let everyone: Vec<usize> = (0..size).collect();
            let transport = shared.group(&everyone)?;
            (WorldBarrier::Flat(Barrier::new(transport, barrier_config)?), barrier_config.algorithm.to_string())
        };
        let algorithm = CString::new(algorithm).expect("algorithm names have no NUL");
        let rank = barrier.node();
        let job = Job {
            barrier: Mutex::new(barrier),
            collectives: Mutex::default(),
            shared,
            algorithm,
            policy,
            rank,
            size,
            authenticated,
            rails,
            host,
            closing: Closing::default(),
        };
        // The collectives' barrier joins here, where every rank is, not at
        // the first collective call (see `Group::join`: review rev31,
        // finding 2).
        let collectives = job.make_collectives()?;
        job.collectives().barrier = Some(collectives);
        Ok(job)
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

    /// Whether the job's frames are signed and verified.
    pub fn authenticated(&self) -> bool {
        self.authenticated
    }

    /// The job's barrier (held while in use: a second thread's barrier call
    /// waits for the first's).
    pub fn barrier(&self) -> MutexGuard<'_, WorldBarrier> {
        self.barrier.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The counters.
    pub fn stats(&self) -> Result<mcd_stats, CError> {
        let barrier = self.barrier().stats();
        let collectives = self.collectives().barrier.as_ref().map(|c| c.stats());
        stats_of(with_collectives(barrier, collectives), &self.shared)
    }

    /// The barrier that runs the job's collectives: one of its own over
    /// every rank (its own instance and counters, so the job barrier's count
    /// is of barriers only), made and joined with the job ([`Job::open`]:
    /// every rank is there; review rev31, finding 2). Its algorithm: `MCD_COLLECTIVE_ALGORITHM`, else the job's
    /// if it was named and reduces, else `auto`'s pick among the algorithms
    /// that reduce ([`barriers::model::auto_collective_on_host`]).
    fn make_collectives(&self) -> Result<Barrier<GroupTransport>, CError> {
        let everyone: Vec<usize> = (0..self.size).collect();
        let transport = self.shared.group(&everyone)?;
        let config = self.policy.collective_config(self.size, self.rails, self.host);
        Ok(Barrier::new(transport, config)?)
    }

    /// The collectives' state (held while in use).
    fn collectives(&self) -> MutexGuard<'_, Collectives> {
        self.collectives.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ends the job (collective): finishes every closed group (see
    /// [`Group::close`]) and the job's own closing barrier and answers, all
    /// at once.
    pub fn finish(&self) -> Result<(), CError> {
        // The collectives' barrier closes beside the groups (dropped
        // unclosed if this rank never called a collective on it: see
        // `Collectives::closing`).
        if let Some(collectives) = self.collectives().closing() {
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

impl Communicator for &Job {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn algorithm(&self) -> &CStr {
        &self.algorithm
    }

    fn stats(&mut self) -> Result<mcd_stats, CError> {
        Job::stats(self)
    }

    fn wait(&mut self) -> Result<(), CError> {
        self.barrier().wait()?;
        self.reap_closed_groups();
        Ok(())
    }

    fn enter(&mut self) -> Result<(), CError> {
        Ok(self.barrier().enter()?)
    }

    fn test(&mut self) -> Result<bool, CError> {
        Ok(self.barrier().test()?)
    }

    fn collective(&mut self, call: Collective, input: Option<&[u8]>, output: Option<&mut [u8]>) -> Result<(), CError> {
        self.collectives().run(call, input, output)
    }

    fn start(&mut self, call: Collective, input: &[u8]) -> Result<barriers::Request<GroupTransport>, CError> {
        Ok(self.collectives().barrier()?.start(call, input)?)
    }

    fn why(&self) -> String {
        let name = self.algorithm.to_string_lossy();
        let barrier = if name.starts_with("hierarchical:") {
            format!("barrier {name} (hierarchical: the model predicts it faster, or MCD_HIERARCHY=on)")
        } else {
            crate::why::barrier(&self.policy, self.size, self.rails, self.host)
        };
        format!("{barrier}; {}", crate::why::collectives(&self.policy, self.size, self.rails, self.host))
    }
}
