//! Events (CONTRACT §9): one per change, in the change's transaction, whichever path makes
//! it; the feed never skips, however many changes commit at once on however many instances.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use payments_api::db::events::{self as event_rows, EventRow};
use payments_api::db::payments as payment_rows;
use payments_api::events;
use serde_json::{Value, json};

use crate::support::{
    TestApp, TestResponse, spawn_app, spawn_app_with, spawn_app_with_provider, spawn_cluster,
    spawn_provider, visa,
};
use crate::webhooks::{charge_event, signed_headers, test_secret, unix_now};

impl TestApp {
    /// The events recorded about one payment or refund, as stored.
    pub async fn events_of(&self, object_id: &str) -> Vec<EventRow> {
        let id = object_id.to_owned();
        self.state
            .db
            .run(move |conn| event_rows::for_objects(conn, &[id.as_str()]))
            .await
            .expect("read events")
    }

    /// A page of `GET /v1/events…`: its ids, and `has_more`.
    pub async fn event_page(&self, query: &str) -> (Vec<String>, bool) {
        let response = self.get(&format!("/v1/events{query}")).await;
        assert_eq!(response.status, 200, "{query}: {}", response.text());
        let page = response.json();
        let ids = page["data"]
            .as_array()
            .expect("data")
            .iter()
            .map(|e| e["id"].as_str().expect("id").to_owned())
            .collect();
        (ids, page["has_more"].as_bool().expect("has_more"))
    }

    async fn post_payment_as_request(
        &self,
        key: &str,
        request_id: &str,
        body: &Value,
    ) -> TestResponse {
        let headers = [
            ("Authorization", format!("Bearer {}", self.api_key)),
            ("Content-Type", "application/json".to_owned()),
            ("Idempotency-Key", key.to_owned()),
            ("X-Request-Id", request_id.to_owned()),
        ];
        self.request(
            "POST",
            "/v1/payments",
            &headers,
            body.to_string().into_bytes(),
        )
        .await
    }
}

#[actix_web::test]
async fn each_change_is_one_event_holding_the_object_and_the_request_that_made_it() {
    let app = spawn_app().await;
    let paid = app
        .post_payment_as_request("ev-paid", "req-paid-1", &visa(2000))
        .await;
    assert_eq!(paid.status, 201);
    let payment = paid.json();
    let declined = app
        .post_payment_as_request(
            "ev-declined",
            "req-declined-1",
            &json!({"amount": 500, "currency": "eur", "payment_method": "pm_card_declined"}),
        )
        .await;
    assert_eq!(declined.json()["status"], "failed");
    let refund = app
        .post_refund(
            payment["id"].as_str().unwrap(),
            "ev-refund",
            &json!({"amount": 300}),
        )
        .await;
    assert_eq!(refund.status, 201);
    // Replays change nothing, so they record nothing.
    let replay = app
        .post_payment_as_request("ev-paid", "req-paid-2", &visa(2000))
        .await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));

    let list = app.get("/v1/events").await;
    assert_eq!(list.status, 200);
    let list = list.json();
    assert_eq!(list["object"], "list");
    assert_eq!(list["has_more"], false);
    let events = list["data"].as_array().unwrap();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        ["refund.succeeded", "payment.failed", "payment.succeeded"]
    );

    let succeeded = &events[2];
    assert_eq!(succeeded["object"], "event");
    assert!(succeeded["id"].as_str().unwrap().starts_with("evt_"));
    assert!(succeeded["created_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        succeeded["data"]["object"], payment,
        "the payment as answered"
    );
    assert_eq!(
        succeeded["request"],
        json!({"id": "req-paid-1", "idempotency_key": "ev-paid"})
    );
    assert_eq!(events[1]["data"]["object"], declined.json());
    assert_eq!(events[0]["data"]["object"], refund.json());
    assert_eq!(
        events[0]["request"],
        json!({"id": events[0]["request"]["id"], "idempotency_key": "ev-refund"})
    );

    // One event, byte for byte the same through the list and by id.
    let id = succeeded["id"].as_str().unwrap();
    let one = app.get(&format!("/v1/events/{id}")).await;
    assert_eq!(one.status, 200);
    assert_eq!(one.json(), *succeeded);
    assert_eq!(
        app.events_of(payment["id"].as_str().unwrap()).await.len(),
        1
    );

    // Filters and paging.
    let (only_failed, _) = app.event_page("?type=payment.failed").await;
    assert_eq!(only_failed, [events[1]["id"].as_str().unwrap()]);
    let (first, more) = app.event_page("?limit=2").await;
    assert!(more);
    let (rest, more) = app
        .event_page(&format!("?limit=2&starting_after={}", first[1]))
        .await;
    assert!(!more);
    assert_eq!(rest, [id]);
    let (feed, _) = app.event_page("?order=asc").await;
    let mut oldest_first: Vec<String> = events
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    oldest_first.reverse();
    assert_eq!(feed, oldest_first);
    let (after_first, _) = app.event_page(&format!("?order=asc&after={id}")).await;
    assert_eq!(after_first, oldest_first[1..]);

    // Another merchant sees none of it.
    let other = app.create_merchant("other-events").await;
    app.get_as(&format!("/v1/events/{id}"), &other)
        .await
        .assert_problem(404, "not_found");
    let theirs = app.get_as("/v1/events", &other).await.json();
    assert_eq!(theirs["data"], json!([]));
    app.get_as(&format!("/v1/events?order=asc&after={id}"), &other)
        .await
        .assert_problem(404, "not_found");

    for (query, param) in [
        ("?type=payment.everything", "type"),
        ("?order=sideways", "order"),
        ("?order=asc&starting_after=evt_0", "starting_after"),
        ("?after=", "after"),
        ("?order=asc&after=pay_1", "after"),
        ("?limit=0", "limit"),
        ("?starting_after=nope", "starting_after"),
    ] {
        let problem = app
            .get(&format!("/v1/events{query}"))
            .await
            .assert_problem(400, "invalid_request");
        assert_eq!(problem["param"], param, "{query}");
    }
    app.get("/v1/events/evt_nope")
        .await
        .assert_problem(404, "not_found");
}

#[actix_web::test]
async fn a_payment_finished_by_the_providers_webhook_has_one_event_and_no_request() {
    let app = spawn_app_with(|s| s.provider_async_delay = Duration::from_millis(100)).await;
    let body = json!({"amount": 700, "currency": "usd", "payment_method": "pm_card_async"});
    let response = app.post_payment("ev-async", &body).await;
    assert_eq!(response.status, 202);
    let id = response.json()["id"].as_str().unwrap().to_owned();
    assert!(
        app.events_of(&id).await.is_empty(),
        "no event while processing"
    );
    let payment = app.wait_until_final(&id, Duration::from_secs(20)).await;
    assert_eq!(payment["status"], "succeeded");
    let events = app.events_of(&id).await;
    assert_eq!(events.len(), 1);
    let event: Value = serde_json::from_str(&events[0].body).unwrap();
    assert_eq!(event["type"], "payment.succeeded");
    assert_eq!(event["request"], Value::Null);
    assert_eq!(event["data"]["object"], payment);
}

#[actix_web::test]
async fn a_storm_of_identical_requests_records_one_event() {
    let app = spawn_app_with(|s| s.provider_latency = Duration::from_millis(200)).await;
    let body = visa(4200);
    let responses = join_all((0..50).map(|_| app.post_payment("ev-storm", &body))).await;
    assert!(responses.iter().all(|r| r.status == 201));
    let id = responses[0].json()["id"].as_str().unwrap().to_owned();
    assert_eq!(app.events_of(&id).await.len(), 1);
    assert_eq!(app.charges(), 1);
}

#[actix_web::test]
async fn the_providers_webhook_racing_the_request_records_one_event_per_payment() {
    let provider = spawn_provider().await;
    provider.faults.latency_ms.store(150, Ordering::SeqCst);
    let app = spawn_app_with_provider(&provider, |_| {}).await;
    let races = (0..12u64).map(|i| {
        let app = &app;
        async move {
            let key = format!("ev-race-{i}");
            let body = visa(1000 + i as i64);
            let request = app.post_payment(&key, &body);
            let webhooks = async {
                // The payment row appears when the request claims the key.
                let merchant_id = app.merchant_id.clone();
                let payment = loop {
                    let (m, k) = (merchant_id.clone(), key.clone());
                    let found = app
                        .state
                        .db
                        .run(move |conn| payment_rows::find_by_idempotency_key(conn, &m, &k))
                        .await
                        .unwrap();
                    if let Some(row) = found {
                        break row;
                    }
                    actix_web::rt::time::sleep(Duration::from_millis(5)).await;
                };
                // Spread over the provider call and the storing of its answer.
                actix_web::rt::time::sleep(Duration::from_millis(120 + 5 * i)).await;
                let body = charge_event(
                    "charge.succeeded",
                    &json!({"id": payment.id, "provider_charge_id": format!("ch_race_{i}"),
                            "amount": payment.amount, "currency": payment.currency}),
                );
                let id = format!("evt_race_{i}");
                let headers = signed_headers(&test_secret(), &id, unix_now(), &body);
                let sent =
                    join_all((0..3).map(|_| {
                        app.request("POST", "/v1/webhooks/provider", &headers, body.clone())
                    }))
                    .await;
                assert!(sent.iter().all(|r| r.status == 200), "{}", sent[0].text());
                payment.id.clone()
            };
            let (response, id) = futures_util::future::join(request, webhooks).await;
            assert_eq!(response.status, 201, "{}", response.text());
            id
        }
    });
    for id in join_all(races).await {
        let events = app.events_of(&id).await;
        assert_eq!(events.len(), 1, "{id}: {events:?}");
        let stored = app.wait_until_final(&id, Duration::from_secs(20)).await;
        let event: Value = serde_json::from_str(&events[0].body).unwrap();
        assert_eq!(
            event["data"]["object"], stored,
            "the event holds the state that won"
        );
    }
}

/// Reads the feed until it returns nothing new, from `after`; returns the ids read.
async fn tail(app: &TestApp, after: &mut Option<String>, seen: &mut Vec<String>) -> usize {
    let mut read = 0;
    loop {
        let query = match after {
            Some(id) => format!("?order=asc&limit=100&after={id}"),
            None => "?order=asc&limit=100".to_owned(),
        };
        let (ids, more) = app.event_page(&query).await;
        read += ids.len();
        if let Some(last) = ids.last() {
            *after = Some(last.clone());
        }
        seen.extend(ids);
        if !more {
            return read;
        }
    }
}

#[actix_web::test]
async fn a_reader_of_the_feed_sees_every_event_once_while_hundreds_commit_on_three_instances() {
    let provider = spawn_provider().await;
    provider.faults.latency_ms.store(5, Ordering::SeqCst);
    let (apps, _database) = spawn_cluster(3, &provider, |s| {
        s.bootstrap_api_key = Some("sk_test_feed_cluster_key_000001".to_owned());
        s.database_pool_size = 16;
    })
    .await;
    let writing = AtomicBool::new(true);
    // Reads that returned events while payments were still being written. Writers wait for
    // the reader now and then (below), so on a slow machine the reader still interleaves
    // with commits instead of reading only after the writers are done.
    let reads = AtomicUsize::new(0);

    let reader = {
        let (apps, writing, reads) = (&apps, &writing, &reads);
        async move {
            let mut after = None;
            let mut seen = Vec::new();
            let mut turn = 0;
            while writing.load(Ordering::SeqCst) {
                if tail(&apps[turn % apps.len()], &mut after, &mut seen).await > 0 {
                    reads.fetch_add(1, Ordering::SeqCst);
                }
                turn += 1;
            }
            tail(&apps[0], &mut after, &mut seen).await;
            seen
        }
    };
    let writers = {
        let (apps, writing, reads) = (&apps, &writing, &reads);
        async move {
            // 30 clients, 10 payments each, spread over the instances. Before its 4th, 7th
            // and 10th payment each client waits until the reader has read events 1, 2, 3
            // times, so at least three reads overlap the other clients' commits.
            join_all((0..30).map(|client| async move {
                for n in 0..10 {
                    let deadline = Instant::now() + Duration::from_secs(30);
                    while reads.load(Ordering::SeqCst) < n / 3 {
                        assert!(Instant::now() < deadline, "the reader never caught up");
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    let app = &apps[(client + n) % apps.len()];
                    let method = if n % 4 == 0 {
                        "pm_card_declined"
                    } else {
                        "pm_card_visa"
                    };
                    let body =
                        json!({"amount": 100 + n, "currency": "usd", "payment_method": method});
                    let response = app.post_payment(&format!("feed-{client}-{n}"), &body).await;
                    assert_eq!(response.status, 201, "{}", response.text());
                }
            }))
            .await;
            writing.store(false, Ordering::SeqCst);
        }
    };
    let (seen, ()) = futures_util::future::join(reader, writers).await;
    let reads_while_writing = reads.load(Ordering::SeqCst);

    let all: HashSet<String> = {
        let merchant_id = apps[0].merchant_id.clone();
        apps[0]
            .state
            .db
            .run(move |conn| event_rows::all_for_merchant(conn, &merchant_id))
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.id)
            .collect()
    };
    assert_eq!(all.len(), 300, "one event per payment");
    let distinct: HashSet<&String> = seen.iter().collect();
    assert_eq!(distinct.len(), seen.len(), "the tail saw an event twice");
    let missed: Vec<&String> = all.iter().filter(|id| !distinct.contains(id)).collect();
    assert!(
        missed.is_empty(),
        "the tail skipped {} events: {missed:?}",
        missed.len()
    );
    assert!(
        reads_while_writing >= 3,
        "the reader read only {reads_while_writing} times while payments committed"
    );
}

#[actix_web::test]
async fn events_and_their_deliveries_older_than_the_retention_are_pruned() {
    let app = spawn_app_with(|s| s.webhook_allow_private_urls = true).await;
    let endpoint = json!({"url": "http://127.0.0.1:9/nothing-listens", "enabled_events": ["*"]});
    let create = || {
        app.post_json(
            "/v1/webhook_endpoints",
            &app.api_key,
            Some("endpoint-kept"),
            &endpoint,
        )
    };
    let created = create().await;
    assert_eq!(created.status, 201, "{}", created.text());
    let endpoint_id = created.json()["id"].as_str().unwrap().to_owned();
    for amount in [100, 200, 300] {
        app.paid_payment(amount).await;
    }
    let deliveries = || async {
        let path = format!("/v1/webhook_endpoints/{endpoint_id}/deliveries");
        app.get(&path).await.json()["data"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(deliveries().await, 3);
    let retention = chrono::TimeDelta::days(30);
    let db = &app.state.db;
    let now = payments_api::domain::now();
    assert_eq!(events::prune_expired(db, now, retention).await.unwrap(), 0);
    assert_eq!(app.event_page("").await.0.len(), 3);
    let later = now + chrono::TimeDelta::days(31);
    assert_eq!(
        events::prune_expired(db, later, retention).await.unwrap(),
        3
    );
    assert!(app.event_page("?order=asc").await.0.is_empty());
    assert_eq!(deliveries().await, 0, "deliveries go with their events");
    // Idempotency keys stay: the endpoint's create, retried after the events went, replays.
    let retry = create().await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.body, created.body, "no second endpoint");
}

#[actix_web::test]
async fn a_payment_the_recovery_worker_finishes_has_one_event_and_no_request() {
    let provider = spawn_provider().await;
    provider.faults.drop_next.store(2, Ordering::SeqCst);
    let app = spawn_app_with_provider(&provider, |s| {
        s.provider_timeout = Duration::from_millis(200);
        s.provider_max_attempts = 2;
        // Longer than the request's own attempts (2 × 200 ms and a backoff): the worker
        // resumes the payment the request gave up, not one it is still asking about.
        s.processing_lease = Duration::from_millis(1000);
        s.recovery_interval = Duration::from_millis(100);
    })
    .await;
    let response = app.post_payment("ev-recovered", &visa(900)).await;
    assert_eq!(response.status, 202, "{}", response.text());
    let id = response.json()["id"].as_str().unwrap().to_owned();
    let payment = app.wait_until_final(&id, Duration::from_secs(20)).await;
    assert_eq!(payment["status"], "succeeded");
    let events = app.events_of(&id).await;
    assert_eq!(events.len(), 1);
    let event: Value = serde_json::from_str(&events[0].body).unwrap();
    assert_eq!(
        event["request"],
        Value::Null,
        "the recovery worker made the change"
    );
    assert_eq!(event["data"]["object"], payment);
}

#[actix_web::test]
async fn identical_requests_across_three_instances_record_one_event() {
    let provider = spawn_provider().await;
    provider.faults.latency_ms.store(200, Ordering::SeqCst);
    let (apps, _database) = spawn_cluster(3, &provider, |s| {
        s.bootstrap_api_key = Some("sk_test_event_storm_cluster_01".to_owned());
    })
    .await;
    let body = visa(6100);
    let responses =
        join_all((0..90).map(|i| apps[i % apps.len()].post_payment("ev-cluster-storm", &body)))
            .await;
    assert!(responses.iter().all(|r| r.status == 201));
    let id = responses[0].json()["id"].as_str().unwrap().to_owned();
    assert_eq!(apps[1].events_of(&id).await.len(), 1);
    let (feed, _) = apps[2].event_page("?order=asc").await;
    assert_eq!(feed.len(), 1);
}
