"""The site's half of the transfer accounting (server_app.transfers): how long the site itself spent on a task.

A FLARE component of the site's job, fed by FLARE's events: the task's arrival (`BEFORE_TASK_DATA_FILTER`, its arrays
already received) and the end of its execution (`AFTER_TASK_EXECUTION`), whose difference goes into the answer's
header. The server subtracts it from the time between the site's fetch and its answer: what is left is the link.
"""

from __future__ import annotations

import time

from nvflare.apis.event_type import EventType
from nvflare.apis.fl_component import FLComponent
from nvflare.apis.fl_constant import FLContextKey
from nvflare.apis.fl_context import FLContext
from nvflare.apis.shareable import Shareable

from fl_contract.transfers import SITE_TASK_SECONDS


class TaskClock(FLComponent):  # type: ignore[misc]  # FLARE ships no type information: FLComponent is Any
    """Puts the seconds from a task's arrival to its answer into the answer's header (SITE_TASK_SECONDS)."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived: dict[str, float] = {}

    def handle_event(self, event_type: str, fl_ctx: FLContext) -> None:
        task_id = str(fl_ctx.get_prop(FLContextKey.TASK_ID, ""))
        if event_type == EventType.BEFORE_TASK_DATA_FILTER:
            self.arrived[task_id] = time.monotonic()
        elif event_type == EventType.AFTER_TASK_EXECUTION and task_id in self.arrived:
            result = fl_ctx.get_prop(FLContextKey.TASK_RESULT)
            if isinstance(result, Shareable):
                result.set_header(SITE_TASK_SECONDS, round(time.monotonic() - self.arrived.pop(task_id), 3))
