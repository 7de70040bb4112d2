//! A job's policy: how the barriers of a job are made, read from the
//! environment once, at the program's edge ([`JobPolicy::from_env`],
//! [`HostSettings::from_env`]), and passed down; the constructors below
//! it never read the environment.
//!
//! The C ABI and the MPI interposer are one such edge; a Rust program
//! reaches the same choices here: the algorithm (named, or `auto`'s pick
//! for the job's shape), the timeouts, a flat or a hierarchical barrier
//! (`MCD_HIERARCHY`: the model's choice by default), how a host is released
//! and how its ranks wait, and the algorithm of the collectives.

use std::time::Duration;

use crate::model::{self, LogP};
use crate::plan::{Algorithm, AutoOr, HostRelease};
use crate::types::{BarrierConfig, BarrierError};
use crate::{Collective, Dtype, Op};

/// How a host of the hierarchical barrier is released, and how its ranks
/// other than the leader wait.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostSettings {
    /// The release; `None`: [`HostRelease::auto`]'s choice.
    pub release: Option<HostRelease>,
    /// How the ranks other than the leader wait (in shared memory, and on
    /// their rings for the direct release); `None`: as the endpoint does.
    pub wait: Option<mcd::WaitPolicy>,
}

/// The environment variable that sets how a host's ranks other than its
/// leader wait (in shared memory, and on their rings for the direct
/// release): a wait policy as `MCD_WAIT` takes it. Unset: as `MCD_WAIT`.
pub const HOST_WAIT_ENV: &str = "MCD_HOST_WAIT";

/// The environment variable `name`, if set (not trimmed: each parser trims).
fn env(name: &str) -> Result<Option<String>, BarrierError> {
    match std::env::var(name) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(e) => Err(BarrierError::Config(format!("{name}: {e}"))),
    }
}

impl HostSettings {
    /// `MCD_HIERARCHY_RELEASE` (`shm`, `multicast` or `auto`) and
    /// `MCD_HOST_WAIT` (a wait policy), each if set; an error names a bad
    /// value.
    pub fn from_env() -> Result<HostSettings, BarrierError> {
        let release = match env(HostRelease::ENV)? {
            Some(v) => v.parse::<AutoOr>().map_err(BarrierError::Config)?.0,
            None => None,
        };
        let wait = match env(HOST_WAIT_ENV)? {
            Some(v) => Some(v.trim().parse().map_err(|e| BarrierError::Config(format!("{HOST_WAIT_ENV}: {e}")))?),
            None => None,
        };
        Ok(HostSettings { release, wait })
    }
}

/// A flat or a hierarchical barrier over the job (`MCD_HIERARCHY`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Hierarchy {
    /// Hierarchical when some host runs more than one rank and the model
    /// ([`model::auto_layout`]) predicts it faster.
    #[default]
    Auto,
    /// Always hierarchical.
    On,
    /// Always flat: every rank on the wire.
    Off,
}

impl std::str::FromStr for Hierarchy {
    type Err = String;
    fn from_str(s: &str) -> Result<Hierarchy, String> {
        match s.trim() {
            "auto" | "" => Ok(Hierarchy::Auto),
            "on" => Ok(Hierarchy::On),
            "off" => Ok(Hierarchy::Off),
            other => Err(format!("MCD_HIERARCHY={other}: auto, on or off")),
        }
    }
}

/// What `auto` is told of the job's hosts: processes on the busiest, cores
/// of the smallest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostShape {
    /// The job's processes on its busiest host.
    pub local_processes: usize,
    /// The cores of its smallest host.
    pub cores: usize,
}

/// The collectives' algorithm (`MCD_COLLECTIVE_ALGORITHM`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CollectiveAlgorithm {
    /// Unset: the job's algorithm if it was named and reduces, else `auto`'s
    /// pick among the algorithms that reduce.
    #[default]
    AsTheJob,
    /// `auto`'s pick among the algorithms that reduce
    /// ([`model::auto_collective_on_host`]).
    Auto,
    /// This one (it reduces).
    Named(Algorithm),
}

/// How a job's barriers are made. [`JobPolicy::default`]: `auto` everywhere,
/// the reference machine's LogP parameters, [`BarrierConfig`]'s timeouts.
#[derive(Clone, Debug, Default)]
pub struct JobPolicy {
    /// The barrier's algorithm (`MCD_ALGORITHM`); `None`: `auto`'s pick.
    pub algorithm: Option<Algorithm>,
    /// The collectives' algorithm (`MCD_COLLECTIVE_ALGORITHM`).
    pub collective_algorithm: CollectiveAlgorithm,
    /// The LogP parameters `auto` picks with (`MCD_LOGP`, `o_s,o_r,g,L` in
    /// µs); `None`: [`LogP::REFERENCE`].
    pub logp: Option<LogP>,
    /// Flat or hierarchical (`MCD_HIERARCHY`).
    pub hierarchy: Hierarchy,
    /// How a host is released and its ranks wait (`MCD_HIERARCHY_RELEASE`,
    /// `MCD_HOST_WAIT`).
    pub host: HostSettings,
    /// Seconds a peer may stay silent, though probed, before it is taken for
    /// dead (`MCD_BARRIER_TIMEOUT`); `None`: [`BarrierConfig`]'s.
    pub failure_timeout: Option<Duration>,
    /// Seconds after which one barrier call gives up even on live peers
    /// (`MCD_BARRIER_DEADLINE`); `None`: never.
    pub deadline: Option<Duration>,
    /// Seconds a barrier's creation waits for every member
    /// (`MCD_JOIN_TIMEOUT`); `None`: [`BarrierConfig`]'s.
    pub join_timeout: Option<Duration>,
}

/// An algorithm named in text, or `auto` (`None`); `what` names it in the error.
fn algorithm_or_auto(name: &str, what: &str) -> Result<Option<Algorithm>, BarrierError> {
    match name.trim() {
        "auto" => Ok(None),
        name => name.parse().map(Some).map_err(|e: String| BarrierError::Config(format!("{what}: {e}"))),
    }
}

/// The call the collectives' algorithm must run.
const REDUCTION: Collective = Collective::Allreduce { op: Op::Sum, dtype: Dtype::F64 };

impl JobPolicy {
    /// The policy the environment sets: every variable named on
    /// [`JobPolicy`]'s fields, each if set; an error names a bad value.
    pub fn from_env() -> Result<JobPolicy, BarrierError> {
        let seconds = |name| mcd::config::env_seconds(name).map_err(|e| BarrierError::Config(e.to_string()));
        let algorithm = match mcd::config::env_var("MCD_ALGORITHM") {
            Some(name) => algorithm_or_auto(&name, "MCD_ALGORITHM")?,
            None => None,
        };
        let collective_algorithm = match mcd::config::env_var("MCD_COLLECTIVE_ALGORITHM") {
            Some(name) => match algorithm_or_auto(&name, "MCD_COLLECTIVE_ALGORITHM")? {
                None => CollectiveAlgorithm::Auto,
                Some(algorithm) if !REDUCTION.runs_on(algorithm) => {
                    return Err(BarrierError::Config(format!(
                        "MCD_COLLECTIVE_ALGORITHM: {algorithm} does not reduce (it would count contributions more than once)"
                    )))
                }
                Some(algorithm) => CollectiveAlgorithm::Named(algorithm),
            },
            None => CollectiveAlgorithm::AsTheJob,
        };
        let logp = match mcd::config::env_var("MCD_LOGP") {
            Some(list) => Some(LogP::parse_list(&list).map_err(|e| BarrierError::Config(format!("MCD_LOGP: {e}")))?),
            None => None,
        };
        let hierarchy = match mcd::config::env_var("MCD_HIERARCHY") {
            Some(v) => v.parse().map_err(BarrierError::Config)?,
            None => Hierarchy::Auto,
        };
        Ok(JobPolicy {
            algorithm,
            collective_algorithm,
            logp,
            hierarchy,
            host: HostSettings::from_env()?,
            failure_timeout: seconds("MCD_BARRIER_TIMEOUT")?,
            deadline: seconds("MCD_BARRIER_DEADLINE")?,
            join_timeout: seconds("MCD_JOIN_TIMEOUT")?,
        })
    }

    /// This policy with the algorithm `name` (`auto` or an algorithm's name).
    pub fn with_algorithm_named(mut self, name: &str) -> Result<JobPolicy, BarrierError> {
        self.algorithm = algorithm_or_auto(name, "algorithm")?;
        Ok(self)
    }

    /// The LogP parameters `auto` picks with.
    pub fn logp(&self) -> LogP {
        self.logp.unwrap_or(LogP::REFERENCE)
    }

    /// The barrier configuration for `size` nodes on `rails` rails: the
    /// algorithm, or `auto`'s pick for `host`; the policy's timeouts.
    pub fn barrier_config(&self, size: usize, rails: usize, host: HostShape) -> BarrierConfig {
        let config = match self.algorithm {
            Some(algorithm) => BarrierConfig::new(algorithm).rails(rails),
            None => BarrierConfig::auto_on_host(size, rails, &self.logp(), true, host.local_processes, host.cores),
        };
        self.with_timeouts(config)
    }

    /// The configuration of the barrier that runs a job's (or a group's)
    /// collectives, `size` nodes on `rails` rails: the collectives'
    /// algorithm ([`CollectiveAlgorithm`]), the policy's timeouts.
    pub fn collective_config(&self, size: usize, rails: usize, host: HostShape) -> BarrierConfig {
        let named = match self.collective_algorithm {
            CollectiveAlgorithm::Named(algorithm) => Some(algorithm),
            CollectiveAlgorithm::Auto => None,
            CollectiveAlgorithm::AsTheJob => self.algorithm.filter(|&a| REDUCTION.runs_on(a)),
        };
        let algorithm = named.unwrap_or_else(|| {
            let setup = model::Setup::logp(&self.logp());
            model::auto_collective_on_host(size, rails, &setup, true, 8, host.local_processes, host.cores).0
        });
        self.with_timeouts(BarrierConfig::new(algorithm).rails(rails))
    }

    /// `config` with the policy's timeouts.
    fn with_timeouts(&self, mut config: BarrierConfig) -> BarrierConfig {
        if let Some(failure) = self.failure_timeout {
            config = config.timeouts(config.retry_timeout, failure);
        }
        if let Some(deadline) = self.deadline {
            config = config.deadline(Some(deadline));
        }
        if let Some(join) = self.join_timeout {
            config.join_timeout = join;
        }
        config
    }

    /// Whether a job of `size` ranks on `hosts` hosts (`per_host` on the
    /// busiest, `cores` cores on the smallest), on `rails` rails, runs the
    /// hierarchical barrier: as [`Hierarchy`] says, `auto` asking the model
    /// when some host runs more than one rank.
    pub fn hierarchical(&self, size: usize, hosts: usize, per_host: usize, cores: usize, rails: usize) -> bool {
        match self.hierarchy {
            Hierarchy::Auto => {
                let shm = model::ShmCosts::REFERENCE;
                let (layout, _) = model::auto_layout(hosts, per_host, cores, rails, &self.logp(), true, &shm);
                hosts < size && matches!(layout, model::Layout::Hierarchical(_))
            }
            Hierarchy::On => true,
            Hierarchy::Off => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: HostShape = HostShape { local_processes: 1, cores: 4 };

    #[test]
    fn the_collectives_take_the_jobs_algorithm_only_when_it_reduces() {
        let tree: Algorithm = "tree4".parse().unwrap();
        let dissemination: Algorithm = "dissemination".parse().unwrap();
        assert!(REDUCTION.runs_on(tree) && !REDUCTION.runs_on(dissemination));
        let named = JobPolicy { algorithm: Some(tree), ..JobPolicy::default() };
        assert_eq!(named.collective_config(16, 1, HOST).algorithm, tree);
        let auto = JobPolicy::default().collective_config(16, 1, HOST).algorithm;
        assert!(REDUCTION.runs_on(auto), "auto picks among the algorithms that reduce: {auto}");
        let not_reducing = JobPolicy { algorithm: Some(dissemination), ..JobPolicy::default() };
        assert_eq!(not_reducing.collective_config(16, 1, HOST).algorithm, auto);
        assert_eq!(not_reducing.barrier_config(16, 1, HOST).algorithm, dissemination);
        let forced = JobPolicy { algorithm: Some(tree), collective_algorithm: CollectiveAlgorithm::Auto, ..JobPolicy::default() };
        assert_eq!(forced.collective_config(16, 1, HOST).algorithm, auto);
    }

    #[test]
    fn the_policys_timeouts_reach_every_config_and_bad_names_are_config_errors() {
        let policy = JobPolicy {
            failure_timeout: Some(Duration::from_secs(3)),
            deadline: Some(Duration::from_secs(7)),
            join_timeout: Some(Duration::from_secs(11)),
            ..JobPolicy::default()
        };
        for config in [policy.barrier_config(8, 1, HOST), policy.collective_config(8, 1, HOST)] {
            assert_eq!(
                (config.failure_timeout, config.deadline, config.join_timeout),
                (Duration::from_secs(3), Some(Duration::from_secs(7)), Duration::from_secs(11))
            );
        }
        let default = BarrierConfig::new("tree4".parse().unwrap());
        let plain = JobPolicy::default().barrier_config(8, 1, HOST);
        assert_eq!((plain.failure_timeout, plain.deadline, plain.join_timeout), (default.failure_timeout, default.deadline, default.join_timeout));
        assert!(
            matches!(JobPolicy::default().with_algorithm_named("no-such-algorithm"), Err(BarrierError::Config(e)) if e.starts_with("algorithm: "))
        );
        assert_eq!(JobPolicy::default().with_algorithm_named("auto").unwrap().algorithm, None);
        assert_eq!(" off ".parse::<Hierarchy>(), Ok(Hierarchy::Off));
        assert!("maybe".parse::<Hierarchy>().unwrap_err().contains("auto, on or off"));
        let flat = JobPolicy { hierarchy: Hierarchy::Off, ..JobPolicy::default() };
        let hier = JobPolicy { hierarchy: Hierarchy::On, ..JobPolicy::default() };
        assert!(!flat.hierarchical(64, 4, 16, 16, 1) && hier.hierarchical(64, 4, 16, 16, 1));
        // One rank per host: nothing to gain in shared memory.
        assert!(!JobPolicy::default().hierarchical(8, 8, 1, 16, 1));
    }
}
