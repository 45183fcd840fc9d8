//! A node's durable log on disk: the runtime's side of `Effect::Persist` and
//! `Effect::Checkpoint`, with the simulator's semantics (a checkpoint replaces every earlier
//! record; a restart hands all surviving records to `Protocol::build`).
//!
//! File `wal` in the node's directory is a sequence of records, each
//! `[u32 LE payload length][u32 LE CRC-32 of payload][postcard payload]`. A crash can tear
//! the last record; recovery keeps every whole record before a torn tail and truncates the
//! file there. A log that is damaged anywhere else, or holds a record this build cannot
//! decode, is refused with an error and left untouched: truncating it would lose every
//! record after the damage. A checkpoint writes a new file holding only the checkpoint
//! record and renames it over `wal` (atomic on POSIX), so a crash leaves either the old log
//! or the new one.
//!
//! Durability: records are written to the OS (`write`) before any message or response that
//! follows them in the same handler leaves the node, so they survive a process crash
//! (SIGKILL). With `fsync` they are also forced to the disk, which survives power loss at a
//! large cost per handler.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

const HEADER_BYTES: usize = 8;
/// A record larger than this is treated as corruption on recovery.
const MAX_RECORD_BYTES: u32 = 256 << 20;

/// A node's durable log.
pub struct Wal<R> {
    dir: PathBuf,
    file: File,
    fsync: bool,
    /// Records encoded (header and payload) since the last [`Wal::sync`]: a group commit
    /// writes them with one `write`, and the buffer is reused, so appending a record
    /// allocates nothing once the buffer has grown.
    pending: Vec<u8>,
    /// Records and bytes written since the log was opened (for metrics).
    pub records_written: u64,
    pub bytes_written: u64,
    /// `write` calls that put buffered records into the file (a group commit is one),
    /// counted here, where they happen, so that a test can tell one per batch from one
    /// per handler.
    pub writes: u64,
    /// `fsync`s of the log after such a write (one per group commit with `fsync`).
    pub fsyncs: u64,
    _record: PhantomData<fn(R)>,
}

impl<R: Serialize + DeserializeOwned> Wal<R> {
    /// Opens (creating if needed) the log in `dir` and returns it with the records that
    /// survived. A torn tail is dropped and reported in the returned count; a log damaged
    /// before its tail, or holding a record this build cannot decode, is an error.
    pub fn open(dir: &Path, fsync: bool) -> io::Result<(Wal<R>, Vec<R>, usize)> {
        fs::create_dir_all(dir)?;
        let path = dir.join("wal");
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let (records, good_len) = parse_records(&bytes)?;
        let dropped = bytes.len() - good_len;
        if dropped > 0 {
            file.set_len(good_len as u64)?;
            file.seek(SeekFrom::End(0))?;
        }
        let wal = Wal {
            dir: dir.to_path_buf(),
            file,
            fsync,
            pending: Vec::new(),
            records_written: 0,
            bytes_written: 0,
            writes: 0,
            fsyncs: 0,
            _record: PhantomData,
        };
        Ok((wal, records, dropped))
    }

    /// Buffers a record; [`Wal::sync`] writes it out.
    pub fn append(&mut self, record: &R) -> io::Result<()> {
        let start = self.pending.len();
        if let Err(e) = encode_record(&mut self.pending, record) {
            self.pending.truncate(start);
            return Err(e);
        }
        self.records_written += 1;
        self.bytes_written += (self.pending.len() - start) as u64;
        Ok(())
    }

    /// Replaces the whole log with `record`.
    pub fn checkpoint(&mut self, record: &R) -> io::Result<()> {
        let mut encoded = Vec::new();
        encode_record(&mut encoded, record)?;
        let tmp = self.dir.join("wal.tmp");
        let mut out = File::create(&tmp)?;
        out.write_all(&encoded)?;
        if self.fsync {
            out.sync_data()?;
        }
        drop(out);
        // Earlier buffered records are subsumed by the checkpoint: drop them unwritten.
        self.pending.clear();
        let path = self.dir.join("wal");
        fs::rename(&tmp, &path)?;
        self.file = OpenOptions::new().append(true).open(&path)?;
        self.records_written += 1;
        self.bytes_written += encoded.len() as u64;
        Ok(())
    }

    /// Whether records are buffered but not yet written.
    pub fn is_dirty(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Whether [`Wal::sync`] forces records to the disk (`fsync`), not only to the OS.
    pub fn forces(&self) -> bool {
        self.fsync
    }

    /// Writes buffered records to the OS (and the disk with `fsync`).
    pub fn sync(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.file.write_all(&self.pending)?;
        self.writes += 1;
        self.pending.clear();
        if self.fsync {
            self.file.sync_data()?;
            self.fsyncs += 1;
        }
        Ok(())
    }
}

/// Appends `record` to `out` as `[length][CRC-32][payload]`.
fn encode_record(out: &mut Vec<u8>, record: &impl Serialize) -> io::Result<()> {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_BYTES]);
    postcard::to_io(record, &mut *out).map_err(io::Error::other)?;
    let payload = &out[start + HEADER_BYTES..];
    let len = u32::try_from(payload.len()).map_err(io::Error::other)?;
    let crc = crc32fast::hash(payload);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// The whole records at the start of `bytes`, and how many bytes they span.
///
/// Only the *tail* may be torn (records are appended): an incomplete record, or a last
/// record whose CRC does not match, is dropped. Anything else is refused rather than
/// truncated, because truncating would throw away every record after it: a bad record
/// with whole records after it is corruption, and a record whose CRC matches but that does
/// not decode was written by a build whose record type differs from this one's.
fn parse_records<R: DeserializeOwned>(bytes: &[u8]) -> io::Result<(Vec<R>, usize)> {
    let mut records = Vec::new();
    let mut at = 0;
    while bytes.len() - at >= HEADER_BYTES {
        let word = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let (len, crc) = (word(at), word(at + 4));
        let end = at + HEADER_BYTES + len as usize;
        if len > MAX_RECORD_BYTES || end > bytes.len() {
            break;
        }
        let payload = &bytes[at + HEADER_BYTES..end];
        if crc32fast::hash(payload) != crc {
            if end == bytes.len() {
                break;
            }
            return Err(corrupt(format!(
                "the record at byte {at} fails its CRC and {} bytes follow it: the log is \
                 corrupt, not torn",
                bytes.len() - end
            )));
        }
        match postcard::take_from_bytes(payload) {
            Ok((record, [])) => records.push(record),
            Ok((_, rest)) => {
                return Err(corrupt(format!(
                    "the record at byte {at} is whole (its CRC matches) but decodes from only \
                     {} of its {} bytes: it was written by a build with a different record \
                     format",
                    payload.len() - rest.len(),
                    payload.len()
                )))
            }
            Err(e) => {
                return Err(corrupt(format!(
                    "the record at byte {at} is whole (its CRC matches) but does not decode \
                     ({e}): it was written by a build with a different record format"
                )))
            }
        }
        at = end;
    }
    Ok((records, at))
}

fn corrupt(why: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{why}; the log is left as it is"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_reopen_and_checkpoints_replace_them() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut wal, old, _) = Wal::<String>::open(dir.path(), false).unwrap();
            assert!(old.is_empty());
            wal.append(&"a".to_string()).unwrap();
            wal.append(&"b".to_string()).unwrap();
            wal.sync().unwrap();
        }
        let (mut wal, old, dropped) = Wal::<String>::open(dir.path(), false).unwrap();
        assert_eq!((old, dropped), (vec!["a".to_string(), "b".to_string()], 0));
        wal.checkpoint(&"cp".to_string()).unwrap();
        wal.append(&"c".to_string()).unwrap();
        wal.sync().unwrap();
        drop(wal);
        let (_, old, _) = Wal::<String>::open(dir.path(), false).unwrap();
        assert_eq!(old, vec!["cp".to_string(), "c".to_string()]);
    }

    #[test]
    fn a_torn_tail_is_dropped_and_truncated() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut wal, _, _) = Wal::<String>::open(dir.path(), false).unwrap();
            wal.append(&"whole".to_string()).unwrap();
            wal.append(&"torn".to_string()).unwrap();
            wal.sync().unwrap();
        }
        let path = dir.path().join("wal");
        let len = fs::metadata(&path).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len - 2)
            .unwrap();
        let (mut wal, old, dropped) = Wal::<String>::open(dir.path(), false).unwrap();
        assert_eq!(old, vec!["whole".to_string()]);
        assert!(dropped > 0);
        wal.append(&"next".to_string()).unwrap();
        wal.sync().unwrap();
        drop(wal);
        let (_, old, dropped) = Wal::<String>::open(dir.path(), false).unwrap();
        assert_eq!((old, dropped), (vec!["whole".into(), "next".into()], 0));
    }

    fn write_records(dir: &Path, records: &[&str]) -> PathBuf {
        let (mut wal, _, _) = Wal::<String>::open(dir, false).unwrap();
        for r in records {
            wal.append(&r.to_string()).unwrap();
        }
        wal.sync().unwrap();
        dir.join("wal")
    }

    #[test]
    fn a_damaged_record_before_the_tail_is_refused_and_the_log_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_records(dir.path(), &["first", "second", "third"]);
        let mut bytes = fs::read(&path).unwrap();
        // Flip a payload byte of the second record: its CRC fails, "third" follows it.
        let second_payload = HEADER_BYTES + 6 + HEADER_BYTES;
        bytes[second_payload + 1] ^= 0x20;
        fs::write(&path, &bytes).unwrap();
        let err = Wal::<String>::open(dir.path(), false).err().unwrap();
        assert!(err.to_string().contains("corrupt, not torn"), "{err}");
        assert_eq!(
            fs::read(&path).unwrap(),
            bytes,
            "the log must be left as it is"
        );
    }

    #[test]
    fn a_whole_record_of_another_format_is_refused_and_the_log_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_records(dir.path(), &["a string", "another"]);
        let before = fs::read(&path).unwrap();
        // Read back as a type whose layout differs: the CRCs match, decoding does not.
        let err = Wal::<(u64, u64, u64)>::open(dir.path(), false)
            .err()
            .unwrap();
        assert!(err.to_string().contains("different record format"), "{err}");
        assert_eq!(
            fs::read(&path).unwrap(),
            before,
            "the log must be left as it is"
        );
    }
}
