//! Where the time goes under loss, in the real-protocol simulator: runs one
//! scenario (tree4 unless `ALG` says) on 10 GbE with [`Scenario::trace`] and classes every
//! first NACK by what it asked for (not sent yet, lost, in flight, already
//! had), then counts the barriers by cost against the lossless run.
//! `cargo run --release -p barriers --example loss_trace -- N LOSS [BARRIERS] [SEED]`
//! (LOSS as `Loss::parse` reads it: `1`, `b5`, `b5:40`; the
//! seed defaults to the sweep's). Environment: `SHOW=k` prints the k
//! slowest barriers' frames, losses and timers in time order (5 by
//! default), `BARRIER=k` barrier k's, `NODE=v` only node v's lines,
//! `COPIES=1` every copy too, `LIST=1` the barriers over 1.5× lossless,
//! `ALG=onephase` (any algorithm `Algorithm` parses) instead of tree4.
//! The trace grows with the run: keep BARRIERS small at 1,024 nodes.

use std::collections::HashMap;

use barriers::model::protocol::{run, Happening, Loss, Scenario};
use barriers::model::{Link, LogP, Setup};
use barriers::transport::MsgKind;
use barriers::{Algorithm, Fanout, Release};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).map_or(64, |s| s.parse().expect("a size"));
    let loss = Loss::parse(args.get(2).map_or("1", String::as_str)).expect("a loss");
    let barriers: u32 = args.get(3).map_or(300, |s| s.parse().expect("a count"));
    let setup = Setup::preset(&LogP::REFERENCE, Link::GBE_10);
    let alg = std::env::var("ALG").map_or(Algorithm::Tree { k: Fanout::FOUR, release: Release::Multicast }, |a| a.parse().expect("an algorithm"));
    let clean = run(&Scenario::new(alg, n, setup, barriers)).expect("lossless run");
    let mut s = Scenario::new(alg, n, setup, barriers).loss(loss);
    s.seed = args.get(4).map_or(n as u64 * 1_000_003 + (loss.average() * 1e6) as u64, |x| x.parse().expect("a seed"));
    s.trace = true;
    let mut o = run(&s).expect("run");
    o.trace.sort_by(|a, b| a.t_us.partial_cmp(&b.t_us).unwrap());
    let base = clean.mean();
    println!(
        "n={n} {loss:?}: mean {:.1} (lossless {base:.1}, {:.2}x) median {:.1} p99 {:.1}",
        o.mean(),
        o.mean() / base,
        o.quantile(0.5),
        o.quantile(0.99)
    );
    println!("stats {:?}", o.stats);

    // Per (sender, epoch, tag, to-or-all): first send time; per (receiver, from, epoch, tag): first delivery, losses.
    let mut sent: HashMap<(u32, u32, u16), (f64, Option<u32>)> = HashMap::new();
    let mut first_in: HashMap<(u32, u32, u32, u16), f64> = HashMap::new();
    let mut lost_at: HashMap<(u32, u32, u32, u16), u32> = HashMap::new();
    for e in &o.trace {
        match e.what {
            Happening::Sent { to, msg } if msg.kind == MsgKind::Data => {
                sent.entry((e.node, msg.epoch, msg.tag)).or_insert((e.t_us, to));
            }
            Happening::Delivered { from, msg } if matches!(msg.kind, MsgKind::Data | MsgKind::Answer) => {
                first_in.entry((e.node, from, msg.epoch, msg.tag)).or_insert(e.t_us);
            }
            Happening::Lost { from, msg } if msg.kind == MsgKind::Data => {
                *lost_at.entry((e.node, from, msg.epoch, msg.tag)).or_default() += 1;
            }
            _ => {}
        }
    }
    // Classify NACKs.
    let mut classes: HashMap<String, (u32, f64)> = HashMap::new();
    let mut enter: HashMap<(u32, u32), f64> = HashMap::new();
    let mut step_wait: Vec<f64> = Vec::new();
    let mut early: Vec<f64> = Vec::new();
    for e in &o.trace {
        if let Happening::Entered(k) = e.what {
            enter.insert((e.node, k), e.t_us);
        }
        if let Happening::Sent { to: Some(to), msg } = e.what {
            if msg.kind != MsgKind::Nack || (msg.arg >> 8) & 0xF != 0 {
                continue;
            }
            let asked = if msg.tag == 1 { 0 } else { to };
            let class = match sent.get(&(asked, msg.epoch, msg.tag)) {
                None => "not sent yet".to_string(),
                Some(&(ts, _)) if ts > e.t_us => {
                    early.push(ts - e.t_us);
                    "not sent yet".to_string()
                }
                Some(&(ts, _)) => {
                    let got = first_in.get(&(e.node, asked, msg.epoch, msg.tag)).copied();
                    let lost = lost_at.get(&(e.node, asked, msg.epoch, msg.tag)).copied().unwrap_or(0);
                    step_wait.push(e.t_us - ts);
                    match got {
                        Some(g) if g < e.t_us => "already had it".into(),
                        _ if lost > 0 => format!("lost ({lost} frames)"),
                        _ => "in flight".into(),
                    }
                }
            };
            let c = classes.entry(format!("tag {} {}", msg.tag, class)).or_default();
            c.0 += 1;
            c.1 += e.t_us;
        }
    }
    let mut cl: Vec<_> = classes.into_iter().collect();
    cl.sort_by(|a, b| a.0.cmp(&b.0));
    for (k, (c, _)) in cl {
        println!("NACK {k}: {c}");
    }
    early.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if !early.is_empty() {
        println!(
            "NACKs of messages not sent yet, µs before the send: p10 {:.1} median {:.1} p90 {:.1}",
            early[early.len() / 10],
            early[early.len() / 2],
            early[early.len() * 9 / 10]
        );
    }
    step_wait.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if !step_wait.is_empty() {
        println!(
            "NACKs of sent messages, µs after the send: p10 {:.1} median {:.1} p90 {:.1}",
            step_wait[step_wait.len() / 10],
            step_wait[step_wait.len() / 2],
            step_wait[step_wait.len() * 9 / 10]
        );
    }
    // The slowest barriers: per node, leave - enter; who was last, and what it lost.
    let mut left: HashMap<(u32, u32), f64> = HashMap::new();
    for e in &o.trace {
        if let Happening::Left(k) = e.what {
            left.insert((e.node, k), e.t_us);
        }
    }
    let show: usize = std::env::var("SHOW").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    let mut per: Vec<(f64, u32, u32)> = Vec::new();
    for k in s.warmup..barriers {
        let (mut worst, mut who) = (0.0, 0);
        for v in 0..n as u32 {
            let c = left[&(v, k)] - enter[&(v, k)];
            if c > worst {
                worst = c;
                who = v;
            }
        }
        per.push((worst, k, who));
    }
    per.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap());
    let pick: Option<u32> = std::env::var("BARRIER").ok().and_then(|s| s.parse().ok());
    let listed: Vec<(f64, u32, u32)> = match pick {
        Some(b) => per.iter().copied().filter(|p| p.1 == b).collect(),
        None => per.iter().copied().take(show).collect(),
    };
    if std::env::var("LIST").is_ok() {
        let mut by_k = per.clone();
        by_k.sort_by_key(|p| p.1);
        for (c, k, who) in by_k.iter().filter(|p| p.0 > 1.5 * base).take(40) {
            println!("slow: barrier {k} {c:.1} µs (node {who})");
        }
    }
    for &(c, k, who) in &listed {
        println!("--- barrier {k}: {c:.1} µs, slowest node {who}");
        let from = (0..n as u32).map(|v| enter[&(v, k)]).fold(f64::MAX, f64::min);
        let to = (0..n as u32).map(|v| left[&(v, k)]).fold(0.0, f64::max);
        for e in o.trace.iter().filter(|e| e.t_us >= from && e.t_us <= to) {
            let line = match e.what {
                Happening::Sent { to, msg } if msg.kind != MsgKind::Data || (msg.arg >> 8) & 0xF == 0 || std::env::var("COPIES").is_ok() => {
                    format!("{:>4} sends {:?} e{} t{} a{:x} to {:?}", e.node, msg.kind, msg.epoch, msg.tag, msg.arg, to)
                }
                Happening::Lost { from, msg } => format!("{:>4} LOST {:?} e{} t{} a{:x} from {from}", e.node, msg.kind, msg.epoch, msg.tag, msg.arg),
                Happening::Delivered { from, msg } if msg.kind != MsgKind::Data => {
                    format!("{:>4} gets {:?} e{} t{} a{:x} from {from}", e.node, msg.kind, msg.epoch, msg.tag, msg.arg)
                }
                Happening::Timer => format!("{:>4} timer", e.node),
                Happening::Left(kk) if kk == k => format!("{:>4} left", e.node),
                _ => continue,
            };
            if std::env::var("NODE").ok().is_some_and(|s| !s.split(',').any(|w| w.parse::<u32>().ok() == Some(e.node))) {
                continue;
            }
            println!("{:9.2} {line}", e.t_us - from);
        }
    }
    let mut hist = [0u32; 8];
    for &(c, _, _) in &per {
        let x = c / base;
        hist[if x < 1.05 {
            0
        } else if x < 1.2 {
            1
        } else if x < 1.5 {
            2
        } else if x < 2.0 {
            3
        } else if x < 3.0 {
            4
        } else if x < 5.0 {
            5
        } else if x < 10.0 {
            6
        } else {
            7
        }] += 1;
    }
    println!(
        "barriers by x lossless: <1.05 {} <1.2 {} <1.5 {} <2 {} <3 {} <5 {} <10 {} more {}",
        hist[0], hist[1], hist[2], hist[3], hist[4], hist[5], hist[6], hist[7]
    );
}
