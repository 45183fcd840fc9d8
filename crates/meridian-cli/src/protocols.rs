//! The protocol registry: `--protocol NAME` to a monomorphized simulator run.

use meridian_core::Protocol;
use meridian_protocols::clock_si::{ClockSi, ConventionalSi};
use meridian_protocols::tiga::Tiga;
use meridian_protocols::two_pl::TwoPlTwoPc;

/// Every protocol `--protocol` accepts, with the model it promises.
pub fn names() -> Vec<(&'static str, &'static str)> {
    vec![
        (TwoPlTwoPc::NAME, TwoPlTwoPc::GUARANTEE),
        (ClockSi::NAME, ClockSi::GUARANTEE),
        (ConventionalSi::NAME, ConventionalSi::GUARANTEE),
        (Tiga::NAME, Tiga::GUARANTEE),
    ]
}

/// Calls `$body` with `$p` bound to the protocol type named `$name`, or evaluates `$unknown`.
macro_rules! with_protocol {
    ($name:expr, $p:ident => $body:expr, $unknown:expr) => {
        match $name {
            n if n == <meridian_protocols::two_pl::TwoPlTwoPc as meridian_core::Protocol>::NAME => {
                type $p = meridian_protocols::two_pl::TwoPlTwoPc;
                $body
            }
            n if n == <meridian_protocols::clock_si::ClockSi as meridian_core::Protocol>::NAME => {
                type $p = meridian_protocols::clock_si::ClockSi;
                $body
            }
            n if n
                == <meridian_protocols::clock_si::ConventionalSi as meridian_core::Protocol>::NAME =>
            {
                type $p = meridian_protocols::clock_si::ConventionalSi;
                $body
            }
            n if n == <meridian_protocols::tiga::Tiga as meridian_core::Protocol>::NAME => {
                type $p = meridian_protocols::tiga::Tiga;
                $body
            }
            _ => $unknown,
        }
    };
}
pub(crate) use with_protocol;
