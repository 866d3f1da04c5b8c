/// An amount of money in integer minor units (cents): 1 … 99 999 999 for what a payment
/// moves (a payment, its capture, its refunds); a payout's only bound is the balance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Amount(i64);

impl Amount {
    pub const MIN: i64 = 1;
    pub const MAX: i64 = 99_999_999;
    /// A payout's largest: the largest integer every JSON reader holds exactly (2^53 − 1);
    /// what may really be paid out is the available balance, checked when it is claimed.
    pub const PAYOUT_MAX: i64 = 9_007_199_254_740_991;

    pub fn parse(value: i64) -> Result<Self, String> {
        Self::parse_up_to(value, Self::MAX)
    }

    /// A payout's amount: any integer ≥ 1 a JSON reader holds exactly.
    pub fn parse_payout(value: i64) -> Result<Self, String> {
        Self::parse_up_to(value, Self::PAYOUT_MAX)
    }

    fn parse_up_to(value: i64, max: i64) -> Result<Self, String> {
        if (Self::MIN..=max).contains(&value) {
            Ok(Self(value))
        } else {
            Err(format!(
                "must be an integer between {} and {max} (minor units)",
                Self::MIN
            ))
        }
    }

    pub fn minor_units(self) -> i64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::Amount;

    #[test]
    fn accepts_the_bounds() {
        assert_eq!(Amount::parse(1).map(Amount::minor_units), Ok(1));
        assert_eq!(
            Amount::parse(99_999_999).map(Amount::minor_units),
            Ok(99_999_999)
        );
    }

    #[test]
    fn a_payout_is_bounded_by_json_not_by_a_payment() {
        assert_eq!(
            Amount::parse_payout(150_000_000).map(Amount::minor_units),
            Ok(150_000_000)
        );
        assert!(Amount::parse_payout(Amount::PAYOUT_MAX).is_ok());
        for v in [0, -1, Amount::PAYOUT_MAX + 1] {
            assert!(Amount::parse_payout(v).is_err(), "{v} should be rejected");
        }
    }

    #[test]
    fn rejects_zero_negative_and_too_large() {
        for v in [0, -1, 100_000_000, i64::MAX, i64::MIN] {
            assert!(Amount::parse(v).is_err(), "{v} should be rejected");
        }
    }
}
