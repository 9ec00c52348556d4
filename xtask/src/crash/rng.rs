//! A seeded PRNG (SplitMix64) for the operation mix and the kill delays: reproducible from the
//! printed seed, and no new dependency for xtask.

use std::ops::{Range, RangeInclusive};

/// SplitMix64 (Steele, Lea, Flood 2014): good enough to pick operations, not for secrets.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn seed(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi` (the tiny modulo bias does not matter here).
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        let span = hi - lo;
        if span == u64::MAX {
            return self.next_u64();
        }
        lo + self.next_u64() % (span + 1)
    }

    /// Uniform in `range` (non-empty).
    pub(crate) fn below(&mut self, range: Range<usize>) -> usize {
        self.between(range.start as u64, range.end as u64 - 1) as usize
    }

    /// Uniform in `range`.
    pub(crate) fn within(&mut self, range: RangeInclusive<u64>) -> u64 {
        self.between(*range.start(), *range.end())
    }

    /// True with probability `percent`/100.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    pub(crate) fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }

    pub(crate) fn array32(&mut self) -> [u8; 32] {
        let mut out = [0; 32];
        out.copy_from_slice(&self.bytes(32));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn a_seed_replays_and_ranges_hold() {
        let (mut a, mut b) = (Rng::seed(7), Rng::seed(7));
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
            let x = a.below(3..9);
            assert!((3..9).contains(&x));
            let y = a.within(0..=2);
            assert!(y <= 2);
            b.below(3..9);
            b.within(0..=2);
        }
    }
}
