//! `meridian-check`: histories and the isolation checker (DESIGN §7).
//!
//! * [`history`] — the JSON Lines history format (one completed transaction per line).

pub mod history;

pub use history::{Entry, EntryType, HistOp, History, HistoryError, ReadValue};
