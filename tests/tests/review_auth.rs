//! Review of issue 27's authenticated frames (helper R): attacks at the
//! edges of what the attack suite (`attacks.rs`) covers, on virtual
//! clusters (needs root; fails, does not skip, without it). Findings are
//! `#[ignore = "finding N: ..."]` tests that assert the behaviour mcd should
//! have and fail today; what held is asserted by ordinary tests.

use std::time::Duration;

use barriers::MsgKind;
use mcd_integration_tests::attacker::{assert_all_done, Attacker, Auth, Ended, Job};
use mcd_integration_tests::cluster;
use mcd_tools::vcluster::{ClusterSpec, Topology};

const PEER: &str = env!("CARGO_BIN_EXE_mcd-test-peer");
/// Generous bound on any wait for an event.
const EVENT: Duration = Duration::from_secs(20);

fn show(ends: &[Ended]) -> String {
    ends.iter().enumerate().map(|(n, e)| format!("node {n} ({:?}):\n  {}\n  {}", e.code, e.lines.join("\n  "), e.stderr.trim())).collect::<Vec<_>>().join("\n")
}

/// Finding 1 on the wire: two runs of a job with one key file (as
/// `mcd-barrier` runs across hosts with a shared `MCD_KEY_FILE`, or two
/// `mcd_init` cycles of one job). The attacker records node 1's Join in the
/// first run. In the second, node 1 opens its endpoint and holds before
/// creating the barrier; node 0 opens, waits for joins and announces itself
/// (its announcement tells the attacker it is listening); the attacker
/// replays the recorded Join, which node 0's new endpoint (empty replay
/// windows) takes as new. Then node 1 joins for real. It should be
/// admitted and the run should complete; today node 0 admits the recorded
/// incarnation and refuses node 1.
#[test]
#[ignore = "finding 1 (review-auth): a Join recorded in an earlier run with the same key file, replayed to node 0's new endpoint before the real one, makes node 0 refuse node 1: mcd_init fails"]
fn root_a_join_replayed_from_an_earlier_run_with_the_same_key_is_refused() {
    let c = cluster(ClusterSpec::new("rjoin1", 2).topology(Topology::Hub));
    let attacker = Attacker::plug(&c);
    let key = c.new_job_key_file().expect("a key file for both runs");
    let same_key = |hold: bool| {
        let key = key.display().to_string();
        move |node: usize| {
            let mut env = vec![
                (mcd::auth::KEY_FILE_VAR, key.clone()),
                ("MCD_TEST_FAILURE_MS", "2000".to_string()),
                ("MCD_TEST_JOIN_MS", "5000".to_string()),
            ];
            if hold && node == 1 {
                env.push(("MCD_TEST_HOLD", "1".to_string()));
            }
            env
        }
    };
    // Run 1: recorded.
    let first = Job::start(&c, PEER, Auth::On, "dissemination", 3, same_key(false));
    let ends = first.finish(EVENT);
    assert_all_done(&ends, "run 1");
    let recorded = attacker.seen(|f| f.src() == 1 && f.is(MsgKind::Join));
    assert!(!recorded.is_empty(), "node 1's join of run 1 was seen");
    // Run 2: the same key file.
    let mut second = Job::start(&c, PEER, Auth::On, "dissemination", 3, same_key(true));
    let held = second.wait_line(1, "holding", EVENT);
    attacker.wait_for("node 0 of run 2 waiting for joins (its announcement)", EVENT, |f| {
        f.at > held.at && f.src() == 0 && f.frame().kind() == mcd::kind::ANNOUNCE
    });
    let mut attacker = attacker;
    attacker.send(&recorded[0].forge()); // a replay: not one byte changed
    second.go(1);
    let ends = second.finish(EVENT);
    eprintln!("run 2 after one replayed join of run 1:\n{}", show(&ends));
    assert_all_done(&ends, "run 2, one join of run 1 replayed to node 0");
}
