#!/usr/bin/env python3
"""Launches a command inside a job-level span of the official OpenTelemetry
Python SDK (PyPI ``opentelemetry-sdk``), the way an orchestrator or CI system
does: the span's context goes into the child's environment as
``TRACEPARENT`` (and ``TRACESTATE`` when set), through the SDK's own W3C
propagator.

Usage: ``launch_with_traceparent.py --out FILE [--timeout S] -- COMMAND...``

The span is kept in memory (no exporter is needed); when the command has
exited, ``FILE`` receives one JSON object: the span's ``trace_id`` and
``span_id`` (hex), its ``name``, the ``traceparent`` handed down, and the
command's ``returncode``. The script exits with the command's status
(124 if it ran past ``--timeout``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from opentelemetry import trace
from opentelemetry.propagate import inject
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

SPAN_NAME = "job.launch"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to launch")

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "e2e-launcher"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("lens.e2e.launcher")

    with tracer.start_as_current_span(SPAN_NAME) as span:
        carrier: dict[str, str] = {}
        inject(carrier)
        env = dict(os.environ)
        env["TRACEPARENT"] = carrier["traceparent"]
        if "tracestate" in carrier:
            env["TRACESTATE"] = carrier["tracestate"]
        try:
            returncode = subprocess.run(command, env=env, timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            returncode = 124
        context = span.get_span_context()
        result = {
            "name": SPAN_NAME,
            "trace_id": format(context.trace_id, "032x"),
            "span_id": format(context.span_id, "016x"),
            "traceparent": carrier["traceparent"],
            "returncode": returncode,
        }
    provider.shutdown()
    finished = exporter.get_finished_spans()
    result["exported_by_sdk"] = len(finished)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f)
    return returncode


if __name__ == "__main__":
    sys.exit(main())
