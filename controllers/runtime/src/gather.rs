//! Gathering bursts of triggers: each distinct item once per window.
//!
//! kube's `Controller` debounce delays every reconciliation, including the one a single edit
//! starts, and a steady stream of changes of one object pushes its reconciliation back again and
//! again. [`gather`] instead holds only the triggers it is given: the first of a burst opens a
//! window, and when the window closes every item that came in it is sent on once. Triggers the
//! controller should act on at once (a changed spec) do not go through it.

use std::collections::HashSet;
use std::hash::Hash;
use std::time::Duration;

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
}
