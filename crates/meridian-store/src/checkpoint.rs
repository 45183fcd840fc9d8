//! Checkpoints of the committed state (Tiga §4 "Checkpoints to accelerate recovery").

use crate::mvstore::{KeyVersions, MvStore, StoreError, Version};
use meridian_core::{Key, Timestamp};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// The committed state of a store at timestamp `at`: for every key, the latest committed
/// version at or below `at` (tombstones included), sorted by key so that two replicas with
/// the same state produce the same checkpoint, byte for byte.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreCheckpoint {
    pub at: Timestamp,
    pub versions: Vec<(Key, Version)>,
}

impl StoreCheckpoint {
    /// Keys in the checkpoint.
    pub fn len(&self) -> usize {
        self.versions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }
}

impl MvStore {
    /// Checkpoints the committed state at `at` (e.g. the timestamp of the entry at Tiga's
    /// commit-point). Pending versions and versions above `at` are left out: they belong
    /// to the log suffix, which the protocol replays. Refused below the watermark.
    /// Costs O(keys · log keys) (it sorts).
    pub fn checkpoint(&self, at: Timestamp) -> Result<StoreCheckpoint, StoreError> {
        if at < self.watermark {
            return Err(StoreError::BelowWatermark {
                ts: at,
                watermark: self.watermark,
            });
        }
        let mut versions: Vec<(Key, Version)> = self
            .keys
            .iter()
            .filter_map(|(key, kv)| {
                let i = kv.committed_index_le(at)?;
                Some((key.clone(), kv.versions[i].clone()))
            })
            .collect();
        versions.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(StoreCheckpoint { at, versions })
    }

    /// Rebuilds a store from a checkpoint. The restored store answers every read at or
    /// above `checkpoint.at` exactly like the checkpointed store's committed state at `at`;
    /// its watermark is `at`, so older reads are refused. Tracked read timestamps survive
    /// only on the checkpointed versions (reads of absent keys are forgotten).
    ///
    /// Refuses a malformed checkpoint (it may come from another replica): unsorted or
    /// duplicate keys, pending versions, versions above `at`, read timestamps below the
    /// version.
    pub fn restore(checkpoint: &StoreCheckpoint) -> Result<MvStore, StoreError> {
        let bad = |why: String| Err(StoreError::BadCheckpoint(why));
        if checkpoint.versions.windows(2).any(|w| w[0].0 >= w[1].0) {
            return bad("keys are not sorted and distinct".into());
        }
        let mut keys = FxHashMap::default();
        keys.reserve(checkpoint.versions.len());
        for (key, v) in &checkpoint.versions {
            if !v.is_committed() {
                return bad(format!("version of {key:?} at {} is pending", v.ts));
            }
            if v.ts > checkpoint.at {
                return bad(format!(
                    "version of {key:?} at {} is above {}",
                    v.ts, checkpoint.at
                ));
            }
            if v.max_read_ts < v.ts {
                return bad(format!("version of {key:?} has read ts below its ts"));
            }
            let kv = KeyVersions {
                versions: smallvec::smallvec![v.clone()],
                floor_read_ts: Timestamp::ZERO,
            };
            keys.insert(key.clone(), kv);
        }
        Ok(MvStore::from_parts(checkpoint.at, keys))
    }
}
