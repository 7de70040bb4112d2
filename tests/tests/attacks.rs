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

use barriers::transport::status;
use barriers::MsgKind;
use mcd_integration_tests::attacker::{assert_all_done, Attacker, Auth, Captured, Ended, Job};
use mcd_integration_tests::cluster;
use mcd_vcluster::{ClusterSpec, Topology};

const PEER: &str = env!("CARGO_BIN_EXE_mcd-test-peer");
/// Generous bound on any wait for an event.
const EVENT: Duration = Duration::from_secs(20);

fn hub(name: &str, nodes: usize) -> mcd_vcluster::ClusterGuard {
    cluster(ClusterSpec::new(name, nodes).topology(Topology::Hub))
}

/// Frames dropped for a bad tag or as replays, over every node.
fn auth_drops(ends: &[Ended]) -> (u64, u64) {
    (ends.iter().map(|e| e.stat("bad_tag")).sum(), ends.iter().map(|e| e.stat("replayed")).sum())
}

/// Waits until each of `nodes` has sent a frame of epoch `epoch` (its
/// arrival, or a NACK for what it misses there): each is inside that call.
fn wait_inside(attacker: &Attacker, nodes: &[usize], epoch: u32) {
    for &node in nodes {
        attacker.wait_for(&format!("node {node} inside call {epoch}"), EVENT, |f| f.src() == node && f.seq() == epoch);
    }
}

/// Attack 1, early release: while rank 3 computes before barrier 5, once
/// the other nodes are inside it, the attacker sends every data frame node `forger` sent in barrier 4 again
/// with the epoch of barrier 5: rank 3's own arrival (forger 3), so the
/// others complete barrier 5 without it, or node 0's release multicast
/// (forger 0), so the nodes that wait only for it leave.
fn early_release(name: &str, auth: Auth, forger: usize) {
    const AT: u32 = 5;
    let c = hub(name, 4);
    let mut attacker = Attacker::plug(&c);
    let job = Job::start(&c, PEER, auth, "tree2", 8, |node| if node == 3 { vec![("MCD_TEST_COMPUTE", format!("{AT}:1500"))] } else { vec![] });
    let computing = job.wait_line(3, &format!("computing {AT}"), EVENT);
    wait_inside(&attacker, &[0, 1, 2], AT);
    let of_forger = |f: &Captured| f.src() == forger && f.is(MsgKind::Data) && f.seq() == AT - 1;
    attacker.wait_for(&format!("node {forger}'s data of the barrier before"), EVENT, of_forger);
    let templates = attacker.seen(of_forger);
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
            let v = violations
                .iter()
                .find(|v| v.barrier == AT as usize)
                .unwrap_or_else(|| panic!("auth off: the forged arrival released nobody early: {violations:?}\n{}", Ended::describe_all(&ends)));
            assert_eq!(v.not_entered, 3, "the last to enter barrier {AT} is the computing rank");
            let early = timelines[3].barriers[AT as usize].0 - timelines[v.left].barriers[AT as usize].1;
            assert!(early > Duration::from_millis(1000), "node {} left barrier {AT} only {early:?} before rank 3 entered it", v.left);
            eprintln!(
                "early release (node {forger}'s messages), auth off: {} forged frame(s) sent {:?} after rank 3 began computing; node {} left barrier {AT} {:.2} s before rank 3 entered it; {} violation(s) over {checked} barriers",
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
            assert!(bad >= templates.len() as u64, "{} forged, {bad} counted with a bad tag:\n{}", templates.len(), Ended::describe_all(&ends));
            eprintln!(
                "early release (node {forger}'s messages), auth on: {} forged, {bad} bad tags, {replayed} replays counted; 8 barriers safe",
                templates.len()
            );
        }
    }
    drop(attacker);
}

fn job_timelines(c: &mcd_vcluster::Cluster) -> Vec<barriers::check::Timeline> {
    mcd_integration_tests::attacker::timelines(&c.scratch_dir().unwrap().join("times"), c.nodes())
}

#[test]
fn root_early_release_succeeds_with_auth_off() {
    early_release("aeoff", Auth::Off, 3);
}

#[test]
fn root_forged_release_from_node_0_succeeds_with_auth_off() {
    early_release("a0off", Auth::Off, 0);
}

/// Attack 2, a forged failure: while rank 3 computes before barrier 5 (the
/// others wait in it), the attacker multicasts a status "from" node 1
/// saying it gave up on barrier 5 because node 3 is silent. Node 3 is
/// alive (its progress agent answers probes) and the failure timeout is
/// 2 s.
fn forged_failure(name: &str, auth: Auth) {
    const AT: u32 = 5;
    let c = hub(name, 4);
    let mut attacker = Attacker::plug(&c);
    let job = Job::start(&c, PEER, auth, "tree2", 8, |node| {
        let mut env = vec![("MCD_TEST_FAILURE_MS", "2000".to_string())];
        if node == 3 {
            env.push(("MCD_TEST_COMPUTE", format!("{AT}:1500")));
        }
        env
    });
    let computing = job.wait_line(3, &format!("computing {AT}"), EVENT);
    let template = attacker.wait_for("node 1's data of the barrier before", EVENT, |f| f.src() == 1 && f.is(MsgKind::Data) && f.seq() == AT - 1);
    // A report counts only in a call under way.
    wait_inside(&attacker, &[0, 1, 2], AT);
    let forged = template.forge().to_all().msg(|m| {
        m.kind = MsgKind::Status;
        m.epoch = AT;
        m.tag = status::IN_PROGRESS | status::FAILED;
        m.arg = 3 + 1;
    });
    let forged_at = Instant::now();
    attacker.send(&forged);
    match auth {
        Auth::Off => {
            // Node 0 waits in barrier 5 for node 1's arrival: the report fails it at once.
            let failed = job.wait_line(0, "error: ", EVENT);
            let ends = job.finish(EVENT);
            assert!(
                failed.text.contains("node 1 gave up because node 3 is silent"),
                "node 0 failed otherwise: {}\n{}",
                failed.text,
                Ended::describe_all(&ends)
            );
            let after = failed.at.duration_since(forged_at);
            assert!(after < Duration::from_millis(1000), "node 0 failed {after:?} after the forgery, not at once");
            assert!(computing.at < forged_at && ends[3].line(&format!("computing {AT}")).is_some());
            let failures = ends.iter().filter(|e| e.error().is_some()).count();
            eprintln!(
                "forged failure, auth off: node 0 failed {after:?} after 1 forged status, blaming live node 3 (computing); {failures} of 4 nodes failed (failure timeout 2 s)"
            );
        }
        Auth::On => {
            let ends = job.finish(EVENT);
            assert_all_done(&ends, "forged failure, auth on");
            let (violations, checked) = barriers::check::check(&job_timelines(&c));
            assert!(checked == 8 && violations.is_empty(), "{checked} barriers, {violations:?}");
            let (bad, replayed) = auth_drops(&ends);
            assert!(bad >= 2, "the forged multicast reached nodes 0, 2 and 3; {bad} bad tags counted:\n{}", Ended::describe_all(&ends));
            eprintln!("forged failure, auth on: 8 barriers complete and safe; {bad} bad tags, {replayed} replays counted");
        }
    }
}

/// Attack 3, forged answers to the join: rank 3 holds back (node 0 admits
/// no one before every node joined); the attacker reads node 1's and node
/// 2's join requests (each carries the process's incarnation) and answers
/// them "from" node 0: a refusal to node 1, an admission to node 2 with an
/// instance of its choosing.
fn forged_join(name: &str, auth: Auth) {
    const FAKE: u64 = 0x4141_4141_4141_4141;
    let c = hub(name, 4);
    let mut attacker = Attacker::plug(&c);
    let mac0 = c.mac(0, 0);
    let mut job = Job::start(&c, PEER, auth, "tree2", 3, |node| {
        let mut env = vec![("MCD_TEST_FAILURE_MS", "2000".to_string()), ("MCD_TEST_JOIN_MS", "5000".to_string())];
        if node == 3 {
            env.push(("MCD_TEST_HOLD", "1".to_string()));
        }
        env
    });
    job.wait_line(3, "holding", EVENT);
    for (node, kind, instance) in [(1, MsgKind::Refuse, 0), (2, MsgKind::Admit, FAKE)] {
        let join = attacker.wait_for(&format!("node {node}'s join"), EVENT, |f| f.src() == node && f.is(MsgKind::Join));
        let incarnation = join.msg().expect("a join").instance;
        let forged = join.forge().from(0, mac0).to(c.mac(node, 0), 0).msg(|m| {
            *m = barriers::Msg { kind, instance, epoch: (incarnation >> 32) as u32, tag: 0, arg: incarnation as u32 };
        });
        attacker.send(&forged);
    }
    match auth {
        Auth::Off => {
            let refused = job.wait_line(1, "error: ", EVENT);
            let admitted = job.wait_line(2, "node 2 joined instance", EVENT);
            job.go(3);
            let ends = job.finish(EVENT);
            assert!(refused.text.contains("refused node 1"), "node 1: {}\n{}", refused.text, Ended::describe_all(&ends));
            assert_eq!(ends[1].code, Some(4), "node 1's barrier creation failed");
            assert!(admitted.text.ends_with(&format!("{FAKE:#x}")), "node 2: {}", admitted.text);
            eprintln!("forged join, auth off: node 1 refused (`{}`), node 2 joined the attacker's instance {FAKE:#x}", refused.text);
        }
        Auth::On => {
            job.go(3);
            let ends = job.finish(EVENT);
            assert_all_done(&ends, "forged join, auth on");
            let (violations, checked) = barriers::check::check(&job_timelines(&c));
            assert!(checked == 3 && violations.is_empty(), "{checked} barriers, {violations:?}");
            let instances: Vec<&str> = ends.iter().enumerate().map(|(n, e)| e.line(&format!("node {n} joined instance ")).expect("joined")).collect();
            assert!(instances.iter().all(|i| *i == instances[0] && *i != format!("{FAKE:#x}")), "{instances:?}");
            let (bad, replayed) = auth_drops(&ends);
            assert!(ends[1].stat("bad_tag") >= 1 && ends[2].stat("bad_tag") >= 1, "{}", Ended::describe_all(&ends));
            eprintln!("forged join, auth on: every node joined instance {}; {bad} bad tags, {replayed} replays counted", instances[0]);
        }
    }
}

/// Attack 4, allreduce injection: while rank 3 computes before allreduce 5
/// (every rank contributes rank + 1: the sum is 10), once the others are
/// inside it, the attacker sends rank 3's contribution of allreduce 4 again
/// as its contribution to allreduce 5, with the value 1000000 in place of 4.
fn injected_allreduce(name: &str, auth: Auth) {
    const AT: u32 = 5;
    let c = hub(name, 4);
    let mut attacker = Attacker::plug(&c);
    let job = Job::start(&c, PEER, auth, "tree2", 8, |node| {
        let mut env = vec![("MCD_TEST_OP", "allreduce".to_string())];
        if node == 3 {
            env.push(("MCD_TEST_COMPUTE", format!("{AT}:1500")));
        }
        env
    });
    job.wait_line(3, &format!("computing {AT}"), EVENT);
    wait_inside(&attacker, &[0, 1, 2], AT);
    let carries_data = |f: &Captured| f.frame().payload().len() > barriers::mcd_wire::PAYLOAD_LEN;
    attacker.wait_for("rank 3's contribution to the allreduce before", EVENT, |f| {
        f.src() == 3 && f.is(MsgKind::Data) && f.seq() == AT - 1 && carries_data(f)
    });
    let templates = attacker.seen(|f| f.src() == 3 && f.is(MsgKind::Data) && f.seq() == AT - 1 && carries_data(f));
    for t in &templates {
        // The contribution: a 12-byte header, then the one u64.
        attacker.send(&t.forge().seq(AT).data_at(barriers::collective::wire::HEADER_LEN, &1_000_000u64.to_le_bytes()));
    }
    let ends = job.finish(EVENT);
    let results: Vec<Option<&str>> = ends.iter().map(|e| e.line(&format!("allreduce {AT} "))).collect();
    match auth {
        Auth::Off => {
            assert_all_done(&ends, "allreduce injection, auth off: no error anywhere");
            assert!(
                results.iter().all(|r| *r == Some("1000006")),
                "auth off: results of allreduce {AT}: {results:?}\n{}",
                Ended::describe_all(&ends)
            );
            eprintln!("allreduce injection, auth off: {} forged frame(s); every rank got 1000006 instead of 10, return code 0", templates.len());
        }
        Auth::On => {
            assert_all_done(&ends, "allreduce injection, auth on");
            for (node, e) in ends.iter().enumerate() {
                for k in 0..8 {
                    assert_eq!(e.line(&format!("allreduce {k} ")), Some("10"), "node {node}, allreduce {k}");
                }
            }
            let (bad, replayed) = auth_drops(&ends);
            assert!(bad >= templates.len() as u64, "{} forged, {bad} bad tags:\n{}", templates.len(), Ended::describe_all(&ends));
            eprintln!("allreduce injection, auth on: every rank got 10 in all 8 allreduces; {bad} bad tags, {replayed} replays counted");
        }
    }
}

/// Attack 4b, broadcast injection: while node 0, the root, computes before
/// broadcast 5 (it broadcasts 100 + k in call k), once every other node has
/// entered broadcast 5 (each tells the root so), the attacker sends node
/// 0's data of broadcast 4 again as its data of broadcast 5, with the value
/// 1000000.
fn injected_bcast(name: &str, auth: Auth) {
    const AT: u32 = 5;
    let c = hub(name, 4);
    let mut attacker = Attacker::plug(&c);
    let job = Job::start(&c, PEER, auth, "tree2", 8, |node| {
        let mut env = vec![("MCD_TEST_OP", "bcast".to_string())];
        if node == 0 {
            env.push(("MCD_TEST_COMPUTE", format!("{AT}:1500")));
        }
        env
    });
    job.wait_line(0, &format!("computing {AT}"), EVENT);
    // Each non-root tells the root as it enters broadcast 5: forge once all are in.
    wait_inside(&attacker, &[1, 2, 3], AT);
    // The root's data: the message, a contribution header and one u64.
    let with_value = barriers::mcd_wire::PAYLOAD_LEN + barriers::collective::wire::HEADER_LEN + 8;
    let root_data = |f: &Captured| f.src() == 0 && f.is(MsgKind::Data) && f.seq() == AT - 1 && f.frame().payload().len() == with_value;
    attacker.wait_for("the root's data of the broadcast before", EVENT, root_data);
    let templates = attacker.seen(root_data);
    for t in &templates {
        attacker.send(&t.forge().seq(AT).data_at(barriers::collective::wire::HEADER_LEN, &1_000_000u64.to_le_bytes()));
    }
    let ends = job.finish(EVENT);
    let results: Vec<Option<&str>> = ends.iter().map(|e| e.line(&format!("bcast {AT} "))).collect();
    match auth {
        Auth::Off => {
            assert_all_done(&ends, "broadcast injection, auth off: no error anywhere");
            assert!(results[1..].iter().all(|r| *r == Some("1000000")), "auth off: broadcast {AT} gave {results:?}\n{}", Ended::describe_all(&ends));
            let fooled = 3;
            let codes: Vec<Option<i32>> = ends.iter().map(|e| e.code).collect();
            eprintln!(
                "broadcast injection, auth off: {} forged frame(s); {fooled} of 3 non-roots got 1000000 instead of {} (results {results:?}, exit codes {codes:?})",
                templates.len(),
                100 + AT
            );
        }
        Auth::On => {
            assert_all_done(&ends, "broadcast injection, auth on");
            for (node, e) in ends.iter().enumerate() {
                for k in 0..8 {
                    assert_eq!(e.line(&format!("bcast {k} ")), Some((100 + k).to_string().as_str()), "node {node}, broadcast {k}");
                }
            }
            let (bad, replayed) = auth_drops(&ends);
            assert!(bad >= templates.len() as u64, "{} forged, {bad} bad tags:\n{}", templates.len(), Ended::describe_all(&ends));
            eprintln!("broadcast injection, auth on: every node got 100 + k in all 8 broadcasts; {bad} bad tags, {replayed} replays counted");
        }
    }
}

/// Attack 5, replay keeps a dead node alive: rank 2 computes 300 ms before
/// barrier 5 (its progress agent answers the others' probes with its
/// status) and crashes (aborts); the attacker sends every frame rank 2 sent
/// in barriers 4 and 5 (its data and its statuses) again, unchanged, every
/// 100 ms for 3 s. The failure timeout is 1 s.
fn replayed_keepalive(name: &str, auth: Auth) {
    const AT: u32 = 5;
    const ATTACK: Duration = Duration::from_secs(3);
    let c = hub(name, 4);
    let mut attacker = Attacker::plug(&c);
    let job = Job::start(&c, PEER, auth, "dissemination", 8, |node| {
        let mut env = vec![("MCD_TEST_FAILURE_MS", "1000".to_string())];
        if node == 2 {
            env.push(("MCD_TEST_COMPUTE", format!("{AT}:300")));
            env.push(("MCD_TEST_CRASH_AT", AT.to_string()));
        }
        env
    });
    let crash = job.wait_line(2, &format!("crashing {AT}"), EVENT);
    let last = |f: &Captured| f.src() == 2 && (f.seq() == AT - 1 || f.seq() == AT);
    attacker.wait_for("rank 2's status", EVENT, |f| last(f) && f.is(MsgKind::Status));
    let captured = attacker.seen(last);
    let statuses = captured.iter().filter(|f| f.is(MsgKind::Status)).count();
    let mut rounds = Vec::new();
    while crash.at.elapsed() < ATTACK {
        for f in &captured {
            attacker.send(&f.forge());
        }
        rounds.push(Instant::now());
        // The attack's own pace (a frame every 100 ms), not a wait for an event.
        std::thread::sleep(Duration::from_millis(100));
    }
    let first_error = [0, 1, 3].iter().map(|&n| job.wait_line(n, "error: ", EVENT)).map(|l| l.at).min().expect("three survivors");
    let detected = first_error.duration_since(crash.at);
    let ends = job.finish(EVENT);
    let before_detection = rounds.iter().filter(|&&r| r < first_error).count();
    let rounds = rounds.len();
    for n in [0, 1, 3] {
        let e = ends[n].error().unwrap_or_else(|| panic!("node {n} did not fail:\n{}", Ended::describe_all(&ends)));
        assert!(e.contains("[2]") || e.contains("node 2 is silent"), "node {n} must name node 2: {e}");
    }
    match auth {
        Auth::Off => {
            assert!(detected >= ATTACK, "auth off: the crash was detected after {detected:?}, within the {ATTACK:?} of replays");
            eprintln!(
                "replayed keepalive, auth off: {} frame(s) of the dead rank ({statuses} statuses) replayed {rounds} times; crash detected after {:.2} s (failure timeout 1 s)",
                captured.len(),
                detected.as_secs_f64()
            );
        }
        Auth::On => {
            assert!(detected < Duration::from_millis(2500), "auth on: the crash was detected only after {detected:?}");
            let (bad, replayed) = auth_drops(&ends);
            assert!(
                replayed >= before_detection as u64,
                "{before_detection} rounds of replays before the detection, {replayed} counted:\n{}",
                Ended::describe_all(&ends)
            );
            eprintln!(
                "replayed keepalive, auth on: crash detected after {:.2} s (failure timeout 1 s) despite {before_detection} rounds of replays by then ({rounds} in all); {replayed} replays, {bad} bad tags counted",
                detected.as_secs_f64()
            );
        }
    }
}

/// Attack 7, a stolen switch port: on a learning switch, the attacker
/// sends a frame with node 0's source MAC (defended: once node 0 waits for
/// joins, the others held until then; undefended: as the job starts), so
/// the switch sends node 0's traffic (the other nodes' join requests) to
/// the attacker's port; it sends one again (every millisecond defended,
/// every 50 ms undefended) until a join request for node 0 has come to it
/// (the theft worked), then stops. The join timeout is 3 s. No tag stops this: what brings
/// the port back is a waiting endpoint's announcement of its MAC
/// (`EndpointConfig::announce_every`, on whether or not frames are
/// authenticated), so the undefended half runs as mcd did before, with
/// authentication and announcements off.
fn stolen_port(name: &str, auth: Auth) {
    let c = cluster(ClusterSpec::new(name, 4));
    let mut attacker = Attacker::plug(&c);
    let mac0 = c.mac(0, 0);
    let mut steal = vec![0u8; 60];
    steal[..6].copy_from_slice(&mcd::MacAddr::BROADCAST.0);
    steal[6..12].copy_from_slice(&mac0.0);
    steal[12..14].copy_from_slice(&mcd::wire::DEFAULT_ETHERTYPE.to_be_bytes());
    let steal = mcd_integration_tests::attacker::Forgery(steal);
    // Defended, the others hold before creating the barrier and node 0
    // creates it at once (and waits for their joins, silent but for its
    // announcements); the attacker takes node 0's port, the others go on,
    // and the attacker takes the port again every millisecond until a join
    // has come to it, so that an announcement of node 0's holds the port
    // for at most a millisecond before the joins go out, whatever the
    // machine's load (a theft every 50 ms as the job started raced node
    // 0's announcements, and once every node had joined none was left to
    // divert). Undefended, the port is taken as the job starts and again
    // every 50 ms.
    let hold = auth == Auth::On;
    if !hold {
        attacker.send(&steal);
    }
    let mut job = Job::start(&c, PEER, auth, "tree2", 3, |node| {
        let mut env = vec![("MCD_TEST_JOIN_MS", "3000".to_string())];
        if hold && node != 0 {
            env.push(("MCD_TEST_HOLD", "1".to_string()));
        }
        if auth == Auth::Off {
            env.push(("MCD_TEST_NO_ANNOUNCE", "1".to_string()));
        }
        env
    });
    if hold {
        for node in 1..4 {
            job.wait_line(node, "holding", EVENT);
        }
        attacker.send(&steal);
        for node in 1..4 {
            job.go(node);
        }
    }
    let started = Instant::now();
    let diverted_join = |f: &Captured| f.is(MsgKind::Join) && f.frame().dst_mac() == mac0;
    let stolen = loop {
        if let Some(f) = attacker.try_wait_for(if hold { Duration::from_millis(1) } else { Duration::from_millis(50) }, diverted_join) {
            break f;
        }
        assert!(started.elapsed() < EVENT, "no join request for node 0 ever came to the attacker");
        attacker.send(&steal);
    };
    let steals = attacker.sent;
    let ends = job.finish(EVENT);
    let diverted = attacker.seen(|f| f.frame().dst_mac() == mac0).len();
    match auth {
        Auth::Off => {
            for (n, e) in ends.iter().enumerate() {
                assert_eq!(e.code, Some(4), "node {n}: creation must fail:\n{}", Ended::describe_all(&ends));
                assert!(e.error().is_some_and(|t| t.contains("did not join")), "node {n}: {:?}", e.error());
            }
            eprintln!("stolen port, auth off: {steals} frame(s) with node 0's MAC; {diverted} frames for node 0 came to the attacker (first from node {}); every node's creation failed after the 3 s join timeout", stolen.src());
        }
        Auth::On => {
            assert_all_done(&ends, "stolen port, auth on");
            let (violations, checked) = barriers::check::check(&job_timelines(&c));
            assert!(checked == 3 && violations.is_empty(), "{checked} barriers, {violations:?}");
            let announced = ends[0].stat("announced");
            assert!(announced >= 1, "node 0 never announced itself: {}", Ended::describe_all(&ends));
            eprintln!("stolen port, auth on: {steals} frame(s) with node 0's MAC; {diverted} frames for node 0 came to the attacker (first from node {}) before node 0 took its port back ({announced} announcements); every node joined and completed", stolen.src());
        }
    }
}

#[test]
fn root_forged_failure_succeeds_with_auth_off() {
    forged_failure("afoff", Auth::Off);
}

#[test]
fn root_forged_join_answers_succeed_with_auth_off() {
    forged_join("ajoff", Auth::Off);
}

#[test]
fn root_allreduce_injection_succeeds_with_auth_off() {
    injected_allreduce("aioff", Auth::Off);
}

#[test]
fn root_replayed_keepalive_succeeds_with_auth_off() {
    replayed_keepalive("aroff", Auth::Off);
}

#[test]
fn root_stolen_port_succeeds_with_auth_and_announcements_off() {
    stolen_port("asoff", Auth::Off);
}

#[test]
fn root_early_release_fails_with_auth_on() {
    early_release("aeon", Auth::On, 3);
}

#[test]
fn root_forged_release_from_node_0_fails_with_auth_on() {
    early_release("a0on", Auth::On, 0);
}

#[test]
fn root_forged_failure_fails_with_auth_on() {
    forged_failure("afon", Auth::On);
}

#[test]
fn root_forged_join_answers_fail_with_auth_on() {
    forged_join("ajon", Auth::On);
}

#[test]
fn root_allreduce_injection_fails_with_auth_on() {
    injected_allreduce("aion", Auth::On);
}

#[test]
fn root_replayed_keepalive_fails_with_auth_on() {
    replayed_keepalive("aron", Auth::On);
}

#[test]
fn root_stolen_port_comes_back_with_auth_on() {
    stolen_port("ason", Auth::On);
}

#[test]
fn root_broadcast_injection_succeeds_with_auth_off() {
    injected_bcast("aboff", Auth::Off);
}

#[test]
fn root_broadcast_injection_fails_with_auth_on() {
    injected_bcast("abon", Auth::On);
}

/// A node run with another job secret is named at the join: its frames
/// fail authentication at node 0, so it never joins, and node 0's join
/// timeout says how many frames claiming to be it failed (a typed field of
/// the error, and in its message), instead of only "did not join".
#[test]
fn root_a_node_with_another_secret_is_named_at_the_join() {
    use barriers::{Algorithm, BarrierConfig, BarrierError, McdTransport};
    let c = cluster(ClusterSpec::new("asec", 2));
    let mut config = BarrierConfig::new(Algorithm::Dissemination);
    config.join_timeout = Duration::from_millis(1500);
    let joins: Vec<_> = (0..2)
        .map(|n| {
            let mut ec = c.endpoint_config();
            ec.wait = mcd::WaitPolicy::Block;
            if n == 1 {
                ec.auth = mcd::Auth::Key(mcd::JobSecret::from_bytes([0x5a; 16]));
            }
            let endpoint = mcd_integration_tests::open_on(&c, n, ec).unwrap_or_else(|e| panic!("node {n}: {e}"));
            std::thread::spawn(move || barriers::Barrier::new(McdTransport::new(endpoint), config).map(|_| ()))
        })
        .collect();
    let errors: Vec<BarrierError> = joins.into_iter().map(|j| j.join().expect("a join thread").expect_err("a join with two secrets")).collect();
    match &errors[0] {
        BarrierError::JoinTimeout { missing, bad_tags, .. } => {
            assert_eq!(missing, &vec![1]);
            assert!(matches!(bad_tags[..], [(1, count)] if count > 0), "{bad_tags:?}");
        }
        other => panic!("node 0: {other}"),
    }
    let text = errors[0].to_string();
    assert!(
        text.contains("frame(s) claiming to be node 1 failed authentication: node 1 runs with another job secret (every node must read the same MCD_KEY_FILE), or they were forged"),
        "{text}"
    );
    eprintln!("node 0: {text}\nnode 1: {}", errors[1]);
}

/// Attack 7 while a node computes: on a learning switch, while node 3
/// computes for 4 s before barrier 2 (outside any barrier call; its
/// progress agent asleep), the attacker sends a frame with node 3's source
/// MAC every 50 ms for the first [`STEALING`] of it (until a frame for node
/// 3, its peers' probes, has come to it, if later: the theft worked), then
/// stops. Returns when the attacker last stole, when it last saw a frame for
/// node 3, and when node 3 began computing.
/// How long the attacker keeps stealing node 3's port as it computes.
const STEALING: Duration = Duration::from_millis(500);

fn stolen_while_computing(name: &str, announce: bool) -> (Instant, Instant, Instant) {
    const AT: u32 = 2;
    const COMPUTE_MS: u64 = 4000;
    let c = cluster(ClusterSpec::new(name, 4));
    let mut attacker = Attacker::plug(&c);
    let mac3 = c.mac(3, 0);
    let mut steal = vec![0u8; 60];
    steal[..6].copy_from_slice(&mcd::MacAddr::BROADCAST.0);
    steal[6..12].copy_from_slice(&mac3.0);
    steal[12..14].copy_from_slice(&mcd::wire::DEFAULT_ETHERTYPE.to_be_bytes());
    let steal = mcd_integration_tests::attacker::Forgery(steal);
    let job = Job::start(&c, PEER, Auth::On, "tree2", 4, |node| {
        let mut env = vec![];
        if node == 3 {
            env.push(("MCD_TEST_COMPUTE", format!("{AT}:{COMPUTE_MS}")));
        }
        if !announce {
            env.push(("MCD_TEST_NO_ANNOUNCE", "1".to_string()));
        }
        env
    });
    let computing = job.wait_line(3, &format!("computing {AT}"), EVENT);
    let for_node3 = |f: &Captured| f.frame().dst_mac() == mac3;
    let mut worked = false;
    let stolen = loop {
        attacker.send(&steal);
        let stole = Instant::now();
        worked |= attacker.try_wait_for(Duration::from_millis(50), for_node3).is_some();
        if worked && computing.at.elapsed() >= STEALING {
            break stole;
        }
        // (Once it worked, the wait above returns at once: the pace of the theft.)
        std::thread::sleep(Duration::from_millis(50).saturating_sub(stole.elapsed()));
        assert!(computing.at.elapsed() < Duration::from_millis(COMPUTE_MS / 2), "no frame for node 3 came to the attacker while it computed");
    };
    let ends = job.finish(EVENT);
    assert_all_done(&ends, "stolen while computing");
    let (violations, checked) = barriers::check::check(&job_timelines(&c));
    assert!(checked == 4 && violations.is_empty(), "{checked} barriers, {violations:?}");
    let last = attacker.seen(for_node3).last().expect("the theft").at;
    eprintln!(
        "stolen while computing (announcements {}): {} steal frame(s), the last {:.0} ms after node 3 began its {COMPUTE_MS} ms computation; frames for node 3 came to the attacker until {:.0} ms ({} in all); node 3 announced {} time(s)",
        if announce { "on" } else { "off" },
        attacker.sent,
        stolen.duration_since(computing.at).as_secs_f64() * 1e3,
        last.duration_since(computing.at).as_secs_f64() * 1e3,
        attacker.seen(for_node3).len(),
        ends[3].stat("announced"),
    );
    (stolen, last, computing.at)
}

#[test]
fn root_a_port_stolen_while_its_node_computes_comes_back_before_it_calls_again() {
    // Node 3's sleeping agent wakes every announcement period and announces
    // its MAC if it sent nothing: its peers' probes reach it again long
    // before it calls in after 4 s.
    let (stolen, last, computing) = stolen_while_computing("ascomp", true);
    assert!(
        last.saturating_duration_since(stolen) < Duration::from_secs(1),
        "the port came back only {:?} after the last theft",
        last.duration_since(stolen)
    );
    assert!(last.duration_since(computing) < Duration::from_secs(2), "not long before the computation ended");
}

#[test]
fn root_a_port_stolen_while_its_node_computes_stays_stolen_with_announcements_off() {
    // The same without announcements: the port stays with the attacker
    // until node 3 sends again, at its next call (what the test above
    // shows is the agent's doing).
    let (stolen, last, computing) = stolen_while_computing("asnoan", false);
    assert!(last.duration_since(computing) >= Duration::from_secs(3), "the port came back {:?} after the theft", last.duration_since(stolen));
}
