//! Barrier timing on a virtual cluster, by one of two methods:
//!
//! - the paper's (section 4): every node repeats { timestamp; barrier;
//!   timestamp; ~30 µs dummy loop }, keeps its own min, mean, max and
//!   percentiles of the barrier times, and the figures reported are those
//!   averaged over the nodes;
//! - OSU's (`osu_barrier`): warm-up, then timed back-to-back barriers; each
//!   node's mean is its loop time over the iterations; min, mean and max are
//!   taken over the nodes' means (percentiles still per barrier, averaged).

use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use barriers::threads::run_per_node;
use barriers::{BarrierConfig, McdTransport};
use hdrhistogram::Histogram;
use mcd::kind::gather as gather_kind;
use mcd::{Endpoint, WaitPolicy};
use serde::Serialize;

use mcd_vcluster::Cluster;

/// The timing convention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Iwasaki, Matsuoka et al.: barrier, then a dummy loop; per-node statistics averaged.
    Paper,
    /// OSU micro-benchmarks: back-to-back barriers; min/avg/max over per-node means.
    Osu,
}

impl std::str::FromStr for Method {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "paper" => Ok(Method::Paper),
            "osu" => Ok(Method::Osu),
            _ => Err(format!("unknown method `{s}` (paper or osu)")),
        }
    }
}

/// How to measure.
#[derive(Clone, Copy, Debug)]
pub struct BarrierBench {
    /// The timing convention.
    pub method: Method,
    /// Untimed barriers first (they also line the nodes up).
    pub warmup: usize,
    /// Timed barriers.
    pub iterations: usize,
    /// The dummy loop after each barrier (the paper's ~30 µs; unused by OSU's method).
    pub dummy: Duration,
    /// How the endpoints wait.
    pub wait: WaitPolicy,
}

/// One algorithm at one size: per-node statistics averaged over the nodes.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct BarrierMeasurement {
    /// Algorithm name.
    pub algorithm: String,
    /// The timing convention.
    pub method: Method,
    /// Rails used.
    pub rails: usize,
    /// Nodes.
    pub nodes: usize,
    /// Timed barriers per node.
    pub iterations: usize,
    /// Paper: mean over nodes of each node's minimum; OSU: the least node mean. µs.
    pub min_us: f64,
    /// Mean over nodes of each node's mean, µs.
    pub mean_us: f64,
    /// Paper: mean over nodes of each node's maximum; OSU: the greatest node mean. µs.
    pub max_us: f64,
    /// Mean over nodes of each node's median, µs.
    pub p50_us: f64,
    /// Mean over nodes of each node's 99th percentile, µs.
    pub p99_us: f64,
    /// Mean over nodes of each node's 99.9th percentile, µs.
    pub p999_us: f64,
    /// Recovery traffic ([`barriers::BarrierStats::recoveries`]: NACKs but probes of late peers, answers, unasked copies), all nodes, warm-up included.
    pub recoveries: u64,
    /// The same by kind, with the probes and statuses (runs in this process
    /// only: zero where the figures were gathered from other hosts).
    #[serde(default)]
    pub kinds: RecoveryKinds,
}

/// Recovery traffic by kind, summed over nodes: what
/// [`barriers::BarrierStats::recoveries`] counts, and the probes of late
/// peers and their statuses, which it does not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RecoveryKinds {
    /// NACKs sent, probes not counted.
    pub nacks: u64,
    /// Probes of late peers (NACKs with no evidence of loss: liveness).
    pub probes: u64,
    /// Answers to NACKs.
    pub answers: u64,
    /// Unasked copies.
    pub copies: u64,
    /// Statuses sent (answers with nothing to re-send, notices).
    pub statuses: u64,
}

impl RecoveryKinds {
    /// What one node counted between `before` and `after`.
    pub fn between(before: &barriers::BarrierStats, after: &barriers::BarrierStats) -> RecoveryKinds {
        let probes = after.probes - before.probes;
        RecoveryKinds {
            nacks: after.nacks_sent - before.nacks_sent - probes,
            probes,
            answers: after.answers - before.answers,
            copies: after.copies - before.copies,
            statuses: after.statuses - before.statuses,
        }
    }

    /// The sum of `self` and `o`.
    pub fn plus(self, o: RecoveryKinds) -> RecoveryKinds {
        RecoveryKinds {
            nacks: self.nacks + o.nacks,
            probes: self.probes + o.probes,
            answers: self.answers + o.answers,
            copies: self.copies + o.copies,
            statuses: self.statuses + o.statuses,
        }
    }
}

impl std::fmt::Display for RecoveryKinds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NACKs {}, answers {}, copies {}; probes {}, statuses {}", self.nacks, self.answers, self.copies, self.probes, self.statuses)
    }
}

/// One node's timings of a run.
pub struct NodeTimes {
    hist: Histogram<u64>,
    /// The node's whole timed loop (OSU's per-node mean is this / iterations).
    loop_time: Duration,
    recoveries: u64,
    kinds: RecoveryKinds,
}

fn spin_for(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// One node's figures, small enough to send to another host.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NodeFigures {
    /// Fastest barrier, µs.
    pub min_us: f64,
    /// Mean barrier, µs.
    pub mean_us: f64,
    /// Slowest barrier, µs.
    pub max_us: f64,
    /// Median, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// 99.9th percentile, µs.
    pub p999_us: f64,
    /// The whole timed loop, µs.
    pub loop_us: f64,
    /// Recovery traffic (see [`BarrierMeasurement::recoveries`]).
    pub recoveries: f64,
}

impl NodeFigures {
    /// Bytes on the wire: eight little-endian f64, in [`Self::WIRE_ORDER`].
    pub const WIRE_LEN: usize = 8 * Self::WIRE_ORDER.len();
    /// The fields on the wire, in order.
    pub const WIRE_ORDER: [&'static str; 8] = ["min_us", "mean_us", "max_us", "p50_us", "p99_us", "loop_us", "recoveries", "p999_us"];

    fn fields(&self) -> [f64; 8] {
        [self.min_us, self.mean_us, self.max_us, self.p50_us, self.p99_us, self.loop_us, self.recoveries, self.p999_us]
    }

    /// The payload that carries these figures.
    pub fn emit(&self) -> [u8; Self::WIRE_LEN] {
        let mut out = [0u8; Self::WIRE_LEN];
        for (chunk, x) in out.chunks_exact_mut(8).zip(self.fields()) {
            chunk.copy_from_slice(&x.to_le_bytes());
        }
        out
    }

    /// The figures in `payload`; `None` unless it is exactly [`Self::WIRE_LEN`] bytes.
    pub fn parse(payload: &[u8]) -> Option<NodeFigures> {
        let b: &[u8; Self::WIRE_LEN] = payload.try_into().ok()?;
        let mut v = [0f64; 8];
        for (x, chunk) in v.iter_mut().zip(b.chunks_exact(8)) {
            *x = f64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        }
        let [min_us, mean_us, max_us, p50_us, p99_us, loop_us, recoveries, p999_us] = v;
        Some(NodeFigures { min_us, mean_us, max_us, p50_us, p99_us, p999_us, loop_us, recoveries })
    }
}

impl NodeTimes {
    /// The figures of these timings.
    pub fn figures(&self) -> NodeFigures {
        let h = &self.hist;
        NodeFigures {
            min_us: h.min() as f64 / 1000.0,
            mean_us: h.mean() / 1000.0,
            max_us: h.max() as f64 / 1000.0,
            p50_us: h.value_at_quantile(0.5) as f64 / 1000.0,
            p99_us: h.value_at_quantile(0.99) as f64 / 1000.0,
            p999_us: h.value_at_quantile(0.999) as f64 / 1000.0,
            loop_us: self.loop_time.as_secs_f64() * 1e6,
            recoveries: self.recoveries as f64,
        }
    }

    /// Sets the recoveries counted around the loop.
    pub fn set_recoveries(&mut self, recoveries: u64) {
        self.recoveries = recoveries;
    }
}

impl BarrierBench {
    /// Runs one node's loop of this method around `barrier`: the warm-up, then
    /// the timed barriers (each followed by the dummy loop in the paper's method).
    pub fn time_node<E>(&self, mut barrier: impl FnMut() -> Result<(), E>) -> Result<NodeTimes, E> {
        let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds");
        for _ in 0..self.warmup {
            barrier()?;
        }
        let start = Instant::now();
        for _ in 0..self.iterations {
            let t0 = Instant::now();
            barrier()?;
            hist.saturating_record(t0.elapsed().as_nanos() as u64);
            if self.method == Method::Paper {
                spin_for(self.dummy);
            }
        }
        Ok(NodeTimes { hist, loop_time: start.elapsed(), recoveries: 0, kinds: RecoveryKinds::default() })
    }

    /// Combines the nodes' timings into the figures of this method.
    pub fn summarize(&self, algorithm: &str, rails: usize, nodes: &[NodeTimes]) -> BarrierMeasurement {
        let figures: Vec<NodeFigures> = nodes.iter().map(NodeTimes::figures).collect();
        let mut m = self.summarize_figures(algorithm, rails, &figures);
        m.kinds = nodes.iter().fold(RecoveryKinds::default(), |k, t| k.plus(t.kinds));
        m
    }

    /// As [`summarize`](Self::summarize), from each node's figures (as
    /// gathered from other hosts).
    pub fn summarize_figures(&self, algorithm: &str, rails: usize, nodes: &[NodeFigures]) -> BarrierMeasurement {
        let n = nodes.len().max(1) as f64;
        let avg = |f: &dyn Fn(&NodeFigures) -> f64| nodes.iter().map(f).sum::<f64>() / n;
        let (min_us, mean_us, max_us) = match self.method {
            Method::Paper => (avg(&|f| f.min_us), avg(&|f| f.mean_us), avg(&|f| f.max_us)),
            Method::Osu => {
                let means: Vec<f64> = nodes.iter().map(|f| f.loop_us / self.iterations.max(1) as f64).collect();
                let mean = means.iter().sum::<f64>() / n;
                (means.iter().cloned().fold(f64::INFINITY, f64::min), mean, means.iter().cloned().fold(0.0, f64::max))
            }
        };
        BarrierMeasurement {
            algorithm: algorithm.to_string(),
            method: self.method,
            rails,
            nodes: nodes.len(),
            iterations: self.iterations,
            min_us,
            mean_us,
            max_us,
            p50_us: avg(&|f| f.p50_us),
            p99_us: avg(&|f| f.p99_us),
            p999_us: avg(&|f| f.p999_us),
            recoveries: nodes.iter().map(|f| f.recoveries as u64).sum(),
            kinds: RecoveryKinds::default(),
        }
    }
}

/// Measures `config` on every node of `cluster` (one thread per node, each in
/// its namespace; pinned to a core of its own while nodes ≤ cores).
pub fn measure(cluster: &Cluster, config: BarrierConfig, bench: BarrierBench) -> Result<BarrierMeasurement> {
    measure_collective(cluster, config, bench, barriers::Collective::Barrier, 0)
}

/// As [`measure`], timing `call` on `bytes` bytes of data (whole elements of
/// its type; node i contributes i + element index) instead of a barrier.
pub fn measure_collective(
    cluster: &Cluster,
    config: BarrierConfig,
    bench: BarrierBench,
    call: barriers::Collective,
    bytes: usize,
) -> Result<BarrierMeasurement> {
    let n = cluster.nodes();
    let cores = mcd::host::online_cpus();
    let transports = (0..n)
        .map(|node| {
            let _ns = cluster.enter(node)?;
            let mut ep_config = cluster.endpoint_config();
            ep_config.wait = bench.wait;
            Ok(McdTransport::new(Endpoint::open(ep_config)?))
        })
        .collect::<Result<Vec<_>>>()?;
    let results = run_per_node(transports, config, move |b| {
        let me = b.node();
        if n <= cores {
            let _ = mcd::host::pin_current_thread(me);
        }
        let input = collective_input(call, bytes, me);
        let mut output = vec![0u8; input.len()];
        let before = b.stats();
        let mut times = bench.time_node(|| b.collective(call, &input, Some(&mut output)))?;
        let after = b.stats();
        times.recoveries = after.recoveries() - before.recoveries();
        times.kinds = RecoveryKinds::between(&before, &after);
        if let Some(expected) = collective_expected(call, bytes, me, n) {
            if output != expected {
                return Err(barriers::BarrierError::Internal(format!("{call}: the last call's result on node {me} is wrong")));
            }
        }
        Ok(times)
    });
    let nodes: Vec<NodeTimes> =
        results.into_iter().enumerate().map(|(i, r)| r.map_err(|e| anyhow!("{} on node {i}: {e}", config.algorithm))).collect::<Result<_>>()?;
    Ok(bench.summarize(&config.algorithm.to_string(), config.rails, &nodes))
}

/// Node `me`'s contribution to a measured collective of `bytes` bytes:
/// element `i` is `me + i` in the call's type (whole numbers, so that any
/// summing order gives the same result), or byte `(me + i) mod 256` for a
/// broadcast.
pub fn collective_input(call: barriers::Collective, bytes: usize, me: usize) -> Vec<u8> {
    use barriers::{Collective, Dtype};
    let dtype = match call {
        Collective::Allreduce { dtype, .. } | Collective::Reduce { dtype, .. } => dtype,
        Collective::Bcast { .. } | Collective::Barrier => return (0..bytes).map(|i| (me + i) as u8).collect(),
    };
    let count = bytes / dtype.size();
    let mut out = Vec::with_capacity(count * dtype.size());
    for i in 0..count {
        let v = (me + i) as u64;
        match dtype {
            Dtype::I32 => out.extend_from_slice(&(v as i32).to_ne_bytes()),
            Dtype::U32 => out.extend_from_slice(&(v as u32).to_ne_bytes()),
            Dtype::I64 => out.extend_from_slice(&(v as i64).to_ne_bytes()),
            Dtype::U64 => out.extend_from_slice(&v.to_ne_bytes()),
            Dtype::F32 => out.extend_from_slice(&(v as f32).to_ne_bytes()),
            Dtype::F64 => out.extend_from_slice(&(v as f64).to_ne_bytes()),
        }
    }
    out
}

/// What node `me` of `n` must hold after the collective on the inputs of
/// [`collective_input`], computed locally in rank order ([`barriers::collective::combine`]);
/// `None` where the call leaves the output undefined (a reduce's non-roots,
/// a barrier).
pub fn collective_expected(call: barriers::Collective, bytes: usize, me: usize, n: usize) -> Option<Vec<u8>> {
    use barriers::Collective;
    match call {
        Collective::Barrier => None,
        Collective::Bcast { root } => Some(collective_input(call, bytes, root)),
        Collective::Reduce { root, .. } if root != me => None,
        Collective::Allreduce { op, dtype } | Collective::Reduce { op, dtype, .. } => {
            let mut acc = collective_input(call, bytes, 0);
            for node in 1..n {
                barriers::collective::combine(op, dtype, &mut acc, &collective_input(call, bytes, node), false);
            }
            Some(acc)
        }
    }
}

/// The environment variable that makes a benchmark binary one rank
/// process of [`measure_ranks_per_host`] (its value says what to run, as
/// JSON): such a binary calls [`rank_process_main`] first thing.
pub const RANK_PROCESS_ENV: &str = "MCD_BENCH_RANK_PROCESS";

/// How the ranks of [`measure_ranks_per_host`] meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RanksBarrier {
    /// Every rank runs the algorithm on the wire.
    Flat,
    /// Each host's ranks meet in shared memory, its leader runs the
    /// algorithm among the hosts' leaders ([`barriers::HierarchicalBarrier`]),
    /// and the host is released as said; the ranks other than the leader
    /// wait as `local_wait` says (`None`: as the leader,
    /// [`barriers::HOST_WAIT_ENV`]).
    Hierarchical {
        /// How a host is released.
        release: barriers::HostRelease,
        /// How the ranks other than the leaders wait.
        local_wait: Option<WaitPolicy>,
    },
}

/// What one rank process runs (JSON in [`RANK_PROCESS_ENV`]).
#[derive(Serialize, serde::Deserialize)]
struct RankJob {
    algorithm: String,
    rails: usize,
    retry_us: u64,
    min_retry_us: u64,
    failure_ms: u64,
    /// `None`: flat; else the hierarchical barrier with this release.
    release: Option<String>,
    method: Method,
    warmup: usize,
    iterations: usize,
    dummy_ns: u64,
    /// The core to pin to (while ranks ≤ cores).
    pin: Option<usize>,
}

/// Marks a rank process's figures in its output.
const FIGURES_LINE: &str = "mcd-rank-figures ";

/// In a benchmark binary's `main`, first: when started as a rank process
/// of [`measure_ranks_per_host`] ([`RANK_PROCESS_ENV`] set), runs the rank
/// (endpoint from the environment: `MCD_NODES`, `MCD_PORT`, `MCD_IFACES`,
/// `MCD_JOB`, `MCD_WAIT`, `MCD_LOCAL_PROCS`), prints its figures, and
/// returns the exit code; `None` otherwise.
pub fn rank_process_main() -> Option<i32> {
    let job = std::env::var(RANK_PROCESS_ENV).ok()?;
    Some(match run_rank(&job) {
        Ok(figures) => {
            let hex: String = figures.emit().iter().map(|b| format!("{b:02x}")).collect();
            println!("{FIGURES_LINE}{hex}");
            0
        }
        Err(e) => {
            eprintln!("rank process: {e:#}");
            1
        }
    })
}

fn run_rank(job: &str) -> Result<NodeFigures> {
    let job: RankJob = serde_json::from_str(job).map_err(|e| anyhow!("{RANK_PROCESS_ENV}: {e}"))?;
    let algorithm: barriers::Algorithm = job.algorithm.parse().map_err(|e: String| anyhow!(e))?;
    let mut config = BarrierConfig::new(algorithm).rails(job.rails);
    config.retry_timeout = Duration::from_micros(job.retry_us);
    config.min_retry_timeout = Duration::from_micros(job.min_retry_us);
    config.failure_timeout = Duration::from_millis(job.failure_ms);
    let endpoint_config = mcd::EndpointConfig::from_env()?;
    let bench = BarrierBench {
        method: job.method,
        warmup: job.warmup,
        iterations: job.iterations,
        dummy: Duration::from_nanos(job.dummy_ns),
        wait: endpoint_config.wait,
    };
    let endpoint = Endpoint::open(endpoint_config)?;
    if let Some(core) = job.pin {
        let _ = mcd::host::pin_current_thread(core);
    }
    let times = match job.release {
        Some(release) => {
            let release: barriers::HostRelease = release.parse().map_err(|e: String| anyhow!(e))?;
            let shared = barriers::SharedEndpoint::new(endpoint);
            let host = barriers::HostSettings { release: Some(release), ..barriers::HostSettings::from_env()? };
            let mut b = barriers::HierarchicalBarrier::on_endpoint(&shared, config, host)?;
            let before = b.stats();
            let mut times = bench.time_node(|| b.wait())?;
            times.recoveries = b.stats().recoveries() - before.recoveries();
            b.finish()?;
            times
        }
        None => {
            let mut b = barriers::Barrier::new(McdTransport::new(endpoint), config)?;
            let before = b.stats();
            let mut times = bench.time_node(|| b.wait())?;
            times.recoveries = b.stats().recoveries() - before.recoveries();
            b.finish()?;
            times
        }
    };
    Ok(times.figures())
}

/// The figures in a rank process's output.
fn parse_figures(stdout: &str) -> Option<NodeFigures> {
    let hex = stdout.lines().find_map(|l| l.strip_prefix(FIGURES_LINE))?;
    let bytes: Option<Vec<u8>> = (0..hex.len() / 2).map(|i| hex.get(2 * i..2 * i + 2).and_then(|b| u8::from_str_radix(b, 16).ok())).collect();
    NodeFigures::parse(&bytes?)
}

/// Measures `config` with `per_host` ranks on every node of `cluster` (a
/// node is a host: its namespace, one NIC), each rank a process of its own
/// (this program again, `program`, started with [`RANK_PROCESS_ENV`]: its
/// `main` must call [`rank_process_main`]), with its own endpoint (port =
/// its place on the host), as an MPI launcher would run them. `barrier`
/// says how they meet. The measurement's `nodes` counts ranks.
pub fn measure_ranks_per_host(
    cluster: &Cluster,
    per_host: usize,
    config: BarrierConfig,
    bench: BarrierBench,
    barrier: RanksBarrier,
) -> Result<BarrierMeasurement> {
    anyhow::ensure!(per_host >= 1, "at least one rank per host");
    let hosts = cluster.nodes();
    let ranks = hosts * per_host;
    anyhow::ensure!(per_host <= 256, "at most 256 ranks per host (one port each)");
    let mut addrs = Vec::with_capacity(ranks);
    for h in 0..hosts {
        for r in 0..per_host {
            let macs = (0..cluster.rails()).map(|rail| cluster.mac(h, rail)).collect();
            addrs.push(mcd::NodeAddr { macs, port: r as mcd::Port });
        }
    }
    let nodes = mcd::NodeList::new(addrs)?.to_text().trim_end().replace('\n', ";");
    let program = std::env::current_exe()?;
    let cores = mcd::host::online_cpus();
    // A job key of this run only: no segment or frame of another run is its.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let job_name = format!("rph-{}-{}-{run}", cluster.spec().name, std::process::id());
    let children = (0..ranks)
        .map(|rank| {
            let job = RankJob {
                algorithm: config.algorithm.to_string(),
                rails: config.rails,
                retry_us: config.retry_timeout.as_micros() as u64,
                min_retry_us: config.min_retry_timeout.as_micros() as u64,
                failure_ms: config.failure_timeout.as_millis() as u64,
                release: match barrier {
                    RanksBarrier::Flat => None,
                    RanksBarrier::Hierarchical { release, .. } => Some(release.to_string()),
                },
                method: bench.method,
                warmup: bench.warmup,
                iterations: bench.iterations,
                dummy_ns: bench.dummy.as_nanos() as u64,
                pin: (ranks <= cores).then_some(rank),
            };
            let mut cmd = cluster.command(rank / per_host, &program.display().to_string());
            cmd.env_remove("MCD_NODE_FILE")
                .env(RANK_PROCESS_ENV, serde_json::to_string(&job)?)
                .env("MCD_NODES", &nodes)
                .env("MCD_PORT", (rank % per_host).to_string())
                .env("MCD_RANK", rank.to_string())
                .env("MCD_SIZE", ranks.to_string())
                .env("MCD_JOB", &job_name)
                .env("MCD_WAIT", bench.wait.to_string())
                // Every rank of every namespace shares this machine's cores.
                .env("MCD_LOCAL_PROCS", ranks.to_string());
            match barrier {
                RanksBarrier::Hierarchical { local_wait: Some(w), .. } => cmd.env(barriers::HOST_WAIT_ENV, w.to_string()),
                _ => cmd.env_remove(barriers::HOST_WAIT_ENV),
            };
            Ok(mcd_vcluster::Collected::spawn(cmd)?)
        })
        .collect::<Result<Vec<_>>>()?;
    let limit = Duration::from_secs(60) + (bench.dummy + Duration::from_millis(5)) * (bench.warmup + bench.iterations) as u32;
    let deadline = Instant::now() + limit;
    let outcomes: Vec<_> = children.into_iter().enumerate().map(|(rank, c)| c.finish(rank, deadline)).collect();
    let figures = outcomes
        .iter()
        .map(|o| {
            parse_figures(&o.stdout)
                .filter(|_| o.success())
                .ok_or_else(|| anyhow!("{} on rank {}: {}: {}{}", config.algorithm, o.node, o.status(), o.stdout, o.stderr))
        })
        .collect::<Result<Vec<_>>>()?;
    let name = match barrier {
        RanksBarrier::Flat => config.algorithm.to_string(),
        RanksBarrier::Hierarchical { release, local_wait: None } => format!("hier:{}+{release}", config.algorithm),
        RanksBarrier::Hierarchical { release, local_wait: Some(w) } => format!("hier:{}+{release} (local ranks {w})", config.algorithm),
    };
    Ok(bench.summarize_figures(&name, config.rails, &figures))
}

/// Measures `config` across the hosts of a job: this process is one node,
/// `endpoint` its endpoint (opened by [`mcd::EndpointConfig::bootstrap`], say).
/// Every node runs the loop; node 0 then asks each node for its figures and
/// returns the measurement; the other nodes return `None`. `round` tells
/// successive calls' messages apart.
pub fn measure_across_hosts(
    endpoint: Endpoint,
    config: BarrierConfig,
    bench: BarrierBench,
    round: u32,
) -> Result<(Endpoint, Option<BarrierMeasurement>)> {
    use mcd::Destination;
    let mut barrier = barriers::Barrier::new(McdTransport::new(endpoint), config)?;
    let before = barrier.stats();
    let mut times = bench.time_node(|| barrier.wait())?;
    let after = barrier.stats();
    times.set_recoveries(after.recoveries() - before.recoveries());
    let mine = times.figures();
    // One closing barrier, then until no peer needs this node.
    barrier.finish()?;
    let mut ep = barrier.into_transport().into_endpoint();
    let n = ep.node_count();
    let me = ep.node_id();
    let mut buf = vec![0u8; 2048];
    if me != 0 {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let Some(m) = ep.recv(&mut buf, Some(Duration::from_millis(100)))? else { continue };
            if m.from == 0 && m.seq == round {
                match m.kind {
                    gather_kind::REQUEST => ep.send(0, Destination::Node(0), gather_kind::FIGURES, round, &mine.emit())?,
                    gather_kind::DONE => return Ok((ep, None)),
                    _ => {}
                }
            }
        }
        return Err(anyhow!("node {me}: node 0 never collected the results of {}", config.algorithm));
    }
    let mut figures: Vec<Option<NodeFigures>> = vec![None; n];
    figures[0] = Some(mine);
    let deadline = Instant::now() + Duration::from_secs(30);
    while figures.iter().any(Option::is_none) {
        if Instant::now() > deadline {
            let missing: Vec<usize> = (0..n).filter(|&i| figures[i].is_none()).collect();
            return Err(anyhow!("no results from node(s) {missing:?} for {}", config.algorithm));
        }
        for (i, _) in figures.iter().enumerate().filter(|(_, f)| f.is_none()) {
            ep.send(0, Destination::Node(i), gather_kind::REQUEST, round, &[])?;
        }
        let until = Instant::now() + Duration::from_millis(50);
        while let Some(m) = ep.recv(&mut buf, Some(until.saturating_duration_since(Instant::now())))? {
            if m.kind == gather_kind::FIGURES && m.seq == round {
                figures[m.from] = NodeFigures::parse(&buf[..m.len]);
            }
        }
    }
    // Tell everyone, a few times (no acknowledgement: a node that misses all
    // of them gives up after its own timeout).
    for _ in 0..3 {
        for i in 1..n {
            ep.send(0, Destination::Node(i), gather_kind::DONE, round, &[])?;
        }
    }
    let figures: Vec<NodeFigures> = figures.into_iter().map(|f| f.expect("all present")).collect();
    Ok((ep, Some(bench.summarize_figures(&config.algorithm.to_string(), config.rails, &figures))))
}

#[cfg(test)]
mod tests {
    use super::{collective_expected, collective_input, NodeFigures};
    use barriers::{Collective, Dtype, Op};

    fn doubles(bytes: &[u8]) -> Vec<f64> {
        bytes.chunks_exact(8).map(|c| f64::from_ne_bytes(c.try_into().unwrap())).collect()
    }

    #[test]
    fn measured_collectives_have_whole_inputs_and_a_reference_result() {
        let sum = Collective::Allreduce { op: Op::Sum, dtype: Dtype::F64 };
        assert_eq!(doubles(&collective_input(sum, 24, 2)), [2.0, 3.0, 4.0], "element i of node 2 is 2 + i");
        assert_eq!(collective_input(sum, 20, 0).len(), 16, "whole elements only");
        // 3 nodes: element i sums (0 + i) + (1 + i) + (2 + i).
        assert_eq!(doubles(&collective_expected(sum, 24, 1, 3).unwrap()), [3.0, 6.0, 9.0]);
        let max = Collective::Reduce { op: Op::Max, dtype: Dtype::I32, root: 2 };
        let at_root = collective_expected(max, 8, 2, 3).unwrap();
        assert_eq!(at_root, [2i32.to_ne_bytes(), 3i32.to_ne_bytes()].concat());
        assert_eq!(collective_expected(max, 8, 0, 3), None, "a reduce's non-roots hold nothing defined");
        let bcast = Collective::Bcast { root: 1 };
        assert_eq!(collective_expected(bcast, 3, 0, 4).unwrap(), [1, 2, 3], "the root's bytes");
        assert_eq!(collective_expected(Collective::Barrier, 0, 0, 2), None);
    }

    #[test]
    fn node_figures_travel_whole_and_other_lengths_are_refused() {
        let f = NodeFigures { min_us: 1.0, mean_us: 2.0, max_us: 3.0, p50_us: 4.0, p99_us: 5.0, p999_us: 6.0, loop_us: 7.0, recoveries: 8.0 };
        let bytes = f.emit();
        assert_eq!(&bytes[..8], &1.0f64.to_le_bytes(), "min first");
        assert_eq!(&bytes[56..], &6.0f64.to_le_bytes(), "p99.9 last");
        assert_eq!(NodeFigures::parse(&bytes), Some(f));
        assert_eq!(NodeFigures::parse(&bytes[..63]), None);
        assert_eq!(NodeFigures::parse(&[bytes.as_slice(), &[0]].concat()), None);
    }
}
