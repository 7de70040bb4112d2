//! The hierarchical barrier across the virtual cluster, several processes
//! per node (a node's namespace is a host): hosts × ranks of 4×4, 2×8, 8×2
//! and 3×5 on the shared clock, each also under 20% loss between hosts, a
//! local rank killed (named; 3×5), a whole host killed (4×4), two jobs
//! sharing the hosts, a stale segment, the C ABI choosing it by itself, and
//! the host's shared memory gone after every run. Each with the hosts
//! released through shared memory, and again (`direct_*`) with every rank
//! taking the leaders' release multicast itself. Needs root.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mcd_integration_tests::{cluster, run_discovering};
use mcd_vcluster::{Cluster, ClusterSpec, LossPoint, NodeOutcome};

const PEER: &str = env!("CARGO_BIN_EXE_mcd-test-peer");

/// A job of `per_host` ranks on each node of `c` (rank r on node
/// r / per_host, port r % per_host + `port_base`), running `argv`.
struct Job<'a> {
    c: &'a Cluster,
    per_host: usize,
    key: &'a str,
    port_base: usize,
    env: Vec<(String, String)>,
}

impl Job<'_> {
    fn ranks(&self) -> usize {
        self.c.nodes() * self.per_host
    }

    fn times_dir(&self) -> PathBuf {
        std::env::temp_dir().join(format!("mcd-hier-{}-{}-{}", self.c.spec().name, self.key, std::process::id()))
    }

    fn run(&self, argv: &[&str], timeout: Duration) -> Vec<NodeOutcome> {
        let times = self.times_dir();
        let _ = std::fs::remove_dir_all(&times);
        std::fs::create_dir_all(&times).unwrap();
        let n = self.ranks();
        let nodes: Vec<usize> = (0..n).map(|r| r / self.per_host).collect();
        let per_host = self.per_host;
        let env = |rank: usize| {
            let mut vars = vec![
                ("MCD_JOB".to_string(), self.key.to_string()),
                ("MCD_RANK".into(), rank.to_string()),
                ("MCD_SIZE".into(), n.to_string()),
                ("MCD_PORT".into(), (rank % per_host + self.port_base).to_string()),
                ("MCD_LOCAL_PROCS".into(), per_host.to_string()),
                ("MCD_WAIT".into(), "block".into()),
                ("MCD_TEST_TIMES".into(), times.display().to_string()),
                ("MCD_EXAMPLE_TIMES".into(), times.display().to_string()),
            ];
            vars.extend(self.env.iter().cloned());
            vars
        };
        let outcomes = run_discovering(self.c, &nodes, argv, env, timeout);
        // Ranks are in rank order: relabel each outcome with its rank.
        outcomes.into_iter().enumerate().map(|(rank, o)| NodeOutcome { node: rank, ..o }).collect()
    }

    /// Checks, on the shared clock, that no rank left barrier k before every
    /// rank had entered it, over `count` barriers.
    fn assert_safe(&self, count: usize) {
        let times = self.times_dir();
        let per_rank: Vec<Vec<(f64, f64)>> = (0..self.ranks())
            .map(|r| {
                let text = std::fs::read_to_string(times.join(format!("rank{r}"))).unwrap();
                text.lines()
                    .map(|l| {
                        let f: Vec<f64> = l.split_whitespace().skip(1).map(|x| x.parse().unwrap()).collect();
                        (f[0], f[1])
                    })
                    .collect()
            })
            .collect();
        for (r, rows) in per_rank.iter().enumerate() {
            assert_eq!(rows.len(), count, "rank {r} recorded {} barriers", rows.len());
        }
        for k in 0..count {
            let last_in = per_rank.iter().map(|r| r[k].0).fold(0.0, f64::max);
            let first_out = per_rank.iter().map(|r| r[k].1).fold(f64::INFINITY, f64::min);
            assert!(first_out >= last_in, "barrier {k}: a rank left at {first_out} before the last entered at {last_in}");
        }
        std::fs::remove_dir_all(&times).unwrap();
    }

    /// The host segments this job could leave in /dev/shm.
    fn segments_left(&self) -> Vec<PathBuf> {
        let key = mcd::job_key_from_str(self.key);
        let prefix = format!("mcd-host-{key:08x}-");
        std::fs::read_dir(mcd::shm::SHM_DIR)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix)))
            .collect()
    }
}

/// How the hosts are released: `MCD_HIERARCHY_RELEASE`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    Shm,
    Multicast,
}

fn job<'a>(c: &'a Cluster, per_host: usize, key: &'a str) -> Job<'a> {
    job_via(c, per_host, key, Via::Shm)
}

fn job_via<'a>(c: &'a Cluster, per_host: usize, key: &'a str, via: Via) -> Job<'a> {
    let release = match via {
        Via::Shm => "shm",
        Via::Multicast => "multicast",
    };
    Job { c, per_host, key, port_base: 0, env: vec![("MCD_HIERARCHY_RELEASE".into(), release.into())] }
}

/// The barriers (of `count`, and the closing one) each rank released by
/// the leaders' multicast, from its `release R: D of N` line; checks the
/// release is `via`'s and that leaders take none that way.
fn released_directly(outcomes: &[NodeOutcome], per_host: usize, count: usize, via: Via) -> Vec<u64> {
    let name = if via == Via::Shm { "shm" } else { "multicast" };
    outcomes
        .iter()
        .map(|o| {
            let line = o.stdout.lines().find(|l| l.starts_with("release ")).unwrap_or_else(|| panic!("rank {}: {}", o.node, o.stdout));
            let want = format!("release {name}: ");
            assert!(line.starts_with(&want), "rank {}: {line}", o.node);
            let words: Vec<&str> = line[want.len()..].split_whitespace().collect();
            assert_eq!(words[2], (count + 1).to_string(), "rank {}: {line}", o.node);
            let direct: u64 = words[0].parse().unwrap();
            if o.node % per_host == 0 || via == Via::Shm {
                assert_eq!(direct, 0, "rank {} (a leader, or released through shared memory): {line}", o.node);
            }
            direct
        })
        .collect()
}

fn assert_all_done(outcomes: &[NodeOutcome], hosts: usize, per_host: usize) {
    for o in outcomes {
        assert!(o.success() && o.stdout.contains("done"), "rank {}: {}{}", o.node, o.stdout, o.stderr);
        let leader = o.node / per_host * per_host;
        let want = format!("node {}: host of {per_host} ranks, leader {leader}, {hosts} hosts", o.node);
        assert!(o.stdout.contains(&want), "rank {}: expected `{want}` in {}", o.node, o.stdout);
    }
}

fn shape(name: &str, hosts: usize, per_host: usize, count: usize) {
    shape_via(name, hosts, per_host, count, Via::Shm);
}

fn shape_via(name: &str, hosts: usize, per_host: usize, count: usize, via: Via) -> Vec<u64> {
    let c = cluster(ClusterSpec::new(name, hosts));
    let j = job_via(&c, per_host, name, via);
    let count_arg = count.to_string();
    let outcomes = j.run(&[PEER, "hierarchical", &count_arg], Duration::from_secs(120));
    assert_all_done(&outcomes, hosts, per_host);
    j.assert_safe(count);
    assert!(j.segments_left().is_empty(), "left behind: {:?}", j.segments_left());
    released_directly(&outcomes, per_host, count, via)
}

#[test]
fn four_hosts_of_four_ranks_never_leave_before_all_entered() {
    shape("h14a", 4, 4, 30);
}

#[test]
fn two_hosts_of_eight_ranks_never_leave_before_all_entered() {
    shape("h14b", 2, 8, 30);
}

#[test]
fn eight_hosts_of_two_ranks_never_leave_before_all_entered() {
    shape("h14c", 8, 2, 30);
}

#[test]
fn three_hosts_of_five_ranks_never_leave_before_all_entered() {
    shape("h14d", 3, 5, 30);
}

/// `shape` under 20% loss of mcd frames at every host's ingress.
fn lossy(name: &str, hosts: usize, per_host: usize) {
    lossy_via(name, hosts, per_host, Via::Shm);
}

fn lossy_via(name: &str, hosts: usize, per_host: usize, via: Via) -> Vec<u64> {
    let c = cluster(ClusterSpec::new(name, hosts).loss(20.0, LossPoint::Node));
    let j = job_via(&c, per_host, name, via);
    let outcomes = j.run(&[PEER, "hierarchical", "30"], Duration::from_secs(120));
    assert_all_done(&outcomes, hosts, per_host);
    j.assert_safe(30);
    assert!(c.loss_drops().unwrap() > 0, "no frame was dropped: the loss did not apply");
    assert!(j.segments_left().is_empty(), "left behind: {:?}", j.segments_left());
    released_directly(&outcomes, per_host, 30, via)
}

#[test]
fn four_hosts_of_four_ranks_recover_twenty_percent_loss_between_hosts() {
    lossy("h14e", 4, 4);
}

#[test]
fn two_hosts_of_eight_ranks_recover_twenty_percent_loss_between_hosts() {
    lossy("h14k", 2, 8);
}

#[test]
fn eight_hosts_of_two_ranks_recover_twenty_percent_loss_between_hosts() {
    lossy("h14l", 8, 2);
}

#[test]
fn three_hosts_of_five_ranks_recover_twenty_percent_loss_between_hosts() {
    lossy("h14n", 3, 5);
}

/// Runs `hosts` × `per_host` ranks of which `crashing` abort before
/// barrier 5; every other rank must fail (exit 3) within seconds, not hang.
fn crash(name: &str, hosts: usize, per_host: usize, crashing: &[usize]) -> Vec<NodeOutcome> {
    crash_via(name, hosts, per_host, crashing, Via::Shm)
}

fn crash_via(name: &str, hosts: usize, per_host: usize, crashing: &[usize], via: Via) -> Vec<NodeOutcome> {
    let c = cluster(ClusterSpec::new(name, hosts));
    let mut j = job_via(&c, per_host, name, via);
    let list: Vec<String> = crashing.iter().map(|r| r.to_string()).collect();
    j.env.extend([
        ("MCD_TEST_CRASH_AT".into(), "5".into()),
        ("MCD_TEST_CRASH_RANKS".into(), list.join(",")),
        ("MCD_BARRIER_TIMEOUT".into(), "1".into()),
    ]);
    let outcomes = j.run(&[PEER, "hierarchical", "20"], Duration::from_secs(60));
    for o in &outcomes {
        if crashing.contains(&o.node) {
            assert!(!o.success() && o.code != Some(3), "rank {} should have aborted: {:?}", o.node, o.code);
        } else {
            assert_eq!(o.code, Some(3), "rank {} should have failed, not {}: {}{}", o.node, o.status(), o.stdout, o.stderr);
        }
    }
    assert!(j.segments_left().is_empty(), "left behind after a crash: {:?}", j.segments_left());
    std::fs::remove_dir_all(j.times_dir()).unwrap();
    outcomes
}

#[test]
fn a_killed_local_rank_is_named_by_its_host_and_every_rank_fails() {
    local_rank_killed(crash("h14f", 3, 5, &[7]));
}

fn local_rank_killed(outcomes: Vec<NodeOutcome>) {
    // 3 × 5: rank 7 is local rank 2 of host 1 (ranks 5 to 9; leader 5).
    let leader = &outcomes[5].stdout;
    assert!(leader.contains("local rank 2 on this host (node 7, pid"), "leader: {leader}");
    for mate in [6, 8, 9] {
        let out = &outcomes[mate].stdout;
        assert!(out.contains("this host's leader (node 5) gave up") && out.contains("node 7"), "host mate {mate}: {out}");
    }
}

#[test]
fn a_killed_host_is_named_by_the_other_hosts() {
    host_killed(crash("h14g", 4, 4, &[12, 13, 14, 15]));
}

fn host_killed(outcomes: Vec<NodeOutcome>) {
    // 4 × 4: host 3 is ranks 12 to 15 (leader 12).
    for (rank, o) in outcomes.iter().enumerate().take(12) {
        let out = &o.stdout;
        assert!(out.contains("node(s) [12]") || out.contains("because node 12 is silent"), "rank {rank}: {out}");
    }
}

#[test]
fn two_jobs_sharing_the_hosts_stay_apart() {
    let c = cluster(ClusterSpec::new("h14h", 2));
    let a = Job { c: &c, per_host: 3, key: "h14ha", port_base: 0, env: Vec::new() };
    let b = Job { c: &c, per_host: 3, key: "h14hb", port_base: 3, env: Vec::new() };
    let (oa, ob) = std::thread::scope(|s| {
        let ta = s.spawn(|| a.run(&[PEER, "hierarchical", "30"], Duration::from_secs(120)));
        let tb = s.spawn(|| b.run(&[PEER, "hierarchical", "30"], Duration::from_secs(120)));
        (ta.join().unwrap(), tb.join().unwrap())
    });
    assert_all_done(&oa, 2, 3);
    assert_all_done(&ob, 2, 3);
    a.assert_safe(30);
    b.assert_safe(30);
    assert!(a.segments_left().is_empty() && b.segments_left().is_empty());
}

#[test]
fn a_stale_segment_of_a_crashed_job_is_replaced_and_removed() {
    let c = cluster(ClusterSpec::new("h14i", 2));
    let j = job(&c, 2, "h14i");
    // What a leader that crashed while creating it would leave: its name,
    // no live creator.
    let stale = barriers::segment_path(Path::new(mcd::shm::SHM_DIR), mcd::job_key_from_str("h14i"), c.mac(0, 0), 0);
    std::fs::write(&stale, vec![0u8; 4096]).unwrap();
    let outcomes = j.run(&[PEER, "hierarchical", "10"], Duration::from_secs(60));
    assert_all_done(&outcomes, 2, 2);
    j.assert_safe(10);
    assert!(!stale.exists(), "the stale segment is still there");
}

#[test]
fn the_c_abi_chooses_the_hierarchical_barrier_when_ranks_share_hosts() {
    let lib = mcd_tools::cbuild::build_capi(false).unwrap_or_else(|e| panic!("building the C ABI: {e:#}"));
    let program = mcd_integration_tests::compile_c(&lib, "barrier", "mcd-c-example-hier");
    let c = cluster(ClusterSpec::new("h14j", 3));
    let j = job(&c, 3, "h14j");
    let outcomes = j.run(&[program.to_str().unwrap(), "10"], Duration::from_secs(120));
    for o in &outcomes {
        assert!(o.success(), "rank {}: {}{}", o.node, o.stdout, o.stderr);
        let want = format!("rank {} of 9: 20 barriers (hierarchical:", o.node);
        assert!(o.stdout.contains(&want), "rank {}: expected `{want}` in {}", o.node, o.stdout);
    }
    j.assert_safe(20);
    assert!(j.segments_left().is_empty());
}

/// With every rank taking the leaders' release multicast itself: lossless,
/// every local rank leaves nearly every barrier on it (all but the first
/// few, before it listens), and never before all entered.
#[test]
fn direct_release_four_hosts_of_four_ranks_never_leave_before_all_entered() {
    let direct = shape_via("h14bd1", 4, 4, 30, Via::Multicast);
    for (rank, &d) in direct.iter().enumerate().filter(|(r, _)| r % 4 != 0) {
        assert!(d >= 31 - 3, "rank {rank}: only {d} of 31 barriers released by the multicast");
    }
}

/// The direct release under 20% loss between hosts: the lost multicasts are
/// recovered through the leader (the shared clock says it stays safe), and
/// the rest are taken directly.
fn direct_lossy(name: &str, hosts: usize, per_host: usize) {
    let direct = lossy_via(name, hosts, per_host, Via::Multicast);
    let local: u64 = direct.iter().enumerate().filter(|(r, _)| r % per_host != 0).map(|(_, &d)| d).sum();
    let locals = (hosts * (per_host - 1)) as u64;
    assert!(local > locals * 31 / 2, "only {local} of {} local releases were taken from the multicast", locals * 31);
}

#[test]
fn direct_release_four_hosts_of_four_ranks_recover_twenty_percent_loss() {
    direct_lossy("h14bd2", 4, 4);
}

#[test]
fn direct_release_two_hosts_of_eight_ranks_recover_twenty_percent_loss() {
    direct_lossy("h14bd3", 2, 8);
}

#[test]
fn direct_release_eight_hosts_of_two_ranks_recover_twenty_percent_loss() {
    direct_lossy("h14bd4", 8, 2);
}

#[test]
fn direct_release_three_hosts_of_five_ranks_recover_twenty_percent_loss() {
    direct_lossy("h14bd5", 3, 5);
}

#[test]
fn direct_release_a_killed_local_rank_is_named_and_every_rank_fails() {
    local_rank_killed(crash_via("h14bd6", 3, 5, &[7], Via::Multicast));
}

#[test]
fn direct_release_a_killed_host_is_named_by_the_other_hosts() {
    host_killed(crash_via("h14bd7", 4, 4, &[12, 13, 14, 15], Via::Multicast));
}
