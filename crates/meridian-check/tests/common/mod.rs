//! Hand-written histories, tersely.
#![allow(dead_code)] // each test file uses a different part

use meridian_check::{check, AnomalyKind, CheckReport, Entry, EntryType, HistOp, Model, ReadValue};

pub fn r(key: &str, values: &[i64]) -> HistOp {
    HistOp::Read {
        key: key.into(),
        value: ReadValue::List(values.to_vec()),
    }
}

pub fn r_null(key: &str) -> HistOp {
    HistOp::Read {
        key: key.into(),
        value: ReadValue::Null,
    }
}

pub fn r_int(key: &str, value: i64) -> HistOp {
    HistOp::Read {
        key: key.into(),
        value: ReadValue::Int(value),
    }
}

pub fn app(key: &str, value: i64) -> HistOp {
    HistOp::Append {
        key: key.into(),
        value,
    }
}

pub fn w(key: &str, value: i64) -> HistOp {
    HistOp::Write {
        key: key.into(),
        value,
    }
}

/// A history under construction. Transaction `i` has index `i` and runs on process `i`.
#[derive(Default)]
pub struct Hist(pub Vec<Entry>);

impl Hist {
    pub fn new() -> Hist {
        Hist::default()
    }

    /// A transaction at explicit times.
    pub fn at(
        mut self,
        kind: EntryType,
        invoke_ns: u64,
        complete_ns: u64,
        ops: Vec<HistOp>,
    ) -> Hist {
        let i = self.0.len() as u64;
        self.0.push(Entry {
            index: i,
            process: i,
            kind,
            invoke_ns,
            complete_ns,
            ops,
            after: Vec::new(),
        });
        self
    }

    /// A committed transaction concurrent with every other default-timed one, so that real
    /// time orders nothing.
    pub fn ok(self, ops: Vec<HistOp>) -> Hist {
        self.at(EntryType::Ok, 0, 1_000, ops)
    }

    pub fn fail(self, ops: Vec<HistOp>) -> Hist {
        self.at(EntryType::Fail, 0, 1_000, ops)
    }

    pub fn info(self, ops: Vec<HistOp>) -> Hist {
        self.at(EntryType::Info, 0, 1_000, ops)
    }
}

/// Checks and asserts the exact set of proscribed anomaly kinds, printing the report if not.
pub fn expect(h: &[Entry], model: Model, kinds: &[AnomalyKind]) -> CheckReport {
    let report = check(h, model);
    assert_eq!(report.kinds(), kinds, "{model}:\n{report}");
    assert_eq!(report.valid, kinds.is_empty());
    report
}

/// Asserts the same anomaly kinds under every model.
pub fn expect_all(h: &[Entry], kinds: &[AnomalyKind]) {
    for model in Model::ALL {
        expect(h, model, kinds);
    }
}
