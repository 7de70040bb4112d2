//! The MCD transport across a virtual cluster (real frames through veth and
//! Linux bridges). Needs root; fails (does not skip) without it.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::Duration;

use mcd::auth::FrameKey;
use mcd::wire::{Frame, FrameRepr, DEFAULT_ETHERTYPE, FRAME_HEADER_LEN};
use mcd::{Destination, EndpointConfig, Error, GroupId, NodeAddr, NodeList, RawSender};
use mcd_integration_tests::{cluster, drain, open_all, open_on};
use mcd_vcluster::{ClusterSpec, LossPoint, Topology};
use proptest::prelude::*;

const QUIET: Duration = Duration::from_millis(150);

/// The test peer process (`tests/src/bin/mcd-test-peer.rs`).
fn peer_binary() -> &'static str {
    env!("CARGO_BIN_EXE_mcd-test-peer")
}

#[test]
fn unicast_reaches_the_addressed_node_with_its_fields() {
    let c = cluster(ClusterSpec::new("uni", 3));
    let mut eps = open_all(&c);
    eps[0].send(0, Destination::Node(2), 9, 77, b"to node two").unwrap();
    let got = drain(&mut eps[2], QUIET);
    assert_eq!(got.len(), 1, "{got:?}");
    let (msg, payload) = &got[0];
    assert_eq!((msg.from, msg.kind, msg.seq, msg.rail, msg.group), (0, 9, 77, 0, None));
    assert_eq!(payload, b"to node two");
    assert!(drain(&mut eps[1], QUIET).is_empty(), "node 1 must not receive node 2's message");
    assert_eq!(eps[2].stats().unwrap().received, 1);
    assert_eq!(eps[0].stats().unwrap().sent, 1);
}

#[test]
fn multicast_reaches_every_other_node_once_and_never_the_sender() {
    let n = 5;
    let per_node = 20;
    let c = cluster(ClusterSpec::new("mca", n));
    let mut eps = open_all(&c);
    for (i, ep) in eps.iter_mut().enumerate() {
        for k in 0..per_node {
            ep.send(0, Destination::ALL_NODES, 1, (i * 1000 + k) as u32, &[i as u8; 32]).unwrap();
        }
    }
    for (i, ep) in eps.iter_mut().enumerate() {
        let got = drain(ep, QUIET);
        let mut per_sender: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
        for (msg, payload) in &got {
            assert_eq!(msg.group, Some(GroupId::ALL));
            assert_eq!(payload, &vec![msg.from as u8; 32]);
            per_sender.entry(msg.from).or_default().push(msg.seq);
        }
        assert!(!per_sender.contains_key(&i), "node {i} received its own multicast");
        assert_eq!(per_sender.len(), n - 1, "node {i} heard from {:?}", per_sender.keys());
        for (from, seqs) in per_sender {
            let expected: Vec<u32> = (0..per_node).map(|k| (from * 1000 + k) as u32).collect();
            assert_eq!(seqs, expected, "node {i} from node {from}: each message exactly once, in order");
        }
    }
}

#[test]
fn named_groups_reach_members_only_until_they_leave() {
    let c = cluster(ClusterSpec::new("grp", 4));
    let mut eps = open_all(&c);
    let g = GroupId(5);
    eps[1].join(g).unwrap();
    eps[2].join(g).unwrap();
    assert_eq!(eps[1].groups().collect::<Vec<_>>(), vec![GroupId::ALL, g]);
    eps[0].send(0, Destination::Group(g), 2, 1, b"members").unwrap();
    for (node, expect) in [(1, 1), (2, 1), (3, 0)] {
        let got = drain(&mut eps[node], QUIET);
        assert_eq!(got.len(), expect, "node {node}: {got:?}");
        if expect == 1 {
            assert_eq!(got[0].0.group, Some(g));
        }
    }
    eps[2].leave(g).unwrap();
    eps[0].send(0, Destination::Group(g), 2, 2, b"members").unwrap();
    assert_eq!(drain(&mut eps[1], QUIET).len(), 1);
    assert!(drain(&mut eps[2], QUIET).is_empty(), "node 2 left the group");
    assert!(matches!(eps[2].leave(GroupId::ALL), Err(Error::Config(_))));
}

/// Two processes' ports on one host (one NIC): nodes 1 and 2 share node B's MAC.
fn shared_nic_list(c: &mcd_vcluster::Cluster) -> NodeList {
    NodeList::new(vec![
        NodeAddr { macs: vec![c.mac(0, 0)], port: 0 },
        NodeAddr { macs: vec![c.mac(1, 0)], port: 3 },
        NodeAddr { macs: vec![c.mac(1, 0)], port: 4 },
    ])
    .unwrap()
}

#[test]
fn ports_demultiplex_frames_between_processes_on_one_nic() {
    let c = cluster(ClusterSpec::new("prt", 2));
    let list = shared_nic_list(&c);
    let config = |port| {
        let mut cfg = EndpointConfig::new(["eth0"], port, list.clone()).with_auth(mcd::Auth::Key(c.secret().unwrap()));
        cfg.wait = mcd::WaitPolicy::Block;
        cfg
    };
    let mut a = open_on(&c, 0, config(0)).unwrap();
    let mut p3 = open_on(&c, 1, config(3)).unwrap();
    let mut p4 = open_on(&c, 1, config(4)).unwrap();
    assert_eq!((p3.node_id(), p4.node_id()), (1, 2));
    for i in 0..10u32 {
        a.send(0, Destination::Node(1), 3, i, b"port three").unwrap();
        a.send(0, Destination::Node(2), 4, i, b"port four").unwrap();
    }
    let at3 = drain(&mut p3, QUIET);
    let at4 = drain(&mut p4, QUIET);
    assert_eq!(at3.len(), 10);
    assert_eq!(at4.len(), 10);
    assert!(at3.iter().all(|(m, p)| m.kind == 3 && p == b"port three"), "port 3 got another port's frame");
    assert!(at4.iter().all(|(m, p)| m.kind == 4 && p == b"port four"), "port 4 got another port's frame");
    // The two ports on one NIC reach each other and hear each other's multicast.
    p3.send(0, Destination::Node(2), 7, 0, b"sibling").unwrap();
    p4.send(0, Destination::ALL_NODES, 8, 0, b"everyone").unwrap();
    let at4 = drain(&mut p4, QUIET);
    assert_eq!(at4.iter().map(|(m, _)| (m.from, m.kind)).collect::<Vec<_>>(), vec![(1, 7)], "p4 hears p3, not itself");
    let at3 = drain(&mut p3, QUIET);
    assert_eq!(at3.iter().map(|(m, _)| (m.from, m.kind)).collect::<Vec<_>>(), vec![(2, 8)]);
    let at_a = drain(&mut a, QUIET);
    assert_eq!(at_a.iter().map(|(m, _)| (m.from, m.kind)).collect::<Vec<_>>(), vec![(2, 8)]);
}

#[test]
fn a_port_is_held_by_one_process_and_the_error_names_it() {
    let c = cluster(ClusterSpec::new("exc", 2));
    let mut holder = c.command(1, peer_binary()).arg("hold").env("MCD_PORT", "0").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "holding port 0 as node 1");

    // This process, and a third one, are refused while the holder lives.
    let err = open_on(&c, 1, c.endpoint_config()).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::PortHeld { port: 0, .. }), "{msg}");
    assert!(msg.contains(&format!("process {}", holder.id())), "error must name the holder: {msg}");
    let third = c.command(1, peer_binary()).arg("open").output().unwrap();
    assert_eq!(third.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&third.stdout).contains("is held by process"));

    // Once the holder exits, the port is free.
    holder.stdin.take().unwrap().write_all(b"").unwrap();
    assert!(holder.wait().unwrap().success());
    open_on(&c, 1, c.endpoint_config()).expect("port free after the holder exited");
}

#[test]
fn two_rails_carry_their_own_frames() {
    let c = cluster(ClusterSpec::new("rail", 2).rails(2));
    let mut eps = open_all(&c);
    assert_eq!(eps[0].rails(), 2);
    for i in 0..5u32 {
        eps[0].send(0, Destination::Node(1), 10, i, b"rail zero").unwrap();
        eps[0].send(1, Destination::Node(1), 11, i, b"rail one").unwrap();
        eps[0].send(1, Destination::ALL_NODES, 12, i, b"group on rail one").unwrap();
    }
    let got = drain(&mut eps[1], QUIET);
    let mut by_kind: BTreeMap<u8, Vec<usize>> = BTreeMap::new();
    for (m, _) in &got {
        by_kind.entry(m.kind).or_default().push(m.rail);
    }
    assert_eq!(by_kind[&10], vec![0; 5], "kind 10 was sent on rail 0 only");
    assert_eq!(by_kind[&11], vec![1; 5], "kind 11 was sent on rail 1 only");
    assert_eq!(by_kind[&12], vec![1; 5]);
    assert!(matches!(eps[0].send(2, Destination::Node(1), 0, 0, b""), Err(Error::UnknownRail { rail: 2, count: 2 })));
}

#[test]
fn payload_over_the_mtu_is_an_error_and_the_largest_fits_whole() {
    let c = cluster(ClusterSpec::new("mtu", 2));
    let mut eps = open_all(&c);
    let max = eps[0].max_payload(0).unwrap();
    assert_eq!(max, 1500 - 16 - mcd::wire::TRAILER_LEN, "the MTU less the MCD header and the trailer");
    let err = eps[0].send(0, Destination::Node(1), 0, 0, &vec![1u8; max + 1]).unwrap_err();
    assert!(matches!(err, Error::PayloadTooLarge { len, max: m, rail: 0 } if len == max + 1 && m == max), "{err}");
    let big: Vec<u8> = (0..max).map(|i| (i * 7) as u8).collect();
    eps[0].send(0, Destination::Node(1), 0, 0, &big).unwrap();
    let got = drain(&mut eps[1], QUIET);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1, big, "the largest payload arrives whole");
    // A receive buffer that is too small is an error, and the message stays queued.
    eps[0].send(0, Destination::Node(1), 0, 0, b"0123456789").unwrap();
    let mut small = [0u8; 4];
    // recv waits for the frame itself, then refuses the buffer.
    let refused = eps[1].recv(&mut small, Some(Duration::from_secs(5)));
    assert!(matches!(refused, Err(Error::BufferTooSmall { buf: 4, len: 10 })), "{refused:?}");
    assert!(matches!(eps[1].try_recv(&mut small), Err(Error::BufferTooSmall { buf: 4, len: 10 })), "still queued");
    assert_eq!(drain(&mut eps[1], QUIET)[0].1, b"0123456789");
}

#[test]
fn bad_destinations_and_configurations_are_clear_errors() {
    let c = cluster(ClusterSpec::new("err", 2));
    let mut eps = open_all(&c);
    let err = eps[0].send(0, Destination::Node(2), 0, 0, b"").unwrap_err();
    assert!(matches!(err, Error::UnknownNode { node: 2, count: 2 }), "{err}");
    drop(eps);

    let mut cfg = c.endpoint_config();
    cfg.interfaces = vec!["eth7".into()];
    let err = open_on(&c, 0, cfg).unwrap_err();
    assert!(matches!(&err, Error::NoSuchInterface { name, available } if name == "eth7" && available.contains("eth0")), "{err}");

    let mut cfg = c.endpoint_config();
    cfg.port = 9;
    let err = open_on(&c, 0, cfg).unwrap_err();
    assert!(matches!(err, Error::NotInNodeList { port: 9, .. }), "{err}");
}

#[test]
fn without_cap_net_raw_the_error_says_how_to_grant_it() {
    let c = cluster(ClusterSpec::new("cap", 2));
    // setpriv (util-linux) drops every capability, as for an unprivileged user.
    let out = c
        .command(0, "setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", peer_binary(), "open"])
        .env("MCD_PORT_DIR", std::env::temp_dir().join("mcd-cap-test"))
        // Authentication off, explicitly: user 65534 cannot read the
        // cluster's (root's) key file, and this test is about the capability.
        .env_remove(mcd::auth::KEY_FILE_VAR)
        .env(mcd::auth::AUTH_VAR, "off")
        .output()
        .expect("setpriv (util-linux) is needed for this test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "stdout: {stdout} stderr: {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("CAP_NET_RAW") && stdout.contains("setcap cap_net_raw+ep"), "{stdout}");
}

/// The frame `repr` with `payload`, signed with `key` (if any) and `counter`.
/// `repr`'s frame with `payload`, signed with `key` (if any) as frame `number` of session 0.
fn signed_bytes(repr: &FrameRepr, payload: &[u8], key: Option<&FrameKey>, number: u32) -> Vec<u8> {
    let repr = FrameRepr { authenticated: key.is_some(), ..*repr };
    let mut buf = vec![0u8; repr.frame_len()];
    let mut f = Frame::new_unchecked(&mut buf[..]);
    repr.emit(&mut f);
    f.payload_mut()[..payload.len()].copy_from_slice(payload);
    if let Some(key) = key {
        key.sign(&mut buf, mcd::auth::FrameCounter { session: 0, number });
    }
    buf
}

/// A valid frame from node 0 (port 0) to node 1 (port 0) of cluster `c`.
fn good_frame(c: &mcd_vcluster::Cluster, seq: u32) -> FrameRepr {
    FrameRepr {
        dst_mac: c.mac(1, 0),
        src_mac: c.mac(0, 0),
        ethertype: DEFAULT_ETHERTYPE,
        kind: 1,
        dst_port: 0,
        src_port: 0,
        src_node: 0,
        job_key: mcd::DEFAULT_JOB_KEY,
        seq,
        payload_len: 4,
        authenticated: true,
    }
}

#[test]
fn malformed_and_foreign_frames_are_counted_and_dropped_while_good_traffic_flows() {
    let c = cluster(ClusterSpec::new("bad", 2));
    for kernel_filter in [true, false] {
        let mut cfg0 = c.endpoint_config();
        cfg0.wait = mcd::WaitPolicy::Block;
        let mut cfg1 = cfg0.clone();
        cfg1.kernel_filter = kernel_filter;
        let mut sender = open_on(&c, 0, cfg0).unwrap();
        let mut receiver = open_on(&c, 1, cfg1).unwrap();
        let raw = {
            let _ns = c.enter(0).unwrap();
            RawSender::open("eth0").unwrap()
        };
        let good = good_frame(&c, 0);
        // Signed with the job's secret, so each is dropped for its own reason.
        // The key of frames to node 1 on rail 0 (every frame here goes there).
        let key = FrameKey::for_destination(&c.secret().unwrap(), mcd::DEFAULT_JOB_KEY, 0, c.mac(1, 0));
        let frame_bytes = |repr: &FrameRepr, payload: &[u8]| signed_bytes(repr, payload, Some(&key), 1);
        let bad_frames: Vec<Vec<u8>> = vec![
            frame_bytes(&FrameRepr { ethertype: 0x88b6, ..good }, b"ethr"), // foreign EtherType
            frame_bytes(&FrameRepr { job_key: 0xbad, ..good }, b"job!"),    // another job
            frame_bytes(&FrameRepr { dst_port: 9, ..good }, b"port"),       // a port nobody holds
            frame_bytes(&FrameRepr { src_node: 7, ..good }, b"src!"),       // names a node that does not exist
            {
                let mut f = frame_bytes(&good, b"vers");
                f[mcd::wire::offset::VERSION] = 7;
                f
            },
            {
                let mut f = frame_bytes(&good, b"long");
                f[mcd::wire::offset::PAYLOAD_LEN + 1] = 200; // claims more than it has
                f
            },
            frame_bytes(&good, b"trnc")[..FRAME_HEADER_LEN - 3].to_vec(),
            signed_bytes(&good, b"nosg", None, 0), // not signed
            signed_bytes(
                &good,
                b"2key",
                Some(&FrameKey::for_destination(&mcd::JobSecret::generate().unwrap(), mcd::DEFAULT_JOB_KEY, 0, c.mac(1, 0))),
                2,
            ), // another secret
            {
                let mut f = frame_bytes(&good, b"flip");
                f[mcd::wire::offset::PAYLOAD] ^= 1; // changed after signing
                f
            },
            // A good frame (counter 3: number 3 of session 0, not the
            // sender's session): delivered once, then replayed twice.
            signed_bytes(&FrameRepr { seq: 100, ..good }, b"good", Some(&key), 3),
            {
                let mut f = vec![0xa5u8; 64]; // garbage under our EtherType, to node 1
                f[..6].copy_from_slice(&c.mac(1, 0).0);
                f[6..12].copy_from_slice(&c.mac(0, 0).0); // a bridge drops group source addresses
                f[12..14].copy_from_slice(&DEFAULT_ETHERTYPE.to_be_bytes());
                f
            },
        ];
        for round in 0..3u32 {
            for bad in &bad_frames {
                raw.send(bad).unwrap();
            }
            sender.send(0, Destination::Node(1), 1, round, b"good").unwrap();
        }
        let got = drain(&mut receiver, QUIET);
        let seqs: Vec<u32> = got.iter().map(|(m, _)| m.seq).collect();
        assert_eq!(seqs, vec![100, 0, 1, 2], "kernel_filter={kernel_filter}: exactly the good messages arrive, once");
        assert!(got.iter().all(|(_, p)| p == b"good"));
        let stats = receiver.stats().unwrap();
        let d = stats.dropped;
        // Frames the kernel filter lets through (right EtherType, job and port)
        // are checked again and counted in user space.
        assert_eq!(d.unknown_source, 3, "{d:?}");
        // Garbage under mcd's EtherType has a version byte of 0xa5: another
        // version's frame, whose lengths are not read (the kernel filter
        // drops it: it carries the job key nowhere).
        assert_eq!(d.bad_version, if kernel_filter { 3 } else { 6 }, "{d:?}");
        assert_eq!(d.truncated, 6, "{d:?}");
        if kernel_filter {
            assert_eq!((d.wrong_job, d.not_for_me), (0, 0), "the kernel drops these: {d:?}");
        } else {
            assert_eq!((d.wrong_job, d.not_for_me), (3, 3), "{d:?}");
        }
        assert_eq!(d.foreign_ethertype, 0, "the socket is bound to mcd's EtherType");
        assert_eq!(d.auth_mismatch, 3, "{d:?}");
        assert_eq!(d.bad_tag, 6, "{d:?}");
        assert_eq!(receiver.bad_tags_from(0), 6, "both claimed node 0");
        assert_eq!(d.replayed, 2, "{d:?}");
        assert_eq!(stats.received, 4);
    }
}

#[test]
fn a_hub_floods_every_frame_yet_each_node_gets_only_its_own() {
    let c = cluster(ClusterSpec::new("hub", 4).topology(Topology::Hub));
    let mut cfg = c.endpoint_config();
    cfg.wait = mcd::WaitPolicy::Block;
    // A hub floods the announcements of waiting endpoints too (to their own
    // MAC): off here, so that node 3 counts exactly the flooded unicast.
    cfg.announce_every = None;
    let mut eps: Vec<_> = (0..3).map(|n| open_on(&c, n, cfg.clone()).unwrap()).collect();
    // Node 3 demultiplexes in user space, so it sees (and counts) the flood.
    cfg.kernel_filter = false;
    eps.push(open_on(&c, 3, cfg).unwrap());
    for i in 0..20u32 {
        eps[0].send(0, Destination::Node(1), 1, i, b"unicast").unwrap();
        eps[2].send(0, Destination::ALL_NODES, 2, i, b"multicast").unwrap();
    }
    let at1 = drain(&mut eps[1], QUIET);
    assert_eq!(at1.iter().filter(|(m, _)| m.kind == 1).count(), 20);
    assert_eq!(at1.iter().filter(|(m, _)| m.kind == 2).count(), 20);
    let at3 = drain(&mut eps[3], QUIET);
    assert!(at3.iter().all(|(m, _)| m.kind == 2), "node 3 must not get node 1's unicast");
    assert_eq!(at3.len(), 20);
    let flooded = eps[3].stats().unwrap().dropped.not_for_me;
    assert_eq!(flooded, 20, "the hub delivered node 1's unicast to node 3 as well, where it was dropped");
    assert!(drain(&mut eps[2], QUIET).is_empty());
}

#[test]
fn injected_loss_really_drops_frames() {
    for at in [LossPoint::Node, LossPoint::Port] {
        let name = if at == LossPoint::Node { "lsn" } else { "lsp" };
        let c = cluster(ClusterSpec::new(name, 2).loss(30.0, at));
        let mut eps = open_all(&c);
        let sent = 1000;
        for i in 0..sent {
            eps[0].send(0, Destination::Node(1), 1, i, b"lossy").unwrap();
            if i % 64 == 0 {
                std::thread::sleep(Duration::from_millis(1)); // stay far from ring overflow
            }
        }
        let received = drain(&mut eps[1], QUIET).len() as u64;
        let dropped = c.loss_drops().unwrap();
        assert_eq!(eps[1].stats().unwrap().ring_dropped, 0);
        assert_eq!(received + dropped, sent as u64, "{at:?}: every frame either arrived or was dropped by the rule");
        assert!((150..=450).contains(&dropped), "{at:?}: 30% of {sent} dropped, got {dropped}");
    }
}

#[test]
fn posted_sends_complete_and_report_it() {
    let c = cluster(ClusterSpec::new("post", 2));
    let mut eps = open_all(&c);
    let tokens: Vec<_> = (0..300u32).map(|i| eps[0].post(0, Destination::Node(1), 1, i, &i.to_be_bytes()).unwrap()).collect();
    for t in &tokens {
        eps[0].wait_sent(*t).unwrap();
        assert!(eps[0].is_sent(*t).unwrap());
    }
    assert!(matches!(eps[1].is_sent(tokens[0]), Err(Error::ForeignToken)), "a token is only good on its own endpoint");
    assert!(matches!(eps[1].wait_sent(tokens[0]), Err(Error::ForeignToken)));
    let got = drain(&mut eps[1], QUIET);
    let seqs: Vec<u32> = got.iter().map(|(m, _)| m.seq).collect();
    assert_eq!(seqs, (0..300).collect::<Vec<_>>(), "more posts than send slots, all delivered in order");
}

/// Random and mutated frames thrown at a live endpoint: it never panics, and
/// the good message sent after each batch always arrives, in order.
#[test]
fn a_live_endpoint_survives_random_and_mutated_frames() {
    use proptest::test_runner::{Config, TestRunner};
    let c = cluster(ClusterSpec::new("fuzz", 2));
    let eps = std::cell::RefCell::new(open_all(&c));
    let raw = {
        let _ns = c.enter(0).unwrap();
        RawSender::open("eth0").unwrap()
    };
    let good = good_frame(&c, 0);
    let key = FrameKey::for_destination(&c.secret().unwrap(), mcd::DEFAULT_JOB_KEY, 0, good.dst_mac);
    // Either random bytes addressed to node 1 under mcd's EtherType, or a good
    // (signed) frame with a few bytes overwritten (the destination MAC kept).
    let frame = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200).prop_map(move |mut f| {
            f.resize(f.len().max(14), 0);
            f
        }),
        proptest::collection::vec((6usize..34, any::<u8>()), 1..6).prop_map(move |flips| {
            let mut f = signed_bytes(&good, b"mutt", Some(&key), 1);
            for (at, v) in flips {
                f[at] = v;
            }
            f
        }),
    ];
    let strategy = proptest::collection::vec(proptest::collection::vec(frame, 1..8), 1..4);
    let mut runner = TestRunner::new(Config { cases: 64, ..Config::default() });
    let next_seq = std::cell::Cell::new(1_000_000u32);
    runner
        .run(&strategy, |batches| {
            let mut eps = eps.borrow_mut();
            let first = next_seq.get();
            for batch in &batches {
                for f in batch {
                    let mut f = f.clone();
                    if f.len() == 14 || f[12..14] != DEFAULT_ETHERTYPE.to_be_bytes() || f[..6] != good.dst_mac.0 {
                        f[..6].copy_from_slice(&c.mac(1, 0).0);
                        f[12..14].copy_from_slice(&DEFAULT_ETHERTYPE.to_be_bytes());
                    }
                    f[6] &= 0xfe; // a group source address would be dropped by the bridge
                    raw.send(&f).unwrap();
                }
                eps[0].send(0, Destination::Node(1), 42, next_seq.get(), b"good").unwrap();
                next_seq.set(next_seq.get() + 1);
            }
            // Wait for as many good messages as were sent (not for a quiet
            // spell: on a loaded machine the bridge may hold a frame longer
            // than any short pause), then compare them: a lost or reordered
            // one fails here after the deadline, an extra one in this case or
            // the next.
            let expected: Vec<u32> = (first..next_seq.get()).collect();
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            let mut buf = [0u8; 2048];
            let mut good_seen = Vec::new();
            while good_seen.len() < expected.len() {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                let Some(m) = eps[1].recv(&mut buf, Some(left)).unwrap() else { break };
                if m.kind == 42 && m.from == 0 && m.seq >= 1_000_000 {
                    good_seen.push(m.seq);
                }
            }
            prop_assert_eq!(good_seen, expected);
            Ok(())
        })
        .unwrap();
    // Nothing more: a duplicate of the last case's good messages would be here.
    let late: Vec<u32> = drain(&mut eps.borrow_mut()[1], QUIET).iter().filter(|(m, _)| m.kind == 42).map(|(m, _)| m.seq).collect();
    assert!(late.is_empty(), "good messages delivered twice: {late:?}");
}

#[test]
fn nodes_with_different_secrets_never_deliver_to_each_other() {
    let c = cluster(ClusterSpec::new("sec", 2));
    let mut cfg = c.endpoint_config();
    cfg.wait = mcd::WaitPolicy::Block;
    let other = mcd::Auth::Key(mcd::JobSecret::generate().unwrap());
    let mut a = open_on(&c, 0, cfg.clone()).unwrap();
    let mut b = open_on(&c, 1, cfg.clone().with_auth(other)).unwrap();
    assert!(a.authenticated() && b.authenticated());
    for i in 0..10u32 {
        a.send(0, Destination::Node(1), 1, i, b"from a").unwrap();
        a.send(0, Destination::ALL_NODES, 2, i, b"a to all").unwrap();
        b.send(0, Destination::Node(0), 1, i, b"from b").unwrap();
        b.send(0, Destination::ALL_NODES, 2, i, b"b to all").unwrap();
    }
    assert!(drain(&mut a, QUIET).is_empty(), "a delivered a frame signed with another secret");
    assert!(drain(&mut b, QUIET).is_empty(), "b delivered a frame signed with another secret");
    for (ep, peer) in [(&mut a, 1), (&mut b, 0)] {
        let d = ep.stats().unwrap().dropped;
        assert_eq!(d.bad_tag, 20, "{d:?}");
        assert_eq!(ep.bad_tags_from(peer), 20, "counted against the node the frames claim");
        assert_eq!(d.total(), 20, "nothing else: {d:?}");
    }
    drop((a, b));

    // One side with authentication off: each drops the other's frames as a mismatch.
    let mut a = open_on(&c, 0, cfg.clone()).unwrap();
    let mut b = open_on(&c, 1, cfg.clone().with_auth(mcd::Auth::Off)).unwrap();
    a.send(0, Destination::Node(1), 1, 0, b"signed").unwrap();
    b.send(0, Destination::Node(0), 1, 0, b"plain").unwrap();
    assert!(drain(&mut a, QUIET).is_empty() && drain(&mut b, QUIET).is_empty());
    assert_eq!(a.stats().unwrap().dropped.auth_mismatch, 1);
    assert_eq!(b.stats().unwrap().dropped.auth_mismatch, 1);
    drop((a, b));

    // Both off, explicitly: unauthenticated frames flow (and carry no trailer).
    let off = cfg.with_auth(mcd::Auth::Off);
    let mut a = open_on(&c, 0, off.clone()).unwrap();
    let mut b = open_on(&c, 1, off).unwrap();
    assert!(!a.authenticated());
    assert_eq!(a.max_payload(0).unwrap(), 1500 - 16, "no trailer to make room for");
    a.send(0, Destination::Node(1), 1, 5, b"plain").unwrap();
    let got = drain(&mut b, QUIET);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1, b"plain");
}

#[test]
fn an_authenticated_endpoint_refuses_to_open_without_a_secret_and_says_how_to_get_one() {
    let c = cluster(ClusterSpec::new("nos", 2));
    let cfg = EndpointConfig::new(c.interfaces(), 0, c.node_list());
    let err = open_on(&c, 0, cfg).unwrap_err();
    assert!(matches!(err, Error::NoSecret), "{err}");
    // What it tells the user: where a secret comes from, and what going without one means.
    let text = err.to_string();
    assert!(text.contains("MCD_KEY_FILE") && text.contains("MCD_AUTH=off") && text.contains("forge"), "{text}");
    // The same from the environment, in a process of its own.
    let out = c.command(0, peer_binary()).arg("open").env_remove(mcd::auth::KEY_FILE_VAR).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_ne!(out.status.code(), Some(0));
    assert!(stdout.contains("no job secret") && stdout.contains("MCD_KEY_FILE"), "{stdout}");
}

#[test]
fn a_waiting_endpoint_takes_its_stolen_switch_port_back() {
    let c = cluster(ClusterSpec::new("stl", 3));
    let mut cfg = c.endpoint_config();
    cfg.wait = mcd::WaitPolicy::Block;
    cfg.announce_every = None;
    let mut a = open_on(&c, 0, cfg.clone()).unwrap();
    let mut b = open_on(&c, 1, cfg).unwrap();
    let mut buf = [0u8; 64];
    a.send(0, Destination::Node(1), 1, 0, b"before").unwrap();
    assert_eq!(b.recv(&mut buf, Some(Duration::from_secs(2))).unwrap().map(|m| m.seq), Some(0));
    // Node 2 sends one frame with node 1's source MAC: the switch now sends
    // node 1's traffic to node 2's port.
    let thief = {
        let _ns = c.enter(2).unwrap();
        RawSender::open("eth0").unwrap()
    };
    let mut steal = vec![0u8; 60];
    steal[..6].copy_from_slice(&[0xff; 6]);
    steal[6..12].copy_from_slice(&c.mac(1, 0).0);
    steal[12..14].copy_from_slice(&0x88b6u16.to_be_bytes());
    thief.send(&steal).unwrap();
    a.send(0, Destination::Node(1), 1, 1, b"stolen").unwrap();
    assert_eq!(b.recv(&mut buf, Some(Duration::from_millis(300))).unwrap(), None, "the port was not stolen");
    assert_eq!(b.stats().unwrap().announced, 0);
    // Waiting with announcements on, node 1 re-teaches the switch.
    b.set_announce_every(Some(Duration::from_millis(50)));
    assert_eq!(b.recv(&mut buf, Some(Duration::from_millis(300))).unwrap(), None);
    assert!(b.stats().unwrap().announced >= 1, "a silent waiting endpoint announces");
    a.send(0, Destination::Node(1), 1, 2, b"back").unwrap();
    assert_eq!(b.recv(&mut buf, Some(Duration::from_secs(2))).unwrap().map(|m| m.seq), Some(2), "the port came back");
    // Nobody delivers announcements: node 0 heard nothing, node 1 dropped nothing of its own.
    assert!(drain(&mut a, QUIET).is_empty());
}

/// An overflowing receive ring is seen by the frames that come after it
/// (the kernel marks them `TP_STATUS_LOSING`): `ring_drops` then counts the
/// drops (one `PACKET_STATISTICS` read), `recv_noting_drops` returns at
/// once until it has, and frames marked before that read do not tell of
/// new drops (needs root).
#[test]
fn root_ring_drops_are_told_by_the_next_frames_and_counted_once() {
    let c = cluster(ClusterSpec::new("rdrop", 2));
    let mut eps = open_all(&c);
    drop(eps.remove(1)); // node 1's default endpoint: its port is the small one's
    let mut config = c.endpoint_config();
    config.wait = mcd::WaitPolicy::Block;
    config.rx_slots = 64;
    let mut small = open_on(&c, 1, config).unwrap();
    let mut buf = vec![0u8; 9000];
    let mut sent = 0u32;
    let mut send = |eps: &mut Vec<mcd::Endpoint>, n: u32| {
        for _ in 0..n {
            eps[0].send(0, Destination::Node(1), 1, sent, b"overflow").unwrap();
            sent += 1;
        }
        sent
    };
    // 100 frames at a ring of 64 slots that nobody reads: it overflows.
    send(&mut eps, 100);
    let mut received = drain(&mut small, QUIET).len() as u64;
    assert!(received < 100, "the ring of 64 slots held {received} of 100 frames");
    // The next frame is marked: after delivering it, a receiver noting
    // drops returns at once, however long it may wait.
    send(&mut eps, 1);
    assert!(small.recv_noting_drops(&mut buf, Some(Duration::from_secs(5))).unwrap().is_some());
    received += 1;
    assert!(small.ring_dropped_since(), "a frame after the overflow tells of it");
    let start = std::time::Instant::now();
    assert_eq!(small.recv_noting_drops(&mut buf, Some(Duration::from_secs(5))).unwrap(), None);
    assert!(start.elapsed() < Duration::from_secs(1), "returned at once: {:?}", start.elapsed());
    let drops = small.ring_drops().unwrap();
    assert_eq!(received + drops, 101, "every frame read or counted dropped ({received} read, {drops} dropped)");
    assert!(!small.ring_dropped_since());
    // Counted: it waits its whole time again, and the count stays.
    let start = std::time::Instant::now();
    assert_eq!(small.recv_noting_drops(&mut buf, Some(QUIET)).unwrap(), None);
    assert!(start.elapsed() >= QUIET);
    assert_eq!(small.ring_drops().unwrap(), drops);
    // Frames waiting in the ring when the count was read carry the old
    // mark: they tell of nothing new.
    send(&mut eps, 100); // overflows again
    let first = small.recv(&mut buf, Some(Duration::from_secs(5))).unwrap();
    assert!(first.is_some());
    received += 1;
    let more = drain(&mut small, QUIET).len() as u64;
    received += more;
    let sent = send(&mut eps, 3); // marked: the second overflow is not counted yet
    assert!(small.recv(&mut buf, Some(Duration::from_secs(5))).unwrap().is_some());
    received += 1;
    assert!(small.ring_dropped_since());
    let drops = small.ring_drops().unwrap();
    received += drain(&mut small, QUIET).len() as u64; // the other two, marked before the read
    assert!(!small.ring_dropped_since(), "frames marked before the count was read tell of no new drop");
    assert_eq!(received + drops, u64::from(sent), "every frame read or counted dropped");
    assert_eq!(small.stats().unwrap().ring_dropped, drops, "and nothing more was dropped");
}

/// The C ABI's and the MPI interposer's shared endpoint: one ring read by
/// whichever thread comes first and demultiplexed to several groups. A
/// frame dropped for want of ring space may have been any group's, so every
/// group's transport tells of the drop (`Transport::ring_drops`, which brings
/// its barrier's retry forward), each once: a group that has not been told
/// yet returns from `recv` at once, one told waits its whole time again, and
/// a group made after the drop is not told of it (needs root).
#[test]
fn root_shared_endpoint_tells_every_group_of_ring_drops_once() {
    use barriers::{SharedEndpoint, Transport};
    let c = cluster(ClusterSpec::new("shdrop", 2));
    let mut eps = open_all(&c);
    drop(eps.remove(1)); // node 1's default endpoint: its port is the small one's
    let mut config = c.endpoint_config();
    config.wait = mcd::WaitPolicy::Block;
    config.rx_slots = 64;
    let shared = SharedEndpoint::new(open_on(&c, 1, config).unwrap());
    let mut a = shared.group(&[0, 1]).unwrap();
    let mut b = shared.group(&[0, 1]).unwrap();
    assert_ne!(a.key(), b.key());
    let mut send = |n: u32| {
        for seq in 0..n {
            eps[0].send(0, Destination::Node(1), 1, seq, b"overflow").unwrap();
        }
    };
    // Frames that are no group's: read through group a's transport and
    // counted as ignored by the hub, which reads them all the same.
    let read = || shared.route_stats().ignored;
    // 100 frames at a ring of 64 slots that nobody reads: it overflows.
    send(100);
    loop {
        let before = read();
        a.ring_drops().unwrap(); // told: its `recv` waits its whole time
        assert_eq!(a.recv(QUIET).unwrap(), None);
        if read() == before {
            break;
        }
    }
    let first = read();
    assert!(first < 100, "the ring of 64 slots held {first} of 100 frames");
    // The next frame tells of the drops (or they were told already).
    send(1);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while read() == first {
        assert!(std::time::Instant::now() < deadline, "the frame after the overflow never came");
        a.ring_drops().unwrap();
        assert_eq!(a.recv(QUIET).unwrap(), None);
    }
    let drops = a.ring_drops().unwrap();
    assert_eq!(read() + drops, 101, "every frame read or counted dropped ({} read, {drops} dropped)", read());
    // Group b read nothing itself: it is told all the same, at once.
    let start = std::time::Instant::now();
    assert_eq!(b.recv(Duration::from_secs(5)).unwrap(), None);
    assert!(start.elapsed() < Duration::from_secs(1), "b's recv returned at once: {:?}", start.elapsed());
    assert_eq!(b.ring_drops().unwrap(), drops, "every group is told of every drop");
    // Told once: b waits its whole time again, and the counts stay.
    let start = std::time::Instant::now();
    assert_eq!(b.recv(QUIET).unwrap(), None);
    assert!(start.elapsed() >= QUIET, "b was told twice: {:?}", start.elapsed());
    assert_eq!((a.ring_drops().unwrap(), b.ring_drops().unwrap()), (drops, drops));
    // A group made after the drops was not there to lose a frame.
    let mut later = shared.group(&[0, 1]).unwrap();
    assert_eq!(later.ring_drops().unwrap(), 0);
    assert_eq!(shared.with_endpoint(|e| e.stats().unwrap().ring_dropped), drops, "and nothing more was dropped");
}
