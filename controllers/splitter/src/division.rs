//! Replica division: how many replicas of a divisible workload each cluster runs.
//!
//! Pure and deterministic. Proportional shares use the largest-remainder (Hamilton) method with
//! a stable tie-break by cluster name, so every cluster gets its exact proportional share rounded
//! down or up — never more than one replica away — and the remainder is spread, never given
//! whole to one cluster (kcp's splitter gave it all to the first cluster).
//!
//! Changes are stable: scaling up divides only the added replicas, scaling down removes replicas
//! in proportion to where they run, a cluster that leaves has only its own replicas moved, and a
//! cluster that joins takes replicas only when asked to rebalance. A *held* cluster (cordoned,
//! not tolerating a new taint, or not Ready within the failover toleration) keeps what it runs
//! but is given nothing new.

use std::collections::BTreeMap;

/// A cluster that may run replicas, with its weight (1 for an even division, the Placement's or
/// Cluster's weight, or the cluster's capacity). Weight 0 runs nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub cluster: String,
    pub weight: u64,
    /// Keeps the replicas it runs (fewer on scale-down) but is given no new ones.
    pub held: bool,
}

impl Candidate {
    pub fn new(cluster: impl Into<String>, weight: u64) -> Self {
        Self {
            cluster: cluster.into(),
            weight,
            held: false,
        }
    }

    /// A cluster that keeps what it runs and takes nothing new.
    pub fn held(cluster: impl Into<String>, weight: u64) -> Self {
        Self {
            held: true,
            ..Self::new(cluster, weight)
        }
    }
}

/// Replicas per cluster. Clusters with 0 replicas are present, so the result says where the
/// workload is placed even when it is scaled to zero.
pub type Division = BTreeMap<String, u32>;

/// Why no division is possible.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DivisionError {
    #[error("no cluster is eligible")]
    NoCandidates,
    #[error("every eligible cluster has weight 0")]
    ZeroWeight,
}

/// Divides `total` in proportion to the weights: largest remainder, ties to the cluster whose
/// name sorts first. Every candidate appears in the result.
pub fn apportion(total: u32, candidates: &[Candidate]) -> Result<Division, DivisionError> {
    if candidates.is_empty() {
        return Err(DivisionError::NoCandidates);
    }
    let sum: u128 = candidates.iter().map(|c| u128::from(c.weight)).sum();
    if sum == 0 {
        return Err(DivisionError::ZeroWeight);
    }
    let total128 = u128::from(total);
    let mut division = Division::new();
    let mut remainders: Vec<(u128, &str)> = Vec::with_capacity(candidates.len());
    let mut given: u128 = 0;
    for c in candidates {
        let exact = total128 * u128::from(c.weight);
        let floor = exact / sum;
        given += floor;
        // floor <= total, which fits in u32.
        division.insert(c.cluster.clone(), u32::try_from(floor).unwrap_or(u32::MAX));
        remainders.push((exact % sum, c.cluster.as_str()));
    }
    // Largest remainder first; equal remainders to the smaller name (stable, deterministic).
    remainders.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    let left = usize::try_from(total128 - given).unwrap_or(usize::MAX);
    for (_, cluster) in remainders.into_iter().take(left) {
        if let Some(n) = division.get_mut(cluster) {
            *n += 1;
        }
    }
    Ok(division)
}

/// The new division of `total` replicas over `candidates`, given where the replicas run now.
///
/// - Without a previous division, or with `rebalance`, replicas are apportioned afresh.
/// - Replicas on clusters that are no longer candidates (left, failed, cordoned away, weight 0)
///   move: they are apportioned over the remaining clusters by weight; the others stay.
/// - Scaling up apportions only the added replicas by weight; scaling down removes replicas in
///   proportion to where they run. Either way the total change equals the change of scale.
/// - A candidate that did not run the workload before gets replicas only when added replicas
///   (scale-up or moved ones) are apportioned, or with `rebalance`.
/// - Held candidates never gain: added replicas go to the others; `rebalance` leaves held ones
///   their replicas. When only held candidates remain, replicas that cannot be placed stay
///   unplaced and the result sums to less than `total` (see [`unplaced`]).
pub fn divide(
    total: u32,
    candidates: &[Candidate],
    previous: &Division,
    rebalance: bool,
) -> Result<Division, DivisionError> {
    let eligible: Vec<Candidate> = candidates
        .iter()
        .filter(|c| c.weight > 0)
        .cloned()
        .collect();
    if candidates.is_empty() {
        return Err(DivisionError::NoCandidates);
    }
    if eligible.is_empty() {
        return Err(DivisionError::ZeroWeight);
    }
    let growable: Vec<Candidate> = eligible.iter().filter(|c| !c.held).cloned().collect();
    let mut kept: Division = eligible
        .iter()
        .map(|c| {
            (
                c.cluster.clone(),
                previous.get(&c.cluster).copied().unwrap_or(0),
            )
        })
        .collect();
    if rebalance && !growable.is_empty() {
        // Afresh over the clusters that may grow, around what the held ones keep.
        for c in &growable {
            kept.insert(c.cluster.clone(), 0);
        }
    }
    let kept_sum: u64 = kept.values().map(|&n| u64::from(n)).sum();
    if kept_sum == 0 && growable.is_empty() {
        return Err(DivisionError::NoCandidates);
    }
    let total64 = u64::from(total);
    if kept_sum < total64 {
        if !growable.is_empty() {
            let added = u32::try_from(total64 - kept_sum).unwrap_or(u32::MAX);
            for (cluster, n) in apportion(added, &growable)? {
                if let Some(k) = kept.get_mut(&cluster) {
                    *k += n;
                }
            }
        }
    } else if kept_sum > total64 {
        let removed = u32::try_from(kept_sum - total64).unwrap_or(u32::MAX);
        let by_count: Vec<Candidate> = kept
            .iter()
            .map(|(cluster, &n)| Candidate::new(cluster.clone(), u64::from(n)))
            .collect();
        for (cluster, n) in apportion(removed, &by_count)? {
            if let Some(k) = kept.get_mut(&cluster) {
                // A proportional share of the removal never exceeds what runs there.
                *k = k.saturating_sub(n);
            }
        }
    }
    with_zero_weight(kept, candidates)
}

/// Replicas of `total` that `division` does not place (only held clusters were left to take
/// them).
pub fn unplaced(total: u32, division: &Division) -> u32 {
    let placed: u64 = division.values().map(|&n| u64::from(n)).sum();
    u32::try_from(u64::from(total).saturating_sub(placed)).unwrap_or(u32::MAX)
}

/// Adds candidates of weight 0 with 0 replicas, so the result lists every candidate.
fn with_zero_weight(
    mut division: Division,
    candidates: &[Candidate],
) -> Result<Division, DivisionError> {
    for c in candidates {
        division.entry(c.cluster.clone()).or_insert(0);
    }
    Ok(division)
}

/// Human-readable distribution, e.g. `member1=4 member2=3 member3=3`.
pub fn describe(division: &Division) -> String {
    division
        .iter()
        .map(|(c, n)| format!("{c}={n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn even(names: &[&str]) -> Vec<Candidate> {
        names.iter().map(|n| Candidate::new(*n, 1)).collect()
    }

    fn d(pairs: &[(&str, u32)]) -> Division {
        pairs.iter().map(|(c, n)| (c.to_string(), *n)).collect()
    }

    #[test]
    fn ten_over_three_spreads_the_remainder() {
        let got = apportion(10, &even(&["member1", "member2", "member3"])).expect("division");
        assert_eq!(got, d(&[("member1", 4), ("member2", 3), ("member3", 3)]));
        assert_eq!(describe(&got), "member1=4 member2=3 member3=3");
    }

    #[test]
    fn weights_are_respected() {
        let c = vec![Candidate::new("a", 3), Candidate::new("b", 1)];
        assert_eq!(
            apportion(8, &c).expect("division"),
            d(&[("a", 6), ("b", 2)])
        );
        let c = vec![
            Candidate::new("a", 1),
            Candidate::new("b", 0),
            Candidate::new("c", 1),
        ];
        assert_eq!(
            divide(5, &c, &Division::new(), false).expect("division"),
            d(&[("a", 3), ("b", 0), ("c", 2)])
        );
    }

    #[test]
    fn defined_edge_cases() {
        assert_eq!(
            apportion(0, &even(&["a", "b"])).expect("zero"),
            d(&[("a", 0), ("b", 0)])
        );
        assert_eq!(
            apportion(2, &even(&["a", "b", "c", "d"])).expect("fewer replicas than clusters"),
            d(&[("a", 1), ("b", 1), ("c", 0), ("d", 0)])
        );
        assert_eq!(apportion(5, &[]), Err(DivisionError::NoCandidates));
        assert_eq!(
            apportion(5, &[Candidate::new("a", 0)]),
            Err(DivisionError::ZeroWeight)
        );
        let huge = apportion(u32::MAX, &even(&["a", "b", "c"])).expect("huge");
        assert_eq!(
            huge.values().map(|&n| u64::from(n)).sum::<u64>(),
            u64::from(u32::MAX)
        );
    }

    #[test]
    fn scaling_divides_only_the_change() {
        let c = even(&["a", "b", "c"]);
        let ten = divide(10, &c, &Division::new(), false).expect("ten");
        let thirteen = divide(13, &c, &ten, false).expect("thirteen");
        assert_eq!(thirteen, d(&[("a", 5), ("b", 4), ("c", 4)]));
        let four = divide(4, &c, &thirteen, false).expect("four");
        assert_eq!(four.values().sum::<u32>(), 4);
    }

    #[test]
    fn a_leaving_cluster_moves_only_its_replicas_and_a_joining_one_waits() {
        let before = d(&[("a", 4), ("b", 3), ("c", 3)]);
        let after = divide(10, &even(&["a", "b"]), &before, false).expect("c left");
        assert_eq!(after.values().sum::<u32>(), 10);
        assert!(after["a"] >= 4 && after["b"] >= 3, "{after:?}");
        let joined = divide(10, &even(&["a", "b", "c", "d"]), &before, false).expect("d joined");
        assert_eq!(joined, d(&[("a", 4), ("b", 3), ("c", 3), ("d", 0)]));
        let rebalanced =
            divide(10, &even(&["a", "b", "c", "d"]), &before, true).expect("rebalanced");
        assert_eq!(rebalanced, d(&[("a", 3), ("b", 3), ("c", 2), ("d", 2)]));
    }

    #[test]
    fn held_clusters_keep_their_replicas_and_take_no_new_ones() {
        let before = d(&[("a", 4), ("b", 3), ("c", 3)]);
        let c = vec![
            Candidate::new("a", 1),
            Candidate::held("b", 1),
            Candidate::new("c", 1),
        ];
        let up = divide(16, &c, &before, false).expect("scale up");
        assert_eq!(up, d(&[("a", 7), ("b", 3), ("c", 6)]));
        let rebalanced = divide(10, &c, &before, true).expect("rebalance");
        assert_eq!(rebalanced, d(&[("a", 4), ("b", 3), ("c", 3)]));
        let down = divide(5, &c, &before, false).expect("scale down");
        assert_eq!(down.values().sum::<u32>(), 5);
        assert!(down["b"] <= 3);
        // Only held clusters left: they keep theirs, the rest stays unplaced.
        let only_held = vec![Candidate::held("b", 1)];
        let short = divide(10, &only_held, &before, false).expect("held only");
        assert_eq!(short, d(&[("b", 3)]));
        assert_eq!(unplaced(10, &short), 7);
        assert_eq!(
            divide(10, &only_held, &Division::new(), false),
            Err(DivisionError::NoCandidates)
        );
    }

    fn candidates() -> impl Strategy<Value = Vec<Candidate>> {
        prop::collection::btree_map("[a-z]{1,6}", 0u64..50, 1..12)
            .prop_map(|m| m.into_iter().map(|(c, w)| Candidate::new(c, w)).collect())
    }

    proptest! {
        #[test]
        fn apportion_sums_and_stays_within_one_replica(total in 0u32..5000, cs in candidates()) {
            let sum: u64 = cs.iter().map(|c| c.weight).sum();
            prop_assume!(sum > 0);
            let got = apportion(total, &cs).expect("division");
            prop_assert_eq!(got.values().map(|&n| u64::from(n)).sum::<u64>(), u64::from(total));
            for c in &cs {
                let exact = f64::from(total) * c.weight as f64 / sum as f64;
                let n = f64::from(got[&c.cluster]);
                prop_assert!((n - exact).abs() < 1.0, "{} got {} for exact {}", c.cluster, n, exact);
            }
            prop_assert_eq!(&apportion(total, &cs).expect("again"), &got, "deterministic");
        }

        #[test]
        fn scaling_moves_at_most_the_change(a in 0u32..3000, b in 0u32..3000, cs in candidates()) {
            prop_assume!(cs.iter().any(|c| c.weight > 0));
            let first = divide(a, &cs, &Division::new(), false).expect("first");
            let second = divide(b, &cs, &first, false).expect("second");
            prop_assert_eq!(second.values().map(|&n| u64::from(n)).sum::<u64>(), u64::from(b));
            let moved: u64 = cs.iter().map(|c| u64::from(first[&c.cluster].abs_diff(second[&c.cluster]))).sum();
            if a > 0 {
                prop_assert_eq!(moved, u64::from(a.abs_diff(b)));
            }
        }

        #[test]
        fn held_clusters_never_gain(total in 0u32..3000, next in 0u32..3000, cs in candidates(), held in prop::collection::vec(any::<bool>(), 12), rebalance: bool) {
            prop_assume!(cs.iter().any(|c| c.weight > 0));
            let before = divide(total, &cs, &Division::new(), false).expect("before");
            let marked: Vec<Candidate> = cs.iter().zip(&held).map(|(c, &h)| Candidate { held: h, ..c.clone() }).collect();
            if let Ok(after) = divide(next, &marked, &before, rebalance) {
                let placed: u64 = after.values().map(|&n| u64::from(n)).sum();
                prop_assert!(placed <= u64::from(next));
                for c in marked.iter().filter(|c| c.held) {
                    prop_assert!(after[&c.cluster] <= before[&c.cluster], "{} grew", c.cluster);
                }
                if marked.iter().any(|c| !c.held && c.weight > 0) {
                    prop_assert_eq!(placed, u64::from(next), "some cluster may grow: all placed");
                }
            }
        }

        #[test]
        fn a_join_moves_nothing_unless_asked(total in 0u32..3000, cs in candidates(), newcomer in "[A-Z]{3}") {
            prop_assume!(cs.iter().any(|c| c.weight > 0));
            let before = divide(total, &cs, &Division::new(), false).expect("before");
            let mut joined = cs.clone();
            joined.push(Candidate::new(newcomer.clone(), 1));
            let after = divide(total, &joined, &before, false).expect("after");
            if total > 0 {
                prop_assert_eq!(after[&newcomer], 0);
                for c in &cs {
                    prop_assert_eq!(after[&c.cluster], before[&c.cluster]);
                }
            }
        }
    }
}
