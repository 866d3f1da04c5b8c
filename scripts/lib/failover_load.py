#!/usr/bin/env python3
"""Payment load and checks for scripts/failover.sh (standard library only, loopback only).

  failover_load.py load  --api URL --key KEY --out FILE --stop-file FILE [--workers N]
  failover_load.py check --api URL --key KEY --provider URL --results FILE --kill-time T

`load` sends payments from a few workers, each key retried the way a client must (on 202,
409 and 503, with the same key) until it gets its final answer, and writes one JSON line
per answer. New keys stop when the stop file appears; the keys still open are then finished
(bounded). `check` reads those lines after the failover and fails (exit 1) unless: every
payment ever answered 201 is still there with the same status, the provider's charges match
the succeeded payments one to one, no answer was a 500 or took over 10 s, and new payments
succeed. It prints the time from the kill to the first payment created after it.
"""

import argparse
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse
import uuid

SLOW_S = 10.0
CLIENT_TIMEOUT_S = 30.0
FINISH_OPEN_KEYS_S = 90.0


class Api:
    """One keep-alive HTTP connection (one per thread)."""

    def __init__(self, base, key=None):
        url = urllib.parse.urlsplit(base)
        self.host, self.port = url.hostname, url.port
        self.key = key
        self.conn = None

    def request(self, method, path, body=None, headers=None):
        """(status, headers, body bytes, seconds); status None when the connection failed."""
        all_headers = {"Content-Type": "application/json"}
        if self.key:
            all_headers["Authorization"] = f"Bearer {self.key}"
        all_headers.update(headers or {})
        data = json.dumps(body).encode() if body is not None else None
        started = time.time()
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection(
                    self.host, self.port, timeout=CLIENT_TIMEOUT_S
                )
            self.conn.request(method, path, body=data, headers=all_headers)
            response = self.conn.getresponse()
            payload = response.read()
            return response.status, dict(response.getheaders()), payload, time.time() - started
        except (OSError, http.client.HTTPException) as e:
            if self.conn is not None:
                self.conn.close()
            self.conn = None
            return None, {}, str(e).encode(), time.time() - started

    def get_json(self, path):
        status, _, payload, _ = self.request("GET", path)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status} {payload[:300]!r}")
        return json.loads(payload)


def load(args):
    out_lock = threading.Lock()
    out = open(args.out, "a", buffering=1)

    def record(**fields):
        with out_lock:
            out.write(json.dumps(fields) + "\n")

    def stopping():
        return os.path.exists(args.stop_file)

    def worker(n):
        api = Api(args.api, args.key)
        amount = 100 + n
        while not stopping():
            key = f"failover-{n}-{uuid.uuid4().hex}"
            body = {"amount": amount, "currency": "usd", "payment_method": "pm_card_visa"}
            give_up = None
            while True:
                started = time.time()
                status, headers, payload, took = api.request(
                    "POST", "/v1/payments", body, {"Idempotency-Key": key}
                )
                answer = {}
                try:
                    answer = json.loads(payload) if status else {}
                except ValueError:
                    pass
                record(
                    key=key,
                    started=started,
                    took=took,
                    status=status,
                    replayed=headers.get("Idempotent-Replayed") == "true",
                    id=answer.get("id"),
                    payment_status=answer.get("status"),
                    error=None if status else payload.decode(errors="replace"),
                )
                if status == 201:
                    break
                if status not in (202, 409, 503, None):
                    break  # recorded; check fails on anything unexpected
                # Retries of an open key go on after the stop, for a bounded time.
                if stopping():
                    give_up = give_up or time.time() + FINISH_OPEN_KEYS_S
                    if time.time() > give_up:
                        record(key=key, started=time.time(), took=0, status="gave_up")
                        break
                retry_after = headers.get("Retry-After")
                time.sleep(min(float(retry_after), 1.0) if retry_after else 0.25)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(args.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.close()


def check(args):
    failures = []
    answers = [json.loads(line) for line in open(args.results)]
    kill_time = float(args.kill_time)
    api = Api(args.api, args.key)

    by_status = {}
    for a in answers:
        by_status[str(a["status"])] = by_status.get(str(a["status"]), 0) + 1
    print(f"answers under load: {len(answers)} {json.dumps(by_status, sort_keys=True)}")

    for a in answers:
        if a["status"] == 500:
            failures.append(f"a 500 for key {a['key']}")
        elif a["status"] is None:
            failures.append(f"no answer for key {a['key']}: {a.get('error')}")
        elif a["status"] == "gave_up":
            failures.append(f"key {a['key']} never got its final answer")
        elif a["status"] not in (201, 202, 409, 503):
            failures.append(f"unexpected {a['status']} for key {a['key']}")
        if a["took"] > SLOW_S:
            failures.append(f"an answer took {a['took']:.1f} s (key {a['key']}, {a['status']})")
    slowest = max((a["took"] for a in answers), default=0.0)
    print(f"slowest answer: {slowest:.2f} s")

    created = [a for a in answers if a["status"] == 201]
    after_kill = [
        a for a in created if a["started"] >= kill_time and not a["replayed"]
    ]
    if after_kill:
        first = min(after_kill, key=lambda a: a["started"] + a["took"])
        recovered = first["started"] + first["took"] - kill_time
        print(f"FAILOVER: first payment created {recovered:.1f} s after the primary was killed")
    else:
        failures.append("no payment was created after the kill")
    before_kill = [a for a in created if a["started"] + a["took"] < kill_time]
    print(f"payments answered 201: {len(created)} ({len(before_kill)} before the kill)")
    if not before_kill:
        failures.append("no payment was answered 201 before the kill: the load never ran")
    unavailable = sum(1 for a in answers if a["status"] == 503)
    print(f"503 answers (no primary): {unavailable}")

    # Every 201 is still there, as it was answered.
    answered = {}
    for a in created:
        if answered.setdefault(a["id"], a["payment_status"]) != a["payment_status"]:
            failures.append(f"{a['id']} was answered with two statuses")
    for pid, status in answered.items():
        code, _, payload, _ = api.request("GET", f"/v1/payments/{pid}")
        if code != 200:
            failures.append(f"GET {pid} after the failover: {code} {payload[:200]!r}")
        elif json.loads(payload)["status"] != status:
            failures.append(f"{pid} was answered {status}, is now {json.loads(payload)['status']}")

    # Nothing left unfinished, then charges and succeeded payments one to one.
    deadline = time.time() + 60
    while True:
        payments = list_all(api)
        processing = [p["id"] for p in payments if p["status"] == "processing"]
        if not processing or time.time() > deadline:
            break
        time.sleep(1)
    if processing:
        failures.append(f"still processing a minute after the load: {processing[:5]}")
    succeeded = {p["id"] for p in payments if p["status"] == "succeeded"}
    charges = Api(args.provider).get_json("/v1/charges")["data"]
    references = [c["reference"] for c in charges]
    charged = {c["reference"] for c in charges if c["status"] == "succeeded"}
    if len(references) != len(set(references)):
        failures.append("a payment was charged more than once")
    if charged != succeeded:
        failures.append(
            f"charges and succeeded payments differ: charged only {sorted(charged - succeeded)[:5]}, "
            f"succeeded only {sorted(succeeded - charged)[:5]}"
        )
    if not set(answered) <= succeeded:
        failures.append("a payment answered 201 is not among the succeeded ones")
    print(
        f"payments stored: {len(payments)}, succeeded: {len(succeeded)}, "
        f"provider charges: {len(charges)}"
    )

    # New payments succeed on the new primary.
    for n in range(5):
        key = f"after-failover-{uuid.uuid4().hex}"
        body = {"amount": 500 + n, "currency": "usd", "payment_method": "pm_card_visa"}
        code, _, payload, took = api.request("POST", "/v1/payments", body, {"Idempotency-Key": key})
        if code != 201 or took > SLOW_S:
            failures.append(f"a new payment after the failover: {code} in {took:.1f} s {payload[:200]!r}")

    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    return 1 if failures else 0


def list_all(api):
    payments, after = [], None
    while True:
        path = "/v1/payments?limit=100" + (f"&starting_after={after}" if after else "")
        page = api.get_json(path)
        payments += page["data"]
        if not page["has_more"]:
            return payments
        after = page["data"][-1]["id"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["load", "check"])
    parser.add_argument("--api", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--out")
    parser.add_argument("--stop-file")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--provider")
    parser.add_argument("--results")
    parser.add_argument("--kill-time")
    args = parser.parse_args()
    if args.mode == "load":
        load(args)
        return 0
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
