//! The node's table of live incarnations and their Spot membership (glossary §3, §5; routing
//! `000_…` §2.6 target admission; wire §9 membership). Pure: no locks, no clock, no store. The
//! runtime keeps one behind a short-held mutex; relocation uses the same API to take an
//! incarnation out at its seal and put one in at its cutover.
//!
//! Two facts live here together because they change together:
//!
//! - **incarnations**: for each live key, the incarnation (ObjectGeneration, owner generation)
//!   and its object; target admission of an arriving record is answered from it;
//! - **membership**: the member Actors of each open Spot (Entry or User) and the Spot of each
//!   Actor. Every member of a Spot lives on the Spot's node (a join across nodes moves the
//!   Actor: relocation), so the table is authoritative for the node. A Spot is open from its
//!   Ready commit until its close starts; a closing Spot takes no new members.

use std::collections::BTreeSet;

// foldhash (seeded, fast for short keys): looked up on every message and every move.
use foldhash::HashMap;

use zlink_store::types::AuthorityKey;
#[cfg(test)]
use zlink_store::types::ObjectKind;

/// What the table needs to know of a live incarnation.
pub(crate) trait Incarnation {
    /// Its ObjectGeneration.
    fn generation(&self) -> u64;
    /// The AuthorityOwnerGeneration it was admitted under.
    fn authority_owner_generation(&self) -> u64;
}

/// An incarnation whose owner generation can be updated in place.
pub(crate) trait OwnerGenerationMut: Incarnation {
    /// Set the AuthorityOwnerGeneration it is held under.
    fn set_authority_owner_generation(&mut self, g: u64);
}

/// Why target admission refused a route to a key (routing §2.6: the caller's route is stale).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Nothing of the key is live here.
    NotLive,
    /// The route's incarnation is live, but under another owner generation (it moved away and
    /// back since the route was read).
    OwnerGenerationChanged,
}

impl Refusal {
    /// Why, for the caller's error detail.
    pub(crate) fn why(self) -> &'static str {
        match self {
            Self::NotLive => "the object is not live here",
            Self::OwnerGenerationChanged => "the authority owner generation changed",
        }
    }
}

/// What a removal of the incarnation read from the store (`generation`) finds in the table.
#[derive(Debug)]
pub(crate) enum Take<E> {
    /// That incarnation (taken out), or nothing live: the removal goes ahead.
    Mine(Option<E>),
    /// A newer incarnation was created here since the read: left alone.
    Newer,
    /// An older, stale incarnation (taken out, to be closed): the record is not this one's.
    Stale(Option<E>),
}

/// A Spot that cannot close because Actors are still members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MembersLeft {
    /// How many.
    pub(crate) count: usize,
    /// One of them (the first in order), for the error detail.
    pub(crate) example: String,
}

/// Live incarnations and Spot membership of one node (see the module docs).
#[derive(Debug)]
pub(crate) struct LiveTable<E> {
    /// Looked up on every message (foldhash: seeded, fast for short keys).
    entries: HashMap<AuthorityKey, E>,
    /// Spot ID → member Actor IDs, for every open Spot.
    spots: HashMap<String, BTreeSet<String>>,
    /// Actor ID → Spot ID (also for creations in progress, so a close sees them).
    member_of: HashMap<String, String>,
}

impl<E> Default for LiveTable<E> {
    fn default() -> Self {
        Self {
            entries: HashMap::default(),
            spots: HashMap::default(),
            member_of: HashMap::default(),
        }
    }
}

impl<E: Incarnation> LiveTable<E> {
    /// The live entry of `key`.
    pub(crate) fn get(&self, key: &AuthorityKey) -> Option<&E> {
        self.entries.get(key)
    }

    /// The live entry of `key` if it is exactly incarnation `generation`.
    pub(crate) fn get_incarnation(&self, key: &AuthorityKey, generation: u64) -> Option<&E> {
        self.entries
            .get(key)
            .filter(|e| e.generation() == generation)
    }

    /// The live entry of `key` if it is exactly incarnation `generation`, to change it.
    pub(crate) fn get_incarnation_mut(
        &mut self,
        key: &AuthorityKey,
        generation: u64,
    ) -> Option<&mut E> {
        self.entries
            .get_mut(key)
            .filter(|e| e.generation() == generation)
    }

    /// Whether anything of `key` is live.
    pub(crate) fn contains_key(&self, key: &AuthorityKey) -> bool {
        self.entries.contains_key(key)
    }

    /// Enter `entry` for `key`; returns the entry it replaced.
    pub(crate) fn insert(&mut self, key: AuthorityKey, entry: E) -> Option<E> {
        self.entries.insert(key, entry)
    }

    /// Take `key` out if it is still incarnation `generation`; returns whether it was.
    pub(crate) fn forget_incarnation(&mut self, key: &AuthorityKey, generation: u64) -> bool {
        if self.get_incarnation(key, generation).is_some() {
            self.entries.remove(key);
            true
        } else {
            false
        }
    }

    /// Take `key` out if it is still incarnation `generation` under owner generation `aog`
    /// (an entry that a later move back replaced is kept); returns whether it was.
    pub(crate) fn forget_owned(&mut self, key: &AuthorityKey, generation: u64, aog: u64) -> bool {
        if self
            .get_incarnation(key, generation)
            .is_some_and(|e| e.authority_owner_generation() == aog)
        {
            self.entries.remove(key);
            true
        } else {
            false
        }
    }

    /// Every live entry with its key.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&AuthorityKey, &E)> {
        self.entries.iter()
    }

    /// Every live entry.
    pub(crate) fn values(&self) -> impl Iterator<Item = &E> {
        self.entries.values()
    }

    /// Live incarnations.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Live incarnations by kind: `(actors, spots)`.
    pub(crate) fn count_by_kind(&self) -> (usize, usize) {
        let actors = self
            .entries
            .keys()
            .filter(|k| {
                zlink_protocol::keys::parse_authority_key(k.as_str())
                    .is_ok_and(|(kind, _)| kind == zlink_protocol::keys::ObjectKindKey::Actor)
            })
            .count();
        (actors, self.entries.len() - actors)
    }

    /// Record that incarnation `generation` of `key` is now held under owner generation
    /// `owner_generation` (after a Preserve CAS that moved it); returns whether it is live.
    pub(crate) fn set_owner_generation(
        &mut self,
        key: &AuthorityKey,
        generation: u64,
        owner_generation: u64,
    ) -> bool
    where
        E: OwnerGenerationMut,
    {
        match self.entries.get_mut(key) {
            Some(e) if e.generation() == generation => {
                e.set_authority_owner_generation(owner_generation);
                true
            }
            Some(_) | None => false,
        }
    }

    /// Take every entry out and forget all membership (shutdown).
    pub(crate) fn drain_all(&mut self) -> Vec<E> {
        self.spots.clear();
        self.member_of.clear();
        self.entries.drain().map(|(_, e)| e).collect()
    }

    /// Forget everything (shutdown).
    #[cfg(test)]
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.spots.clear();
        self.member_of.clear();
    }

    /// Target admission (routing §2.6) of a route naming incarnation `generation` under owner
    /// generation `owner_generation`: the same incarnation is admitted only under the same
    /// owner generation; a **newer** incarnation under this node's owner and lease receives it
    /// too (ObjectGeneration is not a target-match condition for messages).
    ///
    /// # Errors
    /// [`Refusal`] when the caller's route is stale.
    pub(crate) fn admit<Q>(
        &self,
        key: &Q,
        generation: u64,
        owner_generation: u64,
    ) -> Result<&E, Refusal>
    where
        Q: std::hash::Hash + Eq + ?Sized,
        AuthorityKey: std::borrow::Borrow<Q>,
    {
        match self.entries.get(key) {
            Some(e)
                if e.generation() == generation
                    && e.authority_owner_generation() == owner_generation =>
            {
                Ok(e)
            }
            Some(e) if e.generation() == generation => Err(Refusal::OwnerGenerationChanged),
            Some(e) => Ok(e),
            None => Err(Refusal::NotLive),
        }
    }

    /// What removing incarnation `generation` (read from the store) finds: the entry is taken
    /// only if it is exactly that incarnation and `record_is_ours` (the record names this
    /// node's lease and lifecycle); a newer one is never touched; an older one is stale and
    /// taken out to be closed.
    pub(crate) fn take_for_removal(
        &mut self,
        key: &AuthorityKey,
        generation: u64,
        record_is_ours: bool,
    ) -> Take<E> {
        match self.entries.get(key).map(Incarnation::generation) {
            Some(g) if g == generation && record_is_ours => Take::Mine(self.entries.remove(key)),
            Some(g) if g > generation => Take::Newer,
            Some(_) => Take::Stale(self.entries.remove(key)),
            None => Take::Mine(None),
        }
    }
}

impl<E> LiveTable<E> {
    /// Open Spot `spot` for members (at its Ready commit, or again after a close that did not
    /// happen). Members it already has are kept.
    pub(crate) fn open_spot(&mut self, spot: &str) {
        self.spots.entry(spot.to_owned()).or_default();
    }

    /// Whether Spot `spot` is open for members.
    pub(crate) fn spot_is_open(&self, spot: &str) -> bool {
        self.spots.contains_key(spot)
    }

    /// Start closing Spot `spot`: it takes no new members from here on.
    ///
    /// # Errors
    /// [`MembersLeft`] (and the Spot stays open) while Actors are members: their membership
    /// would name a gone Spot.
    pub(crate) fn close_spot(&mut self, spot: &str) -> Result<(), MembersLeft> {
        if let Some(set) = self.spots.get(spot).filter(|s| !s.is_empty()) {
            return Err(MembersLeft {
                count: set.len(),
                example: set.iter().next().cloned().unwrap_or_default(),
            });
        }
        self.spots.remove(spot);
        Ok(())
    }

    /// Enrol `actor` in `spot`, leaving its previous Spot; `false` (and nothing changes) when
    /// the Spot is not open.
    pub(crate) fn enrol(&mut self, actor: &str, spot: &str) -> bool {
        let Some(set) = self.spots.get_mut(spot) else {
            return false;
        };
        set.insert(actor.to_owned());
        if let Some(old) = self.member_of.insert(actor.to_owned(), spot.to_owned())
            && old != spot
            && let Some(s) = self.spots.get_mut(&old)
        {
            s.remove(actor);
        }
        true
    }

    /// Forget `actor`'s membership; returns the Spot it was a member of.
    pub(crate) fn forget_member(&mut self, actor: &str) -> Option<String> {
        let spot = self.member_of.remove(actor)?;
        if let Some(s) = self.spots.get_mut(&spot) {
            s.remove(actor);
        }
        Some(spot)
    }

    /// The Spot `actor` is a member of.
    pub(crate) fn spot_of(&self, actor: &str) -> Option<&str> {
        self.member_of.get(actor).map(String::as_str)
    }

    /// The members of open Spot `spot`, in order; `None` when it is not open.
    pub(crate) fn members_of(&self, spot: &str) -> Option<Vec<String>> {
        self.spots.get(spot).map(|s| s.iter().cloned().collect())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Entry {
        generation: u64,
        owner_generation: u64,
    }

    impl OwnerGenerationMut for Entry {
        fn set_authority_owner_generation(&mut self, g: u64) {
            self.owner_generation = g;
        }
    }

    impl Incarnation for Entry {
        fn generation(&self) -> u64 {
            self.generation
        }
        fn authority_owner_generation(&self) -> u64 {
            self.owner_generation
        }
    }

    fn key(kind: ObjectKind, id: &str) -> AuthorityKey {
        AuthorityKey::new(kind, id).unwrap()
    }

    fn entry(generation: u64, owner_generation: u64) -> Entry {
        Entry {
            generation,
            owner_generation,
        }
    }

    fn table_with(k: &AuthorityKey, e: Entry) -> LiveTable<Entry> {
        let mut t = LiveTable::default();
        t.insert(k.clone(), e);
        t
    }

    /// Target admission, routing §2.6: (live incarnation, owner generation) × route → result.
    #[test]
    fn admission_follows_the_routing_table_for_every_incarnation_and_owner_generation() {
        let k = key(ObjectKind::Actor, "p-1");
        let t = table_with(&k, entry(5, 2));
        let cases: [((u64, u64), Result<u64, Refusal>); 5] = [
            ((5, 2), Ok(5)),
            ((5, 3), Err(Refusal::OwnerGenerationChanged)),
            // A newer incarnation under this owner receives a route to an older one.
            ((4, 2), Ok(5)),
            ((4, 9), Ok(5)),
            ((6, 2), Ok(5)),
        ];
        for ((generation, owner), want) in cases {
            let got = t.admit(&k, generation, owner).map(|e| e.generation);
            assert_eq!(got, want, "route ({generation}, {owner})");
        }
        let other = key(ObjectKind::Spot, "p-1");
        assert_eq!(
            t.admit(&other, 5, 2).map(|e| e.generation),
            Err(Refusal::NotLive),
            "an Actor and a Spot with one ID are different keys"
        );
    }

    #[test]
    fn a_removal_takes_only_the_incarnation_it_read_and_never_a_newer_one() {
        let k = key(ObjectKind::Spot, "room");
        let mut t = table_with(&k, entry(3, 1));
        assert!(matches!(t.take_for_removal(&k, 2, true), Take::Newer));
        assert!(t.contains_key(&k), "a newer incarnation stays");
        assert!(matches!(
            t.take_for_removal(&k, 3, false),
            Take::Stale(Some(Entry { generation: 3, .. }))
        ));
        assert!(
            !t.contains_key(&k),
            "a record that is not ours makes the entry stale"
        );
        let mut t = table_with(&k, entry(3, 1));
        assert!(matches!(
            t.take_for_removal(&k, 3, true),
            Take::Mine(Some(Entry { generation: 3, .. }))
        ));
        assert!(matches!(t.take_for_removal(&k, 3, true), Take::Mine(None)));
        let mut t = table_with(&k, entry(3, 1));
        assert!(matches!(
            t.take_for_removal(&k, 4, true),
            Take::Stale(Some(_))
        ));
    }

    #[test]
    fn forgetting_an_incarnation_leaves_a_newer_one_in_place() {
        let k = key(ObjectKind::Actor, "a");
        let mut t = table_with(&k, entry(7, 1));
        assert!(!t.forget_incarnation(&k, 6));
        assert_eq!(t.get(&k).map(|e| e.generation), Some(7));
        assert!(t.forget_incarnation(&k, 7));
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn an_owner_generation_moves_only_for_the_incarnation_named() {
        let k = key(ObjectKind::Spot, "s");
        let mut t = table_with(&k, entry(2, 1));
        assert!(!t.set_owner_generation(&k, 1, 9));
        assert!(t.set_owner_generation(&k, 2, 4));
        assert_eq!(t.admit(&k, 2, 4).map(|e| e.owner_generation), Ok(4));
        assert_eq!(t.drain_all().len(), 1);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn counts_by_kind_and_clear() {
        let mut t = LiveTable::default();
        t.insert(key(ObjectKind::Actor, "a"), entry(1, 1));
        t.insert(key(ObjectKind::Actor, "b"), entry(1, 1));
        t.insert(key(ObjectKind::Spot, "s"), entry(1, 1));
        t.open_spot("s");
        assert!(t.enrol("a", "s"));
        assert_eq!(t.count_by_kind(), (2, 1));
        t.clear();
        assert_eq!(
            (t.len(), t.spot_is_open("s"), t.spot_of("a")),
            (0, false, None)
        );
    }

    #[test]
    fn an_actor_is_a_member_of_one_open_spot_at_a_time() {
        let mut t: LiveTable<Entry> = LiveTable::default();
        assert!(
            !t.enrol("a", "s1"),
            "a Spot that is not open takes no members"
        );
        t.open_spot("s1");
        t.open_spot("s2");
        assert!(t.enrol("a", "s1"));
        assert!(t.enrol("a", "s2"), "a join leaves the previous Spot");
        assert_eq!(t.spot_of("a"), Some("s2"));
        assert_eq!(t.members_of("s1"), Some(vec![]));
        assert_eq!(t.members_of("s2"), Some(vec!["a".to_owned()]));
        t.open_spot("s2");
        assert_eq!(
            t.members_of("s2"),
            Some(vec!["a".to_owned()]),
            "re-opening keeps members"
        );
        assert_eq!(t.forget_member("a").as_deref(), Some("s2"));
        assert_eq!(t.forget_member("a"), None);
        assert_eq!(t.members_of("s2"), Some(vec![]));
    }

    #[test]
    fn a_spot_with_members_does_not_close_and_a_closing_spot_takes_no_members() {
        let mut t: LiveTable<Entry> = LiveTable::default();
        t.open_spot("s");
        assert!(t.enrol("b", "s"));
        assert!(t.enrol("a", "s"));
        assert_eq!(
            t.close_spot("s"),
            Err(MembersLeft {
                count: 2,
                example: "a".into()
            })
        );
        assert!(t.spot_is_open("s"), "a refused close leaves the Spot open");
        t.forget_member("a");
        t.forget_member("b");
        assert_eq!(t.close_spot("s"), Ok(()));
        assert!(!t.spot_is_open("s"));
        assert!(!t.enrol("c", "s"), "a closing Spot takes no new members");
        assert_eq!(t.members_of("s"), None);
    }
}
