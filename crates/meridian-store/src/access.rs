//! [`TxnAccess`]: the store seen by one transaction at one timestamp, as a
//! [`KvAccess`], so a protocol can run [`meridian_core::txn::execute_piece`] on it.

use crate::mvstore::{MvStore, StoreError};
use meridian_core::txn::KvAccess;
use meridian_core::{Key, Timestamp, TxnId, Value};

/// Which versions a [`TxnAccess`] read may return.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Visibility {
    /// The latest version `<= ts`, whoever wrote it and whether or not it committed: the
    /// optimistic execution of a Tiga leader, which executes in timestamp order on top of
    /// earlier (possibly not yet agreed) executions.
    #[default]
    All,
    /// The latest version `<= ts` that is committed or written by this transaction:
    /// other transactions' pending versions are skipped.
    CommittedAndOwn,
}

/// Executes reads and writes "at timestamp `ts` as transaction `txn`": reads return the
/// latest visible version `<= ts` (including `txn`'s own earlier writes at `ts`), writes
/// create (or overwrite) pending versions of `txn` at `ts`.
///
/// [`KvAccess::put`] cannot fail, so the first store error is kept and every later put is
/// skipped; [`TxnAccess::finish`] reports it. A protocol must call `finish` and, on an
/// error or on an aborted piece, [`MvStore::revoke`] the transaction: a piece that aborts
/// half-way (a stored procedure's user abort) leaves the pending versions it already wrote.
#[must_use = "call finish() to learn whether every write was applied"]
pub struct TxnAccess<'a> {
    store: &'a mut MvStore,
    txn: TxnId,
    ts: Timestamp,
    visibility: Visibility,
    track_reads: bool,
    writes: usize,
    error: Option<StoreError>,
}

impl<'a> TxnAccess<'a> {
    pub(crate) fn new(store: &'a mut MvStore, txn: TxnId, ts: Timestamp) -> TxnAccess<'a> {
        TxnAccess {
            store,
            txn,
            ts,
            visibility: Visibility::All,
            track_reads: false,
            writes: 0,
            error: None,
        }
    }

    /// Chooses which versions reads return (default [`Visibility::All`]).
    pub fn visibility(mut self, visibility: Visibility) -> Self {
        self.visibility = visibility;
        self
    }

    /// Records every read's timestamp on the version it returned, like
    /// [`MvStore::read_at_tracked`] (default off).
    pub fn track_reads(mut self, on: bool) -> Self {
        self.track_reads = on;
        self
    }

    /// The transaction and timestamp this access executes as.
    pub fn txn(&self) -> (TxnId, Timestamp) {
        (self.txn, self.ts)
    }

    /// Ends the piece: the number of puts applied, or the first store error.
    pub fn finish(self) -> Result<usize, StoreError> {
        match self.error {
            Some(error) => Err(error),
            None => Ok(self.writes),
        }
    }
}

impl KvAccess for TxnAccess<'_> {
    fn get(&mut self, key: &Key) -> Option<Value> {
        self.store
            .access_read(key, self.ts, self.txn, self.visibility, self.track_reads)
    }

    fn put(&mut self, key: Key, value: Value) {
        if self.error.is_some() {
            return;
        }
        match self.store.write(key, self.ts, self.txn, Some(value)) {
            Ok(()) => self.writes += 1,
            Err(error) => self.error = Some(error),
        }
    }
}
