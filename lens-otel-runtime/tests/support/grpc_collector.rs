//! A real OTLP/gRPC collector for tests (tonic's server with the generated
//! trace and metrics services, the `otlp-sink` feature), on 127.0.0.1: it
//! answers `UNAVAILABLE` to its first calls and then accepts, and records
//! every call's `authorization` metadata and every accepted request.
//!
//! Lens's own gRPC senders (the encoded span batches of its batch processor,
//! the resent metric collections) go through a tonic `InterceptedService`,
//! whose interceptor sees every HTTP/2 header of the call. A collector
//! (grpcio, grpc-go) refuses a call without `content-type: application/grpc`
//! and `te: trailers`; tonic's server does not check them, so this one does,
//! and refuses such a call with `INVALID_ARGUMENT` (not counted as refused).
//!
//! [`collector_refusing_with`] refuses its first calls with given statuses
//! instead (OTLP's retry rules), [`retry_info`] makes one that asks for a
//! delay.

#![allow(dead_code, reason = "each test binary uses a part of the collector")]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

/// One call that reached the service.
#[derive(Clone, Debug)]
pub(crate) struct Call<R> {
    /// The `authorization` metadata of the call, when it had one.
    pub(crate) authorization: Option<String>,
    /// Its `content-type` and `te` headers.
    pub(crate) content_type: Option<String>,
    pub(crate) te: Option<String>,
    /// The request, when the call was accepted (`None`: refused).
    pub(crate) request: Option<R>,
    /// When the call arrived (Unix nanoseconds).
    pub(crate) at_unix_nano: u64,
}

impl<R> Call<R> {
    /// Whether the call had the headers every gRPC call has.
    pub(crate) fn is_grpc(&self) -> bool {
        self.content_type.as_deref().is_some_and(|value| value.starts_with("application/grpc"))
            && self.te.as_deref() == Some("trailers")
    }
}

/// The collector's records, shared with its server thread.
pub(crate) struct Collector<R> {
    /// `http://127.0.0.1:<port>`.
    pub(crate) endpoint: String,
    /// How many calls were refused so far.
    pub(crate) refused: Arc<AtomicUsize>,
    /// Every call, in arrival order.
    pub(crate) calls: Arc<Mutex<Vec<Call<R>>>>,
    /// Dropping it stops the server.
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// The service half: refuses the first calls, one per status of `refusals`.
pub(crate) struct Refusing<R> {
    refusals: Vec<tonic::Status>,
    refused: Arc<AtomicUsize>,
    calls: Arc<Mutex<Vec<Call<R>>>>,
}

impl<R> Refusing<R> {
    fn record(&self, request: tonic::Request<R>) -> Result<(), tonic::Status> {
        let header =
            |name: &str| request.metadata().get(name).and_then(|value| value.to_str().ok()).map(str::to_string);
        let at_unix_nano = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        let mut call = Call {
            authorization: header("authorization"),
            content_type: header("content-type"),
            te: header("te"),
            request: None,
            at_unix_nano,
        };
        let refuse = self.refusals.len();
        let answer = if !call.is_grpc() {
            Err(tonic::Status::invalid_argument("not a gRPC call: content-type or te missing"))
        } else if let Ok(n) =
            self.refused.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < refuse).then_some(n + 1))
        {
            Err(self.refusals[n].clone())
        } else {
            call.request = Some(request.into_inner());
            Ok(())
        };
        self.calls.lock().unwrap().push(call);
        answer
    }
}

#[tonic::async_trait]
impl TraceService for Refusing<ExportTraceServiceRequest> {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.record(request)?;
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

#[tonic::async_trait]
impl MetricsService for Refusing<ExportMetricsServiceRequest> {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.record(request)?;
        Ok(tonic::Response::new(ExportMetricsServiceResponse { partial_success: None }))
    }
}

/// A request type whose OTLP service the collector can serve.
pub(crate) trait Served: Sized + Send + 'static {
    /// A tonic server of the service on `incoming` until `stopped` fires.
    fn serve(
        service: Refusing<Self>,
        incoming: TcpIncoming,
        stopped: tokio::sync::oneshot::Receiver<()>,
    ) -> impl Future<Output = Result<(), tonic::transport::Error>>;
}

impl Served for ExportTraceServiceRequest {
    fn serve(
        service: Refusing<Self>,
        incoming: TcpIncoming,
        stopped: tokio::sync::oneshot::Receiver<()>,
    ) -> impl Future<Output = Result<(), tonic::transport::Error>> {
        Server::builder().serve_with_incoming_shutdown(TraceServiceServer::new(service), incoming, async {
            let _ = stopped.await;
        })
    }
}

impl Served for ExportMetricsServiceRequest {
    fn serve(
        service: Refusing<Self>,
        incoming: TcpIncoming,
        stopped: tokio::sync::oneshot::Receiver<()>,
    ) -> impl Future<Output = Result<(), tonic::transport::Error>> {
        Server::builder().serve_with_incoming_shutdown(MetricsServiceServer::new(service), incoming, async {
            let _ = stopped.await;
        })
    }
}

/// A collector of `R` (a trace or metrics export request) on 127.0.0.1 that
/// refuses its first `refuse` calls with `UNAVAILABLE`, served on its own
/// thread and runtime until the collector is dropped.
pub(crate) fn collector<R: Served>(refuse: usize) -> Collector<R> {
    collector_refusing_with(vec![tonic::Status::unavailable("the test collector is down"); refuse])
}

/// A status of `code` whose details ask for a retry after `delay`
/// (`google.rpc.RetryInfo`), as a collector that throttles sends it.
pub(crate) fn retry_info(code: tonic::Code, delay: Duration) -> tonic::Status {
    use lens_otel_runtime::exporters::otlp::rpc;
    use prost::Message as _;

    let delay = rpc::Duration { seconds: delay.as_secs() as i64, nanos: delay.subsec_nanos() as i32 };
    let retry_info = rpc::RetryInfo { retry_delay: Some(delay) };
    let status = rpc::Status {
        code: code as i32,
        message: String::new(),
        details: vec![rpc::Any {
            type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
            value: retry_info.encode_to_vec(),
        }],
    };
    tonic::Status::with_details(code, "the test collector is throttling", status.encode_to_vec().into())
}

/// A collector of `R` on 127.0.0.1 that answers its first calls with
/// `refusals`, one each, and accepts the rest.
pub(crate) fn collector_refusing_with<R: Served>(refusals: Vec<tonic::Status>) -> Collector<R> {
    let refused = Arc::new(AtomicUsize::new(0));
    let calls = Arc::new(Mutex::new(Vec::new()));
    let service = Refusing { refusals, refused: Arc::clone(&refused), calls: Arc::clone(&calls) };
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let (bound, address) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1");
            bound.send(listener.local_addr().expect("the bound address")).expect("the test waits");
            R::serve(service, TcpIncoming::from(listener), stopped).await.expect("the gRPC server runs");
        });
    });
    let address: SocketAddr = address.recv_timeout(Duration::from_secs(10)).expect("the collector listens within 10 s");
    Collector { endpoint: format!("http://{address}"), refused, calls, _stop: stop }
}
