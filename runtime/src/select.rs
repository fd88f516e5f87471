//! Weighted target selection: smooth weighted round-robin over a candidate set that changes over
//! time (glossary, Weight; select-one).
//!
//! A **Weight** is a relative selection share in `0..=10000` (default 100). Two otherwise-equal
//! targets with weights 100 and 50 receive new work in a 2:1 ratio; weight `0` keeps a target out
//! of new selections without draining it. This module is the pure core behind select-one and
//! placement: it holds no clock, no randomness and no I/O, so the same inputs always yield the
//! same picks.
//!
//! ## Algorithm
//!
//! Smooth weighted round-robin (the nginx upstream algorithm). Every candidate carries a
//! `current` value. For each pick, every participating candidate adds its weight to `current`;
//! the one with the largest `current` wins (ties go to the earliest candidate in the order given
//! to [`SmoothWeighted::set_candidates`]) and has the participants' total weight subtracted.
//! Starting from all-zero state, any `sum(weights)` consecutive picks choose each candidate
//! exactly `weight` times, and the picks are spread out rather than bunched (100/50 yields
//! `A B A A B A …`, never more than two `A` in a row).
//!
//! ## Guarantees
//!
//! - Membership changes keep fairness: [`SmoothWeighted::set_candidates`] keeps `current` of
//!   every surviving key, drops removed keys and starts new keys at `0`.
//! - Filters applied at selection time ([`SmoothWeighted::pick_filtered`], for ready and drain
//!   state) leave ineligible candidates untouched: they neither gain nor lose `current`.
//! - Each pick is O(n) in the number of candidates and allocates nothing.
//!
//! ## Bound
//!
//! Let `n` be the number of candidates and `W` the sum of their weights, computed in 64 bits
//! (glossary, Weight), so `W ≤ n × 10000`. From fresh state, an unfiltered sequence keeps the
//! sum of all `current` values at `0`; a picked candidate had at least the average, so every
//! value stays above `-W`, and then no value can exceed `(n - 1) × W`. The selector additionally
//! clamps every `current` into `±n × W` when the set changes and when a pick touches it. That
//! clamp never engages in the fresh unfiltered case above (a test compares the picks against an
//! unclamped reference), so it changes nothing there; it exists because membership changes and
//! long-lived filters move the sum away from `0`, and the bound must hold regardless.
//!
//! `current` is an `i128`. With 1024 candidates at weight 10000, `W = 10_240_000` and
//! `n × W ≈ 1.05 × 10^10`, which would fit an `i64` as well; `i128` keeps
//! `n × W + 10000` far inside its range for any candidate set that fits in memory, so the
//! arithmetic cannot overflow.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::Hash;

use thiserror::Error;

/// The largest allowed selection weight (glossary, Weight).
pub const MAX_WEIGHT: u16 = 10_000;

/// The selection weight of a target unless configured (glossary, Weight).
pub const DEFAULT_WEIGHT: u16 = 100;

/// A candidate set that [`SmoothWeighted::set_candidates`] refuses; the previous set is kept.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CandidateError {
    /// A weight above [`MAX_WEIGHT`]; the glossary makes it a configuration error.
    #[error("candidate at position {position} has weight {weight}, outside 0..={MAX_WEIGHT}")]
    WeightOutOfRange {
        /// The zero-based position of the candidate in the given sequence.
        position: usize,
        /// The rejected weight.
        weight: u16,
    },
    /// The same key appears twice, so it would be unclear which weight applies.
    #[error("candidate at position {position} repeats the key of an earlier candidate")]
    DuplicateKey {
        /// The zero-based position of the repeated key in the given sequence.
        position: usize,
    },
}

/// One candidate with its weight and its smooth round-robin state.
#[derive(Debug, Clone)]
struct Candidate<K> {
    key: K,
    weight: u16,
    /// Accumulated selection credit; see the module's Bound section for its range.
    current: i128,
}

/// Smooth weighted round-robin over a changing set of keys.
///
/// See the [module documentation](self) for the algorithm, guarantees and arithmetic bound.
#[derive(Debug, Clone)]
pub struct SmoothWeighted<K> {
    /// Candidates in the order given to `set_candidates`; the order breaks ties.
    candidates: Vec<Candidate<K>>,
    /// Sum of all weights (`W`), eligible or not.
    total_weight: u64,
    /// `n × W`: `current` stays within `±bound` (module docs, Bound).
    bound: i128,
}

impl<K> Default for SmoothWeighted<K> {
    fn default() -> Self {
        Self {
            candidates: Vec::new(),
            total_weight: 0,
            bound: 0,
        }
    }
}

impl<K: Clone + Eq + Hash> SmoothWeighted<K> {
    /// Creates a selector with no candidates; [`pick`](Self::pick) returns `None` until
    /// [`set_candidates`](Self::set_candidates) adds some.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces the candidate set with `candidates`, given as `(key, weight)` in tie-break order.
    ///
    /// Keys present before keep their `current` state (clamped into `±n × W` of the new set), so a
    /// membership or weight change does not reset fairness; removed keys are forgotten and new
    /// keys start at `0`.
    ///
    /// # Errors
    ///
    /// [`CandidateError::WeightOutOfRange`] for a weight above [`MAX_WEIGHT`] and
    /// [`CandidateError::DuplicateKey`] for a repeated key. The call is atomic: on error the
    /// previous candidate set and its state are unchanged.
    pub fn set_candidates(
        &mut self,
        candidates: impl IntoIterator<Item = (K, u16)>,
    ) -> Result<(), CandidateError> {
        let mut next: Vec<Candidate<K>> = Vec::new();
        let mut positions: HashMap<K, usize> = HashMap::new();
        let mut total_weight: u64 = 0;
        for (position, (key, weight)) in candidates.into_iter().enumerate() {
            if weight > MAX_WEIGHT {
                return Err(CandidateError::WeightOutOfRange { position, weight });
            }
            match positions.entry(key.clone()) {
                Entry::Occupied(_) => return Err(CandidateError::DuplicateKey { position }),
                Entry::Vacant(slot) => {
                    slot.insert(position);
                }
            }
            total_weight += u64::from(weight);
            next.push(Candidate {
                key,
                weight,
                current: 0,
            });
        }
        let bound = next.len() as i128 * i128::from(total_weight);
        for old in self.candidates.drain(..) {
            if let Some(candidate) = positions.get(&old.key).and_then(|&i| next.get_mut(i)) {
                candidate.current = old.current.clamp(-bound, bound);
            }
        }
        self.candidates = next;
        self.total_weight = total_weight;
        self.bound = bound;
        Ok(())
    }

    /// Picks the next target among all candidates with weight above `0`.
    ///
    /// Returns `None` when no candidate has a positive weight.
    pub fn pick(&mut self) -> Option<K> {
        self.pick_filtered(|_| true)
    }

    /// Picks the next target among candidates with weight above `0` for which `eligible` holds.
    ///
    /// `eligible` carries selection-time state such as ready and not draining (glossary,
    /// select-one); it is called once per candidate. Ineligible candidates neither gain nor lose
    /// `current`, so they resume their share when they become eligible again. Returns `None`
    /// when no candidate is eligible with a positive weight.
    pub fn pick_filtered(&mut self, eligible: impl Fn(&K) -> bool) -> Option<K> {
        let index = self.pick_index_filtered(eligible)?;
        self.candidates.get(index).map(|c| c.key.clone())
    }

    /// [`pick`](Self::pick), giving the chosen candidate's position in the order last given to
    /// [`set_candidates`](Self::set_candidates) instead of a copy of its key.
    pub fn pick_index(&mut self) -> Option<usize> {
        self.pick_index_filtered(|_| true)
    }

    fn pick_index_filtered(&mut self, eligible: impl Fn(&K) -> bool) -> Option<usize> {
        let bound = self.bound;
        let mut participating_weight: i128 = 0;
        let mut best: Option<(usize, i128)> = None;
        for (index, candidate) in self.candidates.iter_mut().enumerate() {
            if candidate.weight == 0 || !eligible(&candidate.key) {
                continue;
            }
            let weight = i128::from(candidate.weight);
            participating_weight += weight;
            candidate.current = (candidate.current + weight).min(bound);
            if best.is_none_or(|(_, best_current)| candidate.current > best_current) {
                best = Some((index, candidate.current));
            }
        }
        let (index, _) = best?;
        let chosen = self.candidates.get_mut(index)?;
        chosen.current = (chosen.current - participating_weight).max(-bound);
        Some(index)
    }

    /// The number of candidates, including those with weight `0`.
    #[must_use]
    pub fn len(&self) -> usize {
        self.candidates.len()
    }

    /// Whether there are no candidates at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.candidates.is_empty()
    }

    /// The sum of all candidate weights (`W`), computed in 64 bits.
    #[must_use]
    pub fn total_weight(&self) -> u64 {
        self.total_weight
    }

    /// The weight of `key`, or `None` if it is not a candidate.
    #[must_use]
    pub fn weight(&self, key: &K) -> Option<u16> {
        self.candidates
            .iter()
            .find(|candidate| &candidate.key == key)
            .map(|candidate| candidate.weight)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn selector(candidates: &[(&'static str, u16)]) -> SmoothWeighted<&'static str> {
        let mut selector = SmoothWeighted::new();
        selector.set_candidates(candidates.iter().copied()).unwrap();
        selector
    }

    fn current(selector: &SmoothWeighted<&'static str>, key: &str) -> i128 {
        selector
            .candidates
            .iter()
            .find(|candidate| candidate.key == key)
            .map(|candidate| candidate.current)
            .unwrap()
    }

    fn longest_run<T: PartialEq>(picks: &[T], key: &T) -> usize {
        let (mut longest, mut run) = (0, 0);
        for pick in picks {
            run = if pick == key { run + 1 } else { 0 };
            longest = longest.max(run);
        }
        longest
    }

    /// A xorshift64 generator so the randomized test is reproducible without a dependency.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, bound: u64) -> u64 {
            self.next() % bound
        }
    }

    /// Textbook smooth weighted round-robin in `i128` without clamping, to show that the clamp
    /// never engages in an unfiltered sequence from fresh state.
    struct UnclampedReference {
        weights: Vec<i128>,
        current: Vec<i128>,
    }

    impl UnclampedReference {
        fn new(weights: &[u16]) -> Self {
            Self {
                weights: weights.iter().map(|&w| i128::from(w)).collect(),
                current: vec![0; weights.len()],
            }
        }

        fn pick(&mut self) -> Option<usize> {
            let total: i128 = self.weights.iter().sum();
            let mut best: Option<usize> = None;
            for i in 0..self.weights.len() {
                if self.weights[i] == 0 {
                    continue;
                }
                self.current[i] += self.weights[i];
                if best.is_none_or(|b| self.current[i] > self.current[b]) {
                    best = Some(i);
                }
            }
            self.current[best?] -= total;
            best
        }
    }

    #[test]
    fn weights_100_and_50_share_picks_two_to_one_in_a_smooth_sequence() {
        let mut selector = selector(&[("a", 100), ("b", 50)]);
        let picks: Vec<_> = (0..300).map(|_| selector.pick().unwrap()).collect();

        assert_eq!(&picks[..6], &["a", "b", "a", "a", "b", "a"]);
        assert_eq!(picks.iter().filter(|&&k| k == "a").count(), 200);
        assert_eq!(picks.iter().filter(|&&k| k == "b").count(), 100);
        assert_eq!(longest_run(&picks, &"a"), 2);
        assert_eq!(longest_run(&picks, &"b"), 1);
    }

    #[test]
    fn weight_zero_is_never_chosen() {
        let mut selector = selector(&[("idle", 0), ("a", 1), ("b", 10_000)]);
        for _ in 0..20_002 {
            assert_ne!(selector.pick(), Some("idle"));
        }
    }

    #[test]
    fn all_zero_weights_or_no_candidates_pick_none() {
        assert_eq!(selector(&[("a", 0), ("b", 0)]).pick(), None);
        assert_eq!(SmoothWeighted::<&str>::new().pick(), None);
    }

    #[test]
    fn a_filter_that_excludes_everyone_picks_none() {
        let mut selector = selector(&[("a", 100), ("b", 50)]);
        assert_eq!(selector.pick_filtered(|_| false), None);
        assert_eq!((current(&selector, "a"), current(&selector, "b")), (0, 0));
    }

    #[test]
    fn membership_change_keeps_the_state_of_surviving_keys() {
        let mut selector = selector(&[("a", 100), ("b", 50)]);
        assert_eq!(selector.pick(), Some("a"));
        // State is now a = -50, b = 50.
        selector
            .set_candidates([("a", 100), ("b", 50), ("c", 100)])
            .unwrap();
        assert_eq!(
            (current(&selector, "a"), current(&selector, "b")),
            (-50, 50)
        );
        assert_eq!(current(&selector, "c"), 0);
        // a = 50, b = 100, c = 100: b wins on its carried-over credit; a reset would pick a.
        assert_eq!(selector.pick(), Some("b"));
    }

    #[test]
    fn removed_key_is_forgotten_and_returns_with_fresh_state() {
        let mut selector = selector(&[("a", 100), ("b", 50)]);
        selector.pick();
        selector.set_candidates([("a", 100)]).unwrap();
        assert_eq!(selector.len(), 1);
        assert_eq!(selector.weight(&"b"), None);
        selector.set_candidates([("a", 100), ("b", 50)]).unwrap();
        assert_eq!(current(&selector, "b"), 0);
    }

    #[test]
    fn carried_over_state_is_clamped_to_the_bound_of_the_new_set() {
        let mut selector = selector(&[("heavy", 10_000), ("light", 1)]);
        // Each pick of heavy moves one unit of credit to light, which builds up to about 5000.
        for _ in 0..5_000 {
            selector.pick();
        }
        assert!(current(&selector, "light") > 1);
        // Without heavy, n × W = 1: light's carried-over credit is clamped, not kept whole.
        selector.set_candidates([("light", 1)]).unwrap();
        assert_eq!(current(&selector, "light"), 1);
        assert_eq!(selector.pick(), Some("light"));
    }

    #[test]
    fn ineligible_candidates_neither_gain_nor_lose_current() {
        let mut selector = selector(&[("a", 100), ("b", 50)]);
        assert_eq!(selector.pick(), Some("a"));
        let b_before = current(&selector, "b");
        for _ in 0..7 {
            assert_eq!(selector.pick_filtered(|&k| k != "b"), Some("a"));
        }
        assert_eq!(current(&selector, "b"), b_before);
        // Back in the set, b continues the unfiltered sequence where it left off.
        assert_eq!(selector.pick(), Some("b"));
    }

    #[test]
    fn weight_above_the_maximum_is_rejected_and_the_previous_set_kept() {
        let mut selector = selector(&[("a", 100)]);
        assert_eq!(
            selector.set_candidates([("a", 100), ("b", 10_001)]),
            Err(CandidateError::WeightOutOfRange {
                position: 1,
                weight: 10_001
            })
        );
        assert_eq!(selector.len(), 1);
        assert_eq!(selector.weight(&"a"), Some(100));
        assert!(selector.set_candidates([("b", MAX_WEIGHT)]).is_ok());
    }

    #[test]
    fn duplicate_key_is_rejected() {
        let mut selector = SmoothWeighted::new();
        assert_eq!(
            selector.set_candidates([("a", 1), ("b", 2), ("a", 3)]),
            Err(CandidateError::DuplicateKey { position: 2 })
        );
        assert!(selector.is_empty());
    }

    #[test]
    fn weight_sum_is_computed_in_64_bits() {
        let keys: Vec<(u32, u16)> = (0..1024).map(|k| (k, MAX_WEIGHT)).collect();
        let mut selector = SmoothWeighted::new();
        selector.set_candidates(keys).unwrap();
        assert_eq!(selector.total_weight(), 1024 * 10_000);
        let mut counts = vec![0u32; 1024];
        for _ in 0..1024 {
            counts[selector.pick().unwrap() as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c == 1));
    }

    #[test]
    fn random_weights_get_exactly_their_share_over_whole_cycles() {
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        for _case in 0..100 {
            let n = 1 + rng.below(12) as usize;
            let weights: Vec<u16> = (0..n)
                .map(|_| match rng.below(4) {
                    0 => 0,
                    1 => rng.below(10) as u16,
                    2 => rng.below(200) as u16,
                    _ => rng.below(u64::from(MAX_WEIGHT) + 1) as u16,
                })
                .collect();
            let mut selector = SmoothWeighted::new();
            selector
                .set_candidates(weights.iter().copied().enumerate())
                .unwrap();
            let sum = selector.total_weight();
            if sum == 0 {
                assert_eq!(selector.pick(), None);
                continue;
            }
            let cycles = 1 + rng.below(2);
            let mut reference = UnclampedReference::new(&weights);
            let mut counts = vec![0u64; n];
            for _ in 0..cycles * sum {
                let picked = selector.pick().unwrap();
                assert_eq!(Some(picked), reference.pick(), "weights {weights:?}");
                counts[picked] += 1;
            }
            for (key, &weight) in weights.iter().enumerate() {
                assert_eq!(
                    counts[key],
                    cycles * u64::from(weight),
                    "weights {weights:?}"
                );
            }
        }
    }

    #[test]
    fn random_membership_and_filter_changes_keep_current_within_bound() {
        let mut rng = XorShift(0xD1B5_4A32_D192_ED03);
        let mut selector = SmoothWeighted::new();
        for _round in 0..2_000 {
            let mut candidates: Vec<(u64, u16)> = Vec::new();
            for key in 0..8 {
                if rng.below(3) != 0 {
                    candidates.push((key, rng.below(u64::from(MAX_WEIGHT) + 1) as u16));
                }
            }
            selector.set_candidates(candidates).unwrap();
            let mask = rng.next();
            for _ in 0..rng.below(50) {
                let picked = selector.pick_filtered(|&k| mask & (1 << k) != 0);
                if let Some(k) = picked {
                    assert!(mask & (1 << k) != 0);
                    assert_ne!(selector.weight(&k), Some(0));
                }
                let bound = selector.len() as i128 * i128::from(selector.total_weight());
                assert!(selector.candidates.iter().all(|c| c.current.abs() <= bound));
            }
        }
    }
}
