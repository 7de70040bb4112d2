//! The bootstrap across a virtual cluster: ranks find each other with no node
//! list (also under loss), a missing rank is named in the timeout error, and
//! two jobs with different keys on one bridge stay apart. Needs root.

use std::time::Duration;

use mcd_integration_tests::{cluster, run_discovering};
use mcd_vcluster::{Cluster, ClusterSpec, LossPoint, NodeOutcome};

const PEER: &str = env!("CARGO_BIN_EXE_mcd-test-peer");

fn env(pairs: &[(&str, String)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

/// Checks that every outcome succeeded and printed the node list `expected`
/// (MACs by rank) with its own rank as node number.
fn assert_discovered(outcomes: &[NodeOutcome], ranks: &[usize], expected: &[String]) {
    for (o, &rank) in outcomes.iter().zip(ranks) {
        assert!(o.success(), "node {} failed: {}{}", o.node, o.stdout, o.stderr);
        let want = format!("node {rank} nodes: {}", expected.join(","));
        assert!(o.stdout.contains(&want), "node {}: expected `{want}`, got:\n{}", o.node, o.stdout);
        assert!(o.stdout.contains("done"), "node {} did not finish its barriers:\n{}", o.node, o.stdout);
    }
}

fn macs(c: &Cluster, nodes: impl Iterator<Item = usize>) -> Vec<String> {
    nodes.map(|n| c.mac(n, 0).to_string()).collect()
}

#[test]
fn eight_ranks_discover_each_other_without_a_node_list() {
    let c = cluster(ClusterSpec::new("bs8", 8));
    let all: Vec<usize> = (0..8).collect();
    let outcomes = run_discovering(
        &c,
        &all,
        &[PEER, "discover", "100"],
        |_| env(&[("MCD_JOB", "bs8".into()), ("MCD_WAIT", "block".into())]),
        Duration::from_secs(60),
    );
    assert_discovered(&outcomes, &all, &macs(&c, 0..8));
    // A rank that is done lingers, asleep: its bootstrap socket takes hellos
    // only, and nobody sends one once all are done. (It used to take a copy
    // of every barrier frame and wake every 500 µs for 3 s: the first seconds
    // of every program ran slow.)
    for o in &outcomes {
        let wakeups = o.stdout.lines().find_map(|l| l.strip_prefix("bootstrap linger: ")).unwrap_or_else(|| panic!("node {}: {}", o.node, o.stdout));
        let asleep = wakeups == "over" || wakeups.split_whitespace().next().and_then(|w| w.parse::<u64>().ok()).is_some_and(|w| w <= 3);
        assert!(asleep, "node {}'s bootstrap linger thread does not sleep: {wakeups}", o.node);
    }
}

#[test]
fn discovery_survives_twenty_percent_loss() {
    // The switch drops 20% of the EtherType's frames to every node: hellos
    // and barrier messages alike. (Not at the nodes' ingress: the kernel
    // hands frames to the bootstrap's ETH_P_ALL socket before that hook.)
    let c = cluster(ClusterSpec::new("bsl", 8).loss(20.0, LossPoint::Port));
    let all: Vec<usize> = (0..8).collect();
    let outcomes = run_discovering(
        &c,
        &all,
        &[PEER, "discover", "50"],
        |_| env(&[("MCD_JOB", "bsl".into()), ("MCD_WAIT", "block".into())]),
        Duration::from_secs(90),
    );
    assert_discovered(&outcomes, &all, &macs(&c, 0..8));
    assert!(c.loss_drops().unwrap() > 0, "the loss rule dropped nothing: the test tested nothing");
}

#[test]
fn a_missing_rank_is_named_in_the_timeout_error() {
    let c = cluster(ClusterSpec::new("bsm", 4));
    // Rank 2 never starts.
    let started = [0, 1, 3];
    let outcomes = run_discovering(
        &c,
        &started,
        &[PEER, "discover", "1"],
        |_| env(&[("MCD_JOB", "bsm".into()), ("MCD_BOOTSTRAP_TIMEOUT", "1.5".into())]),
        Duration::from_secs(30),
    );
    for o in &outcomes {
        assert_eq!(o.code, Some(2), "node {} should fail to open: {}{}", o.node, o.stdout, o.stderr);
        assert!(o.stdout.contains("never heard from rank(s) 2 within 1.5 s"), "node {}: {}", o.node, o.stdout);
    }
}

#[test]
fn two_jobs_on_one_bridge_stay_apart() {
    let c = cluster(ClusterSpec::new("bs2", 8));
    // Job a on nodes 0-3 and job b on nodes 4-7, both ranks 0-3, at the same time.
    let all: Vec<usize> = (0..8).collect();
    let outcomes = run_discovering(
        &c,
        &all,
        &[PEER, "discover", "100"],
        |node| {
            // Here the i-th process runs on node i.
            let job = if node < 4 { "job-a" } else { "job-b" };
            env(&[("MCD_JOB", job.into()), ("MCD_RANK", (node % 4).to_string()), ("MCD_SIZE", "4".into()), ("MCD_WAIT", "block".into())])
        },
        Duration::from_secs(60),
    );
    assert_discovered(&outcomes[..4], &[0, 1, 2, 3], &macs(&c, 0..4));
    assert_discovered(&outcomes[4..], &[0, 1, 2, 3], &macs(&c, 4..8));
}

#[test]
fn ranks_sharing_a_host_share_its_nic_through_their_ports() {
    let c = cluster(ClusterSpec::new("bsh", 2));
    // Ranks 0 and 1 on node 0, ranks 2 and 3 on node 1; the port is the rank on the host.
    let hosts = [0, 0, 1, 1];
    let outcomes = run_discovering(
        &c,
        &hosts,
        &[PEER, "discover", "100"],
        |rank| {
            env(&[
                ("MCD_JOB", "bsh".into()),
                ("MCD_RANK", rank.to_string()),
                ("MCD_SIZE", "4".into()),
                ("MCD_PORT", (rank % 2).to_string()),
                ("MCD_LOCAL_PROCS", "4".into()),
                ("MCD_WAIT", "block".into()),
            ])
        },
        Duration::from_secs(60),
    );
    let expected = macs(&c, hosts.iter().copied());
    assert_discovered(&outcomes, &[0, 1, 2, 3], &expected);
}

#[test]
fn a_rank_with_another_secret_is_never_heard_and_the_timeout_says_why() {
    let c = cluster(ClusterSpec::new("bsk", 3));
    // Rank 2 reads a key file of its own: its hellos fail the others' tag
    // check, theirs fail its.
    let other = c.new_job_key_file().unwrap();
    let outcomes = run_discovering(
        &c,
        &[0, 1, 2],
        &[PEER, "discover", "1"],
        |i| {
            let mut e = env(&[("MCD_JOB", "bsk".into()), ("MCD_BOOTSTRAP_TIMEOUT", "1.5".into())]);
            if i == 2 {
                e.push((mcd::auth::KEY_FILE_VAR.into(), other.display().to_string()));
            }
            e
        },
        Duration::from_secs(30),
    );
    std::fs::remove_file(&other).unwrap();
    for o in &outcomes {
        assert_eq!(o.code, Some(2), "node {} should fail to open: {}{}", o.node, o.stdout, o.stderr);
        let never = if o.node == 2 { "never heard from rank(s) 0, 1" } else { "never heard from rank(s) 2" };
        assert!(o.stdout.contains(never), "node {}: {}", o.node, o.stdout);
        assert!(o.stdout.contains("whose tag failed: sent with another secret"), "node {}: {}", o.node, o.stdout);
    }
}

#[test]
fn a_rank_of_the_old_wire_version_is_named_in_the_timeout_error() {
    let c = cluster(ClusterSpec::new("bsv", 2));
    // Rank 1 speaks wire version 1: a hello as mcd 0.1 sent it, over and over.
    let raw = {
        let _ns = c.enter(1).unwrap();
        mcd::RawSender::open("eth0").unwrap()
    };
    let job_key = mcd::job_key_from_str("bsv");
    let mut hello = vec![0u8; 30 + 14];
    hello[..6].copy_from_slice(&mcd::MacAddr::mcd_group(job_key, mcd::bootstrap::BOOTSTRAP_GROUP).0);
    hello[6..12].copy_from_slice(&c.mac(1, 0).0);
    hello[12..14].copy_from_slice(&mcd::wire::DEFAULT_ETHERTYPE.to_be_bytes());
    hello[14..20].copy_from_slice(&[1, mcd::kind::HELLO, 0, 0, 0, 1]); // version 1, kind, ports, rank 1
    hello[20..22].copy_from_slice(&14u16.to_be_bytes());
    hello[22..26].copy_from_slice(&job_key.to_be_bytes());
    hello[26..30].copy_from_slice(&1u32.to_be_bytes());
    hello[30..44].copy_from_slice(&[0, 1, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0]);
    hello[38..44].copy_from_slice(&c.mac(1, 0).0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let outcomes = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                raw.send(&hello).unwrap();
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        let out = run_discovering(
            &c,
            &[0],
            &[PEER, "discover", "1"],
            |_| env(&[("MCD_JOB", "bsv".into()), ("MCD_SIZE", "2".into()), ("MCD_BOOTSTRAP_TIMEOUT", "1".into())]),
            Duration::from_secs(30),
        );
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        out
    });
    let o = &outcomes[0];
    assert_eq!(o.code, Some(2), "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("never heard from rank(s) 1"), "{}", o.stdout);
    let speaks = format!("hello(s) of another mcd wire version (this build speaks {}", mcd::wire::VERSION);
    assert!(o.stdout.contains(&speaks), "{}", o.stdout);
}
