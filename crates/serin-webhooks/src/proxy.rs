//! Which proxy an http:// request goes through: HTTP_PROXY (or http_proxy) unless NO_PROXY (or
//! no_proxy) lists the host. In the sandbox this is the mesh proxy that resolves `service.namespace`.

/// Proxy settings for http:// URLs, passed explicitly so tests never touch the process environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyConfig {
    /// The proxy as `host:port`, or `None` to connect directly.
    pub http_proxy: Option<String>,
    /// Hosts reached directly: exact names or addresses, `.suffix` or `suffix` for a domain and its
    /// subdomains, CIDR ranges such as `127.0.0.0/8`, or `*` for every host.
    pub no_proxy: Vec<String>,
}

impl ProxyConfig {
    /// No proxy: every request goes straight to its host.
    pub fn direct() -> Self {
        ProxyConfig::default()
    }

    /// Every http:// request goes through `proxy` (`host:port` or `http://host:port`) except those
    /// to the hosts in `no_proxy`.
    pub fn through(proxy: &str, no_proxy: &[&str]) -> Self {
        ProxyConfig {
            http_proxy: proxy_authority(proxy),
            no_proxy: no_proxy.iter().map(|entry| entry.to_string()).collect(),
        }
    }

    /// Reads HTTP_PROXY (or http_proxy) and NO_PROXY (or no_proxy), for the operator binary.
    pub fn from_env() -> Self {
        let (proxy, no_proxy) = serin_loadtester::proxy::proxy_env();
        ProxyConfig {
            http_proxy: proxy.and_then(|value| proxy_authority(&value)),
            no_proxy,
        }
    }

    /// The proxy (`host:port`) to use for `host`, or `None` to connect directly.
    pub fn proxy_for(&self, host: &str) -> Option<&str> {
        let proxy = self.http_proxy.as_deref()?;
        if self.bypasses(host) {
            None
        } else {
            Some(proxy)
        }
    }

    /// Whether NO_PROXY sends requests to `host` directly.
    pub fn bypasses(&self, host: &str) -> bool {
        serin_loadtester::proxy::bypasses(&self.no_proxy, host)
    }
}

/// `host:port` of a proxy written as `host:port` or `http://host:port[/]`; the port defaults to 80.
pub(crate) fn proxy_authority(text: &str) -> Option<String> {
    let text = text.trim();
    let rest = text.strip_prefix("http://").unwrap_or(text);
    // Only plain-http proxies are spoken to; socks5:// or https:// proxies would be misread.
    if rest.contains("://") {
        return None;
    }
    let authority = rest.split('/').next()?;
    let authority = authority.rsplit('@').next()?;
    if authority.is_empty() {
        return None;
    }
    let has_port = !authority.ends_with(']')
        && authority
            .rsplit_once(':')
            .is_some_and(|(_, port)| !port.is_empty() && port.chars().all(|c| c.is_ascii_digit()));
    Some(if has_port {
        authority.to_string()
    } else {
        format!("{authority}:80")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_proxy_matches_names_suffixes_addresses_and_ranges() {
        let config = ProxyConfig::through(
            "http://127.0.0.1:3128",
            &[
                "localhost",
                ".svc.local",
                "example.org:8080",
                "10.0.0.0/8",
                "::1",
            ],
        );
        assert_eq!(config.proxy_for("podinfo.test"), Some("127.0.0.1:3128"));
        assert_eq!(config.proxy_for("localhost"), None);
        assert_eq!(config.proxy_for("a.b.svc.local"), None);
        assert_eq!(config.proxy_for("svc.local"), None);
        assert_eq!(config.proxy_for("notsvc.local"), Some("127.0.0.1:3128"));
        assert_eq!(config.proxy_for("www.example.org"), None);
        assert_eq!(config.proxy_for("10.1.2.3"), None);
        assert_eq!(config.proxy_for("11.1.2.3"), Some("127.0.0.1:3128"));
        assert_eq!(config.proxy_for("[::1]"), None);
    }

    #[test]
    fn star_bypasses_everything_and_no_proxy_without_a_proxy_is_direct() {
        assert_eq!(
            ProxyConfig::through("proxy:3128", &["*"]).proxy_for("x.y"),
            None
        );
        assert_eq!(ProxyConfig::direct().proxy_for("x.y"), None);
    }

    #[test]
    fn proxy_address_forms() {
        assert_eq!(
            proxy_authority("http://10.0.0.1:3128/"),
            Some("10.0.0.1:3128".into())
        );
        assert_eq!(
            proxy_authority("proxy.local"),
            Some("proxy.local:80".into())
        );
        assert_eq!(
            proxy_authority("http://user:pw@proxy:8080"),
            Some("proxy:8080".into())
        );
        assert_eq!(proxy_authority(""), None);
        assert_eq!(proxy_authority("socks5://proxy:1080"), None);
    }
}
