"""What a site tells the server about a task's timing, so the server can tell transfer time from the site's work."""

SITE_TASK_SECONDS = "site_task_seconds"
"""Header of a site's answer: seconds from the task's arrival at the site (its arrays received) to its answer."""
