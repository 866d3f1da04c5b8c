//! Where a merchant's endpoint may point: `http`/`https`, at most 2048 characters, no user
//! info, and (unless `WEBHOOK_ALLOW_PRIVATE_URLS=true`) only public addresses, whatever the
//! spelling of the host: `localhost`, `[::ffff:127.0.0.1]`, `2130706433`, `0x7f.1`, `0177.1`
//! and names that resolve to such addresses are all refused.
//!
//! The check runs at registration and again before every connection, on the addresses the
//! connection then uses (`awc`'s `address`): DNS answering differently between the check
//! and the connect (rebinding) cannot slip a private address through.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// How long a lookup may take before the destination counts as unresolvable.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// A syntactically valid endpoint URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointUrl {
    text: String,
    host: Host,
    port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    /// An address literal, in any spelling the system resolver would take as one.
    Ip(IpAddr),
    /// A name, lower case, without a trailing dot.
    Name(String),
}

/// Why a destination is refused (at registration: 400 `param: "url"`; at delivery: the
/// attempt fails with this as its error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DestinationError {
    #[error("{0}")]
    Invalid(&'static str),
    #[error("`url` points at a loopback, private, link-local or otherwise non-public address")]
    NotPublic,
    #[error("the host of `url` does not resolve: {0}")]
    Unresolvable(String),
}

impl EndpointUrl {
    /// The longest URL an endpoint may have.
    pub const MAX_LEN: usize = 2048;

    pub fn parse(text: &str) -> Result<Self, DestinationError> {
        use DestinationError::Invalid;
        if text.len() > Self::MAX_LEN {
            return Err(Invalid("`url` must be at most 2048 characters"));
        }
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Invalid(
                "`url` must be an absolute URL of visible ASCII characters (percent-encode the rest)",
            ));
        }
        let uri: awc::http::Uri = text
            .parse()
            .map_err(|_| Invalid("`url` is not a valid absolute URL"))?;
        let default_port = match uri.scheme_str().map(str::to_ascii_lowercase).as_deref() {
            Some("http") => 80,
            Some("https") => 443,
            _ => return Err(Invalid("`url` must be an http or https URL")),
        };
        let authority = uri.authority().ok_or(Invalid("`url` must name a host"))?;
        if authority.as_str().contains('@') {
            return Err(Invalid("`url` must not contain user information"));
        }
        let host = parse_host(authority.host())?;
        // `port_u16` reads a port it cannot parse (`:99999`) as none: the default would
        // then be used for a port nobody asked for. What follows the host is checked here.
        let port = match authority.as_str().strip_prefix(authority.host()) {
            None | Some("" | ":") => default_port,
            Some(rest) => rest
                .strip_prefix(':')
                .filter(|digits| digits.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|digits| digits.parse::<u16>().ok())
                .filter(|port| *port != 0)
                .ok_or(Invalid(
                    "the port of `url` must be a number from 1 to 65535",
                ))?,
        };
        Ok(Self {
            text: text.to_owned(),
            host,
            port,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The registration check: refuses non-public destinations unless `allow_private`.
    pub async fn check(&self, allow_private: bool) -> Result<(), DestinationError> {
        if allow_private {
            return Ok(());
        }
        self.resolve(false).await.map(|_| ())
    }

    /// The address to connect to, checked (unless `allow_private`): every address the host
    /// resolves to must be public, so a name that answers with a mix is refused whole.
    pub async fn resolve(&self, allow_private: bool) -> Result<SocketAddr, DestinationError> {
        let addresses = match &self.host {
            Host::Ip(ip) => vec![SocketAddr::new(*ip, self.port)],
            Host::Name(name) if !allow_private && is_local_name(name) => {
                return Err(DestinationError::NotPublic);
            }
            Host::Name(name) => lookup(name.clone(), self.port).await?,
        };
        if !allow_private && addresses.iter().any(|a| !is_public(a.ip())) {
            return Err(DestinationError::NotPublic);
        }
        addresses
            .into_iter()
            .next()
            .ok_or_else(|| DestinationError::Unresolvable("no addresses".to_owned()))
    }
}

fn parse_host(host: &str) -> Result<Host, DestinationError> {
    use DestinationError::Invalid;
    if let Some(inner) = host.strip_prefix('[') {
        let literal = inner
            .strip_suffix(']')
            .ok_or(Invalid("`url` has a malformed IPv6 address"))?;
        return literal
            .parse::<Ipv6Addr>()
            .map(|ip| Host::Ip(IpAddr::V6(ip)))
            .map_err(|_| Invalid("`url` has a malformed IPv6 address"));
    }
    let name = host.to_ascii_lowercase();
    let name = name.strip_suffix('.').unwrap_or(&name);
    if name.is_empty() {
        return Err(Invalid("`url` must name a host"));
    }
    Ok(match parse_ipv4_any_form(name) {
        Some(ip) => Host::Ip(IpAddr::V4(ip)),
        None => Host::Name(name.to_owned()),
    })
}

/// An IPv4 address in every form `inet_aton` (and so the system resolver) accepts: one to
/// four parts, each decimal, octal (leading `0`) or hex (`0x`), the last filling the rest
/// (`127.1`, `2130706433`, `0x7f.1`, `0177.0.0.1`).
fn parse_ipv4_any_form(text: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = text.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let numbers = parts
        .iter()
        .map(|part| {
            let (digits, radix) =
                if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
                    (hex, 16)
                } else if part.len() > 1 && part.starts_with('0') {
                    (&part[1..], 8)
                } else {
                    (*part, 10)
                };
            if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
                return None;
            }
            u64::from_str_radix(digits, radix).ok()
        })
        .collect::<Option<Vec<u64>>>()?;
    let (last, leading) = numbers.split_last()?;
    if leading.iter().any(|&n| n > 255) {
        return None;
    }
    let last_bits = 8 * (4 - leading.len() as u32);
    if *last >= 1u64 << last_bits {
        return None;
    }
    let mut value: u64 = 0;
    for (i, n) in leading.iter().enumerate() {
        value |= n << (24 - 8 * i as u32);
    }
    value |= last;
    u32::try_from(value).ok().map(Ipv4Addr::from)
}

/// Names that mean this machine whatever DNS says (RFC 6761).
fn is_local_name(name: &str) -> bool {
    name == "localhost" || name.ends_with(".localhost")
}

async fn lookup(name: String, port: u16) -> Result<Vec<SocketAddr>, DestinationError> {
    use std::net::ToSocketAddrs;
    let lookup = actix_web::rt::task::spawn_blocking(move || {
        (name.as_str(), port)
            .to_socket_addrs()
            .map(|a| a.collect::<Vec<_>>())
    });
    match actix_web::rt::time::timeout(LOOKUP_TIMEOUT, lookup).await {
        Ok(Ok(Ok(addresses))) if !addresses.is_empty() => Ok(addresses),
        Ok(Ok(Ok(_))) => Err(DestinationError::Unresolvable("no addresses".to_owned())),
        Ok(Ok(Err(e))) => Err(DestinationError::Unresolvable(e.to_string())),
        Ok(Err(_)) => Err(DestinationError::Unresolvable("lookup failed".to_owned())),
        Err(_) => Err(DestinationError::Unresolvable(
            "lookup timed out".to_owned(),
        )),
    }
}

/// Whether an address is publicly routable unicast: not loopback, private, shared (CGNAT),
/// link-local, unspecified, multicast, broadcast, documentation, benchmarking or reserved.
/// IPv6 forms that carry an IPv4 address (mapped, NAT64, 6to4) are judged by it.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0                                     // "this network", unspecified
        || a == 10                               // private
        || (a == 100 && (64..128).contains(&b))  // shared address space (CGNAT)
        || a == 127                              // loopback
        || (a == 169 && b == 254)                // link-local (cloud metadata)
        || (a == 172 && (16..32).contains(&b))   // private
        || (a == 192 && b == 0 && c == 0)        // IETF protocol assignments
        || (a == 192 && b == 0 && c == 2)        // documentation
        || (a == 192 && b == 88 && c == 99)      // 6to4 relay anycast
        || (a == 192 && b == 168)                // private
        || (a == 198 && (b == 18 || b == 19))    // benchmarking
        || (a == 198 && b == 51 && c == 100)     // documentation
        || (a == 203 && b == 0 && c == 113)      // documentation
        || a >= 224) // multicast, reserved, broadcast
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if s[..5] == [0; 5] && s[5] == 0xffff {
        return is_public_v4(embedded(s[6], s[7])); // IPv4-mapped
    }
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0; 4] {
        return is_public_v4(embedded(s[6], s[7])); // NAT64 well-known prefix
    }
    if s[0] == 0x2002 {
        return is_public_v4(embedded(s[1], s[2])); // 6to4
    }
    // Global unicast is 2000::/3; everything else (::, ::1, IPv4-compatible, ULA fc00::/7,
    // link-local fe80::/10, multicast ff00::/8, discard 100::/64, …) is not public.
    (s[0] & 0xe000) == 0x2000
        && !(s[0] == 0x2001 && s[1] < 0x0200) // 2001::/23 IETF protocol assignments (Teredo, …)
        && !(s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        && !(s[0] == 0x3fff && s[1] < 0x1000) // documentation (RFC 9637)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(url: &str) -> DestinationError {
        let parsed = EndpointUrl::parse(url);
        match parsed {
            Err(e) => e,
            Ok(url) => futures_executor(url.check(false)).expect_err(url.as_str()),
        }
    }

    /// Runs a check on a throwaway runtime (lookups use the blocking pool).
    fn futures_executor<F: std::future::Future>(f: F) -> F::Output {
        actix_web::rt::System::new().block_on(f)
    }

    #[test]
    fn every_spelling_of_a_non_public_host_is_refused() {
        for url in [
            "http://127.0.0.1/hook",
            "http://127.1/",
            "http://2130706433/",
            "http://0x7f.1/",
            "http://0x7F000001/",
            "http://0177.0.0.1/",
            "http://017700000001/",
            "http://localhost:8080/",
            "http://LOCALHOST./",
            "http://api.localhost/",
            "http://[::1]/",
            "http://[::]/",
            "http://0.0.0.0/",
            "http://0/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://[::ffff:10.0.0.1]/",
            "http://[64:ff9b::a9fe:a9fe]/",
            "http://[2002:c0a8:0101::1]/",
            "http://[::127.0.0.1]/",
            "http://10.1.2.3/",
            "http://172.16.0.1/",
            "http://172.31.255.255/",
            "http://192.168.1.1/",
            "http://100.64.0.1/",
            "http://169.254.169.254/latest/meta-data",
            "http://[fe80::1]/",
            "http://[fc00::1]/",
            "http://[fd12:3456::1]/",
            "http://224.0.0.1/",
            "http://[ff02::1]/",
            "http://255.255.255.255/",
            "http://198.18.0.1/",
            "http://192.0.2.10/",
            "http://[2001:db8::1]/",
            "http://[2001::1]/",
        ] {
            assert_eq!(refused(url), DestinationError::NotPublic, "{url}");
        }
    }

    #[test]
    fn malformed_urls_are_refused_with_a_reason() {
        let long = format!("https://example.com/{}", "a".repeat(2048));
        for url in [
            "ftp://example.com/",
            "example.com/hook",
            "/hook",
            "https://user:pass@example.com/",
            "https://user@example.com/",
            "https://exa mple.com/",
            "https://exämple.com/",
            "https:///hook",
            "http://[::1/",
            "http://example.com:99999/",
            "http://example.com:0/",
            "http://example.com:-1/",
            "http://example.com:8o/",
            "http://[2606:4700::1111]:65536/",
            long.as_str(),
            "",
        ] {
            assert!(
                matches!(EndpointUrl::parse(url), Err(DestinationError::Invalid(_))),
                "{url}"
            );
        }
    }

    #[test]
    fn public_addresses_pass_and_connect_where_they_were_checked() {
        for (url, expected) in [
            ("https://93.184.215.14/hook", "93.184.215.14:443"),
            ("http://8.8.8.8:8080/", "8.8.8.8:8080"),
            ("http://8.8.8.8:65535/", "8.8.8.8:65535"),
            ("http://8.8.8.8:/", "8.8.8.8:80"),
            ("https://[2606:4700::1111]:8443/", "[2606:4700::1111]:8443"),
            ("HTTPS://[2606:4700::1111]/x", "[2606:4700::1111]:443"),
            ("http://[::ffff:8.8.8.8]/", "[::ffff:8.8.8.8]:80"),
            ("http://134744072/", "8.8.8.8:80"),
        ] {
            let parsed = EndpointUrl::parse(url).unwrap();
            let addr = futures_executor(parsed.resolve(false)).unwrap();
            assert_eq!(addr.to_string(), expected, "{url}");
        }
    }

    #[test]
    fn private_destinations_are_allowed_when_configured() {
        let url = EndpointUrl::parse("http://127.0.0.1:9/").unwrap();
        assert!(futures_executor(url.check(true)).is_ok());
        let addr = futures_executor(url.resolve(true)).unwrap();
        assert_eq!(addr.to_string(), "127.0.0.1:9");
        // A name is resolved and checked when connecting, not only when registering.
        let name = EndpointUrl::parse("http://localhost:9/").unwrap();
        assert_eq!(
            futures_executor(name.resolve(false)),
            Err(DestinationError::NotPublic)
        );
        assert!(futures_executor(name.resolve(true)).is_ok());
    }

    #[test]
    fn names_that_look_numeric_but_are_not_addresses_stay_names() {
        assert_eq!(parse_ipv4_any_form("1.2.3.4.5"), None);
        assert_eq!(parse_ipv4_any_form("256.1.1.1"), None);
        assert_eq!(parse_ipv4_any_form("123.abc"), None);
        assert_eq!(parse_ipv4_any_form("08.1.1.1"), None);
        assert_eq!(parse_ipv4_any_form("1.16777216"), None);
        assert_eq!(
            parse_ipv4_any_form("1.0x10.0377"),
            Some(Ipv4Addr::new(1, 16, 0, 255))
        );
        assert_eq!(parse_ipv4_any_form("4294967295"), Some(Ipv4Addr::BROADCAST));
        assert_eq!(parse_ipv4_any_form("4294967296"), None);
    }
}
