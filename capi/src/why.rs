//! Why a barrier and its collectives run the algorithms they do, in words
//! (`mcd_why`, `mcd_group_why`; the MPI interposer's report prints it): a
//! named algorithm says who named it; `auto`'s pick says by what rule, and
//! gives the model's prediction for it beside the next best candidates.
//! The picks are the ones [`JobPolicy::barrier_config`] and
//! [`JobPolicy::collective_config`] make, recomputed here (on demand: the
//! predictions simulate every candidate).

use barriers::model::{self, Host, Prediction, Setup};
use barriers::policy::{CollectiveAlgorithm, HostShape};
use barriers::{plan, Algorithm, Collective, Dtype, JobPolicy, Op};

/// How many runners-up the explanation lists beside the pick.
const RUNNERS_UP: usize = 3;

/// The barrier's algorithm and why, under `policy`, for `size` nodes on
/// `rails` rails on hosts of shape `host`.
pub(crate) fn barrier(policy: &JobPolicy, size: usize, rails: usize, host: HostShape) -> String {
    if let Some(named) = policy.algorithm {
        return format!("barrier {named} (named: MCD_ALGORITHM or mcd_params.algorithm)");
    }
    let shared = host.local_processes > host.cores;
    let setup = Setup::logp(&policy.logp());
    let ranked = rank(model::candidates(true), shared, |a| model::predict(a, size, rails, &setup));
    format!("barrier {}", explain(&ranked, size, host, shared))
}

/// The collectives' algorithm and why (as [`JobPolicy::collective_config`]
/// picks it: `MCD_COLLECTIVE_ALGORITHM`, else the barrier's if it was named
/// and reduces, else `auto`'s pick among the algorithms that reduce, priced
/// for a one-element reduction).
/// A reduce among 3 to [`plan::REDUCE_GATHER_MAX`] ranks runs its own
/// plan whatever the algorithm, and the text says so.
pub(crate) fn collectives(policy: &JobPolicy, size: usize, rails: usize, host: HostShape) -> String {
    let text = collectives_pick(policy, size, rails, host);
    if plan::reduce_gathers(size) {
        format!(
            "{text}; reduce: gathers first (its own plan among 3 to {} ranks: every rank's contribution straight to the root)",
            plan::REDUCE_GATHER_MAX
        )
    } else {
        text
    }
}

/// The collectives' algorithm and why, as [`collectives`] without the reduce's plan.
fn collectives_pick(policy: &JobPolicy, size: usize, rails: usize, host: HostShape) -> String {
    let reduce = Collective::Allreduce { op: Op::Sum, dtype: Dtype::F64 };
    match policy.collective_algorithm {
        CollectiveAlgorithm::Named(named) => return format!("collectives {named} (named: MCD_COLLECTIVE_ALGORITHM)"),
        CollectiveAlgorithm::Auto => {}
        CollectiveAlgorithm::AsTheJob => {
            if let Some(a) = policy.algorithm.filter(|&a| reduce.runs_on(a)) {
                return format!("collectives {a} (the barrier's, named, and it reduces)");
            }
        }
    }
    let shared = host.local_processes > host.cores;
    let setup = Setup::logp(&policy.logp());
    let setup = if shared { Setup { host: Host::DEDICATED, ..setup } } else { setup };
    let candidates = model::candidates(true).into_iter().filter(|&a| reduce.runs_on(a)).collect();
    let ranked = rank(candidates, shared, |a| model::collective_cost(a, size, rails, &setup, 8));
    format!("collectives {}", explain(&ranked, size, host, shared))
}

/// The candidates with their predictions, best first by `auto`'s rule: the
/// lowest predicted time; on a `shared` host, the fewest deliveries first.
/// Ties keep the candidates' order, as `auto` does.
fn rank(candidates: Vec<Algorithm>, shared: bool, predict: impl Fn(Algorithm) -> Prediction) -> Vec<(Algorithm, Prediction)> {
    let mut ranked: Vec<(Algorithm, Prediction)> = candidates.into_iter().map(|a| (a, predict(a))).collect();
    if shared {
        ranked.sort_by(|(_, a), (_, b)| (a.deliveries, a.last_exit).partial_cmp(&(b.deliveries, b.last_exit)).expect("predictions are numbers"));
    } else {
        ranked.sort_by(|(_, a), (_, b)| a.last_exit.partial_cmp(&b.last_exit).expect("predictions are numbers"));
    }
    ranked
}

/// "ALG (auto: RULE: ALG T µs; then ...)".
fn explain(ranked: &[(Algorithm, Prediction)], size: usize, host: HostShape, shared: bool) -> String {
    let one = |(a, p): &(Algorithm, Prediction)| {
        if shared {
            format!("{a} {} deliveries, {:.1} µs", p.deliveries, p.last_exit)
        } else {
            format!("{a} {:.1} µs", p.last_exit)
        }
    };
    let rule = if shared {
        format!(
            "{} processes share a host of {} cores, so the fewest deliveries, then the lowest predicted time, for {size} nodes",
            host.local_processes, host.cores
        )
    } else {
        format!("the lowest predicted time for {size} nodes")
    };
    let next: Vec<String> = ranked.iter().skip(1).take(RUNNERS_UP).map(one).collect();
    format!("{} (auto: {rule}: {}; then {})", ranked[0].0, one(&ranked[0]), next.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(name: &str) -> JobPolicy {
        JobPolicy::default().with_algorithm_named(name).unwrap()
    }

    #[test]
    fn auto_explains_the_pick_the_configuration_makes_with_its_runners_up() {
        let auto = JobPolicy::default();
        let host = HostShape { local_processes: 1, cores: 8 };
        for size in [2, 4, 16] {
            let text = barrier(&auto, size, 1, host);
            let picked = auto.barrier_config(size, 1, host).algorithm;
            assert!(text.starts_with(&format!("barrier {picked} (auto: the lowest predicted time for {size} nodes: {picked} ")), "{text}");
            assert_eq!(text.matches(" µs").count(), 1 + RUNNERS_UP, "{text}");
        }
        // Oversubscribed: deliveries first, and the pick is the configuration's.
        let crowded = HostShape { local_processes: 8, cores: 2 };
        let text = barrier(&auto, 8, 1, crowded);
        let picked = auto.barrier_config(8, 1, crowded).algorithm;
        assert!(text.starts_with(&format!("barrier {picked} (auto: 8 processes share a host of 2 cores")), "{text}");
        assert!(text.contains("deliveries"), "{text}");
    }

    #[test]
    fn collectives_never_explain_dissemination_and_say_who_named_theirs() {
        let auto = JobPolicy::default();
        let host = HostShape { local_processes: 1, cores: 8 };
        let text = collectives(&auto, 8, 1, host);
        let picked = auto.collective_config(8, 1, host).algorithm;
        assert!(text.starts_with(&format!("collectives {picked} (auto:")), "{text}");
        assert!(!text.contains("dissemination"), "dissemination does not reduce: {text}");
        let reduce = "; reduce: gathers first (its own plan among 3 to 32 ranks: every rank's contribution straight to the root)";
        assert_eq!(collectives(&named("tree4"), 8, 1, host), format!("collectives tree4 (the barrier's, named, and it reduces){reduce}"));
        assert_eq!(collectives(&named("tree4"), 2, 1, host), "collectives tree4 (the barrier's, named, and it reduces)", "not between two");
        assert_eq!(collectives(&named("tree4"), 33, 1, host), "collectives tree4 (the barrier's, named, and it reduces)", "nor beyond 32");
        assert_eq!(barrier(&named("tree4"), 8, 1, host), "barrier tree4 (named: MCD_ALGORITHM or mcd_params.algorithm)");
        let forced = JobPolicy { collective_algorithm: CollectiveAlgorithm::Named("tree2".parse::<Algorithm>().unwrap()), ..named("tree4") };
        assert_eq!(collectives(&forced, 8, 1, host), format!("collectives tree2 (named: MCD_COLLECTIVE_ALGORITHM){reduce}"));
        // A named barrier that does not reduce: the collectives are auto's.
        let dissemination = collectives(&named("dissemination"), 8, 1, host);
        assert!(dissemination.starts_with(&format!("collectives {picked} (auto:")), "{dissemination}");
    }
}
