//! A minimal OTLP trace receiver for `cargo xtask bench`'s export-throughput
//! scenario: it runs in its own process on loopback, decodes every export
//! request it receives and counts the spans in it, so the benchmark knows
//! how many spans arrived (not merely how many the exporter believes it
//! sent).
//!
//! ```text
//! otlp-sink http   # OTLP/HTTP (protobuf) on 127.0.0.1, a free port
//! otlp-sink grpc   # OTLP/gRPC on 127.0.0.1, a free port
//! ```
//!
//! It prints `port <N>` once it listens, then, for every line read on
//! standard input, the number of spans received so far; it exits when
//! standard input closes. The HTTP side is a small HTTP/1.1 server (one
//! thread per connection, keep-alive, `Content-Length` bodies, which is what
//! the OTLP/HTTP exporter sends); the gRPC side is tonic's server with the
//! generated trace service, on a single-threaded runtime. Requests to other
//! paths (metrics, logs) are answered 200 and not counted.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tonic::transport::server::TcpIncoming;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use prost::Message as _;

fn spans_in(request: &ExportTraceServiceRequest) -> u64 {
    request.resource_spans.iter().flat_map(|r| &r.scope_spans).map(|s| s.spans.len() as u64).sum()
}

#[expect(clippy::print_stdout, reason = "the sink talks to the xtask over standard output")]
fn say(line: &str) {
    println!("{line}");
    let _ = std::io::stdout().flush();
}

/// Serves one keep-alive HTTP/1.1 connection.
fn serve_http(stream: TcpStream, count: &AtomicU64) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    let mut body = Vec::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let traces = line.split_whitespace().nth(1).is_some_and(|path| path.ends_with("/v1/traces"));
        let mut length = 0_usize;
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        body.resize(length, 0);
        reader.read_exact(&mut body)?;
        let status = if traces {
            match ExportTraceServiceRequest::decode(body.as_slice()) {
                Ok(request) => {
                    count.fetch_add(spans_in(&request), Ordering::Relaxed);
                    "200 OK"
                }
                Err(_) => "400 Bad Request",
            }
        } else {
            "200 OK"
        };
        write!(writer, "HTTP/1.1 {status}\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n")?;
        writer.flush()?;
    }
}

struct GrpcSink(Arc<AtomicU64>);

#[tonic::async_trait]
impl TraceService for GrpcSink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.fetch_add(spans_in(request.get_ref()), Ordering::Relaxed);
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

fn main() -> ExitCode {
    let count = Arc::new(AtomicU64::new(0));
    let Ok(listener) = TcpListener::bind("127.0.0.1:0") else {
        return ExitCode::FAILURE;
    };
    let Ok(address) = listener.local_addr() else {
        return ExitCode::FAILURE;
    };
    match std::env::args().nth(1).as_deref() {
        Some("http") => {
            let count = Arc::clone(&count);
            std::thread::spawn(move || {
                for stream in listener.incoming().flatten() {
                    let count = Arc::clone(&count);
                    std::thread::spawn(move || serve_http(stream, &count));
                }
            });
        }
        Some("grpc") => {
            // tonic serves the listener bound above: the port printed is
            // already this process's, with no window for another to take it.
            let count = Arc::clone(&count);
            if listener.set_nonblocking(true).is_err() {
                return ExitCode::FAILURE;
            }
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
                let served = runtime.and_then(|runtime| {
                    runtime.block_on(async move {
                        // TCP_NODELAY as tonic's own `serve` sets it.
                        let incoming =
                            TcpIncoming::from(tokio::net::TcpListener::from_std(listener)?).with_nodelay(Some(true));
                        let service = TraceServiceServer::new(GrpcSink(count)).max_decoding_message_size(64 << 20);
                        tonic::transport::Server::builder()
                            .serve_with_incoming(service, incoming)
                            .await
                            .map_err(std::io::Error::other)
                    })
                });
                if let Err(error) = served {
                    #[expect(clippy::print_stderr, reason = "the receiver's own failure, for the bench's log")]
                    {
                        eprintln!("otlp-sink: the gRPC server failed: {error}");
                    }
                    std::process::exit(1);
                }
            });
        }
        _ => {
            #[expect(clippy::print_stderr, reason = "a usage error of a command-line tool")]
            {
                eprintln!("usage: otlp-sink <http|grpc>");
            }
            return ExitCode::from(2);
        }
    }
    say(&format!("port {}", address.port()));
    for line in std::io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
        say(&count.load(Ordering::Relaxed).to_string());
    }
    ExitCode::SUCCESS
}
