//! Reading a workload's `key=value` options: every value is parsed and range-checked, every
//! option not read is refused by name, and every error names the workload and the option.

use crate::WorkloadOptions;
use std::collections::BTreeSet;
use std::ops::RangeInclusive;

pub(crate) struct Options<'a> {
    workload: &'static str,
    given: &'a WorkloadOptions,
    known: Vec<&'static str>,
}

impl<'a> Options<'a> {
    pub(crate) fn new(workload: &'static str, given: &'a WorkloadOptions) -> Options<'a> {
        Options {
            workload,
            given,
            known: Vec::new(),
        }
    }

    fn raw(&mut self, name: &'static str) -> Option<&'a str> {
        self.known.push(name);
        self.given.options.get(name).map(String::as_str)
    }

    fn error(&self, name: &str, value: &str, expected: &str) -> String {
        format!(
            "workload `{}`: option `{name}={value}`: expected {expected}",
            self.workload
        )
    }

    /// An integer option in `range` (underscores allowed: `1_000_000`).
    pub(crate) fn int(
        &mut self,
        name: &'static str,
        default: u64,
        range: RangeInclusive<u64>,
    ) -> Result<u64, String> {
        let Some(value) = self.raw(name) else {
            return Ok(default);
        };
        let expected = format!("an integer in {}..={}", range.start(), range.end());
        match value.replace('_', "").parse::<u64>() {
            Ok(v) if range.contains(&v) => Ok(v),
            _ => Err(self.error(name, value, &expected)),
        }
    }

    /// A real option accepted by `valid` (which `expected` describes).
    pub(crate) fn real(
        &mut self,
        name: &'static str,
        default: f64,
        valid: impl Fn(f64) -> bool,
        expected: &str,
    ) -> Result<f64, String> {
        let Some(value) = self.raw(name) else {
            return Ok(default);
        };
        match value.parse::<f64>() {
            Ok(v) if v.is_finite() && valid(v) => Ok(v),
            _ => Err(self.error(name, value, expected)),
        }
    }

    /// A probability in `[0, 1]`.
    pub(crate) fn probability(&mut self, name: &'static str, default: f64) -> Result<f64, String> {
        self.real(
            name,
            default,
            |p| (0.0..=1.0).contains(&p),
            "a probability in [0, 1]",
        )
    }

    /// `true` or `false`.
    pub(crate) fn flag(&mut self, name: &'static str, default: bool) -> Result<bool, String> {
        let Some(value) = self.raw(name) else {
            return Ok(default);
        };
        match value {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(self.error(name, value, "`true` or `false`")),
        }
    }

    /// A word (the caller checks it against its choices).
    pub(crate) fn word(&mut self, name: &'static str, default: &str) -> Result<String, String> {
        Ok(self.raw(name).unwrap_or(default).to_string())
    }

    /// Refuses every option that was not read.
    pub(crate) fn finish(self) -> Result<(), String> {
        let known: BTreeSet<&str> = self.known.iter().copied().collect();
        let unknown: Vec<&str> = self
            .given
            .options
            .keys()
            .map(String::as_str)
            .filter(|k| !known.contains(k))
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        let plural = if unknown.len() == 1 { "" } else { "s" };
        Err(format!(
            "workload `{}`: unknown option{plural} {} (known: {})",
            self.workload,
            unknown
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", "),
            self.known.join(", ")
        ))
    }
}
