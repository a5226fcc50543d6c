//! Gathering bursts of triggers.
//!
//! kube's `Controller` debounce delays every reconciliation, including the one a single edit
//! starts, and a steady stream of changes of one object pushes its reconciliation back again and
//! again. Two shapes replace it where it costs:
//!
//! - [`gather`] holds only the triggers it is given: the first of a burst opens a window, and
//!   when the window closes every item that came in it is sent on once. Triggers the controller
//!   should act on at once (a changed spec) do not go through it.
//! - [`pace`] sends a trigger that comes after a quiet spell at once, and settles the rest:
//!   a single edit is acted on without waiting, a burst of edits makes one more reconciliation
//!   once it is over (or every `most` while it lasts), and the triggers that only report (a
//!   status changed) always wait for their burst to settle.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use futures::channel::mpsc;
use futures::{Stream, StreamExt};

/// The items of `input`, each sent on once per `window` after the first of a burst arrived: a
/// burst of any length within the window becomes one of each distinct item, and a steady stream
/// becomes one per window (never held back longer than `window`). Ends when `input` ends, after
/// sending what it holds.
pub fn gather<S>(input: S, window: Duration) -> impl Stream<Item = S::Item> + Send + 'static
where
    S: Stream + Send + 'static,
    S::Item: Eq + Hash + Clone + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded();
    tokio::spawn(async move {
        let mut input = std::pin::pin!(input);
        while let Some(first) = input.next().await {
            let mut held: Vec<S::Item> = vec![first.clone()];
            let mut seen: HashSet<S::Item> = HashSet::from([first]);
            let deadline = tokio::time::sleep(window);
            let mut deadline = std::pin::pin!(deadline);
            let mut ended = false;
            loop {
                tokio::select! {
                    () = &mut deadline => break,
                    next = input.next() => match next {
                        Some(item) => {
                            if seen.insert(item.clone()) {
                                held.push(item);
                            }
                        }
                        None => {
                            ended = true;
                            break;
                        }
                    },
                }
            }
            for item in held {
                if tx.unbounded_send(item).is_err() {
                    return;
                }
            }
            if ended {
                return;
            }
        }
    });
    rx
}

/// How soon a trigger given to [`pace`] wants its reconciliation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Urgency {
    /// A change to act on (a user's edit): at once when the item was quiet, else when its burst
    /// settles.
    Now,
    /// A change to report (a status): when its burst settles.
    Later,
}

/// How [`pace`] holds triggers back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pacing {
    /// How long an item must have had no [`Urgency::Now`] trigger for the next to be sent at
    /// once, and how long a burst of them must have been quiet before what it held is sent.
    pub quiet: Duration,
    /// How long [`Urgency::Later`] triggers alone must have been quiet before they are sent.
    pub report_quiet: Duration,
    /// How long anything is held at most after the first held trigger of the item.
    pub most: Duration,
}

/// The items of `input`, paced: an item given [`Urgency::Now`] when it had no `Now` trigger in
/// the last `quiet` is sent at once (a single edit waits for nothing), and answers what the item
/// held. Other triggers are held: a burst of `Now` until it has been quiet for `quiet` (it makes
/// one reconciliation once it is over; `Later` triggers meanwhile go with it), `Later` triggers
/// alone until they have been quiet for `report_quiet` (the statuses a change brings back, which
/// come over a while, make one); neither longer than `most` after the first held one (a steady
/// stream makes one per `most`). Ends when `input` ends, after sending what it holds.
pub fn pace<S, T>(input: S, pacing: Pacing) -> impl Stream<Item = T> + Send + 'static
where
    S: Stream<Item = (T, Urgency)> + Send + 'static,
    T: Eq + Hash + Clone + Send + 'static,
{
    let Pacing {
        quiet,
        report_quiet,
        most,
    } = pacing;
    /// What one item holds back.
    struct Held {
        since: Instant,
        due: Instant,
        /// Whether a `Now` trigger is held: its burst, not the `Later` ones, sets `due`.
        now: bool,
    }
    let (tx, rx) = mpsc::unbounded();
    tokio::spawn(async move {
        let mut input = std::pin::pin!(input);
        let mut last_now: HashMap<T, Instant> = HashMap::new();
        let mut held: HashMap<T, Held> = HashMap::new();
        // Due times, earliest first; an entry whose item was sent or moved on since is skipped.
        let mut queue: BinaryHeap<Reverse<(Instant, u64)>> = BinaryHeap::new();
        let mut queued: HashMap<u64, T> = HashMap::new();
        let mut sequence = 0_u64;
        loop {
            let next_due = queue.peek().map(|Reverse((due, _))| *due);
            let wake = async {
                match next_due {
                    Some(due) => tokio::time::sleep_until(due).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                () = wake => {
                    let Some(Reverse((due, id))) = queue.pop() else { continue };
                    let Some(item) = queued.remove(&id) else { continue };
                    if held.get(&item).is_some_and(|h| h.due == due) {
                        held.remove(&item);
                        if tx.unbounded_send(item).is_err() {
                            return;
                        }
                    }
                }
                next = input.next() => {
                    let Some((item, urgency)) = next else { break };
                    let now = Instant::now();
                    if urgency == Urgency::Now {
                        let quiet_since = last_now
                            .insert(item.clone(), now)
                            .is_none_or(|last| now.duration_since(last) >= quiet);
                        if quiet_since {
                            held.remove(&item);
                            if tx.unbounded_send(item).is_err() {
                                return;
                            }
                            continue;
                        }
                    }
                    let hold = held.entry(item.clone()).or_insert(Held {
                        since: now,
                        due: now,
                        now: false,
                    });
                    let wait = match urgency {
                        Urgency::Now => {
                            hold.now = true;
                            quiet
                        }
                        Urgency::Later if hold.now => continue,
                        Urgency::Later => report_quiet,
                    };
                    hold.due = (now + wait).min(hold.since + most);
                    sequence += 1;
                    queue.push(Reverse((hold.due, sequence)));
                    queued.insert(sequence, item);
                }
            }
            // Forget the items that have been quiet for long: what they held was sent.
            if last_now.len() > 1024 && queue.is_empty() {
                let now = Instant::now();
                last_now.retain(|_, last| now.duration_since(*last) < quiet);
            }
        }
        for (item, _) in held {
            if tx.unbounded_send(item).is_err() {
                return;
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_becomes_one_of_each_and_a_steady_stream_one_per_window() {
        let (tx, rx) = mpsc::unbounded::<&str>();
        let mut out = std::pin::pin!(gather(rx, Duration::from_millis(50)));
        let start = tokio::time::Instant::now();
        for item in ["a", "b", "a", "a", "b"] {
            tx.unbounded_send(item).expect("open");
        }
        assert_eq!(out.next().await, Some("a"));
        assert_eq!(out.next().await, Some("b"));
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(50),
            "held for the window"
        );

        // A change every 10 ms of one item for 200 ms: one trigger per window, none held longer.
        let feeder = tokio::spawn({
            let tx = tx.clone();
            async move {
                for _ in 0..20 {
                    tx.unbounded_send("c").expect("open");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        });
        let mut at = Vec::new();
        let begun = tokio::time::Instant::now();
        while at.len() < 4 {
            assert_eq!(out.next().await, Some("c"));
            at.push(begun.elapsed().as_millis());
        }
        assert_eq!(at, [50, 100, 150, 200]);
        feeder.await.expect("fed");

        // Input ends: what is held is sent, then the stream ends.
        tx.unbounded_send("d").expect("open");
        drop(tx);
        assert_eq!(out.next().await, Some("d"));
        assert_eq!(out.next().await, None);
    }

    /// What `out` sends until `until`, with when (ms since `start`).
    async fn sent_until(
        out: &mut (impl Stream<Item = &'static str> + Unpin),
        start: tokio::time::Instant,
        until: Duration,
    ) -> Vec<(&'static str, u128)> {
        let mut sent = Vec::new();
        while let Ok(Some(item)) = tokio::time::timeout_at(start + until, out.next()).await {
            sent.push((item, start.elapsed().as_millis()));
        }
        sent
    }

    #[tokio::test(start_paused = true)]
    async fn pace_sends_a_lone_edit_at_once_and_settles_bursts_and_reports() {
        let (tx, rx) = mpsc::unbounded::<(&str, Urgency)>();
        let mut out = std::pin::pin!(pace(
            rx,
            Pacing {
                quiet: Duration::from_millis(50),
                report_quiet: Duration::from_millis(150),
                most: Duration::from_millis(1000),
            }
        ));
        let start = tokio::time::Instant::now();

        // A lone edit: at once. A report: when its burst settles.
        tx.unbounded_send(("a", Urgency::Now)).expect("open");
        tx.unbounded_send(("b", Urgency::Later)).expect("open");
        assert_eq!(
            sent_until(&mut out, start, Duration::from_millis(200)).await,
            [("a", 0), ("b", 150)]
        );

        // Reports 40 ms apart for 200 ms: one, once they have been quiet for 150 ms.
        let start = tokio::time::Instant::now();
        for _ in 0..5 {
            tx.unbounded_send(("r", Urgency::Later)).expect("open");
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        assert_eq!(
            sent_until(&mut out, start, Duration::from_millis(500)).await,
            [("r", 310)]
        );

        // A report in the burst of an edit goes with it: held only as long as the burst.
        tx.unbounded_send(("s", Urgency::Now)).expect("open");
        let start = tokio::time::Instant::now();
        tx.unbounded_send(("s", Urgency::Now)).expect("open");
        tx.unbounded_send(("s", Urgency::Later)).expect("open");
        assert_eq!(
            sent_until(&mut out, start, Duration::from_millis(500)).await,
            [("s", 0), ("s", 50)]
        );

        // An edit of `a` 200 ms after the last: at once again, and it answers a report it held.
        let start = tokio::time::Instant::now();
        tx.unbounded_send(("a", Urgency::Later)).expect("open");
        tokio::time::sleep(Duration::from_millis(20)).await;
        tx.unbounded_send(("a", Urgency::Now)).expect("open");
        assert_eq!(
            sent_until(&mut out, start, Duration::from_millis(200)).await,
            [("a", 20)]
        );

        // A burst of edits 10 ms apart for 300 ms: the first at once, the rest once it is over.
        let start = tokio::time::Instant::now();
        let feeder = tokio::spawn({
            let tx = tx.clone();
            async move {
                for _ in 0..30 {
                    tx.unbounded_send(("c", Urgency::Now)).expect("open");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        });
        assert_eq!(
            sent_until(&mut out, start, Duration::from_millis(500)).await,
            [("c", 0), ("c", 340)]
        );
        feeder.await.expect("fed");

        // A steady stream for 2.5 s: one every second while it lasts.
        let start = tokio::time::Instant::now();
        let feeder = tokio::spawn({
            let tx = tx.clone();
            async move {
                for _ in 0..250 {
                    tx.unbounded_send(("d", Urgency::Now)).expect("open");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        });
        assert_eq!(
            sent_until(&mut out, start, Duration::from_millis(3000)).await,
            [("d", 0), ("d", 1010), ("d", 2010), ("d", 2540)]
        );
        feeder.await.expect("fed");

        // Input ends: what is held is sent, then the stream ends.
        tx.unbounded_send(("e", Urgency::Later)).expect("open");
        drop(tx);
        assert_eq!(out.next().await, Some("e"));
        assert_eq!(out.next().await, None);
    }
}
