//! The collectives a programmer writes without mcd, on the UDP group of
//! [`crate::udpbarrier`]: the baseline of `mcd-bench collectives`.
//!
//! - **Allreduce** (sum of doubles): recursive doubling, as MPICH and Open
//!   MPI do for small messages. Round r exchanges the whole vector with node
//!   `me XOR 2^r` and adds; both partners add the same two partial sums
//!   (IEEE addition is commutative), so every node ends with the same bits.
//!   With n not a power of two, the
//!   nodes beyond the largest power of two p first fold their vector into
//!   node `me − p`, and get the result back from it at the end.
//! - **Broadcast** from any root: a binomial tree (the root sends to
//!   ⌈log₂ n⌉ nodes, each forwards to its own subtree). The root returns
//!   once its datagrams are sent (eager, as MPI over TCP is); so that it
//!   cannot outrun a slow receiver's socket buffer, every
//!   [`BCAST_WINDOW`]th broadcast ends with a barrier (a window of
//!   broadcasts in flight, as TCP's flow control gives MPI).
//!
//! One datagram per message, whatever IP fragments it into; no loss
//! recovery (as the UDP barrier has none): a lost datagram is a timeout.
//! [`measure`] times them on a virtual cluster with the loop and statistics
//! of `mpi/coll_bench.c`, checking every result, one thread per node;
//! [`measure_processes`] the same with one process per node, as MPI's ranks
//! are (each runs [`rank_process`]).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

pub use crate::udpbarrier::BCAST_WINDOW;
use crate::udpbarrier::{CallKind, UdpGroup, MAX_STEPS};
use mcd_vcluster::Cluster;

/// The UDP port the collectives use in every namespace.
pub const UDP_COLLECTIVES_PORT: u16 = 47003;

/// The allreduce's steps: the fold, the rounds, the unfold.
const FOLD: usize = 0;
const UNFOLD: usize = MAX_STEPS - 1;

fn put_f64s(buf: &mut [u8], values: &[f64]) {
    for (chunk, v) in buf.chunks_exact_mut(8).zip(values) {
        chunk.copy_from_slice(&v.to_le_bytes());
    }
}

fn f64_at(bytes: &[u8], i: usize) -> f64 {
    f64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().expect("8 bytes"))
}

impl UdpGroup {
    /// Sums `data` element by element across the group, in place: every
    /// node gets the same bits.
    pub fn allreduce_sum_f64(&mut self, data: &mut [f64]) -> Result<()> {
        let len = std::mem::size_of_val(data);
        if len > self.max_data() {
            bail!("an allreduce of {len} bytes on a UDP group bound for at most {}", self.max_data());
        }
        let (n, me) = (self.size(), self.rank());
        self.epoch = self.epoch.wrapping_add(1);
        let p = 1usize << n.ilog2();
        let kind = CallKind::Allreduce;
        if me >= p {
            // Folded into node me − p; the result comes back from it.
            self.send(me - p, FOLD, kind, |buf| put_f64s(buf, data), len)?;
            let slot = self.receive(UNFOLD, kind, len)?;
            let got = self.data(slot);
            for (i, v) in data.iter_mut().enumerate() {
                *v = f64_at(got, i);
            }
            self.release(slot);
            return Ok(());
        }
        if me < n - p {
            let slot = self.receive(FOLD, kind, len)?;
            let got = self.data(slot);
            for (i, v) in data.iter_mut().enumerate() {
                *v += f64_at(got, i);
            }
            self.release(slot);
        }
        let (mut mask, mut step) = (1, FOLD + 1);
        while mask < p {
            let partner = me ^ mask;
            self.send(partner, step, kind, |buf| put_f64s(buf, data), len)?;
            let slot = self.receive(step, kind, len)?;
            let got = self.data(slot);
            for (i, v) in data.iter_mut().enumerate() {
                // The same two partial sums on both partners: the same bits.
                *v += f64_at(got, i);
            }
            self.release(slot);
            mask <<= 1;
            step += 1;
        }
        if me < n - p {
            self.send(me + p, UNFOLD, kind, |buf| put_f64s(buf, data), len)?;
        }
        Ok(())
    }

    /// Broadcasts `data` from node `root` to every node (binomial tree).
    pub fn bcast(&mut self, root: usize, data: &mut [u8]) -> Result<()> {
        let (n, me, len) = (self.size(), self.rank(), data.len());
        if root >= n {
            bail!("a broadcast from node {root} in a group of {n}");
        }
        if len > self.max_data() {
            bail!("a broadcast of {len} bytes on a UDP group bound for at most {}", self.max_data());
        }
        self.epoch = self.epoch.wrapping_add(1);
        let relative = (me + n - root) % n;
        let mut mask = 1;
        while mask < n {
            if relative & mask != 0 {
                let slot = self.receive(0, CallKind::Bcast, len)?;
                data.copy_from_slice(self.data(slot));
                self.release(slot);
                break;
            }
            mask <<= 1;
        }
        mask >>= 1;
        while mask > 0 {
            if relative + mask < n {
                self.send((relative + mask + root) % n, 0, CallKind::Bcast, |buf| buf.copy_from_slice(data), len)?;
            }
            mask >>= 1;
        }
        self.bcasts += 1;
        if self.bcasts.is_multiple_of(BCAST_WINDOW as u64) {
            self.barrier()?;
        }
        Ok(())
    }
}

/// One collective at one size, in the format of `mpi/coll_bench.c`'s lines:
/// each rank's median, 99th percentile, mean and maximum of its calls,
/// averaged over the ranks.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct CollectiveLine {
    /// `allreduce` or `bcast`.
    pub collective: String,
    /// Bytes of data (whole doubles).
    pub bytes: usize,
    /// Ranks.
    pub ranks: usize,
    /// Timed calls per rank.
    pub iterations: usize,
    /// Median call, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// Mean call, µs.
    pub mean_us: f64,
    /// Slowest call, µs.
    pub max_us: f64,
    /// Every rank got the right result from every call.
    pub correct: bool,
    /// An untimed barrier before each call (osu_bcast's way).
    pub sync: bool,
}

/// One rank's figures of one collective at one size: median, 99th
/// percentile, mean, maximum (coll_bench's: sorted times, t[n/2] and
/// t[0.99 n]), µs, and whether every result was right.
#[derive(Clone, Copy, Debug, Deserialize, Serialize)]
struct RankFigures([f64; 4], bool);

fn figures(times: &mut [f64], correct: bool) -> RankFigures {
    let n = times.len();
    let mean = times.iter().sum::<f64>() / n as f64;
    let p99 = barriers::summary::quantile(times, 0.99);
    RankFigures([barriers::summary::median(times), p99, mean, times[n - 1]], correct)
}

/// How to time: calls per size and collective.
#[derive(Clone, Copy, Debug)]
pub struct CollectiveBench {
    /// Untimed calls first.
    pub warmup: usize,
    /// Timed calls.
    pub iterations: usize,
    /// An untimed barrier before each timed call (the OSU way).
    pub sync: bool,
}

/// One rank's run of coll_bench's loop: for each size, allreduce (rank r
/// contributes r + i as element i) then a broadcast from node 0 (of k + i
/// in call k), each `bench.warmup` untimed calls then `bench.iterations`
/// timed ones, every result checked outside the timing.
fn rank_loop(group: &mut UdpGroup, sizes: &[usize], bench: CollectiveBench) -> Result<Vec<RankFigures>> {
    let (n, me) = (group.size(), group.rank());
    let mut times = vec![0.0; bench.iterations];
    let mut figures_of = Vec::new();
    for &bytes in sizes {
        let count = (bytes / 8).max(1);
        let input: Vec<f64> = (0..count).map(|i| (me + i) as f64).collect();
        let want: Vec<f64> = (0..count).map(|i| (n * (n - 1) / 2 + i * n) as f64).collect();
        let mut out = vec![0.0; count];
        for _ in 0..bench.warmup {
            out.copy_from_slice(&input);
            group.allreduce_sum_f64(&mut out)?;
        }
        let mut correct = true;
        for t in times.iter_mut() {
            if bench.sync {
                group.barrier()?;
            }
            let t0 = Instant::now();
            out.copy_from_slice(&input);
            group.allreduce_sum_f64(&mut out)?;
            *t = t0.elapsed().as_secs_f64() * 1e6;
            correct &= out == want;
        }
        figures_of.push(figures(&mut times, correct));
        let mut buf = vec![0u8; count * 8];
        let fill = |buf: &mut [u8], k: usize| {
            for (i, chunk) in buf.chunks_exact_mut(8).enumerate() {
                chunk.copy_from_slice(&((k + i) as f64).to_le_bytes());
            }
        };
        for _ in 0..bench.warmup {
            group.bcast(0, &mut buf)?;
        }
        let mut correct = true;
        for (k, t) in times.iter_mut().enumerate() {
            if me == 0 {
                fill(&mut buf, k);
            }
            if bench.sync {
                group.barrier()?;
            }
            let t0 = Instant::now();
            group.bcast(0, &mut buf)?;
            *t = t0.elapsed().as_secs_f64() * 1e6;
            correct &= buf.chunks_exact(8).enumerate().all(|(i, c)| c == ((k + i) as f64).to_le_bytes());
        }
        figures_of.push(figures(&mut times, correct));
    }
    Ok(figures_of)
}

/// Combines every rank's figures (one list per rank, in coll_bench's order:
/// allreduce then bcast per size) into lines.
fn lines(ranks: &[Vec<RankFigures>], sizes: &[usize], bench: CollectiveBench) -> Vec<CollectiveLine> {
    let n = ranks.len();
    let mut out = Vec::new();
    for (s, &bytes) in sizes.iter().enumerate() {
        for (c, collective) in ["allreduce", "bcast"].into_iter().enumerate() {
            let at = 2 * s + c;
            let avg = |k: usize| ranks.iter().map(|r| r[at].0[k]).sum::<f64>() / n as f64;
            out.push(CollectiveLine {
                collective: collective.into(),
                bytes: (bytes / 8).max(1) * 8,
                ranks: n,
                iterations: bench.iterations,
                p50_us: avg(0),
                p99_us: avg(1),
                mean_us: avg(2),
                max_us: avg(3),
                correct: ranks.iter().all(|r| r[at].1),
                sync: bench.sync,
            });
        }
    }
    out
}

/// Runs coll_bench's loop over UDP on every node of `cluster` (rail 0), one
/// thread per node in its namespace, pinned while nodes ≤ cores, else
/// yielding between polls (as [`crate::udpbarrier::measure`]): allreduce
/// and broadcast at each of `sizes` bytes (whole doubles).
pub fn measure(cluster: &Cluster, sizes: &[usize], bench: CollectiveBench) -> Result<Vec<CollectiveLine>> {
    if sizes.is_empty() || bench.iterations == 0 {
        bail!("no sizes or no timed calls to measure");
    }
    let n = cluster.nodes();
    let cores = mcd::host::online_cpus();
    let max_data = sizes.iter().map(|&b| (b / 8).max(1) * 8).max().unwrap_or(8);
    let peers: Vec<SocketAddrV4> = (0..n).map(|i| SocketAddrV4::new(cluster.ip(i, 0), UDP_COLLECTIVES_PORT)).collect();
    let groups = (0..n)
        .map(|node| {
            let _ns = cluster.enter(node)?;
            UdpGroup::bind(node, peers.clone(), max_data, n > cores).with_context(|| format!("binding UDP on node {node}"))
        })
        .collect::<Result<Vec<_>>>()?;
    let sizes_owned = sizes.to_vec();
    let threads: Vec<_> = groups
        .into_iter()
        .map(|mut g| {
            let sizes = sizes_owned.clone();
            std::thread::spawn(move || {
                if n <= cores {
                    let _ = mcd::host::pin_current_thread(g.rank());
                }
                rank_loop(&mut g, &sizes, bench)
            })
        })
        .collect();
    let ranks = threads
        .into_iter()
        .enumerate()
        .map(|(i, t)| t.join().map_err(|_| anyhow!("UDP collectives: node {i}'s thread panicked"))?)
        .collect::<Result<Vec<_>>>()?;
    Ok(lines(&ranks, sizes, bench))
}

/// One rank of [`measure_processes`], in a process of its own in its node's
/// namespace: node `MCD_RANK` of the group at `peers` (rail 0's addresses,
/// in node order). Runs coll_bench's loop and returns what to print: its
/// figures, one line of JSON.
pub fn rank_process(peers: &[Ipv4Addr], sizes: &[usize], bench: CollectiveBench) -> Result<String> {
    let me: usize = std::env::var("MCD_RANK")
        .context("MCD_RANK is not set: this runs as one rank of `measure_processes`")?
        .parse()
        .context("MCD_RANK is not a number")?;
    let n = peers.len();
    let max_data = sizes.iter().map(|&b| (b / 8).max(1) * 8).max().unwrap_or(8);
    let addresses: Vec<SocketAddrV4> = peers.iter().map(|&ip| SocketAddrV4::new(ip, UDP_COLLECTIVES_PORT)).collect();
    let cores = mcd::host::online_cpus();
    let mut group = UdpGroup::bind(me, addresses, max_data, n > cores)?;
    if n <= cores {
        let _ = mcd::host::pin_current_thread(me);
    }
    group.start()?;
    Ok(serde_json::to_string(&rank_loop(&mut group, sizes, bench)?)?)
}

/// The arguments [`measure_processes`] gives its program, after the
/// program's own: `--peers A,B,... --sizes S,... --iterations N --warmup W`
/// and `--sync` when set.
pub fn rank_args(cluster: &Cluster, sizes: &[usize], bench: CollectiveBench) -> Vec<String> {
    let join = |v: Vec<String>| v.join(",");
    let mut args = vec![
        "--peers".to_string(),
        join((0..cluster.nodes()).map(|i| cluster.ip(i, 0).to_string()).collect()),
        "--sizes".into(),
        join(sizes.iter().map(|s| s.to_string()).collect()),
        "--iterations".into(),
        bench.iterations.to_string(),
        "--warmup".into(),
        bench.warmup.to_string(),
    ];
    if bench.sync {
        args.push("--sync".into());
    }
    args
}

/// As [`measure`], with one process per node: `program` (a command and its
/// first arguments) with [`rank_args`], started in every node's namespace
/// at once; each must call [`rank_process`] and print what it returns.
pub fn measure_processes(cluster: &Cluster, program: &[String], sizes: &[usize], bench: CollectiveBench) -> Result<Vec<CollectiveLine>> {
    if sizes.is_empty() || bench.iterations == 0 {
        bail!("no sizes or no timed calls to measure");
    }
    let argv: Vec<String> = program.iter().cloned().chain(rank_args(cluster, sizes, bench)).collect();
    let outcomes = cluster.run(&argv, Duration::from_secs(600))?;
    let ranks = outcomes
        .iter()
        .map(|o| {
            if !o.success() {
                bail!("UDP collectives, node {}: {} ({})", o.node, o.stderr.trim(), o.status());
            }
            let line = o.stdout.lines().last().unwrap_or("");
            let figures: Vec<RankFigures> = serde_json::from_str(line).with_context(|| format!("node {}: parsing `{line}`", o.node))?;
            if figures.len() != 2 * sizes.len() {
                bail!("node {}: {} figures for {} sizes", o.node, figures.len(), sizes.len());
            }
            Ok(figures)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(lines(&ranks, sizes, bench))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::udpbarrier::loopback_group;
    use barriers::check::{check, Timeline};

    /// Node `rank`'s floats: magnitudes far apart, so that the order of a
    /// sum shows in its bits.
    fn floats(rank: usize, count: usize) -> Vec<f64> {
        (0..count).map(|i| [1e16, 1.0, -1e16, 0.1, 3.3e-5][(rank + i) % 5] * (1.0 + rank as f64)).collect()
    }

    /// Runs `work` on one thread per node of a loopback group of `n`.
    fn on_group<T: Send + 'static>(n: usize, max_data: usize, work: impl Fn(UdpGroup) -> Result<T> + Send + Sync + Copy + 'static) -> Vec<T> {
        let handles: Vec<_> = loopback_group(n, max_data).into_iter().map(|g| std::thread::spawn(move || work(g))).collect();
        handles.into_iter().enumerate().map(|(i, h)| h.join().expect("thread").unwrap_or_else(|e| panic!("node {i}: {e:#}"))).collect()
    }

    #[test]
    fn allreduce_and_bcast_equal_a_reference_at_2_3_5_8_nodes() {
        for n in [2, 3, 5, 8] {
            let got = on_group(n, 4096, move |mut g| {
                let me = g.rank();
                let mut timeline = Timeline::default();
                let mut bits = Vec::new();
                for count in [1, 181, 512] {
                    // Integers in doubles: the exact sum.
                    let mut x: Vec<f64> = (0..count).map(|i| (me * 1000 + i) as f64).collect();
                    let entered = Instant::now();
                    g.allreduce_sum_f64(&mut x)?;
                    timeline.record(entered, Instant::now());
                    let want: Vec<f64> = (0..count).map(|i| (1000 * n * (n - 1) / 2 + i * n) as f64).collect();
                    assert_eq!(x, want, "node {me} of {n}, {count} doubles");
                    // Floats whose sum depends on the order: the same bits everywhere.
                    let mut f = floats(me, count);
                    g.allreduce_sum_f64(&mut f)?;
                    bits.extend(f.iter().map(|v| v.to_bits()));
                    // A broadcast from every root: the root's bytes everywhere.
                    for root in 0..n {
                        let mut buf: Vec<u8> = (0..count * 8).map(|i| if me == root { (root * 31 + i) as u8 } else { 0 }).collect();
                        g.bcast(root, &mut buf)?;
                        assert!(buf.iter().enumerate().all(|(i, &b)| b == (root * 31 + i) as u8), "node {me}: bcast from {root}");
                    }
                    g.barrier()?;
                }
                Ok((bits, timeline))
            });
            for (node, (bits, _)) in got.iter().enumerate() {
                assert_eq!(bits, &got[0].0, "{n} nodes: node {node}'s floats differ from node 0's");
            }
            // The float sums are the plain sums, up to rounding.
            let first: Vec<f64> = got[0].0[..1].iter().map(|b| f64::from_bits(*b)).collect();
            let plain: f64 = (0..n).map(|r| floats(r, 1)[0]).sum();
            assert!((first[0] - plain).abs() <= 1e-9 * plain.abs().max(1.0) + 4.0, "{n} nodes: {} against {plain}", first[0]);
            // No node left an allreduce before every node had entered it.
            let timelines: Vec<Timeline> = got.into_iter().map(|(_, t)| t).collect();
            let (violations, checked) = check(&timelines);
            assert_eq!(checked, 3);
            assert!(violations.is_empty(), "{n} nodes: {violations:?}");
        }
    }

    #[test]
    fn a_group_whose_last_node_binds_late_starts_and_reduces() {
        // Node 3's port is free until its thread binds it, after the others
        // have begun to start: their first datagrams to it would be lost.
        let mut groups = loopback_group(4, 8);
        let late = groups.pop().expect("node 3");
        let (peers, max_data) = (late.peers.clone(), late.max_data());
        drop(late);
        let mut handles: Vec<_> = groups
            .into_iter()
            .map(|mut g| {
                std::thread::spawn(move || {
                    g.start()?;
                    let mut x = [g.rank() as f64];
                    g.allreduce_sum_f64(&mut x)?;
                    anyhow::Ok(x[0])
                })
            })
            .collect();
        handles.push(std::thread::spawn(move || {
            let mut g = UdpGroup::bind(3, peers, max_data, true)?;
            g.start()?;
            let mut x = [3.0];
            g.allreduce_sum_f64(&mut x)?;
            anyhow::Ok(x[0])
        }));
        for h in handles {
            assert_eq!(h.join().expect("thread").expect("start and allreduce"), 6.0);
        }
    }

    #[test]
    fn back_to_back_broadcasts_stay_within_the_window() {
        // The root never waits for data: without the window it would run
        // hundreds of broadcasts ahead of the receivers.
        let got = on_group(4, 1448, |mut g| {
            let me = g.rank();
            let mut wrong = 0;
            for k in 0..600usize {
                let mut buf = vec![if me == 0 { (k % 251) as u8 } else { 0 }; 1448];
                g.bcast(0, &mut buf)?;
                wrong += buf.iter().filter(|&&b| b != (k % 251) as u8).count();
            }
            Ok(wrong)
        });
        assert_eq!(got, vec![0; 4]);
    }

    #[test]
    fn bad_calls_are_refused_with_a_reason() {
        let mut g = loopback_group(1, 64).pop().expect("one node");
        let e = g.bcast(1, &mut [0; 8]).expect_err("root 1 of 1");
        assert!(e.to_string().contains("from node 1 in a group of 1"), "{e}");
        let e = g.allreduce_sum_f64(&mut [0.0; 9]).expect_err("72 bytes");
        assert!(e.to_string().contains("72 bytes on a UDP group bound for at most 64"), "{e}");
        // Alone, a call is its own result.
        let mut x = [1.5, -2.0];
        g.allreduce_sum_f64(&mut x).expect("one node");
        assert_eq!(x, [1.5, -2.0]);
    }

    #[test]
    fn lines_average_the_ranks_figures_as_coll_bench_does() {
        let mut times: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let f = figures(&mut times, true);
        assert_eq!(f.0, [51.0, 100.0, 50.5, 100.0]);
        let ranks =
            vec![vec![f, RankFigures([1.0, 2.0, 3.0, 4.0], true)], vec![RankFigures([3.0, 4.0, 5.0, 6.0], true), RankFigures([1.0; 4], false)]];
        let bench = CollectiveBench { warmup: 0, iterations: 100, sync: true };
        let l = lines(&ranks, &[12], bench);
        assert_eq!(l.len(), 2);
        assert_eq!((l[0].collective.as_str(), l[0].bytes, l[0].ranks, l[0].p50_us, l[0].correct), ("allreduce", 8, 2, 27.0, true));
        assert_eq!((l[1].collective.as_str(), l[1].p99_us, l[1].correct, l[1].sync), ("bcast", 1.5, false, true));
    }
}
