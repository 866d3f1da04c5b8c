//! The simulator's state: the charges and refunds it made, what each key was answered, and
//! the rules money follows between them (a refund never returns more than a charge took; only
//! an authorization is captured or canceled).

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::cards::{Failure, decide_async, held_unless_captured};
use super::journal::Journal;
use super::retention::{HeapBytes, KEY_WINDOW, PruneTimer, RECORDS_KEPT, btree_bytes};
use super::settlements::SharedCharge;
use crate::domain::Timestamp;
use crate::provider::protocol::{
    Charge, ChargeRequest, ChargeUpdate, ProviderRefund, ProviderStatus, RefundRequest,
};

/// Everything the simulator did and still keeps (retention.rs), behind its lock: the
/// charges and refunds it made, the first answer to every key, and how many calls came.
#[derive(Default)]
pub(super) struct Ledger {
    /// By the charge's key; its reference is the key's text when they are the same (the
    /// service's charges: its payment id is both).
    pub(super) charges: Journal<StoredCharge>,
    /// The strings of the few charges whose reference is not their key, or whose currency
    /// is not three bytes, by position.
    unusual: BTreeMap<u64, Unusual>,
    /// The charge at position `n` has id number `first_charge + n`.
    first_charge: FirstCharge,
    /// Every charge call, including those answered from the idempotency record.
    pub(super) charge_calls: u64,
    pub(super) refunds: Journal<ProviderRefund>,
    /// What was refunded of a charge (by position), and what a partial capture charged:
    /// a refund never returns more than was taken.
    refunded: BTreeMap<u64, i64>,
    partly_captured: BTreeMap<u64, i64>,
    /// Every refund call, including those answered from the idempotency record.
    pub(super) refund_calls: u64,
    /// The first answer to each capture or cancel key, refusals included.
    pub(super) updates: Journal<Result<ChargeUpdate, String>>,
    /// Every capture and cancel call, including those answered from the idempotency record.
    pub(super) capture_calls: u64,
    pub(super) cancel_calls: u64,
    prune: PruneTimer,
}

/// Random for each ledger, so that charge ids of an earlier process, still in the database,
/// are not given out again.
struct FirstCharge(u128);

impl Default for FirstCharge {
    fn default() -> Self {
        Self(uuid::Uuid::new_v4().as_u128())
    }
}

/// A charge as the ledger keeps it, in 16 bytes besides its key: its id from its position,
/// its reference the key (or in [`Ledger::unusual`]).
pub(super) struct StoredCharge {
    pub(super) amount: i64,
    /// The currency's three bytes (or spaces, when it is in [`Ledger::unusual`]).
    currency: [u8; 3],
    pub(super) status: ProviderStatus,
    pub(super) failure: Option<Failure>,
    /// How a pending charge completes, until it does.
    pub(super) pending: Option<Pending>,
}

impl HeapBytes for StoredCharge {
    fn heap_bytes(&self) -> usize {
        0
    }
}

/// How a pending (async) charge completes.
#[derive(Clone, Copy)]
pub(super) struct Pending {
    pub(super) declines: bool,
    pub(super) capture: bool,
}

#[derive(Default)]
struct Unusual {
    reference: Option<Box<str>>,
    currency: Option<Box<str>>,
}

impl Ledger {
    fn charge_id(&self, position: u64) -> String {
        let number = self.first_charge.0.wrapping_add(u128::from(position));
        format!("ch_{}", uuid::Uuid::from_u128(number).simple())
    }

    /// The position of the kept charge with id `charge_id`.
    pub(super) fn charge_position(&self, charge_id: &str) -> Option<u64> {
        let number = uuid::Uuid::try_parse(charge_id.strip_prefix("ch_")?)
            .ok()?
            .as_u128();
        let position = u64::try_from(number.wrapping_sub(self.first_charge.0)).ok()?;
        // A charge it made and keeps, by exactly the id it gave out (not another spelling).
        (position >= self.charges.first()
            && position < self.charges.end()
            && self.charge_id(position) == charge_id)
            .then_some(position)
    }

    /// Records a new charge for `key`, `now`: its position.
    pub(super) fn record_charge(
        &mut self,
        key: &str,
        request: &ChargeRequest,
        (status, failure): (ProviderStatus, Option<Failure>),
        pending: Option<Pending>,
        now: Timestamp,
    ) -> u64 {
        let mut unusual = Unusual::default();
        let currency = match <[u8; 3]>::try_from(request.currency.as_bytes()) {
            Ok(code) if !code.contains(&b' ') => code,
            _ => {
                unusual.currency = Some(request.currency.as_str().into());
                [b' '; 3]
            }
        };
        if request.reference != key {
            unusual.reference = Some(request.reference.as_str().into());
        }
        let stored = StoredCharge {
            amount: request.amount,
            currency,
            status,
            failure,
            pending,
        };
        let position = self.charges.record(key, stored, now);
        if unusual.reference.is_some() || unusual.currency.is_some() {
            self.unusual.insert(position, unusual);
        }
        position
    }

    pub(super) fn reference(&self, position: u64) -> Cow<'_, str> {
        match self
            .unusual
            .get(&position)
            .and_then(|u| u.reference.as_deref())
        {
            Some(reference) => Cow::Borrowed(reference),
            None => self.charges.key(position).unwrap_or_default(),
        }
    }

    pub(super) fn currency(&self, position: u64) -> &str {
        if let Some(currency) = self
            .unusual
            .get(&position)
            .and_then(|u| u.currency.as_deref())
        {
            return currency;
        }
        self.charges
            .at(position)
            .and_then(|c| std::str::from_utf8(&c.currency).ok())
            .unwrap_or_default()
    }

    /// Why a refund cannot be made (its failure code), if it cannot: only money a charge
    /// took can go back, once.
    pub(super) fn refusal_of(&self, request: &RefundRequest) -> Option<&'static str> {
        let Some((position, charge)) = self
            .charge_position(&request.charge)
            .and_then(|p| Some((p, self.charges.at(p)?)))
        else {
            return Some("charge_not_found");
        };
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

    /// Counts a refund of the charge at `position`.
    pub(super) fn refund_from(&mut self, position: u64, amount: i64) {
        *self.refunded.entry(position).or_default() += amount;
    }

    /// Captures or cancels the authorized charge `charge_id`, or says why not.
    pub(super) fn move_charge(
        &mut self,
        charge_id: &str,
        change: ChargeMove,
    ) -> Result<ChargeUpdate, String> {
        let Some((position, charge)) = self
            .charge_position(charge_id)
            .and_then(|p| Some((p, self.charges.at(p)?)))
        else {
            return Err(format!("no such charge: {charge_id}"));
        };
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
        if let Some(captured) = amount_captured.filter(|captured| *captured < charge.amount) {
            self.partly_captured.insert(position, captured);
        }
        let reference = self.reference(position).into_owned();
        if let Some(charge) = self.charges.at_mut(position) {
            charge.status = status;
        }
        Ok(ChargeUpdate {
            id: charge_id.to_owned(),
            status,
            amount_captured,
            reference,
        })
    }

    /// Finishes the pending charge `charge_id`, once: its position, or `None` if it is not
    /// kept or not pending.
    pub(super) fn complete_pending(&mut self, charge_id: &str) -> Option<u64> {
        let position = self.charge_position(charge_id)?;
        let charge = self.charges.at_mut(position)?;
        let pending = charge.pending.take()?;
        let (status, failure) = decide_async(pending.declines);
        charge.status = held_unless_captured(status, pending.capture);
        charge.failure = failure;
        Some(position)
    }

    pub(super) fn charge_at(&self, position: u64) -> Option<Charge> {
        let c = self.charges.at(position)?;
        Some(Charge {
            id: self.charge_id(position),
            status: c.status,
            amount: c.amount,
            currency: self.currency(position).to_owned(),
            reference: self.reference(position).into_owned(),
            failure_code: c.failure.map(|f| f.code().to_owned()),
            failure_message: c.failure.map(|f| f.message().to_owned()),
        })
    }

    /// What the settlement report shows of the charge at `position` (its charge movement).
    pub(super) fn shared(&self, low: u32) -> Option<SharedCharge<'_>> {
        let position = self.charges.widen(low);
        Some(SharedCharge {
            reference: self.reference(position),
            amount: self.charges.at(position)?.amount,
            currency: self.currency(position),
        })
    }

    /// Lets go of what is older than the windows (retention.rs), at most once a second;
    /// keeps every charge from `keep_from` on (the settlement report still shows it).
    pub(super) fn prune(&mut self, now: Timestamp, keep_from: impl FnOnce() -> u64) {
        if !self.prune.due(now) {
            return;
        }
        let (forget, drop) = (now - KEY_WINDOW, now - RECORDS_KEPT);
        self.charges.forget_keys_before(forget);
        self.refunds.forget_keys_before(forget);
        self.updates.forget_keys_before(forget);
        let first = self.charges.drop_before(drop, keep_from());
        self.refunds.drop_before(drop, u64::MAX);
        self.updates.drop_before(drop, u64::MAX);
        // One by one from the oldest (`split_off` may count the part it keeps).
        for map in [&mut self.refunded, &mut self.partly_captured] {
            while map.first_key_value().is_some_and(|(at, _)| *at < first) {
                map.pop_first();
            }
        }
        while self
            .unusual
            .first_key_value()
            .is_some_and(|(at, _)| *at < first)
        {
            self.unusual.pop_first();
        }
    }

    /// The bytes it holds (see [`Journal::memory_bytes`]).
    pub(super) fn memory_bytes(&self) -> usize {
        let unusual = self.unusual.values().map(|u| {
            u.reference.as_ref().map_or(0, |r| r.len()) + u.currency.as_ref().map_or(0, |c| c.len())
        });
        self.charges.memory_bytes()
            + btree_bytes(&self.unusual)
            + unusual.sum::<usize>()
            + self.refunds.memory_bytes()
            + btree_bytes(&self.refunded)
            + btree_bytes(&self.partly_captured)
            + self.updates.memory_bytes()
    }
}

/// What a capture or cancel does to an authorized charge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChargeMove {
    Capture(i64),
    Cancel,
}
