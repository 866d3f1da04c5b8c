// Kept in step with migrations/*/: the same columns in both backends, with types common
// to PostgreSQL and SQLite (TEXT ids, TIMESTAMP in UTC).

diesel::table! {
    merchants (id) {
        id -> Text,
        name -> Text,
        created_at -> Timestamp,
    }
}

diesel::table! {
    api_keys (key_hash) {
        key_hash -> Text,
        merchant_id -> Text,
        created_at -> Timestamp,
        id -> Text,
        label -> Nullable<Text>,
        last4 -> Nullable<Text>,
        revoked_at -> Nullable<Timestamp>,
    }
}

diesel::table! {
    payments (id) {
        id -> Text,
        merchant_id -> Text,
        idempotency_key -> Text,
        request_fingerprint -> Text,
        amount -> BigInt,
        currency -> Text,
        payment_method -> Text,
        customer_id -> Nullable<Text>,
        description -> Nullable<Text>,
        metadata -> Text,
        status -> Text,
        amount_refunded -> BigInt,
        amount_reserved -> BigInt,
        provider_charge_id -> Nullable<Text>,
        failure_code -> Nullable<Text>,
        failure_message -> Nullable<Text>,
        response_status -> Nullable<Integer>,
        response_body -> Nullable<Text>,
        lease_token -> Nullable<Text>,
        lease_expires_at -> Nullable<Timestamp>,
        provider_attempts -> Integer,
        created_at -> Timestamp,
        updated_at -> Timestamp,
        capture_method -> Text,
        amount_capturable -> BigInt,
        amount_captured -> BigInt,
        cancellation_reason -> Nullable<Text>,
        authorized_at -> Nullable<Timestamp>,
        operation_id -> Nullable<Text>,
        amount_disputed -> BigInt,
        disputes_open -> Integer,
    }
}

diesel::table! {
    payment_operations (id) {
        id -> Text,
        merchant_id -> Text,
        payment_id -> Text,
        kind -> Text,
        idempotency_key -> Text,
        request_fingerprint -> Text,
        amount -> BigInt,
        cancellation_reason -> Nullable<Text>,
        provider_charge_id -> Nullable<Text>,
        status -> Text,
        response_status -> Nullable<Integer>,
        response_body -> Nullable<Text>,
        lease_token -> Nullable<Text>,
        lease_expires_at -> Nullable<Timestamp>,
        provider_attempts -> Integer,
        created_at -> Timestamp,
        updated_at -> Timestamp,
    }
}

diesel::table! {
    webhook_events (id) {
        id -> Text,
        body_sha256 -> Text,
        event_type -> Text,
        received_at -> Timestamp,
    }
}

diesel::table! {
    refunds (id) {
        id -> Text,
        merchant_id -> Text,
        payment_id -> Text,
        idempotency_key -> Text,
        request_fingerprint -> Text,
        amount -> BigInt,
        currency -> Text,
        status -> Text,
        reason -> Nullable<Text>,
        provider_refund_id -> Nullable<Text>,
        failure_code -> Nullable<Text>,
        response_status -> Nullable<Integer>,
        response_body -> Nullable<Text>,
        lease_token -> Nullable<Text>,
        lease_expires_at -> Nullable<Timestamp>,
        provider_attempts -> Integer,
        created_at -> Timestamp,
        updated_at -> Timestamp,
    }
}

diesel::joinable!(api_keys -> merchants (merchant_id));
diesel::joinable!(payments -> merchants (merchant_id));
diesel::joinable!(refunds -> payments (payment_id));
diesel::joinable!(payment_operations -> payments (payment_id));
diesel::allow_tables_to_appear_in_same_query!(
    merchants,
    api_keys,
    payments,
    payment_operations,
    refunds,
    webhook_events
);

diesel::table! {
    event_sequence (id) {
        id -> Integer,
        n -> BigInt,
    }
}

diesel::table! {
    events (id) {
        id -> Text,
        merchant_id -> Text,
        seq -> Nullable<BigInt>,
        event_type -> Text,
        object_id -> Text,
        body -> Text,
        created_at -> Timestamp,
    }
}

diesel::table! {
    webhook_endpoints (id) {
        id -> Text,
        merchant_id -> Text,
        url -> Text,
        enabled_events -> Text,
        description -> Nullable<Text>,
        status -> Text,
        secret -> Text,
        previous_secret -> Nullable<Text>,
        previous_secret_expires_at -> Nullable<Timestamp>,
        failing_since -> Nullable<Timestamp>,
        created_at -> Timestamp,
        updated_at -> Timestamp,
    }
}

diesel::table! {
    webhook_deliveries (id) {
        id -> Text,
        endpoint_id -> Text,
        event_id -> Text,
        event_type -> Text,
        status -> Text,
        attempts -> Integer,
        next_attempt_at -> Nullable<Timestamp>,
        lease_token -> Nullable<Text>,
        lease_expires_at -> Nullable<Timestamp>,
        last_attempt_at -> Nullable<Timestamp>,
        last_status_code -> Nullable<Integer>,
        last_error -> Nullable<Text>,
        last_duration_ms -> Nullable<BigInt>,
        created_at -> Timestamp,
    }
}

diesel::table! {
    idempotency_keys (merchant_id, scope, idempotency_key) {
        merchant_id -> Text,
        scope -> Text,
        idempotency_key -> Text,
        request_fingerprint -> Text,
        response_status -> Nullable<Integer>,
        response_body -> Nullable<Text>,
        lease_token -> Nullable<Text>,
        lease_expires_at -> Nullable<Timestamp>,
        created_at -> Timestamp,
    }
}

diesel::table! {
    balance_transactions (id) {
        id -> Text,
        merchant_id -> Text,
        txn_type -> Text,
        source_id -> Text,
        amount -> BigInt,
        fee -> BigInt,
        net -> BigInt,
        currency -> Text,
        available_on -> Timestamp,
        created_at -> Timestamp,
    }
}

diesel::table! {
    ledger_entries (transaction_id, account) {
        transaction_id -> Text,
        account -> Text,
        merchant_id -> Text,
        currency -> Text,
        amount -> BigInt,
    }
}

diesel::table! {
    payouts (id) {
        id -> Text,
        merchant_id -> Text,
        idempotency_key -> Text,
        request_fingerprint -> Text,
        amount -> BigInt,
        currency -> Text,
        destination -> Text,
        description -> Nullable<Text>,
        status -> Text,
        provider_payout_id -> Nullable<Text>,
        failure_code -> Nullable<Text>,
        response_status -> Nullable<Integer>,
        response_body -> Nullable<Text>,
        lease_token -> Nullable<Text>,
        lease_expires_at -> Nullable<Timestamp>,
        provider_attempts -> Integer,
        created_at -> Timestamp,
        updated_at -> Timestamp,
    }
}

diesel::joinable!(webhook_deliveries -> webhook_endpoints (endpoint_id));
diesel::joinable!(webhook_deliveries -> events (event_id));
diesel::allow_tables_to_appear_in_same_query!(events, webhook_endpoints, webhook_deliveries);

diesel::table! {
    disputes (id) {
        id -> Text,
        merchant_id -> Text,
        payment_id -> Text,
        provider_dispute_id -> Text,
        amount -> BigInt,
        currency -> Text,
        reason -> Text,
        status -> Text,
        evidence_text -> Nullable<Text>,
        evidence_submitted_at -> Nullable<Timestamp>,
        evidence_due_by -> Timestamp,
        step_id -> Nullable<Text>,
        created_at -> Timestamp,
        updated_at -> Timestamp,
    }
}

diesel::table! {
    dispute_steps (id) {
        id -> Text,
        merchant_id -> Text,
        dispute_id -> Text,
        kind -> Text,
        idempotency_key -> Text,
        request_fingerprint -> Text,
        evidence_text -> Nullable<Text>,
        provider_dispute_id -> Nullable<Text>,
        status -> Text,
        response_status -> Nullable<Integer>,
        response_body -> Nullable<Text>,
        lease_token -> Nullable<Text>,
        lease_expires_at -> Nullable<Timestamp>,
        provider_attempts -> Integer,
        created_at -> Timestamp,
        updated_at -> Timestamp,
    }
}

diesel::table! {
    deferred_disputes (webhook_id) {
        webhook_id -> Text,
        provider_dispute_id -> Text,
        payment_id -> Text,
        event_type -> Text,
        data -> Text,
        created_at -> Timestamp,
    }
}

diesel::joinable!(disputes -> payments (payment_id));
diesel::joinable!(dispute_steps -> disputes (dispute_id));
diesel::allow_tables_to_appear_in_same_query!(disputes, payments, dispute_steps, deferred_disputes);

diesel::table! {
    reconciliation_discrepancies (id) {
        id -> Text,
        fingerprint -> Text,
        kind -> Text,
        movement_type -> Text,
        reference -> Text,
        provider_movement_id -> Nullable<Text>,
        expected_amount -> Nullable<BigInt>,
        expected_currency -> Nullable<Text>,
        found_amount -> Nullable<BigInt>,
        found_currency -> Nullable<Text>,
        occurred_at -> Timestamp,
        first_seen_at -> Timestamp,
        last_seen_at -> Timestamp,
        last_run_id -> Text,
        resolved_at -> Nullable<Timestamp>,
    }
}

diesel::table! {
    reconciliation_seen (run_id, movement_type, reference) {
        run_id -> Text,
        movement_type -> Text,
        reference -> Text,
        movement_id -> Text,
    }
}

diesel::table! {
    reconciliation_lease (name) {
        name -> Text,
        holder -> Nullable<Text>,
        held_until -> Nullable<Timestamp>,
        next_run_at -> Nullable<Timestamp>,
    }
}

diesel::allow_tables_to_appear_in_same_query!(
    reconciliation_seen,
    balance_transactions,
    refunds,
    payouts
);
diesel::allow_tables_to_appear_in_same_query!(reconciliation_seen, payments);
diesel::allow_tables_to_appear_in_same_query!(reconciliation_seen, disputes);
diesel::allow_tables_to_appear_in_same_query!(balance_transactions, payments);
diesel::allow_tables_to_appear_in_same_query!(balance_transactions, disputes);
diesel::allow_tables_to_appear_in_same_query!(reconciliation_discrepancies, payments);
diesel::allow_tables_to_appear_in_same_query!(reconciliation_discrepancies, refunds);
diesel::allow_tables_to_appear_in_same_query!(reconciliation_discrepancies, payouts);

diesel::table! {
    dashboard_sessions (token_hash) {
        token_hash -> Text,
        api_key_hash -> Text,
        merchant_id -> Text,
        csrf_token -> Text,
        created_at -> Timestamp,
        expires_at -> Timestamp,
    }
}

diesel::allow_tables_to_appear_in_same_query!(dashboard_sessions, api_keys);
diesel::allow_tables_to_appear_in_same_query!(dashboard_sessions, merchants);
