//! The OpenAPI document and the docs page.

use super::*;

// ---------------------------------------------------------------------------------------
// OpenAPI and the docs page

fn method_key(method: &actix_web::http::Method) -> String {
    method.as_str().to_ascii_lowercase()
}

/// Every `$ref` in the document, e.g. `#/components/schemas/Payment`.
fn refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                if k == "$ref" {
                    out.push(v.as_str().unwrap_or_default().to_owned());
                } else {
                    refs(v, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

#[actix_web::test]
async fn the_openapi_document_describes_every_route_the_service_serves() {
    let app = spawn_app().await;
    let response = app.request("GET", "/openapi.json", &[], Vec::new()).await;
    assert_eq!(response.status, 200);
    let doc = response.json();
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3."),
        "{}",
        doc["openapi"]
    );
    assert!(doc["info"]["title"].is_string() && doc["info"]["version"].is_string());
    let paths = doc["paths"].as_object().expect("paths");

    // Every served route is documented, with responses and X-Request-Id on each.
    for route in ROUTES {
        let operation = &doc["paths"][route.path][method_key(&route.method)];
        assert!(
            operation.is_object(),
            "{} {} is served but not in the document",
            route.method,
            route.path
        );
        assert!(
            operation["tags"][0].is_string(),
            "{} {} has no tag",
            route.method,
            route.path
        );
        let responses = operation["responses"].as_object().expect("responses");
        assert!(!responses.is_empty(), "{} {}", route.method, route.path);
        for (status, response) in responses {
            assert!(
                response["headers"]["X-Request-Id"].is_object(),
                "{} {} {status} lacks X-Request-Id",
                route.method,
                route.path
            );
        }
    }
    // Every operation has its own id: client generators name methods after them, and two
    // operations sharing one (both handlers called `list`) break the generated client.
    let mut operation_ids = std::collections::HashSet::new();
    for route in ROUTES {
        let id = doc["paths"][route.path][method_key(&route.method)]["operationId"]
            .as_str()
            .unwrap_or_else(|| panic!("{} {} has no operationId", route.method, route.path));
        assert!(
            operation_ids.insert(id.to_owned()),
            "operationId {id} is used twice ({} {} among them)",
            route.method,
            route.path
        );
    }
    // Nothing is documented that is not served.
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            assert!(
                ROUTES
                    .iter()
                    .any(|r| r.path == path && method_key(&r.method) == *method),
                "{method} {path} is documented but not served"
            );
        }
    }
    // The table is what is served: each route answers (401 without a key is fine), never
    // "no such route".
    for route in ROUTES {
        let path = route.path.replace("{id}", "pay_x");
        let answer = app
            .request(route.method.as_str(), &path, &[], Vec::new())
            .await;
        assert!(
            answer.status != 404,
            "{} {path}: {}",
            route.method,
            answer.status
        );
    }

    // Every schema reference resolves.
    let mut all = Vec::new();
    refs(&doc, &mut all);
    assert!(!all.is_empty());
    for reference in all {
        let name = reference
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("unexpected $ref {reference}"));
        assert!(
            doc["components"]["schemas"][name].is_object(),
            "{reference} does not resolve"
        );
    }

    // The headers of the idempotency contract and the problem responses.
    let create = &doc["paths"]["/v1/payments"]["post"];
    let key = create["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "Idempotency-Key")
        .expect("Idempotency-Key documented");
    assert_eq!(key["in"], "header");
    assert_eq!(key["required"], true);
    assert!(create["responses"]["201"]["headers"]["Idempotent-Replayed"].is_object());
    for status in ["409", "503"] {
        assert!(
            create["responses"][status]["headers"]["Retry-After"].is_object(),
            "{status} lacks Retry-After"
        );
    }
    for status in ["202", "400", "401", "413", "415", "422", "500"] {
        assert!(create["responses"][status].is_object(), "{status} missing");
    }
    assert!(
        create["responses"]["409"]["content"]["application/problem+json"]["schema"]["$ref"]
            .as_str()
            .is_some_and(|r| r.ends_with("/Problem"))
    );
    assert!(create["requestBody"]["content"]["application/json"]["schema"].is_object());
    assert_eq!(create["security"][0]["api_key"], json!([]));
    assert_eq!(
        doc["components"]["securitySchemes"]["api_key"]["scheme"],
        "bearer"
    );
    for schema in [
        "CreatePaymentRequest",
        "Payment",
        "PaymentList",
        "PaymentStatus",
        "Problem",
    ] {
        assert!(
            doc["components"]["schemas"][schema].is_object(),
            "{schema} missing"
        );
    }
    let payment = &doc["components"]["schemas"]["Payment"]["properties"];
    for field in [
        "id",
        "amount",
        "currency",
        "status",
        "amount_refunded",
        "created_at",
    ] {
        assert!(payment[field].is_object(), "Payment.{field} missing");
    }
    assert!(
        doc["paths"]["/health/ready"]["get"]["responses"]["503"]["headers"]["Retry-After"]
            .is_object()
    );

    // Request schemas name the fields the parsers read, and require only what they require
    // (a client built from the document sent `text` for `evidence`, and every field).
    let schemas = &doc["components"]["schemas"];
    let dispute = &schemas["UpdateDisputeRequest"];
    assert!(dispute["properties"]["evidence"].is_object(), "{dispute}");
    assert!(dispute["properties"]["text"].is_null(), "{dispute}");
    for (schema, required) in [
        ("UpdateDisputeRequest", json!(null)),
        ("CreatePayoutRequest", json!(["amount", "currency"])),
        ("RotateSecretRequest", json!(null)),
        ("ReplayRequest", json!(["since"])),
    ] {
        assert_eq!(schemas[schema]["required"], required, "{schema}");
    }
    for path in [
        "/v1/payments/{id}/capture",
        "/v1/webhook_endpoints/{id}/rotate_secret",
    ] {
        let body = &doc["paths"][path]["post"]["requestBody"];
        assert_ne!(body["required"], true, "{path}: the body is optional");
    }
}

#[actix_web::test]
async fn the_openapi_document_agrees_with_what_the_service_answers() {
    // Found by schemathesis against the running service: the reads' 400 for a query, bodies
    // documented as required (or as `null`) that are optional, fields always present but not
    // required, the replayed refusal's header, request objects open to unknown fields.
    let app = spawn_app_with(|s| s.webhook_allow_private_urls = true).await;
    let doc = app.get("/openapi.json").await.json();
    let schemas = &doc["components"]["schemas"];
    let auth = format!("Bearer {}", app.api_key);

    // Whatever a route answers, with an unknown id and with a query it does not take, is a
    // status its operation lists.
    for route in ROUTES.iter().filter(|r| r.path.starts_with("/v1/")) {
        if route.path == "/v1/webhooks/provider" {
            continue;
        }
        let path = route
            .path
            .replace("{id}", "pay_0193f0c2a9b87c3e8e1f6a2b3c4d5e6f");
        for asked in [path.clone(), format!("{path}?x=1")] {
            let headers = [
                ("Authorization", auth.clone()),
                ("Idempotency-Key", uuid::Uuid::new_v4().to_string()),
                ("Content-Type", "application/json".to_owned()),
            ];
            let body = if route.method == actix_web::http::Method::GET {
                Vec::new()
            } else {
                b"{}".to_vec()
            };
            let answer = app
                .request(route.method.as_str(), &asked, &headers, body)
                .await;
            let operation = &doc["paths"][route.path][method_key(&route.method)];
            assert!(
                operation["responses"][answer.status.as_str()].is_object(),
                "{} {asked} answered {}, which its operation does not list",
                route.method,
                answer.status
            );
        }
    }

    // A body that may be left out is not required, and never `null`.
    for path in [
        "/v1/payments/{id}/capture",
        "/v1/payments/{id}/cancel",
        "/v1/payments/{id}/refunds",
        "/v1/disputes/{id}/close",
        "/v1/webhook_endpoints/{id}/rotate_secret",
        "/v1/webhook_endpoints/{id}/test",
    ] {
        let body = &doc["paths"][path]["post"]["requestBody"];
        assert!(body.is_object(), "{path} documents its body");
        assert_ne!(body["required"], true, "{path}: the body is optional");
        let schema = &body["content"]["application/json"]["schema"];
        assert!(schema["$ref"].is_string(), "{path}: {schema}");
    }
    // Every request object of the API refuses unknown fields; the provider's events do not.
    let mut strict = 0;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        let Some(post) = item.get("post") else {
            continue;
        };
        let Some(name) = post["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            .as_str()
            .and_then(|r| r.rsplit('/').next())
        else {
            continue;
        };
        if path != "/v1/webhooks/provider" {
            assert_eq!(
                schemas[name]["additionalProperties"], false,
                "{path}: {name}"
            );
            strict += 1;
        }
    }
    assert!(strict >= 12, "{strict} request bodies checked");
    assert_ne!(schemas["ProviderEvent"]["additionalProperties"], false);
    // And the bounds the parsers hold them to.
    let endpoint = &schemas["CreateWebhookEndpointRequest"]["properties"];
    assert_eq!(endpoint["url"]["maxLength"], 2048);
    assert_eq!(endpoint["enabled_events"]["maxItems"], 16);
    assert_eq!(endpoint["enabled_events"]["minItems"], 1);
    let reason = &schemas["CancelPaymentRequest"]["properties"]["cancellation_reason"];
    assert!(
        reason["pattern"]
            .as_str()
            .is_some_and(|p| !p.contains("expired"))
    );
    assert!(schemas["ProviderEventData"]["properties"]["dispute_id"].is_object());

    // A stored refusal is replayed: its response says so.
    let refund = &doc["paths"]["/v1/payments/{id}/refunds"]["post"]["responses"];
    for status in ["409", "422"] {
        assert!(
            refund[status]["headers"]["Idempotent-Replayed"].is_object(),
            "{status}"
        );
    }

    // Every field of a real answer is one its schema requires (null when empty).
    let payment = app.paid_payment(1000).await;
    let refunded = app
        .post_refund(&payment, "openapi-refund", &json!({"amount": 100}))
        .await;
    assert_eq!(refunded.status, 201, "{}", refunded.text());
    let endpoint = app
        .post_json(
            "/v1/webhook_endpoints",
            &app.api_key,
            None,
            &json!({"url": "http://127.0.0.1:9/hooks", "enabled_events": ["*"]}),
        )
        .await
        .json();
    let answers = [
        (
            "Payment",
            app.get(&format!("/v1/payments/{payment}")).await.json(),
        ),
        ("Refund", refunded.json()),
        (
            "Event",
            app.get("/v1/events?limit=1").await.json()["data"][0].clone(),
        ),
        (
            "BalanceTransaction",
            app.get("/v1/balance_transactions?limit=1").await.json()["data"][0].clone(),
        ),
        (
            "WebhookEndpoint",
            app.get(&format!(
                "/v1/webhook_endpoints/{}",
                endpoint["id"].as_str().unwrap()
            ))
            .await
            .json(),
        ),
    ];
    for (name, answer) in answers {
        let required: Vec<&str> = schemas[name]["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let fields = answer
            .as_object()
            .unwrap_or_else(|| panic!("{name}: {answer}"));
        for field in fields.keys() {
            assert!(
                required.contains(&field.as_str()),
                "{name}.{field} is always answered but not required: {required:?}"
            );
        }
    }
}

#[actix_web::test]
async fn the_docs_page_is_served_from_the_binary() {
    let app = spawn_app().await;
    let redirect = awc::Client::builder()
        .disable_redirects()
        .finish()
        .get(format!("{}/docs", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(redirect.status(), 308);
    assert_eq!(
        redirect
            .headers()
            .get("location")
            .unwrap()
            .to_str()
            .unwrap(),
        "/docs/"
    );

    let page = app.request("GET", "/docs/", &[], Vec::new()).await;
    assert_eq!(page.status, 200);
    assert!(
        page.header("content-type")
            .unwrap()
            .starts_with("text/html")
    );
    let html = page.text();
    // Every script and stylesheet is local, and is there.
    let mut assets = Vec::new();
    for attribute in ["src=\"", "href=\""] {
        for piece in html.split(attribute).skip(1) {
            let target = piece.split('"').next().unwrap();
            assert!(
                !target.contains("://") && !target.starts_with("//"),
                "the docs page loads {target} from elsewhere"
            );
            assets.push(target.trim_start_matches("./").to_owned());
        }
    }
    assert!(assets.iter().any(|a| a.ends_with(".js")), "{html}");
    for asset in assets {
        let file = app
            .request("GET", &format!("/docs/{asset}"), &[], Vec::new())
            .await;
        assert_eq!(file.status, 200, "/docs/{asset}");
    }
    let init = app
        .request("GET", "/docs/swagger-initializer.js", &[], Vec::new())
        .await;
    assert_eq!(init.status, 200);
    let init = init.text();
    assert!(init.contains("/openapi.json"), "{init}");
    assert!(!init.contains("https://"), "{init}");
    // A file the page does not have is a 404 like any other: a problem, with a request id.
    for missing in ["/docs/nope.js", "/docs/%00"] {
        let response = app.request("GET", missing, &[], Vec::new()).await;
        response.assert_problem(404, "not_found");
        assert!(response.header("x-request-id").is_some(), "{missing}");
    }
}
