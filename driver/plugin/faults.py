"""Fault injection: `CARVE_FAULT=<point>` makes the plugin SIGKILL itself when it reaches that point.

Points sit after each durable step of prepare, unprepare and of applying a NodePartitioning, so the
crash-safety tests can stop the process at every one of them, restart it and check that nothing was
leaked or lost.
"""

from __future__ import annotations

import logging
import os
import signal

from driver.plugin.logfmt import event

ENV_FAULT = "CARVE_FAULT"

PREPARE_POINTS = (
    "prepare-after-checkpoint-started",  # claim recorded as PrepareStarted
    "prepare-after-mig",  # MIG instances created
    "prepare-after-limits",  # shared region written
    "prepare-after-cdi",  # CDI spec written
    "prepare-after-checkpoint-completed",  # claim recorded as PrepareCompleted, before the reply
)
UNPREPARE_POINTS = (
    "unprepare-after-cdi",  # CDI spec removed
    "unprepare-after-mig",  # MIG instances destroyed
    "unprepare-after-files",  # claim directory removed
    "unprepare-after-checkpoint",  # checkpoint entry removed, before the reply
)
PARTITIONING_POINTS = (
    "partitioning-after-record",  # the change recorded as applying (partitioning.json), nothing switched yet
    "partitioning-after-publish",  # MIG modes switched and slices republished, no status yet
    "partitioning-after-status",  # status written, the change not yet recorded as applied
)

log = logging.getLogger(__name__)


def reached(point: str) -> None:
    """Die here if CARVE_FAULT names this point (read on every call, so tests can set it per process)."""
    if os.environ.get(ENV_FAULT) == point:
        # logged before dying: the plugin's handler (logfmt.setup, a StreamHandler) flushes each record
        event(log, logging.WARNING, "fault.injected", point=point, pid=os.getpid())
        os.kill(os.getpid(), signal.SIGKILL)
