//! The mesh proxy: an HTTP forward proxy on loopback (clients use it as `HTTP_PROXY`) that routes
//! every request by the VirtualServices and DestinationRules in the sandbox ([`crate::mesh_route`]),
//! forwards it to a ready endpoint with the route's retries, timeouts, faults, header operations and
//! mirror, and records Istio's telemetry for both reporters ([`crate::telemetry`]). It also serves
//! that telemetry at `/stats/prometheus` for Prometheus to scrape. A `CONNECT host:port` opens a
//! TCP tunnel to a ready endpoint of that Service port, as a sidecar carries a connection it does
//! not read as HTTP/1 (a client's gRPC).
//!
//! Gateway pods (the Istio ingress gateway, Gateway API gateways) forward through the same engine
//! ([`GatewayHost`]): only the routing choice differs ([`Router`]), and their requests are counted
//! in the same telemetry with the gateway as the source workload.

use crate::gateway_route;
use crate::mesh_route::{self, Decision, Destination, Forward, RouteTable};
use crate::telemetry::{Reporter, Sample, Telemetry, Workload};
use axum::body::{Body, Bytes};
use axum::http::{HeaderName, HeaderValue, Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Map, Value};
use serin_sandbox_apiserver::selectors::{FieldSelector, LabelSelector};
use serin_sandbox_apiserver::store::Store;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest request body the proxy buffers (it keeps bodies for retries and mirrors).
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// Longest a `CONNECT` tunnel stays open, so a client that never closes one cannot hold it forever.
const MAX_TUNNEL_LIFETIME: Duration = Duration::from_secs(600);

/// How long the proxy tries to reach a tunnel's endpoint.
const TUNNEL_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// One ready endpoint of a Service.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// Where the pod listens.
    pub address: SocketAddr,
    /// The pod's labels (DestinationRule subsets select on them).
    pub labels: Map<String, Value>,
    /// The workload the pod belongs to, for the telemetry labels.
    pub workload: Workload,
}

/// Finds the ready endpoints behind a Service host.
pub trait Upstreams: Send + Sync + 'static {
    /// The ready endpoints of the Service with this fully qualified host (and port, if given).
    fn endpoints(&self, host: &str, port: Option<u16>) -> Vec<Endpoint>;
}

/// A fixed table of Services (by fully qualified host) and their endpoints, for tests and
/// benchmarks.
impl Upstreams for std::collections::HashMap<String, Vec<Endpoint>> {
    fn endpoints(&self, host: &str, _port: Option<u16>) -> Vec<Endpoint> {
        self.get(host).cloned().unwrap_or_default()
    }
}

/// Who the proxy speaks for.
#[derive(Clone, Debug)]
pub struct MeshOptions {
    /// The caller identity in `reporter="source"` samples.
    pub client: Workload,
    /// Namespace short host names from clients are expanded in.
    pub client_namespace: String,
    /// Seed of the random choices (weighted picks, fault and mirror percentages).
    pub seed: u64,
}

impl Default for MeshOptions {
    fn default() -> Self {
        MeshOptions {
            client: Workload::unknown(),
            client_namespace: "default".into(),
            seed: 0x2545_f491_4f6c_dd1d,
        }
    }
}

struct Mesh {
    store: Arc<Store>,
    upstreams: Arc<dyn Upstreams>,
    telemetry: Arc<Telemetry>,
    options: MeshOptions,
    client: Client<HttpConnector, Body>,
    random: serin_sandbox_apiserver::instrument::SeededRandom,
    /// The route table and the store resourceVersion it was read at.
    routes: std::sync::Mutex<(u64, Arc<RouteTable>)>,
}

/// Who decides where a request goes.
#[derive(Clone, Debug)]
pub enum Router {
    /// A sidecar: the mesh proxy's own routing (VirtualServices bound to `mesh`, HTTPRoutes,
    /// else the Service).
    Sidecar,
    /// An Istio ingress gateway pod with these labels: the Istio Gateways selecting it and the
    /// VirtualServices bound to them ([`gateway_route::istio_ingress_route`]).
    IstioGateway {
        /// The pod's labels.
        labels: Map<String, Value>,
    },
    /// A pod of a Gateway API Gateway: the HTTPRoutes attached to it
    /// ([`gateway_route::gateway_api_route`]).
    GatewayApi {
        /// The Gateway's namespace.
        namespace: String,
        /// The Gateway's name.
        name: String,
    },
}

/// Who sent a request into the mesh engine and who routes it.
struct Caller {
    /// The source workload of its telemetry samples.
    source: Workload,
    router: Router,
}

/// A handle on the running mesh for gateway pods: they route and forward through the proxy's
/// engine, so their requests get the same retries, timeouts, header operations and telemetry.
#[derive(Clone)]
pub struct GatewayHost {
    mesh: Arc<Mesh>,
}

impl std::fmt::Debug for GatewayHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GatewayHost")
    }
}

impl GatewayHost {
    /// The HTTP service of a gateway pod routing by `router`, its requests counted in the mesh's
    /// telemetry as sent by `source`. It answers Envoy's readiness path `/healthz/ready` itself.
    pub fn service(&self, router: Router, source: Workload) -> axum::Router {
        self.mesh.clone().app(Caller { source, router })
    }

    /// The service of gateway `pod`: a pod labelled
    /// [`gateway_route::GATEWAY_NAME_LABEL`] serves that Gateway API Gateway of its namespace,
    /// any other the Istio Gateways selecting its labels; the source workload is its Deployment.
    pub fn service_for_pod(&self, pod: &Value) -> axum::Router {
        let labels = pod["metadata"]["labels"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let router = match labels
            .get(gateway_route::GATEWAY_NAME_LABEL)
            .and_then(Value::as_str)
        {
            Some(name) => Router::GatewayApi {
                namespace: pod["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("default")
                    .to_string(),
                name: name.to_string(),
            },
            None => Router::IstioGateway { labels },
        };
        self.service(router, crate::telemetry::workload_of(&self.mesh.store, pod))
    }
}

/// A running mesh proxy.
pub struct MeshProxy {
    /// Where it listens (use `http://ADDRESS` as HTTP_PROXY).
    pub address: SocketAddr,
    /// Its telemetry.
    pub telemetry: Arc<Telemetry>,
    mesh: Arc<Mesh>,
    shutdown: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl MeshProxy {
    /// Starts the proxy on a free loopback port.
    pub async fn start(
        store: Arc<Store>,
        upstreams: Arc<dyn Upstreams>,
        options: MeshOptions,
    ) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let telemetry = Arc::new(Telemetry::default());
        let options_client = options.client.clone();
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        let mesh = Arc::new(Mesh {
            store,
            upstreams,
            telemetry: telemetry.clone(),
            random: serin_sandbox_apiserver::instrument::SeededRandom::new(options.seed),
            options,
            client: Client::builder(TokioExecutor::new()).build(connector),
            routes: std::sync::Mutex::new((u64::MAX, Arc::new(RouteTable::default()))),
        });
        let app = mesh.clone().app(Caller {
            source: options_client,
            router: Router::Sidecar,
        });
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(MeshProxy {
            address,
            telemetry,
            mesh,
            shutdown,
            task,
        })
    }

    /// The handle gateway pods route through.
    pub fn gateways(&self) -> GatewayHost {
        GatewayHost {
            mesh: self.mesh.clone(),
        }
    }

    /// Stops the proxy.
    pub async fn stop(self) {
        let _ = self.shutdown.send(());
        self.task.abort();
        let _ = self.task.await;
    }
}

/// The VirtualServices, DestinationRules, HTTPRoutes and Gateways (Istio's and Gateway API's) in
/// the store (of any served version), and the namespaces' labels.
pub fn route_table(store: &Store) -> RouteTable {
    let mut table = RouteTable::default();
    let registry = store.registry();
    let mut seen = std::collections::HashSet::new();
    for info in registry.all() {
        let routing_group = matches!(
            info.group.as_str(),
            "networking.istio.io" | "gateway.networking.k8s.io"
        );
        if !routing_group || !seen.insert(info.storage_key()) {
            continue;
        }
        let (objects, _) = store.list(
            info,
            None,
            &LabelSelector::default(),
            &FieldSelector::default(),
        );
        match info.plural.as_str() {
            "virtualservices" => table.virtual_services.extend(objects),
            "destinationrules" => table.destination_rules.extend(objects),
            "httproutes" => table.http_routes.extend(objects),
            "gateways" if info.group == "networking.istio.io" => {
                table.istio_gateways.extend(objects)
            }
            "gateways" => table.gateways.extend(objects),
            _ => {}
        }
    }
    let namespaces = store.resource("", "v1", "namespaces").expect("built in");
    for namespace in store
        .list(
            &namespaces,
            None,
            &LabelSelector::default(),
            &FieldSelector::default(),
        )
        .0
    {
        let name = namespace["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let mut labels = namespace["metadata"]["labels"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        // The label the API server puts on every namespace.
        labels
            .entry("kubernetes.io/metadata.name")
            .or_insert_with(|| Value::String(name.clone()));
        table.namespace_labels.insert(name, labels);
    }
    table
}

fn text_response(status: u16, body: String) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    response
}

/// Endpoints of `destination` that its subset selects.
fn subset_endpoints(upstreams: &dyn Upstreams, destination: &Destination) -> Vec<Endpoint> {
    upstreams
        .endpoints(&destination.host, destination.port)
        .into_iter()
        .filter(|e| {
            destination
                .subset_labels
                .iter()
                .all(|(k, v)| e.labels.get(k) == Some(v))
        })
        .collect()
}

/// What one attempt ended with: a response, or no response (flags say why).
enum Attempt {
    Answered(Response<Bytes>),
    Failed(&'static str),
}

impl Mesh {
    /// An HTTP service handing every request to [`Mesh::handle`] for `caller`.
    fn app(self: Arc<Self>, caller: Caller) -> axum::Router {
        let caller = Arc::new(caller);
        axum::Router::new().fallback(move |request: Request<Body>| {
            let (mesh, caller) = (self.clone(), caller.clone());
            async move { mesh.handle(request, caller).await }
        })
    }

    /// Answers `CONNECT host:port` (a Service, its short name searched in the client's namespace)
    /// with a TCP tunnel to one of its ready endpoints; 503 when it has none or none answers.
    async fn tunnel(self: Arc<Self>, request: Request<Body>) -> Response<Body> {
        let Some((host, port)) = request
            .uri()
            .authority()
            .and_then(|a| Some((a.host().to_string(), a.port_u16()?)))
        else {
            return text_response(400, "CONNECT needs host:port".into());
        };
        let service = mesh_route::qualify(&host, &self.options.client_namespace);
        let endpoints = self.upstreams.endpoints(&service, Some(port));
        if endpoints.is_empty() {
            return text_response(503, format!("no healthy upstream for {service}:{port}"));
        }
        let chosen =
            &endpoints[(self.random() * endpoints.len() as f64) as usize % endpoints.len()];
        let connected = tokio::time::timeout(
            TUNNEL_CONNECT_TIMEOUT,
            tokio::net::TcpStream::connect(chosen.address),
        )
        .await;
        let Ok(Ok(mut upstream)) = connected else {
            return text_response(503, format!("upstream connect error: {service}:{port}"));
        };
        let upgrade = hyper::upgrade::on(request);
        tokio::spawn(async move {
            let Ok(upgraded) = upgrade.await else {
                return;
            };
            let mut client = hyper_util::rt::TokioIo::new(upgraded);
            let _ = tokio::time::timeout(
                MAX_TUNNEL_LIFETIME,
                tokio::io::copy_bidirectional(&mut client, &mut upstream),
            )
            .await;
        });
        Response::new(Body::empty())
    }

    /// A number in [0, 1) from the proxy's seeded generator.
    fn random(&self) -> f64 {
        self.random.next_unit()
    }

    /// The routing objects as of now, read again only when the store has changed.
    fn route_table(&self) -> Arc<RouteTable> {
        let version = self.store.resource_version();
        let mut cached = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        if cached.0 != version {
            *cached = (version, Arc::new(route_table(&self.store)));
        }
        cached.1.clone()
    }

    fn percent_hit(&self, percent: f64) -> bool {
        percent > 0.0 && self.random() * 100.0 < percent
    }

    fn source_sample(
        &self,
        source: &Workload,
        destination: Workload,
        service: &str,
        code: u16,
        flags: &str,
        took: Duration,
    ) {
        self.telemetry.record(&Sample {
            reporter: Reporter::Source,
            source: source.clone(),
            destination,
            destination_service: service.into(),
            response_code: code,
            response_flags: flags.into(),
            duration: took,
        });
    }

    fn destination_sample(
        &self,
        source: &Workload,
        endpoint: &Endpoint,
        service: &str,
        code: u16,
        flags: &str,
        took: Duration,
    ) {
        self.telemetry.record(&Sample {
            reporter: Reporter::Destination,
            source: source.clone(),
            destination: endpoint.workload.clone(),
            destination_service: service.into(),
            response_code: code,
            response_flags: flags.into(),
            duration: took,
        });
    }

    /// Routes `request` as `caller`'s router decides and forwards it.
    async fn handle(
        self: Arc<Self>,
        request: Request<Body>,
        caller: Arc<Caller>,
    ) -> Response<Body> {
        if request.method() == axum::http::Method::CONNECT
            && matches!(caller.router, Router::Sidecar)
        {
            return self.tunnel(request).await;
        }
        let started = Instant::now();
        let (parts, body) = request.into_parts();
        let authority = parts
            .uri
            .authority()
            .map(|a| a.to_string())
            .or_else(|| {
                parts
                    .headers
                    .get("host")
                    .and_then(|h| h.to_str().ok())
                    .map(String::from)
            })
            .unwrap_or_default();
        if !matches!(caller.router, Router::Sidecar) && parts.uri.path() == "/healthz/ready" {
            // Envoy's readiness endpoint (the status port's, which shares the pod's one server).
            return text_response(200, String::new());
        }
        if matches!(caller.router, Router::Sidecar)
            && parts.uri.authority().is_none()
            && parts.uri.path() == "/stats/prometheus"
        {
            let mut response = text_response(200, self.telemetry.render());
            response.headers_mut().insert(
                "content-type",
                HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            return response;
        }
        let body = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(_) => return text_response(400, "could not read the request body".into()),
        };
        if body.len() > MAX_BODY_BYTES {
            return text_response(413, "request body too large for the sandbox mesh".into());
        }
        let headers: Vec<(String, String)> = parts
            .headers
            .iter()
            .filter_map(|(n, v)| Some((n.as_str().to_string(), v.to_str().ok()?.to_string())))
            .collect();
        let routed = mesh_route::Request {
            method: parts.method.to_string(),
            authority: authority.clone(),
            path: parts.uri.path().to_string(),
            query: parts.uri.query().unwrap_or("").to_string(),
            headers: headers.clone(),
        };
        let table = self.route_table();
        let decision = match &caller.router {
            Router::Sidecar => mesh_route::route(
                &table,
                &routed,
                &self.options.client_namespace,
                self.random(),
            ),
            Router::IstioGateway { labels } => {
                let gateways = gateway_route::istio_gateways_for(
                    &table,
                    labels,
                    mesh_route::port_of(&authority),
                );
                gateway_route::istio_ingress_route(&table, &gateways, &routed, self.random())
            }
            Router::GatewayApi { namespace, name } => {
                match table.gateways.iter().find(|g| {
                    g["metadata"]["name"] == name.as_str()
                        && g["metadata"]["namespace"] == namespace.as_str()
                }) {
                    Some(gateway) => {
                        gateway_route::gateway_api_route(&table, gateway, &routed, self.random())
                    }
                    None => Decision::Respond {
                        status: 404,
                        body: format!("no route: Gateway {namespace}/{name} does not exist"),
                    },
                }
            }
        };
        let source = &caller.source;
        let forward = match decision {
            Decision::Respond { status, body } => {
                let flags = match status {
                    404 => "NR",
                    503 => "NC",
                    _ => "-",
                };
                self.source_sample(
                    source,
                    Workload::unknown(),
                    "unknown",
                    status,
                    flags,
                    started.elapsed(),
                );
                return text_response(status, body);
            }
            Decision::Forward(forward) => forward,
        };
        let service = forward.destination.host.clone();
        if let Some((status, percent)) = forward.fault.abort
            && self.percent_hit(percent)
        {
            self.source_sample(
                source,
                Workload::unknown(),
                &service,
                status,
                "FI",
                started.elapsed(),
            );
            return text_response(status, "fault filter abort".into());
        }
        let mut flags = String::from("-");
        if let Some((delay, percent)) = forward.fault.delay
            && self.percent_hit(percent)
        {
            tokio::time::sleep(delay).await;
            flags = "DI".into();
        }
        if let Some((mirror, percent)) = forward.mirror.clone()
            && self.percent_hit(percent)
        {
            let mesh = self.clone();
            let caller = caller.clone();
            let (method, headers, body, forward) = (
                parts.method.clone(),
                headers.clone(),
                body.clone(),
                forward.clone(),
            );
            tokio::spawn(async move {
                let endpoints = subset_endpoints(&*mesh.upstreams, &mirror);
                if let Some(endpoint) = endpoints.first() {
                    let started = Instant::now();
                    let code = match mesh
                        .send(endpoint, &method, &headers, &body, &forward, None)
                        .await
                    {
                        Attempt::Answered(response) => response.status().as_u16(),
                        Attempt::Failed(_) => 503,
                    };
                    mesh.destination_sample(
                        &caller.source,
                        endpoint,
                        &mirror.host,
                        code,
                        "-",
                        started.elapsed(),
                    );
                }
            });
        }
        let response = match forward.timeout {
            Some(limit) => {
                match tokio::time::timeout(
                    limit,
                    self.attempts(source, &parts.method, &headers, &body, &forward),
                )
                .await
                {
                    Ok(result) => result,
                    Err(_) => Err((504, "UT", Workload::unknown())),
                }
            }
            None => {
                self.attempts(source, &parts.method, &headers, &body, &forward)
                    .await
            }
        };
        match response {
            Ok((response, workload)) => {
                let code = response.status().as_u16();
                self.source_sample(source, workload, &service, code, &flags, started.elapsed());
                let (mut parts, body) = response.into_parts();
                let mut headers: Vec<(String, String)> = parts
                    .headers
                    .iter()
                    .filter_map(|(n, v)| {
                        Some((n.as_str().to_string(), v.to_str().ok()?.to_string()))
                    })
                    .collect();
                for ops in &forward.response_headers {
                    ops.apply(&mut headers);
                }
                parts.headers.clear();
                for (name, value) in headers {
                    if let (Ok(name), Ok(value)) =
                        (HeaderName::try_from(name), HeaderValue::try_from(value))
                    {
                        parts.headers.append(name, value);
                    }
                }
                Response::from_parts(parts, Body::from(body))
            }
            Err((status, flags, workload)) => {
                self.source_sample(source, workload, &service, status, flags, started.elapsed());
                let text = match flags {
                    "UT" => "upstream request timeout",
                    "UH" => "no healthy upstream",
                    _ => "upstream connect error or disconnect/reset before headers",
                };
                text_response(status, text.into())
            }
        }
    }

    /// Sends the request with the route's retry policy; each attempt is a destination sample.
    async fn attempts(
        &self,
        source: &Workload,
        method: &axum::http::Method,
        headers: &[(String, String)],
        body: &Bytes,
        forward: &Forward,
    ) -> Result<(Response<Bytes>, Workload), (u16, &'static str, Workload)> {
        let endpoints = subset_endpoints(&*self.upstreams, &forward.destination);
        if endpoints.is_empty() {
            return Err((503, "UH", Workload::unknown()));
        }
        let service = &forward.destination.host;
        let tries = 1 + forward.retries.attempts as usize;
        let first = (self.random() * endpoints.len() as f64) as usize;
        let mut last_failure = (503, "UF", Workload::unknown());
        for attempt in 0..tries {
            // Retries prefer another host, as Istio's previous-hosts predicate does.
            let endpoint = &endpoints[(first + attempt) % endpoints.len()];
            let started = Instant::now();
            let outcome = self
                .send(
                    endpoint,
                    method,
                    headers,
                    body,
                    forward,
                    forward.retries.per_try_timeout,
                )
                .await;
            let exhausted = attempt + 1 == tries;
            match outcome {
                Attempt::Answered(response) => {
                    let code = response.status().as_u16();
                    self.destination_sample(
                        source,
                        endpoint,
                        service,
                        code,
                        "-",
                        started.elapsed(),
                    );
                    if exhausted || !forward.retries.retries(Some(code)) {
                        return Ok((response, endpoint.workload.clone()));
                    }
                }
                Attempt::Failed(flags) => {
                    self.destination_sample(
                        source,
                        endpoint,
                        service,
                        503,
                        flags,
                        started.elapsed(),
                    );
                    last_failure = (503, flags, endpoint.workload.clone());
                    if !forward.retries.retries(None) {
                        break;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        if tries > 1 {
            last_failure.1 = "URX";
        }
        Err(last_failure)
    }

    /// One attempt to one endpoint.
    async fn send(
        &self,
        endpoint: &Endpoint,
        method: &axum::http::Method,
        headers: &[(String, String)],
        body: &Bytes,
        forward: &Forward,
        per_try: Option<Duration>,
    ) -> Attempt {
        let uri: Uri =
            match format!("http://{}{}", endpoint.address, forward.path_and_query).parse() {
                Ok(uri) => uri,
                Err(_) => return Attempt::Failed("UF"),
            };
        let mut headers = headers.to_vec();
        headers.retain(|(n, _)| {
            !matches!(n.as_str(), "proxy-connection" | "connection" | "keep-alive")
        });
        for ops in &forward.request_headers {
            ops.apply(&mut headers);
        }
        if let Some(authority) = &forward.authority {
            headers.retain(|(n, _)| n != "host" && n != ":authority");
            headers.push(("host".into(), authority.clone()));
        }
        let mut request = Request::builder().method(method.clone()).uri(uri);
        for (name, value) in &headers {
            if name.starts_with(':') {
                continue;
            }
            request = request.header(name.as_str(), value.as_str());
        }
        let Ok(request) = request.body(Body::from(body.clone())) else {
            return Attempt::Failed("UF");
        };
        let call = async {
            let response = self.client.request(request).await.map_err(|_| "UF")?;
            let (parts, body) = response.into_parts();
            let bytes = body.collect().await.map_err(|_| "UC")?.to_bytes();
            Ok::<_, &'static str>(Response::from_parts(parts, bytes))
        };
        let result = match per_try {
            Some(limit) => tokio::time::timeout(limit, call).await.unwrap_or(Err("UT")),
            None => call.await,
        };
        match result {
            Ok(response) => Attempt::Answered(response),
            Err(flags) => Attempt::Failed(flags),
        }
    }
}

/// A client of the mesh, as a process using it as `HTTP_PROXY` would be: one keep-alive connection
/// to the proxy carrying absolute-form requests.
pub struct MeshClient {
    sender: hyper::client::conn::http1::SendRequest<http_body_util::Full<Bytes>>,
}

/// A response read whole.
pub struct MeshResponse {
    /// HTTP status.
    pub status: u16,
    /// The `set-cookie` header, if any.
    pub set_cookie: Option<String>,
    /// The body, as text.
    pub body: String,
}

impl MeshClient {
    /// Connects to the proxy at `proxy`.
    pub async fn connect(proxy: SocketAddr) -> std::io::Result<Self> {
        let stream = tokio::net::TcpStream::connect(proxy).await?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(std::io::Error::other)?;
        tokio::spawn(connection);
        Ok(MeshClient { sender })
    }

    /// GETs `url` (`http://host[:port]/path`) with extra `headers`.
    pub async fn get(
        &mut self,
        url: &str,
        headers: &[(&str, &str)],
    ) -> std::io::Result<MeshResponse> {
        self.send("GET", url, headers, Bytes::new()).await
    }

    /// POSTs `body` to `url` (`http://host[:port]/path`) with extra `headers`, e.g. a webhook
    /// payload to the load tester.
    pub async fn post(
        &mut self,
        url: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> std::io::Result<MeshResponse> {
        self.send("POST", url, headers, body.into()).await
    }

    async fn send(
        &mut self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> std::io::Result<MeshResponse> {
        let authority = url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or_default();
        let mut request = Request::builder()
            .method(method)
            .uri(url)
            .header("host", authority);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(http_body_util::Full::new(body))
            .map_err(std::io::Error::other)?;
        self.sender.ready().await.map_err(std::io::Error::other)?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(std::io::Error::other)?;
        let status = response.status().as_u16();
        let set_cookie = response
            .headers()
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(std::io::Error::other)?
            .to_bytes();
        Ok(MeshResponse {
            status,
            set_cookie,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    }
}
