//! Optimistic concurrency control for `occ-raft`: what a server adds to run pieces without
//! locks and validate them at PREPARE.
//!
//! Every committed write of a key bumps the key's version; a transaction notes the version
//! of each key it touches when a piece first touches it (lock-free execution). At PREPARE
//! the server takes every lock the transaction needs (shared for keys it only read,
//! exclusive for keys it wrote) without waiting — a lock held by another prepared
//! transaction means a conflict — and then checks that no noted version has moved. The
//! locks are held until the decision, as in 2PL's second phase, so between the vote and
//! the commit no other transaction can validate against, or overwrite, what this one read
//! and wrote. Validation covers every touched key, blind writes too: a few more aborts,
//! never fewer.

use super::vecmap::VecMap;
use meridian_core::{Key, Value};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// How a server keeps concurrent transactions apart (not an option: the protocol's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Concurrency {
    /// Strict 2PL: locks taken as pieces run (`2pl-2pc`, `2pl-raft`).
    Locking,
    /// OCC: pieces run without locks; PREPARE locks without waiting and validates
    /// (`occ-raft`). One-round (single-shard one-shot) transactions lock without waiting
    /// as they run, so they cannot slip between another's validation and commit.
    Optimistic,
}

/// The version of every key written since the store began (OCC only; empty otherwise).
#[derive(Clone, Debug, Default)]
pub(crate) struct Versions {
    enabled: bool,
    versions: FxHashMap<Key, u64>,
}

impl Versions {
    pub(crate) fn new(concurrency: Concurrency) -> Versions {
        Versions {
            enabled: concurrency == Concurrency::Optimistic,
            versions: FxHashMap::default(),
        }
    }

    /// The committed writes `writes` were installed.
    pub(crate) fn bump<'k>(&mut self, writes: impl IntoIterator<Item = &'k (Key, Value)>) {
        if !self.enabled {
            return;
        }
        for (key, _) in writes {
            *self.versions.entry(key.clone()).or_default() += 1;
        }
    }

    pub(crate) fn get(&self, key: &Key) -> u64 {
        self.versions.get(key).copied().unwrap_or(0)
    }

    /// Notes the current version of each key the first time a transaction touches it.
    pub(crate) fn note<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k Key>,
        seen: &mut VecMap<Key, u64>,
    ) {
        for key in keys {
            seen.get_or_insert_with(key.clone(), || self.get(key));
        }
    }

    /// Whether every version noted is still current.
    pub(crate) fn unchanged(&self, seen: &VecMap<Key, u64>) -> bool {
        seen.iter().all(|(key, version)| self.get(key) == *version)
    }

    /// For a checkpoint, sorted by key.
    pub(crate) fn snapshot(&self) -> Vec<(Key, u64)> {
        let mut all: Vec<(Key, u64)> = self.versions.iter().map(|(k, v)| (k.clone(), *v)).collect();
        all.sort_unstable();
        all
    }

    pub(crate) fn load(&mut self, snapshot: &[(Key, u64)]) {
        self.versions = snapshot.iter().cloned().collect();
    }
}
