//! Review of issue 27's authenticated frames (rev27, a fresh adversarial
//! review): attacks on virtual clusters (needs root; fails, does not skip,
//! without it). Each finding was an ignored test asserting the behaviour
//! mcd should have; all four are fixed and these tests run (the two on a
//! clock set elsewhere need libfaketime, which `./run deps` installs). The
//! unit tests of the same review are named `rev27_*` in `mcd` and
//! `barriers`.

use std::path::Path;
use std::time::Duration;

use barriers::MsgKind;
use mcd_integration_tests::attacker::{assert_all_done, Attacker, Auth, Ended, Job};
use mcd_integration_tests::{cluster, compile_c, other_runs_foreign, run_discovering};
use mcd_vcluster::{ClusterSpec, Topology};

const PEER: &str = env!("CARGO_BIN_EXE_mcd-test-peer");
/// Generous bound on any wait for an event.
const EVENT: Duration = Duration::from_secs(20);
/// libfaketime (Debian's `libfaketime`): run 1's node 1 lives on a clock
/// set back, as a host whose clock was behind, or simply a run of some days
/// ago.
const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// Finding 1 on the wire. `new_incarnation` keeps 40 bits of the time in
/// microseconds, so incarnations wrap every 12.7 days, and a Join recorded
/// before the last wrap is LARGER than any live one: node 0 ("the newest
/// incarnation wins") keeps it and refuses the live node. Run 1 (node 1 on
/// a clock one hour before the last wrap: a run of those days, recorded)
/// and run 2 (now) share one key file, as `mcd-barrier` runs with a shared
/// `MCD_KEY_FILE` do. The attacker replays node 1's recorded Join once, as
/// node 0 of run 2 waits for joins; node 1 then joins for real.
/// Fixed in f71cb74 (incarnations in milliseconds, 44 bits); needs
/// libfaketime (`./run deps` installs it).
#[test]
fn root_a_join_recorded_before_the_incarnation_wrap_and_replayed_does_not_fail_the_next_run() {
    assert!(Path::new(FAKETIME).exists(), "this test needs {FAKETIME}: apt-get install libfaketime (or ./run deps)");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64;
    let since_wrap = now % (1u64 << 40);
    // Node 1 of run 1 an hour before the last wrap of 2^40 µs. (Within the
    // last hour before the next wrap, 1 chance in 305, run 2's incarnations
    // are as close to the wrap: the recorded Join was not larger under the
    // old encoding either, and the test only checks the run completes.)
    let back_s = since_wrap / 1_000_000 + 3600;
    let c = cluster(ClusterSpec::new("rj27w1", 2).topology(Topology::Hub));
    let attacker = Attacker::plug(&c);
    let key = c.new_job_key_file().expect("a key file for both runs");
    let same_key = |hold: bool, faked: bool| {
        let key = key.display().to_string();
        move |node: usize| {
            let mut env =
                vec![(mcd::auth::KEY_FILE_VAR, key.clone()), ("MCD_TEST_FAILURE_MS", "2000".to_string()), ("MCD_TEST_JOIN_MS", "5000".to_string())];
            if hold && node == 1 {
                env.push(("MCD_TEST_HOLD", "1".to_string()));
            }
            if faked && node == 1 {
                env.push(("LD_PRELOAD", FAKETIME.to_string()));
                env.push(("FAKETIME", format!("-{back_s}")));
                env.push(("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()));
            }
            env
        }
    };
    // Run 1: node 1's clock one hour before the last wrap; recorded.
    let first = Job::start(&c, PEER, Auth::On, "dissemination", 3, same_key(false, true));
    let ends = first.finish(EVENT);
    assert_all_done(&ends, "run 1");
    let recorded = attacker.seen(|f| f.src() == 1 && f.is(MsgKind::Join));
    assert!(!recorded.is_empty(), "node 1's join of run 1 was seen");
    let old = recorded[0].msg().expect("a barrier message").instance;
    eprintln!("run 1's node 1 incarnation {old:#x} (time field {:#x})", old >> 24);
    // Run 2: now, the same key file.
    let mut second = Job::start(&c, PEER, Auth::On, "dissemination", 3, same_key(true, false));
    let held = second.wait_line(1, "holding", EVENT);
    attacker.wait_for("node 0 of run 2 waiting for joins (its announcement)", EVENT, |f| {
        f.at > held.at && f.src() == 0 && f.frame().kind() == mcd::kind::ANNOUNCE
    });
    let mut attacker = attacker;
    attacker.send(&recorded[0].forge()); // a replay: not one byte changed
    second.go(1);
    let ends = second.finish(EVENT);
    eprintln!("run 2 after one replayed join of run 1:\n{}", Ended::describe_all(&ends));
    let live = attacker.seen(|f| f.src() == 1 && f.is(MsgKind::Join) && f.msg().is_some_and(|m| m.instance != old));
    if let Some(live) = live.first() {
        eprintln!("run 2's node 1 incarnation {:#x}", live.msg().unwrap().instance);
    }
    assert_all_done(&ends, "run 2, one join of run 1 (before the wrap) replayed to node 0");
}

/// Finding 2 on the wire (the endpoint's half). Run 1's node 1 ran on a
/// clock an hour ahead (a host whose clock was fast, set right since, or
/// another host than run 2's node 1); its frames were recorded. Run 2 (the
/// same key file, node 1 on time): while node 0 computes before barrier 2,
/// the attacker replays ONE frame of run 1's node 1. It verifies and is new
/// to node 0's new endpoint, which records its counter (an hour of
/// nanoseconds above node 1's live ones) before the engine drops it as
/// another instance's: every live frame of node 1 was then older than node
/// 0's window for it, dropped as a replay, and node 0 named node 1 dead.
/// Fixed: counters are a random session and a number in it, and a window
/// is kept per session, so the replay never touches the live session's.
/// Needs libfaketime (`./run deps` installs it).
#[test]
fn root_one_frame_of_a_run_on_a_clock_ahead_replayed_does_not_silence_a_live_node() {
    assert!(Path::new(FAKETIME).exists(), "this test needs {FAKETIME}: apt-get install libfaketime");
    let c = cluster(ClusterSpec::new("rj27c2", 2).topology(Topology::Hub));
    let attacker = Attacker::plug(&c);
    let key = c.new_job_key_file().expect("a key file for both runs");
    let same_key = |second: bool| {
        let key = key.display().to_string();
        move |node: usize| {
            let mut env =
                vec![(mcd::auth::KEY_FILE_VAR, key.clone()), ("MCD_TEST_FAILURE_MS", "2000".to_string()), ("MCD_TEST_JOIN_MS", "5000".to_string())];
            if !second && node == 1 {
                env.push(("LD_PRELOAD", FAKETIME.to_string()));
                env.push(("FAKETIME", "+3600".to_string()));
                env.push(("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()));
            }
            if second && node == 0 {
                env.push(("MCD_TEST_COMPUTE", "2:1500".to_string()));
            }
            env
        }
    };
    let first = Job::start(&c, PEER, Auth::On, "dissemination", 3, same_key(false));
    let ends = first.finish(EVENT);
    assert_all_done(&ends, "run 1");
    let recorded = attacker.seen(|f| f.src() == 1 && f.msg().is_some_and(|m| m.kind != MsgKind::Join));
    assert!(!recorded.is_empty(), "node 1's barrier frames of run 1 were seen");
    let second = Job::start(&c, PEER, Auth::On, "dissemination", 5, same_key(true));
    second.wait_line(0, "computing", EVENT);
    let mut attacker = attacker;
    attacker.send(&recorded[recorded.len() - 1].forge()); // a replay: not one byte changed
    let ends = second.finish(EVENT);
    eprintln!("run 2 after one replayed frame of run 1:\n{}", Ended::describe_all(&ends));
    assert_all_done(&ends, "run 2, one frame of run 1 (node 1 an hour ahead) replayed to node 0");
}

/// Finding 3: an earlier run's frames, replayed, were counted by the Rust
/// API (`BarrierStats::foreign`) but nowhere a C program or the interposer
/// could see. Run 1 of the C example (two ranks discovering each other,
/// one key file) is recorded; run 2 (the same key file) computes 300 ms
/// after each barrier. Once node 1's first barrier message of run 2 is on
/// the wire, the attacker replays one barrier message of run 1's node 1 to
/// node 0, not one byte changed: it verifies, is new to run 2's endpoint
/// (another session), and the barrier drops it as another instance's. Node
/// 0's `mcd_stats.messages_foreign` counts it, and run 2 completes.
#[test]
fn root_an_earlier_runs_frame_replayed_is_counted_in_the_c_abis_stats() {
    let c = cluster(ClusterSpec::new("rj27s3", 2).topology(Topology::Hub));
    let attacker = Attacker::plug(&c);
    let key = c.new_job_key_file().expect("a key file for both runs").display().to_string();
    let lib = mcd_tools::cbuild::build_capi(false).unwrap_or_else(|e| panic!("building the C ABI: {e:#}"));
    let program = compile_c(&lib, "barrier", "mcd-c-example-rev27");
    let argv = [program.to_str().unwrap(), "3"];
    let env = |gap_ms: &'static str| {
        let key = key.clone();
        move |_: usize| {
            vec![
                (mcd::auth::KEY_FILE_VAR.to_string(), key.clone()),
                ("MCD_EXAMPLE_GAP_MS".to_string(), gap_ms.to_string()),
                ("MCD_WAIT".to_string(), "block".to_string()),
            ]
        }
    };
    let first = run_discovering(&c, &[0, 1], &argv, env("0"), 3 * EVENT);
    for o in &first {
        assert!(o.success(), "run 1, node {}: {}{}", o.node, o.stdout, o.stderr);
    }
    let recorded = attacker.seen(|f| f.src() == 1 && f.is(MsgKind::Data));
    let old = recorded.last().expect("node 1's barrier messages of run 1 were seen").clone();
    // The C ABI's barriers are a shared endpoint's groups: the group key
    // comes before the message (`msg()` would read the key as the
    // instance, the same in both runs once run 1's last frame is its job
    // barrier's: its unused collectives barrier is dropped unclosed).
    let old_instance = old.group_msg().expect("a group's barrier message").1.instance;
    // Run 1's processes have all exited: a frame captured from now on is
    // run 2's (the instance alone misled: a copy of run 1's parses with
    // other copy bits, and the replay went out before run 2 began).
    let run_1_over = std::time::Instant::now();
    let replayer = std::thread::spawn(move || {
        let mut attacker = attacker;
        attacker.wait_for("node 1's first barrier message of run 2", 2 * EVENT, |f| {
            f.at > run_1_over && f.src() == 1 && f.is(MsgKind::Data) && f.group_msg().is_some_and(|(_, m)| m.instance != old_instance)
        });
        attacker.send(&old.forge()); // a replay: not one byte changed
    });
    let second = run_discovering(&c, &[0, 1], &argv, env("300"), 3 * EVENT);
    replayer.join().expect("the replay was sent");
    for o in &second {
        assert!(o.success(), "run 2, node {}: {}{}", o.node, o.stdout, o.stderr);
        assert!(o.stdout.contains(&format!("rank {} of 2: 6 barriers", o.node)), "{}", o.stdout);
    }
    let line = second[0].stdout.lines().find(|l| l.starts_with("rank 0 of 2:")).expect("node 0's report");
    let foreign = other_runs_foreign(line);
    assert!(foreign >= 1, "node 0 counted the replayed frame of run 1 in mcd_stats.messages_foreign: {line}");
}
