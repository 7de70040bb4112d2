//! Attack 6 of issue 27, a flood of forged frames, measured (needs root;
//! fails, does not skip, without it). In a file of its own, so that no
//! other test's job shares the machine while it measures.
//!
//! A 2-node job on a hub runs 6 phases of 300 barriers; node 1 waits for
//! the test before each phase, and during phases 1, 3 and 5 (every odd one) the attacker
//! floods node 1 with 100,000 forged frames a second: copies of a barrier
//! message node 0 sent it, with the epoch moved far away (a frame the
//! engine would take in and count as stale). Node 1 reports each phase's
//! median barrier latency (the phase's first call left out).
//!
//! With authentication off, the forged frames reach the engine (counted as
//! stale barrier messages). With it on, every one is dropped below the
//! engine (as a bad tag, or by the kernel when the receive ring is full),
//! and nothing breaks: every barrier completes, safe. Both print node 1's
//! latency, quiet against flooded (median, p99, mean); issue 27's goal, at
//! most 2x under 100,000 frames a second, is a measurement, recorded in
//! bench/RESULTS.md, not asserted here (the test asserts a flood of at
//! least a tenth of that rate, which a loaded machine still reaches).
//! MCD_TEST_FLOOD_SWITCH=1 measures the authenticated half on a learning
//! switch instead, the flood sent from the attacker's own MAC (see below).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use barriers::MsgKind;
use mcd_integration_tests::attacker::{assert_all_done, Attacker, Auth, Job};
use mcd_integration_tests::cluster;
use mcd_vcluster::{ClusterSpec, Topology};

const PEER: &str = env!("CARGO_BIN_EXE_mcd-test-peer");
const EVENT: Duration = Duration::from_secs(60);
/// Phases (quiet and flooded in turn) and barriers per phase; a recorded
/// measurement runs more with MCD_TEST_FLOOD_PHASES and
/// MCD_TEST_FLOOD_BARRIERS (see bench/results/flood.md).
fn shape() -> (usize, usize) {
    let var = |name: &str, default: usize| std::env::var(name).map_or(default, |v| v.parse().unwrap_or_else(|_| panic!("{name}: {v}")));
    let phases = var("MCD_TEST_FLOOD_PHASES", 6);
    assert!(phases >= 2 && phases % 2 == 0, "an even number of phases");
    (phases, var("MCD_TEST_FLOOD_BARRIERS", 300))
}
const RATE: u64 = 100_000;

/// Flooding threads: each sends its share of `RATE` (a burst every
/// millisecond, catching up when it fell behind).
const FLOODERS: u64 = 2;

/// Sends `frame` at `RATE / FLOODERS` frames a second until `stop`;
/// counts what it sent.
fn flood(sender: Arc<mcd::RawSender>, frame: Vec<u8>, stop: Arc<AtomicBool>, sent: Arc<AtomicU64>) -> std::thread::JoinHandle<Duration> {
    std::thread::spawn(move || {
        let start = Instant::now();
        let mut tick = start;
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..RATE / FLOODERS / 1000 {
                // ENOBUFS under the flood is the flood's own loss: count only what went.
                if sender.send(&frame).is_ok() {
                    sent.fetch_add(1, Ordering::Relaxed);
                }
            }
            tick += Duration::from_millis(1);
            let now = Instant::now();
            if tick > now {
                // The flood's pace, not a wait for an event.
                std::thread::sleep(tick - now);
            }
        }
        start.elapsed()
    })
}

/// One phase's latencies at node 1 (µs per barrier).
#[derive(Debug)]
#[allow(dead_code)] // read through Debug and the A/B closures
struct Phase {
    median: f64,
    p99: f64,
    mean: f64,
}

/// One measurement at a time: the two tests of this file take turns.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn flooded(name: &str, auth: Auth) {
    let _alone = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let (phases_n, per_phase) = shape();
    // MCD_TEST_FLOOD_SWITCH=1 (auth on only): a learning switch, and the
    // flood built from scratch with the attacker's own source MAC, so that
    // the switch takes it to node 1's port only (a hub copies every frame to
    // every port: half the kernel's work per frame goes to node 0).
    let switched = auth == Auth::On && std::env::var("MCD_TEST_FLOOD_SWITCH").is_ok_and(|v| v == "1");
    let c = cluster(ClusterSpec::new(name, 2).topology(if switched { Topology::Switch } else { Topology::Hub }));
    let mut attacker = Attacker::plug(&c);
    let mut job = Job::start(&c, PEER, auth, "dissemination", per_phase, |node| {
        let mut env = vec![("MCD_TEST_PHASES", phases_n.to_string())];
        if node == 1 {
            env.push(("MCD_TEST_GATE", "1".to_string()));
        }
        env
    });
    job.wait_line(1, "phase 0 ready", EVENT);
    let frame = if switched {
        // A barrier message "from" node 0, sent from the attacker's MAC, with a trailer of zeros.
        let repr = mcd::wire::FrameRepr {
            dst_mac: c.mac(1, 0),
            src_mac: attacker.station.macs[0],
            ethertype: mcd::wire::DEFAULT_ETHERTYPE,
            kind: barriers::mcd_wire::kind_byte(MsgKind::Data),
            dst_port: 0,
            src_port: 0,
            src_node: 0,
            job_key: mcd::DEFAULT_JOB_KEY,
            seq: 1 << 20,
            payload_len: barriers::mcd_wire::PAYLOAD_LEN,
            authenticated: true,
        };
        let mut bytes = vec![0u8; repr.frame_len()];
        repr.emit(&mut mcd::wire::Frame::new_unchecked(&mut bytes[..]));
        bytes
    } else {
        let template = attacker.wait_for("a barrier message from node 0 to node 1", EVENT, |f| f.src() == 0 && f.is(MsgKind::Data));
        // Its sequence number (a barrier message's epoch) 2^20 barriers
        // behind: a stale message to node 1's engine. (2^20 ahead, it would
        // tell node 1 that its peers are two or more barriers past it, and
        // node 1 would fail at once as left behind: with auth off that is
        // one forged frame failing a live node, attack 2's kind, not a flood.)
        template.forge().seq(template.seq().wrapping_sub(1 << 20)).0
    };
    attacker.stop_sniffing();
    let mut phases = Vec::new();
    let (mut flood_sent, mut flood_time) = (0u64, Duration::ZERO);
    for phase in 0..phases_n {
        job.wait_line(1, &format!("phase {phase} ready"), EVENT);
        let flooding = if phase % 2 == 1 {
            let (stop, sent) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
            let threads: Vec<_> = (0..FLOODERS).map(|_| flood(attacker.raw_sender(), frame.clone(), stop.clone(), sent.clone())).collect();
            // Under way before node 1 starts the phase.
            while sent.load(Ordering::Relaxed) < RATE / 100 {
                std::thread::yield_now();
            }
            Some((stop, sent, threads))
        } else {
            None
        };
        job.go(1);
        let line = job.wait_line(1, &format!("phase {phase} median "), EVENT);
        if let Some((stop, sent, threads)) = flooding {
            stop.store(true, Ordering::Relaxed);
            flood_time += threads.into_iter().map(|t| t.join().expect("the flood")).max().expect("flooders");
            flood_sent += sent.load(Ordering::Relaxed);
        }
        // `phase p median M p90 Q p99 R mean A max X`
        let words: Vec<&str> = line.text.split_whitespace().collect();
        let field = |name: &str| -> f64 {
            let at = words.iter().position(|w| *w == name).unwrap_or_else(|| panic!("no {name} in `{}`", line.text));
            words[at + 1].parse().expect("a number")
        };
        phases.push(Phase { median: field("median"), p99: field("p99"), mean: field("mean") });
    }
    let ends = job.finish(EVENT);
    assert_all_done(&ends, &format!("flood, auth {auth:?}"));
    let (violations, checked) = barriers::check::check(&mcd_integration_tests::attacker::timelines(&c.scratch_dir().unwrap().join("times"), 2));
    assert!(checked == phases_n * per_phase && violations.is_empty(), "{checked} barriers, violations {violations:?}");
    let rate = flood_sent as f64 / flood_time.as_secs_f64();
    // A/B: the quiet phases (0, 2, 4) against the flooded ones (1, 3, 5),
    // each side's middle phase.
    let mid = |flooded: bool, of: fn(&Phase) -> f64| {
        let mut v: Vec<f64> = phases.iter().skip(flooded as usize).step_by(2).map(of).collect();
        barriers::summary::median(&mut v)
    };
    let ratio = |of: fn(&Phase) -> f64| mid(true, of) / mid(false, of);
    let node1 = &ends[1];
    let (bad, stale, received, ring) = (node1.stat("bad_tag"), node1.barrier_stat("stale"), node1.stat("received"), node1.stat("ring_dropped"));
    eprintln!(
        "flood, auth {auth:?}: {flood_sent} forged frames at {rate:.0}/s to node 1; node 1's barrier latency quiet/flooded (µs): median {:.1}/{:.1} ({:.2}x), p99 {:.1}/{:.1} ({:.2}x), mean {:.1}/{:.1} ({:.2}x); phases {phases:?}; node 1 counted {bad} bad tags, {stale} stale barrier messages, {received} received, {ring} ring drops, {} NACKs sent, {} retries brought forward by ring drops",
        mid(false, |p| p.median),
        mid(true, |p| p.median),
        ratio(|p| p.median),
        mid(false, |p| p.p99),
        mid(true, |p| p.p99),
        ratio(|p| p.p99),
        mid(false, |p| p.mean),
        mid(true, |p| p.mean),
        ratio(|p| p.mean),
        node1.barrier_stat("nacks_sent"),
        node1.barrier_stat("ring_loss_retries"),
    );
    eprintln!("node 1's barrier stats: {}", node1.line("barrier stats: ").unwrap_or("(none)"));
    // The goal's rate needs a quiet machine (the flood's frames cost the
    // kernel's bridge a few µs each); the test asserts a flood, and says
    // the rate it reached.
    assert!(rate >= 0.1 * RATE as f64, "the flood reached only {rate:.0} frames/s");
    match auth {
        Auth::Off => {
            assert!(stale >= flood_sent / 2, "auth off: {flood_sent} forged, only {stale} reached the engine");
        }
        Auth::On => {
            assert!(bad + ring >= flood_sent * 9 / 10, "auth on: {flood_sent} forged, {bad} bad tags and {ring} ring drops");
            // Node 0 is node 1's only peer: every frame node 1 delivered
            // must be one node 0 sent. (Stale messages alone cannot tell a
            // forgery from node 0's own late copies, which a loaded machine
            // makes by the hundred.)
            let genuine = ends[0].stat("sent");
            assert!(received <= genuine, "auth on: node 1 delivered {received} frames, node 0 sent only {genuine}: forgeries got through");
        }
    }
}

#[test]
fn root_a_flood_of_forged_frames_reaches_the_engine_with_auth_off() {
    flooded("afloff", Auth::Off);
}

#[test]
fn root_a_flood_of_bad_tags_is_dropped_below_the_engine_and_breaks_nothing_with_auth_on() {
    flooded("aflon", Auth::On);
}
