//! The balance and balance transactions as the API shows them.

use serde::Serialize;

use crate::db::ledger::{CurrencyBalance, TransactionRow};
use crate::domain::{Timestamp, format_timestamp};

/// A charge is `pending` until its `available_on` has passed, then `available`: read off
/// the clock, never written. Every other kind is `available` from the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum TransactionStatus {
    Pending,
    Available,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum TransactionType {
    Charge,
    Refund,
    RefundFailure,
    Payout,
    PayoutFailure,
    Dispute,
    DisputeReversal,
}

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = BalanceTransaction)]
pub struct TransactionObject<'a> {
    #[schema(example = "txn_0193f0c2a9b87c3e8e1f6a2b3c4d5e6f")]
    id: &'a str,
    #[schema(example = "balance_transaction")]
    object: &'static str,
    #[serde(rename = "type")]
    #[schema(value_type = TransactionType)]
    kind: &'a str,
    /// Signed, minor units: money in is positive.
    #[schema(example = 2000)]
    amount: i64,
    /// What the platform kept (≥ 0).
    #[schema(example = 88)]
    fee: i64,
    /// `amount − fee`.
    #[schema(example = 1912)]
    net: i64,
    #[schema(example = "usd")]
    currency: &'a str,
    #[schema(value_type = TransactionStatus)]
    status: &'static str,
    #[schema(format = DateTime)]
    available_on: String,
    /// The object that moved the money: a payment (`pay_…`), a refund (`re_…`), a payout
    /// (`po_…`) or a dispute (`dp_…`).
    #[schema(example = "pay_0193f0c2a9b87c3e8e1f6a2b3c4d5e6f")]
    source: &'a str,
    #[schema(format = DateTime)]
    created_at: String,
}

impl<'a> TransactionObject<'a> {
    pub fn from_row(row: &'a TransactionRow, at: Timestamp) -> Self {
        Self {
            id: &row.id,
            object: "balance_transaction",
            kind: &row.txn_type,
            amount: row.amount,
            fee: row.fee,
            net: row.net,
            currency: &row.currency,
            status: if row.is_available(at) {
                "available"
            } else {
                "pending"
            },
            available_on: format_timestamp(row.available_on),
            source: &row.source_id,
            created_at: format_timestamp(row.created_at),
        }
    }
}

/// A page of balance transactions, newest first.
#[derive(Serialize, utoipa::ToSchema)]
pub struct TransactionList<'a> {
    #[schema(example = "list")]
    object: &'static str,
    data: Vec<TransactionObject<'a>>,
    has_more: bool,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Money {
    #[schema(example = "usd")]
    currency: String,
    #[schema(example = 1912)]
    amount: i64,
}

/// What the merchant holds, per currency: `available` may be paid out; `pending` becomes
/// available as each charge's `available_on` passes.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Balance {
    #[schema(example = "balance")]
    object: &'static str,
    available: Vec<Money>,
    pending: Vec<Money>,
}

pub fn render(row: &TransactionRow, at: Timestamp) -> serde_json::Result<String> {
    serde_json::to_string(&TransactionObject::from_row(row, at))
}

pub fn render_list(
    rows: &[TransactionRow],
    has_more: bool,
    at: Timestamp,
) -> serde_json::Result<String> {
    serde_json::to_string(&TransactionList {
        object: "list",
        data: rows
            .iter()
            .map(|r| TransactionObject::from_row(r, at))
            .collect(),
        has_more,
    })
}

pub fn render_balance(balances: Vec<CurrencyBalance>) -> serde_json::Result<String> {
    let (available, pending) = balances
        .into_iter()
        .map(|b| {
            (
                Money {
                    currency: b.currency.clone(),
                    amount: b.available,
                },
                Money {
                    currency: b.currency,
                    amount: b.pending,
                },
            )
        })
        .unzip();
    serde_json::to_string(&Balance {
        object: "balance",
        available,
        pending,
    })
}
