//! Request bodies read field by field: one JSON parser that applies the text rule to every
//! string (`parse_json`), and `JsonObject`, whose getters turn every problem into a 400 that
//! names the field. Below the flows (which parse their requests with it) and the HTTP layer
//! (which reads the bytes), so neither imports the other for it.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::domain::{check_text, sanitized};
use crate::error::ApiError;

/// A JSON object body whose fields are taken one by one; fields that are not allowed are
/// refused up front so that a typo never silently drops a value.
pub struct JsonObject {
    fields: Map<String, Value>,
}

/// A JSON body whose every string, object keys included and however deeply nested, obeys
/// [`check_text`]: the one place request JSON is parsed, so no getter can see text the rule
/// refuses (the provider's webhook events get it made fit instead: [`parse_provider_json`]).
/// A string at fault is a 400 naming the top-level field it is in.
pub fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    let value = parse_unique(body)?;
    match &value {
        Value::Object(fields) => {
            for (name, field) in fields {
                check_text(name)
                    .and_then(|()| check_json_strings(field))
                    .map_err(|rule| ApiError::invalid(name.clone(), format!("`{name}` {rule}")))?;
            }
        }
        other => check_json_strings(other).map_err(|rule| ApiError::InvalidRequest {
            detail: format!("the body {rule}"),
            param: None,
        })?,
    }
    Ok(value)
}

/// A JSON body from the provider, parsed as [`parse_json`] parses, but with the text the
/// rule refuses made fit to store ([`sanitized`]: each such character becomes U+FFFD) rather
/// than refused. What the provider reports has already happened: a dispute whose reason
/// holds a stray control character must still open, and an event refused with a 400 would
/// only come back, the same, until the provider gives up on it.
pub fn parse_provider_json(body: &[u8]) -> Result<Value, ApiError> {
    let mut value = parse_unique(body)?;
    sanitize_json_strings(&mut value);
    Ok(value)
}

/// Well-formed JSON with each object naming a member once, or the 400 that says where not.
fn parse_unique(body: &[u8]) -> Result<Value, ApiError> {
    let Unique(value) = serde_json::from_slice(body).map_err(|e| ApiError::InvalidRequest {
        detail: format!("the body is not valid JSON: {e}"),
        param: refused_whole(&e)
            .then(|| field_at(body, e.line(), e.column()))
            .flatten(),
    })?;
    Ok(value)
}

/// Well-formed JSON the parser still refuses: a number beyond `f64` (`1e400`), nesting past
/// its recursion limit, a name given twice in one object. The document is refused whole
/// before any field is read, so the field is found from where the parser stopped.
fn refused_whole(e: &serde_json::Error) -> bool {
    let message = e.to_string();
    ["number out of range", "recursion limit exceeded", DUPLICATE]
        .iter()
        .any(|refusal| message.starts_with(refusal))
}

const DUPLICATE: &str = "a name given twice in one object";

/// A JSON value whose objects each name a member once. `{"amount": 100, "amount": 200}` is
/// well-formed JSON that parsers read differently (serde_json keeps the last, others the
/// first): a payment API refuses it rather than guess which amount was meant.
struct Unique(Value);

impl<'de> serde::Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueVisitor).map(Unique)
    }
}

struct UniqueVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Unique(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut fields = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            let Unique(field) = map.next_value()?;
            if fields.contains_key(&name) {
                return Err(serde::de::Error::custom(format_args!(
                    "{DUPLICATE}: `{name}`"
                )));
            }
            fields.insert(name, field);
        }
        Ok(Value::Object(fields))
    }
}

/// The top-level field whose value holds `line`:`column` (1-based, as serde_json reports).
fn field_at(body: &[u8], line: usize, column: usize) -> Option<String> {
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    let line_start = if line <= 1 {
        0
    } else {
        body.iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .nth(line - 2)?
            .0
            + 1
    };
    let at = (line_start + column.saturating_sub(1)).min(body.len());
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let (mut key_start, mut key) = (None, None::<String>);
    for (i, &b) in body[..at].iter().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => {
                    in_string = false;
                    if let Some(start) = key_start.take() {
                        key = serde_json::from_slice(&body[start..=i]).ok();
                    }
                }
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                // A string at depth 1 where a key may start: after `{` or `,`.
                let before = body[..i].iter().rev().find(|c| !c.is_ascii_whitespace());
                if depth == 1 && matches!(before, Some(b'{' | b',')) {
                    key_start = Some(i);
                }
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    key.filter(|_| depth >= 1)
}

fn check_json_strings(value: &Value) -> Result<(), &'static str> {
    match value {
        Value::String(s) => check_text(s),
        Value::Array(items) => items.iter().try_for_each(check_json_strings),
        Value::Object(fields) => fields
            .iter()
            .try_for_each(|(key, v)| check_text(key).and_then(|()| check_json_strings(v))),
        Value::Null | Value::Bool(_) | Value::Number(_) => Ok(()),
    }
}

/// Every string of `value`, object keys included, made to obey [`check_text`] (the parser's
/// recursion limit bounds the depth).
fn sanitize_json_strings(value: &mut Value) {
    match value {
        Value::String(s) => *s = sanitized(std::mem::take(s)),
        Value::Array(items) => items.iter_mut().for_each(sanitize_json_strings),
        Value::Object(fields) if fields.keys().any(|key| check_text(key).is_err()) => {
            *fields = std::mem::take(fields)
                .into_iter()
                .map(|(key, mut v)| {
                    sanitize_json_strings(&mut v);
                    (sanitized(key), v)
                })
                .collect();
        }
        Value::Object(fields) => fields.values_mut().for_each(sanitize_json_strings),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

impl JsonObject {
    pub fn parse(body: &[u8], allowed: &[&str]) -> Result<Self, ApiError> {
        let Value::Object(fields) = parse_json(body)? else {
            return Err(ApiError::InvalidRequest {
                detail: "the body must be a JSON object".to_owned(),
                param: None,
            });
        };
        if let Some(unknown) = fields.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(ApiError::invalid(
                unknown.clone(),
                format!("`{unknown}` is not a field of this request"),
            ));
        }
        Ok(Self { fields })
    }

    /// Like [`JsonObject::parse`], but an empty body is an empty object: for requests
    /// whose fields are all optional.
    pub fn parse_or_empty(body: &[u8], allowed: &[&str]) -> Result<Self, ApiError> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self { fields: Map::new() });
        }
        Self::parse(body, allowed)
    }

    /// The field's value; JSON `null` counts as absent.
    fn take(&mut self, name: &str) -> Option<Value> {
        self.fields.remove(name).filter(|v| !v.is_null())
    }

    pub fn optional_integer(&mut self, name: &str) -> Result<Option<i64>, ApiError> {
        match self.take(name) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| ApiError::invalid(name, format!("`{name}` must be an integer"))),
        }
    }

    pub fn required_integer(&mut self, name: &str) -> Result<i64, ApiError> {
        self.optional_integer(name)?
            .ok_or_else(|| ApiError::invalid(name, format!("`{name}` is required")))
    }

    pub fn optional_string(
        &mut self,
        name: &str,
        max_chars: usize,
    ) -> Result<Option<String>, ApiError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::String(s)) if s.chars().count() <= max_chars => Ok(Some(s)),
            Some(Value::String(_)) => Err(ApiError::invalid(
                name,
                format!("`{name}` must be at most {max_chars} characters"),
            )),
            Some(_) => Err(ApiError::invalid(
                name,
                format!("`{name}` must be a string"),
            )),
        }
    }

    pub fn optional_bool(&mut self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(_) => Err(ApiError::invalid(
                name,
                format!("`{name}` must be true or false"),
            )),
        }
    }

    /// A nested object with only the `allowed` fields (a fault in it names `name`); `None`
    /// when absent or null.
    pub fn optional_object(
        &mut self,
        name: &str,
        allowed: &[&str],
    ) -> Result<Option<JsonObject>, ApiError> {
        let fields = match self.take(name) {
            None => return Ok(None),
            Some(Value::Object(fields)) => fields,
            Some(_) => {
                return Err(ApiError::invalid(
                    name,
                    format!("`{name}` must be an object"),
                ));
            }
        };
        if let Some(unknown) = fields.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(ApiError::invalid(
                name,
                format!("`{name}.{unknown}` is not a field of this request"),
            ));
        }
        Ok(Some(Self { fields }))
    }

    pub fn required_string(&mut self, name: &str, max_chars: usize) -> Result<String, ApiError> {
        self.optional_string(name, max_chars)?
            .ok_or_else(|| ApiError::invalid(name, format!("`{name}` is required")))
    }

    /// An array of strings, e.g. `enabled_events`; `None` when absent or null.
    pub fn optional_string_list(
        &mut self,
        name: &str,
        max_items: usize,
        max_chars: usize,
    ) -> Result<Option<Vec<String>>, ApiError> {
        let items = match self.take(name) {
            None => return Ok(None),
            Some(Value::Array(items)) if items.len() <= max_items => items,
            Some(_) => {
                return Err(ApiError::invalid(
                    name,
                    format!("`{name}` must be an array of at most {max_items} strings"),
                ));
            }
        };
        items
            .into_iter()
            .map(|item| match item {
                Value::String(s) if s.chars().count() <= max_chars => Ok(s),
                _ => Err(ApiError::invalid(
                    name,
                    format!("`{name}` must hold strings of at most {max_chars} characters"),
                )),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// An object of string values, e.g. `metadata`; absent or null is empty.
    pub fn optional_string_map(
        &mut self,
        name: &str,
        max_keys: usize,
        max_key_chars: usize,
        max_value_chars: usize,
    ) -> Result<BTreeMap<String, String>, ApiError> {
        let object = match self.take(name) {
            None => return Ok(BTreeMap::new()),
            Some(Value::Object(object)) => object,
            Some(_) => {
                return Err(ApiError::invalid(
                    name,
                    format!("`{name}` must be an object"),
                ));
            }
        };
        if object.len() > max_keys {
            return Err(ApiError::invalid(
                name,
                format!("`{name}` may have at most {max_keys} keys"),
            ));
        }
        object
            .into_iter()
            .map(|(key, value)| {
                if key.is_empty() || key.chars().count() > max_key_chars {
                    return Err(ApiError::invalid(
                        name,
                        format!("`{name}` keys must be 1 to {max_key_chars} characters"),
                    ));
                }
                match value {
                    Value::String(s) if s.chars().count() <= max_value_chars => Ok((key, s)),
                    _ => Err(ApiError::invalid(
                        name,
                        format!("`{name}` values must be strings of at most {max_value_chars} characters"),
                    )),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param_of(body: &str) -> Option<String> {
        match parse_json(body.as_bytes()) {
            Err(ApiError::InvalidRequest { param, .. }) => param,
            other => panic!("{body}: {:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn a_value_the_parser_cannot_hold_names_its_top_level_field() {
        assert_eq!(param_of(r#"{"amount": 1e400}"#).as_deref(), Some("amount"));
        assert_eq!(
            param_of("{\n  \"a\\\"b\": \"x,{\",\n  \"n\": [1, {\"m\": -1e999}]\n}").as_deref(),
            Some("n"),
            "escaped quotes, strings holding a comma and a brace, a nested value, several lines"
        );
        let deep = format!(
            r#"{{"x": 1, "metadata": {}{}}}"#,
            "[".repeat(300),
            "]".repeat(300)
        );
        assert_eq!(param_of(&deep).as_deref(), Some("metadata"));
        // Not an object, or not well-formed: no field to name.
        assert_eq!(param_of("[1e400]"), None);
        assert_eq!(param_of(r#"{"amount": 12x}"#), None);
    }

    #[test]
    fn a_name_given_twice_in_one_object_is_refused_naming_its_top_level_field() {
        assert_eq!(
            param_of(r#"{"amount": 100, "currency": "usd", "amount": 200}"#).as_deref(),
            Some("amount")
        );
        assert_eq!(
            param_of(r#"{"amount": 1, "metadata": {"a": "1", "a": "2"}}"#).as_deref(),
            Some("metadata")
        );
        assert_eq!(param_of(r#"[{"a": 1, "a": 1}]"#), None);
        // The same name in different objects, and every kind of value, are fine.
        let value = parse_json(
            br#"{"a": {"a": [1, -2, 3.5, true, null, "x", {"a": {}}]}, "b": 18446744073709551615}"#,
        )
        .unwrap();
        assert_eq!(value["a"]["a"][2], 3.5);
        assert_eq!(value["b"], u64::MAX);
        let Err(ApiError::InvalidRequest { detail, .. }) = parse_json(br#"{"x": 1, "x": 1}"#)
        else {
            panic!("accepted");
        };
        assert!(
            detail.contains("a name given twice in one object: `x`"),
            "{detail}"
        );
    }
}
