"""What an operator needs about runs beside their contract: which runs are wedged (their
workflow task keeps failing) and how to take one back to its last good task
(`failing_tasks.py`); runs started on a schedule (`schedules.py`)."""
