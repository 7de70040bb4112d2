//! The attacks of issue 27, on virtual clusters (needs root; fails, does
//! not skip, without it). An attacker ([`Attacker`]) on a station of its own
//! plugged into a 4-node cluster's switch, with nothing but a raw socket and
//! what it sees on the wire, attacks a running job of `mcd-test-peer job`
//! processes. Every attack runs twice: with authentication off
//! (`MCD_AUTH=off`), where it must succeed, its effect asserted; and with
//! it on, where the job must complete correctly (the shared-clock and
//! result checks pass) and every forged or replayed frame must be counted
//! as dropped.
//!
//! The clusters are hubs (bridge ageing time 0: every frame reaches every
//! port, so the attacker sees the job's unicasts without stealing any
//! port), except the port-steal attack's, a learning switch.

use std::time::{Duration, Instant};

use barriers::MsgKind;
use mcd_integration_tests::attacker::{assert_all_done, Attacker, Auth, Ended, Job};
use mcd_integration_tests::cluster;
use mcd_tools::vcluster::{ClusterSpec, Topology};

const PEER: &str = env!("CARGO_BIN_EXE_mcd-test-peer");
/// Generous bound on any wait for an event.
const EVENT: Duration = Duration::from_secs(20);

fn hub(name: &str, nodes: usize) -> mcd_tools::vcluster::ClusterGuard {
    cluster(ClusterSpec::new(name, nodes).topology(Topology::Hub))
}

fn show(ends: &[Ended]) -> String {
    ends.iter().enumerate().map(|(n, e)| format!("node {n} ({:?}):\n  {}\n  {}", e.code, e.lines.join("\n  "), e.stderr.trim())).collect::<Vec<_>>().join("\n")
}

/// Frames dropped for a bad tag or as replays, over every node.
fn auth_drops(ends: &[Ended]) -> (u64, u64) {
    (ends.iter().map(|e| e.stat("bad_tag")).sum(), ends.iter().map(|e| e.stat("replayed")).sum())
}

/// Attack 1, early release: while rank 3 computes before barrier 5, the
/// attacker sends every data frame rank 3 sent in barrier 4 again with the
/// epoch of barrier 5: rank 3's arrival, forged, so the others complete
/// barrier 5 without it.
fn early_release(name: &str, auth: Auth) {
    const AT: u32 = 5;
    let c = hub(name, 4);
    let mut attacker = Attacker::plug(&c);
    let job = Job::start(&c, PEER, auth, "tree2", 8, |node| if node == 3 { vec![("MCD_TEST_COMPUTE", format!("{AT}:1500"))] } else { vec![] });
    let computing = job.wait_line(3, &format!("computing {AT}"), EVENT);
    attacker.wait_for("rank 3's data of the barrier before", EVENT, |f| f.src() == 3 && f.is(MsgKind::Data) && f.seq() == AT - 1);
    let templates = attacker.seen(|f| f.src() == 3 && f.is(MsgKind::Data) && f.seq() == AT - 1);
    let forged_at = Instant::now();
    for t in &templates {
        attacker.send(&t.forge().seq(AT));
    }
    let ends = job.finish(EVENT);
    let timelines = job_timelines(&c);
    let (violations, checked) = barriers::check::check(&timelines);
    match auth {
        Auth::Off => {
            assert_all_done(&ends, "early release, auth off: no error anywhere");
            let v = violations.iter().find(|v| v.barrier == AT as usize).unwrap_or_else(|| {
                panic!("auth off: the forged arrival released nobody early: {violations:?}\n{}", show(&ends))
            });
            assert_eq!(v.not_entered, 3, "the last to enter barrier {AT} is the computing rank");
            let early = timelines[3].barriers[AT as usize].0 - timelines[v.left].barriers[AT as usize].1;
            assert!(early > Duration::from_millis(1000), "node {} left barrier {AT} only {early:?} before rank 3 entered it", v.left);
            eprintln!(
                "early release, auth off: {} forged frame(s) sent {:?} after rank 3 began computing; node {} left barrier {AT} {:.2} s before rank 3 entered it; {} violation(s) over {checked} barriers",
                templates.len(),
                forged_at.duration_since(computing.at),
                v.left,
                early.as_secs_f64(),
                violations.len()
            );
        }
        Auth::On => {
            assert_all_done(&ends, "early release, auth on");
            assert_eq!(checked, 8);
            assert!(violations.is_empty(), "auth on: {violations:?}");
            let (bad, replayed) = auth_drops(&ends);
            assert!(bad >= templates.len() as u64, "{} forged, {bad} counted with a bad tag:\n{}", templates.len(), show(&ends));
            eprintln!("early release, auth on: {} forged, {bad} bad tags, {replayed} replays counted; 8 barriers safe", templates.len());
        }
    }
    drop(attacker);
}

fn job_timelines(c: &mcd_tools::vcluster::Cluster) -> Vec<barriers::check::Timeline> {
    mcd_integration_tests::attacker::timelines(&c.scratch_dir().unwrap().join("times"), c.nodes())
}

#[test]
fn root_early_release_succeeds_with_auth_off() {
    early_release("aeoff", Auth::Off);
}
