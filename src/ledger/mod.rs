//! The ledger: every movement of a merchant's money as a balance transaction, written in
//! the database transaction of the change that causes it, double-entry inside.
//!
//! Whoever changes money posts through [`post`] right beside the guarded update that
//! decided it makes the change (and beside its event, where it has one), so the
//! transaction commits or rolls back with the change: exactly once, whichever path (the
//! request, a retry, a takeover, the recovery worker, a webhook, the expiry, a group-commit
//! batch) gets there. The database backs it: `(source_id, txn_type)` is unique, and both
//! tables refuse UPDATE and DELETE.

pub mod reads;
pub mod view;

use crate::db::DbConnection;
use crate::db::ledger::{self as rows, EntryRow, TransactionRow};
use crate::domain::{
    DisputeId, LedgerPolicy, PaymentId, PayoutId, RefundId, Timestamp, TransactionId,
};

/// Whether `raw` names an object that moves money: a payment, a refund, a payout or a
/// dispute.
pub fn is_source_id(raw: &str) -> bool {
    PaymentId::is_valid(raw)
        || RefundId::is_valid(raw)
        || PayoutId::is_valid(raw)
        || DisputeId::is_valid(raw)
}

/// The kinds of movement, as the API names them (`type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Charge,
    Refund,
    RefundFailure,
    Payout,
    PayoutFailure,
    /// A dispute opened.
    Dispute,
    /// A dispute won.
    DisputeReversal,
}

impl Kind {
    pub const ALL: &[Kind] = &[
        Kind::Charge,
        Kind::Refund,
        Kind::RefundFailure,
        Kind::Payout,
        Kind::PayoutFailure,
        Kind::Dispute,
        Kind::DisputeReversal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Charge => "charge",
            Kind::Refund => "refund",
            Kind::RefundFailure => "refund_failure",
            Kind::Payout => "payout",
            Kind::PayoutFailure => "payout_failure",
            Kind::Dispute => "dispute",
            Kind::DisputeReversal => "dispute_reversal",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|k| k.as_str() == text)
    }

    /// The account on the other side of the merchant's balance: money held at the
    /// provider for charges and refunds; money on its way to the bank for payouts.
    fn counter_account(self) -> &'static str {
        match self {
            Kind::Charge
            | Kind::Refund
            | Kind::RefundFailure
            | Kind::Dispute
            | Kind::DisputeReversal => PROVIDER_HELD,
            Kind::Payout | Kind::PayoutFailure => PAYOUTS_IN_TRANSIT,
        }
    }
}

/// The accounts entries are posted to. Signs: the merchant's balance and the platform's
/// fees are what is owed to them (positive when money comes in); money held at the
/// provider is the other side (negative when it holds more).
pub const MERCHANT_BALANCE: &str = "merchant_balance";
pub const PLATFORM_FEES: &str = "platform_fees";
pub const PROVIDER_HELD: &str = "provider_held";
pub const PAYOUTS_IN_TRANSIT: &str = "payouts_in_transit";

/// One movement to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posting {
    pub merchant_id: String,
    pub kind: Kind,
    /// The object that moved the money: `pay_…`, `re_…`, `po_…`, `dp_…`.
    pub source_id: String,
    /// Signed: money in is positive.
    pub amount: i64,
    pub fee: i64,
    pub currency: String,
    pub available_on: Timestamp,
    pub created_at: Timestamp,
}

impl Posting {
    /// A payment's money captured at `at`: `+ captured`, less the fee, pending until the
    /// policy's period has passed.
    pub fn charge(
        policy: &LedgerPolicy,
        merchant_id: &str,
        payment_id: &str,
        captured: i64,
        currency: &str,
        at: Timestamp,
    ) -> Self {
        Self {
            merchant_id: merchant_id.to_owned(),
            kind: Kind::Charge,
            source_id: payment_id.to_owned(),
            amount: captured,
            fee: policy.charge_fee(captured),
            currency: currency.to_owned(),
            available_on: policy.available_on(at),
            created_at: at,
        }
    }

    /// A refund created (its key won): its amount leaves the balance at once.
    pub fn refund(
        merchant_id: &str,
        refund_id: &str,
        amount: i64,
        currency: &str,
        at: Timestamp,
    ) -> Self {
        Self::available_now(Kind::Refund, merchant_id, refund_id, -amount, currency, at)
    }

    /// A refund that ended `failed`: its amount comes back.
    pub fn refund_failure(
        merchant_id: &str,
        refund_id: &str,
        amount: i64,
        currency: &str,
        at: Timestamp,
    ) -> Self {
        Self::available_now(
            Kind::RefundFailure,
            merchant_id,
            refund_id,
            amount,
            currency,
            at,
        )
    }

    /// A payout created (its key won and it fit the available balance).
    pub fn payout(
        merchant_id: &str,
        payout_id: &str,
        amount: i64,
        currency: &str,
        at: Timestamp,
    ) -> Self {
        Self::available_now(Kind::Payout, merchant_id, payout_id, -amount, currency, at)
    }

    /// A payout that ended `failed`: its amount comes back.
    pub fn payout_failure(
        merchant_id: &str,
        payout_id: &str,
        amount: i64,
        currency: &str,
        at: Timestamp,
    ) -> Self {
        Self::available_now(
            Kind::PayoutFailure,
            merchant_id,
            payout_id,
            amount,
            currency,
            at,
        )
    }

    /// A dispute opened: the disputed amount leaves the balance at once, and the policy's
    /// dispute fee with it (owed whatever the amount, and kept if the dispute is won).
    pub fn dispute(
        policy: &LedgerPolicy,
        merchant_id: &str,
        dispute_id: &str,
        amount: i64,
        currency: &str,
        at: Timestamp,
    ) -> Self {
        Self {
            fee: policy.dispute_fee,
            ..Self::available_now(
                Kind::Dispute,
                merchant_id,
                dispute_id,
                -amount,
                currency,
                at,
            )
        }
    }

    /// A dispute won: the disputed amount comes back (the dispute fee is kept).
    pub fn dispute_reversal(
        merchant_id: &str,
        dispute_id: &str,
        amount: i64,
        currency: &str,
        at: Timestamp,
    ) -> Self {
        Self::available_now(
            Kind::DisputeReversal,
            merchant_id,
            dispute_id,
            amount,
            currency,
            at,
        )
    }

    fn available_now(
        kind: Kind,
        merchant_id: &str,
        source_id: &str,
        amount: i64,
        currency: &str,
        at: Timestamp,
    ) -> Self {
        Self {
            merchant_id: merchant_id.to_owned(),
            kind,
            source_id: source_id.to_owned(),
            amount,
            fee: 0,
            currency: currency.to_owned(),
            available_on: at,
            created_at: at,
        }
    }

    fn net(&self) -> i64 {
        self.amount - self.fee
    }

    /// The entries: the merchant's net, the platform's fee, and the counter account's
    /// opposite of the whole amount. They sum to zero by construction.
    fn entries(&self, transaction_id: &str) -> Vec<EntryRow> {
        let entry = |account: &'static str, amount: i64| EntryRow {
            transaction_id: transaction_id.to_owned(),
            account,
            merchant_id: self.merchant_id.clone(),
            currency: self.currency.clone(),
            amount,
        };
        let mut entries = vec![entry(MERCHANT_BALANCE, self.net())];
        if self.fee != 0 {
            entries.push(entry(PLATFORM_FEES, self.fee));
        }
        entries.push(entry(self.kind.counter_account(), -self.amount));
        entries
    }
}

/// Records the movements, in the caller's transaction: one insert of the transactions, one
/// of their entries. Call it after the guarded update that decided this caller makes the
/// change. A movement already recorded for its object fails the caller's transaction
/// (unique violation) instead of counting twice. (A group-commit batch of payments sends its
/// movements with its events instead: [`crate::events::record_all`].)
pub fn post(conn: &mut DbConnection, postings: &[Posting]) -> diesel::QueryResult<()> {
    let (transactions, entries) = rows_of(postings);
    rows::insert(conn, &transactions, &entries)
}

/// The rows that record `postings`: one transaction each, with its entries.
pub fn rows_of(postings: &[Posting]) -> (Vec<TransactionRow>, Vec<EntryRow>) {
    let mut transactions = Vec::with_capacity(postings.len());
    let mut entries = Vec::with_capacity(postings.len() * 3);
    for posting in postings {
        // Lists are newest first by id: an id made from the movement's own time keeps them
        // in the order of `created_at` (made when the change was decided, before a batch
        // or a claim's transaction wrote it).
        let id = TransactionId::generate_at(posting.created_at).into_string();
        entries.extend(posting.entries(&id));
        transactions.push(TransactionRow {
            id,
            merchant_id: posting.merchant_id.clone(),
            txn_type: posting.kind.as_str().to_owned(),
            source_id: posting.source_id.clone(),
            amount: posting.amount,
            fee: posting.fee,
            net: posting.net(),
            currency: posting.currency.clone(),
            available_on: posting.available_on,
            created_at: posting.created_at,
        });
    }
    (transactions, entries)
}

/// What `payments-api ledger verify` found.
#[derive(Debug, Clone)]
pub struct Verification {
    pub counts: rows::Counts,
    pub violations: Vec<rows::Violation>,
}

impl Verification {
    pub fn holds(&self) -> bool {
        self.violations.is_empty()
    }

    /// The one summary line.
    pub fn summary(&self) -> String {
        format!(
            "ledger verify: {} transactions, {} entries checked, {} violations",
            self.counts.transactions,
            self.counts.entries,
            self.violations.len()
        )
    }
}

/// Checks the whole database against the ledger's rules, on one snapshot (so a running
/// service cannot make it see half a change).
pub fn verify(conn: &mut DbConnection) -> diesel::QueryResult<Verification> {
    crate::db::read_snapshot(conn, |conn| {
        Ok(Verification {
            counts: rows::counts(conn)?,
            violations: rows::violations(conn)?,
        })
    })
}
