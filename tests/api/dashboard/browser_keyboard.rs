//! Every page with the keyboard alone, in a real Chromium: each page with something on it
//! (a payment that can be refunded, one that can be captured or canceled, an open dispute,
//! a balance, an endpoint with a delivery, an event, keys), every visible control named, and
//! Tab from the top of the page reaching every one of them, each a native control (a link,
//! a button, a field) that Enter or Space works. At 390×844 too: nothing sideways. Then an
//! authorization captured in part and another canceled, with the keyboard alone.

use serde_json::json;

use crate::deliveries::Receiver;
use crate::support::webdriver::Browser;
use crate::support::{spawn_app_with, wait_until};

/// Marks every visible control of the page with its number; returns how many there are.
const MARK: &str = "let n = 0;
    for (const e of document.querySelectorAll('a[href], button, input, select, textarea')) {
        if (e.type === 'hidden' || e.disabled || e.offsetParent === null) continue;
        e.dataset.kb = String(n++);
    }
    document.activeElement && document.activeElement.blur();
    window.scrollTo(0, 0);
    return n;";

/// Presses Tab until focus has been on every marked control (or too many presses): how
/// many controls there are, and the numbers never reached.
async fn unreached(browser: &Browser) -> (u64, Vec<u64>) {
    let count = browser.script(MARK).await.as_u64().unwrap_or(0);
    let mut reached = std::collections::BTreeSet::new();
    // A date field takes a Tab stop per part; a page's controls are far fewer than this.
    for _ in 0..(count * 3 + 10) {
        browser.keys(crate::support::webdriver::TAB).await;
        let at = browser
            .script("const e = document.activeElement; return e && e.dataset.kb || null;")
            .await;
        if let Some(n) = at.as_str().and_then(|n| n.parse::<u64>().ok()) {
            reached.insert(n);
        }
        if reached.len() as u64 == count {
            break;
        }
    }
    (count, (0..count).filter(|n| !reached.contains(n)).collect())
}

#[actix_web::test]
async fn every_page_is_reached_and_worked_with_the_keyboard_alone() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = spawn_app_with(|s| s.webhook_allow_private_urls = true).await;
    let receiver = Receiver::always(200).await;
    app.create_endpoint(&receiver.url, &["*"]).await;
    let paid = app.paid_payment(2500).await;
    let manual = app
        .post_payment(
            "kb-manual",
            &json!({"amount": 1200, "currency": "usd", "payment_method": "pm_card_visa",
                "capture_method": "manual"}),
        )
        .await
        .json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let to_cancel = app
        .post_payment(
            "kb-manual-2",
            &json!({"amount": 700, "currency": "usd", "payment_method": "pm_card_visa",
                "capture_method": "manual"}),
        )
        .await
        .json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.post_payment(
        "kb-dispute",
        &json!({"amount": 900, "currency": "usd", "payment_method": "pm_card_dispute"}),
    )
    .await;
    receiver
        .wait_for("a delivery", |received| !received.is_empty())
        .await;
    wait_until(
        std::time::Duration::from_secs(15),
        "the dispute opens",
        || async { app.get("/v1/disputes").await.json()["data"][0]["id"].is_string() },
    )
    .await;
    let endpoint = app.get("/v1/webhook_endpoints").await.json()["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let dashboard = format!("{}/dashboard", app.address);
    browser.sign_in(&dashboard, &app.api_key).await;

    let pages = [
        ("", "Payments per day"),
        ("/payments", "Payments"),
        (&format!("/payments/{paid}") as &str, "Timeline"),
        (&format!("/payments/{manual}"), "Capture or cancel"),
        ("/disputes", "Submit evidence"),
        ("/balance", "Pay out"),
        ("/webhooks", "Add endpoint"),
        (&format!("/webhooks/{endpoint}"), "Send test event"),
        ("/events", "Events"),
        ("/api-keys", "Create API key"),
    ];
    for (width, height) in [(1280, 800), (390, 844)] {
        browser.resize(width, height).await;
        for (path, shows) in &pages {
            browser.goto(&format!("{dashboard}{path}")).await;
            wait_until(
                std::time::Duration::from_secs(10),
                &format!("{path} with {shows}"),
                || async { browser.text().await.contains(shows) },
            )
            .await;
            assert_eq!(
                browser.unnamed_controls().await,
                Vec::<String>::new(),
                "{path}: every control has an accessible name"
            );
            let (controls, missed) = unreached(&browser).await;
            // The navigation alone has 9 (the brand, seven pages, sign out).
            assert!(controls > 9, "{path}: its own controls were counted");
            assert_eq!(
                missed,
                Vec::<u64>::new(),
                "{path} at {width}px: Tab reaches every one of its {controls} controls"
            );
            assert!(browser.fits().await, "{path} at {width}px scrolls sideways");
        }
    }

    // Capture 5.00 of the 12.00 authorized, then cancel the other, with Tab, keys and Enter.
    browser.resize(1280, 800).await;
    browser
        .goto(&format!("{dashboard}/payments/{manual}"))
        .await;
    browser.tab_to("#capture_amount").await;
    browser.keys("5.00").await;
    browser.keys(crate::support::webdriver::ENTER).await;
    browser.wait_for_text("Capture requested.").await;
    let captured = app.get(&format!("/v1/payments/{manual}")).await.json();
    assert_eq!(captured["status"], "succeeded");
    assert_eq!(captured["amount_captured"], 500);
    browser
        .goto(&format!("{dashboard}/payments/{to_cancel}"))
        .await;
    browser
        .tab_to(&format!(
            "form[action='/dashboard/payments/{to_cancel}/cancel'] button"
        ))
        .await;
    browser.keys(crate::support::webdriver::ENTER).await;
    browser.wait_for_text("Cancel requested.").await;
    let canceled = app.get(&format!("/v1/payments/{to_cancel}")).await.json();
    assert_eq!(canceled["status"], "canceled");
}
