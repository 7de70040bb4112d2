//! What authentication costs.
//!
//! - **The tag, in isolation**: one frame signed and verified (the tag over
//!   every byte from the kind through the counter, under the key of the
//!   frame's job, rail and destination, then the check of a received copy), for
//!   0 to 64-byte payloads, with mcd's keyed SipHash-2-4 (`mcd::auth`), and
//!   in its place keyed BLAKE3 (the `blake3` crate) and Poly1305-AES (the
//!   `poly1305` and `aes` crates), each truncated to 64 bits, in one
//!   process on one core. Each figure is the fastest of 400 loops of 1,000
//!   frames (the median loop beside it).
//! - **A/B on the wire**: the 2-node barrier (shuffle, as in `hotpath`) and
//!   the 2-rank 8-byte allreduce (tree2), authenticated and not, on a
//!   virtual cluster, one thread per node pinned to a core each,
//!   busy-polling; within each round both settings run, in alternating
//!   blocks, so they see the same machine, and which setting's endpoint
//!   opens first alternates from round to round (the kernel hands a frame
//!   to the sockets of an interface from the one opened last: the order
//!   costs the one opened first about 2% of the allreduce).
//! - **`--lines`**: the allreduce in any set of variants (authentication,
//!   number of doubles: the frame's length), interleaved the same way.

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use barriers::{Algorithm, Barrier, BarrierConfig, McdTransport, Op};
use hdrhistogram::Histogram;
use mcd::auth::FrameKey;
use mcd::wire::{Frame, FrameRepr, MacAddr, DEFAULT_ETHERTYPE, TRAILER_LEN};
use mcd::{Auth, Endpoint, JobSecret, WaitPolicy};
use mcd_vcluster::{Cluster, ClusterSpec};
use serde::Serialize;

/// Payload sizes of the isolated measurement (56: 8 bytes fewer hashed
/// than at 64, one SipHash compression fewer).
const PAYLOADS: [usize; 7] = [0, 8, 14, 22, 32, 56, 64];
/// The MACs measured besides SipHash-2-4, by their rows' names.
const BLAKE: &str = "BLAKE3 (keyed)";
const POLY: &str = "Poly1305-AES (`poly1305`, `aes`)";
/// Frames per timed loop, and loops per figure: short loops (about 0.1 ms),
/// many of them, so that most run between two preemptions on a busy
/// machine; the figure is the fastest loop's (the cost undisturbed), the
/// median loop's beside it.
const FRAMES: usize = 1_000;
const LOOPS: usize = 400;

/// One isolated figure.
#[derive(Clone, Debug, Serialize)]
struct TagCost {
    mac: &'static str,
    payload: usize,
    /// ns to sign one frame (the fastest loop).
    sign_ns: f64,
    /// ns to verify one frame (the fastest loop).
    verify_ns: f64,
    /// Their sum: the goal's figure.
    sign_plus_verify_ns: f64,
    /// The same sum from the median loops (preemptions included).
    median_sign_plus_verify_ns: f64,
    /// ns per frame of one loop that signs one frame and verifies another
    /// each turn (the fastest loop; SipHash-2-4 only, 0 for the others).
    pair_ns: f64,
    /// The same, the median loop.
    median_pair_ns: f64,
}

/// What authentication does per received message besides the tag, one
/// figure (the replay windows, the live session's confirmation).
#[derive(Clone, Debug, Serialize)]
struct StepCost {
    step: &'static str,
    /// ns per message (the fastest loop).
    ns: f64,
    /// ns per message in the median loop.
    median_ns: f64,
}

/// One row of the A/B.
#[derive(Clone, Debug, Serialize)]
struct AbRow {
    what: &'static str,
    auth: bool,
    /// The variant's label (`on`, `off`, or with its number of doubles).
    setting: String,
    /// Bytes of its frames on the wire.
    frame_len: usize,
    samples: u64,
    p50_us: f64,
    p90_us: f64,
    p99_us: f64,
    mean_us: f64,
    /// Node 0's p50 in each round, µs (the rounds pair the two settings).
    round_p50_us: Vec<f64>,
}

/// Everything recorded.
#[derive(Clone, Debug, Serialize)]
struct AuthResults {
    tag: Vec<TagCost>,
    steps: Vec<StepCost>,
    ab: Vec<AbRow>,
    ab_rounds: usize,
    ab_iterations: usize,
}

/// Where the hand-written part of `auth.md` begins (issue 27's checklist):
/// a run rewrites what comes before and keeps it.
const KEPT_FROM: &str = "\n## Issue 27, item by item";

fn sample_frame(payload: usize) -> Vec<u8> {
    let repr = FrameRepr {
        dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
        src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
        ethertype: DEFAULT_ETHERTYPE,
        kind: 0xb0,
        dst_port: 0,
        src_port: 0,
        src_node: 1,
        job_key: 0x4d43_4400,
        seq: 7,
        payload_len: payload,
        authenticated: true,
    };
    let mut buf = vec![0u8; repr.frame_len()];
    let mut frame = Frame::new_unchecked(&mut buf[..]);
    repr.emit(&mut frame);
    for (i, b) in frame.payload_mut().iter_mut().enumerate() {
        *b = i as u8;
    }
    buf
}

fn median(mut v: Vec<f64>) -> f64 {
    barriers::summary::median(&mut v)
}

/// ns per call of `f` in the fastest and the median of [`LOOPS`] loops of [`FRAMES`] calls.
fn per_frame(mut f: impl FnMut(u64)) -> (f64, f64) {
    for i in 0..10 * FRAMES as u64 {
        f(i);
    }
    let mut loops = Vec::with_capacity(LOOPS);
    time_loops(&mut f, 0, LOOPS, &mut loops);
    fastest_and_median(loops)
}

/// The fastest and the median of loop times.
fn fastest_and_median(loops: Vec<f64>) -> (f64, f64) {
    (loops.iter().copied().fold(f64::INFINITY, f64::min), median(loops))
}

/// Times `loops` loops of [`FRAMES`] calls of `f` (its argument numbers
/// the calls from `first` on), ns per call of each loop into `into`.
fn time_loops(f: &mut impl FnMut(u64), first: u64, loops: usize, into: &mut Vec<f64>) {
    for l in 0..loops as u64 {
        let start = Instant::now();
        for i in 0..FRAMES as u64 {
            f(first + l * FRAMES as u64 + i);
        }
        into.push(start.elapsed().as_nanos() as f64 / FRAMES as f64);
    }
}

/// Blocks of the interleaved measurement ([`interleaved`]): each block
/// times [`LOOPS`]` / SPREAD_BLOCKS` loops of each function in turn, and
/// the blocks are [`SPREAD_PAUSE`] apart.
const SPREAD_BLOCKS: usize = 40;
const SPREAD_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// As [`per_frame`] for three functions at once, their loops interleaved
/// in blocks spread over about a second ([`SPREAD_BLOCKS`] blocks
/// [`SPREAD_PAUSE`] apart): a stretch in which another process shares the
/// core (on this shared machine, or the hypervisor's) slows all three
/// alike, and the fastest loop of each comes from whichever stretches were
/// quiet, not from the first few milliseconds alone.
fn interleaved(mut a: impl FnMut(u64), mut b: impl FnMut(u64), mut c: impl FnMut(u64)) -> [(f64, f64); 3] {
    for i in 0..10 * FRAMES as u64 {
        a(i);
        b(i);
        c(i);
    }
    let per_block = LOOPS / SPREAD_BLOCKS;
    let mut times: [Vec<f64>; 3] = std::array::from_fn(|_| Vec::with_capacity(LOOPS));
    for block in 0..SPREAD_BLOCKS {
        let first = (block * per_block * FRAMES) as u64;
        time_loops(&mut a, first, per_block, &mut times[0]);
        time_loops(&mut b, first, per_block, &mut times[1]);
        time_loops(&mut c, first, per_block, &mut times[2]);
        std::thread::sleep(SPREAD_PAUSE);
    }
    times.map(fastest_and_median)
}

fn cost(mac: &'static str, payload: usize, sign: (f64, f64), verify: (f64, f64)) -> TagCost {
    TagCost {
        mac,
        payload,
        sign_ns: sign.0,
        verify_ns: verify.0,
        sign_plus_verify_ns: sign.0 + verify.0,
        median_sign_plus_verify_ns: sign.1 + verify.1,
        pair_ns: 0.0,
        median_pair_ns: 0.0,
    }
}

fn tag_costs() -> Vec<TagCost> {
    let secret = JobSecret::from_bytes(*b"0123456789abcdef");
    // The key of the sample frames' destination on rail 0.
    let sip = FrameKey::for_destination(&secret, 0x4d43_4400, 0, MacAddr([2, 0, 0, 0, 0, 2]));
    let mut blake_key = [0u8; 32];
    blake_key[..16].copy_from_slice(secret.as_bytes());
    // Poly1305-AES's keys: r (16 bytes, clamped by the crate) and AES's.
    use aes::cipher::KeyInit as _;
    use poly1305::universal_hash::KeyInit as _;
    let mut poly_zero_s = [0u8; 32];
    poly_zero_s[..16].copy_from_slice(b"fedcba9876543210");
    let aes = aes::Aes128::new(&(*secret.as_bytes()).into());
    let mut out = Vec::new();
    for payload in PAYLOADS {
        // SipHash-2-4, through mcd's own sign and verify.
        // Sign, verify, and both in one loop (sign one frame, verify
        // another: what a node that sends and receives does per frame),
        // interleaved.
        let mut buf = sample_frame(payload);
        let counter = |i: u64| mcd::auth::FrameCounter { session: 0x5e55_1011_5e55_1011, number: i as u32 };
        sip.sign(&mut buf, counter(0));
        let signed = buf.clone();
        let mut pair_buf = buf.clone();
        let verify_one = || {
            let frame = Frame::new_checked(black_box(&signed[..])).expect("a whole frame");
            black_box(sip.verify(&frame)).expect("verifies");
        };
        let [sign, verify, pair] = interleaved(
            |i| sip.sign(black_box(&mut buf), counter(i)),
            |_| verify_one(),
            |i| {
                sip.sign(black_box(&mut pair_buf), counter(i));
                verify_one();
            },
        );
        out.push(TagCost { pair_ns: pair.0, median_pair_ns: pair.1, ..cost("SipHash-2-4", payload, sign, verify) });
        // The others over the same bytes (from the kind through the
        // counter), 64 bits of each, in the same places.
        // Keyed BLAKE3.
        let blake = |b: &[u8], _: mcd::auth::FrameCounter| -> u64 {
            let h = blake3::keyed_hash(&blake_key, b);
            u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"))
        };
        out.push(other_mac(BLAKE, payload, &mut buf, blake));
        // Poly1305-AES (Bernstein's): Poly1305 under the one-time key
        // (r, AES_k(nonce)), the nonce the frame's counter (session and
        // number: unique per sender), the tag's first 64 bits. r's state
        // is made once (per destination) and cloned per frame; AES_k(nonce)
        // is added to the polynomial's value after (Poly1305's last step:
        // the low 64 bits of the sum are those of the low halves' sum).
        let poly_keyed = poly1305::Poly1305::new(&poly_zero_s.into());
        let poly_clone = |b: &[u8], c: mcd::auth::FrameCounter| -> u64 {
            let h = poly_keyed.clone().compute_unpadded(b);
            let s = aes_nonce(&aes, c);
            u64::from_le_bytes(h[..8].try_into().expect("8 bytes")).wrapping_add(u64::from_le_bytes(s[..8].try_into().expect("8 bytes")))
        };
        out.push(other_mac(POLY, payload, &mut buf, poly_clone));
    }
    out
}

/// AES-128 of the 16-byte nonce made of a frame's counter (session, number, 4 zero bytes).
fn aes_nonce(aes: &aes::Aes128, c: mcd::auth::FrameCounter) -> [u8; 16] {
    use aes::cipher::BlockEncrypt as _;
    let mut block = [0u8; 16];
    block[..8].copy_from_slice(&c.session.to_le_bytes());
    block[8..12].copy_from_slice(&c.number.to_le_bytes());
    let mut block = block.into();
    aes.encrypt_block(&mut block);
    block.into()
}

/// Sign and verify with `mac` (of the signed bytes and the counter) in
/// place of the frame's SipHash-2-4 tag, timed as [`tag_costs`] times it.
fn other_mac(name: &'static str, payload: usize, buf: &mut [u8], mac: impl Fn(&[u8], mcd::auth::FrameCounter) -> u64) -> TagCost {
    let counter = |i: u64| mcd::auth::FrameCounter { session: 0x5e55_1011_5e55_1011, number: i as u32 };
    let end = buf.len() - TRAILER_LEN;
    let tag_at = end + mcd::wire::offset::TRAILER_TAG;
    let sign = per_frame(|i| {
        let b = black_box(&mut *buf);
        mcd::wire::TrailerRepr::emit_counter(counter(i), &mut b[end..]);
        let tag = mac(&b[mcd::wire::offset::KIND..tag_at], counter(i));
        b[tag_at..].copy_from_slice(&tag.to_be_bytes());
    });
    let signed = buf.to_vec();
    let verify = per_frame(|_| {
        let frame = Frame::new_checked(black_box(&signed[..])).expect("a whole frame");
        let bytes = frame.signed_bytes().expect("authenticated");
        let trailer = mcd::wire::TrailerRepr::parse(&frame.trailer().expect("a trailer"));
        assert_eq!(black_box(mac(bytes, trailer.counter)), trailer.tag);
    });
    cost(name, payload, sign, verify)
}

/// The receiver's steps besides the tag, per message, in isolation, as
/// the endpoint and the engine take them for one sender's frames arriving
/// in order in its live session: the replay windows' check and record
/// (`Demux::accept`, `Demux::record`), and the engine's confirmation of
/// the live session (`Transport::confirm_live`, `SenderWindows::pin_last`).
fn step_costs() -> Vec<StepCost> {
    use mcd::auth::{FrameCounter, SenderWindows};
    let session = 0x5e55_1011_5e55_1011;
    let mut windows = SenderWindows::default();
    let mut number = 0u32;
    let mut next = || {
        number += 1;
        FrameCounter { session, number }
    };
    // The live session: heard, and named live by the engine (after the join).
    let first = next();
    windows.record(first);
    windows.pin_last();
    let window = per_frame(|_| {
        let c = next();
        assert!(black_box(&windows).check(black_box(c)), "a new frame");
        black_box(&mut windows).record(c);
    });
    let pin = per_frame(|_| black_box(&mut windows).pin_last());
    vec![
        StepCost { step: "replay windows: check, then record (`SenderWindows::check`, `record`)", ns: window.0, median_ns: window.1 },
        StepCost { step: "live session confirmed (`Endpoint::confirm_live`: `SenderWindows::pin_last`)", ns: pin.0, median_ns: pin.1 },
    ]
}

/// What the A/B times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op2 {
    Barrier,
    Allreduce8,
}

impl Op2 {
    fn label(self) -> &'static str {
        match self {
            Op2::Barrier => "2-node barrier (shuffle)",
            Op2::Allreduce8 => "2-rank allreduce, 8 B (tree2)",
        }
    }
}

/// Calls of one setting in a row before the other setting's turn: a few
/// ms, so that the two settings see the same machine (the A/B's pairs).
const BLOCK: usize = 500;

/// The job key of the first endpoint without authentication in the A/B
/// (the others' follow it): every variant's endpoints are open at once,
/// on ports 0, 1, ..., and the kernel filters keep each job's frames to
/// its own.
const OFF_JOB_KEY: u32 = 0x4d43_4401;

/// One setting of the A/B: authentication on or off, and for the
/// allreduce how many doubles it sums (1 in the goal's A/B; more in
/// `--lines`, where the frame's length is what changes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Variant {
    auth: bool,
    doubles: usize,
}

impl Variant {
    const ON: Variant = Variant { auth: true, doubles: 1 };
    const OFF: Variant = Variant { auth: false, doubles: 1 };

    /// The frame's length on the wire for `op` (headers, barrier payload,
    /// data, and the trailer if signed).
    fn frame_len(self, op: Op2) -> usize {
        let data = match op {
            Op2::Barrier => 0,
            Op2::Allreduce8 => 8 * self.doubles,
        };
        mcd::wire::offset::PAYLOAD + BARRIER_PAYLOAD + data + if self.auth { TRAILER_LEN } else { 0 }
    }

    fn label(self, op: Op2) -> String {
        let on = if self.auth { "on" } else { "off" };
        match op {
            Op2::Barrier => on.to_string(),
            Op2::Allreduce8 if self.doubles == 1 => on.to_string(),
            Op2::Allreduce8 => format!("{on}, {} doubles", self.doubles),
        }
    }
}

/// Node `me`'s barriers for `op`, one per variant, open at once (the
/// first authenticated variant on port 0 with the cluster's job key, each
/// other on its own port with its own job key).
fn open_variants(cluster: &Cluster, op: Op2, variants: &[Variant], secret: &JobSecret) -> Result<Vec<Barrier<McdTransport>>> {
    let algorithm = match op {
        Op2::Barrier => Algorithm::ShuffleExchange,
        Op2::Allreduce8 => Algorithm::tree(2, barriers::Release::Multicast).expect("k = 2"),
    };
    variants
        .iter()
        .enumerate()
        .map(|(v, variant)| {
            let auth = if variant.auth { Auth::Key(secret.clone()) } else { Auth::Off };
            let mut config = cluster.endpoint_config().with_auth(auth);
            config.wait = WaitPolicy::BusyPoll;
            if v > 0 {
                let port = v as u8;
                config.port = port;
                config.job_key = OFF_JOB_KEY + v as u32 - 1;
                config.nodes = mcd::NodeList::new(
                    config
                        .nodes
                        .iter()
                        .cloned()
                        .map(|mut n| {
                            n.port = port;
                            n
                        })
                        .collect(),
                )?;
            }
            Ok(Barrier::new(McdTransport::new(Endpoint::open(config)?), BarrierConfig::new(algorithm))?)
        })
        .collect()
}

/// Node `me`'s part of one round of `op`: every variant's barrier open at
/// once, [`BLOCK`] calls of each in turn (the order rotates from block to
/// block, starting with `first`), `warmup` untimed calls of each then
/// `iterations` timed ones; node 0's times go into `hists[variant]`.
#[allow(clippy::too_many_arguments)]
fn time_variants(
    cluster: &Cluster,
    me: usize,
    op: Op2,
    variants: &[Variant],
    secret: &JobSecret,
    first: usize,
    (iterations, warmup): (usize, usize),
    hists: &mut [Histogram<u64>],
) -> Result<()> {
    let mut barriers = open_variants(cluster, op, variants, secret)?;
    let n = variants.len();
    let mut calls = vec![0usize; n];
    let mut data = vec![0f64; variants.iter().map(|v| v.doubles).max().unwrap_or(1)];
    let total = warmup + iterations;
    let mut block = 0;
    while calls.iter().any(|&c| c < total) {
        for turn in 0..n {
            let a = (first + block + turn) % n;
            let b = &mut barriers[a];
            let data = &mut data[..variants[a].doubles];
            let until = (calls[a] + BLOCK).min(total);
            while calls[a] < until {
                let i = calls[a];
                let start = Instant::now();
                match op {
                    Op2::Barrier => b.wait()?,
                    Op2::Allreduce8 => {
                        data.iter_mut().enumerate().for_each(|(k, x)| *x = me as f64 + (i + k) as f64);
                        b.allreduce(data, Op::Sum)?;
                        for (k, x) in data.iter().enumerate() {
                            anyhow::ensure!(*x == 1.0 + 2.0 * (i + k) as f64, "allreduce gave {x} in call {i}");
                        }
                    }
                }
                if me == 0 && i >= warmup {
                    hists[a].saturating_record(start.elapsed().as_nanos() as u64);
                }
                calls[a] += 1;
            }
        }
        block += 1;
    }
    for b in &mut barriers {
        b.finish()?;
    }
    Ok(())
}

/// The A/B of `ops`, each with every variant of `variants`, interleaved,
/// on a 2-node cluster named `cluster`: a row per (op, variant), in that
/// order. In round `r` the endpoints open in the order of `variants`
/// rotated by `r` (position `k` holds variant `(k + r) % n`), so that over
/// each `n` rounds every variant opened once at every position.
fn ab(cluster: &str, ops: &[Op2], variants: &[Variant], iterations: usize, rounds: usize) -> Result<Vec<AbRow>> {
    anyhow::ensure!(mcd::host::online_cpus() >= 2, "needs two cores: each node busy-polls on its own");
    let cluster = Cluster::up_guarded(ClusterSpec::new(&mcd_vcluster::prefixed_name(cluster), 2))?;
    let secret = cluster.secret()?;
    let n = variants.len();
    anyhow::ensure!(rounds.is_multiple_of(n), "--rounds must be a multiple of {n}: every variant opens at every position once per {n} rounds");
    let new_hist = || Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
    // [op][variant]
    let mut hists: Vec<Vec<Histogram<u64>>> = ops.iter().map(|_| (0..n).map(|_| new_hist()).collect()).collect();
    // [op][variant][round]: node 0's p50 of each round.
    let mut round_p50: Vec<Vec<Vec<f64>>> = ops.iter().map(|_| vec![Vec::new(); n]).collect();
    let warmup = 2_000;
    for round in 0..rounds {
        eprintln!("  round {}/{rounds}", round + 1);
        for (o, &op) in ops.iter().enumerate() {
            let per_node: Vec<Result<Vec<Histogram<u64>>>> = std::thread::scope(|scope| {
                let threads: Vec<_> = (0..2)
                    .map(|me| {
                        let (cluster, secret) = (&cluster, &secret);
                        scope.spawn(move || -> Result<Vec<Histogram<u64>>> {
                            let _ = mcd::host::pin_current_thread(me);
                            let _ns = cluster.enter(me)?;
                            // Position k holds variant (k + round) % n.
                            let placed: Vec<Variant> = (0..n).map(|k| variants[(k + round) % n]).collect();
                            let mut h: Vec<_> = (0..n).map(|_| new_hist()).collect();
                            time_variants(cluster, me, op, &placed, secret, 0, (iterations, warmup), &mut h)?;
                            h.rotate_right(round % n);
                            Ok(h)
                        })
                    })
                    .collect();
                threads.into_iter().map(|t| t.join().map_err(|_| anyhow!("a node's thread panicked"))?).collect()
            });
            for (node, r) in per_node.into_iter().enumerate() {
                let h = r.with_context(|| format!("{} node {node} round {}", op.label(), round + 1))?;
                if node == 0 {
                    for (a, h) in h.iter().enumerate() {
                        round_p50[o][a].push(h.value_at_quantile(0.5) as f64 / 1e3);
                        hists[o][a].add(h).expect("same bounds");
                    }
                }
            }
        }
    }
    let mut rows = Vec::new();
    for (o, &op) in ops.iter().enumerate() {
        for (a, h) in hists[o].iter().enumerate() {
            rows.push(AbRow {
                what: op.label(),
                auth: variants[a].auth,
                setting: variants[a].label(op),
                frame_len: variants[a].frame_len(op),
                samples: h.len(),
                p50_us: h.value_at_quantile(0.5) as f64 / 1e3,
                p90_us: h.value_at_quantile(0.9) as f64 / 1e3,
                p99_us: h.value_at_quantile(0.99) as f64 / 1e3,
                mean_us: h.mean() / 1e3,
                round_p50_us: round_p50[o][a].clone(),
            });
        }
    }
    Ok(rows)
}

/// `row`'s p50 over `base`'s: in each cycle of `n` rounds (in which every
/// variant was opened once at every position, see [`ab`]), the geometric
/// mean of the rounds' ratios, where the positions' effects cancel; the
/// median over cycles, and the range of the cycles' ratios.
fn paired_ratio(row: &AbRow, base: &AbRow, n: usize) -> (f64, f64, f64) {
    let ratios: Vec<f64> = row.round_p50_us.iter().zip(&base.round_p50_us).map(|(a, b)| a / b).collect();
    let cycles: Vec<f64> = ratios.chunks_exact(n).map(|c| c.iter().product::<f64>().powf(1.0 / n as f64)).collect();
    let (lo, hi) = cycles.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &r| (lo.min(r), hi.max(r)));
    (median(cycles), lo, hi)
}

/// The tag in isolation, on a thread of its own pinned to core 0 (the
/// main thread keeps every core for the A/B's threads).
fn measure_tags() -> Result<(Vec<TagCost>, Vec<StepCost>)> {
    eprintln!("auth: the tag in isolation");
    std::thread::spawn(|| {
        let _ = mcd::host::pin_current_thread(0);
        (tag_costs(), step_costs())
    })
    .join()
    .map_err(|_| anyhow!("the tag measurement panicked"))
}

/// Payload bytes of a barrier message (`barriers::mcd_transport::wire::PAYLOAD_LEN`).
const BARRIER_PAYLOAD: usize = 14;

/// What authentication adds to one message of `payload` bytes, ns (the
/// fastest loops): sign, verify, and the receiver's other steps.
fn per_message_ns(tag: &[TagCost], steps: &[StepCost], payload: usize) -> Option<f64> {
    let t = tag.iter().find(|t| t.mac == "SipHash-2-4" && t.payload == payload)?;
    Some(t.sign_plus_verify_ns + steps.iter().map(|s| s.ns).sum::<f64>())
}

/// The section of `auth.md` on the tag in isolation (the table and the
/// goal), and on the receiver's other steps per message.
fn tag_section(md: &mut String, (tag, steps): &(Vec<TagCost>, Vec<StepCost>)) -> Result<()> {
    writeln!(md, "## The tag, in isolation\n")?;
    writeln!(
        md,
        "One frame signed (the tag over the MCD header from its kind, the payload and the 12-byte counter, \
         under the key of the frame's job, rail and destination: 23 bytes and the payload), then a received copy \
         checked (`Frame::new_checked`, the tag recomputed and compared), in one thread pinned to one core; \
         {LOOPS} loops of {FRAMES} frames each, ns per frame in the fastest loop (the cost undisturbed: on \
         this shared 2-core machine most loops of about 0.1 ms run between two preemptions, and the \
         median loop, in the last column, includes what others took). SipHash-2-4 is `mcd::auth::FrameKey` \
         itself (mcd's own one-pass SipHash-2-4 over the signed bytes, tested against the `siphasher` crate \
         and the SipHash paper's vector); BLAKE3 is the `blake3` crate's keyed hash over the same bytes, \
         its first 64 bits as the tag; Poly1305-AES is the `poly1305` crate's Poly1305 over the same bytes \
         (r's state made once, as it would be per destination, and cloned per frame) plus AES-128 (the `aes` \
         crate) of the frame's counter as the nonce, as Bernstein's Poly1305-AES, its first 64 bits as the tag. \
         Payload 56 B hashes 79 bytes, 8 fewer than 64 B's 87: one SipHash compression of eleven fewer, what \
         leaving 8 bytes out of the hash would save.\n"
    )?;
    writeln!(md, "| MAC | payload B | sign ns | verify ns | sign + verify ns | median loop: sign + verify ns | one loop signing one frame and verifying another, ns | its median loop ns |")?;
    writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|")?;
    for t in tag {
        let pair = |ns: f64| if ns > 0.0 { format!("{ns:.1}") } else { "".to_string() };
        writeln!(
            md,
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} |",
            t.mac,
            t.payload,
            t.sign_ns,
            t.verify_ns,
            t.sign_plus_verify_ns,
            t.median_sign_plus_verify_ns,
            pair(t.pair_ns),
            pair(t.median_pair_ns)
        )?;
    }
    let worst = |mac: &str| tag.iter().filter(|t| t.mac == mac && t.payload <= 64).map(|t| t.sign_plus_verify_ns).fold(0.0, f64::max);
    let (sip, blake, poly) = (worst("SipHash-2-4"), worst(BLAKE), worst(POLY));
    writeln!(
        md,
        "\nGoal: sign + verify at most 100 ns per frame up to 64 B of payload. SipHash-2-4: at most {sip:.0} ns — {}; \
         BLAKE3: at most {blake:.0} ns; Poly1305-AES: at most {poly:.0} ns. mcd uses SipHash-2-4 ({}).",
        if sip <= 100.0 { "met" } else { "**not met**" },
        if sip <= blake.min(poly) { "the fastest of the three at these sizes" } else { "**another was faster in this run**" }
    )?;
    writeln!(md, "\n### Per message, besides the tag\n")?;
    writeln!(
        md,
        "What a receiver does for authentication besides verifying the tag, per message, in isolation \
         (the same loops, one sender's frames in order in its live session, as in a barrier after the \
         join). Not measured apart, since each is a few instructions: picking the key (an index by rail, a \
         MAC comparison, an index by node or group) and the trailer's 20 bytes the kernel copies more per \
         frame. Nothing is allocated, locked or looked up in a hash map.\n"
    )?;
    writeln!(md, "| step | ns | median loop ns |")?;
    writeln!(md, "|---|---:|---:|")?;
    for s in steps {
        writeln!(md, "| {} | {:.1} | {:.1} |", s.step, s.ns, s.median_ns)?;
    }
    if let Some(total) = per_message_ns(tag, steps, BARRIER_PAYLOAD) {
        writeln!(md, "\nA barrier message ({BARRIER_PAYLOAD} B of payload): sign, verify and these steps, **{total:.0} ns** per message.")?;
    }
    Ok(())
}

/// `mcd-bench auth --tag-only`: the tag in isolation, printed, nothing written.
pub fn tag_only() -> Result<()> {
    let tag = measure_tags()?;
    let mut md = String::new();
    tag_section(&mut md, &tag)?;
    print!("{md}");
    Ok(())
}

/// Runs both measurements and writes `auth.{md,json}` to `out`.
pub fn run(out: &std::path::Path, cluster: &str, iterations: usize, rounds: usize) -> Result<()> {
    anyhow::ensure!(iterations >= 1 && rounds >= 1, "--iterations and --rounds must be at least 1");
    let tag = measure_tags()?;
    eprintln!("auth: A/B on the virtual cluster");
    let ab = ab(cluster, &[Op2::Barrier, Op2::Allreduce8], &[Variant::ON, Variant::OFF], iterations, rounds)?;
    let mut md = String::new();
    writeln!(md, "# What authentication costs\n")?;
    writeln!(md, "Measured {} on {}, by `cargo run --release -p mcd-bench -- auth` (`./run bench auth`).\n", crate::today(), crate::machine())?;
    tag_section(&mut md, &tag)?;
    writeln!(md, "\n## A/B on the wire: authentication on and off\n")?;
    writeln!(
        md,
        "Two nodes of a virtual cluster (veth and a Linux bridge), one thread per node pinned to a core \
         each, busy-polling. {rounds} rounds; in each, for each operation, each node opens both settings' \
         endpoints at once (the one opened first on port 0, the other on port 1 under another job key; \
         which setting opens first alternates from round to round) and \
         runs {BLOCK} calls of one, then {BLOCK} of the other, in turn (which goes first alternates from \
         block to block), 2000 untimed calls of each then {iterations} timed ones: the \
         two settings' calls are never more than a few ms apart. \
         Node 0's times per call, in an hdrhistogram over all rounds. The allreduce sums one double (8 B) \
         and every result is checked. The verdict is the median over pairs of rounds of the geometric mean \
         of the pair's two p50 ratios (authentication on over off): within a round the settings are \
         interleaved, so the ratio of a round cancels the machine's drift (this shared machine's load moves \
         the pooled p50 by more than 5%), and within a pair each setting's endpoint was opened first once, \
         which cancels the order's effect: the kernel hands a frame to the sockets bound to an interface \
         from the one opened last, and each socket before the frame's own costs it about 2% of the \
         allreduce (session 14: four identical unauthenticated endpoints, 0, -1.9, -4.6 and -6.7% from the \
         first opened to the last; until then the authenticated endpoint always opened first, and its \
         figures carried that 2%).\n"
    )?;
    writeln!(md, "| operation | auth | p50 µs | p90 µs | p99 µs | mean µs |")?;
    writeln!(md, "|---|---|---:|---:|---:|---:|")?;
    for r in &ab {
        writeln!(
            md,
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} |",
            r.what,
            if r.auth { "on" } else { "off" },
            r.p50_us,
            r.p90_us,
            r.p99_us,
            r.mean_us
        )?;
    }
    writeln!(md)?;
    for pair in ab.chunks(2) {
        let (on, off) = (&pair[0], &pair[1]);
        let (ratio, lo, hi) = paired_ratio(on, off, 2);
        let cycles = on.round_p50_us.len() / 2;
        let paired = (ratio - 1.0) * 100.0;
        writeln!(
            md,
            "- {}: {paired:+.1}% with authentication, the median of the {cycles} pairs of rounds' p50 ratios (from {:+.1}% to {:+.1}%); \
             pooled p50 {:+.1}%, mean {:+.1}% — goal at most +5%: {}.",
            on.what,
            (lo - 1.0) * 100.0,
            (hi - 1.0) * 100.0,
            (on.p50_us / off.p50_us - 1.0) * 100.0,
            (on.mean_us / off.mean_us - 1.0) * 100.0,
            if paired <= 5.0 { "met" } else { "**not met**" }
        )?;
    }
    if let (Some(per_message), Some(off)) = (per_message_ns(&tag.0, &tag.1, BARRIER_PAYLOAD), ab.get(1)) {
        writeln!(
            md,
            "- What the isolated figures predict for the barrier: each node's critical path holds one message \
             (sent by one node, received by the other), {per_message:.0} ns of authentication, {:+.1}% of its \
             p50 without authentication.",
            per_message / (off.p50_us * 1e3) * 100.0
        )?;
    }
    let (tag, steps) = tag;
    let results = AuthResults { tag, steps, ab, ab_rounds: rounds, ab_iterations: iterations };
    // The hand-written checklist at the end stays.
    if let Some(kept) = std::fs::read_to_string(out.join("auth.md")).ok().and_then(|old| old.find(KEPT_FROM).map(|at| old[at..].to_string())) {
        md.push_str(&kept);
    }
    std::fs::write(out.join("auth.md"), &md)?;
    std::fs::write(out.join("auth.json"), serde_json::to_string_pretty(&results)?)?;
    print!("{md}");
    Ok(())
}

/// The variants of `--lines`: comma-separated `on` or `off`, each
/// optionally followed by a number of doubles (1 if none), at least two.
fn parse_variants(spec: &str) -> Result<Vec<Variant>> {
    let variants = spec
        .split(',')
        .map(|v| {
            let (auth, n) = match (v.strip_prefix("on"), v.strip_prefix("off")) {
                (Some(n), _) => (true, n),
                (None, Some(n)) => (false, n),
                (None, None) => anyhow::bail!("`{v}`: each variant is `on` or `off`, then optionally a number of doubles"),
            };
            let doubles = if n.is_empty() { 1 } else { n.parse().with_context(|| format!("`{v}`: a number of doubles after on or off"))? };
            anyhow::ensure!(doubles >= 1, "`{v}`: at least one double");
            Ok(Variant { auth, doubles })
        })
        .collect::<Result<Vec<_>>>()?;
    anyhow::ensure!(variants.len() >= 2, "`{spec}`: at least two variants");
    Ok(variants)
}

/// `mcd-bench auth --lines SPEC`: where the allreduce's cost of
/// authentication comes from. The 2-rank allreduce (tree2) with each
/// variant of `spec` (comma-separated `on` or `off`, each optionally
/// followed by a number of doubles: `on,off,off2,off3`), every variant's
/// endpoint open at once, interleaved as in the A/B (the order in which
/// they open rotates from round to round: `--rounds` is a multiple of the
/// number of variants); printed, nothing written.
pub fn lines(spec: &str, cluster: &str, iterations: usize, rounds: usize) -> Result<()> {
    let variants = parse_variants(spec)?;
    let rows = ab(cluster, &[Op2::Allreduce8], &variants, iterations, rounds)?;
    let mut md = String::new();
    writeln!(
        md,
        "| 2-rank allreduce (tree2) | frame B | p50 µs | p90 µs | p99 µs | mean µs | p50 over the first variant's (median of cycles, range) |"
    )?;
    writeln!(md, "|---|---:|---:|---:|---:|---:|---|")?;
    for r in &rows {
        let (ratio, lo, hi) = paired_ratio(r, &rows[0], variants.len());
        writeln!(
            md,
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:+.1}% ({:+.1}% to {:+.1}%) |",
            r.setting,
            r.frame_len,
            r.p50_us,
            r.p90_us,
            r.p99_us,
            r.mean_us,
            (ratio - 1.0) * 100.0,
            (lo - 1.0) * 100.0,
            (hi - 1.0) * 100.0
        )?;
    }
    for w in rows.windows(2) {
        let (ratio, lo, hi) = paired_ratio(&w[1], &w[0], variants.len());
        writeln!(
            md,
            "- {} over {}: {:+.1}% ({:+.1}% to {:+.1}%)",
            w[1].setting,
            w[0].setting,
            (ratio - 1.0) * 100.0,
            (lo - 1.0) * 100.0,
            (hi - 1.0) * 100.0
        )?;
    }
    print!("{md}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(round_p50_us: Vec<f64>) -> AbRow {
        AbRow {
            what: "test",
            auth: false,
            setting: String::new(),
            frame_len: 0,
            samples: 0,
            p50_us: 0.0,
            p90_us: 0.0,
            p99_us: 0.0,
            mean_us: 0.0,
            round_p50_us,
        }
    }

    #[test]
    fn the_paired_ratio_cancels_the_opening_order_and_the_drift() {
        // A true cost of 4%; the endpoint opened first (on in even rounds,
        // off in odd ones) 2% slower; the machine drifting from round to round.
        let off: Vec<f64> = (0..8).map(|r| 10.0 * (1.0 + 0.1 * r as f64) * if r % 2 == 1 { 1.02 } else { 1.0 }).collect();
        let on: Vec<f64> = (0..8).map(|r| 10.4 * (1.0 + 0.1 * r as f64) * if r % 2 == 0 { 1.02 } else { 1.0 }).collect();
        let (ratio, lo, hi) = paired_ratio(&row(on.clone()), &row(off.clone()), 2);
        assert!((ratio - 1.04).abs() < 1e-9 && (lo - 1.04).abs() < 1e-9 && (hi - 1.04).abs() < 1e-9, "{ratio} {lo} {hi}");
        // Without the pairs (one round a cycle) the order shows.
        let (_, lo, hi) = paired_ratio(&row(on), &row(off), 1);
        assert!(lo < 1.02 && hi > 1.06, "{lo} {hi}");
    }

    #[test]
    fn lines_variants_are_on_or_off_with_a_number_of_doubles() {
        let v = parse_variants("on,off,off3").unwrap();
        assert_eq!(v, vec![Variant::ON, Variant::OFF, Variant { auth: false, doubles: 3 }]);
        assert_eq!(v.iter().map(|v| v.frame_len(Op2::Allreduce8)).collect::<Vec<_>>(), vec![72, 52, 68]);
        assert_eq!(Variant::ON.frame_len(Op2::Barrier), 64);
        for bad in ["on", "on,of", "on,off0", "on,offx", ""] {
            assert!(parse_variants(bad).is_err(), "{bad}");
        }
    }
}
