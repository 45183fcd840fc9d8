//! Feeds arbitrary bytes to the frame decoder a server runs on every connection: split into
//! length-delimited frames, then decode each as the type the connection carries. Every
//! outcome must be a value or a `FrameError`, never a panic, an abort or a huge allocation.

#![no_main]

use libfuzzer_sys::fuzz_target;
use meridian_client::wire::{decode_stream, Hello, RequestFrame, ResponseFrame};
use meridian_core::{Node, Protocol};

type ClockSiMsg = <<meridian_protocols::clock_si::ClockSi as Protocol>::Node as Node>::Msg;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, stream)) = data.split_first() else {
        return;
    };
    // The first byte picks what the connection carries, as its Hello would.
    let _ = match selector % 5 {
        0 => decode_stream::<Hello>(stream).map(|v| v.len()),
        1 => decode_stream::<RequestFrame>(stream).map(|v| v.len()),
        2 => decode_stream::<ResponseFrame>(stream).map(|v| v.len()),
        3 => decode_stream::<meridian_protocols::tiga::Msg>(stream).map(|v| v.len()),
        _ => decode_stream::<ClockSiMsg>(stream).map(|v| v.len()),
    };
});
