//! `ClientOptions::from_env()` against real receivers on 127.0.0.1: reqwest (built without its
//! `system-proxy` feature) still sends http:// calls through HTTP_PROXY, except to the hosts in
//! no_proxy, and `ClientOptions::direct()` ignores both.
//!
//! The environment is process-wide, so this file holds a single test (its own process) and sets the
//! variables before any other thread starts.

mod common;

use common::{Receiver, payload};
use serin_api::CanaryWebhook;
use serin_webhooks::{ClientOptions, WebhookClient};

#[test]
fn from_env_honours_http_proxy_and_no_proxy_and_direct_ignores_them() {
    let proxy_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let direct_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_address = proxy_listener.local_addr().unwrap();
    let direct_address = direct_listener.local_addr().unwrap();
    // SAFETY: this is the only test in this binary and the runtime is not built yet, so no other
    // thread reads or writes the environment.
    unsafe {
        for name in [
            "ALL_PROXY",
            "all_proxy",
            "HTTPS_PROXY",
            "https_proxy",
            "http_proxy",
            "NO_PROXY",
        ] {
            std::env::remove_var(name);
        }
        std::env::set_var("HTTP_PROXY", format!("http://{proxy_address}"));
        // Lower case, to check reqwest reads that spelling too.
        std::env::set_var("no_proxy", "127.0.0.1");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let proxy = Receiver::on(proxy_listener, 200, "via proxy");
        let direct = Receiver::on(direct_listener, 200, "direct");
        let from_env = WebhookClient::new(ClientOptions::from_env());

        // A mesh name only the proxy can resolve goes to HTTP_PROXY in absolute form.
        let meshed = hook("http://flagger-loadtester.test/gate/check");
        let response = from_env.call(&meshed, &payload()).await.unwrap();
        assert_eq!(&response.body[..], b"via proxy");
        assert_eq!(
            proxy.last().target,
            "http://flagger-loadtester.test/gate/check"
        );

        // 127.0.0.1 is in no_proxy: called directly.
        let listed = hook(&format!("http://{direct_address}/listed"));
        let response = from_env.call(&listed, &payload()).await.unwrap();
        assert_eq!(&response.body[..], b"direct");
        assert_eq!(direct.last().target, "/listed");

        // localhost is not in no_proxy: through the proxy...
        let unlisted = hook(&format!(
            "http://localhost:{}/unlisted",
            direct_address.port()
        ));
        let response = from_env.call(&unlisted, &payload()).await.unwrap();
        assert_eq!(&response.body[..], b"via proxy");
        assert_eq!(proxy.seen().len(), 2);

        // ...unless the client is direct, which ignores the environment.
        let direct_client = WebhookClient::new(ClientOptions::direct());
        let response = direct_client.call(&unlisted, &payload()).await.unwrap();
        assert_eq!(&response.body[..], b"direct");
        assert_eq!(direct.last().target, "/unlisted");
        assert_eq!(proxy.seen().len(), 2);
    });
}

fn hook(url: &str) -> CanaryWebhook {
    CanaryWebhook {
        name: "load".into(),
        url: url.into(),
        ..CanaryWebhook::default()
    }
}
