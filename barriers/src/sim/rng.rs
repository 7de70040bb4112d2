//! The simulator's own pseudo-random numbers: xoshiro256** seeded by
//! splitmix64, so a run depends on its seed and nothing else (no `rand`,
//! no per-process hash keys).

/// xoshiro256** (Blackman and Vigna), seeded from one `u64` by splitmix64.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

/// splitmix64: the next state and its output.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    crate::types::mix(*state)
}

impl Rng {
    /// The generator of `seed`.
    pub fn new(seed: u64) -> Rng {
        let mut z = seed;
        let s = [splitmix(&mut z), splitmix(&mut z), splitmix(&mut z), splitmix(&mut z)];
        Rng { s }
    }

    /// An independent generator for a sub-stream `label` of this seed
    /// (the workload's inputs, one node's link), so that drawing more in
    /// one stream never shifts another.
    pub fn fork(seed: u64, label: u64) -> Rng {
        Rng::new(crate::types::mix(seed ^ crate::types::mix(label.wrapping_add(0x5EED))))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// Uniform in `lo..hi` (`lo` if the range is empty).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        // Lemire's multiply-shift; the tiny bias is irrelevant here.
        lo + ((u128::from(self.next_u64()) * u128::from(hi - lo)) >> 64) as u64
    }

    /// Uniform in `lo..=hi` as a `usize`.
    pub fn between(&mut self, lo: usize, hi: usize) -> usize {
        self.range(lo as u64, hi as u64 + 1) as usize
    }

    /// One of `items` (which must not be empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.range(0, items.len() as u64) as usize]
    }

    /// Exponentially distributed with mean `mean`.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_stream_and_forks_differ() {
        let a: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        let mut r = Rng::new(7);
        assert_eq!(a, (0..4).map(|_| r.next_u64()).collect::<Vec<_>>());
        assert_ne!(Rng::fork(7, 1).next_u64(), Rng::fork(7, 2).next_u64());
        let mut r = Rng::new(1);
        let mut hits = 0;
        for _ in 0..10_000 {
            let x = r.range(3, 9);
            assert!((3..9).contains(&x));
            hits += usize::from(r.chance(0.25));
        }
        assert!((2_000..3_000).contains(&hits), "{hits} of 10000 at p = 0.25");
    }
}
