//! A real browser for the tests: Debian's `chromium`, headless, driven through `chromedriver`
//! over the W3C WebDriver protocol (a handful of JSON calls, spoken here with awc: no client
//! crate to build).
//!
//! Where `chromedriver` is missing the browser tests are skipped with the reason printed,
//! unless `BROWSER_TESTS=required` (CI sets it): then a missing browser fails them.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::wait::wait_until;

/// The key WebDriver names an element by.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// `chromedriver` and one browser session of it; both end when dropped.
pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    client: awc::Client,
}

/// An element of the current page.
#[derive(Debug, Clone)]
pub struct Element(String);

fn find_program(name: &str) -> Option<String> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .map(|p| p.to_string_lossy().into_owned())
}

impl Browser {
    /// A headless Chromium at 1280×800, or `None` (with the reason printed) where there is
    /// no chromedriver and browser tests are not required.
    pub async fn start() -> Option<Self> {
        let required = std::env::var("BROWSER_TESTS").is_ok_and(|v| v == "required");
        let (Some(driver), Some(chromium)) =
            (find_program("chromedriver"), find_program("chromium"))
        else {
            assert!(
                !required,
                "BROWSER_TESTS=required but chromedriver or chromium is not installed \
                 (Debian: apt-get install -y chromium chromium-driver)"
            );
            super::skip(
                "no chromedriver/chromium on PATH (Debian: apt-get install -y chromium chromium-driver)",
            );
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let base = format!("http://127.0.0.1:{port}");
        let client = super::app::test_client();
        let status = format!("{base}/status");
        wait_until(Duration::from_secs(20), "chromedriver is ready", || {
            let request = client.get(&status).send();
            async move { request.await.is_ok_and(|r| r.status().is_success()) }
        })
        .await;
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,800",
                         "--hide-scrollbars", "--force-device-scale-factor=1"]
            }
        }}});
        let mut response = client
            .post(format!("{base}/session"))
            .send_json(&capabilities)
            .await
            .expect("a browser session");
        let body: Value = response.json().limit(1 << 20).await.expect("json");
        let session = body["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {body}"))
            .to_owned();
        Some(Self {
            driver: child,
            base,
            session,
            client,
        })
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let request = match method {
            "GET" => self.client.get(&url),
            "DELETE" => self.client.delete(&url),
            _ => self.client.post(&url),
        };
        let mut response = match body {
            Some(body) => request.send_json(&body).await,
            None if method == "POST" => request.send_json(&json!({})).await,
            None => request.send().await,
        }
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status();
        let value: Value = response.json().limit(64 << 20).await.expect("json");
        assert!(status.is_success(), "{method} {path}: {status} {value}");
        value["value"].clone()
    }

    pub async fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(json!({"url": url}))).await;
    }

    pub async fn url(&self) -> String {
        self.call("GET", "/url", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub async fn find(&self, css: &str) -> Element {
        let found = self
            .call(
                "POST",
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        Element(
            found[ELEMENT]
                .as_str()
                .unwrap_or_else(|| panic!("no element {css}"))
                .to_owned(),
        )
    }

    pub async fn type_into(&self, element: &Element, text: &str) {
        let path = format!("/element/{}/value", element.0);
        self.call("POST", &path, Some(json!({"text": text}))).await;
    }

    pub async fn click(&self, element: &Element) {
        self.call("POST", &format!("/element/{}/click", element.0), None)
            .await;
    }

    /// Runs `script` in the page (arguments as `arguments[n]`) and returns what it returns.
    pub async fn script(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// Presses keys (WebDriver key codes: "\u{E004}" is Tab, "\u{E007}" Enter).
    pub async fn keys(&self, keys: &str) {
        let actions: Vec<Value> = keys
            .chars()
            .flat_map(|c| {
                [
                    json!({"type": "keyDown", "value": c.to_string()}),
                    json!({"type": "keyUp", "value": c.to_string()}),
                ]
            })
            .collect();
        self.call(
            "POST",
            "/actions",
            Some(json!({"actions": [{"type": "key", "id": "keyboard", "actions": actions}]})),
        )
        .await;
    }

    pub async fn resize(&self, width: u32, height: u32) {
        self.call(
            "POST",
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        )
        .await;
    }

    /// A PNG of the window.
    pub async fn screenshot(&self) -> Vec<u8> {
        use base64::Engine;
        let encoded = self.call("GET", "/screenshot", None).await;
        base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().unwrap_or_default())
            .expect("a PNG")
    }

    /// The page's text, as a person reads it.
    pub async fn text(&self) -> String {
        self.script("return document.body.innerText;")
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

/// Tab and Enter, as WebDriver names them.
pub const TAB: &str = "\u{E004}";
pub const ENTER: &str = "\u{E007}";

/// What the dashboard's browser tests ask of a page.
impl Browser {
    /// Signs in to the dashboard at `dashboard` (its URL) with `key`, with the keyboard: the
    /// key typed into the `API key` field, Enter; waits for the overview.
    pub async fn sign_in(&self, dashboard: &str, key: &str) {
        self.goto(dashboard).await;
        let field = self.find("#api_key").await;
        self.type_into(&field, key).await;
        self.keys(ENTER).await;
        self.wait_for_text("Payments per day").await;
    }

    /// Saves the page as `<DASHBOARD_SCREENSHOTS>/<name>.png` when that variable is set.
    pub async fn save(&self, name: &str) {
        if let Ok(dir) = std::env::var("DASHBOARD_SCREENSHOTS") {
            let png = self.screenshot().await;
            std::fs::create_dir_all(&dir).expect("screenshot dir");
            std::fs::write(format!("{dir}/{name}.png"), png).expect("screenshot written");
        }
    }

    /// Whether the page is no wider than the window (no sideways scroll).
    pub async fn fits(&self) -> bool {
        self.script("return document.documentElement.scrollWidth <= window.innerWidth;")
            .await
            .as_bool()
            .unwrap_or(false)
    }

    /// Presses Tab until the focused element matches `css`; a date field takes a Tab stop
    /// per part, so up to 80.
    pub async fn tab_to(&self, css: &str) {
        let check = format!(
            "return document.activeElement && document.activeElement.matches({});",
            serde_json::to_string(css).expect("a string")
        );
        for _ in 0..80 {
            if self.script(&check).await.as_bool() == Some(true) {
                return;
            }
            self.keys(TAB).await;
        }
        panic!("Tab never reached {css}");
    }

    /// Waits (up to 15 s) until the page's text contains `text`: a key press that submits a
    /// form does not wait for the next page as a navigation does.
    pub async fn wait_for_text(&self, text: &str) {
        wait_until(Duration::from_secs(15), text, || async {
            self.text().await.contains(text)
        })
        .await;
    }

    /// The visible controls of the page that have no accessible name (a label,
    /// `aria-label`, or a button's or link's text).
    pub async fn unnamed_controls(&self) -> Vec<String> {
        let found = self
            .script(
                "return [...document.querySelectorAll('input, select, textarea, button, a')]
                   .filter(e => e.type !== 'hidden')
                   .filter(e => !((e.labels && e.labels.length)
                       || (e.getAttribute('aria-label') || '').trim()
                       || ((e.tagName === 'BUTTON' || e.tagName === 'A') && e.textContent.trim())))
                   .map(e => e.outerHTML);",
            )
            .await;
        found
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|i| i.as_str().unwrap_or_default().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Browser {
    /// Ends the browser session (so chromedriver closes Chromium), then chromedriver. A plain
    /// blocking request: a drop cannot wait on the runtime.
    fn drop(&mut self) {
        use std::io::{Read, Write};
        let address = self.base.trim_start_matches("http://").to_owned();
        if let Ok(mut stream) = std::net::TcpStream::connect(&address) {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            let request = format!(
                "DELETE /session/{} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n",
                self.session
            );
            if stream.write_all(request.as_bytes()).is_ok() {
                let mut answer = Vec::new();
                let _ = stream.read_to_end(&mut answer);
            }
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
