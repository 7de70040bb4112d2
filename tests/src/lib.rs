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
/// entering after a small random delay now and then (so arrivals spread), and
/// keeps every node answering its peers until all are done. Returns the first
/// node's error, if any.
pub fn run_barriers<T>(transports: Vec<T>, config: barriers::BarrierConfig, count: usize) -> Result<BarrierRun, String>
where
    T: barriers::Transport + Send + 'static,
{
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let n = transports.len();
    let done = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = transports
        .into_iter()
        .map(|t| {
            let done = done.clone();
            std::thread::spawn(move || -> Result<_, String> {
                // Counts this node done however the thread ends, even by a panic.
                struct Done(Arc<AtomicUsize>);
                impl Drop for Done {
                    fn drop(&mut self) {
                        self.0.fetch_add(1, Ordering::SeqCst);
                    }
                }
                let finished = Done(done.clone());
                let me = t.node();
                let mut b = barriers::Barrier::new(t, config).map_err(|e| e.to_string())?;
                let mut timeline = barriers::check::Timeline::default();
                let mut rng = (me as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let result = (|| {
                    for _ in 0..count {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        if rng % 8 == 0 {
                            let until = std::time::Instant::now() + Duration::from_micros(rng % 200);
                            while std::time::Instant::now() < until {
                                std::hint::spin_loop();
                            }
                        }
                        let entered = std::time::Instant::now();
                        b.wait().map_err(|e| format!("node {me}: {e}"))?;
                        timeline.record(entered, std::time::Instant::now());
                    }
                    Ok(())
                })();
                drop(finished);
                // Keep answering stragglers (a lost release, say) until every
                // node is done, but never longer than a minute.
                let limit = std::time::Instant::now() + Duration::from_secs(60);
                while done.load(Ordering::SeqCst) < n && std::time::Instant::now() < limit {
                    let _ = b.linger(Duration::from_millis(2));
                }
                result.map(|()| (timeline, b.stats()))
            })
        })
        .collect();
    let mut run = BarrierRun { timelines: Vec::new(), stats: Vec::new() };
    let mut first_error = None;
    for t in threads {
        match t.join().map_err(|_| "node thread panicked".to_string()).and_then(|r| r) {
            Ok((timeline, stats)) => {
                run.timelines.push(timeline);
                run.stats.push(stats);
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(run),
    }
}

/// Asserts that all `count` barriers of `run` completed on every node and that
/// none let a node leave before every node had entered.
pub fn assert_safe(run: &BarrierRun, count: usize, what: &str) {
    let (violations, checked) = barriers::check::check(&run.timelines);
    assert_eq!(checked, count, "{what}: not every node completed every barrier");
    assert!(violations.is_empty(), "{what}: {} violation(s), first {:?}", violations.len(), violations[0]);
}
