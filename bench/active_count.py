"""Active sessions per version: the partial index count, or a counter row kept in the same
transaction as each start and end? Measures both against a database `make bench-scale` seeded
(the live version of the `large` bundle holds about 70,000-90,000 active sessions):

    .venv/bin/python bench/active_count.py postgres://...:/registry_scale_large [--threads 8 --txns 300]

1. the read: `count(*)` of the version's active sessions over session_active_version_idx, against
   the read of one counter row;
2. the write: N threads each running short transactions that insert a row (a stand-in for a
   session start) with and without `UPDATE counter SET n = n + 1` on the version's one row,
   the cost a counter adds to every start, end and expiry of that version (they all serialize
   on the row lock until commit).
Scratch tables (bench_counter, bench_starts) are created and dropped; nothing else changes."""

import argparse
import statistics
import threading
import time

import psycopg


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--txns", type=int, default=300, help="transactions per thread")
    ns = parser.parse_args()
    with psycopg.connect(ns.url, autocommit=True) as conn:
        version = conn.execute("SELECT id FROM registry_bundleversion WHERE state = 'live' LIMIT 1").fetchone()[0]
        conn.execute("DROP TABLE IF EXISTS bench_counter, bench_starts")
        conn.execute("CREATE TABLE bench_counter (version_id bigint PRIMARY KEY, n bigint NOT NULL)")
        conn.execute("CREATE TABLE bench_starts (id bigserial PRIMARY KEY, version_id bigint, at timestamptz)")
        active = conn.execute(
            "SELECT count(*) FROM sessions_app_session WHERE version_id = %s AND status = 'active'", [version]
        ).fetchone()[0]
        conn.execute("INSERT INTO bench_counter VALUES (%s, %s)", [version, active])
        reads: dict[str, list[float]] = {"partial index count": [], "counter row": []}
        for _ in range(50):
            for name, sql in (
                (
                    "partial index count",
                    "SELECT count(*) FROM sessions_app_session WHERE version_id = %s AND status = 'active'",
                ),
                ("counter row", "SELECT n FROM bench_counter WHERE version_id = %s"),
            ):
                started = time.perf_counter()
                conn.execute(sql, [version])
                reads[name].append((time.perf_counter() - started) * 1000)
        print(f"version {version}: {active} active sessions")
        for name, times in reads.items():
            print(f"  read, {name}: median {statistics.median(times):.2f} ms")

        def writers(with_counter: bool) -> float:
            def work() -> None:
                with psycopg.connect(ns.url) as c:
                    for _ in range(ns.txns):
                        c.execute("INSERT INTO bench_starts (version_id, at) VALUES (%s, now())", [version])
                        if with_counter:
                            c.execute("UPDATE bench_counter SET n = n + 1 WHERE version_id = %s", [version])
                        c.commit()

            threads = [threading.Thread(target=work) for _ in range(ns.threads)]
            started = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return ns.threads * ns.txns / (time.perf_counter() - started)

        for with_counter in (False, True, False, True):
            rate = writers(with_counter)
            print(f"  write, {ns.threads} threads, {'with' if with_counter else 'without'} the counter: {rate:.0f}/s")
        conn.execute("DROP TABLE bench_counter, bench_starts")


if __name__ == "__main__":
    main()
