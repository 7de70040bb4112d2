//! Hosts × ranks per host: the hierarchical barrier's cost against the flat
//! one's, and the choice between them ([`auto_layout`]).
//!
//! The hierarchical barrier ([`crate::HierarchicalBarrier`]) costs a
//! gather in shared memory (the leader sees the last arrival: one cache-line
//! transfer, [`ShmCosts::transfer`], plus its scan of the others' lines),
//! the leaders' barrier among `hosts` nodes (the simulator's prediction),
//! and a release in shared memory (one more transfer). With more ranks on
//! a host than cores, every rank of the host must also get a core: each
//! such turn costs a wake-up ([`ShmCosts::wake`]), the host's cores taking
//! them in parallel. The flat barrier is the simulator's prediction for all
//! `hosts × per_host` ranks on the wire, with a host's ranks sharing its
//! cores ([`Host::shared`]).

use super::{auto_on_host, predict, Host, LogP, Prediction, Setup};
use crate::plan::Algorithm;
use crate::plan::HostRelease;

/// What shared memory costs between two processes of one host (µs), as
/// `mcd-logp --shm` measures it.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ShmCosts {
    /// A store seen by a rank spinning on another core: one cache-line
    /// transfer (half a busy-polling round trip).
    pub transfer: f64,
    /// Waking a rank asleep on the futex, beyond the transfer.
    pub wake: f64,
    /// The leader's scan of one rank's arrival line.
    pub scan: f64,
}

impl ShmCosts {
    /// The reference machine (2 vCPUs), `mcd-logp --shm`: transfer 0.36,
    /// wake-up 25.5, scan 0.006 µs.
    pub const REFERENCE: ShmCosts = ShmCosts { transfer: 0.36, wake: 25.5, scan: 0.006 };
}

/// The kernel's cost of delivering one received frame into one more
/// socket's ring on a host (µs): a host whose ranks all take the leaders'
/// release multicast ([`HostRelease::Multicast`]) has it copied into each
/// of their rings. Not measured by `mcd-logp`: taken from the virtual
/// cluster's flooding bridge, whose sender pays about this per extra port
/// (one-way 2.8 µs on a learning bridge, 11.8 µs flooding 16 ports).
pub const RING_COPY_US: f64 = 0.6;

/// The hierarchical barrier's predicted time (µs) on `setup` (a network
/// preset, say), for `hosts` hosts of `per_host` ranks on `cores` cores
/// each, the leaders running `outer` and the hosts released by `release`;
/// `sleeping`: the ranks wait asleep (futex, `ppoll`) rather than polling.
///
/// The release through shared memory costs one transfer after the leader
/// has the leaders' release, or, asleep, a second wake-up after the
/// leader's own; the direct release costs no step after the network, but
/// the kernel delivers the multicast into every rank's ring
/// ([`RING_COPY_US`] each beyond the first), and asleep every rank wakes
/// at once, on the frame.
#[allow(clippy::too_many_arguments)]
pub fn hierarchical_cost_released(
    outer: Algorithm,
    (hosts, per_host, cores): (usize, usize, usize),
    rails: usize,
    setup: &Setup,
    shm: &ShmCosts,
    release: HostRelease,
    sleeping: bool,
) -> f64 {
    let network = if hosts > 1 { predict(outer, hosts, rails, setup).last_exit } else { 0.0 };
    if per_host == 1 {
        return network;
    }
    let gather = shm.transfer + (per_host - 1) as f64 * shm.scan + if sleeping { shm.wake } else { 0.0 };
    let direct = release == HostRelease::Multicast && hosts > 1;
    let release = match (direct, sleeping) {
        (true, _) => (per_host - 1) as f64 * RING_COPY_US,
        (false, false) => shm.transfer,
        (false, true) => shm.wake + shm.transfer,
    };
    let turns = if per_host > cores { 2.0 * (per_host as f64 / cores.max(1) as f64).ceil() * shm.wake } else { 0.0 };
    network + gather + release + turns
}

/// The barrier's layout: every rank on the wire, or each host's ranks in
/// shared memory and one leader per host on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Every rank runs the algorithm on the network.
    Flat(Algorithm),
    /// The hosts' leaders run the algorithm among themselves.
    Hierarchical(Algorithm),
}

/// The hierarchical barrier's predicted time (µs) for `hosts` hosts of
/// `per_host` ranks on `cores` cores each, the leaders running `outer`.
pub fn hierarchical_cost(outer: Algorithm, hosts: usize, per_host: usize, cores: usize, rails: usize, p: &LogP, shm: &ShmCosts) -> f64 {
    let network = if hosts > 1 { predict(outer, hosts, rails, &Setup::logp(p)).last_exit } else { 0.0 };
    let local = if per_host > 1 { 2.0 * shm.transfer + (per_host - 1) as f64 * shm.scan } else { 0.0 };
    // Oversubscribed: the host's ranks take turns on its cores, twice per
    // barrier (to arrive, to leave).
    let turns = if per_host > cores { 2.0 * (per_host as f64 / cores.max(1) as f64).ceil() * shm.wake } else { 0.0 };
    network + local + turns
}

/// The flat barrier's prediction for `hosts × per_host` ranks on the wire,
/// each host's ranks sharing its `cores` cores (a switch of core costing a
/// wake-up).
pub fn flat_cost(algorithm: Algorithm, hosts: usize, per_host: usize, cores: usize, rails: usize, p: &LogP, shm: &ShmCosts) -> Prediction {
    let setup = Setup::logp(p).with_host(Host::shared(per_host, cores, shm.wake));
    predict(algorithm, hosts * per_host, rails, &setup)
}

/// Flat or hierarchical, and the algorithm on the wire, with the lowest
/// predicted time for `hosts` hosts of `per_host` ranks on `cores` cores
/// each (algorithms as [`auto_on_host`] picks them for what is on the wire),
/// and that time.
pub fn auto_layout(hosts: usize, per_host: usize, cores: usize, rails: usize, p: &LogP, multicast: bool, shm: &ShmCosts) -> (Layout, f64) {
    let ranks = hosts * per_host;
    let (flat, _) = auto_on_host(ranks, rails, p, multicast, per_host, cores);
    let flat_time = flat_cost(flat, hosts, per_host, cores, rails, p, shm).last_exit;
    if per_host == 1 {
        return (Layout::Flat(flat), flat_time);
    }
    let (outer, _) = auto_on_host(hosts, rails, p, multicast, 1, cores);
    let hier_time = hierarchical_cost(outer, hosts, per_host, cores, rails, p, shm);
    if hier_time < flat_time {
        (Layout::Hierarchical(outer), hier_time)
    } else {
        (Layout::Flat(flat), flat_time)
    }
}

/// The host phases of the hierarchical barrier, µs, with ranks polling and
/// a release through shared memory (as [`hierarchical_cost`] counts them):
/// before the leader enters the leaders' barrier, the gather (the last
/// arrival's transfer and the leader's scan of the others); after it
/// leaves, the release (one transfer). For
/// [`super::protocol::Scenario::host_phases_us`].
pub fn host_phases_us(per_host: usize, shm: &ShmCosts) -> (f64, f64) {
    if per_host <= 1 {
        return (0.0, 0.0);
    }
    (shm.transfer + (per_host - 1) as f64 * shm.scan, shm.transfer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rank_per_host_stays_flat_and_several_go_hierarchical() {
        let p = LogP::REFERENCE;
        let shm = ShmCosts::REFERENCE;
        assert!(matches!(auto_layout(8, 1, 16, 1, &p, true, &shm).0, Layout::Flat(_)));
        for (hosts, per_host, cores) in [(4, 4, 16), (2, 8, 16), (8, 2, 2), (3, 5, 2), (4, 8, 2)] {
            let (layout, time) = auto_layout(hosts, per_host, cores, 1, &p, true, &shm);
            assert!(matches!(layout, Layout::Hierarchical(_)), "{hosts}x{per_host} on {cores} cores: {layout:?} ({time:.1} µs)");
        }
    }

    #[test]
    fn the_direct_release_wins_asleep_and_loses_polling() {
        let p = LogP::REFERENCE;
        let setup = Setup::logp(&p);
        let shm = ShmCosts::REFERENCE;
        let outer = Algorithm::Tree { k: crate::Fanout::FOUR, release: crate::Release::Multicast };
        let cost = |release, sleeping| hierarchical_cost_released(outer, (4, 4, 4), 1, &setup, &shm, release, sleeping);
        assert!(cost(HostRelease::Multicast, true) + shm.wake * 0.9 < cost(HostRelease::SharedMemory, true));
        assert!(cost(HostRelease::SharedMemory, false) < cost(HostRelease::Multicast, false));
        // One host: nothing to multicast, both release through memory.
        let one = |release| hierarchical_cost_released(outer, (1, 4, 4), 1, &setup, &shm, release, false);
        assert_eq!(one(HostRelease::Multicast), one(HostRelease::SharedMemory));
    }

    #[test]
    fn the_local_steps_cost_two_transfers_and_the_scan_on_dedicated_cores() {
        let p = LogP::REFERENCE;
        let shm = ShmCosts { transfer: 1.0, wake: 100.0, scan: 0.5 };
        let outer = Algorithm::Dissemination;
        let network = predict(outer, 4, 1, &Setup::logp(&p)).last_exit;
        assert!((hierarchical_cost(outer, 4, 3, 4, 1, &p, &shm) - (network + 2.0 + 1.0)).abs() < 1e-9);
        // One host: no network at all.
        assert!((hierarchical_cost(outer, 1, 3, 4, 1, &p, &shm) - 3.0).abs() < 1e-9);
        // Oversubscribed: turns on the cores.
        assert!(hierarchical_cost(outer, 4, 8, 2, 1, &p, &shm) > network + 2.0 * 4.0 * 100.0);
    }
}
