"""The evaluation area of the store contract: batch evaluation runs and their per-sample results
(written by ``troupe eval run``, see :mod:`troupe.eval`).

Not per tenant: evaluation is an operator's tool. The responses a run stores belong to the
tenant the run used (``""``). Implemented by :class:`troupe.storage.duckdb_store.evaluation.EvalTables`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..base import EvalResultRecord, EvalRunRecord

__all__ = ["Evaluation"]


class Evaluation(Protocol):
    """Evaluation runs and their results."""

    def put_eval_run(self, run: EvalRunRecord) -> None:
        """Create the run, or replace the stored row of the same ``run_id`` (its results stay).

        Raises:
            StorageError: a value is not storable (e.g. ``options`` not JSON).
        """
        ...

    def get_eval_run(self, run_id: str) -> EvalRunRecord | None:
        """The run, or None if unknown."""
        ...

    def list_eval_runs(self) -> list[EvalRunRecord]:
        """Every run, newest ``created_at`` first."""
        ...

    def write_eval_results(self, results: Sequence[EvalResultRecord]) -> None:
        """Store results atomically (all or none).

        A result with the same ``(run_id, case_id, sample)`` as a stored one (or as
        an earlier one of the same batch) replaces it: a sample has one result.

        Raises:
            StorageError: nothing was written.
        """
        ...

    def eval_results(self, run_id: str) -> list[EvalResultRecord]:
        """A run's results ordered by ``(case_id, sample)``; [] if the run has none."""
        ...
