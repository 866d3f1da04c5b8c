//! Judging one provider movement against what we hold for its reference: a pure function of
//! the movement and our records, so every rule is in one place and tested without a database.

use std::collections::{HashMap, HashSet};

use super::{DiscrepancyKind, Money};
use crate::db::reconciliation::{OurDispute, OurPayment, OurPayout, OurRefund};
use crate::domain::{DisputeStatus, PaymentStatus, PayoutStatus, RefundStatus};
use crate::provider::{MovementKind, SettlementMovement};

/// Our records of one page's references.
#[derive(Default)]
pub(super) struct Ours {
    pub(super) payments: HashMap<String, OurPayment>,
    pub(super) refunds: HashMap<String, OurRefund>,
    pub(super) payouts: HashMap<String, OurPayout>,
    /// By payment id.
    pub(super) disputes: HashMap<String, Vec<OurDispute>>,
}

/// What a movement is to us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Judgement {
    /// Its operation is not final here yet: not judged until it is.
    NotFinal,
    /// We have no money move it could be.
    MissingHere,
    /// It is the movement of one of our money moves, which moved `expected`; `None`: it
    /// agrees, else how it does not. `dispute`: which of the payment's disputes it is (a
    /// dispute's movement names its payment, which may have several).
    Ours {
        expected: Money,
        disagreement: Option<DiscrepancyKind>,
        dispute: Option<String>,
    },
}

/// The movements a run has matched already, by kind and our id (the dispute's for dispute
/// movements, else the reference).
pub(super) type Seen = HashSet<(MovementKind, String)>;

fn compare(expected: Money, movement: &SettlementMovement) -> Judgement {
    let disagreement = if !expected.currency.eq_ignore_ascii_case(&movement.currency) {
        Some(DiscrepancyKind::CurrencyMismatch)
    } else if expected.amount != movement.amount {
        Some(DiscrepancyKind::AmountMismatch)
    } else {
        None
    };
    Judgement::Ours {
        expected,
        disagreement,
        dispute: None,
    }
}

fn money(amount: i64, currency: &str) -> Money {
    Money {
        amount,
        currency: currency.to_owned(),
    }
}

pub(super) fn judge(movement: &SettlementMovement, ours: &Ours, seen: &Seen) -> Judgement {
    let reference = movement.reference.as_str();
    match movement.kind {
        MovementKind::Charge | MovementKind::Capture => {
            let manual = movement.kind == MovementKind::Capture;
            let Some(payment) = ours.payments.get(reference) else {
                return Judgement::MissingHere;
            };
            if (payment.capture_method == "manual") != manual {
                return Judgement::MissingHere;
            }
            match payment.status {
                PaymentStatus::Succeeded => {
                    compare(money(payment.amount_captured, &payment.currency), movement)
                }
                // Still waiting for the provider's answer, or for its capture.
                PaymentStatus::Processing | PaymentStatus::RequiresCapture => Judgement::NotFinal,
                PaymentStatus::Failed | PaymentStatus::Canceled => Judgement::MissingHere,
            }
        }
        MovementKind::Refund => match ours.refunds.get(reference) {
            Some(refund) if refund.status == RefundStatus::Succeeded => {
                compare(money(refund.amount, &refund.currency), movement)
            }
            Some(refund) if refund.status == RefundStatus::Pending => Judgement::NotFinal,
            _ => Judgement::MissingHere,
        },
        MovementKind::Payout => match ours.payouts.get(reference) {
            Some(payout) if payout.status == PayoutStatus::Paid => {
                compare(money(payout.amount, &payout.currency), movement)
            }
            Some(payout) if payout.status == PayoutStatus::Pending => Judgement::NotFinal,
            _ => Judgement::MissingHere,
        },
        MovementKind::Dispute | MovementKind::DisputeReversal => {
            let reversal = movement.kind == MovementKind::DisputeReversal;
            let disputes = ours
                .disputes
                .get(reference)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            let candidates: Vec<&OurDispute> = disputes
                .iter()
                .filter(|d| !reversal || d.status == DisputeStatus::Won)
                .collect();
            // A payment may have several disputes: the movement is the one of the same
            // amount this run has not matched yet; else another movement for one of that
            // amount already matched (a duplicate); else one not matched yet, of another
            // amount (a mismatch).
            let unmatched = |d: &&&OurDispute| !seen.contains(&(movement.kind, d.id.clone()));
            let same_amount = |d: &&&OurDispute| d.amount == movement.amount;
            let dispute = candidates
                .iter()
                .filter(unmatched)
                .find(same_amount)
                .or_else(|| candidates.iter().find(same_amount))
                .or_else(|| candidates.iter().find(unmatched))
                .or_else(|| candidates.first());
            match dispute {
                Some(d) => {
                    let mut judged = compare(money(d.amount, &d.currency), movement);
                    if let Judgement::Ours { dispute, .. } = &mut judged {
                        *dispute = Some(d.id.clone());
                    }
                    judged
                }
                // Open here: its reversal is on its way.
                None if reversal && disputes.iter().any(|d| d.status.is_open()) => {
                    Judgement::NotFinal
                }
                // The opening waits for its payment to be final here.
                None if !reversal
                    && ours.payments.get(reference).is_some_and(|p| {
                        matches!(
                            p.status,
                            PaymentStatus::Processing | PaymentStatus::RequiresCapture
                        )
                    }) =>
                {
                    Judgement::NotFinal
                }
                None => Judgement::MissingHere,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::now;

    fn movement(
        kind: MovementKind,
        reference: &str,
        amount: i64,
        currency: &str,
    ) -> SettlementMovement {
        SettlementMovement {
            id: "mv_1".into(),
            kind,
            reference: reference.into(),
            amount,
            currency: currency.into(),
            created_at: now(),
        }
    }

    fn payment(id: &str, status: PaymentStatus, method: &str, captured: i64) -> OurPayment {
        OurPayment {
            id: id.into(),
            status,
            capture_method: method.into(),
            amount_captured: captured,
            currency: "usd".into(),
        }
    }

    fn ours() -> Ours {
        let mut ours = Ours::default();
        for p in [
            payment("pay_ok", PaymentStatus::Succeeded, "automatic", 2000),
            payment("pay_failed", PaymentStatus::Failed, "automatic", 0),
            payment("pay_wait", PaymentStatus::Processing, "automatic", 0),
            payment("pay_manual", PaymentStatus::Succeeded, "manual", 700),
        ] {
            ours.payments.insert(p.id.clone(), p);
        }
        ours.refunds.insert(
            "re_ok".into(),
            OurRefund {
                id: "re_ok".into(),
                status: RefundStatus::Succeeded,
                amount: 500,
                currency: "usd".into(),
            },
        );
        ours.disputes.insert(
            "pay_ok".into(),
            vec![OurDispute {
                id: "dp_ok".into(),
                payment_id: "pay_ok".into(),
                status: DisputeStatus::UnderReview,
                amount: 2000,
                currency: "usd".into(),
            }],
        );
        ours
    }

    #[test]
    fn each_movement_of_a_payments_disputes_is_one_of_them() {
        let mut ours = ours();
        let dispute = |id: &str, amount| OurDispute {
            id: id.into(),
            payment_id: "pay_ok".into(),
            status: DisputeStatus::Lost,
            amount,
            currency: "usd".into(),
        };
        ours.disputes.insert(
            "pay_ok".into(),
            vec![dispute("dp_a", 600), dispute("dp_b", 400)],
        );
        let mut seen = Seen::new();
        let matched = |j: Judgement| match j {
            Judgement::Ours {
                disagreement,
                dispute,
                ..
            } => (disagreement, dispute.unwrap_or_default()),
            other => panic!("{other:?}"),
        };
        let dispute_of = |amount, seen: &Seen| {
            matched(judge(
                &movement(MovementKind::Dispute, "pay_ok", amount, "usd"),
                &ours,
                seen,
            ))
        };
        assert_eq!(dispute_of(400, &seen), (None, "dp_b".to_owned()));
        seen.insert((MovementKind::Dispute, "dp_b".into()));
        // A second 400: the same dispute again (run.rs calls it a duplicate), not dp_a.
        assert_eq!(dispute_of(400, &seen), (None, "dp_b".to_owned()));
        assert_eq!(dispute_of(600, &seen), (None, "dp_a".to_owned()));
        assert_eq!(
            dispute_of(599, &seen),
            (Some(DiscrepancyKind::AmountMismatch), "dp_a".to_owned())
        );
    }

    fn verdict(j: Judgement) -> Option<Option<DiscrepancyKind>> {
        match j {
            Judgement::Ours { disagreement, .. } => Some(disagreement),
            _ => None,
        }
    }

    #[test]
    fn each_kind_of_movement_is_matched_to_its_own_kind_of_money_move() {
        let ours = ours();
        let j = |m| judge(&m, &ours, &Seen::new());
        assert_eq!(
            verdict(j(movement(MovementKind::Charge, "pay_ok", 2000, "usd"))),
            Some(None)
        );
        assert_eq!(
            verdict(j(movement(MovementKind::Charge, "pay_ok", 1999, "usd"))),
            Some(Some(DiscrepancyKind::AmountMismatch))
        );
        assert_eq!(
            verdict(j(movement(MovementKind::Charge, "pay_ok", 1999, "eur"))),
            Some(Some(DiscrepancyKind::CurrencyMismatch))
        );
        assert_eq!(
            j(movement(MovementKind::Charge, "pay_failed", 2000, "usd")),
            Judgement::MissingHere
        );
        assert_eq!(
            j(movement(MovementKind::Charge, "pay_unknown", 1, "usd")),
            Judgement::MissingHere
        );
        assert_eq!(
            j(movement(MovementKind::Charge, "pay_wait", 1, "usd")),
            Judgement::NotFinal
        );
        assert_eq!(
            j(movement(MovementKind::Charge, "pay_manual", 700, "usd")),
            Judgement::MissingHere,
            "a manual payment moves money by its capture"
        );
        assert_eq!(
            verdict(j(movement(MovementKind::Capture, "pay_manual", 700, "usd"))),
            Some(None)
        );
        assert_eq!(
            verdict(j(movement(MovementKind::Refund, "re_ok", 500, "USD"))),
            Some(None)
        );
        assert_eq!(
            j(movement(MovementKind::Refund, "re_other", 500, "usd")),
            Judgement::MissingHere
        );
        assert_eq!(
            j(movement(MovementKind::Payout, "po_x", 5, "usd")),
            Judgement::MissingHere
        );
        assert_eq!(
            verdict(j(movement(MovementKind::Dispute, "pay_ok", 2000, "usd"))),
            Some(None)
        );
        assert_eq!(
            j(movement(
                MovementKind::DisputeReversal,
                "pay_ok",
                2000,
                "usd"
            )),
            Judgement::NotFinal,
            "under review: its reversal may be on its way"
        );
        assert_eq!(
            j(movement(MovementKind::Dispute, "pay_wait", 10, "usd")),
            Judgement::NotFinal
        );
        assert_eq!(
            j(movement(MovementKind::Dispute, "pay_failed", 10, "usd")),
            Judgement::MissingHere
        );
    }
}
