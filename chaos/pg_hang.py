"""PostgreSQL hung: the postmaster and every backend frozen with SIGSTOP under load, then SIGCONT.

A frozen server is the expensive case of a database outage (a stuck primary, a failover that
has not happened yet): its kernel still accepts connections and acknowledges every byte, so
nothing on the client's side fails unless the client gives up itself (config/postgres: a wait
that lasts DB_STALL_CHECK_MS makes the process check, with a new connection within
DB_CONNECT_TIMEOUT, that the server answers). The promise: 503s within 5 s of the freeze,
successes again within 2 s of the server answering, every acknowledged write kept.

PostgreSQL's backends make themselves process-group leaders, so signalling the postmaster's
group reaches the postmaster alone: each child is signalled too (the postmaster first, so that
it starts no new one in between)."""

import os
import signal
import time
from collections import Counter

from chaos.client import Load, Row
from chaos.stack import Stack

LABEL = "PostgreSQL hung (SIGSTOP)"


def _signal_all(stack: Stack, sig: int) -> None:
    postgres = stack.procs["postgres"]
    postmaster_first = sig == signal.SIGSTOP
    if postmaster_first:
        os.kill(postgres.pid, sig)
    for child in postgres.children():
        try:
            os.kill(child, sig)
        except ProcessLookupError:
            pass
    if not postmaster_first:
        os.kill(postgres.pid, sig)


def postgres_hang(stack: Stack, *, baseline: float, fault: float, after: float) -> list[Row]:
    with Load(stack.web_port, stack.ops_key, "load", threads=4) as load:
        time.sleep(baseline)
        t_stop = time.monotonic()
        try:
            _signal_all(stack, signal.SIGSTOP)
            time.sleep(fault)
        finally:
            t_cont = time.monotonic()
            _signal_all(stack, signal.SIGCONT)
        time.sleep(after)
    during = load.window(t_stop, t_cont)
    statuses = Counter(s.status for s in during)
    wrong = sum(n for status, n in statuses.items() if status >= 500 and status != 503)
    no_answer = statuses.get(0, 0)
    first_503 = min((s.at + s.latency for s in during if s.status == 503), default=None)
    to_503 = first_503 - t_stop if first_503 is not None else None
    # Once the first answers came, every request asked during the freeze is answered quickly.
    settled = [s.latency for s in during if s.at >= t_stop + 5]
    first_ok = min(
        (s.at + s.latency for s in load.samples if s.at + s.latency >= t_cont and 0 < s.status < 500), default=None
    )
    recovery = first_ok - t_cont if first_ok is not None else None
    started, ended = sorted(load.started_ids), sorted(load.ended_ids)
    [(found,)] = stack.sql("SELECT count(*) FROM sessions_app_session WHERE id = ANY(%s::uuid[])", [started])
    [(found_ended,)] = stack.sql(
        "SELECT count(*) FROM sessions_app_session WHERE id = ANY(%s::uuid[]) AND status = 'ended'", [ended]
    )
    shown = ", ".join(f"{k or 'none'}: {v}" for k, v in sorted(statuses.items()))
    return [
        (LABEL, f"answers during {fault:.0f} s hung", shown or "-", None),
        (LABEL, "5xx other than 503; no answer", f"{wrong}; {no_answer}", wrong == 0 and no_answer == 0),
        (
            LABEL,
            "time to 503",
            f"{to_503:.2f} s" if to_503 is not None else "never",
            to_503 is not None and to_503 <= 5,
        ),
        (
            LABEL,
            "slowest answer asked 5 s into the hang",
            f"{max(settled) * 1000:.0f} ms" if settled else "-",
            None,
        ),
        (
            LABEL,
            "time to recovery",
            f"{recovery:.2f} s" if recovery is not None else "never",
            recovery is not None and recovery <= 2,
        ),
        (
            LABEL,
            "acknowledged starts / ends found",
            f"{found}/{len(started)} / {found_ended}/{len(ended)}",
            found == len(started) and found_ended == len(ended),
        ),
    ]
