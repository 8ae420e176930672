#!/usr/bin/env python3
"""Takeover and rebalance cost of the classic group protocol vs KIP-848's
(`group.protocol=consumer`), measured with librdkafka (confluent-kafka's wheel)
against a real broker. Not part of the tests: an experiment whose figures are in
src/kafka/mod.rs (its module doc, "Group membership: static members, the classic
protocol, KIP-848").

    python3 -m venv /tmp/kip848 && /tmp/kip848/bin/pip install confluent-kafka
    . <services state>/services.env
    /tmp/kip848/bin/python scripts/kip848-takeover.py [runs]

For each protocol (with static member ids, and KIP-848's also without), two
members consume a topic of 12 partitions
that a producer feeds at ~200 records/s:
- crash: member A is killed (SIGKILL) and restarted with the same id 1 s later;
  takeover = kill -> A's first record again, and the longest stretch any
  partition went unread around the kill;
- scale-out: a third member joins; the longest stretch any partition went unread
  (the classic protocol stops every member for a rebalance, KIP-848 moves only
  the partitions that change owner).
"""

import os
import subprocess
import sys
import threading
import time
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 12


def consume(brokers, topic, group, protocol, static, instance):
    conf = {
        "bootstrap.servers": brokers,
        "group.id": group,
        "group.protocol": protocol,
        "auto.offset.reset": "latest",
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 100,
    }
    if static == "static":
        conf["group.instance.id"] = instance
    if protocol == "classic":
        # As Courier: eager range assignment, the default session timeout.
        conf["partition.assignment.strategy"] = "range"
        conf["session.timeout.ms"] = 45000
    c = Consumer(conf)
    c.subscribe([topic])
    while True:
        m = c.poll(0.05)
        if m is None or m.error():
            continue
        print(f"{time.time():.4f} {m.partition()}", flush=True)


class Member:
    def __init__(self, args, name):
        self.name = name
        self.p = subprocess.Popen(
            [sys.executable, __file__, "consume", *args, name],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.seen = []  # (time, partition)
        self.t = threading.Thread(target=self.read, daemon=True)
        self.t.start()

    def read(self):
        for line in self.p.stdout:
            t, p = line.split()
            self.seen.append((float(t), int(p)))

    def first_after(self, t0):
        return next((t for t, _ in self.seen if t >= t0), None)

    def kill(self):
        self.p.kill()
        self.p.wait()


def longest_gap(members, t0, t1):
    """The longest time any partition went unread within [t0, t1]."""
    by_p = {p: [t0] for p in range(PARTITIONS)}
    for m in members:
        for t, p in list(m.seen):
            if t0 <= t <= t1:
                by_p[p].append(t)
    worst = 0.0
    for ts in by_p.values():
        ts = sorted(ts) + [t1]
        worst = max(worst, max(b - a for a, b in zip(ts, ts[1:])))
    return worst


def wait_all_reading(members, since, timeout=90):
    until = time.time() + timeout
    while time.time() < until:
        parts = {p for m in members for t, p in list(m.seen) if t >= since}
        if len(parts) == PARTITIONS and all(m.first_after(since) for m in members):
            return True
        time.sleep(0.2)
    return False


class NoTakeover(Exception):
    pass


def run(brokers, protocol, static):
    topic = f"kip848-{protocol}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": brokers})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result()
    stop = threading.Event()

    def produce():
        p = Producer({"bootstrap.servers": brokers, "linger.ms": 0})
        i = 0
        while not stop.is_set():
            p.produce(topic, b"x", partition=i % PARTITIONS)
            p.poll(0)
            i += 1
            time.sleep(0.005)
        p.flush(10)

    threading.Thread(target=produce, daemon=True).start()
    args = [brokers, topic, f"g-{topic}", protocol, static]
    a, b = Member(args, "a"), Member(args, "b")
    if not wait_all_reading([a, b], time.time()):
        raise SystemExit(f"{protocol}: the two members never shared the topic")
    time.sleep(3)

    killed = time.time()
    a.kill()
    time.sleep(1)
    a2 = Member(args, "a")
    if not wait_all_reading([a2, b], killed + 1, timeout=120):
        for m in (a2, b):
            m.kill()
        stop.set()
        raise NoTakeover()
    back = a2.first_after(killed)
    time.sleep(3)
    crash_gap = longest_gap([a, a2, b], killed - 1, time.time())
    takeover = back - killed

    joined = time.time()
    c = Member(args, "c")
    if not wait_all_reading([a2, b, c], joined, timeout=120):
        raise SystemExit(f"{protocol}: the third member never got partitions")
    time.sleep(3)
    join_gap = longest_gap([a2, b, c], joined, time.time())
    for m in (a2, b, c):
        m.kill()
    stop.set()
    return takeover, crash_gap, join_gap


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "consume":
        consume(*sys.argv[2:8])
        return
    brokers = os.environ.get("COURIER_TEST_BROKERS")
    if not brokers:
        raise SystemExit("COURIER_TEST_BROKERS is not set: source services.env")
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    print("protocol  members  run  takeover_s  crash_longest_unread_s  join_longest_unread_s")
    for protocol, static in (
        ("classic", "static"),
        ("consumer", "static"),
        ("consumer", "dynamic"),
    ):
        for i in range(runs):
            try:
                t, cg, jg = run(brokers, protocol, static)
                row = f"{t:10.2f}  {cg:22.2f}  {jg:21.2f}"
            except NoTakeover:
                row = "none within 120 s after the kill"
            print(f"{protocol:9} {static:8} {i + 1:3}  {row}", flush=True)


if __name__ == "__main__":
    main()
