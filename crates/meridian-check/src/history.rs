//! The history format of DESIGN §7, one completed transaction per line:
//!
//! ```text
//! {"index": 17, "process": 3, "type": "ok", "invoke_ns": 1200, "complete_ns": 118500,
//!  "ops": [["r", "x", [1, 2]], ["append", "y", 5], ["w", "z", 9], ["r", "q", null]]}
//! ```
//!
//! `type` is `ok` (committed), `fail` (definitely not committed) or `info` (unknown).
//! Reads carry a list (list-append keys), an integer (register keys) or null. Appended and
//! written integers are unique per key. Malformed input is an error naming the line.

use serde::de::{self, SeqAccess, Visitor};
use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::io::{BufRead, Write};

/// Whether a transaction committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryType {
    /// Committed.
    Ok,
    /// Definitely not committed.
    Fail,
    /// Unknown: may or may not have committed.
    Info,
}

/// What a read returned.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReadValue {
    /// Nothing (a missing key, or an unknown read of a failed/indeterminate transaction).
    Null,
    Int(i64),
    List(Vec<i64>),
}

/// One operation of a transaction.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HistOp {
    Read { key: String, value: ReadValue },
    Append { key: String, value: i64 },
    Write { key: String, value: i64 },
}

impl HistOp {
    pub fn key(&self) -> &str {
        match self {
            HistOp::Read { key, .. } | HistOp::Append { key, .. } | HistOp::Write { key, .. } => {
                key
            }
        }
    }
}

/// One completed transaction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub index: u64,
    pub process: u64,
    #[serde(rename = "type")]
    pub kind: EntryType,
    pub invoke_ns: u64,
    pub complete_ns: u64,
    pub ops: Vec<HistOp>,
    /// Declared out-of-band dependencies (DAST §4.5): the `index`es of transactions the
    /// client saw complete before it invoked this one and declares this one to follow.
    /// Omitted when empty; only the `declared-strict-serializable` model reads them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<u64>,
}

/// A whole history, in file order.
pub type History = Vec<Entry>;

/// A malformed history.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("line {line}: {message}")]
    Malformed { line: usize, message: String },
    #[error("reading history: {0}")]
    Io(#[from] std::io::Error),
}

impl Serialize for ReadValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ReadValue::Null => s.serialize_none(),
            ReadValue::Int(v) => s.serialize_i64(*v),
            ReadValue::List(values) => values.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for ReadValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::Null => Ok(ReadValue::Null),
            serde_json::Value::Number(n) => n.as_i64().map(ReadValue::Int).ok_or_else(|| {
                de::Error::custom(format!("read value {n} is not a 64-bit integer"))
            }),
            serde_json::Value::Array(items) => items
                .into_iter()
                .map(|v| {
                    v.as_i64().ok_or_else(|| {
                        de::Error::custom(format!("list element {v} is not a 64-bit integer"))
                    })
                })
                .collect::<Result<Vec<_>, _>>()
                .map(ReadValue::List),
            other => Err(de::Error::custom(format!(
                "read value must be null, an integer or a list of integers, got {other}"
            ))),
        }
    }
}

impl Serialize for HistOp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(3))?;
        match self {
            HistOp::Read { key, value } => {
                seq.serialize_element("r")?;
                seq.serialize_element(key)?;
                seq.serialize_element(value)?;
            }
            HistOp::Append { key, value } => {
                seq.serialize_element("append")?;
                seq.serialize_element(key)?;
                seq.serialize_element(value)?;
            }
            HistOp::Write { key, value } => {
                seq.serialize_element("w")?;
                seq.serialize_element(key)?;
                seq.serialize_element(value)?;
            }
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for HistOp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct OpVisitor;
        impl<'de> Visitor<'de> for OpVisitor {
            type Value = HistOp;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an op [\"r\"|\"append\"|\"w\", key, value]")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<HistOp, A::Error> {
                let missing = |what| de::Error::custom(format!("op is missing its {what}"));
                let kind: String = seq.next_element()?.ok_or_else(|| missing("kind"))?;
                let key: String = seq.next_element()?.ok_or_else(|| missing("key"))?;
                let op = match kind.as_str() {
                    "r" => HistOp::Read {
                        key,
                        value: seq.next_element()?.ok_or_else(|| missing("value"))?,
                    },
                    "append" => HistOp::Append {
                        key,
                        value: seq.next_element()?.ok_or_else(|| missing("value"))?,
                    },
                    "w" => HistOp::Write {
                        key,
                        value: seq.next_element()?.ok_or_else(|| missing("value"))?,
                    },
                    other => {
                        return Err(de::Error::custom(format!(
                            "unknown op kind `{other}` (expected r, append or w)"
                        )))
                    }
                };
                if seq.next_element::<de::IgnoredAny>()?.is_some() {
                    return Err(de::Error::custom("op has more than three elements"));
                }
                Ok(op)
            }
        }
        d.deserialize_seq(OpVisitor)
    }
}

/// Reads a JSON Lines history. Blank lines are skipped; any other malformed line is an
/// error naming it (1-based).
pub fn read_jsonl(reader: impl BufRead) -> Result<History, HistoryError> {
    let mut history = Vec::new();
    for (number, line) in reader.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let entry: Entry = serde_json::from_str(&line).map_err(|e| HistoryError::Malformed {
            line: number + 1,
            message: e.to_string(),
        })?;
        if entry.complete_ns < entry.invoke_ns {
            return Err(HistoryError::Malformed {
                line: number + 1,
                message: format!(
                    "complete_ns {} is before invoke_ns {}",
                    entry.complete_ns, entry.invoke_ns
                ),
            });
        }
        history.push(entry);
    }
    Ok(history)
}

/// Writes one entry as a line.
pub fn write_entry(mut writer: impl Write, entry: &Entry) -> std::io::Result<()> {
    serde_json::to_writer(&mut writer, entry)?;
    writer.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"index": 17, "process": 3, "type": "ok", "invoke_ns": 1200, "complete_ns": 118500, "ops": [["r", "x", [1, 2]], ["append", "y", 5], ["w", "z", 9], ["r", "q", null], ["r", "z", 9]]}"#;

    #[test]
    fn the_design_example_round_trips() {
        let history = read_jsonl(LINE.as_bytes()).unwrap();
        assert_eq!(history.len(), 1);
        let e = &history[0];
        assert_eq!(
            (e.index, e.process, e.kind, e.invoke_ns, e.complete_ns),
            (17, 3, EntryType::Ok, 1200, 118500)
        );
        assert_eq!(
            e.ops[0],
            HistOp::Read {
                key: "x".into(),
                value: ReadValue::List(vec![1, 2])
            }
        );
        assert_eq!(
            e.ops[1],
            HistOp::Append {
                key: "y".into(),
                value: 5
            }
        );
        assert_eq!(
            e.ops[2],
            HistOp::Write {
                key: "z".into(),
                value: 9
            }
        );
        assert_eq!(
            e.ops[3],
            HistOp::Read {
                key: "q".into(),
                value: ReadValue::Null
            }
        );
        assert_eq!(
            e.ops[4],
            HistOp::Read {
                key: "z".into(),
                value: ReadValue::Int(9)
            }
        );
        let mut out = Vec::new();
        write_entry(&mut out, e).unwrap();
        assert_eq!(read_jsonl(out.as_slice()).unwrap(), history);
    }

    #[test]
    fn malformed_lines_are_named() {
        let bad = [
            "{\"index\": 1}",
            "not json",
            &LINE.replace("\"ok\"", "\"maybe\""),
            &LINE.replace("\"append\"", "\"delete\""),
            &LINE.replace("[1, 2]", "[1, \"two\"]"),
            &LINE.replace("118500", "5"),
            &LINE.replace("[\"r\", \"q\", null]", "[\"r\"]"),
        ];
        for text in bad {
            let input = format!("{LINE}\n\n{text}\n");
            match read_jsonl(input.as_bytes()) {
                Err(HistoryError::Malformed { line, .. }) => assert_eq!(line, 3, "{text}"),
                other => panic!("{text}: expected a malformed-line error, got {other:?}"),
            }
        }
    }
}
