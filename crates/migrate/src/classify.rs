//! Classification of a store's migration state, as a pure function.

use cairn_core::schema::Dialect;

use crate::checksum::LineageEntry;
use crate::refusal::{Inconsistency, LineageVerdict, Refusal};
use crate::revision::MigrationSet;

/// What a store records for one migration set.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct StoredState {
    /// The revision the store is at; `None` for a store this set never migrated.
    pub stamp: Option<String>,
    /// The history of the build that last migrated the store, base first; `None` when no
    /// lineage was recorded (a runner that predates lineage, or a store at its base).
    pub lineage: Option<Vec<LineageEntry>>,
    /// The stamp table exists and the lineage table does not. Every runner creates both in one
    /// transaction, so the lineage table was dropped by hand: the state is inconsistent
    /// ([`Inconsistency::LineageTableMissing`]), never a store without lineage.
    pub lineage_table_missing: bool,
}

/// What this build may do with a store.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Classification {
    /// The store is at this build's head. `repair_lineage` says the recorded lineage is missing
    /// or another history's and should be replaced by this build's (never for a head that is
    /// the base revision: every history contains it).
    AtHead {
        /// Whether the lineage needs repair.
        repair_lineage: bool,
    },
    /// The store is empty or at a strict ancestor of this head: apply `pending` in order.
    Upgrade {
        /// The current stamp (`None` for a new store).
        from: Option<String>,
        /// Revision ids to apply, oldest first.
        pending: Vec<String>,
    },
    /// The store is at a revision this build does not know, and its lineage shows that
    /// revision descends from this build's head: use it as is, without migrating or locking.
    Ahead {
        /// The store's (newer) stamp.
        stamp: String,
    },
    /// Anything else: this build must not use the store.
    Refused(Refusal),
}

/// Classifies a store's state for the build that knows `set`, on a store of `dialect` (whose
/// lineage holds that dialect's checksums, see [`crate::ChecksumForm`]).
///
/// - **refused, inconsistent**: a lineage without a stamp, or a stamp table without the
///   lineage table (see [`Inconsistency`]);
/// - **at head**: stamp = head;
/// - **upgrade**: stamp empty, or a strict ancestor of head;
/// - **ahead**: stamp unknown to this build, and the lineage holds the stamp and this head, with
///   this build's exact history (ids and checksums) up to the head;
/// - **refused**: anything else, and any revision this build knows recorded with other content.
pub fn classify(set: &MigrationSet, dialect: Dialect, state: &StoredState) -> Classification {
    let head = set.head().id.clone();
    let ours = set.lineage(dialect);
    let stamp_text = state.stamp.clone().unwrap_or_default();
    let inconsistent = |problem| {
        Classification::Refused(Refusal::Inconsistent {
            set: set.name().to_owned(),
            problem,
        })
    };
    if state.lineage_table_missing {
        return inconsistent(Inconsistency::LineageTableMissing);
    }

    if let Some(lineage) = &state.lineage {
        for entry in lineage {
            if let Some(pos) = set.position(&entry.revision) {
                if ours[pos].checksum != entry.checksum {
                    return Classification::Refused(Refusal::ChecksumMismatch {
                        revision: entry.revision.clone(),
                        stamp: stamp_text,
                        head,
                    });
                }
            }
        }
    }

    let Some(stamp) = &state.stamp else {
        if let Some(last) = state.lineage.as_ref().and_then(|l| l.last()) {
            return inconsistent(Inconsistency::StampMissing {
                lineage_last: last.revision.clone(),
            });
        }
        return Classification::Upgrade {
            from: None,
            pending: set.revisions().iter().map(|r| r.id.clone()).collect(),
        };
    };

    if let Some(pos) = set.position(stamp) {
        if pos + 1 == set.revisions().len() {
            let repair_lineage = set.revisions().len() > 1 && state.lineage.as_ref() != Some(&ours);
            return Classification::AtHead { repair_lineage };
        }
        return Classification::Upgrade {
            from: Some(stamp.clone()),
            pending: set.revisions()[pos + 1..]
                .iter()
                .map(|r| r.id.clone())
                .collect(),
        };
    }

    let refuse = |lineage: LineageVerdict| {
        Classification::Refused(Refusal::UnknownStamp {
            stamp: stamp.clone(),
            head: head.clone(),
            lineage,
        })
    };
    let Some(lineage) = &state.lineage else {
        return refuse(LineageVerdict::Missing);
    };
    if !lineage.iter().any(|e| &e.revision == stamp) {
        return refuse(LineageVerdict::LacksStamp);
    }
    let Some(head_pos) = lineage.iter().position(|e| e.revision == head) else {
        return refuse(LineageVerdict::LacksHead);
    };
    let stamp_pos = lineage
        .iter()
        .position(|e| &e.revision == stamp)
        .unwrap_or(0);
    if lineage[..=head_pos] != ours[..] || stamp_pos < head_pos {
        return refuse(LineageVerdict::Inconsistent);
    }
    Classification::Ahead {
        stamp: stamp.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::revision::Revision;
    use proptest::prelude::*;

    /// The dialect of the stores these tests model (the combined checksum form is not in play:
    /// the sets are not cairn's).
    const D: Dialect = Dialect::Sqlite;

    fn rev(id: &str, parent: Option<&str>, body: &str) -> Revision {
        Revision {
            id: id.into(),
            parent: parent.map(Into::into),
            up_sqlite: vec![body.into()],
            up_postgres: vec![body.into()],
            description: String::new(),
        }
    }

    /// A revision tree: node i's parent is `parents[i - 1]` (< i); node 0 is the base.
    #[derive(Clone, Debug)]
    struct Tree {
        parents: Vec<usize>,
    }

    impl Tree {
        fn len(&self) -> usize {
            self.parents.len() + 1
        }
        fn parent(&self, i: usize) -> Option<usize> {
            (i > 0).then(|| self.parents[i - 1])
        }
        fn path(&self, mut i: usize) -> Vec<usize> {
            let mut out = vec![i];
            while let Some(p) = self.parent(i) {
                out.push(p);
                i = p;
            }
            out.reverse();
            out
        }
        fn strict_ancestor(&self, a: usize, b: usize) -> bool {
            a != b && self.path(b).contains(&a)
        }
        fn set(&self, head: usize) -> MigrationSet {
            let revs = self
                .path(head)
                .into_iter()
                .map(|i| {
                    let parent = self.parent(i).map(|p| format!("r{p}"));
                    rev(&format!("r{i}"), parent.as_deref(), &format!("body {i}"))
                })
                .collect();
            MigrationSet::new("m1", revs).unwrap()
        }
        fn lineage(&self, to: usize) -> Vec<LineageEntry> {
            self.set(to).lineage(D)
        }
    }

    #[derive(Clone, Debug)]
    enum StampPick {
        Empty,
        Node(usize),
        Foreign,
    }

    #[derive(Clone, Debug)]
    enum LineagePick {
        None,
        PathTo(usize),
        /// A path with one entry recorded with other content.
        Tampered(usize, usize),
        /// A path with one entry dropped.
        Dropped(usize, usize),
    }

    fn tree() -> impl Strategy<Value = Tree> {
        (1usize..8).prop_flat_map(|n| {
            let parents: Vec<BoxedStrategy<usize>> = (1..n).map(|i| (0..i).boxed()).collect();
            parents.prop_map(|parents| Tree { parents })
        })
    }

    fn scenario() -> impl Strategy<Value = (Tree, usize, StampPick, LineagePick)> {
        tree().prop_flat_map(|t| {
            let n = t.len();
            let stamp = prop_oneof![
                1 => Just(StampPick::Empty),
                6 => (0..n).prop_map(StampPick::Node),
                1 => Just(StampPick::Foreign),
            ];
            let lineage = prop_oneof![
                2 => Just(LineagePick::None),
                6 => (0..n).prop_map(LineagePick::PathTo),
                1 => (0..n, 0..8usize).prop_map(|(a, b)| LineagePick::Tampered(a, b)),
                1 => (0..n, 0..8usize).prop_map(|(a, b)| LineagePick::Dropped(a, b)),
            ];
            (Just(t), 0..n, stamp, lineage)
        })
    }

    /// The model, stated over the tree rather than over the set.
    fn expected(
        t: &Tree,
        head: usize,
        stamp: &StampPick,
        lineage: &Option<Vec<LineageEntry>>,
    ) -> &'static str {
        let set = t.set(head);
        let ours = set.lineage(D);
        if let Some(l) = lineage {
            if l.iter().any(|e| {
                ours.iter()
                    .any(|o| o.revision == e.revision && o.checksum != e.checksum)
            }) {
                return "refused";
            }
        }
        match stamp {
            // A lineage without a stamp is inconsistent bookkeeping, never a new store.
            StampPick::Empty if lineage.as_ref().is_some_and(|l| !l.is_empty()) => "refused",
            StampPick::Empty => "upgrade",
            StampPick::Node(s) if *s == head => "at_head",
            StampPick::Node(s) if t.strict_ancestor(*s, head) => "upgrade",
            other => {
                let stamp_id = match other {
                    StampPick::Node(s) => format!("r{s}"),
                    _ => "foreign".to_string(),
                };
                let descends = matches!(other, StampPick::Node(s) if t.strict_ancestor(head, *s));
                let holds_both = lineage.as_ref().is_some_and(|l| {
                    let ids: Vec<&str> = l.iter().map(|e| e.revision.as_str()).collect();
                    let head_id = format!("r{head}");
                    ids.contains(&stamp_id.as_str())
                        && ids
                            .iter()
                            .position(|i| *i == head_id)
                            .is_some_and(|p| l[..=p] == ours[..])
                });
                if descends && holds_both {
                    "ahead"
                } else {
                    "refused"
                }
            }
        }
    }

    fn kind(c: &Classification) -> &'static str {
        match c {
            Classification::AtHead { .. } => "at_head",
            Classification::Upgrade { .. } => "upgrade",
            Classification::Ahead { .. } => "ahead",
            Classification::Refused(_) => "refused",
        }
    }

    fn cases() -> u32 {
        std::env::var("CAIRN_PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(300, |n: u32| n.max(300))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

        /// M1: classification follows ancestry over random revision trees.
        #[test]
        fn m1_classification_follows_ancestry((t, head, stamp, lineage) in scenario()) {
            let lineage = match lineage {
                LineagePick::None => None,
                LineagePick::PathTo(l) => Some(t.lineage(l)),
                LineagePick::Tampered(l, k) => {
                    let mut v = t.lineage(l);
                    let k = k % v.len();
                    v[k].checksum.0[0] ^= 1;
                    Some(v)
                }
                LineagePick::Dropped(l, k) => {
                    let mut v = t.lineage(l);
                    v.remove(k % v.len());
                    Some(v)
                }
            };
            let state = StoredState {
                stamp: match &stamp {
                    StampPick::Empty => None,
                    StampPick::Node(s) => Some(format!("r{s}")),
                    StampPick::Foreign => Some("foreign".into()),
                },
                lineage: lineage.clone(),
                ..StoredState::default()
            };
            let got = classify(&t.set(head), D, &state);
            prop_assert_eq!(kind(&got), expected(&t, head, &stamp, &lineage), "{:?}", got);
            if let Classification::Upgrade { pending, .. } = &got {
                let set = t.set(head);
                let start = match &stamp { StampPick::Node(s) => set.position(&format!("r{s}")).unwrap() + 1, _ => 0 };
                let want: Vec<String> = set.revisions()[start..].iter().map(|r| r.id.clone()).collect();
                prop_assert_eq!(pending, &want);
            }
        }
    }

    fn chain(n: usize) -> Tree {
        Tree {
            parents: (0..n.saturating_sub(1)).collect(),
        }
    }

    #[test]
    fn base_head_needs_no_lineage() {
        let t = chain(1);
        let state = StoredState {
            stamp: Some("r0".into()),
            lineage: None,
            ..StoredState::default()
        };
        assert_eq!(
            classify(&t.set(0), D, &state),
            Classification::AtHead {
                repair_lineage: false
            }
        );
    }

    #[test]
    fn head_without_lineage_needs_repair() {
        let t = chain(2);
        let state = StoredState {
            stamp: Some("r1".into()),
            lineage: None,
            ..StoredState::default()
        };
        assert_eq!(
            classify(&t.set(1), D, &state),
            Classification::AtHead {
                repair_lineage: true
            }
        );
        let ok = StoredState {
            stamp: Some("r1".into()),
            lineage: Some(t.lineage(1)),
            ..StoredState::default()
        };
        assert_eq!(
            classify(&t.set(1), D, &ok),
            Classification::AtHead {
                repair_lineage: false
            }
        );
    }

    #[test]
    fn newer_store_with_lineage_is_ahead_and_without_is_refused() {
        let t = chain(3);
        let ahead = StoredState {
            stamp: Some("r2".into()),
            lineage: Some(t.lineage(2)),
            ..StoredState::default()
        };
        assert_eq!(
            classify(&t.set(1), D, &ahead),
            Classification::Ahead { stamp: "r2".into() }
        );
        let bare = StoredState {
            stamp: Some("r2".into()),
            lineage: None,
            ..StoredState::default()
        };
        assert!(matches!(
            classify(&t.set(1), D, &bare),
            Classification::Refused(Refusal::UnknownStamp {
                lineage: LineageVerdict::Missing,
                ..
            })
        ));
    }

    #[test]
    fn same_id_other_content_is_refused() {
        let t = chain(2);
        let mut lineage = t.lineage(1);
        lineage[1].checksum.0[5] ^= 0xff;
        let state = StoredState {
            stamp: Some("r1".into()),
            lineage: Some(lineage),
            ..StoredState::default()
        };
        let got = classify(&t.set(1), D, &state);
        assert!(
            matches!(
                got,
                Classification::Refused(Refusal::ChecksumMismatch { .. })
            ),
            "{got:?}"
        );
        assert!(got_message(&got).contains("r1"));
    }

    /// Issue 9 item 2: a revision's Postgres text changing alone leaves SQLite stores alone
    /// (and refuses Postgres stores, whose lineage holds the Postgres text's checksum).
    #[test]
    fn a_change_in_one_dialect_leaves_the_other_dialects_stores_alone() {
        let base = rev("r0", None, "base");
        let one = rev("r1", Some("r0"), "body");
        let mut pg_changed = one.clone();
        pg_changed.up_postgres = vec!["body, as Postgres now reads it".into()];
        let recorded = MigrationSet::new("m1", vec![base.clone(), one]).unwrap();
        let changed = MigrationSet::new("m1", vec![base, pg_changed]).unwrap();
        let store = |d: Dialect| StoredState {
            stamp: Some("r1".into()),
            lineage: Some(recorded.lineage(d)),
            ..StoredState::default()
        };
        assert_eq!(
            classify(&changed, Dialect::Sqlite, &store(Dialect::Sqlite)),
            Classification::AtHead {
                repair_lineage: false
            }
        );
        assert!(matches!(
            classify(&changed, Dialect::Postgres, &store(Dialect::Postgres)),
            Classification::Refused(Refusal::ChecksumMismatch { .. })
        ));
    }

    /// Issue 9 item 6: a lineage without a stamp row is not a new store (replaying every
    /// revision would overwrite the lineage and stamp an older head): refused, naming the
    /// repair command, whatever build looks — older, same or newer than the lineage.
    #[test]
    fn a_lineage_without_a_stamp_is_refused_as_inconsistent() {
        let t = chain(3);
        for (recorded, build) in [(1, 2), (1, 1), (2, 1), (0, 2)] {
            let state = StoredState {
                stamp: None,
                lineage: Some(t.lineage(recorded)),
                ..StoredState::default()
            };
            let got = classify(&t.set(build), D, &state);
            assert_eq!(
                got,
                Classification::Refused(Refusal::Inconsistent {
                    set: "m1".into(),
                    problem: Inconsistency::StampMissing {
                        lineage_last: format!("r{recorded}"),
                    },
                }),
                "lineage to r{recorded}, build at r{build}"
            );
            assert!(got_message(&got).contains("run `cairn migrate --set m1 --source DIR repair`"));
        }
    }

    /// Issue 9 item 6: a stamp table without the lineage table is refused too, whatever the
    /// stamp; for cairn's own set the message names `cairn migrate repair`.
    #[test]
    fn a_missing_lineage_table_is_refused_as_inconsistent() {
        let set = crate::cairn_set();
        for stamp in [
            None,
            Some(set.head().id.clone()),
            Some(set.base().id.clone()),
        ] {
            let state = StoredState {
                stamp,
                lineage: None,
                lineage_table_missing: true,
            };
            let got = classify(&set, D, &state);
            assert!(
                matches!(
                    &got,
                    Classification::Refused(Refusal::Inconsistent {
                        problem: Inconsistency::LineageTableMissing,
                        ..
                    })
                ),
                "{got:?}"
            );
            assert!(
                got_message(&got).contains("run `cairn migrate repair`"),
                "{got:?}"
            );
        }
    }

    fn got_message(c: &Classification) -> String {
        match c {
            Classification::Refused(r) => r.to_string(),
            other => format!("{other:?}"),
        }
    }
}
