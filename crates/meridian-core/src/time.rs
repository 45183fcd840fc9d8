//! Time. Clock readings are plain `u64` nanoseconds (names end in `_ns`); a [`Timestamp`]
//! is a clock reading, a tie-breaker and a logical fraction, ordered lexicographically,
//! which is what every protocol orders transactions by.
//!
//! **One timestamp shape for every protocol.** The papers' structured timestamps all fit
//! `⟨time_ns, tiebreak, frac⟩`, so no protocol invents its own type and the store, the logs,
//! the release queue and the checker's commit-timestamp fields take one type:
//! - Tiga, Clock-SI, 2PL, Aurogon: `⟨clock reading, issuing node⟩`, `frac = 0`;
//! - K2's `⟨ts, oracle id⟩`: `tiebreak` is the oracle id;
//! - DAST's dclock `⟨time, nid, frac⟩` (DAST §3.2, Alg. 1): `frac` is the logical part a
//!   node increases while it freezes `time`, so an IRT is ordered below a prepared CRT; it
//!   is compared *after* the node id, as in the paper's `CreateTs` (`ret ← lastTs;
//!   ret.frac++` must stay above `lastTs` and below the CRT's larger `time`);
//! - an HLC `⟨wall, logical⟩` (MVTO-HLC): `tiebreak` is the logical counter.
//!
//! A separate field rather than bits borrowed from `tiebreak`: DAST's `frac` grows with every
//! IRT a node coordinates while a CRT is pending (hundreds per 100 ms at load), so 16 bits
//! would overflow; the struct stays 16 bytes (u64 + two u32) and `frac = 0` leaves every
//! existing order unchanged.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Nanoseconds in one millisecond.
pub const NS_PER_MS: u64 = 1_000_000;
/// Nanoseconds in one microsecond.
pub const NS_PER_US: u64 = 1_000;
/// Nanoseconds in one second.
pub const NS_PER_S: u64 = 1_000_000_000;

/// A protocol timestamp: `time_ns` from a (local) clock, `tiebreak` to make it unique
/// (usually the issuing node's id), `frac` a logical part below the tie-breaker (DAST's
/// dclock; zero elsewhere). Ordered by `time_ns`, then `tiebreak`, then `frac`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Timestamp {
    pub time_ns: u64,
    pub tiebreak: u32,
    /// DAST's logical fraction (see the module doc); serde-defaulted so histories and logs
    /// written before it existed still read.
    #[serde(default)]
    pub frac: u32,
}

impl Timestamp {
    /// The smallest timestamp; every real version is above it.
    pub const ZERO: Timestamp = Timestamp {
        time_ns: 0,
        tiebreak: 0,
        frac: 0,
    };
    /// The largest timestamp.
    pub const MAX: Timestamp = Timestamp {
        time_ns: u64::MAX,
        tiebreak: u32::MAX,
        frac: u32::MAX,
    };

    /// A timestamp with no logical fraction (every protocol but DAST).
    pub fn new(time_ns: u64, tiebreak: u32) -> Timestamp {
        Timestamp {
            time_ns,
            tiebreak,
            frac: 0,
        }
    }

    /// DAST's dclock `⟨time, nid, frac⟩`.
    pub fn with_frac(time_ns: u64, tiebreak: u32, frac: u32) -> Timestamp {
        Timestamp {
            time_ns,
            tiebreak,
            frac,
        }
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
        )?;
        if self.frac != 0 {
            write!(f, ".{}", self.frac)?;
        }
        Ok(())
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

    /// DAST's `CreateTs` fallback (Alg. 1 lines 7-8): `lastTs` with `frac + 1` sorts above
    /// `lastTs` and below a prepared CRT at a later `time`, whatever the CRT's node id.
    #[test]
    fn a_dclock_fraction_orders_after_the_node_and_below_a_later_time() {
        let last = Timestamp::with_frac(100, 7, 0);
        let fallback = Timestamp::with_frac(100, 7, 1);
        let crt = Timestamp::with_frac(101, 0, 0);
        assert!(last < fallback && fallback < crt);
        assert!(Timestamp::with_frac(100, 7, u32::MAX) < Timestamp::new(100, 8));
        assert_eq!(Timestamp::new(3, 4), Timestamp::with_frac(3, 4, 0));
        assert_eq!(Timestamp::with_frac(1, 2, 3).to_string(), "0.000000001#2.3");
        assert!(Timestamp::MAX > Timestamp::with_frac(u64::MAX, u32::MAX, 7));
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
