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
use barriers::{BarrierConfig, McdTransport, Transport};
use hdrhistogram::Histogram;
use mcd::{Endpoint, WaitPolicy};
use serde::Serialize;

use crate::vcluster::Cluster;

/// The timing convention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
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
#[derive(Clone, Debug, Serialize)]
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
    /// Point-to-point re-sends and answers, all nodes, warm-up included (loss recovery at work).
    pub recoveries: u64,
}

/// One node's timings of a run.
pub struct NodeTimes {
    hist: Histogram<u64>,
    /// The node's whole timed loop (OSU's per-node mean is this / iterations).
    loop_time: Duration,
    recoveries: u64,
}

fn spin_for(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
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
        Ok(NodeTimes { hist, loop_time: start.elapsed(), recoveries: 0 })
    }

    /// Combines the nodes' timings into the figures of this method.
    pub fn summarize(&self, algorithm: &str, rails: usize, nodes: &[NodeTimes]) -> BarrierMeasurement {
        let n = nodes.len().max(1) as f64;
        let avg = |f: &dyn Fn(&Histogram<u64>) -> f64| nodes.iter().map(|t| f(&t.hist)).sum::<f64>() / n / 1000.0;
        let (min_us, mean_us, max_us) = match self.method {
            Method::Paper => (avg(&|h| h.min() as f64), avg(&|h| h.mean()), avg(&|h| h.max() as f64)),
            Method::Osu => {
                let means: Vec<f64> =
                    nodes.iter().map(|t| t.loop_time.as_secs_f64() * 1e6 / self.iterations.max(1) as f64).collect();
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
            p50_us: avg(&|h| h.value_at_quantile(0.5) as f64),
            p99_us: avg(&|h| h.value_at_quantile(0.99) as f64),
            recoveries: nodes.iter().map(|t| t.recoveries).sum(),
        }
    }
}

/// Measures `config` on every node of `cluster` (one thread per node, each in
/// its namespace; pinned to a core of its own while nodes ≤ cores).
pub fn measure(cluster: &Cluster, config: BarrierConfig, bench: BarrierBench) -> Result<BarrierMeasurement> {
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
        let me = b.transport().node();
        if n <= cores {
            let _ = mcd::host::pin_current_thread(me);
        }
        let before = b.stats();
        let mut times = bench.time_node(|| b.wait())?;
        let after = b.stats();
        times.recoveries = (after.resends + after.answers) - (before.resends + before.answers);
        Ok(times)
    });
    let nodes: Vec<NodeTimes> = results
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.map_err(|e| anyhow!("{} on node {i}: {e}", config.algorithm)))
        .collect::<Result<_>>()?;
    Ok(bench.summarize(&config.algorithm.to_string(), config.rails, &nodes))
}
