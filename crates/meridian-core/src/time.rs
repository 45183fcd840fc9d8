//! Time. Clock readings are plain `u64` nanoseconds (names end in `_ns`); a [`Timestamp`]
//! is a clock reading plus a tie-breaker, ordered lexicographically, which is what most
//! protocols order transactions by. Protocols with structured timestamps (DAST, K2) define
//! their own types beside it.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Nanoseconds in one millisecond.
pub const NS_PER_MS: u64 = 1_000_000;
/// Nanoseconds in one microsecond.
pub const NS_PER_US: u64 = 1_000;
/// Nanoseconds in one second.
pub const NS_PER_S: u64 = 1_000_000_000;

/// A protocol timestamp: `time_ns` from a (local) clock, `tiebreak` to make it unique
/// (usually the issuing node's id). Ordered by `time_ns`, then `tiebreak`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Timestamp {
    pub time_ns: u64,
    pub tiebreak: u32,
}

impl Timestamp {
    /// The smallest timestamp; every real version is above it.
    pub const ZERO: Timestamp = Timestamp {
        time_ns: 0,
        tiebreak: 0,
    };
    /// The largest timestamp.
    pub const MAX: Timestamp = Timestamp {
        time_ns: u64::MAX,
        tiebreak: u32::MAX,
    };

    pub fn new(time_ns: u64, tiebreak: u32) -> Timestamp {
        Timestamp { time_ns, tiebreak }
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}#{}",
            self.time_ns / NS_PER_S,
            self.time_ns % NS_PER_S,
            self.tiebreak
        )
    }
}

/// Parses a duration such as `30s`, `250ms`, `2m`, `1h`, `500us` or `100ns` into nanoseconds.
pub fn parse_duration_ns(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("duration `{text}` has no unit (use ns, us, ms, s, m or h)"))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("duration `{text}` does not start with a number"))?;
    let scale = match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" => 60e9,
        "h" => 3600e9,
        _ => {
            return Err(format!(
                "duration `{text}` has unknown unit `{unit}` (use ns, us, ms, s, m or h)"
            ))
        }
    };
    let ns = value * scale;
    if !ns.is_finite() || ns < 0.0 || ns > u64::MAX as f64 / 2.0 {
        return Err(format!("duration `{text}` is out of range"));
    }
    Ok(ns.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_order_by_time_then_tiebreak() {
        assert!(Timestamp::new(5, 9) < Timestamp::new(6, 0));
        assert!(Timestamp::new(5, 1) < Timestamp::new(5, 2));
        assert!(Timestamp::ZERO < Timestamp::new(0, 1));
    }

    #[test]
    fn durations_parse_with_units_and_reject_garbage() {
        assert_eq!(parse_duration_ns("30s"), Ok(30 * NS_PER_S));
        assert_eq!(parse_duration_ns("250ms"), Ok(250 * NS_PER_MS));
        assert_eq!(parse_duration_ns("1.5s"), Ok(1_500 * NS_PER_MS));
        assert_eq!(parse_duration_ns("2m"), Ok(120 * NS_PER_S));
        assert!(parse_duration_ns("30").is_err());
        assert!(parse_duration_ns("s").is_err());
        assert!(parse_duration_ns("3 parsecs").is_err());
    }
}
