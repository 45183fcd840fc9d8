//! The wire format shared by servers and clients.
//!
//! A connection carries length-delimited frames: a 4-byte big-endian length, then that many
//! bytes of a postcard-encoded value. The first frame of every connection is a [`Hello`]
//! saying who speaks; after it a peer connection carries the protocol's messages and a
//! client connection carries [`RequestFrame`]s one way and [`ResponseFrame`]s the other.
//!
//! Bad input: a frame longer than its limit, a stream that ends inside a frame, and a frame
//! that does not decode as the expected type (or has bytes left over) are each a
//! [`FrameError`]; the server closes that connection and keeps serving the others.
//!
//! **Limits.** A server reads with a [`FrameDecoder`], which refuses a length prefix over
//! its limit the moment the prefix arrives and, unlike `LengthDelimitedCodec`, never
//! reserves room for a frame it has only been promised: a connection holds the bytes it
//! has really sent, at most its limit. The limits: [`MAX_HELLO_BYTES`] until the hello,
//! then [`MAX_CLIENT_FRAME_BYTES`] for a client (requests are small) and
//! [`MAX_FRAME_BYTES`] for a peer (a Raft snapshot can be large).

use bytes::{Buf, Bytes, BytesMut};
use meridian_core::txn::{ClientRequest, ClientResponse};
use meridian_core::NodeId;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio_util::codec::{Decoder, LengthDelimitedCodec};

/// The largest frame a node accepts (16 MiB): larger claims are refused before any
/// allocation, so a corrupt or hostile length prefix cannot exhaust memory.
pub const MAX_FRAME_BYTES: usize = 16 << 20;

/// The largest hello a node reads (its only variable part is the cluster's name).
pub const MAX_HELLO_BYTES: usize = 4 << 10;

/// The largest client request a node reads (1 MiB: a transaction's keys and values).
pub const MAX_CLIENT_FRAME_BYTES: usize = 1 << 20;

/// Bytes of the length prefix.
const PREFIX_BYTES: usize = 4;

/// A length-delimited frame decoder (u32 big-endian prefix) with a limit it can change
/// between frames; see the module doc for why it does not use `LengthDelimitedCodec`'s.
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    max_frame_bytes: usize,
}

impl FrameDecoder {
    pub fn new(max_frame_bytes: usize) -> FrameDecoder {
        FrameDecoder { max_frame_bytes }
    }

    /// Applies to the frames not yet started.
    pub fn set_max_frame_bytes(&mut self, max_frame_bytes: usize) {
        self.max_frame_bytes = max_frame_bytes;
    }

    pub fn max_frame_bytes(&self) -> usize {
        self.max_frame_bytes
    }
}

impl Decoder for FrameDecoder {
    type Item = BytesMut;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, FrameError> {
        let Some(prefix) = src.get(..PREFIX_BYTES) else {
            return Ok(None);
        };
        let length = u32::from_be_bytes(prefix.try_into().expect("4 bytes")) as usize;
        if length > self.max_frame_bytes {
            return Err(FrameError::Oversized {
                length,
                limit: self.max_frame_bytes,
            });
        }
        if src.len() < PREFIX_BYTES + length {
            return Ok(None);
        }
        src.advance(PREFIX_BYTES);
        Ok(Some(src.split_to(length)))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, FrameError> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.is_empty() => Ok(None),
            None => Err(FrameError::Truncated(src.len())),
        }
    }
}

/// The first frame of a connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Hello {
    /// Node `from` of the cluster named `cluster` will send protocol messages.
    Peer { from: NodeId, cluster: String },
    /// A client will send requests to this node (a coordinator).
    Client,
}

/// A client's request; `id` is the client's own, echoed in the response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestFrame {
    pub id: u64,
    pub request: ClientRequest,
}

/// A coordinator's answer to request `id` of this connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponseFrame {
    pub id: u64,
    pub response: ClientResponse,
}

/// Why a connection's input is unusable.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {length} bytes announced, more than the limit of {limit}")]
    Oversized { length: usize, limit: usize },
    #[error("stream ended inside a frame ({0} bytes of it received)")]
    Truncated(usize),
    #[error("frame does not decode: {0}")]
    Malformed(String),
    #[error("{0} trailing bytes after the frame's value")]
    Trailing(usize),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// The frame codec: u32 big-endian length prefix, frames of at most [`MAX_FRAME_BYTES`].
pub fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_type::<u32>()
        .max_frame_length(MAX_FRAME_BYTES)
        .new_codec()
}

/// Encodes one value as a frame payload (the codec adds the length).
pub fn encode<T: Serialize>(value: &T) -> Bytes {
    // Serializing into a Vec only fails for types serde cannot express (maps with non-string
    // keys are fine in postcard); our wire types are plain derives, so this is a bug if hit.
    Bytes::from(postcard::to_stdvec(value).expect("wire types always serialize"))
}

/// Decodes one frame payload as a `T`; the whole payload must be consumed.
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, FrameError> {
    let (value, rest) =
        postcard::take_from_bytes(payload).map_err(|e| FrameError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(FrameError::Trailing(rest.len()));
    }
    Ok(value)
}

/// Maps a codec error (oversized frame or i/o) to a [`FrameError`].
pub fn codec_error(error: std::io::Error) -> FrameError {
    let text = error.to_string();
    if text.contains("frame size too big") {
        FrameError::Oversized {
            length: 0,
            limit: MAX_FRAME_BYTES,
        }
    } else if text.contains("bytes remaining on stream") {
        FrameError::Truncated(0)
    } else {
        FrameError::Io(error)
    }
}

/// Splits a complete byte stream into frames and decodes each as a `T`, the way a
/// connection reader does (with a peer's limit); stops at the first error. The fuzz target
/// drives this.
pub fn decode_stream<T: DeserializeOwned>(bytes: &[u8]) -> Result<Vec<T>, FrameError> {
    let mut decoder = FrameDecoder::new(MAX_FRAME_BYTES);
    let mut buffer = BytesMut::from(bytes);
    let mut values = Vec::new();
    while let Some(frame) = decoder.decode_eof(&mut buffer)? {
        values.push(decode(&frame)?);
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;
    use meridian_core::txn::{Op, Operand, Piece, Txn};
    use meridian_core::ShardId;
    use tokio_util::codec::Encoder;

    fn framed<T: Serialize>(values: &[T]) -> BytesMut {
        let mut codec = codec();
        let mut out = BytesMut::new();
        for v in values {
            codec.encode(encode(v), &mut out).unwrap();
        }
        out
    }

    /// Keys and values kept the wire format of `bytes::Bytes` when they became
    /// `SmallBytes` (serde bytes: a length and the bytes), inline or shared.
    #[test]
    fn small_bytes_encode_as_bytes_did() {
        for raw in [&b""[..], b"mb12~3", &[9u8; 40]] {
            let ours = postcard::to_stdvec(&meridian_core::SmallBytes::from(raw)).unwrap();
            let theirs = postcard::to_stdvec(&Bytes::copy_from_slice(raw)).unwrap();
            assert_eq!(ours, theirs);
            let back: meridian_core::SmallBytes = postcard::from_bytes(&theirs).unwrap();
            assert_eq!(back, raw);
        }
    }

    fn request(id: u64) -> RequestFrame {
        let key = meridian_core::SmallBytes::from_static(b"k");
        let op = Op::Put(
            key,
            Operand::Literal(meridian_core::SmallBytes::from_static(b"v")),
        );
        RequestFrame {
            id,
            request: ClientRequest::OneShot(Txn {
                pieces: vec![Piece::ops(ShardId(0), vec![op])],
            }),
        }
    }

    #[test]
    fn frames_round_trip() {
        let stream = framed(&[request(1), request(2)]);
        let back: Vec<RequestFrame> = decode_stream(&stream).unwrap();
        assert_eq!(back, vec![request(1), request(2)]);
    }

    /// A prefix over the limit is refused with only the prefix received, and a frame
    /// under it is not reserved for: the buffer holds what arrived, nothing more.
    #[test]
    fn an_announced_frame_is_refused_or_buffered_as_it_arrives_never_reserved() {
        let mut decoder = FrameDecoder::new(MAX_CLIENT_FRAME_BYTES);
        let mut buffer = BytesMut::new();
        buffer.put_u32(16 << 20);
        assert!(matches!(
            decoder.decode(&mut buffer),
            Err(FrameError::Oversized { length, limit }) if length == 16 << 20 && limit == 1 << 20
        ));
        let mut buffer = BytesMut::with_capacity(64);
        buffer.put_u32(1 << 20);
        buffer.put_slice(&[7; 10]);
        assert!(decoder.decode(&mut buffer).unwrap().is_none());
        assert!(buffer.capacity() < 1024, "reserved {}", buffer.capacity());
        buffer.put_slice(&vec![7; (1 << 20) - 10]);
        assert_eq!(decoder.decode(&mut buffer).unwrap().unwrap().len(), 1 << 20);
        assert!(buffer.is_empty());
    }

    #[test]
    fn bad_frames_are_errors_not_panics() {
        let stream = framed(&[request(1)]);
        let truncated = &stream[..stream.len() - 2];
        assert!(matches!(
            decode_stream::<RequestFrame>(truncated),
            Err(FrameError::Truncated(_))
        ));
        let mut oversized = BytesMut::new();
        oversized.put_u32(u32::MAX);
        oversized.put_slice(b"xx");
        assert!(matches!(
            decode_stream::<RequestFrame>(&oversized),
            Err(FrameError::Oversized { .. })
        ));
        let mut raw = BytesMut::new();
        raw.put_u32(3);
        raw.put_slice(&[0xff, 0xff, 0xff]);
        assert!(matches!(
            decode_stream::<RequestFrame>(&raw),
            Err(FrameError::Malformed(_))
        ));
        let mut trailing = BytesMut::new();
        let mut payload = encode(&Hello::Client).to_vec();
        payload.push(0);
        trailing.put_u32(payload.len() as u32);
        trailing.put_slice(&payload);
        assert!(matches!(
            decode_stream::<Hello>(&trailing),
            Err(FrameError::Trailing(1))
        ));
    }
}
