//! Each node's clock: virtual time as the node reads it (skewed clocks).

/// A node's clock: `local = offset + t · num / den`.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// Rate numerator.
    pub num: u64,
    /// Rate denominator.
    pub den: u64,
    /// Offset, ns.
    pub offset: u64,
}

impl Clock {
    pub(super) fn local(&self, t: u64) -> u64 {
        if self.num == self.den {
            return self.offset + t; // (most clocks: no 128-bit division per event)
        }
        self.offset + (u128::from(t) * u128::from(self.num) / u128::from(self.den)) as u64
    }

    /// The first virtual time at which the local clock reads `local` or more.
    pub(super) fn virtual_at(&self, local: u64) -> u64 {
        let l = local.saturating_sub(self.offset);
        if self.num == self.den {
            return l;
        }
        (u128::from(l) * u128::from(self.den)).div_ceil(u128::from(self.num)) as u64
    }

    /// The rate.
    pub fn rate(&self) -> f64 {
        self.num as f64 / self.den as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skewed_clock_maps_deadlines_back_never_early() {
        let c = Clock { num: 3, den: 2, offset: 7 };
        for t in [0u64, 1, 2, 3, 999, 1_000_001] {
            let local = c.local(t);
            let back = c.virtual_at(local);
            assert!(back <= t && c.local(back) >= local, "t={t}");
        }
        for deadline in [7u64, 8, 100, 12345] {
            let t = c.virtual_at(deadline);
            assert!(c.local(t) >= deadline && (t == 0 || c.local(t - 1) < deadline));
        }
    }
}
