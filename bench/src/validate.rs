//! `mcd-bench validate`: the cost model against the paper (from its
//! parameters alone, no measurement) and, with `--measure`, against mcd on
//! the virtual cluster. Writes results/validation.{md,json} and plots.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use barriers::model::{self, Host, Link, LogP, Setup, Topology, Verdict, VirtualCluster};
use barriers::{Algorithm, Fanout, Release};
use mcd_bench::barrierbench::BarrierMeasurement;
use mcd_bench::logp::SendCost;
use mcd_bench::plot::{self, Panel, Series};
use mcd_vcluster::Topology as VTopology;

const T2: Algorithm = Algorithm::Tree { k: Fanout::TWO, release: Release::Multicast };
const T3: Algorithm = Algorithm::Tree { k: Fanout::THREE, release: Release::Multicast };

/// One of the paper's figures: what, where, and its number.
struct Figure {
    name: &'static str,
    /// `None`: the paper's ternary tree (two children per parent).
    algorithm: Option<Algorithm>,
    nodes: usize,
    rails: usize,
    topology: Topology,
    paper_us: f64,
}

const fn fig(name: &'static str, algorithm: Option<Algorithm>, nodes: usize, rails: usize, topology: Topology, paper_us: f64) -> Figure {
    Figure { name, algorithm, nodes, rails, topology, paper_us }
}

/// Every MCD barrier figure `PAPER.md` lists.
const FIGURES: [Figure; 12] = [
    fig("Fig. 5 shuffle exchange", Some(Algorithm::ShuffleExchange), 32, 1, Topology::Switch, 174.0),
    fig("Fig. 6 binary tree", Some(T2), 32, 1, Topology::Switch, 204.0),
    fig("Fig. 7 ternary tree", None, 31, 1, Topology::Switch, 200.0),
    fig("Fig. 8 concurrent", Some(Algorithm::Concurrent), 32, 1, Topology::Switch, 309.0),
    fig("Fig. 9 ternary tree, 1 network", None, 15, 1, Topology::Switch, 159.0),
    fig("Fig. 9 ternary tree, 2 networks", None, 15, 2, Topology::Switch, 169.0),
    fig("Fig. 10 concurrent, 1 network", Some(Algorithm::Concurrent), 16, 1, Topology::Switch, 179.0),
    fig("Fig. 10 concurrent, 2 networks", Some(Algorithm::Concurrent), 16, 2, Topology::Switch, 147.0),
    fig("Fig. 5 shuffle exchange", Some(Algorithm::ShuffleExchange), 32, 1, Topology::Hub, 3743.0),
    fig("Fig. 6 binary tree", Some(T2), 32, 1, Topology::Hub, 728.0),
    fig("Fig. 7 ternary tree", None, 31, 1, Topology::Hub, 675.0),
    fig("Fig. 8 concurrent", Some(Algorithm::Concurrent), 32, 1, Topology::Hub, 1059.0),
];

fn label(a: Option<Algorithm>) -> String {
    a.map_or_else(|| "ternary (2 children)".to_string(), |a| a.to_string())
}

fn err(pred: f64, actual: f64) -> f64 {
    (pred - actual) / actual * 100.0
}

/// A row of section 1: one of the paper's figures against the model.
#[derive(serde::Serialize)]
struct PaperRow {
    figure: &'static str,
    algorithm: String,
    nodes: usize,
    rails: usize,
    topology: String,
    paper_us: f64,
    predicted_us: f64,
    error_percent: f64,
    plain_logp_us: f64,
    closed_form_us: Option<f64>,
}

/// The paper part: every figure predicted from the paper's parameters.
pub fn paper(out: &Path, md: &mut String, json: &mut serde_json::Map<String, serde_json::Value>) -> Result<()> {
    let host = Host::PAPER;
    writeln!(md, "## 1. The paper's figures, predicted from its parameters\n")?;
    writeln!(
        md,
        "Setup (`Setup::paper`): LogP o_s {}, o_r {}, g {}, L {} µs (section 5.1.1); Fast Ethernet, {} µs per \
         minimum frame (84 bytes with preamble and gap); a receive gap per NIC of g; interrupt-driven receive \
         of which {} µs is the interrupt (a message arriving while its NIC's handler still runs pays only the \
         rest); a {} µs send-completion interrupt; a {} µs wake-up when a message finds its node blocked \
         waiting. The switch has one output queue per port; the hub is one medium per network, simulated as \
         CSMA/CD (1-persistent, collisions within a {} µs window, jam, binary exponential backoff in 5.12 µs \
         slots, the mean over {} seeds). The paper's benchmark loop: 100 barriers each followed by 30 µs of \
         work, each node's mean barrier time averaged over nodes.\n",
        LogP::PAPER.o_s,
        LogP::PAPER.o_r,
        LogP::PAPER.g,
        LogP::PAPER.l,
        Link::FAST_ETHERNET.frame_us(4),
        host.rx_irq,
        host.tx_irq,
        host.wake,
        Link::FAST_ETHERNET.collision_window_us,
        model::HUB_SEEDS,
    )?;
    writeln!(
        md,
        "What is the paper's and what is not: o_s, o_r, g, L, the send-completion interrupt (6 µs), the \
         benchmark loop and the link are the paper's. Three numbers are not in it, each set from one \
         observation: the interrupt's share of o_r (3.1 µs, from the concurrent pair at 16 nodes: two networks \
         faster than one, which only coalescing explains), the wake-up (4.5 µs, from the 24 µs by which shuffle \
         exchange and the binary tree exceed LogP over their 5 and 6 hops), and the hub's collision window \
         (1 µs, a Class II repeater's 0.92 µs plus cable; any value from 0.75 to 1.25 µs keeps the four hub \
         figures within 14%, table below). And the paper's ternary tree is simulated as built, two children \
         per parent (next section), which its own numbers show. Everything else is prediction.\n"
    )?;
    writeln!(md, "| figure | network | nodes | paper µs | predicted µs | error | plain LogP µs | closed form µs |")?;
    writeln!(md, "|---|---|---:|---:|---:|---:|---:|---:|")?;
    let mut rows = Vec::new();
    for f in &FIGURES {
        let pr = model::paper_figure(f.algorithm, f.nodes, f.rails, f.topology);
        let plain = match f.algorithm {
            Some(a) => model::simulate(a, f.nodes, f.rails, &LogP::PAPER).last_exit,
            None => model::simulate_plans(&model::two_child_tree_plans(f.nodes, f.rails), f.rails, &Setup::logp(&LogP::PAPER), 1, 0.0).last_exit,
        };
        let closed = model::closed_form(f.algorithm.unwrap_or(T3), f.nodes, &LogP::PAPER);
        let network = format!("{} × {}", f.rails, f.topology);
        writeln!(
            md,
            "| {} | {network} | {} | {} | {:.0} | {:+.1}% | {:.0} | {} |",
            f.name,
            f.nodes,
            f.paper_us,
            pr.mean_cost,
            err(pr.mean_cost, f.paper_us),
            plain,
            closed.map_or("–".into(), |c| format!("{c:.0}"))
        )?;
        rows.push(PaperRow {
            figure: f.name,
            algorithm: label(f.algorithm),
            nodes: f.nodes,
            rails: f.rails,
            topology: f.topology.to_string(),
            paper_us: f.paper_us,
            predicted_us: pr.mean_cost,
            error_percent: err(pr.mean_cost, f.paper_us),
            plain_logp_us: plain,
            closed_form_us: closed,
        });
    }
    let worst = rows.iter().map(|r| r.error_percent.abs()).fold(0.0, f64::max);
    writeln!(md, "\nWorst error **{worst:.1}%** (goal: 15%). Plain LogP (no wire, no interrupts, no hub) misses the hub by 4–25× and the 2-network pairs' direction.\n")?;
    json.insert("paper".into(), serde_json::to_value(&rows)?);

    // Hub sensitivity to the one hub number not in the paper.
    writeln!(md, "Hub figures against the collision window (µs):\n")?;
    writeln!(md, "| window µs | shuffle 32 | binary 32 | ternary 31 | concurrent 32 |")?;
    writeln!(md, "|---:|---:|---:|---:|---:|")?;
    for w in [0.5, 0.75, 1.0, 1.25] {
        let mut setup = Setup::paper(Topology::Hub);
        if let Some(l) = setup.link.as_mut() {
            l.collision_window_us = w;
        }
        let cell = |a: Option<Algorithm>, n: usize| -> f64 {
            let (it, dummy) = model::PAPER_LOOP;
            match a {
                Some(a) => model::steady_state(a, n, 1, &setup, it, dummy).mean_cost,
                None => model::simulate_plans(&model::two_child_tree_plans(n, 1), 1, &setup, it, dummy).mean_cost,
            }
        };
        writeln!(
            md,
            "| {w} | {:.0} | {:.0} | {:.0} | {:.0} |",
            cell(Some(Algorithm::ShuffleExchange), 32),
            cell(Some(T2), 32),
            cell(None, 31),
            cell(Some(Algorithm::Concurrent), 32)
        )?;
    }
    writeln!(md, "| paper | 3743 | 728 | 675 | 1059 |\n")?;

    ternary(md)?;
    plot_paper(out)?;
    writeln!(md, "Plot: [validation-paper.svg](validation-paper.svg) / [.png](validation-paper.png): the model's curves (dashed) from 2 to 32 nodes, the paper's reported values (dots).\n")?;
    Ok(())
}

fn ternary(md: &mut String) -> Result<()> {
    let p = LogP::PAPER;
    let nog = LogP { g: 0.0, ..p };
    let sim_knomial = |n| model::simulate(T3, n, 1, &nog).last_exit;
    let sim_two = |n| model::simulate_plans(&model::two_child_tree_plans(n, 1), 1, &Setup::logp(&nog), 1, 0.0).last_exit;
    let fig_knomial = |n| model::paper_figure(Some(T3), n, 1, Topology::Switch).mean_cost;
    let fig_two = |n| model::paper_figure(None, n, 1, Topology::Switch).mean_cost;
    writeln!(md, "### The ternary tree: closed form 188, simulator 148.5, paper 200\n")?;
    writeln!(md, "| nodes | closed form | LogP sim, mcd's 3-nomial tree | LogP sim, two children per parent | full model, 3-nomial | full model, two children | paper |")?;
    writeln!(md, "|---:|---:|---:|---:|---:|---:|---:|")?;
    for (n, paper) in [(15, "159"), (27, "–"), (31, "200")] {
        writeln!(
            md,
            "| {n} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {paper} |",
            model::closed_form(T3, n, &p).unwrap_or(f64::NAN),
            sim_knomial(n),
            sim_two(n),
            fig_knomial(n),
            fig_two(n)
        )?;
    }
    writeln!(
        md,
        "\nBoth are right about different trees. The closed form charges ceil(log3 31) = 4 full phases of \
         o_s + L + 2·o_r (39.5 µs) plus the release: 188. mcd's `tree3` is the 3-nomial tree of `plan.rs`; at \
         31 nodes its root's fourth phase brings only node 27, whose subtree 27–30 finished after two phases, \
         so the critical path is three phases: 3 × 39.5 + 30 = 148.5, exactly what the simulator says (it \
         follows the real plan, so it is right for mcd). The paper's numbers fit neither under plain LogP, \
         and they tell which tree it built: from 15 to 31 nodes its time grows by 41 µs, one full level of \
         39.5, while the 3-nomial tree grows by about half that; and 31 = 2⁵ − 1 is the size at which a tree \
         whose every parent gathers *two children* is full (the authors measured 31, not 27, and expected 32 \
         to add \"one more receive somewhere\"). Such a tree has log2(n+1) − 1 levels, four at 31 nodes, and \
         its LogP cost is also 4 × 39.5 + 30 = 188: the closed form's number, by the coincidence \
         ceil(log3 31) = log2 32 − 1. Simulated with the paper's hardware (wake-ups, interrupt coalescing of \
         the second child), it gives 198 at 31 and 157 at 15 against the paper's 200 and 159, and on two \
         networks 167 against 169, where the 3-nomial tree is off by 20%. The paper's ternary tree is therefore \
         modelled as `two_child_tree_plans`; mcd's own `tree3` keeps the 3-nomial shape, which is the \
         faster of the two.\n"
    )?;
    Ok(())
}

fn plot_paper(out: &Path) -> Result<()> {
    let algs: [(Option<Algorithm>, &str); 4] =
        [(Some(Algorithm::ShuffleExchange), "shuffle"), (Some(T2), "tree2"), (None, "tree3"), (Some(Algorithm::Concurrent), "concurrent")];
    let curve = |a: Option<Algorithm>, rails: usize, top: Topology| -> Vec<(f64, f64)> {
        (2..=32usize).map(|n| (n as f64, model::paper_figure(a, n, rails, top).mean_cost)).collect()
    };
    let mut panels = Vec::new();
    for (title, top, rails, which) in [
        ("switch, 1 network", Topology::Switch, 1, vec![0, 1, 2, 3]),
        ("repeater hub, 1 network", Topology::Hub, 1, vec![0, 1, 2, 3]),
        ("2 switches (Figs. 9, 10)", Topology::Switch, 2, vec![2, 3]),
    ] {
        let mut series = Vec::new();
        for i in which {
            let (a, key) = algs[i];
            series.push(Series { label: format!("model: {}", label(a)), points: curve(a, rails, top), dashed: true, key: key.into() });
            for f in FIGURES.iter().filter(|f| f.algorithm == a && f.topology == top && f.rails == rails) {
                series.push(Series {
                    label: format!("paper: {} ({})", label(a), f.nodes),
                    points: vec![(f.nodes as f64, f.paper_us)],
                    dashed: false,
                    key: key.into(),
                });
            }
        }
        panels.push(Panel { title: title.into(), series });
    }
    plot::nodes_vs_time(&out.join("validation-paper"), "The paper's barriers: model (dashed) and reported values (dots)", &panels)?;
    Ok(())
}

/// Auto's picks with and without the receive gap, and the scale plot.
pub fn scale(out: &Path, md: &mut String, json: &mut serde_json::Map<String, serde_json::Value>) -> Result<()> {
    let host = LogP::REFERENCE;
    let links = [Link::GBE_1, Link::GBE_10, Link::GBE_100];
    writeln!(md, "## 2. Auto's picks, re-derived with the receive gap\n")?;
    writeln!(
        md,
        "Columns: *before* = the old simulator (no receive gap, no wire), mcd's reference parameters \
         (o_s {}, o_r {}, g {}, L {} µs); *LogP* = the same with g bounding receptions too (`model::auto`); \
         1/10/25/100 GbE = mcd's host overheads behind one switch of that speed (`Setup::preset`, the named \
         link presets: L an assumed typical {}/{}/{}/{} µs, the NIC receiving at line rate); *paper* = the \
         paper's hardware (the 100 Mb/s preset).\n",
        host.o_s,
        host.o_r,
        host.g,
        host.l,
        links[0].latency_us,
        links[1].latency_us,
        Link::GBE_25.latency_us,
        links[2].latency_us
    )?;
    let setups: Vec<(String, Setup)> = vec![
        ("before".into(), Setup { g_r: 0.0, ..Setup::logp(&LogP { g: 0.0, ..host }) }),
        ("LogP".into(), Setup::logp(&host)),
        ("1 GbE".into(), Setup::preset(&host, links[0])),
        ("10 GbE".into(), Setup::preset(&host, links[1])),
        ("25 GbE".into(), Setup::preset(&host, Link::GBE_25)),
        ("100 GbE".into(), Setup::preset(&host, links[2])),
        ("paper".into(), Setup::paper(Topology::Switch)),
    ];
    write!(md, "| nodes |")?;
    for (name, _) in &setups {
        write!(md, " {name} |")?;
    }
    writeln!(md)?;
    writeln!(md, "|---:|{}", "---|".repeat(setups.len()))?;
    let mut picks = Vec::new();
    for n in [2usize, 4, 8, 16, 32, 64, 256, 1024, 4096, 65536] {
        write!(md, "| {n} |")?;
        for (name, s) in &setups {
            if name == "paper" && n > 4096 {
                write!(md, " – |")?;
                continue;
            }
            let (a, pr) = model::auto_with(n, 1, s, true);
            write!(md, " {a} {:.1} |", pr.last_exit)?;
            picks.push(serde_json::json!({ "setup": name, "nodes": n, "pick": a.to_string(), "us": pr.last_exit }));
        }
        writeln!(md)?;
    }
    writeln!(
        md,
        "\nBefore, with o_r = 0.1 µs and nothing bounding receptions, one-phase looked best from 4 to 64 nodes \
         (9 µs at 64), yet 63 frames need 63 × 0.67 = 42 µs to reach one 1 GbE port. With g bounding receptions \
         too (LogP column: g = 2.7 µs, the veth send call) shuffle exchange wins at every size. On real links the \
         NIC receives at line rate, so one-phase stays the pick while n − 1 frames are cheap: up to 32 nodes on \
         1 GbE (28 µs, wire-bound), 64 to 128 on 10 and 100 GbE, then wide multicast trees (k = 5 to 8).\n"
    )?;
    json.insert("auto".into(), serde_json::Value::Array(picks));

    // The scale plot.
    let sizes: Vec<usize> = (1..=16).map(|e| 1usize << e).collect();
    let cands = model::candidates(true);
    let shown: Vec<Algorithm> = {
        let mut v = Algorithm::all();
        v.push(Algorithm::tree(8, Release::Multicast).expect("8 ≥ 2"));
        v
    };
    let mut panels = Vec::new();
    let mut table = String::new();
    writeln!(table, "| nodes | 1 GbE: Auto | µs | 10 GbE: Auto | µs | 100 GbE: Auto | µs |")?;
    writeln!(table, "|---:|---|---:|---|---:|---|---:|")?;
    let mut per_link: Vec<Vec<(Algorithm, f64)>> = Vec::new();
    for link in links {
        let setup = Setup::preset(&host, link);
        let mut curves: Vec<(Algorithm, Vec<(f64, f64)>)> = shown.iter().map(|&a| (a, Vec::new())).collect();
        let mut auto_pts = Vec::new();
        let mut best_per_n = Vec::new();
        for &n in &sizes {
            let all: Vec<(Algorithm, f64)> = cands.iter().map(|&a| (a, model::predict(a, n, 1, &setup).last_exit)).collect();
            for (a, pts) in &mut curves {
                if let Some(&(_, t)) = all.iter().find(|(b, _)| b == a) {
                    pts.push((n as f64, t));
                }
            }
            let best = all.iter().cloned().fold(None, |b: Option<(Algorithm, f64)>, x| match b {
                Some(b) if b.1 <= x.1 => Some(b),
                _ => Some(x),
            });
            let best = best.context("candidates")?;
            auto_pts.push((n as f64, best.1));
            best_per_n.push(best);
        }
        let mut series: Vec<Series> =
            curves.into_iter().map(|(a, points)| Series { label: a.to_string(), points, dashed: true, key: a.to_string() }).collect();
        series.push(Series { label: "Auto (the best candidate)".into(), points: auto_pts, dashed: false, key: "auto".into() });
        panels.push(Panel { title: format!("{} Ethernet, one switch", link.name), series });
        per_link.push(best_per_n);
    }
    for (i, &n) in sizes.iter().enumerate() {
        write!(table, "| {n} |")?;
        for picks in &per_link {
            write!(table, " {} | {:.1} |", picks[i].0, picks[i].1)?;
        }
        writeln!(table)?;
    }
    plot::nodes_vs_time(&out.join("validation-scale"), "Predicted barrier time, 2 to 65,536 nodes (Auto solid black)", &panels)?;
    writeln!(md, "### Scale: 2 to 65,536 nodes on 1, 10 and 100 GbE\n")?;
    writeln!(md, "Plot: [validation-scale.svg](validation-scale.svg) / [.png](validation-scale.png), every algorithm dashed and Auto (the lowest of all {} candidates) solid. Auto's pick per size:\n", cands.len())?;
    md.push_str(&table);
    writeln!(md)?;
    Ok(())
}

/// The engine's and the benchmark's own time per barrier on this machine,
/// beyond the messages, for section 3's recorded figures: fitted to one of
/// them (shuffle exchange at 2 nodes, 6.0 µs against LogP's 2.7), the other
/// ten 2-node rows are checks. Section 4 measures it in its own run
/// ([`RowParameters::engine_us`]); this is its fallback for a record from
/// before that.
pub const ENGINE_US: f64 = 3.3;

/// The file `--measure` writes: this machine's parameters and every
/// algorithm measured on the virtual cluster, from which section 4 is
/// rendered (so the model can be re-checked without measuring again).
const MEASURED_FILE: &str = "validation-measured.json";

/// This machine's parameters as `--measure` measures them: LogP and the
/// wake-up (the medians over every row's rounds, for the record; each row is
/// predicted from its own), and what a bridge's copies cost the sender.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Here {
    /// Busy-poll LogP between two nodes.
    pub logp: LogP,
    /// RTT/2 blocking minus busy, µs.
    pub wake: f64,
    /// The send call on hub and switch clusters of each measured size.
    pub send_cost: Vec<SendCost>,
    /// What each copy beyond the first costs the sender (the slopes).
    pub copy_cost: mcd_bench::logp::CopyCost,
}

/// The parameters measured just before one row's barriers, in one round.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RowParameters {
    /// LogP in a barrier's hops, on the row's endpoints and wait policy.
    pub logp: LogP,
    /// RTT/2 with both ends blocking minus RTT/2 under the rows' policy, µs.
    pub wake_us: f64,
    /// The engine's and the benchmark's own time per barrier beyond one hop,
    /// µs: a 2-node shuffle barrier (one message each way) in the paper's
    /// loop, minus the hop, both measured just before the row on a 2-node
    /// calibration cluster of their own ([`measure_engine`]). `None` in a
    /// record from before it was measured. Every row is predicted with the
    /// run's median of these ([`run_engine`]), not with its own.
    pub engine_us: Option<f64>,
}

impl RowParameters {
    /// The median of each parameter over `rounds` (each on its own: the
    /// parameters of no one round); `None` without rounds.
    pub fn median(rounds: &[RowParameters]) -> Option<RowParameters> {
        if rounds.is_empty() {
            return None;
        }
        let of = |f: fn(&RowParameters) -> f64| median(&rounds.iter().map(f).collect::<Vec<_>>());
        Some(RowParameters {
            logp: LogP { o_s: of(|p| p.logp.o_s), o_r: of(|p| p.logp.o_r), g: of(|p| p.logp.g), l: of(|p| p.logp.l) },
            wake_us: of(|p| p.wake_us),
            engine_us: None,
        })
    }
}

/// What `--measure` writes ([`MEASURED_FILE`]) and section 4 reads.
#[derive(serde::Serialize, serde::Deserialize)]
struct MeasuredRecord {
    /// The day of the measurement.
    measured: String,
    /// The machine it ran on ([`crate::machine`]).
    machine: String,
    /// Rounds of the whole measurement.
    rounds: usize,
    /// The machine's 1-minute load average at the start and after each
    /// round (`None` where it could not be read); absent from records made
    /// before it was kept.
    #[serde(default)]
    load_average: Option<Vec<Option<f64>>>,
    here: Here,
    rows: Vec<MeasuredRow>,
}

/// One algorithm on one cluster in a `--measure` record.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct MeasuredRow {
    topology: VTopology,
    /// Each round's mean, µs (absent from records made before rounds).
    #[serde(default)]
    rounds_mean_us: Vec<f64>,
    /// The parameters measured before the row in each round (absent from
    /// records made before they were measured per row: the run's serve).
    #[serde(default)]
    parameters_per_round: Vec<RowParameters>,
    /// The last round's measurement, its mean the median of the rounds'.
    measurement: BarrierMeasurement,
}

/// A measured row against the model (sections 3 and 4).
#[derive(Debug, serde::Serialize)]
struct ComparedRow {
    nodes: usize,
    /// The virtual cluster's network (section 4; section 3's rows are all on the switch).
    #[serde(skip_serializing_if = "Option::is_none")]
    topology: Option<VTopology>,
    algorithm: String,
    rails: usize,
    predicted_us: f64,
    /// Where processes outnumber the cores: the bounds (lower, upper), µs.
    bounds_us: Option<(f64, f64)>,
    measured_us: f64,
    #[serde(serialize_with = "as_text")]
    verdict: Verdict,
    /// Section 4: whether the row runs the engine's calibration again ([`repeats_calibration`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    repeats_calibration: Option<bool>,
}

/// Serializes `value` as its text (`Display`).
fn as_text<T: std::fmt::Display, S: serde::Serializer>(value: &T, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.collect_str(value)
}

/// The parameters measured before the rows of a `--measure` record, once
/// each: the switch rows' (a hub row carries a copy of its switch row's).
fn recorded_parameters(record: &MeasuredRecord) -> Vec<RowParameters> {
    record.rows.iter().filter(|r| r.topology == VTopology::Switch).flat_map(|r| r.parameters_per_round.iter().copied()).collect()
}

/// The engine's time per barrier for every row of a run: the median of all
/// its calibrations (the engine is the same software in every row, and one
/// calibration moves with the moment it is taken); `None` for a record from
/// before the engine was calibrated.
fn run_engine(parameters: &[RowParameters]) -> Option<f64> {
    let engines: Vec<f64> = parameters.iter().filter_map(|p| p.engine_us).collect();
    (!engines.is_empty()).then(|| median(&engines))
}

/// Ping-pongs per parameter measurement: a few tens of milliseconds each.
const HOP_SAMPLES: usize = 500;

/// LogP and the wake-up between nodes 0 and 1 of `cluster`, on the
/// endpoints its barrier rows open, in a barrier's hops
/// ([`mcd_bench::logp::measure_hops_on_cluster`]): under the rows' policy
/// (`Adaptive`), and blocking for the wake-up; the ping-pongs back to back
/// (30 µs of work between them, the paper's loop as the rows run it, made
/// the hop no cheaper: `mcd-logp --hops` shows both).
fn measure_row_parameters(cluster: &mcd_vcluster::Cluster) -> Result<RowParameters> {
    use mcd::WaitPolicy;
    use mcd_bench::logp::measure_hops_on_cluster;
    let hops = measure_hops_on_cluster(cluster, WaitPolicy::Adaptive, HOP_SAMPLES, std::time::Duration::ZERO)?;
    let blocked = measure_hops_on_cluster(cluster, WaitPolicy::Block, HOP_SAMPLES, std::time::Duration::ZERO)?;
    Ok(RowParameters { logp: hops.logp(), wake_us: (blocked.rtt_half.median - hops.rtt_half.median).max(0.0), engine_us: None })
}

/// Barriers timed per engine calibration: tens of milliseconds.
const ENGINE_BARRIERS: usize = 500;

/// The engine's and the benchmark's own time per barrier beyond one hop, on
/// the 2-node cluster `calibration` (not one of the rows'): the mean of a
/// shuffle-exchange barrier (one message each way, no multicast) in the
/// paper's loop under `Adaptive` waiting, minus the hop (o_s + o_r + L) of
/// a ping-pong measured right before it on the same nodes; at least 0.
/// It is what a 2-node barrier costs beyond its message: a number fitted to
/// the simplest barrier, once per row so that the run's median
/// ([`run_engine`]) sees the whole run, on a cluster that is not a row's.
fn measure_engine(calibration: &mcd_vcluster::Cluster) -> Result<f64> {
    anyhow::ensure!(calibration.nodes() == 2, "the engine is calibrated on 2 nodes, not {}", calibration.nodes());
    let hop = measure_row_parameters(calibration)?.logp;
    let mut bench = crate::paper_bench(2, 1.0);
    bench.iterations = ENGINE_BARRIERS;
    let m = mcd_bench::barrierbench::measure(calibration, barriers::BarrierConfig::new(Algorithm::ShuffleExchange), bench)?;
    Ok((m.mean_us - (hop.o_s + hop.o_r + hop.l)).max(0.0))
}

/// The engines section 4 tries, in steps of [`ENGINE_STEP_US`] from 0.
const ENGINE_STEPS: usize = 500;
/// See [`ENGINE_STEPS`].
const ENGINE_STEP_US: f64 = 0.01;

/// Whether a row at `n` nodes runs the engine's calibration again: at 2
/// nodes shuffle exchange and dissemination are one unicast each way, as
/// the calibration, and one-phase multicasts it.
fn repeats_calibration(a: Algorithm, n: usize) -> bool {
    n == 2 && matches!(a, Algorithm::ShuffleExchange | Algorithm::Dissemination | Algorithm::OnePhase)
}

/// Section 4's account of its verdicts: where processes ≤ cores, the
/// independent checks apart from the rows that repeat the calibration, and
/// the engines (`window`, per [`ENGINE_STEP_US`]) that keep them all within
/// 20% against the run's calibrations; beyond the cores, which rows pass
/// only within the bounds, and how far inside.
fn checks_and_bounds(rows: &[ComparedRow], window: &[bool], parameters: &[RowParameters]) -> String {
    let mut text = String::new();
    let fitting: Vec<&ComparedRow> = rows.iter().filter(|r| r.bounds_us.is_none()).collect();
    if !fitting.is_empty() {
        let within = |r: &&&ComparedRow| r.verdict != Verdict::Missed;
        let (repeats, checks): (Vec<&ComparedRow>, Vec<&ComparedRow>) = fitting.iter().partition(|r| r.repeats_calibration == Some(true));
        let _ = write!(
            text,
            "Where processes ≤ cores: {} of {} independent checks within 20%, and {} of {} rows that repeat the engine's \
             calibration. ",
            checks.iter().filter(within).count(),
            checks.len(),
            repeats.iter().filter(within).count(),
            repeats.len()
        );
        let passing: Vec<f64> = window.iter().enumerate().filter(|(_, &ok)| ok).map(|(i, _)| i as f64 * ENGINE_STEP_US).collect();
        let engines: Vec<f64> = parameters.iter().filter_map(|p| p.engine_us).collect();
        match (passing.first(), passing.last()) {
            (Some(lo), Some(hi)) => {
                let inside = engines.iter().filter(|&&e| *lo <= e && e <= *hi).count();
                let _ = write!(
                    text,
                    "All of them stay within 20% for an engine from {lo:.2} to {hi:.2} µs; {inside} of the run's {} \
                     calibrations lie in that window (the median serves every row). ",
                    engines.len()
                );
            }
            _ => {
                let _ = write!(text, "No one engine keeps them all within 20%. ");
            }
        }
    }
    let bounded: Vec<(f64, f64, f64)> =
        rows.iter().filter(|r| r.verdict == Verdict::Bounded).filter_map(|r| r.bounds_us.map(|(lo, hi)| (r.measured_us, lo, hi))).collect();
    if !bounded.is_empty() {
        let range = |f: fn(&(f64, f64, f64)) -> f64| bounded.iter().map(f).fold((f64::INFINITY, 0.0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
        let (above_low, width) = (range(|b| b.0 / b.1), range(|b| b.2 / b.1));
        let _ = write!(
            text,
            "Beyond the cores, {} of {} rows pass only within the bounds: measured {:.2} to {:.2}× the lower bound, \
             while the upper bound is {:.1} to {:.1}× the lower: these rows test the lower bound (the cores' sharing \
             alone), not the upper one.",
            bounded.len(),
            rows.iter().filter(|r| r.bounds_us.is_some()).count(),
            above_low.0,
            above_low.1,
            width.0,
            width.1
        );
    }
    text.push('\n');
    text
}

/// The `q` quantile of `values` ([`barriers::summary::quantile`]; NaN for none).
fn percentile(values: &[f64], q: f64) -> f64 {
    barriers::summary::quantile(&mut values.to_vec(), q)
}

/// The median of `values` ([`barriers::summary::median`]; NaN for none).
fn median(values: &[f64]) -> f64 {
    barriers::summary::median(&mut values.to_vec())
}

/// `--measure`: the bridges' copy costs, then every algorithm at `sizes` on
/// the virtual cluster, switch and hub, 1 and 2 rails, `rounds` times over
/// (the rounds one after the other, so that a burst of load from elsewhere
/// on this shared machine spoils one round of a few rows, not a row); each
/// row's figure is the median of its rounds' means. Before each algorithm
/// in each round, its parameters are measured on the switch cluster of its
/// size ([`measure_row_parameters`]), so that a row and the parameters it
/// is predicted from see the same load; the hub row, right after the
/// switch row, takes the same (a hub's unicast floods, which the model
/// charges on its own). Every cluster stays up for the whole run: no
/// namespace is built or cleaned up between rows. Written to
/// [`MEASURED_FILE`]. Needs root.
fn measure(out: &Path, sizes: &[usize], scale: f64, rounds: usize, stem: &str) -> Result<()> {
    use mcd_bench::barrierbench;
    use mcd_vcluster::{Cluster, ClusterSpec};
    anyhow::ensure!(sizes.len() <= 10, "at most 10 node counts (each keeps a cluster of its own up), not {}", sizes.len());
    let costs = mcd_bench::logp::send_costs(stem, sizes, 2000)?;
    let copy_cost = mcd_bench::logp::CopyCost::fit(&costs).context("the send cost at two sizes at least")?;
    let configs = crate::barrier_configs();
    let topologies = [VTopology::Switch, VTopology::Hub];
    let mut clusters = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let up = |top: VTopology| {
            let name = format!("{stem}{}{i}", if top == VTopology::Switch { "s" } else { "h" });
            Cluster::up_guarded(ClusterSpec::new(&mcd_vcluster::prefixed_name(&name), n).rails(2).topology(top))
        };
        clusters.push([up(VTopology::Switch)?, up(VTopology::Hub)?]);
    }
    let calibration = Cluster::up_guarded(ClusterSpec::new(&mcd_vcluster::prefixed_name(&format!("{stem}c")), 2))?;
    // Indexed [size][config][topology].
    let mut means = vec![vec![[Vec::new(), Vec::new()]; configs.len()]; sizes.len()];
    let mut params: Vec<Vec<Vec<RowParameters>>> = vec![vec![Vec::new(); configs.len()]; sizes.len()];
    let mut last: Vec<Vec<[Option<barrierbench::BarrierMeasurement>; 2]>> = vec![vec![[None, None]; configs.len()]; sizes.len()];
    let mut load = vec![load_average()];
    for round in 0..rounds.max(1) {
        for (si, &n) in sizes.iter().enumerate() {
            let bench = crate::paper_bench(n, scale);
            for (ci, &config) in configs.iter().enumerate() {
                let mut p = measure_row_parameters(&clusters[si][0])?;
                p.engine_us = Some(measure_engine(&calibration)?);
                params[si][ci].push(p);
                for (ti, vtop) in topologies.into_iter().enumerate() {
                    let m = barrierbench::measure(&clusters[si][ti], config, bench)?;
                    eprintln!(
                        "  round {round}: n={n} {vtop} {} rails={} mean {:.1} µs (o_s {:.2}, RTT/2 {:.2}, wake {:.1}, engine {:.2})",
                        config.algorithm,
                        config.rails,
                        m.mean_us,
                        p.logp.o_s,
                        p.logp.o_s + p.logp.o_r + p.logp.l,
                        p.wake_us,
                        p.engine_us.unwrap_or(f64::NAN)
                    );
                    means[si][ci][ti].push(m.mean_us);
                    last[si][ci][ti] = Some(m);
                }
            }
        }
        load.push(load_average());
    }
    drop(clusters);
    drop(calibration);
    let all: Vec<RowParameters> = params.iter().flatten().flatten().copied().collect();
    let overall = RowParameters::median(&all).context("no parameters measured")?;
    let here = Here { logp: overall.logp, wake: overall.wake_us, send_cost: costs, copy_cost };
    let mut rows = Vec::new();
    for si in 0..sizes.len() {
        for (ti, topology) in topologies.into_iter().enumerate() {
            for ci in 0..configs.len() {
                let Some(mut measurement) = last[si][ci][ti].take() else { continue };
                measurement.mean_us = median(&means[si][ci][ti]);
                let (rounds_mean_us, parameters_per_round) = (means[si][ci][ti].clone(), params[si][ci].clone());
                rows.push(MeasuredRow { topology, rounds_mean_us, parameters_per_round, measurement });
            }
        }
    }
    let record = MeasuredRecord { measured: crate::today(), machine: crate::machine(), rounds, load_average: Some(load), here, rows };
    std::fs::write(out.join(MEASURED_FILE), serde_json::to_string_pretty(&record)?)?;
    Ok(())
}

/// The machine's 1-minute load average (`/proc/loadavg`), if it can be read:
/// what else ran while this measured.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

/// The record in [`MEASURED_FILE`] under `results`.
fn measured_record(results: &Path) -> Result<MeasuredRecord> {
    let path = results.join(MEASURED_FILE);
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a `validate --measure` record", path.display()))
}

/// The copy costs recorded in [`MEASURED_FILE`], if any.
fn recorded_copy_cost(results: &Path) -> Option<mcd_bench::logp::CopyCost> {
    measured_record(results).ok().map(|r| r.here.copy_cost)
}

/// The model's topology for the virtual cluster's: its hub floods without collisions.
fn model_topology(topology: VTopology) -> Topology {
    match topology {
        VTopology::Switch => Topology::Switch,
        VTopology::Hub => Topology::FloodingBridge,
    }
}

/// Section 4: the measurements of [`MEASURED_FILE`] against the model.
fn measured(out: &Path, md: &mut String, json: &mut serde_json::Map<String, serde_json::Value>) -> Result<()> {
    let record = measured_record(out)?;
    let here = &record.here;
    let cores = mcd::host::online_cpus();
    let vc = VirtualCluster {
        logp: here.logp,
        cores,
        wake: here.wake,
        engine: ENGINE_US,
        fanout: here.copy_cost.delivered,
        flood: here.copy_cost.dropped,
        per_host: None,
    };
    let measured_params = recorded_parameters(&record);
    let engine_measured = run_engine(&measured_params);
    let engine_us = engine_measured.unwrap_or(ENGINE_US);
    writeln!(md, "## 4. mcd measured on the virtual cluster, switch and hub\n")?;
    writeln!(
        md,
        "Measured {} on {} by `mcd-bench validate --measure` (`results/{MEASURED_FILE}`): the paper's method, `Adaptive` \
         waiting, {} rounds one after the other (the machine's 1-minute load average at their starts and end: {}), \
         each row the median of its rounds' means; every algorithm on a learning bridge (switch) and a flooding one (hub), 1 and 2 rails, \
         every cluster up for the whole run. The parameters are measured in the same run, before every algorithm in every round, on \
         nodes 0 and 1 of the switch cluster of its size, with the rows' endpoints and wait policy (`Adaptive`), as a barrier's hops \
         see them: {HOP_SAMPLES} ping-pongs, o_s the send call of each ping (a send right after a receive, to a peer spinning \
         for it), o_r a receive of a message that has surely arrived, g from bursts, L = RTT/2 − o_s − o_r (at least 0), the \
         wake-up RTT/2 blocking minus RTT/2 under `Adaptive`. Each row (switch, then hub) is predicted from the medians of its \
         rounds' parameters; the *hop / wake-up / engine* column shows them (hop = o_s + o_r + L). The engine is the \
         barrier's own time beyond its messages: before every row, on a 2-node cluster of its own (not one of the rows'), \
         a shuffle-exchange barrier ({ENGINE_BARRIERS} in the paper's loop, one message each way) minus a ping-pong's hop \
         measured right before it on the same nodes; the engine being the same software in every row, every row is predicted \
         with the median of all the run's calibrations (a single one moves with the moment it is taken, as the 10th to 90th \
         percentiles below show). The engine is not measured apart from the barriers it predicts: it is what the simplest \
         barrier costs beyond a ping-pong's hop, one number fitted per run. At 2 nodes, shuffle exchange and dissemination \
         run that same plan (one unicast each way) and one-phase multicasts it: those rows repeat the calibration and test \
         only its repeatability. The other 2-node rows (an arrival and a release: two dependent hops) are the independent \
         check, of one claim: two hops cost two ping-pong hops plus the same engine; switch and hub get the same prediction \
         at 2 nodes, so each prediction is measured twice. Over all rows, the medians: {}; wake-up {:.1} µs; engine {}; {cores} cores.\n",
        record.measured,
        record.machine,
        record.rounds,
        record.load_average.as_ref().map_or("not recorded".to_string(), |l| l
            .iter()
            .map(|x| x.map_or("?".into(), |x| format!("{x:.1}")))
            .collect::<Vec<_>>()
            .join(", ")),
        crate::fmt_logp(&here.logp),
        here.wake,
        engine_measured.map_or(format!("not measured in this record ({ENGINE_US} µs as in section 3)"), |e| format!("{e:.2} µs"))
    )?;
    let loads: Vec<f64> = record.load_average.iter().flatten().flatten().copied().collect();
    let busiest = loads.iter().copied().fold(0.0, f64::max);
    if busiest > 2.0 * cores as f64 {
        writeln!(
            md,
            "**Load.** The 1-minute load average reached {busiest:.1} on {cores} cores. It counts the run's own nodes \
             (a 16-node row is 16 threads taking turns) as well as any other work on the machine, and cannot tell the \
             two apart: the rounds column below shows how far each row moved from round to round.\n"
        )?;
    }
    if !measured_params.is_empty() {
        let spread = |f: fn(&RowParameters) -> f64| {
            let v: Vec<f64> = measured_params.iter().map(f).collect();
            (percentile(&v, 0.1), percentile(&v, 0.9))
        };
        let (hop, wake) = (spread(|p| p.logp.o_s + p.logp.o_r + p.logp.l), spread(|p| p.wake_us));
        let engines: Vec<f64> = measured_params.iter().filter_map(|p| p.engine_us).collect();
        let engine = if engines.is_empty() {
            String::new()
        } else {
            format!(", the engine's calibrations {:.2} to {:.2} µs", percentile(&engines, 0.1), percentile(&engines, 0.9))
        };
        writeln!(
            md,
            "Across the run's {} parameter measurements (10th to 90th percentile): a hop {:.2} to {:.2} µs, the wake-up \
             {:.1} to {:.1} µs{engine}. The machine's load moved them; each row is predicted from its own hop and \
             wake-up, and the run's engine.\n",
            measured_params.len(),
            hop.0,
            hop.1,
            wake.0,
            wake.1,
        )?;
    }
    writeln!(
        md,
        "**The virtual hub.** A Linux bridge with ageing time 0 floods every frame to every port, without a \
         shared medium: no collisions, so not the paper's CSMA/CD hub. On veth the bridge copies in the sender's \
         context: each copy crosses a veth pair and runs the receiving namespace's socket filter (which drops \
         it as `PACKET_OTHERHOST` unless it is addressed there) before the send call returns. So the sender pays \
         per port, and the other nodes' processes pay nothing. Measured (node 0 timing isolated send calls while \
         every other node holds an endpoint; median µs, [p10, p90]):\n"
    )?;
    writeln!(md, "| ports | bridge | unicast send | multicast send |")?;
    writeln!(md, "|---:|---|---:|---:|")?;
    let stat = |s: &mcd_bench::logp::Stat| format!("{:.2} [{:.2}, {:.2}]", s.median, s.p10, s.p90);
    for c in &here.send_cost {
        writeln!(md, "| {} | {} | {} | {} |", c.ports, c.topology, stat(&c.unicast), stat(&c.multicast))?;
    }
    writeln!(
        md,
        "\nThe slopes over the ports beyond the first: a copy the receiving kernel drops (the hub's unicasts) costs \
         the sender **{:.2} µs**, a copy delivered into a receiver's ring (every multicast, on either bridge) \
         **{:.2} µs**. The model times the virtual hub as the switch (`Topology::FloodingBridge`) and charges the \
         sender (n − 2) × the first for every unicast on it (`Setup::flood_us`) and (n − 2) × the second for \
         every multicast on either bridge (`Setup::fanout_us`). The other nodes' processes pay nothing for a \
         dropped copy: their kernel's share of it is in the sender's send call.\n",
        here.copy_cost.dropped, here.copy_cost.delivered
    )?;
    writeln!(
        md,
        "| nodes | network | algorithm | rails | hop / wake-up / engine µs | predicted µs | bounds µs | measured µs | rounds µs | error | verdict |"
    )?;
    writeln!(md, "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|")?;
    let mut rows = Vec::new();
    // Engines (0.01 µs steps) that keep every row within the cores within 20%.
    let mut engine_window = vec![true; ENGINE_STEPS + 1];
    for r in &record.rows {
        let m = &r.measurement;
        let (n, rails, mean, top) = (m.nodes, m.rails, m.mean_us, r.topology);
        let a: Algorithm = m.algorithm.parse().map_err(anyhow::Error::msg)?;
        // The row's own parameters (a record from before they were measured per row: the run's).
        let p = RowParameters::median(&r.parameters_per_round).unwrap_or(RowParameters { logp: here.logp, wake_us: here.wake, engine_us: None });
        let vc = VirtualCluster { logp: p.logp, wake: p.wake_us, engine: engine_us, ..vc };
        let est = vc.estimate(a, n, rails, model_topology(top), 30.0);
        if est.bounds.is_none() {
            for (i, ok) in engine_window.iter_mut().enumerate() {
                let with = VirtualCluster { engine: i as f64 * ENGINE_STEP_US, ..vc };
                *ok &= err(with.estimate(a, n, rails, model_topology(top), 30.0).predicted.mean_cost, mean).abs() <= 20.0;
            }
        }
        let verdict = est.verdict(mean);
        let e = err(est.predicted.mean_cost, mean);
        let rounds = &r.rounds_mean_us;
        let spread = rounds.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        let spread = if rounds.is_empty() { "–".to_string() } else { format!("{:.1} – {:.1}", spread.0, spread.1) };
        writeln!(
            md,
            "| {n} | {top} | {a} | {rails} | {:.2} / {:.1} / {:.2} | {:.1} | {} | {mean:.1} | {spread} | {e:+.0}% | {verdict} |",
            p.logp.o_s + p.logp.o_r + p.logp.l,
            p.wake_us,
            engine_us,
            est.predicted.mean_cost,
            bounds_cell(est.bounds)
        )?;
        rows.push(ComparedRow {
            nodes: n,
            topology: Some(top),
            algorithm: a.to_string(),
            rails,
            predicted_us: est.predicted.mean_cost,
            bounds_us: est.bounds,
            measured_us: mean,
            verdict,
            repeats_calibration: Some(repeats_calibration(a, n)),
        });
    }
    let (ok, total) = (rows.iter().filter(|r| r.verdict != Verdict::Missed).count(), rows.len());
    let worst_spread = record
        .rows
        .iter()
        .filter_map(|r| {
            let rounds = &r.rounds_mean_us;
            let lo = rounds.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = rounds.iter().copied().fold(0.0, f64::max);
            (lo > 0.0).then(|| hi / lo)
        })
        .fold(1.0, f64::max);
    let of = |top: VTopology| -> Vec<&ComparedRow> { rows.iter().filter(|r| r.topology == Some(top)).collect() };
    let (switch, hub) = (Summary::of(&of(VTopology::Switch)), Summary::of(&of(VTopology::Hub)));
    writeln!(
        md,
        "\n**{ok} of {total}** within the goal (20% where processes ≤ cores, 35% beyond) or within the stated bounds. \
         Point predictions where processes ≤ cores within 20%: switch {}, hub {}; beyond the cores within 35%: \
         switch {} (errors {}), hub {} (errors {}). {} {}\n",
        switch.fitting,
        hub.fitting,
        switch.beyond,
        switch.range,
        hub.beyond,
        hub.range,
        switch.misses("On the switch, the point prediction misses by more than 35%"),
        hub.misses("On the hub, the point prediction misses by more than 35%")
    )?;
    writeln!(md, "{}", checks_and_bounds(&rows, &engine_window, &recorded_parameters(&record)))?;
    let fitting_misses: Vec<&ComparedRow> = rows.iter().filter(|r| r.bounds_us.is_none() && r.verdict == Verdict::Missed).collect();
    let too_slow = fitting_misses.iter().filter(|r| r.predicted_us > r.measured_us).count();
    if !fitting_misses.is_empty() {
        writeln!(
            md,
            "Where processes ≤ cores, {} of {} rows miss 20%, {too_slow} of them predicted too slow: there the prediction \
             is the row's dependent hops, each the ping-pong's hop measured just before it, plus the engine's time \
             measured beside it.\n",
            fitting_misses.len(),
            rows.iter().filter(|r| r.bounds_us.is_none()).count()
        )?;
    }
    writeln!(
        md,
        "Not modelled, and what it does here: whatever slows one round and not the next (other work on a shared \
         machine, the scheduler's placement of the nodes' threads, a vCPU's host): a row's slowest round took up to \
         {worst_spread:.1}× its fastest here (the rounds column); the median of the rounds keeps most of it out, not all. \
         Beyond the cores, the scheduler: the model's \
         turns (a process runs until it waits, each change a wake-up) stand in for the kernel's choice among \
         yielding processes. Lost frames and their recovery are not modelled (none are injected here).\n"
    )?;
    for r in rows.iter().filter(|r| r.verdict == Verdict::Missed) {
        writeln!(
            md,
            "- missed: {} nodes, {}, {} on {} rail(s): predicted {:.1}, measured {:.1} µs",
            r.nodes,
            r.topology.map_or(String::new(), |t| t.to_string()),
            r.algorithm,
            r.rails,
            r.predicted_us,
            r.measured_us
        )?;
    }
    let panels: Vec<Panel> = [VTopology::Switch, VTopology::Hub]
        .into_iter()
        .map(|top| Panel { title: format!("{top}, 1 rail, {cores} cores"), series: measured_series(&rows, top) })
        .collect();
    plot::nodes_vs_time(&out.join("validation-measured"), "mcd on the virtual cluster, switch and hub: measured (solid), model (dashed)", &panels)?;
    writeln!(md, "\nPlot: [validation-measured.svg](validation-measured.svg) / [.png](validation-measured.png).\n")?;
    json.insert("measured".into(), serde_json::to_value(&rows)?);
    json.insert("measured_parameters".into(), serde_json::to_value(here)?);
    Ok(())
}

/// What a table of compared rows says, in words.
struct Summary {
    /// "k of m" rows where processes ≤ cores within 20%.
    fitting: String,
    /// "k of m" rows beyond the cores within 35%.
    beyond: String,
    /// The range of the errors beyond the cores.
    range: String,
    /// The rows beyond the cores outside 35%: (algorithm, error %).
    outside: Vec<(String, f64)>,
    /// How many of those the bounds hold.
    bounded: usize,
}

impl Summary {
    fn of(rows: &[&ComparedRow]) -> Summary {
        let error = |r: &ComparedRow| err(r.predicted_us, r.measured_us);
        let (fit, over): (Vec<&ComparedRow>, Vec<&ComparedRow>) = rows.iter().partition(|r| r.bounds_us.is_none());
        let within = |of: &[&ComparedRow], goal: f64| of.iter().filter(|r| error(r).abs() <= goal).count();
        let errors: Vec<f64> = over.iter().map(|r| error(r)).collect();
        let (lo, hi) = errors.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &e| (lo.min(e), hi.max(e)));
        let mut outside: Vec<(String, f64)> = Vec::new();
        let mut bounded = 0;
        for r in over.iter().filter(|r| error(r).abs() > 35.0) {
            let rails = if r.rails == 1 { String::new() } else { format!(" on {} rails", r.rails) };
            outside.push((format!("{} at {}{rails}", r.algorithm, r.nodes), error(r)));
            bounded += usize::from(r.verdict == Verdict::Bounded);
        }
        Summary {
            fitting: format!("{} of {}", within(&fit, 20.0), fit.len()),
            beyond: format!("{} of {}", within(&over, 35.0), over.len()),
            range: if errors.is_empty() { "none".into() } else { format!("{lo:+.0}% to {hi:+.0}%") },
            outside,
            bounded,
        }
    }

    /// `lead`, then the rows outside 35% and what they have in common; or
    /// that there are none.
    fn misses(&self, lead: &str) -> String {
        if self.outside.is_empty() {
            return "No point prediction beyond the cores misses by more than 35%.".into();
        }
        let list: Vec<String> = self.outside.iter().map(|(n, e)| format!("{n} {e:+.0}%")).collect();
        let over = self.outside.iter().filter(|(_, e)| *e > 0.0).count();
        let why = if over * 2 >= self.outside.len() {
            "Mostly overestimates, of algorithms with many dependent hops: with `Adaptive` waiting a change of \
             process is mostly a yield to a runnable peer, cheaper than the wake-up from sleep the model charges"
        } else {
            "Mostly underestimates: the model has no other load on the machine and no scheduler delay beyond one \
             wake-up per change of process"
        };
        format!(
            "{lead} for {}: {}. Telling yields from sleeps (a scheduler model with run queues and the spin–yield–sleep \
             policy) is what would close this, and is not built; the bounds hold {} of these {}.",
            list.join(", "),
            why,
            self.bounded,
            self.outside.len()
        )
    }
}

fn bounds_cell(bounds: Option<(f64, f64)>) -> String {
    bounds.map_or("–".into(), |(lo, hi)| format!("{lo:.0} – {hi:.0}"))
}

/// Measured (solid) and predicted (dashed) per algorithm, 1 rail, of the
/// rows on `topology` (all rows when `None`).
fn measured_series(rows: &[ComparedRow], topology: VTopology) -> Vec<Series> {
    let mine: Vec<&ComparedRow> = rows.iter().filter(|r| r.rails == 1 && r.topology.is_none_or(|t| t == topology)).collect();
    let mut names: Vec<&str> = Vec::new();
    for r in &mine {
        if !names.contains(&r.algorithm.as_str()) {
            names.push(&r.algorithm);
        }
    }
    let mut series = Vec::new();
    for name in names {
        let pts = |of: fn(&ComparedRow) -> f64| -> Vec<(f64, f64)> {
            mine.iter().filter(|r| r.algorithm == name).map(|r| (r.nodes as f64, of(r))).collect()
        };
        series.push(Series { label: format!("{name} measured"), points: pts(|r| r.measured_us), dashed: false, key: name.to_string() });
        series.push(Series { label: format!("{name} predicted"), points: pts(|r| r.predicted_us), dashed: true, key: name.to_string() });
    }
    series
}

/// The model against the measurements already recorded in
/// `results/barriers.json` (by `mcd-bench barriers`) with the parameters of
/// `results/logp.json`: no new measurement.
pub fn recorded(results: &Path, md: &mut String, json: &mut serde_json::Map<String, serde_json::Value>) -> Result<()> {
    let logp_path = results.join("logp.json");
    let p = mcd_bench::logp::load_or_measure(Some(&logp_path))?;
    /// What this reads of a `logp.json` measurement.
    #[derive(serde::Deserialize)]
    struct Hop {
        transport: mcd_bench::pingpong::Transport,
        wait: String,
        rtt_half: mcd_bench::logp::Stat,
    }
    let all: Vec<Hop> = serde_json::from_str(&std::fs::read_to_string(&logp_path)?).with_context(|| format!("{}", logp_path.display()))?;
    let rtt = |w: &str| all.iter().find(|m| m.transport == mcd_bench::pingpong::Transport::Mcd && m.wait == w).map(|m| m.rtt_half.median);
    let wake = match (rtt("block"), rtt("busy")) {
        (Some(b), Some(a)) => (b - a).max(0.0),
        _ => 20.0,
    };
    let rows: Vec<BarrierMeasurement> =
        serde_json::from_str(&std::fs::read_to_string(results.join("barriers.json")).context("results/barriers.json")?)
            .context("results/barriers.json")?;
    let measured_on = std::fs::read_to_string(results.join("barriers.md"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("Measured"))
                .map(|l| l.trim_start_matches("Measured ").split(" by ").next().unwrap_or("").trim_end_matches([',', ' ']).to_string())
        })
        .unwrap_or_default();
    let cores = mcd::host::online_cpus();
    let copies = recorded_copy_cost(results);
    let vc = VirtualCluster { logp: p, cores, wake, engine: ENGINE_US, fanout: copies.map_or(0.0, |c| c.delivered), flood: 0.0, per_host: None };
    writeln!(md, "## 3. mcd measured on the virtual cluster (recorded)\n")?;
    writeln!(
        md,
        "The measurements of `results/barriers.json` (measured {measured_on}; switch, 1 and 2 rails, the paper's \
         method, `Adaptive` waiting) against the model with `results/logp.json`'s parameters ({}; wake-up {wake:.1} µs = \
         RTT/2 blocking − busy): `VirtualCluster`, n processes taking turns on {cores} cores, each change of process a wake-up, \
         {ENGINE_US} µs of the engine's own work per barrier (fitted to the 2-node shuffle row, the one fitted \
         number here), {}, the paper's loop. Where processes > cores, *bounds*: below, the same turns with free changes (the cores' \
         sharing alone); above, every message also paying a wake-up at both ends, shared over the cores.\n",
        crate::fmt_logp(&p),
        match copies {
            Some(c) => format!(
                "each multicast costing its sender {:.2} µs per receiver beyond the first (the bridge's copy, measured in section 4)",
                c.delivered
            ),
            None => "no cost of the bridge's copies (not measured yet: `validate --measure`)".to_string(),
        }
    )?;
    writeln!(md, "| nodes | algorithm | rails | predicted µs | bounds µs | measured µs | error | verdict |")?;
    writeln!(md, "|---:|---|---:|---:|---:|---:|---:|---|")?;
    let mut out = Vec::new();
    let (mut ok, mut total) = (0, 0);
    for r in &rows {
        let (n, rails, measured) = (r.nodes, r.rails, r.mean_us);
        // Rows of other contenders than mcd's algorithms are not the model's.
        let Ok(a) = r.algorithm.parse::<Algorithm>() else { continue };
        let est = vc.estimate(a, n, rails, Topology::Switch, 30.0);
        let verdict = est.verdict(measured);
        let (pr, bound) = (est.predicted, est.bounds);
        let e = err(pr.mean_cost, measured);
        total += 1;
        ok += usize::from(verdict != Verdict::Missed);
        writeln!(md, "| {n} | {a} | {rails} | {:.1} | {} | {measured:.1} | {e:+.0}% | {verdict} |", pr.mean_cost, bounds_cell(bound))?;
        out.push(ComparedRow {
            nodes: n,
            topology: None,
            algorithm: a.to_string(),
            rails,
            predicted_us: pr.mean_cost,
            bounds_us: bound,
            measured_us: measured,
            verdict,
            repeats_calibration: None,
        });
    }
    let summary = Summary::of(&out.iter().collect::<Vec<_>>());
    writeln!(
        md,
        "\n**{ok} of {total}** within the goal (20% where processes ≤ cores, 35% beyond) or within the stated bounds. \
         Where processes ≤ cores, {} point predictions within 20% (with the one fitted engine constant). Beyond \
         the cores, {} within 35% (errors {}). There the cores are shared in turns: a process given the core takes \
         every message waiting for it and runs until it waits again; each change of process costs the measured \
         wake-up. {}\n",
        summary.fitting,
        summary.beyond,
        summary.range,
        summary.misses("The point prediction misses by more than 35%")
    )?;
    protocol_rows(md, json, &rows, &p)?;
    let series = measured_series(&out, VTopology::Switch);
    plot::nodes_vs_time(
        &results.join("validation-vcluster"),
        "mcd on the virtual cluster (recorded): measured (solid), model (dashed)",
        &[Panel { title: format!("switch, 1 rail, {cores} cores"), series }],
    )?;
    writeln!(md, "Plot: [validation-vcluster.svg](validation-vcluster.svg) / [.png](validation-vcluster.png).\n")?;
    json.insert("recorded".into(), serde_json::to_value(&out)?);
    Ok(())
}

/// A row of section 3 predicted by the plan simulator and the real protocol.
#[derive(serde::Serialize)]
struct ProtocolRow {
    nodes: usize,
    algorithm: String,
    plan_us: f64,
    protocol_us: f64,
    measured_us: f64,
}

/// Section 3's rows (1 rail) predicted by the simulator that runs the real
/// protocol (`barriers::model::protocol`, lossless, the paper's loop: 30 µs
/// of work) beside the plan simulator with the same parameters, and both
/// against the measurement, each plus the engine's fitted time.
fn protocol_rows(md: &mut String, json: &mut serde_json::Map<String, serde_json::Value>, rows: &[BarrierMeasurement], p: &LogP) -> Result<()> {
    use barriers::model::protocol::{self, Scenario};
    let setup = Setup::logp(p);
    writeln!(
        md,
        "\n**The real protocol.** The same rows (1 rail) predicted by the simulator that runs the real protocol core, a core per \
         node (`barriers::model::protocol`, lossless, the paper's loop), beside the plan simulator with the same parameters (pure LogP \
         on a switch: no wake-ups, no shared cores), each plus the engine's {ENGINE_US} µs; *protocol / plan* is the real protocol's \
         time against the plans' (the goal: within 5%). Where processes outnumber the cores, both are lower bounds of the measurement \
         (they charge no sharing of the cores).\n"
    )?;
    writeln!(md, "| nodes | algorithm | plan simulator µs | real protocol µs | protocol / plan | measured µs | error (real protocol) |")?;
    writeln!(md, "|---:|---|---:|---:|---:|---:|---:|")?;
    let mut out = Vec::new();
    for r in rows.iter().filter(|r| r.rails == 1) {
        let (n, measured) = (r.nodes, r.mean_us);
        let Ok(a) = r.algorithm.parse::<Algorithm>() else { continue };
        let plan = model::steady_state(a, n, 1, &setup, 200, 30.0).mean_cost + ENGINE_US;
        let mut s = Scenario::new(a, n, setup, 200);
        s.work_us = 30.0;
        let real = protocol::run(&s).map_err(anyhow::Error::msg)?.mean_cost_us + ENGINE_US;
        let e = err(real, measured);
        writeln!(md, "| {n} | {a} | {plan:.1} | {real:.1} | {:+.1}% | {measured:.1} | {e:+.0}% |", (real / plan - 1.0) * 100.0)?;
        out.push(ProtocolRow { nodes: n, algorithm: a.to_string(), plan_us: plan, protocol_us: real, measured_us: measured });
    }
    writeln!(md)?;
    json.insert("recorded_protocol".into(), serde_json::to_value(&out)?);
    Ok(())
}

/// `mcd-bench validate`: with `measure` (sizes, scale), first measures on
/// the virtual cluster (clusters named after `stem`).
pub fn run(out: &Path, measure: Option<(&[usize], f64, usize)>, stem: &str) -> Result<()> {
    if let Some((sizes, scale, rounds)) = measure {
        self::measure(out, sizes, scale, rounds, stem)?;
    }
    let mut md = String::new();
    let mut json = serde_json::Map::new();
    writeln!(md, "# The cost model, validated\n")?;
    writeln!(md, "Written by `cargo run --release -p mcd-bench -- validate` on {}.\n", crate::today())?;
    paper(out, &mut md, &mut json)?;
    scale(out, &mut md, &mut json)?;
    if let Err(e) = recorded(out, &mut md, &mut json) {
        writeln!(md, "## 3. mcd measured on the virtual cluster (recorded)\n\nNo recorded measurements to compare: {e:#}\n")?;
    }
    if out.join(MEASURED_FILE).exists() {
        measured(out, &mut md, &mut json)?;
    } else {
        writeln!(
            md,
            "## 4. mcd measured on the virtual cluster, switch and hub\n\nNot measured yet: `mcd-bench validate --measure --nodes 2,4,8,16` (root) \
             measures every algorithm on switch and hub, 1 and 2 rails, into `results/{MEASURED_FILE}`, and this section compares them.\n"
        )?;
    }
    std::fs::write(out.join("validation.md"), &md)?;
    std::fs::write(out.join("validation.json"), serde_json::to_string_pretty(&serde_json::Value::Object(json))?)?;
    print!("{md}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(nodes: usize, algorithm: &str, rails: usize, predicted: f64, measured: f64, bounds: Option<(f64, f64)>, verdict: Verdict) -> ComparedRow {
        ComparedRow {
            nodes,
            topology: None,
            algorithm: algorithm.to_string(),
            rails,
            predicted_us: predicted,
            bounds_us: bounds,
            measured_us: measured,
            verdict,
            repeats_calibration: None,
        }
    }

    #[test]
    fn the_summary_counts_and_names_what_it_claims() {
        let rows = [
            row(2, "shuffle", 1, 10.0, 11.0, None, Verdict::Within(20.0)),
            row(2, "tree2", 1, 10.0, 15.0, None, Verdict::Missed),
            row(8, "tree2", 1, 200.0, 100.0, Some((80.0, 300.0)), Verdict::Bounded),
            row(8, "tree3", 2, 100.0, 400.0, Some((80.0, 300.0)), Verdict::Missed),
            row(16, "concurrent", 1, 330.0, 300.0, Some((200.0, 600.0)), Verdict::Within(35.0)),
        ];
        let rows: Vec<&ComparedRow> = rows.iter().collect();
        let s = Summary::of(&rows);
        assert_eq!((s.fitting.as_str(), s.beyond.as_str(), s.range.as_str()), ("1 of 2", "1 of 3", "-75% to +100%"));
        let text = s.misses("Misses");
        assert!(text.contains("tree2 at 8 +100%") && text.contains("tree3 at 8 on 2 rails -75%"), "{text}");
        assert!(text.contains("the bounds hold 1 of these 2"), "{text}");
        let none = Summary::of(&rows[..1]);
        assert_eq!(none.range, "none");
        assert!(none.misses("Misses").starts_with("No point prediction"));
    }

    #[test]
    fn row_parameters_are_the_median_of_each_over_the_rounds() {
        let p = |o_s: f64, g: f64, wake_us: f64| RowParameters { logp: LogP { o_s, o_r: 0.1, g, l: 0.0 }, wake_us, engine_us: None };
        // Each parameter's own median: here from three different rounds.
        let rounds = [p(4.0, 9.0, 20.0), p(2.5, 2.6, 30.0), p(9.0, 3.0, 5.0)];
        assert_eq!(RowParameters::median(&rounds), Some(p(4.0, 3.0, 20.0)));
        // One disturbed round of five moves nothing.
        let steady = [p(2.6, 2.6, 8.0), p(2.7, 2.6, 8.0), p(2.6, 2.7, 8.0), p(30.0, 40.0, 90.0), p(2.6, 2.6, 8.0)];
        assert_eq!(RowParameters::median(&steady), Some(p(2.6, 2.6, 8.0)));
        // An even count takes the upper of the middle two; none gives none.
        assert_eq!(RowParameters::median(&rounds[..2]), Some(p(4.0, 9.0, 30.0)));
        assert_eq!(RowParameters::median(&[]), None);
    }

    #[test]
    fn the_runs_engine_is_the_median_of_its_switch_rows_calibrations() {
        let params = |engines: &[Option<f64>]| -> serde_json::Value {
            engines
                .iter()
                .map(|&e| serde_json::json!({ "logp": { "o_s": 2.6, "o_r": 0.1, "g": 2.6, "L": 0.0 }, "wake_us": 20.0, "engine_us": e }))
                .collect()
        };
        // A record as `--measure` writes it, but for the rows' parameters.
        let record = |rows: serde_json::Value| -> MeasuredRecord {
            let measurement = serde_json::json!({ "algorithm": "shuffle", "method": "paper", "rails": 1, "nodes": 2, "iterations": 10,
                "min_us": 1.0, "mean_us": 2.0, "max_us": 3.0, "p50_us": 2.0, "p99_us": 3.0, "p999_us": 3.0, "recoveries": 0 });
            let rows: Vec<serde_json::Value> = rows
                .as_array()
                .expect("rows")
                .iter()
                .map(|r| {
                    let mut r = r.clone();
                    r["measurement"] = measurement.clone();
                    r
                })
                .collect();
            let here = serde_json::json!({ "logp": { "o_s": 2.6, "o_r": 0.1, "g": 2.6, "L": 0.0 }, "wake": 20.0, "send_cost": [],
                "copy_cost": { "dropped": 0.1, "delivered": 0.2 } });
            serde_json::from_value(serde_json::json!({ "measured": "today", "machine": "here", "rounds": 2, "here": here, "rows": rows }))
                .expect("a record")
        };
        let runs = record(serde_json::json!([
            { "topology": "switch", "parameters_per_round": params(&[Some(1.0), Some(3.0)]) },
            // A hub row carries a copy of its switch row's: not counted again.
            { "topology": "hub", "parameters_per_round": params(&[Some(9.0), Some(9.0)]) },
            { "topology": "switch", "parameters_per_round": params(&[Some(0.8), None]) },
        ]));
        let recorded = recorded_parameters(&runs);
        assert_eq!(recorded.len(), 4);
        assert_eq!(run_engine(&recorded), Some(1.0), "the median of 1.0, 3.0 and 0.8");
        // A record from before the engine was calibrated: none (section 3's figure then).
        let old = record(serde_json::json!([{ "topology": "switch",
            "parameters_per_round": [{ "logp": { "o_s": 2.6, "o_r": 0.1, "g": 2.6, "L": 0.0 }, "wake_us": 20.0 }] }]));
        assert_eq!(run_engine(&recorded_parameters(&old)), None);
        // And from before the parameters were measured per row: none at all.
        let older = record(serde_json::json!([{ "topology": "switch" }]));
        assert!(recorded_parameters(&older).is_empty());
        assert!(older.load_average.is_none());
    }

    #[test]
    fn a_measured_record_missing_a_field_is_refused_not_read_as_zero() {
        let measurement = serde_json::json!({ "algorithm": "shuffle", "method": "paper", "rails": 1, "nodes": 2, "iterations": 10,
            "min_us": 1.0, "max_us": 3.0, "p50_us": 2.0, "p99_us": 3.0, "p999_us": 3.0, "recoveries": 0 });
        let row = serde_json::json!({ "topology": "switch", "measurement": measurement });
        let e = serde_json::from_value::<MeasuredRow>(row).expect_err("no mean_us");
        assert!(e.to_string().contains("missing field `mean_us`"), "{e}");
    }

    #[test]
    fn only_two_node_one_message_rows_repeat_the_calibration() {
        assert!(repeats_calibration(Algorithm::ShuffleExchange, 2));
        assert!(repeats_calibration(Algorithm::OnePhase, 2));
        assert!(!repeats_calibration(Algorithm::ShuffleExchange, 4));
        assert!(!repeats_calibration(Algorithm::Concurrent, 2));
    }

    #[test]
    fn the_account_separates_checks_from_repeats_and_bounds_from_points() {
        let row = |a: &str, n: usize, verdict: Verdict, bounds: Option<(f64, f64)>, measured: f64| ComparedRow {
            repeats_calibration: Some(repeats_calibration(a.parse().unwrap(), n)),
            ..row(n, a, 1, 0.0, measured, bounds, verdict)
        };
        let rows = [
            row("shuffle", 2, Verdict::Within(20.0), None, 4.0),
            row("tree2", 2, Verdict::Within(20.0), None, 8.0),
            row("tree4", 2, Verdict::Missed, None, 8.0),
            row("tree2", 8, Verdict::Bounded, Some((100.0, 500.0)), 150.0),
            row("tree2", 8, Verdict::Within(35.0), Some((100.0, 400.0)), 120.0),
        ];
        let mut window = vec![false; ENGINE_STEPS + 1];
        window[80..=150].iter_mut().for_each(|w| *w = true);
        let p = |e: f64| RowParameters { logp: LogP::REFERENCE, wake_us: 20.0, engine_us: Some(e) };
        let text = checks_and_bounds(&rows, &window, &[p(0.5), p(1.0), p(1.2), p(2.0)]);
        assert!(text.contains("1 of 2 independent checks within 20%, and 1 of 1 rows that repeat"), "{text}");
        assert!(text.contains("from 0.80 to 1.50 µs; 2 of the run's 4 calibrations"), "{text}");
        assert!(text.contains("1 of 2 rows pass only within the bounds: measured 1.50 to 1.50× the lower bound"), "{text}");
        assert!(text.contains("5.0 to 5.0× the lower"), "{text}");
        let none = checks_and_bounds(&rows, &vec![false; ENGINE_STEPS + 1], &[]);
        assert!(none.contains("No one engine keeps them all within 20%"), "{none}");
    }

    #[test]
    fn the_virtual_hub_is_modelled_as_a_flooding_bridge() {
        assert_eq!(model_topology(VTopology::Switch), Topology::Switch);
        assert_eq!(model_topology(VTopology::Hub), Topology::FloodingBridge);
    }
}
