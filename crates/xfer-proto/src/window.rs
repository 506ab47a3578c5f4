//! The least value seen over a sliding window of time: the minimum RTT of the last 10 s, the one-way
//! delay floor the receiver measures its queue from, the queue that stood through a whole round.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The minimum of the values pushed within a sliding window of time. Kept as a deque of increasing
/// values (a value that a later, smaller one makes irrelevant is dropped at once), so each push costs
/// amortised O(1) and the minimum is the front.
#[derive(Debug, Clone)]
pub(crate) struct WindowedMin<T> {
    points: VecDeque<(Instant, T)>,
}

impl<T: Copy + PartialOrd> WindowedMin<T> {
    pub(crate) fn new() -> Self {
        WindowedMin {
            points: VecDeque::new(),
        }
    }

    /// Adds `value`, seen at `now`, and forgets what was seen more than `window` before `now` (the value
    /// just pushed always stays).
    pub(crate) fn push(&mut self, now: Instant, value: T, window: Duration) {
        while self.points.back().is_some_and(|b| b.1 >= value) {
            self.points.pop_back();
        }
        self.points.push_back((now, value));
        while self.points.len() > 1
            && self
                .points
                .front()
                .is_some_and(|f| now.saturating_duration_since(f.0) > window)
        {
            self.points.pop_front();
        }
    }

    /// The least value within the window as of the last push, if any was pushed.
    pub(crate) fn min(&self) -> Option<T> {
        self.points.front().map(|f| f.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_least_value_of_the_window() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut w = WindowedMin::new();
        assert_eq!(w.min(), None::<u32>);
        w.push(t0, 5, ms(10));
        w.push(t0 + ms(2), 3, ms(10));
        w.push(t0 + ms(4), 7, ms(10));
        assert_eq!(w.min(), Some(3));
        // 3 (at 2 ms) is 11 ms old: out; 7 (at 4 ms) is the least left
        w.push(t0 + ms(13), 9, ms(10));
        assert_eq!(w.min(), Some(7));
        // a narrower window on the next push leaves only the newest
        w.push(t0 + ms(14), 8, ms(0));
        assert_eq!(w.min(), Some(8));
        // a smaller value replaces everything before it
        w.push(t0 + ms(15), 1, ms(10));
        assert_eq!(w.min(), Some(1));
        assert_eq!(w.points.len(), 1);
    }
}
