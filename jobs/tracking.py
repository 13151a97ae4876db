"""FLARE's TensorBoard streaming, for every job kind with a `tracking` parameter: each site's TBWriter, with the
ConvertToFedEvent widget, sends the task's metrics to the server's TBAnalyticsReceiver (`tb_events/` in the run
folder)."""

from __future__ import annotations

from nvflare.apis.analytix import ANALYTIC_EVENT_TYPE

from fl_contract.tracking import TB_WRITER_ID
from jobs.spec import Component, Extras

TB_WRITER = "nvflare.app_opt.tracking.tb.tb_writer.TBWriter"
TB_RECEIVER = "nvflare.app_opt.tracking.tb.tb_receiver.TBAnalyticsReceiver"
EVENT_TO_FED = "nvflare.app_common.widgets.convert_to_fed_event.ConvertToFedEvent"
SITE_CLASSES = (TB_WRITER, EVENT_TO_FED)
SERVER_CLASSES = (TB_RECEIVER,)


def extras(tracking: bool) -> Extras:
    """The components a job adds for TensorBoard tracking (the site task finds its writer by TB_WRITER_ID); none
    when it is off."""
    if not tracking:
        return Extras()
    return Extras(server=(Component(TB_RECEIVER, {"tb_folder": "tb_events"}, "tb_receiver"),),
                  site=(Component(TB_WRITER, {}, TB_WRITER_ID),
                        Component(EVENT_TO_FED, {"events_to_convert": [ANALYTIC_EVENT_TYPE]}, "event_to_fed")))
