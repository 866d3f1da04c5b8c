//! Final answers already seen in this process, answered from memory.

use std::sync::Arc;

use super::answer::{Answer, scope_key};

/// Final answers already seen, by (resource, merchant, key): a replay or a reuse is
/// answered from memory, with no database round trip.
///
/// Safe because a final answer never changes once stored (the contract fixes it from that
/// moment, in every instance), and a key is never freed; only final answers go in, so the
/// insert still decides every winner. Bounded by size ([`FinalAnswers::MAX_BYTES`]):
/// `quick_cache` evicts with S3-FIFO, which keeps the hot entries (a retry storm's key)
/// and lets one-hit entries go first; a miss only costs the database lookup it would have
/// cost anyway.
#[derive(Clone)]
pub struct FinalAnswers {
    answers: Arc<quick_cache::sync::Cache<String, (String, Answer), AnswerWeight>>,
}

/// An entry's weight is its size in bytes, roughly: the scope key, the fingerprint, the
/// body and the bookkeeping around them.
#[derive(Clone)]
struct AnswerWeight;

impl quick_cache::Weighter<String, (String, Answer)> for AnswerWeight {
    fn weight(&self, key: &String, (fingerprint, answer): &(String, Answer)) -> u64 {
        (key.len() + fingerprint.len() + answer.body.len() + 96) as u64
    }
}

impl Default for FinalAnswers {
    fn default() -> Self {
        Self::with_capacity(Self::MAX_BYTES)
    }
}

impl FinalAnswers {
    /// What the map may hold: about 2 MiB, some 1 500 payment answers (a retry storm's
    /// key stays; a miss costs one database read). Measured: 8 MiB cost 6 MiB of peak RSS.
    pub const MAX_BYTES: u64 = 2 * 1024 * 1024;

    pub fn with_capacity(max_bytes: u64) -> Self {
        let estimated_items = usize::try_from(max_bytes / 1400).unwrap_or(1024).max(16);
        Self {
            answers: Arc::new(quick_cache::sync::Cache::with_weighter(
                estimated_items,
                max_bytes,
                AnswerWeight,
            )),
        }
    }

    /// The stored `(fingerprint, answer)` of this key, if seen here.
    pub fn get(
        &self,
        scope: &str,
        merchant_id: &str,
        idempotency_key: &str,
    ) -> Option<(String, Answer)> {
        self.answers
            .get(&scope_key(scope, merchant_id, idempotency_key))
    }

    /// What a request with this key and fingerprint is answered from memory, if the key's
    /// final answer is known here: the replay, or 422 for a different request.
    /// `resource` names the request in the metrics; `scope` is the key's scope.
    pub fn answer(
        &self,
        resource: &'static str,
        scope: &str,
        merchant_id: &str,
        idempotency_key: &str,
        fingerprint: &str,
    ) -> Option<Result<Answer, crate::error::ApiError>> {
        use crate::metrics::{IdempotencyOutcome, idempotency};
        let (stored, answer) = self.get(scope, merchant_id, idempotency_key)?;
        if stored != fingerprint {
            idempotency(resource, IdempotencyOutcome::Reused);
            return Some(Err(crate::error::ApiError::IdempotencyKeyReused));
        }
        idempotency(resource, IdempotencyOutcome::Replayed);
        Some(Ok(answer.replayed()))
    }

    /// Remembers a final answer (anything else is ignored).
    pub fn remember(
        &self,
        scope: &str,
        merchant_id: &str,
        idempotency_key: &str,
        fingerprint: &str,
        answer: &Answer,
    ) {
        if !answer.is_final() {
            return;
        }
        let mut stored = answer.clone();
        stored.replayed = false;
        self.answers.insert(
            scope_key(scope, merchant_id, idempotency_key),
            (fingerprint.to_owned(), stored),
        );
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.answers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.answers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_answers_replay_the_same_request_and_refuse_another() {
        let answers = FinalAnswers::default();
        answers.remember(
            "payment",
            "mer_1",
            "k",
            "fp-a",
            &Answer::new(201, "{\"a\":1}"),
        );
        answers.remember(
            "payment",
            "mer_1",
            "pending",
            "fp-a",
            &Answer::new(202, "{}"),
        );

        let replay = answers
            .answer("payment", "payment", "mer_1", "k", "fp-a")
            .unwrap()
            .unwrap();
        assert_eq!(replay, Answer::new(201, "{\"a\":1}").replayed());
        assert!(matches!(
            answers.answer("payment", "payment", "mer_1", "k", "fp-b"),
            Some(Err(crate::error::ApiError::IdempotencyKeyReused))
        ));
        assert!(
            answers
                .answer("payment", "payment", "mer_2", "k", "fp-a")
                .is_none(),
            "per merchant"
        );
        assert!(
            answers
                .answer("refund", "refund", "mer_1", "k", "fp-a")
                .is_none(),
            "per resource"
        );
        assert!(
            answers.get("payment", "mer_1", "pending").is_none(),
            "202 is not final"
        );
    }

    #[test]
    fn final_answers_stay_within_their_size_and_keep_a_hot_key() {
        let answers = FinalAnswers::with_capacity(64 * 1024);
        let body = "x".repeat(900);
        answers.remember(
            "payment",
            "m",
            "hot",
            "fp",
            &Answer::new(201, body.as_str()),
        );
        for i in 0..2000 {
            // The storm's key is asked for again and again while one-off keys stream by.
            assert!(
                answers.get("payment", "m", "hot").is_some(),
                "hot key lost at {i}"
            );
            answers.remember(
                "payment",
                "m",
                &format!("k{i}"),
                "fp",
                &Answer::new(201, body.as_str()),
            );
        }
        assert!(answers.len() < 80, "bounded: {} entries", answers.len());
        assert!(answers.len() > 20, "not emptied: {} entries", answers.len());
    }
}
