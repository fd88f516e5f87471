//! The chaos run's history checker (issue 20 item 4): a pure function over what a load run
//! observed (`zlink-node load --history`: every call with its serving RID and lifecycle, every
//! final read with the counter's exact applied set) and the faults the driver injected. It
//! fails a run that shows:
//!
//! 1. **Two admitting owners at once**: for one ID, owner A answered strictly before and
//!    strictly after an answer of owner B (A ≠ B; an owner is a RID plus a node lifecycle, and
//!    one lifecycle holds one lease interval, so A's lease was live while B served).
//! 2. **A message applied twice**: two successful answers for one `(ID, number)` (the load
//!    issues every number once), or a counter that saw a number twice (`duplicates > 0`).
//! 3. **An untyped failure**: a failed call whose error is not one of the runtime's error
//!    kinds.
//! 4. **An unexplained loss**: a number whose call succeeded but that the final read does not
//!    show applied, with no fault that allows it — the ID's owner at the time was killed with
//!    kill -9, or stopped past its lease (fenced, objects dropped), or Redis was down longer
//!    than a lease (every host fenced) — before the number was acknowledged plus a detection
//!    window. Nothing else (a short Redis outage, a cut, stalled or delayed mesh connection, a
//!    SIGTERM that relocates first) may lose anything.
//!
//! Std and `serde_json` only, so process tests can include this file with `#[path]`.

#![allow(dead_code)] // included by several test binaries, each using a subset

use std::collections::{BTreeMap, HashMap};

/// The error kinds of `zlink::call::error::ErrorKind` (their `Debug` names).
pub const ERROR_KINDS: &[&str] = &[
    "NotFound",
    "Unavailable",
    "DeadlineExceeded",
    "Cancelled",
    "ShuttingDown",
    "InvalidOperation",
    "AlreadyExists",
    "Conflict",
    "ProtocolError",
    "StoreFailure",
    "GenerationExhausted",
    "Configuration",
    "Rejected",
    "HandlerFailed",
    "Backpressured",
    "StaleRoute",
];

/// Who served a call: a node's RID and its lifecycle generation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner {
    /// The RID (`<host slot>-<uuid>`).
    pub rid: String,
    /// The node lifecycle generation.
    pub lifecycle: u64,
}

impl Owner {
    /// The host slot: the RID's prefix (the driver gives each host slot its own prefix, kept
    /// across restarts and rejoins).
    pub fn slot(&self) -> &str {
        self.rid.split('-').next().unwrap_or("")
    }
}

/// One call of the load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The counter ID.
    pub id: String,
    /// The message's number.
    pub seq: u64,
    /// Issued at (Unix ms).
    pub start_ms: u64,
    /// Ended at (Unix ms).
    pub end_ms: u64,
    /// The error kind, if the call failed.
    pub error: Option<String>,
    /// The serving owner (answered requests).
    pub owner: Option<Owner>,
    /// Numbers the counter had seen twice when it answered.
    pub duplicates: u64,
}

/// One final read of a counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// The counter ID.
    pub id: String,
    /// Answered at (Unix ms).
    pub at_ms: u64,
    /// The serving owner.
    pub owner: Owner,
    /// One past the highest applied number.
    pub end: u64,
    /// Missing ranges below `end`, inclusive.
    pub holes: Vec<(u64, u64)>,
    /// Numbers seen twice.
    pub duplicates: u64,
}

impl Read {
    /// Whether number `n` is applied.
    pub fn applied(&self, n: u64) -> bool {
        n < self.end && !self.holes.iter().any(|&(a, b)| (a..=b).contains(&n))
    }
}

/// A fault kind of the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// kill -9 of a host, then a restart.
    Kill9,
    /// SIGSTOP for longer than the lease, then SIGCONT (the host is fenced, drops its
    /// objects and rejoins).
    Stop,
    /// Redis down for less than TTL − margin − renew period.
    RedisShort,
    /// Redis down for longer than the lease TTL (every host loses its lease).
    RedisLong,
    /// The fault proxy cuts a host's mesh connections.
    ProxyCut,
    /// The fault proxy stalls them.
    ProxyStall,
    /// The fault proxy delays them.
    ProxyDelay,
    /// SIGTERM: relocate, drain, exit; then a replacement starts.
    Sigterm,
}

impl FaultKind {
    /// Every kind (the 60 s run injects each at least once).
    pub const ALL: [Self; 8] = [
        Self::Kill9,
        Self::Stop,
        Self::RedisShort,
        Self::RedisLong,
        Self::ProxyCut,
        Self::ProxyStall,
        Self::ProxyDelay,
        Self::Sigterm,
    ];

    /// Whether this fault may lose in-memory objects (and so acknowledged messages).
    pub fn allows_loss(self) -> bool {
        match self {
            Self::Kill9 | Self::Stop | Self::RedisLong => true,
            Self::RedisShort
            | Self::ProxyCut
            | Self::ProxyStall
            | Self::ProxyDelay
            | Self::Sigterm => false,
        }
    }

    /// Short name (`ZLINK_CHAOS_ONLY`).
    pub fn short(self) -> &'static str {
        match self {
            Self::Kill9 => "kill9",
            Self::Stop => "stop",
            Self::RedisShort => "redis-short",
            Self::RedisLong => "redis-long",
            Self::ProxyCut => "cut",
            Self::ProxyStall => "stall",
            Self::ProxyDelay => "delay",
            Self::Sigterm => "sigterm",
        }
    }

    /// Stable name (logs, `docs/reliability.md`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Kill9 => "kill -9 + restart",
            Self::Stop => "SIGSTOP past the lease + SIGCONT",
            Self::RedisShort => "short Redis restart",
            Self::RedisLong => "long Redis restart",
            Self::ProxyCut => "mesh connection cut",
            Self::ProxyStall => "mesh connection stall",
            Self::ProxyDelay => "mesh connection delay",
            Self::Sigterm => "SIGTERM drain + replacement",
        }
    }
}

/// One injected fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// What.
    pub kind: FaultKind,
    /// The host slot it hit (`None`: every host, as a Redis outage).
    pub slot: Option<String>,
    /// When it began (Unix ms).
    pub start_ms: u64,
    /// When it ended (the host restarted or resumed, Redis back, the proxy passing again).
    pub end_ms: u64,
}

/// Everything the checker looks at.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// Every call.
    pub calls: Vec<Call>,
    /// Every final read.
    pub reads: Vec<Read>,
    /// Every fault.
    pub faults: Vec<Fault>,
    /// After a fault ends, how long messages sent to the faulted owner may still be lost
    /// (until the senders notice: liveness deadline, lease TTL, route cache refresh).
    pub detect_ms: u64,
}

/// A broken property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// Owner `a` answered for `id` before and after `b` did.
    TwoOwners {
        /// The ID.
        id: String,
        /// The owner that kept serving.
        a: Owner,
        /// The owner in between.
        b: Owner,
        /// When `b` answered (Unix ms).
        b_end_ms: u64,
    },
    /// `(id, seq)` was applied twice.
    AppliedTwice {
        /// The ID.
        id: String,
        /// The number (`None`: the counter reported duplicates).
        seq: Option<u64>,
    },
    /// A failed call without a runtime error kind.
    UntypedError {
        /// The ID.
        id: String,
        /// The number.
        seq: u64,
        /// What it said.
        error: String,
    },
    /// An acknowledged number that was not applied, with no fault to explain it.
    UnexplainedLoss {
        /// The ID.
        id: String,
        /// The number.
        seq: u64,
        /// When it was acknowledged (Unix ms).
        acked_ms: u64,
    },
    /// An ID with acknowledged numbers but no final read.
    Unread {
        /// The ID.
        id: String,
    },
}

/// The checker's result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// What broke (empty: the run passes).
    pub violations: Vec<Violation>,
    /// Calls checked.
    pub calls: u64,
    /// Of those, failed with a typed error.
    pub failed: u64,
    /// Failed calls by error kind.
    pub failed_by_kind: BTreeMap<String, u64>,
    /// Acknowledged numbers that were lost, explained by a fault.
    pub explained_losses: u64,
    /// Those losses by the fault kind that explains them (the earliest fault whose window
    /// covers the loss).
    pub losses_by_fault: BTreeMap<String, u64>,
    /// Faults by kind.
    pub faults: BTreeMap<String, u64>,
}

impl Verdict {
    /// Whether the run passes.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Check `h`.
pub fn check(h: &History) -> Verdict {
    let mut v = Verdict {
        calls: h.calls.len() as u64,
        ..Verdict::default()
    };
    for f in &h.faults {
        *v.faults.entry(f.kind.name().to_owned()).or_default() += 1;
    }
    // Answers per ID: (start, end, owner), requests and reads.
    let mut answers: BTreeMap<&str, Vec<(u64, u64, &Owner)>> = BTreeMap::new();
    let mut answered: HashMap<(&str, u64), u32> = HashMap::new();
    for c in &h.calls {
        match &c.error {
            Some(e) => {
                v.failed += 1;
                *v.failed_by_kind.entry(e.clone()).or_default() += 1;
                if !ERROR_KINDS.contains(&e.as_str()) {
                    v.violations.push(Violation::UntypedError {
                        id: c.id.clone(),
                        seq: c.seq,
                        error: e.clone(),
                    });
                }
            }
            None => {
                let n = answered.entry((c.id.as_str(), c.seq)).or_default();
                *n += 1;
                if *n == 2 {
                    v.violations.push(Violation::AppliedTwice {
                        id: c.id.clone(),
                        seq: Some(c.seq),
                    });
                }
                if c.duplicates > 0 {
                    v.violations.push(Violation::AppliedTwice {
                        id: c.id.clone(),
                        seq: None,
                    });
                }
                if let Some(o) = &c.owner {
                    answers
                        .entry(c.id.as_str())
                        .or_default()
                        .push((c.start_ms, c.end_ms, o));
                }
            }
        }
    }
    let reads: HashMap<&str, &Read> = h.reads.iter().map(|r| (r.id.as_str(), r)).collect();
    for r in &h.reads {
        if r.duplicates > 0 {
            v.violations.push(Violation::AppliedTwice {
                id: r.id.clone(),
                seq: None,
            });
        }
        answers
            .entry(r.id.as_str())
            .or_default()
            .push((r.at_ms, r.at_ms, &r.owner));
    }
    // 1. One admitting owner at a time.
    for (id, list) in &mut answers {
        list.sort_by_key(|&(s, e, _)| (e, s));
        let mut span: BTreeMap<&Owner, (u64, u64)> = BTreeMap::new();
        for &(s, e, o) in list.iter() {
            let x = span.entry(o).or_insert((e, s));
            x.0 = x.0.min(e);
            x.1 = x.1.max(s);
        }
        'owners: for (a, &(first_end, last_start)) in &span {
            for &(s, e, b) in list.iter() {
                if b != *a && first_end < s && e < last_start {
                    v.violations.push(Violation::TwoOwners {
                        id: (*id).to_owned(),
                        a: (*a).clone(),
                        b: b.clone(),
                        b_end_ms: e,
                    });
                    continue 'owners;
                }
            }
        }
    }
    // 4. Every loss explained.
    let losing: Vec<&Fault> = h.faults.iter().filter(|f| f.kind.allows_loss()).collect();
    let mut by_id: BTreeMap<&str, Vec<&Call>> = BTreeMap::new();
    for c in h.calls.iter().filter(|c| c.error.is_none()) {
        by_id.entry(c.id.as_str()).or_default().push(c);
    }
    for (id, calls) in by_id {
        let Some(read) = reads.get(id) else {
            v.violations.push(Violation::Unread { id: id.to_owned() });
            continue;
        };
        let owners = answers.get(id).map_or(&[][..], Vec::as_slice);
        // The losing faults that hit this ID's owner at the time: (fault end + window).
        let mut hits: Vec<(u64, FaultKind)> = losing
            .iter()
            .filter(|f| {
                f.slot.as_deref().is_none_or(|slot| {
                    owner_at(owners, f.start_ms).is_some_and(|o| o.slot() == slot)
                })
            })
            .map(|f| (f.end_ms.saturating_add(h.detect_ms), f.kind))
            .collect();
        hits.sort();
        for c in calls {
            if read.applied(c.seq) {
                continue;
            }
            if let Some(&(_, kind)) = hits.iter().find(|&&(until, _)| c.end_ms <= until) {
                v.explained_losses += 1;
                *v.losses_by_fault.entry(kind.name().to_owned()).or_default() += 1;
            } else {
                v.violations.push(Violation::UnexplainedLoss {
                    id: id.to_owned(),
                    seq: c.seq,
                    acked_ms: c.end_ms,
                });
            }
        }
    }
    v
}

/// The owner of the last answer that ended at or before `t` (or the first one after it);
/// `answers` is sorted by end time.
fn owner_at<'a>(answers: &[(u64, u64, &'a Owner)], t: u64) -> Option<&'a Owner> {
    let i = answers.partition_point(|&(_, e, _)| e <= t);
    answers.get(i.saturating_sub(1)).map(|&(_, _, o)| o)
}

/// Parse a `zlink-node load --history` file: calls and final reads.
///
/// # Errors
/// A line that is not a history line (its number and why).
pub fn parse_load_history(text: &str) -> Result<(Vec<Call>, Vec<Read>), String> {
    let mut calls = Vec::new();
    let mut reads = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let bad = |why: &str| format!("history line {}: {why}: {line}", i + 1);
        let j: serde_json::Value = serde_json::from_str(line).map_err(|e| bad(&e.to_string()))?;
        let s = |k: &str| j[k].as_str().unwrap_or_default().to_owned();
        let n = |k: &str| j[k].as_u64().unwrap_or_default();
        let owner = (!s("rid").is_empty()).then(|| Owner {
            rid: s("rid"),
            lifecycle: n("lifecycle"),
        });
        match j["kind"].as_str() {
            Some("read") => reads.push(Read {
                id: s("id"),
                at_ms: n("t_ms"),
                owner: owner.ok_or_else(|| bad("a read without its owner"))?,
                end: n("end"),
                holes: j["holes"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|r| Some((r[0].as_u64()?, r[1].as_u64()?)))
                            .collect()
                    })
                    .unwrap_or_default(),
                duplicates: n("duplicates"),
            }),
            Some("send" | "request") => calls.push(Call {
                id: s("id"),
                seq: j["seq"].as_u64().ok_or_else(|| bad("no seq"))?,
                start_ms: n("start_ms"),
                end_ms: n("t_ms"),
                error: j["error"].as_str().map(str::to_owned),
                owner,
                duplicates: n("duplicates"),
            }),
            _ => return Err(bad("unknown kind")),
        }
    }
    Ok((calls, reads))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn owner(slot: &str, lifecycle: u64) -> Owner {
        Owner {
            rid: format!("{slot}-0000"),
            lifecycle,
        }
    }

    fn req(id: &str, seq: u64, at: u64, o: &Owner) -> Call {
        Call {
            id: id.into(),
            seq,
            start_ms: at,
            end_ms: at + 1,
            error: None,
            owner: Some(o.clone()),
            duplicates: 0,
        }
    }

    fn send(id: &str, seq: u64, at: u64) -> Call {
        Call {
            id: id.into(),
            seq,
            start_ms: at,
            end_ms: at,
            error: None,
            owner: None,
            duplicates: 0,
        }
    }

    fn read(id: &str, at: u64, o: &Owner, end: u64, holes: &[(u64, u64)]) -> Read {
        Read {
            id: id.into(),
            at_ms: at,
            owner: o.clone(),
            end,
            holes: holes.to_vec(),
            duplicates: 0,
        }
    }

    /// A clean history: `x` served by c0 then (after a SIGTERM relocation) by c1.
    fn clean() -> History {
        let (a, b) = (owner("c0", 1), owner("c1", 1));
        History {
            calls: vec![
                req("x", 0, 100, &a),
                send("x", 1, 110),
                req("x", 2, 120, &a),
                req("x", 3, 300, &b),
                send("x", 4, 310),
            ],
            reads: vec![read("x", 1_000, &b, 5, &[])],
            faults: vec![Fault {
                kind: FaultKind::Sigterm,
                slot: Some("c0".into()),
                start_ms: 200,
                end_ms: 250,
            }],
            detect_ms: 100,
        }
    }

    #[test]
    fn a_clean_history_passes() {
        let v = check(&clean());
        assert!(v.passed(), "{v:?}");
        assert_eq!((v.calls, v.failed, v.explained_losses), (5, 0, 0));
    }

    #[test]
    fn an_owner_answering_after_another_took_over_is_two_admitting_owners() {
        let mut h = clean();
        // Planted: c0 keeps admitting after its fencing deadline, after c1 served.
        h.calls.push(req("x", 5, 400, &owner("c0", 1)));
        h.reads[0].end = 6;
        let v = check(&h);
        assert!(
            v.violations
                .iter()
                .any(|x| matches!(x, Violation::TwoOwners { a, .. } if a.slot() == "c0")),
            "{v:?}"
        );
        assert!(
            v.violations
                .iter()
                .all(|x| matches!(x, Violation::TwoOwners { .. })),
            "{v:?}"
        );
        // The same RID in a new lifecycle (a rejoin) that serves from then on is another
        // owner, after the first: no violation.
        let mut h = clean();
        let rejoined = owner("c1", 2);
        h.calls.push(req("x", 5, 400, &rejoined));
        h.reads[0] = read("x", 1_000, &rejoined, 6, &[]);
        assert!(check(&h).passed(), "{:?}", check(&h));
        // Overlapping calls are concurrent, not ordered: no violation.
        let mut h = clean();
        let mut c = req("x", 5, 250, &owner("c0", 1));
        c.end_ms = 350;
        h.calls.push(c);
        h.reads[0].end = 6;
        assert!(check(&h).passed(), "{:?}", check(&h));
    }

    #[test]
    fn a_number_answered_twice_or_a_counted_duplicate_is_applied_twice() {
        let mut h = clean();
        h.calls.push(req("x", 3, 320, &owner("c1", 1)));
        assert_eq!(
            check(&h).violations,
            vec![Violation::AppliedTwice {
                id: "x".into(),
                seq: Some(3)
            }]
        );
        let mut h = clean();
        h.reads[0].duplicates = 1;
        assert_eq!(
            check(&h).violations,
            vec![Violation::AppliedTwice {
                id: "x".into(),
                seq: None
            }]
        );
    }

    #[test]
    fn failures_must_carry_a_runtime_error_kind() {
        let mut h = clean();
        let mut c = send("x", 9, 500);
        c.error = Some("StoreFailure".into());
        h.calls.push(c);
        let v = check(&h);
        assert!(v.passed());
        assert_eq!(v.failed, 1);
        assert_eq!(v.failed_by_kind.get("StoreFailure"), Some(&1));
        let mut c = send("x", 10, 500);
        c.error = Some("connection reset".into());
        h.calls.push(c);
        assert!(matches!(
            &check(&h).violations[..],
            [Violation::UntypedError { seq: 10, .. }]
        ));
    }

    #[test]
    fn a_loss_is_explained_only_by_a_losing_fault_on_the_owner_in_time() {
        let (a, b) = (owner("c0", 1), owner("c1", 1));
        let base = |fault: Fault| History {
            calls: vec![
                req("x", 0, 100, &a),
                send("x", 1, 150),
                req("x", 2, 2_000, &b),
            ],
            // c1 started from scratch: 0 and 1 are lost.
            reads: vec![read("x", 3_000, &b, 3, &[(0, 1)])],
            faults: vec![fault],
            detect_ms: 500,
        };
        let kill = |slot: &str, at: u64| Fault {
            kind: FaultKind::Kill9,
            slot: Some(slot.into()),
            start_ms: at,
            end_ms: at + 100,
        };
        let v = check(&base(kill("c0", 200)));
        assert!(v.passed(), "{v:?}");
        assert_eq!(v.explained_losses, 2);
        assert_eq!(v.losses_by_fault.get("kill -9 + restart"), Some(&2));
        // The wrong host was killed: both losses are unexplained.
        let v = check(&base(kill("c2", 200)));
        assert_eq!(v.violations.len(), 2, "{v:?}");
        // A fault long before the acknowledgement (beyond the detection window) explains nothing.
        let mut h = base(kill("c0", 200));
        h.calls[1].end_ms = 900;
        let v = check(&h);
        assert!(
            matches!(
                &v.violations[..],
                [Violation::UnexplainedLoss { seq: 1, .. }]
            ),
            "{v:?}"
        );
        // A fault that may not lose anything explains nothing.
        let mut cut = kill("c0", 200);
        cut.kind = FaultKind::ProxyCut;
        assert_eq!(check(&base(cut)).violations.len(), 2);
        // A long Redis outage hits every host.
        let redis = Fault {
            kind: FaultKind::RedisLong,
            slot: None,
            start_ms: 200,
            end_ms: 1_500,
        };
        assert!(check(&base(redis)).passed());
    }

    #[test]
    fn an_acknowledged_number_without_a_final_read_fails() {
        let mut h = clean();
        h.reads.clear();
        assert_eq!(
            check(&h).violations,
            vec![Violation::Unread { id: "x".into() }]
        );
    }

    #[test]
    fn load_history_lines_parse() {
        let text = concat!(
            r#"{"t_ms":12,"start_ms":10,"id":"x","kind":"request","seq":0,"error":null,"rid":"c0-a","lifecycle":7,"adds":1,"end":0,"holes":[]}"#,
            "\n",
            r#"{"t_ms":13,"start_ms":13,"id":"x","kind":"send","seq":1,"error":"StoreFailure","rid":"","lifecycle":0,"adds":0,"end":0,"holes":[]}"#,
            "\n",
            r#"{"t_ms":20,"start_ms":20,"id":"x","kind":"read","seq":null,"error":null,"rid":"c1-b","lifecycle":3,"adds":2,"end":5,"holes":[[1,2]]}"#,
            "\n"
        );
        let (calls, reads) = parse_load_history(text).unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].owner.as_ref().unwrap().slot(), "c0");
        assert_eq!(calls[1].error.as_deref(), Some("StoreFailure"));
        assert_eq!(reads[0].holes, vec![(1, 2)]);
        assert!(reads[0].applied(0) && !reads[0].applied(2) && reads[0].applied(3));
        assert!(parse_load_history("{\"kind\":\"what\"}").is_err());
    }
}
