//! `tpcc`: TPC-C (specification revision 5.11) on the one-shot and interactive transaction
//! model, as Tiga §5.1 runs it ("all 5 types of transactions according to the
//! specification; Payment and Order-Status multi-shot"), with the consistency conditions
//! 1–4 of §3.3.2 checked on the final state after every run ([`Workload::check_final`]).
//!
//! # Placement
//!
//! Warehouse `w` (1-based) lives on shard `(w - 1) mod shards`, so shards (and through their
//! leaders, regions) own whole warehouses, as in Janus/Tiga/K2. Client `i`'s home warehouse
//! is `i mod warehouses + 1` (a terminal is bound to one warehouse, §5.4.1).
//!
//! # Storage layout, and why
//!
//! Every protocol must know a piece's keys before it runs (Tiga's conflict detection, 2PL's
//! locks, Clock-SI's snapshot reads), so no key may depend on a value read in the same
//! transaction. TPC-C's ORDER, NEW-ORDER and ORDER-LINE rows are keyed by `O_ID`, which
//! NewOrder reads from `D_NEXT_O_ID`; Delivery finds its order (and customer) by reading
//! NEW-ORDER. The layout keeps every key static:
//!
//! | key | holds | written by |
//! |---|---|---|
//! | `tc.w{w}.ytd` | `W_YTD` − its initial 300 000.00 (cents) | Payment |
//! | `tc.d{w}.{d}.ytd` | `D_YTD` − 30 000.00 | Payment |
//! | `tc.d{w}.{d}.next` | `D_NEXT_O_ID` (missing = 1) | NewOrder |
//! | `tc.no{w}.{d}` | the district's NEW-ORDER rows: `[o_id, c_id, total]…` | NewOrder, Delivery |
//! | `tc.o{w}.{d}.{c}` | the customer's ORDER rows, each with its ORDER-LINE rows | NewOrder |
//! | `tc.dl{w}.{d}` | `O_CARRIER_ID`/`OL_DELIVERY_D` of delivered orders: `[o_id, carrier, date]…` | Delivery |
//! | `tc.cd{w}.{d}` | the delivery columns of CUSTOMER (`C_BALANCE` credit, `C_DELIVERY_CNT`): `[c_id, credit, count]…` | Delivery |
//! | `tc.c{w}.{d}.{c}.bal` / `.ytd` / `.cnt` | the payment columns of CUSTOMER | Payment |
//! | `tc.h{w}.{d}.{client}.{n}` | one HISTORY row | Payment |
//! | `tc.ro{w}.{d}` | the home-supplied lines of the last 20 orders: `[o_id, i_id, s_quantity]…` | NewOrder |
//! | `tc.s{w}.{i}` | STOCK `[quantity, ytd, order_cnt, remote_cnt]` (missing = initial) | NewOrder |
//!
//! An ORDER row is `[o_id, entry_d, ol_cnt, all_local, rows, (i_id, supply_w, qty,
//! amount, dist_info) × rows]`; `rows` counts the ORDER-LINE rows actually stored, so
//! condition 4 compares two things the protocol wrote. Splitting CUSTOMER into a payment
//! part (per customer) and a delivery part (per district) is a column split: `C_BALANCE` is
//! `-10.00 + bal + credit`. Immutable columns (`W_TAX`, `D_TAX`, `C_DISCOUNT`, `I_PRICE`,
//! `C_LAST`, `C_FIRST`, initial `S_QUANTITY`) are derived from the ids, so they cost no reads
//! and create no conflicts, which is what a read of an immutable row does anyway.
//!
//! # Row granularity
//!
//! The layout above gives columns that different profiles update keys of their own, so a
//! protocol that locks or tracks keys sees *column* conflicts: NewOrder (which reads
//! `W_TAX`, `D_TAX`, `C_DISCOUNT` and increments `D_NEXT_O_ID`) never meets Payment
//! (which updates `W_YTD`, `D_YTD` and the customer's balance), though a row store's
//! locks (K2 §7.3's p2PL-TTC, "a fine-grained lock table" of rows) make every NewOrder and
//! Payment of a warehouse conflict on its WAREHOUSE row and those of a district on its
//! DISTRICT row. With `granularity=row`, NewOrder's home piece also touches the key that
//! stands for each such row: it reads the warehouse's (`W_YTD`'s key) and the customer's
//! (the payment columns' key `.bal`) and writes the district's (`D_YTD`'s key, its value
//! unchanged, as a row store writes a row whole). Only NewOrder changes: Payment already
//! writes all three rows, Delivery's customer update keeps its per-district key (the
//! customer is found by reading NEW-ORDER, so no customer key is static), and Stock-Level
//! reads `D_NEXT_O_ID` as before.
//!
//! # Deviations from the specification (each forced by static keys, or chosen for runs)
//!
//! * **Initial population**: districts start with no orders (`D_NEXT_O_ID` = 1) instead of
//!   3000 orders with 900 undelivered; YTD columns start at the specified values, so the
//!   conditions hold on the initial state too. Delivery skips a district with no
//!   undelivered order, as §2.7.4.2 allows.
//! * **Customer selection by last name** (60% of Payment and Order-Status) uses the
//!   immutable name index on the client: the customers of that `C_LAST`, sorted by
//!   `C_FIRST`, the one at position ⌈n/2⌉ (§2.5.2.2).
//! * **Delivery** takes `OL_AMOUNT`'s sum from the NEW-ORDER row, where NewOrder stored it.
//! * **Stock-Level** reads `S_QUANTITY` as the last NewOrder of the district recorded it,
//!   not the current stock row (whose key depends on the order lines read); the
//!   specification allows Stock-Level a relaxed isolation (§3.4, Table 3-1).
//! * **Think and keying times** are the driver's business (open or closed loop).
//!
//! # Interactive Payment and Order-Status
//!
//! With `interactive=true`, Payment reads the customer's payment row (its first shot: the
//! lookup that decides which customer's rows it writes) and then sends its `W_YTD`,
//! `D_YTD` and customer updates as read-modify-writes ([`InteractiveOp::Add`], sent as
//! `Step::Modify`), which a protocol may run inside its commit (Tiga's Appendix F: the
//! counters every Payment of a warehouse increments are never read by the client, so never
//! validated). Order-Status is one multi-key read step ([`InteractiveOp::GetMany`]) of
//! its four keys: the customer's payment row, the district's delivery columns, the
//! customer's orders (each with its order lines) and the district's deliveries. In the
//! specification its later reads depend on the first (the customer found by last name, then
//! its last order, then that order's lines); here the name index is immutable and client-side
//! and the lines live in the order's row, so no value read decides a key, and Appendix F's
//! decomposition leaves one one-shot read with nothing to validate. A protocol that ignores
//! the step's hint reads the four keys one step at a time.
//!
//! # Options
//!
//! `warehouses` (default: one per shard), `customers` per district (3000), `items`
//! (100 000), `remote_item` (0.01: probability that an order line is supplied by another
//! warehouse), `remote_payment` (0.15: probability that a Payment's customer is of another
//! warehouse), `interactive` (false: Payment and Order-Status as interactive transactions,
//! Tiga §5.1), `mix` (`standard` 45/43/4/4/4; `new-order`; `new-order-payment` (Aurogon's
//! TPC-C/NP, 50/50); `payment` (DAST's Payment-only)), `home_region` (false: client `i`'s
//! home is warehouse `i mod warehouses + 1`; true, DAST §6: a warehouse whose shard is led
//! from the client's region, and every transaction also labelled `irt` or `crt`), `audit`
//! (true; false: no final-state audit, so conditions 1–4 are not checked — for scale runs,
//! where reading 1000 warehouses back one shard at a time through one coordinator costs
//! more simulated time than the run: DAST Fig. 8 at 100 regions), `granularity` (`column`,
//! the default; `row`: conflicts at row granularity, see "Row granularity").

use crate::audit::FinalState;
use crate::options::Options;
use crate::{ClientInfo, Locality, Planned};
use crate::{InteractiveOp, TxnPlan, Workload, WorkloadOptions};
use meridian_check::{Entry, HistOp};
use meridian_core::txn::{
    AbortReason, Key, KvAccess, Op, Operand, Outcome, Piece, PieceBody, ProcedureCall, Procedures,
    Txn, Value,
};
use meridian_core::value::{decode_int, encode_int, encode_list};
use meridian_core::{ClientId, Cluster, NodeRng, Partitioner, ShardId};
use rand::Rng;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Districts per warehouse (§1.2.1).
pub const DISTRICTS: u64 = 10;
/// Initial `W_YTD` and `D_YTD`, cents (§4.3.3.1).
pub const W_YTD_INITIAL: i64 = 30_000_000;
pub const D_YTD_INITIAL: i64 = 3_000_000;
/// Initial `C_BALANCE`, cents.
pub const C_BALANCE_INITIAL: i64 = -1_000;
/// Orders Stock-Level looks back over (§2.8.2.2).
const STOCK_LEVEL_ORDERS: i64 = 20;

/// The five transaction profiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Profile {
    NewOrder,
    Payment,
    OrderStatus,
    Delivery,
    StockLevel,
}

impl Profile {
    /// The profile's class label in reports.
    pub fn name(self) -> &'static str {
        match self {
            Profile::NewOrder => "new-order",
            Profile::Payment => "payment",
            Profile::OrderStatus => "order-status",
            Profile::Delivery => "delivery",
            Profile::StockLevel => "stock-level",
        }
    }
}

/// The TPC-C workload.
#[derive(Clone, Debug)]
pub struct TpcC {
    partitioner: Partitioner,
    shards: u32,
    warehouses: u64,
    customers: u64,
    items: u64,
    remote_item: f64,
    remote_payment: f64,
    interactive: bool,
    /// Cumulative weights (percent) of the mix, in [`Profile`] order.
    mix: [(Profile, u32); 5],
    /// Customer ids by last-name number, sorted by first name (the immutable name index).
    by_last_name: Vec<Vec<u64>>,
    /// Per client: transactions planned (HISTORY row ids and entry dates).
    planned: FxHashMap<u32, u64>,
    /// Customers some NewOrder was planned for: the audit reads their ORDER rows.
    ordering: FxHashSet<(u64, u64, u64)>,
    /// Plans by profile (for reports and tests).
    pub counts: BTreeMap<Profile, u64>,
    /// `home_region=true`: each region's warehouses, and the IRT/CRT labels (DAST §6).
    regional: Option<Regional>,
    /// Whether a run ends with reading the state back and checking the conditions.
    audit: bool,
    /// `granularity=row`: NewOrder also touches the keys that stand for the rows it
    /// reads and writes whole (see "Row granularity").
    rows: bool,
}

/// DAST §6's placement: "we assigned each client to the region containing the client's
/// warehouse". A client's home warehouse is one whose shard is led from the client's
/// region (dealt by client id), and every transaction is labelled `irt` or `crt` too.
#[derive(Clone, Debug)]
struct Regional {
    warehouses_by_region: Vec<Vec<u64>>,
    locality: Locality,
}

/// A small deterministic hash of ids, for the immutable columns.
fn mix_ids(a: u64, b: u64, salt: u64) -> u64 {
    let mut z = a
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(b.wrapping_mul(0xBF58_476D_1CE4_E5B9))
        .wrapping_add(salt);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `I_PRICE` in cents: 1.00 to 100.00 (§4.3.3.1).
pub fn item_price(i_id: i64) -> i64 {
    100 + (mix_ids(i_id as u64, 0, 1) % 9_901) as i64
}

/// Initial `S_QUANTITY`: 10 to 100.
pub fn initial_stock(w: i64, i_id: i64) -> i64 {
    10 + (mix_ids(w as u64, i_id as u64, 2) % 91) as i64
}

/// `W_TAX`/`D_TAX` in basis points (0 to 2000 = 0.0000 to 0.2000) and `C_DISCOUNT` (0 to 5000).
fn tax_bp(w: i64, d: i64) -> i64 {
    (mix_ids(w as u64, d as u64, 3) % 2_001) as i64
}
fn discount_bp(w: i64, d: i64, c: i64) -> i64 {
    (mix_ids(((w as u64) << 32) | d as u64, c as u64, 4) % 5_001) as i64
}

fn nurand(rng: &mut NodeRng, a: u64, x: u64, y: u64, c: u64) -> u64 {
    (((rng.gen_range(0..=a) | rng.gen_range(x..=y)) + c) % (y - x + 1)) + x
}

impl TpcC {
    pub const NAME: &'static str = "tpcc";

    /// Builds the workload; see the module docs for the options.
    pub fn new(cluster: &Cluster, options: &WorkloadOptions) -> Result<TpcC, String> {
        let shards = cluster.shard_count();
        let mut o = Options::new(Self::NAME, options);
        let warehouses = o.int("warehouses", u64::from(shards), 1..=100_000)?;
        let customers = o.int("customers", 3000, 1..=3000)?;
        let items = o.int("items", 100_000, 1..=100_000)?;
        let remote_item = o.probability("remote_item", 0.01)?;
        let remote_payment = o.probability("remote_payment", 0.15)?;
        let interactive = o.flag("interactive", false)?;
        let mix_name = o.word("mix", "standard")?;
        let home_region = o.flag("home_region", false)?;
        let audit = o.flag("audit", true)?;
        let rows = match o.word("granularity", "column")?.as_str() {
            "column" => false,
            "row" => true,
            other => {
                return Err(format!(
                    "workload `tpcc`: option `granularity={other}`: expected column or row"
                ))
            }
        };
        o.finish()?;
        let weights: [u32; 5] = match mix_name.as_str() {
            "standard" => [45, 43, 4, 4, 4],
            "new-order" => [100, 0, 0, 0, 0],
            "new-order-payment" => [50, 50, 0, 0, 0],
            "payment" => [0, 100, 0, 0, 0],
            other => {
                return Err(format!(
                    "workload `tpcc`: option `mix={other}`: expected standard, new-order, new-order-payment or payment"
                ))
            }
        };
        let profiles = [
            Profile::NewOrder,
            Profile::Payment,
            Profile::OrderStatus,
            Profile::Delivery,
            Profile::StockLevel,
        ];
        let mut mix = [(Profile::NewOrder, 0); 5];
        let mut total = 0;
        for (i, (p, w)) in profiles.iter().zip(weights).enumerate() {
            total += w;
            mix[i] = (*p, total);
        }
        let names = customers.min(1000);
        let mut by_last_name = vec![Vec::new(); names as usize];
        for c in 1..=customers {
            by_last_name[Self::last_name(c, names) as usize].push(c);
        }
        for list in &mut by_last_name {
            list.sort_by_key(|&c| (mix_ids(c, 0, 5), c));
        }
        Ok(TpcC {
            partitioner: cluster.partitioner,
            shards,
            warehouses,
            customers,
            items,
            remote_item,
            remote_payment,
            interactive,
            mix,
            by_last_name,
            planned: FxHashMap::default(),
            ordering: FxHashSet::default(),
            counts: BTreeMap::new(),
            regional: home_region.then(|| Regional::new(cluster, warehouses, shards)),
            audit,
            rows,
        })
    }

    /// `C_LAST`'s number (0..names) of customer `c` (§4.3.2.3: the first 1000 customers take
    /// the numbers in order, the rest a deterministic spread).
    fn last_name(c: u64, names: u64) -> u64 {
        if c <= names {
            c - 1
        } else {
            mix_ids(c, 0, 6) % names
        }
    }

    /// The shard of warehouse `w`.
    pub fn shard(&self, w: u64) -> ShardId {
        ShardId(((w - 1) % u64::from(self.shards)) as u32)
    }

    fn key(&self, w: u64, name: &str) -> Key {
        self.partitioner.key_on_shard(self.shard(w), name)
    }

    fn w_ytd(&self, w: u64) -> Key {
        self.key(w, &format!("tc.w{w}.ytd"))
    }
    fn d_ytd(&self, w: u64, d: u64) -> Key {
        self.key(w, &format!("tc.d{w}.{d}.ytd"))
    }
    fn d_next(&self, w: u64, d: u64) -> Key {
        self.key(w, &format!("tc.d{w}.{d}.next"))
    }
    fn new_orders(&self, w: u64, d: u64) -> Key {
        self.key(w, &format!("tc.no{w}.{d}"))
    }
    fn orders(&self, w: u64, d: u64, c: u64) -> Key {
        self.key(w, &format!("tc.o{w}.{d}.{c}"))
    }
    fn deliveries(&self, w: u64, d: u64) -> Key {
        self.key(w, &format!("tc.dl{w}.{d}"))
    }
    fn credits(&self, w: u64, d: u64) -> Key {
        self.key(w, &format!("tc.cd{w}.{d}"))
    }
    fn customer(&self, w: u64, d: u64, c: u64, column: &str) -> Key {
        self.key(w, &format!("tc.c{w}.{d}.{c}.{column}"))
    }
    fn recent(&self, w: u64, d: u64) -> Key {
        self.key(w, &format!("tc.ro{w}.{d}"))
    }
    fn stock(&self, w: u64, i: u64) -> Key {
        self.key(w, &format!("tc.s{w}.{i}"))
    }

    fn home(&self, client: ClientId) -> u64 {
        u64::from(client.0) % self.warehouses + 1
    }

    fn other_warehouse(&self, w: u64, rng: &mut NodeRng) -> u64 {
        if self.warehouses == 1 {
            return w;
        }
        let other = rng.gen_range(1..self.warehouses);
        if other >= w {
            other + 1
        } else {
            other
        }
    }

    /// A customer of a district: 60% by last name, else by NURand id (§2.5.1.2, §2.6.1.2).
    fn pick_customer(&self, rng: &mut NodeRng) -> u64 {
        if rng.gen_bool(0.6) {
            let names = self.by_last_name.len() as u64;
            let name = nurand(rng, 255, 0, 999, 157) % names;
            let list = &self.by_last_name[name as usize];
            if !list.is_empty() {
                return list[list.len().div_ceil(2) - 1];
            }
        }
        nurand(rng, 1023, 1, 3000, 259) % self.customers + 1
    }

    fn profile(&self, rng: &mut NodeRng) -> Profile {
        let roll = rng.gen_range(0..100);
        self.mix
            .iter()
            .find(|(_, cumulative)| roll < *cumulative)
            .map(|(p, _)| *p)
            .expect("mix weights sum to 100")
    }

    fn new_order(&mut self, w: u64, entry_d: u64, rng: &mut NodeRng) -> Txn {
        let d = rng.gen_range(1..=DISTRICTS);
        let c = nurand(rng, 1023, 1, 3000, 259) % self.customers + 1;
        let ol_cnt = rng.gen_range(5..=15u64);
        let rollback = rng.gen_bool(0.01);
        let mut lines = Vec::new();
        for n in 1..=ol_cnt {
            let i_id = if rollback && n == ol_cnt {
                self.items + 1 // an unused item: the order rolls back (§2.4.1.4)
            } else {
                nurand(rng, 8191, 1, 100_000, 7911) % self.items + 1
            };
            let supply_w = if rng.gen_bool(self.remote_item) {
                self.other_warehouse(w, rng)
            } else {
                w
            };
            lines.push((i_id, supply_w, rng.gen_range(1..=10u64)));
        }
        self.ordering.insert((w, d, c));
        let all_local = lines.iter().all(|l| l.1 == w);
        let home_shard = self.shard(w);
        // Stock updates grouped by shard; the home shard's go into the home piece.
        let mut stock_by_shard: BTreeMap<ShardId, Vec<Operand>> = BTreeMap::new();
        let mut stock_keys: BTreeMap<ShardId, Vec<Key>> = BTreeMap::new();
        for &(i_id, supply_w, qty) in &lines {
            if i_id > self.items {
                continue;
            }
            let shard = self.shard(supply_w);
            let key = self.stock(supply_w, i_id);
            stock_keys.entry(shard).or_default().push(key.clone());
            stock_by_shard.entry(shard).or_default().extend([
                Operand::Literal(key),
                int(supply_w),
                int(i_id),
                int(qty),
                int(u64::from(supply_w != w)),
            ]);
        }
        let mut args = vec![
            Operand::Literal(self.d_next(w, d)),
            Operand::Literal(self.new_orders(w, d)),
            Operand::Literal(self.orders(w, d, c)),
            Operand::Literal(self.recent(w, d)),
            int(w),
            int(d),
            int(c),
            int(entry_d),
            int(u64::from(all_local)),
            int(self.items),
            int(ol_cnt),
        ];
        for &(i_id, supply_w, qty) in &lines {
            args.extend([int(i_id), int(supply_w), int(qty)]);
        }
        args.extend(stock_by_shard.remove(&home_shard).unwrap_or_default());
        let mut keys = vec![
            self.d_next(w, d),
            self.new_orders(w, d),
            self.orders(w, d, c),
            self.recent(w, d),
        ];
        keys.extend(stock_keys.remove(&home_shard).unwrap_or_default());
        let home = if self.rows {
            self.new_order_rows(w, d, c, args, keys)
        } else {
            procedure(home_shard, "tpcc.new_order", args, keys)
        };
        let mut pieces = vec![home];
        // Every supply shard's piece checks the order's item numbers too, so the rollback
        // of §2.4.2.3 is decided alike on every shard from the transaction's inputs alone:
        // protocols that execute each shard's pieces independently after ordering them
        // (Janus) roll back atomically with no extra round, and the others abort as before.
        let items_check: Vec<Operand> = [int(self.items), int(ol_cnt)]
            .into_iter()
            .chain(lines.iter().map(|&(i_id, _, _)| int(i_id)))
            .collect();
        for (shard, stock_args) in stock_by_shard {
            let keys = stock_keys.remove(&shard).unwrap_or_default();
            let args = items_check.iter().cloned().chain(stock_args).collect();
            pieces.push(procedure(shard, "tpcc.stock", args, keys));
        }
        Txn { pieces }
    }

    /// NewOrder's home piece at row granularity: it also reads the WAREHOUSE row (`W_TAX`;
    /// its key is `W_YTD`'s) and the CUSTOMER row (`C_DISCOUNT`; the payment columns' key)
    /// and writes the DISTRICT row whole (`D_YTD`'s key, value unchanged, beside
    /// `D_NEXT_O_ID`), so it conflicts with Payment wherever row locks would.
    fn new_order_rows(&self, w: u64, d: u64, c: u64, args: Vec<Operand>, keys: Vec<Key>) -> Piece {
        let (warehouse, district, customer) = (
            self.w_ytd(w),
            self.d_ytd(w, d),
            self.customer(w, d, c, "bal"),
        );
        let mut read_keys = keys.clone();
        read_keys.extend([warehouse.clone(), district.clone(), customer.clone()]);
        let mut write_keys = keys;
        write_keys.push(district.clone());
        let args = [warehouse, district, customer]
            .into_iter()
            .map(Operand::Literal)
            .chain(args)
            .collect();
        Piece {
            shard: self.shard(w),
            body: PieceBody::Procedure(ProcedureCall {
                name: Arc::from("tpcc.new_order_rows"),
                args,
                read_keys,
                write_keys,
            }),
        }
    }

    /// Payment's ops in plan order: `(shard, op)` pairs.
    fn payment_ops(
        &self,
        client: ClientId,
        w: u64,
        n: u64,
        rng: &mut NodeRng,
    ) -> Vec<InteractiveOp> {
        let d = rng.gen_range(1..=DISTRICTS);
        let (c_w, c_d) = if rng.gen_bool(self.remote_payment) {
            (self.other_warehouse(w, rng), rng.gen_range(1..=DISTRICTS))
        } else {
            (w, d)
        };
        let c = self.pick_customer(rng);
        let amount = rng.gen_range(100..=500_000i64);
        let history = self.key(w, &format!("tc.h{w}.{d}.{}.{n}", client.0));
        let row = encode_list(&[c as i64, c_d as i64, c_w as i64, d as i64, amount, n as i64]);
        vec![
            InteractiveOp::Get(self.customer(c_w, c_d, c, "bal")),
            InteractiveOp::Add(self.w_ytd(w), amount),
            InteractiveOp::Add(self.d_ytd(w, d), amount),
            InteractiveOp::Add(self.customer(c_w, c_d, c, "bal"), -amount),
            InteractiveOp::Add(self.customer(c_w, c_d, c, "ytd"), amount),
            InteractiveOp::Add(self.customer(c_w, c_d, c, "cnt"), 1),
            InteractiveOp::Put(history, row),
        ]
    }

    fn order_status_ops(&self, w: u64, rng: &mut NodeRng) -> Vec<InteractiveOp> {
        let d = rng.gen_range(1..=DISTRICTS);
        let c = self.pick_customer(rng);
        // One multi-key read: no key depends on a value read (see "Interactive Payment and
        // Order-Status").
        vec![InteractiveOp::GetMany(vec![
            self.customer(w, d, c, "bal"),
            self.credits(w, d),
            self.orders(w, d, c),
            self.deliveries(w, d),
        ])]
    }

    fn delivery(&self, w: u64, date: u64, rng: &mut NodeRng) -> Txn {
        let carrier = rng.gen_range(1..=10u64);
        let mut args = vec![int(carrier), int(date)];
        let mut keys = Vec::new();
        for d in 1..=DISTRICTS {
            let district = [
                self.new_orders(w, d),
                self.deliveries(w, d),
                self.credits(w, d),
            ];
            args.extend(district.iter().cloned().map(Operand::Literal));
            keys.extend(district);
        }
        Txn {
            pieces: vec![procedure(self.shard(w), "tpcc.delivery", args, keys)],
        }
    }

    fn stock_level(&self, w: u64, rng: &mut NodeRng) -> Txn {
        let d = rng.gen_range(1..=DISTRICTS);
        let threshold = rng.gen_range(10..=20u64);
        let keys = vec![self.d_next(w, d), self.recent(w, d)];
        let args = vec![
            Operand::Literal(keys[0].clone()),
            Operand::Literal(keys[1].clone()),
            int(threshold),
        ];
        let mut piece = procedure(self.shard(w), "tpcc.stock_level", args, keys);
        if let PieceBody::Procedure(call) = &mut piece.body {
            call.write_keys.clear();
        }
        Txn {
            pieces: vec![piece],
        }
    }

    /// Interactive ops as a one-shot transaction: one piece per shard, in shard order,
    /// each op in plan order.
    fn one_shot(&self, ops: Vec<InteractiveOp>) -> Txn {
        crate::txn_by_shard(
            &self.partitioner,
            ops.into_iter().flat_map(|op| match op {
                InteractiveOp::Get(k) => vec![Op::Get(k)],
                InteractiveOp::GetMany(keys) => keys.into_iter().map(Op::Get).collect(),
                InteractiveOp::Put(k, v) => vec![Op::Put(k, Operand::Literal(v))],
                InteractiveOp::Append(k, v) => vec![Op::Append(k, Operand::Literal(v))],
                InteractiveOp::Add(k, v) => vec![Op::Add(k, Operand::Literal(encode_int(v)))],
            }),
        )
    }
}

fn int(v: u64) -> Operand {
    Operand::Literal(encode_int(v as i64))
}

fn procedure(shard: ShardId, name: &str, args: Vec<Operand>, keys: Vec<Key>) -> Piece {
    Piece {
        shard,
        body: PieceBody::Procedure(ProcedureCall {
            name: Arc::from(name),
            args,
            read_keys: keys.clone(),
            write_keys: keys,
        }),
    }
}

impl Workload for TpcC {
    fn name(&self) -> &str {
        Self::NAME
    }

    /// Labelled with the profile's name (`new-order`, `payment`, …) besides read-only or
    /// read-write, so reports show each profile's latency.
    fn next(&mut self, client: &ClientInfo, rng: &mut NodeRng) -> Planned {
        let info = client;
        let client = client.id;
        let w = match &self.regional {
            Some(r) => r.home(info).unwrap_or_else(|| self.home(client)),
            None => self.home(client),
        };
        let n = crate::procedure::next_seq(&mut self.planned, client.0);
        let profile = self.profile(rng);
        *self.counts.entry(profile).or_default() += 1;
        let plan = match profile {
            Profile::NewOrder => TxnPlan::OneShot(self.new_order(w, n, rng)),
            Profile::Payment => {
                let ops = self.payment_ops(client, w, n, rng);
                self.plan(ops)
            }
            Profile::OrderStatus => {
                let ops = self.order_status_ops(w, rng);
                self.plan(ops)
            }
            Profile::Delivery => TxnPlan::OneShot(self.delivery(w, n, rng)),
            Profile::StockLevel => TxnPlan::OneShot(self.stock_level(w, rng)),
        };
        let locality = self.regional.as_ref().map(|r| r.class(self, info, &plan));
        let planned = Planned::from(plan).class(profile.name());
        match locality {
            Some(class) => planned.class(class),
            None => planned,
        }
    }

    /// None: TPC-C is judged by its consistency conditions on the final state.
    fn history_ops(&self, _: &TxnPlan, _: &Outcome, _: &[Option<Value>]) -> Vec<HistOp> {
        Vec::new()
    }

    fn history_checkable(&self) -> bool {
        false
    }

    fn audit_keys(&self) -> Vec<Key> {
        let mut keys = Vec::new();
        if !self.audit {
            return keys;
        }
        for w in 1..=self.warehouses {
            keys.push(self.w_ytd(w));
            for d in 1..=DISTRICTS {
                keys.extend([self.d_ytd(w, d), self.d_next(w, d), self.new_orders(w, d)]);
            }
        }
        let mut ordering: Vec<_> = self.ordering.iter().copied().collect();
        ordering.sort_unstable();
        keys.extend(ordering.into_iter().map(|(w, d, c)| self.orders(w, d, c)));
        keys
    }

    fn check_final(&self, state: &FinalState, _history: &[Entry]) -> Result<(), String> {
        for w in 1..=self.warehouses {
            let w_ytd = W_YTD_INITIAL + state.int(&self.w_ytd(w))?;
            let mut d_sum = 0;
            for d in 1..=DISTRICTS {
                d_sum += D_YTD_INITIAL + state.int(&self.d_ytd(w, d))?;
            }
            if w_ytd != d_sum {
                return Err(format!(
                    "tpcc condition 1: W_YTD {w_ytd} of warehouse {w} ≠ sum of its D_YTD {d_sum}"
                ));
            }
        }
        let mut orders: FxHashMap<(u64, u64), Vec<Vec<i64>>> = FxHashMap::default();
        for &(w, d, c) in &self.ordering {
            let rows = parse_orders(&state.list(&self.orders(w, d, c))?)
                .ok_or_else(|| format!("tpcc: ORDER rows of customer {w}/{d}/{c} are malformed"))?;
            orders.entry((w, d)).or_default().extend(rows);
        }
        for w in 1..=self.warehouses {
            for d in 1..=DISTRICTS {
                let next = match state.get(&self.d_next(w, d))? {
                    None => 1,
                    Some(v) => decode_int(v).ok_or("tpcc: D_NEXT_O_ID is not an integer")?,
                };
                let no = state.list(&self.new_orders(w, d))?;
                let district = orders.remove(&(w, d)).unwrap_or_default();
                check_district(w, d, next, &no, &district)?;
            }
        }
        Ok(())
    }
}

impl Regional {
    fn new(cluster: &Cluster, warehouses: u64, shards: u32) -> Regional {
        let mut warehouses_by_region = vec![Vec::new(); cluster.topology.regions.len()];
        for w in 1..=warehouses {
            let shard = ShardId(((w - 1) % u64::from(shards)) as u32);
            let region = cluster.region_of(cluster.initial_leader(shard));
            warehouses_by_region[region.index()].push(w);
        }
        Regional {
            warehouses_by_region,
            locality: Locality::new(cluster),
        }
    }

    /// The client's home warehouse among its region's (none if the region holds none).
    fn home(&self, client: &ClientInfo) -> Option<u64> {
        let local = self.warehouses_by_region.get(client.region.index())?;
        (!local.is_empty()).then(|| local[client.id.0 as usize % local.len()])
    }

    fn class(&self, tpcc: &TpcC, client: &ClientInfo, plan: &TxnPlan) -> &'static str {
        let shards: Vec<ShardId> = match plan {
            TxnPlan::OneShot(txn) => txn.shards().to_vec(),
            TxnPlan::Interactive(ops) => ops
                .iter()
                .flat_map(|op| op.keys())
                .map(|key| tpcc.partitioner.shard_of(key))
                .collect(),
        };
        self.locality.class(client, shards)
    }
}

impl TpcC {
    fn plan(&self, ops: Vec<InteractiveOp>) -> TxnPlan {
        if self.interactive {
            TxnPlan::Interactive(ops)
        } else {
            TxnPlan::OneShot(self.one_shot(ops))
        }
    }
}

/// Splits a customer's ORDER value into rows `[o_id, entry_d, ol_cnt, all_local, rows,
/// lines…]`; `None` if truncated.
fn parse_orders(list: &[i64]) -> Option<Vec<Vec<i64>>> {
    let mut rows = Vec::new();
    let mut at = 0;
    while at < list.len() {
        let lines = usize::try_from(*list.get(at + 4)?).ok()?;
        let end = at + 5 + 5 * lines;
        rows.push(list.get(at..end)?.to_vec());
        at = end;
    }
    Some(rows)
}

/// Conditions 2–4 of §3.3.2 for one district, plus: the order ids are exactly
/// `1..D_NEXT_O_ID` (no order lost or written twice).
fn check_district(
    w: u64,
    d: u64,
    next: i64,
    no: &[i64],
    orders: &[Vec<i64>],
) -> Result<(), String> {
    if !no.len().is_multiple_of(3) {
        return Err(format!("tpcc: NEW-ORDER of district {w}/{d} is malformed"));
    }
    let no_ids: Vec<i64> = no.chunks(3).map(|r| r[0]).collect();
    let mut o_ids: Vec<i64> = orders.iter().map(|r| r[0]).collect();
    o_ids.sort_unstable();
    let max_o = o_ids.last().copied().unwrap_or(0);
    if next - 1 != max_o {
        return Err(format!(
            "tpcc condition 2: district {w}/{d}: D_NEXT_O_ID - 1 = {} but max(O_ID) = {max_o}",
            next - 1
        ));
    }
    if o_ids != (1..next).collect::<Vec<_>>() {
        return Err(format!(
            "tpcc: district {w}/{d}: {} ORDER rows for D_NEXT_O_ID {next} (lost or duplicated orders)",
            o_ids.len()
        ));
    }
    if let (Some(&min_no), Some(&max_no)) = (no_ids.iter().min(), no_ids.iter().max()) {
        if max_no != max_o {
            return Err(format!(
                "tpcc condition 2: district {w}/{d}: max(NO_O_ID) = {max_no} but max(O_ID) = {max_o}"
            ));
        }
        if max_no - min_no + 1 != no_ids.len() as i64 {
            return Err(format!(
                "tpcc condition 3: district {w}/{d}: NEW-ORDER ids {min_no}..={max_no} but {} rows",
                no_ids.len()
            ));
        }
    }
    let ol_cnt: i64 = orders.iter().map(|r| r[2]).sum();
    let rows: i64 = orders.iter().map(|r| r[4]).sum();
    if ol_cnt != rows {
        return Err(format!(
            "tpcc condition 4: district {w}/{d}: sum(O_OL_CNT) = {ol_cnt} but {rows} ORDER-LINE rows"
        ));
    }
    Ok(())
}

// ---- stored procedures ----------------------------------------------------------------

/// Registers TPC-C's stored procedures.
pub fn register(procedures: &mut Procedures) {
    procedures.register("tpcc.new_order", new_order);
    procedures.register("tpcc.new_order_rows", new_order_rows);
    procedures.register("tpcc.stock", stock);
    procedures.register("tpcc.delivery", delivery);
    procedures.register("tpcc.stock_level", stock_level);
}

use crate::procedure::{int as arg_int, key as arg_key, read_list, ProcResult};

/// Applies the stock updates `(key, supply_w, i_id, qty, remote)` in `args` (§2.4.2.2).
/// Returns the new quantity of each.
fn update_stock(store: &mut dyn KvAccess, args: &[Value]) -> Result<Vec<(i64, i64)>, AbortReason> {
    if !args.len().is_multiple_of(5) {
        return Err(AbortReason::Invalid("stock arguments come in fives".into()));
    }
    let mut updated = Vec::new();
    for i in (0..args.len()).step_by(5) {
        let key = arg_key(args, i)?;
        let (supply_w, i_id, qty, remote) = (
            arg_int(args, i + 1)?,
            arg_int(args, i + 2)?,
            arg_int(args, i + 3)?,
            arg_int(args, i + 4)?,
        );
        let mut s = read_list(store, &key)?;
        if s.is_empty() {
            s = vec![initial_stock(supply_w, i_id), 0, 0, 0];
        }
        if s.len() != 4 {
            return Err(AbortReason::TypeMismatch);
        }
        s[0] = if s[0] >= qty + 10 {
            s[0] - qty
        } else {
            s[0] - qty + 91
        };
        s[1] += qty;
        s[2] += 1;
        s[3] += remote;
        store.put(key, encode_list(&s));
        updated.push((i_id, s[0]));
    }
    Ok(updated)
}

/// NewOrder's piece on a supply shard. Args: `items`, `ol_cnt`, the order's `i_id` per
/// line, then the shard's stock updates. Rolls back, as the home piece does, if any of the
/// order's items is not valid (§2.4.2.3).
fn stock(store: &mut dyn KvAccess, args: &[Value]) -> ProcResult {
    let (items, ol_cnt) = (arg_int(args, 0)?, arg_int(args, 1)?);
    let updates_at = 2 + usize::try_from(ol_cnt).map_err(|_| AbortReason::TypeMismatch)?;
    for i in 2..updates_at {
        let i_id = arg_int(args, i)?;
        if i_id < 1 || i_id > items {
            return Err(AbortReason::User);
        }
    }
    update_stock(store, args.get(updates_at..).unwrap_or_default())?;
    Ok(vec![])
}

/// NewOrder's home piece (§2.4.2.2). Args: next, new-order, orders and recent keys; w, d,
/// c, entry_d, all_local, items, ol_cnt; `(i_id, supply_w, qty)` per line; then the home
/// shard's stock updates. Outputs: `O_ID` and the total amount (cents).
fn new_order(store: &mut dyn KvAccess, args: &[Value]) -> ProcResult {
    let (next_key, no_key, orders_key, recent_key) = (
        arg_key(args, 0)?,
        arg_key(args, 1)?,
        arg_key(args, 2)?,
        arg_key(args, 3)?,
    );
    let ints = (4..11)
        .map(|i| arg_int(args, i))
        .collect::<Result<Vec<_>, _>>()?;
    let [w, d, c, entry_d, all_local, items, ol_cnt] = ints[..] else {
        unreachable!("seven integers")
    };
    let lines_end = 11 + 3 * usize::try_from(ol_cnt).map_err(|_| AbortReason::TypeMismatch)?;
    let mut lines = Vec::new();
    for i in (11..lines_end).step_by(3) {
        let (i_id, supply_w, qty) = (
            arg_int(args, i)?,
            arg_int(args, i + 1)?,
            arg_int(args, i + 2)?,
        );
        if i_id < 1 || i_id > items {
            return Err(AbortReason::User); // "Item number is not valid" (§2.4.2.3)
        }
        lines.push((i_id, supply_w, qty));
    }
    let stock = update_stock(store, args.get(lines_end..).unwrap_or_default())?;
    let o_id = match store.get(&next_key) {
        None => 1,
        Some(v) => decode_int(&v).ok_or(AbortReason::TypeMismatch)?,
    };
    store.put(next_key, encode_int(o_id + 1));
    let mut row = vec![o_id, entry_d, ol_cnt, all_local, lines.len() as i64];
    let mut total = 0;
    for (n, &(i_id, supply_w, qty)) in lines.iter().enumerate() {
        let amount = qty * item_price(i_id);
        total += amount;
        row.extend([
            i_id,
            supply_w,
            qty,
            amount,
            (mix_ids(supply_w as u64, i_id as u64, d as u64) % 1000) as i64 + n as i64,
        ]);
    }
    // total × (1 − C_DISCOUNT) × (1 + W_TAX + D_TAX), in basis points.
    let total = total * (10_000 - discount_bp(w, d, c)) / 10_000
        * (10_000 + tax_bp(w, 0) + tax_bp(w, d))
        / 10_000;
    let mut orders = read_list(store, &orders_key)?;
    orders.extend(row);
    store.put(orders_key, encode_list(&orders));
    let mut no = read_list(store, &no_key)?;
    no.extend([o_id, c, total]);
    store.put(no_key, encode_list(&no));
    let mut recent: Vec<i64> = read_list(store, &recent_key)?
        .chunks(3)
        .filter(|r| r.len() == 3 && r[0] > o_id - STOCK_LEVEL_ORDERS)
        .flatten()
        .copied()
        .collect();
    for (i_id, quantity) in stock {
        // Stock-Level looks at the home warehouse's stock only.
        if lines.iter().any(|l| l.0 == i_id && l.1 == w) {
            recent.extend([o_id, i_id, quantity]);
        }
    }
    store.put(recent_key, encode_list(&recent));
    Ok(vec![Some(encode_int(o_id)), Some(encode_int(total))])
}

/// NewOrder's home piece at row granularity (`granularity=row`). Args: the warehouse,
/// district (`D_YTD`) and customer keys, then `tpcc.new_order`'s. Reads the warehouse and
/// customer rows and rewrites the district's `D_YTD` as it is (a row store writes the
/// row whole), then runs NewOrder.
fn new_order_rows(store: &mut dyn KvAccess, args: &[Value]) -> ProcResult {
    let (warehouse, district, customer) = (arg_key(args, 0)?, arg_key(args, 1)?, arg_key(args, 2)?);
    store.get(&warehouse);
    store.get(&customer);
    let d_ytd = store.get(&district).unwrap_or_else(|| encode_int(0));
    store.put(district, d_ytd);
    new_order(store, args.get(3..).unwrap_or_default())
}

/// Delivery (§2.7.4.2). Args: carrier, date, then per district its new-order, delivery-log
/// and customer-credit keys. Output: the delivered `O_ID` per district (`None`: skipped).
fn delivery(store: &mut dyn KvAccess, args: &[Value]) -> ProcResult {
    let (carrier, date) = (arg_int(args, 0)?, arg_int(args, 1)?);
    let mut outputs = Vec::new();
    for i in (2..args.len()).step_by(3) {
        let (no_key, dl_key, cd_key) = (
            arg_key(args, i)?,
            arg_key(args, i + 1)?,
            arg_key(args, i + 2)?,
        );
        let mut no = read_list(store, &no_key)?;
        let Some(oldest) = (0..no.len() / 3).min_by_key(|&r| no[3 * r]) else {
            outputs.push(None);
            continue;
        };
        let row: Vec<i64> = no.drain(3 * oldest..3 * oldest + 3).collect();
        let (o_id, c, amount) = (row[0], row[1], row[2]);
        store.put(no_key, encode_list(&no));
        let mut log = read_list(store, &dl_key)?;
        log.extend([o_id, carrier, date]);
        store.put(dl_key, encode_list(&log));
        let mut credits = read_list(store, &cd_key)?;
        match credits.chunks_mut(3).find(|r| r[0] == c) {
            Some(r) => {
                r[1] += amount;
                r[2] += 1;
            }
            None => credits.extend([c, amount, 1]),
        }
        store.put(cd_key, encode_list(&credits));
        outputs.push(Some(encode_int(o_id)));
    }
    Ok(outputs)
}

/// Stock-Level (§2.8.2.2): distinct items of the district's last 20 orders whose recorded
/// home-warehouse quantity is below the threshold. Output: the count.
fn stock_level(store: &mut dyn KvAccess, args: &[Value]) -> ProcResult {
    let (next_key, recent_key, threshold) =
        (arg_key(args, 0)?, arg_key(args, 1)?, arg_int(args, 2)?);
    let next = match store.get(&next_key) {
        None => 1,
        Some(v) => decode_int(&v).ok_or(AbortReason::TypeMismatch)?,
    };
    let mut low: Vec<i64> = read_list(store, &recent_key)?
        .chunks(3)
        .filter(|r| r.len() == 3 && r[0] >= next - STOCK_LEVEL_ORDERS && r[2] < threshold)
        .map(|r| r[1])
        .collect();
    low.sort_unstable();
    low.dedup();
    Ok(vec![Some(encode_int(low.len() as i64))])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::MapStore;
    use crate::test_support::{cluster, rng, InteractiveDriver};
    use meridian_core::txn::{execute_piece, PieceResult};
    use meridian_core::value::decode_list;

    fn tpcc(shards: u32, opts: &[(&str, &str)]) -> TpcC {
        let mut o = WorkloadOptions::default();
        for (k, v) in opts {
            o = o.with(k, v);
        }
        TpcC::new(&cluster(shards), &o).unwrap()
    }

    /// Runs a one-shot transaction atomically: all pieces or none (a user abort rolls back).
    fn execute(txn: &Txn, store: &mut MapStore) -> bool {
        let procedures = crate::procedures();
        let mut scratch = store.clone();
        let mut results: Vec<PieceResult> = Vec::new();
        for piece in &txn.pieces {
            let inputs: Vec<Option<&PieceResult>> = results.iter().map(Some).collect();
            match execute_piece(piece, &inputs, &procedures, &mut scratch) {
                Ok(r) => results.push(r),
                Err(AbortReason::User) => return false,
                Err(e) => panic!("{e}"),
            }
        }
        *store = scratch;
        true
    }

    fn run_serially(w: &mut TpcC, txns: usize, seed: u64) -> MapStore {
        let mut store = MapStore::default();
        let mut r = rng(seed);
        for i in 0..txns {
            match w
                .next(&crate::test_support::client(i as u32 % 7), &mut r)
                .plan
            {
                TxnPlan::OneShot(txn) => {
                    txn.validate(w.shards).unwrap();
                    execute(&txn, &mut store);
                }
                TxnPlan::Interactive(ops) => {
                    let mut driver = InteractiveDriver {
                        store: std::mem::take(&mut store),
                    };
                    driver.run(&ops);
                    store = driver.store;
                }
            }
        }
        store
    }

    fn audit(w: &TpcC, store: &mut MapStore) -> Result<(), String> {
        let keys = w.audit_keys();
        let state = crate::audit::run(&w.partitioner, &keys, |txn| {
            crate::test_support::execute(txn, store)
        });
        crate::audit::verdict(w, &keys, &state, &[])
    }

    #[test]
    fn a_serial_run_of_the_standard_mix_meets_conditions_1_to_4() {
        for interactive in ["false", "true"] {
            let mut w = tpcc(
                3,
                &[
                    ("warehouses", "4"),
                    ("customers", "30"),
                    ("items", "200"),
                    ("interactive", interactive),
                    ("remote_item", "0.2"),
                ],
            );
            let mut store = run_serially(&mut w, 3000, 1);
            assert_eq!(audit(&w, &mut store), Ok(()));
            // The mix is the standard one (45/43/4/4/4 ± noise over 3000).
            let c = &w.counts;
            assert!((1200..1500).contains(&c[&Profile::NewOrder]), "{c:?}");
            assert!((1150..1450).contains(&c[&Profile::Payment]), "{c:?}");
            for p in [Profile::OrderStatus, Profile::Delivery, Profile::StockLevel] {
                assert!((60..200).contains(&c[&p]), "{c:?}");
            }
            // Orders were placed and some delivered.
            let no = decode_list(store.get(&w.deliveries(1, 1)).unwrap()).unwrap();
            assert!(!no.is_empty());
        }
    }

    /// Keys a plan reads and writes (interactive ops: every key of every op).
    fn plan_keys(plan: &TxnPlan) -> (Vec<Key>, Vec<Key>) {
        match plan {
            TxnPlan::OneShot(txn) => (
                txn.pieces.iter().flat_map(Piece::read_keys).collect(),
                txn.pieces.iter().flat_map(Piece::write_keys).collect(),
            ),
            TxnPlan::Interactive(ops) => {
                let keys: Vec<Key> = ops.iter().flat_map(|o| o.keys().to_vec()).collect();
                (keys.clone(), keys)
            }
        }
    }

    #[test]
    fn at_row_granularity_new_order_touches_the_rows_payment_writes() {
        let new_order = |granularity: &str| {
            let opts = [
                ("warehouses", "1"),
                ("customers", "1"),
                ("mix", "new-order"),
                ("granularity", granularity),
            ];
            let mut w = tpcc(1, &opts);
            plan_keys(&w.next(&crate::test_support::client(0), &mut rng(5)).plan)
        };
        let w = tpcc(1, &[("warehouses", "1")]);
        let district_ytd: Vec<Key> = (1..=DISTRICTS).map(|d| w.d_ytd(1, d)).collect();
        let customer: Vec<Key> = (1..=DISTRICTS)
            .map(|d| w.customer(1, d, 1, "bal"))
            .collect();
        let payment_rows = |k: &Key| district_ytd.contains(k) || customer.contains(k);
        let (reads, writes) = new_order("column");
        assert!(!reads.contains(&w.w_ytd(1)));
        assert!(
            !reads.iter().chain(&writes).any(payment_rows),
            "columns never meet"
        );
        let (reads, writes) = new_order("row");
        assert!(reads.contains(&w.w_ytd(1)), "reads the warehouse row");
        assert!(!writes.contains(&w.w_ytd(1)));
        let count = |keys: &[Key], of: &[Key]| keys.iter().filter(|k| of.contains(k)).count();
        assert_eq!(count(&writes, &district_ytd), 1, "writes its district row");
        assert_eq!(count(&reads, &customer), 1, "reads its customer row");
        let e = TpcC::new(
            &cluster(1),
            &WorkloadOptions::default().with("granularity", "cell"),
        );
        assert!(e.unwrap_err().contains("granularity"));
    }

    #[test]
    fn a_serial_run_at_row_granularity_meets_conditions_1_to_4() {
        let mut w = tpcc(
            3,
            &[
                ("warehouses", "4"),
                ("customers", "30"),
                ("items", "200"),
                ("interactive", "true"),
                ("remote_item", "0.2"),
                ("granularity", "row"),
            ],
        );
        let mut store = run_serially(&mut w, 3000, 1);
        assert_eq!(audit(&w, &mut store), Ok(()));
    }

    #[test]
    fn each_condition_catches_its_violation() {
        let mut w = tpcc(
            2,
            &[("warehouses", "2"), ("customers", "20"), ("items", "100")],
        );
        let good = run_serially(&mut w, 1500, 2);
        let mut bad = good.clone();
        // 1: a lost D_YTD update.
        bad.insert(w.d_ytd(1, 3), encode_int(-5));
        assert!(audit(&w, &mut bad).unwrap_err().contains("condition 1"));
        // 2: a lost D_NEXT_O_ID increment.
        let mut bad = good.clone();
        let next = decode_int(&bad[&w.d_next(2, 4)]).unwrap();
        bad.insert(w.d_next(2, 4), encode_int(next - 1));
        assert!(audit(&w, &mut bad).unwrap_err().contains("condition 2"));
        // 3: a NEW-ORDER row lost from the middle.
        let mut bad = good.clone();
        let (wd, no) = (1..=DISTRICTS)
            .map(|d| (d, decode_list(&good[&w.new_orders(1, d)]).unwrap()))
            .find(|(_, no)| no.len() >= 9)
            .expect("a district with 3 undelivered orders");
        let mut fewer = no.clone();
        fewer.drain(3..6);
        bad.insert(w.new_orders(1, wd), encode_list(&fewer));
        assert!(audit(&w, &mut bad).unwrap_err().contains("condition 3"));
        // 4: an ORDER-LINE row lost.
        let mut bad = good.clone();
        let (&(ow, od, oc), _) = w
            .ordering
            .iter()
            .map(|k| (k, ()))
            .find(|(k, _)| good.contains_key(&w.orders(k.0, k.1, k.2)))
            .unwrap();
        let mut rows = decode_list(&good[&w.orders(ow, od, oc)]).unwrap();
        rows[4] -= 1;
        rows.truncate(rows.len() - 5);
        bad.insert(w.orders(ow, od, oc), encode_list(&rows));
        let e = audit(&w, &mut bad).unwrap_err();
        assert!(e.contains("condition 4") || e.contains("malformed"), "{e}");
    }

    #[test]
    fn new_order_touches_home_and_supply_shards_and_rolls_back_invalid_items() {
        let mut w = tpcc(
            4,
            &[
                ("warehouses", "8"),
                ("remote_item", "0.5"),
                ("mix", "new-order"),
            ],
        );
        let mut r = rng(3);
        let mut multi = 0;
        let mut store = MapStore::default();
        let mut rolled_back = 0;
        let mut multi_rolled_back = 0;
        for _ in 0..400 {
            let TxnPlan::OneShot(txn) = w.next(&crate::test_support::client(1), &mut r).plan else {
                panic!()
            };
            txn.validate(4).unwrap();
            assert_eq!(txn.pieces[0].shard, w.shard(2), "home piece first");
            multi += usize::from(txn.shards().len() > 1);
            // Each piece alone, on its own shard: all roll back or none (every piece checks
            // the order's items, so shards that execute independently agree).
            let procedures = crate::procedures();
            let alone: Vec<bool> = txn
                .pieces
                .iter()
                .map(|piece| {
                    let mut scratch = store.clone();
                    match execute_piece(piece, &[], &procedures, &mut scratch) {
                        Ok(_) => false,
                        Err(AbortReason::User) => true,
                        Err(e) => panic!("{e}"),
                    }
                })
                .collect();
            if !execute(&txn, &mut store) {
                rolled_back += 1;
                assert!(
                    alone.iter().all(|&b| b),
                    "every piece rolls back: {alone:?}"
                );
                multi_rolled_back += usize::from(txn.pieces.len() > 1);
            } else {
                assert!(alone.iter().all(|&b| !b), "no piece rolls back: {alone:?}");
            }
        }
        assert!(multi_rolled_back > 0, "a multi-shard order rolled back");
        assert!(multi > 200, "{multi}");
        assert!(
            (1..20).contains(&rolled_back),
            "about 1% roll back: {rolled_back}"
        );
        let next: i64 = (1..=DISTRICTS)
            .map(|d| decode_int(&store[&w.d_next(2, d)]).unwrap() - 1)
            .sum();
        assert_eq!(next, 400 - rolled_back);
    }

    #[test]
    fn payment_and_order_status_are_interactive_when_asked() {
        let mut w = tpcc(2, &[("interactive", "true"), ("mix", "payment")]);
        let mut r = rng(4);
        let TxnPlan::Interactive(ops) = w.next(&crate::test_support::client(0), &mut r).plan else {
            panic!()
        };
        assert!(matches!(ops[0], InteractiveOp::Get(_)));
        assert_eq!(
            ops.iter()
                .filter(|o| matches!(o, InteractiveOp::Add(..)))
                .count(),
            5
        );
        let mut w = tpcc(2, &[("mix", "payment")]);
        assert!(matches!(
            w.next(&crate::test_support::client(0), &mut r).plan,
            TxnPlan::OneShot(_)
        ));
        for (k, v) in [("mix", "all"), ("warehouses", "0"), ("remote_item", "2")] {
            let e = TpcC::new(&cluster(2), &WorkloadOptions::default().with(k, v)).unwrap_err();
            assert!(e.contains(k), "{e}");
        }
    }

    #[test]
    fn interactive_order_status_is_one_multi_key_read_of_the_home_warehouse() {
        let mut w = tpcc(2, &[("interactive", "true")]);
        let mut r = rng(5);
        let client = crate::test_support::client(0);
        let planned = (0..200)
            .map(|_| w.next(&client, &mut r))
            .find(|p| p.classes.contains("order-status"))
            .expect("4% of the mix is Order-Status");
        assert!(planned.classes.contains(crate::READ_ONLY));
        let TxnPlan::Interactive(ops) = planned.plan else {
            panic!("interactive=true")
        };
        let [InteractiveOp::GetMany(keys)] = ops.as_slice() else {
            panic!("one multi-key read, got {ops:?}")
        };
        assert_eq!(keys.len(), 4);
        let home = w.shard(w.home(client.id));
        assert!(keys.iter().all(|k| w.partitioner.shard_of(k) == home));
    }

    #[test]
    fn every_plan_is_labelled_with_its_profile_and_read_only_or_read_write() {
        let mut w = tpcc(2, &[]);
        let mut r = rng(9);
        let mut seen = BTreeMap::new();
        for i in 0..400u32 {
            let planned = w.next(&crate::test_support::client(i % 5), &mut r);
            let labels: Vec<&str> = planned.classes.iter().collect();
            let profile = labels
                .iter()
                .find(|l| !matches!(**l, crate::READ_ONLY | crate::READ_WRITE))
                .map(|l| l.to_string())
                .expect("a profile label");
            let read_only = planned.plan.is_read_only();
            assert_eq!(labels.contains(&crate::READ_ONLY), read_only, "{labels:?}");
            *seen.entry(profile).or_insert(0) += 1;
        }
        let names: Vec<&str> = seen.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "delivery",
                "new-order",
                "order-status",
                "payment",
                "stock-level"
            ]
        );
        assert_eq!(
            w.counts.values().sum::<u64>(),
            seen.values().sum::<u64>(),
            "one label per plan"
        );
    }
}

#[cfg(test)]
mod home_region_tests {
    use super::*;
    use meridian_core::{ClientId, NodeId, RegionId, Topology};
    use rand::SeedableRng;

    /// DAST §6: with `home_region`, every client's home warehouse is led from its region,
    /// so its NewOrders without remote lines are IRTs; remote Payments are CRTs.
    #[test]
    fn home_region_puts_clients_beside_their_warehouse_and_labels_irt_crt() {
        let topology = Topology::load("edge-regions").unwrap();
        let cluster = Cluster::without_services(&topology).unwrap();
        let o = WorkloadOptions::default()
            .with("home_region", "true")
            .with("customers", "30")
            .with("items", "100");
        let mut w = TpcC::new(&cluster, &o).unwrap();
        let mut rng = NodeRng::seed_from_u64(1);
        let (mut irt, mut crt) = (0, 0);
        for i in 0..400u32 {
            let region = RegionId((i % 10) as u16);
            let client = ClientInfo {
                id: ClientId(i),
                coordinator: NodeId(0),
                region,
            };
            assert_eq!(
                w.region_of(w.regional.as_ref().unwrap().home(&client).unwrap()),
                region
            );
            let planned = w.next(&client, &mut rng);
            if planned.classes.contains(crate::IRT) {
                irt += 1;
            } else {
                assert!(planned.classes.contains(crate::CRT));
                crt += 1;
            }
        }
        assert!(irt > 300 && crt > 10, "irt {irt} crt {crt}");
        // Off (the default), client 11's home is warehouse 12, on shard 11, in region E5.
        let mut plain = TpcC::new(&cluster, &WorkloadOptions::default()).unwrap();
        let client = ClientInfo {
            id: ClientId(11),
            coordinator: NodeId(0),
            region: RegionId(0),
        };
        assert_eq!(plain.home(client.id), 12);
        let planned = plain.next(&client, &mut rng);
        assert!(!planned.classes.contains(crate::IRT) && !planned.classes.contains(crate::CRT));
        assert!(!plain.audit_keys().is_empty());
        let unaudited = WorkloadOptions::default().with("audit", "false");
        assert!(TpcC::new(&cluster, &unaudited)
            .unwrap()
            .audit_keys()
            .is_empty());
    }

    impl TpcC {
        fn region_of(&self, w: u64) -> RegionId {
            let r = self.regional.as_ref().unwrap();
            let at = r.warehouses_by_region.iter().position(|ws| ws.contains(&w));
            RegionId(at.unwrap() as u16)
        }
    }
}
