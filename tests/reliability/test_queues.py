"""The two Celery queues (config/settings.py): `lifecycle` and `deliveries`, each consumed by
its own worker wherever the stack runs: `make run` (devtools/stack.py), the test suite's
worker fixture and the chaos stack. Compose is checked in tests/project/test_compose.py."""

from celery.app.utils import find_app

from chaos.stack import Stack
from devtools import stack
from tests.live import QUEUES, worker_command

ROUTED = {
    "sessions_app.tasks.sweep_task": "lifecycle",
    "sessions_app.tasks.version_drain_task": "lifecycle",
    "webhooks.tasks.webhook_deliver_task": "deliveries",
    "webhooks.tasks.webhook_retry_sweep_task": "deliveries",
    "registry.tasks.change_expire_sweep_task": "lifecycle",
    "some.future.prune_task": "lifecycle",  # unrouted tasks default to lifecycle
}


def _queue_of(command: list[str]) -> str:
    assert command.count("-Q") == 1, command
    return command[command.index("-Q") + 1]


def test_tasks_are_routed_to_their_queue():
    app = find_app("config.celery:app")
    app.loader.import_default_modules()
    assert {name: app.amqp.router.route({}, name)["queue"].name for name in ROUTED} == ROUTED


def test_make_run_starts_one_worker_per_queue():
    commands = stack.worker_commands()
    assert sorted(_queue_of(command) for command in commands.values()) == sorted(set(ROUTED.values()))


def test_the_test_suite_and_the_chaos_stack_consume_both_queues():
    assert sorted(QUEUES) == sorted(set(ROUTED.values()))
    assert all(_queue_of(worker_command(queue)) == queue for queue in QUEUES)
    assert sorted(queue for queue, _ in Stack.WORKERS.values()) == sorted(set(ROUTED.values()))
