//! A quick sweep of the real protocol under loss in the LogP simulator
//! (`barriers::model::protocol`), for working on recovery:
//! `cargo run --release -p barriers --example loss_sweep -- [sizes] [algorithms]
//! [losses] [scale]` (sizes comma-separated, default 8,64,256; algorithms:
//! tree4, auto, diss; losses comma-separated, as [`Loss::parse`] reads
//! them: `1` is 1% independent, `b5` bursty at 5% in bursts of 4 frame
//! times, `b5:40` in bursts of 40; scale multiplies the barriers run;
//! `SEED=k` in the environment adds k to every run's seed).
//! `mcd-bench model --protocol` records the full sweep.

use barriers::model::protocol::{run, Loss, Scenario};
use barriers::model::{auto_with, Link, LogP, Setup};
use barriers::Algorithm;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sizes: Vec<usize> = args.get(1).map_or(vec![8, 64, 256], |s| s.split(',').map(|x| x.parse().expect("a size")).collect());
    let algos: Vec<String> = args.get(2).map_or(vec!["tree4".into()], |s| s.split(',').map(String::from).collect());
    let losses: Vec<Loss> = match args.get(3) {
        Some(s) => s.split(',').map(|x| Loss::parse(x).expect("a loss")).collect(),
        None => vec![
            Loss::NONE,
            Loss::Independent(0.01),
            Loss::Independent(0.05),
            Loss::Independent(0.2),
            Loss::Independent(0.5),
            Loss::Bursty { average: 0.05, mean_burst: 4.0 },
        ],
    };
    let scale: f64 = args.get(4).map_or(1.0, |s| s.parse().expect("a scale"));
    // (SEED=k adds k to every run's seed: another draw of the same rows.)
    let seed_offset: u64 = std::env::var("SEED").map_or(0, |s| s.parse().expect("a seed offset"));
    let setup = Setup::preset(&LogP::REFERENCE, Link::GBE_10);
    println!("| n | algorithm | loss | barriers | mean µs | median µs | p99 µs | p99.9 µs | × lossless | p99.9 / lossless median | recoveries | nacks | answers | copies | lost/delivered |");
    println!("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &n in &sizes {
        for a in &algos {
            let alg = match a.as_str() {
                "auto" => auto_with(n, 1, &setup, true).0,
                "diss" => Algorithm::Dissemination,
                name => name.parse().unwrap_or_else(|e: String| panic!("{e}")),
            };
            let barriers = (((200_000.0 / n as f64) * scale) as u32).clamp(100, 4000);
            let (mut base, mut base_median) = (0.0, 0.0);
            for &loss in &losses {
                let b = if loss.average() >= 0.5 { barriers.min(400) } else { barriers };
                let mut s = Scenario::new(alg, n, setup, b).loss(loss);
                s.seed = n as u64 * 1_000_003 + (loss.average() * 1e6) as u64 + seed_offset;
                let name = match loss {
                    Loss::Independent(p) => format!("{}%", p * 100.0),
                    Loss::Bursty { average, mean_burst } => format!("bursty {}%/{}", average * 100.0, mean_burst),
                };
                match run(&s) {
                    Ok(o) => {
                        let mean = o.mean();
                        if loss.average() == 0.0 {
                            base = mean;
                            base_median = o.quantile(0.5);
                        }
                        println!(
                            "| {n} | {alg} | {name} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {} | {} | {} | {} | {}/{} |",
                            o.times_us.len(),
                            mean,
                            o.quantile(0.5),
                            o.quantile(0.99),
                            o.quantile(0.999),
                            mean / base,
                            o.quantile(0.999) / base_median,
                            o.recoveries(),
                            o.stats.nacks_sent,
                            o.stats.answers,
                            o.stats.copies,
                            o.lost,
                            o.deliveries
                        );
                    }
                    Err(e) => println!("| {n} | {alg} | {name} | {b} | failed: {e} |"),
                }
            }
        }
    }
}
