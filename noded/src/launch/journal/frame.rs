//! The journal's on-disk framing: a header, then checksummed records, then zeros.
//!
//! The file starts with [`MAGIC`] (8 bytes, naming the format and its version). Each record
//! follows as `len: u32 LE | crc32(payload): u32 LE | payload (len bytes)`. A `len` of 0
//! marks the end: the file's tail is allocated ahead and reads as zeros (see the journal's
//! docs). Reading stops at the first frame that is cut short, too long, or whose checksum
//! does not match: a write torn by a crash or a power loss, whose record was never
//! acknowledged (the sync that would have covered it did not return).

use std::io;

/// The file's first bytes: the format and its version.
pub const MAGIC: &[u8; 8] = b"YSJRNL01";
/// Bytes before each record's payload.
pub const HEADER_LEN: usize = 8;
/// The largest payload a frame may carry: anything longer is garbage (a torn length). A
/// launch's record holds the job's script, environment and arguments (10 MiB at schedd's
/// default bounds), as JSON, which may escape some bytes at 6 for 1.
pub const MAX_PAYLOAD: usize = 64 * 1024 * 1024;

/// Appends the frame of `payload` to `out`.
pub fn encode(payload: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    if payload.is_empty() || payload.len() > MAX_PAYLOAD {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a journal record must have 1 to {MAX_PAYLOAD} bytes, not {}",
                payload.len()
            ),
        ));
    }
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32(payload).to_le_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

/// What [`decode_all`] found after the header.
#[derive(Debug, PartialEq, Eq)]
pub struct Decoded<'a> {
    /// Every whole record, in order.
    pub payloads: Vec<&'a [u8]>,
    /// Where the records end (an offset in the bytes given, header included): the next one
    /// is written here.
    pub end: usize,
    /// Something other than the zeros of the allocated tail followed the last whole record:
    /// a torn write.
    pub torn: bool,
}

/// Reads the frames of a whole journal file. An error only when the header is not
/// [`MAGIC`] (another format, or not a journal): a torn tail is no error.
pub fn decode_all(bytes: &[u8]) -> io::Result<Decoded<'_>> {
    if bytes.get(..MAGIC.len()) != Some(MAGIC.as_slice()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a ysched journal (or of another version)",
        ));
    }
    let mut payloads = Vec::new();
    let mut at = MAGIC.len();
    loop {
        let Some(header) = bytes.get(at..at + HEADER_LEN) else {
            // Cut inside a header: torn unless it is the zeros of the tail.
            let torn = bytes[at..].iter().any(|&b| b != 0);
            return Ok(Decoded {
                payloads,
                end: at,
                torn,
            });
        };
        let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
        let body = (len > 0 && len <= MAX_PAYLOAD)
            .then(|| bytes.get(at + HEADER_LEN..at + HEADER_LEN + len))
            .flatten();
        match body {
            Some(payload) if crc32(payload) == crc => {
                payloads.push(payload);
                at += HEADER_LEN + len;
            }
            _ => {
                let torn = bytes[at..].iter().any(|&b| b != 0);
                return Ok(Decoded {
                    payloads,
                    end: at,
                    torn,
                });
            }
        }
    }
}

/// CRC-32 (IEEE 802.3, as zlib's), bytewise from a table built at compile time: records are
/// small, and the journal needs no dependency for this.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc = CRC_TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_zlib() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn frames_round_trip_and_a_torn_tail_is_cut() {
        let mut file = MAGIC.to_vec();
        encode(b"one", &mut file).unwrap();
        encode(b"two", &mut file).unwrap();
        let whole = file.len();
        file.extend_from_slice(&[0; 64]);
        let decoded = decode_all(&file).unwrap();
        assert_eq!(decoded.payloads, [b"one".as_slice(), b"two"]);
        assert_eq!((decoded.end, decoded.torn), (whole, false));

        // A third record cut anywhere (header or payload) is dropped, the first two kept.
        let mut third = Vec::new();
        encode(b"three, longer", &mut third).unwrap();
        for cut in 1..third.len() {
            let mut torn = file[..whole].to_vec();
            torn.extend_from_slice(&third[..cut]);
            torn.extend_from_slice(&[0; 16]);
            let decoded = decode_all(&torn).unwrap();
            assert_eq!(decoded.payloads.len(), 2, "cut at {cut}");
            assert_eq!((decoded.end, decoded.torn), (whole, true), "cut at {cut}");
        }
        // A flipped bit in a payload ends the log there.
        let mut flipped = file.clone();
        flipped[MAGIC.len() + HEADER_LEN] ^= 1;
        let decoded = decode_all(&flipped).unwrap();
        assert!(decoded.payloads.is_empty() && decoded.torn);
        assert_eq!(decoded.end, MAGIC.len());

        assert!(decode_all(b"NOTAJRNL").is_err());
        assert!(encode(b"", &mut Vec::new()).is_err());
    }
}
