"""Celery beside Baton's 3-stage end-to-end cell, in the same sitting.

The issue that set Baton's end-to-end target (23, the lean hop) asks for
Baton ahead of Celery with its RPC result backend: chains of three tasks
on the same RabbitMQ, each chain a closed loop (start it, wait for its
result, start the next), 16 and 64 chains in flight. The RPC backend sends
results back as messages and persists nothing, so this is a floor for a
queue system, not a peer of Baton's journal. A chain of three stages is two
hops, as in `baton-bench`'s cell.

    pip install 'celery==5.*'
    python3 bench/celery/chains.py --in-flight 16,64

It starts its own worker (prefork, one process per core, as Celery's
default) on a queue of its own, measures each cell over a window after a
warm-up, prints a table, and deletes its queue.
"""

import argparse
import multiprocessing as mp
import os
import subprocess
import sys
import time
import uuid

from celery import Celery, chain

BROKER = os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
QUEUE = os.environ.get("CELERY_BENCH_QUEUE", "celery-bench")

app = Celery("chains", broker=BROKER, backend="rpc://")
app.conf.update(
    task_default_queue=QUEUE,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task(name="chains.stage")
def stage(payload, n):
    """One stage: takes the previous stage's output, adds its mark."""
    return {"text": payload["text"], "stages": payload["stages"] + [n]}


def one_chain(i):
    first = {"text": f"request {i}", "stages": []}
    return chain(stage.s(first, 1), stage.s(2), stage.s(3)).apply_async()


def closed_loop(args):
    """One chain in flight: start, wait, start the next, until `until`."""
    start_at, until = args
    done = []
    i = 0
    while time.time() < until:
        result = one_chain(i)
        result.get(timeout=60)
        now = time.time()
        if now >= start_at:
            done.append(now)
        i += 1
    return done


def cell(in_flight, warmup, window):
    start_at = time.time() + warmup + in_flight * 0.05  # room to spawn the drivers
    until = start_at + window
    with mp.get_context("spawn").Pool(in_flight) as pool:
        finished = pool.map(closed_loop, [(start_at, until)] * in_flight)
    chains = sum(len(f) for f in finished)
    return chains / window


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--in-flight", default="16,64")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--window", type=float, default=8.0)
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "chains", "worker", "-Q", QUEUE, "--pool", "prefork",
         "--concurrency", str(os.cpu_count() or 2), "--without-gossip", "--without-mingle",
         "--without-heartbeat", "-l", "WARNING"],
        cwd=os.path.dirname(os.path.abspath(__file__)),
        stdout=subprocess.DEVNULL,
    )
    try:
        one_chain(0).get(timeout=60)  # the worker is up
        rows = []
        for n in [int(x) for x in args.in_flight.split(",")]:
            rates = []
            for rep in range(args.reps):
                rate = cell(n, args.warmup, args.window)
                rates.append(rate)
                print(f"==> celery (rpc backend) {n:3d} in flight #{rep + 1}: {rate:7.1f} chains/s, {2 * rate:7.1f} hops/s",
                      flush=True)
            rates.sort()
            rows.append((n, rates[len(rates) // 2], rates[0], rates[-1]))
        print()
        print(f"## Celery {__import__('celery').__version__}, RPC result backend, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
        print()
        print("| in flight | chains/s | hops/s (2 per chain) | spread (hops/s) |")
        print("|---|---|---|---|")
        for n, median, low, high in rows:
            print(f"| {n} | {median:.1f} | {2 * median:.0f} | {2 * low:.0f}–{2 * high:.0f} |")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        with app.connection() as conn:
            conn.default_channel.queue_delete(QUEUE)


if __name__ == "__main__":
    main()
