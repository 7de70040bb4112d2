//! Summaries of measured samples: one definition of a quantile for every
//! benchmark, simulator and test that sorts its samples (those that keep
//! an `hdrhistogram` ask it instead).

/// The `q` quantile (0..=1) of `values`: the value with ⌊q·n⌋ of the `n`
/// values below it in order (so `q = 0.5` is the upper middle of an even
/// count, and `q = 1` the largest). NaN for no values. Sorts `values`.
pub fn quantile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_unstable_by(f64::total_cmp);
    let rank = (q.clamp(0.0, 1.0) * values.len() as f64) as usize;
    values[rank.min(values.len() - 1)]
}

/// The median of `values` ([`quantile`] 0.5: the upper middle of an even
/// count). NaN for no values. Sorts `values`.
pub fn median(values: &mut [f64]) -> f64 {
    quantile(values, 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_count_the_values_below() {
        let mut v = [5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(median(&mut v), 3.0);
        assert_eq!(v, [1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(quantile(&mut v, 0.0), 1.0);
        assert_eq!(quantile(&mut v, 1.0), 5.0);
        assert_eq!(quantile(&mut v, 0.99), 5.0);
        assert_eq!(median(&mut [2.0, 1.0]), 2.0);
        let mut hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&mut hundred, 0.99), 100.0);
        assert_eq!(quantile(&mut hundred, 0.9), 91.0);
        assert!(median(&mut []).is_nan());
    }
}
