#!/usr/bin/env python3
"""Payments on two instances whose host clocks differ, and the checks of scripts/clock-skew.sh.

  clock_skew.py --a URL --b URL --key KEY --log-a FILE --log-b FILE --skew-s S [--count N]

B's host clock is S s behind the real time (this host's and the database's). Creates N
payments one after another, alternating A and B, sending no X-Request-Id, then checks:
1. B logged the database's clock S s ahead of its host's; 2. payments and their
payment.succeeded events list, from either instance, newest first exactly as they were made,
ids descending, created_at strictly increasing; 3. the X-Request-Ids the service made are
UUIDv7 whose milliseconds never decrease and lie within 1 s of the real time of their
request; 4. so do B's log lines of its requests. Prints what each found; exits 1 on a failure.
"""

import argparse
import datetime
import json
import re
import sys
import time
import urllib.request
import uuid

TOLERANCE_S = 1.0


def call(base, key, path, body=None, idempotency_key=None):
    req = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {key}"})
    if body:
        req.data = json.dumps(body).encode()
        req.add_header("Content-Type", "application/json")
        req.add_header("Idempotency-Key", idempotency_key)
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status, resp.headers, json.load(resp)


def seconds(rfc3339):
    """Unix seconds of an RFC 3339 time (fraction cut to microseconds)."""
    s = re.sub(r"(\.\d{6})\d+", r"\1", rfc3339.replace("Z", "+00:00"))
    return datetime.datetime.fromisoformat(s).timestamp()


def json_lines(path):
    for line in open(path, errors="replace"):
        try:
            yield json.loads(line)
        except ValueError:
            pass


def in_time(m, at):
    return m["sent"] - TOLERANCE_S <= at <= m["done"] + TOLERANCE_S


def offsets(pairs):
    off = [at - (m["sent"] + m["done"]) / 2 for m, at in pairs]
    return f"{min(off):+.3f} s .. {max(off):+.3f} s" if off else "none"


def report(name, ok, found):
    print(f"{'ok' if ok else 'FAIL'}: {name}\n      {found}")
    return ok


def main():
    p = argparse.ArgumentParser()
    for flag in ("--a", "--b", "--key", "--log-a", "--log-b"):
        p.add_argument(flag, required=True)
    p.add_argument("--skew-s", type=float, required=True)
    p.add_argument("--count", type=int, default=24)
    args = p.parse_args()
    apis = {"A": args.a, "B": args.b}

    made = []  # in creation order
    for i in range(args.count):
        on = "AB"[i % 2]
        body = {"amount": 1000 + i, "currency": "usd", "payment_method": "pm_card_visa"}
        sent = time.time()
        status, headers, payment = call(apis[on], args.key, "/v1/payments", body, f"skew-{i}")
        done = time.time()
        if status != 201 or payment["status"] != "succeeded":
            sys.exit(f"FAIL: payment {i} on {on}: {status} {payment}")
        made.append(dict(on=on, id=payment["id"], request_id=headers["X-Request-Id"],
                         sent=sent, done=done))
    print(f"created {len(made)} payments, alternating A and B")
    results = []

    ahead = {n: [line["database_ahead_ms"] for line in json_lines(log) if "database_ahead_ms" in line]
             for n, log in (("A", args.log_a), ("B", args.log_b))}
    results.append(report(
        f"1. B measured the database's clock {args.skew_s:g} s ahead of its host's",
        any(abs(ms - args.skew_s * 1000) <= 1000 for ms in ahead["B"]),
        f"database_ahead_ms logged by B: {ahead['B'] or 'none'}, by A: {ahead['A'] or 'none'}"))

    for kind, path in (("payments", "/v1/payments?limit=100"),
                       ("payment.succeeded events", "/v1/events?type=payment.succeeded&limit=100")):
        for on, api in apis.items():
            listed = call(api, args.key, path)[2]["data"]
            payments = [o["data"]["object"]["id"] if o["object"] == "event" else o["id"]
                        for o in listed]
            in_order = payments == [m["id"] for m in reversed(made)]
            descending = [o["id"] for o in listed] == sorted((o["id"] for o in listed), reverse=True)
            created = [seconds(o["created_at"]) for o in reversed(listed)]
            rising = all(a < b for a, b in zip(created, created[1:]))
            results.append(report(
                f"2. {kind} listed by {on} newest first as they were made",
                in_order and descending and rising,
                f"{len(listed)} listed; in reverse creation order: {in_order}; ids descending: "
                f"{descending}; created_at strictly increasing in creation order: {rising}"))

    ids = [(m, uuid.UUID(m["request_id"])) for m in made]
    stamps = [(m, (u.int >> 80) / 1000) for m, u in ids]  # a UUIDv7 starts with its millisecond
    versions = sorted({u.version for _, u in ids})
    rising = all(a <= b for (_, a), (_, b) in zip(stamps, stamps[1:]))
    results.append(report(
        "3. X-Request-Ids made by the service: UUIDv7, in order, within 1 s of the real time",
        versions == [7] and rising and all(in_time(m, at) for m, at in stamps),
        f"versions {versions}; milliseconds non-decreasing in creation order: {rising}; off the "
        f"real time: A {offsets(s for s in stamps if s[0]['on'] == 'A')}, "
        f"B {offsets(s for s in stamps if s[0]['on'] == 'B')}"))

    lines = {line.get("request_id"): line["timestamp"] for line in json_lines(args.log_b)
             if line.get("message") == "request" and "timestamp" in line}
    on_b = [m for m in made if m["on"] == "B"]
    logged = [(m, seconds(lines[m["request_id"]])) for m in on_b if m["request_id"] in lines]
    results.append(report(
        "4. B's log lines of its requests are timed within 1 s of the real time",
        len(logged) == len(on_b) and all(in_time(m, at) for m, at in logged),
        f"{len(logged)} of {len(on_b)} lines found; their `timestamp` off the real time: "
        f"{offsets(logged)}"))

    print(f"{results.count(True)} of {len(results)} checks passed")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
