//! No input is a 5xx (contract §2): generated hostile text goes into every body field,
//! object key, query parameter, header and path segment of every route in `ROUTES`. The
//! slots come from the OpenAPI document of each route (its parameters, its security, its
//! request body schema), so a route added to the table is attacked by the same cases.
//!
//! For every case: no 5xx; a refused request stores nothing (row counts of every table)
//! and moves no money (the simulator's ledger); text with a control character that the
//! contract refuses is refused (4xx) wherever the service reads text (body, query, path);
//! accepted text comes back exactly as it was sent.
//!
//! Requests are written byte by byte on a raw socket: NUL, CR or invalid UTF-8 in a header
//! or URL cannot go through an HTTP client library, and a careless client can send them.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use payments_api::db::DbConnection;
use payments_api::db::pool::Pool;
use payments_api::inbound::{WebhookSecret, sign};
use payments_api::provider::sim::Simulator;
use payments_api::routes::ROUTES;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Map, Value, json};

use crate::support::{TEST_WEBHOOK_SECRET, TestApp, spawn_app_with};

mod cases;

/// Generated cases per slot (a field, key, parameter, header or path segment of a route):
/// about 60 slots today, so a few hundred requests per backend.
const CASES_PER_SLOT: u32 = 6;

// ---------------------------------------------------------------------------------------
// Hostile text

/// One generated value, in the two forms a request carries text.
#[derive(Clone)]
struct Hostile {
    /// A JSON string literal, quotes included; not always valid JSON (`"\ud800"`, raw
    /// overlong UTF-8), as a careless or malicious client may send.
    json: Vec<u8>,
    /// The text as raw bytes, for URLs (percent-encoded) and headers (as is); a lone
    /// surrogate is its WTF-8 bytes, so this is not always UTF-8 either.
    bytes: Vec<u8>,
}

impl fmt::Debug for Hostile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = String::from_utf8_lossy(&self.json);
        let shown: String = text.chars().take(160).collect();
        write!(f, "Hostile({} bytes) {shown:?}", self.json.len())?;
        if text.chars().count() > 160 {
            f.write_str("…")?;
        }
        Ok(())
    }
}

/// The contract's refused characters: C0 controls other than tab, LF and CR; DEL; C1.
/// Written here on its own, so that the test does not trust the code it tests.
fn has_refused_control(text: &str) -> bool {
    text.chars().any(|c| {
        (c < ' ' && !matches!(c, '\t' | '\n' | '\r')) || ('\u{7f}'..='\u{9f}').contains(&c)
    })
}

impl Hostile {
    /// Must a JSON body carrying this string be refused? (Not JSON text, or a control char.)
    fn refused_in_json(&self) -> bool {
        serde_json::from_slice::<String>(&self.json).map_or(true, |s| has_refused_control(&s))
    }

    /// Must a URL carrying it be refused? Percent-decoding is lossy (invalid UTF-8 becomes
    /// U+FFFD, which is text), so only what survives decoding counts.
    fn refused_in_url(&self) -> bool {
        has_refused_control(&String::from_utf8_lossy(&self.bytes))
    }

    /// The text, when it is text.
    fn text(&self) -> Option<String> {
        serde_json::from_slice::<String>(&self.json).ok()
    }
}

/// Text as a piece: its JSON-escaped form (no quotes) and its bytes.
fn text(s: String) -> (Vec<u8>, Vec<u8>) {
    let literal = serde_json::to_string(&s).unwrap_or_default();
    let inner = literal.as_bytes()[1..literal.len() - 1].to_vec();
    (inner, s.into_bytes())
}

/// Lone and reversed surrogates, escaped in JSON; their WTF-8 bytes elsewhere.
const SURROGATES: &[(&str, &[u8])] = &[
    ("\\ud800", &[0xed, 0xa0, 0x80]),
    ("\\udfff", &[0xed, 0xbf, 0xbf]),
    ("\\udc00\\ud800", &[0xed, 0xb0, 0x80, 0xed, 0xa0, 0x80]),
];

/// Overlong UTF-8 (a NUL, a slash, a NUL in four bytes): never valid.
const OVERLONG: &[&[u8]] = &[&[0xc0, 0x80], &[0xc0, 0xaf], &[0xf0, 0x80, 0x80, 0x80]];

/// A piece of hostile text: (its JSON fragment, its raw bytes).
fn piece() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    const ODD: &[&str] = &[
        // Bidirectional marks, overrides and isolates.
        "\u{200e}",
        "\u{200f}",
        "\u{202e}",
        "\u{2066}",
        // Combining marks stacked on a letter, and on nothing.
        "e\u{301}\u{302}\u{303}",
        "\u{301}",
        // Emoji: plain, a ZWJ sequence, a flag, a skin tone.
        "\u{1f4b3}",
        "\u{1f469}\u{200d}\u{1f4bb}",
        "\u{1f1fa}\u{1f1f8}",
        "\u{1f44d}\u{1f3fd}",
        // Non-characters and the last code point.
        "\u{fffe}",
        "\u{ffff}",
        "\u{fdd0}",
        "\u{1fffe}",
        "\u{10ffff}",
        // Byte-order mark, zero width, line and paragraph separators, replacement char.
        "\u{feff}",
        "\u{200b}",
        "\u{2028}",
        "\u{2029}",
        "\u{fffd}",
        // Case mapping surprises and ligatures.
        "\u{1c5}",
        "\u{df}",
        "\u{130}",
        "\u{fb03}",
        // Text that looks like something else.
        "'; DROP TABLE payments; --",
        "%00",
        "\\u0000",
        "${jndi:ldap://x}",
        "../../",
        "pay_",
        "\"",
        "\\",
    ];
    let control = (0u32..0x20)
        .prop_union(0x7f..0xa0)
        .prop_map(|c| char::from_u32(c).unwrap_or('\0').to_string());
    let ascii = vec(0x20u8..0x7f, 1..8).prop_map(|b| String::from_utf8(b).unwrap_or_default());
    prop_oneof![
        3 => control.prop_map(text),
        3 => proptest::sample::select(ODD).prop_map(|s: &str| text(s.to_owned())),
        2 => ascii.prop_map(text),
        2 => any::<char>().prop_map(|c| text(c.to_string())),
        // A NUL written as an escape, as JSON allows.
        1 => Just((b"\\u0000".to_vec(), vec![0])),
        1 => proptest::sample::select(SURROGATES)
            .prop_map(|(j, b)| (j.as_bytes().to_vec(), b.to_vec())),
        1 => proptest::sample::select(OVERLONG).prop_map(|b| (b.to_vec(), b.to_vec())),
    ]
}

/// Up to a dozen pieces, or the same repeated past 100 KB.
fn hostile() -> impl Strategy<Value = Hostile> {
    (vec(piece(), 1..12), proptest::bool::weighted(0.15)).prop_map(|(pieces, huge)| {
        let mut json = Vec::new();
        let mut bytes = Vec::new();
        for (j, b) in &pieces {
            json.extend_from_slice(j);
            bytes.extend_from_slice(b);
        }
        if huge {
            let (j, b) = (json.clone(), bytes.clone());
            while bytes.len() < 100 * 1024 {
                json.extend_from_slice(&j);
                bytes.extend_from_slice(&b);
            }
        }
        let mut literal = Vec::with_capacity(json.len() + 2);
        literal.push(b'"');
        literal.extend_from_slice(&json);
        literal.push(b'"');
        Hostile {
            json: literal,
            bytes,
        }
    })
}

// ---------------------------------------------------------------------------------------
// Routes, as the OpenAPI document describes them

/// Where in a request one hostile value goes.
#[derive(Debug, Clone)]
enum Slot {
    /// The JSON value at this path of the body (a field, or an element or value inside one).
    Body(Vec<String>),
    /// The first key of the JSON object at this path (`[]`: a field name of the body).
    BodyKey(Vec<String>),
    Query(String),
    Path(String),
    Header(String),
    /// None: the valid request itself.
    Unchanged,
}

struct RouteUnderTest {
    method: String,
    path: &'static str,
    /// The first tag: routes of one tag share one app.
    family: String,
    needs_api_key: bool,
    needs_idempotency_key: bool,
    signed_webhook: bool,
    /// A valid body built from the schema's examples, or `None` for no body.
    body: Option<Value>,
    slots: Vec<Slot>,
}

fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(reference) => {
            let name = reference.rsplit('/').next().unwrap_or_default();
            resolve(doc, &doc["components"]["schemas"][name])
        }
        None => schema,
    }
}

/// A value the schema accepts: its example, its first enum value, or one built from its
/// type (objects with every property, maps with one key `k`, arrays with one item).
fn example(doc: &Value, schema: &Value) -> Value {
    let schema = resolve(doc, schema);
    if let Some(example) = schema.get("example") {
        return example.clone();
    }
    if let Some(first) = schema["enum"]
        .as_array()
        .and_then(|e| e.iter().find(|v| !v.is_null()))
    {
        return first.clone();
    }
    for combinator in ["oneOf", "anyOf", "allOf"] {
        if let Some(first) = schema[combinator]
            .as_array()
            .and_then(|all| all.iter().find(|s| s["type"] != "null"))
        {
            return example(doc, first);
        }
    }
    let kind = match &schema["type"] {
        Value::String(t) => t.as_str(),
        Value::Array(types) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null"),
        _ if schema["properties"].is_object() => "object",
        _ => "string",
    };
    match kind {
        "object" => {
            let mut object = Map::new();
            if let Some(properties) = schema["properties"].as_object() {
                for (name, property) in properties {
                    object.insert(name.clone(), example(doc, property));
                }
            } else if schema["additionalProperties"].is_object() {
                object.insert(
                    "k".to_owned(),
                    example(doc, &schema["additionalProperties"]),
                );
            }
            Value::Object(object)
        }
        "array" => json!([example(doc, &schema["items"])]),
        "integer" | "number" => schema.get("minimum").cloned().unwrap_or(json!(1)),
        "boolean" => json!(false),
        "null" => Value::Null,
        _ => json!("x"),
    }
}

/// Every value of `body` is a slot, and so is the first key of every object.
fn body_slots(value: &Value, at: &mut Vec<String>, out: &mut Vec<Slot>) {
    match value {
        Value::Object(object) => {
            if !object.is_empty() {
                out.push(Slot::BodyKey(at.clone()));
            }
            for (key, v) in object {
                at.push(key.clone());
                body_slots(v, at, out);
                at.pop();
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                at.push(i.to_string());
                body_slots(v, at, out);
                at.pop();
            }
        }
        _ => out.push(Slot::Body(at.clone())),
    }
}

fn routes_under_test() -> Vec<RouteUnderTest> {
    let doc = serde_json::to_value(payments_api::routes::document()).expect("document");
    ROUTES
        .iter()
        .map(|route| {
            let method = route.method.as_str().to_ascii_lowercase();
            let operation = &doc["paths"][route.path][&method];
            assert!(
                operation.is_object(),
                "{method} {} undocumented",
                route.path
            );
            let parameters = operation["parameters"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let header = |name: &str| {
                parameters
                    .iter()
                    .any(|p| p["in"] == "header" && p["name"].as_str() == Some(name))
            };
            let needs_api_key = operation["security"]
                .as_array()
                .is_some_and(|s| s.iter().any(|r| r.get("api_key").is_some()));
            let body = operation["requestBody"]["content"]["application/json"]["schema"]
                .as_object()
                .map(|_| {
                    example(
                        &doc,
                        &operation["requestBody"]["content"]["application/json"]["schema"],
                    )
                });
            let mut slots = Vec::new();
            if let Some(body) = &body {
                body_slots(body, &mut Vec::new(), &mut slots);
                slots.push(Slot::Header("Content-Type".to_owned()));
            }
            for p in &parameters {
                let name = p["name"].as_str().unwrap_or_default().to_owned();
                match p["in"].as_str() {
                    Some("query") => slots.push(Slot::Query(name)),
                    Some("path") => slots.push(Slot::Path(name)),
                    Some("header") => slots.push(Slot::Header(name)),
                    _ => {}
                }
            }
            if needs_api_key {
                slots.push(Slot::Header("Authorization".to_owned()));
            }
            RouteUnderTest {
                method: route.method.as_str().to_owned(),
                path: route.path,
                family: operation["tags"][0]
                    .as_str()
                    .unwrap_or("untagged")
                    .to_owned(),
                needs_api_key,
                needs_idempotency_key: header("Idempotency-Key"),
                signed_webhook: header("webhook-signature"),
                body,
                slots,
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Requests on a raw socket

/// Everything but the unreserved characters, percent-encoded: what a client library does
/// with text it puts in a URL.
fn percent_encode(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

struct Answer {
    status: u16,
    body: Vec<u8>,
}

/// One HTTP/1.1 exchange on a fresh connection, closed after the answer.
fn exchange(address: &str, request: &[u8]) -> Result<Answer, String> {
    let mut stream = TcpStream::connect(address).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    // The server may answer (413, 400) and close before reading everything: what it
    // answered is still read below.
    let _ = stream.write_all(request);
    let mut received = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => received.extend_from_slice(&chunk[..n]),
            Err(e) if received.is_empty() => return Err(format!("no answer: {e}")),
            Err(_) => break,
        }
    }
    let head_end = received
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| {
            format!(
                "no complete answer: {:?}",
                String::from_utf8_lossy(&received)
            )
        })?;
    let head = String::from_utf8_lossy(&received[..head_end]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status line: {head:?}"))?;
    let mut body = received[head_end + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    Ok(Answer { status, body })
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = data.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&data[..line_end])
            .ok()
            .and_then(|s| usize::from_str_radix(s.trim(), 16).ok())
            .unwrap_or(0);
        let start = line_end + 2;
        if size == 0 || data.len() < start + size {
            break;
        }
        out.extend_from_slice(&data[start..start + size]);
        data = &data[(start + size + 2).min(data.len())..];
    }
    out
}
