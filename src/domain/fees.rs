//! What the platform keeps of each movement and how long a charge's money stays pending:
//! the terms the ledger posts by (`FEE_PERCENT_BPS`, `FEE_FIXED`, `DISPUTE_FEE`,
//! `BALANCE_PENDING_MS`).

use std::time::Duration;

use super::time::Timestamp;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerPolicy {
    /// Basis points of a captured amount.
    pub fee_percent_bps: i64,
    /// Added to every captured charge's fee, in the charge's minor units.
    pub fee_fixed: i64,
    /// Kept on every dispute, in the disputed charge's minor units.
    pub dispute_fee: i64,
    /// How long a charge's net stays `pending` after its capture.
    pub pending: Duration,
}

impl Default for LedgerPolicy {
    fn default() -> Self {
        Self {
            fee_percent_bps: 290,
            fee_fixed: 30,
            dispute_fee: 1500,
            pending: Duration::from_millis(172_800_000),
        }
    }
}

impl LedgerPolicy {
    /// `min(amount, ⌊amount × bps / 10 000 + ½⌋ + fixed)`: never more than the charge.
    pub fn charge_fee(&self, amount: i64) -> i64 {
        let amount = amount.max(0);
        let percent = (amount.saturating_mul(self.fee_percent_bps) + 5_000) / 10_000;
        amount.min(percent.saturating_add(self.fee_fixed))
    }

    /// When money captured at `at` becomes available.
    pub fn available_on(&self, at: Timestamp) -> Timestamp {
        chrono::TimeDelta::from_std(self.pending)
            .ok()
            .and_then(|pending| at.checked_add_signed(pending))
            .unwrap_or(at)
    }
}

#[cfg(test)]
mod tests {
    use super::LedgerPolicy;

    #[test]
    fn the_fee_rounds_half_up_and_never_exceeds_the_charge() {
        let policy = LedgerPolicy::default();
        // 2000 × 2.9 % = 58, + 30.
        assert_eq!(policy.charge_fee(2000), 88);
        // 1050 × 2.9 % = 30.45 → 30; 1052 × 2.9 % = 30.508 → 31.
        assert_eq!(policy.charge_fee(1050), 60);
        assert_eq!(policy.charge_fee(1052), 61);
        // A charge smaller than the fixed part pays all of itself, no more.
        assert_eq!(policy.charge_fee(20), 20);
        assert_eq!(policy.charge_fee(0), 0);
        let free = LedgerPolicy {
            fee_percent_bps: 0,
            fee_fixed: 0,
            ..policy
        };
        assert_eq!(free.charge_fee(2000), 0);
    }
}
