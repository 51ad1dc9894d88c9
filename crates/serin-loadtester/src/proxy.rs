//! Which HTTP proxy a request goes through: `-x` first, then HTTP_PROXY / http_proxy unless
//! NO_PROXY / no_proxy lists the host. In the sandbox this is the mesh proxy.

use std::net::IpAddr;

/// The proxy settings the load generator follows for http:// targets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyConfig {
    /// The proxy's `host:port`, or none to connect directly.
    pub http_proxy: Option<(String, u16)>,
    /// Hosts reached directly: exact names or addresses, `.suffix` or `suffix` for a domain and
    /// its subdomains, CIDR ranges such as `127.0.0.0/8`, or `*` for all.
    pub no_proxy: Vec<String>,
}

impl ProxyConfig {
    /// No proxy: every request goes straight to its target.
    pub fn direct() -> Self {
        ProxyConfig::default()
    }

    /// Every request goes through `proxy` (`host:port` or `http://host:port`), except the hosts
    /// in `no_proxy`. Returns `None` if `proxy` cannot be read.
    pub fn through(proxy: &str, no_proxy: &[&str]) -> Option<Self> {
        Some(ProxyConfig {
            http_proxy: Some(parse_host_port(proxy)?),
            no_proxy: no_proxy.iter().map(|entry| entry.to_string()).collect(),
        })
    }

    /// Reads HTTP_PROXY (or http_proxy) and NO_PROXY (or no_proxy) from the environment.
    pub fn from_env() -> Self {
        let (proxy, no_proxy) = proxy_env();
        ProxyConfig {
            http_proxy: proxy.and_then(|value| parse_host_port(&value)),
            no_proxy,
        }
    }

    /// The proxy to use for `host`, or `None` to connect directly.
    pub fn proxy_for(&self, host: &str) -> Option<&(String, u16)> {
        let proxy = self.http_proxy.as_ref()?;
        (!bypasses(&self.no_proxy, host)).then_some(proxy)
    }
}

/// HTTP_PROXY (or http_proxy) and the entries of NO_PROXY (or no_proxy) from the environment.
pub fn proxy_env() -> (Option<String>, Vec<String>) {
    let read = |upper: &str, lower: &str| {
        std::env::var(upper)
            .ok()
            .filter(|value| !value.is_empty())
            .or_else(|| std::env::var(lower).ok().filter(|value| !value.is_empty()))
    };
    let no_proxy = read("NO_PROXY", "no_proxy")
        .map(|value| split_no_proxy(&value))
        .unwrap_or_default();
    (read("HTTP_PROXY", "http_proxy"), no_proxy)
}

/// Splits a comma-separated NO_PROXY value into its entries.
pub fn split_no_proxy(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(|entry| entry.trim().to_string())
        .filter(|entry| !entry.is_empty())
        .collect()
}

/// Whether the NO_PROXY `entries` send requests to `host` directly: an exact name or address, a
/// domain (`.svc` or `svc`) and its subdomains, a CIDR range such as `127.0.0.0/8`, or `*`.
pub fn bypasses(entries: &[String], host: &str) -> bool {
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    let address: Option<IpAddr> = host.parse().ok();
    entries.iter().any(|entry| {
        let entry = entry.to_ascii_lowercase();
        if entry == "*" {
            return true;
        }
        if let (Some(address), Some((network, bits))) = (address, entry.split_once('/')) {
            return match (network.parse::<IpAddr>(), bits.parse::<u32>()) {
                (Ok(network), Ok(bits)) => in_network(address, network, bits),
                _ => false,
            };
        }
        // Entries may carry a port; the port does not matter for the match.
        let entry_host = match entry.rsplit_once(':') {
            Some((name, port))
                if !name.contains(':') && port.chars().all(|c| c.is_ascii_digit()) =>
            {
                name
            }
            _ => entry.as_str(),
        };
        let domain = entry_host.trim_start_matches('.');
        !domain.is_empty() && (host == domain || host.ends_with(&format!(".{domain}")))
    })
}

/// The name a pod's DNS search path gives a short host in `namespace`: `podinfo-canary` becomes
/// `podinfo-canary.test`. `None` (use the host as written) for names with a dot, `localhost`,
/// addresses, and an empty host or namespace.
pub fn search_name(host: &str, namespace: &str) -> Option<String> {
    let short = !host.is_empty()
        && !namespace.is_empty()
        && !host.contains(['.', ':', '[', '/', '@'])
        && !host.eq_ignore_ascii_case("localhost")
        && host.parse::<IpAddr>().is_err()
        && !host.chars().all(|c| c.is_ascii_digit());
    short.then(|| format!("{host}.{namespace}"))
}

/// `url` (`http://host[:port]/path`; the scheme may be left out, as curl allows) with its host
/// expanded by [`search_name`]; every other URL comes back unchanged.
pub fn search_url(url: &str, namespace: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, host_port) = match authority.rsplit_once('@') {
        Some((userinfo, host_port)) => (Some(userinfo), host_port),
        None => (None, authority),
    };
    let (host, port) = match host_port.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (host_port, None),
    };
    let Some(name) = search_name(host, namespace) else {
        return url.to_string();
    };
    let mut out = String::new();
    if let Some(scheme) = scheme {
        out.push_str(scheme);
        out.push_str("://");
    }
    if let Some(userinfo) = userinfo {
        out.push_str(userinfo);
        out.push('@');
    }
    out.push_str(&name);
    if let Some(port) = port {
        out.push(':');
        out.push_str(port);
    }
    out.push_str(tail);
    out
}

/// Parses `host:port`, `[v6]:port` or `http://host:port/` (port 80 when missing after a scheme).
pub fn parse_host_port(text: &str) -> Option<(String, u16)> {
    let without_scheme = text.strip_prefix("http://").unwrap_or(text);
    let had_scheme = without_scheme.len() != text.len();
    let authority = without_scheme.split('/').next()?;
    let authority = authority.rsplit('@').next()?;
    if authority.is_empty() {
        return None;
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(port) => port.parse().ok()?,
        None if had_scheme => 80,
        None => return None,
    };
    Some((host.to_string(), port))
}

fn in_network(address: IpAddr, network: IpAddr, bits: u32) -> bool {
    match (address, network) {
        (IpAddr::V4(address), IpAddr::V4(network)) if bits <= 32 => {
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits)
            };
            u32::from(address) & mask == u32::from(network) & mask
        }
        (IpAddr::V6(address), IpAddr::V6(network)) if bits <= 128 => {
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits)
            };
            u128::from(address) & mask == u128::from(network) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_proxy_matches_names_domains_and_ranges() {
        let config = ProxyConfig::through(
            "http://127.0.0.1:15001",
            &["localhost", ".svc", "example.com:80", "127.0.0.0/8"],
        )
        .unwrap();
        let proxied = |host: &str| config.proxy_for(host).is_some();
        assert!(proxied("podinfo.test"));
        assert!(!proxied("localhost"));
        assert!(!proxied("podinfo.test.svc"));
        assert!(!proxied("api.example.com"));
        assert!(!proxied("127.0.0.1"));
        assert!(proxied("10.0.0.1"));
        assert!(ProxyConfig::direct().proxy_for("podinfo.test").is_none());
        let all = ProxyConfig::through("p:1", &["*"]).unwrap();
        assert!(all.proxy_for("podinfo.test").is_none());
    }

    #[test]
    fn short_hosts_expand_in_the_namespace_as_a_dns_search_path() {
        assert_eq!(
            search_url("http://podinfo-canary:9898/token", "test"),
            "http://podinfo-canary.test:9898/token"
        );
        assert_eq!(search_url("podinfo/x?y=1", "test"), "podinfo.test/x?y=1");
        assert_eq!(
            search_url("http://u:p@web/", "prod"),
            "http://u:p@web.prod/"
        );
        for kept in [
            "http://podinfo.test:9898/",
            "http://localhost:8080/healthz",
            "http://127.0.0.1:80/",
            "http://[::1]:80/",
            "http://podinfo.test.svc.cluster.local/",
        ] {
            assert_eq!(search_url(kept, "test"), kept);
        }
        assert_eq!(search_name("web", ""), None);
    }

    #[test]
    fn proxy_addresses() {
        assert_eq!(
            parse_host_port("127.0.0.1:3128"),
            Some(("127.0.0.1".into(), 3128))
        );
        assert_eq!(
            parse_host_port("http://proxy:8080/"),
            Some(("proxy".into(), 8080))
        );
        assert_eq!(parse_host_port("http://proxy"), Some(("proxy".into(), 80)));
        assert_eq!(parse_host_port("[::1]:80"), Some(("::1".into(), 80)));
        assert_eq!(parse_host_port("proxy"), None);
    }
}
