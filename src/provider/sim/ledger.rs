//! The simulator's state: every charge and refund it made, what each key was answered, and
//! the rules money follows between them (a refund never returns more than a charge took; only
//! an authorization is captured or canceled).

use std::collections::HashMap;

use super::cards::Failure;
use super::journal::{Journal, Text};
use crate::provider::protocol::{
    Charge, ChargeUpdate, ProviderRefund, ProviderStatus, RefundRequest,
};

/// Everything the simulator did, kept behind its lock: the charges and refunds it made, the
/// first answer to every key, and how many calls came.
#[derive(Default)]
pub(super) struct Ledger {
    pub(super) charges: Journal<StoredCharge>,
    /// The charge at position `n` has id number `first_charge + n`.
    first_charge: FirstCharge,
    /// Every charge call, including those answered from the idempotency record.
    pub(super) charge_calls: u64,
    /// Payment method and capture flag of each pending charge, by charge id: decide how it
    /// completes.
    pub(super) pending_methods: HashMap<String, (String, bool)>,
    pub(super) refunds: Journal<ProviderRefund>,
    /// What was refunded of a charge (by position), and what a partial capture charged:
    /// a refund never returns more than was taken.
    pub(super) refunded: HashMap<usize, i64>,
    pub(super) partly_captured: HashMap<usize, i64>,
    /// Every refund call, including those answered from the idempotency record.
    pub(super) refund_calls: u64,
    /// Captures and cancels that moved a charge, in order (one per idempotency key).
    pub(super) captures: Vec<ChargeUpdate>,
    pub(super) cancels: Vec<ChargeUpdate>,
    /// The first answer to each capture or cancel key, refusals included.
    pub(super) updates: Journal<Result<ChargeUpdate, String>>,
    /// Every capture and cancel call, including those answered from the idempotency record.
    pub(super) capture_calls: u64,
    pub(super) cancel_calls: u64,
}

/// Random for each ledger, so that charge ids of an earlier process, still in the database,
/// are not given out again.
struct FirstCharge(u128);

impl Default for FirstCharge {
    fn default() -> Self {
        Self(uuid::Uuid::new_v4().as_u128())
    }
}

/// A charge as the ledger keeps it, in 40 bytes (the simulator keeps every charge it made):
/// its id from its position, its strings in the journal (the reference shares the key's
/// text when they are the same, as they are for the service's charges).
pub(super) struct StoredCharge {
    pub(super) status: ProviderStatus,
    pub(super) amount: i64,
    pub(super) currency: Text,
    pub(super) reference: Text,
    pub(super) failure: Option<Failure>,
}

impl Ledger {
    fn charge_id(&self, position: usize) -> String {
        let number = self.first_charge.0.wrapping_add(position as u128);
        format!("ch_{}", uuid::Uuid::from_u128(number).simple())
    }

    /// The position of the charge with id `charge_id`.
    pub(super) fn charge_position(&self, charge_id: &str) -> Option<usize> {
        let number = uuid::Uuid::try_parse(charge_id.strip_prefix("ch_")?)
            .ok()?
            .as_u128();
        let position = usize::try_from(number.wrapping_sub(self.first_charge.0)).ok()?;
        // A charge it made, by exactly the id it gave out (not another spelling of it).
        (position < self.charges.len() && self.charge_id(position) == charge_id).then_some(position)
    }

    /// Why a refund cannot be made (its failure code), if it cannot: only money a charge
    /// took can go back, once.
    pub(super) fn refusal_of(&self, request: &RefundRequest) -> Option<&'static str> {
        let Some(position) = self.charge_position(&request.charge) else {
            return Some("charge_not_found");
        };
        let charge = self.charges.at(position);
        if charge.status != ProviderStatus::Succeeded {
            return Some("charge_not_captured");
        }
        let taken = self
            .partly_captured
            .get(&position)
            .copied()
            .unwrap_or(charge.amount);
        let refunded = self.refunded.get(&position).copied().unwrap_or(0);
        (request.amount < 1 || refunded + request.amount > taken).then_some("amount_too_large")
    }

    /// Captures or cancels the authorized charge `charge_id`, or says why not.
    pub(super) fn move_charge(
        &mut self,
        charge_id: &str,
        change: ChargeMove,
    ) -> Result<ChargeUpdate, String> {
        let position = self
            .charge_position(charge_id)
            .ok_or_else(|| format!("no such charge: {charge_id}"))?;
        let charge = self.charges.at(position);
        if charge.status != ProviderStatus::RequiresCapture {
            return Err(format!(
                "charge {charge_id} is not capturable (status {:?})",
                charge.status
            ));
        }
        let (status, amount_captured) = match change {
            ChargeMove::Capture(amount) if amount < 1 || amount > charge.amount => {
                return Err(format!(
                    "cannot capture {amount} of an authorization of {}",
                    charge.amount
                ));
            }
            ChargeMove::Capture(amount) => (ProviderStatus::Succeeded, Some(amount)),
            ChargeMove::Cancel => (ProviderStatus::Canceled, None),
        };
        let reference = self.charges.text(charge.reference).to_owned();
        if let Some(captured) = amount_captured.filter(|captured| *captured < charge.amount) {
            self.partly_captured.insert(position, captured);
        }
        self.charges.at_mut(position).status = status;
        Ok(ChargeUpdate {
            id: charge_id.to_owned(),
            status,
            amount_captured,
            reference,
        })
    }

    pub(super) fn charge_at(&self, position: usize) -> Charge {
        let c = self.charges.at(position);
        Charge {
            id: self.charge_id(position),
            status: c.status,
            amount: c.amount,
            currency: self.charges.text(c.currency).to_owned(),
            reference: self.charges.text(c.reference).to_owned(),
            failure_code: c.failure.map(|(code, _)| (*code).to_owned()),
            failure_message: c.failure.map(|(_, message)| (*message).to_owned()),
        }
    }
}

/// What a capture or cancel does to an authorized charge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChargeMove {
    Capture(i64),
    Cancel,
}
