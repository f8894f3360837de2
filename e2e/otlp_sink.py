#!/usr/bin/env python3
"""An OTLP receiver for the end-to-end tests, built on the official protobuf
definitions (PyPI ``opentelemetry-proto``), so that what lens sends is decoded
by code we did not write.

It listens on 127.0.0.1 only:

- gRPC: ``TraceService``, ``MetricsService`` and ``LogsService`` (``grpcio``;
  gzip-compressed requests are handled by gRPC itself);
- HTTP: ``POST /v1/traces``, ``/v1/metrics``, ``/v1/logs`` with
  ``application/x-protobuf`` or ``application/json`` bodies, optionally
  ``Content-Encoding: gzip``. OTLP/JSON writes trace and span ids as hex,
  where protobuf's canonical JSON mapping expects base64: the ids are
  converted before ``google.protobuf.json_format.Parse``.

Every span, metric and log record received is written as one JSON line to
``--out`` (``{"type": "span", ...}``, ``"metric"``, ``"log"``), and every
request as one ``{"type": "request", ...}`` line (transport, signal, items,
outcome), flushed after each request, so a test reads what arrived while the
sink runs. Header values are never written anywhere (only sent back to the
sender in ``echo-headers`` mode).

With ``--grpc-port 0`` / ``--http-port 0`` a free port is picked; when both
servers listen the sink prints ``READY grpc=<port> http=<port>`` on stdout.

Faults for the fault tests (``--fail-mode``): ``http503`` answers every HTTP
export with 503, ``grpc-unavailable`` every gRPC export with UNAVAILABLE,
``hang`` accepts and never answers (until shutdown), ``echo-headers`` refuses
every export (HTTP 401, gRPC UNAUTHENTICATED) with a body or status message
that echoes the request's headers, as some collectors do: the secret-scan
test checks that lens never repeats them. ``--fail-count N`` fails
only the first N exports, then accepts. SIGUSR1 switches the fault off.

``--tls-cert``/``--tls-key`` serve both gRPC and HTTP over TLS.
``--require-header NAME`` with the expected value in the environment variable
``OTLP_SINK_REQUIRED_HEADER_VALUE`` rejects exports without it (HTTP 401,
gRPC UNAUTHENTICATED) and records ``header_ok`` on each request line.

SIGTERM or SIGINT stops both servers (bounded: one second of grace) and exits 0.
A TLS client on the HTTP port is handshaken in its own connection thread,
bounded by HANDSHAKE_TIMEOUT_S, so a silent one stalls neither the other
connections nor the shutdown.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import math
import os
import signal
import ssl
import sys
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

HOST = "127.0.0.1"
# A hanging handler waits at most this long (the sink normally stops first).
HANG_LIMIT_S = 600.0
# The largest HTTP body accepted (bytes).
MAX_BODY = 64 * 1024 * 1024
# Seconds a TLS client may take over its handshake on the HTTP port.
HANDSHAKE_TIMEOUT_S = 10

SIGNALS = {
    "traces": (trace_service_pb2.ExportTraceServiceRequest, trace_service_pb2.ExportTraceServiceResponse),
    "metrics": (metrics_service_pb2.ExportMetricsServiceRequest, metrics_service_pb2.ExportMetricsServiceResponse),
    "logs": (logs_service_pb2.ExportLogsServiceRequest, logs_service_pb2.ExportLogsServiceResponse),
}

SPAN_KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
STATUS_CODES = {0: "unset", 1: "ok", 2: "error"}
TEMPORALITIES = {0: "unspecified", 1: "delta", 2: "cumulative"}
# JSON keys holding ids that OTLP/JSON writes as hex (protobuf JSON: base64).
HEX_ID_KEYS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


def finite(value: float):
    """A double as JSON can carry it: non-finite values as protobuf's strings."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def any_value(value):
    """An ``AnyValue`` as a plain JSON value."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "string_value":
        return value.string_value
    if which == "bool_value":
        return value.bool_value
    if which == "int_value":
        return value.int_value
    if which == "double_value":
        return finite(value.double_value)
    if which == "bytes_value":
        return value.bytes_value.hex()
    if which == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return attributes(value.kvlist_value.values)
    return None


def attributes(key_values) -> dict:
    """A list of ``KeyValue`` as a dict."""
    return {kv.key: any_value(kv.value) for kv in key_values}


def hex_to_base64(text: str) -> str:
    """An id written as hex (OTLP/JSON) in base64 (protobuf's JSON mapping)."""
    try:
        return base64.b64encode(bytes.fromhex(text)).decode("ascii")
    except ValueError:
        # Not hex: leave it for the parser to accept (base64) or reject.
        return text


def convert_ids(node):
    """Rewrites every hex id in a decoded OTLP/JSON document in place."""
    if isinstance(node, dict):
        for key, child in node.items():
            if key in HEX_ID_KEYS and isinstance(child, str):
                node[key] = hex_to_base64(child)
            else:
                convert_ids(child)
    elif isinstance(node, list):
        for child in node:
            convert_ids(child)
    return node


class Recorder:
    """Writes the records of each request as JSON lines, under one lock."""

    def __init__(self, path: str):
        self._lock = threading.Lock()
        self._out = open(path, "a", encoding="utf-8")
        self.requests = 0
        self.items = {"traces": 0, "metrics": 0, "logs": 0}

    def write(self, records: list, request: dict):
        with self._lock:
            for record in records:
                self._out.write(json.dumps(record, sort_keys=True) + "\n")
            self._out.write(json.dumps(request, sort_keys=True) + "\n")
            self._out.flush()
            self.requests += 1
            if request.get("outcome") == "ok":
                self.items[request["signal"]] += request.get("items", 0)

    def close(self):
        with self._lock:
            self._out.flush()
            self._out.close()


def span_records(message, transport: str) -> list:
    records = []
    for resource_spans in message.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                records.append({
                    "type": "span",
                    "transport": transport,
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "trace_state": span.trace_state,
                    "name": span.name,
                    "kind": SPAN_KINDS.get(span.kind, str(span.kind)),
                    "start_ns": span.start_time_unix_nano,
                    "end_ns": span.end_time_unix_nano,
                    "attributes": attributes(span.attributes),
                    "events": [
                        {"name": e.name, "time_ns": e.time_unix_nano, "attributes": attributes(e.attributes)}
                        for e in span.events
                    ],
                    "links": [
                        {"trace_id": l.trace_id.hex(), "span_id": l.span_id.hex(), "attributes": attributes(l.attributes)}
                        for l in span.links
                    ],
                    "status": {"code": STATUS_CODES.get(span.status.code, str(span.status.code)),
                               "message": span.status.message},
                    "scope": scope_spans.scope.name,
                    "resource": resource,
                })
    return records


def number_point(point) -> dict:
    which = point.WhichOneof("value")
    value = finite(point.as_double) if which == "as_double" else point.as_int if which == "as_int" else None
    return {"attributes": attributes(point.attributes), "start_ns": point.start_time_unix_nano,
            "time_ns": point.time_unix_nano, "value": value}


def histogram_point(point) -> dict:
    return {
        "attributes": attributes(point.attributes),
        "start_ns": point.start_time_unix_nano,
        "time_ns": point.time_unix_nano,
        "count": point.count,
        "sum": finite(point.sum) if point.HasField("sum") else None,
        "min": finite(point.min) if point.HasField("min") else None,
        "max": finite(point.max) if point.HasField("max") else None,
        "bucket_counts": list(point.bucket_counts),
        "explicit_bounds": [finite(b) for b in point.explicit_bounds],
    }


def metric_records(message, transport: str) -> list:
    records = []
    for resource_metrics in message.resource_metrics:
        resource = attributes(resource_metrics.resource.attributes)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                which = metric.WhichOneof("data")
                record = {
                    "type": "metric",
                    "transport": transport,
                    "name": metric.name,
                    "description": metric.description,
                    "unit": metric.unit,
                    "kind": which,
                    "is_monotonic": None,
                    "temporality": None,
                    "data_points": [],
                    "scope": scope_metrics.scope.name,
                    "resource": resource,
                }
                if which == "gauge":
                    record["data_points"] = [number_point(p) for p in metric.gauge.data_points]
                elif which == "sum":
                    record["is_monotonic"] = metric.sum.is_monotonic
                    record["temporality"] = TEMPORALITIES.get(metric.sum.aggregation_temporality)
                    record["data_points"] = [number_point(p) for p in metric.sum.data_points]
                elif which == "histogram":
                    record["temporality"] = TEMPORALITIES.get(metric.histogram.aggregation_temporality)
                    record["data_points"] = [histogram_point(p) for p in metric.histogram.data_points]
                elif which == "exponential_histogram":
                    record["temporality"] = TEMPORALITIES.get(metric.exponential_histogram.aggregation_temporality)
                    record["data_points"] = [
                        {"attributes": attributes(p.attributes), "count": p.count, "sum": finite(p.sum)}
                        for p in metric.exponential_histogram.data_points
                    ]
                elif which == "summary":
                    record["data_points"] = [
                        {"attributes": attributes(p.attributes), "count": p.count, "sum": finite(p.sum)}
                        for p in metric.summary.data_points
                    ]
                records.append(record)
    return records


def log_records(message, transport: str) -> list:
    records = []
    for resource_logs in message.resource_logs:
        resource = attributes(resource_logs.resource.attributes)
        for scope_logs in resource_logs.scope_logs:
            for log in scope_logs.log_records:
                records.append({
                    "type": "log",
                    "transport": transport,
                    "time_ns": log.time_unix_nano,
                    "severity_number": log.severity_number,
                    "severity_text": log.severity_text,
                    "body": any_value(log.body),
                    "attributes": attributes(log.attributes),
                    "trace_id": log.trace_id.hex(),
                    "span_id": log.span_id.hex(),
                    "scope": scope_logs.scope.name,
                    "resource": resource,
                })
    return records


RECORDS = {"traces": span_records, "metrics": metric_records, "logs": log_records}


class Sink:
    """The shared state of both servers: the recorder, the fault, shutdown."""

    def __init__(self, args):
        self.recorder = Recorder(args.out)
        self.fail_mode = args.fail_mode
        self.fail_left = args.fail_count  # None: every request
        self.required_header = args.require_header.lower() if args.require_header else None
        self.required_value = os.environ.get("OTLP_SINK_REQUIRED_HEADER_VALUE", "")
        self.stopping = threading.Event()
        self._lock = threading.Lock()

    def fault_for(self, transport: str):
        """The fault to apply to this request (None: accept it)."""
        with self._lock:
            mode = self.fail_mode
            applies = (mode in ("hang", "echo-headers")
                       or (mode == "http503" and transport.startswith("http"))
                       or (mode == "grpc-unavailable" and transport == "grpc"))
            if not applies:
                return None
            if self.fail_left is not None:
                if self.fail_left <= 0:
                    return None
                self.fail_left -= 1
            return mode

    def header_ok(self, value):
        if self.required_header is None:
            return True
        return value is not None and value == self.required_value

    def accept(self, signal_name: str, message, transport: str, header_ok: bool, fault=None):
        records = RECORDS[signal_name](message, transport)
        outcome = "ok" if header_ok and fault is None else (fault or "unauthenticated")
        request = {"type": "request", "transport": transport, "signal": signal_name,
                   "items": len(records), "outcome": outcome, "header_ok": header_ok,
                   "time_ns": time.time_ns()}
        self.recorder.write(records if outcome == "ok" else [], request)
        return outcome

    def hang(self):
        self.stopping.wait(HANG_LIMIT_S)


def grpc_servicer(sink: Sink, signal_name: str, base):
    request_type, response_type = SIGNALS[signal_name]

    class Servicer(base):
        def Export(self, request, context):  # noqa: N802 (the generated name)
            metadata = dict(context.invocation_metadata())
            header_ok = sink.header_ok(metadata.get(sink.required_header) if sink.required_header else None)
            fault = sink.fault_for("grpc")
            if fault == "hang":
                sink.accept(signal_name, request, "grpc", header_ok, "hang")
                sink.hang()
                context.abort(grpc.StatusCode.UNAVAILABLE, "sink stopping")
            if fault == "grpc-unavailable":
                sink.accept(signal_name, request, "grpc", header_ok, fault)
                context.abort(grpc.StatusCode.UNAVAILABLE, "sink: injected UNAVAILABLE")
            if fault == "echo-headers":
                sink.accept(signal_name, request, "grpc", header_ok, fault)
                echoed = "; ".join(f"{k}: {v}" for k, v in metadata.items() if isinstance(v, str))
                context.abort(grpc.StatusCode.UNAUTHENTICATED, f"sink: refused, your metadata was {echoed}")
            outcome = sink.accept(signal_name, request, "grpc", header_ok)
            if outcome != "ok":
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "sink: missing or wrong header")
            return response_type()

    return Servicer()


def start_grpc(sink: Sink, port: int, tls):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8),
                         options=[("grpc.max_receive_message_length", MAX_BODY)])
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(
        grpc_servicer(sink, "traces", trace_service_pb2_grpc.TraceServiceServicer), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(
        grpc_servicer(sink, "metrics", metrics_service_pb2_grpc.MetricsServiceServicer), server)
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(
        grpc_servicer(sink, "logs", logs_service_pb2_grpc.LogsServiceServicer), server)
    address = f"{HOST}:{port}"
    if tls is not None:
        cert, key = tls
        credentials = grpc.ssl_server_credentials([(key, cert)])
        bound = server.add_secure_port(address, credentials)
    else:
        bound = server.add_insecure_port(address)
    if bound == 0:
        raise OSError(f"cannot listen for gRPC on {address}")
    server.start()
    return server, bound


def http_handler(sink: Sink):
    paths = {"/v1/traces": "traces", "/v1/metrics": "metrics", "/v1/logs": "logs"}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def handle(self):
            try:
                if isinstance(self.connection, ssl.SSLSocket):
                    # The handshake runs here, in the connection's own
                    # thread and bounded, not in `accept` on the serving
                    # thread, where one silent client would stall every
                    # other connection and the shutdown. Idle keep-alive
                    # connections stay open, as before.
                    self.connection.settimeout(HANDSHAKE_TIMEOUT_S)
                    self.connection.do_handshake()
                    self.connection.settimeout(None)
                super().handle()
            except OSError as error:
                # A client that rejects the certificate (ssl.SSLError is an
                # OSError), goes silent or hangs up: one line, not a
                # traceback.
                sys.stderr.write(f"otlp_sink: http connection: {error}\n")

        def log_message(self, format, *args):  # noqa: A002 (the base class's name)
            # Quiet: the request lines of the output file are the log.
            pass

        def reply(self, code: int, body: bytes, content_type: str):
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):  # noqa: N802 (the base class's name)
            path = self.path.split("?", 1)[0]
            signal_name = paths.get(path)
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self.reply(413, b"too large", "text/plain")
                return
            body = self.rfile.read(length)
            if signal_name is None:
                self.reply(404, b"not an OTLP path", "text/plain")
                return
            if (self.headers.get("Content-Encoding") or "").lower() == "gzip":
                try:
                    body = gzip.decompress(body)
                except OSError:
                    self.reply(400, b"bad gzip body", "text/plain")
                    return
            content_type = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
            request_type, response_type = SIGNALS[signal_name]
            message = request_type()
            try:
                if content_type == "application/json":
                    transport = "http/json"
                    json_format.ParseDict(convert_ids(json.loads(body)), message, ignore_unknown_fields=True)
                elif content_type == "application/x-protobuf":
                    transport = "http/protobuf"
                    message.ParseFromString(body)
                else:
                    self.reply(415, b"unsupported content type", "text/plain")
                    return
            except Exception as error:  # a decoding failure is the test's finding
                sys.stderr.write(f"otlp_sink: cannot decode {path} ({content_type}): {error}\n")
                sink.recorder.write([], {"type": "request", "transport": content_type, "signal": signal_name,
                                         "items": 0, "outcome": "undecodable", "error": str(error)[:500],
                                         "time_ns": time.time_ns()})
                self.reply(400, b"cannot decode", "text/plain")
                return
            header_ok = sink.header_ok(self.headers.get(sink.required_header) if sink.required_header else None)
            fault = sink.fault_for(transport)
            if fault == "hang":
                sink.accept(signal_name, message, transport, header_ok, "hang")
                sink.hang()
                return
            if fault == "http503":
                sink.accept(signal_name, message, transport, header_ok, fault)
                self.reply(503, b"sink: injected 503", "text/plain")
                return
            if fault == "echo-headers":
                sink.accept(signal_name, message, transport, header_ok, fault)
                echoed = "".join(f"{k}: {v}\n" for k, v in self.headers.items())
                self.reply(401, f"sink: refused, your headers were\n{echoed}".encode(), "text/plain")
                return
            outcome = sink.accept(signal_name, message, transport, header_ok)
            if outcome != "ok":
                self.reply(401, b"missing or wrong header", "text/plain")
                return
            if transport == "http/json":
                self.reply(200, b"{}", "application/json")
            else:
                self.reply(200, response_type().SerializeToString(), "application/x-protobuf")

    return Handler


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def start_http(sink: Sink, port: int, tls_files):
    server = Server((HOST, port), http_handler(sink))
    if tls_files is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certfile=tls_files[0], keyfile=tls_files[1])
        server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    return server, server.server_address[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grpc-port", type=int, default=0, help="gRPC port (0: a free one)")
    parser.add_argument("--http-port", type=int, default=0, help="HTTP port (0: a free one)")
    parser.add_argument("--out", required=True, help="JSON lines file to append records to")
    parser.add_argument("--fail-mode", choices=["none", "http503", "grpc-unavailable", "hang", "echo-headers"], default="none")
    parser.add_argument("--fail-count", type=int, default=None, help="fail only the first N exports")
    parser.add_argument("--tls-cert", help="PEM certificate chain: serve TLS")
    parser.add_argument("--tls-key", help="PEM private key of --tls-cert")
    parser.add_argument("--require-header", help="header name whose value must equal $OTLP_SINK_REQUIRED_HEADER_VALUE")
    args = parser.parse_args()
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")

    sink = Sink(args)
    tls = None
    tls_files = None
    if args.tls_cert:
        with open(args.tls_cert, "rb") as f:
            cert = f.read()
        with open(args.tls_key, "rb") as f:
            key = f.read()
        tls = (cert, key)
        tls_files = (args.tls_cert, args.tls_key)

    stop = threading.Event()

    def on_signal(signum, _frame):
        stop.set()

    def on_usr1(_signum, _frame):
        with sink._lock:
            sink.fail_mode = "none"

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGUSR1, on_usr1)

    try:
        grpc_server, grpc_port = start_grpc(sink, args.grpc_port, tls)
        http_server, http_port = start_http(sink, args.http_port, tls_files)
    except Exception as error:
        sys.stderr.write(f"otlp_sink: cannot start: {error}\n")
        return 1
    print(f"READY grpc={grpc_port} http={http_port}", flush=True)

    while not stop.wait(0.2):
        pass
    sink.stopping.set()
    grpc_server.stop(grace=1.0).wait(2.0)
    http_server.shutdown()
    http_server.server_close()
    sink.recorder.close()
    sys.stderr.write(f"otlp_sink: stopped after {sink.recorder.requests} requests, items {sink.recorder.items}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
