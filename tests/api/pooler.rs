//! `DATABASE_PREPARED_STATEMENTS=off`, for a pooler in transaction mode: nothing the service
//! runs may leave a named prepared statement on the server session, since the pooler hands
//! the next transaction to another one. `scripts/test-pgbouncer.sh` runs the races through
//! a real pgbouncer; this checks the session itself, on PostgreSQL.

use diesel::RunQueryDsl;
use payments_api::db::DbConnection;
use serde_json::json;

use crate::support::{TestApp, behind_pooler, on_postgres_or_skip, skip, spawn_app_with, visa};

/// Named statements on the one pooled session after the payment and refund paths ran.
async fn named_statements_after_traffic(prepared_statements: bool) -> i64 {
    let app = spawn_app_with(|s| {
        s.database_pool_size = 1; // every statement on one session
        s.database_prepared_statements = prepared_statements;
    })
    .await;
    traffic(&app).await;
    app.state
        .db
        .run(|conn| {
            let DbConnection::Postgres(pg) = conn else {
                panic!("PostgreSQL only")
            };
            diesel::select(diesel::dsl::sql::<diesel::sql_types::BigInt>(
                "(SELECT count(*) FROM pg_prepared_statements)",
            ))
            .get_result(pg)
        })
        .await
        .expect("count prepared statements")
}

/// A payment, its replay, a read, a list and a refund: the claim and finish of
/// `db/prepared.rs`, the DSL's cacheable selects and the refund's transaction.
async fn traffic(app: &TestApp) {
    for n in 0..2 {
        let key = format!("pooler-{n}");
        let created = app.post_payment(&key, &visa(1000)).await;
        assert_eq!(created.status, 201, "{}", created.text());
        let replay = app.post_payment(&key, &visa(1000)).await;
        assert_eq!(replay.body, created.body);
        let id = created.json()["id"].as_str().unwrap().to_owned();
        assert_eq!(app.get(&format!("/v1/payments/{id}")).await.status, 200);
        assert_eq!(app.get("/v1/payments?limit=5").await.status, 200);
        let refund = app
            .post_refund(&id, &format!("pooler-refund-{n}"), &json!({"amount": 100}))
            .await;
        assert_eq!(refund.status, 201, "{}", refund.text());
    }
}

#[actix_web::test]
async fn with_prepared_statements_off_the_service_names_no_statement() {
    if !on_postgres_or_skip("counts the prepared statements of a PostgreSQL session") {
        return;
    }
    if behind_pooler() {
        skip(
            "needs PostgreSQL reached directly: behind the pooler the session seen is whichever server it picked",
        );
        return;
    }
    assert!(
        named_statements_after_traffic(true).await >= 3,
        "with the statement cache on, the service names its statements"
    );
    assert_eq!(named_statements_after_traffic(false).await, 0);
}
