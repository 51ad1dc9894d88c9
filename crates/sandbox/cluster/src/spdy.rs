//! SPDY/3.1 framing, as much of it as Kubernetes' streaming protocols use: the client opens streams
//! with SYN_STREAM, the server answers each with SYN_REPLY, both sides send DATA (the FIN flag
//! half-closes a stream), RST_STREAM aborts one, PING is echoed and GOAWAY ends the connection.
//! Header blocks form one zlib stream per direction, primed with SPDY/3's dictionary.

use bytes::{Buf, Bytes, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// SPDY/3's header-compression dictionary (draft 3, section 2.6.10.1). It is a protocol constant:
/// a peer that primes zlib with it refuses any other (its Adler-32 is `0xe3c6a7c2`).
const DICTIONARY: &[u8] = include_bytes!("spdy3-dictionary.bin");

/// The flag that half-closes a stream, on DATA, SYN_STREAM and SYN_REPLY frames.
pub const FLAG_FIN: u8 = 0x01;

/// RST_STREAM's status for a stream the server does not know how to serve.
pub const REFUSED_STREAM: u32 = 3;

/// The largest frame the decoder accepts; a peer announcing more is not speaking SPDY to us.
const MAX_FRAME: usize = 1 << 24;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;

/// One frame a peer sent, with its header block already decompressed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A new stream and its headers (lower-case names).
    SynStream {
        /// The stream's id (odd when the client opened it).
        stream: u32,
        /// The frame's flags ([`FLAG_FIN`]).
        flags: u8,
        /// The stream's headers.
        headers: Vec<(String, String)>,
    },
    /// Bytes on a stream; [`FLAG_FIN`] in `flags` says the sender will send no more.
    Data {
        /// The stream's id.
        stream: u32,
        /// The frame's flags.
        flags: u8,
        /// The payload.
        data: Bytes,
    },
    /// The sender aborted the stream.
    Reset {
        /// The stream's id.
        stream: u32,
        /// Why (SPDY's status codes).
        status: u32,
    },
    /// A ping to echo back with the same id.
    Ping(u32),
    /// The peer is closing the connection.
    GoAway,
    /// A frame this server has nothing to do for (SETTINGS, HEADERS, WINDOW_UPDATE, ...).
    Ignored,
}

/// Reads frames out of the bytes a peer sends, however they were cut into messages or reads.
pub struct Decoder {
    buffer: BytesMut,
    inflater: Decompress,
}

impl Default for Decoder {
    fn default() -> Self {
        Self {
            buffer: BytesMut::new(),
            inflater: Decompress::new(true),
        }
    }
}

impl Decoder {
    /// Appends bytes the peer sent.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The next complete frame, `None` until enough bytes have arrived, or an error that ends the
    /// connection (a malformed frame or header block).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, String> {
        if self.buffer.len() < 8 {
            return Ok(None);
        }
        let length =
            u32::from_be_bytes([0, self.buffer[5], self.buffer[6], self.buffer[7]]) as usize;
        if length >= MAX_FRAME {
            return Err(format!("a SPDY frame of {length} bytes is too large"));
        }
        if self.buffer.len() < 8 + length {
            return Ok(None);
        }
        let mut frame = self.buffer.split_to(8 + length).freeze();
        let first = frame.get_u32();
        let flags = frame.get_u8();
        frame.advance(3);
        if first & 0x8000_0000 == 0 {
            return Ok(Some(Frame::Data {
                stream: first,
                flags,
                data: frame,
            }));
        }
        let version = (first >> 16) & 0x7fff;
        if version != 3 {
            return Err(format!("SPDY version {version} is not served (only 3)"));
        }
        let too_short = || {
            format!(
                "a SPDY control frame of type {} is too short",
                first & 0xffff
            )
        };
        Ok(Some(match (first & 0xffff) as u16 {
            SYN_STREAM => {
                if frame.len() < 10 {
                    return Err(too_short());
                }
                let stream = frame.get_u32() & 0x7fff_ffff;
                frame.advance(6);
                let headers = self.header_block(&frame)?;
                Frame::SynStream {
                    stream,
                    flags,
                    headers,
                }
            }
            RST_STREAM => {
                if frame.len() < 8 {
                    return Err(too_short());
                }
                Frame::Reset {
                    stream: frame.get_u32() & 0x7fff_ffff,
                    status: frame.get_u32(),
                }
            }
            PING => {
                if frame.len() < 4 {
                    return Err(too_short());
                }
                Frame::Ping(frame.get_u32())
            }
            GOAWAY => Frame::GoAway,
            // Header blocks share one zlib stream, so a HEADERS frame must still be inflated.
            SYN_REPLY | 8 if frame.len() >= 4 => {
                self.header_block(&frame[4..])?;
                Frame::Ignored
            }
            _ => Frame::Ignored,
        }))
    }

    fn header_block(&mut self, compressed: &[u8]) -> Result<Vec<(String, String)>, String> {
        let plain = self.inflate(compressed)?;
        parse_header_block(&plain)
    }

    fn inflate(&mut self, input: &[u8]) -> Result<Vec<u8>, String> {
        let mut output = Vec::with_capacity(input.len() * 4 + 64);
        let mut consumed = 0;
        loop {
            if output.len() == output.capacity() {
                output.reserve(output.len());
            }
            let (before_in, before_out) = (self.inflater.total_in(), self.inflater.total_out());
            match self.inflater.decompress_vec(
                &input[consumed..],
                &mut output,
                FlushDecompress::Sync,
            ) {
                Ok(Status::StreamEnd) => {
                    return Err("a SPDY header block ended its zlib stream".to_string());
                }
                Ok(_) => {}
                Err(error) if error.needs_dictionary().is_some() => {
                    self.inflater
                        .set_dictionary(DICTIONARY)
                        .map_err(|e| format!("SPDY header dictionary refused: {e}"))?;
                }
                Err(error) => return Err(format!("SPDY header block: {error}")),
            }
            consumed += (self.inflater.total_in() - before_in) as usize;
            let progressed =
                self.inflater.total_in() != before_in || self.inflater.total_out() != before_out;
            if consumed >= input.len() && output.len() < output.capacity() {
                return Ok(output);
            }
            if !progressed && output.len() < output.capacity() {
                return Err("a SPDY header block is truncated".to_string());
            }
        }
    }
}

/// Reads SPDY/3's name/value block: a count, then length-prefixed names and values.
fn parse_header_block(mut block: &[u8]) -> Result<Vec<(String, String)>, String> {
    let truncated = || "a SPDY header block is truncated".to_string();
    let next = |block: &mut &[u8]| -> Result<String, String> {
        if block.len() < 4 {
            return Err(truncated());
        }
        let length = block.get_u32() as usize;
        if block.len() < length {
            return Err(truncated());
        }
        let text = String::from_utf8_lossy(&block[..length]).into_owned();
        block.advance(length);
        Ok(text)
    };
    if block.len() < 4 {
        return Err(truncated());
    }
    let count = block.get_u32();
    let mut headers = Vec::new();
    for _ in 0..count {
        let name = next(&mut block)?;
        let value = next(&mut block)?;
        headers.push((name.to_ascii_lowercase(), value));
    }
    Ok(headers)
}

/// The first value of header `name` among a stream's headers.
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.split('\0').next().unwrap_or_default())
}

/// Writes the frames a server sends.
pub struct Encoder {
    deflater: Compress,
}

impl Default for Encoder {
    fn default() -> Self {
        Self {
            deflater: Compress::new(Compression::default(), true),
        }
    }
}

impl Encoder {
    /// SYN_REPLY accepting `stream`, with no headers; `fin` refuses it as client-go does (a reply
    /// that also closes the server's side).
    pub fn syn_reply(&mut self, stream: u32, fin: bool) -> Vec<u8> {
        // The empty name/value block: a count of zero.
        let plain = [0u8; 4];
        let mut compressed = Vec::with_capacity(64);
        // A sync flush ends every block on a byte boundary, so the peer inflates it whole.
        let _ = self
            .deflater
            .compress_vec(&plain, &mut compressed, FlushCompress::Sync);
        let mut frame = control(
            SYN_REPLY,
            if fin { FLAG_FIN } else { 0 },
            4 + compressed.len(),
        );
        frame.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
        frame.extend_from_slice(&compressed);
        frame
    }
}

fn control(kind: u16, flags: u8, length: usize) -> Vec<u8> {
    let mut frame = Vec::with_capacity(8 + length);
    frame.extend_from_slice(&(0x8003u16).to_be_bytes());
    frame.extend_from_slice(&kind.to_be_bytes());
    frame.push(flags);
    frame.extend_from_slice(&(length as u32).to_be_bytes()[1..]);
    frame
}

/// A DATA frame; `fin` half-closes the stream after `data`.
pub fn data(stream: u32, fin: bool, data: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(8 + data.len());
    frame.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    frame.push(if fin { FLAG_FIN } else { 0 });
    frame.extend_from_slice(&(data.len() as u32).to_be_bytes()[1..]);
    frame.extend_from_slice(data);
    frame
}

/// A RST_STREAM frame aborting `stream`.
pub fn reset(stream: u32, status: u32) -> Vec<u8> {
    let mut frame = control(RST_STREAM, 0, 8);
    frame.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    frame.extend_from_slice(&status.to_be_bytes());
    frame
}

/// The answer to a PING: the same id.
pub fn ping(id: u32) -> Vec<u8> {
    let mut frame = control(PING, 0, 4);
    frame.extend_from_slice(&id.to_be_bytes());
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a Go client (moby/spdystream) sends: a header block compressed at best compression
    /// with the dictionary, sync-flushed, in one zlib stream shared by the connection.
    struct GoClient {
        deflater: Compress,
    }

    impl GoClient {
        fn new() -> Self {
            let mut deflater = Compress::new(Compression::best(), true);
            deflater.set_dictionary(DICTIONARY).unwrap();
            Self { deflater }
        }

        fn syn_stream(&mut self, stream: u32, headers: &[(&str, &str)]) -> Vec<u8> {
            let mut plain = (headers.len() as u32).to_be_bytes().to_vec();
            for (name, value) in headers {
                for text in [name, value] {
                    plain.extend_from_slice(&(text.len() as u32).to_be_bytes());
                    plain.extend_from_slice(text.as_bytes());
                }
            }
            let mut compressed = Vec::with_capacity(plain.len() + 64);
            self.deflater
                .compress_vec(&plain, &mut compressed, FlushCompress::Sync)
                .unwrap();
            let mut frame = control(SYN_STREAM, 0, 10 + compressed.len());
            frame.extend_from_slice(&stream.to_be_bytes());
            frame.extend_from_slice(&[0; 6]);
            frame.extend_from_slice(&compressed);
            frame
        }
    }

    #[test]
    fn the_dictionary_is_spdy3s() {
        assert_eq!(DICTIONARY.len(), 1423);
        assert!(DICTIONARY.starts_with(b"\0\0\0\x07options"));
        assert!(DICTIONARY.ends_with(b"enq=0."));
    }

    #[test]
    fn streams_and_data_are_read_however_the_bytes_are_cut() {
        let mut client = GoClient::new();
        let mut wire = client.syn_stream(
            1,
            &[
                ("streamtype", "error"),
                ("port", "9898"),
                ("requestid", "0"),
            ],
        );
        wire.extend(client.syn_stream(
            3,
            &[("streamtype", "data"), ("port", "9898"), ("requestid", "0")],
        ));
        wire.extend(data(3, false, b"GET / HTTP/1.1\r\n\r\n"));
        wire.extend(data(1, true, b""));
        wire.extend(reset(3, 5));
        wire.extend(ping(7));
        // Go's framer writes each field separately, and each write is one WebSocket message.
        let mut decoder = Decoder::default();
        let mut frames = Vec::new();
        for byte in wire {
            decoder.push(&[byte]);
            while let Some(frame) = decoder.next_frame().unwrap() {
                frames.push(frame);
            }
        }
        assert_eq!(frames.len(), 6);
        let Frame::SynStream {
            stream: 3, headers, ..
        } = &frames[1]
        else {
            panic!("{frames:?}")
        };
        assert_eq!(header(headers, "streamtype"), Some("data"));
        assert_eq!(header(headers, "port"), Some("9898"));
        assert_eq!(
            frames[2],
            Frame::Data {
                stream: 3,
                flags: 0,
                data: Bytes::from_static(b"GET / HTTP/1.1\r\n\r\n")
            }
        );
        assert_eq!(
            frames[3],
            Frame::Data {
                stream: 1,
                flags: FLAG_FIN,
                data: Bytes::new()
            }
        );
        assert_eq!(
            frames[4],
            Frame::Reset {
                stream: 3,
                status: 5
            }
        );
        assert_eq!(frames[5], Frame::Ping(7));
    }

    #[test]
    fn replies_carry_an_empty_header_block_a_client_can_inflate() {
        let mut encoder = Encoder::default();
        let mut inflater = Decompress::new(true);
        for stream in [1u32, 3, 5] {
            let frame = encoder.syn_reply(stream, stream == 5);
            assert_eq!(&frame[..4], &[0x80, 3, 0, 2]);
            assert_eq!(frame[4], if stream == 5 { FLAG_FIN } else { 0 });
            let length = u32::from_be_bytes([0, frame[5], frame[6], frame[7]]) as usize;
            assert_eq!(frame.len(), 8 + length);
            assert_eq!(&frame[8..12], &stream.to_be_bytes());
            let mut plain = Vec::with_capacity(64);
            inflater
                .decompress_vec(&frame[12..], &mut plain, FlushDecompress::Sync)
                .unwrap();
            assert_eq!(plain, [0, 0, 0, 0]);
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_hang() {
        let mut decoder = Decoder::default();
        decoder.push(&[0x80, 2, 0, 1, 0, 0, 0, 0]);
        assert!(decoder.next_frame().unwrap_err().contains("version 2"));
        let mut decoder = Decoder::default();
        let mut frame = control(SYN_STREAM, 0, 14);
        frame.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4]);
        decoder.push(&frame);
        assert!(decoder.next_frame().is_err());
    }
}
