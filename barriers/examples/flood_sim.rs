//! Issue 27's flood in the LogP simulator that runs the real protocol core,
//! a core per node (`barriers::model::protocol`, [`Flood`]): forged frames
//! at node 1, each costing its CPU the kernel's receive and the failed tag
//! check, against the same run unflooded; node 1's own barrier time (mean,
//! p50, p99) over several seeds (Poisson arrivals).
//!
//! `cargo run --release -p barriers --example flood_sim -- [sizes] [algorithms]
//! [rates] [kernel_us] [check_us] [ring slots] [seeds] [barriers]`
//! (defaults 2,8; tree4,auto; 100000,300000,1000000 frames a second; the
//! costs measured for `bench/results/flood.md`; 1024 slots, `0`: no limit;
//! 5 seeds; 4000 barriers). `RETRY=off` turns the ring-drop retry
//! (`Core::frames_lost`) off. Prints a Markdown table.

use barriers::model::protocol::{run, Flood, Outcome, Scenario};
use barriers::model::{auto_with, Link, LogP, Setup};
use barriers::Algorithm;

fn list<T>(arg: Option<&String>, default: &[T]) -> Vec<T>
where
    T: std::str::FromStr + Clone,
    T::Err: std::fmt::Debug,
{
    arg.map_or(default.to_vec(), |s| s.split(',').map(|x| x.parse().expect("a number")).collect())
}

fn stats(o: &Outcome) -> (f64, f64, f64) {
    let mut v = o.node_us.clone();
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    (mean, barriers::summary::quantile(&mut v, 0.5), barriers::summary::quantile(&mut v, 0.99))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sizes: Vec<usize> = list(args.get(1), &[2, 8]);
    let algos: Vec<String> = args.get(2).map_or(vec!["tree4".into(), "auto".into()], |s| s.split(',').map(String::from).collect());
    let rates: Vec<f64> = list(args.get(3), &[100_000.0, 300_000.0, 1_000_000.0]);
    let kernel_us: f64 = args.get(4).map_or(1.0, |s| s.parse().expect("µs"));
    let check_us: f64 = args.get(5).map_or(0.1, |s| s.parse().expect("µs"));
    let slots: u32 = args.get(6).map_or(1024, |s| s.parse().expect("slots"));
    let seeds: u64 = args.get(7).map_or(5, |s| s.parse().expect("seeds"));
    let barriers: u32 = args.get(8).map_or(4000, |s| s.parse().expect("barriers"));
    let retry = std::env::var("RETRY").map_or(true, |v| v != "off");
    let setup = Setup::preset(&LogP::REFERENCE, Link::GBE_10);
    println!(
        "10 GbE preset (o_s {}, o_r {}, g {}, L {} µs); node 1 flooded (Poisson); forged frame: kernel {kernel_us} µs + check {check_us} µs; ring {}; ring-drop retry {}; {barriers} barriers, 10% warm-up; {seeds} seeds\n",
        setup.logp.o_s,
        setup.logp.o_r,
        setup.logp.g,
        setup.logp.l,
        if slots == 0 { "unbounded".to_string() } else { format!("{slots} slots") },
        if retry { "on" } else { "off" },
    );
    println!("| n | algorithm | forged/s | node 1's CPU on forged frames | mean µs unflooded → flooded (×) | p50 µs (×) | p99 µs (×) | bad tags | ring drops forged / genuine | ring-drop retries | recoveries | safe |");
    println!("|---:|---|---:|---:|---|---|---|---:|---:|---:|---:|---|");
    for &n in &sizes {
        for a in &algos {
            let alg = match a.as_str() {
                "auto" => auto_with(n, 1, &setup, true).0,
                "diss" => Algorithm::Dissemination,
                name => name.parse().unwrap_or_else(|e: String| panic!("{e}")),
            };
            let mut quiet = Scenario::new(alg, n, setup, barriers);
            quiet.watch = Some(1);
            let q = run(&quiet).expect("the unflooded run");
            let (qm, q50, q99) = stats(&q);
            for &rate in &rates {
                let mut ratios = Vec::new();
                let (mut bad, mut fdrop, mut gdrop, mut retries, mut rec) = (0u64, 0u64, 0u64, 0u64, 0u64);
                let mut ok = true;
                for seed in 1..=seeds {
                    let mut f = Flood::new(1, rate, kernel_us, check_us);
                    f.poisson = true;
                    f.ring_slots = (slots > 0).then_some(slots);
                    f.ring_loss_retry = retry;
                    let mut s = quiet.flood(f);
                    s.seed = seed;
                    match run(&s) {
                        Ok(o) => {
                            let (m, p50, p99) = stats(&o);
                            ratios.push((m, p50, p99));
                            bad += o.flood.bad_tags;
                            fdrop += o.flood.forged_ring_drops;
                            gdrop += o.flood.genuine_ring_drops;
                            retries += o.stats.ring_loss_retries;
                            rec += o.recoveries();
                        }
                        Err(e) => {
                            ok = false;
                            eprintln!("n={n} {alg} {rate}/s seed {seed}: {e}");
                        }
                    }
                }
                let range = |f: &dyn Fn(&(f64, f64, f64)) -> f64, base: f64| {
                    let lo = ratios.iter().map(f).fold(f64::INFINITY, f64::min);
                    let hi = ratios.iter().map(f).fold(0.0, f64::max);
                    format!("{base:.2} → {lo:.2}-{hi:.2} ({:.2}-{:.2}×)", lo / base, hi / base)
                };
                println!(
                    "| {n} | {alg}{} | {rate:.0} | {:.0}% | {} | {} | {} | {bad} | {fdrop} / {gdrop} | {retries} | {rec} | {} |",
                    if a == "auto" { " (Auto)" } else { "" },
                    rate * (kernel_us + check_us) / 1e4,
                    range(&|r| r.0, qm),
                    range(&|r| r.1, q50),
                    range(&|r| r.2, q99),
                    if ok { "every run completed" } else { "FAILED" },
                );
            }
        }
    }
}
