//! Bursty loss in time: Gilbert–Elliott on one link, whose bad state lasts
//! an interval of virtual time (the real-protocol simulator's
//! [`super::protocol::Loss::Bursty`]).
//!
//! A real Ethernet burst is an interval of time: a switch's output buffer
//! overflowing while a fan-in lasts, interference on a cable. Every frame
//! that reaches the link while it lasts is lost, and a frame sent after it
//! ended is not, however few frames came between. (The simulator's first
//! model counted bursts in frames *delivered to each receiver*: a node
//! waiting for one message takes in nothing else, so a burst took every
//! copy of that message however far apart in time they were sent, and the
//! answer to its NACK too.)
//!
//! The link alternates between a good state (no loss) and a bad one
//! (every frame lost), each lasting an exponentially distributed time: the
//! bad state's mean is the configured burst, the good state's mean is such
//! that the link is bad `average` of the time. Frames reach it at times
//! that do not depend on its state, so `average` of them are lost in the
//! long run. Each link draws its state changes from its own generator,
//! forked from the run's seed: the same seed gives the same bursts, at the
//! same times, whatever the protocol sends.

use crate::sim::rng::Rng;

/// One link's Gilbert–Elliott state in time (times in the caller's unit,
/// nondecreasing from call to call).
#[derive(Clone, Debug)]
pub(crate) struct TimedBursts {
    bad: bool,
    /// When the current state ends.
    until: u64,
    mean_bad: f64,
    mean_good: f64,
    rng: Rng,
}

impl TimedBursts {
    /// A link that loses `average` of the time (0 < `average` < 1) in bursts
    /// lasting `mean_burst` on average (in the caller's time unit), its
    /// states drawn from `rng`. It starts in the long-run mix: bad with
    /// odds `average`, for an exponential time (the durations are
    /// memoryless: a state's remaining time has the same law as a whole one).
    pub(crate) fn new(average: f64, mean_burst: f64, mut rng: Rng) -> TimedBursts {
        let average = average.clamp(1e-9, 1.0 - 1e-9);
        let mean_bad = mean_burst.max(1.0);
        let mean_good = mean_bad * (1.0 - average) / average;
        let bad = rng.chance(average);
        let mut b = TimedBursts { bad, until: 0, mean_bad, mean_good, rng };
        b.until = b.draw();
        b
    }

    /// The current state's length, at least one unit.
    fn draw(&mut self) -> u64 {
        let mean = if self.bad { self.mean_bad } else { self.mean_good };
        (self.rng.exp(mean).round() as u64).max(1)
    }

    /// Whether the link is in its bad state at `t` (a frame reaching it
    /// then is lost).
    pub(crate) fn bad_at(&mut self, t: u64) -> bool {
        while t >= self.until {
            self.bad = !self.bad;
            self.until += self.draw();
        }
        self.bad
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeded runs of the process: frames at random times (Poisson, a
    /// mean burst apart) are lost at the configured average, and the bad
    /// intervals (walked state by state) last the configured mean burst,
    /// each within 5% (about 25,000 bursts and 500,000 frames a run).
    #[test]
    fn the_measured_loss_rate_and_burst_length_match_the_configuration() {
        for (average, mean_burst, seed) in [(0.05, 400.0, 1), (0.2, 100.0, 2), (0.01, 1000.0, 3)] {
            let mut link = TimedBursts::new(average, mean_burst, Rng::fork(seed, 9));
            let (mut bad_time, mut bursts, mut t) = (0u64, 0u64, 0u64);
            while bursts < 25_000 {
                let bad = link.bad_at(t);
                let end = link.until;
                if bad {
                    bad_time += end - t;
                    bursts += 1;
                }
                t = end;
            }
            let burst = bad_time as f64 / bursts as f64;
            assert!((burst - mean_burst).abs() <= 0.05 * mean_burst, "burst {mean_burst}: measured {burst:.1}");
            let mut link = TimedBursts::new(average, mean_burst, Rng::fork(seed, 10));
            let mut arrivals = Rng::fork(seed, 11);
            let (mut lost, mut t) = (0u64, 0u64);
            let frames = 500_000;
            for _ in 0..frames {
                t += arrivals.exp(mean_burst).round() as u64;
                lost += u64::from(link.bad_at(t));
            }
            let rate = lost as f64 / frames as f64;
            assert!((rate - average).abs() <= 0.05 * average, "average {average}: measured {rate:.4}");
        }
    }

    #[test]
    fn a_seed_replays_and_frames_far_apart_are_lost_independently() {
        let (average, mean_burst) = (0.05, 100.0);
        let states = |seed| {
            let mut link = TimedBursts::new(average, mean_burst, Rng::fork(seed, 9));
            (0..200_000u64).map(|i| link.bad_at(i * 7)).collect::<Vec<_>>()
        };
        assert_eq!(states(4), states(4));
        assert_ne!(states(4), states(5));
        // Pairs of frames 1 time unit apart are lost together nearly always
        // once the first is; 50 bursts apart, as often as any frame.
        let mut link = TimedBursts::new(average, mean_burst, Rng::fork(6, 9));
        let (mut first, mut near, mut far) = (0u64, 0u64, 0u64);
        let mut t = 0;
        for _ in 0..400_000 {
            if link.bad_at(t) {
                first += 1;
                near += u64::from(link.bad_at(t + 1));
                far += u64::from(link.bad_at(t + 5_000));
                t += 5_000;
            }
            t += 1_000;
        }
        let (near, far) = (near as f64 / first as f64, far as f64 / first as f64);
        assert!(near > 0.95 && (far - average).abs() < 0.02, "after a loss: 1 unit later {near:.3}, 50 bursts later {far:.3}");
    }
}
