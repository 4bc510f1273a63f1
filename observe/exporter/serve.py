"""Serve a metrics source over HTTP and/or as a node_exporter textfile.

A thread refreshes the source every interval and renders the exposition once; a scrape only
sends the last rendering, so its cost does not grow with the store. A failed refresh is logged
and counted, and the previous numbers stay served.
"""
from __future__ import annotations

import gzip
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from observe.exporter.central import family
from observe.printable import printable
from observe.store import write_atomic

TEXTFILE_NAME = "observe.prom"


class Source(Protocol):
    def refresh(self) -> object: ...

    def collect(self) -> Iterator[Metric]: ...


class Exporter:
    """Refreshes ``source`` and keeps its exposition (plain and gzip) ready to serve."""

    def __init__(self, source: Source, textfile: Path | None = None):
        self.source, self.textfile = source, textfile
        self.errors = 0
        self.refresh_seconds = 0.0
        self.refreshed_at = 0.0
        self.body = self.gzipped = b""

    def refresh(self) -> bool:
        """Refresh and render once; False (after one line on stderr) when the refresh failed."""
        started = time.monotonic()
        ok = True
        try:
            self.source.refresh()
        except Exception as exc:  # the exporter keeps serving the last numbers; the error is counted
            self.errors += 1
            ok = False
            print(printable(f"observe exporter: refresh failed: {type(exc).__name__}: {exc}"), file=sys.stderr, flush=True)
        self.refresh_seconds = time.monotonic() - started
        self.refreshed_at = time.time()
        body = generate_latest(self)  # type: ignore[arg-type]  (anything with collect() is a registry)
        self.body, self.gzipped = body, gzip.compress(body, compresslevel=1)
        if self.textfile is not None:
            self.textfile.mkdir(parents=True, exist_ok=True)
            write_atomic(self.textfile / TEXTFILE_NAME, body)
        return ok

    def collect(self) -> Iterator[Metric]:
        yield from self.source.collect()
        yield family(GaugeMetricFamily, "observe_exporter_refresh_duration_seconds", "How long the last refresh took.",
                     (), {(): self.refresh_seconds})
        yield family(GaugeMetricFamily, "observe_exporter_refresh_timestamp_seconds", "When the last refresh ended.",
                     (), {(): self.refreshed_at})
        yield family(CounterMetricFamily, "observe_exporter_refresh_errors",
                     "Refreshes that failed (the numbers of the last good one stay served).", (), {(): self.errors})

    def run(self, interval_s: float, stop: threading.Event) -> None:
        """Refresh every ``interval_s`` until ``stop`` is set."""
        while not stop.wait(interval_s):
            self.refresh()

    def server(self, host: str, port: int) -> ThreadingHTTPServer:
        """An HTTP server answering ``/metrics`` with the last rendering (gzip when asked)."""
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                if self.path.split("?")[0] != "/metrics":
                    body = b'observe exporter: metrics at <a href="/metrics">/metrics</a>\n'
                    self._send(200 if self.path == "/" else 404, "text/html; charset=utf-8", body)
                    return
                zipped = "gzip" in self.headers.get("Accept-Encoding", "")
                self._send(200, CONTENT_TYPE_LATEST, exporter.gzipped if zipped else exporter.body, zipped)

            def _send(self, code: int, ctype: str, body: bytes, zipped: bool = False) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                if zipped:
                    self.send_header("Content-Encoding", "gzip")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - scrapes are not logged
                pass

        httpd = ThreadingHTTPServer((host, port), Handler)
        httpd.daemon_threads = True
        return httpd


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``:PORT`` (all interfaces) as (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen {text!r}: use HOST:PORT or :PORT, e.g. :9847")
    return host.strip("[]") or "0.0.0.0", int(port)
