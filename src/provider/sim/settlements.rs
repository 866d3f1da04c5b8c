//! The simulator's settlement report: every movement of money it made, in the order it made
//! them, read in pages by time window (`GET /v1/settlements`).

use std::sync::{Mutex, MutexGuard};

use crate::domain::{Timestamp, now};
use crate::provider::{MovementKind, SettlementMovement, SettlementPage, SettlementQuery};

/// One movement as kept: 40 bytes and its reference.
struct Kept {
    kind: MovementKind,
    amount: i64,
    at: Timestamp,
    currency: [u8; 3],
    reference: Box<str>,
}

/// Every movement the simulator made, oldest first (recorded under one lock, with the time
/// taken under it, so the order is the time order).
pub struct Settlements {
    moves: Mutex<Vec<Kept>>,
    /// Random for each simulator, so that movement ids of another process never repeat.
    prefix: u32,
}

impl Default for Settlements {
    fn default() -> Self {
        Self {
            moves: Mutex::default(),
            prefix: (uuid::Uuid::new_v4().as_u128() >> 96) as u32,
        }
    }
}

impl Settlements {
    fn moves(&self) -> MutexGuard<'_, Vec<Kept>> {
        // A push cannot be half done: a poisoned lock still holds whole movements.
        self.moves.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records one movement of money, now.
    pub fn record(&self, kind: MovementKind, reference: &str, amount: i64, currency: &str) {
        let mut code = [b' '; 3];
        for (slot, byte) in code.iter_mut().zip(currency.bytes()) {
            *slot = byte;
        }
        let mut moves = self.moves();
        let at = now();
        moves.push(Kept {
            kind,
            amount,
            at,
            currency: code,
            reference: reference.into(),
        });
    }

    fn id(&self, position: usize) -> String {
        format!("mv_{:08x}{position:012}", self.prefix)
    }

    fn position_of(&self, id: &str) -> Option<usize> {
        let rest = id.strip_prefix("mv_")?;
        let (prefix, position) = rest.split_at_checked(8)?;
        (u32::from_str_radix(prefix, 16).ok()? == self.prefix)
            .then(|| position.parse().ok())
            .flatten()
    }

    /// A page of the movements made in `[created_gte, created_lt)`, oldest first, after
    /// `starting_after` (a movement id of this report). `None`: `starting_after` is not one.
    pub fn page(&self, query: &SettlementQuery) -> Option<SettlementPage> {
        let moves = self.moves();
        let from = moves.partition_point(|m| m.at < query.created_gte);
        let start = match &query.starting_after {
            None => from,
            Some(id) => (self.position_of(id)? + 1).max(from),
        };
        let limit = query.limit.clamp(1, 1000);
        let mut data = Vec::new();
        let mut position = start;
        while let Some(kept) = moves.get(position) {
            if kept.at >= query.created_lt {
                break;
            }
            if data.len() == limit {
                return Some(SettlementPage {
                    data,
                    has_more: true,
                });
            }
            data.push(SettlementMovement {
                id: self.id(position),
                kind: kept.kind,
                reference: kept.reference.to_string(),
                amount: kept.amount,
                currency: String::from_utf8_lossy(&kept.currency).trim().to_owned(),
                created_at: kept.at,
            });
            position += 1;
        }
        Some(SettlementPage {
            data,
            has_more: false,
        })
    }

    /// How many movements there are.
    pub fn len(&self) -> usize {
        self.moves().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(limit: usize, starting_after: Option<String>) -> SettlementQuery {
        SettlementQuery {
            created_gte: now() - chrono::Duration::hours(1),
            created_lt: now() + chrono::Duration::hours(1),
            limit,
            starting_after,
        }
    }

    #[test]
    fn movements_are_read_oldest_first_in_pages_within_the_window() {
        let report = Settlements::default();
        for n in 0..5 {
            report.record(MovementKind::Charge, &format!("pay_{n}"), 100 + n, "usd");
        }
        let first = report.page(&query(2, None)).unwrap();
        assert!(first.has_more);
        assert_eq!(first.data[0].reference, "pay_0");
        assert_eq!(first.data[0].currency, "usd");
        let second = report
            .page(&query(2, Some(first.data[1].id.clone())))
            .unwrap();
        assert_eq!(second.data[0].reference, "pay_2");
        let last = report
            .page(&query(10, Some(second.data[1].id.clone())))
            .unwrap();
        assert_eq!((last.data.len(), last.has_more), (1, false));
        assert!(report.page(&query(2, Some("mv_x".into()))).is_none());
        assert!(
            Settlements::default()
                .page(&query(2, Some(first.data[0].id.clone())))
                .is_none(),
            "another report's id"
        );
        let mut past = query(10, None);
        past.created_lt = past.created_gte;
        assert!(report.page(&past).unwrap().data.is_empty());
    }
}
