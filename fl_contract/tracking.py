"""Experiment tracking shared by a job's site task and its components: the id of the site's TensorBoard writer."""

TB_WRITER_ID = "tb_writer"


def sender_id(tracking: bool) -> str:
    """The component id a site task sends its metrics through, or "" when the job tracks nothing."""
    return TB_WRITER_ID if tracking else ""
