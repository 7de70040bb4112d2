//! The retry timer: how long a node waits for a step's messages before it
//! NACKs them, learned from the time steps take (RFC 6298's smoothed mean
//! plus four mean deviations), between a floor that suits µs-scale LANs and
//! a cap.
//!
//! A step time includes the peers' lateness as well as the network. Two
//! things keep lateness from ruining the estimate: a sample is taken only
//! when an original message (not a re-sent answer) completes a step, so a
//! recovered loss teaches nothing (a step that a recovery delayed teaches
//! the time of its last undelayed original, if any: see the engine); and one sample counts for at most 1.5
//! times the current timeout, so a single long imbalance (a checkpoint)
//! barely moves it, while a network that is slow every time raises it
//! within a few dozen barriers. (Lateness that a probe exposes, a peer
//! answering "not sent yet", teaches nothing either: see the engine.)

use std::time::Duration;

/// The learned retry timeout.
#[derive(Clone, Copy, Debug)]
pub struct Rto {
    /// Smoothed step time and its mean deviation, in nanoseconds.
    srtt: Option<f64>,
    rttvar: f64,
    rto: Duration,
    floor: Duration,
    cap: Duration,
}

impl Rto {
    /// Starts at `initial`, and stays within `floor..=cap`.
    pub fn new(initial: Duration, floor: Duration, cap: Duration) -> Rto {
        let cap = cap.max(floor);
        Rto { srtt: None, rttvar: 0.0, rto: initial.clamp(floor, cap), floor, cap }
    }

    /// The current timeout.
    pub fn get(&self) -> Duration {
        self.rto
    }

    /// Whether it has learned from a step yet (else it is the initial
    /// timeout, which says nothing of the network).
    pub fn learned(&self) -> bool {
        self.srtt.is_some()
    }

    /// Learns from one step that took `took`.
    pub fn sample(&mut self, took: Duration) {
        // (Through u64, exact below 2^53 ns: a u128's conversion is a slow
        // library call on the hot path; and in integer nanoseconds, which
        // are what `Duration`'s own `* 3 / 2` gives, without its checks.)
        let most = self.rto.as_nanos() as u64 * 3 / 2;
        let r = u64::try_from(took.as_nanos()).map_or(most, |t| t.min(most)) as f64;
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2.0;
            }
            Some(srtt) => {
                self.rttvar = 0.75 * self.rttvar + 0.25 * (srtt - r).abs();
                self.srtt = Some(0.875 * srtt + 0.125 * r);
            }
        }
        let rto = Duration::from_nanos((self.srtt.unwrap_or(r) + 4.0 * self.rttvar) as u64);
        self.rto = rto.clamp(self.floor, self.cap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn on_a_fast_steady_network_it_shrinks_to_the_floor() {
        let mut rto = Rto::new(Duration::from_millis(1), 20 * US, Duration::from_millis(100));
        for _ in 0..50 {
            rto.sample(4 * US);
        }
        assert_eq!(rto.get(), 20 * US);
    }

    #[test]
    fn on_a_slow_network_it_grows_within_a_few_steps_and_follows_the_jitter() {
        let mut rto = Rto::new(Duration::from_micros(50), 20 * US, Duration::from_millis(100));
        let mut steps = 0;
        while rto.get() < Duration::from_millis(5) {
            rto.sample(Duration::from_millis(5));
            steps += 1;
            assert!(steps < 40, "still {:?} after {steps} samples of 5 ms", rto.get());
        }
        for i in 0..200 {
            rto.sample(Duration::from_micros(if i % 2 == 0 { 4000 } else { 6000 }));
        }
        let t = rto.get();
        assert!(t > Duration::from_millis(6) && t < Duration::from_millis(12), "{t:?}");
    }

    #[test]
    fn one_long_imbalance_barely_moves_it_and_the_cap_holds() {
        let mut rto = Rto::new(Duration::from_millis(1), 20 * US, Duration::from_millis(100));
        for _ in 0..50 {
            rto.sample(10 * US);
        }
        let before = rto.get();
        rto.sample(Duration::from_secs(15)); // a checkpoint on one rank
        assert!(rto.get() <= before * 3, "{before:?} -> {:?}", rto.get());
        for _ in 0..100 {
            rto.sample(Duration::from_secs(15));
        }
        assert_eq!(rto.get(), Duration::from_millis(100));
    }
}
