"""``python -m agentfly_train report RUN_DIR``: one self-contained HTML page of a run, with its training
curves (``metrics.jsonl``) and a browser over its saved episodes (``val_samples/``, ``train_samples/``).

A training run writes it at its end as ``<run dir>/report.html``.
"""

from agentfly_train.report.page import REPORT_FILE, build_report, render
from agentfly_train.report.run_data import RunData, load_run

__all__ = ["REPORT_FILE", "RunData", "build_report", "load_run", "render"]
