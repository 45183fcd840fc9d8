//! Checks and conversions every protocol's option parser shares, so a bad value is refused
//! with the same words whichever protocol reads it.

use meridian_core::node::ProtocolConfig;
use meridian_core::time::NS_PER_MS;

/// `ms` if it is a positive, finite number of milliseconds (at most 10⁹: the conversion to
/// nanoseconds stays far from overflow), else an error naming `key`.
pub fn positive_ms(key: &str, ms: f64) -> Result<f64, String> {
    if ms.is_finite() && ms > 0.0 && ms <= 1e9 {
        Ok(ms)
    } else {
        Err(format!(
            "protocol option `{key}` must be a positive number of milliseconds, got {ms}"
        ))
    }
}

/// `value` if it is at least 1, else an error naming `key`.
pub fn at_least_one(key: &str, value: usize) -> Result<usize, String> {
    if value == 0 {
        Err(format!("protocol option `{key}` must be at least 1"))
    } else {
        Ok(value)
    }
}

/// The count option `key` (`default` when absent), refused unless at least 1.
pub fn count(config: &ProtocolConfig, key: &str, default: usize) -> Result<usize, String> {
    at_least_one(key, config.get(key, default)?)
}

/// Milliseconds (as options give them) to nanoseconds, rounded.
pub fn ms_to_ns(ms: f64) -> u64 {
    (ms * NS_PER_MS as f64).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_are_refused_by_name() {
        assert_eq!(positive_ms("x_ms", 2.5), Ok(2.5));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 2e9] {
            assert!(positive_ms("x_ms", bad).unwrap_err().contains("`x_ms`"));
        }
        assert_eq!(at_least_one("n", 3), Ok(3));
        assert!(at_least_one("n", 0).unwrap_err().contains("`n`"));
        assert_eq!(ms_to_ns(1.5), 1_500_000);
    }
}
