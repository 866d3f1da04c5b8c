#!/usr/bin/env python3
"""Payments in flight across restarts of the service (scripts/compose-check.sh).

  restart_load.py --api URL --key KEY --provider URL (--restart CMD | --stop CMD --start CMD)
                  [--workers N] [--psql CMD] [--stats URL] [--steady S] [--cpu NAME=PID ...]

Workers post new payments (card and asynchronous card), each under its own Idempotency-Key
and sent the way docs/clients.md says a client must: the same key and body again after no
answer, a 409, a 429 or a 5xx, waiting a full-jitter backoff (250 ms doubling, at most 10 s)
or the Retry-After if longer, at most 8 attempts within 60 s. A 201 or 202 is the answer.

While that load runs, the service is restarted in one of two ways:
  --restart CMD           a rolling restart (scripts/rolling-restart.sh): some instance is up
                          throughout, so no client may fail: every key must get its 201/202
                          within its retries;
  --stop CMD --start CMD  every instance at once (an outage): requests in flight when the stop
                          began must be answered (the drain); the retries carry the rest over.
Load goes on for a moment after. Then every key is sent again until its final answer (201).
Exits 1 unless, besides the above: no answer was a 5xx other than 503 or a 4xx other than
409/429; every payment answered ends succeeded, readable with the status it was answered; the
provider charged each exactly once; and (--psql: a command that runs SQL from stdin, e.g.
`docker exec -i … psql -At`) PostgreSQL holds one payment per key, succeeded, with one charge
in the ledger and one payment.succeeded event each.

Reports the answers by status, what the clients saw before their retries, latencies, and with
--stats (HAProxy's statistics as CSV) each server's requests, retries and redispatches. With
--steady S, the first S seconds of load (before the restart) are measured: payments per second
and, for each --cpu NAME=PID (a container's main process), the CPU its cgroup used, and per
payment above what it used in 3 s with no load before. Standard library only.
"""

import argparse
import csv
import http.client
import io
import json
import queue
import random
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid

CLIENT_TIMEOUT_S = 60.0
FINISH_S = 120.0
METHODS = ["pm_card_visa", "pm_card_async"]
ATTEMPTS, BUDGET_S, FIRST_WAIT_S, MAX_WAIT_S = 8, 60.0, 0.25, 10.0
IDLE_S = 3.0


class Api:
    """One keep-alive HTTP connection (one per thread)."""

    def __init__(self, base, key=None):
        url = urllib.parse.urlsplit(base)
        self.host, self.port, self.path = url.hostname, url.port, url.path
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
                parsed = payload.decode(errors="replace")
            return response.status, dict(response.getheaders()), parsed, started, time.time()
        except (OSError, http.client.HTTPException):
            if self.conn is not None:
                self.conn.close()
            self.conn = None
            return None, {}, None, started, time.time()


def retry_after(headers):
    try:
        return float(headers.get("Retry-After", headers.get("retry-after", "")))
    except ValueError:
        return 0.0


def retryable(status):
    return status is None or status in (409, 429) or status >= 500


def cgroup_cpu_ns(pid):
    """CPU time of the cgroup holding process `pid` (a container's), in ns; None if unknown."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2
            try:
                with open(f"/sys/fs/cgroup{path}/cpu.stat") as f:
                    stat = dict(row.split() for row in f if row.strip())
                return int(stat["usage_usec"]) * 1000
            except (OSError, KeyError, ValueError):
                return None
        if "cpuacct" in controllers.split(","):
            for mount in (controllers, "cpuacct", "cpu,cpuacct"):
                try:
                    with open(f"/sys/fs/cgroup/{mount}{path}/cpuacct.usage") as f:
                        return int(f.read())
                except (OSError, ValueError):
                    continue
    return None


def lb_stats(url):
    """HAProxy's statistics: {(proxy, server): {field: value}}; {} if they cannot be read."""
    if not url:
        return {}
    status, _, body, _, _ = Api(url).request("GET", urllib.parse.urlsplit(url).path or "/")
    if status != 200 or not isinstance(body, str):
        return {}
    rows = csv.DictReader(io.StringIO(body.lstrip("# ")))
    return {(r["pxname"], r["svname"]): r for r in rows}


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] if values else 0.0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--api", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--provider", required=True)
    parser.add_argument("--restart", help="a rolling restart: no client may fail")
    parser.add_argument("--stop", help="stops every instance (with --start)")
    parser.add_argument("--start")
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--psql", help="runs SQL read from stdin, prints rows as a|b|c")
    parser.add_argument("--stats", help="the balancer's statistics as CSV")
    parser.add_argument("--steady", type=float, default=0.0)
    parser.add_argument("--cpu", action="append", default=[], metavar="NAME=PID")
    args = parser.parse_args()
    if bool(args.restart) == bool(args.stop) or bool(args.stop) != bool(args.start):
        parser.error("give --restart, or --stop and --start")

    run = uuid.uuid4().hex[:12]
    lock = threading.Lock()
    answers = []  # every attempt: key, status, id, payment status, started, ended
    keys = {}  # key -> body
    calls = {}  # key -> the status its call (with retries) ended on, during the load
    new_keys = threading.Event()
    new_keys.set()

    def send(api, key):
        status, headers, body, started, ended = api.request(
            "POST", "/v1/payments", keys[key], {"Idempotency-Key": key}
        )
        body = body if isinstance(body, dict) else {}
        with lock:
            answers.append(dict(key=key, status=status, id=body.get("id"),
                                payment_status=body.get("status"), started=started, ended=ended))
        return status, headers

    def call(api, key):
        """One client call: the key sent until an answer, as docs/clients.md says."""
        began = time.time()
        for attempt in range(1, ATTEMPTS + 1):
            status, headers = send(api, key)
            if not retryable(status) or attempt == ATTEMPTS:
                return status
            wait = max(random.uniform(0, min(MAX_WAIT_S, FIRST_WAIT_S * 2 ** (attempt - 1))),
                       retry_after(headers))
            if not new_keys.is_set():
                return "left"  # the load is over: the finish sends it again
            if time.time() + wait > began + BUDGET_S:
                return status
            time.sleep(wait)
        return None

    def worker(n):
        api = Api(args.api, args.key)
        i = 0
        while new_keys.is_set():
            key = f"restart-{run}-{n}-{i}"
            i += 1
            with lock:
                keys[key] = {"amount": 1000 + i, "currency": "usd", "payment_method": METHODS[i % 2]}
            status = call(api, key)
            with lock:
                calls[key] = status

    def answered(since=0.0):
        with lock:
            return sum(1 for a in answers if a["status"] in (201, 202) and a["started"] >= since)

    # The containers' CPU with no load first: what they spend on their own (health checks,
    # background passes), to tell from what the payments cost.
    pids = dict(item.split("=", 1) for item in args.cpu)
    idle = {}
    if args.steady > 0 and pids:
        t0, cpu0 = time.time(), {name: cgroup_cpu_ns(pid) for name, pid in pids.items()}
        time.sleep(IDLE_S)
        t1, cpu1 = time.time(), {name: cgroup_cpu_ns(pid) for name, pid in pids.items()}
        idle = {name: (cpu1[name] - cpu0[name]) / 1e9 / (t1 - t0)
                for name in pids if cpu0[name] is not None and cpu1[name] is not None}

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(args.workers)]
    for t in threads:
        t.start()
    deadline = time.time() + 30
    while answered() < 4 * args.workers and time.time() < deadline:
        time.sleep(0.05)

    failures = []
    if args.steady > 0:
        t0, n0 = time.time(), answered()
        cpu0 = {name: cgroup_cpu_ns(pid) for name, pid in pids.items()}
        time.sleep(args.steady)
        t1, n1 = time.time(), answered()
        cpu1 = {name: cgroup_cpu_ns(pid) for name, pid in pids.items()}
        payments = max(1, n1 - n0)
        print(f"steady load: {payments} payments in {t1 - t0:.1f} s = {payments / (t1 - t0):.0f}/s "
              f"({args.workers} clients, one request at a time each)")
        for name in pids:
            if cpu0[name] is None or cpu1[name] is None:
                print(f"  {name}: CPU time not readable")
                continue
            used = (cpu1[name] - cpu0[name]) / 1e9
            own = idle.get(name, 0.0) * (t1 - t0)
            print(f"  {name}: {100 * used / (t1 - t0):.0f} % of a core "
                  f"({100 * idle.get(name, 0.0):.1f} % with no load): "
                  f"{(used - own) * 1e6 / payments:.0f} µs CPU per payment above that")

    stats_before = lb_stats(args.stats)
    restart_began = stop_sent = time.time()
    if args.restart:
        restart = subprocess.run(args.restart, shell=True)
        if restart.returncode != 0:
            failures.append(f"the restart exited {restart.returncode}")
    else:
        stop = subprocess.run(args.stop, shell=True)
        print(f"stop took {time.time() - stop_sent:.1f} s (exit {stop.returncode})")
        start = subprocess.run(args.start, shell=True)
        if stop.returncode != 0 or start.returncode != 0:
            failures.append(f"stop exited {stop.returncode}, start exited {start.returncode}")
    restart_ended = time.time()
    # Load goes on until the service has answered a while after the restart.
    deadline = time.time() + 90
    while answered(since=restart_ended) < 2 * args.workers and time.time() < deadline:
        time.sleep(0.1)
    new_keys.clear()
    for t in threads:
        t.join()
    load_ended = time.time()

    # Every key to its final answer, the request sent again as it was (a client's retry).
    todo = queue.Queue()
    for key in keys:
        todo.put(key)
    finish_by = time.time() + FINISH_S
    unfinished = []

    def finisher():
        api = Api(args.api, args.key)
        while True:
            try:
                key = todo.get_nowait()
            except queue.Empty:
                return
            while send(api, key)[0] != 201:
                if time.time() > finish_by:
                    with lock:
                        unfinished.append(key)
                    break
                time.sleep(0.5)

    pool = [threading.Thread(target=finisher) for _ in range(args.workers)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if unfinished:
        failures.append(f"{len(unfinished)} keys without a final answer after {FINISH_S:.0f} s: {unfinished[:3]}")

    during = [a for a in answers if restart_began <= a["started"] < load_ended]
    before = [a for a in answers if a["started"] < restart_began]
    by_status = {}
    for a in answers:
        by_status[str(a["status"])] = by_status.get(str(a["status"]), 0) + 1
    print(f"keys: {len(keys)}; attempts: {len(answers)} {json.dumps(by_status, sort_keys=True)}")
    raw = [a for a in during if a["status"] not in (201, 202)]
    print(f"during the restart ({restart_ended - restart_began:.1f} s) and after it: "
          f"{len(during)} attempts, {sum(1 for a in during if a['status'] in (201, 202))} answered "
          f"201/202; before any retry the clients saw {len(raw)} other outcomes "
          f"({sum(1 for a in raw if a['status'] is None)} without an answer)")
    for label, group in (("before the restart", before), ("during and after", during)):
        lat = [a["ended"] - a["started"] for a in group if a["status"] in (201, 202)]
        if lat:
            print(f"  latency {label}: p50 {percentile(lat, 0.5) * 1000:.0f} ms, "
                  f"p99 {percentile(lat, 0.99) * 1000:.0f} ms, max {max(lat) * 1000:.0f} ms")
    failed_calls = {k: s for k, s in calls.items() if s not in (201, 202, "left")}
    if args.restart:
        left = sum(1 for s in calls.values() if s == "left")
        print(f"client calls: {len(calls)}, failed after their retries: {len(failed_calls)} "
              f"(left to the final pass when the load ended: {left})")
        for key, status in list(failed_calls.items())[:5]:
            failures.append(f"the call for {key} failed after its retries (last: {status})")
    else:
        drained = [a for a in answers if a["started"] < stop_sent < a["ended"] and a["status"] in (201, 202)]
        print(f"in flight when the stop began and answered: {len(drained)}")
        if not drained:
            failures.append("no request was in flight and answered across the stop (no drain seen)")
    for a in answers:
        if a["status"] is not None and a["status"] >= 500 and a["status"] != 503:
            failures.append(f"a {a['status']} for key {a['key']}")
        elif a["status"] is not None and a["status"] not in (201, 202, 409, 429, 503):
            failures.append(f"unexpected {a['status']} for key {a['key']}")

    stats_after = lb_stats(args.stats)
    for (proxy, server), row in sorted(stats_after.items()):
        if proxy != "instances" or server == "FRONTEND":
            continue
        old = stats_before.get((proxy, server), {})
        delta = {f: int(row.get(f) or 0) - int(old.get(f) or 0)
                 for f in ("stot", "wretr", "wredis", "econ", "eresp", "chkdown", "hrsp_5xx")}
        name = "all instances" if server == "BACKEND" else server
        print(f"  balancer, {name}: {delta['stot']} requests, {delta['wretr']} retried, "
              f"{delta['wredis']} redispatched, {delta['econ']} connection errors, "
              f"{delta['eresp']} response errors, {delta['hrsp_5xx']} 5xx, "
              f"marked down {delta['chkdown']} times; now {row.get('status')}")

    # One payment per key, answered one way, succeeded, readable after the restart.
    ids = {}
    for a in answers:
        if a["status"] in (201, 202) and ids.setdefault(a["key"], a["id"]) != a["id"]:
            failures.append(f"key {a['key']} answered with two payments: {ids[a['key']]}, {a['id']}")
    finals = {a["id"]: a["payment_status"] for a in answers if a["status"] == 201}
    reads = queue.Queue()
    for pid in ids.values():
        reads.put(pid)

    def reader():
        api = Api(args.api, args.key)
        while True:
            try:
                pid = reads.get_nowait()
            except queue.Empty:
                return
            status, _, body, _, _ = api.request("GET", f"/v1/payments/{pid}")
            with lock:
                if status != 200:
                    failures.append(f"GET {pid} after the restart: {status}")
                elif body.get("status") != "succeeded" or finals.get(pid) != "succeeded":
                    failures.append(f"{pid} is {body.get('status')}, answered {finals.get(pid)}; want succeeded")

    pool = [threading.Thread(target=reader) for _ in range(args.workers)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()

    # The provider's ledger: each payment charged once.
    charges = Api(args.provider).request("GET", "/v1/charges")[2] or {}
    references = [c.get("reference") for c in charges.get("data", [])]
    ours = set(ids.values())
    counts = {}
    for reference in references:
        if reference in ours:
            counts[reference] = counts.get(reference, 0) + 1
    for pid in ours:
        if counts.get(pid, 0) != 1:
            failures.append(f"{pid} charged {counts.get(pid, 0)} times")
    asynchronous = sum(1 for b in keys.values() if b["payment_method"] == "pm_card_async")
    print(f"payments: {len(ours)} ({asynchronous} asynchronous keys, finished by webhooks through "
          f"the balancer), {sum(counts.values())} charges at the provider for them")

    # PostgreSQL: one payment per key, with its ledger charge and its event, each once.
    if args.psql:
        pattern = f"restart-{run}-%"
        sql = (
            "SELECT (SELECT count(*) FROM payments p WHERE {w}), "
            "(SELECT count(DISTINCT idempotency_key) FROM payments p WHERE {w}), "
            "(SELECT count(*) FROM payments p WHERE {w} AND status = 'succeeded'), "
            "(SELECT count(*) FROM balance_transactions b JOIN payments p ON p.id = b.source_id "
            "WHERE {w} AND b.txn_type = 'charge'), "
            "(SELECT count(*) FROM events e JOIN payments p ON p.id = e.object_id "
            "WHERE {w} AND e.event_type = 'payment.succeeded');"
        ).format(w=f"p.idempotency_key LIKE '{pattern}'")
        out = subprocess.run(args.psql, shell=True, input=sql, capture_output=True, text=True)
        try:
            rows, distinct, succeeded, ledger, events = map(int, out.stdout.strip().split("|"))
        except ValueError:
            failures.append(f"the database count failed: {out.stdout.strip()} {out.stderr.strip()}")
        else:
            print(f"PostgreSQL: {rows} payments for {distinct} distinct keys ({len(keys)} sent), "
                  f"{succeeded} succeeded, {ledger} ledger charges, {events} payment.succeeded events")
            if not rows == distinct == succeeded == ledger == events == len(keys):
                failures.append("PostgreSQL does not hold exactly one succeeded payment, ledger charge "
                                "and event per key")
        # What a payment costs on disk, all tables and their indexes over every payment stored.
        size = subprocess.run(
            args.psql, shell=True, capture_output=True, text=True,
            input="SELECT (SELECT count(*) FROM payments), (SELECT sum(pg_total_relation_size(c.oid)) "
                  "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                  "WHERE n.nspname = 'public' AND c.relkind = 'r');")
        try:
            stored, total = map(int, size.stdout.strip().split("|"))
            print(f"PostgreSQL: {stored} payments stored in {total / 1e6:.1f} MB of tables and indexes: "
                  f"{total / max(1, stored) / 1000:.1f} kB per payment")
        except ValueError:
            pass

    for f in failures[:20]:
        print(f"FAIL: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
