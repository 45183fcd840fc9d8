//! Group commit, tested where it happens and without depending on the machine's load.
//!
//! A batch is what the loop finds queued when it wakes up, so a test that sends
//! transactions to a running cluster gets batches as large as the machine was busy: on an
//! idle one, a handler each, and "fewer writes than handlers" fails there even with group
//! commit. These tests queue every event *before* the loop runs (or call its handlers
//! directly), so each batch holds exactly the handlers the test gave it, and set the
//! early-sync bounds themselves (the 2 ms hold bound would otherwise split a batch on a
//! machine slow enough to take 2 ms over it). A loop that wrote at each handler's sync
//! (the design before group commit) makes one write per handler and fails every test here.

use super::*;
use crate::storage::Wal;
use meridian_core::node::Ctx;
use meridian_core::txn::{ClientRequest, Txn};
use rand::SeedableRng;
use std::path::Path;
use tokio::sync::oneshot;

/// The node whose messages the loop under test sends.
const PEER: NodeId = NodeId(1);
/// Requests get records from here on, so that records of messages and requests differ.
const REQUEST_RECORDS: u64 = 1_000_000;

/// A node that writes one record per event and then answers it: a message `i` with record
/// `i` and message `i` to [`PEER`], a request with a record and a response.
struct Writer;

impl Node for Writer {
    type Msg = u64;
    type Timer = ();
    type Record = u64;
    fn on_start(&mut self, _ctx: &mut Ctx<'_, Self>) {}
    fn on_message(&mut self, ctx: &mut Ctx<'_, Self>, _from: NodeId, msg: u64) {
        ctx.persist(msg);
        ctx.send(PEER, msg);
    }
    fn on_timer(&mut self, _ctx: &mut Ctx<'_, Self>, _timer: ()) {}
    fn on_client_request(&mut self, ctx: &mut Ctx<'_, Self>, request: RequestId, _: ClientRequest) {
        ctx.persist(REQUEST_RECORDS + request.0);
        ctx.respond(request, ClientResponse::Written);
    }
}

/// No early sync: a batch is synced once, at its end, however long it takes.
const NO_EARLY_SYNC: GroupLimits = GroupLimits {
    held_messages_max: usize::MAX,
    unsynced_bytes_max: u64::MAX,
    hold_max: Duration::MAX,
};

struct Fixture {
    node_loop: NodeLoop<Writer>,
    /// What the loop sent to [`PEER`].
    peer: mpsc::Receiver<Inbound<u64>>,
    metrics: Arc<NodeMetrics>,
    dir: tempfile::TempDir,
}

fn fixture(fsync: bool, limits: GroupLimits) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let (wal, recovered, _) = Wal::open(dir.path(), fsync).unwrap();
    assert!(recovered.is_empty());
    let (to_peer, peer) = mpsc::channel(1024);
    let metrics = Arc::new(NodeMetrics::new("n0", "writer"));
    let node_loop = NodeLoop::new(
        NodeId(0),
        Writer,
        NodeRng::seed_from_u64(1),
        ChaCha8Rng::seed_from_u64(2),
        vec![Route::Own, Route::Direct(to_peer)],
        Some(wal),
        0,
        metrics.clone(),
    )
    .with_group_limits(limits);
    Fixture {
        node_loop,
        peer,
        metrics,
        dir,
    }
}

fn message(i: u64) -> Inbound<u64> {
    Inbound::Message { from: PEER, msg: i }
}

fn request() -> (Inbound<u64>, oneshot::Receiver<ClientResponse>) {
    let (reply, response) = oneshot::channel();
    let request = ClientRequest::OneShot(Txn { pieces: Vec::new() });
    let event = Inbound::Request {
        request,
        reply: Reply::Local(reply),
    };
    (event, response)
}

/// The records in the log file as a fresh process would read them.
fn records_on_disk(dir: &Path) -> Vec<u64> {
    Wal::<u64>::open(dir, false).unwrap().1
}

/// The messages the peer has received so far, in order.
fn received(peer: &mut mpsc::Receiver<Inbound<u64>>) -> Vec<u64> {
    std::iter::from_fn(|| match peer.try_recv() {
        Ok(Inbound::Message { msg, .. }) => Some(msg),
        Ok(Inbound::Request { .. }) => panic!("the loop sent its peer a request"),
        Err(_) => None,
    })
    .collect()
}

fn log_counts(node_loop: &NodeLoop<Writer>) -> (u64, u64) {
    let wal = node_loop.wal.as_ref().unwrap();
    (wal.writes, wal.fsyncs)
}

/// The whole loop (`run`'s body): a batch's worth of messages and requests queued before
/// it wakes up, each handler writing a record before it answers, costs one `write` — and
/// with `fsync` one `fsync` — and every answer still goes out, after the records.
#[tokio::test]
async fn a_batch_of_queued_handlers_shares_one_write_and_one_fsync() {
    for fsync in [false, true] {
        let mut f = fixture(fsync, NO_EARLY_SYNC);
        let (inbox_tx, inbox) = mpsc::channel(INBOX_BATCH_MAX);
        let mut responses = Vec::new();
        let mut records = Vec::new();
        for i in 0..INBOX_BATCH_MAX as u64 {
            if i % 4 == 3 {
                let (event, response) = request();
                inbox_tx.try_send(event).unwrap();
                responses.push(response);
                records.push(REQUEST_RECORDS + responses.len() as u64);
            } else {
                inbox_tx.try_send(message(i)).unwrap();
                records.push(i);
            }
        }
        // The loop ends once it has handled everything queued (no sender is left).
        drop(inbox_tx);
        f.node_loop.serve(inbox, CancellationToken::new()).await;

        let handlers = INBOX_BATCH_MAX as u64;
        assert_eq!(f.metrics.handlers_persisted.get(), handlers);
        assert_eq!(f.metrics.records_persisted.get(), handlers);
        assert_eq!(
            log_counts(&f.node_loop),
            (1, u64::from(fsync)),
            "(writes, fsyncs) for {handlers} handlers in one batch, fsync {fsync}"
        );
        assert_eq!(
            f.metrics.wal_syncs.get(),
            1,
            "the metric counts the log's writes"
        );
        assert_eq!(records_on_disk(f.dir.path()), records);
        let sent: Vec<u64> = records
            .iter()
            .copied()
            .filter(|&r| r < REQUEST_RECORDS)
            .collect();
        assert_eq!(received(&mut f.peer), sent, "every held message, in order");
        for mut response in responses {
            assert_eq!(response.try_recv(), Ok(ClientResponse::Written));
        }
    }
}

/// Within a batch nothing that depends on its records leaves before they are written:
/// handlers run, their messages and responses wait; the batch's end writes every record
/// at once and only then lets them go.
#[tokio::test]
async fn a_batch_holds_its_messages_until_its_one_write() {
    let mut f = fixture(false, NO_EARLY_SYNC);
    let mut responses = Vec::new();
    for i in 0..10 {
        f.node_loop.on_inbound(message(i));
        let (event, response) = request();
        f.node_loop.on_inbound(event);
        responses.push(response);
    }
    assert_eq!(
        log_counts(&f.node_loop),
        (0, 0),
        "nothing written mid-batch"
    );
    assert!(records_on_disk(f.dir.path()).is_empty());
    assert!(
        received(&mut f.peer).is_empty(),
        "a message left before its record"
    );
    for response in &mut responses {
        assert!(
            response.try_recv().is_err(),
            "a response left before its record"
        );
    }

    f.node_loop.end_batch();
    assert_eq!(log_counts(&f.node_loop), (1, 0));
    assert_eq!(records_on_disk(f.dir.path()).len(), 20);
    assert_eq!(received(&mut f.peer), (0..10).collect::<Vec<_>>());
    for mut response in responses {
        assert_eq!(response.try_recv(), Ok(ClientResponse::Written));
    }
}

/// A batch that holds `held_messages_max` messages syncs early and goes on: 10 handlers
/// with a bound of 4 make writes after the 4th and 8th and at the end, 3 in all.
#[tokio::test]
async fn a_batch_syncs_early_at_its_held_message_bound() {
    let limits = GroupLimits {
        held_messages_max: 4,
        ..NO_EARLY_SYNC
    };
    let mut f = fixture(true, limits);
    for i in 0..10 {
        f.node_loop.on_inbound(message(i));
        let synced = (i + 1) / 4;
        assert_eq!(
            log_counts(&f.node_loop),
            (synced, synced),
            "after handler {i}"
        );
        assert_eq!(
            received(&mut f.peer).len() as u64,
            if (i + 1) % 4 == 0 { 4 } else { 0 }
        );
    }
    f.node_loop.end_batch();
    assert_eq!(log_counts(&f.node_loop), (3, 3));
    assert_eq!(received(&mut f.peer), vec![8, 9]);
    assert_eq!(records_on_disk(f.dir.path()), (0..10).collect::<Vec<_>>());
}
