//! The tests: a body that never arrives, and the property over every slot of every route.

use super::*;

/// A body declared and never sent in full is answered (400 after `BODY_TIMEOUT`), not
/// held open for ever, and stores nothing.
#[actix_web::test]
async fn a_body_that_never_arrives_is_answered_and_stores_nothing() {
    let app = crate::support::spawn_app().await;
    let address = app.address.trim_start_matches("http://").to_owned();
    let request = format!(
        "POST /v1/payments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nIdempotency-Key: never\r\nContent-Length: 100\r\n\r\n\
         {{\"amount\": 100,",
        app.api_key
    );
    let answer =
        actix_web::rt::task::spawn_blocking(move || exchange(&address, request.as_bytes()))
            .await
            .expect("the exchange ran")
            .expect("an answer");
    assert_eq!(
        answer.status,
        400,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    let problem: serde_json::Value = serde_json::from_slice(&answer.body).expect("a problem");
    assert_eq!(problem["code"], "invalid_request");
    assert_eq!(app.payment_rows().await, 0);
}

// ---------------------------------------------------------------------------------------
// The property

/// What the property needs of a running app, owned, so it can run on a blocking thread.
struct Target {
    address: String,
    api_key: String,
    payment_id: String,
    pool: Pool,
    simulator: Arc<Simulator>,
    secret: WebhookSecret,
}

#[derive(QueryableByName)]
struct TableName {
    #[diesel(sql_type = Text)]
    name: String,
}

#[derive(QueryableByName)]
struct RowCount {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// Rows in every table of the app's database (whatever tables later migrations add), and
/// the provider calls: what a refused request must leave as it was.
#[derive(Debug, PartialEq, Eq)]
struct Footprint {
    rows: BTreeMap<String, i64>,
    charge_calls: u64,
    refund_calls: u64,
}

impl Target {
    fn footprint(&self) -> Footprint {
        let mut pooled = self.pool.get().expect("a connection");
        let conn: &mut DbConnection = &mut pooled;
        let tables = match conn {
            DbConnection::Postgres(_) => {
                "SELECT table_name::text AS name FROM information_schema.tables \
                 WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
            }
            DbConnection::Sqlite(_) => {
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            }
        };
        let tables = diesel::sql_query(tables)
            .load::<TableName>(conn)
            .expect("table names");
        assert!(tables.len() > 3, "tables not found");
        let rows = tables
            .into_iter()
            .map(|t| {
                let count = diesel::sql_query(format!("SELECT COUNT(*) AS n FROM {}", t.name))
                    .get_result::<RowCount>(conn)
                    .expect("row count");
                (t.name, count.n)
            })
            .collect();
        Footprint {
            rows,
            charge_calls: self.simulator.charge_calls(),
            refund_calls: self.simulator.refund_calls(),
        }
    }

    /// The request of `route` with `hostile` in `slot`, everything else valid.
    fn request(&self, route: &RouteUnderTest, slot: &Slot, hostile: &Hostile) -> Vec<u8> {
        // Path: every `{param}` is the app's payment, or the hostile segment.
        let mut target = route.path.to_owned();
        while let Some(start) = target.find('{') {
            let end = target[start..]
                .find('}')
                .map_or(target.len(), |e| start + e + 1);
            let name = &target[start + 1..end - 1];
            let value = match slot {
                Slot::Path(p) if p == name => percent_encode(&hostile.bytes),
                _ => self.payment_id.clone(),
            };
            target.replace_range(start..end, &value);
        }
        if let Slot::Query(name) = slot {
            target = format!("{target}?{name}={}", percent_encode(&hostile.bytes));
        }

        // Body: the valid example, with the hostile string at the slot.
        let body = route.body.as_ref().map(|base| {
            const MARK: &str = "\u{e000}hostile\u{e000}";
            let mut value = base.clone();
            match slot {
                Slot::Body(at) => {
                    let pointer = pointer_of(at);
                    if let Some(v) = value.pointer_mut(&pointer) {
                        *v = json!(MARK);
                    }
                }
                Slot::BodyKey(at) => {
                    if let Some(Value::Object(object)) = value.pointer_mut(&pointer_of(at))
                        && let Some(first) = object.keys().next().cloned()
                    {
                        let v = object.remove(&first).unwrap_or(Value::Null);
                        object.insert(MARK.to_owned(), v);
                    }
                }
                _ => {}
            }
            let text = value.to_string();
            let quoted = format!("\"{MARK}\"");
            match text.find(&quoted) {
                Some(at) => {
                    let mut bytes = text.as_bytes()[..at].to_vec();
                    bytes.extend_from_slice(&hostile.json);
                    bytes.extend_from_slice(&text.as_bytes()[at + quoted.len()..]);
                    bytes
                }
                None => text.into_bytes(),
            }
        });
        let body = body.unwrap_or_default();

        // Headers: valid ones first; the hostile one last, raw, so that whatever it holds
        // (CR LF included) cannot hide the framing headers.
        let mut headers: Vec<(&str, Vec<u8>)> = Vec::new();
        if route.needs_api_key {
            headers.push(("Authorization", format!("Bearer {}", self.api_key).into()));
        }
        if route.needs_idempotency_key {
            let key = format!("hostile-{}", uuid::Uuid::new_v4().simple());
            headers.push(("Idempotency-Key", key.into()));
        }
        if route.body.is_some() {
            headers.push(("Content-Type", b"application/json".to_vec()));
        }
        if route.signed_webhook {
            let id = match slot {
                Slot::Header(h) if h == "webhook-id" => {
                    String::from_utf8(hostile.bytes.clone()).ok()
                }
                _ => None,
            }
            .unwrap_or_else(|| format!("evt_{}", uuid::Uuid::new_v4().simple()));
            let timestamp = chrono::Utc::now().timestamp();
            let signature = sign(&self.secret, &id, timestamp, &body);
            headers.push(("webhook-id", id.into()));
            headers.push(("webhook-timestamp", timestamp.to_string().into()));
            headers.push(("webhook-signature", signature.into()));
        }
        if let Slot::Header(name) = slot {
            headers.retain(|(h, _)| !h.eq_ignore_ascii_case(name));
            let value = if name == "Authorization" {
                [b"Bearer ".as_slice(), &hostile.bytes].concat()
            } else {
                hostile.bytes.clone()
            };
            headers.push((name.as_str(), value));
        }

        let mut request = format!(
            "{} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n",
            route.method,
            body.len()
        )
        .into_bytes();
        for (name, value) in headers {
            request.extend_from_slice(name.as_bytes());
            request.extend_from_slice(b": ");
            request.extend_from_slice(&value);
            request.extend_from_slice(b"\r\n");
        }
        request.extend_from_slice(b"\r\n");
        request.extend_from_slice(&body);
        request
    }

    /// The valid request must be accepted as far as input goes (a 404 is fine: the path
    /// may name another kind of object than the payment it carries); else the cases would
    /// test nothing but the refusal of a bad example. Give the schema an `example` then.
    fn check_base(&self, route: &RouteUnderTest) {
        let nothing = Hostile {
            json: Vec::new(),
            bytes: Vec::new(),
        };
        let request = self.request(route, &Slot::Unchanged, &nothing);
        let answer = exchange(self.address.trim_start_matches("http://"), &request)
            .unwrap_or_else(|e| panic!("{} {}: {e}", route.method, route.path));
        assert!(
            answer.status < 400 || [404, 409, 422].contains(&answer.status),
            "{} {}: the valid request built from the document is refused: {} {}",
            route.method,
            route.path,
            answer.status,
            String::from_utf8_lossy(&answer.body)
        );
    }

    fn check(
        &self,
        route: &RouteUnderTest,
        slot: &Slot,
        hostile: &Hostile,
    ) -> Result<(), TestCaseError> {
        let what = format!("{} {} {slot:?}", route.method, route.path);
        let before = self.footprint();
        let request = self.request(route, slot, hostile);
        let address = self.address.trim_start_matches("http://");
        let answer =
            exchange(address, &request).map_err(|e| TestCaseError::fail(format!("{what}: {e}")))?;
        let body = String::from_utf8_lossy(&answer.body);
        prop_assert!(answer.status < 500, "{what}: {} {body}", answer.status);

        // The provider's signed events are the exception: what they report has happened,
        // so their text is made fit to store (U+FFFD), not refused; no 5xx all the same.
        let must_refuse = match slot {
            Slot::Body(_) | Slot::BodyKey(_) if route.signed_webhook => false,
            Slot::Body(_) | Slot::BodyKey(_) => hostile.refused_in_json(),
            Slot::Query(_) | Slot::Path(_) => hostile.refused_in_url(),
            Slot::Header(_) | Slot::Unchanged => false,
        };
        prop_assert!(
            !must_refuse || (400..500).contains(&answer.status),
            "{what}: text with a control character was accepted: {} {body}",
            answer.status
        );
        // 409 and 422 may be a key's stored final answer (a refused refund is kept); every
        // other refusal leaves no trace.
        if answer.status >= 400 && ![409, 422].contains(&answer.status) {
            prop_assert_eq!(
                self.footprint(),
                before,
                "{}: refused, yet something changed",
                what
            );
        }
        // Accepted text is kept as sent: the answer shows it at the same place.
        if let (true, Slot::Body(at), Some(sent)) =
            ((200..300).contains(&answer.status), slot, hostile.text())
        {
            let answered: Value = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
            if let Some(Value::String(kept)) = answered.pointer(&pointer_of(at)) {
                prop_assert_eq!(kept, &sent, "{}: the text was changed", what);
            }
        }
        Ok(())
    }
}

fn pointer_of(at: &[String]) -> String {
    at.iter()
        .map(|p| format!("/{}", p.replace('~', "~0").replace('/', "~1")))
        .collect()
}

async fn target_of(app: &TestApp) -> Target {
    // A payment to address in paths, large enough for every refund a case may make.
    let key = format!("hostile-base-{}", uuid::Uuid::new_v4().simple());
    let created = app
        .post_payment(&key, &crate::support::visa(99_999_999))
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    Target {
        address: app.address.clone(),
        api_key: app.api_key.clone(),
        payment_id: created.json()["id"].as_str().expect("id").to_owned(),
        pool: app.state.db.pool().clone(),
        simulator: app.simulator.clone(),
        secret: WebhookSecret::parse(TEST_WEBHOOK_SECRET).expect("test secret"),
    }
}

#[actix_web::test]
async fn no_hostile_text_anywhere_in_a_request_is_a_5xx_or_stores_or_charges_anything() {
    let routes = Arc::new(routes_under_test());
    let mut families: Vec<String> = routes.iter().map(|r| r.family.clone()).collect();
    families.sort();
    families.dedup();
    let mut attacked = 0;
    for family in families {
        // One app per family of routes: its cases share the app, not its rows.
        // Endpoint URLs in the examples are public names that do not resolve on a test machine.
        let app = spawn_app_with(|s| s.webhook_allow_private_urls = true).await;
        let target = target_of(&app).await;
        let routes = routes.clone();
        let slots = actix_web::rt::task::spawn_blocking(move || {
            let mut slots = 0;
            for route in routes.iter().filter(|r| r.family == family) {
                assert!(!route.slots.is_empty(), "{} {}", route.method, route.path);
                target.check_base(route);
                for slot in &route.slots {
                    let mut runner = TestRunner::new(Config {
                        cases: CASES_PER_SLOT,
                        failure_persistence: None,
                        max_shrink_iters: 200,
                        ..Config::default()
                    });
                    if let Err(e) = runner.run(&hostile(), |h| target.check(route, slot, &h)) {
                        panic!("{e}");
                    }
                    slots += 1;
                }
            }
            slots
        })
        .await
        .expect("the cases ran");
        attacked += slots;
        drop(app);
    }
    assert!(attacked >= ROUTES.len(), "only {attacked} slots attacked");
}
