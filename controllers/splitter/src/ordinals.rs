//! Pure: a StatefulSet divided over members by ordinal ranges.
//!
//! Each member runs a contiguous range of the StatefulSet's ordinals (`spec.ordinals.start` and
//! `spec.replicas` of its copy), and the ranges of all members are disjoint: each pod identity
//! (`web-0`, `web-1`, ... and its PersistentVolumeClaims) exists once in the fleet.
//!
//! Two rules make that hold while things change:
//! - **Let go before taking.** A member is given an ordinal it does not run only when every
//!   member with a copy has *settled* (its member reports that it observed its copy's current
//!   spec and runs no more pods than that asks for), and no other member's range has it.
//!   Shrinking is always allowed. A move therefore takes two passes: the old member lets go,
//!   then the new one takes; an unreachable member never settles, so while one is, no ordinal
//!   moves or is added anywhere — as a StatefulSet in one cluster does not replace a pod on an
//!   unreachable node.
//! - **Never move an ordinal that does not have to move.** Scaling down removes the highest
//!   ordinals (as a StatefulSet does); scaling up appends ordinals at the top, to the member
//!   with the highest range and to members that run none yet; a member that leaves leaves a
//!   hole that its neighbours in the range order (and members without ordinals) fill. A pod
//!   keeps its member, and with it its volumes, through every scale. The division may then
//!   drift from the weights; `rebalance` (the Placement's `rebalanceOnJoin`) lays the ordinals
//!   out in proportion to the weights again, moving what it must, each move as above.

use std::collections::BTreeMap;

use crate::division::{Candidate, Division, DivisionError, divide};

/// A contiguous range of ordinals: `start`, `start + 1`, ..., `start + count - 1`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Range {
    pub start: u32,
    pub count: u32,
}

impl Range {
    pub fn new(start: u32, count: u32) -> Self {
        Self { start, count }
    }

    /// One past the last ordinal.
    pub fn end(&self) -> u32 {
        self.start.saturating_add(self.count)
    }

    pub fn contains(&self, ordinal: u32) -> bool {
        ordinal >= self.start && ordinal < self.end()
    }

    /// The ordinals in both; empty (at `other.start`) when none.
    pub fn intersect(&self, other: &Range) -> Range {
        let start = self.start.max(other.start);
        let end = self.end().min(other.end());
        if end > start {
            Range::new(start, end - start)
        } else {
            Range::new(other.start, 0)
        }
    }

    /// Whether the two share an ordinal.
    pub fn overlaps(&self, other: &Range) -> bool {
        self.count > 0 && other.count > 0 && self.intersect(other).count > 0
    }

    /// Written as users read ordinals: `0-2`, `3`, or `none`.
    pub fn describe(&self) -> String {
        match self.count {
            0 => "none".to_string(),
            1 => self.start.to_string(),
            n => format!("{}-{}", self.start, self.start + n - 1),
        }
    }
}

/// A member's copy as the hub's Work asks for it, and whether the member settled on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub range: Range,
    /// The member reports it observed this spec and runs at most `range.count` pods.
    pub settled: bool,
    /// The member cannot be reached: what it runs is not known.
    pub unreachable: bool,
}

impl Held {
    /// A copy whose member settled on `range`.
    pub fn settled(range: Range) -> Self {
        Self {
            range,
            settled: true,
            unreachable: false,
        }
    }

    /// A copy whose member has not settled on `range` yet.
    pub fn unsettled(range: Range) -> Self {
        Self {
            settled: false,
            ..Self::settled(range)
        }
    }
}

/// The ranges to ask for now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// Per member with a copy: the range its copy asks for now. A member at count 0 still has
    /// a copy (it is letting go of its ordinals, or takes some once others let go).
    pub ranges: BTreeMap<String, Range>,
    /// The members that have not settled while the layout waits for ordinals to be let go.
    pub waiting_for: Vec<String>,
    /// The layout this converges to.
    pub target: BTreeMap<String, Range>,
}

impl Layout {
    /// Replicas per member, as a [`Division`] (of the ranges asked for now).
    pub fn division(&self) -> Division {
        self.ranges
            .iter()
            .map(|(c, r)| (c.clone(), r.count))
            .collect()
    }

    /// Whether every range is at its target.
    pub fn complete(&self) -> bool {
        self.ranges.iter().all(|(c, r)| {
            self.target.get(c).map_or(r.count == 0, |t| {
                t.count == r.count && (r.count == 0 || t == r)
            })
        })
    }

    /// `m1=0-1 m2=2 m3=none`, the ranges asked for now.
    pub fn describe(&self) -> String {
        self.ranges
            .iter()
            .map(|(c, r)| format!("{c}={}", r.describe()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The ranges of the StatefulSet's `ordinals` (from its `spec.ordinals.start`, `spec.replicas`
/// of them) over `candidates` now, given what each member's copy holds (`held`, members outside
/// the candidates included: they let go of what they hold).
pub fn lay_out(
    ordinals: Range,
    candidates: &[Candidate],
    held: &BTreeMap<String, Held>,
    rebalance: bool,
) -> Result<Layout, DivisionError> {
    let is_candidate = |c: &str| candidates.iter().any(|k| k.cluster == c);
    let before: Division = held
        .iter()
        .filter(|(c, _)| is_candidate(c))
        .map(|(c, h)| (c.clone(), h.range.count))
        .collect();
    let counts = divide(ordinals.count, candidates, &before, rebalance)?;
    let target = if rebalance || held.values().all(|h| h.range.count == 0) {
        proportional(ordinals.start, &counts, held)
    } else {
        in_place(ordinals, candidates, held, &counts)
    };
    let all_settled = held.values().all(|h| h.settled);
    let mut ranges = BTreeMap::new();
    for (cluster, want) in &target {
        let now = held
            .get(cluster)
            .map_or(Range::new(want.start, 0), |h| h.range);
        let taken_by_others = held
            .iter()
            .any(|(other, h)| other != cluster && h.range.overlaps(want));
        let grows = (want.start..want.end()).any(|o| !now.contains(o));
        let range = if !grows || (all_settled && !taken_by_others) {
            *want
        } else {
            now.intersect(want)
        };
        ranges.insert(cluster.clone(), range);
    }
    // A member outside the candidates lets go of everything; once it has, its copy can go.
    // One that cannot be reached is asked for nothing new: nobody takes its ordinals while it
    // may run them, and if it comes back as a candidate, it runs them on undisturbed.
    for (cluster, h) in held {
        if target.contains_key(cluster) || (h.range.count == 0 && h.settled) {
            continue;
        }
        let range = if h.unreachable {
            h.range
        } else {
            Range::new(h.range.start, 0)
        };
        ranges.insert(cluster.clone(), range);
    }
    let mut layout = Layout {
        ranges,
        waiting_for: Vec::new(),
        target,
    };
    if !layout.complete() {
        layout.waiting_for = held
            .iter()
            .filter(|(_, h)| !h.settled)
            .map(|(c, _)| c.clone())
            .collect();
    }
    Ok(layout)
}

/// `counts` laid out one after another from ordinal `first`: the members in the order of the
/// ranges they hold, those without ordinals after them by name.
fn proportional(
    first: u32,
    counts: &Division,
    held: &BTreeMap<String, Held>,
) -> BTreeMap<String, Range> {
    // Where each member's copy is in the order of ranges (an empty range keeps its place, so a
    // member that let go of its ordinals to make room is not moved behind the others).
    let mut order: Vec<(&String, (u32, u32))> = counts
        .keys()
        .map(|c| {
            let at = held
                .get(c)
                .map_or((u32::MAX, 0), |h| (h.range.start, h.range.count));
            (c, at)
        })
        .collect();
    order.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(b.0)));
    let mut next = first;
    order
        .into_iter()
        .map(|(cluster, _)| {
            let count = counts.get(cluster).copied().unwrap_or(0);
            let range = Range::new(next, count);
            next = next.saturating_add(count);
            (cluster.clone(), range)
        })
        .collect()
}

/// The candidates keep the ordinals they hold of `ordinals`; each ordinal no candidate holds
/// (of a member that left, or added by a scale-up) goes to a candidate that can take it
/// without a gap in its range: the one whose range ends right below it, those that hold none,
/// or the one whose range starts right above it — each up to its share in `counts` first.
fn in_place(
    ordinals: Range,
    candidates: &[Candidate],
    held: &BTreeMap<String, Held>,
    counts: &Division,
) -> BTreeMap<String, Range> {
    let growable = |c: &str| candidates.iter().any(|k| k.cluster == c && !k.held);
    let mut ranges: BTreeMap<String, Range> = counts
        .keys()
        .map(|c| {
            let kept = held
                .get(c)
                .map_or(Range::default(), |h| h.range.intersect(&ordinals));
            (c.clone(), kept)
        })
        .collect();
    let share = |ranges: &BTreeMap<String, Range>, c: &str| {
        counts
            .get(c)
            .copied()
            .unwrap_or(0)
            .saturating_sub(ranges.get(c).map_or(0, |r| r.count))
    };
    // The holes: maximal runs of `ordinals` that no candidate keeps.
    let mut covered: Vec<Range> = ranges.values().filter(|r| r.count > 0).copied().collect();
    covered.sort();
    let mut holes = Vec::new();
    let mut next = ordinals.start;
    for r in &covered {
        if r.start > next {
            holes.push(Range::new(next, r.start - next));
        }
        next = next.max(r.end());
    }
    if ordinals.end() > next {
        holes.push(Range::new(next, ordinals.end() - next));
    }
    for hole in holes {
        let below = ranges
            .iter()
            .find(|(c, r)| r.count > 0 && r.end() == hole.start && growable(c))
            .map(|(c, _)| c.clone());
        let above = ranges
            .iter()
            .find(|(c, r)| r.count > 0 && r.start == hole.end() && growable(c))
            .map(|(c, _)| c.clone());
        let empty: Vec<String> = ranges
            .iter()
            .filter(|(c, r)| r.count == 0 && growable(c))
            .map(|(c, _)| c.clone())
            .collect();
        // Takers in the order their chunks lie in the hole, each up to its share; what is
        // left goes to the first (the range below, if any).
        let takers: Vec<String> = below.into_iter().chain(empty).chain(above).collect();
        if takers.is_empty() {
            continue;
        }
        let mut sizes: Vec<u32> = Vec::with_capacity(takers.len());
        let mut left = hole.count;
        for c in &takers {
            let n = share(&ranges, c).min(left);
            sizes.push(n);
            left -= n;
        }
        if let Some(first) = sizes.first_mut() {
            *first += left;
        }
        let mut at = hole.start;
        for (c, n) in takers.iter().zip(sizes) {
            if n == 0 {
                continue;
            }
            if let Some(r) = ranges.get_mut(c) {
                *r = if r.count == 0 {
                    Range::new(at, n)
                } else if r.end() == at {
                    Range::new(r.start, r.count + n)
                } else {
                    Range::new(at, r.count + n)
                };
            }
            at += n;
        }
    }
    // A candidate without ordinals keeps a place for its copy.
    for r in ranges.values_mut() {
        if r.count == 0 {
            *r = Range::new(ordinals.end(), 0);
        }
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn even(names: &[&str]) -> Vec<Candidate> {
        names.iter().map(|n| Candidate::new(*n, 1)).collect()
    }

    fn settled(pairs: &[(&str, u32, u32)]) -> BTreeMap<String, Held> {
        pairs
            .iter()
            .map(|(c, start, count)| (c.to_string(), Held::settled(Range::new(*start, *count))))
            .collect()
    }

    /// Runs passes, each member settling on what it was asked, until nothing changes.
    fn converge(
        ordinals: Range,
        candidates: &[Candidate],
        mut held: BTreeMap<String, Held>,
        rebalance: bool,
    ) -> BTreeMap<String, Range> {
        for _ in 0..8 {
            let layout = lay_out(ordinals, candidates, &held, rebalance).expect("layout");
            assert_disjoint(&layout.ranges);
            let next: BTreeMap<String, Held> = layout
                .ranges
                .iter()
                .map(|(c, r)| (c.clone(), Held::settled(*r)))
                .collect();
            if next == held {
                return layout.ranges;
            }
            held = next;
        }
        panic!("no fixpoint: {held:?}");
    }

    fn assert_disjoint(ranges: &BTreeMap<String, Range>) {
        let all: Vec<(&String, &Range)> = ranges.iter().collect();
        for (i, (a, ra)) in all.iter().enumerate() {
            for (b, rb) in &all[i + 1..] {
                assert!(
                    !ra.overlaps(rb),
                    "{a} {ra:?} and {b} {rb:?} share an ordinal"
                );
            }
        }
    }

    fn covers(ranges: &BTreeMap<String, Range>, total: u32) -> bool {
        covers_from(ranges, Range::new(0, total))
    }

    /// Whether every ordinal of `ordinals` is in exactly one range, and no range has others.
    fn covers_from(ranges: &BTreeMap<String, Range>, ordinals: Range) -> bool {
        let mut owners = vec![0u32; ordinals.count as usize];
        for r in ranges.values() {
            for o in r.start..r.end() {
                match o
                    .checked_sub(ordinals.start)
                    .and_then(|i| owners.get_mut(i as usize))
                {
                    Some(n) => *n += 1,
                    None => return false,
                }
            }
        }
        owners.iter().all(|n| *n == 1)
    }

    #[test]
    fn a_first_placement_lays_the_ordinals_out_by_member_name() {
        let l = lay_out(
            Range::new(0, 3),
            &even(&["m1", "m2", "m3"]),
            &BTreeMap::new(),
            false,
        )
        .expect("layout");
        assert_eq!(l.describe(), "m1=0 m2=1 m3=2");
        assert!(l.complete());
        let l = lay_out(
            Range::new(0, 7),
            &even(&["m1", "m2", "m3"]),
            &BTreeMap::new(),
            false,
        )
        .expect("layout");
        assert_eq!(l.describe(), "m1=0-2 m2=3-4 m3=5-6");
    }

    #[test]
    fn a_statefulset_that_starts_at_another_ordinal_keeps_its_start() {
        let cs = even(&["m1", "m2", "m3"]);
        let l = lay_out(Range::new(5, 3), &cs, &BTreeMap::new(), false).expect("layout");
        assert_eq!(l.describe(), "m1=5 m2=6 m3=7");
        let held = settled(&[("m1", 5, 1), ("m2", 6, 1), ("m3", 7, 1)]);
        let up = converge(Range::new(5, 5), &cs, held.clone(), false);
        assert_eq!(up["m3"], Range::new(7, 3));
        assert!(covers_from(&up, Range::new(5, 5)), "{up:?}");
        // Moved to start at 0: ordinals nobody holds are taken at once.
        let moved = lay_out(Range::new(0, 3), &cs, &held, false).expect("layout");
        assert_eq!(moved.describe(), "m1=0 m2=1 m3=2");
        let end = converge(Range::new(0, 3), &cs, held, false);
        assert!(covers_from(&end, Range::new(0, 3)), "{end:?}");
    }

    #[test]
    fn scaling_up_and_down_moves_no_pod() {
        let cs = even(&["m1", "m2", "m3"]);
        let held = settled(&[("m1", 0, 1), ("m2", 1, 1), ("m3", 2, 1)]);
        let up = converge(Range::new(0, 6), &cs, held.clone(), false);
        // Each keeps its ordinal; the new ones go to the top member.
        assert_eq!(up["m1"], Range::new(0, 1));
        assert_eq!(up["m2"], Range::new(1, 1));
        assert_eq!(up["m3"], Range::new(2, 4));
        let down = converge(Range::new(0, 2), &cs, held, false);
        // The highest ordinal goes, as in a StatefulSet.
        assert_eq!(down["m1"], Range::new(0, 1));
        assert_eq!(down["m2"], Range::new(1, 1));
        assert_eq!(down["m3"].count, 0);
    }

    #[test]
    fn a_member_that_leaves_lets_go_before_its_neighbour_takes_over() {
        let cs = even(&["m1", "m3"]);
        let mut held = settled(&[("m1", 0, 1), ("m2", 1, 1), ("m3", 2, 1)]);
        // m2 is drained: first it lets go; nobody takes ordinal 1 yet.
        let l = lay_out(Range::new(0, 3), &cs, &held, false).expect("layout");
        assert_eq!(l.describe(), "m1=0 m2=none m3=2");
        assert!(!l.complete());
        // It has not settled (still deleting its pod): still nobody takes it.
        held.insert("m2".into(), Held::unsettled(Range::new(1, 0)));
        let l = lay_out(Range::new(0, 3), &cs, &held, false).expect("layout");
        assert_eq!(l.describe(), "m1=0 m2=none m3=2");
        assert_eq!(l.waiting_for, ["m2"]);
        // Settled: its copy goes, and a neighbour takes ordinal 1.
        held.insert("m2".into(), Held::settled(Range::new(1, 0)));
        let l = lay_out(Range::new(0, 3), &cs, &held, false).expect("layout");
        assert_eq!(l.describe(), "m1=0-1 m3=2");
        assert!(l.complete());
    }

    #[test]
    fn an_unsettled_member_holds_every_move_and_scale_up() {
        let cs = even(&["m1", "m2", "m3"]);
        let mut held = settled(&[("m1", 0, 1), ("m2", 1, 1), ("m3", 2, 1)]);
        held.insert("m3".into(), Held::unsettled(Range::new(2, 1)));
        let l = lay_out(Range::new(0, 5), &cs, &held, false).expect("layout");
        assert_eq!(l.describe(), "m1=0 m2=1 m3=2");
        assert_eq!(l.waiting_for, ["m3"]);
        // Scaling down is never held up.
        let l = lay_out(Range::new(0, 2), &cs, &held, false).expect("layout");
        assert_eq!(l.describe(), "m1=0 m2=1 m3=none");
    }

    #[test]
    fn rebalance_lays_out_by_weight_and_moves_each_ordinal_after_its_member_let_go() {
        let cs = even(&["m1", "m2", "m3"]);
        let held = settled(&[("m1", 0, 1), ("m2", 1, 1), ("m3", 2, 4)]);
        let first = lay_out(Range::new(0, 6), &cs, &held, true).expect("layout");
        // m2 and m3 shrink to what they keep; nobody takes anything in the same pass.
        assert_eq!(first.describe(), "m1=0 m2=none m3=4-5");
        let end = converge(Range::new(0, 6), &cs, held, true);
        assert_eq!(end["m1"], Range::new(0, 2));
        assert_eq!(end["m2"], Range::new(2, 2));
        assert_eq!(end["m3"], Range::new(4, 2));
    }

    #[test]
    fn a_joining_member_takes_ordinals_only_when_added() {
        let cs = even(&["m1", "m2", "m3"]);
        let held = settled(&[("m1", 0, 2), ("m2", 2, 1)]);
        let same = converge(Range::new(0, 3), &cs, held.clone(), false);
        assert_eq!(same["m1"], Range::new(0, 2));
        assert_eq!(same["m2"], Range::new(2, 1));
        assert_eq!(same["m3"].count, 0);
        // Added ordinals go to the top member and to the one without ordinals.
        let up = converge(Range::new(0, 6), &cs, held, false);
        assert_eq!(up["m2"], Range::new(2, 3), "{up:?}");
        assert_eq!(up["m3"], Range::new(5, 1), "{up:?}");
    }

    fn layouts() -> impl Strategy<Value = (u32, Vec<Candidate>, BTreeMap<String, Held>)> {
        (
            0u32..40,
            prop::collection::vec((1u64..4, any::<bool>(), any::<bool>()), 1..6),
        )
            .prop_flat_map(|(total, members)| {
                let names: Vec<String> = (0..members.len()).map(|i| format!("m{i}")).collect();
                let candidates: Vec<Candidate> = names
                    .iter()
                    .zip(&members)
                    .filter(|(_, (_, candidate, _))| *candidate)
                    .map(|(n, (w, _, _))| Candidate::new(n.clone(), *w))
                    .collect();
                // A valid earlier layout: consecutive ranges in name order.
                let counts = prop::collection::vec(0u32..8, names.len());
                (
                    Just(total),
                    Just(candidates),
                    Just(names),
                    counts,
                    Just(members),
                )
            })
            .prop_map(|(total, candidates, names, counts, members)| {
                let mut next = 0;
                let held = names
                    .iter()
                    .zip(counts)
                    .zip(&members)
                    .map(|((n, count), (_, _, settled))| {
                        let r = Range::new(next, count);
                        next += count;
                        (
                            n.clone(),
                            Held {
                                range: r,
                                settled: *settled,
                                // Some members that have not settled cannot be reached.
                                unreachable: !*settled && count % 2 == 1,
                            },
                        )
                    })
                    .collect();
                (total, candidates, held)
            })
    }

    proptest! {
        #[test]
        fn ranges_stay_disjoint_and_only_free_ordinals_are_taken((total, cs, held) in layouts(), rebalance: bool) {
            prop_assume!(!cs.is_empty());
            let l = lay_out(Range::new(0, total), &cs, &held, rebalance).expect("layout");
            assert_disjoint(&l.ranges);
            let all_settled = held.values().all(|h| h.settled);
            for (c, r) in &l.ranges {
                let now = held.get(c).map_or(Range::default(), |h| h.range);
                for o in r.start..r.end() {
                    if now.contains(o) { continue; }
                    prop_assert!(all_settled, "{c} takes {o} while a member has not settled");
                    prop_assert!(!held.iter().any(|(m, h)| m != c && h.range.contains(o)),
                        "{c} takes {o}, which another member holds");
                }
            }
            // A member that cannot be reached keeps what it holds, or more as a candidate.
            for (c, h) in held.iter().filter(|(_, h)| h.unreachable && h.range.count > 0) {
                let r = l.ranges.get(c).copied().unwrap_or_default();
                prop_assert!(cs.iter().any(|k| &k.cluster == c) || r == h.range,
                    "unreachable {c} was asked to let go: {:?} -> {r:?}", h.range);
            }
        }

        #[test]
        fn settled_members_end_with_every_ordinal_exactly_once((total, cs, held) in layouts(), rebalance: bool) {
            prop_assume!(!cs.is_empty());
            let held: BTreeMap<String, Held> = held.into_iter()
                .map(|(c, h)| (c, Held { settled: true, unreachable: false, ..h })).collect();
            let end = converge(Range::new(0, total), &cs, held, rebalance);
            prop_assert!(covers(&end, total), "{end:?} does not cover 0..{total}");
            for (c, r) in &end {
                prop_assert!(r.count == 0 || cs.iter().any(|k| &k.cluster == c), "{c} is no candidate");
            }
        }

        #[test]
        fn scaling_moves_no_ordinal_that_stays((total, _cs, held) in layouts(), next in 0u32..40) {
            let cs: Vec<Candidate> = held.keys().map(|c| Candidate::new(c.clone(), 1)).collect();
            let held: BTreeMap<String, Held> = held.into_iter()
                .map(|(c, h)| (c, Held { settled: true, unreachable: false, ..h })).collect();
            let start = converge(Range::new(0, total), &cs, held, false);
            let settled_start: BTreeMap<String, Held> = start.iter()
                .map(|(c, r)| (c.clone(), Held::settled(*r))).collect();
            let end = converge(Range::new(0, next), &cs, settled_start, false);
            for (c, r) in &start {
                for o in r.start..r.end().min(next) {
                    prop_assert!(end[c].contains(o), "ordinal {o} left {c}: {start:?} -> {end:?}");
                }
            }
        }
    }
}
