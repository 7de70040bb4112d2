//! Helpers for mcd's integration tests: every test builds its own virtual
//! cluster (named after the test, so tests run in parallel) behind a guard
//! that takes it down even when the test fails.
//!
//! These tests need root (network namespaces, raw sockets). Without it they
//! fail, saying so; they never skip.

use std::time::Duration;

use mcd::{Endpoint, EndpointConfig, Received};
use mcd_tools::vcluster::{Cluster, ClusterGuard, ClusterSpec};

/// Brings up the cluster `spec` behind a guard; panics with the reason
/// (not root, `ip` or `nft` missing) when it cannot.
pub fn cluster(spec: ClusterSpec) -> ClusterGuard {
    match Cluster::up_guarded(spec) {
        Ok(guard) => guard,
        Err(e) => panic!("this test needs a virtual cluster and could not build one: {e:#}"),
    }
}

/// Opens `config` as an endpoint of node `node` (inside its namespace).
pub fn open_on(cluster: &Cluster, node: usize, config: EndpointConfig) -> mcd::Result<Endpoint> {
    let _netns = cluster.enter(node).expect("enter node namespace");
    Endpoint::open(config)
}

/// Opens one endpoint per node with the cluster's default configuration and
/// blocking waits (tests run many threads on few cores).
pub fn open_all(cluster: &Cluster) -> Vec<Endpoint> {
    (0..cluster.nodes())
        .map(|n| {
            let mut config = cluster.endpoint_config();
            config.wait = mcd::WaitPolicy::Block;
            open_on(cluster, n, config).unwrap_or_else(|e| panic!("open endpoint on node {n}: {e}"))
        })
        .collect()
}

/// Receives until nothing has arrived for `quiet`: every message with its payload.
pub fn drain(ep: &mut Endpoint, quiet: Duration) -> Vec<(Received, Vec<u8>)> {
    let mut buf = vec![0u8; 9000];
    let mut out = Vec::new();
    while let Some(msg) = ep.recv(&mut buf, Some(quiet)).expect("recv") {
        out.push((msg, buf[..msg.len].to_vec()));
    }
    out
}

/// What one run of barriers across nodes produced.
#[derive(Debug)]
pub struct BarrierRun {
    /// Each node's entry and exit times.
    pub timelines: Vec<barriers::check::Timeline>,
    /// Each node's barrier counters.
    pub stats: Vec<barriers::BarrierStats>,
}

/// Runs `count` barriers on every transport, one thread per node, each node
/// entering after a small random delay now and then (so arrivals spread).
/// Returns the first node's error, if any.
pub fn run_barriers<T>(transports: Vec<T>, config: barriers::BarrierConfig, count: usize) -> Result<BarrierRun, String>
where
    T: barriers::Transport + Send + 'static,
{
    use std::time::Instant;
    let results = barriers::threads::run_per_node(transports, config, move |b| {
        let me = b.transport().node();
        let mut timeline = barriers::check::Timeline::default();
        let mut rng = (me as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for _ in 0..count {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            if rng.is_multiple_of(8) {
                let until = Instant::now() + Duration::from_micros(rng % 200);
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
            }
            let entered = Instant::now();
            b.wait()?;
            timeline.record(entered, Instant::now());
        }
        Ok((timeline, b.stats()))
    });
    let mut run = BarrierRun { timelines: Vec::new(), stats: Vec::new() };
    for (node, result) in results.into_iter().enumerate() {
        let (timeline, stats) = result.map_err(|e| format!("node {node}: {e}"))?;
        run.timelines.push(timeline);
        run.stats.push(stats);
    }
    Ok(run)
}

/// Asserts that all `count` barriers of `run` completed on every node and that
/// none let a node leave before every node had entered.
pub fn assert_safe(run: &BarrierRun, count: usize, what: &str) {
    let (violations, checked) = barriers::check::check(&run.timelines);
    assert_eq!(checked, count, "{what}: not every node completed every barrier");
    assert!(violations.is_empty(), "{what}: {} violation(s), first {:?}", violations.len(), violations[0]);
}

/// Starts `argv` on each of `nodes` of `cluster` at once, each with the node's
/// environment ([`Cluster::node_env`]) but without `MCD_NODE_FILE` (so the
/// bootstrap discovers the nodes), plus `env(i)` for the i-th process (a node
/// may appear more than once: ranks sharing a host); collects their outcomes,
/// killing what still runs after `timeout`.
pub fn run_discovering(
    cluster: &Cluster,
    nodes: &[usize],
    argv: &[&str],
    env: impl Fn(usize) -> Vec<(String, String)>,
    timeout: Duration,
) -> Vec<mcd_tools::vcluster::NodeOutcome> {
    let children: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, &node)| {
            let mut cmd = cluster.command(node, argv[0]);
            cmd.args(&argv[1..]).env_remove("MCD_NODE_FILE").envs(env(i));
            (node, mcd_tools::vcluster::Collected::spawn(cmd).unwrap_or_else(|e| panic!("starting {} on node {node}: {e}", argv[0])))
        })
        .collect();
    let deadline = std::time::Instant::now() + timeout;
    children.into_iter().map(|(node, child)| child.finish(node, deadline)).collect()
}
