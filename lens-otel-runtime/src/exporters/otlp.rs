//! OTLP exporters over gRPC (tonic), `http/protobuf` and `http/json`.
//!
//! The SDK must read no environment on its own (every option comes from the
//! validated configuration, so no variable is read twice with two meanings),
//! and
//! opentelemetry-otlp 0.33.1 does read `OTEL_EXPORTER_OTLP_*` whenever an
//! option is left unset (endpoint, protocol, timeout, compression,
//! temporality, `*_INSECURE` for endpoints without a scheme) and *always*
//! merges `OTEL_EXPORTER_OTLP_[SIGNAL_]HEADERS` into its requests. So every
//! option is set here from the configuration's per-signal
//! [`OtlpSettings`] (`config.otel.otlp(signal)`):
//!
//! - gRPC: lens builds the tonic `Channel` itself (endpoint, TLS with the
//!   private CA or the webpki roots, request and connect timeouts) and hands
//!   it to the SDK, so the SDK resolves no endpoint and no TLS; an
//!   interceptor, which runs after the SDK's, replaces whatever metadata the
//!   SDK added with lens's headers (and its user agent).
//! - HTTP: lens gives the SDK an HTTP client of its own (a blocking reqwest
//!   client with rustls on the ring provider, the private CA or the webpki
//!   roots, and explicit timeouts) and the full signal URL; the client sends
//!   only the content headers, the user agent and lens's headers.
//! - Protocol, timeout, temporality and the retry policy (disabled: retries
//!   belong to lens's batch processors, which bound them by the retry window)
//!   are set explicitly.
//! - The metric exporter comes with an [`OtlpMetricResender`]: the SDK's
//!   exporter takes only a `ResourceMetrics`, which cannot be kept, so a
//!   failed collection is kept encoded and resent by lens's own sender, with
//!   the same endpoint, protocol, headers, TLS, compression and timeout (the
//!   same tonic channel settings and interceptor, or the same HTTP client).
//! - The span exporter carries lens's own sender of encoded batches
//!   ([`OtlpSpanExporter`]'s crate-private `encode` and `send_encoded`): lens's
//!   batch processor encodes a batch once, exactly as the SDK's exporter
//!   does (same grouping, resource, protocol and compression), and sends
//!   and resends those bytes with the same HTTP client settings or tonic
//!   channel settings and interceptor, so a retry needs no copy of the
//!   spans. The SDK's exporter beside it serves any other caller
//!   of [`SpanExporter::export`].
//! - One residue: with [`Compression::None`] the SDK still consults
//!   `OTEL_EXPORTER_OTLP_[SIGNAL_]COMPRESSION` (it has no "none" setter). The
//!   configuration reads the same variables, so the two agree in a real
//!   process.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use opentelemetry_http::Bytes;
#[cfg(feature = "otlp-http")]
use opentelemetry_http::{HttpClient, HttpError};
#[cfg(feature = "otlp-http")]
use opentelemetry_otlp::WithHttpConfig;
#[cfg(feature = "otlp-grpc")]
use opentelemetry_otlp::WithTonicConfig;
use opentelemetry_otlp::{Protocol, RetryPolicy, WithExportConfig};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
#[cfg(feature = "otlp-grpc")]
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::logs::{LogBatch, LogExporter};
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
#[cfg(feature = "otlp-grpc")]
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};

use super::ExporterError;
use super::runtime::{InRuntime, OtlpRuntime};
use crate::config::{Compression, Headers, OtlpProtocol, OtlpSettings, Signal, redact_endpoint};
use crate::export_result::{ExportError, ExportResult, Retry};

/// Response bodies larger than this are refused (as the SDK's clients do).
#[cfg(feature = "otlp-http")]
const MAX_RESPONSE_BODY_BYTES: u64 = 4 * 1024 * 1024;
const USER_AGENT: &str = concat!("lens/", env!("CARGO_PKG_VERSION"));

/// Where an exporter of one signal sends, and how. Its `Debug` shows the
/// URL as [`ResolvedEndpoint::shown`] does.
#[derive(Clone, PartialEq, Eq)]
pub struct ResolvedEndpoint {
    /// The full URL: for HTTP, the signal's URL (`.../v1/traces`); for gRPC,
    /// the endpoint as given (gRPC paths come from the service definition).
    pub url: String,
    /// The protocol.
    pub protocol: OtlpProtocol,
    /// Whether the connection uses TLS (an `https` URL).
    pub tls: bool,
    /// The variable the endpoint came from (for messages), or `"default"`.
    pub source: &'static str,
}

impl fmt::Debug for ResolvedEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolvedEndpoint")
            .field("url", &self.shown())
            .field("protocol", &self.protocol)
            .field("tls", &self.tls)
            .field("source", &self.source)
            .finish()
    }
}

impl ResolvedEndpoint {
    /// The URL safe to show ([`redact_endpoint`]: no user-info, no query
    /// values).
    pub fn shown(&self) -> String {
        redact_endpoint(&self.url)
    }
}

/// The first failed export of one signal's OTLP exporter, reported once at
/// once, naming the endpoint: a collector that is not there is said when
/// the first export fails, not after the retry window or at shutdown (the
/// batch processor's rate-limited warnings follow with the counts). The
/// job's own exports and the spans replayed from a crash spool (setup's
/// replay, `lens recover`) are said apart, once each: what happens to what
/// was not sent differs.
#[derive(Debug)]
struct FirstFailure {
    signal: Signal,
    endpoint: ResolvedEndpoint,
    secrets: Vec<String>,
    reported: std::sync::atomic::AtomicBool,
    reported_replay: std::sync::atomic::AtomicBool,
    /// Whether a final answer (not retried) of the job's was said: said
    /// once even after another failure was, since it changes what is lost.
    reported_final: std::sync::atomic::AtomicBool,
}

/// Whose export failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exporting {
    /// The job's own telemetry.
    Job,
    /// Spans replayed from a crash spool.
    Replay,
}

impl Exporting {
    /// The context of an export started now on this thread.
    fn now() -> Exporting {
        if crate::replaying::replaying() { Exporting::Replay } else { Exporting::Job }
    }
}

impl FirstFailure {
    fn new(signal: Signal, endpoint: &ResolvedEndpoint, settings: &OtlpSettings) -> Arc<FirstFailure> {
        Arc::new(FirstFailure {
            signal,
            endpoint: endpoint.clone(),
            secrets: settings.secrets(),
            reported: std::sync::atomic::AtomicBool::new(false),
            reported_replay: std::sync::atomic::AtomicBool::new(false),
            reported_final: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// `result`, after reporting it if it is this exporter's first failure
    /// in `context`.
    fn check(&self, result: ExportResult, context: Exporting) -> ExportResult {
        let reported = match context {
            Exporting::Job => &self.reported,
            Exporting::Replay => &self.reported_replay,
        };
        if let Err(failure) = &result
            && !matches!(failure.error, OTelSdkError::AlreadyShutdown)
        {
            let first = !reported.swap(true, std::sync::atomic::Ordering::Relaxed);
            let first_final = context == Exporting::Job
                && failure.retry == Retry::Never
                && !self.reported_final.swap(true, std::sync::atomic::Ordering::Relaxed);
            if first || first_final {
                crate::diag::warn(self.message(&failure.error, failure.retry, context));
            }
        }
        result
    }

    /// [`check`](Self::check) for an export of the SDK's exporter (metrics,
    /// logs), whose failures say nothing of retrying.
    fn check_sdk(&self, result: OTelSdkResult, context: Exporting) -> OTelSdkResult {
        self.check(result.map_err(ExportError::from), context).map_err(|failure| failure.error)
    }

    /// The warning about `error`, the first failure in `context`, which
    /// `retry` says may or may not be retried.
    #[cold]
    fn message(&self, error: &OTelSdkError, retry: Retry, context: Exporting) -> String {
        let destination = format!(
            "the OTLP collector at {} ({}; endpoint from {})",
            self.endpoint.shown(),
            self.endpoint.protocol.as_str(),
            self.endpoint.source,
        );
        let error = crate::diag::redact(&error.to_string(), &self.secrets);
        // No variable named this endpoint: a collector answered there at
        // setup, or another exporter setting turned the default
        // destination's fall-back to files off for every signal.
        let hint = if self.endpoint.source == "default" {
            format!(
                "; no variable names this endpoint: {signal} go there because a collector answered at setup, or \
                 because another exporter setting (such as OTEL_METRICS_EXPORTER=prometheus) or an OTLP variable \
                 turns off the default destination's fall-back to files; OTEL_{}_EXPORTER=file writes them to \
                 files",
                self.signal.env_name(),
                signal = self.signal,
            )
        } else {
            String::new()
        };
        match (context, retry) {
            (Exporting::Job, Retry::Never) => format!(
                "cannot export {} to {destination}: {error}; an answer OTLP says is final is not retried: each \
                 export it refuses is dropped and counted in the shutdown report{hint}",
                self.signal
            ),
            (Exporting::Job, _) => format!(
                "cannot export {} to {destination}: {error}; lens retries within its retry window and counts what \
                 is lost in the shutdown report{hint}",
                self.signal
            ),
            (Exporting::Replay, _) => format!(
                "cannot send the spans replayed from a crash spool to {destination}: {error}; the spool is kept, \
                 and the next attempt of the job or `lens recover` on its directory sends them once that \
                 collector answers"
            ),
        }
    }
}

/// Resolves the URL, protocol and TLS of `signal`'s exporter.
///
/// The URL is [`OtlpSettings::endpoint_url`]: a general endpoint (or the
/// default) gets `/v1/traces`, `/v1/metrics` or `/v1/logs` appended for the
/// HTTP protocols; a per-signal one is used as-is; gRPC endpoints are always
/// used as-is. It must be an `http://` (plain) or `https://` (TLS) URL with a
/// host; otherwise the error names the variable the endpoint came from.
///
/// ```
/// use lens_core::config::{OtlpEndpoint, OtlpProtocol, OtlpSettings, Signal};
/// use lens_otel_runtime::exporters::resolve_endpoint;
///
/// let settings = OtlpSettings {
///     endpoint: Some(OtlpEndpoint { url: "http://collector:4318/".into(), signal_specific: false }),
///     protocol: OtlpProtocol::HttpProtobuf,
///     ..OtlpSettings::default()
/// };
/// let resolved = resolve_endpoint(&settings, Signal::Metrics)?;
/// assert_eq!(resolved.url, "http://collector:4318/v1/metrics");
/// assert!(!resolved.tls);
/// # Ok::<(), lens_otel_runtime::exporters::ExporterError>(())
/// ```
pub fn resolve_endpoint(settings: &OtlpSettings, signal: Signal) -> Result<ResolvedEndpoint, ExporterError> {
    let url = settings.endpoint_url(signal);
    let variable = settings.endpoint_variable(signal);
    let source = if settings.endpoint.is_some() { variable } else { "default" };
    // Errors show the endpoint as the user wrote it, not the derived URL.
    let written = settings.endpoint.as_ref().map_or(url.as_str(), |endpoint| endpoint.url.as_str());
    let invalid = |reason: String| ExporterError::InvalidEndpoint { variable, value: redact_endpoint(written), reason };
    let uri: http::Uri = url.parse().map_err(|error: http::uri::InvalidUri| invalid(error.to_string()))?;
    let tls = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        Some(other) => return Err(invalid(format!("unsupported scheme {other:?}"))),
        None => return Err(invalid("no scheme".into())),
    };
    if uri.host().is_none_or(str::is_empty) {
        return Err(invalid("no host".into()));
    }
    Ok(ResolvedEndpoint { url, protocol: settings.protocol, tls, source })
}

/// The headers, checked; values are marked sensitive.
fn checked_headers(headers: &Headers) -> Result<Vec<(HeaderName, HeaderValue)>, ExporterError> {
    headers
        .iter()
        .map(|(name, value)| {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| ExporterError::InvalidHeader { name: name.to_owned(), reason: "invalid header name" })?;
            // The body's own headers are lens's to set for the protocol: a
            // program's would make the collector misread every export.
            if [http::header::CONTENT_TYPE, http::header::CONTENT_ENCODING, http::header::CONTENT_LENGTH]
                .contains(&header)
            {
                return Err(ExporterError::InvalidHeader {
                    name: name.to_owned(),
                    reason: "lens sets it for the protocol and compression; remove it from the list",
                });
            }
            let mut value = HeaderValue::from_str(value).map_err(|_| ExporterError::InvalidHeader {
                name: name.to_owned(),
                reason: "invalid characters in the value",
            })?;
            value.set_sensitive(true);
            Ok((header, value))
        })
        .collect()
}

/// Reads the private CA file: its bytes, checked to hold at least one PEM
/// certificate. Only a regular file of at most 4 MiB is read
/// ([`read_certificate_file`](crate::config::read_certificate_file)), so
/// that a device or a FIFO named by mistake neither hangs nor fills the job.
fn read_certificate(path: &Path) -> Result<(Vec<u8>, Vec<rustls::pki_types::CertificateDer<'static>>), ExporterError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    let error = |reason: String| ExporterError::Certificate { path: path.to_owned(), reason };
    let pem = crate::config::read_certificate_file(path).map_err(error)?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| error(format!("not a valid PEM file: {source}")))?;
    if certificates.is_empty() {
        return Err(error("the file holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into()));
    }
    Ok((pem, certificates))
}

#[cfg(feature = "otlp-http")]
/// The rustls configuration of the HTTP client: ring, and the private CA or
/// the webpki roots.
fn rustls_config(
    certificates: Option<Vec<rustls::pki_types::CertificateDer<'static>>>,
    path: Option<&Path>,
) -> Result<rustls::ClientConfig, ExporterError> {
    let mut roots = rustls::RootCertStore::empty();
    match certificates {
        Some(certificates) => {
            for certificate in certificates {
                roots.add(certificate).map_err(|error| ExporterError::Certificate {
                    path: path.map(Path::to_owned).unwrap_or_default(),
                    reason: format!("not a usable CA certificate: {error}"),
                })?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| ExporterError::Runtime { reason: format!("TLS setup failed: {error}") })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(feature = "otlp-http")]
/// The HTTP client lens gives the SDK: a blocking reqwest client that sends
/// lens's headers and drops any header the SDK took from the environment.
struct LensHttpClient {
    client: reqwest::blocking::Client,
    headers: Arc<[(HeaderName, HeaderValue)]>,
    /// The SDK turns every transport failure into "network error"; lens
    /// says why (refused, timed out, a certificate it does not trust) once
    /// a minute.
    transport_warnings: Arc<crate::diag::RateLimit>,
}

#[cfg(feature = "otlp-http")]
impl fmt::Debug for LensHttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LensHttpClient").field("headers", &self.headers.len()).finish_non_exhaustive()
    }
}

#[cfg(feature = "otlp-http")]
impl LensHttpClient {
    fn build(
        settings: &OtlpSettings,
        certificates: Option<Vec<rustls::pki_types::CertificateDer<'static>>>,
        headers: Vec<(HeaderName, HeaderValue)>,
    ) -> Result<LensHttpClient, ExporterError> {
        let tls = rustls_config(certificates, settings.certificate.as_deref())?;
        let timeout = settings.timeout;
        // A blocking reqwest client owns a runtime of its own: build it on a
        // plain thread, so that a caller inside an async runtime is safe.
        let client = std::thread::Builder::new()
            .name("lens-otlp-http-setup".into())
            .spawn(move || {
                crate::export_path::mark_thread();
                reqwest::blocking::Client::builder()
                    .timeout(timeout)
                    .connect_timeout(timeout)
                    .redirect(reqwest::redirect::Policy::none())
                    .user_agent(USER_AGENT)
                    .tls_backend_preconfigured(tls)
                    .build()
            })
            .map_err(|error| ExporterError::Runtime { reason: error.to_string() })?
            .join()
            .map_err(|_| ExporterError::Runtime { reason: "building the HTTP client panicked".into() })?
            .map_err(|error| ExporterError::Runtime { reason: format!("cannot build the HTTP client: {error}") })?;
        Ok(LensHttpClient {
            client,
            headers: headers.into(),
            transport_warnings: Arc::new(crate::diag::RateLimit::new(Duration::from_secs(60))),
        })
    }

    fn send(&self, request: http::Request<Bytes>) -> Result<http::Response<Bytes>, HttpError> {
        use std::io::Read;

        let _export_path = crate::export_path::ExportScope::enter();

        let (parts, body) = request.into_parts();
        let mut headers = http::HeaderMap::new();
        for name in [http::header::CONTENT_TYPE, http::header::CONTENT_ENCODING] {
            if let Some(value) = parts.headers.get(&name) {
                headers.insert(name, value.clone());
            }
        }
        for (name, value) in self.headers.iter() {
            headers.insert(name.clone(), value.clone());
        }
        let response = match self
            .client
            .request(parts.method, parts.uri.to_string())
            .headers(headers)
            .body(body.to_vec())
            .send()
        {
            Ok(response) => response,
            Err(error) => {
                self.warn_transport(&error);
                return Err(Box::new(error));
            }
        };
        let status = response.status();
        let response_headers = response.headers().clone();
        let mut body = Vec::new();
        response.take(MAX_RESPONSE_BODY_BYTES + 1).read_to_end(&mut body)?;
        if body.len() as u64 > MAX_RESPONSE_BODY_BYTES {
            return Err(Box::new(opentelemetry_http::ResponseBodyTooLarge::new()));
        }
        let mut response = http::Response::builder().status(status).body(Bytes::from(body))?;
        *response.headers_mut() = response_headers;
        Ok(response)
    }
}

#[cfg(feature = "otlp-http")]
impl LensHttpClient {
    /// Warns (rate-limited) with the whole cause chain of a failed request,
    /// without its URL and with the header values redacted.
    #[cold]
    fn warn_transport(&self, error: &reqwest::Error) {
        let Some(held_back) = self.transport_warnings.check() else { return };
        let mut message = String::new();
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
        while let Some(current) = cause {
            let text = current.to_string();
            if !message.contains(&text) {
                if !message.is_empty() {
                    message.push_str(": ");
                }
                message.push_str(&text);
            }
            cause = current.source();
        }
        if let Some(url) = error.url() {
            message = message.replace(&format!(" for url ({url})"), "");
        }
        let secrets: Vec<String> =
            self.headers.iter().filter_map(|(_, value)| value.to_str().ok().map(str::to_string)).collect();
        let message = crate::diag::redact(&message, &secrets);
        crate::diag::warn(format_args!(
            "OTLP/HTTP export request failed: {message}{}",
            if held_back > 0 { format!(" ({held_back} more held back)") } else { String::new() }
        ));
    }
}

#[cfg(feature = "otlp-http")]
impl HttpClient for LensHttpClient {
    fn send_bytes<'life0, 'async_trait>(
        &'life0 self,
        request: http::Request<Bytes>,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<http::Response<Bytes>, HttpError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move { self.send(request) })
    }
}

#[cfg(feature = "otlp-grpc")]
/// The gRPC interceptor: replaces the SDK's metadata (which may hold headers
/// from the environment) with lens's headers.
#[derive(Clone)]
struct HeaderInterceptor {
    headers: Arc<[(AsciiMetadataKey, AsciiMetadataValue)]>,
    /// Whether the request's metadata is replaced rather than added to.
    /// The SDK's exporter calls its interceptor on an empty request of its
    /// own, whose metadata holds only what the SDK read from the environment:
    /// replaced, so that only lens's headers are sent. A tonic
    /// `InterceptedService` (lens's own senders) calls it on the whole HTTP/2
    /// request, whose metadata is every header (`content-type`, `te`,
    /// `grpc-encoding`): added to, or the collector sees a malformed gRPC call.
    replace: bool,
}

#[cfg(feature = "otlp-grpc")]
impl HeaderInterceptor {
    fn new(headers: &[(HeaderName, HeaderValue)]) -> Result<HeaderInterceptor, ExporterError> {
        let headers = headers
            .iter()
            .map(|(name, value)| {
                let key = AsciiMetadataKey::from_bytes(name.as_str().as_bytes()).map_err(|_| {
                    ExporterError::InvalidHeader { name: name.to_string(), reason: "invalid gRPC metadata key" }
                })?;
                let mut value = AsciiMetadataValue::try_from(value.as_bytes()).map_err(|_| {
                    ExporterError::InvalidHeader { name: name.to_string(), reason: "invalid characters in the value" }
                })?;
                value.set_sensitive(true);
                Ok((key, value))
            })
            .collect::<Result<Vec<_>, ExporterError>>()?;
        Ok(HeaderInterceptor { headers: headers.into(), replace: true })
    }

    /// The interceptor of a tonic service wrapped around a channel (lens's
    /// own gRPC senders): adds lens's headers to the request's own.
    fn for_service(headers: &[(HeaderName, HeaderValue)]) -> Result<HeaderInterceptor, ExporterError> {
        Ok(HeaderInterceptor { replace: false, ..HeaderInterceptor::new(headers)? })
    }
}

#[cfg(feature = "otlp-grpc")]
impl tonic::service::Interceptor for HeaderInterceptor {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let metadata = request.metadata_mut();
        if self.replace {
            *metadata = tonic::metadata::MetadataMap::new();
        }
        metadata.insert("user-agent", AsciiMetadataValue::from_static(USER_AGENT));
        for (key, value) in self.headers.iter() {
            metadata.insert(key.clone(), value.clone());
        }
        Ok(request)
    }
}

/// What a builder needs, checked once.
struct Prepared {
    endpoint: ResolvedEndpoint,
    headers: Vec<(HeaderName, HeaderValue)>,
    certificate: Option<(Vec<u8>, Vec<rustls::pki_types::CertificateDer<'static>>)>,
}

fn prepare(settings: &OtlpSettings, signal: Signal) -> Result<Prepared, ExporterError> {
    let endpoint = resolve_endpoint(settings, signal)?;
    let headers = checked_headers(&settings.headers)?;
    // A bad file is an error even for an `http` endpoint, where it is unused:
    // the user asked for it and should learn that it is wrong.
    let certificate = settings.certificate.as_deref().map(read_certificate).transpose()?;
    Ok(Prepared { endpoint, headers, certificate })
}

/// The error of an OTLP exporter whose transport this build lacks (setup
/// refuses such a configuration first: `MissingTransport`).
#[cfg(not(all(feature = "otlp-grpc", feature = "otlp-http")))]
fn missing_transport(settings: &OtlpSettings) -> ExporterError {
    let (_, feature) = crate::transports::TRANSPORTS.otlp(settings.protocol);
    ExporterError::MissingTransport(crate::config::MissingTransport {
        variable: "OTEL_EXPORTER_OTLP_PROTOCOL".to_string(),
        value: settings.protocol.as_str().to_string(),
        selects: format!("OTLP over {}", settings.protocol.as_str()),
        feature,
    })
}

fn build_error(signal: Signal, endpoint: &ResolvedEndpoint, reason: impl fmt::Display) -> ExporterError {
    ExporterError::Build { signal, endpoint: endpoint.shown(), reason: reason.to_string() }
}

#[cfg(feature = "otlp-grpc")]
/// The tonic channel to the endpoint, created lazily in the runtime.
fn grpc_channel(
    prepared: &Prepared,
    settings: &OtlpSettings,
    signal: Signal,
    runtime: &OtlpRuntime,
) -> Result<tonic::transport::Channel, ExporterError> {
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

    let endpoint = &prepared.endpoint;
    let mut channel = Endpoint::from_shared(endpoint.url.clone())
        .map_err(|error| build_error(signal, endpoint, error))?
        .timeout(settings.timeout)
        .connect_timeout(settings.timeout);
    if endpoint.tls {
        let uri: http::Uri = endpoint.url.parse().map_err(|error| build_error(signal, endpoint, error))?;
        let host = uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_owned();
        let tls = ClientTlsConfig::new().domain_name(host);
        let tls = match &prepared.certificate {
            Some((pem, _)) => tls.ca_certificate(Certificate::from_pem(pem)),
            None => tls.trust_anchors(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        };
        channel = channel.tls_config(tls).map_err(|error| build_error(signal, endpoint, error))?;
    }
    let _entered = runtime.handle().enter();
    Ok(channel.connect_lazy())
}

/// The SDK's compression; `None` for [`Compression::None`] (the SDK has no
/// "none" setter: see the module documentation).
fn sdk_compression(compression: Compression) -> Option<opentelemetry_otlp::Compression> {
    match compression {
        Compression::None => None,
        Compression::Gzip => Some(opentelemetry_otlp::Compression::Gzip),
    }
}

/// The SDK's HTTP protocol (called for the HTTP protocols only; the SDK
/// names gRPC only in a build with gRPC).
#[cfg(feature = "otlp-http")]
fn sdk_protocol(protocol: OtlpProtocol) -> Protocol {
    match protocol {
        OtlpProtocol::HttpJson => Protocol::HttpJson,
        OtlpProtocol::HttpProtobuf | OtlpProtocol::Grpc => Protocol::HttpBinary,
    }
}

#[cfg(feature = "otlp-grpc")]
/// Applies the options common to every builder.
macro_rules! configure_grpc {
    ($builder:expr, $prepared:expr, $settings:expr, $signal:expr, $runtime:expr) => {{
        let channel = grpc_channel(&$prepared, $settings, $signal, &$runtime)?;
        let mut builder = $builder
            .with_tonic()
            .with_endpoint($prepared.endpoint.url.clone())
            .with_protocol(Protocol::Grpc)
            .with_timeout($settings.timeout)
            .with_channel(channel)
            .with_interceptor(HeaderInterceptor::new(&$prepared.headers)?)
            .with_retry_policy(RetryPolicy::disabled());
        if let Some(compression) = sdk_compression($settings.compression) {
            builder = builder.with_compression(compression);
        }
        let _entered = $runtime.handle().enter();
        builder.build().map_err(|error| build_error($signal, &$prepared.endpoint, error))?
    }};
}

#[cfg(feature = "otlp-http")]
macro_rules! configure_http {
    ($builder:expr, $prepared:expr, $settings:expr, $signal:expr) => {{
        let certificates = $prepared.certificate.as_ref().map(|(_, certificates)| certificates.clone());
        let client = LensHttpClient::build($settings, certificates, $prepared.headers.clone())?;
        let mut builder = $builder
            .with_http()
            .with_endpoint($prepared.endpoint.url.clone())
            .with_protocol(sdk_protocol($settings.protocol))
            .with_timeout($settings.timeout)
            .with_http_client(client)
            .with_retry_policy(RetryPolicy::disabled());
        if let Some(compression) = sdk_compression($settings.compression) {
            builder = builder.with_compression(compression);
        }
        builder.build().map_err(|error| build_error($signal, &$prepared.endpoint, error))?
    }};
}

/// Builds the OTLP span exporter for `settings`, the traces settings of the
/// configuration (`config.otel.otlp(Signal::Traces)`).
///
/// For gRPC this starts (or shares) the `lens-otlp` runtime; nothing
/// connects until the first export.
///
/// ```
/// use lens_core::config::{OtlpProtocol, OtlpSettings};
/// use lens_otel_runtime::exporters::build_otlp_span_exporter;
///
/// let settings = OtlpSettings { protocol: OtlpProtocol::HttpJson, ..OtlpSettings::default() };
/// let exporter = build_otlp_span_exporter(&settings)?;
/// assert_eq!(exporter.endpoint().url, "http://localhost:4318/v1/traces");
/// # Ok::<(), lens_otel_runtime::exporters::ExporterError>(())
/// ```
pub fn build_otlp_span_exporter(settings: &OtlpSettings) -> Result<OtlpSpanExporter, ExporterError> {
    let signal = Signal::Traces;
    let prepared = prepare(settings, signal)?;
    let builder = opentelemetry_otlp::SpanExporter::builder();
    let (inner, runtime, transport) = match settings.protocol.is_http() {
        #[cfg(feature = "otlp-http")]
        true => {
            let certificates = prepared.certificate.as_ref().map(|(_, certificates)| certificates.clone());
            let client = LensHttpClient::build(settings, certificates, prepared.headers.clone())?;
            let transport = SpanTransport::Http {
                client,
                url: prepared.endpoint.url.clone(),
                json: settings.protocol == OtlpProtocol::HttpJson,
            };
            (configure_http!(builder, prepared, settings, signal), None, transport)
        }
        #[cfg(feature = "otlp-grpc")]
        false => {
            let runtime = OtlpRuntime::shared()?;
            let channel = grpc_channel(&prepared, settings, signal, &runtime)?;
            let service = tonic::service::interceptor::InterceptedService::new(
                channel,
                HeaderInterceptor::for_service(&prepared.headers)?,
            );
            let transport = SpanTransport::Grpc { service };
            (configure_grpc!(builder, prepared, settings, signal, runtime), Some(runtime), transport)
        }
        #[cfg(not(all(feature = "otlp-grpc", feature = "otlp-http")))]
        _ => return Err(missing_transport(settings)),
    };
    let sender = SpanSender {
        transport,
        gzip: settings.compression == Compression::Gzip,
        resource: Default::default(),
        shut_down: std::sync::atomic::AtomicBool::new(false),
        first_failure: FirstFailure::new(signal, &prepared.endpoint, settings),
    };
    Ok(OtlpSpanExporter { inner, runtime, endpoint: prepared.endpoint, sender: Arc::new(sender) })
}

/// How lens's own span sender reaches the collector: the same HTTP client
/// settings, or the same tonic channel settings and interceptor, as the
/// SDK's exporter beside it.
enum SpanTransport {
    #[cfg(feature = "otlp-http")]
    Http { client: LensHttpClient, url: String, json: bool },
    #[cfg(feature = "otlp-grpc")]
    Grpc { service: tonic::service::interceptor::InterceptedService<tonic::transport::Channel, HeaderInterceptor> },
}

impl SpanTransport {
    /// `Some(json)` for HTTP (JSON or protobuf), `None` for gRPC.
    fn http_json(&self) -> Option<bool> {
        match self {
            #[cfg(feature = "otlp-http")]
            SpanTransport::Http { json, .. } => Some(*json),
            #[cfg(feature = "otlp-grpc")]
            SpanTransport::Grpc { .. } => None,
        }
    }
}

/// Encodes a batch of spans once and sends the encoded request as often as
/// lens's batch processor attempts it within its retry window: a retry resends the same
/// bytes, so no copy of the spans is kept for it. The encoding is the SDK
/// exporter's (`group_spans_by_resource_and_scope` with the provider's
/// resource, protobuf or JSON, gzip when configured).
struct SpanSender {
    transport: SpanTransport,
    gzip: bool,
    resource: opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema,
    shut_down: std::sync::atomic::AtomicBool,
    first_failure: Arc<FirstFailure>,
}

#[cfg(feature = "otlp-grpc")]
/// The gRPC path of the trace service's `Export` call.
const GRPC_TRACE_EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// Spans the collectors answered as rejected in this process (OTLP's partial
/// success): delivered, counted among the exported, never sent again.
static SPANS_REJECTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Whether a rejection has been warned about in this process.
static WARNED_REJECTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The spans collectors have rejected in this process so far (OTLP's
/// partial success: `rejected_spans` of an accepted export). The shutdown
/// report counts a lifetime's among its exported spans.
pub fn spans_rejected() -> u64 {
    SPANS_REJECTED.load(std::sync::atomic::Ordering::Relaxed)
}

/// The rejected spans and the message of a trace export's response
/// (protobuf, or OTLP/JSON for `json`); nothing rejected for a response
/// that is empty or not one.
fn partial_success(body: &[u8], json: bool) -> (u64, String) {
    use prost::Message as _;
    if body.is_empty() {
        return (0, String::new());
    }
    if json {
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else { return (0, String::new()) };
        let partial = &value["partialSuccess"];
        // int64 is a string in OTLP/JSON; a number is read too.
        let rejected = match &partial["rejectedSpans"] {
            serde_json::Value::String(text) => text.parse().unwrap_or(0),
            other => other.as_u64().unwrap_or(0),
        };
        return (rejected, partial["errorMessage"].as_str().unwrap_or_default().to_string());
    }
    match opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse::decode(body) {
        Ok(response) => response.partial_success.map_or((0, String::new()), |partial| {
            (u64::try_from(partial.rejected_spans).unwrap_or(0), partial.error_message)
        }),
        Err(_) => (0, String::new()),
    }
}

#[cfg(feature = "otlp-grpc")]
/// A tonic codec that sends an already encoded protobuf message as it is and
/// reads the response's bytes (for its partial success).
#[derive(Clone, Copy, Debug, Default)]
struct EncodedCodec;

#[cfg(feature = "otlp-grpc")]
impl tonic::codec::Codec for EncodedCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = EncodedCodec;
    type Decoder = EncodedCodec;

    fn encoder(&mut self) -> EncodedCodec {
        EncodedCodec
    }

    fn decoder(&mut self) -> EncodedCodec {
        EncodedCodec
    }
}

#[cfg(feature = "otlp-grpc")]
impl tonic::codec::Encoder for EncodedCodec {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: Bytes, dst: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        use bytes::BufMut as _;
        dst.put_slice(&item);
        Ok(())
    }
}

#[cfg(feature = "otlp-grpc")]
impl tonic::codec::Decoder for EncodedCodec {
    type Item = Bytes;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        use bytes::Buf as _;
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

impl SpanSender {
    fn encode(&self, batch: Vec<SpanData>) -> Result<Bytes, OTelSdkError> {
        use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
        use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;

        self.encode_with(|resource| ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(batch, resource),
        })
    }

    /// Encodes the request `build` makes for this exporter's resource, the
    /// way [`SpanSender::encode`] encodes the SDK's spans (protobuf or
    /// JSON, gzip when configured): the span recorder's direct path.
    fn encode_with(
        &self,
        build: impl FnOnce(
            &opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema,
        ) -> opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest,
    ) -> Result<Bytes, OTelSdkError> {
        use prost::Message as _;

        let failure = |reason: String| OTelSdkError::InternalFailure(format!("span export: {reason}"));
        let request = build(&self.resource);
        let body = match self.transport.http_json() {
            Some(true) => serde_json::to_vec(&request).map_err(|error| failure(error.to_string()))?,
            _ => request.encode_to_vec(),
        };
        self.compressed(body)
    }

    /// Encodes span records in `scope` for this exporter's resource:
    /// protobuf written straight from the records
    /// ([`crate::otlp_wire::encode_request_bytes`]), JSON through the
    /// request's messages.
    fn encode_records(
        &self,
        records: Vec<crate::span_record::SpanRecord>,
        scope: &opentelemetry::InstrumentationScope,
    ) -> Result<Bytes, OTelSdkError> {
        if self.transport.http_json() == Some(true) {
            return self.encode_with(|resource| crate::span_record::encode_request(records, resource, scope));
        }
        self.compressed(crate::otlp_wire::encode_request_bytes(&records, &self.resource, scope))
    }

    /// `body`, gzipped when configured for HTTP (gRPC compresses in tonic,
    /// `send_compressed`).
    fn compressed(&self, body: Vec<u8>) -> Result<Bytes, OTelSdkError> {
        let failure = |reason: String| OTelSdkError::InternalFailure(format!("span export: {reason}"));
        if self.gzip && self.transport.http_json().is_some() {
            use std::io::Write as _;
            let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            let body =
                encoder.write_all(&body).and_then(|()| encoder.finish()).map_err(|error| failure(error.to_string()))?;
            return Ok(Bytes::from(body));
        }
        Ok(Bytes::from(body))
    }

    /// Sends `body`, an export started in `context` (read where the export
    /// began: this may run on another thread).
    async fn send(&self, body: Bytes, context: Exporting) -> ExportResult {
        if self.shut_down.load(std::sync::atomic::Ordering::Acquire) {
            return Err(OTelSdkError::AlreadyShutdown.into());
        }
        let failure = |reason: String| OTelSdkError::InternalFailure(format!("span export: {reason}"));
        match &self.transport {
            #[cfg(feature = "otlp-http")]
            SpanTransport::Http { client, url, json } => {
                let content_type = if *json { "application/json" } else { "application/x-protobuf" };
                let mut builder = http::Request::builder()
                    .method(http::Method::POST)
                    .uri(url.as_str())
                    .header(http::header::CONTENT_TYPE, content_type);
                if self.gzip {
                    builder = builder.header(http::header::CONTENT_ENCODING, "gzip");
                }
                let request = builder.body(body).map_err(|error| failure(error.to_string()))?;
                let response = client.send(request).map_err(|error| failure(error.to_string()))?;
                if response.status().is_success() {
                    self.rejected(partial_success(response.body(), *json), context);
                    Ok(())
                } else {
                    Err(ExportError {
                        error: failure(http_refusal(response.status(), url, Signal::Traces)),
                        retry: http_retry(response.status(), response.headers()),
                    })
                }
            }
            #[cfg(feature = "otlp-grpc")]
            SpanTransport::Grpc { service } => {
                let mut grpc = tonic::client::Grpc::new(service.clone());
                if self.gzip {
                    grpc = grpc.send_compressed(tonic::codec::CompressionEncoding::Gzip);
                }
                let status = |status: tonic::Status| ExportError {
                    error: failure(grpc_failure(&status, Signal::Traces)),
                    retry: grpc_retry(&status),
                };
                grpc.ready().await.map_err(|error| failure(format!("the channel is not ready: {error}")))?;
                let path = http::uri::PathAndQuery::from_static(GRPC_TRACE_EXPORT_PATH);
                let response = grpc.unary(tonic::Request::new(body), path, EncodedCodec).await.map_err(status)?;
                self.rejected(partial_success(response.get_ref(), false), context);
                Ok(())
            }
        }
    }

    /// An accepted export whose collector rejected `rejected` of its spans,
    /// with `message`: said once per process (OTLP: a rejected span is not
    /// to be sent again), and counted for the shutdown report when the
    /// spans are the job's (a replay's never count among its exported).
    fn rejected(&self, (rejected, message): (u64, String), context: Exporting) {
        if rejected == 0 {
            return;
        }
        let replay = context == Exporting::Replay;
        if !replay {
            SPANS_REJECTED.fetch_add(rejected, std::sync::atomic::Ordering::Relaxed);
        }
        if !WARNED_REJECTED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            let message = crate::diag::redact(&message, &self.first_failure.secrets);
            let said = if message.is_empty() { String::new() } else { format!(": {message}") };
            let (what, counted) = if replay {
                ("spans replayed from a crash spool", "")
            } else {
                ("span(s) of an export it accepted", ", and the shutdown report counts them")
            };
            crate::diag::warn(format_args!(
                "span export: the OTLP collector at {} rejected {rejected} {what} (partial success){said}; rejected \
                 spans are not sent again{counted}",
                self.first_failure.endpoint.shown()
            ));
        }
    }
}

/// A failed gRPC call in words: what the collector answered, or, for a
/// status tonic made itself from a transport error (it has a source: no
/// connection, a name that does not resolve), that the collector was not
/// reached.
#[cfg(feature = "otlp-grpc")]
fn grpc_failure(status: &tonic::Status, signal: Signal) -> String {
    if std::error::Error::source(status).is_some() {
        format!("no answer from the collector ({:?}: {})", status.code(), status.message())
    } else if matches!(status.code(), tonic::Code::Unauthenticated | tonic::Code::PermissionDenied) {
        format!("the collector answered {:?}: {} ({})", status.code(), status.message(), credentials_hint(signal))
    } else {
        format!("the collector answered {:?}: {}", status.code(), status.message())
    }
}

impl OtlpSpanExporter {
    /// Encodes `batch` once for every attempt of its export through
    /// [`OtlpSpanExporter::send_encoded`] (lens's batch processor does this
    /// instead of keeping a copy of the spans for retries).
    pub(crate) fn encode(&self, batch: Vec<SpanData>) -> Result<Bytes, OTelSdkError> {
        self.sender.encode(batch)
    }

    /// Encodes span records in `scope` (the span recorder's batches).
    pub(crate) fn encode_records(
        &self,
        records: Vec<crate::span_record::SpanRecord>,
        scope: &opentelemetry::InstrumentationScope,
    ) -> Result<Bytes, OTelSdkError> {
        self.sender.encode_records(records, scope)
    }

    /// Sends a batch encoded by [`OtlpSpanExporter::encode`] (a cheap clone
    /// of the bytes per attempt).
    pub(crate) fn send_encoded(&self, body: Bytes) -> impl Future<Output = ExportResult> + Send + 'static {
        let sender = Arc::clone(&self.sender);
        let context = Exporting::now();
        InRuntime::new(self.runtime.as_ref(), async move {
            let result = sender.send(body, context).await;
            sender.first_failure.check(result, context)
        })
    }
}

/// Builds the OTLP metric exporter for `settings`, the metrics settings of
/// the configuration (`config.otel.otlp(Signal::Metrics)`), with the given
/// temporality (lens uses cumulative, the OTLP default).
pub fn build_otlp_metric_exporter(
    settings: &OtlpSettings,
    temporality: Temporality,
) -> Result<OtlpMetricExporter, ExporterError> {
    let signal = Signal::Metrics;
    let prepared = prepare(settings, signal)?;
    let builder = opentelemetry_otlp::MetricExporter::builder().with_temporality(temporality);
    let (inner, runtime, transport) = match settings.protocol.is_http() {
        #[cfg(feature = "otlp-http")]
        true => {
            let certificates = prepared.certificate.as_ref().map(|(_, certificates)| certificates.clone());
            let client = LensHttpClient::build(settings, certificates, prepared.headers.clone())?;
            let transport = ResendTransport::Http {
                client,
                url: prepared.endpoint.url.clone(),
                json: settings.protocol == OtlpProtocol::HttpJson,
            };
            (configure_http!(builder, prepared, settings, signal), None, transport)
        }
        #[cfg(feature = "otlp-grpc")]
        false => {
            let runtime = OtlpRuntime::shared()?;
            let channel = grpc_channel(&prepared, settings, signal, &runtime)?;
            let mut client =
                MetricsServiceClient::with_interceptor(channel, HeaderInterceptor::for_service(&prepared.headers)?);
            if settings.compression == Compression::Gzip {
                client = client.send_compressed(tonic::codec::CompressionEncoding::Gzip);
            }
            let transport = ResendTransport::Grpc { client, runtime: Arc::clone(&runtime) };
            (configure_grpc!(builder, prepared, settings, signal, runtime), Some(runtime), transport)
        }
        #[cfg(not(all(feature = "otlp-grpc", feature = "otlp-http")))]
        _ => return Err(missing_transport(settings)),
    };
    let resender = Arc::new(OtlpMetricResender {
        transport,
        gzip: settings.compression == Compression::Gzip,
        timeout: settings.timeout,
    });
    let first_failure = FirstFailure::new(signal, &prepared.endpoint, settings);
    Ok(OtlpMetricExporter { inner, runtime, endpoint: prepared.endpoint, resender, first_failure })
}

#[cfg(feature = "otlp-grpc")]
type GrpcMetricsClient =
    MetricsServiceClient<tonic::service::interceptor::InterceptedService<tonic::transport::Channel, HeaderInterceptor>>;

enum ResendTransport {
    #[cfg(feature = "otlp-http")]
    Http { client: LensHttpClient, url: String, json: bool },
    #[cfg(feature = "otlp-grpc")]
    Grpc { client: GrpcMetricsClient, runtime: Arc<OtlpRuntime> },
}

/// Resends an encoded metric collection to the metric exporter's endpoint
/// with its protocol, headers, TLS, compression and timeout, so that failed
/// collections are retried within the retry window (the SDK's exporter takes only a `ResourceMetrics`, which cannot be rebuilt).
/// Made by [`OtlpMetricExporter::resender`].
pub struct OtlpMetricResender {
    transport: ResendTransport,
    /// Whether the HTTP resend compresses (gRPC's client was built with it).
    #[cfg_attr(not(feature = "otlp-http"), expect(dead_code, reason = "only the HTTP resend reads it"))]
    gzip: bool,
    /// The backstop of the gRPC resend (HTTP's client has the timeout).
    #[cfg_attr(not(feature = "otlp-grpc"), expect(dead_code, reason = "only the gRPC resend reads it"))]
    timeout: Duration,
}

impl fmt::Debug for OtlpMetricResender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.transport {
            #[cfg(feature = "otlp-http")]
            ResendTransport::Http { json: true, .. } => "http/json",
            #[cfg(feature = "otlp-http")]
            ResendTransport::Http { json: false, .. } => "http/protobuf",
            #[cfg(feature = "otlp-grpc")]
            ResendTransport::Grpc { .. } => "grpc",
        };
        f.debug_struct("OtlpMetricResender").field("protocol", &kind).finish_non_exhaustive()
    }
}

#[cfg(feature = "otlp-http")]
impl OtlpMetricResender {
    fn send_http(
        &self,
        client: &LensHttpClient,
        url: &str,
        json: bool,
        request: &ExportMetricsServiceRequest,
    ) -> OTelSdkResult {
        use prost::Message as _;

        let failure = |reason: String| OTelSdkError::InternalFailure(format!("metric resend: {reason}"));
        let (body, content_type) = if json {
            (serde_json::to_vec(request).map_err(|error| failure(error.to_string()))?, "application/json")
        } else {
            (request.encode_to_vec(), "application/x-protobuf")
        };
        let mut builder = http::Request::builder()
            .method(http::Method::POST)
            .uri(url)
            .header(http::header::CONTENT_TYPE, content_type);
        let body = if self.gzip {
            use std::io::Write as _;
            let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(&body).and_then(|()| encoder.finish()).map_err(|error| failure(error.to_string()))?
        } else {
            body
        };
        if self.gzip {
            builder = builder.header(http::header::CONTENT_ENCODING, "gzip");
        }
        let http_request = builder.body(Bytes::from(body)).map_err(|error| failure(error.to_string()))?;
        let response = client.send(http_request).map_err(|error| failure(error.to_string()))?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(failure(http_refusal(response.status(), url, Signal::Metrics)))
        }
    }
}

/// What the collector answered to an export of `signal` to `url`, in
/// words; a 404 from a URL whose path is not the signal's adds why (a
/// per-signal endpoint is used as it is).
#[cfg(feature = "otlp-http")]
fn http_refusal(status: http::StatusCode, url: &str, signal: Signal) -> String {
    let path = signal.http_path();
    let without_query = url.split(['?', '#']).next().unwrap_or(url);
    if status == http::StatusCode::NOT_FOUND && !without_query.ends_with(path) {
        let variable = format!("OTEL_EXPORTER_OTLP_{}_ENDPOINT", signal.as_str().to_uppercase());
        format!(
            "the collector answered HTTP {status} (the URL's path is not {path}: {variable} is used as it is; give \
             the URL with {path}, or set OTEL_EXPORTER_OTLP_ENDPOINT, to which lens adds it)"
        )
    } else if matches!(status, http::StatusCode::UNAUTHORIZED | http::StatusCode::FORBIDDEN) {
        format!("the collector answered HTTP {status} ({})", credentials_hint(signal))
    } else {
        format!("the collector answered HTTP {status}")
    }
}

/// Where the credentials a collector refused come from.
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
fn credentials_hint(signal: Signal) -> String {
    format!(
        "check the credentials lens sends: OTEL_EXPORTER_OTLP_HEADERS or OTEL_EXPORTER_OTLP_{}_HEADERS",
        signal.as_str().to_uppercase()
    )
}

/// Whether an OTLP/HTTP answer other than success may be retried: 429, 502,
/// 503 and 504 may (after the answer's `Retry-After`, in seconds or as an
/// HTTP date, when it has one); every other answer is final (OTLP/HTTP,
/// "Failures").
#[cfg(feature = "otlp-http")]
fn http_retry(status: http::StatusCode, headers: &http::HeaderMap) -> Retry {
    if !matches!(status.as_u16(), 429 | 502 | 503 | 504) {
        return Retry::Never;
    }
    let Some(value) = headers.get(http::header::RETRY_AFTER).and_then(|value| value.to_str().ok()) else {
        return Retry::Backoff;
    };
    let value = value.trim();
    let wait = match value.parse::<u64>() {
        Ok(seconds) => Some(Duration::from_secs(seconds)),
        Err(_) => httpdate::parse_http_date(value)
            .ok()
            .map(|at| at.duration_since(std::time::SystemTime::now()).unwrap_or(Duration::ZERO)),
    };
    wait.map_or(Retry::Backoff, Retry::After)
}

/// Whether a failed gRPC call may be retried (OTLP/gRPC, "Failures"): one
/// that did not reach the collector may, and so may `CANCELLED`,
/// `DEADLINE_EXCEEDED`, `ABORTED`, `OUT_OF_RANGE`, `UNAVAILABLE` and
/// `DATA_LOSS` (after the status's `RetryInfo` delay when it has one);
/// `RESOURCE_EXHAUSTED` only with a `RetryInfo` (the collector can take
/// more later); every other code is final.
#[cfg(feature = "otlp-grpc")]
fn grpc_retry(status: &tonic::Status) -> Retry {
    use tonic::Code;
    if std::error::Error::source(status).is_some() {
        return Retry::Backoff;
    }
    let delay = retry_info_delay(status.details());
    match status.code() {
        Code::Cancelled
        | Code::DeadlineExceeded
        | Code::Aborted
        | Code::OutOfRange
        | Code::Unavailable
        | Code::DataLoss => delay.map_or(Retry::Backoff, Retry::After),
        Code::ResourceExhausted => delay.map_or(Retry::Never, Retry::After),
        _ => Retry::Never,
    }
}

/// The delay of the `google.rpc.RetryInfo` among a gRPC status's details
/// (`grpc-status-details-bin`: a `google.rpc.Status`), if it has one.
#[cfg(feature = "otlp-grpc")]
fn retry_info_delay(details: &[u8]) -> Option<Duration> {
    use prost::Message as _;
    if details.is_empty() {
        return None;
    }
    let status = rpc::Status::decode(details).ok()?;
    let any = status.details.iter().find(|any| any.type_url.ends_with(rpc::RETRY_INFO))?;
    let delay = rpc::RetryInfo::decode(any.value.as_slice()).ok()?.retry_delay?;
    let seconds = u64::try_from(delay.seconds).ok()?;
    let nanos = u32::try_from(delay.nanos).ok().filter(|nanos| *nanos < 1_000_000_000)?;
    Some(Duration::new(seconds, nanos))
}

/// The few `google.rpc` messages a gRPC status's details are read with
/// (the fields lens reads; protobuf skips the others), public for the tests
/// that play a throttling collector.
#[cfg(feature = "otlp-grpc")]
pub mod rpc {
    /// The type URL's last part that names a `RetryInfo` detail.
    pub const RETRY_INFO: &str = "/google.rpc.RetryInfo";

    /// `google.rpc.Status`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Status {
        /// The status code.
        #[prost(int32, tag = "1")]
        pub code: i32,
        /// The status message.
        #[prost(string, tag = "2")]
        pub message: String,
        /// The details, each a typed message.
        #[prost(message, repeated, tag = "3")]
        pub details: Vec<Any>,
    }

    /// `google.protobuf.Any`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Any {
        /// What the value is (ends in [`RETRY_INFO`] for a `RetryInfo`).
        #[prost(string, tag = "1")]
        pub type_url: String,
        /// The encoded message.
        #[prost(bytes = "vec", tag = "2")]
        pub value: Vec<u8>,
    }

    /// `google.rpc.RetryInfo`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RetryInfo {
        /// How long to wait before retrying.
        #[prost(message, optional, tag = "1")]
        pub retry_delay: Option<Duration>,
    }

    /// `google.protobuf.Duration`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Duration {
        /// Whole seconds.
        #[prost(int64, tag = "1")]
        pub seconds: i64,
        /// Nanoseconds past them.
        #[prost(int32, tag = "2")]
        pub nanos: i32,
    }
}

impl crate::accounting::MetricResender for OtlpMetricResender {
    fn resend(&self, request: &ExportMetricsServiceRequest) -> OTelSdkResult {
        let _export_path = crate::export_path::ExportScope::enter();
        match &self.transport {
            #[cfg(feature = "otlp-http")]
            ResendTransport::Http { client, url, json } => self.send_http(client, url, *json, request),
            #[cfg(feature = "otlp-grpc")]
            ResendTransport::Grpc { client, runtime } => {
                let mut client = client.clone();
                let request = request.clone();
                let task = runtime.handle().spawn(async move { client.export(request).await });
                // The channel's own timeout ends the call; this is a backstop.
                let deadline = std::time::Instant::now() + self.timeout + Duration::from_secs(1);
                let mut task = task;
                match super::block_on_until(&mut task, deadline) {
                    Some(Ok(Ok(_response))) => Ok(()),
                    Some(Ok(Err(status))) => Err(OTelSdkError::InternalFailure(format!(
                        "metric resend: {}",
                        grpc_failure(&status, Signal::Metrics)
                    ))),
                    Some(Err(join_error)) => {
                        Err(OTelSdkError::InternalFailure(format!("metric resend: the task failed: {join_error}")))
                    }
                    None => {
                        task.abort();
                        Err(OTelSdkError::Timeout(self.timeout))
                    }
                }
            }
        }
    }
}

/// Builds the OTLP log exporter for `settings`, the logs settings of the
/// configuration (`config.otel.otlp(Signal::Logs)`).
pub fn build_otlp_log_exporter(settings: &OtlpSettings) -> Result<OtlpLogExporter, ExporterError> {
    let signal = Signal::Logs;
    let prepared = prepare(settings, signal)?;
    let builder = opentelemetry_otlp::LogExporter::builder();
    let (inner, runtime) = match settings.protocol.is_http() {
        #[cfg(feature = "otlp-http")]
        true => (configure_http!(builder, prepared, settings, signal), None),
        #[cfg(feature = "otlp-grpc")]
        false => {
            let runtime = OtlpRuntime::shared()?;
            (configure_grpc!(builder, prepared, settings, signal, runtime), Some(runtime))
        }
        #[cfg(not(all(feature = "otlp-grpc", feature = "otlp-http")))]
        _ => return Err(missing_transport(settings)),
    };
    let first_failure = FirstFailure::new(signal, &prepared.endpoint, settings);
    Ok(OtlpLogExporter { inner, runtime, endpoint: prepared.endpoint, first_failure })
}

macro_rules! exporter_common {
    ($name:ident) => {
        impl $name {
            /// Where this exporter sends.
            pub fn endpoint(&self) -> &ResolvedEndpoint {
                &self.endpoint
            }

            /// The `lens-otlp` runtime this (gRPC) exporter runs in; `None`
            /// for HTTP.
            pub fn runtime(&self) -> Option<&Arc<OtlpRuntime>> {
                self.runtime.as_ref()
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name)).field("endpoint", &self.endpoint).finish_non_exhaustive()
            }
        }
    };
}

/// The OTLP span exporter. Its exports can be polled by any executor on an
/// ordinary thread (gRPC exports enter the `lens-otlp` runtime).
pub struct OtlpSpanExporter {
    inner: opentelemetry_otlp::SpanExporter,
    runtime: Option<Arc<OtlpRuntime>>,
    endpoint: ResolvedEndpoint,
    /// Lens's own sender of encoded batches (`encode`, `send_encoded`).
    sender: Arc<SpanSender>,
}
exporter_common!(OtlpSpanExporter);

impl SpanExporter for OtlpSpanExporter {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        InRuntime::new(self.runtime.as_ref(), self.inner.export(batch))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.sender.shut_down.store(true, std::sync::atomic::Ordering::Release);
        let _export_path = crate::export_path::ExportScope::enter();
        let _entered = self.runtime.as_ref().map(|runtime| runtime.handle().enter());
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        let _export_path = crate::export_path::ExportScope::enter();
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
        match Arc::get_mut(&mut self.sender) {
            Some(sender) => sender.resource = resource.into(),
            None => crate::diag::warn(format_args!("the span exporter is busy; it keeps its previous resource")),
        }
    }
}

/// The OTLP metric exporter (push; wrap it in a periodic reader).
pub struct OtlpMetricExporter {
    inner: opentelemetry_otlp::MetricExporter,
    runtime: Option<Arc<OtlpRuntime>>,
    endpoint: ResolvedEndpoint,
    resender: Arc<OtlpMetricResender>,
    first_failure: Arc<FirstFailure>,
}
exporter_common!(OtlpMetricExporter);

impl OtlpMetricExporter {
    /// The sender that resends a failed collection, encoded, to the same
    /// endpoint the same way (for [`crate::accounting::CountingMetricExporter::with_resender`]).
    pub fn resender(&self) -> Arc<OtlpMetricResender> {
        Arc::clone(&self.resender)
    }
}

impl PushMetricExporter for OtlpMetricExporter {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        self.first_failure
            .check_sdk(InRuntime::new(self.runtime.as_ref(), self.inner.export(metrics)).await, Exporting::Job)
    }

    fn force_flush(&self) -> OTelSdkResult {
        let _export_path = crate::export_path::ExportScope::enter();
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let _export_path = crate::export_path::ExportScope::enter();
        let _entered = self.runtime.as_ref().map(|runtime| runtime.handle().enter());
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

/// The OTLP log exporter.
pub struct OtlpLogExporter {
    inner: opentelemetry_otlp::LogExporter,
    runtime: Option<Arc<OtlpRuntime>>,
    endpoint: ResolvedEndpoint,
    first_failure: Arc<FirstFailure>,
}
exporter_common!(OtlpLogExporter);

impl LogExporter for OtlpLogExporter {
    async fn export(&self, batch: LogBatch<'_>) -> OTelSdkResult {
        self.first_failure
            .check_sdk(InRuntime::new(self.runtime.as_ref(), self.inner.export(batch)).await, Exporting::Job)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let _export_path = crate::export_path::ExportScope::enter();
        let _entered = self.runtime.as_ref().map(|runtime| runtime.handle().enter());
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::OtlpEndpoint;

    /// A response's partial success, as gRPC and OTLP/HTTP protobuf carry
    /// it and as OTLP/JSON spells it (int64 as a string, or a number); an
    /// empty response, or one that is not one, rejects nothing.
    #[test]
    fn a_partial_success_is_read_in_both_encodings() {
        use opentelemetry_proto::tonic::collector::trace::v1::{ExportTracePartialSuccess, ExportTraceServiceResponse};
        use prost::Message as _;
        let response = ExportTraceServiceResponse {
            partial_success: Some(ExportTracePartialSuccess { rejected_spans: 7, error_message: "quota".into() }),
        };
        assert_eq!(partial_success(&response.encode_to_vec(), false), (7, "quota".to_string()));
        let json = br#"{"partialSuccess":{"rejectedSpans":"7","errorMessage":"quota"}}"#;
        assert_eq!(partial_success(json, true), (7, "quota".to_string()));
        assert_eq!(partial_success(br#"{"partialSuccess":{"rejectedSpans":3}}"#, true), (3, String::new()));
        assert_eq!(partial_success(b"", false), (0, String::new()));
        assert_eq!(partial_success(b"{}", true), (0, String::new()));
        assert_eq!(partial_success(b"\xff\xff", false), (0, String::new()));
    }

    #[cfg(feature = "otlp-http")]
    #[test]
    fn a_404_at_a_url_without_the_signal_path_says_why() {
        let not_found = http::StatusCode::NOT_FOUND;
        let said = http_refusal(not_found, "http://c:4318/collector?x=1", Signal::Traces);
        assert_eq!(
            said,
            "the collector answered HTTP 404 Not Found (the URL's path is not /v1/traces: \
             OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is used as it is; give the URL with /v1/traces, or set \
             OTEL_EXPORTER_OTLP_ENDPOINT, to which lens adds it)"
        );
        // The signal's path (a query after it): a 404 is the collector's own.
        assert_eq!(
            http_refusal(not_found, "http://c:4318/v1/metrics?x=1", Signal::Metrics),
            "the collector answered HTTP 404 Not Found"
        );
        assert_eq!(
            http_refusal(http::StatusCode::UNAUTHORIZED, "http://c:4318/collector", Signal::Traces),
            "the collector answered HTTP 401 Unauthorized (check the credentials lens sends: \
             OTEL_EXPORTER_OTLP_HEADERS or OTEL_EXPORTER_OTLP_TRACES_HEADERS)"
        );
        assert_eq!(
            http_refusal(http::StatusCode::FORBIDDEN, "http://c:4318/v1/metrics", Signal::Metrics),
            "the collector answered HTTP 403 Forbidden (check the credentials lens sends: \
             OTEL_EXPORTER_OTLP_HEADERS or OTEL_EXPORTER_OTLP_METRICS_HEADERS)"
        );
    }

    /// OTLP/HTTP's rules: 429, 502, 503 and 504 are retried, after their
    /// `Retry-After` (seconds or an HTTP date) when they have one; every
    /// other answer is final.
    #[cfg(feature = "otlp-http")]
    #[test]
    fn http_answers_are_retried_as_otlp_says() {
        use http::StatusCode;
        let none = http::HeaderMap::new();
        for code in [429, 502, 503, 504] {
            assert_eq!(http_retry(StatusCode::from_u16(code).unwrap(), &none), Retry::Backoff, "{code}");
        }
        for code in [400, 401, 403, 404, 405, 413, 415, 500, 501, 301] {
            assert_eq!(http_retry(StatusCode::from_u16(code).unwrap(), &none), Retry::Never, "{code}");
        }
        let after = |value: &str| {
            let mut headers = http::HeaderMap::new();
            headers.insert(http::header::RETRY_AFTER, http::HeaderValue::from_str(value).unwrap());
            headers
        };
        assert_eq!(http_retry(StatusCode::TOO_MANY_REQUESTS, &after("7")), Retry::After(Duration::from_secs(7)));
        assert_eq!(http_retry(StatusCode::SERVICE_UNAVAILABLE, &after(" 0 ")), Retry::After(Duration::ZERO));
        // An HTTP date: the time left until it (none left: at once).
        let in_a_minute = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(60));
        let Retry::After(wait) = http_retry(StatusCode::TOO_MANY_REQUESTS, &after(&in_a_minute)) else {
            panic!("an HTTP date is a wait")
        };
        assert!(wait > Duration::from_secs(55) && wait <= Duration::from_secs(60), "{wait:?}");
        assert_eq!(
            http_retry(StatusCode::TOO_MANY_REQUESTS, &after("Sun, 06 Nov 1994 08:49:37 GMT")),
            Retry::After(Duration::ZERO)
        );
        // A value that is neither: the backoff; the header on a final answer
        // changes nothing.
        assert_eq!(http_retry(StatusCode::TOO_MANY_REQUESTS, &after("soon")), Retry::Backoff);
        assert_eq!(http_retry(StatusCode::BAD_REQUEST, &after("1")), Retry::Never);
    }

    /// OTLP/gRPC's rules, with the `RetryInfo` delay a collector gives.
    #[cfg(feature = "otlp-grpc")]
    #[test]
    fn grpc_statuses_are_retried_as_otlp_says() {
        use prost::Message as _;
        use tonic::Code;
        let with_delay = |code: Code, seconds: i64, nanos: i32| {
            let retry_info = rpc::RetryInfo { retry_delay: Some(rpc::Duration { seconds, nanos }) };
            let details = rpc::Status {
                code: code as i32,
                message: "slow down".into(),
                details: vec![rpc::Any {
                    type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
                    value: retry_info.encode_to_vec(),
                }],
            };
            tonic::Status::with_details(code, "slow down", details.encode_to_vec().into())
        };
        for code in [
            Code::Cancelled,
            Code::DeadlineExceeded,
            Code::Aborted,
            Code::OutOfRange,
            Code::Unavailable,
            Code::DataLoss,
        ] {
            assert_eq!(grpc_retry(&tonic::Status::new(code, "x")), Retry::Backoff, "{code:?}");
        }
        for code in [
            Code::Unknown,
            Code::InvalidArgument,
            Code::NotFound,
            Code::AlreadyExists,
            Code::PermissionDenied,
            Code::Unauthenticated,
            Code::FailedPrecondition,
            Code::Unimplemented,
            Code::Internal,
            Code::ResourceExhausted,
        ] {
            assert_eq!(grpc_retry(&tonic::Status::new(code, "x")), Retry::Never, "{code:?}");
        }
        assert_eq!(
            grpc_retry(&with_delay(Code::ResourceExhausted, 2, 500_000_000)),
            Retry::After(Duration::from_millis(2500))
        );
        assert_eq!(grpc_retry(&with_delay(Code::Unavailable, 1, 0)), Retry::After(Duration::from_secs(1)));
        // A delay that is no duration is ignored; details that are not a
        // status are too.
        assert_eq!(grpc_retry(&with_delay(Code::ResourceExhausted, -1, 0)), Retry::Never);
        let garbage = tonic::Status::with_details(Code::Unavailable, "x", vec![0xff, 0xff, 0xff].into());
        assert_eq!(grpc_retry(&garbage), Retry::Backoff);
        // A call that did not reach the collector is retried whatever its code.
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let unreached = tonic::Status::from_error(Box::new(io));
        assert!(std::error::Error::source(&unreached).is_some(), "tonic keeps the transport error as the source");
        assert_eq!(grpc_retry(&unreached), Retry::Backoff);
        assert_eq!(
            grpc_failure(&tonic::Status::unauthenticated("bad token"), Signal::Traces),
            "the collector answered Unauthenticated: bad token (check the credentials lens sends: \
             OTEL_EXPORTER_OTLP_HEADERS or OTEL_EXPORTER_OTLP_TRACES_HEADERS)"
        );
    }

    fn settings(endpoint: Option<&str>, signal_specific: bool, protocol: OtlpProtocol) -> OtlpSettings {
        OtlpSettings {
            endpoint: endpoint.map(|url| OtlpEndpoint { url: url.to_owned(), signal_specific }),
            protocol,
            ..OtlpSettings::default()
        }
    }

    #[test]
    fn a_first_failure_is_worded_for_the_job_or_for_a_replay_and_said_once_in_each() {
        let settings = settings(Some("http://collector:4318"), false, OtlpProtocol::HttpProtobuf);
        let endpoint = resolve_endpoint(&settings, Signal::Traces).unwrap();
        let first = FirstFailure::new(Signal::Traces, &endpoint, &settings);
        let error = OTelSdkError::InternalFailure("span export: connection refused".into());
        let at = "the OTLP collector at http://collector:4318/v1/traces (http/protobuf; endpoint from \
                  OTEL_EXPORTER_OTLP_ENDPOINT): Operation failed: span export: connection refused";
        assert_eq!(
            first.message(&error, Retry::Backoff, Exporting::Job),
            format!(
                "cannot export traces to {at}; lens retries within its retry window and counts what is lost in \
                 the shutdown report"
            )
        );
        assert_eq!(
            first.message(&error, Retry::Never, Exporting::Job),
            format!(
                "cannot export traces to {at}; an answer OTLP says is final is not retried: each export it \
                 refuses is dropped and counted in the shutdown report"
            )
        );
        assert_eq!(
            first.message(&error, Retry::Backoff, Exporting::Replay),
            format!(
                "cannot send the spans replayed from a crash spool to {at}; the spool is kept, and the next \
                 attempt of the job or `lens recover` on its directory sends them once that collector answers"
            )
        );
        // A replay's failure leaves the job's own first failure to be said.
        let _ = first.check(Err(error.into()), Exporting::Replay);
        let said = |flag: &std::sync::atomic::AtomicBool| flag.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!((said(&first.reported_replay), said(&first.reported)), (true, false));
        // A final answer after another failure of the job's is said too,
        // once: it changes what is lost.
        let refused = || OTelSdkError::InternalFailure("span export: the collector answered HTTP 401".into());
        let _ = first.check(Err(refused().into()), Exporting::Job);
        assert_eq!((said(&first.reported), said(&first.reported_final)), (true, false));
        let _ = first.check(Err(ExportError { error: refused(), retry: Retry::Never }), Exporting::Job);
        assert!(said(&first.reported_final), "the final answer is said after the first failure");
    }

    /// A signal that went to the default endpoint because another exporter
    /// setting turned the default destination off says so, and how to keep
    /// it in files.
    #[test]
    fn a_failure_at_the_default_endpoint_says_how_to_write_files() {
        let defaults = OtlpSettings::default();
        let endpoint = resolve_endpoint(&defaults, Signal::Traces).unwrap();
        let first = FirstFailure::new(Signal::Traces, &endpoint, &defaults);
        let error = OTelSdkError::InternalFailure("span export: connection refused".into());
        let message = first.message(&error, Retry::Backoff, Exporting::Job);
        assert!(
            message.starts_with("cannot export traces to the OTLP collector at http://localhost:4317"),
            "{message}"
        );
        assert!(message.contains("endpoint from default"), "{message}");
        assert!(message.ends_with("OTEL_TRACES_EXPORTER=file writes them to files"), "{message}");
        let named = settings(Some("http://collector:4317"), false, OtlpProtocol::Grpc);
        let endpoint = resolve_endpoint(&named, Signal::Traces).unwrap();
        let first = FirstFailure::new(Signal::Traces, &endpoint, &named);
        assert!(!first.message(&error, Retry::Backoff, Exporting::Job).contains("OTEL_TRACES_EXPORTER=file"));
    }

    #[test]
    fn defaults_follow_the_protocol() {
        let grpc = resolve_endpoint(&OtlpSettings::default(), Signal::Traces).unwrap();
        assert_eq!((grpc.url.as_str(), grpc.protocol), ("http://localhost:4317", OtlpProtocol::Grpc));
        assert_eq!(grpc.source, "default");
        let http = resolve_endpoint(&settings(None, false, OtlpProtocol::HttpProtobuf), Signal::Logs).unwrap();
        assert_eq!(http.url, "http://localhost:4318/v1/logs");
    }

    #[test]
    fn generic_http_endpoints_get_the_signal_path_and_specific_ones_do_not() {
        let generic = settings(Some("https://otel.example:4318/base"), false, OtlpProtocol::HttpJson);
        let resolved = resolve_endpoint(&generic, Signal::Traces).unwrap();
        assert_eq!(resolved.url, "https://otel.example:4318/base/v1/traces");
        assert!(resolved.tls);
        assert_eq!(resolved.source, "OTEL_EXPORTER_OTLP_ENDPOINT");
        let specific = settings(Some("http://otel:9999/custom"), true, OtlpProtocol::HttpProtobuf);
        let resolved = resolve_endpoint(&specific, Signal::Metrics).unwrap();
        assert_eq!(resolved.url, "http://otel:9999/custom");
        assert_eq!(resolved.source, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT");
        let grpc = settings(Some("http://otel:4317/"), false, OtlpProtocol::Grpc);
        assert_eq!(resolve_endpoint(&grpc, Signal::Metrics).unwrap().url, "http://otel:4317/");
    }

    #[test]
    fn resolved_urls_are_the_configuration_s() {
        for protocol in OtlpProtocol::ALL {
            for endpoint in [None, Some("https://otel.example:4318/base/")] {
                for signal_specific in [false, true] {
                    let settings = settings(endpoint, signal_specific, protocol);
                    for signal in Signal::ALL {
                        let resolved = resolve_endpoint(&settings, signal).unwrap();
                        assert_eq!(resolved.url, settings.endpoint_url(signal), "{settings:?} {signal}");
                    }
                }
            }
        }
    }

    #[test]
    fn bad_endpoints_name_the_variable() {
        for (endpoint, specific, protocol, variable) in [
            ("otel:4317", false, OtlpProtocol::Grpc, "OTEL_EXPORTER_OTLP_ENDPOINT"),
            ("ftp://otel:21", true, OtlpProtocol::Grpc, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            ("http://", false, OtlpProtocol::Grpc, "OTEL_EXPORTER_OTLP_ENDPOINT"),
            ("http://", false, OtlpProtocol::HttpJson, "OTEL_EXPORTER_OTLP_ENDPOINT"),
            ("collector:4318", true, OtlpProtocol::HttpProtobuf, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        ] {
            let error = resolve_endpoint(&settings(Some(endpoint), specific, protocol), Signal::Traces)
                .expect_err(endpoint)
                .to_string();
            assert!(error.starts_with(&format!("{variable}={endpoint:?} ")), "{error}");
        }
    }

    #[test]
    fn protocols_parse_and_print() {
        for protocol in OtlpProtocol::ALL {
            assert_eq!(OtlpProtocol::from_name(protocol.as_str()), Some(protocol));
        }
        assert_eq!(OtlpProtocol::default(), OtlpProtocol::Grpc);
        assert_eq!(OtlpProtocol::from_name("http/xml"), None);
    }

    #[test]
    fn only_gzip_asks_the_sdk_to_compress() {
        assert_eq!(sdk_compression(Compression::None), None);
        assert_eq!(sdk_compression(Compression::Gzip), Some(opentelemetry_otlp::Compression::Gzip));
    }
}
