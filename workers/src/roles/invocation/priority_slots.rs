//! A worker's invocation slots, given out by priority. Each invocation
//! queue's consumer waits here for a slot before it claims its delivery
//! (and before it takes the next one), so while every slot is busy the
//! worker holds one delivery per queue (its prefetch is 1, and it takes
//! more of its queue only with a slot in hand), and a freed slot goes to the one
//! [`baton_domain::policy::priority::next`] picks: the highest priority, oldest
//! first, with aging so low work is never passed over for ever.

use std::sync::{Arc, Mutex};

use baton_domain::policy::priority::{self, Waiting};
use baton_domain::protocol::request::Priority;
use tokio::sync::oneshot;

/// A fixed number of slots, shared by the consumers of one worker.
#[derive(Clone)]
pub struct Slots {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    free: usize,
    /// In arrival order; `senders[i]` hands `waiting[i]` its slot.
    waiting: Vec<Waiting>,
    senders: Vec<(u64, oneshot::Sender<()>)>,
    next_id: u64,
}

/// A slot held; dropping it gives it to the next waiter.
pub struct Slot {
    inner: Arc<Mutex<Inner>>,
}

/// A waiter not yet served: dropped (shutdown), it leaves the line, or
/// passes on the slot it was just given.
struct Pending<'a> {
    slots: &'a Slots,
    id: u64,
    granted: Option<oneshot::Receiver<()>>,
}

impl Slots {
    pub fn new(n: usize) -> Self {
        Self { inner: Arc::new(Mutex::new(Inner { free: n, waiting: vec![], senders: vec![], next_id: 0 })) }
    }

    /// Waits for a slot for work of `priority`.
    pub async fn acquire(&self, priority: Priority) -> Slot {
        let (id, rx) = {
            let mut inner = self.inner.lock().expect("not poisoned");
            if inner.free > 0 && inner.waiting.is_empty() {
                inner.free -= 1;
                return Slot { inner: self.inner.clone() };
            }
            let (tx, rx) = oneshot::channel();
            let id = inner.next_id;
            inner.next_id += 1;
            inner.waiting.push(Waiting::new(priority));
            inner.senders.push((id, tx));
            (id, rx)
        };
        let mut pending = Pending { slots: self, id, granted: Some(rx) };
        let granted = pending.granted.as_mut().expect("set above");
        // The sender lives until it hands this waiter its slot.
        let _ = granted.await;
        pending.granted = None;
        Slot { inner: self.inner.clone() }
    }

    /// A slot, if one is free and nobody waits for one (a waiter of any
    /// priority comes first).
    pub fn try_acquire(&self) -> Option<Slot> {
        let mut inner = self.inner.lock().expect("not poisoned");
        (inner.free > 0 && inner.waiting.is_empty()).then(|| {
            inner.free -= 1;
            Slot { inner: self.inner.clone() }
        })
    }

    /// Slots not held right now (for tests and logs).
    pub fn available(&self) -> usize {
        self.inner.lock().expect("not poisoned").free
    }
}

impl Inner {
    /// A slot came free: to the waiter the domain picks, or back to the pool.
    fn release(&mut self) {
        loop {
            let Some(i) = priority::next(&self.waiting) else {
                self.free += 1;
                return;
            };
            priority::grant(&mut self.waiting, i);
            let (_, tx) = self.senders.remove(i);
            if tx.send(()).is_ok() {
                return;
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.inner.lock().expect("not poisoned").release();
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let Some(mut granted) = self.granted.take() else {
            return;
        };
        let mut inner = self.slots.inner.lock().expect("not poisoned");
        if let Some(i) = inner.senders.iter().position(|(id, _)| *id == self.id) {
            inner.waiting.remove(i);
            inner.senders.remove(i);
        } else if granted.try_recv().is_ok() {
            // Given a slot just as it was dropped: pass it on.
            inner.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_freed_slot_goes_to_the_highest_priority_waiting() {
        let slots = Slots::new(1);
        let held = slots.acquire(Priority::Normal).await;
        let order = Arc::new(Mutex::new(vec![]));
        let mut waiters = vec![];
        for p in [Priority::Low, Priority::Normal, Priority::High] {
            let (slots, order) = (slots.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                let _slot = slots.acquire(p).await;
                order.lock().unwrap().push(p);
            }));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(held);
        for w in waiters {
            w.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![Priority::High, Priority::Normal, Priority::Low]);
        assert_eq!(slots.available(), 1);
    }

    #[tokio::test]
    async fn a_slot_is_taken_at_once_only_while_one_is_free_and_nobody_waits() {
        let slots = Slots::new(2);
        let first = slots.try_acquire().expect("two free");
        let waiter = {
            let slots = slots.clone();
            tokio::spawn(async move {
                let _second = slots.acquire(Priority::Low).await;
                let _third = slots.acquire(Priority::Low).await;
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(slots.try_acquire().is_none(), "the last slot is taken, and a waiter is in line");
        drop(first);
        waiter.await.unwrap();
        assert_eq!(slots.available(), 2);
        assert!(slots.try_acquire().is_some());
    }

    #[tokio::test]
    async fn a_waiter_dropped_on_shutdown_leaves_no_slot_behind() {
        let slots = Slots::new(1);
        let held = slots.acquire(Priority::Low).await;
        let waiting = tokio::time::timeout(Duration::from_millis(20), slots.acquire(Priority::High)).await;
        assert!(waiting.is_err(), "no slot was free");
        drop(held);
        assert_eq!(slots.available(), 1);
        let _again = slots.acquire(Priority::Low).await;
        assert_eq!(slots.available(), 0);
    }
}
