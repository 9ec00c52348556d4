//! Classification of a store's migration state, as a pure function.

use crate::revision::{LineageEntry, MigrationSet};

/// What a store records for one migration set.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct StoredState {
    /// The revision the store is at; `None` for a store this set never migrated.
    pub stamp: Option<String>,
    /// The history of the build that last migrated the store, base first; `None` when no
    /// lineage was recorded (a runner that predates lineage, or a store at its base).
    pub lineage: Option<Vec<LineageEntry>>,
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

/// Why a store was refused.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Refusal {
    /// The store is at a revision this build does not know and the lineage does not show it
    /// descends from this build's head (a diverged branch, no lineage, or an inconsistent one).
    UnknownStamp {
        /// The store's stamp.
        stamp: String,
        /// This build's head.
        head: String,
        /// What the lineage showed.
        lineage: LineageVerdict,
    },
    /// A revision id this build knows was recorded with different content.
    ChecksumMismatch {
        /// The revision id.
        revision: String,
        /// The store's stamp.
        stamp: String,
        /// This build's head.
        head: String,
    },
}

/// What the lineage showed for a refused unknown stamp.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LineageVerdict {
    /// No lineage is recorded.
    Missing,
    /// The lineage does not hold the stamp.
    LacksStamp,
    /// The lineage does not hold this build's head.
    LacksHead,
    /// The lineage holds both, but its history up to this head is not this build's.
    Inconsistent,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::UnknownStamp { stamp, head, lineage } => {
                let why = match lineage {
                    LineageVerdict::Missing => "no lineage is recorded",
                    LineageVerdict::LacksStamp => "the recorded lineage does not hold that revision",
                    LineageVerdict::LacksHead => "the recorded lineage does not hold this build's head",
                    LineageVerdict::Inconsistent => "the recorded lineage disagrees with this build's history",
                };
                write!(
                    f,
                    "store is at revision {stamp}, unknown to this build (head {head}), and {why}: a diverged or unrelated history"
                )
            }
            Refusal::ChecksumMismatch { revision, stamp, head } => write!(
                f,
                "revision {revision} was applied with different content than this build's (store at {stamp}, this build's head {head})"
            ),
        }
    }
}

/// Classifies a store's state for the build that knows `set`.
///
/// - **at head**: stamp = head;
/// - **upgrade**: stamp empty, or a strict ancestor of head;
/// - **ahead**: stamp unknown to this build, and the lineage holds the stamp and this head, with
///   this build's exact history (ids and checksums) up to the head;
/// - **refused**: anything else, and any revision this build knows recorded with other content.
pub fn classify(set: &MigrationSet, state: &StoredState) -> Classification {
    let head = set.head().id.clone();
    let ours = set.lineage();
    let stamp_text = state.stamp.clone().unwrap_or_default();

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
            self.set(to).lineage()
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
        let ours = set.lineage();
        if let Some(l) = lineage {
            if l.iter().any(|e| {
                ours.iter()
                    .any(|o| o.revision == e.revision && o.checksum != e.checksum)
            }) {
                return "refused";
            }
        }
        match stamp {
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
            };
            let got = classify(&t.set(head), &state);
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
        };
        assert_eq!(
            classify(&t.set(0), &state),
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
        };
        assert_eq!(
            classify(&t.set(1), &state),
            Classification::AtHead {
                repair_lineage: true
            }
        );
        let ok = StoredState {
            stamp: Some("r1".into()),
            lineage: Some(t.lineage(1)),
        };
        assert_eq!(
            classify(&t.set(1), &ok),
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
        };
        assert_eq!(
            classify(&t.set(1), &ahead),
            Classification::Ahead { stamp: "r2".into() }
        );
        let bare = StoredState {
            stamp: Some("r2".into()),
            lineage: None,
        };
        assert!(matches!(
            classify(&t.set(1), &bare),
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
        };
        let got = classify(&t.set(1), &state);
        assert!(
            matches!(
                got,
                Classification::Refused(Refusal::ChecksumMismatch { .. })
            ),
            "{got:?}"
        );
        assert!(got_message(&got).contains("r1"));
    }

    fn got_message(c: &Classification) -> String {
        match c {
            Classification::Refused(r) => r.to_string(),
            other => format!("{other:?}"),
        }
    }
}
