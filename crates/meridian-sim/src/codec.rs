//! The runtime's codec, exercised by the simulator.
//!
//! The runtime stores durable records and sends messages with postcard, which is not
//! self-describing: a type that serializes differently from how it deserializes (a
//! `skip_serializing_if`, say) shifts every later field and loses the data at the first
//! restart. The simulator otherwise hands values over in memory and would never notice, so
//! it puts them through the same codec:
//! * every durable record a restarted node is rebuilt from (restarts are rare: cheap);
//! * in debug builds (the tests), one message in [`MESSAGE_SAMPLE`], delivered as decoded.
//!
//! A value that does not come back is a bug in the protocol's types, never bad input, so
//! it panics with the type's name (the swarm then reports the seed that replays it).

use serde::{de::DeserializeOwned, Serialize};

/// In debug builds one message in this many goes through the codec before delivery.
pub const MESSAGE_SAMPLE: u64 = 16;

/// `value` encoded and decoded as the runtime would.
pub fn round_trip<T: Serialize + DeserializeOwned>(value: &T) -> T {
    let what = std::any::type_name::<T>();
    let bytes = postcard::to_stdvec(value)
        .unwrap_or_else(|e| panic!("{what} does not encode with the runtime's codec: {e}"));
    let (back, rest): (T, &[u8]) = postcard::take_from_bytes(&bytes)
        .unwrap_or_else(|e| panic!("{what} does not decode from its own encoding: {e}"));
    assert!(
        rest.is_empty(),
        "{what} decodes from fewer bytes than it encodes to ({} left of {})",
        rest.len(),
        bytes.len()
    );
    back
}

/// Whether the `sent`-th message goes through the codec.
pub fn sampled(sent: u64) -> bool {
    cfg!(debug_assertions) && sent.is_multiple_of(MESSAGE_SAMPLE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Good {
        a: Option<u64>,
        b: String,
    }

    #[derive(Serialize, Deserialize, Debug)]
    struct Skipping {
        #[serde(skip_serializing_if = "Option::is_none")]
        a: Option<u64>,
        b: String,
    }

    #[test]
    fn a_well_formed_type_comes_back_unchanged() {
        let good = Good {
            a: None,
            b: "x".into(),
        };
        assert_eq!(round_trip(&good), good);
    }

    #[test]
    #[should_panic(expected = "Skipping")]
    fn a_skipped_field_is_caught() {
        round_trip(&Skipping {
            a: None,
            b: "x".into(),
        });
    }
}
