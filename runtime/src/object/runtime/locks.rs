//! Per-object async locks: changes to one object (its creation, its membership, its removal)
//! run one at a time, while changes to different objects run side by side — also across store
//! round trips. A lock exists only while someone holds or waits for it.
//!
//! Several keys are always taken in key order, so two changes that share objects (a join
//! touches the Actor, its old Spot and its new Spot) cannot deadlock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::OwnedMutexGuard;
use zlink_store::types::AuthorityKey;

/// Async locks by authority key, made on demand (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct KeyLocks {
    locks: Mutex<Table>,
}

/// The locks and when to clean them up next.
#[derive(Debug, Default)]
struct Table {
    by_key: HashMap<AuthorityKey, Weak<tokio::sync::Mutex<()>>>,
    /// Clean up once the table holds this many entries: twice what the last cleanup kept (at
    /// least [`MIN_CLEANUP`]), so the sweeps cost O(1) per lock made even while many locks
    /// are held (a relocation of many units holds one per object for its whole move).
    clean_at: usize,
    /// Cleanups so far.
    sweeps: u64,
}

/// The smallest table that is cleaned up.
const MIN_CLEANUP: usize = 64;

/// The locks of some keys, held together; released on drop.
#[derive(Debug)]
pub(crate) struct Held {
    _guards: Vec<OwnedMutexGuard<()>>,
}

impl KeyLocks {
    /// The lock of `key`, made if nobody holds or waits for one.
    fn lock_of(&self, key: &AuthorityKey) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(l) = locks.by_key.get(key).and_then(Weak::upgrade) {
            return l;
        }
        // Amortized cleanup of locks nobody uses any more.
        if locks.by_key.len() >= locks.clean_at.max(MIN_CLEANUP) {
            locks.by_key.retain(|_, w| w.strong_count() > 0);
            locks.clean_at = locks.by_key.len() * 2;
            locks.sweeps += 1;
        }
        let l = Arc::new(tokio::sync::Mutex::new(()));
        locks.by_key.insert(key.clone(), Arc::downgrade(&l));
        l
    }

    /// Hold the lock of every key in `keys` (duplicates allowed), taken in key order.
    pub(crate) async fn lock_all(&self, keys: &[&AuthorityKey]) -> Held {
        let mut sorted: Vec<&AuthorityKey> = keys.to_vec();
        sorted.sort();
        sorted.dedup();
        let mut guards = Vec::with_capacity(sorted.len());
        for key in sorted {
            guards.push(self.lock_of(key).lock_owned().await);
        }
        Held { _guards: guards }
    }

    /// Locks currently known (held, waited for, or not yet cleaned up).
    #[cfg(test)]
    fn known(&self) -> usize {
        self.locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .by_key
            .values()
            .filter(|w| w.strong_count() > 0)
            .count()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use zlink_store::types::ObjectKind;

    use super::*;

    fn key(id: &str) -> AuthorityKey {
        AuthorityKey::new(ObjectKind::Spot, id).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn one_key_is_held_once_and_other_keys_are_not_held_up() {
        let locks = Arc::new(KeyLocks::default());
        let (a, b) = (key("a"), key("b"));
        let held = locks.lock_all(&[&a]).await;
        // Another key: immediately.
        let other = tokio::time::timeout(Duration::from_secs(1), locks.lock_all(&[&b])).await;
        assert!(other.is_ok(), "a different key is not held up");
        drop(other);
        // The same key waits for the holder.
        let waiter = {
            let locks = Arc::clone(&locks);
            let a = a.clone();
            tokio::spawn(async move {
                let _g = locks.lock_all(&[&a]).await;
            })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "the same key waits");
        drop(held);
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(locks.known(), 0, "no lock outlives its users");
    }

    #[tokio::test(start_paused = true)]
    async fn unused_locks_are_cleaned_up_while_many_are_held() {
        let locks = KeyLocks::default();
        let held_keys: Vec<AuthorityKey> = (0..300).map(|i| key(&format!("held-{i}"))).collect();
        let refs: Vec<&AuthorityKey> = held_keys.iter().collect();
        let _held = locks.lock_all(&refs).await;
        for i in 0..5_000 {
            drop(locks.lock_all(&[&key(&format!("brief-{i}"))]).await);
            let table = locks
                .locks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .by_key
                .len();
            // Twice what the last cleanup kept (the 300 held), plus the one just made.
            assert!(
                table <= 2 * 300 + 1,
                "{table} entries after {i} brief locks"
            );
        }
        assert_eq!(locks.known(), 300, "the held locks are still known");
        // Amortized, not one sweep per lock made over the floor: while the 300 are taken the
        // table sweeps at 64, 128 and 256 entries, once more at 512, and then once per 300
        // new locks (twice the 300 kept).
        let sweeps = locks
            .locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .sweeps;
        assert!(
            sweeps <= 3 + 1 + 5_000 / 300 + 1,
            "{sweeps} sweeps for 5,300 locks made"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn overlapping_key_sets_in_opposite_order_do_not_deadlock() {
        let locks = Arc::new(KeyLocks::default());
        let (a, b, c) = (key("a"), key("b"), key("c"));
        let mut tasks = Vec::new();
        for i in 0..50 {
            let locks = Arc::clone(&locks);
            let keys = if i % 2 == 0 {
                vec![a.clone(), b.clone(), c.clone()]
            } else {
                vec![c.clone(), a.clone(), b.clone(), a.clone()]
            };
            tasks.push(tokio::spawn(async move {
                let refs: Vec<&AuthorityKey> = keys.iter().collect();
                let _g = locks.lock_all(&refs).await;
                tokio::task::yield_now().await;
            }));
        }
        for t in tasks {
            tokio::time::timeout(Duration::from_secs(5), t)
                .await
                .expect("no deadlock")
                .unwrap();
        }
    }
}
