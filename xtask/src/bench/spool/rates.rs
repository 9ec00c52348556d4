//! Rates: operations per second from a count and a duration, the median of several runs, and
//! a rate as the tables print it.

use std::time::Duration;

use super::super::figures::thousands;

pub(super) fn rate(ops: u64, took: Duration) -> f64 {
    ops as f64 / took.as_secs_f64().max(1e-9)
}

pub(super) fn median(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

pub(super) fn fmt_rate(x: Option<f64>) -> String {
    x.map_or_else(|| "n/a".into(), |x| thousands(x.round() as u64))
}
