//! Which waiting invocation a worker's free slot goes to.
//!
//! A worker holds at most one delivery per invocation queue while its slots
//! are all busy (each queue's consumer waits for a slot before it takes the
//! next). When a slot frees, the highest priority waiting gets it, the
//! oldest first within a priority; a waiter that has been overtaken
//! [`MAX_OVERTAKES`] times goes first (aging), so `low` work waits a bounded
//! number of grants however much `high` work keeps arriving.

use crate::protocol::request::Priority;

/// How many later arrivals may take a slot before a waiter goes first.
pub const MAX_OVERTAKES: u32 = 4;

/// A delivery waiting for a slot, in arrival order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiting {
    pub priority: Priority,
    /// Slots given to waiters that arrived after this one.
    pub overtaken: u32,
}

impl Waiting {
    pub fn new(priority: Priority) -> Self {
        Self { priority, overtaken: 0 }
    }
}

fn rank(p: Priority) -> u8 {
    match p {
        Priority::Low => 0,
        Priority::Normal => 1,
        Priority::High => 2,
    }
}

/// The waiter (by index, `waiting` in arrival order) the next free slot
/// goes to: the oldest one overtaken [`MAX_OVERTAKES`] times, else the
/// oldest of the highest priority. `None` when nobody waits.
pub fn next(waiting: &[Waiting]) -> Option<usize> {
    if let Some(aged) = waiting.iter().position(|w| w.overtaken >= MAX_OVERTAKES) {
        return Some(aged);
    }
    let best = waiting.iter().map(|w| rank(w.priority)).max()?;
    waiting.iter().position(|w| rank(w.priority) == best)
}

/// Gives the slot to waiter `granted`: every waiter that arrived before it
/// was overtaken once more. Returns the granted waiter, removed.
pub fn grant(waiting: &mut Vec<Waiting>, granted: usize) -> Waiting {
    for w in &mut waiting[..granted] {
        w.overtaken += 1;
    }
    waiting.remove(granted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve_all(mut waiting: Vec<Waiting>) -> Vec<Priority> {
        let mut order = vec![];
        while let Some(i) = next(&waiting) {
            order.push(grant(&mut waiting, i).priority);
        }
        order
    }

    #[test]
    fn high_goes_before_normal_before_low_and_each_in_arrival_order() {
        use Priority::*;
        let waiting = [Low, Normal, High, Low, High].map(Waiting::new).to_vec();
        assert_eq!(next(&waiting), Some(2));
        assert_eq!(serve_all(waiting), vec![High, High, Normal, Low, Low]);
        assert_eq!(next(&[]), None);
    }

    #[test]
    fn a_low_waiter_goes_first_after_being_overtaken_max_times() {
        // One low waiter, and a high one arriving after every grant: the low
        // one is served after exactly MAX_OVERTAKES high ones.
        let mut waiting = vec![Waiting::new(Priority::Low)];
        let mut served = vec![];
        for _ in 0..20 {
            waiting.push(Waiting::new(Priority::High));
            let i = next(&waiting).unwrap();
            served.push(grant(&mut waiting, i).priority);
            if served.last() == Some(&Priority::Low) {
                break;
            }
        }
        let highs_before = served.iter().filter(|p| **p == Priority::High).count();
        assert_eq!(highs_before, MAX_OVERTAKES as usize, "{served:?}");
        assert_eq!(served.last(), Some(&Priority::Low));
    }

    #[test]
    fn only_earlier_arrivals_count_as_overtaken() {
        let mut waiting = [Priority::Low, Priority::High, Priority::Low].map(Waiting::new).to_vec();
        grant(&mut waiting, 1);
        assert_eq!(waiting.iter().map(|w| w.overtaken).collect::<Vec<_>>(), vec![1, 0]);
    }
}
