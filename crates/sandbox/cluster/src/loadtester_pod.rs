//! How a load tester pod runs in the sandbox: the settings the image's binary would take from the
//! container (`-timeout`, `-namespace-regexp`, `-max-tasks` on its command line, and, for
//! Serin's image, the token in `LOADTESTER_TOKEN`, resolved from a Secret as the kubelet does),
//! and, for Flagger's image, the pod context its bash tasks run in.

use crate::process::ApiAccess;
use serde_json::Value;
use serin_loadtester::access::TOKEN_ENV;
use serin_loadtester::proxy::ProxyConfig;
use serin_loadtester::shell::CommandRunner;
use std::sync::Arc;
use std::time::Duration;

/// Images that run shell tasks through the sandbox's command interpreter, as Flagger's load
/// tester runs `bash` tasks; Serin's own image keeps refusing them (it has no shell).
const SHELL_LOADTESTER_IMAGE: &str = "flagger-loadtester";

/// Why a load tester container cannot start: the kubelet's reason and message.
#[derive(Debug, PartialEq, Eq)]
pub struct NotStarted {
    /// `CreateContainerConfigError` (its env cannot be resolved) or `CrashLoopBackOff` (the
    /// binary would exit at once).
    pub reason: &'static str,
    /// What went wrong, as `kubectl describe pod` shows it.
    pub message: String,
}

/// How a load tester pod runs: its proxy, its flags, and, for Flagger's image, the pod context
/// its bash tasks run in.
#[derive(Clone)]
pub struct LoadTesterApp {
    /// Where its load goes through.
    pub proxy: ProxyConfig,
    /// The pod's namespace, where short hey targets are searched.
    namespace: String,
    /// `-timeout` from the container's command line.
    timeout: Option<Duration>,
    /// `-namespace-regexp` from the container's command line, matching whole namespaces.
    namespace_filter: Option<regex::Regex>,
    /// `-max-tasks` from the container's command line.
    max_tasks: Option<usize>,
    /// `LOADTESTER_TOKEN` from the container's env (Serin's image only: Flagger's has no token).
    token: Option<String>,
    /// The pod context for the command runner (its `local_ports` list the pod's ports, mapped to
    /// the server's port when it starts); `None`: shell tasks stay refused.
    shell: Option<crate::exec::Context>,
}

impl LoadTesterApp {
    /// The app for `container` of `pod`, its env read through `objects` (without them, a
    /// `secretKeyRef` cannot be read and the token is taken as missing).
    pub fn for_pod(
        pod: &Value,
        container: &Value,
        proxy: ProxyConfig,
        objects: Option<&dyn ApiAccess>,
    ) -> Result<Self, NotStarted> {
        let words: Vec<&str> = ["command", "args"]
            .iter()
            .flat_map(|field| container[*field].as_array().into_iter().flatten())
            .filter_map(Value::as_str)
            .collect();
        // Go's flag package: `-name=value`, `--name=value`, `-name value`.
        let flag = |name: &str| {
            words.iter().enumerate().find_map(|(index, word)| {
                let bare = word.strip_prefix("--").or_else(|| word.strip_prefix('-'))?;
                match bare.split_once('=') {
                    Some((key, value)) if key == name => Some(value.to_string()),
                    None if bare == name => words.get(index + 1).map(|v| v.to_string()),
                    _ => None,
                }
            })
        };
        let image = container["image"].as_str().unwrap_or_default();
        let flaggers = image.contains(SHELL_LOADTESTER_IMAGE);
        let token = if flaggers {
            None
        } else {
            let env = crate::process::resolve_env(pod, container, objects).map_err(|message| {
                NotStarted {
                    reason: "CreateContainerConfigError",
                    message,
                }
            })?;
            match env.into_iter().rev().find(|(name, _)| name == TOKEN_ENV) {
                Some((_, value)) => Some(serin_loadtester::access::token_from(&value).map_err(
                    |message| NotStarted {
                        reason: "CrashLoopBackOff",
                        message: format!("Error: {message}"),
                    },
                )?),
                None => None,
            }
        };
        let shell = flaggers.then(|| {
            let mut context = crate::exec::Context::of(pod, container, proxy.clone());
            let mut ports: Vec<u16> = pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|c| c["ports"].as_array().into_iter().flatten())
                .filter_map(|p| u16::try_from(p["containerPort"].as_u64()?).ok())
                .chain([8080])
                .collect();
            ports.sort_unstable();
            ports.dedup();
            context.local_ports = ports.into_iter().map(|port| (port, 0)).collect();
            context
        });
        Ok(LoadTesterApp {
            namespace: pod["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string(),
            timeout: flag("timeout")
                .and_then(|text| serin_api::duration::parse_go_duration(&text).ok()),
            namespace_filter: flag("namespace-regexp")
                .and_then(|text| serin_loadtester::access::namespace_filter(&text).ok()),
            max_tasks: flag("max-tasks")
                .and_then(|text| text.parse().ok())
                .filter(|count| *count >= 1),
            token,
            proxy,
            shell,
        })
    }

    /// The load tester's options when it serves on loopback `port`.
    pub fn options(&self, port: u16) -> serin_loadtester::Options {
        let runner = self.shell.clone().map(|mut context| {
            // Every port of the pod reaches its one server, as `sandboxPorts` says.
            for (_, served) in &mut context.local_ports {
                *served = port;
            }
            Arc::new(crate::exec::PodShell { context }) as Arc<dyn CommandRunner>
        });
        let defaults = serin_loadtester::Options::default();
        serin_loadtester::Options {
            proxy: self.proxy.clone(),
            timeout: self.timeout.unwrap_or(defaults.timeout),
            namespace_filter: self.namespace_filter.clone(),
            command_runner: runner,
            search_namespace: Some(self.namespace.clone()),
            token: self.token.clone(),
            max_tasks: self.max_tasks.unwrap_or(defaults.max_tasks),
            ..defaults
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(image: &str, command: Value) -> Value {
        json!({"metadata": {"name": "lt-a-b", "namespace": "test"}, "spec": {"containers": [{
            "name": "loadtester", "image": image, "command": command,
            "ports": [{"name": "http", "containerPort": 8080}]
        }]}})
    }

    fn app(pod: &Value, objects: Option<&dyn ApiAccess>) -> Result<LoadTesterApp, NotStarted> {
        LoadTesterApp::for_pod(
            pod,
            &pod["spec"]["containers"][0],
            ProxyConfig::direct(),
            objects,
        )
    }

    #[test]
    fn flaggers_load_tester_image_runs_shell_tasks_and_serins_does_not() {
        let flagger = pod(
            "ghcr.io/fluxcd/flagger-loadtester:0.29.0",
            json!([
                "./loadtester",
                "-port=8080",
                "-log-level=info",
                "-timeout=1h"
            ]),
        );
        let setup = app(&flagger, None).unwrap();
        let options = setup.options(40123);
        assert!(options.command_runner.is_some());
        assert_eq!(options.timeout, Duration::from_secs(3600));
        assert_eq!(options.search_namespace.as_deref(), Some("test"));
        let context = setup.shell.as_ref().unwrap();
        assert_eq!(context.namespace, "test");

        let serin = pod(
            "ghcr.io/serin-dev/serin-loadtester:0.1.0",
            json!([
                "serin-loadtester",
                "--timeout",
                "90s",
                "--namespace-regexp=test",
                "--max-tasks=4"
            ]),
        );
        let options = app(&serin, None).unwrap().options(40124);
        assert!(options.command_runner.is_none());
        assert!(!options.allow_shell);
        assert_eq!(options.timeout, Duration::from_secs(90));
        assert_eq!(options.max_tasks, 4);
        assert_eq!(options.token, None);
        let filter = options.namespace_filter.unwrap();
        assert!(filter.is_match("test") && !filter.is_match("test-2"));
    }

    /// One stored Secret `test/lt-token` holding `token`.
    struct OneSecret;

    impl ApiAccess for OneSecret {
        fn kubeconfig_for(&self, _: &str, _: &str) -> Result<String, String> {
            Err("no credentials in this test".into())
        }
        fn core_object(&self, plural: &str, namespace: &str, name: &str) -> Option<Value> {
            (plural == "secrets" && namespace == "test" && name == "lt-token").then(|| {
                json!({"kind": "Secret", "metadata": {"name": name, "namespace": namespace},
                       "data": {"token": "bHQtczNjcmV0Cg==", "blank": "IAo="}})
            })
        }
    }

    fn with_token_from(image: &str, secret: &str, key: &str) -> Value {
        let mut pod = pod(image, json!(["serin-loadtester"]));
        pod["spec"]["containers"][0]["env"] = json!([{"name": "LOADTESTER_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}]);
        pod
    }

    #[test]
    fn serins_image_takes_its_token_from_the_secret_the_env_names() {
        let image = "ghcr.io/serin-dev/serin-loadtester:0.1.0";
        let setup = app(
            &with_token_from(image, "lt-token", "token"),
            Some(&OneSecret),
        )
        .unwrap();
        // The Secret's trailing newline is not part of the token.
        assert_eq!(setup.options(1).token.as_deref(), Some("lt-s3cret"));
        assert_eq!(
            app(
                &with_token_from(image, "missing", "token"),
                Some(&OneSecret)
            )
            .err(),
            Some(NotStarted {
                reason: "CreateContainerConfigError",
                message: "secret \"missing\" not found".into()
            })
        );
        let blank = app(
            &with_token_from(image, "lt-token", "blank"),
            Some(&OneSecret),
        )
        .err()
        .unwrap();
        assert_eq!(blank.reason, "CrashLoopBackOff");
        assert!(blank.message.contains("LOADTESTER_TOKEN is set but empty"));
        // Flagger's image has no token to read.
        let flaggers = with_token_from("ghcr.io/fluxcd/flagger-loadtester:0.29.0", "missing", "t");
        assert_eq!(
            app(&flaggers, Some(&OneSecret)).unwrap().options(1).token,
            None
        );
    }
}
