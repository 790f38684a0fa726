"""The serving worker against gunicorn's own gthread worker: webhook speed, and slow clients.

Both run ``service/gunicorn.conf.py`` (one worker; the stock one with ``--worker-class gthread``) on
SQLite, and take turns, ``--rounds`` times:

* capacity: ``--clients`` kept-alive clients post Label Studio webhooks back to back (a small
  ignored event, so that the figure is the serving path's, not the vote's);
* latency: webhooks one at a time, on one kept-alive connection and on a new connection each;
* slow clients: ``--slow`` connections trickle a request head or a declared 60 KB body (a piece
  every 0.5 s), and meanwhile ``/health`` is asked for ten times (5 s timeout each).

    .venv/bin/python benchmarks/serving_worker.py [--threads 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CONF = REPO_ROOT / "service" / "gunicorn.conf.py"
HOST = "127.0.0.1"
SECRET = "benchmark-webhook-secret-0123456789"
HOOK = json.dumps({"action": "PROJECT_UPDATED", "project": {"id": 1}}).encode()
HOOK_HEADERS = {"Content-Type": "application/json", "X-Dynaval-Webhook-Secret": SECRET}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def service(stock: bool, threads: int, scratch: Path) -> Iterator[int]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAVAL_")}
    env |= {
        "DYNAVAL_DEVELOPMENT": "true",
        "DYNAVAL_DATA_DIR": str(scratch / ("stock" if stock else "buffering")),
        "DYNAVAL_BIND": f"{HOST}:{port}",
        "DYNAVAL_THREADS": str(threads),
        "DYNAVAL_EMBEDDED_WORKER": "false",
        "DYNAVAL_WRITER_TOKENS": "benchmark-writer-token",
        "DYNAVAL_LEAD_TOKENS": "benchmark-lead-token",
        "DYNAVAL_WEBHOOK_SECRET": SECRET,
        "DYNAVAL_RATE_LIMIT": "",
        "DYNAVAL_ANONYMOUS_RATE_LIMIT": "",
        "DYNAVAL_RECEIVE_TIMEOUT_S": "15",
        "DYNAVAL_LOG_LEVEL": "warning",
    }
    command = [sys.executable, "-m", "gunicorn", "-c", str(CONF)]
    if stock:
        command += ["--worker-class", "gthread"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                connection = http.client.HTTPConnection(HOST, port, timeout=2)
                connection.request("GET", "/health")
                if connection.getresponse().status == 200:
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise SystemExit("the service did not start") from None
                time.sleep(0.2)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=30)


def post_hook(connection: http.client.HTTPConnection) -> None:
    connection.request("POST", "/webhooks/label-studio", HOOK, HOOK_HEADERS)
    response = connection.getresponse()
    response.read()
    assert response.status == 200, response.status


def capacity(port: int, clients: int, requests_n: int) -> float:
    def client() -> None:
        connection = http.client.HTTPConnection(HOST, port, timeout=30)
        for _ in range(requests_n // clients):
            post_hook(connection)
        connection.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return requests_n / (time.perf_counter() - started)


def one_at_a_time(port: int, requests_n: int, *, new_connection: bool) -> list[float]:
    latencies = []
    connection = http.client.HTTPConnection(HOST, port, timeout=30)
    for _ in range(requests_n):
        if new_connection:
            connection = http.client.HTTPConnection(HOST, port, timeout=30)
        started = time.perf_counter()
        post_hook(connection)
        latencies.append((time.perf_counter() - started) * 1000)
        if new_connection:
            connection.close()
    return sorted(latencies)


def with_slow_clients(port: int, slow: int) -> tuple[int, float]:
    """How many of ten /health requests were answered within 5 s while ``slow`` connections trickle,
    and the slowest answer's seconds."""
    sockets = []
    for i in range(slow):
        sock = socket.create_connection((HOST, port), timeout=5)
        if i % 2:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        else:
            sock.sendall(b"POST /webhooks/label-studio HTTP/1.1\r\nHost: x\r\nContent-Length: 61440\r\n\r\n")
        sockets.append(sock)
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(0.5):
            for i, sock in enumerate(sockets):
                with contextlib.suppress(OSError):
                    sock.send(b"X-Slow: a\r\n" if i % 2 else b"a" * 100)

    trickler = threading.Thread(target=trickle, daemon=True)
    trickler.start()
    answered, slowest = 0, 0.0
    try:
        time.sleep(1.0)
        for _ in range(10):
            started = time.perf_counter()
            try:
                connection = http.client.HTTPConnection(HOST, port, timeout=5)
                connection.request("GET", "/health")
                answered += connection.getresponse().status == 200
            except OSError:
                pass
            slowest = max(slowest, time.perf_counter() - started)
    finally:
        stop.set()
        trickler.join()
        for sock in sockets:
            sock.close()
    return answered, slowest


def pct(values: Sequence[float], q: float) -> float:
    return values[min(len(values) - 1, round(q / 100 * (len(values) - 1)))]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--threads", type=int, default=8, help="threads per worker (the service's default: 16)"
    )
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=800)
    parser.add_argument("--slow", type=int, default=24, help="slow connections (more than --threads)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    figures: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(args.rounds):
            for name, stock in (("gunicorn gthread", True), ("dynaval buffering", False)):
                with service(stock, args.threads, Path(scratch)) as port:
                    capacity(port, args.clients, 200)  # warm-up
                    row = figures.setdefault(name, {})
                    row.setdefault("capacity", []).append(capacity(port, args.clients, args.requests))
                    for key, new in (("kept alive", False), ("new connection", True)):
                        latencies = one_at_a_time(port, 300, new_connection=new)
                        row.setdefault(f"{key} p50", []).append(pct(latencies, 50))
                        row.setdefault(f"{key} p99", []).append(pct(latencies, 99))
                    answered, slowest = with_slow_clients(port, args.slow)
                    row.setdefault("answered", []).append(answered)
                    row.setdefault("slowest", []).append(slowest)
    print(f"1 worker x {args.threads} threads, {args.rounds} rounds, medians")
    for name, row in figures.items():
        print(
            f"{name:>18}: {statistics.median(row['capacity']):.0f} webhooks/s with {args.clients} clients; "
            f"one at a time p50/p99 {statistics.median(row['kept alive p50']):.2f}/"
            f"{statistics.median(row['kept alive p99']):.2f} ms kept alive, "
            f"{statistics.median(row['new connection p50']):.2f}/"
            f"{statistics.median(row['new connection p99']):.2f} ms on new connections; "
            f"with {args.slow} slow clients {statistics.median(row['answered']):.0f}/10 /health answered "
            f"within 5 s (slowest {statistics.median(row['slowest']):.2f} s)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
