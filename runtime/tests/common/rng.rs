//! The one seeded random generator of the randomized tests (the object soak, the mesh's
//! random frames): SplitMix64, small and stable across crate versions, so a seed replays the
//! same steps forever.
//!
//! The seed comes from `ZLINK_TEST_SEED` (hex, with or without `0x`) or the test's own default.
//! A test that panics while its generator is alive prints the seed and the command-line
//! variable that replays it.

/// The environment variable that overrides every randomized test's default seed.
pub const SEED_ENV: &str = "ZLINK_TEST_SEED";

/// SplitMix64 with the seed it started from.
#[derive(Debug)]
pub struct TestRng {
    seed: u64,
    state: u64,
}

impl TestRng {
    /// A generator seeded from [`SEED_ENV`], or from `default` when it is unset.
    ///
    /// # Panics
    /// When [`SEED_ENV`] is set but is not a hex number (a typo must not silently run the
    /// default seed).
    pub fn from_env(default: u64) -> Self {
        let seed = match std::env::var(SEED_ENV) {
            Ok(v) => {
                let hex = v.trim().trim_start_matches("0x");
                u64::from_str_radix(hex, 16)
                    .unwrap_or_else(|e| panic!("{SEED_ENV}={v:?} is not a hex seed: {e}"))
            }
            Err(_) => default,
        };
        Self::with_seed(seed)
    }

    /// A generator with exactly this seed (ignores the environment).
    pub fn with_seed(seed: u64) -> Self {
        Self { seed, state: seed }
    }

    /// The seed this generator started from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`; the modulo bias is irrelevant for driving tests).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// An index into a slice of `len` elements (`len > 0`).
    pub fn index(&mut self, len: usize) -> usize {
        let i = self.below(u64::try_from(len).expect("a slice length fits u64"));
        usize::try_from(i).expect("below len")
    }

    /// `0..=max_len` random bytes.
    pub fn bytes(&mut self, max_len: u64) -> Vec<u8> {
        let len = self.below(max_len + 1);
        (0..len).map(|_| self.next_u64().to_le_bytes()[0]).collect()
    }
}

impl Drop for TestRng {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "randomized test failed with seed {:#x}; replay it with {SEED_ENV}={:#x}",
                self.seed, self.seed
            );
        }
    }
}
