//! The model of a virtual cluster: every node a process on one machine, its
//! NIC a veth pair on a Linux bridge. What the model takes from it, each
//! measured there (`mcd-logp`): LogP (no wire: L ≈ 0), the wake-up, and what
//! a bridge's copies cost the sender; and one fitted number, the engine's
//! own time per barrier beyond its messages (what a 2-node barrier of one
//! message each way costs beyond a ping-pong's hop: `mcd-bench validate
//! --measure` fits it in every run, on a cluster of its own).
//!
//! Where the processes outnumber the cores, a point prediction is only as
//! good as the model of the scheduler, so [`VirtualCluster::estimate`] also
//! gives bounds: below, the processes take turns on the cores with free
//! changes of process (the sharing of the cores alone); above, every message
//! also pays a wake-up at both ends, spread over the cores.

use super::{steady_state, Host, LogP, Prediction, Setup, Topology};
use crate::plan::Algorithm;

/// The virtual cluster's parameters (µs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VirtualCluster {
    /// LogP between two nodes, busy-polling.
    pub logp: LogP,
    /// The machine's cores, which all the nodes share.
    pub cores: usize,
    /// A change of process on a core: a wake-up (RTT/2 blocking − busy).
    pub wake: f64,
    /// The engine's and the benchmark's own time per barrier beyond its messages.
    pub engine: f64,
    /// What the bridge's copies of a multicast beyond the first cost the
    /// sender each ([`Setup::fanout_us`]).
    pub fanout: f64,
    /// What a hub's copies of a unicast to other ports cost the sender each
    /// ([`Setup::flood_us`]).
    pub flood: f64,
    /// Nodes per machine: `None`, all of them on this one (the virtual
    /// cluster); `Some(k)`, k per host of a real cluster (its NICs then
    /// copy nothing in software: give `fanout` and `flood` 0).
    pub per_host: Option<usize>,
}

/// A prediction, with bounds where processes outnumber cores.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// The model's point prediction.
    pub predicted: Prediction,
    /// (below, above), µs, where the processes outnumber the cores.
    pub bounds: Option<(f64, f64)>,
}

impl Estimate {
    /// The verdict on `measured` µs: within `goal` percent of the point
    /// prediction (20 where processes fit the cores, 35 beyond), else within
    /// the bounds, else missed.
    pub fn verdict(&self, measured: f64) -> Verdict {
        let goal = if self.bounds.is_some() { 35.0 } else { 20.0 };
        let error = (self.predicted.mean_cost - measured) / measured * 100.0;
        if error.abs() <= goal {
            Verdict::Within(goal)
        } else if self.bounds.is_some_and(|(lo, hi)| lo <= measured && measured <= hi) {
            Verdict::Bounded
        } else {
            Verdict::Missed
        }
    }
}

/// How a measurement compares with an [`Estimate`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    /// Within this many percent of the point prediction.
    Within(f64),
    /// Outside the percentage, inside the bounds.
    Bounded,
    /// Neither.
    Missed,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::Within(goal) => write!(f, "within {goal:.0}%"),
            Verdict::Bounded => f.write_str("within the bounds"),
            Verdict::Missed => f.write_str("missed"),
        }
    }
}

/// The paper's benchmark loop as the virtual cluster's benchmark runs it
/// for the model: 50 barriers (the steady state settles well before).
const ITERATIONS: u32 = 50;

impl VirtualCluster {
    /// `n` nodes on this machine behind a bridge of `topology`
    /// ([`Topology::Switch`]: a learning bridge; [`Topology::FloodingBridge`]:
    /// the virtual hub): no wire, the processes taking turns on the cores
    /// with a wake-up per change, the engine's time per barrier, and the
    /// bridge's copies charged to the sender.
    pub fn setup(&self, n: usize, topology: Topology) -> Setup {
        let host = Host { per_barrier: self.engine, ..Host::shared(self.per_host.unwrap_or(n), self.cores, self.wake) };
        Setup { topology, fanout_us: self.fanout, flood_us: self.flood, ..Setup::logp(&self.logp).with_host(host) }
    }

    /// `algorithm` among `n` nodes on `rails` rails in the paper's loop
    /// (`dummy_us` of work between barriers), with bounds where the nodes
    /// outnumber the cores.
    pub fn estimate(&self, algorithm: Algorithm, n: usize, rails: usize, topology: Topology, dummy_us: f64) -> Estimate {
        self.estimate_with_data(algorithm, n, rails, topology, dummy_us, 0)
    }

    /// As [`estimate`](Self::estimate), each message carrying `data` bytes
    /// more (a collective's contribution).
    pub fn estimate_with_data(&self, algorithm: Algorithm, n: usize, rails: usize, topology: Topology, dummy_us: f64, data: usize) -> Estimate {
        let setup = self.setup(n, topology);
        let setup = Setup { bytes: setup.bytes + data, ..setup };
        let predicted = steady_state(algorithm, n, rails, &setup, ITERATIONS, dummy_us);
        let bounds = setup.host.oversubscribed().then(|| {
            let free = Setup { host: Host { switch: 0.0, ..setup.host }, ..setup };
            let lower = steady_state(algorithm, n, rails, &free, ITERATIONS, dummy_us).mean_cost;
            let p = &self.logp;
            let woken = predicted.deliveries as f64 * (p.o_r + self.wake) + predicted.messages as f64 * (p.o_s + self.wake);
            (lower, predicted.mean_cost + woken / self.cores as f64)
        });
        Estimate { predicted, bounds }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Fanout, Release};

    const HERE: VirtualCluster = VirtualCluster { logp: LogP::REFERENCE, cores: 2, wake: 23.0, engine: 3.3, fanout: 1.5, flood: 0.6, per_host: None };
    const TREE4: Algorithm = Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast };

    #[test]
    fn the_virtual_hub_charges_the_sender_per_port() {
        // Two nodes: one port beyond the sender either way, nothing to flood.
        let two = |t| HERE.estimate(Algorithm::ShuffleExchange, 2, 1, t, 30.0).predicted.mean_cost;
        assert_eq!(two(Topology::Switch), two(Topology::FloodingBridge));
        // Sixteen on a dedicated core each: shuffle exchange's 4 dependent
        // sends each pay 14 copies on the flooding bridge, none on the switch.
        let dedicated = VirtualCluster { cores: 16, ..HERE };
        let at16 = |t| dedicated.estimate(Algorithm::ShuffleExchange, 16, 1, t, 30.0).predicted.last_exit;
        let extra = at16(Topology::FloodingBridge) - at16(Topology::Switch);
        assert!((extra - 4.0 * 14.0 * 0.6).abs() < 1e-6, "{extra}");
        // A multicast is copied by the learning bridge too: the tree's
        // release costs 14 copies of 1.5 on both, its gather (unicast) more
        // on the hub.
        let tree = |t, fanout| VirtualCluster { fanout, ..dedicated }.estimate(TREE4, 16, 1, t, 30.0).predicted.last_exit;
        assert!((tree(Topology::Switch, 1.5) - tree(Topology::Switch, 0.0) - 14.0 * 1.5).abs() < 1e-6);
        assert!(tree(Topology::FloodingBridge, 1.5) > tree(Topology::Switch, 1.5) + 14.0 * 0.6 - 1e-6);
    }

    #[test]
    fn hosts_of_a_real_cluster_share_only_their_own_cores() {
        // 16 nodes, 2 per host of 2 cores: nobody waits for a core.
        let spread = VirtualCluster { per_host: Some(2), ..HERE }.estimate(TREE4, 16, 1, Topology::Switch, 30.0);
        assert_eq!(spread.bounds, None);
        let packed = VirtualCluster { per_host: Some(8), ..HERE }.estimate(TREE4, 16, 1, Topology::Switch, 30.0);
        assert!(packed.bounds.is_some() && packed.predicted.mean_cost > spread.predicted.mean_cost + HERE.wake, "{packed:?} {spread:?}");
        // Three processes on two cores: the last node shares core 0.
        let three = VirtualCluster { per_host: Some(3), ..HERE }.estimate(Algorithm::Dissemination, 3, 1, Topology::Switch, 30.0);
        assert!(three.bounds.is_some() && three.predicted.mean_cost > 0.0, "{three:?}");
    }

    #[test]
    fn bounds_only_where_processes_outnumber_cores_and_they_hold_the_point() {
        let fits = HERE.estimate(Algorithm::Dissemination, 2, 1, Topology::Switch, 30.0);
        assert_eq!(fits.bounds, None);
        assert_eq!(fits.verdict(fits.predicted.mean_cost * 1.19), Verdict::Within(20.0));
        assert_eq!(fits.verdict(fits.predicted.mean_cost * 1.3), Verdict::Missed);
        for top in [Topology::Switch, Topology::FloodingBridge] {
            for a in [Algorithm::ShuffleExchange, TREE4, Algorithm::OnePhase] {
                let e = HERE.estimate(a, 8, 1, top, 30.0);
                let (lo, hi) = e.bounds.expect("8 processes on 2 cores");
                assert!(lo <= e.predicted.mean_cost && e.predicted.mean_cost <= hi, "{a} {top}: {lo} {:?} {hi}", e.predicted);
                assert_eq!(e.verdict(hi), if e.predicted.mean_cost * 1.35 >= hi { Verdict::Within(35.0) } else { Verdict::Bounded });
                assert_eq!(e.verdict(hi * 1.01 + 1.0), Verdict::Missed);
            }
        }
    }
}
