//! The statuses of the objects that hold money, of webhook deliveries and of webhook
//! endpoints, and the moves each may make: written here once per object. Rows hold them typed (stored as their text); every guarded update that
//! moves one names the status it expects from these types, never from a loose string.

/// Defines a status enum stored as text: its variants and their text, `as_str`, `parse`,
/// and the conversions diesel uses to read and write the column.
macro_rules! status {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, utoipa::ToSchema)]
        #[schema(rename_all = "snake_case")]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text),+
                }
            }

            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text => Some(Self::$variant),)+
                    _ => None,
                }
            }

            /// `next` if this status may become it, else the refusal to store nothing.
            pub fn move_to(self, next: Self) -> Result<Self, IllegalMove> {
                if self.can_become(next) {
                    Ok(next)
                } else {
                    Err(IllegalMove {
                        object: stringify!($name),
                        from: self.as_str(),
                        to: next.as_str(),
                    })
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        /// How diesel reads the column: text no variant has is a corrupt row, an error.
        impl TryFrom<String> for $name {
            type Error = String;

            fn try_from(text: String) -> Result<Self, String> {
                Self::parse(&text)
                    .ok_or_else(|| format!("{} holds an unknown value {text:?}", stringify!($name)))
            }
        }

        /// How diesel writes the column.
        impl From<$name> for String {
            fn from(status: $name) -> String {
                status.as_str().to_owned()
            }
        }
    };
}

/// A move no object may make: a bug, refused before anything is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a {object} cannot move from `{from}` to `{to}`")]
pub struct IllegalMove {
    pub object: &'static str,
    pub from: &'static str,
    pub to: &'static str,
}

impl From<IllegalMove> for diesel::result::Error {
    fn from(e: IllegalMove) -> Self {
        Self::QueryBuilderError(Box::new(e))
    }
}

status!(
    /// A payment's status.
    PaymentStatus {
        /// Claimed; the provider's answer is not known yet.
        Processing = "processing",
        /// Authorized; waiting for its one capture or cancel (or the expiry).
        RequiresCapture = "requires_capture",
        Succeeded = "succeeded",
        Failed = "failed",
        Canceled = "canceled",
    }
);

impl PaymentStatus {
    /// The legal moves of a payment:
    /// - `processing` → `requires_capture` | `succeeded` | `failed`: the provider's answer,
    ///   by whichever path it arrives (request, retry, recovery, webhook);
    /// - `requires_capture` → `succeeded` (its capture) | `canceled` (its cancel, or the
    ///   expiry).
    ///
    /// Nothing else moves; `succeeded`, `failed` and `canceled` are final.
    pub fn can_become(self, next: Self) -> bool {
        use PaymentStatus::*;
        matches!(
            (self, next),
            (Processing, RequiresCapture | Succeeded | Failed)
                | (RequiresCapture, Succeeded | Canceled)
        )
    }

    /// Whether a provider's answer has been recorded (every status but `processing`).
    pub fn is_final_answer(self) -> bool {
        self != Self::Processing
    }
}

status!(
    /// A refund's status.
    RefundStatus {
        /// Its amount is reserved on the payment; the provider's answer is not known yet.
        Pending = "pending",
        Succeeded = "succeeded",
        Failed = "failed",
        /// A request refused with a stored 409/422: it holds its key, not money, and is no
        /// refund (never listed, never counted).
        Rejected = "rejected",
    }
);

impl RefundStatus {
    /// The legal moves of a refund: `pending` → `succeeded` | `failed`. A refusal is
    /// `rejected` from its insert and never moves.
    pub fn can_become(self, next: Self) -> bool {
        use RefundStatus::*;
        matches!((self, next), (Pending, Succeeded | Failed))
    }
}

status!(
    /// A payout's status.
    PayoutStatus {
        /// Its amount has left the available balance; the provider's answer is not known
        /// yet (or it is on its way, finished by the provider's webhook).
        Pending = "pending",
        Paid = "paid",
        Failed = "failed",
        /// A request refused with a stored 422 `insufficient_balance`: it holds its key, not
        /// money, and is no payout (never listed).
        Rejected = "rejected",
    }
);

impl PayoutStatus {
    /// The legal moves of a payout: `pending` → `paid` | `failed`. A refusal is `rejected`
    /// from its claim and never moves.
    pub fn can_become(self, next: Self) -> bool {
        use PayoutStatus::*;
        matches!((self, next), (Pending, Paid | Failed))
    }
}

status!(
    /// The status of a step taken on an existing object: a capture or cancel of an
    /// authorized payment, the evidence or close of a dispute.
    StepStatus {
        /// It holds its object (the authorization, the dispute); the provider's answer is
        /// not known yet.
        Pending = "pending",
        /// Done: the provider captured, canceled, took the evidence or closed, and the
        /// object moved (or the step only wrote the database).
        Succeeded = "succeeded",
        /// The provider refused (a final 4xx): nothing moved, the object was let go (or,
        /// for the expiry's cancel, canceled here all the same).
        Failed = "failed",
        /// Refused before the provider was asked (409/422), with that answer stored.
        Rejected = "rejected",
    }
);

impl StepStatus {
    /// The legal moves of a step: `pending` → `succeeded` | `failed`. A
    /// refusal is `rejected` from its claim and never moves.
    pub fn can_become(self, next: Self) -> bool {
        use StepStatus::*;
        matches!((self, next), (Pending, Succeeded | Failed))
    }
}

status!(
    /// A dispute's status.
    DisputeStatus {
        /// Opened by the provider; the merchant may send evidence or accept the loss.
        NeedsResponse = "needs_response",
        /// Evidence submitted; the card network decides.
        UnderReview = "under_review",
        Won = "won",
        Lost = "lost",
    }
);

impl DisputeStatus {
    /// The legal moves of a dispute, forward only: `needs_response` → `under_review` |
    /// `won` | `lost`, and `under_review` → `won` | `lost`. `won` and `lost` are final.
    pub fn can_become(self, next: Self) -> bool {
        use DisputeStatus::*;
        matches!(
            (self, next),
            (NeedsResponse, UnderReview | Won | Lost) | (UnderReview, Won | Lost)
        )
    }

    /// Open: refunds of its payment wait for it to close.
    pub fn is_open(self) -> bool {
        matches!(self, Self::NeedsResponse | Self::UnderReview)
    }
}

status!(
    /// `pending` until delivered (`succeeded`) or given up (`failed`).
    DeliveryStatus {
        Pending = "pending",
        Succeeded = "succeeded",
        Failed = "failed",
    }
);

impl DeliveryStatus {
    /// The legal moves of a webhook delivery, one per attempt that ends: `pending` →
    /// `succeeded` (a 2xx) | `failed` (the last attempt, or a 410) | `pending` (another
    /// attempt is scheduled). `succeeded` and `failed` are final: a replay queues a new
    /// delivery.
    pub fn can_become(self, next: Self) -> bool {
        use DeliveryStatus::*;
        matches!((self, next), (Pending, Pending | Succeeded | Failed))
    }
}

status!(
    /// `enabled` or `disabled`.
    EndpointStatus {
        Enabled = "enabled",
        Disabled = "disabled",
    }
);

impl EndpointStatus {
    /// The legal moves of a webhook endpoint: `enabled` → `disabled` (by its merchant, after
    /// failing for `WEBHOOK_DISABLE_AFTER`, or at once on a 410) and `disabled` → `enabled`
    /// (by its merchant only).
    pub fn can_become(self, next: Self) -> bool {
        use EndpointStatus::*;
        matches!((self, next), (Enabled, Disabled) | (Disabled, Enabled))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_reads_back_what_it_writes() {
        for status in PaymentStatus::ALL {
            assert_eq!(PaymentStatus::try_from(String::from(*status)), Ok(*status));
        }
        for status in RefundStatus::ALL {
            assert_eq!(RefundStatus::try_from(String::from(*status)), Ok(*status));
        }
        for status in StepStatus::ALL {
            assert_eq!(StepStatus::try_from(String::from(*status)), Ok(*status));
        }
        for status in DisputeStatus::ALL {
            assert_eq!(DisputeStatus::try_from(String::from(*status)), Ok(*status));
        }
        for status in DeliveryStatus::ALL {
            assert_eq!(DeliveryStatus::try_from(String::from(*status)), Ok(*status));
        }
        for status in EndpointStatus::ALL {
            assert_eq!(EndpointStatus::try_from(String::from(*status)), Ok(*status));
        }
        assert!(PaymentStatus::try_from("paid".to_owned()).is_err());
    }

    #[test]
    fn final_statuses_never_move_and_nothing_moves_backwards() {
        use PaymentStatus::*;
        for from in [Succeeded, Failed, Canceled] {
            for to in PaymentStatus::ALL {
                assert!(!from.can_become(*to), "{from} → {to}");
            }
        }
        assert!(!RequiresCapture.can_become(Processing));
        assert!(!RequiresCapture.can_become(Failed));
        assert!(Processing.can_become(RequiresCapture));
        assert_eq!(
            Succeeded.move_to(Processing),
            Err(IllegalMove {
                object: "PaymentStatus",
                from: "succeeded",
                to: "processing"
            })
        );
        assert!(!RefundStatus::Succeeded.can_become(RefundStatus::Failed));
        assert!(!RefundStatus::Rejected.can_become(RefundStatus::Succeeded));
        assert!(!StepStatus::Failed.can_become(StepStatus::Succeeded));
        for from in [DeliveryStatus::Succeeded, DeliveryStatus::Failed] {
            for to in DeliveryStatus::ALL {
                assert!(!from.can_become(*to), "{from} → {to}");
            }
        }
        assert!(DeliveryStatus::Pending.can_become(DeliveryStatus::Pending));
        use DisputeStatus::{Lost, NeedsResponse, UnderReview, Won};
        for from in [Won, Lost] {
            for to in DisputeStatus::ALL {
                assert!(!from.can_become(*to), "{from} → {to}");
            }
        }
        assert!(!UnderReview.can_become(NeedsResponse));
        assert!(NeedsResponse.can_become(Lost) && UnderReview.can_become(Won));
        assert!(!EndpointStatus::Enabled.can_become(EndpointStatus::Enabled));
        assert!(EndpointStatus::Disabled.can_become(EndpointStatus::Enabled));
    }
}
