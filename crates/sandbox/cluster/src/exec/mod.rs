//! `kubectl exec` over kubectl's WebSocket streaming protocol (`v5.channel.k8s.io`, or `v4`): the
//! command runs "in the pod's context" — the sandbox's images have a small, honest set of commands:
//! `echo`, `true`, `false`, `hostname`, `env`, `curl` and `wget` (HTTP sent through the mesh
//! proxy, as from a pod with a sidecar), `grpc_health_probe` in the load tester image (through the
//! proxy's `CONNECT`), `grep`, `cat`, `head`, `tail`, `wc`, `sleep`, `hey` in
//! the load tester image, and `sh -c`/`bash -c` of a small script: pipelines, `&&`, `||`, `;`,
//! `!`, `exit`, `set -e`/`-o pipefail`/`-x`, and redirections to `/dev/null` or between standard
//! output and error. Anything else is not in the image (exit code 127) or not understood by the
//! sandbox's shell (exit code 2), with a message saying which.
//!
//! Short Service names resolve in the pod's namespace, as its DNS search path would
//! (`podinfo-canary` from a pod in `test` is `podinfo-canary.test`), and `localhost` is the pod
//! itself: its declared ports reach its server. The same interpreter runs the bash tasks of
//! Flagger's load tester image ([`PodShell`]).

mod channel;
mod context;
mod grpc;
mod http;
mod shell;
mod text;

pub use channel::*;
pub use context::*;
pub use shell::*;
