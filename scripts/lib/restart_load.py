#!/usr/bin/env python3
"""Payments in flight across a stop and start of the service (scripts/compose-check.sh).

  restart_load.py --api URL --key KEY --provider URL --stop CMD --start CMD [--workers N]

Workers send payments (card and asynchronous card, each with its own Idempotency-Key) while
`--stop` runs (e.g. `docker compose stop api`: SIGTERM, the service drains) and `--start`
brings the service back; load goes on for a moment after it answers again. Then every key is
sent again, with the same request, until its final answer (201), as a client must. Exits 1
unless: requests were in flight when the stop began and were answered (the drain), no answer
was a 5xx other than 503, every payment ever answered ends succeeded and is readable after
the restart with the status it was answered, and the provider charged each exactly once.
Standard library only, loopback only.
"""

import argparse
import http.client
import json
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid

CLIENT_TIMEOUT_S = 60.0
FINISH_S = 120.0
METHODS = ["pm_card_visa", "pm_card_async"]


class Api:
    """One keep-alive HTTP connection (one per thread)."""

    def __init__(self, base, key=None):
        url = urllib.parse.urlsplit(base)
        self.host, self.port = url.hostname, url.port
        self.key = key
        self.conn = None

    def request(self, method, path, body=None, headers=None):
        """(status, headers, parsed body or None, started, ended); status None: no answer."""
        all_headers = {"Content-Type": "application/json"}
        if self.key:
            all_headers["Authorization"] = f"Bearer {self.key}"
        all_headers.update(headers or {})
        data = json.dumps(body).encode() if body is not None else None
        started = time.time()
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=CLIENT_TIMEOUT_S)
            self.conn.request(method, path, body=data, headers=all_headers)
            response = self.conn.getresponse()
            payload = response.read()
            if response.getheader("Connection", "").lower() == "close":
                self.conn.close()
                self.conn = None
            try:
                parsed = json.loads(payload) if payload else None
            except ValueError:
                parsed = None
            return response.status, dict(response.getheaders()), parsed, started, time.time()
        except (OSError, http.client.HTTPException):
            if self.conn is not None:
                self.conn.close()
            self.conn = None
            return None, {}, None, started, time.time()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--api", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--provider", required=True)
    parser.add_argument("--stop", required=True)
    parser.add_argument("--start", required=True)
    parser.add_argument("--workers", type=int, default=6)
    args = parser.parse_args()

    run = uuid.uuid4().hex[:12]
    lock = threading.Lock()
    answers = []  # every answer: key, status, id, payment status, started, ended
    keys = {}  # key -> body
    new_keys = threading.Event()
    new_keys.set()

    def send(api, key):
        status, headers, body, started, ended = api.request(
            "POST", "/v1/payments", keys[key], {"Idempotency-Key": key}
        )
        body = body if isinstance(body, dict) else {}
        with lock:
            answers.append(
                dict(key=key, status=status, id=body.get("id"), payment_status=body.get("status"),
                     started=started, ended=ended)
            )
        return status, headers

    def worker(n):
        api = Api(args.api, args.key)
        i = 0
        while new_keys.is_set():
            key = f"restart-{run}-{n}-{i}"
            i += 1
            with lock:
                keys[key] = {"amount": 1000 + i, "currency": "usd", "payment_method": METHODS[i % 2]}
            status, headers = send(api, key)
            if status is None or status in (409, 503):
                time.sleep(0.2)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(args.workers)]
    for t in threads:
        t.start()

    def created():
        with lock:
            return sum(1 for a in answers if a["status"] in (201, 202))

    deadline = time.time() + 30
    while created() < 4 * args.workers and time.time() < deadline:
        time.sleep(0.05)
    stop_sent = time.time()
    stop = subprocess.run(args.stop, shell=True)
    stopped = time.time()
    print(f"stop took {stopped - stop_sent:.1f} s (exit {stop.returncode})")
    start = subprocess.run(args.start, shell=True)
    failures = []
    if stop.returncode != 0 or start.returncode != 0:
        failures.append(f"stop exited {stop.returncode}, start exited {start.returncode}")
    # Load goes on until the service has answered a while after its start.
    deadline = time.time() + 90
    while time.time() < deadline:
        with lock:
            after = [a for a in answers if a["status"] in (201, 202) and a["started"] > stopped]
        if len(after) >= 2 * args.workers:
            break
        time.sleep(0.1)
    new_keys.clear()
    for t in threads:
        t.join()

    # Every key to its final answer, the request sent again as it was (a client's retry).
    api = Api(args.api, args.key)
    finish_by = time.time() + FINISH_S
    open_keys = list(keys)
    while open_keys and time.time() < finish_by:
        still = []
        for key in open_keys:
            status, headers = send(api, key)
            if status != 201:
                still.append(key)
        open_keys = still
        if open_keys:
            time.sleep(0.5)
    if open_keys:
        failures.append(f"{len(open_keys)} keys without a final answer after {FINISH_S:.0f} s: {open_keys[:3]}")

    by_status = {}
    for a in answers:
        by_status[str(a["status"])] = by_status.get(str(a["status"]), 0) + 1
    print(f"keys: {len(keys)}; answers: {len(answers)} {json.dumps(by_status, sort_keys=True)}")
    drained = [a for a in answers if a["started"] < stop_sent < a["ended"] and a["status"] in (201, 202)]
    print(f"in flight when the stop began and answered: {len(drained)}")
    if not drained:
        failures.append("no request was in flight and answered across the stop (no drain seen)")
    for a in answers:
        if a["status"] is not None and a["status"] >= 500 and a["status"] != 503:
            failures.append(f"a {a['status']} for key {a['key']}")
        elif a["status"] is not None and a["status"] not in (201, 202, 409, 503):
            failures.append(f"unexpected {a['status']} for key {a['key']}")

    # One payment per key, answered one way, succeeded, readable after the restart.
    ids = {}
    for a in answers:
        if a["status"] in (201, 202):
            if ids.setdefault(a["key"], a["id"]) != a["id"]:
                failures.append(f"key {a['key']} answered with two payments: {ids[a['key']]}, {a['id']}")
    finals = {a["id"]: a["payment_status"] for a in answers if a["status"] == 201}
    for key, pid in ids.items():
        status, _, body, _, _ = api.request("GET", f"/v1/payments/{pid}")
        if status != 200:
            failures.append(f"GET {pid} after the restart: {status}")
        elif body.get("status") != "succeeded" or finals.get(pid) != "succeeded":
            failures.append(f"{pid} is {body.get('status')}, answered {finals.get(pid)}; want succeeded")

    # The provider's ledger: each payment charged once, and succeeded.
    charges = Api(args.provider).request("GET", "/v1/charges")[2] or {}
    references = [c.get("reference") for c in charges.get("data", [])]
    ours = set(ids.values())
    for pid in ours:
        n = references.count(pid)
        if n != 1:
            failures.append(f"{pid} charged {n} times")
    print(f"payments: {len(ours)} ({sum(1 for b in keys.values() if b['payment_method'] == 'pm_card_async')} "
          f"asynchronous keys), all checked against the provider's {len(references)} charges")

    for f in failures[:20]:
        print(f"FAIL: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
