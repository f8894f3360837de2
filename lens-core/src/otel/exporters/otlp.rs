//! OTLP exporters over gRPC (tonic), `http/protobuf` and `http/json`.
//!
//! SPEC A14 says the SDK reads no environment on its own, and
//! opentelemetry-otlp 0.33.1 does read `OTEL_EXPORTER_OTLP_*` whenever an
//! option is left unset (endpoint, protocol, timeout, compression,
//! temporality, `*_INSECURE` for endpoints without a scheme) and *always*
//! merges `OTEL_EXPORTER_OTLP_[SIGNAL_]HEADERS` into its requests. So every
//! option is set here from [`OtlpExporterSettings`]:
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
//!   belong to lens's batch processor, SPEC A7) are set explicitly.
//! - One residue: with `compression: None` the SDK still consults
//!   `OTEL_EXPORTER_OTLP_[SIGNAL_]COMPRESSION` (it has no "none" setter). The
//!   configuration reads the same variables, so the two agree in a real
//!   process.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use opentelemetry_http::{Bytes, HttpClient, HttpError};
use opentelemetry_otlp::{Protocol, RetryPolicy, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::logs::{LogBatch, LogExporter};
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};

use super::runtime::{InRuntime, OtlpRuntime};
use super::{ExporterError, Signal};

/// The generic endpoint variable.
const GENERIC_ENDPOINT_VARIABLE: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// Response bodies larger than this are refused (as the SDK's clients do).
const MAX_RESPONSE_BODY_BYTES: u64 = 4 * 1024 * 1024;
const USER_AGENT: &str = concat!("lens/", env!("CARGO_PKG_VERSION"));

/// The OTLP transport and encoding (`OTEL_EXPORTER_OTLP_PROTOCOL`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OtlpProtocol {
    /// `grpc`: OTLP/gRPC (the default), port 4317.
    #[default]
    Grpc,
    /// `http/protobuf`: OTLP/HTTP with protobuf bodies, port 4318.
    HttpProtobuf,
    /// `http/json`: OTLP/HTTP with JSON bodies, port 4318.
    HttpJson,
}

impl OtlpProtocol {
    /// Every protocol, in the order of the accepted values.
    pub const ALL: [OtlpProtocol; 3] = [OtlpProtocol::Grpc, OtlpProtocol::HttpProtobuf, OtlpProtocol::HttpJson];

    /// The value of `OTEL_EXPORTER_OTLP_PROTOCOL`: `grpc`, `http/protobuf`
    /// or `http/json`.
    pub const fn as_str(self) -> &'static str {
        match self {
            OtlpProtocol::Grpc => "grpc",
            OtlpProtocol::HttpProtobuf => "http/protobuf",
            OtlpProtocol::HttpJson => "http/json",
        }
    }

    /// Parses a value of `OTEL_EXPORTER_OTLP_PROTOCOL` (case-insensitive,
    /// surrounding blanks ignored).
    ///
    /// ```
    /// use lens_core::otel::exporters::OtlpProtocol;
    /// assert_eq!(OtlpProtocol::parse(" HTTP/Protobuf "), Some(OtlpProtocol::HttpProtobuf));
    /// assert_eq!(OtlpProtocol::parse("http"), None);
    /// ```
    pub fn parse(value: &str) -> Option<OtlpProtocol> {
        let value = value.trim();
        OtlpProtocol::ALL.into_iter().find(|protocol| protocol.as_str().eq_ignore_ascii_case(value))
    }

    /// Whether this is one of the two HTTP protocols.
    pub const fn is_http(self) -> bool {
        !matches!(self, OtlpProtocol::Grpc)
    }

    /// The endpoint used when none is configured: `http://localhost:4317`
    /// for gRPC, `http://localhost:4318` for HTTP.
    pub const fn default_endpoint(self) -> &'static str {
        match self {
            OtlpProtocol::Grpc => "http://localhost:4317",
            OtlpProtocol::HttpProtobuf | OtlpProtocol::HttpJson => "http://localhost:4318",
        }
    }
}

impl fmt::Display for OtlpProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Payload compression (`OTEL_EXPORTER_OTLP_COMPRESSION`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Compression {
    /// `gzip`.
    Gzip,
}

impl Compression {
    /// The variable's value: `gzip`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Compression::Gzip => "gzip",
        }
    }

    fn to_sdk(self) -> opentelemetry_otlp::Compression {
        match self {
            Compression::Gzip => opentelemetry_otlp::Compression::Gzip,
        }
    }
}

/// Everything an OTLP exporter of one signal needs. The runtime glue fills
/// it from the validated configuration (the per-signal variables already
/// resolved); nothing here is read from the environment.
///
/// Header values are secrets: `Debug` shows the header names only, and no
/// error of this module contains a value.
///
/// ```
/// use lens_core::otel::exporters::OtlpExporterSettings;
/// let settings = OtlpExporterSettings {
///     headers: vec![("authorization".into(), "Bearer s3cr3t".into())],
///     ..OtlpExporterSettings::default()
/// };
/// assert!(!format!("{settings:?}").contains("s3cr3t"));
/// ```
#[derive(Clone)]
pub struct OtlpExporterSettings {
    /// The endpoint URL; `None` for the protocol's default.
    pub endpoint: Option<String>,
    /// Whether `endpoint` came from a signal-specific variable
    /// (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, ...), which is used as-is; a
    /// generic endpoint gets `/v1/<signal>` appended for HTTP.
    pub endpoint_is_signal_specific: bool,
    /// The protocol.
    pub protocol: OtlpProtocol,
    /// Request headers (already percent-decoded). Never printed.
    pub headers: Vec<(String, String)>,
    /// The time one export may take, connection included (default 10 s).
    pub timeout: Duration,
    /// Payload compression.
    pub compression: Option<Compression>,
    /// A PEM file with the private CA that signed the collector's
    /// certificate (`OTEL_EXPORTER_OTLP_CERTIFICATE`); `None` trusts the
    /// webpki (Mozilla) roots.
    pub certificate: Option<PathBuf>,
}

impl Default for OtlpExporterSettings {
    fn default() -> Self {
        OtlpExporterSettings {
            endpoint: None,
            endpoint_is_signal_specific: false,
            protocol: OtlpProtocol::Grpc,
            headers: Vec::new(),
            timeout: Duration::from_secs(10),
            compression: None,
            certificate: None,
        }
    }
}

impl fmt::Debug for OtlpExporterSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct RedactedHeaders<'a>(&'a [(String, String)]);
        impl fmt::Debug for RedactedHeaders<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_map().entries(self.0.iter().map(|(name, _)| (name, "<redacted>"))).finish()
            }
        }
        f.debug_struct("OtlpExporterSettings")
            .field("endpoint", &self.endpoint)
            .field("endpoint_is_signal_specific", &self.endpoint_is_signal_specific)
            .field("protocol", &self.protocol)
            .field("headers", &RedactedHeaders(&self.headers))
            .field("timeout", &self.timeout)
            .field("compression", &self.compression)
            .field("certificate", &self.certificate)
            .finish()
    }
}

/// Where an exporter of one signal sends, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
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

/// Resolves the URL, protocol and TLS of `signal`'s exporter.
///
/// A generic endpoint (or the default) gets `/v1/traces`, `/v1/metrics` or
/// `/v1/logs` appended for the HTTP protocols; a signal-specific one is used
/// as-is; gRPC endpoints are always used as-is.
///
/// ```
/// use lens_core::otel::exporters::{OtlpExporterSettings, OtlpProtocol, Signal, resolve_endpoint};
/// let settings = OtlpExporterSettings {
///     endpoint: Some("http://collector:4318/".into()),
///     protocol: OtlpProtocol::HttpProtobuf,
///     ..OtlpExporterSettings::default()
/// };
/// let resolved = resolve_endpoint(&settings, Signal::Metrics)?;
/// assert_eq!(resolved.url, "http://collector:4318/v1/metrics");
/// assert!(!resolved.tls);
/// # Ok::<(), lens_core::otel::exporters::ExporterError>(())
/// ```
pub fn resolve_endpoint(settings: &OtlpExporterSettings, signal: Signal) -> Result<ResolvedEndpoint, ExporterError> {
    let protocol = settings.protocol;
    let configured = settings.endpoint.as_deref().map(str::trim).filter(|endpoint| !endpoint.is_empty());
    let (endpoint, source, signal_specific) = match configured {
        Some(endpoint) if settings.endpoint_is_signal_specific => (endpoint, signal.endpoint_variable(), true),
        Some(endpoint) => (endpoint, GENERIC_ENDPOINT_VARIABLE, false),
        None => (protocol.default_endpoint(), "default", false),
    };
    let variable = if source == "default" { GENERIC_ENDPOINT_VARIABLE } else { source };
    let invalid = |reason: String| ExporterError::InvalidEndpoint { variable, value: endpoint.to_owned(), reason };
    let uri: http::Uri = endpoint.parse().map_err(|error: http::uri::InvalidUri| invalid(error.to_string()))?;
    let tls = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        Some(other) => return Err(invalid(format!("unsupported scheme {other:?}"))),
        None => return Err(invalid("no scheme".into())),
    };
    if uri.host().is_none_or(str::is_empty) {
        return Err(invalid("no host".into()));
    }
    let url = if protocol.is_http() && !signal_specific {
        format!("{}{}", endpoint.trim_end_matches('/'), signal.http_path())
    } else {
        endpoint.to_owned()
    };
    Ok(ResolvedEndpoint { url, protocol, tls, source })
}

/// The headers, checked; values are marked sensitive.
fn checked_headers(settings: &OtlpExporterSettings) -> Result<Vec<(HeaderName, HeaderValue)>, ExporterError> {
    settings
        .headers
        .iter()
        .map(|(name, value)| {
            let header = HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|_| ExporterError::InvalidHeader { name: name.clone(), reason: "invalid header name" })?;
            let mut value = HeaderValue::from_str(value.trim()).map_err(|_| ExporterError::InvalidHeader {
                name: name.clone(),
                reason: "invalid characters in the value",
            })?;
            value.set_sensitive(true);
            Ok((header, value))
        })
        .collect()
}

/// Reads the private CA file: its bytes, checked to hold at least one PEM
/// certificate.
fn read_certificate(path: &Path) -> Result<(Vec<u8>, Vec<rustls::pki_types::CertificateDer<'static>>), ExporterError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    let error = |reason: String| ExporterError::Certificate { path: path.to_owned(), reason };
    let pem = std::fs::read(path).map_err(|source| error(format!("cannot read the file: {source}")))?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| error(format!("not a valid PEM file: {source}")))?;
    if certificates.is_empty() {
        return Err(error("the file holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into()));
    }
    Ok((pem, certificates))
}

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

/// The HTTP client lens gives the SDK: a blocking reqwest client that sends
/// lens's headers and drops any header the SDK took from the environment.
struct LensHttpClient {
    client: reqwest::blocking::Client,
    headers: Arc<[(HeaderName, HeaderValue)]>,
}

impl fmt::Debug for LensHttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LensHttpClient").field("headers", &self.headers.len()).finish_non_exhaustive()
    }
}

impl LensHttpClient {
    fn build(
        settings: &OtlpExporterSettings,
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
        Ok(LensHttpClient { client, headers: headers.into() })
    }

    fn send(&self, request: http::Request<Bytes>) -> Result<http::Response<Bytes>, HttpError> {
        use std::io::Read;

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
        let response =
            self.client.request(parts.method, parts.uri.to_string()).headers(headers).body(body.to_vec()).send()?;
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

/// The gRPC interceptor: replaces the SDK's metadata (which may hold headers
/// from the environment) with lens's headers.
#[derive(Clone)]
struct HeaderInterceptor {
    headers: Arc<[(AsciiMetadataKey, AsciiMetadataValue)]>,
}

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
        Ok(HeaderInterceptor { headers: headers.into() })
    }
}

impl tonic::service::Interceptor for HeaderInterceptor {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let metadata = request.metadata_mut();
        *metadata = tonic::metadata::MetadataMap::new();
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

fn prepare(settings: &OtlpExporterSettings, signal: Signal) -> Result<Prepared, ExporterError> {
    let endpoint = resolve_endpoint(settings, signal)?;
    let headers = checked_headers(settings)?;
    // A bad file is an error even for an `http` endpoint, where it is unused:
    // the user asked for it and should learn that it is wrong.
    let certificate = settings.certificate.as_deref().map(read_certificate).transpose()?;
    Ok(Prepared { endpoint, headers, certificate })
}

fn build_error(signal: Signal, endpoint: &ResolvedEndpoint, reason: impl fmt::Display) -> ExporterError {
    ExporterError::Build { signal, endpoint: endpoint.url.clone(), reason: reason.to_string() }
}

/// The tonic channel to the endpoint, created lazily in the runtime.
fn grpc_channel(
    prepared: &Prepared,
    settings: &OtlpExporterSettings,
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

fn sdk_protocol(protocol: OtlpProtocol) -> Protocol {
    match protocol {
        OtlpProtocol::Grpc => Protocol::Grpc,
        OtlpProtocol::HttpProtobuf => Protocol::HttpBinary,
        OtlpProtocol::HttpJson => Protocol::HttpJson,
    }
}

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
        if let Some(compression) = $settings.compression {
            builder = builder.with_compression(compression.to_sdk());
        }
        let _entered = $runtime.handle().enter();
        builder.build().map_err(|error| build_error($signal, &$prepared.endpoint, error))?
    }};
}

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
        if let Some(compression) = $settings.compression {
            builder = builder.with_compression(compression.to_sdk());
        }
        builder.build().map_err(|error| build_error($signal, &$prepared.endpoint, error))?
    }};
}

/// Builds the OTLP span exporter for `settings`.
///
/// For gRPC this starts (or shares) the `lens-otlp` runtime; nothing
/// connects until the first export.
///
/// ```
/// use lens_core::otel::exporters::{OtlpExporterSettings, OtlpProtocol, build_otlp_span_exporter};
/// let settings = OtlpExporterSettings { protocol: OtlpProtocol::HttpJson, ..OtlpExporterSettings::default() };
/// let exporter = build_otlp_span_exporter(&settings)?;
/// assert_eq!(exporter.endpoint().url, "http://localhost:4318/v1/traces");
/// # Ok::<(), lens_core::otel::exporters::ExporterError>(())
/// ```
pub fn build_otlp_span_exporter(settings: &OtlpExporterSettings) -> Result<OtlpSpanExporter, ExporterError> {
    let signal = Signal::Traces;
    let prepared = prepare(settings, signal)?;
    let builder = opentelemetry_otlp::SpanExporter::builder();
    let (inner, runtime) = if settings.protocol.is_http() {
        (configure_http!(builder, prepared, settings, signal), None)
    } else {
        let runtime = OtlpRuntime::shared()?;
        (configure_grpc!(builder, prepared, settings, signal, runtime), Some(runtime))
    };
    Ok(OtlpSpanExporter { inner, runtime, endpoint: prepared.endpoint })
}

/// Builds the OTLP metric exporter for `settings`, with the given
/// temporality (lens uses cumulative, the OTLP default).
pub fn build_otlp_metric_exporter(
    settings: &OtlpExporterSettings,
    temporality: Temporality,
) -> Result<OtlpMetricExporter, ExporterError> {
    let signal = Signal::Metrics;
    let prepared = prepare(settings, signal)?;
    let builder = opentelemetry_otlp::MetricExporter::builder().with_temporality(temporality);
    let (inner, runtime) = if settings.protocol.is_http() {
        (configure_http!(builder, prepared, settings, signal), None)
    } else {
        let runtime = OtlpRuntime::shared()?;
        (configure_grpc!(builder, prepared, settings, signal, runtime), Some(runtime))
    };
    Ok(OtlpMetricExporter { inner, runtime, endpoint: prepared.endpoint })
}

/// Builds the OTLP log exporter for `settings`.
pub fn build_otlp_log_exporter(settings: &OtlpExporterSettings) -> Result<OtlpLogExporter, ExporterError> {
    let signal = Signal::Logs;
    let prepared = prepare(settings, signal)?;
    let builder = opentelemetry_otlp::LogExporter::builder();
    let (inner, runtime) = if settings.protocol.is_http() {
        (configure_http!(builder, prepared, settings, signal), None)
    } else {
        let runtime = OtlpRuntime::shared()?;
        (configure_grpc!(builder, prepared, settings, signal, runtime), Some(runtime))
    };
    Ok(OtlpLogExporter { inner, runtime, endpoint: prepared.endpoint })
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
}
exporter_common!(OtlpSpanExporter);

impl SpanExporter for OtlpSpanExporter {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        InRuntime::new(self.runtime.as_ref(), self.inner.export(batch))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let _entered = self.runtime.as_ref().map(|runtime| runtime.handle().enter());
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The OTLP metric exporter (push; wrap it in a periodic reader).
pub struct OtlpMetricExporter {
    inner: opentelemetry_otlp::MetricExporter,
    runtime: Option<Arc<OtlpRuntime>>,
    endpoint: ResolvedEndpoint,
}
exporter_common!(OtlpMetricExporter);

impl PushMetricExporter for OtlpMetricExporter {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        InRuntime::new(self.runtime.as_ref(), self.inner.export(metrics)).await
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
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
}
exporter_common!(OtlpLogExporter);

impl LogExporter for OtlpLogExporter {
    async fn export(&self, batch: LogBatch<'_>) -> OTelSdkResult {
        InRuntime::new(self.runtime.as_ref(), self.inner.export(batch)).await
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
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

    fn settings(endpoint: Option<&str>, specific: bool, protocol: OtlpProtocol) -> OtlpExporterSettings {
        OtlpExporterSettings {
            endpoint: endpoint.map(str::to_owned),
            endpoint_is_signal_specific: specific,
            protocol,
            ..OtlpExporterSettings::default()
        }
    }

    #[test]
    fn defaults_follow_the_protocol() {
        let grpc = resolve_endpoint(&OtlpExporterSettings::default(), Signal::Traces).unwrap();
        assert_eq!((grpc.url.as_str(), grpc.protocol), ("http://localhost:4317", OtlpProtocol::Grpc));
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
    fn bad_endpoints_name_the_variable() {
        for (endpoint, specific, variable) in [
            ("otel:4317", false, "OTEL_EXPORTER_OTLP_ENDPOINT"),
            ("ftp://otel:21", true, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            ("http://", false, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ] {
            let error = resolve_endpoint(&settings(Some(endpoint), specific, OtlpProtocol::Grpc), Signal::Traces)
                .expect_err(endpoint)
                .to_string();
            assert!(error.starts_with(variable), "{error}");
            assert!(error.contains(endpoint), "{error}");
        }
    }

    #[test]
    fn protocols_parse_and_print() {
        for protocol in OtlpProtocol::ALL {
            assert_eq!(OtlpProtocol::parse(protocol.as_str()), Some(protocol));
        }
        assert_eq!(OtlpProtocol::default(), OtlpProtocol::Grpc);
        assert_eq!(OtlpProtocol::parse("http/xml"), None);
    }
}
