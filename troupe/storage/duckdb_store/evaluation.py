"""The evaluation area in DuckDB (:class:`~troupe.storage.contract.Evaluation`)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

from troupe.protocol.webhooks import EVENT_TYPE_OF_EVAL_STATUS

from .. import schema
from ..base import EvalResultRecord, EvalRunRecord
from ..contract import Evaluation
from .connection import one_row
from .webhooks import WebhookTables

__all__ = ["EvalTables"]


class EvalTables(WebhookTables, Evaluation):
    """The evaluation area in DuckDB (:class:`~troupe.storage.contract.Evaluation`)."""

    def put_eval_run(self, run: EvalRunRecord) -> None:
        """See :meth:`Evaluation.put_eval_run`."""
        row = schema.eval_run_row(run)
        on_commit: list[Callable[[], None]] = []
        with self._transaction(on_commit) as conn:
            self._insert(conn, "eval_runs", schema.EVAL_RUN_COLUMNS, [row], replace=True)
            kind = EVENT_TYPE_OF_EVAL_STATUS.get(run.status)
            tenant = str(run.options.get("tenant") or "")
            if kind is not None and tenant in self._webhook_subscribers:  # the outbox: the run ended
                ended = run.finished_at or time.time()
                self._add_deliveries(conn, [(tenant, kind, f"{run.run_id}@{ended!r}", run.run_id, ended)], on_commit)

    def get_eval_run(self, run_id: str) -> EvalRunRecord | None:
        """See :meth:`Evaluation.get_eval_run`."""
        row = self._fetchone(f"SELECT {schema.EVAL_RUN_COLUMNS} FROM eval_runs WHERE run_id = ?", [run_id])
        return None if row is None else schema.eval_run_from_row(row)

    def list_eval_runs(self) -> list[EvalRunRecord]:
        """See :meth:`Evaluation.list_eval_runs`."""
        rows = self._fetchall(f"SELECT {schema.EVAL_RUN_COLUMNS} FROM eval_runs ORDER BY created_at DESC, run_id")
        return [schema.eval_run_from_row(row) for row in rows]

    def write_eval_results(self, results: Sequence[EvalResultRecord]) -> None:
        """See :meth:`Evaluation.write_eval_results`. One transaction; ``INSERT OR REPLACE`` on the key."""
        if not results:
            return
        # DuckDB refuses to replace one key twice in one statement: the last result of a key wins.
        latest = {r.key: r for r in results}
        rows = [schema.eval_result_row(r) for r in latest.values()]
        with self._transaction() as conn:
            self._insert(conn, "eval_results", schema.EVAL_RESULT_COLUMNS, rows, replace=True)

    def eval_results(self, run_id: str) -> list[EvalResultRecord]:
        """See :meth:`Evaluation.eval_results`."""
        rows = self._fetchall(
            f"SELECT {schema.EVAL_RESULT_COLUMNS} FROM eval_results WHERE run_id = ? ORDER BY case_id, sample",
            [run_id],
        )
        return [schema.eval_result_from_row(row) for row in rows]

    def export_eval_results(self, run_id: str, path: str | os.PathLike[str]) -> int:
        """Write a run's ``eval_results`` rows to a Parquet file (``(case_id, sample)`` order).

        Returns:
            How many rows were written (0 for an unknown run: the file then has no rows).

        Raises:
            StorageError: the file cannot be written.
        """
        with self._locked() as conn:
            count = one_row(conn.execute("SELECT count(*) FROM eval_results WHERE run_id = ?", [run_id]).fetchone())[0]
            # COPY takes no parameter for its target: quote the path as a string literal.
            target = "'" + os.fspath(path).replace("'", "''") + "'"
            conn.execute(
                f"COPY (SELECT {schema.EVAL_RESULT_COLUMNS} FROM eval_results WHERE run_id = ? "
                f"ORDER BY case_id, sample) TO {target} (FORMAT parquet)",
                [run_id],
            )
        return count
