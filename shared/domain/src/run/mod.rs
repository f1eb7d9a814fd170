//! A run as it moves: the state machines of runs, invocations and tasks, and
//! the journal's event names.
//!
//! - [`state`]: run, invocation and task state machines.
//! - [`journal`]: the journal's event names (`JournalEvent`).

pub mod journal;
pub mod state;
