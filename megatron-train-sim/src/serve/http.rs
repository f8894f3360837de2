//! The HTTP side: axum routes, admission (drain, body limit, queue bound),
//! the traces of each request, and the server-sent-event stream.
//!
//! Each request's HTTP SERVER span is the `tracing` span of tower-http's
//! trace layer ([`server_span`]), recorded by the lens-tracing bridge
//! ([`install_tracing`]) in the `inference` group and parented on the
//! request's `traceparent`; the GenAI span is its child, in the same trace.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::{MatchedPath, Path, State};
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode, header};
use axum::response::Response;
use axum::routing::{get, post};
use bytes::Bytes;
use http_body::Frame;
use lens_fallbacks::config::CliOverrides;
use lens_fallbacks::env::ProcessEnv;
use lens_fallbacks::tracing_rules::TracingRules;
use lens_fallbacks::{DetachedSpan, extract_context};
use megatron_telemetry::groups::MEGATRON_CATALOG;
use megatron_telemetry::inference::{self as telemetry, GenerateOutcome, GenerateRequest, ServerMetrics};
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tower_http::trace::TraceLayer;
use tracing_subscriber::layer::SubscriberExt as _;

use super::api::{self, ApiError, Choice, Endpoint, Generation, Limits};
use super::engine::{Event, Job, QueueSlot};

/// Seconds a client is told to wait (`Retry-After`) on 429 and 503.
pub(crate) const RETRY_AFTER_SECONDS: u64 = 1;

/// The connection limits of `serve` (its `--header-read-timeout` and
/// `--max-connections`; `--body-read-timeout` is [`Shared`]'s).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnectionLimits {
    /// How long a connection may take to send a request's headers, and how
    /// long a kept-alive connection may stay idle before its next request:
    /// then it is closed (a client that connects and sends nothing, or a
    /// header a byte at a time, holds a connection this long at most).
    pub(crate) header_read_timeout: Duration,
    /// Connections open at once at most; one more is answered 503 and
    /// closed, so that idle clients cannot take every file descriptor.
    pub(crate) max_connections: usize,
}

/// What every handler shares.
pub(crate) struct Shared {
    pub(crate) limits: Limits,
    /// Requests admitted beyond the running batch before 429.
    pub(crate) capacity: usize,
    pub(crate) max_body_bytes: usize,
    /// How long a request's body may take to arrive once its headers did
    /// (`--body-read-timeout`): then the request gets 408.
    pub(crate) body_read_timeout: Duration,
    pub(crate) jobs: std::sync::mpsc::Sender<Job>,
    pub(crate) metrics: ServerMetrics,
    /// Set on SIGTERM/SIGINT: every new request gets 503.
    pub(crate) draining: AtomicBool,
    /// Generation requests admitted and not finished (the drain waits for
    /// them to reach 0).
    pub(crate) in_flight: AtomicUsize,
    /// Choices admitted whose job the engine has not let go of (the queue
    /// bound): each [`Job`] holds one ([`QueueSlot`]), so a job whose client
    /// left holds its place until the engine drops it.
    pub(crate) jobs_in_flight: Arc<AtomicUsize>,
    next_id: AtomicU64,
}

impl Shared {
    pub(crate) fn new(
        limits: Limits,
        capacity: usize,
        (max_body_bytes, body_read_timeout): (usize, Duration),
        jobs: std::sync::mpsc::Sender<Job>,
        metrics: ServerMetrics,
    ) -> Shared {
        let seed = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as u64;
        Shared {
            limits,
            capacity,
            max_body_bytes,
            body_read_timeout,
            jobs,
            metrics,
            draining: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            jobs_in_flight: Arc::new(AtomicUsize::new(0)),
            next_id: AtomicU64::new(seed.wrapping_mul(0x2545_F491_4F6C_DD1D)),
        }
    }
}

/// Serves `router` on `listener` until `shutdown` fires: one task per
/// connection (HTTP/1, keep-alive), each with hyper's header-read timeout
/// (on a tokio timer, which `axum::serve` does not set), at most
/// `limits.max_connections` at once. At `shutdown` it stops
/// accepting, lets each connection finish the request it is serving, and
/// returns when they are closed.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: ConnectionLimits,
    mut shutdown: tokio::sync::oneshot::Receiver<()>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let (closing, closed) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (stream, _) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors, a connection reset before it was
                // accepted: the next accept may succeed.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        while connections.try_join_next().is_some() {}
        let _ = stream.set_nodelay(true);
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            connections.spawn(refuse_connection(stream, limits.max_connections));
            continue;
        };
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let mut closed = closed.clone();
        connections.spawn(async move {
            let _slot = slot;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
            let connection = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = closed.changed() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
    let _ = closing.send(true);
    while connections.join_next().await.is_some() {}
}

/// Answers a connection past the `limit` 503 (its request unread) and
/// closes it, within a second.
async fn refuse_connection(mut stream: tokio::net::TcpStream, limit: usize) {
    use tokio::io::AsyncWriteExt as _;
    let body = ApiError {
        status: 503,
        kind: "service_unavailable",
        param: None,
        code: "too_many_connections",
        message: format!("the server holds {limit} connections, its most (--max-connections); retry later"),
    }
    .body()
    .to_string();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: \
         {RETRY_AFTER_SECONDS}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    // Written, then the client's request read and dropped until it closes
    // (at most a second and 64 KiB): closing with its bytes unread would
    // reset the connection before the client read the answer.
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        use tokio::io::AsyncReadExt as _;
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await?;
        let mut buffer = [0_u8; 4096];
        let mut read = 0;
        while read < 64 * 1024 {
            match stream.read(&mut buffer).await? {
                0 => break,
                n => read += n,
            }
        }
        Ok::<(), std::io::Error>(())
    })
    .await;
}

/// The routes, each request under tower-http's trace layer.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let trace = TraceLayer::new_for_http().make_span_with(server_span).on_response(record_response);
    Router::new()
        .route(Endpoint::Completions.route(), post(completions))
        .route(Endpoint::Chat.route(), post(chat))
        .route("/v1/models", get(models))
        // A wildcard: a served name may hold slashes (`org/model`).
        .route("/v1/models/{*model}", get(model))
        .route("/health", get(health))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(trace)
        .with_state(shared)
}

/// Installs the process's `tracing` subscriber: the lens-tracing bridge with
/// the `<PREFIX>_TRACING_GROUPS` rules. Called before telemetry setup, so
/// that setup's change of the enabled groups rebuilds `tracing`'s interest
/// cache for it. A configuration that does not load is reported by setup
/// right after; the bridge then keeps its `lens::<group>` targets only,
/// which the server span's is.
pub(crate) fn install_tracing(cli: &CliOverrides) {
    let rules = megatron_telemetry::lifecycle::load_config(cli, &ProcessEnv)
        .ok()
        .and_then(|config| config.tracing_rules().ok())
        .unwrap_or_else(|| TracingRules::none(&MEGATRON_CATALOG));
    let subscriber = tracing_subscriber::registry().with(lens_tracing::layer(rules));
    // Fails only when a subscriber is already installed (a second server in
    // one process, in tests): that one stays.
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// tower-http's span of one request: the HTTP SERVER span (target
/// [`telemetry::HTTP_SERVER_TARGET`], so the `inference` group), named
/// `{method} {route}` (`{method}` for an unknown path) with the HTTP semantic
/// conventions' attributes, the child of the request's `traceparent`.
fn server_span(request: &Request<Body>) -> tracing::Span {
    let method = request.method().as_str();
    let route = request.extensions().get::<MatchedPath>().map(MatchedPath::as_str);
    let (address, port) = server_address(request).unzip();
    let span = tracing::info_span!(
        target: telemetry::HTTP_SERVER_TARGET,
        "http.server.request",
        otel.name = route.map_or_else(|| method.to_owned(), |route| format!("{method} {route}")),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = method,
        http.route = route,
        url.path = request.uri().path(),
        // The server speaks plain HTTP (no TLS); the conventions require it.
        url.scheme = "http",
        server.address = address.as_deref(),
        server.port = port,
        http.response.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
    );
    if !span.is_disabled() {
        let headers = request.headers();
        let carrier: Vec<(&str, &str)> = ["traceparent", "tracestate"]
            .into_iter()
            .filter_map(|key| headers.get(key).and_then(|value| value.to_str().ok()).map(|value| (key, value)))
            .collect();
        lens_tracing::set_parent(&span, &extract_context(carrier.as_slice()));
    }
    span
}

/// The server's address and port as the request named them (its `Host`
/// header, or an absolute URI's authority; the port 80 of plain HTTP when
/// it names none), as the HTTP conventions' `server.address` and
/// `server.port`; none for a request that names no host.
fn server_address(request: &Request<Body>) -> Option<(String, i64)> {
    let authority = match request.headers().get(header::HOST).and_then(|host| host.to_str().ok()) {
        Some(host) => host.parse::<axum::http::uri::Authority>().ok()?,
        None => request.uri().authority()?.clone(),
    };
    let host = authority.host().trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then(|| (host.to_owned(), i64::from(authority.port_u16().unwrap_or(80))))
}

/// The response's status on the server span (and `error.type`, the status
/// code as the HTTP conventions say, for 4xx and 5xx; an error status for 5xx).
fn record_response(response: &Response, _latency: Duration, span: &tracing::Span) {
    let status = response.status().as_u16();
    span.record("http.response.status_code", status);
    if status >= 400 {
        span.record("error.type", status.to_string().as_str());
    }
    if status >= 500 {
        span.record("otel.status_code", "error");
    }
}

fn json_response(status: u16, body: &Value) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn error_response(error: &ApiError) -> Response {
    let mut response = json_response(error.status, &error.body());
    if error.status == 429 || error.status == 503 {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
    }
    response
}

fn draining_error() -> ApiError {
    ApiError {
        status: 503,
        kind: "service_unavailable",
        param: None,
        code: "draining",
        message: "the server is shutting down and accepts no new requests; retry against another replica".into(),
    }
}

async fn not_found(State(shared): State<Arc<Shared>>) -> Response {
    if shared.draining.load(Ordering::Acquire) {
        return error_response(&draining_error());
    }
    error_response(&ApiError {
        status: 404,
        kind: "invalid_request_error",
        param: None,
        code: "unknown_url",
        message: "unknown path: the server answers POST /v1/completions, POST /v1/chat/completions, GET /v1/models and GET /health".into(),
    })
}

/// A known path asked with a method it does not answer: 405 with the
/// methods it does (`Allow`), or 503 while draining.
async fn method_not_allowed(
    State(shared): State<Arc<Shared>>,
    method: axum::http::Method,
    uri: axum::http::Uri,
) -> Response {
    if shared.draining.load(Ordering::Acquire) {
        return error_response(&draining_error());
    }
    let path = uri.path();
    let allowed = if path == Endpoint::Completions.route() || path == Endpoint::Chat.route() { "POST" } else { "GET" };
    let mut response = error_response(&ApiError {
        status: 405,
        kind: "invalid_request_error",
        param: None,
        code: "method_not_allowed",
        message: format!("{method} {path}: this path answers {allowed} only"),
    });
    response.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allowed));
    response
}

async fn health(State(shared): State<Arc<Shared>>) -> Response {
    if shared.draining.load(Ordering::Acquire) {
        return error_response(&draining_error());
    }
    json_response(200, &json!({"status": "ok"}))
}

async fn models(State(shared): State<Arc<Shared>>) -> Response {
    if shared.draining.load(Ordering::Acquire) {
        return error_response(&draining_error());
    }
    json_response(200, &json!({"object": "list", "data": [model_object(&shared)]}))
}

/// `GET /v1/models/{model}` (the `openai` client's `models.retrieve`): the
/// served model, or 404 `model_not_found` for any other.
async fn model(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    if shared.draining.load(Ordering::Acquire) {
        return error_response(&draining_error());
    }
    if id != shared.limits.model_name {
        return error_response(&api::model_not_found(&id, &shared.limits));
    }
    json_response(200, &model_object(&shared))
}

/// The served model, as `/v1/models` lists it.
fn model_object(shared: &Shared) -> Value {
    json!({
        "id": shared.limits.model_name, "object": "model", "created": unix_now(), "owned_by": "megatron-train-sim",
        "max_model_len": shared.limits.max_model_len,
    })
}

async fn completions(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    generate(shared, Endpoint::Completions, headers, body).await
}

async fn chat(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    generate(shared, Endpoint::Chat, headers, body).await
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

/// Decrements the count of requests in flight when a request is done
/// (however it ends); its jobs' places in the queue are the jobs' own
/// ([`QueueSlot`]).
struct Admission {
    shared: Arc<Shared>,
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The lens spans of one request (the server span is tower-http's).
/// Dropped before it was ended (the client went away while a non-streaming
/// request was generating, and the handler was dropped), the GenAI span
/// ends with `error.type=client_disconnected` and the tokens generated so
/// far.
struct RequestSpans {
    generate: Option<DetachedSpan>,
    /// The HTTP SERVER span while no response is given: a handler dropped
    /// before one (its client left, or the connection was cut at shutdown)
    /// says so there, where tower-http records nothing.
    server: Option<tracing::Span>,
    model: String,
    /// Tokens generated so far (the model's tokens are bytes).
    output_tokens: u64,
}

impl RequestSpans {
    fn new(model: &str) -> RequestSpans {
        RequestSpans {
            generate: None,
            server: Some(tracing::Span::current()),
            model: model.to_owned(),
            output_tokens: 0,
        }
    }

    /// A response is given (tower-http records its status on the server
    /// span); later, only the GenAI span can say that the client left.
    fn answered(&mut self) {
        self.server = None;
    }

    fn end(mut self, outcome: &GenerateOutcome<'_>) {
        self.answered();
        if let Some(span) = self.generate.take() {
            telemetry::end_generate_span(span, outcome);
        }
    }
}

impl Drop for RequestSpans {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            // No response: no status code (the HTTP conventions' error.type
            // names the error class instead).
            server.record("error.type", "client_disconnected");
        }
        if let Some(span) = self.generate.take() {
            telemetry::end_generate_span(
                span,
                &GenerateOutcome {
                    response_id: "",
                    response_model: &self.model,
                    finish_reasons: &[],
                    output_tokens: self.output_tokens,
                    error_type: Some("client_disconnected"),
                },
            );
        }
    }
}

/// A request that passed every check and was handed to the engine.
struct Accepted {
    generation: Generation,
    events: UnboundedReceiver<Event>,
    admission: Admission,
    id: String,
    created: u64,
}

async fn generate(shared: Arc<Shared>, endpoint: Endpoint, headers: HeaderMap, body: Body) -> Response {
    let arrived = Instant::now();
    let mut spans = RequestSpans::new(&shared.limits.model_name);
    let accepted = match accept(&shared, endpoint, &headers, body, &mut spans, arrived).await {
        Ok(accepted) => accepted,
        Err(error) => {
            let outcome = GenerateOutcome {
                response_id: "",
                response_model: &shared.limits.model_name,
                finish_reasons: &[],
                output_tokens: 0,
                error_type: Some(error.code),
            };
            spans.end(&outcome);
            return error_response(&error);
        }
    };
    if accepted.generation.stream {
        spans.answered();
        let mut response = Response::new(Body::new(SseBody::new(shared.limits.model_name.clone(), accepted, spans)));
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        return response;
    }
    let Accepted { generation, mut events, admission, id, created } = accepted;
    let mut choices = vec![Choice::default(); generation.prompts.len()];
    let mut remaining = choices.len();
    while remaining > 0 {
        match events.recv().await {
            Some(Event::Text { index, text }) => {
                spans.output_tokens += text.len() as u64;
                choices[index].text.push_str(&String::from_utf8_lossy(&text));
            }
            Some(Event::Done { index, finish_reason, prompt_tokens, completion_tokens }) => {
                let choice = &mut choices[index];
                (choice.finish_reason, choice.prompt_tokens, choice.completion_tokens) =
                    (finish_reason, prompt_tokens, completion_tokens);
                remaining -= 1;
            }
            Some(Event::Failed { message }) => return engine_failed(&shared, spans, message),
            None => return engine_failed(&shared, spans, "the engine stopped".into()),
        }
    }
    drop(admission);
    let finish: Vec<&str> = choices.iter().map(|c| c.finish_reason).collect();
    let output_tokens = choices.iter().map(|c| c.completion_tokens).sum();
    spans.end(&GenerateOutcome {
        response_id: &id,
        response_model: &shared.limits.model_name,
        finish_reasons: &finish,
        output_tokens,
        error_type: None,
    });
    json_response(200, &api::response(endpoint, &id, created, &shared.limits.model_name, &choices))
}

fn shutting_down(message: String) -> ApiError {
    ApiError { status: 503, kind: "service_unavailable", param: None, code: "shutting_down", message }
}

/// The answer to a request the engine gave up on (shutdown's drain timed
/// out): its span counts the tokens generated until then.
fn engine_failed(shared: &Shared, spans: RequestSpans, message: String) -> Response {
    let error = shutting_down(message);
    let outcome = GenerateOutcome {
        response_id: "",
        response_model: &shared.limits.model_name,
        finish_reasons: &[],
        output_tokens: spans.output_tokens,
        error_type: Some(error.code),
    };
    spans.end(&outcome);
    error_response(&error)
}

fn too_large(limit: usize, size: Option<u64>) -> ApiError {
    // A chunked body has no announced size: it was cut off past the limit.
    let size = size.map_or_else(|| format!("over {limit} bytes"), |size| format!("{size} bytes"));
    ApiError {
        status: 413,
        kind: "invalid_request_error",
        param: None,
        code: "request_too_large",
        message: format!("the request body is {size}; this server accepts at most {limit} bytes (--max-body-bytes)"),
    }
}

/// Every check before the engine, then the hand-over.
async fn accept(
    shared: &Arc<Shared>,
    endpoint: Endpoint,
    headers: &HeaderMap,
    body: Body,
    spans: &mut RequestSpans,
    arrived: Instant,
) -> Result<Accepted, ApiError> {
    if shared.draining.load(Ordering::Acquire) {
        return Err(draining_error());
    }
    let declared = match headers.get(header::CONTENT_LENGTH) {
        None => None,
        Some(value) => match value.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok()) {
            Some(length) => Some(length),
            None => return Err(ApiError::malformed("the Content-Length header is not a number")),
        },
    };
    if let Some(length) = declared
        && length > shared.max_body_bytes as u64
    {
        return Err(too_large(shared.max_body_bytes, Some(length)));
    }
    let read = tokio::time::timeout(shared.body_read_timeout, axum::body::to_bytes(body, shared.max_body_bytes));
    let Ok(body) = read.await else {
        return Err(ApiError {
            status: 408,
            kind: "invalid_request_error",
            param: None,
            code: "request_timeout",
            message: format!(
                "the request body did not arrive within {} s of its headers (--body-read-timeout); send it whole",
                shared.body_read_timeout.as_secs()
            ),
        });
    };
    let body = body.map_err(|error| {
        let too_big =
            std::error::Error::source(&error).is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
        if too_big {
            too_large(shared.max_body_bytes, None)
        } else {
            ApiError::malformed(format!("the request body could not be read: {error}"))
        }
    })?;
    let generation = api::parse(endpoint, &body, &shared.limits)?;
    let choices = generation.prompts.len();
    let limit = shared.capacity;
    if shared.jobs_in_flight.fetch_add(choices, Ordering::AcqRel) + choices > limit {
        shared.jobs_in_flight.fetch_sub(choices, Ordering::AcqRel);
        return Err(ApiError {
            status: 429,
            kind: "rate_limit_error",
            param: None,
            code: "queue_full",
            message: format!(
                "the server's queue is full ({limit} requests running or waiting: --max-batch-size plus --max-queue); retry later"
            ),
        });
    }
    shared.in_flight.fetch_add(1, Ordering::AcqRel);
    let admission = Admission { shared: Arc::clone(shared) };
    // One place per choice, each given to its job (a job the engine could
    // not take gives its place back as it drops).
    let mut slots: Vec<QueueSlot> = (0..choices).map(|_| QueueSlot::taken(&shared.jobs_in_flight)).collect();
    let serial = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let id = match endpoint {
        Endpoint::Completions => format!("cmpl-{serial:016x}"),
        Endpoint::Chat => format!("chatcmpl-{serial:016x}"),
    };
    let input_tokens = generation.prompts.iter().map(|p| p.len() as u64).sum();
    // The handler runs inside tower-http's span (its future is instrumented).
    let span = telemetry::generate_span(
        &lens_tracing::context_of(&tracing::Span::current()),
        &GenerateRequest {
            operation: endpoint.operation(),
            model: &shared.limits.model_name,
            max_tokens: generation.max_tokens,
            temperature: as_sent(generation.temperature),
            top_p: as_sent(generation.top_p),
            seed: generation.seed,
            input_tokens,
        },
    );
    let span_context = span.remote_context();
    spans.generate = Some(span);
    let (sender, events) = unbounded_channel();
    let accepted_at = SystemTime::now();
    for ((index, prompt), slot) in generation.prompts.iter().enumerate().zip(slots.drain(..)) {
        let seed = generation.seed.map_or(serial ^ index as u64, |seed| (seed as u64) ^ (index as u64).rotate_left(32));
        shared.metrics.waiting_add(1);
        let job = Job {
            index,
            prompt: prompt.clone(),
            max_tokens: generation.max_tokens,
            temperature: generation.temperature,
            top_p: generation.top_p,
            seed,
            stop: generation.stop.clone(),
            events: sender.clone(),
            span_context: span_context.clone(),
            operation: endpoint.operation(),
            arrived,
            accepted_at,
            slot,
        };
        if shared.jobs.send(job).is_err() {
            shared.metrics.waiting_add(-1);
            return Err(shutting_down("the engine has stopped".into()));
        }
    }
    Ok(Accepted { generation, events, admission, id, created: unix_now() })
}

/// A sampling parameter as the span records it: the shortest decimal that
/// the model's `f32` prints as, read as an `f64` (a `temperature` of 0.7 is
/// 0.7, not the 0.699999988 that widening the `f32` gives).
fn as_sent(value: f32) -> f64 {
    value.to_string().parse().unwrap_or(f64::from(value))
}

/// The server-sent events of a streaming response: one `data:` line per
/// chunk, the usage chunk with `stream_options.include_usage`, then
/// `data: [DONE]`. An error after the stream started is one
/// `data: {"error": ...}` event, then `data: [DONE]`.
struct SseBody {
    model: String,
    accepted: Accepted,
    spans: Option<RequestSpans>,
    remaining: usize,
    prompt_tokens: u64,
    /// Tokens of the finished choices, as the engine counted them.
    completion_tokens: u64,
    /// Tokens streamed of each unfinished choice (the model's tokens are
    /// bytes), counted when the stream ends early.
    streamed: Vec<u64>,
    finish_reasons: Vec<&'static str>,
    finished: bool,
}

/// Events folded into one frame at most (a frame per poll otherwise).
const EVENTS_PER_FRAME: usize = 64;

impl SseBody {
    fn new(model: String, accepted: Accepted, spans: RequestSpans) -> SseBody {
        let remaining = accepted.generation.prompts.len();
        SseBody {
            model,
            accepted,
            spans: Some(spans),
            remaining,
            prompt_tokens: 0,
            completion_tokens: 0,
            streamed: vec![0; remaining],
            finish_reasons: vec![""; remaining],
            finished: false,
        }
    }

    fn push(out: &mut String, value: &Value) {
        out.push_str("data: ");
        out.push_str(&value.to_string());
        out.push_str("\n\n");
    }

    fn handle(&mut self, event: Option<Event>, out: &mut String) {
        let endpoint = self.accepted.generation.endpoint;
        let (id, created) = (&self.accepted.id, self.accepted.created);
        match event {
            Some(Event::Text { index, text }) => {
                self.streamed[index] += text.len() as u64;
                let text = String::from_utf8_lossy(&text);
                Self::push(out, &api::chunk(endpoint, id, created, &self.model, index, Some(&text), None));
            }
            Some(Event::Done { index, finish_reason, prompt_tokens, completion_tokens }) => {
                Self::push(out, &api::chunk(endpoint, id, created, &self.model, index, None, Some(finish_reason)));
                self.prompt_tokens += prompt_tokens;
                self.completion_tokens += completion_tokens;
                self.streamed[index] = 0;
                self.finish_reasons[index] = finish_reason;
                self.remaining -= 1;
                if self.remaining == 0 {
                    if self.accepted.generation.include_usage {
                        let usage = api::usage_chunk(
                            endpoint,
                            id,
                            created,
                            &self.model,
                            self.prompt_tokens,
                            self.completion_tokens,
                        );
                        Self::push(out, &usage);
                    }
                    out.push_str("data: [DONE]\n\n");
                    self.finish(None);
                }
            }
            Some(Event::Failed { message }) => self.fail(out, message),
            None => self.fail(out, "the engine stopped".into()),
        }
    }

    fn fail(&mut self, out: &mut String, message: String) {
        let error = shutting_down(message);
        Self::push(out, &error.body());
        out.push_str("data: [DONE]\n\n");
        self.finish(Some(error.code));
    }

    fn finish(&mut self, error_type: Option<&str>) {
        self.finished = true;
        if let Some(spans) = self.spans.take() {
            let reasons: Vec<&str> = if error_type.is_some() { Vec::new() } else { self.finish_reasons.clone() };
            spans.end(&GenerateOutcome {
                response_id: &self.accepted.id,
                response_model: &self.model,
                finish_reasons: &reasons,
                output_tokens: self.completion_tokens + self.streamed.iter().sum::<u64>(),
                error_type,
            });
        }
    }
}

impl Drop for SseBody {
    fn drop(&mut self) {
        if !self.finished {
            // The client went away mid-stream.
            self.finish(Some("client_disconnected"));
        }
    }
}

impl http_body::Body for SseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.finished {
            return Poll::Ready(None);
        }
        let mut out = String::new();
        for _ in 0..EVENTS_PER_FRAME {
            match self.accepted.events.poll_recv(cx) {
                Poll::Ready(event) => {
                    self.handle(event, &mut out);
                    if self.finished {
                        break;
                    }
                }
                Poll::Pending => break,
            }
        }
        if out.is_empty() {
            // Either a waker is registered (Pending) or the loop ran dry
            // of its budget without output, which cannot happen: every
            // event writes something.
            return if self.finished { Poll::Ready(None) } else { Poll::Pending };
        }
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))))
    }
}
