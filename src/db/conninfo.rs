//! A PostgreSQL `DATABASE_URL` read as libpq reads it, without connecting: a URL libpq cannot
//! use is a bad setting at start (exit 2, naming the variable), not a connection that times
//! out; and what is said about it never quotes the URL, whose password it may hold.

use std::ffi::{CStr, CString};

/// The values libpq checks only when it connects, checked here with the rest.
const CHECKED_WHEN_CONNECTING: [(&str, &[&str]); 3] = [
    (
        "sslmode",
        &[
            "disable",
            "allow",
            "prefer",
            "require",
            "verify-ca",
            "verify-full",
        ],
    ),
    (
        "target_session_attrs",
        &[
            "any",
            "read-write",
            "read-only",
            "primary",
            "standby",
            "prefer-standby",
        ],
    ),
    ("gssencmode", &["disable", "prefer", "require"]),
];

/// Whether libpq can use `url`; if not, why, in words that never hold the URL.
pub fn check(url: &str) -> Result<(), String> {
    let text = CString::new(url).map_err(|_| "it holds a NUL character".to_owned())?;
    for (keyword, value) in parse(&text).map_err(|why| why.replace(url, "the URL"))? {
        if let Some((_, allowed)) = CHECKED_WHEN_CONNECTING.iter().find(|(k, _)| *k == keyword)
            && !allowed.contains(&value.as_str())
        {
            return Err(format!(
                "{keyword} must be one of {}, got {value:?}",
                allowed.join(", ")
            ));
        }
        // A port for each host: whole numbers, comma-separated (libpq's multi-host form).
        if keyword == "port" && !value.split(',').all(|p| p.trim().parse::<u16>().is_ok()) {
            return Err(format!(
                "port must be a number from 0 to 65535, got {value:?}"
            ));
        }
    }
    Ok(())
}

/// libpq's `PQconninfoParse`: every option the URL sets, as (keyword, value).
fn parse(text: &CStr) -> Result<Vec<(String, String)>, String> {
    let owned = |p: *const std::os::raw::c_char| {
        // SAFETY: libpq's strings are NUL-terminated and live until the options are freed.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    let mut error: *mut std::os::raw::c_char = std::ptr::null_mut();
    // SAFETY: `text` is a NUL-terminated string that outlives the call; libpq allocates the
    // options or the error, and each is freed below with libpq's own function, once.
    let options = unsafe { pq_sys::PQconninfoParse(text.as_ptr(), &mut error) };
    if options.is_null() {
        let why = owned(error).unwrap_or_else(|| "libpq could not read it".to_owned());
        if !error.is_null() {
            // SAFETY: allocated by libpq for this call, freed once.
            unsafe { pq_sys::PQfreemem(error.cast()) };
        }
        return Err(why.trim().to_owned());
    }
    let mut set = Vec::new();
    let mut option = options;
    // SAFETY: the array ends with an option whose keyword is NULL; `option` stays inside it.
    unsafe {
        while let Some(keyword) = owned((*option).keyword) {
            if let Some(value) = owned((*option).val) {
                set.push((keyword, value));
            }
            option = option.add(1);
        }
        pq_sys::PQconninfoFree(options);
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn urls_libpq_can_use_pass() {
        for url in [
            "postgres://postgres@127.0.0.1:5432/postgres",
            "postgresql://u:p%40ss@h1:5432,h2:5433/db?target_session_attrs=read-write&sslmode=require",
            "postgres:///db?host=/var/run/postgresql",
        ] {
            assert_eq!(check(url), Ok(()), "{url}");
        }
    }

    /// Each is refused with a reason, and no reason quotes the URL (or its password).
    #[test]
    fn urls_libpq_cannot_use_are_refused_without_their_password() {
        for url in [
            "postgres://postgres:Sup3rS3cret@[::1",
            "postgres://postgres:Sup3rS3cret@127.0.0.1:5432/postgres?sslmode=bogus",
            "postgres://postgres:Sup3rS3cret@127.0.0.1:notaport/db",
            "postgresql://postgres:Sup3rS3cret@h/postgres?foo=bar",
            "postgres://postgres:Sup3rS3cret@h/db?target_session_attrs=writable",
        ] {
            let why = check(url).expect_err(url);
            assert!(
                !why.is_empty() && !why.contains("Sup3rS3cret"),
                "{url}: {why}"
            );
        }
    }
}
